use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::watch;

use super::pod_workers::humanize;
use super::runtime::{Exit, Probed, PullError, PulledImage, StartError};
use super::*;
use crate::store::{DeleteOptions, Deleted, ListOptions, StoreConfig, WriteOptions};

const DIGEST: &str = "sha256:1111111111111111111111111111111111111111111111111111111111111111";
const DEADLINE: Duration = Duration::from_secs(10);

/// containerd's start error for a binary of another architecture, as runtimes that fail the start say it.
const EXEC_FORMAT_ERROR: &str = "failed to create containerd task: failed to create shim task: OCI \
runtime create failed: runc create failed: unable to start container process: exec: \"/app\": exec format \
error: unknown";

/// Images named `missing…` fail to pull; `private…` ones pull only as user `good`; `crash…` images carry
/// the crash label; others resolve to DIGEST; `slow…` ones take 300 ms to start, their container
/// existing from the start of the call; `uncreatable…` ones cannot be created and `unstartable…` ones
/// are created but do not start (an `exec format error`). The containers it started are kept in
/// `started`, those it stopped in `stopped`, the user of every pull (`""` for anonymous ones) in
/// `pulled_as`. Containers of `probing…` images are ready as `probe` says (not ready once it is taken
/// away); others after the kubelet's delay. Its node is an armv7 machine.
struct FakeRuntime {
    started: Arc<std::sync::Mutex<Vec<String>>>,
    stopped: Arc<std::sync::Mutex<Vec<String>>>,
    pulled_as: Arc<std::sync::Mutex<Vec<String>>>,
    probe: Probe,
    /// Whether it says its containers really run.
    real: bool,
}

/// What the probes of `probing…` containers say.
type Probe = Arc<std::sync::Mutex<Option<watch::Sender<Probed>>>>;

impl ContainerRuntime for FakeRuntime {
    async fn pull(
        &self,
        image: &Reference,
        credentials: Option<&Auth>,
    ) -> Result<PulledImage, PullError> {
        let user = credentials
            .and_then(|c| c.username.clone())
            .unwrap_or_default();
        self.pulled_as.lock().unwrap().push(user.clone());
        if image.path.contains("missing") {
            return Err(PullError {
                message: format!("{}: not found", image.familiar_with_tag()),
            });
        }
        if image.path.contains("private") && user != "good" {
            return Err(PullError {
                message: format!("{user}: 401 Unauthorized"),
            });
        }
        let mut labels = BTreeMap::new();
        if image.path.contains("crash") {
            labels.insert(runtime::CRASH_LABEL.to_string(), "true".to_string());
        }
        Ok(PulledImage {
            image: image.familiar_with_tag(),
            image_id: image.image_id(DIGEST),
            labels,
        })
    }

    fn cached(&self, _image: &Reference) -> Option<PulledImage> {
        None
    }

    fn platform(&self) -> crate::platform::Platform {
        crate::platform::Platform::linux("armv7l")
    }

    async fn start(
        &self,
        _pod: &Value,
        _container: &Value,
        image: &PulledImage,
        _admitted: tokio::time::Instant,
    ) -> Result<String, StartError> {
        if image.image.contains("uncreatable") {
            return Err(StartError::Create("no space left on device".into()));
        }
        let crash = if image.labels.contains_key(runtime::CRASH_LABEL) {
            "c"
        } else if image.image.contains("probing") {
            "p"
        } else {
            "0"
        };
        let id = format!("containerd://{crash}{}", meta::random_hex(8));
        // As an engine does, the container exists before the call returns.
        self.started.lock().unwrap().push(id.clone());
        if image.image.contains("slow") {
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        if image.image.contains("unstartable") {
            return Err(StartError::Run {
                container_id: id,
                message: EXEC_FORMAT_ERROR.into(),
            });
        }
        Ok(id)
    }

    async fn wait(&self, container_id: &str) -> Exit {
        if container_id.starts_with("containerd://c") {
            tokio::time::sleep(Duration::from_millis(50)).await;
            return Exit {
                code: 1,
                reason: "Error".into(),
            };
        }
        std::future::pending().await
    }

    async fn stop(&self, container_id: &str) {
        self.stopped.lock().unwrap().push(container_id.to_string());
    }

    fn is_real(&self) -> bool {
        self.real
    }

    fn probed(&self, container_id: &str) -> Option<watch::Receiver<Probed>> {
        if !container_id.starts_with("containerd://p") {
            return None;
        }
        let probe = self.probe.lock().unwrap();
        Some(match &*probe {
            Some(probe) => probe.subscribe(),
            None => watch::channel(Probed::default()).1,
        })
    }
}

struct Harness {
    store: Store,
    shutdown: watch::Sender<bool>,
    started: Arc<std::sync::Mutex<Vec<String>>>,
    stopped: Arc<std::sync::Mutex<Vec<String>>>,
    pulled_as: Arc<std::sync::Mutex<Vec<String>>>,
    probe: Probe,
}

impl Harness {
    fn start() -> Harness {
        let mut config = Config::fast("node-1");
        config.backoff_base = Duration::from_millis(100);
        Harness::with(config, false)
    }

