//! `registry.pullSecret`: the cluster pulls from the external registry with
//! the credentials `docker login` stored for it. Every namespace a
//! component runs in gets them as a `kubernetes.io/dockerconfigjson`
//! Secret, and its `default` ServiceAccount names that Secret in
//! `imagePullSecrets`, so the ServiceAccount admission gives it to every pod
//! created there afterwards. Both are applied after the namespaces and
//! before the workloads, whose pods would otherwise be created without it.
//!
//! The credentials are looked up before anything changes, and never leave
//! the Secret: [`PullSecret`]'s `Debug` shows where they came from, not what
//! they are.

use std::{collections::BTreeSet, fmt};

use base64::Engine as _;
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::{Api, Client};
use serde_json::{Value, json};

use super::{Applied, Error as ApplyError, Kinds, Mode, apply_one};
use crate::{config::Config, image::credentials};

/// The ServiceAccount pods run as when they name none.
const DEFAULT_ACCOUNT: &str = "default";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(
        "`registry.pullSecret` needs credentials for `{host}`, and {} holds none; log in with `docker login {host}`",
        looked.as_deref().unwrap_or("no Docker client configuration (neither DOCKER_CONFIG nor HOME is set)")
    )]
    NoCredentials {
        host: String,
        /// The configuration file that was read.
        looked: Option<String>,
    },
    #[error("`registry.pullSecret`: reading the credentials of `{host}`")]
    Credentials {
        host: String,
        #[source]
        source: credentials::Error,
    },
    #[error(
        "cannot read ServiceAccount/{namespace}/{DEFAULT_ACCOUNT}: {}",
        super::api_error(source)
    )]
    Account {
        namespace: String,
        #[source]
        source: kube::Error,
    },
    #[error(transparent)]
    Apply(#[from] Box<ApplyError>),
}

/// The pull credentials to give the cluster, and where.
pub struct PullSecret {
    /// The Secret's name, the same in every namespace.
    name: String,
    /// Where the components run.
    namespaces: BTreeSet<String>,
    /// `.dockerconfigjson`: holds the secret.
    config_json: String,
    /// Where the credentials came from, for `Debug`.
    source: String,
}

impl fmt::Debug for PullSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PullSecret")
            .field("name", &self.name)
            .field("namespaces", &self.namespaces)
            .field("config_json", &"<redacted>")
            .field("source", &self.source)
            .finish()
    }
}

impl PullSecret {
    /// The pull secret `config` asks for, with the credentials stored for
    /// its external registry; `None` without `registry.pullSecret`.
    pub fn of(config: &Config) -> Result<Option<PullSecret>, Error> {
        let registry = &config.registry;
        let Some(host) = registry
            .external
            .as_deref()
            .filter(|_| registry.pull_secret)
        else {
            return Ok(None);
        };
        let looked = credentials::config_path();
        let found = match &looked {
            Some(path) => {
                credentials::lookup_in(path, host).map_err(|source| Error::Credentials {
                    host: host.to_string(),
                    source,
                })?
            }
            None => None,
        };
        let credential = found.ok_or_else(|| Error::NoCredentials {
            host: host.to_string(),
            looked: looked.map(|p| p.display().to_string()),
        })?;
        // Pods pull from the cluster's address of the registry; the host's
        // is named too, for clusters that reach it by the same name.
        let hosts = BTreeSet::from([registry.cluster_host.as_str(), host]);
        Ok(Some(PullSecret {
            name: format!("{}-registry-credentials", config.name),
            namespaces: config
                .components
                .values()
                .map(|c| c.rollout.namespace.clone())
                .collect(),
            config_json: docker_config_json(&hosts, &credential).to_string(),
            source: credential.source,
        }))
    }

