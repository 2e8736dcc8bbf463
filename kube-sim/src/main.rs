//! The `kube-sim` binary: `serve` for local use, `server` as a stand-in for the k3s node image.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context as _;
use clap::Parser;
use kube_sim::{Config, Sim};

/// jemalloc, set up by [`return_freed_memory`]. A rollout of a thousand pods frees hundreds of MiB of
/// short-lived JSON in bursts. glibc's malloc kept nearly all of it (571 of 580 MiB free but resident
/// after the namespace was deleted), and mimalloc returns a page only when the thread that owns it
/// allocates again, which an idle server's threads seldom do (140 to 250 MiB resident for a live heap
/// of a few MiB). jemalloc's background threads purge on their own.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// How long freed memory stays resident before jemalloc's background threads give it back. A tenth
/// of a second: a second left the end of a burst resident when it was measured (about 10 MiB more at
/// 1000 Ready pods), and none at all costs a fifth more CPU per rollout in `madvise` calls.
const DIRTY_DECAY_MS: isize = 100;

/// Has jemalloc give freed memory back to the system about [`DIRTY_DECAY_MS`] after it is freed,
/// from background threads, so an idle simulator shrinks to what it holds. Freed pages are returned
/// with `MADV_DONTNEED` at once (no "muzzy" stage, whose pages stay resident until the kernel needs
/// them). Called first in `main`, while only the main thread's arena exists; later arenas take the
/// defaults set here.
fn return_freed_memory() {
    use tikv_jemalloc_ctl::{Access as _, AsName as _};
    let mut failed = Vec::new();
    let mut set = |key: String, value: isize| {
        let name = format!("{key}\0");
        if let Err(e) = name.as_bytes().name().write(value) {
            failed.push(format!("{key}: {e}"));
        }
    };
    for scope in ["arenas", "arena.0"] {
        set(format!("{scope}.dirty_decay_ms"), DIRTY_DECAY_MS);
        set(format!("{scope}.muzzy_decay_ms"), 0);
    }
    if let Err(e) = tikv_jemalloc_ctl::background_thread::write(true) {
        failed.push(format!("background_thread: {e}"));
    }
    if !failed.is_empty() {
        tracing::warn!(
            settings = failed.join("; "),
            "jemalloc refused a setting; freed memory may stay resident"
        );
    }
}

