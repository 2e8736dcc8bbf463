//! dev-env's whole command line, in one place. Doc comments are the help
//! text.

use std::{path::PathBuf, time::Duration};

use clap::{Args, Subcommand};

#[derive(Debug, Args)]
pub struct Global {
    /// The environment file [default: dev-env.yaml at the repository root]
    #[arg(long, global = true, env = "DEV_ENV_CONFIG", value_name = "PATH")]
    pub config: Option<PathBuf>,
    /// Show build logs and every step
    #[arg(short, long, global = true, conflicts_with = "quiet")]
    pub verbose: bool,
    /// Print only errors and final results
    #[arg(short, long, global = true)]
    pub quiet: bool,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Bring the local environment up, down, or report on it
    Dev(Dev),
    /// Build and push component images, then roll them out and wait until
    /// Ready pods run the pushed digest
    PushImage(PushImage),
    /// Re-apply the manifests, restart components, and wait for them
    Reload(Reload),
    /// Bring the environment up, then rebuild, push and roll out every
    /// component whose sources are saved, until Ctrl-C
    Watch(Watch),
    /// Forward local ports on 127.0.0.1 to a component's pods, following
    /// its rollouts, until Ctrl-C
    Forward(Forward),
}

#[derive(Debug, Args)]
pub struct Dev {
    #[command(subcommand)]
    pub cmd: DevCmd,
}

#[derive(Debug, Subcommand)]
pub enum DevCmd {
    /// Create or repair the network, registry and cluster, then apply the
    /// manifests; safe to run again, which changes nothing
    Up(Up),
    /// Remove the cluster node and the registry container; pushed images
    /// are kept unless --purge
    Down(Down),
    /// Report the network, registry, node and components; exits 0 only when
    /// everything is up and converged
    Status(Status),
    /// `dev down` plus the network
    Reset(Reset),
    /// Print the logs of a component's pods, or of every component's
    Logs(Logs),
    /// Write a starting environment file for this workspace, guessed from
    /// its binary packages and manifests; never overwrites one
    Init(Init),
}

#[derive(Debug, Args)]
pub struct Up {
    /// Replace the objects whose declared configuration drifted (the
    /// registry's data volume is kept)
    #[arg(long)]
    pub recreate: bool,
    /// Print the plan, and what would be pruned, and change nothing
    #[arg(long)]
    pub dry_run: bool,
    #[command(flatten)]
    pub prune: PruneFlags,
    /// Print what was created, reused and changed as JSON (progress goes to
    /// stderr as JSON lines)
    #[arg(long, conflicts_with = "dry_run")]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct Down {
    /// Also delete the registry's data volume, and with it every pushed image
    #[arg(long)]
    pub purge: bool,
    /// Print what was removed as JSON
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct Status {
    /// Print the report as JSON
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct Reset {
    /// Also delete the registry's data volume, and with it every pushed image
    #[arg(long)]
    pub purge: bool,
    /// Print what was removed as JSON
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct Init {
    /// Print what was written and guessed as JSON
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct Logs {
    /// A component declared in the environment file [default: every
    /// component, each line prefixed `<component>/<pod>`]
    pub component: Option<String>,
    /// Keep streaming new lines, and the lines of pods that start later
    #[arg(short, long)]
    pub follow: bool,
    /// Only lines newer than this, such as 10m or 1h
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub since: Option<Duration>,
    /// Only the last N lines of each pod
    #[arg(long, value_name = "N")]
    pub tail: Option<u32>,
}

#[derive(Debug, Args)]
pub struct PushImage {
    /// Components declared in the environment file
    #[arg(required = true, value_name = "COMPONENT")]
    pub components: Vec<String>,
    /// Build and push only; leave the cluster alone
    #[arg(long)]
    pub no_rollout: bool,
    #[command(flatten)]
    pub rollout: RolloutFlags,
}

/// How `push-image` and `reload` wait for their rollouts and report them.
#[derive(Debug, Args)]
pub struct RolloutFlags {
    /// Deadline for each rollout, such as 90s or 3m
    #[arg(long, value_parser = parse_duration, default_value = "180s", value_name = "DURATION")]
    pub timeout: Duration,
    /// Print a JSON summary instead of text
    #[arg(long)]
    pub json: bool,
    /// Wait until the old pods are gone, not only terminating (old pods
    /// that are terminating already get no traffic)
    #[arg(long)]
    pub wait_for_termination: bool,
}

#[derive(Debug, Args)]
pub struct Watch {
    /// Components to keep running [default: all declared]
    #[arg(value_name = "COMPONENT")]
    pub components: Vec<String>,
    #[command(flatten)]
    pub prune: PruneFlags,
    #[command(flatten)]
    pub rollout: RolloutFlags,
}

#[derive(Debug, Args)]
pub struct Forward {
    /// A component declared in the environment file
    pub component: String,
    /// Ports as `[LOCAL:]REMOTE`, such as 8080 or 18080:8080 [default: the
    /// component's declared `forward`]
    #[arg(value_name = "PORT", value_parser = parse_port)]
    pub ports: Vec<dev_env::config::PortForward>,
    /// Print the forward's events as JSON lines
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct Reload {
    /// Components to restart [default: all declared]
    #[arg(value_name = "COMPONENT")]
    pub components: Vec<String>,
    #[command(flatten)]
    pub prune: PruneFlags,
    #[command(flatten)]
    pub rollout: RolloutFlags,
}

/// What a run prunes of the objects the manifests no longer declare.
#[derive(Debug, Args)]
pub struct PruneFlags {
    /// Keep the objects the manifests no longer declare, for this run
    #[arg(long, conflicts_with_all = ["prune_all", "prune_destructive"])]
    pub no_prune: bool,
    /// Prune every object applied before even when the manifests declare
    /// none (refused without it)
    #[arg(long)]
    pub prune_all: bool,
    /// Also prune namespaces and CRDs no longer declared that hold objects
    /// outside the set, deleting those objects with them (kept without it)
    #[arg(long)]
    pub prune_destructive: bool,
}

impl PruneFlags {
    pub fn prune(&self) -> dev_env::apply::Prune {
        dev_env::apply::Prune {
            enabled: !self.no_prune,
            all: self.prune_all,
            destructive: self.prune_destructive,
        }
    }
}

fn parse_port(s: &str) -> Result<dev_env::config::PortForward, String> {
    s.parse()
}

/// A duration such as `90s`, `3m` or `1m30s`, longer than zero.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(s)
        .map_err(|e| format!("{e} (write it like 90s, 3m or 1m30s)"))?;
    if d.is_zero() {
        return Err(String::from("must be longer than zero"));
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    #[test]
    fn cli_is_well_formed() {
        crate::Cli::command().debug_assert();
    }

    #[test]
    fn durations_parse_and_zero_is_refused() {
        assert_eq!(parse_duration("1m30s"), Ok(Duration::from_secs(90)));
        assert!(parse_duration("0s").is_err());
        assert!(parse_duration("soon").unwrap_err().contains("90s"));
    }
}
