//! The `cargo` backend: a static Linux build of one binary, for the
//! cluster's platform and with the component's profile (`dev` by default,
//! incremental), packed into a single-layer image with no daemon involved.
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
use crate::platform::RustTarget;

mod progress;

pub use progress::{Progress, ProgressSender};

/// The target `cargo metadata` resolves the workspace's graph for.
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
    #[error("`{command}` failed; last lines of its output:\n{tail}")]
    Failed { command: String, tail: String },
    #[error("cannot run `cargo build` in {}", dir.display())]
    Run {
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "`{command}` did not finish within {} minutes and was stopped; last lines of its output:\n{tail}",
        after.as_secs() / 60
    )]
    Deadline {
        command: String,
        after: Duration,
        tail: String,
    },
    #[error("`{command}` was stopped: a newer save supersedes it")]
    Cancelled { command: String },
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
    /// The target directory: [`TARGET_DIR`] under the workspace root for
    /// components.
    pub target_dir: PathBuf,
    /// The cargo profile, such as `dev` or `release`.
    pub profile: String,
    /// `cargo --config` values this build adds, such as
    /// `profile.release.opt-level=1`.
    pub tuning: &'static [&'static str],
    /// The target triple, the tool that builds it and the platform it runs.
    pub target: RustTarget,
    /// Where cargo's output goes line by line as it comes (`--verbose`);
    /// `None` shows it only on failure.
    pub lines: Option<LineSender>,
    /// Where the count of compiled crates goes while crates compile.
    pub progress: Option<ProgressSender>,
    /// Set to stop the build (its process is killed).
    pub cancel: Option<Cancel>,
}

/// A flag that stops a running build when set.
pub type Cancel = std::sync::Arc<std::sync::atomic::AtomicBool>;

/// The sending end of a build's output, line by line.
pub type LineSender = tokio::sync::mpsc::UnboundedSender<String>;

/// Where a build's output and progress are reported.
#[derive(Clone, Copy)]
pub struct Sinks<'a> {
    /// Every line cargo prints, as it comes (`--verbose`).
    pub lines: Option<&'a dyn crate::report::Reporter>,
    /// How many crates are compiled, while crates compile.
    pub progress: Option<&'a dyn crate::report::Reporter>,
    /// What is built, as progress names it.
    pub what: &'a str,
}

/// Runs `step` (a blocking cargo build) off the async runtime, reporting
/// its lines and progress to `sinks`.
pub async fn off_runtime<T: Send + 'static>(
    build: CargoBuild<'_>,
    step: fn(&CargoBuild<'_>) -> Result<T, Error>,
    sinks: Sinks<'_>,
) -> Result<T, Error> {
    let (root, target_dir, package, bin, cancel) = (
        build.root.to_path_buf(),
        build.target_dir.clone(),
        build.package.to_string(),
        build.bin.to_string(),
        build.cancel.clone(),
    );
    let (profile, tuning, target) = (build.profile.clone(), build.tuning, build.target.clone());
    let (line_sender, mut lines) = tokio::sync::mpsc::unbounded_channel();
    let (progress_sender, mut progress) = tokio::sync::mpsc::unbounded_channel();
    let line_sender = sinks.lines.is_some().then_some(line_sender);
    let progress_sender = sinks.progress.is_some().then_some(progress_sender);
    let running = tokio::task::spawn_blocking(move || {
        step(&CargoBuild {
            root: &root,
            target_dir,
            package: &package,
            bin: &bin,
            profile,
            tuning,
            target,
            lines: line_sender,
            progress: progress_sender,
            cancel,
        })
    });
    // Both channels close when the build ends and drops its senders.
    let (mut lines_open, mut progress_open) = (true, true);
    while lines_open || progress_open {
        tokio::select! {
            line = lines.recv(), if lines_open => match (line, sinks.lines) {
                (Some(line), Some(to)) => to.report(&crate::report::Event::BuildOutput { line }),
                (Some(_), None) => {}
                (None, _) => lines_open = false,
            },
            step = progress.recv(), if progress_open => match (step, sinks.progress) {
                (Some(p), Some(to)) => to.report(&crate::report::Event::BuildProgress {
                    what: sinks.what.to_string(),
                    done: p.done,
                    total: p.total,
                }),
                (Some(_), None) => {}
                (None, _) => progress_open = false,
            },
        }
    }
    running.await.expect("the cargo build task does not panic")
}

