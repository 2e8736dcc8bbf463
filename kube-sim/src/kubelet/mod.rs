//! A kubelet stand-in for one node, in the spirit of KWOK's pod stages but with real image resolution.
//!
//! For every pod bound to the node a worker walks the stages a real kubelet with containerd shows:
//!
//! 1. After `start_delay`: `Pending`, `PodScheduled`/`Initialized` True, `ContainersReady`/`Ready` False
//!    (`ContainersNotReady`, `containers with unready status: [a]`), every container waiting in
//!    `ContainerCreating` with `imageID: ""`, `hostIP`, `podIP`, `startTime`.
//! 2. Pods whose non-optional configMap or secret volumes are missing stay in `ContainerCreating`.
//! 3. Each container's image is resolved by the [`ContainerRuntime`] (the virtual one asks the registry
//!    over the OCI distribution API). Failures show `ErrImagePull`, then `ImagePullBackOff` until the
//!    back-off passes; an unparsable name shows `InvalidImageName`.
//! 4. Missing configMaps or secrets named by `env`/`envFrom` show `CreateContainerConfigError`.
//! 5. The container starts: `running.startedAt`, `started`, `containerID`, `imageID` (the normalised
//!    name with the manifest digest), phase `Running`, a log line. It becomes ready after `ready_delay`
//!    plus the readiness probe's `initialDelaySeconds` scaled by `probe_scale`.
//! 6. A container that exits is restarted with a doubling back-off (`CrashLoopBackOff`, `lastState.terminated`,
//!    `restartCount`), keeping its `imageID`.
//! 7. A pod marked for deletion keeps its status (it may stay Ready, with its old `imageID`) for
//!    `termination_delay` (at most its grace period), then is deleted with grace period 0.
//!
//! Pods with no `spec.nodeName` are bound to the node after `start_delay`, standing in for the scheduler.

pub mod docker;
pub mod logs;
pub mod reference;
pub mod registry;
pub mod runtime;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use serde_json::{Map, Value, json};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::controller::follow;
use crate::meta;
use crate::resource::GroupResource;
use crate::store::{self, DeleteOptions, Store, WatchEvent, WriteOptions};

pub use logs::Logs;
pub use reference::Reference;
pub use registry::Registries;
pub use runtime::{ContainerRuntime, VirtualRuntime};

/// How often the kubelet reads the readiness of a probing runtime's containers.
const READINESS_POLL: Duration = Duration::from_millis(250);

/// The field manager of kubelet writes.
pub const MANAGER: &str = "kubelet";

