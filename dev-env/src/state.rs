//! What the harness learns and must remember between runs: the registry
//! port it picked, the node's join token, the last digest pushed for each
//! component. Kept as `state.json` in [`Config::state_dir`], beside the
//! kubeconfigs. Every write goes to a temporary file in the same directory
//! and is renamed over the old one, so a crash never leaves a torn file.
//!
//! [`Config::state_dir`]: crate::config::Config::state_dir

use std::{
    collections::BTreeMap,
    io::Write,
    path::{Path, PathBuf},
};

use serde::{Deserialize, Serialize};

pub const STATE_FILE: &str = "state.json";

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct State {
    /// The host port of the registry once one was chosen.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub registry_port: Option<u16>,
    /// The host port the node's API server is published on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_port: Option<u16>,
    /// `K3S_TOKEN` of the node, generated once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_token: Option<String>,
    /// The last successful push of each component.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub images: BTreeMap<String, PushedImage>,
    /// The platform of the cluster's nodes, as the last `dev up` found it:
    /// what images are built for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub platform: Option<crate::platform::Platform>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PushedImage {
    /// `sha256:<hex>` of the manifest, as the registry serves it.
    pub digest: String,
    /// The repository path the image was pushed under.
    pub repository: String,
    /// The cargo profile its binary was built with; `None` for a Docker
    /// build that builds none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot read {}; check its permissions, or delete it to start over (`cargo xtask dev up` rebuilds it, pushing the components again)", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{} is not valid state; delete it and run `cargo xtask dev up` again", path.display())]
    Corrupt {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error("cannot write {}; check that its directory is writable and the disk is not full", path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl State {
    /// Reads the state in `dir`; a missing file is an empty state.
    pub fn load(dir: &Path) -> Result<State, Error> {
        let path = dir.join(STATE_FILE);
        match std::fs::read(&path) {
            Ok(bytes) => {
                serde_json::from_slice(&bytes).map_err(|source| Error::Corrupt { path, source })
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(State::default()),
            Err(source) => Err(Error::Read { path, source }),
        }
    }

    /// Reads the state in `dir`, lets `change` modify it, and writes it
    /// back when it changed: the one way state is written, so a value
    /// another command recorded is never overwritten with an older copy.
    /// Callers hold the environment's lock (see `lock`).
    pub fn update(dir: &Path, change: impl FnOnce(&mut State)) -> Result<State, Error> {
        // Steps of one process that share a lock session write one at a time.
        static WRITING: std::sync::Mutex<()> = std::sync::Mutex::new(());
        let _writing = WRITING.lock().unwrap_or_else(|p| p.into_inner());
        let before = State::load(dir)?;
        let mut after = before.clone();
        change(&mut after);
        if after != before {
            after.save(dir)?;
        }
        Ok(after)
    }

    /// Writes the state into `dir`, creating it when needed.
    pub fn save(&self, dir: &Path) -> Result<(), Error> {
        let mut bytes = serde_json::to_vec_pretty(self).expect("state serializes");
        bytes.push(b'\n');
        write_atomic(&dir.join(STATE_FILE), &bytes, 0o600)
    }
}

/// Replaces `path` with `contents` in one rename, with permission `mode`
/// from the moment the file exists.
pub fn write_atomic(path: &Path, contents: &[u8], mode: u32) -> Result<(), Error> {
    use std::os::unix::fs::PermissionsExt;

    let err = |source| Error::Write {
        path: path.to_path_buf(),
        source,
    };
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(err)?;
    // tempfile creates the file with mode 0600 already.
    let mut tmp = tempfile::NamedTempFile::new_in(dir).map_err(err)?;
    tmp.write_all(contents).map_err(err)?;
    tmp.as_file()
        .set_permissions(std::fs::Permissions::from_mode(mode))
        .map_err(err)?;
    tmp.as_file().sync_all().map_err(err)?;
    tmp.persist(path).map_err(|e| err(e.error))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    #[test]
    fn missing_state_is_empty_and_saved_state_round_trips() {
        let dir = tempfile::tempdir().unwrap();
        let nested = dir.path().join("a/b");
        assert_eq!(State::load(&nested).unwrap(), State::default());
        let mut state = State {
            registry_port: Some(5001),
            ..State::default()
        };
        state.images.insert(
            "worker".into(),
            PushedImage {
                digest: format!("sha256:{}", "0".repeat(64)),
                repository: "demo/worker".into(),
                profile: Some("dev".into()),
            },
        );
        state.platform = Some(crate::platform::Platform::linux("aarch64"));
        state.save(&nested).unwrap();
        assert_eq!(State::load(&nested).unwrap(), state);
        let mode = std::fs::metadata(nested.join(STATE_FILE))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        // Only the state file is left: no temporary files.
        assert_eq!(std::fs::read_dir(&nested).unwrap().count(), 1);
    }

    #[test]
    fn corrupt_state_says_how_to_recover() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(STATE_FILE), "{not json").unwrap();
        let err = State::load(dir.path()).unwrap_err().to_string();
        assert!(err.contains("delete it"), "{err}");
    }
}
