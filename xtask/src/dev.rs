//! `cargo xtask dev …`: the environment's lifecycle.

use std::{process::ExitCode, time::Duration};

use anyhow::Context as _;
use dev_env::{
    docker,
    lifecycle::{self, UpOptions},
    manifest,
    plan::Plan,
    state::State,
};
use xshell::Shell;

use crate::{Ctx, flags};

/// Deadline of each wait during `dev up` (API ready, CRDs established).
const UP_TIMEOUT: Duration = Duration::from_secs(180);

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
        if self.dry_run {
            let state = State::load(&config.state_dir())?;
            let manifests = manifest::load(&config.manifests)?;
            out!("{}", Plan::new(&config, &state, manifests));
            // Read-only look at what exists, to say what would change.
            let drifts = ctx.block_on(async {
                let docker = docker::connect().await?;
                anyhow::Ok(lifecycle::drift(&docker, &config).await?)
            })?;
            match drifts {
                Ok(drifts) if drifts.is_empty() => {
                    outln!("nothing has drifted from dev-env.yaml")
                }
                Ok(drifts) => {
                    for d in &drifts {
                        outln!("{d}");
                    }
                    let verb = if self.recreate {
                        "would be recreated"
                    } else {
                        "block `dev up`; add --recreate"
                    };
                    outln!("{} drifted object(s) {verb}", drifts.len());
                }
                Err(e) => outln!("cannot compare with what exists: {e:#}"),
            }
            outln!("dry run: nothing was changed");
            return Ok(ExitCode::SUCCESS);
        }
        let options = UpOptions {
            recreate: self.recreate,
            verbose: ctx.verbose,
            timeout: UP_TIMEOUT,
        };
        let started = std::time::Instant::now();
        let progress = |line: &str| ctx.say(line);
        ctx.block_on(lifecycle::up(&config, options, &progress))?
            .context("dev up")?;
        ctx.say(format!(
            "dev up: `{}` is up ({:.1}s)",
            config.name,
            started.elapsed().as_secs_f64()
        ));
        Ok(ExitCode::SUCCESS)
    }
}

impl flags::Down {
    fn run(self, ctx: &Ctx) -> anyhow::Result<ExitCode> {
        let config = ctx.identity()?;
        let report = ctx
            .block_on(lifecycle::down(
                &config,
                lifecycle::DownOptions {
                    purge: self.purge,
                    network: false,
                },
                &|line| eprintln!("{line}"),
            ))?
            .context("dev down")?;
        say_down(ctx, &config.name, &report);
        Ok(ExitCode::SUCCESS)
    }
}

impl flags::Reset {
    fn run(self, ctx: &Ctx) -> anyhow::Result<ExitCode> {
        let config = ctx.identity()?;
        let report = ctx
            .block_on(lifecycle::down(
                &config,
                lifecycle::DownOptions {
                    purge: self.purge,
                    network: true,
                },
                &|line| eprintln!("{line}"),
            ))?
            .context("dev reset")?;
        say_down(ctx, &config.name, &report);
        Ok(ExitCode::SUCCESS)
    }
}

fn say_down(ctx: &Ctx, name: &str, report: &lifecycle::DownReport) {
    let mut removed = Vec::new();
    for (done, what) in [
        (report.node, "node"),
        (report.registry, "registry container"),
        (report.volume, "registry volume"),
        (report.network, "network"),
    ] {
        if done {
            removed.push(what);
        }
    }
    if removed.is_empty() {
        ctx.say(format!("`{name}` is already down: nothing to remove"));
    } else {
        ctx.say(format!("removed {} of `{name}`", removed.join(", ")));
    }
}

impl flags::Status {
    fn run(self, ctx: &Ctx) -> anyhow::Result<ExitCode> {
        let config = ctx.config()?;
        let status = ctx
            .block_on(dev_env::status::status(&config))?
            .context("dev status")?;
        if self.json {
            outln!("{}", serde_json::to_string_pretty(&status)?);
        } else {
            let mark = |ok: bool| if ok { "ok  " } else { "DOWN" };
            if let Some(network) = &status.network {
                outln!("{} network  {}", mark(network.exists), network.name);
            }
            let r = &status.registry;
            outln!(
                "{} registry {} {}",
                mark(r.reachable),
                r.name,
                r.host
                    .as_deref()
                    .map_or(String::from("(no port)"), |h| format!("at {h}"))
            );
            let n = &status.node;
            let api = n
                .api_port
                .map_or(String::new(), |p| format!(" API on 127.0.0.1:{p}"));
            outln!("{} node     {}{api}", mark(n.api_ready), n.name);
            for c in &status.components {
                let runs = if c.running_digests.is_empty() {
                    String::from("no Ready pods")
                } else {
                    c.running_digests.join(", ")
                };
                outln!(
                    "{} {}  {} {}  runs {runs}",
                    mark(c.converged),
                    c.name,
                    c.kind,
                    c.object
                );
                if !c.converged {
                    outln!("       {}", c.message);
                }
            }
            for d in &status.drift {
                outln!("DRIFT {d}");
            }
        }
        Ok(if status.ok {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        })
    }
}

impl flags::Logs {
    fn run(self, ctx: &Ctx) -> anyhow::Result<ExitCode> {
        let config = ctx.config()?;
        config.component(&self.component)?;
        let print = |line: &str| outln!("{line}");
        let pods = ctx
            .block_on(dev_env::status::logs(
                &config,
                &self.component,
                self.follow,
                &print,
            ))?
            .map_err(|e| anyhow::anyhow!("dev logs {}: {e}", self.component))?;
        if pods == 0 {
            anyhow::bail!(
                "component `{}` has no pods; run `cargo xtask dev up` or `push-image`",
                self.component
            );
        }
        Ok(ExitCode::SUCCESS)
    }
}
