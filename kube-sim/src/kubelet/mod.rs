//! A kubelet stand-in for one node, in the spirit of KWOK's pod stages but with real image resolution.
//!
//! For every pod bound to the node a worker walks the stages a real kubelet with containerd shows:
//!
//! 1. After `start_delay`: `Pending`, `PodScheduled`/`Initialized` True, `ContainersReady`/`Ready` False
//!    (`ContainersNotReady`, `containers with unready status: [a]`), every container waiting in
//!    `ContainerCreating` with `imageID: ""`, `hostIP`, `podIP`, `startTime`.
//! 2. Pods whose non-optional configMap or secret volumes are missing stay in `ContainerCreating`.
//! 3. Each container's image is resolved by the [`ContainerRuntime`] (the virtual one asks the registry
//!    over the OCI distribution API), with the credentials the pod's `imagePullSecrets` hold for it (see
//!    [`keyring`]). An image index resolves to its entry for the node's platform. Failures show
//!    `ErrImagePull` (an index without an entry for the platform: containerd's `no match for platform in
//!    manifest: not found`), then `ImagePullBackOff` until the back-off passes; an unparsable name shows
//!    `InvalidImageName`.
//! 4. Missing configMaps or secrets named by `env`/`envFrom` show `CreateContainerConfigError`; a container
//!    the runtime cannot create shows `CreateContainerError`. Both are tried again after the back-off, each
//!    failure a `Failed` Event (`Error: <message>`).
//! 5. The container starts: `running.startedAt`, `started`, `containerID`, `imageID` (the normalised
//!    name with the manifest digest), phase `Running`, a log line. It becomes ready after `ready_delay`
//!    plus the readiness probe's `initialDelaySeconds` scaled by `probe_scale`; on a runtime that probes,
//!    as soon as the probe's result changes, both ways.
//! 6. A container that exits is restarted with a doubling back-off (`CrashLoopBackOff`, `lastState.terminated`,
//!    `restartCount`), keeping its `imageID`. One the runtime created but could not start (an `exec
//!    format error` on runtimes that fail the start for it) shows `RunContainerError` with the runtime's
//!    message and a `Failed` Event, then loops the same way, its `lastState.terminated` reason
//!    `StartError` with exit code 128, as containerd records it.
//! 7. A pod marked for deletion keeps its status (it may stay Ready, with its old `imageID`) for
//!    `termination_delay` (at most its grace period), then is deleted with grace period 0.
//!
//! The kubelet registers [`Config::nodes`] nodes (`kube-sim`, `kube-sim-1`, … as KWOK does), each with
//! `max_pods` pods of capacity and the architecture of its runtime's platform (the Docker engine's, or else
//! the one kube-sim was built for), and runs the pods the scheduler binds to them; it never binds pods
//! itself.

pub mod docker;
pub mod keyring;
mod lifecycle;
pub mod logs;
mod node;
mod pod_workers;
pub mod reference;
pub mod registry;
pub mod runtime;
mod status;

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::AtomicU32;
use std::time::Duration;

use serde_json::Value;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::controller::follow;
use crate::meta;
use crate::resource::GroupResource;
use crate::sparse::ShrinkWhenSparse as _;
use crate::store::{self, SharedEvent, Store};

pub use logs::Logs;
pub use node::NodeIdentity;
pub use reference::Reference;
pub use registry::{Auth, HostConfig, Registries, Tls};
pub use runtime::{ContainerRuntime, VirtualRuntime};
pub use status::image_ids;

use pod_workers::pod_worker;

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
    /// The first node's name; pods bound to it or to the other nodes (`<node_name>-1`, …) are run.
    pub node_name: String,
    /// How many nodes the kubelet registers and runs pods for (at least one).
    pub nodes: u32,
    /// Each node's pod capacity (the kubelet's `max-pods`).
    pub max_pods: u32,
    /// The first node's address (`hostIP`); the others follow it.
    pub node_ip: String,
    /// The first three octets of pod addresses, for example `10.42.0`.
    pub pod_network: String,
    /// From seeing a pod to its first status (`ContainerCreating`), on a runtime whose containers do
    /// not really run.
    pub start_delay: Duration,
    /// Added to every image pull, on a runtime whose containers do not really run.
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
    /// Registry mirrors, and per-host credentials and TLS settings (k3s' `registries.yaml`).
    pub registries: Registries,
}

