//! `controller-manager`: runs the WorkerPool controller against the cluster
//! of the ambient configuration (in-cluster service account, or
//! `KUBECONFIG`) while it holds the `controller-manager` Lease, until SIGTERM
//! or SIGINT, or until the Lease is lost.

use anyhow::Context as _;
use kube::Client;
use tokio::signal::unix::{SignalKind, signal};
use tracing::info;
use tracing_subscriber::EnvFilter;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    use std::io::IsTerminal;
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")),
        )
        .with_ansi(std::io::stdout().is_terminal())
        .init();

    let mut term = signal(SignalKind::terminate()).context("cannot handle SIGTERM")?;
    let mut int = signal(SignalKind::interrupt()).context("cannot handle SIGINT")?;
    let client = Client::try_default()
        .await
        .context("cannot configure a Kubernetes client from the service account or KUBECONFIG")?;
    let shutdown = async move {
        let name = tokio::select! {
            _ = term.recv() => "SIGTERM",
            _ = int.recv() => "SIGINT",
        };
        info!(signal = name, "shutting down");
    };
    let election = controller_manager::leader::Election::in_cluster();
    controller_manager::leader::run_elected(client, election, shutdown).await?;
    Ok(())
}
