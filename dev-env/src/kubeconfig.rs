//! The node's kubeconfig, rewritten twice: `kubeconfig.host` reaches the API
//! through the port published on 127.0.0.1, `kubeconfig` through the node's
//! name on the shared network (for containers there). Both keep the CA, so
//! TLS stays verified, and both are written mode 0600. Clients are built
//! from these files with kube's own kubeconfig types.

use std::path::{Path, PathBuf};

use kube::config::{KubeConfigOptions, Kubeconfig, KubeconfigError};

use crate::state::{self, write_atomic};

/// The file for tools on the host.
pub const HOST_FILE: &str = "kubeconfig.host";
/// The file for containers on the shared network.
pub const NETWORK_FILE: &str = "kubeconfig";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(
        "the kubeconfig the node wrote is not valid; `docker logs` of the node says why, and `cargo xtask dev up --recreate` makes the node again"
    )]
    Parse {
        #[source]
        source: KubeconfigError,
    },
    #[error(
        "the kubeconfig the node wrote names no cluster; `docker logs` of the node says why, and `cargo xtask dev up --recreate` makes the node again"
    )]
    NoCluster,
    #[error("cannot read the kubeconfig {}; run `cargo xtask dev up` first", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: KubeconfigError,
    },
    #[error(
        "cannot use context `{context}` of {path}; `kubectl config get-contexts` lists the contexts there"
    )]
    Context {
        context: String,
        path: String,
        #[source]
        source: KubeconfigError,
    },
    #[error("cannot create a Kubernetes client from {path}")]
    Client {
        path: String,
        #[source]
        source: kube::Error,
    },
    #[error(transparent)]
    Write(#[from] state::Error),
    /// The API did not answer; why, as far as the node's state tells.
    #[error(transparent)]
    Unreachable(#[from] crate::wait::node::Error),
}

/// Rewrites the node's kubeconfig so that its one cluster is reached at
/// `server` and its cluster, user and context are all called `name`.
pub fn rewrite(text: &str, name: &str, server: &str) -> Result<Kubeconfig, Error> {
    let mut config = Kubeconfig::from_yaml(text).map_err(|source| Error::Parse { source })?;
    let cluster = config.clusters.first_mut().ok_or(Error::NoCluster)?;
    cluster.name = name.to_string();
    cluster.cluster.get_or_insert_with(Default::default).server = Some(server.to_string());
    config.clusters.truncate(1);
    if let Some(user) = config.auth_infos.first_mut() {
        user.name = name.to_string();
    }
    config.auth_infos.truncate(1);
    let context = kube::config::NamedContext {
        name: name.to_string(),
        context: Some(kube::config::Context {
            cluster: name.to_string(),
            user: config.auth_infos.first().map(|u| u.name.clone()),
            ..Default::default()
        }),
        ..Default::default()
    };
    config.contexts = vec![context];
    config.current_context = Some(name.to_string());
    Ok(config)
}

/// Writes `config` to `path`, mode 0600.
pub fn write(path: &Path, config: &Kubeconfig) -> Result<(), Error> {
    let yaml = serde_yaml::to_string(config).expect("kubeconfigs serialize");
    Ok(write_atomic(path, yaml.as_bytes(), 0o600)?)
}

/// A client for the cluster in the kubeconfig at `path`, using `context`
/// or the file's current context.
pub async fn client(path: &Path, context: Option<&str>) -> Result<kube::Client, Error> {
    let config = Kubeconfig::read_from(path).map_err(|source| Error::Read {
        path: path.to_path_buf(),
        source,
    })?;
    client_from(config, context, &path.display().to_string()).await
}

/// A client for `context` of the user's own kubeconfig (`KUBECONFIG` or
/// `~/.kube/config`): the `existing` provider.
pub async fn user_client(context: &str) -> Result<kube::Client, Error> {
    let path = user_kubeconfig_path();
    let config = Kubeconfig::read().map_err(|source| Error::Read {
        path: path.clone(),
        source,
    })?;
    client_from(config, Some(context), &path.display().to_string()).await
}

/// Where the user's kubeconfig is read from: `KUBECONFIG` (its first
/// entry), else `~/.kube/config`.
fn user_kubeconfig_path() -> PathBuf {
    match std::env::var_os("KUBECONFIG") {
        Some(list) if !list.is_empty() => std::env::split_paths(&list).next().unwrap_or_default(),
        _ => PathBuf::from("~/.kube/config"),
    }
}

async fn client_from(
    config: Kubeconfig,
    context: Option<&str>,
    what: &str,
) -> Result<kube::Client, Error> {
    let options = KubeConfigOptions {
        context: context.map(str::to_string),
        ..KubeConfigOptions::default()
    };
    let config = kube::Config::from_custom_kubeconfig(config, &options)
        .await
        .map_err(|source| Error::Context {
            context: context.unwrap_or("(current)").to_string(),
            path: what.to_string(),
            source,
        })?;
    crate::install_crypto_provider();
    kube::Client::try_from(config).map_err(|source| Error::Client {
        path: what.to_string(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const K3S: &str = "apiVersion: v1
clusters:
- cluster:
    certificate-authority-data: Q0E=
    server: https://127.0.0.1:6443
  name: default
contexts:
- context:
    cluster: default
    user: default
  name: default
current-context: default
kind: Config
users:
- name: default
  user:
    token: secret
";

    #[test]
    fn rewrite_keeps_the_ca_and_points_at_the_server() {
        let config = rewrite(K3S, "demo", "https://demo-server-0:6443").unwrap();
        let cluster = config.clusters[0].cluster.as_ref().unwrap();
        assert_eq!(
            cluster.server.as_deref(),
            Some("https://demo-server-0:6443")
        );
        assert_eq!(cluster.certificate_authority_data.as_deref(), Some("Q0E="));
        assert_eq!(config.current_context.as_deref(), Some("demo"));
        assert_eq!(
            config.contexts[0].context.as_ref().unwrap().user.as_deref(),
            Some("demo")
        );

        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(HOST_FILE);
        write(&path, &config).unwrap();
        let back = Kubeconfig::read_from(&path).unwrap();
        assert_eq!(
            back.clusters[0].cluster.as_ref().unwrap().server.as_deref(),
            Some("https://demo-server-0:6443")
        );
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
    }

    #[test]
    fn a_kubeconfig_without_clusters_is_refused() {
        let err = rewrite(
            "apiVersion: v1\nkind: Config\nclusters: []\n",
            "a",
            "https://x",
        )
        .unwrap_err();
        assert!(matches!(err, Error::NoCluster));
    }
}