    /// Applies the Secret in every namespace and names it in the `default`
    /// ServiceAccount's `imagePullSecrets`, keeping the entries already
    /// there (the list is atomic: whoever applies it owns all of it).
    pub(super) async fn apply(
        &self,
        client: &Client,
        kinds: &mut Kinds,
    ) -> Result<Vec<Applied>, Error> {
        let mut applied = Vec::new();
        for namespace in &self.namespaces {
            let account = self.account(client, namespace).await?;
            for object in std::iter::once(self.secret(namespace)).chain(account) {
                let done = apply_one(client, kinds, "(registry.pullSecret)", &object, Mode::Apply);
                applied.push(done.await.map_err(Box::new)?);
            }
        }
        Ok(applied)
    }

    fn secret(&self, namespace: &str) -> Value {
        let data = base64::engine::general_purpose::STANDARD.encode(&self.config_json);
        json!({
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {
                "name": self.name,
                "namespace": namespace,
                "labels": {"app.kubernetes.io/managed-by": "dev-env"},
            },
            "type": "kubernetes.io/dockerconfigjson",
            "data": {".dockerconfigjson": data},
        })
    }

    /// The `default` ServiceAccount to apply, with the Secret added to what
    /// its `imagePullSecrets` already names; `None` when it names it.
    async fn account(&self, client: &Client, namespace: &str) -> Result<Option<Value>, Error> {
        let api: Api<ServiceAccount> = Api::namespaced(client.clone(), namespace);
        let current = api
            .get_opt(DEFAULT_ACCOUNT)
            .await
            .map_err(|source| Error::Account {
                namespace: namespace.to_string(),
                source,
            })?;
        let mut names: Vec<String> = current
            .and_then(|a| a.image_pull_secrets)
            .unwrap_or_default()
            .into_iter()
            .map(|r| r.name)
            .collect();
        if names.contains(&self.name) {
            return Ok(None);
        }
        names.push(self.name.clone());
        let secrets: Vec<Value> = names.iter().map(|n| json!({"name": n})).collect();
        Ok(Some(json!({
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": DEFAULT_ACCOUNT, "namespace": namespace},
            "imagePullSecrets": secrets,
        })))
    }
}

/// A Docker client configuration holding one credential for `hosts`, as
/// the kubelet reads `.dockerconfigjson`.
fn docker_config_json(hosts: &BTreeSet<&str>, credential: &credentials::Credential) -> Value {
    let auth = base64::engine::general_purpose::STANDARD
        .encode(format!("{}:{}", credential.username, credential.secret));
    let entry = json!({
        "username": credential.username,
        "password": credential.secret,
        "auth": auth,
    });
    let auths: serde_json::Map<String, Value> = hosts
        .iter()
        .map(|h| (h.to_string(), entry.clone()))
        .collect();
    json!({ "auths": auths })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn credential() -> credentials::Credential {
        credentials::Credential {
            username: "ci".into(),
            secret: "s3cret".into(),
            source: "`auths` in config.json".into(),
        }
    }

    #[test]
    fn the_docker_config_names_every_host_with_the_kubelets_fields() {
        let hosts = BTreeSet::from(["reg.lan:5000", "registry.internal:5000"]);
        let config = docker_config_json(&hosts, &credential());
        for host in hosts {
            let entry = &config["auths"][host];
            assert_eq!(entry["username"], "ci");
            assert_eq!(entry["password"], "s3cret");
            let auth = base64::engine::general_purpose::STANDARD
                .decode(entry["auth"].as_str().unwrap())
                .unwrap();
            assert_eq!(auth, b"ci:s3cret");
        }
    }

    #[test]
    fn debug_never_shows_the_credentials() {
        let secret = PullSecret {
            name: "e-registry-credentials".into(),
            namespaces: BTreeSet::from(["demo".to_string()]),
            config_json: docker_config_json(&BTreeSet::from(["reg:1"]), &credential()).to_string(),
            source: credential().source,
        };
        let shown = format!("{secret:?}");
        assert!(!shown.contains("s3cret"), "{shown}");
        assert!(!shown.contains("Y2k6czNjcmV0"), "{shown}");
        assert!(shown.contains("e-registry-credentials"), "{shown}");
        let applied = secret.secret("demo");
        assert_eq!(applied["type"], "kubernetes.io/dockerconfigjson");
        assert_eq!(applied["metadata"]["namespace"], "demo");
    }
}
