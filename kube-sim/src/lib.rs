//! `kube-sim`: a Kubernetes API simulator that real clients (kubectl, kube-rs) accept.
//!
//! The crate is an API server over an in-memory [`store::Store`]. Controllers, a scheduler and a kubelet stand-in run in
//! the same process on top of the store's Rust API (see the [`store`] module docs).
//!
//! [`Sim::start`] runs everything in-process on an ephemeral port and hands out a [`kube::Client`] and a
//! kubeconfig path; the `kube-sim` binary runs the same thing as a process (`serve`) or as a stand-in for the
//! k3s node image (`server`).

#![warn(clippy::print_stdout, clippy::print_stderr)]

pub mod controller;
pub mod defaults;
pub mod discovery;
pub mod fieldmanager;
pub mod kubeconfig;
pub mod kubelet;
mod lock;
pub mod machinery;
pub mod meta;
pub mod openapi;
pub mod patch;
pub mod platform;
pub mod rbac;
pub mod resource;
pub mod scheduler;
pub mod schema;
pub mod selector;
pub mod server;
mod sparse;
pub mod store;
pub mod table;
pub mod tls;
pub mod validation;
pub mod wire;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;

pub use resource::{GroupResource, ResourceInfo};
pub use store::Store;

/// The simulator could not start.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Binding the listen address failed.
    #[error("listening on {addr}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// Certificates could not be made.
    #[error(transparent)]
    Tls(#[from] tls::Error),
    /// The kubeconfig could not be written.
    #[error(transparent)]
    Kubeconfig(#[from] kubeconfig::Error),
    /// A temporary directory for the kubeconfig could not be made.
    #[error("creating a temporary directory for the kubeconfig")]
    TempDir(#[source] std::io::Error),
    /// The kubelet's registries configuration is unusable.
    #[error(transparent)]
    Kubelet(#[from] kubelet::Error),
    /// The Docker kubelet cannot reach its engine or network.
    #[error(transparent)]
    DockerKubelet(#[from] kubelet::docker::Error),
    /// A client could not be built from the kubeconfig.
    #[cfg(feature = "client")]
    #[error("building a client from {path}")]
    Client {
        /// The kubeconfig.
        path: String,
        /// The cause.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

/// How to run the simulator. There is no `Default`: pick [`Config::ephemeral`] or fill every field.
#[derive(Clone, Debug)]
pub struct Config {
    /// The address to listen on; port 0 picks a free port.
    pub listen: SocketAddr,
    /// Serve HTTPS (a fresh CA and certificate); `false` serves plain HTTP.
    pub tls: bool,
    /// Extra subject alternative names for the serving certificate.
    pub tls_sans: Vec<String>,
    /// Where to write the kubeconfig; `None` writes into a temporary directory removed at shutdown.
    pub kubeconfig_out: Option<PathBuf>,
    /// The server URL written into the kubeconfig; `None` uses the listen address (`127.0.0.1` for `0.0.0.0`).
    pub kubeconfig_server: Option<String>,
    /// The bearer token; `None` generates one.
    pub token: Option<String>,
    /// The lag between a CRD's `NamesAccepted` and `Established` conditions.
    pub crd_establish_delay: Duration,
    /// How many events the watch history keeps per resource.
    pub watch_history: usize,
    /// How long the watch history keeps events ([`store::HISTORY_WINDOW`] by default).
    pub watch_history_window: Duration,
    /// How long Events live after their last write ([`store::EVENT_TTL`] by default).
    pub event_ttl: Duration,
    /// How often watches that allow bookmarks receive one.
    pub bookmark_interval: Duration,
    /// A k3s-style `registries.yaml`, passed on to the kubelet stand-in.
    pub registries: Option<PathBuf>,
    /// The Deployment and ReplicaSet controllers and the garbage collector.
    pub controllers: controller::Config,
    /// The scheduler.
    pub scheduler: scheduler::Config,
    /// The kubelet stand-in; its mirrors are replaced by `registries` when that is set.
    pub kubelet: kubelet::Config,
    /// What runs pods: nothing (the virtual kubelet) or a Docker engine.
    pub kubelet_backend: KubeletBackend,
}

/// How many events the watch history keeps per resource by default: superseded versions live on only
/// in the history, so fewer is smaller (measured with 1000 pods: 10,000 took about 70 MiB more once they
/// were Ready, 280 MiB more after a rollout); the five-minute window bounds it in time.
pub const WATCH_HISTORY_EVENTS: usize = 1000;

/// What runs the pods bound to the node (`--kubelet virtual|docker`).
#[derive(Clone, Debug)]
pub enum KubeletBackend {
    /// Pods go through their stages but nothing runs (the default, and what tests without Docker use).
    Virtual,
    /// Pods run as containers on a Docker engine.
    Docker(kubelet::docker::DockerConfig),
}

impl Config {
    /// HTTPS on an ephemeral `127.0.0.1` port with short delays, for tests.
    pub fn ephemeral() -> Config {
        Config {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            tls: true,
            tls_sans: Vec::new(),
            kubeconfig_out: None,
            kubeconfig_server: None,
            token: None,
            crd_establish_delay: Duration::from_millis(200),
            watch_history: WATCH_HISTORY_EVENTS,
            watch_history_window: store::HISTORY_WINDOW,
            event_ttl: store::EVENT_TTL,
            bookmark_interval: Duration::from_secs(1),
            registries: None,
            controllers: controller::Config::fast(),
            scheduler: scheduler::Config::fast(),
            kubelet: kubelet::Config::fast(NODE_NAME),
            kubelet_backend: KubeletBackend::Virtual,
        }
    }
}

/// The host of the server URL: `127.0.0.1` for an unspecified address, IPv6 in brackets.
fn url_host(addr: SocketAddr) -> String {
    let host = if addr.ip().is_unspecified() {
        "127.0.0.1".to_string()
    } else {
        addr.ip().to_string()
    };
    if host.contains(':') {
        format!("[{host}]")
    } else {
        host
    }
}

/// The TLS acceptor and the CA certificate (PEM) when serving HTTPS: a fresh CA, and a serving certificate
/// for the configured names and the listen address.
fn tls_setup(
    config: &Config,
    addr: SocketAddr,
) -> Result<(Option<tokio_rustls::TlsAcceptor>, Option<String>), Error> {
    if config.tls {
        let mut sans = config.tls_sans.clone();
        if !addr.ip().is_unspecified() {
            sans.push(addr.ip().to_string());
        }
        let certs = tls::generate(&sans)?;
        let server_config = tls::server_config(&certs)?;
        Ok((
            Some(tokio_rustls::TlsAcceptor::from(server_config)),
            Some(certs.ca_pem),
        ))
    } else {
        Ok((None, None))
    }
}

/// Binds the listen address; the result has the port picked for port 0.
async fn bind(listen: SocketAddr) -> Result<(tokio::net::TcpListener, SocketAddr), Error> {
    let bind_error = |source| Error::Bind {
        addr: listen,
        source,
    };
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(bind_error)?;
    let addr = listener.local_addr().map_err(bind_error)?;
    Ok((listener, addr))
}

/// Writes the kubeconfig for `url` (or the configured server URL) to the configured path, or into a
/// temporary directory kept while the simulator runs; returns that directory and the file's path.
fn write_kubeconfig(
    config: &Config,
    url: &str,
    ca_pem: Option<&str>,
    token: &str,
) -> Result<(Option<tempfile::TempDir>, PathBuf), Error> {
    let (tempdir, path) = match &config.kubeconfig_out {
        Some(p) => (None, p.clone()),
        None => {
            let dir = tempfile::Builder::new()
                .prefix("kube-sim-")
                .tempdir()
                .map_err(Error::TempDir)?;
            let path = dir.path().join("kubeconfig.yaml");
            (Some(dir), path)
        }
    };
    let server_url = config.kubeconfig_server.as_deref().unwrap_or(url);
    kubeconfig::write_private(&path, &kubeconfig::render(server_url, ca_pem, token))?;
    Ok((tempdir, path))
}

/// Starts the kubelet. On a Docker engine, pods reach the API server at the configured address or the
/// listen address (the node's name when listening on all addresses), and the node's IP is its container's.
async fn start_kubelet(
    store: &Store,
    backend: &KubeletBackend,
    mut kubelet_config: kubelet::Config,
    addr: SocketAddr,
    ca_pem: String,
    shutdown_rx: watch::Receiver<bool>,
) -> Result<JoinHandle<()>, Error> {
    let docker = match backend {
        KubeletBackend::Virtual => {
            return Ok(tokio::spawn(kubelet::run(
                store.clone(),
                kubelet_config,
                shutdown_rx,
            )));
        }
        KubeletBackend::Docker(docker) => docker,
    };
    let api = kubelet::docker::ApiAccess {
        host: docker.api_host.clone().unwrap_or_else(|| {
            if addr.ip().is_unspecified() {
                kubelet_config.node_name.clone()
            } else {
                addr.ip().to_string()
            }
        }),
        port: docker.api_port.unwrap_or(addr.port()),
        ca_pem,
    };
    let runtime = kubelet::docker::DockerRuntime::new(
        store.clone(),
        &kubelet_config.node_name,
        docker.clone(),
        api,
        kubelet_config.registries.clone(),
    )
    .await?;
    if let Some(ip) = runtime.address_of(&kubelet_config.node_name).await {
        kubelet_config.node_ip = ip;
    }
    Ok(tokio::spawn(kubelet::docker::run(
        store.clone(),
        kubelet_config,
        runtime,
        shutdown_rx,
    )))
}

/// The name of the simulated node unless configured otherwise.
pub const NODE_NAME: &str = "kube-sim";

/// A running simulator.
pub struct Sim {
    store: Store,
    addr: SocketAddr,
    url: String,
    kubeconfig_path: PathBuf,
    token: String,
    ca_pem: Option<String>,
    config: Config,
    shutdown: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
    _tempdir: Option<tempfile::TempDir>,
}

impl Sim {
    /// Starts the store, the API machinery and the server, and writes the kubeconfig.
    pub async fn start(config: Config) -> Result<Sim, Error> {
        let kubelet_config = match &config.registries {
            Some(path) => config.kubelet.clone().with_registries_file(path)?,
            None => config.kubelet.clone(),
        };
        let (listener, addr) = bind(config.listen).await?;
        let host = url_host(addr);
        let scheme = if config.tls { "https" } else { "http" };
        let url = format!("{scheme}://{host}:{}", addr.port());
        let token = config.token.clone().unwrap_or_else(|| meta::random_hex(24));

        let (tls_acceptor, ca_pem) = tls_setup(&config, addr)?;

        let (tempdir, kubeconfig_path) =
            write_kubeconfig(&config, &url, ca_pem.as_deref(), &token)?;

        let store = Store::new(store::StoreConfig {
            history: config.watch_history,
        });
        store.set_history_window(config.watch_history_window);
        store.set_event_ttl(config.event_ttl);
        machinery::publish_namespace_defaults(&store, ca_pem.as_deref().unwrap_or_default());
        rbac::defaults::ensure(&store);
        rbac::aggregation::aggregate(&store);
        let (shutdown, shutdown_rx) = watch::channel(false);
        let state = Arc::new(server::ServerState {
            store: store.clone(),
            token: token.clone(),
            advertise: format!("{host}:{}", addr.port()),
            bookmark_interval: config.bookmark_interval,
            shutdown: shutdown_rx.clone(),
            openapi: openapi::Documents::default(),
        });
        let mut tasks = vec![
            tokio::spawn(machinery::run_crd_controller(
                store.clone(),
                config.crd_establish_delay,
                shutdown_rx.clone(),
            )),
            tokio::spawn(machinery::run_namespace_controller(
                store.clone(),
                ca_pem.clone().unwrap_or_default(),
                shutdown_rx.clone(),
            )),
            tokio::spawn(rbac::aggregation::run(store.clone(), shutdown_rx.clone())),
            tokio::spawn(controller::run(
                store.clone(),
                config.controllers.clone(),
                shutdown_rx.clone(),
            )),
            tokio::spawn(scheduler::run(
                store.clone(),
                config.scheduler.clone(),
                shutdown_rx.clone(),
            )),
            tokio::spawn(server::serve(listener, tls_acceptor, state)),
            tokio::spawn(store.clone().expire_history_until(shutdown_rx.clone())),
        ];
        let kubelet = start_kubelet(
            &store,
            &config.kubelet_backend,
            kubelet_config,
            addr,
            ca_pem.clone().unwrap_or_default(),
            shutdown_rx,
        )
        .await;
        match kubelet {
            Ok(task) => tasks.push(task),
            Err(e) => {
                let _ = shutdown.send(true);
                return Err(e);
            }
        }
        tracing::info!(%url, kubeconfig = %kubeconfig_path.display(), "kube-sim is serving");
        Ok(Sim {
            store,
            addr,
            url,
            kubeconfig_path,
            token,
            ca_pem,
            config,
            shutdown,
            tasks,
            _tempdir: tempdir,
        })
    }

    /// The store, for in-process controllers and for tests.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The address the server listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The server URL, for example `https://127.0.0.1:41234`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The kubeconfig written at start.
    pub fn kubeconfig_path(&self) -> &Path {
        &self.kubeconfig_path
    }

    /// The bearer token.
    pub fn token(&self) -> &str {
        &self.token
    }

    /// The CA certificate (PEM) when serving HTTPS.
    pub fn ca_pem(&self) -> Option<&str> {
        self.ca_pem.as_deref()
    }

    /// The configuration the simulator started with (controllers read `registries` from it).
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// A receiver that turns `true` at shutdown, for background tasks started next to the simulator.
    pub fn shutdown_signal(&self) -> watch::Receiver<bool> {
        self.shutdown.subscribe()
    }

    /// Runs a background task that is awaited at shutdown; it should end when [`Sim::shutdown_signal`] flips.
    pub fn spawn(&mut self, task: impl std::future::Future<Output = ()> + Send + 'static) {
        self.tasks.push(tokio::spawn(task));
    }

    /// A `kube::Client` built from the emitted kubeconfig, exactly as an outside client would.
    #[cfg(feature = "client")]
    pub async fn client(&self) -> Result<kube::Client, Error> {
        let path = self.kubeconfig_path.display().to_string();
        let wrap = |e: Box<dyn std::error::Error + Send + Sync>| Error::Client {
            path: path.clone(),
            source: e,
        };
        let kc = kube::config::Kubeconfig::read_from(&self.kubeconfig_path)
            .map_err(|e| wrap(Box::new(e)))?;
        let config =
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await
                .map_err(|e| wrap(Box::new(e)))?;
        kube::Client::try_from(config).map_err(|e| wrap(Box::new(e)))
    }

    /// Stops the server and background tasks and waits for them (at most five seconds, thirty with the
    /// Docker kubelet, which removes its containers).
    pub async fn shutdown(self) {
        let _ = self.shutdown.send(true);
        let wait = futures::future::join_all(self.tasks);
        let limit = match self.config.kubelet_backend {
            KubeletBackend::Virtual => Duration::from_secs(5),
            KubeletBackend::Docker(_) => Duration::from_secs(30),
        };
        if tokio::time::timeout(limit, wait).await.is_err() {
            tracing::warn!(?limit, "background tasks did not stop in time");
        }
    }
}
