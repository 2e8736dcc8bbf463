//! The loop on the repository's own operator: a one-line change to
//! `demo/controller-manager` (a kube-rs operator of about 190 crates),
//! from the save to Ready pods on the new digest, through `push-image` and
//! through `watch`. A one-crate service hides where users' time goes; this
//! is the figure a team with a real Rust service sees.
//!
//! The environment is the repository's own (its manifests, its two
//! components), under another name and subnet in
//! `target/bench/operator/`. The change is a `#[used]` static appended to
//! the operator's `main.rs`, so every run's binary, and digest, differs;
//! the file is restored however the bench ends.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::inner_loop::Timeline;
use super::watching::{Watched, watch_loop};
use super::{Error, Figure, step};
use crate::{
    config::Config,
    deliver,
    lifecycle::{self, DownOptions, UpOptions},
    report::{Reporter, Silent},
};

/// Deadline of each wait.
const TIMEOUT: Duration = Duration::from_secs(300);
/// The component the change is made to.
const COMPONENT: &str = "controller-manager";

/// The repository's environment, renamed, its paths from
/// `target/bench/operator/`.
const CONFIG: &str = "name: bench-operator\nnetwork: {ipv4Subnet: 10.252.10.0/24}\ncluster: {provider: sim}\n\
manifests: [../../../manifests]\ncomponents:\n  worker:\n    image: demo/worker\n    \
build: {cargo: {package: worker, bin: worker}}\n    \
rollout: {kind: WorkerPool, namespace: demo, name: default, container: worker}\n  controller-manager:\n    \
image: demo/controller-manager\n    build:\n      docker:\n        context: ../../../demo/controller-manager\n        \
dockerfile: Dockerfile\n        cargo: {package: controller-manager, bin: controller-manager}\n    \
rollout: {kind: Deployment, namespace: demo, name: controller-manager, container: manager}\n";

/// The operator's source, restored when dropped.
struct Source {
    path: PathBuf,
    original: String,
}

impl Source {
    fn open(root: &Path) -> Result<Source, Error> {
        let path = root.join("demo/controller-manager/src/main.rs");
        let original = std::fs::read_to_string(&path)
            .map_err(|e| step("reading the operator's main.rs").of(e))?;
        Ok(Source { path, original })
    }

    /// The source with a one-line change that changes the binary.
    async fn change(&self, run: String) -> Result<(), Error> {
        let text = format!(
            "{}#[used]\nstatic DEV_ENV_BENCH_RUN: &str = \"{run}\";\n",
            self.original
        );
        tokio::fs::write(&self.path, text)
            .await
            .map_err(|e| step("changing the operator's main.rs").of(e))
    }
}

impl Drop for Source {
    fn drop(&mut self) {
        let _ = std::fs::write(&self.path, &self.original);
    }
}

/// The operator's loop figures: a no-op `push-image`, a one-line change
/// through `push-image` (build, upload, rollout+wait, total), and through
/// `watch` (save to build start, save to Ready).
pub async fn operator_loop(root: &Path, runs: usize) -> Result<Vec<Figure>, Error> {
    let source = Source::open(root)?;
    let dir = root.join("target/bench/operator");
    std::fs::create_dir_all(&dir).map_err(|e| step("target/bench/operator").of(e))?;
    let file = dir.join("dev-env.yaml");
    std::fs::write(&file, CONFIG).map_err(|e| step("the bench's dev-env.yaml").of(e))?;
    let config = Config::load(&file).map_err(|e| step("the bench's dev-env.yaml").of(e))?;
    let up = UpOptions {
        recreate: false,
        verbose: false,
        timeout: TIMEOUT,
        prune: crate::apply::Prune::DECLARED,
    };
    lifecycle::up(&config, up, &Silent)
        .await
        .map_err(|e| step("dev up of the operator's environment").of(e))?;
    let mut figures = pushes(&config, &source, runs).await?;
    let save = |run: usize| source.change(format!("watch-{run}"));
    let watched = Watched {
        file: &file,
        component: COMPONENT,
        change: "operator: watch after a one-line change",
    };
    figures.extend(watch_loop(watched, runs, save).await?);
    lifecycle::down(&config, DownOptions::RESET_PURGE, &Silent)
        .await
        .map_err(|e| step("dev reset of the operator's environment").of(e))?;
    Ok(figures)
}

/// No-op pushes, then one-line changes pushed as a user pushes them.
async fn pushes(config: &Config, source: &Source, runs: usize) -> Result<Vec<Figure>, Error> {
    let mut noop = Vec::new();
    for _ in 0..runs {
        let started = Instant::now();
        push(config, &Silent).await?;
        noop.push(started.elapsed().as_secs_f64());
    }
    let (mut build, mut upload, mut rollout, mut total) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for run in 0..runs {
        source.change(format!("push-{run}")).await?;
        let timeline = Timeline::default();
        let started = Instant::now();
        let outcome = push(config, &timeline).await?;
        let returned = Instant::now();
        let (built, pushed) = timeline.marks(started);
        build.push(built.duration_since(started).as_secs_f64());
        upload.push(pushed.duration_since(built).as_secs_f64());
        rollout.push(outcome.wait_ms as f64 / 1000.0);
        total.push(returned.duration_since(started).as_secs_f64());
    }
    let change = "operator: one-line change, push-image";
    Ok(vec![
        Figure::of("operator: no-op push-image", "s", noop),
        Figure::of(&format!("{change}: build"), "s", build),
        Figure::of(&format!("{change}: image and upload"), "s", upload),
        Figure::of(&format!("{change}: rollout+wait"), "s", rollout),
        Figure::of(&format!("{change}: save to Ready"), "s", total),
    ])
}

/// `push-image controller-manager`, its outcome or its error.
async fn push(config: &Config, reporter: &dyn Reporter) -> Result<deliver::Outcome, Error> {
    let flags = deliver::PushFlags {
        rollout: true,
        timeout: TIMEOUT,
        verbose: false,
        wait_for_termination: false,
    };
    let components = [String::from(COMPONENT)];
    let outcome = deliver::push(config, &components, flags, reporter)
        .await
        .map_err(|e| step("push-image controller-manager").of(e))?
        .remove(0);
    match &outcome.error {
        Some(e) => Err(step("push-image controller-manager").of(e.clone())),
        None => Ok(outcome),
    }
}
