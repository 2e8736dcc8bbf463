//! The kubelet's credentials for a pull: the pod's `imagePullSecrets` read as `pkg/credentialprovider`
//! reads them, and tried as `kuberuntime`'s `PullImage` tries them.
//!
//! - Every named Secret is read at each container start; one that cannot be read is skipped and a
//!   `FailedToRetrieveImagePullSecret` warning names it (the pull goes on without it).
//! - `kubernetes.io/dockerconfigjson` Secrets (`.dockerconfigjson`, `{"auths": {…}}`) and
//!   `kubernetes.io/dockercfg` ones (`.dockercfg`, the map alone) give entries keyed by registry
//!   (`host[:port][/path]`, written bare or as a URL such as `https://host:port/v1/`; `/v1/` and `/v2/`
//!   mean the host). An entry's `auth` (base64 of `user:password`) wins over its `username`/`password`.
//! - An image matches every key whose host matches part by part (`*` and `?` globs within a part, the
//!   same number of parts), whose port is the same, and whose path is a prefix of the repository's; keys
//!   are tried in reverse order, so longer paths come first. Images of Docker Hub also match the
//!   `index.docker.io` key when nothing else does.
//! - With matching credentials, the pull is tried with each in turn, and fails with all their errors
//!   (`[a, b]`, each message once) when none works; the node's own credentials (`registries.yaml`) are
//!   then not used, as the CRI runtime uses them only for pulls that bring none. Without, the pull is
//!   anonymous to the kubelet.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;

use super::reference::Reference;
use super::registry::Auth;
use super::runtime::{ContainerRuntime, PullError, PulledImage};
use crate::meta;
use crate::resource::GroupResource;
use crate::store::Store;

/// The Secret type of `~/.docker/config.json` contents.
pub const DOCKER_CONFIG_JSON: &str = "kubernetes.io/dockerconfigjson";
/// The Secret type of legacy `~/.dockercfg` contents.
pub const DOCKERCFG: &str = "kubernetes.io/dockercfg";

/// The Docker Hub key the keyring falls back to for Docker Hub images.
const DEFAULT_REGISTRY_HOST: &str = "index.docker.io";

/// A pull secret's Docker config is unusable; the pull fails with it, as the kubelet's does.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The config is not JSON of the expected shape.
    #[error("{0}")]
    Json(#[from] serde_json::Error),
    /// An entry's `auth` is not base64.
    #[error("{0}")]
    Base64(#[from] base64::DecodeError),
    /// An entry's `auth` decodes to no `user:password`.
    #[error("unable to parse auth field, must be formatted as base64(username:password)")]
    AuthField,
}

/// The pull secrets of a pod.
pub(super) struct PullSecrets {
    /// The Secrets that were read.
    pub secrets: Vec<Value>,
    /// The names that could not be read.
    pub missing: Vec<String>,
}

/// Reads the Secrets a pod names in `spec.imagePullSecrets` (entries without a name are ignored).
pub(super) fn pull_secrets(store: &Store, pod: &Value) -> PullSecrets {
    let ns = meta::namespace_of(pod);
    let names = pod
        .pointer("/spec/imagePullSecrets")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|r| r["name"].as_str())
        .filter(|n| !n.is_empty());
    let mut out = PullSecrets {
        secrets: Vec::new(),
        missing: Vec::new(),
    };
    for name in names {
        match store.get(&GroupResource::new("", "secrets"), Some(ns), name) {
            Ok(secret) => out.secrets.push(secret),
            Err(e) => {
                tracing::info!(pod = %meta::name_of(pod), secret = name, error = %e,
                    "Unable to retrieve pull secret, the image pull may not succeed.");
                out.missing.push(name.to_string());
            }
        }
    }
    out
}

/// The warning for pull secrets that could not be read.
pub(super) fn missing_message(missing: &[String]) -> String {
    format!(
        "Unable to retrieve some image pull secrets ({}); attempting to pull the image may not succeed.",
        missing.join(", ")
    )
}

/// One entry of a Docker config.
#[derive(Deserialize)]
struct Entry {
    #[serde(default)]
    username: String,
    #[serde(default)]
    password: String,
    #[serde(default)]
    auth: String,
}

/// `.dockerconfigjson`.
#[derive(Deserialize)]
struct DockerConfigJson {
    #[serde(default)]
    auths: BTreeMap<String, Entry>,
}

/// Credentials by registry key, as `BasicDockerKeyring` keeps them.
#[derive(Debug, Default)]
pub(super) struct Keyring {
    creds: BTreeMap<String, Vec<Auth>>,
    /// The keys, reverse sorted.
    index: Vec<String>,
}

