//! `dev up`, `dev down`, `dev reset`: the environment as a whole.
//!
//! Every command here holds the environment's lock (`lock`) and refuses,
//! changing nothing, when an object it would touch is not the
//! environment's (`ownership`). `up` reads and checks everything first
//! (config, manifests), then runs the drift gate over every existing object
//! before changing any of them, then ensures network → registry → node →
//! images → cluster content, and returns once every component runs its
//! pinned digest (`converge`). Each step is idempotent and converges from
//! whatever an interrupted run left, so a second `up` changes nothing.
//! `down` and `reset` work whatever the drift and whatever is half-created
//! or already gone.

mod converge;
mod down;
mod dry_run;
mod node_image;
mod sim_source;

use std::time::Duration;

use bollard::Docker;

pub use self::{
    down::{DownOptions, DownReport, down},
    dry_run::{DryRun, DryRunOptions, dry_run},
    node_image::{
        BuildError, SIM_SOURCE_LABEL, SIMULATOR_TARGET_DIR, SimBuild, build_sim_image,
        sim_source_hash, sim_workspace, simulator_target_dir,
    },
};
use crate::{
    apply::{self, Applied},
    cluster::{self, Node},
    config::{Config, Provider},
    docker::{self, inspect_container},
    image, kubeconfig, lock, manifest, network, ownership,
    plan::{self, Drift, Object, Ownership},
    registry,
    report::{Event, Reporter, Step},
    state::State,
    wait::{node::NodeProbe, workload::WaitOptions},
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
    Host(#[from] crate::host::Error),
    #[error(transparent)]
    Apply(#[from] apply::Error),
    #[error(transparent)]
    Targets(#[from] crate::targets::Error),
    #[error(transparent)]
    Builds(#[from] image::builds::Error),
    #[error(transparent)]
    State(#[from] crate::state::Error),
    #[error(transparent)]
    Preflight(Box<crate::preflight::Error>),
    #[error("{kind} at {endpoint}: {refusal}")]
    Refused {
        kind: docker::engine::Kind,
        endpoint: String,
        #[source]
        refusal: docker::engine::Refusal,
    },
    #[error("{}\nnothing was changed; run `cargo xtask dev up --recreate` to replace {} (the registry's data volume is kept)", list(drifts), if drifts.len() == 1 { "it" } else { "them" })]
    Drift { drifts: Vec<Drift> },
    #[error("{}", failures.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n"))]
    Push { failures: Vec<PushFailure> },
    #[error("the node image `{image}`: {reason}")]
    NodeImage { image: String, reason: String },
    #[error(
        "the engine cannot pull the node image `{image}`; pull it where a registry is reachable and `docker load` it here, or use `provider: sim` for an offline cluster"
    )]
    NodePull {
        image: String,
        #[source]
        source: Box<bollard::errors::Error>,
    },
    #[error("cannot build the node image `{image}`")]
    NodeImageBuild {
        image: String,
        #[source]
        source: Box<node_image::BuildError>,
    },
    #[error(transparent)]
    Lock(#[from] lock::Error),
    #[error("cannot remove the state directory {}", dir.display())]
    RemoveState {
        dir: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Ownership(#[from] ownership::Error),
    #[error(transparent)]
    Converge(#[from] converge::Error),
    #[error("asking the registry at {host} whether it still has `{component}`'s image")]
    RegistryCheck {
        host: String,
        component: String,
        #[source]
        source: Box<image::distribution::Error>,
    },
}

/// A component `up` had to push and could not. One of several failures
/// listed at once: the error is shown in the line, not chained.
#[derive(Debug, thiserror::Error)]
#[error("{error}\nfix it and run `cargo xtask push-image {component}`, then `cargo xtask dev up`")]
pub struct PushFailure {
    pub component: String,
    pub error: image::Error,
}

impl From<crate::preflight::Error> for Error {
    fn from(e: crate::preflight::Error) -> Error {
        Error::Preflight(Box::new(e))
    }
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
    /// What to prune of what the manifests no longer declare.
    pub prune: apply::Prune,
}

/// What `up` did, step by step, for the user.
#[derive(Debug, Clone)]
pub struct UpReport {
    /// `None` when the environment needs no network.
    pub network: Option<network::Ensured>,
    pub registry: registry::Endpoint,
    pub node_image: Option<NodeImage>,
    pub node: Option<(cluster::Ensured, Node)>,
    pub recreated: Vec<Drift>,
    /// Components pushed during `up`: never pushed before, or no longer in
    /// the registry.
    pub pushed: Vec<String>,
    pub applied: Vec<Applied>,
    /// What became of the environment's ApplySet members that no manifest
    /// declares any more: deleted, kept (`--prune-destructive`), or
    /// released (`dev-env.io/prune: disabled`).
    pub pruning: apply::Pruning,
}

impl UpReport {
    /// `; pruned 2 object(s): ConfigMap/shop/a, …`, or nothing.
    pub fn pruned_summary(&self) -> String {
        if self.pruning.deleted.is_empty() {
            return String::new();
        }
        let names: Vec<String> = self
            .pruning
            .deleted
            .iter()
            .map(ToString::to_string)
            .collect();
        format!("; pruned {} object(s): {}", names.len(), names.join(", "))
    }

    /// What `up` created, reused and changed, for `dev up --json`.
    pub fn summary(&self) -> serde_json::Value {
        let network = self.network.as_ref().and_then(network_step);
        let node = self.node.as_ref().map(|(outcome, node)| {
            serde_json::json!({
                "container": node.container,
                "step": node_step(outcome),
                "apiPort": node.api_port,
                "kubeconfig": node.host_kubeconfig,
            })
        });
        serde_json::json!({
            "network": network,
            "registry": {"host": self.registry.host, "step": registry_step(&self.registry.action)},
            "nodeImage": self.node_image.as_ref().map(|i| match i {
                NodeImage::Present => "present",
                NodeImage::Built => "built",
                NodeImage::Pulled => "pulled",
            }),
            "node": node,
            "recreated": self.recreated.iter().map(ToString::to_string).collect::<Vec<_>>(),
            "pushed": self.pushed,
            "applied": self.applied.iter().map(|a| serde_json::json!({"object": a.name, "changed": a.changed})).collect::<Vec<_>>(),
            "pruned": self.pruning.deleted.iter().map(ToString::to_string).collect::<Vec<_>>(),
            "pruneHeld": self.pruning.held.iter().map(|h| serde_json::json!({"object": h.member.to_string(), "takes": h.takes})).collect::<Vec<_>>(),
            "pruneReleased": self.pruning.released.iter().map(ToString::to_string).collect::<Vec<_>>(),
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeImage {
    Present,
    Built,
    Pulled,
}

/// What the engine of a run decides: the node's setup there, what the
/// user should know of it, and which kind of engine it is.
#[derive(Debug, Clone)]
pub struct OnEngine {
    pub setup: plan::EngineSetup,
    /// How pods reach the host, when the user should know it.
    pub caveat: Option<String>,
    pub kind: docker::engine::Kind,
}

/// How the node reaches `engine` and pods reach the host there, asked of
/// the engine once; refused when the provider cannot run on that engine.
/// `DEV_ENV_DOCKER_SOCK` names the engine's socket as the engine sees it,
/// where that cannot be known from here.
pub async fn engine_setup(engine: &docker::Engine, config: &Config) -> Result<OnEngine, Error> {
    let facts = docker::engine::facts(&engine.docker).await?;
    let socket = std::env::var(docker::engine::SOCKET_OVERRIDE).ok();
    let kind = facts.kind();
    let (setup, caveat) =
        plan::EngineSetup::for_engine(config, &facts, &engine.chosen.endpoint, socket.as_deref())
            .map_err(|refusal| Error::Refused {
            kind,
            endpoint: engine.chosen.endpoint.to_string(),
            refusal,
        })?;
    Ok(OnEngine {
        setup,
        caveat,
        kind,
    })
}

/// The drift of every existing object against `config`, on an engine set
/// up as `setup` says.
pub async fn drift(
    docker: &Docker,
    config: &Config,
    setup: &plan::EngineSetup,
) -> Result<Vec<Drift>, Error> {
    let state = State::load(&config.state_dir())?;
    let mut drifts = Vec::new();
    if plan::needs_network(config)
        && let Some(existing) = network::inspect(docker, &config.network.name).await?
    {
        drifts.extend(network::drift(&existing, &plan::network_spec(config)));
    }
    if config.registry.external.is_none() {
        let spec = plan::registry_spec(config);
        drifts.extend(container_drift(docker, Object::Registry, &spec.container, &spec).await?);
    }
    if config.cluster.provider != Provider::Existing {
        let spec = plan::node_spec(config, plan::registry_port(config, &state), setup);
        drifts.extend(container_drift(docker, Object::Node, &spec.container, &spec).await?);
    }
    Ok(drifts)
}

/// How the existing container `name` differs from `spec`. A container
/// created but never started is incomplete, not drifted: `up` makes it
/// again.
async fn container_drift<T: serde::Serialize>(
    docker: &Docker,
    object: Object,
    name: &str,
    spec: &T,
) -> Result<Option<Drift>, Error> {
    let Some(existing) = inspect_container(docker, name).await? else {
        return Ok(None);
    };
    if docker::never_started(&existing) {
        return Ok(None);
    }
    let labels = existing.config.and_then(|c| c.labels).unwrap_or_default();
    Ok(match plan::drift_from_labels(&labels, object, name, spec) {
        Ownership::Drifted(d) => Some(d),
        Ownership::NotOurs | Ownership::Matches => None,
    })
}

/// Brings the environment to the declared state and returns once every
/// component runs its pinned digest.
pub async fn up(
    config: &Config,
    options: UpOptions,
    reporter: &dyn Reporter,
) -> Result<UpReport, Error> {
    // Everything that can be wrong with the input is found before anything
    // is changed.
    let manifests = manifest::load(&config.manifests)?;
    refuse_pruning_everything(config, &manifests, options.prune).await?;
    crate::targets::verify(config, config.components.keys(), &manifests).await?;
    let pull_secret = apply::PullSecret::of(config).map_err(apply::Error::from)?;
    let engine = docker::connect_engine().await?;
    let OnEngine { setup, caveat, .. } = engine_setup(&engine, config).await?;
    let docker = engine.docker;
    if let Some(note) = caveat {
        reporter.report(&Event::EngineNote { note });
    }
    // Read-only checks first: a refused run leaves not even a lock file.
    ownership::check(&docker, config).await?;
    crate::preflight::check(&docker, config).await?;
    let platform = image::builds::cluster_platform(config, Some(&docker)).await?;
    let components: Vec<String> = config.components.keys().cloned().collect();
    let builds = image::builds::plan(config, &components, &platform)?;
    let _lock = lock::environment(config, reporter).await?;
    State::update(&config.state_dir(), |state| {
        state.platform = Some(platform.clone());
    })?;

    let drifts = drift(&docker, config, &setup).await?;
    if !drifts.is_empty() && !options.recreate {
        return Err(Error::Drift { drifts });
    }
    remove_drifted(&docker, config, &drifts, reporter).await?;
    let network = ensure_network(&docker, config, reporter).await?;
    let registry = registry::ensure(&docker, config, reporter).await?;
    reporter.report(&Event::Registry {
        host: registry.host.clone(),
        step: registry_step(&registry.action),
    });
    // The node image and the component images build side by side, each in
    // its own target directory: on a first run both compile for minutes.
    let (cluster, pushed) = tokio::join!(
        ensure_cluster(&docker, config, &setup, options, reporter),
        ensure_images(config, &registry, &builds, options, reporter),
    );
    let (cluster, pushed) = (cluster?, pushed?);

    let hosting = apply::local_registry_hosting(config, &registry.host);
    let mut applied = vec![apply::apply_value(&cluster.client, &hosting).await?];
    let state = State::load(&config.state_dir())?;
    let set = apply::ApplySet::of_environment(&config.name);
    let apply_options = apply::Options {
        pins: &apply::pinned_images(config, &state),
        timeout: options.timeout,
        set: &set,
        prune: options.prune,
        pull_secret: pull_secret.as_ref(),
    };
    let report = apply::apply_all(&cluster.client, &manifests, apply_options).await?;
    applied.extend(report.applied);
    let changed = applied.iter().filter(|a| a.changed).count();
    reporter.report(&Event::Applied {
        objects: applied.len(),
        changed,
    });
    report.pruning.report(reporter);
    let probe = (config.cluster.provider != Provider::Existing).then(|| NodeProbe {
        docker: docker.clone(),
        container: config.node_name(),
    });
    let wait = WaitOptions::new(options.timeout)
        .with_grace(config.cluster.pod_start_grace)
        .with_node(probe);
    converge::wait(&cluster.client, config, &manifests, &state, &wait).await?;
    Ok(UpReport {
        network,
        registry,
        node_image: cluster.node_image,
        node: cluster.node,
        recreated: drifts,
        pushed,
        applied,
        pruning: report.pruning,
    })
}

/// Whether the environment has a cluster to ask: an existing one, or a
/// node `dev up` made (its host kubeconfig is written).
pub(crate) fn has_cluster(config: &Config) -> bool {
    match config.cluster.provider {
        Provider::Existing => true,
        _ => config.state_dir().join(kubeconfig::HOST_FILE).is_file(),
    }
}

/// Refuses manifests that declare no object while the environment's
/// ApplySet has members, before anything is built or changed, when the
/// cluster is up to be asked. The apply makes the same check before it
/// changes anything, so a cluster that cannot be reached yet (a stopped
/// node that `up` starts) is asked there.
async fn refuse_pruning_everything(
    config: &Config,
    manifests: &[manifest::Manifest],
    prune: apply::Prune,
) -> Result<(), Error> {
    if !manifests.is_empty() || !prune.enabled || prune.all || !has_cluster(config) {
        return Ok(());
    }
    let Ok(client) = crate::deliver::cluster_client(config).await else {
        return Ok(());
    };
    let set = apply::ApplySet::of_environment(&config.name);
    apply::refuse_everything(&client, manifests, &set, prune).await?;
    Ok(())
}

/// Removes what `--recreate` replaces: the node and the registry hold the
/// network, so they go first.
async fn remove_drifted(
    docker: &Docker,
    config: &Config,
    drifts: &[Drift],
    reporter: &dyn Reporter,
) -> Result<(), Error> {
    for d in drifts {
        reporter.report(&Event::Recreating {
            object: d.object.to_string(),
            name: d.name.clone(),
        });
    }
    let network_drifted = drifts.iter().any(|d| d.object == Object::Network);
    let drifted = |object: Object| network_drifted || drifts.iter().any(|d| d.object == object);
    if config.cluster.provider != Provider::Existing && drifted(Object::Node) {
        cluster::remove(docker, config).await?;
    }
    if drifted(Object::Registry) {
        registry::remove(docker, config).await?;
    }
    if network_drifted {
        network::remove(docker, &config.network.name).await?;
    }
    Ok(())
}

/// The network, when the environment needs one, with every container of
/// the environment attached to it (a network removed and recreated under a
/// running environment leaves them detached).
async fn ensure_network(
    docker: &Docker,
    config: &Config,
    reporter: &dyn Reporter,
) -> Result<Option<network::Ensured>, Error> {
    if !plan::needs_network(config) {
        return Ok(None);
    }
    let network = network::ensure(docker, &config.name, &plan::network_spec(config)).await?;
    if let Some(step) = network_step(&network) {
        reporter.report(&Event::Network {
            name: config.network.name.clone(),
            step,
        });
    }
    if let network::Ensured::Drifted(d) = network {
        return Err(Error::Drift { drifts: vec![d] });
    }
    let attached = network::attach_environment(docker, config).await?;
    if !attached.is_empty() {
        reporter.report(&Event::NetworkReattached {
            name: config.network.name.clone(),
            containers: attached,
        });
    }
    Ok(Some(network))
}

/// The cluster as `up` leaves it.
struct Cluster {
    node_image: Option<NodeImage>,
    node: Option<(cluster::Ensured, Node)>,
    client: kube::Client,
}

async fn ensure_cluster(
    docker: &Docker,
    config: &Config,
    setup: &plan::EngineSetup,
    options: UpOptions,
    reporter: &dyn Reporter,
) -> Result<Cluster, Error> {
    if config.cluster.provider == Provider::Existing {
        let context = config.cluster.context.as_deref().unwrap_or_default();
        reporter.report(&Event::ExistingCluster {
            context: context.to_string(),
        });
        return Ok(Cluster {
            node_image: None,
            node: None,
            client: kubeconfig::user_client(context).await?,
        });
    }
    let node_image =
        node_image::ensure_node_image(docker, config, options.verbose, reporter).await?;
    // A sim node still running an image that a rebuild replaced is replaced
    // too: that image is the harness's own build output, not the user's
    // drift.
    if config.cluster.provider == Provider::Sim && node_runs_stale_image(docker, config).await? {
        cluster::remove(docker, config).await?;
        reporter.report(&Event::NodeReplaced {
            container: config.node_name(),
        });
    }
    let dir = config.state_dir();
    let mut state = State::load(&dir)?;
    let spec = plan::node_spec(config, plan::registry_port(config, &state), setup);
    let (outcome, node) =
        cluster::ensure(docker, config, &spec, &mut state, options.recreate).await?;
    State::update(&dir, |now| {
        now.api_port = state.api_port;
        now.node_token.clone_from(&state.node_token);
    })?;
    let Some(node) = node else {
        let cluster::Ensured::Drifted(d) = outcome else {
            unreachable!("a node is returned unless drifted")
        };
        return Err(Error::Drift { drifts: vec![d] });
    };
    if let Some(step) = node_step(&outcome) {
        reporter.report(&Event::Node {
            container: node.container.clone(),
            step,
            api_port: Some(node.api_port),
        });
    }
    let client = kubeconfig::client(&node.host_kubeconfig, None).await?;
    // k3s pods resolve through CoreDNS, which k3s may be told not to run.
    if config.cluster.provider == Provider::K3s
        && !config.cluster.disable.iter().any(|d| d == "coredns")
    {
        let address = crate::host::node_address(docker, &node.container, &setup.host).await?;
        crate::host::ensure_core_dns(&client, address, options.timeout).await?;
    }
    Ok(Cluster {
        node_image: Some(node_image),
        node: Some((outcome, node)),
        client,
    })
}

/// Pushes every component never pushed, and every component whose pinned
/// digest the registry no longer serves (a lost volume, a garbage
/// collection): manifests name those digests, and a cluster whose pods
/// cannot pull is not up. Returns the components pushed.
async fn ensure_images(
    config: &Config,
    registry: &registry::Endpoint,
    builds: &image::builds::Builds,
    options: UpOptions,
    reporter: &dyn Reporter,
) -> Result<Vec<String>, Error> {
    let state = State::load(&config.state_dir())?;
    let client =
        registry::client(config, &registry.host).map_err(|source| Error::RegistryCheck {
            host: registry.host.clone(),
            component: String::from("(any)"),
            source: Box::new(source),
        })?;
    let mut unpushed = Vec::new();
    for name in config.components.keys() {
        let Some(pushed) = state.images.get(name) else {
            reporter.report(&Event::Pushing {
                component: name.clone(),
                why: String::from("never pushed"),
            });
            unpushed.push(name.clone());
            continue;
        };
        let present = client
            .manifest_exists(&pushed.repository, &pushed.digest, Some(&builds.platform))
            .await
            .map_err(|source| Error::RegistryCheck {
                host: registry.host.clone(),
                component: name.clone(),
                source: Box::new(source),
            })?;
        if !present {
            reporter.report(&Event::Pushing {
                component: name.clone(),
                why: format!("the registry no longer has {}", pushed.digest),
            });
            unpushed.push(name.clone());
        }
    }
    if unpushed.is_empty() {
        return Ok(unpushed);
    }
    let results = image::push_components(
        config,
        &client,
        &unpushed,
        image::PushOptions {
            builds,
            cancel: None,
            output: options.verbose.then_some(reporter),
            progress: Some(reporter),
        },
    )
    .await;
    let failures: Vec<PushFailure> = unpushed
        .iter()
        .zip(results)
        .filter_map(|(name, result)| {
            result.err().map(|error| PushFailure {
                component: name.clone(),
                error,
            })
        })
        .collect();
    if !failures.is_empty() {
        return Err(Error::Push { failures });
    }
    Ok(unpushed)
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

fn network_step(outcome: &network::Ensured) -> Option<Step> {
    match outcome {
        network::Ensured::Created => Some(Step::Created),
        network::Ensured::Unchanged => Some(Step::Unchanged),
        network::Ensured::Drifted(_) => None,
    }
}

fn node_step(outcome: &cluster::Ensured) -> Option<Step> {
    match outcome {
        cluster::Ensured::Created => Some(Step::Created),
        cluster::Ensured::Started => Some(Step::Started),
        cluster::Ensured::Unchanged => Some(Step::Unchanged),
        cluster::Ensured::Drifted(_) => None,
    }
}

fn registry_step(action: &registry::Action) -> Step {
    match action {
        registry::Action::External => Step::External,
        registry::Action::Reused => Step::Unchanged,
        registry::Action::Started => Step::Started,
        registry::Action::Created { .. } => Step::Created,
    }
}
