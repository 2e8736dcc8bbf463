//! The file as written: the `Raw*` structs serde_yaml fills (unknown keys
//! and wrong types fail there), and serde_yaml's errors turned into
//! problems with a key and a fix. Options mark what may be omitted;
//! `Check::resolve` fills them.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::{Location, Problem, Provider, RolloutKind};

/// Turns a serde_yaml error into a problem with its position and a fix.
pub(super) fn serde_problem(err: &serde_yaml::Error) -> Problem {
    let location = err
        .location()
        .map(|l| Location {
            line: l.line(),
            column: l.column(),
        })
        .unwrap_or(Location { line: 1, column: 1 });
    let full = err.to_string();
    // serde_yaml appends " at line L column C"; the position is printed apart.
    let message = match full.rfind(" at line ") {
        Some(i) => full[..i].to_string(),
        None => full,
    };
    // serde_yaml prefixes the path of the enclosing value: "a.b: message".
    let (path, detail) = match message.split_once(": ") {
        Some((p, d)) if !p.contains(' ') => (p.to_string(), d.to_string()),
        _ => (String::new(), message.clone()),
    };
    let quoted = between_backticks(&detail);
    let (key, fix) = if detail.starts_with("unknown field") {
        let field = quoted.unwrap_or_default();
        (
            join(&path, &field),
            String::from("remove the key or correct its spelling"),
        )
    } else if detail.starts_with("missing field") {
        let field = quoted.unwrap_or_default();
        (join(&path, &field), format!("add `{field}`"))
    } else if detail.starts_with("unknown variant") {
        (path.clone(), String::from("use one of the values listed"))
    } else if detail.starts_with("invalid type") || detail.starts_with("invalid value") {
        (
            path.clone(),
            String::from("give a value of the expected type"),
        )
    } else if detail.contains("duplicate") {
        (path.clone(), String::from("declare each key once"))
    } else {
        let key = if path.is_empty() {
            String::from("(document)")
        } else {
            path.clone()
        };
        (key, String::from("fix the YAML syntax at that position"))
    };
    let key = if key.is_empty() {
        String::from("(document)")
    } else {
        key
    };
    Problem {
        location,
        key,
        message: detail,
        fix,
    }
}

fn between_backticks(s: &str) -> Option<String> {
    let start = s.find('`')? + 1;
    let len = s[start..].find('`')?;
    Some(s[start..start + len].to_string())
}

fn join(parent: &str, key: &str) -> String {
    if parent.is_empty() {
        key.to_string()
    } else {
        format!("{parent}.{key}")
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawConfig {
    pub(super) name: String,
    pub(super) network: Option<RawNetwork>,
    pub(super) registry: Option<RawRegistry>,
    pub(super) cluster: Option<RawCluster>,
    #[serde(default)]
    pub(super) manifests: Vec<String>,
    #[serde(default)]
    pub(super) components: BTreeMap<String, RawComponent>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawNetwork {
    pub(super) name: Option<String>,
    pub(super) ipv4_subnet: Option<String>,
    pub(super) ipv6_subnet: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawRegistry {
    pub(super) name: Option<String>,
    pub(super) image: Option<String>,
    pub(super) host_port: Option<u16>,
    pub(super) volume: Option<String>,
    pub(super) external: Option<String>,
    pub(super) cluster_host: Option<String>,
    pub(super) ca_file: Option<String>,
    pub(super) insecure: Option<bool>,
    pub(super) pull_secret: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawCluster {
    pub(super) provider: Option<Provider>,
    pub(super) image: Option<String>,
    pub(super) context: Option<String>,
    pub(super) pod_subnet: Option<String>,
    pub(super) service_subnet: Option<String>,
    pub(super) disable: Option<Vec<String>>,
    pub(super) pod_start_grace: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawComponent {
    pub(super) image: String,
    pub(super) build: Option<RawBuild>,
    pub(super) rollout: Option<RawRollout>,
    #[serde(default)]
    pub(super) forward: Vec<super::forward::RawPort>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawBuild {
    pub(super) cargo: Option<RawCargoBuild>,
    pub(super) docker: Option<RawDockerBuild>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawCargoBuild {
    pub(super) package: String,
    pub(super) bin: Option<String>,
    pub(super) profile: Option<String>,
    pub(super) target: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawDockerBuild {
    pub(super) context: Option<String>,
    pub(super) dockerfile: Option<String>,
    pub(super) target: Option<String>,
    #[serde(default)]
    pub(super) build_args: BTreeMap<String, String>,
    pub(super) cargo: Option<RawCargoBuild>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawRollout {
    pub(super) kind: RolloutKind,
    pub(super) namespace: Option<String>,
    pub(super) name: Option<String>,
    pub(super) container: Option<String>,
    pub(super) wait_for_termination: Option<bool>,
}

/// The problem of a key declared twice in one map, at the second one.
pub(super) fn duplicate_problem(key: &str, location: Location) -> Problem {
    let short = key.rsplit_once('.').map_or(key, |(_, last)| last);
    Problem {
        location,
        key: key.to_string(),
        message: format!("`{short}` is declared a second time in the same map"),
        fix: String::from(
            "declare each key once: remove this one or merge it into the first (YAML keeps only one)",
        ),
    }
}
