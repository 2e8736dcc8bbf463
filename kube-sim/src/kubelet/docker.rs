//! A container runtime backed by a Docker engine: pods run as real containers (`--kubelet docker`).
//!
//! The kubelet's stages (pulls and their back-off, restarts, `CrashLoopBackOff`, termination) stay in the
//! kubelet; this runtime does what a CRI runtime does under it:
//!
//! - The node's platform is the engine's: Linux on the architecture `docker info` reports, in Go's names
//!   (`x86_64` is `amd64`). Pulls ask the engine for that platform, so it pulls an image index's entry for
//!   it; an index without one fails the pull with containerd's words
//!   ([`no_platform_match`](super::runtime::no_platform_match)). A single-platform image for another
//!   architecture is pulled and run as the engine runs it: without emulation its start fails or it exits at
//!   once (`exec format error`), which the kubelet reports as it reports any failed start or exit.
//! - Pulls go through the engine, which resolves names on its own (host) side. A registry mirror the node
//!   reaches under an in-network name (`dev-env-registry:5000`) is pulled through another mirror key on
//!   the engine's loopback with the same endpoint (`localhost:36099`), or through a loopback endpoint.
//!   `imageID` is the name as written with the repo digest the engine recorded. The engine is given the
//!   kubelet's credentials for the image (from the pod's pull secrets), or else the `auth` that
//!   `registries.yaml` has for the registry's endpoints; it trusts loopback registries as insecure, so
//!   one serving TLS on 127.0.0.1 needs no CA.
//! - Each pod container is one Docker container on the configured network, named
//!   `k8s_<container>_<pod>_<namespace>_<uid8>` and labelled with the pod, the node and the configured
//!   labels. Containers of a pod do not share a network namespace: the pod IP is the address of the
//!   container started last.
//! - `runAsUser`/`runAsGroup`, `readOnlyRootFilesystem` and `allowPrivilegeEscalation: false` are
//!   honoured; pod volumes and `volumeMounts` are not mounted.
//! - Before a container starts, a service-account token, `ca.crt` and `namespace` are copied into
//!   `/var/run/secrets/kubernetes.io/serviceaccount/` (a tar upload into an anonymous volume, so it works
//!   with a read-only root filesystem; no host bind mounts), and
//!   `KUBERNETES_SERVICE_HOST`/`KUBERNETES_SERVICE_PORT` point at the API server. The token is issued for
//!   the pod's service account (`system:serviceaccount:<namespace>:<name>`, authorized by RBAC) and works
//!   while the container and the account exist; a missing account fails the start, which is retried.
//! - Readiness and liveness probes (`httpGet`, `tcpSocket`, `exec`) run against the container (see
//!   [`probe`]); a failed liveness probe kills the container, which the kubelet then restarts.
//! - `GET …/log` streams the engine's container logs (see [`logs`]); `pods/exec` runs commands through the
//!   engine's exec and `pods/portforward` dials the container's address (see [`streams`]).
//! - At start, containers left by an earlier run with the same node and labels are removed; at shutdown,
//!   every container this runtime created is removed.

mod environment;
mod image;
pub mod logs;
pub mod probe;
mod spec;
pub mod streams;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bollard::Docker;
use bollard::models::ContainerCreateBody;
use bollard::query_parameters::{
    CreateContainerOptionsBuilder, KillContainerOptionsBuilder, ListContainersOptionsBuilder,
    RemoveContainerOptionsBuilder, StopContainerOptionsBuilder, UploadToContainerOptionsBuilder,
};
use futures::StreamExt as _;
use serde_json::Value;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::reference::Reference;
use super::registry::{Auth, Registries};
use super::runtime::{ContainerRuntime, Exit, Probed, PullError, PulledImage, StartError};
use crate::lock::MutexExt as _;
use crate::meta;
use crate::platform::Platform;
use crate::store::{PodLogs, PodStreams, Store};

pub use image::engine_domain;
pub use spec::container_name;

use environment::environment;
use spec::{container_labels, create_body, service_account_tar};

/// The label with the node that created a container.
pub const NODE_LABEL: &str = "kube-sim.node";
/// The label with the pod's namespace.
pub const NAMESPACE_LABEL: &str = "io.kubernetes.pod.namespace";
/// The label with the pod's name.
pub const POD_LABEL: &str = "io.kubernetes.pod.name";
/// The label with the pod's uid.
pub const UID_LABEL: &str = "io.kubernetes.pod.uid";
/// The label with the container's name in the pod.
pub const CONTAINER_LABEL: &str = "io.kubernetes.container.name";
/// Where pods find their service-account credentials.
pub const SERVICE_ACCOUNT_DIR: &str = "var/run/secrets/kubernetes.io/serviceaccount";

