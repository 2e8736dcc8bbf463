//! `cargo xtask reload`: re-apply manifests, restart, wait.

use std::process::ExitCode;

use anyhow::Context as _;
use dev_env::deliver;

use crate::{Ctx, flags, summary::report};

impl flags::Reload {
    pub(crate) fn run(self, ctx: &Ctx) -> anyhow::Result<ExitCode> {
        let config = ctx.config()?;
        for name in &self.components {
            config.component(name)?;
        }
        let components = if self.components.is_empty() {
            config.components.keys().cloned().collect()
        } else {
            self.components
        };
        let bars = ctx.reporter(self.rollout.json);
        let outcomes = ctx
            .block_on(deliver::reload(
                &config,
                &components,
                deliver::ReloadFlags {
                    timeout: self.rollout.timeout,
                    wait_for_termination: self.rollout.wait_for_termination,
                    prune: self.prune.prune(),
                },
                &bars,
            ))?
            .context("reload")?;
        bars.finish();
        report(ctx, &outcomes, self.rollout.json)
    }
}
