//! `cargo xtask forward`: a component's ports on 127.0.0.1, until Ctrl-C.

use std::process::ExitCode;

use anyhow::Context as _;
use dev_env::forward;

use crate::{Ctx, flags};

impl flags::Forward {
    pub(crate) fn run(self, ctx: &Ctx) -> anyhow::Result<ExitCode> {
        let config = ctx.config()?;
        let reporter = ctx.reporter(self.json);
        ctx.block_on(async {
            let forwarder = forward::bind(&config, &self.component, &self.ports)
                .await
                .with_context(|| format!("forward {}", self.component))?;
            tokio::select! {
                () = forwarder.run(&reporter) => {}
                _ = tokio::signal::ctrl_c() => {}
            }
            anyhow::Ok(())
        })??;
        reporter.finish();
        Ok(ExitCode::SUCCESS)
    }
}