/// The Docker kubelet could not start.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The engine's socket is unusable.
    #[error("connecting to the Docker engine at {socket}")]
    Connect {
        /// The socket path.
        socket: String,
        /// The cause.
        #[source]
        source: bollard::errors::Error,
    },
    /// The engine did not answer the version negotiation.
    #[error("the Docker engine at {socket} does not answer")]
    Negotiate {
        /// The socket path.
        socket: String,
        /// The cause.
        #[source]
        source: bollard::errors::Error,
    },
    /// The engine did not say what it runs on.
    #[error("asking the Docker engine for its architecture (`docker info`)")]
    Info(#[source] bollard::errors::Error),
    /// The pod network does not exist.
    #[error(
        "the Docker network `{network}` for pods does not exist (create it, or pass --docker-network)"
    )]
    Network {
        /// The network.
        network: String,
        /// The cause.
        #[source]
        source: bollard::errors::Error,
    },
}

/// How pods run on the engine. There is no `Default`: fill every field.
#[derive(Clone, Debug)]
pub struct DockerConfig {
    /// The Docker network pods join (the node's own network, so pods reach the API server and the
    /// registry by name).
    pub network: String,
    /// Labels put on every pod container, for example `dev-env.name=<env>`; they also select the
    /// containers removed at start and shutdown.
    pub labels: BTreeMap<String, String>,
    /// `KUBERNETES_SERVICE_HOST` for pods: the API server's name or address on `network`. `None` lets
    /// [`crate::Sim::start`] pick the listen address, or the node name when listening on all addresses.
    pub api_host: Option<String>,
    /// `KUBERNETES_SERVICE_PORT` for pods; `None` uses the port the API server listens on.
    pub api_port: Option<u16>,
}

/// What the runtime needs from the simulator besides its configuration.
#[derive(Clone, Debug)]
pub struct ApiAccess {
    /// `KUBERNETES_SERVICE_HOST`.
    pub host: String,
    /// `KUBERNETES_SERVICE_PORT`.
    pub port: u16,
    /// The API server's CA certificate (PEM), copied into pods as `ca.crt`.
    pub ca_pem: String,
}

/// A [`ContainerRuntime`] on a Docker engine. Clones share the same state.
#[derive(Clone)]
pub struct DockerRuntime {
    inner: Arc<Inner>,
}

struct Inner {
    docker: Docker,
    store: Store,
    node: String,
    config: DockerConfig,
    api: ApiAccess,
    registries: Registries,
    /// The node's platform: Linux on the engine's architecture.
    platform: Platform,
    /// Pulled images by the name shown in status, with the reference the engine knows them by.
    images: Mutex<HashMap<String, (PulledImage, String)>>,
    /// Started containers by Docker ID.
    containers: Mutex<HashMap<String, Started>>,
    /// The latest container of each pod container, by `(pod uid, container name)`, for logs.
    latest: Mutex<HashMap<(String, String), String>>,
}

struct Started {
    token: String,
    ip: Option<String>,
    /// What its probes say.
    probed: Arc<watch::Sender<Probed>>,
    probes: Probes,
}

/// The probe tasks of one container.
#[derive(Default)]
struct Probes {
    readiness: Option<JoinHandle<()>>,
    /// Liveness and startup probes: the ones that kill the container.
    killing: Vec<JoinHandle<()>>,
}

impl Probes {
    /// Stops the probes that kill the container; the readiness probe goes on.
    fn stop_killing(&mut self) {
        for p in self.killing.drain(..) {
            p.abort();
        }
    }

    fn stop(&mut self) {
        self.stop_killing();
        if let Some(p) = self.readiness.take() {
            p.abort();
        }
    }
}

/// The engine's socket: `DOCKER_HOST` when it is a `unix://` URL, else the default path.
fn socket_path() -> String {
    std::env::var("DOCKER_HOST")
        .ok()
        .and_then(|h| h.strip_prefix("unix://").map(str::to_string))
        .unwrap_or_else(|| "/var/run/docker.sock".to_string())
}

