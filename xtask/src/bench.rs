//! `cargo xtask bench`: the figures `dev_env::bench` measures, as a
//! Markdown table or one JSON object per figure.

use std::process::ExitCode;

use anyhow::Context as _;
use dev_env::bench;

use dev_env_cli::{Ctx, out, outln};

use crate::flags;

/// The layer of the upload figure, in MB.
const LAYER_MB: usize = 200;

/// The scale figure's shape: Deployments × pods each.
const SCALE: (usize, i32) = (20, 50);

impl flags::Bench {
    pub(crate) fn run(self, ctx: &Ctx) -> anyhow::Result<ExitCode> {
        let root = ctx.root();
        if self.first_run {
            ctx.note("a first `cargo xtask dev up` on a fresh clone of the repository, once");
            let figures = bench::first_run(root).context("bench --first-run")?;
            return self.print(&figures);
        }
        let runs = usize::from(self.runs);
        let wants = |set| self.only.is_empty() || self.only.contains(&set);
        let mut figures = Vec::new();
        if wants(flags::BenchSet::Loop) {
            ctx.note(format!("the inner loop on target/bench/loop, {runs} runs"));
            figures.extend(
                ctx.block_on(bench::inner_loop(root, runs))?
                    .context("bench")?,
            );
        }
        if wants(flags::BenchSet::Operator) {
            ctx.note(format!(
                "the loop on demo/controller-manager in target/bench/operator, {runs} runs"
            ));
            figures.extend(
                ctx.block_on(bench::operator_loop(root, runs))?
                    .context("bench")?,
            );
        }
        if wants(flags::BenchSet::Upload) {
            ctx.note(format!(
                "a {LAYER_MB} MB layer, dev-env and curl, {runs} runs"
            ));
            figures.extend(
                ctx.block_on(bench::blob_upload(runs, LAYER_MB))?
                    .context("bench")?,
            );
        }
        if wants(flags::BenchSet::Scale) {
            ctx.note(format!(
                "kube-sim at scale: {} Deployments x {} pods, {runs} runs",
                SCALE.0, SCALE.1
            ));
            let binary = self.kube_sim.as_deref();
            figures.extend(
                ctx.block_on(bench::sim_scale(root, runs, SCALE, binary))?
                    .context("bench")?,
            );
        }
        self.print(&figures)
    }

    fn print(&self, figures: &[bench::Figure]) -> anyhow::Result<ExitCode> {
        if self.json {
            for figure in figures {
                outln!("{}", serde_json::to_string(figure)?);
            }
        } else {
            out!("{}", bench::markdown(figures));
        }
        Ok(ExitCode::SUCCESS)
    }
}
