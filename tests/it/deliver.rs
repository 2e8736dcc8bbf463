//! `push-image` and `reload` end to end: the real engine, the real
//! registry, a kube-sim node whose pods run as containers, and a small HTTP
//! service built with the cargo backend.

use std::time::Duration;

use dev_env::report::{Event, Phase, Reporter, Silent};
use dev_env::{
    config::Config,
    deliver::{self, Outcome, PushFlags},
    lifecycle, rollout,
    state::State,
    wait::workload::WaitOptions,
};
use dev_env_tests::{SimProject, Stderr, runtime, up};
use xshell::{Shell, cmd};

const TIMEOUT: Duration = Duration::from_secs(120);

const RELOAD: deliver::ReloadFlags = deliver::ReloadFlags {
    timeout: TIMEOUT,
    wait_for_termination: false,
    prune: dev_env::apply::Prune::DECLARED,
};

/// What runs the app.
#[derive(Clone, Copy)]
enum Workload {
    Deployment,
    /// The demo operator's WorkerPool, reconciled by its controller.
    WorkerPool,
}

/// A one-crate workspace `app` serving HTTP on 8080, its workload, and a
/// `dev-env.yaml` declaring it.
pub(crate) struct App(SimProject);

impl std::ops::Deref for App {
    type Target = SimProject;
    fn deref(&self) -> &SimProject {
        &self.0
    }
}

impl App {
    pub(crate) fn new() -> App {
        App::with_workload(Workload::Deployment)
    }

    fn with_workload(workload: Workload) -> App {
        let app = App(SimProject::new("dlv"));
        let (name, subnet) = (&app.name, &app.subnet);
        app.write(
            "Cargo.toml",
            "[workspace]\nmembers = [\"app\"]\nresolver = \"3\"\n",
        );
        app.write(
            "app/Cargo.toml",
            "[package]\nname = \"app\"\nversion = \"0.1.0\"\nedition = \"2024\"\n",
        );
        let kind = match workload {
            Workload::Deployment => "Deployment",
            Workload::WorkerPool => "WorkerPool",
        };
        app.write(
            "dev-env.yaml",
            &format!(
                "name: {name}\nnetwork: {{ipv4Subnet: {subnet}}}\ncluster: {{provider: sim}}\nmanifests: [manifests]\n\
                 components:\n  app:\n    image: {name}/app\n    build: {{cargo: {{package: app}}}}\n    \
                 rollout: {{kind: {kind}, namespace: shop, name: app, container: app}}\n"
            ),
        );
        // The image is named as in any environment: the harness pins it to
        // the pushed digest in this one.
        let pod = "metadata: {labels: {app: app}}\n    spec:\n      terminationGracePeriodSeconds: 1\n      \
                   containers:\n      - name: app\n        image: dev-env-registry:5000/APP:dev\n        \
                   readinessProbe: {httpGet: {path: /, port: 8080}, periodSeconds: 1}\n"
            .replace("APP", &format!("{name}/app"));
        let workload = match workload {
            Workload::Deployment => format!(
                "apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: app, namespace: shop}}\nspec:\n  replicas: 2\n  \
                 selector: {{matchLabels: {{app: app}}}}\n  template:\n    {pod}"
            ),
            Workload::WorkerPool => {
                let crd = std::fs::read_to_string(
                    dev_env_tests::repo_root().join("manifests/10-workerpool-crd.yaml"),
                )
                .expect("the demo's WorkerPool CRD");
                format!(
                    "{crd}\n---\napiVersion: demo.dev-env.io/v1alpha1\nkind: WorkerPool\nmetadata: {{name: app, namespace: shop}}\n\
                     spec:\n  replicas: 2\n  template:\n    {pod}"
                )
            }
        };
        app.write(
            "manifests/app.yaml",
            &format!("apiVersion: v1\nkind: Namespace\nmetadata: {{name: shop}}\n---\n{workload}"),
        );
        app.source("v1", false);
        app
    }

    /// Writes the service: it answers every request with `version`, or
    /// exits at once when `crash`.
    pub(crate) fn source(&self, version: &str, crash: bool) {
        self.write(
            "app/src/main.rs",
            &dev_env::bench::app_source(version, crash),
        );
    }

    /// Asserts that exactly the two pods run `digest`.
    pub(crate) fn assert_runs(&self, digest: &str) {
        let running = self.running();
        assert!(
            running.len() == 2 && running.iter().all(|id| id.ends_with(digest)),
            "pods run {running:?}, want {digest}"
        );
    }