/// Connects to the engine over its unix socket and negotiates the API version.
pub async fn connect() -> Result<Docker, Error> {
    let socket = socket_path();
    // Pulls and log streams may take long; the timeout covers a whole request.
    let docker = Docker::connect_with_socket(&socket, 3600, bollard::API_DEFAULT_VERSION).map_err(
        |source| Error::Connect {
            socket: socket.clone(),
            source,
        },
    )?;
    docker
        .negotiate_version()
        .await
        .map_err(|source| Error::Negotiate { socket, source })
}

impl DockerRuntime {
    /// Connects to the engine, learns its architecture and checks the pod network.
    pub async fn new(
        store: Store,
        node: &str,
        config: DockerConfig,
        api: ApiAccess,
        registries: Registries,
    ) -> Result<DockerRuntime, Error> {
        let docker = connect().await?;
        let platform = engine_platform(&docker).await?;
        docker
            .inspect_network(
                &config.network,
                None::<bollard::query_parameters::InspectNetworkOptions>,
            )
            .await
            .map_err(|source| Error::Network {
                network: config.network.clone(),
                source,
            })?;
        Ok(DockerRuntime {
            inner: Arc::new(Inner {
                docker,
                store,
                node: node.to_string(),
                config,
                api,
                registries,
                platform,
                images: Mutex::new(HashMap::new()),
                containers: Mutex::new(HashMap::new()),
                latest: Mutex::new(HashMap::new()),
            }),
        })
    }

    /// The address on the pod network of a container, by name: the node's own `hostIP` when the node
    /// runs in a container named after it.
    pub async fn address_of(&self, container: &str) -> Option<String> {
        self.inner
            .docker
            .inspect_container(container, None)
            .await
            .ok()?
            .network_settings?
            .networks?
            .get(&self.inner.config.network)?
            .ip_address
            .clone()
            .filter(|ip| !ip.is_empty())
    }

    /// The label filters that select this node's pod containers.
    fn filters(&self) -> HashMap<String, Vec<String>> {
        let mut labels = vec![format!("{NODE_LABEL}={}", self.inner.node)];
        labels.extend(
            self.inner
                .config
                .labels
                .iter()
                .map(|(k, v)| format!("{k}={v}")),
        );
        HashMap::from([("label".to_string(), labels)])
    }

    /// Removes every pod container of this node (with the configured labels); returns how many.
    pub async fn remove_all(&self) -> usize {
        let options = ListContainersOptionsBuilder::default()
            .all(true)
            .filters(&self.filters())
            .build();
        let found = match self.inner.docker.list_containers(Some(options)).await {
            Ok(found) => found,
            Err(e) => {
                tracing::warn!(error = %e, "listing pod containers failed");
                return 0;
            }
        };
        let ids: Vec<String> = found.into_iter().filter_map(|c| c.id).collect();
        let removals = ids.iter().map(|id| self.remove(id));
        futures::future::join_all(removals).await;
        ids.len()
    }

    /// Creates container `name`; one left by an earlier start under that name (the kubelet lost track
    /// of it) is removed first and the create tried once more, which spares the common case a call.
    async fn create(&self, name: &str, body: ContainerCreateBody) -> Result<String, String> {
        let options = CreateContainerOptionsBuilder::default().name(name).build();
        let docker = &self.inner.docker;
        let created = match docker
            .create_container(Some(options.clone()), body.clone())
            .await
        {
            Err(bollard::errors::Error::DockerResponseServerError {
                status_code: 409, ..
            }) => {
                self.remove(name).await;
                docker.create_container(Some(options), body).await
            }
            created => created,
        };
        created
            .map(|c| c.id)
            .map_err(|e| format!("failed to create container {name}: {}", engine_message(&e)))
    }

    /// Forgets a container (its probes and token) and removes it by force.
    async fn remove(&self, id: &str) {
        self.forget(id);
        let options = RemoveContainerOptionsBuilder::default()
            .force(true)
            .v(true)
            .build();
        match self.inner.docker.remove_container(id, Some(options)).await {
            Ok(()) => {}
            Err(bollard::errors::Error::DockerResponseServerError {
                status_code: 404, ..
            }) => {}
            Err(e) => {
                tracing::warn!(container = %id, error = %e, "removing a pod container failed")
            }
        }
    }

    fn forget(&self, id: &str) {
        let started = self.inner.containers.lock_unpoisoned().remove(id);
        if let Some(mut s) = started {
            s.probes.stop();
            self.inner.store.forget_token(&s.token);
        }
    }

    fn api(&self) -> &ApiAccess {
        &self.inner.api
    }
}

