//! `dev down` and `dev reset`: remove what the environment runs, never
//! what is not its own.

use super::Error;
use crate::{
    cluster,
    config::{Config, Provider},
    docker, lock, network, ownership, plan, registry,
    report::Reporter,
    state::State,
};

/// What `down` removes beyond the node and the registry container.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DownOptions {
    /// The registry's volume too, with every pushed image (`--purge`).
    pub purge: bool,
    /// The network too (`dev reset`).
    pub network: bool,
}

impl DownOptions {
    /// `dev down`: the node and the registry container; data is kept.
    pub const DOWN: DownOptions = DownOptions {
        purge: false,
        network: false,
    };
    /// `dev reset --purge`: everything, the pushed images included.
    pub const RESET_PURGE: DownOptions = DownOptions {
        purge: true,
        network: true,
    };
}

/// What `down` removed: only what existed and is gone now.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DownReport {
    /// The environment.
    pub name: String,
    pub node: bool,
    pub registry: bool,
    pub volume: bool,
    pub network: bool,
    /// The state directory `.dev-env/<name>/` (`dev reset --purge`).
    pub state: bool,
}

/// Removes the state directory; whether it held anything besides the
/// lock file this run made.
fn remove_state(dir: &std::path::Path) -> Result<bool, Error> {
    let held = std::fs::read_dir(dir).is_ok_and(|entries| {
        entries
            .flatten()
            .any(|e| e.file_name() != std::ffi::OsStr::new(lock::LOCK_FILE))
    });
    match std::fs::remove_dir_all(dir) {
        Ok(()) => Ok(held),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(source) => Err(Error::RemoveState {
            dir: dir.to_path_buf(),
            source,
        }),
    }
}

/// Removes the node and the registry container, and what `options` adds.
/// Whatever is already gone is skipped and drift does not matter; an
/// object with the environment's names that is not the environment's is
/// refused before anything is removed.
pub async fn down(
    config: &Config,
    options: DownOptions,
    reporter: &dyn Reporter,
) -> Result<DownReport, Error> {
    let docker = docker::connect().await?;
    let _lock = lock::environment(config, reporter).await?;
    ownership::check(&docker, config).await?;
    let mut report = DownReport {
        name: config.name.clone(),
        ..DownReport::default()
    };
    if config.cluster.provider != Provider::Existing {
        report.node = cluster::remove(&docker, config).await?;
    }
    report.registry = registry::remove(&docker, config).await?;
    if options.purge && config.registry.external.is_none() {
        report.volume = docker::remove_volume(&docker, &config.registry.volume).await?;
        // Digests recorded for images that no longer exist would pin
        // manifests to nothing.
        State::update(&config.state_dir(), |state| state.images.clear())?;
    }
    if options.network && plan::needs_network(config) {
        report.network = network::remove(&docker, &config.network.name).await?;
    }
    // `dev reset --purge` leaves nothing behind: the state (kubeconfigs,
    // the registry's port, the lock file) goes too.
    if options == DownOptions::RESET_PURGE {
        report.state = remove_state(&config.state_dir())?;
    }
    Ok(report)
}

impl std::fmt::Display for DownReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let removed: Vec<&str> = [
            (self.node, "node"),
            (self.registry, "registry container"),
            (self.volume, "registry volume"),
            (self.network, "network"),
            (self.state, "state"),
        ]
        .into_iter()
        .filter_map(|(done, what)| done.then_some(what))
        .collect();
        if removed.is_empty() {
            write!(f, "`{}` is already down: nothing to remove", self.name)
        } else {
            write!(f, "removed {} of `{}`", removed.join(", "), self.name)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_down_report_names_only_what_was_removed() {
        let mut report = DownReport {
            name: String::from("demo"),
            ..DownReport::default()
        };
        assert_eq!(
            report.to_string(),
            "`demo` is already down: nothing to remove"
        );
        report.node = true;
        report.volume = true;
        assert_eq!(
            report.to_string(),
            "removed node, registry volume of `demo`"
        );
    }
}
