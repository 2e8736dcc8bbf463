//! The configuration agrees with the manifests: every component's rollout
//! target (kind, namespace, name, container) is an object the manifests
//! declare, found before anything is built, applied or pruned. A target
//! outside the manifests is accepted only on a cluster dev-env does not
//! own (`provider: existing`), and only when that cluster has it.

use std::path::Path;

use kube::{Api, Client, api::DynamicObject};

use crate::{
    config::{Component, Config, Provider, RolloutKind},
    manifest::Manifest,
};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{}", problems.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n"))]
    Mismatch { problems: Vec<Problem> },
    #[error(transparent)]
    Cluster(Box<crate::kubeconfig::Error>),
    #[error("finding the WorkerPool kind that component `{component}` rolls out")]
    Discovery {
        component: String,
        #[source]
        source: Box<crate::rollout::Error>,
    },
    #[error("looking up component `{component}`'s {target} in the cluster")]
    Lookup {
        component: String,
        target: String,
        #[source]
        source: Box<kube::Error>,
    },
}

/// One component whose target the manifests do not declare as the
/// configuration says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// `dev-env.yaml:line:col` of the rollout key at fault.
    pub at: String,
    pub component: String,
    pub what: Mismatch,
}

/// How a target disagrees with the manifests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mismatch {
    /// No manifest declares the target (nor, for `provider: existing`,
    /// does the cluster hold it).
    Undeclared {
        /// `Deployment demo/controller-manager`.
        target: String,
        /// The `manifests:` entries read, as the file writes them.
        read: String,
        /// How many objects they declare.
        objects: usize,
        /// A declared object of the same kind whose name is close.
        close: Option<String>,
        /// Whether the cluster was asked too (`provider: existing`).
        in_cluster: bool,
    },
    /// The target is declared without the container.
    NoContainer {
        target: String,
        container: String,
        /// `file:line` of the target's document.
        declared_at: String,
        found: Vec<String>,
    },
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let Problem { at, component, .. } = self;
        match &self.what {
            Mismatch::Undeclared {
                target,
                read,
                objects,
                close,
                in_cluster,
            } => {
                let cluster = if *in_cluster {
                    " and the cluster has no such object"
                } else {
                    ""
                };
                write!(
                    f,
                    "{at}: component `{component}` rolls out {target}, which the manifests do not declare{cluster} (read {read}: {objects} object(s))"
                )?;
                match close {
                    Some(close) => write!(f, "; did you mean {close}?"),
                    None => write!(
                        f,
                        "; fix `rollout` in the environment file or add the {} to the manifests",
                        target.split(' ').next().unwrap_or("object")
                    ),
                }
            }
            Mismatch::NoContainer {
                target,
                container,
                declared_at,
                found,
            } => write!(
                f,
                "{at}: component `{component}` rolls out container `{container}` of {target}, which has none by that name ({declared_at} declares: {}); fix `rollout.container`",
                if found.is_empty() {
                    String::from("no containers")
                } else {
                    found.join(", ")
                }
            ),
        }
    }
}

/// A target the manifests do not declare, for the cluster to be asked
/// about (`provider: existing` only).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outside {
    pub component: String,
    problem: Problem,
}

/// Checks the targets of the components `names` against `manifests`, and
/// asks the cluster for those outside them (`provider: existing`): the
/// check every command that rolls or applies makes before it changes
/// anything.
pub async fn verify<'a>(
    config: &Config,
    names: impl IntoIterator<Item = &'a String>,
    manifests: &[Manifest],
) -> Result<(), Error> {
    let outside = check_components(config, names, manifests)?;
    if outside.is_empty() {
        return Ok(());
    }
    let client = crate::deliver::cluster_client(config)
        .await
        .map_err(|e| Error::Cluster(Box::new(e)))?;
    check_in_cluster(&client, config, outside).await
}

/// Checks every component of `config` against `manifests`. Returns the
/// targets left for the cluster to hold (only with `provider: existing`);
/// every other disagreement is an error, all of them at once.
pub fn check(config: &Config, manifests: &[Manifest]) -> Result<Vec<Outside>, Error> {
    check_components(config, config.components.keys(), manifests)
}

/// [`check`] of the named components only.
pub fn check_components<'a>(
    config: &Config,
    names: impl IntoIterator<Item = &'a String>,
    manifests: &[Manifest],
) -> Result<Vec<Outside>, Error> {
    let mut problems = Vec::new();
    let mut outside = Vec::new();
    for name in names {
        let Some(component) = config.components.get(name) else {
            continue;
        };
        let Some(what) = mismatch(config, component, manifests) else {
            continue;
        };
        let key = match &what {
            Mismatch::NoContainer { .. } => "container",
            Mismatch::Undeclared { .. } => "name",
        };
        let problem = Problem {
            at: config.locate(&format!("components.{name}.rollout.{key}")),
            component: name.clone(),
            what,
        };
        match problem.what {
            Mismatch::Undeclared { .. } if config.cluster.provider == Provider::Existing => {
                outside.push(Outside {
                    component: name.clone(),
                    problem,
                });
            }
            _ => problems.push(problem),
        }
    }
    if problems.is_empty() {
        Ok(outside)
    } else {
        Err(Error::Mismatch { problems })
    }
}