/// The platform of the engine's pods: Linux on the architecture `docker info` reports (`uname -m`), or the
/// one kube-sim was built for when the engine names none.
async fn engine_platform(docker: &Docker) -> Result<Platform, Error> {
    let info = docker.info().await.map_err(Error::Info)?;
    match info.architecture.filter(|a| !a.is_empty()) {
        Some(machine) => Ok(Platform::linux(&machine)),
        None => {
            tracing::warn!("the Docker engine names no architecture; using kube-sim's own");
            Ok(Platform::linux_of_build())
        }
    }
}

/// A message from an engine error: the daemon's own words when it sent some.
fn engine_message(e: &bollard::errors::Error) -> String {
    match e {
        bollard::errors::Error::DockerResponseServerError { message, .. } => message.clone(),
        bollard::errors::Error::DockerStreamError { error } => error.clone(),
        other => other.to_string(),
    }
}

impl ContainerRuntime for DockerRuntime {
    async fn pull(
        &self,
        image: &Reference,
        credentials: Option<&Auth>,
    ) -> Result<PulledImage, PullError> {
        self.pull_image(image, credentials).await
    }

    fn cached(&self, image: &Reference) -> Option<PulledImage> {
        self.inner
            .images
            .lock_unpoisoned()
            .get(&image.familiar_with_tag())
            .map(|(p, _)| p.clone())
    }

    fn platform(&self) -> Platform {
        self.inner.platform.clone()
    }

    async fn start(
        &self,
        pod: &Value,
        container: &Value,
        image: &PulledImage,
        admitted: tokio::time::Instant,
    ) -> Result<String, StartError> {
        let run_ref = self
            .inner
            .images
            .lock_unpoisoned()
            .get(&image.image)
            .map(|(_, r)| r.clone())
            .unwrap_or_else(|| image.image.clone());
        let container_name_in_pod = container["name"].as_str().unwrap_or("").to_string();
        let name = container_name(pod, &container_name_in_pod);
        // The previous container of a restarted one goes first (with its token and probes); its name
        // is taken.
        let uid = meta::str_at(pod, "/metadata/uid").unwrap_or("");
        if let Some(previous) = self.latest(uid, &container_name_in_pod) {
            self.remove(&previous).await;
        }
        let env = environment(&self.inner.store, pod, container, self.api())
            .map_err(StartError::Config)?;
        let labels = container_labels(
            &self.inner.config.labels,
            &self.inner.node,
            pod,
            &container_name_in_pod,
        );
        let network = &self.inner.config.network;
        let body = create_body(pod, container, run_ref, env, labels, network);
        let id = self.create(&name, body).await.map_err(StartError::Create)?;
        let probed = Arc::new(watch::Sender::new(Probed::default()));
        self.install_service_account(pod, &id, &name, probed.clone())
            .await?;
        if let Err(e) = self.inner.docker.start_container(&id, None).await {
            self.remove(&id).await;
            // The engine's words are runc's under containerd's shim (`failed to create shim task: OCI
            // runtime create failed: …`), which containerd's CRI wraps so.
            return Err(StartError::Run {
                container_id: format!("docker://{id}"),
                message: format!("failed to create containerd task: {}", engine_message(&e)),
            });
        }
        let ip = self
            .inner
            .docker
            .inspect_container(&id, None)
            .await
            .ok()
            .and_then(|c| c.network_settings?.networks)
            .and_then(|n| n.get(network)?.ip_address.clone())
            .filter(|ip| !ip.is_empty());
        let events = probe::Recorder::new(self.inner.store.clone(), pod, &container_name_in_pod);
        let probes = self.start_probes(&id, ip.clone(), container, &probed, admitted, events);
        if let Some(s) = self.inner.containers.lock_unpoisoned().get_mut(&id) {
            s.ip = ip;
            s.probes = probes;
        }
        self.inner.latest.lock_unpoisoned().insert(
            (
                meta::str_at(pod, "/metadata/uid").unwrap_or("").to_string(),
                container_name_in_pod,
            ),
            id.clone(),
        );
        tracing::info!(container = %name, id = %&id[..12.min(id.len())], "started");
        Ok(format!("docker://{id}"))
    }