/// Builds the binary and assembles its image. Blocking: run it off the
/// async runtime.
pub fn build_image(build: &CargoBuild<'_>) -> Result<oci::Image, Error> {
    let binary = build_binary(build)?;
    super::kept::binary_image(&binary, build.bin, &build.target.platform).map_err(|source| {
        Error::Read {
            path: binary.clone(),
            source,
        }
    })
}

impl CargoBuild<'_> {
    /// The command as a person would type it.
    pub fn command(&self) -> String {
        format!(
            "cargo {} --profile {} -p {} --bin {} --target {}",
            self.target.tool.subcommand(),
            self.profile,
            self.package,
            self.bin,
            self.target.triple
        )
    }

    /// Where the build leaves the binary: cargo names the directory of the
    /// `dev` and `test` profiles `debug`, of `bench` `release`, of the
    /// others after the profile.
    pub fn binary(&self) -> PathBuf {
        let dir = match self.profile.as_str() {
            "dev" | "test" => "debug",
            "bench" => "release",
            other => other,
        };
        self.target_dir
            .join(&self.target.triple)
            .join(dir)
            .join(self.bin)
    }
}

/// Runs the build and returns the path of the binary.
pub fn build_binary(build: &CargoBuild<'_>) -> Result<PathBuf, Error> {
    let spawn = |source| Error::Spawn {
        dir: build.root.to_path_buf(),
        source,
    };
    let sh = Shell::new().map_err(spawn)?;
    sh.change_dir(build.root);
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| String::from("cargo"));
    let target_dir = &build.target_dir;
    let (package, bin, profile) = (build.package, build.bin, &build.profile);
    let (subcommand, triple) = (build.target.tool.subcommand(), &build.target.triple);
    let config = build.tuning.iter().flat_map(|c| ["--config", c]);
    let cmd = cmd!(
        sh,
        "{cargo} {subcommand} --profile {profile} -p {package} --bin {bin} --target {triple} {config...} --message-format json-render-diagnostics"
    )
    .env("CARGO_TARGET_DIR", target_dir)
    .env(
        "CARGO_ENCODED_RUSTFLAGS",
        rustflags(build.root, build.target.crt_static),
    )
    .env_remove("RUSTFLAGS");
    let limits = Limits {
        timeout: BUILD_TIMEOUT,
        cancel: build.cancel.as_ref(),
    };
    let (root, cargo_bin) = (build.root.to_path_buf(), cargo.clone());
    let (package_name, progress) = (package.to_string(), build.progress.as_ref());
    let triple_name = triple.clone();
    let total = move || crate_count(&root, &cargo_bin, &package_name, &triple_name);
    let watch = Watch {
        lines: build.lines.as_ref(),
        progress: progress.map(|p| (p, Box::new(total) as Total)),
    };
    let (status, stderr) =
        run_with_deadline(cmd.into(), watch, limits).map_err(|source| Error::Run {
            dir: build.root.to_path_buf(),
            source,
        })?;
    if build
        .cancel
        .as_ref()
        .is_some_and(|c| c.load(Ordering::Relaxed))
        && status.is_none()
    {
        return Err(Error::Cancelled {
            command: build.command(),
        });
    }
    let Some(status) = status else {
        return Err(Error::Deadline {
            command: build.command(),
            after: BUILD_TIMEOUT,
            tail: tail(&stderr, 30),
        });
    };
    if !status.success() {
        return Err(Error::Failed {
            command: build.command(),
            tail: if build.lines.is_some() {
                String::from("(shown above)")
            } else {
                tail(&stderr, 30)
            },
        });
    }
    Ok(build.binary())
}

/// The packages of the build of `package`, as `cargo tree` lists them for
/// the image target; `None` when it cannot tell.
fn crate_count(root: &Path, cargo: &str, package: &str, triple: &str) -> Option<usize> {
    let sh = Shell::new().ok()?;
    sh.change_dir(root);
    let format = "{p}";
    let tree = cmd!(
        sh,
        "{cargo} tree -p {package} --target {triple} -e normal,build --prefix none --format {format}"
    )
    .quiet()
    .ignore_stderr()
    .read()
    .ok()?;
    Some(progress::packages_in_tree(&tree))
}