    /// A kubelet with `config` on a fake runtime whose containers `real`ly run or not.
    fn with(config: Config, real: bool) -> Harness {
        let store = Store::new(StoreConfig { history: 10_000 });
        let (shutdown, rx) = watch::channel(false);
        tokio::spawn(crate::scheduler::run(
            store.clone(),
            crate::scheduler::Config::fast(),
            rx.clone(),
        ));
        let started = Arc::default();
        let stopped = Arc::default();
        let pulled_as = Arc::default();
        let probe = Arc::new(std::sync::Mutex::new(Some(watch::Sender::new(
            Probed::default(),
        ))));
        let runtime = FakeRuntime {
            started: Arc::clone(&started),
            stopped: Arc::clone(&stopped),
            pulled_as: Arc::clone(&pulled_as),
            probe: Arc::clone(&probe),
            real,
        };
        tokio::spawn(run_with(store.clone(), config, runtime, rx));
        Harness {
            store,
            shutdown,
            started,
            stopped,
            pulled_as,
            probe,
        }
    }

    fn create_pod(&self, name: &str, spec: Value) {
        let pod = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default"}, "spec": spec});
        self.store
            .create(
                &GroupResource::pods(),
                Some("default"),
                pod,
                &WriteOptions::manager("test"),
            )
            .unwrap();
    }

    /// Every version of the pod until `done` holds for one (watch-driven, bounded by DEADLINE).
    async fn history_until(&self, name: &str, done: impl Fn(&Value) -> bool) -> Vec<Value> {
        let opts = ListOptions {
            field_selector: Some(format!("metadata.name={name}")),
            ..ListOptions::default()
        };
        let mut w = self
            .store
            .watch(&GroupResource::pods(), Some("default"), Some(0), &opts)
            .unwrap();
        let mut seen = Vec::new();
        let result = tokio::time::timeout(DEADLINE, async {
            while let Some(e) = w.next().await {
                if let store::WatchEvent::Added(p) | store::WatchEvent::Modified(p) = e {
                    let finished = done(&p);
                    seen.push(p);
                    if finished {
                        return;
                    }
                }
            }
        })
        .await;
        assert!(
            result.is_ok(),
            "pod {name} did not reach the expected state; last: {:#}",
            seen.last().cloned().unwrap_or_default()
        );
        seen
    }
}

impl Drop for Harness {
    fn drop(&mut self) {
        let _ = self.shutdown.send(true);
    }
}

fn container(pod: &Value) -> &Value {
    &pod["status"]["containerStatuses"][0]
}

fn waiting_reason(pod: &Value) -> Option<&str> {
    container(pod).pointer("/state/waiting/reason")?.as_str()
}

fn condition<'a>(pod: &'a Value, kind: &str) -> &'a Value {
    pod["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == kind))
        .unwrap_or(&Value::Null)
}

fn bound(image: &str) -> Value {
    json!({"nodeName": "node-1", "containers": [{"name": "a", "image": image}]})
}

