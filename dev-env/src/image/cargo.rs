//! The `cargo` backend: a statically linked release build of one binary,
//! packed into a single-layer image with no daemon involved.
//!
//! The build has its own target directory (`target/image-build`), so the
//! flags it needs (`+crt-static`, path remapping) never invalidate the
//! workspace's everyday build. Paths of the workspace and of the cargo home
//! are remapped, so the binary, and with it the digest, does not depend on
//! where the checkout lives.

use std::sync::atomic::Ordering;
use std::{
    io::BufRead,
    path::{Path, PathBuf},
    process::{Command, ExitStatus, Stdio},
    time::{Duration, Instant},
};

use xshell::{Shell, cmd};

use super::oci;

/// The only target installed here that links fully static binaries.
pub const TARGET: &str = "x86_64-unknown-linux-gnu";
/// The target directory of image builds, relative to the workspace root.
pub const TARGET_DIR: &str = "target/image-build";
/// How long a release build may run: a cold build of a large crate graph
/// on two cores takes minutes, never an hour.
pub const BUILD_TIMEOUT: Duration = Duration::from_secs(60 * 60);

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot run `cargo build` in {}", dir.display())]
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
    #[error("cannot run `cargo build` in {}", dir.display())]
    Run {
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "`cargo build --release -p {package} --bin {bin}` did not finish within {} minutes and was stopped; last lines of its output:\n{tail}",
        after.as_secs() / 60
    )]
    Deadline {
        package: String,
        bin: String,
        after: Duration,
        tail: String,
    },
    #[error(
        "`cargo build --release -p {package} --bin {bin}` was stopped: a newer save supersedes it"
    )]
    Cancelled { package: String, bin: String },
    #[error("cannot read the built binary {}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// What to build: package `package`'s binary `bin` in the workspace at `root`.
#[derive(Debug, Clone)]
pub struct CargoBuild<'a> {
    pub root: &'a Path,
    pub package: &'a str,
    pub bin: &'a str,
    /// Where cargo's output goes line by line as it comes (`--verbose`);
    /// `None` shows it only on failure.
    pub lines: Option<LineSender>,
    /// Set to stop the build (its process is killed).
    pub cancel: Option<Cancel>,
}

/// A flag that stops a running build when set.
pub type Cancel = std::sync::Arc<std::sync::atomic::AtomicBool>;

/// The sending end of a build's output, line by line.
pub type LineSender = tokio::sync::mpsc::UnboundedSender<String>;

/// Runs `step` (a blocking cargo build) off the async runtime; with
/// `output`, every line cargo prints is reported as it comes.
pub async fn off_runtime<T: Send + 'static>(
    build: CargoBuild<'_>,
    step: fn(&CargoBuild<'_>) -> Result<T, Error>,
    output: Option<&dyn crate::report::Reporter>,
) -> Result<T, Error> {
    let (root, package, bin, cancel) = (
        build.root.to_path_buf(),
        build.package.to_string(),
        build.bin.to_string(),
        build.cancel.clone(),
    );
    let (sender, mut receiver) = tokio::sync::mpsc::unbounded_channel();
    let lines = output.is_some().then_some(sender);
    let running = tokio::task::spawn_blocking(move || {
        step(&CargoBuild {
            root: &root,
            package: &package,
            bin: &bin,
            lines,
            cancel,
        })
    });
    // The channel closes when the build ends and drops its sender.
    while let Some(line) = receiver.recv().await {
        if let Some(output) = output {
            output.report(&crate::report::Event::BuildOutput { line });
        }
    }
    running.await.expect("the cargo build task does not panic")
}

/// Builds the binary and assembles its image. Blocking: run it off the
/// async runtime.
pub fn build_image(build: &CargoBuild<'_>) -> Result<oci::Image, Error> {
    let binary = build_binary(build)?;
    let bytes = std::fs::read(&binary).map_err(|source| Error::Read {
        path: binary.clone(),
        source,
    })?;
    Ok(oci::binary_image(build.bin, bytes))
}