/// A Kubernetes API simulator that kubectl and kube-rs accept.
#[derive(Parser)]
#[command(name = "kube-sim", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(clap::Subcommand)]
enum Command {
    /// Serve on an address and write a kubeconfig; prints the server URL on stdout.
    Serve {
        /// The address to listen on; port 0 picks a free port.
        #[arg(long, default_value = "127.0.0.1:0")]
        listen: SocketAddr,
        /// Where to write the kubeconfig (mode 0600).
        #[arg(long)]
        kubeconfig_out: PathBuf,
        /// A k3s-style registries.yaml for image pulls.
        #[arg(long)]
        registries: Option<PathBuf>,
        /// Extra names for the serving certificate.
        #[arg(long = "tls-san")]
        tls_san: Vec<String>,
        /// Serve plain HTTP instead of HTTPS.
        #[arg(long)]
        plain_http: bool,
        /// How long the watch history keeps events (etcd compacts every 5 minutes); watches and continue
        /// tokens from older versions get 410 Expired.
        #[arg(long, default_value = "5m", value_parser = humantime::parse_duration)]
        watch_history_window: std::time::Duration,
        /// How many events the watch history keeps per resource (older ones expire sooner than the window).
        #[arg(long, default_value_t = kube_sim::WATCH_HISTORY_EVENTS)]
        watch_history_events: usize,
        /// How long Events live after their last write, as kube-apiserver's --event-ttl.
        #[arg(long, default_value = "1h", value_parser = humantime::parse_duration)]
        event_ttl: std::time::Duration,
        #[command(flatten)]
        kubelet: KubeletArgs,
    },
    /// The k3s node contract: `server [--tls-san NAME]... [--disable X]... [--kubelet-arg=max-pods=N]`; other
    /// k3s flags are accepted and ignored. The kubelet flags (`--kubelet`, `--docker-network`,
    /// `--docker-label`, `--nodes`) are read too.
    Server {
        /// k3s flags.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
}

/// What runs pods.
#[derive(Clone, Copy, Debug, Default, PartialEq, clap::ValueEnum)]
enum KubeletKind {
    /// Pods go through their stages; nothing runs.
    #[default]
    Virtual,
    /// Pods run as containers on the Docker engine at `DOCKER_HOST` (a unix socket).
    Docker,
}

/// The kubelet flags of both modes.
#[derive(clap::Args, Debug, Default)]
struct KubeletArgs {
    /// What runs pods.
    #[arg(long, value_enum, default_value_t = KubeletKind::Virtual)]
    kubelet: KubeletKind,
    /// The Docker network pod containers join (required with `--kubelet docker`).
    #[arg(long)]
    docker_network: Option<String>,
    /// A label `k=v` put on every pod container (repeatable).
    #[arg(long = "docker-label")]
    docker_label: Vec<String>,
    /// How many nodes the virtual kubelet registers (`<name>`, `<name>-1`, …), as KWOK does.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    nodes: u32,
    /// Each node's pod capacity, the kubelet's `max-pods`.
    #[arg(long, default_value_t = 110)]
    max_pods: u32,
}

impl KubeletArgs {
    /// Sets the node count and capacity; the Docker kubelet runs one node.
    fn apply(&self, kubelet: &mut kube_sim::kubelet::Config) -> anyhow::Result<()> {
        if self.kubelet == KubeletKind::Docker && self.nodes > 1 {
            anyhow::bail!(
                "--kubelet docker runs one node; --nodes {} needs --kubelet virtual",
                self.nodes
            );
        }
        kubelet.nodes = self.nodes;
        kubelet.max_pods = self.max_pods;
        Ok(())
    }

    /// The backend, with `api_host` for pods when it is known.
    fn backend(&self, api_host: Option<String>) -> anyhow::Result<kube_sim::KubeletBackend> {
        if self.kubelet == KubeletKind::Virtual {
            return Ok(kube_sim::KubeletBackend::Virtual);
        }
        let network = self
            .docker_network
            .clone()
            .context("--kubelet docker needs --docker-network <network>")?;
        let mut labels = std::collections::BTreeMap::new();
        for label in &self.docker_label {
            let (k, v) = label
                .split_once('=')
                .with_context(|| format!("--docker-label {label}: expected k=v"))?;
            labels.insert(k.to_string(), v.to_string());
        }
        Ok(kube_sim::KubeletBackend::Docker(
            kube_sim::kubelet::docker::DockerConfig {
                network,
                labels,
                api_host,
                api_port: None,
            },
        ))
    }
}

/// Where k3s reads its registry configuration.
const K3S_REGISTRIES: &str = "/etc/rancher/k3s/registries.yaml";

/// Where k3s writes its kubeconfig when `K3S_KUBECONFIG_OUTPUT` is unset.
const K3S_KUBECONFIG: &str = "/etc/rancher/k3s/k3s.yaml";

fn main() -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    return_freed_memory();
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: starting the async runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    let mut config = Config::ephemeral();
    config.crd_establish_delay = std::time::Duration::from_millis(500);
    config.bookmark_interval = std::time::Duration::from_secs(60);
    match cli.command {
        Command::Serve {
            listen,
            kubeconfig_out,
            registries,
            tls_san,
            plain_http,
            watch_history_window,
            watch_history_events,
            event_ttl,
            kubelet,
        } => {
            config.watch_history = watch_history_events;
            config.watch_history_window = watch_history_window;
            config.event_ttl = event_ttl;
            config.kubelet_backend = kubelet.backend(None)?;
            kubelet.apply(&mut config.kubelet)?;
            config.listen = listen;
            config.kubeconfig_out = Some(kubeconfig_out);
            config.registries = registries;
            config.tls_sans = tls_san;
            config.tls = !plain_http;
        }
        Command::Server { args } => {
            let k3s = parse_k3s_args(&args);
            let kubelet = KubeletArgs {
                kubelet: if k3s.kubelet.as_deref() == Some("docker") {
                    KubeletKind::Docker
                } else {
                    KubeletKind::Virtual
                },
                docker_network: k3s.docker_network.clone(),
                docker_label: k3s.docker_labels.clone(),
                nodes: k3s.nodes,
                max_pods: k3s.max_pods,
            };
            kubelet.apply(&mut config.kubelet)?;
            config.listen = SocketAddr::from(([0, 0, 0, 0], k3s.port));
            config.tls_sans = k3s.tls_sans;
            config.kubeconfig_server = Some(format!("https://127.0.0.1:{}", k3s.port));
            config.kubeconfig_out = Some(
                std::env::var_os("K3S_KUBECONFIG_OUTPUT")
                    .map(PathBuf::from)
                    .unwrap_or_else(|| PathBuf::from(K3S_KUBECONFIG)),
            );
            let registries = PathBuf::from(K3S_REGISTRIES);
            config.registries = registries.exists().then_some(registries);
            // k3s names its node after the host.
            if let Some(host) = std::fs::read_to_string("/etc/hostname")
                .ok()
                .map(|h| h.trim().to_string())
                .filter(|h| !h.is_empty())
            {
                config.kubelet.node_name = host;
            }
            // Pods reach the API server by the node's name on the network, which `--tls-san` names.
            config.kubelet_backend = kubelet.backend(Some(config.kubelet.node_name.clone()))?;
            if !k3s.disabled.is_empty() {
                tracing::info!(disabled = ?k3s.disabled, "k3s components are not simulated; --disable has nothing to turn off");
            }
        }
    }
    let sim = Sim::start(config).await.context("starting kube-sim")?;
    println!("{}", sim.url());
    wait_for_signal()
        .await
        .context("waiting for a shutdown signal")?;
    tracing::info!("shutting down");
    sim.shutdown().await;
    Ok(())
}

