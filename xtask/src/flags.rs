//! The repository's command line: dev-env's commands, flattened from
//! `dev_env_cli`, and the repository's own beside them. Doc comments are
//! the help text.

use clap::{Args, Parser, Subcommand};

/// The Kubernetes inner dev loop for this repository: a local registry and
/// cluster on Docker, images built and pushed, rollouts that wait for the
/// pushed digest.
#[derive(Debug, Parser)]
#[command(
    name = "cargo xtask",
    bin_name = "cargo xtask",
    disable_version_flag = true
)]
pub struct Xtask {
    #[command(flatten)]
    pub global: dev_env_cli::Global,
    #[command(subcommand)]
    pub cmd: Cmd,
}

#[derive(Debug, Subcommand)]
pub enum Cmd {
    #[command(flatten)]
    DevEnv(dev_env_cli::Command),
    /// Run the project's checks: tests (cargo nextest), rustfmt and clippy
    Test(Test),
    /// Measure the loop's figures on this machine (median, min, max)
    Bench(Bench),
}

#[derive(Debug, Args)]
pub struct Test {
    /// Only run the tests; skip rustfmt and clippy
    #[arg(long)]
    pub no_lint: bool,
    /// Arguments passed on to `cargo nextest run`
    #[arg(last = true, value_name = "NEXTEST_ARGS")]
    pub nextest_args: Vec<String>,
}

#[derive(Debug, Args)]
pub struct Bench {
    /// Runs per figure (a scale run of each binary takes minutes)
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u16).range(1..))]
    pub runs: u16,
    /// Print one JSON object per figure instead of a Markdown table
    #[arg(long)]
    pub json: bool,
    /// Only time a first `cargo xtask dev up` on a fresh clone (empty
    /// `target/`, node image absent), once, with its breakdown
    #[arg(long)]
    pub first_run: bool,
    /// Measure only these sets (repeatable); all of them by default
    #[arg(long, value_enum)]
    pub only: Vec<BenchSet>,
    /// The kube-sim binary the scale figures run, instead of the `release`
    /// build and the sim node image's side by side
    #[arg(long, value_name = "PATH")]
    pub kube_sim: Option<std::path::PathBuf>,
}

/// A set of bench figures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum BenchSet {
    /// The inner loop, by hand and under `watch`
    Loop,
    /// A one-line change to demo/controller-manager, through push-image
    /// and watch
    Operator,
    /// A large layer against curl
    Upload,
    /// kube-sim at scale
    Scale,
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    #[test]
    fn cli_is_well_formed() {
        Xtask::command().debug_assert();
    }
}