/// The kubelet could not be set up or could not write.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The registries configuration is unusable.
    #[error(transparent)]
    Registries(#[from] registry::Error),
    /// A store call failed.
    #[error(transparent)]
    Store(#[from] store::Error),
}

/// Stage delays and node identity. There is no `Default`: use [`Config::fast`] or fill every field.
#[derive(Clone, Debug)]
pub struct Config {
    /// The node name; pods with this `spec.nodeName` are run.
    pub node_name: String,
    /// The node's address (`hostIP`).
    pub node_ip: String,
    /// The first three octets of pod addresses, for example `10.42.0`.
    pub pod_network: String,
    /// From seeing a pod to its first status (`ContainerCreating`).
    pub start_delay: Duration,
    /// Added to every image pull.
    pub pull_delay: Duration,
    /// From a container's start to its readiness.
    pub ready_delay: Duration,
    /// Multiplies the readiness probe's `initialDelaySeconds` (0.01 makes 10 s into 100 ms).
    pub probe_scale: f64,
    /// How long a crashing container runs before it exits.
    pub crash_after: Duration,
    /// The first back-off of image pulls and restarts; it doubles on each failure.
    pub backoff_base: Duration,
    /// The longest back-off.
    pub backoff_max: Duration,
    /// How long a terminating pod stays (at most its grace period).
    pub termination_delay: Duration,
    /// How long one registry request may take.
    pub pull_timeout: Duration,
    /// Registry mirrors.
    pub registries: Registries,
}

impl Config {
    /// Short delays that keep the order of the stages: for tests and local use.
    pub fn fast(node_name: &str) -> Config {
        Config {
            node_name: node_name.to_string(),
            node_ip: "172.18.0.2".to_string(),
            pod_network: "10.42.0".to_string(),
            start_delay: Duration::from_millis(30),
            pull_delay: Duration::from_millis(30),
            ready_delay: Duration::from_millis(50),
            probe_scale: 0.01,
            crash_after: Duration::from_millis(100),
            backoff_base: Duration::from_millis(500),
            backoff_max: Duration::from_secs(10),
            termination_delay: Duration::from_millis(300),
            pull_timeout: Duration::from_secs(5),
            registries: Registries::default(),
        }
    }

    /// Reads a k3s `registries.yaml` into [`Config::registries`].
    pub fn with_registries_file(mut self, path: &Path) -> Result<Config, Error> {
        self.registries = Registries::load(path)?;
        Ok(self)
    }

    fn backoff(&self, failures: u32) -> Duration {
        let factor = 2u32.saturating_pow(failures.saturating_sub(1)).min(1 << 16);
        (self.backoff_base * factor).min(self.backoff_max)
    }
}

/// Runs the kubelet with the virtual runtime until `shutdown` flips.
pub async fn run(store: Store, config: Config, shutdown: watch::Receiver<bool>) {
    let runtime = VirtualRuntime::new(
        config.registries.clone(),
        config.pull_timeout,
        config.crash_after,
    );
    run_with(store, config, runtime, shutdown).await;
}

struct Kubelet<R> {
    store: Store,
    config: Config,
    runtime: R,
    logs: Arc<Logs>,
    next_ip: AtomicU32,
    /// Image pulls run one at a time, as the kubelet's `serializeImagePulls` default has it.
    pulls: tokio::sync::Mutex<()>,
}

/// Runs the kubelet with a given runtime until `shutdown` flips.
pub async fn run_with<R: ContainerRuntime>(
    store: Store,
    config: Config,
    runtime: R,
    shutdown: watch::Receiver<bool>,
) {
    let logs = Arc::new(Logs::new(&config.node_name));
    match runtime.pod_logs() {
        Some(real) => store.set_pod_logs(real),
        None => store.set_pod_logs(logs.clone()),
    }
    if let Err(e) = register_node(&store, &config) {
        tracing::warn!(node = %config.node_name, error = %e, "registering the node failed");
    }
    let k = Arc::new(Kubelet {
        store: store.clone(),
        config,
        runtime,
        logs,
        next_ip: AtomicU32::new(2),
        pulls: tokio::sync::Mutex::new(()),
    });
    let mut workers: HashMap<String, (watch::Sender<Value>, JoinHandle<()>)> = HashMap::new();
    let mut binding: HashSet<String> = HashSet::new();
    follow(&store, &GroupResource::pods(), shutdown, |e| {
        let (pod, deleted) = match &e {
            WatchEvent::Added(p) | WatchEvent::Modified(p) => (p, false),
            WatchEvent::Deleted(p) => (p, true),
            _ => return,
        };
        let uid = meta::str_at(pod, "/metadata/uid").unwrap_or("").to_string();
        if deleted {
            if let Some((_, task)) = workers.remove(&uid) {
                // The worker stops its containers when its sender is dropped; make sure it ends.
                let handle = task;
                tokio::spawn(async move {
                    if tokio::time::timeout(Duration::from_secs(5), handle)
                        .await
                        .is_err()
                    {
                        tracing::debug!("pod worker did not stop in time");
                    }
                });
            }
            binding.remove(&uid);
            k.logs.remove(&uid);
            return;
        }
        let node = meta::str_at(pod, "/spec/nodeName").unwrap_or("");
        if node.is_empty() {
            let scheduler = meta::str_at(pod, "/spec/schedulerName").unwrap_or("default-scheduler");
            if scheduler == "default-scheduler" && binding.insert(uid) {
                tokio::spawn(bind(k.clone(), pod.clone()));
            }
            return;
        }
        if node != k.config.node_name {
            return;
        }
        match workers.get(&uid) {
            Some((tx, _)) => {
                let _ = tx.send(pod.clone());
            }
            None => {
                let (tx, rx) = watch::channel(pod.clone());
                let task = tokio::spawn(pod_worker(k.clone(), rx));
                workers.insert(uid, (tx, task));
            }
        }
    })
    .await;
    for (_, (_, task)) in workers {
        task.abort();
    }
}

/// Creates (or refreshes) the Node object.
fn register_node(store: &Store, config: &Config) -> Result<(), Error> {
    let nodes = GroupResource::nodes();
    let name = &config.node_name;
    let node = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {
            "kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
            "beta.kubernetes.io/os": "linux", "beta.kubernetes.io/arch": "amd64",
            "node-role.kubernetes.io/control-plane": "true", "node-role.kubernetes.io/master": "true",
            "node.kubernetes.io/instance-type": "k3s"}},
        "spec": {"podCIDR": format!("{}.0/24", config.pod_network), "podCIDRs": [format!("{}.0/24", config.pod_network)]}});
    let mut current = match store.get(&nodes, None, name) {
        Ok(n) => n,
        Err(store::Error::NotFound { .. }) => {
            store.create(&nodes, None, node, &WriteOptions::manager(MANAGER))?
        }
        Err(e) => return Err(e.into()),
    };
    let now = meta::now_rfc3339();
    let resources = json!({"cpu": "2", "memory": "8145440Ki", "pods": "110", "ephemeral-storage": "102400000Ki"});
    current["status"] = json!({
        "conditions": [
            {"type": "MemoryPressure", "status": "False", "reason": "KubeletHasSufficientMemory", "message": "kubelet has sufficient memory available", "lastHeartbeatTime": now, "lastTransitionTime": now},
            {"type": "DiskPressure", "status": "False", "reason": "KubeletHasNoDiskPressure", "message": "kubelet has no disk pressure", "lastHeartbeatTime": now, "lastTransitionTime": now},
            {"type": "PIDPressure", "status": "False", "reason": "KubeletHasSufficientPID", "message": "kubelet has sufficient PID available", "lastHeartbeatTime": now, "lastTransitionTime": now},
            {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "kubelet is posting ready status", "lastHeartbeatTime": now, "lastTransitionTime": now},
        ],
        "addresses": [{"type": "InternalIP", "address": config.node_ip}, {"type": "Hostname", "address": name}],
        "capacity": resources, "allocatable": resources,
        "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
        "nodeInfo": {"architecture": "amd64", "operatingSystem": "linux", "osImage": "kube-sim",
            "kernelVersion": "", "containerRuntimeVersion": "containerd://1.7.23-k3s2",
            "kubeletVersion": "v1.32.0+k3s1", "kubeProxyVersion": "v1.32.0+k3s1",
            "machineID": "", "systemUUID": "", "bootID": ""},
    });
    store.update_status(&nodes, None, current, &WriteOptions::manager(MANAGER))?;
    Ok(())
}