/// Asks for the number of crates of a build.
type Total = Box<dyn FnOnce() -> Option<usize> + Send>;

/// Who follows a running build: its stderr line by line, its progress.
#[derive(Default)]
struct Watch<'a> {
    lines: Option<&'a LineSender>,
    progress: Option<(&'a ProgressSender, Total)>,
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
    watch: Watch<'_>,
    limits: Limits<'_>,
) -> std::io::Result<(Option<ExitStatus>, String)> {
    let stdout = match watch.progress {
        Some(_) => Stdio::piped(),
        None => Stdio::null(),
    };
    command
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(Stdio::piped());
    let mut child = command.spawn()?;
    let lines = watch.lines;
    // cargo's messages are read on the side too.
    let follower = child
        .stdout
        .take()
        .zip(watch.progress)
        .map(|(out, (to, total))| {
            let to = to.clone();
            std::thread::spawn(move || progress::follow(out, &to, total))
        });
    // Read stderr on the side, so a full pipe never stalls the build; its
    // end (the child exits, or at least closes it) is told at once.
    let (closed_tx, closed) = std::sync::mpsc::channel::<()>();
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
            drop(closed_tx);
            captured
        })
    });
    let status = wait_within(&mut child, &closed, &limits)?;
    let stderr = reader.and_then(|r| r.join().ok()).unwrap_or_default();
    if let Some(follower) = follower {
        let _ = follower.join();
    }
    Ok((status, stderr))
}

/// How often a running child is checked for cancellation and its deadline.
const POLL: Duration = Duration::from_millis(50);

/// Waits for `child` to exit, unless `limits` stop it first (then kills it:
/// `None`). A child that closed its stderr (`closed` disconnects) is about
/// to exit, so it is checked every millisecond from then on instead of
/// every [`POLL`]: a build's end is seen at once.
fn wait_within(
    child: &mut std::process::Child,
    closed: &std::sync::mpsc::Receiver<()>,
    limits: &Limits<'_>,
) -> std::io::Result<Option<ExitStatus>> {
    let deadline = Instant::now() + limits.timeout;
    let mut exiting = false;
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(Some(status));
        }
        let cancelled = limits.cancel.is_some_and(|c| c.load(Ordering::Relaxed));
        if cancelled || Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Ok(None);
        }
        if exiting {
            std::thread::sleep(Duration::from_millis(1));
        } else if let Err(std::sync::mpsc::RecvTimeoutError::Disconnected) =
            closed.recv_timeout(POLL)
        {
            exiting = true;
        }
    }
}

/// The flags of an image build, `\x1f`-separated as `CARGO_ENCODED_RUSTFLAGS`
/// wants them (paths may hold spaces): a static C runtime when the target
/// needs it, and the paths remapped.
fn rustflags(root: &Path, crt_static: bool) -> String {
    let mut flags = Vec::new();
    if crt_static {
        flags.extend([
            String::from("-C"),
            String::from("target-feature=+crt-static"),
        ]);
    }
    flags.push(format!("--remap-path-prefix={}=/build", root.display()));
    if let Some(home) = cargo_home() {
        flags.push(format!("--remap-path-prefix={}=/cargo", home.display()));
    }
    flags.join("\x1f")
}

/// Cargo's home: `$CARGO_HOME`, else `~/.cargo`.
pub(crate) fn cargo_home() -> Option<PathBuf> {
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
        let flags = rustflags(Path::new("/src/my repo"), true);
        let flags: Vec<&str> = flags.split('\x1f').collect();
        assert_eq!(flags[..2], ["-C", "target-feature=+crt-static"]);
        assert_eq!(flags[2], "--remap-path-prefix=/src/my repo=/build");
        // A musl target is static already.
        let flags = rustflags(Path::new("/src"), false);
        assert!(
            flags.starts_with("--remap-path-prefix=/src=/build"),
            "{flags}"
        );
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
        let (status, _) =
            run_with_deadline(cmd!(sh, "sleep 30").into(), Watch::default(), limits).unwrap();
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
            Watch::default(),
            within(Duration::from_millis(100)),
        )
        .unwrap();
        assert_eq!(status, None);
        let (status, stderr) = run_with_deadline(
            cmd!(sh, "sh -c 'echo oops >&2; exit 3'").into(),
            Watch::default(),
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
            Watch {
                lines: Some(&sender),
                progress: None,
            },
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