/// Asks the cluster for each target the manifests do not declare; those it
/// does not hold are errors, all at once.
pub async fn check_in_cluster(
    client: &Client,
    config: &Config,
    outside: Vec<Outside>,
) -> Result<(), Error> {
    let mut problems = Vec::new();
    for Outside {
        component,
        mut problem,
    } in outside
    {
        let rollout = &config.components[&component].rollout;
        let lookup = |source| Error::Lookup {
            component: component.clone(),
            target: target_name(rollout),
            source: Box::new(source),
        };
        let found = match rollout.kind {
            RolloutKind::Deployment => {
                let api: Api<k8s_openapi::api::apps::v1::Deployment> =
                    Api::namespaced(client.clone(), &rollout.namespace);
                api.get_opt(&rollout.name).await.map_err(lookup)?.is_some()
            }
            RolloutKind::WorkerPool => match crate::rollout::worker_pool_resource(client).await {
                Ok(resource) => {
                    let api: Api<DynamicObject> =
                        Api::namespaced_with(client.clone(), &rollout.namespace, &resource);
                    api.get_opt(&rollout.name).await.map_err(lookup)?.is_some()
                }
                // No WorkerPool kind: no WorkerPool either.
                Err(crate::rollout::Error::NoWorkerPoolKind) => false,
                Err(source) => {
                    return Err(Error::Discovery {
                        component: component.clone(),
                        source: Box::new(source),
                    });
                }
            },
        };
        if !found {
            if let Mismatch::Undeclared { in_cluster, .. } = &mut problem.what {
                *in_cluster = true;
            }
            problems.push(problem);
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(Error::Mismatch { problems })
    }
}

/// How `component`'s target disagrees with `manifests`, if it does.
fn mismatch(config: &Config, component: &Component, manifests: &[Manifest]) -> Option<Mismatch> {
    let rollout = &component.rollout;
    let target = target_name(rollout);
    let of_kind: Vec<&Manifest> = manifests
        .iter()
        .filter(|m| is_kind(m, rollout.kind))
        .collect();
    let Some(declared) = of_kind
        .iter()
        .find(|m| m.name == rollout.name && namespace_of(m) == rollout.namespace)
    else {
        let candidates = of_kind
            .iter()
            .map(|m| (format!("{}/{}", namespace_of(m), m.name), m));
        let wanted = format!("{}/{}", rollout.namespace, rollout.name);
        let close = closest(&wanted, candidates).map(|(_, m)| {
            format!(
                "{} ({}:{})",
                m.display_name(),
                shown(config, &m.file),
                m.line
            )
        });
        return Some(Mismatch::Undeclared {
            target,
            read: read(config),
            objects: manifests.len(),
            close,
            in_cluster: false,
        });
    };
    let found = containers(&declared.object);
    if found.contains(&rollout.container) {
        return None;
    }
    Some(Mismatch::NoContainer {
        target,
        container: rollout.container.clone(),
        declared_at: format!("{}:{}", shown(config, &declared.file), declared.line),
        found,
    })
}

/// `Deployment demo/controller-manager`.
fn target_name(rollout: &crate::config::Rollout) -> String {
    format!("{} {}/{}", rollout.kind, rollout.namespace, rollout.name)
}

fn is_kind(m: &Manifest, kind: RolloutKind) -> bool {
    match kind {
        RolloutKind::Deployment => m.kind == "Deployment" && m.api_version == "apps/v1",
        // The WorkerPool kind is found by name, whatever its group, as
        // rollouts find it.
        RolloutKind::WorkerPool => m.kind == "WorkerPool",
    }
}

/// A namespaced object's namespace: `default` when the manifest names none.
fn namespace_of(m: &Manifest) -> &str {
    m.namespace.as_deref().unwrap_or("default")
}

/// The container names of a pod template's `spec.template.spec.containers`,
/// where both a Deployment and a WorkerPool keep them.
fn containers(object: &serde_json::Value) -> Vec<String> {
    object["spec"]["template"]["spec"]["containers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["name"].as_str().map(str::to_string))
        .collect()
}

/// The candidate whose key is closest to `wanted`, when it is close enough
/// to be a slip: at most a third of the name's length in edits.
fn closest<'a, T>(
    wanted: &str,
    candidates: impl Iterator<Item = (String, &'a T)>,
) -> Option<(String, &'a T)> {
    let limit = (wanted.chars().count() / 3).max(1);
    candidates
        .map(|(key, item)| (strsim::levenshtein(wanted, &key), key, item))
        .filter(|(distance, ..)| *distance <= limit)
        .min_by_key(|(distance, ..)| *distance)
        .map(|(_, key, item)| (key, item))
}

/// The `manifests:` entries as paths relative to the environment file.
fn read(config: &Config) -> String {
    let entries: Vec<String> = config
        .manifests
        .iter()
        .map(|p| format!("`{}`", shown(config, p)))
        .collect();
    entries.join(", ")
}

fn shown(config: &Config, path: &Path) -> String {
    path.strip_prefix(&config.root)
        .unwrap_or(path)
        .display()
        .to_string()
}

#[cfg(test)]
mod tests;
