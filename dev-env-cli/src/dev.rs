//! `cargo xtask dev …`: the environment's lifecycle.

use std::{io::IsTerminal as _, process::ExitCode, time::Duration};

use anyhow::Context as _;
use dev_env::{
    lifecycle::{self, UpOptions},
    logs,
};

use crate::{Ctx, flags};

/// Deadline of each wait during `dev up` (API ready, CRDs established).
const UP_TIMEOUT: Duration = Duration::from_secs(180);

impl flags::Dev {
    pub(crate) fn run(self, ctx: &Ctx) -> anyhow::Result<ExitCode> {
        match self.cmd {
            flags::DevCmd::Up(cmd) => cmd.run(ctx),
            flags::DevCmd::Down(cmd) => cmd.run(ctx),
            flags::DevCmd::Status(cmd) => cmd.run(ctx),
            flags::DevCmd::Reset(cmd) => cmd.run(ctx),
            flags::DevCmd::Logs(cmd) => cmd.run(ctx),
            flags::DevCmd::Init(cmd) => cmd.run(ctx),
        }
    }
}

impl flags::Up {
    fn run(self, ctx: &Ctx) -> anyhow::Result<ExitCode> {
        let config = ctx.config()?;
        if self.dry_run {
            let plan = ctx
                .block_on(lifecycle::dry_run(
                    &config,
                    lifecycle::DryRunOptions {
                        recreate: self.recreate,
                        prune: self.prune.prune(),
                    },
                ))?
                .context("dev up --dry-run")?;
            out!("{plan}");
            return Ok(ExitCode::SUCCESS);
        }
        let options = UpOptions {
            recreate: self.recreate,
            verbose: ctx.verbose,
            timeout: UP_TIMEOUT,
            prune: self.prune.prune(),
        };
        let started = std::time::Instant::now();
        let reporter = ctx.reporter(self.json);
        let report = ctx
            .block_on(lifecycle::up(&config, options, &reporter))?
            .context("dev up")?;
        if self.json {
            outln!("{}", serde_json::to_string_pretty(&report.summary())?);
        } else {
            ctx.say(format!(
                "dev up: `{}` is up ({:.1}s){}",
                config.name,
                started.elapsed().as_secs_f64(),
                report.pruned_summary()
            ));
        }
        Ok(ExitCode::SUCCESS)
    }
}

impl flags::Init {
    fn run(self, ctx: &Ctx) -> anyhow::Result<ExitCode> {
        let written = dev_env::init::init(ctx.root(), ctx.config_path()).context("dev init")?;
        if self.json {
            outln!("{}", serde_json::to_string_pretty(&written)?);
        } else {
            ctx.say(&written);
        }
        Ok(ExitCode::SUCCESS)
    }
}

/// `dev down` and `dev reset`: the same removal, with or without the
/// network.
fn down(ctx: &Ctx, options: lifecycle::DownOptions, json: bool) -> anyhow::Result<ExitCode> {
    let config = ctx.identity()?;
    let reporter = ctx.reporter(json);
    let what = if options.network {
        "dev reset"
    } else {
        "dev down"
    };
    let report = ctx
        .block_on(lifecycle::down(&config, options, &reporter))?
        .context(what)?;
    if json {
        outln!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        ctx.say(&report);
    }
    Ok(ExitCode::SUCCESS)
}

impl flags::Down {
    fn run(self, ctx: &Ctx) -> anyhow::Result<ExitCode> {
        let options = lifecycle::DownOptions {
            purge: self.purge,
            network: false,
        };
        down(ctx, options, self.json)
    }
}

impl flags::Reset {
    fn run(self, ctx: &Ctx) -> anyhow::Result<ExitCode> {
        let options = lifecycle::DownOptions {
            purge: self.purge,
            network: true,
        };
        down(ctx, options, self.json)
    }
}

/// `dev status` exits 3 when the environment does not exist at all.
const NOT_FOUND: u8 = 3;

impl flags::Status {
    fn run(self, ctx: &Ctx) -> anyhow::Result<ExitCode> {
        let config = ctx.config()?;
        let status = ctx
            .block_on(dev_env::status::status(&config))?
            .context("dev status")?;
        if self.json {
            outln!("{}", serde_json::to_string_pretty(&status)?);
        } else {
            out!("{status}");
        }
        Ok(match (status.ok, status.exists) {
            (true, _) => ExitCode::SUCCESS,
            (false, false) => ExitCode::from(NOT_FOUND),
            (false, true) => ExitCode::FAILURE,
        })
    }
}

impl flags::Logs {
    fn run(self, ctx: &Ctx) -> anyhow::Result<ExitCode> {
        let config = ctx.config()?;
        let components: Vec<String> = self.component.iter().cloned().collect();
        for name in &components {
            config.component(name)?;
        }
        let options = logs::LogOptions {
            follow: self.follow,
            since: self.since,
            tail: self.tail,
        };
        let colour = std::io::stdout().is_terminal();
        let one = self.component.is_some();
        let print = |line: &logs::LogLine| {
            let prefix = if one {
                format!("[{}]", line.pod)
            } else {
                format!("{}/{}", line.component, line.pod)
            };
            if colour {
                outln!("\x1b[{}m{prefix}\x1b[0m {}", colour_of(&prefix), line.text);
            } else {
                outln!("{prefix} {}", line.text);
            }
        };
        let what = self.component.as_deref().unwrap_or("(every component)");
        let pods = ctx
            .block_on(async {
                tokio::select! {
                    result = logs::stream(&config, &components, options, &print) => Some(result),
                    _ = tokio::signal::ctrl_c() => None,
                }
            })?
            .transpose()
            .with_context(|| format!("dev logs {what}"))?;
        if pods == Some(0) && !self.follow {
            anyhow::bail!(
                "{} no pods; run `cargo xtask dev up` or `push-image`",
                match &self.component {
                    Some(c) => format!("component `{c}` has"),
                    None => String::from("the components have"),
                }
            );
        }
        Ok(ExitCode::SUCCESS)
    }
}

/// A terminal colour (SGR code) for a prefix, the same for the same prefix.
fn colour_of(prefix: &str) -> u8 {
    const COLOURS: [u8; 6] = [32, 33, 34, 35, 36, 92];
    let hash = prefix.bytes().fold(0usize, |h, b| {
        h.wrapping_mul(31).wrapping_add(usize::from(b))
    });
    COLOURS[hash % COLOURS.len()]
}
