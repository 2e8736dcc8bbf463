//! `cargo xtask dev …`: the environment's lifecycle.

use std::process::ExitCode;

use anyhow::bail;
use dev_env::{manifest, plan::Plan, state::State};
use xshell::Shell;

use crate::{Ctx, flags};

impl flags::Dev {
    pub(crate) fn run(self, sh: &Shell, ctx: &Ctx) -> anyhow::Result<ExitCode> {
        match self.cmd {
            flags::DevCmd::Up(cmd) => cmd.run(sh, ctx),
            flags::DevCmd::Down(cmd) => cmd.run(ctx),
            flags::DevCmd::Status(cmd) => cmd.run(ctx),
            flags::DevCmd::Reset(cmd) => cmd.run(ctx),
            flags::DevCmd::Logs(cmd) => cmd.run(ctx),
        }
    }
}

impl flags::Up {
    fn run(self, _sh: &Shell, ctx: &Ctx) -> anyhow::Result<ExitCode> {
        let config = ctx.config()?;
        let state = State::load(&config.state_dir())?;
        let manifests = manifest::load(&config.manifests)?;
        let plan = Plan::new(&config, &state, manifests);
        if self.dry_run {
            print!("{plan}");
            println!("dry run: nothing was changed");
            return Ok(ExitCode::SUCCESS);
        }
        bail!(
            "`dev up` cannot create the environment in this build; `dev up --dry-run` shows the plan"
        )
    }
}

impl flags::Down {
    fn run(self, ctx: &Ctx) -> anyhow::Result<ExitCode> {
        ctx.config()?;
        bail!("`dev down` is not available in this build")
    }
}

impl flags::Status {
    fn run(self, ctx: &Ctx) -> anyhow::Result<ExitCode> {
        ctx.config()?;
        bail!("`dev status` is not available in this build")
    }
}

impl flags::Reset {
    fn run(self, ctx: &Ctx) -> anyhow::Result<ExitCode> {
        ctx.config()?;
        bail!("`dev reset` is not available in this build")
    }
}

impl flags::Logs {
    fn run(self, ctx: &Ctx) -> anyhow::Result<ExitCode> {
        let config = ctx.config()?;
        config.component(&self.component)?;
        bail!("`dev logs` is not available in this build")
    }
}
