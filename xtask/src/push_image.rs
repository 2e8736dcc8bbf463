//! `cargo xtask push-image`: build, push, roll out, wait.

use std::process::ExitCode;

use anyhow::bail;
use xshell::Shell;

use crate::{Ctx, flags};

impl flags::PushImage {
    pub(crate) fn run(self, _sh: &Shell, ctx: &Ctx) -> anyhow::Result<ExitCode> {
        let config = ctx.config()?;
        for name in &self.components {
            config.component(name)?;
        }
        bail!("`push-image` is not available in this build")
    }
}