    async fn wait(&self, container_id: &str) -> Exit {
        let id = container_id.trim_start_matches("docker://");
        loop {
            let mut stream = self
                .inner
                .docker
                .wait_container(id, None::<bollard::query_parameters::WaitContainerOptions>);
            let code = match stream.next().await {
                Some(Ok(r)) => Some(r.status_code),
                Some(Err(bollard::errors::Error::DockerContainerWaitError { code, .. })) => {
                    Some(code)
                }
                _ => None,
            };
            let state = self
                .inner
                .docker
                .inspect_container(id, None)
                .await
                .ok()
                .and_then(|c| c.state);
            let running = state.as_ref().and_then(|s| s.running).unwrap_or(false);
            if running {
                // The wait request ended early (a timeout or a lost connection); the container still
                // runs, so wait again after a pause.
                tokio::time::sleep(Duration::from_millis(500)).await;
                continue;
            }
            let code = code
                .or_else(|| state.as_ref().and_then(|s| s.exit_code))
                .unwrap_or(137);
            let oom = state.and_then(|s| s.oom_killed).unwrap_or(false);
            let reason = if oom {
                "OOMKilled"
            } else if code == 0 {
                "Completed"
            } else {
                "Error"
            };
            return Exit {
                code: code as i32,
                reason: reason.to_string(),
            };
        }
    }

    async fn stop(&self, container_id: &str) {
        self.stop_within(container_id, Duration::ZERO).await;
    }

    async fn stop_within(&self, container_id: &str, grace: Duration) {
        let id = container_id.trim_start_matches("docker://");
        if let Some(s) = self.inner.containers.lock_unpoisoned().get_mut(id) {
            s.probes.stop();
        }
        let options = StopContainerOptionsBuilder::default()
            .t(grace.as_secs().min(i32::MAX as u64) as i32)
            .build();
        if let Err(e) = self.inner.docker.stop_container(id, Some(options)).await {
            tracing::debug!(container = %id, error = %e, "stopping a pod container failed");
        }
        self.remove(id).await;
    }

    async fn pre_stop(
        &self,
        container_id: &str,
        container: &Value,
        handler: &Value,
    ) -> Result<(), String> {
        let id = container_id.trim_start_matches("docker://");
        let ip = self
            .inner
            .containers
            .lock_unpoisoned()
            .get(id)
            .and_then(|s| s.ip.clone());
        let target = probe::Target {
            docker: self.inner.docker.clone(),
            container_id: id.to_string(),
            ip,
            container: container.clone(),
        };
        probe::hook(&target, handler).await
    }

    fn terminating(&self, container_id: &str) {
        let id = container_id.trim_start_matches("docker://");
        if let Some(s) = self.inner.containers.lock_unpoisoned().get_mut(id) {
            s.probes.stop_killing();
            s.probed
                .send_if_modified(|p| !std::mem::replace(&mut p.started, true));
        }
    }

    fn is_real(&self) -> bool {
        true
    }

    fn probed(&self, container_id: &str) -> Option<watch::Receiver<Probed>> {
        let id = container_id.trim_start_matches("docker://");
        let known = self
            .inner
            .containers
            .lock_unpoisoned()
            .get(id)
            .map(|s| s.probed.subscribe());
        // A container this runtime no longer knows (removed) is not ready, and never will be.
        Some(known.unwrap_or_else(|| watch::channel(Probed::default()).1))
    }

    fn pod_ip(&self, container_id: &str) -> Option<String> {
        let id = container_id.trim_start_matches("docker://");
        self.inner
            .containers
            .lock_unpoisoned()
            .get(id)
            .and_then(|s| s.ip.clone())
    }

    fn pod_logs(&self) -> Option<Arc<dyn PodLogs>> {
        Some(Arc::new(logs::DockerLogs::new(
            self.inner.docker.clone(),
            self.inner.node.clone(),
            self.clone(),
        )))
    }

    fn pod_streams(&self) -> Option<Arc<dyn PodStreams>> {
        Some(Arc::new(streams::DockerStreams::new(
            self.inner.docker.clone(),
            self.clone(),
        )))
    }
}

impl DockerRuntime {
    /// The Docker ID of the latest container of a pod container.
    fn latest(&self, pod_uid: &str, container: &str) -> Option<String> {
        self.inner
            .latest
            .lock_unpoisoned()
            .get(&(pod_uid.to_string(), container.to_string()))
            .cloned()
    }

    /// Kills a container whose liveness probe failed; the kubelet sees it exit and restarts it.
    async fn kill(docker: &Docker, id: &str) {
        let options = KillContainerOptionsBuilder::default()
            .signal("SIGKILL")
            .build();
        if let Err(e) = docker.kill_container(id, Some(options)).await {
            tracing::debug!(container = %id, error = %e, "killing a pod container failed");
        }
    }

