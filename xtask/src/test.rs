//! `cargo xtask test`: what CI runs. rustfmt and clippy first (they are
//! quick to fail), then every test of the workspace under cargo-nextest.

use std::process::ExitCode;

use anyhow::Context as _;
use xshell::{Shell, cmd};

use dev_env_cli::Ctx;

use crate::flags;

impl flags::Test {
    pub(crate) fn run(self, ctx: &Ctx) -> anyhow::Result<ExitCode> {
        let sh = &Shell::new()?;
        sh.change_dir(ctx.root());
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| String::from("cargo"));
        if !self.no_lint {
            ctx.say("== cargo fmt --check");
            cmd!(sh, "{cargo} fmt --all --check")
                .run()
                .context("code is not formatted: run `cargo fmt --all`")?;
            ctx.say("== cargo clippy");
            cmd!(
                sh,
                "{cargo} clippy --workspace --all-targets --quiet -- -D warnings"
            )
            .run()
            .context("clippy found problems (above)")?;
        }
        ctx.say("== cargo nextest run --workspace");
        cmd!(sh, "{cargo} nextest --version")
            .quiet()
            .ignore_stdout()
            .run()
            .context("cargo-nextest is required: `cargo install --locked cargo-nextest`")?;
        let args = &self.nextest_args;
        cmd!(
            sh,
            "{cargo} nextest run --workspace --no-fail-fast {args...}"
        )
        .run()
        .context("tests failed (above)")?;
        Ok(ExitCode::SUCCESS)
    }
}