#[tokio::test]
async fn a_pod_goes_from_container_creating_to_ready_with_a_normalised_image_id() {
    let h = Harness::start();
    h.create_pod("web", bound("nginx:1.25"));
    let seen = h
        .history_until("web", |p| condition(p, "Ready")["status"] == "True")
        .await;
    let creating = seen
        .iter()
        .find(|p| waiting_reason(p) == Some("ContainerCreating"))
        .expect("a ContainerCreating stage was visible");
    assert_eq!(container(creating)["imageID"], "");
    assert_eq!(container(creating)["image"], "nginx:1.25");
    assert!(container(creating).get("containerID").is_none());
    assert_eq!(creating["status"]["phase"], "Pending");
    assert_eq!(condition(creating, "Ready")["reason"], "ContainersNotReady");
    assert_eq!(
        condition(creating, "ContainersReady")["message"],
        "containers with unready status: [a]"
    );
    assert_eq!(condition(creating, "PodScheduled")["status"], "True");

    let ready = seen.last().unwrap();
    let c = container(ready);
    assert_eq!(c["imageID"], format!("docker.io/library/nginx@{DIGEST}"));
    assert_eq!(c["image"], "docker.io/library/nginx:1.25");
    assert!(
        c["containerID"]
            .as_str()
            .unwrap()
            .starts_with("containerd://")
    );
    assert_eq!(c["ready"], true);
    assert_eq!(c["started"], true);
    assert_eq!(c["restartCount"], 0);
    assert!(c.pointer("/state/running/startedAt").is_some());
    assert_eq!(ready["status"]["phase"], "Running");
    assert_eq!(ready["status"]["hostIP"], "172.18.0.2");
    assert!(
        ready["status"]["podIP"]
            .as_str()
            .unwrap()
            .starts_with("10.42.0.")
    );
    assert_eq!(condition(ready, "ContainersReady")["status"], "True");
    let logs = h.store.pod_logs("default", "web", None).unwrap();
    assert!(
        logs.ends_with("kube-sim: started container a image docker.io/library/nginx:1.25\n"),
        "{logs}"
    );
}

/// A worker waiting on a Ready pod holds no version of it but the one the store has: a thousand workers
/// each keeping the version they started from (or the one before their last status) doubled what pods
/// cost.
#[tokio::test]
async fn a_waiting_worker_keeps_no_earlier_version_of_its_pod() {
    let h = Harness::start();
    let mut w = h
        .store
        .watch(
            &GroupResource::pods(),
            Some("default"),
            Some(0),
            &ListOptions::default(),
        )
        .unwrap();
    h.create_pod("web", bound("nginx:1.25"));
    let mut versions = Vec::new();
    let ready = tokio::time::timeout(DEADLINE, async {
        while let Some(e) = w.next_shared().await {
            let Some(pod) = e.object() else { continue };
            versions.push(Arc::downgrade(pod));
            if condition(pod, "Ready")["status"] == "True" {
                return;
            }
        }
    })
    .await;
    assert!(ready.is_ok(), "the pod never became Ready");
    drop(w);
    assert!(versions.len() >= 3, "{} versions", versions.len());
    let alive = || versions.iter().filter(|v| v.strong_count() > 0).count();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
    while alive() > 1 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(alive(), 1, "versions still held, of {}", versions.len());
    assert!(
        versions.last().unwrap().strong_count() > 0,
        "the stored version is the one left"
    );
}

/// A kubelet that stops while a container starts lets the start finish and stops that container, so
/// none is left behind once the runtime is cleaned up (an aborted start could still create one).
#[tokio::test]
async fn a_kubelet_stopping_during_a_container_start_stops_that_container() {
    let h = Harness::start();
    h.create_pod("web", bound("slow:1"));
    let started = || h.started.lock().unwrap().clone();
    until("the container start began", || !started().is_empty()).await;
    let _ = h.shutdown.send(true);
    until("the started container was stopped", || {
        let stopped = h.stopped.lock().unwrap();
        started().iter().all(|id| stopped.contains(id))
    })
    .await;
}

/// On a runtime whose containers really run, the kubelet adds none of its stand-in delays.
#[tokio::test]
async fn a_runtime_whose_containers_really_run_is_spared_the_stand_in_delays() {
    let mut config = Config::fast("node-1");
    config.start_delay = Duration::from_secs(20);
    config.pull_delay = Duration::from_secs(20);
    let h = Harness::with(config, true);
    let started = std::time::Instant::now();
    h.create_pod("web", bound("nginx:1"));
    let running = |p: &Value| container(p).pointer("/state/running").is_some();
    h.history_until("web", running).await;
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "the pod took {:?} to run",
        started.elapsed()
    );
}

