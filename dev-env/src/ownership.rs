//! Which Docker objects an environment may touch: only those labelled
//! `dev-env.name=<name>`. Every command that changes Docker objects checks
//! all of the environment's named objects first ([`check`]) and refuses,
//! changing nothing, when one of them exists but belongs to someone else.

use std::{collections::HashMap, fmt};

use bollard::Docker;

use crate::{
    config::{Config, Provider},
    docker::{self, LABEL_NAME},
};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Docker(#[from] docker::Error),
    #[error(
        "{}\nnothing was changed; dev-env only touches objects labelled `{LABEL_NAME}={env}`: rename {} in {} or remove {} yourself",
        foreign.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n"),
        foreign.iter().map(|f| format!("`{}`", f.key)).collect::<Vec<_>>().join(", "),
        config_file,
        if foreign.len() == 1 { "it" } else { "them" }
    )]
    Foreign {
        env: String,
        config_file: String,
        foreign: Vec<Foreign>,
    },
}

/// An object with an environment's name that is not the environment's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Foreign {
    pub kind: Kind,
    pub name: String,
    /// Its `dev-env.name` label, if it has one.
    pub owner: Option<String>,
    /// The key of `dev-env.yaml` that names it.
    pub key: &'static str,
}

impl fmt::Display for Foreign {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} `{}` ", self.kind, self.name)?;
        match &self.owner {
            Some(owner) => write!(f, "belongs to dev-env environment `{owner}`"),
            None => write!(
                f,
                "was not created by dev-env (it has no `{LABEL_NAME}` label)"
            ),
        }
    }
}

/// The kinds of Docker object an environment owns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Network,
    RegistryContainer,
    RegistryVolume,
    NodeContainer,
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Kind::Network => "network",
            Kind::RegistryContainer => "registry container",
            Kind::RegistryVolume => "registry volume",
            Kind::NodeContainer => "node container",
        })
    }
}

/// The Docker objects `config` names: what each is, its name, and the key
/// that names it. Only those the environment manages: none for an external
/// registry, no node for an existing cluster, no network when neither
/// needs one.
pub fn named_objects(config: &Config) -> Vec<(Kind, String, &'static str)> {
    let mut objects = Vec::new();
    if crate::plan::needs_network(config) {
        objects.push((Kind::Network, config.network.name.clone(), "network.name"));
    }
    if config.registry.external.is_none() {
        objects.push((
            Kind::RegistryContainer,
            config.registry.name.clone(),
            "registry.name",
        ));
        objects.push((
            Kind::RegistryVolume,
            config.registry.volume.clone(),
            "registry.volume",
        ));
    }
    if config.cluster.provider != Provider::Existing {
        objects.push((Kind::NodeContainer, config.node_name(), "name"));
    }
    objects
}

/// Refuses when any object `config` names exists and is not labelled as
/// the environment's; objects that do not exist are fine.
pub async fn check(docker: &Docker, config: &Config) -> Result<(), Error> {
    let mut foreign = Vec::new();
    for (kind, name, key) in named_objects(config) {
        let Some(labels) = labels_of(docker, kind, &name).await? else {
            continue;
        };
        let owner = labels.get(LABEL_NAME).cloned();
        if owner.as_deref() != Some(config.name.as_str()) {
            foreign.push(Foreign {
                kind,
                name,
                owner,
                key,
            });
        }
    }
    if foreign.is_empty() {
        return Ok(());
    }
    Err(Error::Foreign {
        env: config.name.clone(),
        config_file: config.file.display().to_string(),
        foreign,
    })
}

/// The labels of the object, `None` when it does not exist.
async fn labels_of(
    docker: &Docker,
    kind: Kind,
    name: &str,
) -> Result<Option<HashMap<String, String>>, docker::Error> {
    Ok(match kind {
        Kind::Network => match docker.inspect_network(name, None).await {
            Ok(it) => Some(it.labels.unwrap_or_default()),
            Err(e) if docker::is_not_found(&e) => None,
            Err(e) => return Err(docker::Error::api(format!("inspect network `{name}`"), e)),
        },
        Kind::RegistryVolume => match docker.inspect_volume(name).await {
            Ok(it) => Some(it.labels),
            Err(e) if docker::is_not_found(&e) => None,
            Err(e) => return Err(docker::Error::api(format!("inspect volume `{name}`"), e)),
        },
        Kind::RegistryContainer | Kind::NodeContainer => docker::inspect_container(docker, name)
            .await?
            .map(|c| c.config.and_then(|c| c.labels).unwrap_or_default()),
    })
}
