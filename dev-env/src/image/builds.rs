//! How each component's binary is built on this machine: for the cluster's
//! platform (or the declared `build.cargo.target`), with the target and
//! tool [`crate::platform::choose`] picks, decided for every component
//! before the first build starts, so a machine that cannot build for the
//! cluster fails with the fix before anything changes.

use std::collections::BTreeMap;

use crate::{
    config::{Build, Config, Provider},
    platform::{self, Platform, Refusal, RustTarget},
};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot reach the cluster to learn its nodes' platform")]
    Cluster(#[source] Box<crate::kubeconfig::Error>),
    #[error("cannot reach the Docker engine to learn its platform")]
    Engine(#[source] crate::docker::Error),
    #[error("{}", refusals.iter().map(|(c, r)| format!("component `{c}`: {r}")).collect::<Vec<_>>().join("\n"))]
    Refused {
        refusals: Vec<(String, Box<Refusal>)>,
    },
    #[error(transparent)]
    Toolchain(#[from] platform::FactsError),
}

/// The platform the images run on, and the target of each component's
/// cargo build.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Builds {
    /// What Docker builds are given as `platform`.
    pub platform: Platform,
    targets: BTreeMap<String, RustTarget>,
}

impl Builds {
    /// The target of `component`'s cargo build (its `build.cargo`, or the
    /// binary its Dockerfile copies); `None` when it builds none.
    pub fn target(&self, component: &str) -> Option<&RustTarget> {
        self.targets.get(component)
    }
}

/// The platform of the cluster of `config`, asked now: its nodes'
/// (`provider: existing`), or the engine's that runs the node (`k3s`,
/// `sim`; the node may not exist yet), through `docker` when connected.
pub async fn cluster_platform(
    config: &Config,
    docker: Option<&bollard::Docker>,
) -> Result<Platform, Error> {
    if config.cluster.provider == Provider::Existing {
        let client = crate::deliver::cluster_client(config)
            .await
            .map_err(|e| Error::Cluster(Box::new(e)))?;
        return Ok(platform::of_cluster(&client).await?);
    }
    if let Some(docker) = docker {
        return Ok(platform::of_engine(docker).await?);
    }
    let docker = crate::docker::connect().await.map_err(Error::Engine)?;
    Ok(platform::of_engine(&docker).await?)
}

/// Decides how `components` of `config` are built for `platform`, all of
/// them or every refusal at once.
pub fn plan(config: &Config, components: &[String], platform: &Platform) -> Result<Builds, Error> {
    let mut targets = BTreeMap::new();
    let mut refusals = Vec::new();
    let mut toolchain = None;
    for name in components {
        let Some(component) = config.components.get(name) else {
            continue;
        };
        let binary = match &component.build {
            Build::Cargo(binary) => binary,
            Build::Docker {
                cargo: Some(binary),
                ..
            } => binary,
            Build::Docker { cargo: None, .. } => continue,
        };
        let toolchain = match &toolchain {
            Some(t) => t,
            None => toolchain.insert(platform::toolchain(&config.root)?),
        };
        match platform::choose(platform, toolchain, binary.target.as_deref()) {
            Ok(target) => {
                targets.insert(name.clone(), target);
            }
            Err(refusal) => refusals.push((name.clone(), refusal)),
        }
    }
    if !refusals.is_empty() {
        return Err(Error::Refused { refusals });
    }
    Ok(Builds {
        platform: platform.clone(),
        targets,
    })
}
