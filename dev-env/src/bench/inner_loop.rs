//! The inner loop on a project of its own under `target/bench/loop/`,
//! against the same change done by hand with docker and kubectl.

use std::{
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use kube::{Api, Client};
use xshell::{Shell, cmd};

use super::{Error, Figure, step};
use crate::{
    config::Config,
    deliver,
    image::cargo,
    lifecycle::{self, DownOptions, UpOptions},
    report::{Event, Reporter, Silent},
};

/// Deadline of each wait in the loop figures.
const LOOP_TIMEOUT: Duration = Duration::from_secs(180);

/// The source of the test service: an HTTP server on 8080 answering every
/// request with its version. `@VERSION@` and `@CRASH@` are filled by
/// [`app_source`].
const APP_SOURCE: &str = include_str!("fixtures/app.rs.txt");

/// The service's `main.rs`: it answers every request with `version`, or
/// exits at once with status 3 when `crash`.
pub fn app_source(version: &str, crash: bool) -> String {
    APP_SOURCE
        .replace("@VERSION@", version)
        .replace("@CRASH@", if crash { "true" } else { "false" })
}

/// The inner loop on a project of its own under `target/bench/loop/`: a
/// one-crate HTTP service as a Deployment of 2 pods, on the sim provider
/// with the real registry. Figures: cold and warm `dev up`, a no-op
/// `push-image`, a one-line change split into build, push and rollout+wait,
/// the wait's detection latency against an independent watch (and
/// `kubectl rollout status`'s against the same watch), and the same change
/// done by hand (`docker build`, `docker push`, `kubectl set image`,
/// `kubectl rollout status`) as a ratio.
pub async fn inner_loop(root: &Path, runs: usize) -> Result<Vec<Figure>, Error> {
    let bench = Bench::prepare(root).await?;
    let mut samples = Samples::default();
    for _ in 0..runs {
        bench.cold_and_warm_up(&mut samples).await?;
    }
    for _ in 0..runs {
        let started = Instant::now();
        bench.push().await?;
        samples.noop.push(started.elapsed().as_secs_f64());
    }
    let client = deliver::cluster_client(&bench.config)
        .await
        .map_err(|e| step("a cluster client").of(e))?;
    for run in 0..runs {
        settle(&client).await?;
        let before = failed_probes(&client).await?;
        bench.one_line_change(&client, run, &mut samples).await?;
        settle(&client).await?;
        let between = failed_probes(&client).await?;
        let hand = bench.by_hand(&client, run, &mut samples).await?;
        let after = failed_probes(&client).await?;
        samples.baseline.push(hand.total());
        samples.hand.push(hand);
        samples.probes.push((between - before) as f64);
        samples.hand_probes.push((after - between) as f64);
    }
    let save = |run: usize| bench.project.source_owned(format!("w{run}"));
    let watched = super::watching::Watched {
        file: &bench.config.file,
        component: "app",
        change: "watch after a one-line change",
    };
    let watched = super::watching::watch_loop(watched, runs, save).await?;
    bench.reset().await?;
    let mut figures = samples.figures();
    figures.extend(watched);
    Ok(figures)
}

/// What the loop figures measured, one sample per run.
#[derive(Default)]
struct Samples {
    cold: Vec<f64>,
    warm: Vec<f64>,
    noop: Vec<f64>,
    build: Vec<f64>,
    upload: Vec<f64>,
    rollout: Vec<f64>,
    total: Vec<f64>,
    /// Milliseconds; only runs whose independent watch saw the end.
    latency: Vec<f64>,
    /// The same for `kubectl rollout status` in the by-hand change.
    hand_latency: Vec<f64>,
    baseline: Vec<f64>,
    hand: Vec<HandTimes>,
    /// Readiness probes that failed during dev-env's rollout, and during
    /// the by-hand one: each costs its rollout up to a probe period.
    probes: Vec<f64>,
    hand_probes: Vec<f64>,
}

impl Samples {
    fn figures(self) -> Vec<Figure> {
        let ratio: Vec<f64> = self
            .total
            .iter()
            .zip(&self.baseline)
            .map(|(ours, theirs)| ours / theirs)
            .collect();
        let change = "push-image after a one-line change";
        let mut figures = vec![
            Figure::of("cold dev up (images local)", "s", self.cold),
            Figure::of("warm dev up", "s", self.warm),
            Figure::of("push-image, no change", "s", self.noop),
            Figure::of(&format!("{change}: build"), "s", self.build),
            Figure::of(&format!("{change}: push"), "s", self.upload),
            Figure::of(&format!("{change}: rollout+wait"), "s", self.rollout),
            Figure::of(&format!("{change}: total"), "s", self.total),
        ];
        if !self.latency.is_empty() {
            figures.push(Figure::of(
                "wait detection after an independent watch sees the rollout done",
                "ms",
                self.latency,
            ));
        }
        if !self.hand_latency.is_empty() {
            figures.push(Figure::of(
                "by hand: kubectl rollout status after an independent watch sees the rollout done",
                "ms",
                self.hand_latency,
            ));
        }
        let hand = |what: &str, part: fn(&HandTimes) -> f64| {
            Figure::of(
                &format!("by hand: {what}"),
                "s",
                self.hand.iter().map(part).collect(),
            )
        };
        figures.push(hand("cargo build", |h| h.build));
        figures.push(hand("docker build + push", |h| h.image));
        figures.push(hand("kubectl set image + rollout status", |h| h.rollout));
        figures.push(Figure::of(
            "by hand: docker build + push + kubectl set image + rollout status",
            "s",
            self.baseline,
        ));
        figures.push(Figure::of(
            "one-line change, dev-env / by hand",
            "ratio",
            ratio,
        ));
        let probes = "failed readiness probes in a one-line change's rollout";
        figures.push(Figure::of(
            &format!("{probes}: dev-env"),
            "probes",
            self.probes,
        ));
        figures.push(Figure::of(
            &format!("{probes}: by hand"),
            "probes",
            self.hand_probes,
        ));
        figures
    }
}

/// The bench project and its environment.
struct Bench {
    project: LoopProject,
    config: Config,
}

impl Bench {
    /// Writes the project and brings its environment up once, so images
    /// (node, registry, the project's first build) are made before any
    /// figure is taken.
    async fn prepare(root: &Path) -> Result<Bench, Error> {
        let project = LoopProject::create(&root.join("target/bench/loop")).await?;
        let config = Config::load(&project.dir.join("dev-env.yaml"))
            .map_err(|e| step("the bench project's dev-env.yaml").of(e))?;
        let bench = Bench { project, config };
        bench.up("preparing the bench environment").await?;
        Ok(bench)
    }

    async fn up(&self, what: &str) -> Result<(), Error> {
        let options = UpOptions {
            recreate: false,
            verbose: false,
            timeout: LOOP_TIMEOUT,
            prune: crate::apply::Prune::DECLARED,
        };
        lifecycle::up(&self.config, options, &Silent)
            .await
            .map(drop)
            .map_err(|e| step(what).of(e))
    }

    async fn reset(&self) -> Result<(), Error> {
        lifecycle::down(&self.config, DownOptions::RESET_PURGE, &Silent)
            .await
            .map(drop)
            .map_err(|e| step("dev reset").of(e))
    }

    /// `dev reset`, then a timed cold `dev up` and a timed warm one.
    async fn cold_and_warm_up(&self, samples: &mut Samples) -> Result<(), Error> {
        self.reset().await?;
        let started = Instant::now();
        self.up("cold dev up").await?;
        samples.cold.push(started.elapsed().as_secs_f64());
        let started = Instant::now();
        self.up("warm dev up").await?;
        samples.warm.push(started.elapsed().as_secs_f64());
        Ok(())
    }

    /// `push-image app` with a rollout; its outcome, or its error.
    async fn push(&self) -> Result<deliver::Outcome, Error> {
        self.push_reporting(&Silent).await
    }

    async fn push_reporting(&self, reporter: &dyn Reporter) -> Result<deliver::Outcome, Error> {
        let flags = deliver::PushFlags {
            rollout: true,
            timeout: LOOP_TIMEOUT,
            verbose: false,
            wait_for_termination: false,
        };
        let components = [String::from("app")];
        let outcome = deliver::push(&self.config, &components, flags, reporter)
            .await
            .map_err(|e| step("push-image").of(e))?
            .remove(0);
        match &outcome.error {
            Some(e) => Err(step("push-image").of(e.clone())),
            None => Ok(outcome),
        }
    }

    /// A one-line change pushed as a user pushes it: one `push-image`
    /// from the edit, which builds, uploads, rolls out and waits. Its
    /// build ends at the build's last progress event, its upload at the
    /// `pushed` event, and the wait's lag behind an independent watch is
    /// measured too.
    async fn one_line_change(
        &self,
        client: &Client,
        run: usize,
        samples: &mut Samples,
    ) -> Result<(), Error> {
        self.project.source(&format!("v{}", run + 2)).await?;
        let observer = observe_rollout(client.clone(), "bench", "app=app");
        let timeline = Timeline::default();
        let started = Instant::now();
        let outcome = self.push_reporting(&timeline).await?;
        let returned = Instant::now();
        let (built, pushed) = timeline.marks(started);
        samples
            .build
            .push(built.duration_since(started).as_secs_f64());
        samples
            .upload
            .push(pushed.duration_since(built).as_secs_f64());
        samples.rollout.push(outcome.wait_ms as f64 / 1000.0);
        samples
            .total
            .push(returned.duration_since(started).as_secs_f64());
        if let Some(lag) = lag_behind(observer, returned).await {
            samples.latency.push(lag);
        }
        Ok(())
    }

    /// The same one-line change done by hand, timed: build the image with
    /// the engine from the binary just built, push it, set it on the
    /// Deployment with kubectl, and wait with `kubectl rollout status`. The
    /// engine forgets the image before the rollout (untimed), so the node
    /// pulls its layers as it pulls dev-env's. The independent watch runs
    /// as it does beside dev-env's push, so both sides share the machine
    /// with it, and measures `kubectl rollout status`'s lag.
    async fn by_hand(
        &self,
        client: &Client,
        run: usize,
        samples: &mut Samples,
    ) -> Result<HandTimes, Error> {
        let fail = step("the by-hand baseline");
        self.project.source(&format!("hand-{run}")).await?;
        let config = &self.config;
        let state = crate::state::State::load(&config.state_dir()).map_err(|e| fail.of(e))?;
        let host = crate::registry::host(config, &state).map_err(|e| fail.of(e))?;
        let hand = Hand {
            image: format!("{host}/bench/app:hand-{run}"),
            in_cluster: format!("{}/bench/app:hand-{run}", config.registry.cluster_host),
            kubeconfig: config.state_dir().join(crate::kubeconfig::HOST_FILE),
        };
        let observer = observe_rollout(client.clone(), "bench", "app=app");
        let times = tokio::task::block_in_place(|| hand.run(&self.project))?;
        if let Some(lag) = lag_behind(observer, times.returned).await {
            samples.hand_latency.push(lag);
        }
        Ok(times)
    }
}

/// How many milliseconds after the independent watch saw the rollout done
/// a waiter `returned`; `None` when the watch did not see it within 5 s.
async fn lag_behind(observer: tokio::task::JoinHandle<Instant>, returned: Instant) -> Option<f64> {
    let seen = tokio::time::timeout(Duration::from_secs(5), observer)
        .await
        .ok()?
        .ok()?;
    Some(returned.saturating_duration_since(seen).as_secs_f64() * 1000.0)
}

/// When a push's build and upload ended, as its events tell.
#[derive(Default)]
pub(super) struct Timeline {
    /// The last build progress, and the `pushed` event.
    marks: std::sync::Mutex<(Option<Instant>, Option<Instant>)>,
}

impl Reporter for Timeline {
    fn report(&self, event: &Event) {
        let now = Instant::now();
        let mut marks = self.marks.lock().unwrap_or_else(|e| e.into_inner());
        match event {
            Event::BuildProgress { .. } => marks.0 = Some(now),
            Event::Component { detail, .. } if detail.starts_with("pushed ") => marks.1 = Some(now),
            _ => {}
        }
    }
}

impl Timeline {
    /// (build ended, upload ended); a build that compiled nothing ended
    /// at `started`.
    pub(super) fn marks(&self, started: Instant) -> (Instant, Instant) {
        let marks = *self.marks.lock().unwrap_or_else(|e| e.into_inner());
        let built = marks.0.unwrap_or(started);
        (built, marks.1.unwrap_or(built))
    }
}

/// What each step of the by-hand baseline took, in seconds.
#[derive(Debug, Clone, Copy)]
struct HandTimes {
    build: f64,
    /// `docker build` and `docker push`.
    image: f64,
    /// `kubectl set image` and `kubectl rollout status`.
    rollout: f64,
    /// When `kubectl rollout status` returned.
    returned: Instant,
}

impl HandTimes {
    fn total(&self) -> f64 {
        self.build + self.image + self.rollout
    }
}

/// The names the by-hand baseline uses.
struct Hand {
    /// The image as pushed from the host.
    image: String,
    /// The image as pods pull it.
    in_cluster: String,
    kubeconfig: PathBuf,
}

impl Hand {
    /// Builds, pushes, sets and waits, timing each. Blocking.
    fn run(&self, project: &LoopProject) -> Result<HandTimes, Error> {
        let fail = step("the by-hand baseline");
        let started = Instant::now();
        let build = project.cargo_build().map_err(|e| fail.of(e))?;
        let binary = cargo::build_binary(&build).map_err(|e| fail.of(e))?;
        let context = project.dir.join("hand");
        std::fs::create_dir_all(&context).map_err(|e| fail.of(e))?;
        std::fs::copy(&binary, context.join("app")).map_err(|e| fail.of(e))?;
        std::fs::write(
            context.join("Dockerfile"),
            "FROM scratch\nCOPY app /app\nENTRYPOINT [\"/app\"]\n",
        )
        .map_err(|e| fail.of(e))?;
        let sh = Shell::new().map_err(|e| fail.of(e))?;
        let run = |cmd: xshell::Cmd<'_>| {
            cmd.quiet()
                .ignore_stdout()
                .ignore_stderr()
                .run()
                .map_err(|e| fail.of(e))
        };
        let (image, in_cluster, kubeconfig) = (&self.image, &self.in_cluster, &self.kubeconfig);
        let built = Instant::now();
        run(cmd!(sh, "docker build -q -t {image} {context}"))?;
        run(cmd!(sh, "docker push -q {image}"))?;
        let pushed = Instant::now();
        // Untimed: kube-sim's kubelet runs pods on this engine, which holds
        // the layers it just built, so its pull would only check the
        // manifest. A real node holds none of them and downloads them, as
        // it does dev-env's images, which never pass through the engine.
        run(cmd!(sh, "docker rmi {image}"))?;
        let rolling = Instant::now();
        run(cmd!(
            sh,
            "kubectl --kubeconfig {kubeconfig} -n bench set image deployment/app app={in_cluster}"
        ))?;
        run(cmd!(
            sh,
            "kubectl --kubeconfig {kubeconfig} -n bench rollout status deployment/app --timeout=180s"
        ))?;
        let returned = Instant::now();
        Ok(HandTimes {
            build: built.duration_since(started).as_secs_f64(),
            image: pushed.duration_since(built).as_secs_f64(),
            rollout: returned.duration_since(rolling).as_secs_f64(),
            returned,
        })
    }
}