impl Config {
    /// Short delays that keep the order of the stages: for tests and local use.
    pub fn fast(node_name: &str) -> Config {
        Config {
            node_name: node_name.to_string(),
            nodes: 1,
            max_pods: 110,
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
    /// The nodes this kubelet runs pods for, by name.
    nodes: HashMap<String, NodeIdentity>,
    runtime: R,
    logs: Arc<Logs>,
    next_ip: AtomicU32,
    /// Image pulls run one at a time, as the kubelet's `serializeImagePulls` default has it.
    pulls: tokio::sync::Mutex<()>,
}

impl<R: ContainerRuntime> Kubelet<R> {
    /// Waits `delay`, one of the stand-in delays that give a runtime whose containers take no time of
    /// their own the pace of a real one; a runtime whose containers really run takes its own time, so
    /// none is added to it.
    async fn stand_in(&self, delay: Duration) {
        if !self.runtime.is_real() {
            tokio::time::sleep(delay).await;
        }
    }
}

/// Runs the kubelet with a given runtime until `shutdown` flips.
pub async fn run_with<R: ContainerRuntime>(
    store: Store,
    config: Config,
    runtime: R,
    shutdown: watch::Receiver<bool>,
) {
    let identities = config.node_identities();
    let names: Vec<String> = identities.iter().map(|n| n.name.clone()).collect();
    let logs = Arc::new(Logs::new(&names));
    match runtime.pod_logs() {
        Some(real) => store.set_pod_logs(real),
        None => store.set_pod_logs(logs.clone()),
    }
    if let Some(streams) = runtime.pod_streams() {
        store.set_pod_streams(streams);
    }
    let platform = runtime.platform();
    for identity in &identities {
        if let Err(e) = node::register(&store, identity, &platform, config.max_pods) {
            tracing::warn!(node = %identity.name, error = %e, "registering the node failed");
        }
    }
    let k = Arc::new(Kubelet {
        store: store.clone(),
        config,
        nodes: identities
            .into_iter()
            .map(|n| (n.name.clone(), n))
            .collect(),
        runtime,
        logs,
        next_ip: AtomicU32::new(2),
        pulls: tokio::sync::Mutex::new(()),
    });
    let mut workers: HashMap<String, (watch::Sender<Arc<Value>>, JoinHandle<()>)> = HashMap::new();
    follow(&store, &GroupResource::pods(), shutdown, |e| {
        let (pod, deleted) = match &e {
            SharedEvent::Added(p) | SharedEvent::Modified(p) => (p, false),
            SharedEvent::Deleted(p) => (p, true),
            _ => return,
        };
        let uid = meta::str_at(pod, "/metadata/uid").unwrap_or("").to_string();
        if deleted {
            let stopping = workers.remove(&uid);
            // The table of a node's workers grows with a rollout's old and new pods together.
            workers.shrink_when_sparse();
            if let Some((_, task)) = stopping {
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
            k.logs.remove(&uid);
            return;
        }
        let node = meta::str_at(pod, "/spec/nodeName").unwrap_or("");
        if !k.nodes.contains_key(node) {
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
    stop_workers(workers).await;
}

/// How long the kubelet's shutdown waits for its pod workers to stop their containers.
const STOP_DEADLINE: Duration = Duration::from_secs(10);

/// Stops every pod worker as a deleted pod's: each stops its containers once its sender is dropped. A
/// worker starting a container finishes that first, so no container is created after the runtime's last
/// clean-up (an aborted start could still have the engine create one). Workers still busy after
/// [`STOP_DEADLINE`] are aborted.
async fn stop_workers(workers: HashMap<String, (watch::Sender<Arc<Value>>, JoinHandle<()>)>) {
    let (aborts, tasks): (Vec<_>, Vec<_>) = workers
        .into_values()
        .map(|(_, task)| (task.abort_handle(), task))
        .unzip();
    if tokio::time::timeout(STOP_DEADLINE, futures::future::join_all(tasks))
        .await
        .is_err()
    {
        tracing::debug!("pod workers did not stop in time; aborting them");
        for abort in aborts {
            abort.abort();
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
    /// The runtime could not create the container.
    CreateFailed { message: String },
    /// The runtime created the container but could not start it; shown until the restart back-off starts.
    StartFailed { message: String },
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
    /// Whether the running container passed its startup probe (or has none).
    started: bool,
    ready: bool,
    /// When a container without a probing runtime becomes ready.
    ready_at: Option<Instant>,
    /// What a probing runtime's probes say of the running container.
    probed: Option<watch::Receiver<runtime::Probed>>,
    restart_count: i64,
    pull_failures: u32,
    last_terminated: Option<Value>,
    waiter: Option<JoinHandle<()>>,
}

impl Container {
    fn image(&self) -> &str {
        self.spec["image"].as_str().unwrap_or("")
    }

    /// Takes what the probes say: a container that has not started is not ready, whatever its readiness
    /// probe would say (the kubelet does not run it before).
    fn take(&mut self, probed: runtime::Probed) {
        self.started = probed.started;
        self.ready = probed.started && probed.ready;
    }
}

struct PodRun {
    uid: String,
    namespace: String,
    name: String,
    pod_ip: String,
    /// The address of the pod's node.
    node_ip: String,
    start_time: String,
    /// When the worker took the pod up (`start_time`): the runtime's probes tick from then.
    admitted: Instant,
    containers: Vec<Container>,
    restart_policy: String,
    volumes_ready: bool,
    volumes_next: Option<Instant>,
    mount_failure_reported: bool,
}

#[cfg(test)]
mod tests;
