//! dev-env's command line as a library: the `dev`, `push-image`, `reload`,
//! `watch` and `forward` commands, their flags (clap derive; doc comments
//! are the help) and how their events and results are printed. A
//! workspace's `xtask/src/main.rs` hands over to [`main`], or parses a
//! command line of its own that flattens [`Command`] beside its own
//! subcommands and runs it with [`Command::run`].
//!
//! Like `xtask`, this crate only parses, dispatches and prints: the work is
//! `dev-env`'s.

#[macro_use]
pub mod output;
mod dev;
pub mod flags;
mod forward;
mod push_image;
mod reload;
pub mod report;
mod summary;
mod watch;

use std::{
    path::{Path, PathBuf},
    process::ExitCode,
};

use anyhow::Context as _;
use clap::Parser;
use dev_env::config::{Config, DEFAULT_CONFIG_FILE};

pub use flags::{Command, Global};

/// The Kubernetes inner dev loop: a local registry and cluster on Docker,
/// images built and pushed, rollouts that wait for the pushed digest.
#[derive(Debug, Parser)]
#[command(
    name = "cargo xtask",
    bin_name = "cargo xtask",
    disable_version_flag = true
)]
pub struct Cli {
    #[command(flatten)]
    pub global: Global,
    #[command(subcommand)]
    pub cmd: Command,
}

/// Parses the command line and runs it in the workspace around
/// `manifest_dir` (the xtask's `env!("CARGO_MANIFEST_DIR")`), then ends the
/// process with the command's exit code.
pub fn main(manifest_dir: &str) -> ExitCode {
    let cli = Cli::parse();
    let ctx = Ctx::new(&cli.global, Path::new(manifest_dir));
    exit(cli.cmd.run(&ctx))
}

/// The exit code of a command's result: an error is printed as
/// `error: <chain>` and exits 1.
pub fn exit(result: anyhow::Result<ExitCode>) -> ExitCode {
    match result {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {}", dev_env::error_chain(err.as_ref()));
            ExitCode::FAILURE
        }
    }
}

impl Command {
    /// Runs the command.
    pub fn run(self, ctx: &Ctx) -> anyhow::Result<ExitCode> {
        match self {
            Command::Dev(cmd) => cmd.run(ctx),
            Command::PushImage(cmd) => cmd.run(ctx),
            Command::Reload(cmd) => cmd.run(ctx),
            Command::Watch(cmd) => cmd.run(ctx),
            Command::Forward(cmd) => cmd.run(ctx),
        }
    }
}

/// What every command needs besides its own flags.
pub struct Ctx {
    root: PathBuf,
    config_path: PathBuf,
    pub verbose: bool,
    pub quiet: bool,
}

impl Ctx {
    /// The context of a command run in the cargo workspace around
    /// `manifest_dir`: its root holds the default environment file.
    pub fn new(global: &Global, manifest_dir: &Path) -> Ctx {
        let root = dev_env::config::workspace_root(manifest_dir);
        let config_path = match &global.config {
            Some(path) => std::path::absolute(path).unwrap_or_else(|_| path.clone()),
            None => root.join(DEFAULT_CONFIG_FILE),
        };
        Ctx {
            root,
            config_path,
            verbose: global.verbose,
            quiet: global.quiet,
        }
    }

    /// The root of the cargo workspace the command runs in.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Where the environment file is.
    pub fn config_path(&self) -> &Path {
        &self.config_path
    }

    /// Reads and validates the environment file.
    pub fn config(&self) -> anyhow::Result<Config> {
        Ok(Config::load(&self.config_path)?)
    }

    /// Reads only what names the environment's objects, for teardown: it
    /// works when manifests, Dockerfiles or packages are gone.
    pub fn identity(&self) -> anyhow::Result<Config> {
        Ok(Config::load_identity(&self.config_path)?)
    }

    /// The reporter of a command: JSON lines with `--json`, nothing with
    /// `--quiet`, otherwise lines (and bars on a terminal).
    pub fn reporter(&self, json: bool) -> report::Terminal {
        report::Terminal::new(match (json, self.quiet) {
            (true, _) => report::Style::Json,
            (false, true) => report::Style::Quiet,
            (false, false) => report::Style::Human,
        })
    }

    /// Prints a progress line on stderr unless `--quiet`: stdout is for
    /// results (and only JSON with `--json`).
    pub fn note(&self, line: impl std::fmt::Display) {
        if !self.quiet {
            eprintln!("{line}");
        }
    }

    /// Prints a result line on stdout unless `--quiet`.
    pub fn say(&self, line: impl std::fmt::Display) {
        if !self.quiet {
            outln!("{line}");
        }
    }

    /// Runs `fut` on a multi-threaded runtime.
    pub fn block_on<F: std::future::Future>(&self, fut: F) -> anyhow::Result<F::Output> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .context("starting the async runtime")?;
        Ok(rt.block_on(fut))
    }
}
