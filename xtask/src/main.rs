//! `cargo xtask`: the repository's dev-loop commands. dev-env's commands
//! come from `dev_env_cli`, as in any workspace that uses dev-env; `test`
//! and `bench` are this repository's own. This binary only parses the
//! command line and dispatches; the libraries do the work.

mod bench;
mod flags;
mod test;

use std::{path::Path, process::ExitCode};

use clap::Parser;
use dev_env_cli::Ctx;

fn main() -> ExitCode {
    let flags = flags::Xtask::parse();
    let ctx = &Ctx::new(&flags.global, Path::new(env!("CARGO_MANIFEST_DIR")));
    dev_env_cli::exit(match flags.cmd {
        flags::Cmd::DevEnv(cmd) => cmd.run(ctx),
        flags::Cmd::Test(cmd) => cmd.run(ctx),
        flags::Cmd::Bench(cmd) => cmd.run(ctx),
    })
}