/// Binds an unscheduled pod to the node, as the scheduler would.
async fn bind<R: ContainerRuntime>(k: Arc<Kubelet<R>>, pod: Value) {
    tokio::time::sleep(k.config.start_delay).await;
    let ns = meta::namespace_of(&pod).to_string();
    let name = meta::name_of(&pod).to_string();
    for _ in 0..3 {
        let Ok(mut current) = k.store.get(&GroupResource::pods(), Some(&ns), &name) else {
            return;
        };
        if current.pointer("/metadata/uid") != pod.pointer("/metadata/uid")
            || meta::str_at(&current, "/spec/nodeName").is_some_and(|n| !n.is_empty())
            || current.pointer("/metadata/deletionTimestamp").is_some()
        {
            return;
        }
        current["spec"]["nodeName"] = json!(k.config.node_name);
        match k.store.update(
            &GroupResource::pods(),
            Some(&ns),
            current,
            &WriteOptions::manager("kube-scheduler"),
        ) {
            Ok(_) => return,
            Err(store::Error::Conflict { .. }) => continue,
            Err(e) => {
                tracing::warn!(pod = %name, error = %e, "binding failed");
                return;
            }
        }
    }
}

/// Where one container is.
#[derive(Clone, Debug)]
enum Stage {
    /// Not created yet.
    Creating,
    /// The last pull failed; shown until the back-off starts.
    PullFailed { message: String },
    /// Waiting for the pull back-off to pass; since Kubernetes 1.32 the message carries the last error.
    PullBackOff { message: String },
    /// The image name cannot be parsed.
    InvalidName { message: String },
    /// A referenced configMap or secret is missing.
    ConfigError { message: String },
    /// Running since `started_at`.
    Running { started_at: String },
    /// Exited; waiting for the restart back-off.
    CrashBackOff { message: String },
    /// Exited and will not restart.
    Terminated,
}

struct Container {
    spec: Value,
    name: String,
    stage: Stage,
    /// When the next step is due.
    next: Option<Instant>,
    pulled: Option<runtime::PulledImage>,
    /// Whether a container was ever created (so `imageID` and `containerID` are reported).
    created: bool,
    container_id: Option<String>,
    ready: bool,
    ready_at: Option<Instant>,
    restart_count: i64,
    pull_failures: u32,
    last_terminated: Option<Value>,
    waiter: Option<JoinHandle<()>>,
}

impl Container {
    fn image(&self) -> &str {
        self.spec["image"].as_str().unwrap_or("")
    }
}

struct PodRun {
    uid: String,
    namespace: String,
    name: String,
    pod_ip: String,
    start_time: String,
    containers: Vec<Container>,
    restart_policy: String,
    volumes_ready: bool,
    volumes_next: Option<Instant>,
    mount_failure_reported: bool,
}

