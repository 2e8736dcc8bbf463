//! `cargo xtask reload`: re-apply manifests, restart, wait.

use std::process::ExitCode;

use anyhow::bail;
use xshell::Shell;

use crate::{Ctx, flags};

impl flags::Reload {
    pub(crate) fn run(self, _sh: &Shell, ctx: &Ctx) -> anyhow::Result<ExitCode> {
        let config = ctx.config()?;
        for name in &self.components {
            config.component(name)?;
        }
        bail!("`reload` is not available in this build")
    }
}