    /// Issues a token of the pod's service account for the created container `id` and copies the token,
    /// the CA and the namespace into it; the container is removed when the account is missing (a
    /// configuration error) or the copy fails (a failed create).
    async fn install_service_account(
        &self,
        pod: &Value,
        id: &str,
        name: &str,
        probed: Arc<watch::Sender<Probed>>,
    ) -> Result<(), StartError> {
        let ns = meta::namespace_of(pod).to_string();
        let service_account = meta::str_at(pod, "/spec/serviceAccountName")
            .filter(|s| !s.is_empty())
            .unwrap_or("default")
            .to_string();
        let issued = match self.inner.store.issue_token(
            &ns,
            &service_account,
            &crate::store::TokenOptions::default(),
        ) {
            Ok(issued) => issued,
            Err(e) => {
                self.remove(id).await;
                return Err(StartError::Config(format!("failed to fetch token: {e}")));
            }
        };
        let token = issued.token;
        let archive = match service_account_tar(&token, &self.api().ca_pem, &ns) {
            Ok(archive) => archive,
            Err(e) => {
                self.inner.store.forget_token(&token);
                self.remove(id).await;
                return Err(StartError::Create(format!(
                    "failed to pack the service-account files: {e}"
                )));
            }
        };
        self.inner.containers.lock_unpoisoned().insert(
            id.to_string(),
            Started {
                token,
                ip: None,
                probed,
                probes: Probes::default(),
            },
        );
        let upload = UploadToContainerOptionsBuilder::default()
            .path(&format!("/{SERVICE_ACCOUNT_DIR}"))
            .build();
        if let Err(e) = self
            .inner
            .docker
            .upload_to_container(id, Some(upload), bollard::body_full(archive.into()))
            .await
        {
            self.remove(id).await;
            return Err(StartError::Create(format!(
                "failed to copy the service-account files into {name}: {}",
                engine_message(&e)
            )));
        }
        Ok(())
    }

    /// Starts the container's startup probe (started at once without one), readiness probe (ready at
    /// once without one) and liveness probe; the last two wait for the first to pass.
    fn start_probes(
        &self,
        id: &str,
        ip: Option<String>,
        container: &Value,
        probed: &Arc<watch::Sender<Probed>>,
        admitted: tokio::time::Instant,
        events: probe::Recorder,
    ) -> Probes {
        let worker = probe::Worker {
            target: probe::Target {
                docker: self.inner.docker.clone(),
                container_id: id.to_string(),
                ip,
                container: container.clone(),
            },
            probed: probed.clone(),
            ticks_from: admitted,
            events,
        };
        let spec = |field: &str| container.get(field).filter(|p| !p.is_null()).cloned();
        let mut probes = Probes::default();
        match spec("readinessProbe") {
            Some(spec) => {
                probes.readiness = Some(tokio::spawn(probe::readiness(worker.clone(), spec)))
            }
            None => {
                probed.send_modify(|p| p.ready = true);
            }
        }
        if let Some(spec) = spec("livenessProbe") {
            probes
                .killing
                .push(tokio::spawn(probe::liveness(worker.clone(), spec)));
        }
        match spec("startupProbe") {
            Some(spec) => probes
                .killing
                .push(tokio::spawn(probe::startup(worker, spec))),
            None => {
                probed.send_modify(|p| p.started = true);
            }
        }
        probes
    }
}

/// Runs the kubelet on a Docker engine until `shutdown` flips, then removes the pod containers.
pub async fn run(
    store: Store,
    config: super::Config,
    runtime: DockerRuntime,
    shutdown: watch::Receiver<bool>,
) {
    let removed = runtime.remove_all().await;
    if removed > 0 {
        tracing::info!(removed, "removed pod containers of an earlier run");
    }
    super::run_with(store, config, runtime.clone(), shutdown).await;
    let removed = runtime.remove_all().await;
    tracing::info!(removed, "removed pod containers at shutdown");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_service_account_tar_holds_the_three_files() {
        let tar = service_account_tar("t0k", "PEM", "ns1").unwrap();
        let mut archive = tar::Archive::new(tar.as_slice());
        let files: Vec<String> = archive
            .entries()
            .unwrap()
            .map(|e| e.unwrap().path().unwrap().display().to_string())
            .collect();
        assert_eq!(files, ["token", "ca.crt", "namespace"]);
    }
}