    /// `imageID`s of the Ready, non-terminating pods, via kubectl.
    fn running(&self) -> Vec<String> {
        let kc = self
            .dir
            .join(".dev-env")
            .join(&self.name)
            .join("kubeconfig.host");
        dev_env_tests::serving_image_ids(&kc, "shop", "app=app")
    }
}

impl Drop for App {
    fn drop(&mut self) {
        if let Ok(config) = Config::load(&self.dir.join("dev-env.yaml")) {
            let _ = runtime().block_on(lifecycle::down(
                &config,
                lifecycle::DownOptions::RESET_PURGE,
                &Silent,
            ));
        }
    }
}

pub(crate) fn push(config: &Config) -> Outcome {
    push_with(config, PUSH)
}

const PUSH: PushFlags = PushFlags {
    rollout: true,
    timeout: TIMEOUT,
    verbose: false,
    wait_for_termination: false,
};

fn push_with(config: &Config, flags: PushFlags) -> Outcome {
    let mut outcomes = runtime()
        .block_on(deliver::push(
            config,
            &[String::from("app")],
            flags,
            &Stderr,
        ))
        .unwrap();
    outcomes.remove(0)
}

fn reload(config: &Config) -> Vec<Outcome> {
    let components = [String::from("app")];
    runtime()
        .block_on(deliver::reload(config, &components, RELOAD, &Stderr))
        .unwrap()
}

pub(crate) fn digest(config: &Config) -> String {
    State::load(&config.state_dir()).unwrap().images["app"]
        .digest
        .clone()
}

#[test]
fn push_rolls_out_the_digest_skips_unchanged_and_fails_fast() {
    let app = App::new();
    let config = app.config();
    up(&config).expect("dev up builds, pushes and runs the component");
    let first = digest(&config);
    app.assert_runs(&first);

    // No change: nothing uploaded, nothing rolled, exit clean.
    let same = push(&config);
    assert_eq!(same.error, None);
    assert_eq!(
        (same.uploaded_bytes, same.rolled_out),
        (0, false),
        "{same:?}"
    );
    assert_eq!(same.digest.as_deref(), Some(first.as_str()));

    // One line changed: a new digest, a new ReplicaSet, and the push
    // returns only when Ready pods run it and no old pod is left.
    app.source("v2", false);
    let observer = Observer::start(&config, &first);
    let changed = push(&config);
    let returned = std::time::Instant::now();
    assert_eq!(changed.error, None, "{changed:?}");
    let second = changed.digest.clone().unwrap();
    // How long after an independent watch saw the rollout finished did the
    // push return? Reported, not asserted.
    if let Some(seen) = observer.finish() {
        let lag = returned.saturating_duration_since(seen);
        eprintln!(
            "wait-detection latency: {} ms after an independent watch saw the rollout done",
            lag.as_millis()
        );
    }
    assert_ne!(second, first);
    assert!(
        changed.rolled_out && changed.uploaded_bytes > 0,
        "{changed:?}"
    );
    app.assert_runs(&second);

    // reload restarts without changing the digest; the manifest's `:dev`
    // reference does not roll it back.
    let reloaded = reload(&config);
    assert_eq!(reloaded[0].error, None, "{reloaded:?}");
    assert!(reloaded[0].rolled_out);
    app.assert_runs(&second);

    // An image whose pods crash fails fast with the reason and the logs.
    app.source("v3", true);
    let crashed = push(&config);
    let error = crashed.error.unwrap_or_default();
    assert!(
        error.contains("CrashLoopBackOff") && error.contains("crashing on purpose"),
        "{error}"
    );

    // A reference the registry lacks fails fast with the pull error.
    let missing = format!(
        "{}/{}/missing@sha256:{}",
        config.registry.cluster_host,
        app.name,
        "0".repeat(64)
    );
    let error = runtime()
        .block_on(async {
            let client = deliver::cluster_client(&config).await.unwrap();
            let change = rollout::Change {
                image: Some(&missing),
                ..rollout::Change::default()
            };
            let rolled =
                rollout::roll(&client, config.component("app").unwrap(), change, TIMEOUT).await?;
            rollout::wait(&client, &rolled, &WaitOptions::new(TIMEOUT)).await
        })
        .expect_err("a missing image cannot roll out")
        .to_string();
    assert!(
        error.contains("ErrImagePull") || error.contains("ImagePullBackOff"),
        "{error}"
    );

    // A Deployment whose pods never become Ready within an impossible
    // progress deadline fails with the controller's verdict.
    let good = format!("{}/{}/app@{second}", config.registry.cluster_host, app.name);
    patch_app(
        &config,
        &format!(
            r#"{{"spec":{{"progressDeadlineSeconds":1,"template":{{"spec":{{"containers":[{{"name":"app","image":"{good}","readinessProbe":{{"httpGet":{{"path":"/","port":9}},"periodSeconds":1}}}}]}}}}}}}}"#
        ),
    );
    let error = runtime()
        .block_on(async {
            let client = deliver::cluster_client(&config).await.unwrap();
            let component = config.component("app").unwrap();
            let rolled =
                rollout::roll(&client, component, rollout::Change::default(), TIMEOUT).await?;
            rollout::wait(&client, &rolled, &WaitOptions::new(TIMEOUT)).await
        })
        .expect_err("an impossible deadline cannot be met")
        .to_string();
    assert!(error.contains("progress deadline"), "{error}");

    // `dev down` leaves no pod container behind.
    let left = runtime().block_on(async {
        lifecycle::down(&config, lifecycle::DownOptions::DOWN, &Silent)
            .await
            .unwrap();
        let docker = dev_env::docker::connect().await.unwrap();
        dev_env::cluster::pod_containers(&docker, &app.name)
            .await
            .unwrap()
    });
    assert!(
        left.is_empty(),
        "pod containers left after dev down: {left:?}"
    );
}