impl Keyring {
    /// The keyring of some Secrets; a Docker config that does not parse fails the pull with its error.
    pub(super) fn from_secrets(secrets: &[Value]) -> Result<Keyring, Error> {
        let mut keyring = Keyring::default();
        for secret in secrets {
            let data = |key: &str| secret_data(secret, key).filter(|d| !d.is_empty());
            let entries = match (
                secret["type"].as_str(),
                data(".dockerconfigjson"),
                data(".dockercfg"),
            ) {
                (Some(DOCKER_CONFIG_JSON), Some(json), _) => {
                    serde_json::from_slice::<DockerConfigJson>(&json)?.auths
                }
                (Some(DOCKERCFG), _, Some(json)) => {
                    serde_json::from_slice::<BTreeMap<String, Entry>>(&json)?
                }
                _ => continue,
            };
            for (location, entry) in entries {
                keyring.add(&location, entry)?;
            }
        }
        keyring.index.sort();
        keyring.index.dedup();
        keyring.index.reverse();
        Ok(keyring)
    }

    fn add(&mut self, location: &str, entry: Entry) -> Result<(), Error> {
        let (username, password) = if entry.auth.is_empty() {
            (entry.username, entry.password)
        } else {
            decode_auth_field(&entry.auth)?
        };
        let url = if location.starts_with("https://") || location.starts_with("http://") {
            location.to_string()
        } else {
            format!("https://{location}")
        };
        let Some((_, host, path)) = split(&url) else {
            tracing::warn!(
                entry = location,
                "an entry of a Docker config is not a URL, ignoring"
            );
            return Ok(());
        };
        let path = path.split(['?', '#']).next().unwrap_or("");
        let path = match path
            .strip_prefix("/v2/")
            .or_else(|| path.strip_prefix("/v1/"))
        {
            Some(rest) => format!("/{rest}"),
            None => path.to_string(),
        };
        let key = if path.is_empty() || path == "/" {
            host.to_string()
        } else {
            format!("{host}{path}")
        };
        self.creds
            .entry(key.clone())
            .or_default()
            .push(Auth::basic(&username, &password));
        self.index.push(key);
        Ok(())
    }

    /// The credentials for a repository (`registry.test:5000/team/app`), most specific keys first.
    pub(super) fn lookup(&self, repository: &str) -> Vec<Auth> {
        let found: Vec<Auth> = self
            .index
            .iter()
            .filter(|k| urls_match(k, repository))
            .flat_map(|k| self.creds[k.as_str()].iter().cloned())
            .collect();
        if found.is_empty() && is_default_registry_match(repository) {
            return self
                .creds
                .get(DEFAULT_REGISTRY_HOST)
                .cloned()
                .unwrap_or_default();
        }
        found
    }
}

/// The decoded value of a Secret's `data` key.
fn secret_data(secret: &Value, key: &str) -> Option<Vec<u8>> {
    use base64::Engine as _;
    let encoded = secret.get("data")?.get(key)?.as_str()?;
    base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .ok()
}

/// An entry's `auth`: base64 (padded or not) of `user:password`.
fn decode_auth_field(field: &str) -> Result<(String, String), Error> {
    use base64::Engine as _;
    let engine = if field.trim().ends_with('=') {
        &base64::engine::general_purpose::STANDARD
    } else {
        &base64::engine::general_purpose::STANDARD_NO_PAD
    };
    let decoded = engine.decode(field)?;
    let text = String::from_utf8_lossy(&decoded);
    match text.split_once(':') {
        Some((user, pass)) => Ok((user.to_string(), pass.to_string())),
        None => Err(Error::AuthField),
    }
}

/// `(scheme, host[:port], path)` of a URL.
fn split(url: &str) -> Option<(&str, &str, &str)> {
    let (scheme, rest) = url.split_once("://")?;
    let (host, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, ""),
    };
    (!host.is_empty()).then_some((scheme, host, path))
}

/// `urlsMatchStr`: whether a key (possibly with globs in its host) matches a repository name.
fn urls_match(glob: &str, target: &str) -> bool {
    let (glob_url, target_url) = (format!("https://{glob}"), format!("https://{target}"));
    let (Some((_, glob_host, glob_path)), Some((_, target_host, target_path))) =
        (split(&glob_url), split(&target_url))
    else {
        return false;
    };
    let (glob_parts, glob_port) = host_parts(glob_host);
    let (target_parts, target_port) = host_parts(target_host);
    glob_port == target_port
        && glob_parts.len() == target_parts.len()
        && target_path.starts_with(glob_path)
        && glob_parts
            .iter()
            .zip(&target_parts)
            .all(|(g, t)| glob_match(g, t))
}

/// The dot-separated parts of a host, and its port (`""` without one).
fn host_parts(host: &str) -> (Vec<&str>, &str) {
    let (name, port) = match host.rsplit_once(':') {
        Some((h, p)) if !h.contains(':') => (h, p),
        _ => (host, ""),
    };
    (name.split('.').collect(), port)
}

