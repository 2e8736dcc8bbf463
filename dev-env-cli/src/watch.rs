//! `cargo xtask watch`: the loop that turns by itself, until Ctrl-C.

use std::process::ExitCode;

use dev_env::watch::{self, WatchOptions};

use crate::{Ctx, flags, report};

impl flags::Watch {
    pub(crate) fn run(self, ctx: &Ctx) -> anyhow::Result<ExitCode> {
        let options = WatchOptions {
            components: self.components,
            timeout: self.rollout.timeout,
            wait_for_termination: self.rollout.wait_for_termination,
            prune: self.prune.prune(),
        };
        let reporter = match (self.rollout.json, ctx.quiet) {
            (true, _) => report::Terminal::new(report::Style::JsonOut),
            _ => ctx.reporter(false),
        };
        let stop = async {
            let _ = tokio::signal::ctrl_c().await;
        };
        ctx.block_on(watch::run(ctx.config_path(), &options, &reporter, stop))??;
        reporter.finish();
        Ok(ExitCode::SUCCESS)
    }
}