/// An independent watch on the app's pods that notes when they first are
/// exactly two Ready pods none of which runs `old` (old ones gone).
struct Observer {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: std::thread::JoinHandle<Option<std::time::Instant>>,
}

impl Observer {
    fn start(config: &Config, old: &str) -> Observer {
        use std::sync::{
            Arc,
            atomic::{AtomicBool, Ordering},
        };

        let path = config.state_dir().join(dev_env::kubeconfig::HOST_FILE);
        let old = old.to_string();
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let thread = std::thread::spawn(move || {
            runtime().block_on(async move {
                use futures::StreamExt;
                use kube::runtime::{WatchStreamExt, reflector, watcher};

                let client = dev_env::kubeconfig::client(&path, None).await.unwrap();
                let pods: kube::Api<k8s_openapi::api::core::v1::Pod> =
                    kube::Api::namespaced(client, "shop");
                let (reader, writer) = reflector::store();
                let mut events = reflector::reflector(
                    writer,
                    watcher(pods, watcher::Config::default().labels("app=app")),
                )
                .default_backoff()
                .boxed();
                let _ = ready_tx.send(());
                while !flag.load(Ordering::SeqCst) {
                    let Ok(Some(_)) =
                        tokio::time::timeout(Duration::from_millis(200), events.next()).await
                    else {
                        continue;
                    };
                    let pods = reader.state();
                    let done = pods.len() == 2
                        && pods.iter().all(|p| {
                            let status = p
                                .status
                                .as_ref()
                                .and_then(|s| s.container_statuses.as_ref());
                            status.is_some_and(|cs| {
                                cs.iter().all(|c| c.ready && !c.image_id.ends_with(&old))
                            })
                        });
                    if done {
                        return Some(std::time::Instant::now());
                    }
                }
                None
            })
        });
        ready_rx
            .recv_timeout(Duration::from_secs(30))
            .expect("the observer's watch starts");
        Observer { stop, thread }
    }

    fn finish(self) -> Option<std::time::Instant> {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        self.thread.join().unwrap()
    }
}

/// The demo controller-manager, running in this process against the
/// environment's `kubeconfig.host` until dropped.
struct Controller {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Controller {
    fn start(config: &Config) -> Controller {
        let path = config.state_dir().join(dev_env::kubeconfig::HOST_FILE);
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            runtime().block_on(async move {
                // Started before `dev up`, which waits for the pool: it
                // begins once the node has written its kubeconfig.
                let mut stopped = stopped;
                let client = loop {
                    if path.exists()
                        && let Ok(client) = dev_env::kubeconfig::client(&path, None).await
                    {
                        break client;
                    }
                    tokio::select! {
                        _ = &mut stopped => return,
                        () = tokio::time::sleep(Duration::from_millis(200)) => {}
                    }
                };
                controller_manager::run(client, async move {
                    let _ = stopped.await;
                })
                .await;
            })
        });
        Controller {
            stop: Some(stop),
            thread: Some(thread),
        }
    }
}