/// `filepath.Match` within one host part: `*` any run, `?` one character, anything else itself.
fn glob_match(pattern: &str, text: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let t: Vec<char> = text.chars().collect();
    let (mut pi, mut ti) = (0, 0);
    let (mut star, mut mark) = (None, 0);
    while ti < t.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == t[ti]) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some(pi);
            mark = ti;
            pi += 1;
        } else if let Some(s) = star {
            pi = s + 1;
            mark += 1;
            ti = mark;
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

/// `isDefaultRegistryMatch`: whether a repository name pulls from Docker Hub.
fn is_default_registry_match(image: &str) -> bool {
    let Some((first, _)) = image.split_once('/') else {
        return !image.is_empty();
    };
    if first.is_empty() {
        return false;
    }
    first == "docker.io" || first == DEFAULT_REGISTRY_HOST || !first.contains(['.', ':'])
}

/// Pulls with each credential in turn (`kuberuntime`'s `PullImage`); without any, anonymously.
pub(super) async fn pull_with<R: ContainerRuntime>(
    runtime: &R,
    image: &Reference,
    credentials: &[Auth],
) -> Result<PulledImage, PullError> {
    if credentials.is_empty() {
        return runtime.pull(image, None).await;
    }
    let mut errors = Vec::new();
    for c in credentials {
        match runtime.pull(image, Some(c)).await {
            Ok(pulled) => return Ok(pulled),
            Err(e) => errors.push(e.message),
        }
    }
    Err(PullError {
        message: aggregate(&errors),
    })
}

/// `utilerrors.NewAggregate(…).Error()`: one message alone, several in brackets, each once.
fn aggregate(messages: &[String]) -> String {
    let mut seen: Vec<&str> = Vec::new();
    for m in messages {
        if !seen.contains(&m.as_str()) {
            seen.push(m);
        }
    }
    match seen.as_slice() {
        [one] => one.to_string(),
        many => format!("[{}]", many.join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use base64::Engine as _;
    use serde_json::json;

    use super::*;

    fn secret(kind: &str, key: &str, contents: &Value) -> Value {
        let data = base64::engine::general_purpose::STANDARD.encode(contents.to_string());
        json!({"type": kind, "data": {key: data}})
    }

    fn users(creds: &[Auth]) -> Vec<String> {
        creds
            .iter()
            .map(|a| a.username.clone().unwrap_or_default())
            .collect()
    }

    #[test]
    fn entries_match_by_host_port_and_path_prefix_longest_first() {
        let auths = json!({"auths": {
            "https://registry.test:5000/v1/": {"username": "host", "password": "p"},
            "registry.test:5000/team": {"username": "team", "password": "p"},
            "registry.test": {"username": "no-port", "password": "p"},
            "*.glob.test": {"username": "glob", "password": "p"},
        }});
        let keyring =
            Keyring::from_secrets(&[secret(DOCKER_CONFIG_JSON, ".dockerconfigjson", &auths)])
                .unwrap();
        assert_eq!(
            users(&keyring.lookup("registry.test:5000/team/app")),
            ["team", "host"]
        );
        assert_eq!(users(&keyring.lookup("registry.test:5000/other")), ["host"]);
        assert_eq!(users(&keyring.lookup("registry.test/app")), ["no-port"]);
        assert_eq!(
            users(&keyring.lookup("registry.test:5001/app")),
            Vec::<String>::new()
        );
        assert_eq!(users(&keyring.lookup("a.glob.test/app")), ["glob"]);
        assert_eq!(
            users(&keyring.lookup("a.b.glob.test/app")),
            Vec::<String>::new()
        );
    }

    #[test]
    fn auth_wins_and_dockercfg_and_docker_hub_keys_are_read() {
        let cfg = json!({"https://index.docker.io/v1/": {"auth": "aHViOnNlY3JldA=="}});
        let keyring = Keyring::from_secrets(&[
            secret(DOCKERCFG, ".dockercfg", &cfg),
            secret(
                "Opaque",
                ".dockercfg",
                &json!({"other:1": {"username": "x"}}),
            ),
        ])
        .unwrap();
        let found = keyring.lookup("docker.io/library/nginx");
        assert_eq!(found, [Auth::basic("hub", "secret")]);
        assert!(keyring.lookup("other:1/app").is_empty());
    }

    #[test]
    fn malformed_configs_fail_the_pull() {
        let bad = secret(
            DOCKER_CONFIG_JSON,
            ".dockerconfigjson",
            &json!({"auths": {"r": {"auth": "bm9jb2xvbg"}}}),
        );
        assert_eq!(
            Keyring::from_secrets(&[bad]).unwrap_err().to_string(),
            "unable to parse auth field, must be formatted as base64(username:password)"
        );
    }

    #[test]
    fn errors_aggregate_as_kubernetes_does() {
        assert_eq!(aggregate(&["a".into()]), "a");
        assert_eq!(aggregate(&["a".into(), "b".into(), "a".into()]), "[a, b]");
        assert_eq!(aggregate(&["a".into(), "a".into()]), "a");
    }

    #[test]
    fn globs_match_within_a_part() {
        assert!(glob_match("*", "registry"));
        assert!(glob_match("reg*y", "registry"));
        assert!(glob_match("r?gistry", "registry"));
        assert!(!glob_match("reg*x", "registry"));
    }
}