async fn pod_worker<R: ContainerRuntime>(k: Arc<Kubelet<R>>, mut rx: watch::Receiver<Value>) {
    rx.borrow_and_update();
    tokio::select! {
        _ = tokio::time::sleep(k.config.start_delay) => {}
        _ = wait_for_deletion(&mut rx) => {}
    }
    let pod = rx.borrow().clone();
    if pod.pointer("/metadata/deletionTimestamp").is_some() {
        terminate(&k, &pod, &mut Vec::new()).await;
        return;
    }
    let ip = k.next_ip.fetch_add(1, Ordering::Relaxed);
    let mut run = PodRun {
        uid: meta::str_at(&pod, "/metadata/uid")
            .unwrap_or("")
            .to_string(),
        namespace: meta::namespace_of(&pod).to_string(),
        name: meta::name_of(&pod).to_string(),
        // A real runtime reports the address the network gives the container at its start.
        pod_ip: if k.runtime.is_real() {
            String::new()
        } else {
            format!("{}.{}", k.config.pod_network, ip % 250 + 2)
        },
        start_time: meta::now_rfc3339(),
        containers: pod
            .pointer("/spec/containers")
            .and_then(Value::as_array)
            .map(|cs| {
                cs.iter()
                    .map(|c| Container {
                        spec: c.clone(),
                        name: c["name"].as_str().unwrap_or("").to_string(),
                        stage: Stage::Creating,
                        next: None,
                        pulled: None,
                        created: false,
                        container_id: None,
                        ready: false,
                        ready_at: None,
                        restart_count: 0,
                        pull_failures: 0,
                        last_terminated: None,
                        waiter: None,
                    })
                    .collect()
            })
            .unwrap_or_default(),
        restart_policy: meta::str_at(&pod, "/spec/restartPolicy")
            .unwrap_or("Always")
            .to_string(),
        volumes_ready: false,
        volumes_next: Some(Instant::now()),
        mount_failure_reported: false,
    };
    let (exit_tx, mut exit_rx) = mpsc::unbounded_channel::<(usize, String, runtime::Exit)>();
    write_status(&k, &run, &pod);
    loop {
        let latest = rx.borrow().clone();
        if latest.pointer("/metadata/deletionTimestamp").is_some() {
            terminate(&k, &latest, &mut run.containers).await;
            return;
        }
        step(&k, &mut run, &latest, &exit_tx).await;
        let latest = rx.borrow().clone();
        write_status(&k, &run, &latest);
        let next = run
            .containers
            .iter()
            .flat_map(|c| [c.next, c.ready_at])
            .chain([run.volumes_next])
            .flatten()
            .min();
        let sleep = async {
            match next {
                Some(t) => tokio::time::sleep_until(t).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = sleep => {}
            changed = rx.changed() => {
                if changed.is_err() {
                    stop_all(&k, &mut run.containers, Duration::ZERO).await;
                    return;
                }
            }
            Some((i, id, exit)) = exit_rx.recv() => container_exited(&k, &mut run, i, &id, exit),
        }
    }
}

async fn wait_for_deletion(rx: &mut watch::Receiver<Value>) {
    loop {
        if rx.borrow().pointer("/metadata/deletionTimestamp").is_some() {
            return;
        }
        if rx.changed().await.is_err() {
            return std::future::pending().await;
        }
    }
}

/// Takes every step that is due.
async fn step<R: ContainerRuntime>(
    k: &Arc<Kubelet<R>>,
    run: &mut PodRun,
    pod: &Value,
    exit_tx: &mpsc::UnboundedSender<(usize, String, runtime::Exit)>,
) {
    let now = Instant::now();
    if !run.volumes_ready {
        if run.volumes_next.is_some_and(|t| t > now) {
            return;
        }
        match missing_volume_source(&k.store, pod) {
            None => {
                run.volumes_ready = true;
                run.volumes_next = None;
            }
            Some(what) => {
                tracing::debug!(pod = %run.name, %what, "waiting for a volume source");
                if !run.mount_failure_reported {
                    event(
                        k,
                        run,
                        "Warning",
                        "FailedMount",
                        &format!("MountVolume.SetUp failed: {what}"),
                    );
                    run.mount_failure_reported = true;
                }
                run.volumes_next = Some(now + k.config.backoff_base);
                return;
            }
        }
    }
    for i in 0..run.containers.len() {
        let now = Instant::now();
        let c = &mut run.containers[i];
        if let (Stage::Running { .. }, Some(at)) = (&c.stage, c.ready_at)
            && at <= now
        {
            // A probing runtime is asked again after a short while; otherwise the delay has passed.
            match c
                .container_id
                .as_deref()
                .and_then(|id| k.runtime.readiness(id))
            {
                Some(ready) => {
                    c.ready = ready;
                    c.ready_at = Some(now + READINESS_POLL);
                }
                None => {
                    c.ready = true;
                    c.ready_at = None;
                }
            }
        }
        if c.next.is_none_or(|t| t > now) && !matches!(c.stage, Stage::Creating) {
            continue;
        }
        match c.stage.clone() {
            Stage::PullFailed { message } => {
                c.stage = Stage::PullBackOff { message };
                c.next = Some(now + k.config.backoff(c.pull_failures) / 2);
                let image = c.image().to_string();
                event(
                    k,
                    run,
                    "Normal",
                    "BackOff",
                    &format!("Back-off pulling image \"{image}\""),
                );
                event(k, run, "Warning", "Failed", "Error: ImagePullBackOff");
            }
            Stage::Creating
            | Stage::PullBackOff { .. }
            | Stage::ConfigError { .. }
            | Stage::CrashBackOff { .. } => {
                start_container(k, run, i, pod, exit_tx).await;
            }
            Stage::InvalidName { .. } | Stage::Running { .. } | Stage::Terminated => {
                c.next = None;
            }
        }
    }
}

/// Pulls the image if needed, checks configuration references, and starts the container.
async fn start_container<R: ContainerRuntime>(
    k: &Arc<Kubelet<R>>,
    run: &mut PodRun,
    i: usize,
    pod: &Value,
    exit_tx: &mpsc::UnboundedSender<(usize, String, runtime::Exit)>,
) {
    let cfg = &k.config;
    let image = run.containers[i].image().to_string();
    let reference = match Reference::parse(&image) {
        Ok(r) => r,
        Err(e) => {
            let c = &mut run.containers[i];
            let message = format!("Failed to apply default image tag \"{image}\": {e}");
            c.stage = Stage::InvalidName {
                message: message.clone(),
            };
            c.next = None;
            event(k, run, "Warning", "InspectFailed", &message);
            event(k, run, "Warning", "Failed", "Error: InvalidImageName");
            return;
        }
    };
    let policy = run.containers[i].spec["imagePullPolicy"]
        .as_str()
        .unwrap_or_else(|| crate::defaults::default_pull_policy(&image))
        .to_string();
    let serial = k.pulls.lock().await;
    let cached = k.runtime.cached(&reference);
    let pulled = match (policy.as_str(), cached) {
        ("Always", _) | (_, None) if policy != "Never" => {
            tokio::time::sleep(cfg.pull_delay).await;
            match k.runtime.pull(&reference).await {
                Ok(p) => {
                    run.containers[i].pull_failures = 0;
                    p
                }
                Err(e) => {
                    let c = &mut run.containers[i];
                    c.pull_failures += 1;
                    tracing::debug!(pod = %run.name, container = %c.name, error = %e, "image pull failed");
                    c.stage = Stage::PullFailed {
                        message: e.message.clone(),
                    };
                    c.next = Some(Instant::now() + cfg.backoff(c.pull_failures) / 2);
                    event(
                        k,
                        run,
                        "Warning",
                        "Failed",
                        &format!("Failed to pull image \"{image}\": {}", e.message),
                    );
                    event(k, run, "Warning", "Failed", "Error: ErrImagePull");
                    return;
                }
            }
        }
        (_, Some(p)) => p,
        (_, None) => {
            let c = &mut run.containers[i];
            c.stage = Stage::PullFailed {
                message: format!(
                    "Container image \"{image}\" is not present with pull policy of Never"
                ),
            };
            c.next = Some(Instant::now() + cfg.backoff_base);
            return;
        }
    };
    drop(serial);
    if let Some(message) = missing_config_reference(&k.store, pod, &run.containers[i].spec) {
        let c = &mut run.containers[i];
        let first = !matches!(&c.stage, Stage::ConfigError { message: m } if *m == message);
        c.stage = Stage::ConfigError {
            message: message.clone(),
        };
        if first {
            event(k, run, "Warning", "Failed", &format!("Error: {message}"));
        }
        let c = &mut run.containers[i];
        c.next = Some(Instant::now() + cfg.backoff_base);
        return;
    }
    let id = match k.runtime.start(pod, &run.containers[i].spec, &pulled).await {
        Ok(id) => id,
        Err(message) => {
            let c = &mut run.containers[i];
            c.stage = Stage::ConfigError { message };
            c.next = Some(Instant::now() + cfg.backoff_base);
            return;
        }
    };
    let started_at = meta::now_rfc3339();
    let c = &mut run.containers[i];
    k.logs
        .started(&run.uid, &c.name, &pulled.image, &started_at);
    let probe_delay = c
        .spec
        .pointer("/readinessProbe/initialDelaySeconds")
        .and_then(Value::as_f64)
        .map(|s| Duration::from_secs_f64((s * cfg.probe_scale).max(0.0)))
        .unwrap_or_default();
    let ready_in = if k.runtime.is_real() {
        READINESS_POLL
    } else {
        cfg.ready_delay + probe_delay
    };
    if let Some(ip) = k.runtime.pod_ip(&id) {
        run.pod_ip = ip;
    }
    c.pulled = Some(pulled);
    c.created = true;
    c.container_id = Some(id.clone());
    c.stage = Stage::Running { started_at };
    c.next = None;
    if ready_in.is_zero() {
        c.ready = true;
        c.ready_at = None;
    } else {
        c.ready = false;
        c.ready_at = Some(Instant::now() + ready_in);
    }
    if let Some(w) = c.waiter.take() {
        w.abort();
    }
    let tx = exit_tx.clone();
    let kubelet = k.clone();
    c.waiter = Some(tokio::spawn(async move {
        let exit = kubelet.runtime.wait(&id).await;
        let _ = tx.send((i, id, exit));
    }));
}

fn container_exited<R: ContainerRuntime>(
    k: &Arc<Kubelet<R>>,
    run: &mut PodRun,
    i: usize,
    id: &str,
    exit: runtime::Exit,
) {
    let pod_ref = format!("{}_{}({})", run.name, run.namespace, run.uid);
    let restart_policy = run.restart_policy.clone();
    let Some(c) = run.containers.get_mut(i) else {
        return;
    };
    if c.container_id.as_deref() != Some(id) {
        return;
    }
    let Stage::Running { started_at } = c.stage.clone() else {
        return;
    };
    c.waiter = None;
    c.ready = false;
    c.ready_at = None;
    c.last_terminated = Some(json!({"terminated": {
        "exitCode": exit.code, "reason": exit.reason, "startedAt": started_at,
        "finishedAt": meta::now_rfc3339(), "containerID": id}}));
    let restart = match restart_policy.as_str() {
        "Never" => false,
        "OnFailure" => exit.code != 0,
        _ => true,
    };
    if !restart {
        c.stage = Stage::Terminated;
        c.next = None;
        return;
    }
    // A container in CrashLoopBackOff keeps its last container ID and image ID.
    c.restart_count += 1;
    let backoff = k.config.backoff(c.restart_count as u32);
    c.stage = Stage::CrashBackOff {
        message: format!(
            "back-off {} restarting failed container={} pod={pod_ref}",
            humanize(backoff),
            c.name
        ),
    };
    c.next = Some(Instant::now() + backoff);
    let message = format!(
        "Back-off restarting failed container {} in pod {pod_ref}",
        c.name
    );
    event(k, run, "Warning", "BackOff", &message);
}

/// Records an event about the pod, from the kubelet.
fn event<R: ContainerRuntime>(
    k: &Arc<Kubelet<R>>,
    run: &PodRun,
    event_type: &str,
    reason: &str,
    message: &str,
) {
    let involved = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": run.name, "namespace": run.namespace, "uid": run.uid}});
    crate::controller::record_event(&k.store, &involved, MANAGER, event_type, reason, message);
}

/// A back-off the way Go prints a duration: `10s`, `1m20s`, `200ms`.
fn humanize(d: Duration) -> String {
    let ms = d.as_millis();
    if ms < 1000 {
        return format!("{ms}ms");
    }
    let s = d.as_secs();
    if s < 60 {
        return format!("{s}s");
    }
    format!("{}m{}s", s / 60, s % 60)
}

/// Stops every container of a pod at once, each within `grace`.
async fn stop_all<R: ContainerRuntime>(
    k: &Arc<Kubelet<R>>,
    containers: &mut [Container],
    grace: Duration,
) {
    let mut stops = Vec::new();
    for c in containers.iter_mut() {
        if let Some(w) = c.waiter.take() {
            w.abort();
        }
        if let Some(id) = &c.container_id {
            stops.push(k.runtime.stop_within(id, grace));
        }
    }
    futures::future::join_all(stops).await;
}

/// Lets a terminating pod go: it stays as it is for `termination_delay` (at most its grace period), then
/// it is deleted with grace period 0.
async fn terminate<R: ContainerRuntime>(
    k: &Arc<Kubelet<R>>,
    pod: &Value,
    containers: &mut [Container],
) {
    let grace = pod
        .pointer("/metadata/deletionGracePeriodSeconds")
        .and_then(Value::as_i64)
        .unwrap_or(0)
        .max(0) as u64;
    // Real containers take their grace period in the stop itself.
    if !k.runtime.is_real() {
        tokio::time::sleep(k.config.termination_delay.min(Duration::from_secs(grace))).await;
    }
    stop_all(k, containers, Duration::from_secs(grace)).await;
    let opts = DeleteOptions {
        grace_period_seconds: Some(0),
        uid: meta::str_at(pod, "/metadata/uid").map(str::to_string),
        ..DeleteOptions::default()
    };
    match k.store.delete(
        &GroupResource::pods(),
        Some(meta::namespace_of(pod)),
        meta::name_of(pod),
        &opts,
    ) {
        Ok(_) | Err(store::Error::NotFound { .. }) | Err(store::Error::Conflict { .. }) => {}
        Err(e) => {
            tracing::warn!(pod = %meta::name_of(pod), error = %e, "removing a terminated pod failed")
        }
    }
}

/// The first non-optional configMap or secret volume whose source is missing.
fn missing_volume_source(store: &Store, pod: &Value) -> Option<String> {
    let ns = meta::namespace_of(pod);
    let volumes = pod.pointer("/spec/volumes").and_then(Value::as_array)?;
    for v in volumes {
        for (field, resource, name_field) in [
            ("configMap", "configmaps", "name"),
            ("secret", "secrets", "secretName"),
        ] {
            let Some(src) = v.get(field) else { continue };
            if src["optional"] == true {
                continue;
            }
            let name = src[name_field].as_str().unwrap_or("");
            if store
                .get(&GroupResource::new("", resource), Some(ns), name)
                .is_err()
            {
                return Some(format!("{field} \"{name}\" not found"));
            }
        }
    }
    None
}

/// The message of `CreateContainerConfigError` for a missing configMap, secret or key, if any.
fn missing_config_reference(store: &Store, pod: &Value, container: &Value) -> Option<String> {
    let ns = meta::namespace_of(pod);
    let get = |resource: &str, name: &str| {
        store
            .get(&GroupResource::new("", resource), Some(ns), name)
            .ok()
    };
    if let Some(env_from) = container["envFrom"].as_array() {
        for e in env_from {
            for (field, resource, kind) in [
                ("configMapRef", "configmaps", "configmap"),
                ("secretRef", "secrets", "secret"),
            ] {
                let Some(src) = e.get(field) else { continue };
                let name = src["name"].as_str().unwrap_or("");
                if src["optional"] != true && get(resource, name).is_none() {
                    return Some(format!("{kind} \"{name}\" not found"));
                }
            }
        }
    }
    if let Some(env) = container["env"].as_array() {
        for e in env {
            for (field, resource, kind, title) in [
                ("configMapKeyRef", "configmaps", "configmap", "ConfigMap"),
                ("secretKeyRef", "secrets", "secret", "Secret"),
            ] {
                let Some(src) = e.pointer(&format!("/valueFrom/{field}")) else {
                    continue;
                };
                if src["optional"] == true {
                    continue;
                }
                let name = src["name"].as_str().unwrap_or("");
                let key = src["key"].as_str().unwrap_or("");
                match get(resource, name) {
                    None => return Some(format!("{kind} \"{name}\" not found")),
                    Some(obj) => {
                        let has = obj.pointer(&format!("/data/{key}")).is_some()
                            || obj.pointer(&format!("/binaryData/{key}")).is_some()
                            || obj.pointer(&format!("/stringData/{key}")).is_some();
                        if !has {
                            return Some(format!("couldn't find key {key} in {title} {ns}/{name}"));
                        }
                    }
                }
            }
        }
    }
    None
}

/// The container status a real kubelet reports for a container in this state.
fn container_status(c: &Container) -> Value {
    let waiting = |reason: &str, message: Option<&str>| {
        let mut w = Map::new();
        w.insert("reason".into(), json!(reason));
        if let Some(m) = message {
            w.insert("message".into(), json!(m));
        }
        json!({"waiting": w})
    };
    let state = match &c.stage {
        Stage::Creating => waiting("ContainerCreating", None),
        Stage::PullFailed { message } => waiting("ErrImagePull", Some(message)),
        Stage::PullBackOff { message } => waiting(
            "ImagePullBackOff",
            Some(&format!(
                "Back-off pulling image \"{}\": ErrImagePull: {message}",
                c.image()
            )),
        ),
        Stage::InvalidName { message } => waiting("InvalidImageName", Some(message)),
        Stage::ConfigError { message } => waiting("CreateContainerConfigError", Some(message)),
        Stage::Running { started_at } => json!({"running": {"startedAt": started_at}}),
        Stage::CrashBackOff { message } => waiting("CrashLoopBackOff", Some(message)),
        Stage::Terminated => c
            .last_terminated
            .clone()
            .unwrap_or_else(|| json!({"terminated": {"exitCode": 0, "reason": "Completed"}})),
    };
    let mut s = Map::new();
    s.insert("name".into(), json!(c.name));
    match (&c.pulled, c.created) {
        (Some(p), true) => {
            s.insert("image".into(), json!(p.image));
            s.insert("imageID".into(), json!(p.image_id));
        }
        _ => {
            s.insert("image".into(), json!(c.image()));
            s.insert("imageID".into(), json!(""));
        }
    }
    if c.created
        && let Some(id) = &c.container_id
    {
        s.insert("containerID".into(), json!(id));
    }
    s.insert(
        "lastState".into(),
        c.last_terminated.clone().unwrap_or(json!({})),
    );
    s.insert("ready".into(), json!(c.ready));
    s.insert("restartCount".into(), json!(c.restart_count));
    s.insert(
        "started".into(),
        json!(matches!(c.stage, Stage::Running { .. })),
    );
    s.insert("state".into(), state);
    Value::Object(s)
}

/// The pod status for the current stages, keeping condition transition times that did not change.
fn pod_status(run: &PodRun, pod: &Value, node_ip: &str) -> Value {
    let old = pod.get("status").cloned().unwrap_or(json!({}));
    let statuses: Vec<Value> = run.containers.iter().map(container_status).collect();
    let unready: Vec<&str> = run
        .containers
        .iter()
        .filter(|c| !c.ready)
        .map(|c| c.name.as_str())
        .collect();
    let ever_started = run.containers.iter().any(|c| c.created);
    let all_done = !run.containers.is_empty()
        && run
            .containers
            .iter()
            .all(|c| matches!(c.stage, Stage::Terminated));
    let phase = if all_done {
        let failed = run.containers.iter().any(|c| {
            c.last_terminated
                .as_ref()
                .and_then(|t| t.pointer("/terminated/exitCode"))
                .and_then(Value::as_i64)
                != Some(0)
        });
        if failed { "Failed" } else { "Succeeded" }
    } else if ever_started {
        "Running"
    } else {
        "Pending"
    };
    let now = meta::now_rfc3339();
    let old_condition = |kind: &str| {
        old["conditions"]
            .as_array()
            .and_then(|cs| cs.iter().find(|c| c["type"] == kind))
            .cloned()
    };
    let condition = |kind: &str, ok: bool, reason: Option<&str>, message: Option<String>| {
        let status = if ok { "True" } else { "False" };
        let since = old_condition(kind)
            .filter(|c| c["status"] == status)
            .and_then(|c| c.get("lastTransitionTime").cloned())
            .unwrap_or(json!(now));
        let mut c = Map::new();
        c.insert("type".into(), json!(kind));
        c.insert("status".into(), json!(status));
        c.insert("lastTransitionTime".into(), since);
        if let Some(r) = reason {
            c.insert("reason".into(), json!(r));
        }
        if let Some(m) = message {
            c.insert("message".into(), json!(m));
        }
        Value::Object(c)
    };
    let containers_ready = unready.is_empty();
    let unready_message = format!("containers with unready status: [{}]", unready.join(" "));
    let containers_ready_cond = if containers_ready {
        condition("ContainersReady", true, None, None)
    } else {
        condition(
            "ContainersReady",
            false,
            Some("ContainersNotReady"),
            Some(unready_message.clone()),
        )
    };
    // Readiness gates: every gate's condition must be True.
    let gates_missing: Vec<String> = pod
        .pointer("/spec/readinessGates")
        .and_then(Value::as_array)
        .map(|gates| {
            gates
                .iter()
                .filter_map(|g| g["conditionType"].as_str())
                .filter(|t| old_condition(t).is_none_or(|c| c["status"] != "True"))
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    let ready_cond = if !containers_ready {
        condition(
            "Ready",
            false,
            Some("ContainersNotReady"),
            Some(unready_message),
        )
    } else if !gates_missing.is_empty() {
        let list = gates_missing
            .iter()
            .map(|g| {
                format!("corresponding condition of pod readiness gate \"{g}\" does not exist.")
            })
            .collect::<Vec<_>>()
            .join(", ");
        condition("Ready", false, Some("ReadinessGatesNotReady"), Some(list))
    } else {
        condition("Ready", true, None, None)
    };
    let ours = ["Initialized", "Ready", "ContainersReady", "PodScheduled"];
    let mut conditions = vec![
        condition("Initialized", true, None, None),
        ready_cond,
        containers_ready_cond,
        condition("PodScheduled", true, None, None),
    ];
    if let Some(others) = old["conditions"].as_array() {
        conditions.extend(
            others
                .iter()
                .filter(|c| !ours.contains(&c["type"].as_str().unwrap_or("")))
                .cloned(),
        );
    }
    let mut status = old.as_object().cloned().unwrap_or_default();
    status.insert("phase".into(), json!(phase));
    status.insert("conditions".into(), json!(conditions));
    status.insert("containerStatuses".into(), json!(statuses));
    status.insert("hostIP".into(), json!(node_ip));
    status.insert("hostIPs".into(), json!([{"ip": node_ip}]));
    status.insert("podIP".into(), json!(run.pod_ip));
    status.insert("podIPs".into(), json!([{"ip": run.pod_ip}]));
    status.insert("startTime".into(), json!(run.start_time));
    Value::Object(status)
}

/// Writes the pod status if it changed; a conflict is retried against the latest pod.
fn write_status<R: ContainerRuntime>(k: &Arc<Kubelet<R>>, run: &PodRun, pod: &Value) {
    let mut pod = pod.clone();
    for _ in 0..5 {
        if meta::str_at(&pod, "/metadata/uid") != Some(run.uid.as_str()) {
            return;
        }
        let status = pod_status(run, &pod, &k.config.node_ip);
        if pod.get("status") == Some(&status) {
            return;
        }
        let mut new = pod.clone();
        new["status"] = status;
        match k.store.update_status(
            &GroupResource::pods(),
            Some(&run.namespace),
            new,
            &WriteOptions::manager(MANAGER),
        ) {
            Ok(_) => return,
            Err(store::Error::Conflict { .. }) => {
                match k
                    .store
                    .get(&GroupResource::pods(), Some(&run.namespace), &run.name)
                {
                    Ok(p) => pod = p,
                    Err(_) => return,
                }
            }
            Err(store::Error::NotFound { .. }) => return,
            Err(e) => {
                tracing::warn!(pod = %run.name, error = %e, "writing the pod status failed");
                return;
            }
        }
    }
}

/// The image digests reported for a pod's containers, by container name (for tests and tools).
pub fn image_ids(pod: &Value) -> BTreeMap<String, String> {
    pod.pointer("/status/containerStatuses")
        .and_then(Value::as_array)
        .map(|cs| {
            cs.iter()
                .filter_map(|c| {
                    Some((
                        c["name"].as_str()?.to_string(),
                        c["imageID"].as_str()?.to_string(),
                    ))
                })
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests;