impl Drop for Controller {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

#[test]
fn a_worker_pool_rolls_through_its_controller_and_the_wait_holds_it_to_the_generation() {
    let app = App::with_workload(Workload::WorkerPool);
    let config = app.config();
    let _controller = Controller::start(&config);
    up(&config).expect("dev up");
    // `dev up` returns only once the pool's Deployment runs the digest, so
    // `dev status` agrees at once.
    let status = runtime()
        .block_on(dev_env::status::status(&config))
        .unwrap();
    assert!(status.ok, "{status:#?}");
    let first = digest(&config);
    app.assert_runs(&first);

    // Nothing new: the pool already asks for the digest; the push waits for
    // the controller's verdict and the pods.
    let same = push(&config);
    assert_eq!(same.error, None, "{same:?}");
    assert!(!same.rolled_out);
    app.assert_runs(&first);

    // A change rolls the pool's template; the controller rolls its
    // Deployment; the push returns once the pool reports the new generation
    // converged and the pods run the new digest.
    let generation = |config: &Config| -> (i64, i64) {
        runtime().block_on(async {
            let client = deliver::cluster_client(config).await.unwrap();
            let pools: kube::Api<controller_manager::WorkerPool> =
                kube::Api::namespaced(client, "shop");
            let pool = pools.get("app").await.unwrap();
            (
                pool.metadata.generation.unwrap(),
                pool.status.and_then(|s| s.observed_generation).unwrap_or(0),
            )
        })
    };
    let (before, _) = generation(&config);
    app.source("v2", false);
    let changed = push(&config);
    assert_eq!(changed.error, None, "{changed:?}");
    assert!(changed.rolled_out);
    let second = changed.digest.clone().unwrap();
    assert_ne!(second, first);
    let (after, observed) = generation(&config);
    assert!(
        after > before && observed >= after,
        "generation {before} -> {after}, observed {observed}"
    );
    app.assert_runs(&second);

    // A restart goes through the pool too and keeps the digest.
    let reloaded = reload(&config);
    assert_eq!(reloaded[0].error, None, "{reloaded:?}");
    assert!(generation(&config).0 > after);
    app.assert_runs(&second);
}

#[test]
fn old_pods_that_drain_slowly_hold_a_push_only_when_asked() {
    let app = App::new();
    // A `preStop` sleep holds each old pod for 20 s after its deletion, as
    // apps that drain connections before they stop do.
    let manifest = app.dir.join("manifests/app.yaml");
    let text = std::fs::read_to_string(&manifest).unwrap();
    let probe = "readinessProbe: {httpGet: {path: /, port: 8080}, periodSeconds: 1}\n";
    let draining = text
        .replace(
            "terminationGracePeriodSeconds: 1",
            "terminationGracePeriodSeconds: 21",
        )
        .replace(
            probe,
            &format!("{probe}        lifecycle: {{preStop: {{sleep: {{seconds: 20}}}}}}\n"),
        );
    assert!(draining.contains("preStop"), "{draining}");
    app.write("manifests/app.yaml", &draining);
    let config = app.config();
    up(&config).expect("dev up");

    // By default the push returns once the new pods serve; the old ones,
    // already out of the endpoints, are still terminating and say so.
    app.source("v2", false);
    let quick = push(&config);
    assert_eq!(quick.error, None, "{quick:?}");
    assert!(quick.wait_ms < 15_000, "{quick:?}");
    assert!(quick.terminating > 0, "{quick:?}");
    assert!(quick.to_string().contains("old pod(s) still terminating"));
    app.assert_runs(&digest(&config));

    // Asked to, it waits them out.
    app.source("v3", false);
    let patient = push_with(
        &config,
        PushFlags {
            wait_for_termination: true,
            ..PUSH
        },
    );
    assert_eq!(patient.error, None, "{patient:?}");
    assert!(patient.wait_ms >= 18_000, "{patient:?}");
    assert_eq!(patient.terminating, 0, "{patient:?}");
    app.assert_runs(&digest(&config));
}

#[test]
fn a_push_whose_pods_never_pass_their_readiness_probe_times_out_with_the_probes_failure() {
    let app = App::new();
    let config = app.config();
    up(&config).expect("dev up");
    // Nothing in the pods listens on 9090: their readiness probe is refused.
    patch_app(
        &config,
        r#"{"spec":{"template":{"spec":{"containers":[{"name":"app","readinessProbe":{"httpGet":{"path":"/","port":9090}}}]}}}}"#,
    );

    app.source("v2", false);
    let failed = push_with(
        &config,
        PushFlags {
            timeout: Duration::from_secs(8),
            ..PUSH
        },
    );
    let error = failed.error.clone().unwrap_or_default();
    eprintln!("the push failed with:\n{error}");
    assert!(error.contains("timed out after 8s"), "{error}");
    // The timeout names the pod the probe holds back, and the kubelet's
    // words for why.
    assert!(
        error.contains("is running but not Ready; events:"),
        "{error}"
    );
    assert!(error.contains("Warning Unhealthy (x"), "{error}");
    assert!(
        error.contains("Readiness probe failed: Get \"http://")
            && error.contains(":9090/\": dial tcp ")
            && error.contains(": connect: connection refused"),
        "{error}"
    );
    // The pods that ran before keep serving.
    assert_eq!(app.running().len(), 2);
}

#[test]
fn a_push_whose_pods_fail_their_startup_probe_ends_with_the_probes_failure() {
    let app = App::new();
    let config = app.config();
    up(&config).expect("dev up");
    // Nothing in the pods listens on 9090: their startup probe is refused, and each failure kills the
    // container.
    patch_app(
        &config,
        r#"{"spec":{"template":{"spec":{"containers":[{"name":"app","startupProbe":{"tcpSocket":{"port":9090},"periodSeconds":1,"failureThreshold":1}}]}}}}"#,
    );

    app.source("v2", false);
    let started = std::time::Instant::now();
    let failed = push_with(
        &config,
        PushFlags {
            timeout: Duration::from_secs(60),
            ..PUSH
        },
    );
    let error = failed.error.clone().unwrap_or_default();
    eprintln!(
        "the push failed after {:?} with:\n{error}",
        started.elapsed()
    );
    assert!(!error.is_empty(), "the push failed");
    assert!(
        error.contains("Startup probe failed: dial tcp ")
            && error.contains(":9090: connect: connection refused"),
        "{error}"
    );
    assert!(
        error.contains("failed startup probe, will be restarted"),
        "{error}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "the wait ended before its deadline"
    );
    // The pods that ran before keep serving.
    assert_eq!(app.running().len(), 2);
}

/// Patches the app's Deployment with kubectl, as a user changes it by hand.
fn patch_app(config: &Config, patch: &str) {
    let sh = Shell::new().unwrap();
    let kc = config.state_dir().join(dev_env::kubeconfig::HOST_FILE);
    cmd!(
        sh,
        "kubectl --kubeconfig {kc} -n shop patch deployment app -p {patch}"
    )
    .quiet()
    .ignore_stdout()
    .run()
    .unwrap();
}

/// When each component phase was first reported.
#[derive(Default)]
struct Phases(std::sync::Mutex<Vec<(Phase, std::time::Instant)>>);

impl Phases {
    /// The time from the first `from` to the first `to` reported.
    fn between(&self, from: Phase, to: Phase) -> Duration {
        let seen = self.0.lock().unwrap();
        let at = |p: Phase| {
            seen.iter()
                .find(|(q, _)| *q == p)
                .map(|(_, t)| *t)
                .unwrap_or_else(|| panic!("no {p} phase was reported"))
        };
        at(to).saturating_duration_since(at(from))
    }
}

impl Reporter for Phases {
    fn report(&self, event: &Event) {
        if let Event::Component { phase, .. } = event {
            self.0
                .lock()
                .unwrap()
                .push((*phase, std::time::Instant::now()));
        }
        Stderr.report(event);
    }
}

#[test]
fn a_pod_no_node_can_take_fails_the_push_after_the_unschedulable_grace_with_the_schedulers_message()
{
    let app = App::new();
    let config = app.config();
    up(&config).expect("dev up");
    // A selector no node matches: every new pod stays Unschedulable.
    let sh = Shell::new().unwrap();
    let kc = config.state_dir().join("kubeconfig.host");
    let patch = r#"{"spec":{"template":{"spec":{"nodeSelector":{"disktype":"none"}}}}}"#;
    cmd!(
        sh,
        "kubectl --kubeconfig {kc} -n shop patch deployment app --type merge -p {patch}"
    )
    .run()
    .unwrap();

    app.source("v2", false);
    let phases = Phases::default();
    let mut outcomes = runtime()
        .block_on(deliver::push(
            &config,
            &[String::from("app")],
            PUSH,
            &phases,
        ))
        .unwrap();
    let failed = outcomes.remove(0);
    let error = failed.error.clone().unwrap_or_default();
    let waited = phases.between(Phase::Wait, Phase::Failed);
    eprintln!("the wait failed after {} ms:\n{error}", waited.as_millis());
    assert!(
        error.contains("cannot be scheduled")
            && error.contains(
                "0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector."
            ),
        "{error}"
    );
    assert!(error.contains("Warning FailedScheduling"), "{error}");
    let grace = dev_env::wait::workload::UNSCHEDULABLE_GRACE;
    assert!(
        waited >= grace && waited < grace + Duration::from_secs(10),
        "the wait took {waited:?}, want the grace of {grace:?} and a few seconds"
    );
    // The pods that ran before keep running.
    assert_eq!(app.running().len(), 2);
}
