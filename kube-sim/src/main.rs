//! The `kube-sim` binary: `serve` for local use, `server` as a stand-in for the k3s node image.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context as _;
use clap::Parser;
use kube_sim::{Config, Sim};

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
    },
    /// The k3s node contract: `server [--tls-san NAME]... [--disable X]...`; other k3s flags are accepted and ignored.
    Server {
        /// k3s flags.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
}

/// Where k3s reads its registry configuration.
const K3S_REGISTRIES: &str = "/etc/rancher/k3s/registries.yaml";

/// Where k3s writes its kubeconfig when `K3S_KUBECONFIG_OUTPUT` is unset.
const K3S_KUBECONFIG: &str = "/etc/rancher/k3s/k3s.yaml";

fn main() -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
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
        } => {
            config.listen = listen;
            config.kubeconfig_out = Some(kubeconfig_out);
            config.registries = registries;
            config.tls_sans = tls_san;
            config.tls = !plain_http;
        }
        Command::Server { args } => {
            let k3s = parse_k3s_args(&args);
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
                config.kubelet.node_name = host.clone();
                config.controllers.node_name = Some(host);
            }
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
}

fn parse_k3s_args(args: &[String]) -> K3sArgs {
    let mut out = K3sArgs {
        tls_sans: Vec::new(),
        disabled: Vec::new(),
        port: 6443,
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