/// Waits until no pod of the bench's Deployment is terminating, so each
/// timed change starts from the same settled state, not while the engine
/// tears down the previous rollout's containers (each takes its grace
/// period); otherwise the side that follows the other more closely (the
/// faster one) starts its pods during that teardown.
async fn settle(client: &Client) -> Result<(), Error> {
    use crate::wait::{Step, poll};
    use k8s_openapi::api::core::v1::Pod;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "bench");
    let params = kube::api::ListParams::default().labels("app=app");
    let settled = poll("the bench's old pods to be gone", LOOP_TIMEOUT, || async {
        let listed = pods.list(&params).await?;
        let leaving = listed
            .items
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_some())
            .count();
        Ok::<_, kube::Error>(match leaving {
            0 => Step::Done(()),
            n => Step::Pending(format!("{n} pod(s) terminating")),
        })
    })
    .await;
    let fail = step("waiting for the bench's pods to settle");
    settled.map_err(|e| fail.of(e))?.map_err(|e| fail.of(e))
}

/// How many readiness probes have failed in the bench namespace so far,
/// as the kubelet counts them in its `Unhealthy` Events.
async fn failed_probes(client: &Client) -> Result<i64, Error> {
    use k8s_openapi::api::core::v1::Event;
    let events: Api<Event> = Api::namespaced(client.clone(), "bench");
    let params = kube::api::ListParams::default().fields("reason=Unhealthy");
    let listed = events
        .list(&params)
        .await
        .map_err(|e| step("listing the bench's Unhealthy events").of(e))?;
    Ok(listed
        .items
        .iter()
        .filter(|e| {
            e.message
                .as_deref()
                .is_some_and(|m| m.starts_with("Readiness probe"))
        })
        .map(|e| i64::from(e.count.unwrap_or(1)))
        .sum())
}