/// A probing runtime's readiness reaches the pod's status as soon as it changes, as the kubelet's
/// prober hands each result to its sync loop, both ways; a container the runtime forgot is not ready.
#[tokio::test]
async fn a_probe_result_reaches_the_pod_status_at_once() {
    let h = Harness::start();
    h.create_pod("web", bound("probing:1"));
    let running = |p: &Value| container(p).pointer("/state/running").is_some();
    let seen = h.history_until("web", running).await;
    assert_eq!(condition(seen.last().unwrap(), "Ready")["status"], "False");
    assert_eq!(container(seen.last().unwrap())["started"], false);
    for ready in [true, false, true] {
        let flipped = tokio::time::Instant::now();
        h.probe
            .lock()
            .unwrap()
            .as_ref()
            .unwrap()
            .send_replace(Probed {
                started: true,
                ready,
            });
        let status = if ready { "True" } else { "False" };
        h.history_until("web", |p| condition(p, "Ready")["status"] == status)
            .await;
        let took = flipped.elapsed();
        // Polling every 250 ms, as the kubelet did, averages 125 ms; a wake-up takes a few.
        assert!(
            took < Duration::from_millis(100),
            "Ready {status} after {took:?}"
        );
    }
    h.probe.lock().unwrap().take();
    h.history_until("web", |p| {
        condition(p, "Ready")["status"] == "False" && container(p)["ready"] == false
    })
    .await;
}

/// Until a container's startup probe passes, it is not started and not ready, whatever its readiness
/// probe says; once it passes, both show at once.
#[tokio::test]
async fn a_container_is_not_ready_before_its_startup_probe_passes() {
    let h = Harness::start();
    h.create_pod("slow", bound("probing:1"));
    let running = |p: &Value| container(p).pointer("/state/running").is_some();
    h.history_until("slow", running).await;
    let send = |probed: Probed| {
        h.probe
            .lock()
            .unwrap()
            .as_ref()
            .unwrap()
            .send_replace(probed);
    };
    send(Probed {
        started: false,
        ready: true,
    });
    // The pod worker wakes on the change and writes what it saw, which may not be Ready.
    tokio::time::sleep(Duration::from_millis(300)).await;
    send(Probed {
        started: true,
        ready: true,
    });
    let seen = h
        .history_until("slow", |p| condition(p, "Ready")["status"] == "True")
        .await;
    let (last, before) = seen.split_last().unwrap();
    assert_eq!(container(last)["started"], true);
    for pod in before {
        assert_eq!(container(pod)["started"], false, "{pod:#}");
        assert_eq!(container(pod)["ready"], false, "{pod:#}");
    }
}

