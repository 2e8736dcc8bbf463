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
use sha2::{Digest, Sha256};

use crate::{
    apply::{self, Applied},
    cluster::{self, Node},
    config::{Config, Provider, RolloutKind},
    docker::{self, inspect_container},
    image::{self, cargo as cargo_build},
    kubeconfig, manifest, network,
    plan::{self, Drift},
    registry,
    state::State,
    wait::{
        node::NodeProbe,
        workload::{self, WaitOptions, Want},
    },
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
    #[error("{}", errors.join("\n"))]
    Push { errors: Vec<String> },
    #[error("{}", errors.join("\n"))]
    Rollout { errors: Vec<String> },
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
            // A sim node still running an image that a rebuild replaced is
            // replaced too: that image is the harness's own build output,
            // not the user's drift.
            if config.cluster.provider == Provider::Sim
                && node_runs_stale_image(&docker, config).await?
            {
                cluster::remove(&docker, config).await?;
                progress(&format!(
                    "node     {}: replaced, its image was rebuilt",
                    config.node_name()
                ));
            }
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

    // Components never pushed are built now: manifests name their images,
    // and a cluster whose pods cannot pull is not up.
    let state = State::load(&config.state_dir())?;
    let unpushed: Vec<String> = config
        .components
        .keys()
        .filter(|c| !state.images.contains_key(*c))
        .cloned()
        .collect();
    if !unpushed.is_empty() {
        progress(&format!("pushing  {} (never pushed)", unpushed.join(", ")));
        let client = image::distribution::Client::new(&registry.host);
        let results = image::push_components(
            config,
            &client,
            &unpushed,
            image::PushOptions {
                verbose: options.verbose,
            },
        )
        .await;
        let errors: Vec<String> = results
            .into_iter()
            .filter_map(Result::err)
            .map(|e| e.to_string())
            .collect();
        if !errors.is_empty() {
            return Err(Error::Push { errors });
        }
    }

    let hosting = apply::local_registry_hosting(config, &registry.host);
    let mut applied = vec![apply::apply_value(&client, &hosting).await?];
    let state = State::load(&config.state_dir())?;
    applied.extend(
        apply::apply_all(
            &client,
            &manifests,
            &apply::pinned_images(config, &state),
            options.timeout,
        )
        .await?,
    );
    let changed = applied.iter().filter(|a| a.changed).count();
    progress(&format!(
        "applied  {} objects ({changed} changed)",
        applied.len()
    ));

    // Every Deployment among the manifests must complete; a component's
    // Deployment must run its pushed digest.
    let probe = (config.cluster.provider != Provider::Existing).then(|| NodeProbe {
        docker: docker.clone(),
        container: config.node_name(),
    });
    let wait_options = &WaitOptions::new(options.timeout).with_node(probe);
    let waits = manifests
        .iter()
        .filter(|m| m.kind == "Deployment" && m.api_version == "apps/v1")
        .map(|m| {
            let namespace = m
                .namespace
                .clone()
                .unwrap_or_else(|| String::from("default"));
            let component = config.components.iter().find(|(_, c)| {
                c.rollout.kind == RolloutKind::Deployment
                    && c.rollout.name == m.name
                    && c.rollout.namespace == namespace
            });
            let want = Want {
                namespace,
                deployment: m.name.clone(),
                container: component
                    .map(|(_, c)| c.rollout.container.clone())
                    .unwrap_or_default(),
                digest: component
                    .and_then(|(name, _)| state.images.get(name))
                    .map(|p| p.digest.clone()),
            };
            let client = client.clone();
            async move { workload::deployment(&client, &want, wait_options).await }
        });
    let waited = futures::future::join_all(waits).await;
    let errors: Vec<String> = waited
        .into_iter()
        .filter_map(Result::err)
        .map(|e| e.to_string())
        .collect();
    if !errors.is_empty() {
        return Err(Error::Rollout { errors });
    }
    Ok(UpReport {
        network,
        registry,
        node_image,
        node,
        recreated: drifts,
        applied,
    })
}