/// Resolves when an independent watch first sees the rollout done by the
/// wait's own rule, with the instant: two Ready pods of the new template
/// hash, and no pod of the old one Ready without a `deletionTimestamp`.
fn observe_rollout(
    client: Client,
    namespace: &str,
    selector: &str,
) -> tokio::task::JoinHandle<Instant> {
    use futures::StreamExt;
    use k8s_openapi::api::core::v1::Pod;
    use kube::runtime::{WatchStreamExt, reflector, watcher};

    fn hash(pod: &Pod) -> Option<&String> {
        pod.metadata.labels.as_ref()?.get("pod-template-hash")
    }
    fn serving(pod: &Pod) -> bool {
        pod.metadata.deletion_timestamp.is_none()
            && pod
                .status
                .iter()
                .flat_map(|s| s.container_statuses.iter().flatten())
                .all(|c| c.ready)
    }
    let pods: Api<Pod> = Api::namespaced(client, namespace);
    let config = watcher::Config::default().labels(selector);
    tokio::spawn(async move {
        let (reader, writer) = reflector::store();
        let mut events = reflector::reflector(writer, watcher(pods, config))
            .default_backoff()
            .boxed();
        // Every template hash among the pods listed first is old, the
        // terminating pods' of an earlier rollout as much as the serving
        // ones': the first pod listed may be either.
        let mut old: Option<std::collections::HashSet<String>> = None;
        while events.next().await.is_some() {
            let pods = reader.state();
            if old.is_none() && !pods.is_empty() {
                old = Some(pods.iter().filter_map(|p| hash(p).cloned()).collect());
            }
            let is_new =
                |p: &Pod| hash(p).is_some_and(|h| old.as_ref().is_some_and(|old| !old.contains(h)));
            let new_ready = pods.iter().filter(|p| is_new(p) && serving(p)).count();
            let old_serving = pods.iter().any(|p| !is_new(p) && serving(p));
            if new_ready == 2 && !old_serving {
                return Instant::now();
            }
        }
        Instant::now()
    })
}