/// Runs the release build and returns the path of the binary.
pub fn build_binary(build: &CargoBuild<'_>) -> Result<PathBuf, Error> {
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
    .env_remove("RUSTFLAGS");
    let limits = Limits {
        timeout: BUILD_TIMEOUT,
        cancel: build.cancel.as_ref(),
    };
    let (status, stderr) =
        run_with_deadline(cmd.into(), build.lines.as_ref(), limits).map_err(|source| {
            Error::Run {
                dir: build.root.to_path_buf(),
                source,
            }
        })?;
    if build
        .cancel
        .as_ref()
        .is_some_and(|c| c.load(Ordering::Relaxed))
        && status.is_none()
    {
        return Err(Error::Cancelled {
            package: package.to_string(),
            bin: bin.to_string(),
        });
    }
    let Some(status) = status else {
        return Err(Error::Deadline {
            package: package.to_string(),
            bin: bin.to_string(),
            after: BUILD_TIMEOUT,
            tail: tail(&stderr, 30),
        });
    };
    if !status.success() {
        return Err(Error::Failed {
            package: package.to_string(),
            bin: bin.to_string(),
            tail: if build.lines.is_some() {
                String::from("(shown above)")
            } else {
                tail(&stderr, 30)
            },
        });
    }
    Ok(target_dir.join(TARGET).join("release").join(bin))
}

/// When a build is stopped before it ends.
struct Limits<'a> {
    timeout: Duration,
    cancel: Option<&'a Cancel>,
}

/// Runs `command` until it exits, `timeout` passes or `cancel` is set (then
/// kills it). Its stderr is captured, and sent line by line to `lines` as
/// it comes; the exit status is `None` when it was stopped.
fn run_with_deadline(
    mut command: Command,
    lines: Option<&LineSender>,
    limits: Limits<'_>,
) -> std::io::Result<(Option<ExitStatus>, String)> {
    command
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut child = command.spawn()?;
    // Read stderr on the side, so a full pipe never stalls the build.
    let reader = child.stderr.take().map(|stderr| {
        let lines = lines.cloned();
        std::thread::spawn(move || {
            let mut captured = String::new();
            for line in std::io::BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if let Some(lines) = &lines {
                    let _ = lines.send(line.clone());
                }
                captured.push_str(&line);
                captured.push('\n');
            }
            captured
        })
    });
    let deadline = Instant::now() + limits.timeout;
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break Some(status);
        }
        let cancelled = limits.cancel.is_some_and(|c| c.load(Ordering::Relaxed));
        if cancelled || Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let stderr = reader.and_then(|r| r.join().ok()).unwrap_or_default();
    Ok((status, stderr))
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

    fn within(timeout: Duration) -> Limits<'static> {
        Limits {
            timeout,
            cancel: None,
        }
    }

    #[test]
    fn a_cancelled_command_is_stopped_at_once() {
        let sh = Shell::new().unwrap();
        let cancel = Cancel::default();
        let setter = cancel.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            setter.store(true, Ordering::Relaxed);
        });
        let started = std::time::Instant::now();
        let limits = Limits {
            timeout: Duration::from_secs(30),
            cancel: Some(&cancel),
        };
        let (status, _) = run_with_deadline(cmd!(sh, "sleep 30").into(), None, limits).unwrap();
        assert_eq!(status, None);
        let took = started.elapsed();
        assert!(
            took < Duration::from_secs(5),
            "stopped after {} ms",
            took.as_millis()
        );
    }

    #[test]
    fn a_command_past_its_deadline_is_stopped() {
        let sh = Shell::new().unwrap();
        let (status, _) = run_with_deadline(
            cmd!(sh, "sleep 5").into(),
            None,
            within(Duration::from_millis(100)),
        )
        .unwrap();
        assert_eq!(status, None);
        let (status, stderr) = run_with_deadline(
            cmd!(sh, "sh -c 'echo oops >&2; exit 3'").into(),
            None,
            within(Duration::from_secs(5)),
        )
        .unwrap();
        assert_eq!(status.and_then(|s| s.code()), Some(3));
        assert_eq!(stderr, "oops\n");
    }

    #[test]
    fn output_is_sent_line_by_line_and_still_captured() {
        let sh = Shell::new().unwrap();
        let (sender, mut receiver) = tokio::sync::mpsc::unbounded_channel();
        let (status, stderr) = run_with_deadline(
            cmd!(sh, "sh -c 'echo one >&2; echo two >&2'").into(),
            Some(&sender),
            within(Duration::from_secs(5)),
        )
        .unwrap();
        assert!(status.is_some_and(|s| s.success()));
        assert_eq!(stderr, "one\ntwo\n");
        let mut sent = Vec::new();
        while let Ok(line) = receiver.try_recv() {
            sent.push(line);
        }
        assert_eq!(sent, ["one", "two"]);
    }

    #[test]
    fn tail_keeps_the_last_lines() {
        assert_eq!(tail("a\nb\nc\n", 2), "b\nc");
        assert_eq!(tail("a", 5), "a");
    }
}
