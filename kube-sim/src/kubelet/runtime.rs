//! The container runtime behind the kubelet: what it means to pull an image and to run a container.
//!
//! [`VirtualRuntime`] resolves images against real registries but runs nothing: a container "runs" until it
//! is stopped, or exits with code 1 after a delay when its image config carries the label
//! `dev-env.sim/crash=true` or the container sets `SIM_CRASH=1`. Another runtime (real containers) can
//! implement [`ContainerRuntime`] and plug into the same kubelet.
//!
//! A runtime runs pods for one [`Platform`]: the architecture its Node reports, and the entry its pulls pick
//! from an image index. An index without one for it fails the pull as containerd fails it
//! ([`no_platform_match`]).

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::Mutex;
use std::time::Duration;

use serde_json::Value;

use super::reference::Reference;
use super::registry::{self, Auth, Registries};
use crate::lock::MutexExt as _;
use crate::platform::Platform;

/// The image label that makes a virtual container crash.
pub const CRASH_LABEL: &str = "dev-env.sim/crash";
/// The container environment variable that makes a virtual container crash.
pub const CRASH_ENV: &str = "SIM_CRASH";

/// A pulled image.
#[derive(Clone, Debug, PartialEq)]
pub struct PulledImage {
    /// `containerStatuses[].image`: the normalised name with its tag (or digest).
    pub image: String,
    /// `containerStatuses[].imageID`: the repo digest recorded at pull time.
    pub image_id: String,
    /// The labels of the image config.
    pub labels: BTreeMap<String, String>,
}

/// A pull failure, worded as containerd reports it through the CRI.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("{message}")]
pub struct PullError {
    /// The message shown in `waiting.message` with `ErrImagePull`.
    pub message: String,
}

/// Why the runtime could not start a container, told apart as the kubelet's `startContainer` tells its steps
/// apart (`pkg/kubelet/kuberuntime/kuberuntime_container.go`).
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum StartError {
    /// Its configuration could not be made (`CreateContainerConfigError`): an environment variable from a
    /// missing configMap or secret, or no token for its service account. Retried after the back-off.
    #[error("{0}")]
    Config(String),
    /// The runtime could not create it (`CreateContainerError`). Retried after the back-off.
    #[error("{0}")]
    Create(String),
    /// The runtime created it but could not start it (`RunContainerError`); containerd records such a
    /// container as exited with code 128 and reason `StartError`, and the kubelet restarts it with back-off.
    #[error("{message}")]
    Run {
        /// The container the runtime created (`docker://<id>`).
        container_id: String,
        /// The runtime's error.
        message: String,
    },
}

/// What containerd says when an image index has no manifest for the node's platform (`LimitManifests` in
/// `core/images/handlers.go`).
pub const NO_PLATFORM_MATCH: &str = "no match for platform in manifest: not found";

/// The pull error the kubelet shows when an image index has no manifest for the node's platform: containerd's
/// error as its CRI `PullImage` wraps it and the kubelet receives it over gRPC
/// (`internal/cri/server/images/image_pull.go`).
pub fn no_platform_match(image: &Reference) -> PullError {
    PullError {
        message: format!(
            "rpc error: code = NotFound desc = failed to pull and unpack image \"{}\": \
             {NO_PLATFORM_MATCH}",
            image.familiar_with_tag()
        ),
    }
}

/// How a container ended.
#[derive(Clone, Debug, PartialEq)]
pub struct Exit {
    /// The exit code.
    pub code: i32,
    /// `Error`, `Completed` or `OOMKilled`.
    pub reason: String,
}

/// A container runtime. Futures are `Send` so a kubelet can run pods on any task.
pub trait ContainerRuntime: Send + Sync + 'static {
    /// Resolves (and, for a real runtime, fetches) an image, with the kubelet's credentials for it (the
    /// CRI's `AuthConfig`); without them the runtime uses its own configuration's.
    fn pull(
        &self,
        image: &Reference,
        credentials: Option<&Auth>,
    ) -> impl Future<Output = Result<PulledImage, PullError>> + Send;

    /// An image pulled before, for `imagePullPolicy: IfNotPresent` and `Never`.
    fn cached(&self, image: &Reference) -> Option<PulledImage>;

    /// The platform of the node whose pods this runtime runs: the Node reports its architecture, and pulls
    /// pick an image index's entry for it. The default is Linux on the architecture kube-sim was built for.
    fn platform(&self) -> Platform {
        Platform::linux_of_build()
    }

    /// Starts a container of a pod from a pulled image; returns its ID (`containerd://<hex>`). The kubelet
    /// took the pod up at `admitted`, when its probe workers start ticking.
    fn start(
        &self,
        pod: &Value,
        container: &Value,
        image: &PulledImage,
        admitted: tokio::time::Instant,
    ) -> impl Future<Output = Result<String, StartError>> + Send;

    /// Waits for a started container to exit; never resolves for one that keeps running.
    fn wait(&self, container_id: &str) -> impl Future<Output = Exit> + Send;

    /// Stops a container.
    fn stop(&self, container_id: &str) -> impl Future<Output = ()> + Send;

    /// Stops a container of a terminating pod, giving it `grace` to exit; the default ignores the grace.
    fn stop_within(&self, container_id: &str, _grace: Duration) -> impl Future<Output = ()> + Send {
        self.stop(container_id)
    }

    /// Runs a container's `lifecycle.preStop` handler (`exec`, `httpGet`) before it is stopped; `Err`
    /// says why it failed. `sleep` handlers are the kubelet's own; the default runs nothing.
    fn pre_stop(
        &self,
        _container_id: &str,
        _container: &Value,
        _handler: &Value,
    ) -> impl Future<Output = Result<(), String>> + Send {
        async { Ok(()) }
    }

    /// The container's pod is being deleted: as the kubelet's liveness and startup probe workers do
    /// then, stop those probes and count the container as started, so that no probe kills it while it
    /// drains; its readiness probe goes on. The default has no probes to stop.
    fn terminating(&self, _container_id: &str) {}

    /// Whether containers really run: the kubelet then skips its simulated start, pull and termination
    /// delays (the engine's work takes its own time), and takes the pod IP from
    /// [`ContainerRuntime::pod_ip`].
    fn is_real(&self) -> bool {
        false
    }

    /// What the probes of a started container say, for runtimes that probe: its current value, changed
    /// when a probe's result changes, so the kubelet reports it at once, as the kubelet's prober hands
    /// each new result to its sync loop. A container the runtime no longer knows is neither started nor
    /// ready (a closed channel). `None` means "started at once, ready once the kubelet's simulated delay
    /// has passed".
    fn probed(&self, _container_id: &str) -> Option<tokio::sync::watch::Receiver<Probed>> {
        None
    }

    /// The pod IP of a started container, for runtimes that attach containers to a real network.
    fn pod_ip(&self, _container_id: &str) -> Option<String> {
        None
    }

    /// The source of `GET …/log`, for runtimes with real container logs; `None` keeps the kubelet's own.
    fn pod_logs(&self) -> Option<std::sync::Arc<dyn crate::store::PodLogs>> {
        None
    }

    /// The side behind `pods/exec` and `pods/portforward`, for runtimes with real containers; `None`
    /// leaves both unserved.
    fn pod_streams(&self) -> Option<std::sync::Arc<dyn crate::store::PodStreams>> {
        None
    }
}