/// The loop figures' project: a one-crate workspace `app` serving HTTP on
/// 8080, its namespace and Deployment, and its `dev-env.yaml`.
struct LoopProject {
    dir: PathBuf,
}

impl LoopProject {
    async fn create(dir: &Path) -> Result<LoopProject, Error> {
        let project = LoopProject {
            dir: dir.to_path_buf(),
        };
        project
            .write(
                "Cargo.toml",
                "[workspace]\nmembers = [\"app\"]\nresolver = \"3\"\n",
            )
            .await?;
        project
            .write(
                "app/Cargo.toml",
                "[package]\nname = \"app\"\nversion = \"0.1.0\"\nedition = \"2024\"\n",
            )
            .await?;
        project.write(
            "dev-env.yaml",
            "name: bench-loop\nnetwork: {ipv4Subnet: 10.252.9.0/24}\ncluster: {provider: sim}\nmanifests: [manifests]\n\
             components:\n  app:\n    image: bench/app\n    build: {cargo: {package: app}}\n    \
             rollout: {kind: Deployment, namespace: bench, name: app, container: app}\n",
        ).await?;
        project.write(
            "manifests/app.yaml",
            "apiVersion: v1\nkind: Namespace\nmetadata: {name: bench}\n---\n\
             apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: app, namespace: bench}\nspec:\n  replicas: 2\n  \
             selector: {matchLabels: {app: app}}\n  template:\n    metadata: {labels: {app: app}}\n    spec:\n      \
             terminationGracePeriodSeconds: 1\n      containers:\n      - name: app\n        image: bench/app:dev\n        \
             readinessProbe: {httpGet: {path: /, port: 8080}, periodSeconds: 1}\n",
        ).await?;
        project.source("v1").await?;
        Ok(project)
    }

