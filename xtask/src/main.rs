//! `cargo xtask`: the repository's dev-loop commands. This binary only
//! parses the command line and dispatches; the `dev-env` library does the
//! work.

#[macro_use]
mod output;
mod bench;
mod dev;
mod flags;
mod forward;
mod push_image;
mod reload;
mod report;
mod summary;
mod test;
mod watch;

use std::{
    path::{Path, PathBuf},
    process::ExitCode,
};

use anyhow::Context as _;
use clap::Parser;
use dev_env::config::{Config, DEFAULT_CONFIG_FILE};
use xshell::Shell;

fn main() -> ExitCode {
    let flags = flags::Xtask::parse();
    match try_main(flags) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {}", dev_env::error_chain(err.as_ref()));
            ExitCode::FAILURE
        }
    }
}

fn try_main(flags: flags::Xtask) -> anyhow::Result<ExitCode> {
    let sh = &Shell::new()?;
    sh.change_dir(project_root());
    let ctx = &Ctx::new(&flags.global);
    match flags.cmd {
        flags::Cmd::Dev(cmd) => cmd.run(sh, ctx),
        flags::Cmd::PushImage(cmd) => cmd.run(sh, ctx),
        flags::Cmd::Reload(cmd) => cmd.run(sh, ctx),
        flags::Cmd::Watch(cmd) => cmd.run(ctx),
        flags::Cmd::Forward(cmd) => cmd.run(ctx),
        flags::Cmd::Test(cmd) => cmd.run(sh, ctx),
        flags::Cmd::Bench(cmd) => cmd.run(ctx),
    }
}

/// The repository root: the parent of this crate.
pub(crate) fn project_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives one level below the root")
        .to_path_buf()
}

/// What every command needs besides its own flags.
pub(crate) struct Ctx {
    config_path: PathBuf,
    pub(crate) verbose: bool,
    pub(crate) quiet: bool,
}

impl Ctx {
    fn new(global: &flags::Global) -> Ctx {
        let config_path = match &global.config {
            Some(path) => std::path::absolute(path).unwrap_or_else(|_| path.clone()),
            None => project_root().join(DEFAULT_CONFIG_FILE),
        };
        Ctx {
            config_path,
            verbose: global.verbose,
            quiet: global.quiet,
        }
    }

    /// Where the environment file is.
    pub(crate) fn config_path(&self) -> &Path {
        &self.config_path
    }

    /// Reads and validates the environment file.
    pub(crate) fn config(&self) -> anyhow::Result<Config> {
        Ok(Config::load(&self.config_path)?)
    }

    /// Reads only what names the environment's objects, for teardown: it
    /// works when manifests, Dockerfiles or packages are gone.
    pub(crate) fn identity(&self) -> anyhow::Result<Config> {
        Ok(Config::load_identity(&self.config_path)?)
    }

    /// The reporter of a command: JSON lines with `--json`, nothing with
    /// `--quiet`, otherwise lines (and bars on a terminal).
    pub(crate) fn reporter(&self, json: bool) -> report::Terminal {
        report::Terminal::new(match (json, self.quiet) {
            (true, _) => report::Style::Json,
            (false, true) => report::Style::Quiet,
            (false, false) => report::Style::Human,
        })
    }

    /// Prints a progress line on stderr unless `--quiet`: stdout is for
    /// results (and only JSON with `--json`).
    pub(crate) fn note(&self, line: impl std::fmt::Display) {
        if !self.quiet {
            eprintln!("{line}");
        }
    }

    /// Prints a result line on stdout unless `--quiet`.
    pub(crate) fn say(&self, line: impl std::fmt::Display) {
        if !self.quiet {
            outln!("{line}");
        }
    }

    /// Runs `fut` on a multi-threaded runtime.
    #[allow(
        dead_code,
        reason = "used by the commands that talk to Docker and Kubernetes"
    )]
    pub(crate) fn block_on<F: std::future::Future>(&self, fut: F) -> anyhow::Result<F::Output> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .context("starting the async runtime")?;
        Ok(rt.block_on(fut))
    }
}