struct K3sArgs {
    tls_sans: Vec<String>,
    disabled: Vec<String>,
    port: u16,
    kubelet: Option<String>,
    docker_network: Option<String>,
    docker_labels: Vec<String>,
    nodes: u32,
    max_pods: u32,
}

fn parse_k3s_args(args: &[String]) -> K3sArgs {
    let mut out = K3sArgs {
        tls_sans: Vec::new(),
        disabled: Vec::new(),
        port: 6443,
        kubelet: None,
        docker_network: None,
        docker_labels: Vec::new(),
        nodes: 1,
        max_pods: 110,
    };
    let mut it = args.iter().peekable();
    while let Some(arg) = it.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) => (f, Some(v.to_string())),
            None => (arg.as_str(), None),
        };
        let mut value = || {
            inline
                .clone()
                .or_else(|| it.next().cloned())
                .unwrap_or_default()
        };
        match flag {
            "--tls-san" => out.tls_sans.extend(
                value()
                    .split(',')
                    .map(str::to_string)
                    .filter(|s| !s.is_empty()),
            ),
            "--disable" => out.disabled.extend(value().split(',').map(str::to_string)),
            "--https-listen-port" => out.port = value().parse().unwrap_or(6443),
            "--kubelet" => out.kubelet = Some(value()),
            "--docker-network" => out.docker_network = Some(value()),
            "--docker-label" => out.docker_labels.push(value()),
            "--nodes" => out.nodes = value().parse().unwrap_or(1).max(1),
            "--kubelet-arg" => {
                // k3s passes `name=value` on to the kubelet; of its flags, `max-pods` sizes the node.
                if let Some(("max-pods", n)) = value().split_once('=') {
                    out.max_pods = n.parse().unwrap_or(110);
                }
            }
            _ => {}
        }
    }
    out
}

async fn wait_for_signal() -> std::io::Result<()> {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        r = tokio::signal::ctrl_c() => r,
        _ = term.recv() => Ok(()),
    }
}
