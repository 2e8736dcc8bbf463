//! `cargo xtask push-image`: build, push, roll out, wait.

use std::process::ExitCode;

use anyhow::Context as _;
use dev_env::deliver::{self, PushFlags};

use crate::{Ctx, flags, summary::report};

impl flags::PushImage {
    pub(crate) fn run(self, ctx: &Ctx) -> anyhow::Result<ExitCode> {
        let config = ctx.config()?;
        for name in &self.components {
            config.component(name)?;
        }
        let flags = PushFlags {
            rollout: !self.no_rollout,
            timeout: self.rollout.timeout,
            verbose: ctx.verbose,
            wait_for_termination: self.rollout.wait_for_termination,
        };
        let bars = ctx.reporter(self.rollout.json);
        let outcomes = ctx
            .block_on(deliver::push(&config, &self.components, flags, &bars))?
            .context("push-image")?;
        bars.finish();
        report(ctx, &outcomes, self.rollout.json)
    }
}