/// Waits (DEADLINE at most) until `done` holds.
async fn until(what: &str, done: impl Fn() -> bool) {
    let deadline = tokio::time::Instant::now() + DEADLINE;
    while !done() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: not within {DEADLINE:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_missing_image_shows_err_image_pull_then_image_pull_back_off() {
    let h = Harness::start();
    h.create_pod("nope", bound("localhost:5000/missing:1"));
    let seen = h
        .history_until("nope", |p| waiting_reason(p) == Some("ImagePullBackOff"))
        .await;
    let err = seen
        .iter()
        .find(|p| waiting_reason(p) == Some("ErrImagePull"))
        .expect("ErrImagePull comes first");
    assert!(
        container(err)["state"]["waiting"]["message"]
            .as_str()
            .unwrap()
            .contains("not found")
    );
    let last = seen.last().unwrap();
    // Since Kubernetes 1.32 the back-off message carries the last pull error.
    let back_off = container(last)["state"]["waiting"]["message"]
        .as_str()
        .unwrap();
    assert!(
        back_off.starts_with("Back-off pulling image \"localhost:5000/missing:1\": ErrImagePull: ")
            && back_off.contains("not found"),
        "{back_off}"
    );
    assert_eq!(container(last)["imageID"], "");
    assert_eq!(last["status"]["phase"], "Pending");
}

#[tokio::test]
async fn a_crashing_container_loops_with_its_image_id_set() {
    let h = Harness::start();
    h.create_pod("crashy", bound("crash:1"));
    let seen = h
        .history_until("crashy", |p| {
            waiting_reason(p) == Some("CrashLoopBackOff")
                && container(p)["restartCount"].as_i64() >= Some(2)
        })
        .await;
    let last = seen.last().unwrap();
    let c = container(last);
    assert_eq!(c["imageID"], format!("docker.io/library/crash@{DIGEST}"));
    assert_eq!(c["ready"], false);
    assert_eq!(c["lastState"]["terminated"]["exitCode"], 1);
    assert_eq!(c["lastState"]["terminated"]["reason"], "Error");
    assert!(
        c["state"]["waiting"]["message"]
            .as_str()
            .unwrap()
            .starts_with("back-off ")
    );
    assert_eq!(last["status"]["phase"], "Running");
    assert_eq!(condition(last, "Ready")["status"], "False");
}

#[tokio::test]
async fn the_crash_env_var_crashes_the_virtual_container() {
    let mut spec = bound("busybox:1");
    spec["containers"][0]["env"] = json!([{"name": "SIM_CRASH", "value": "1"}]);
    let rt = VirtualRuntime::new(
        Registries::default(),
        Duration::from_secs(1),
        Duration::from_millis(10),
    );
    let image = PulledImage {
        image: "docker.io/library/busybox:1".into(),
        image_id: format!("docker.io/library/busybox@{DIGEST}"),
        labels: BTreeMap::new(),
    };
    let id = rt
        .start(
            &json!({}),
            &spec["containers"][0],
            &image,
            tokio::time::Instant::now(),
        )
        .await
        .unwrap();
    let exit = tokio::time::timeout(DEADLINE, rt.wait(&id)).await.unwrap();
    assert_eq!(exit.code, 1);
}

#[tokio::test]
async fn missing_config_references_block_the_container_until_they_exist() {
    let h = Harness::start();
    let mut spec = bound("nginx:1");
    spec["containers"][0]["envFrom"] = json!([{"configMapRef": {"name": "settings"}}]);
    h.create_pod("cfg", spec);
    let seen = h
        .history_until("cfg", |p| {
            waiting_reason(p) == Some("CreateContainerConfigError")
        })
        .await;
    assert_eq!(
        container(seen.last().unwrap())["state"]["waiting"]["message"],
        "configmap \"settings\" not found"
    );
    h.store
        .create(
            &GroupResource::new("", "configmaps"),
            Some("default"),
            json!({"metadata": {"name": "settings"}, "data": {"a": "b"}}),
            &WriteOptions::manager("test"),
        )
        .unwrap();
    h.history_until("cfg", |p| condition(p, "Ready")["status"] == "True")
        .await;
}

/// The Events recorded about a pod, as `(type, reason, message)`.
fn events_of(h: &Harness, pod: &str) -> Vec<(String, String, String)> {
    let opts = ListOptions {
        field_selector: Some(format!("involvedObject.name={pod}")),
        ..ListOptions::default()
    };
    let events = h
        .store
        .list(&GroupResource::events(), Some("default"), &opts);
    let text = |e: &Value, field: &str| e[field].as_str().unwrap_or("").to_string();
    events
        .unwrap()
        .items
        .iter()
        .map(|e| (text(e, "type"), text(e, "reason"), text(e, "message")))
        .collect()
}

#[tokio::test]
async fn a_container_that_does_not_start_shows_run_container_error_then_loops() {
    let h = Harness::start();
    h.create_pod("foreign", bound("unstartable:1"));
    let seen = h
        .history_until("foreign", |p| {
            waiting_reason(p) == Some("CrashLoopBackOff")
                && container(p)["restartCount"].as_i64() >= Some(2)
        })
        .await;
    let failed = seen
        .iter()
        .find(|p| waiting_reason(p) == Some("RunContainerError"))
        .expect("RunContainerError shows before the back-off");
    let c = container(failed);
    assert_eq!(c["state"]["waiting"]["message"], EXEC_FORMAT_ERROR);
    assert_eq!(c["lastState"]["terminated"]["reason"], "StartError");
    assert_eq!(c["lastState"]["terminated"]["exitCode"], 128);
    assert_eq!(c["lastState"]["terminated"]["message"], EXEC_FORMAT_ERROR);
    assert_eq!(
        c["imageID"],
        format!("docker.io/library/unstartable@{DIGEST}")
    );
    assert!(c["containerID"].is_string(), "{c:#}");
    assert_eq!(c["restartCount"], 1);
    assert_eq!(c["started"], false);
    assert_eq!(failed["status"]["phase"], "Running");
    let events = events_of(&h, "foreign");
    let said = |kind: &str, reason: &str, message: &str| {
        events
            .iter()
            .any(|(t, r, m)| t == kind && r == reason && m.starts_with(message))
    };
    assert!(
        said("Normal", "Created", "Created container: a"),
        "{events:?}"
    );
    assert!(
        said("Warning", "Failed", &format!("Error: {EXEC_FORMAT_ERROR}")),
        "{events:?}"
    );
    assert!(
        said(
            "Warning",
            "BackOff",
            "Back-off restarting failed container a"
        ),
        "{events:?}"
    );
    assert!(!said("Normal", "Started", ""), "{events:?}");
}

#[tokio::test]
async fn a_container_that_does_not_start_ends_its_pod_when_it_is_not_restarted() {
    let h = Harness::start();
    let mut spec = bound("unstartable:1");
    spec["restartPolicy"] = json!("Never");
    h.create_pod("once", spec);
    let seen = h
        .history_until("once", |p| p["status"]["phase"] == "Failed")
        .await;
    let c = container(seen.last().unwrap());
    assert_eq!(c["state"]["terminated"]["reason"], "StartError");
    assert_eq!(c["restartCount"], 0);
}

#[tokio::test]
async fn a_container_the_runtime_cannot_create_shows_create_container_error() {
    let h = Harness::start();
    h.create_pod("full", bound("uncreatable:1"));
    let seen = h
        .history_until("full", |p| {
            waiting_reason(p) == Some("CreateContainerError")
        })
        .await;
    let last = seen.last().unwrap();
    assert_eq!(
        container(last)["state"]["waiting"]["message"],
        "no space left on device"
    );
    assert_eq!(container(last)["imageID"], "");
    assert_eq!(last["status"]["phase"], "Pending");
    let events = events_of(&h, "full");
    assert!(
        events.iter().any(|(t, r, m)| t == "Warning"
            && r == "Failed"
            && m == "Error: no space left on device"),
        "{events:?}"
    );
}

#[tokio::test]
async fn the_node_reports_its_runtimes_architecture() {
    let h = Harness::start();
    h.create_pod("any", bound("nginx:1"));
    h.history_until("any", |p| condition(p, "Ready")["status"] == "True")
        .await;
    let node = h
        .store
        .get(&GroupResource::nodes(), None, "node-1")
        .unwrap();
    assert_eq!(node["metadata"]["labels"]["kubernetes.io/arch"], "arm");
    assert_eq!(node["metadata"]["labels"]["beta.kubernetes.io/arch"], "arm");
    assert_eq!(node["metadata"]["labels"]["kubernetes.io/os"], "linux");
    assert_eq!(node["status"]["nodeInfo"]["architecture"], "arm");
    assert_eq!(node["status"]["nodeInfo"]["operatingSystem"], "linux");
}

#[test]
fn the_virtual_runtime_runs_pods_for_the_architecture_kube_sim_was_built_for() {
    let rt = VirtualRuntime::new(
        Registries::default(),
        Duration::from_secs(1),
        Duration::from_millis(10),
    );
    let platform = rt.platform();
    assert_eq!(platform, crate::platform::Platform::linux_of_build());
    if cfg!(target_arch = "x86_64") {
        assert_eq!(platform.to_string(), "linux/amd64");
    }
    if cfg!(target_arch = "aarch64") {
        assert_eq!(platform.to_string(), "linux/arm64");
    }
}

#[tokio::test]
async fn an_invalid_image_name_is_reported() {
    let h = Harness::start();
    h.create_pod("bad", bound("Not/Valid:"));
    let seen = h
        .history_until("bad", |p| waiting_reason(p) == Some("InvalidImageName"))
        .await;
    assert!(
        container(seen.last().unwrap())["state"]["waiting"]["message"]
            .as_str()
            .unwrap()
            .starts_with("Failed to apply default image tag \"Not/Valid:\"")
    );
}

#[tokio::test]
async fn a_deleted_pod_terminates_ready_with_its_image_id_then_disappears() {
    let h = Harness::start();
    h.create_pod("old", bound("nginx:1"));
    h.history_until("old", |p| condition(p, "Ready")["status"] == "True")
        .await;
    let deleted = h
        .store
        .delete(
            &GroupResource::pods(),
            Some("default"),
            "old",
            &DeleteOptions::default(),
        )
        .unwrap();
    let Deleted::Pending(terminating) = deleted else {
        panic!("a pod on a node is deleted gracefully")
    };
    assert!(terminating["metadata"]["deletionTimestamp"].is_string());
    assert_eq!(condition(&terminating, "Ready")["status"], "True");
    assert_eq!(
        container(&terminating)["imageID"],
        format!("docker.io/library/nginx@{DIGEST}")
    );
    let gone = tokio::time::timeout(DEADLINE, async {
        loop {
            if h.store
                .get(&GroupResource::pods(), Some("default"), "old")
                .is_err()
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(gone.is_ok(), "the kubelet removes the terminated pod");
}

/// How long a pod stays after its deletion.
async fn time_to_go(h: &Harness, name: &str) -> Duration {
    let started = std::time::Instant::now();
    h.store
        .delete(
            &GroupResource::pods(),
            Some("default"),
            name,
            &DeleteOptions::default(),
        )
        .unwrap();
    tokio::time::timeout(DEADLINE, async {
        while h
            .store
            .get(&GroupResource::pods(), Some("default"), name)
            .is_ok()
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the kubelet removes the terminated pod");
    started.elapsed()
}

#[tokio::test]
async fn a_pre_stop_sleep_holds_the_pod_within_its_grace_period() {
    let h = Harness::start();
    let with_hook = |seconds: u64, grace: u64| {
        json!({"nodeName": "node-1", "terminationGracePeriodSeconds": grace,
            "containers": [{"name": "a", "image": "nginx:1",
                "lifecycle": {"preStop": {"sleep": {"seconds": seconds}}}}]})
    };
    h.create_pod("sleeper", with_hook(2, 30));
    h.create_pod("plain", bound("nginx:1"));
    for name in ["sleeper", "plain"] {
        h.history_until(name, |p| condition(p, "Ready")["status"] == "True")
            .await;
    }
    let slept = time_to_go(&h, "sleeper").await;
    assert!(slept >= Duration::from_secs(2), "{slept:?}");
    assert!(slept < Duration::from_secs(4), "{slept:?}");
    let plain = time_to_go(&h, "plain").await;
    assert!(plain < Duration::from_secs(1), "{plain:?}");
}

#[tokio::test]
async fn pods_the_scheduler_binds_to_the_node_run() {
    let h = Harness::start();
    h.create_pod(
        "loose",
        json!({"containers": [{"name": "a", "image": "nginx:1"}]}),
    );
    let seen = h
        .history_until("loose", |p| condition(p, "Ready")["status"] == "True")
        .await;
    assert_eq!(seen.last().unwrap()["spec"]["nodeName"], "node-1");
    let node = h
        .store
        .get(&GroupResource::nodes(), None, "node-1")
        .unwrap();
    assert_eq!(condition(&node, "Ready")["status"], "True");
}

/// A pod removed while the kubelet's watch was expired (here by a compaction before the kubelet saw the
/// removal) is found missing when the kubelet lists pods again: its worker stops its container.
#[tokio::test]
async fn a_pod_removed_while_the_watch_was_expired_has_its_container_stopped() {
    let h = Harness::start();
    h.create_pod("gone", bound("nginx:1"));
    let seen = h
        .history_until("gone", |p| condition(p, "Ready")["status"] == "True")
        .await;
    let id = container(seen.last().unwrap())["containerID"]
        .as_str()
        .unwrap()
        .to_string();
    let now = DeleteOptions {
        grace_period_seconds: Some(0),
        ..DeleteOptions::default()
    };
    // No await between the two: the kubelet's watch never delivers the deletion.
    h.store
        .delete(&GroupResource::pods(), Some("default"), "gone", &now)
        .unwrap();
    h.store.compact();
    let stopped = tokio::time::timeout(DEADLINE, async {
        while !h.stopped.lock().unwrap().contains(&id) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(
        stopped.is_ok(),
        "container {id} of the removed pod was not stopped"
    );
}

#[test]
fn back_off_doubles_up_to_the_cap() {
    let mut c = Config::fast("n");
    c.backoff_base = Duration::from_millis(100);
    c.backoff_max = Duration::from_millis(500);
    let steps: Vec<u128> = (1..6).map(|n| c.backoff(n).as_millis()).collect();
    assert_eq!(steps, [100, 200, 400, 500, 500]);
    assert_eq!(humanize(Duration::from_secs(80)), "1m20s");
    assert_eq!(humanize(Duration::from_millis(200)), "200ms");
}

/// A `kubernetes.io/dockerconfigjson` Secret with one entry per `(registry, user)`.
fn pull_secret(name: &str, entries: &[(&str, &str)]) -> Value {
    use base64::Engine as _;
    let auths: serde_json::Map<String, Value> = entries
        .iter()
        .map(|(registry, user)| {
            (
                registry.to_string(),
                json!({"username": user, "password": "p"}),
            )
        })
        .collect();
    let config = json!({"auths": auths}).to_string();
    json!({"apiVersion": "v1", "kind": "Secret", "type": keyring::DOCKER_CONFIG_JSON,
        "metadata": {"name": name, "namespace": "default"},
        "data": {".dockerconfigjson": base64::engine::general_purpose::STANDARD.encode(config)}})
}

#[tokio::test]
async fn pull_secrets_are_tried_in_keyring_order_and_a_missing_one_is_a_warning() {
    let h = Harness::start();
    h.store
        .create(
            &GroupResource::new("", "secrets"),
            Some("default"),
            pull_secret(
                "creds",
                &[
                    ("https://registry.test:5000/v1/", "good"),
                    ("registry.test:5000/team", "bad"),
                ],
            ),
            &WriteOptions::manager("test"),
        )
        .unwrap();
    let mut spec = bound("registry.test:5000/team/private:v1");
    spec["imagePullSecrets"] = json!([{"name": "gone"}, {"name": ""}, {"name": "creds"}]);
    h.create_pod("private", spec);
    h.history_until("private", |p| condition(p, "Ready")["status"] == "True")
        .await;
    // The longer path first, then the host: the first fails, the second pulls.
    assert_eq!(*h.pulled_as.lock().unwrap(), ["bad", "good"]);
    let events = h
        .store
        .list(
            &GroupResource::events(),
            Some("default"),
            &ListOptions::default(),
        )
        .unwrap()
        .items;
    let warning = events
        .iter()
        .find(|e| e["reason"] == "FailedToRetrieveImagePullSecret")
        .expect("a warning names the missing secret");
    assert_eq!(warning["type"], "Warning");
    assert_eq!(
        warning["message"],
        "Unable to retrieve some image pull secrets (gone); attempting to pull the image may not succeed."
    );
}

#[tokio::test]
async fn a_pull_without_matching_secrets_is_anonymous_and_every_failure_is_reported() {
    let h = Harness::start();
    h.store
        .create(
            &GroupResource::new("", "secrets"),
            Some("default"),
            pull_secret(
                "creds",
                &[("elsewhere.test", "good"), ("registry.test:5000", "bad")],
            ),
            &WriteOptions::manager("test"),
        )
        .unwrap();
    let mut spec = bound("registry.test:5000/private:v1");
    spec["imagePullSecrets"] = json!([{"name": "creds"}]);
    h.create_pod("denied", spec);
    let seen = h
        .history_until("denied", |p| waiting_reason(p) == Some("ErrImagePull"))
        .await;
    assert_eq!(
        container(seen.last().unwrap())["state"]["waiting"]["message"],
        "bad: 401 Unauthorized"
    );
    let mut spec = bound("other.test/private:v1");
    spec["imagePullSecrets"] = json!([{"name": "creds"}]);
    h.create_pod("anonymous", spec);
    h.history_until("anonymous", |p| waiting_reason(p) == Some("ErrImagePull"))
        .await;
    assert_eq!(
        h.pulled_as.lock().unwrap().last().map(String::as_str),
        Some("")
    );
}
