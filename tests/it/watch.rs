//! `watch` end to end: the real engine and registry, a kube-sim node whose
//! pods run as containers, and two services built with the cargo backend
//! from a workspace where they share a path dependency.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dev_env::report::{Event, Reporter};
use dev_env::{config::Config, lifecycle, state::State, watch};
use dev_env_tests::{SimProject, runtime};
use xshell::{Shell, cmd};

/// The bound of every wait on the loop.
const DEADLINE: Duration = Duration::from_secs(180);

/// A reporter that keeps the events and echoes them on stderr.
#[derive(Clone, Default)]
struct Events(Arc<Mutex<Vec<Event>>>);

impl Reporter for Events {
    fn report(&self, event: &Event) {
        eprintln!("{event}");
        self.0.lock().unwrap().push(event.clone());
    }
}

impl Events {
    fn count(&self, what: impl Fn(&Event) -> bool) -> usize {
        self.0.lock().unwrap().iter().filter(|e| what(e)).count()
    }

    /// Waits until `what` has happened `n` times.
    fn wait_for(&self, n: usize, describe: &str, what: impl Fn(&Event) -> bool) {
        self.wait_longer(n, describe, DEADLINE, what);
    }

    /// Waits until `what` has happened `n` times, up to `limit`.
    fn wait_longer(
        &self,
        n: usize,
        describe: &str,
        limit: Duration,
        what: impl Fn(&Event) -> bool,
    ) {
        let deadline = Instant::now() + limit;
        while self.count(&what) < n {
            assert!(Instant::now() < deadline, "waiting for {describe}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn ready(&self, component: &str) -> usize {
        self.count(|e| matches!(e, Event::Ready { component: c, .. } if c == component))
    }

    fn builds(&self, component: &str) -> usize {
        self.count(|e| {
            matches!(e, Event::Component { component: c, detail, .. } if c == component && detail == "building")
        })
    }

    fn failed(&self, component: &str) -> usize {
        self.count(|e| {
            matches!(e, Event::Component { component: c, phase: dev_env::report::Phase::Failed, .. } if c == component)
        })
    }
}

/// `app` and `job`, two HTTP services whose answer is their version and
/// the greeting of the path dependency `shared`, each run by a one-pod
/// Deployment in namespace `shop`.
fn project() -> SimProject {
    let env = SimProject::new("wch");
    let (name, subnet) = (env.name.clone(), env.subnet.clone());
    env.write(
        "Cargo.toml",
        "[workspace]\nmembers = [\"app\", \"job\", \"shared\"]\nresolver = \"3\"\n",
    );
    let package = |name: &str, deps: &str| {
        format!("[package]\nname = \"{name}\"\nversion = \"0.1.0\"\nedition = \"2024\"\n{deps}")
    };
    let uses_shared = "[dependencies]\nshared = { path = \"../shared\" }\n";
    env.write("shared/Cargo.toml", &package("shared", ""));
    greeting(&env, "hello");
    let mut components = String::new();
    let mut manifests = String::from("apiVersion: v1\nkind: Namespace\nmetadata: {name: shop}\n");
    for service in ["app", "job"] {
        env.write(
            &format!("{service}/Cargo.toml"),
            &package(service, uses_shared),
        );
        source(&env, service, "v1");
        components.push_str(&format!(
            "  {service}:\n    image: {name}/{service}\n    build: {{cargo: {{package: {service}}}}}\n    \
             rollout: {{kind: Deployment, namespace: shop, name: {service}, container: {service}}}\n"
        ));
        manifests.push_str(&deployment(&name, service, 1));
    }
    env.write("manifests/app.yaml", &manifests);
    env.write(
        "dev-env.yaml",
        &format!(
            "name: {name}\nnetwork: {{ipv4Subnet: {subnet}}}\ncluster: {{provider: sim}}\nmanifests: [manifests]\ncomponents:\n{components}"
        ),
    );
    env
}

fn deployment(env: &str, service: &str, replicas: u32) -> String {
    format!(
        "---\napiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: {service}, namespace: shop}}\nspec:\n  replicas: {replicas}\n  \
         selector: {{matchLabels: {{app: {service}}}}}\n  template:\n    metadata: {{labels: {{app: {service}}}}}\n    spec:\n      \
         terminationGracePeriodSeconds: 1\n      containers:\n      - name: {service}\n        image: dev-env-registry:5000/{env}/{service}:dev\n        \
         readinessProbe: {{httpGet: {{path: /, port: 8080}}, periodSeconds: 1}}\n"
    )
}

fn greeting(env: &SimProject, text: &str) {
    env.write(
        "shared/src/lib.rs",
        &format!("pub const GREETING: &str = \"{text}\";\n"),
    );
}

/// Writes `service`'s main: it logs its version, then answers every
/// request with it and the shared greeting.
fn source(env: &SimProject, service: &str, version: &str) {
    env.write(
        &format!("{service}/src/main.rs"),
        &format!(
            "use std::io::{{Read, Write}};\n\nfn main() {{\n    println!(\"{service} {version} listening\");\n    \
             let body = format!(\"{version} {{}}\", shared::GREETING);\n    \
             let listener = std::net::TcpListener::bind(\"0.0.0.0:8080\").unwrap();\n    \
             for stream in listener.incoming() {{\n        let Ok(mut s) = stream else {{ continue }};\n        \
             let mut buf = [0u8; 1024];\n        let _ = s.read(&mut buf);\n        \
             let reply = format!(\"HTTP/1.1 200 OK\\r\\ncontent-length: {{}}\\r\\n\\r\\n{{body}}\", body.len());\n        \
             let _ = s.write_all(reply.as_bytes());\n    }}\n}}\n"
        ),
    );
}

fn digest(config: &Config, component: &str) -> String {
    State::load(&config.state_dir()).unwrap().images[component]
        .digest
        .clone()
}

fn kubectl(config: &Config, args: &[&str]) -> String {
    let sh = Shell::new().unwrap();
    let kc = config.state_dir().join("kubeconfig.host");
    cmd!(sh, "kubectl --kubeconfig {kc} -n shop {args...}")
        .read()
        .unwrap()
}

/// The names of the pods of `service` that are not terminating.
fn pods(config: &Config, service: &str) -> Vec<String> {
    let path = "jsonpath={range .items[*]}{.metadata.name}|{.metadata.deletionTimestamp} {end}";
    let pods = kubectl(
        config,
        &["get", "pods", "-l", &format!("app={service}"), "-o", path],
    );
    pods.split_whitespace()
        .filter_map(|p| p.strip_suffix('|'))
        .map(str::to_string)
        .collect()
}

/// What the pods of `service` that are not terminating logged.
fn serving(config: &Config, service: &str) -> String {
    pods(config, service)
        .iter()
        .map(|pod| {
            // A pod still being created has no log yet.
            let sh = Shell::new().unwrap();
            let kc = config.state_dir().join("kubeconfig.host");
            cmd!(sh, "kubectl --kubeconfig {kc} -n shop logs {pod}")
                .quiet()
                .ignore_stderr()
                .read()
                .unwrap_or_default()
        })
        .collect()
}

/// A running watch session on its own thread, stopped on drop.
struct Session {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    done: Option<std::thread::JoinHandle<Result<(), String>>>,
}

impl Session {
    fn start(file: &Path, events: &Events) -> Session {
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let (file, events) = (file.to_path_buf(), events.clone());
        let done = std::thread::spawn(move || {
            let options = watch::WatchOptions {
                components: Vec::new(),
                timeout: Duration::from_secs(120),
                wait_for_termination: false,
                prune: dev_env::apply::Prune::DECLARED,
            };
            let stop = async {
                let _ = stopped.await;
            };
            runtime()
                .block_on(watch::run(&file, &options, &events, stop))
                .map_err(|e| dev_env::error_chain(&e))
        });
        Session {
            stop: Some(stop),
            done: Some(done),
        }
    }

    /// Stops the session and says how long it took to return.
    fn stop(&mut self) -> Duration {
        let started = Instant::now();
        let _ = self.stop.take().expect("running").send(());
        let result = self.done.take().expect("running").join().unwrap();
        result.expect("the session ends cleanly");
        started.elapsed()
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        if self.done.is_some() {
            self.stop();
        }
    }
}

#[test]
fn watch_rolls_out_what_each_save_touches_and_only_that() {
    let env = project();
    let config = env.config();
    let events = Events::default();
    let mut session = Session::start(&config.file, &events);
    // The first session may build the node image and both components from cold.
    events.wait_longer(
        1,
        "app ready",
        Duration::from_secs(900),
        |e| matches!(e, Event::Ready { component, .. } if component == "app"),
    );
    events.wait_for(
        1,
        "job ready",
        |e| matches!(e, Event::Ready { component, .. } if component == "job"),
    );
    let (app1, job1) = (digest(&config, "app"), digest(&config, "job"));
    let job_pods = pods(&config, "job");

    // A save in `app` rolls out `app` alone.
    source(&env, "app", "v2");
    let ready = events.ready("app");
    events.wait_for(
        ready + 1,
        "app ready on v2",
        |e| matches!(e, Event::Ready { component, .. } if component == "app"),
    );
    let app2 = digest(&config, "app");
    assert_ne!(app2, app1, "app was rebuilt");
    assert_eq!(digest(&config, "job"), job1, "job was not");
    assert_eq!(events.ready("job"), 1, "job was not rolled out");
    assert_eq!(pods(&config, "job"), job_pods, "job's pod kept running");
    assert!(serving(&config, "app").contains("app v2 listening"));

    // A save in the shared path dependency rolls out both.
    greeting(&env, "bonjour");
    let (app_ready, job_ready) = (events.ready("app"), events.ready("job"));
    events.wait_for(
        app_ready + 1,
        "app ready with the new greeting",
        |e| matches!(e, Event::Ready { component, .. } if component == "app"),
    );
    events.wait_for(
        job_ready + 1,
        "job ready with the new greeting",
        |e| matches!(e, Event::Ready { component, .. } if component == "job"),
    );
    assert_ne!(digest(&config, "app"), app2);
    assert_ne!(digest(&config, "job"), job1);

    // A compile error is reported and the session goes on; the fix rolls out.
    env.write("app/src/main.rs", "fn main() { this is not rust }\n");
    let failed = events.failed("app");
    events.wait_for(failed + 1, "the compile error", |e| {
        matches!(e, Event::Component { component, phase: dev_env::report::Phase::Failed, .. } if component == "app")
    });
    let ready = events.ready("app");
    source(&env, "app", "v3");
    events.wait_for(
        ready + 1,
        "app ready on v3",
        |e| matches!(e, Event::Ready { component, .. } if component == "app"),
    );
    assert!(serving(&config, "app").contains("app v3 listening"));

    // Three saves in quick succession: at most two builds, the last runs.
    let (builds, ready) = (events.builds("app"), events.ready("app"));
    for version in ["v4", "v5", "v6"] {
        source(&env, "app", version);
        std::thread::sleep(Duration::from_millis(100));
    }
    let deadline = Instant::now() + DEADLINE;
    while !serving(&config, "app").contains("app v6 listening") {
        assert!(Instant::now() < deadline, "app v6 runs in time");
        std::thread::sleep(Duration::from_millis(200));
    }
    events.wait_for(
        ready + 1,
        "app ready on v6",
        |e| matches!(e, Event::Ready { component, .. } if component == "app"),
    );

    // A manifest change is applied; the untouched component keeps its pod.
    let app_pods = pods(&config, "app");
    let mut manifests = String::from("apiVersion: v1\nkind: Namespace\nmetadata: {name: shop}\n");
    manifests.push_str(&deployment(&env.name, "app", 1));
    manifests.push_str(&deployment(&env.name, "job", 2));
    env.write("manifests/app.yaml", &manifests);
    let deadline = Instant::now() + DEADLINE;
    while pods(&config, "job").len() != 2 {
        assert!(Instant::now() < deadline, "job scaled to two pods in time");
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(pods(&config, "app"), app_pods, "app's pod kept running");

    // An environment file that needs `dev up --recreate` is reported, not applied.
    let file = std::fs::read_to_string(&config.file).unwrap();
    let port = dev_env_tests::free_port();
    std::fs::write(
        &config.file,
        format!("{file}registry: {{hostPort: {port}}}\n"),
    )
    .unwrap();
    events.wait_for(
        1,
        "the drift reported",
        |e| matches!(e, Event::WatchProblem { message } if message.contains("dev up --recreate")),
    );
    std::fs::write(&config.file, &file).unwrap();
    assert_eq!(pods(&config, "app"), app_pods, "nothing was recreated");

    // Stopping is quick and leaves a converged environment.
    let took = session.stop();
    // Counted once the session has ended, so no build can still be starting;
    // none of the steps after the quick saves builds `app`.
    let started = events.builds("app") - builds;
    assert!(
        (1..=2).contains(&started),
        "{started} builds for three quick saves"
    );
    assert!(
        took < Duration::from_secs(2),
        "the session stopped in {took:?}"
    );
    let status = runtime()
        .block_on(dev_env::status::status(&config))
        .unwrap();
    assert!(status.ok, "{status:#?}");
    drop(session);
    let _ = runtime().block_on(lifecycle::down(
        &config,
        lifecycle::DownOptions::RESET_PURGE,
        &dev_env::report::Silent,
    ));
}