    /// Writes `text` at `path` under the project.
    async fn write(&self, path: &str, text: &str) -> Result<(), Error> {
        let fail = step("writing the bench project");
        let path = self.dir.join(path);
        tokio::fs::create_dir_all(path.parent().expect("a parent"))
            .await
            .map_err(|e| fail.of(e))?;
        tokio::fs::write(path, text).await.map_err(|e| fail.of(e))
    }

    /// The service's source, answering every request with `version`.
    async fn source(&self, version: &str) -> Result<(), Error> {
        self.write("app/src/main.rs", &app_source(version, false))
            .await
    }

    /// [`LoopProject::source`] of an owned version, for callers that build
    /// the version as they go.
    async fn source_owned(&self, version: String) -> Result<(), Error> {
        self.source(&version).await
    }

    /// The service's binary as a person builds it by hand: `cargo build`
    /// (the `dev` profile, as dev-env builds it) of a static binary for
    /// this machine, in dev-env's target directory.
    fn cargo_build(
        &self,
    ) -> Result<cargo::CargoBuild<'_>, Box<dyn std::error::Error + Send + Sync>> {
        let here = crate::platform::Platform::linux(std::env::consts::ARCH);
        let toolchain = crate::platform::toolchain(&self.dir)?;
        Ok(cargo::CargoBuild {
            root: &self.dir,
            target_dir: self.dir.join(cargo::TARGET_DIR),
            package: "app",
            bin: "app",
            profile: String::from(crate::config::DEFAULT_PROFILE),
            tuning: &[],
            target: crate::platform::choose(&here, &toolchain, None)?,
            lines: None,
            progress: None,
            cancel: None,
        })
    }
}
