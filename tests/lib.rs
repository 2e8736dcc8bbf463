//! Shared fixtures for the integration tests in `it/`.

use std::path::{Path, PathBuf};

/// The repository root.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ lives below the root")
        .to_path_buf()
}
