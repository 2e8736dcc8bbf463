//! `dev up`, `dev down`, `dev reset`: the environment as a whole.
//!
//! `up` reads and checks everything first (config, manifests), then runs the
//! drift gate over every existing object before changing any of them, then
//! ensures network → registry → node → cluster content. Each step is
//! idempotent, so a second `up` verifies labels and re-applies manifests (a
//! no-op server-side) and changes nothing. `down` and `reset` work whatever
//! the drift and whatever is half-created or already gone.

use std::{path::Path, time::Duration};

use bollard::{Docker, query_parameters::CreateImageOptionsBuilder};
use futures::StreamExt;

use crate::{
    apply::{self, Applied},
    cluster::{self, Node},
    config::{Config, Provider},
    docker::{self, inspect_container},
    image::{self, cargo as cargo_build},
    kubeconfig, manifest, network,
    plan::{self, Drift},
    registry,
    state::State,
};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Manifest(#[from] manifest::Error),
    #[error(transparent)]
    Docker(#[from] docker::Error),
    #[error(transparent)]
    Network(#[from] network::Error),
    #[error(transparent)]
    Registry(#[from] registry::Error),
    #[error(transparent)]
    Cluster(#[from] cluster::Error),
    #[error(transparent)]
    Kubeconfig(#[from] kubeconfig::Error),
    #[error(transparent)]
    Apply(#[from] apply::Error),
    #[error(transparent)]
    State(#[from] crate::state::Error),
    #[error("{}\nnothing was changed; run `cargo xtask dev up --recreate` to replace {} (the registry's data volume is kept)", list(drifts), if drifts.len() == 1 { "it" } else { "them" })]
    Drift { drifts: Vec<Drift> },
    #[error("building the node image `{image}`: {reason}")]
    NodeImage { image: String, reason: String },
}

fn list(drifts: &[Drift]) -> String {
    drifts
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("\n")
}

/// What `up` may do beyond converging.
#[derive(Debug, Clone, Copy)]
pub struct UpOptions {
    /// Replace drifted objects instead of stopping.
    pub recreate: bool,
    /// Stream build output.
    pub verbose: bool,
    /// Deadline of each wait on the cluster.
    pub timeout: Duration,
}

/// What `up` did, step by step, for the user.
#[derive(Debug, Clone)]
pub struct UpReport {
    pub network: network::Outcome,
    pub registry: registry::Endpoint,
    pub node_image: Option<NodeImage>,
    pub node: Option<(cluster::Outcome, Node)>,
    pub recreated: Vec<Drift>,
    pub applied: Vec<Applied>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeImage {
    Present,
    Built,
    Pulled,
}

/// The drift of every existing object against `config`.
pub async fn drift(docker: &Docker, config: &Config) -> Result<Vec<Drift>, Error> {
    let state = State::load(&config.state_dir())?;
    let mut drifts = Vec::new();
    if let Some(existing) = network::inspect(docker, &config.network.name).await? {
        drifts.extend(network::drift(&existing, &plan::network_spec(config)));
    }
    if config.registry.external.is_none() {
        let spec = plan::registry_spec(config);
        if let Some(existing) = inspect_container(docker, &spec.container).await? {
            let labels = existing.config.and_then(|c| c.labels).unwrap_or_default();
            if let Some(Some(d)) =
                plan::drift_from_labels(&labels, "registry", &spec.container, &spec)
            {
                drifts.push(d);
            }
        }
    }
    if config.cluster.provider != Provider::Existing {
        let spec = plan::node_spec(config, registry_port(config, &state));
        if let Some(existing) = inspect_container(docker, &spec.container).await? {
            let labels = existing.config.and_then(|c| c.labels).unwrap_or_default();
            if let Some(Some(d)) = plan::drift_from_labels(&labels, "node", &spec.container, &spec)
            {
                drifts.push(d);
            }
        }
    }
    Ok(drifts)
}

fn registry_port(config: &Config, state: &State) -> Option<u16> {
    match config.registry.host_port {
        0 => state.registry_port,
        port => Some(port),
    }
}

/// Brings the environment to the declared state.
pub async fn up(
    config: &Config,
    options: UpOptions,
    progress: &(dyn Fn(&str) + Sync),
) -> Result<UpReport, Error> {
    // Everything that can be wrong with the input is found before anything
    // is changed.
    let manifests = manifest::load(&config.manifests)?;
    let docker = docker::connect().await?;

    let drifts = drift(&docker, config).await?;
    if !drifts.is_empty() && !options.recreate {
        return Err(Error::Drift { drifts });
    }
    for d in &drifts {
        progress(&format!("recreating {} `{}`", d.object, d.name));
    }
    let network_drifted = drifts.iter().any(|d| d.object == "network");
    let drifted = |object: &str| network_drifted || drifts.iter().any(|d| d.object == object);
    // The node and the registry hold the network; they go first.
    if config.cluster.provider != Provider::Existing && drifted("node") {
        cluster::remove(&docker, config).await?;
    }
    if drifted("registry") {
        registry::remove(&docker, config).await?;
    }
    if network_drifted {
        network::remove(&docker, &config.network.name).await?;
    }

    let network = network::ensure(&docker, &config.name, &plan::network_spec(config)).await?;
    progress(&format!(
        "network  {}: {}",
        config.network.name,
        describe_network(&network)
    ));
    if let network::Outcome::Drifted(d) = network {
        return Err(Error::Drift { drifts: vec![d] });
    }

    let registry = registry::ensure(&docker, config).await?;
    progress(&format!(
        "registry {} ({:?})",
        registry.host, registry.action
    ));

    // The registry may have recorded the port it picked: read state after it.
    let mut state = State::load(&config.state_dir())?;
    let (node_image, node, client) = match config.cluster.provider {
        Provider::Existing => {
            let context = config.cluster.context.as_deref().unwrap_or_default();
            progress(&format!("cluster  existing context `{context}`"));
            (None, None, kubeconfig::user_client(context).await?)
        }
        Provider::K3s | Provider::Sim => {
            let node_image = ensure_node_image(&docker, config, options.verbose, progress).await?;
            let spec = plan::node_spec(config, registry_port(config, &state));
            let (outcome, node) =
                cluster::ensure(&docker, config, &spec, &mut state, options.recreate).await?;
            state.save(&config.state_dir())?;
            let Some(node) = node else {
                let cluster::Outcome::Drifted(d) = outcome else {
                    unreachable!("a node is returned unless drifted")
                };
                return Err(Error::Drift { drifts: vec![d] });
            };
            progress(&format!(
                "node     {} ({outcome:?}) API on 127.0.0.1:{}",
                node.container, node.api_port
            ));
            let client = kubeconfig::client(&node.host_kubeconfig, None).await?;
            (Some(node_image), Some((outcome, node)), client)
        }
    };

    let hosting = apply::local_registry_hosting(config, &registry.host);
    let mut applied = vec![apply::apply_value(&client, &hosting).await?];
    let pins = apply::pinned_images(config, &State::load(&config.state_dir())?);
    applied.extend(apply::apply_all(&client, &manifests, &pins, options.timeout).await?);
    let changed = applied.iter().filter(|a| a.changed).count();
    progress(&format!(
        "applied  {} objects ({changed} changed)",
        applied.len()
    ));
    Ok(UpReport {
        network,
        registry,
        node_image,
        node,
        recreated: drifts,
        applied,
    })
}

fn describe_network(outcome: &network::Outcome) -> &'static str {
    match outcome {
        network::Outcome::Created => "created",
        network::Outcome::Unchanged => "unchanged",
        network::Outcome::Drifted(_) => "drifted",
    }
}

/// Makes sure the engine has the node image: present, built locally (the
/// kube-sim image of `provider: sim`), or pulled (k3s).
async fn ensure_node_image(
    docker: &Docker,
    config: &Config,
    verbose: bool,
    progress: &(dyn Fn(&str) + Sync),
) -> Result<NodeImage, Error> {
    let image = &config.cluster.image;
    if docker::inspect_image(docker, image).await?.is_some() {
        return Ok(NodeImage::Present);
    }
    let err = |reason: String| Error::NodeImage {
        image: image.clone(),
        reason,
    };
    if config.cluster.provider == Provider::Sim {
        progress(&format!(
            "building node image {image} from the `kube-sim` package (no pulls)"
        ));
        build_sim_image(docker, &config.root, image, verbose)
            .await
            .map_err(err)?;
        return Ok(NodeImage::Built);
    }
    progress(&format!("pulling node image {image}"));
    let options = CreateImageOptionsBuilder::default()
        .from_image(image)
        .build();
    let mut pull = docker.create_image(Some(options), None, None);
    while let Some(step) = pull.next().await {
        if let Err(e) = step {
            return Err(err(format!(
                "the engine could not pull it ({e}); pull it where a registry is reachable and `docker load` it here, or use `provider: sim` for an offline cluster"
            )));
        }
    }
    Ok(NodeImage::Pulled)
}

/// Builds the kube-sim node image: a static `kube-sim` binary in an empty
/// image whose entrypoint takes k3s's `server` arguments.
pub async fn build_sim_image(
    docker: &Docker,
    root: &Path,
    image: &str,
    verbose: bool,
) -> Result<(), String> {
    let root = root.to_path_buf();
    let binary = tokio::task::spawn_blocking(move || {
        cargo_build::build_binary(&cargo_build::Build {
            root: &root,
            package: "kube-sim",
            bin: "kube-sim",
            verbose,
        })
    })
    .await
    .map_err(|e| e.to_string())?
    .map_err(|e| format!("{e}; the sim provider builds the workspace's `kube-sim` package"))?;
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    std::fs::copy(&binary, dir.path().join("kube-sim")).map_err(|e| e.to_string())?;
    let dockerfile = dir.path().join("Dockerfile");
    std::fs::write(
        &dockerfile,
        "FROM scratch\nCOPY kube-sim /bin/kube-sim\nENTRYPOINT [\"/bin/kube-sim\"]\n",
    )
    .map_err(|e| e.to_string())?;
    let (repository, tag) = match image.rsplit_once(':') {
        Some((r, t)) if !t.contains('/') => (r, t),
        _ => (image, "latest"),
    };
    let build_args = Default::default();
    let build = image::docker::Build {
        context: dir.path(),
        dockerfile: &dockerfile,
        target: None,
        build_args: &build_args,
        repository,
        tag,
        verbose,
    };
    image::docker::build(docker, &build)
        .await
        .map_err(|e| e.to_string())?;
    Ok(())
}

/// What `down` removed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DownReport {
    pub node: bool,
    pub registry: bool,
    pub volume: bool,
    pub network: bool,
}

/// Removes the node and the registry container, and with `purge` the
/// registry's volume; with `network`, the network too (`reset`). Whatever
/// is already gone is skipped; drift does not matter.
pub async fn down(config: &Config, purge: bool, remove_network: bool) -> Result<DownReport, Error> {
    let docker = docker::connect().await?;
    let mut report = DownReport::default();
    if config.cluster.provider != Provider::Existing {
        report.node = cluster::remove(&docker, config).await?;
    }
    report.registry = registry::remove(&docker, config).await?;
    if purge && config.registry.external.is_none() {
        report.volume = docker::remove_volume(&docker, &config.registry.volume).await?;
        // Digests recorded for images that no longer exist would pin
        // manifests to nothing.
        let mut state = State::load(&config.state_dir())?;
        if !state.images.is_empty() {
            state.images.clear();
            state.save(&config.state_dir())?;
        }
    }
    if remove_network {
        report.network = network::remove(&docker, &config.network.name).await?;
    }
    Ok(report)
}