/// Whether the node container exists and runs another image than the one
/// its image name points at now.
async fn node_runs_stale_image(docker: &Docker, config: &Config) -> Result<bool, Error> {
    let Some(container) = inspect_container(docker, &config.node_name()).await? else {
        return Ok(false);
    };
    let current = docker::inspect_image(docker, &config.cluster.image)
        .await?
        .and_then(|i| i.id);
    Ok(current.is_some() && container.image != current)
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
    let present = docker::inspect_image(docker, image).await?;
    let err = |reason: String| Error::NodeImage {
        image: image.clone(),
        reason,
    };
    if config.cluster.provider == Provider::Sim {
        // The image is rebuilt whenever the simulator's sources change, so a
        // node never runs a stale simulator.
        let workspace = sim_workspace(&config.root).ok_or_else(|| {
            err(format!(
                "no `kube-sim/` package in {} or above it; the sim provider builds the node image from it",
                config.root.display()
            ))
        })?;
        let source = sim_source_hash(&workspace).map_err(|e| err(e.to_string()))?;
        let built_from = present
            .as_ref()
            .and_then(|i| i.config.as_ref())
            .and_then(|c| c.labels.as_ref())
            .and_then(|l| l.get(SIM_SOURCE_LABEL).cloned());
        if built_from.as_deref() == Some(source.as_str()) {
            return Ok(NodeImage::Present);
        }
        progress(&format!(
            "building node image {image} from the `kube-sim` package (no pulls)"
        ));
        build_sim_image(docker, &workspace, image, &source, verbose)
            .await
            .map_err(err)?;
        return Ok(NodeImage::Built);
    }
    if present.is_some() {
        return Ok(NodeImage::Present);
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

/// The nearest directory at or above `root` that holds the `kube-sim`
/// package.
pub fn sim_workspace(root: &Path) -> Option<std::path::PathBuf> {
    root.ancestors()
        .find(|dir| dir.join("kube-sim/Cargo.toml").is_file())
        .map(Path::to_path_buf)
}

/// The image label holding the hash of the sources a sim image was built from.
pub const SIM_SOURCE_LABEL: &str = "dev-env.sim-source";

/// sha256 over `kube-sim/` (sources and manifest, in path order, tests
/// excluded) and the workspace's `Cargo.lock`.
pub fn sim_source_hash(root: &Path) -> std::io::Result<String> {
    fn walk(dir: &Path, files: &mut Vec<std::path::PathBuf>) -> std::io::Result<()> {
        for entry in std::fs::read_dir(dir)? {
            let path = entry?.path();
            if path.is_dir() {
                if path
                    .file_name()
                    .is_some_and(|n| n != "target" && n != "tests")
                {
                    walk(&path, files)?;
                }
            } else {
                files.push(path);
            }
        }
        Ok(())
    }
    let mut files = Vec::new();
    walk(&root.join("kube-sim"), &mut files)?;
    files.sort();
    files.push(root.join("Cargo.lock"));
    let mut hasher = Sha256::new();
    for file in files {
        hasher.update(
            file.strip_prefix(root)
                .unwrap_or(&file)
                .to_string_lossy()
                .as_bytes(),
        );
        hasher.update([0]);
        hasher.update(std::fs::read(&file)?);
    }
    Ok(hex::encode(hasher.finalize()))
}

/// Builds the kube-sim node image: a static `kube-sim` binary in an empty
/// image whose entrypoint takes k3s's `server` arguments, labelled with the
/// hash of its sources.
pub async fn build_sim_image(
    docker: &Docker,
    root: &Path,
    image: &str,
    source: &str,
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
    let text = format!(
        "FROM scratch\nCOPY kube-sim /bin/kube-sim\nLABEL {SIM_SOURCE_LABEL}={source}\nENTRYPOINT [\"/bin/kube-sim\"]\n"
    );
    std::fs::write(&dockerfile, text).map_err(|e| e.to_string())?;
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
        staged: &[],
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
