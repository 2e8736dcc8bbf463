//! The `cargo` backend: a statically linked release build of one binary,
//! packed into a single-layer image with no daemon involved.
//!
//! The build has its own target directory (`target/image-build`), so the
//! flags it needs (`+crt-static`, path remapping) never invalidate the
//! workspace's everyday build. Paths of the workspace and of the cargo home
//! are remapped, so the binary, and with it the digest, does not depend on
//! where the checkout lives.

use std::path::{Path, PathBuf};

use xshell::{Shell, cmd};

use super::oci;

/// The only target installed here that links fully static binaries.
pub const TARGET: &str = "x86_64-unknown-linux-gnu";
/// The target directory of image builds, relative to the workspace root.
pub const TARGET_DIR: &str = "target/image-build";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot run `cargo build` in {}: {source}", dir.display())]
    Spawn {
        dir: PathBuf,
        #[source]
        source: xshell::Error,
    },
    #[error(
        "`cargo build --release -p {package} --bin {bin}` failed; last lines of its output:\n{tail}"
    )]
    Failed {
        package: String,
        bin: String,
        tail: String,
    },
    #[error("cannot read the built binary {}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// What to build: package `package`'s binary `bin` in the workspace at `root`.
#[derive(Debug, Clone)]
pub struct Build<'a> {
    pub root: &'a Path,
    pub package: &'a str,
    pub bin: &'a str,
    /// Stream cargo's output instead of showing it only on failure.
    pub verbose: bool,
}

/// Builds the binary and assembles its image. Blocking: run it off the
/// async runtime.
pub fn build_image(build: &Build<'_>) -> Result<oci::Image, Error> {
    let binary = build_binary(build)?;
    let bytes = std::fs::read(&binary).map_err(|source| Error::Read {
        path: binary.clone(),
        source,
    })?;
    Ok(oci::binary_image(build.bin, bytes))
}

/// Runs the release build and returns the path of the binary.
pub fn build_binary(build: &Build<'_>) -> Result<PathBuf, Error> {
    let spawn = |source| Error::Spawn {
        dir: build.root.to_path_buf(),
        source,
    };
    let sh = Shell::new().map_err(spawn)?;
    sh.change_dir(build.root);
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| String::from("cargo"));
    let target_dir = build.root.join(TARGET_DIR);
    let (package, bin) = (build.package, build.bin);
    let cmd = cmd!(
        sh,
        "{cargo} build --release -p {package} --bin {bin} --target {TARGET}"
    )
    .env("CARGO_TARGET_DIR", &target_dir)
    .env("CARGO_ENCODED_RUSTFLAGS", rustflags(build.root))
    .env_remove("RUSTFLAGS")
    .quiet();
    if build.verbose {
        cmd.run().map_err(|_| Error::Failed {
            package: package.to_string(),
            bin: bin.to_string(),
            tail: String::from("(shown above)"),
        })?;
    } else {
        let output = cmd.ignore_status().output().map_err(spawn)?;
        if !output.status.success() {
            return Err(Error::Failed {
                package: package.to_string(),
                bin: bin.to_string(),
                tail: tail(&String::from_utf8_lossy(&output.stderr), 30),
            });
        }
    }
    Ok(target_dir.join(TARGET).join("release").join(bin))
}

/// The flags of an image build, `\x1f`-separated as `CARGO_ENCODED_RUSTFLAGS`
/// wants them (paths may hold spaces).
fn rustflags(root: &Path) -> String {
    let mut flags = vec![
        String::from("-C"),
        String::from("target-feature=+crt-static"),
        format!("--remap-path-prefix={}=/build", root.display()),
    ];
    if let Some(home) = cargo_home() {
        flags.push(format!("--remap-path-prefix={}=/cargo", home.display()));
    }
    flags.join("\x1f")
}

fn cargo_home() -> Option<PathBuf> {
    if let Some(home) = std::env::var_os("CARGO_HOME") {
        return Some(PathBuf::from(home));
    }
    std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cargo"))
}

/// The last `n` lines of `text`.
pub fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.trim_end().lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rustflags_link_statically_and_remap_the_workspace() {
        let flags = rustflags(Path::new("/src/my repo"));
        let flags: Vec<&str> = flags.split('\x1f').collect();
        assert_eq!(flags[..2], ["-C", "target-feature=+crt-static"]);
        assert_eq!(flags[2], "--remap-path-prefix=/src/my repo=/build");
    }

    #[test]
    fn tail_keeps_the_last_lines() {
        assert_eq!(tail("a\nb\nc\n", 2), "b\nc");
        assert_eq!(tail("a", 5), "a");
    }
}