/// A runtime that resolves images in real registries and runs nothing, for a Linux node on the architecture
/// kube-sim was built for.
pub struct VirtualRuntime {
    registries: Registries,
    platform: Platform,
    pull_timeout: Duration,
    crash_after: Duration,
    images: Mutex<HashMap<String, PulledImage>>,
    crashing: Mutex<HashMap<String, bool>>,
}

impl VirtualRuntime {
    /// A runtime using these mirrors; crashing containers exit `crash_after` their start.
    pub fn new(
        registries: Registries,
        pull_timeout: Duration,
        crash_after: Duration,
    ) -> VirtualRuntime {
        VirtualRuntime {
            registries,
            platform: Platform::linux_of_build(),
            pull_timeout,
            crash_after,
            images: Mutex::new(HashMap::new()),
            crashing: Mutex::new(HashMap::new()),
        }
    }
}

impl ContainerRuntime for VirtualRuntime {
    async fn pull(
        &self,
        image: &Reference,
        credentials: Option<&Auth>,
    ) -> Result<PulledImage, PullError> {
        let shown = image.familiar_with_tag();
        match self
            .registries
            .resolve(image, credentials, &self.platform, self.pull_timeout)
            .await
        {
            Ok(resolved) => {
                let pulled = PulledImage {
                    image: shown.clone(),
                    image_id: image.image_id(&resolved.digest),
                    labels: resolved.labels,
                };
                self.images.lock_unpoisoned().insert(shown, pulled.clone());
                Ok(pulled)
            }
            Err(registry::Error::NoPlatformMatch) => Err(no_platform_match(image)),
            Err(e) => {
                let code = match e {
                    registry::Error::NotFound { .. } => "NotFound",
                    _ => "Unknown",
                };
                Err(PullError {
                    message: format!(
                        "rpc error: code = {code} desc = failed to pull and unpack image \"{shown}\": \
                         failed to resolve reference \"{shown}\": {e}"
                    ),
                })
            }
        }
    }

    fn cached(&self, image: &Reference) -> Option<PulledImage> {
        self.images
            .lock_unpoisoned()
            .get(&image.familiar_with_tag())
            .cloned()
    }

    fn platform(&self) -> Platform {
        self.platform.clone()
    }

    async fn start(
        &self,
        _pod: &Value,
        container: &Value,
        image: &PulledImage,
        _admitted: tokio::time::Instant,
    ) -> Result<String, StartError> {
        let id = crate::meta::random_hex(32);
        let crash = image.labels.get(CRASH_LABEL).is_some_and(|v| v == "true")
            || container["env"].as_array().is_some_and(|env| {
                env.iter()
                    .any(|e| e["name"] == CRASH_ENV && e["value"] == "1")
            });
        self.crashing.lock_unpoisoned().insert(id.clone(), crash);
        Ok(format!("containerd://{id}"))
    }

    async fn wait(&self, container_id: &str) -> Exit {
        let id = container_id.trim_start_matches("containerd://");
        let crash = self
            .crashing
            .lock_unpoisoned()
            .get(id)
            .copied()
            .unwrap_or(false);
        if !crash {
            return std::future::pending().await;
        }
        tokio::time::sleep(self.crash_after).await;
        Exit {
            code: 1,
            reason: "Error".into(),
        }
    }

    async fn stop(&self, container_id: &str) {
        let id = container_id.trim_start_matches("containerd://");
        self.crashing.lock_unpoisoned().remove(id);
    }
}

/// What a started container's probes say, as the kubelet's prober reports them in the container's
/// status.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Probed {
    /// Its startup probe passed, or it has none (`started`); until then its other probes do not run and
    /// it is not ready.
    pub started: bool,
    /// Its readiness probe's result (true without one); counts only once `started`.
    pub ready: bool,
}
