//! `dev status`: what runs, what answers, what drifted, and for each
//! component the digest its Ready pods run against the one last pushed.
//! Read-only: it changes nothing.

use std::time::Duration;

use k8s_openapi::api::{
    apps::v1::{Deployment, ReplicaSet},
    core::v1::Pod,
};
use kube::{Api, Client, ResourceExt, api::ListParams};
use serde::Serialize;

use crate::{
    config::{Config, Provider, REGISTRY_CONTAINER_PORT, RolloutKind},
    deliver, docker, lifecycle, network,
    plan::NODE_API_PORT,
    rollout,
    state::State,
    wait::workload::{self, Verdict, Want},
};

/// How long each probe (registry, API) may take.
const PROBE: Duration = Duration::from_secs(5);

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Status {
    pub name: String,
    /// The engine that answered, and where it was found.
    pub engine: EngineStatus,
    /// `None` when the environment needs no network.
    pub network: Option<NetworkStatus>,
    pub registry: RegistryStatus,
    pub node: NodeStatus,
    pub components: Vec<ComponentStatus>,
    /// Objects whose configuration differs from the file.
    pub drift: Vec<String>,
    /// Whether any object dev-env manages for the environment exists (an
    /// environment with nothing to manage always exists).
    pub exists: bool,
    /// Everything up and converged.
    pub ok: bool,
}

/// The engine `dev status` asked.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EngineStatus {
    /// "Docker Engine", "Docker Desktop", "colima", ...
    pub kind: String,
    /// `unix:///var/run/docker.sock`, `tcp://host:2376 (TLS)`.
    pub endpoint: String,
    /// What chose it: `DOCKER_HOST`, a context, the default socket.
    pub source: String,
    /// The Docker context it came from, if one did.
    pub context: Option<String>,
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mark = |ok: bool| if ok { "ok  " } else { "DOWN" };
        let e = &self.engine;
        writeln!(
            f,
            "ok   engine   {} at {} ({})",
            e.kind, e.endpoint, e.source
        )?;
        if let Some(network) = &self.network {
            let host = network.host_gateway.as_deref().map_or(String::new(), |g| {
                format!(" ({} = {g})", crate::host::HOST_NAME)
            });
            writeln!(
                f,
                "{} network  {}{host}",
                mark(network.exists),
                network.name
            )?;
        }
        let r = &self.registry;
        let at = r
            .host
            .as_deref()
            .map_or(String::from("(no port)"), |h| format!("at {h}"));
        writeln!(f, "{} registry {} {at}", mark(r.reachable), r.name)?;
        let n = &self.node;
        let api = n
            .api_port
            .map_or(String::new(), |p| format!(" API on 127.0.0.1:{p}"));
        writeln!(f, "{} node     {}{api}", mark(n.api_ready), n.name)?;
        for c in &self.components {
            let runs = if c.running_digests.is_empty() {
                String::from("no Ready pods")
            } else {
                c.running_digests.join(", ")
            };
            let (name, kind, object) = (&c.name, &c.kind, &c.object);
            writeln!(
                f,
                "{} {name}  {kind} {object}  runs {runs}",
                mark(c.converged)
            )?;
            if !c.converged {
                writeln!(f, "       {}", c.message)?;
            }
        }
        for d in &self.drift {
            writeln!(f, "DRIFT {d}")?;
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NetworkStatus {
    pub name: String,
    pub exists: bool,
    /// The address pods reach the host at as `host.docker.internal`: the
    /// network's IPv4 gateway.
    pub host_gateway: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RegistryStatus {
    /// The container, or the external address.
    pub name: String,
    pub running: bool,
    pub host: Option<String>,
    /// `GET /v2/` answered 200.
    pub reachable: bool,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeStatus {
    /// The container, or the context of `provider: existing`.
    pub name: String,
    pub running: bool,
    pub api_port: Option<u16>,
    /// `/readyz` answered.
    pub api_ready: bool,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ComponentStatus {
    pub name: String,
    pub kind: String,
    pub object: String,
    pub pushed_digest: Option<String>,
    /// The cargo profile the pushed digest was built with.
    pub pushed_profile: Option<String>,
    /// Whether the registry still serves the pushed digest; `None` when
    /// nothing was pushed or the registry cannot be asked.
    pub in_registry: Option<bool>,
    /// Digests the Ready pods of its Deployment run.
    pub running_digests: Vec<String>,
    pub converged: bool,
    pub message: String,
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Docker(#[from] docker::Error),
    #[error(transparent)]
    Network(#[from] network::Error),
    #[error(transparent)]
    Lifecycle(#[from] lifecycle::Error),
    #[error(transparent)]
    State(#[from] crate::state::Error),
    #[error(transparent)]
    Config(#[from] crate::config::Error),
    #[error(transparent)]
    Kubeconfig(#[from] crate::kubeconfig::Error),
    #[error(transparent)]
    Rollout(#[from] rollout::Error),
    #[error("reading {what}: {}", crate::apply::api_error(error))]
    Api { what: String, error: kube::Error },
    #[error("{kind} {namespace}/{name} does not exist; `cargo xtask dev up` applies the manifests")]
    Missing {
        kind: &'static str,
        namespace: String,
        name: String,
    },
    #[error(
        "WorkerPool {namespace}/{name} has no Deployment yet: its controller has not made one; `cargo xtask dev logs controller-manager` shows why"
    )]
    NoOwnedDeployment { namespace: String, name: String },
}

/// `Error::Api` for reading `what`.
fn api(what: impl Into<String>) -> impl FnOnce(kube::Error) -> Error {
    let what = what.into();
    move |error| Error::Api { what, error }
}

/// Looks at everything `config` declares.
pub async fn status(config: &Config) -> Result<Status, Error> {
    let engine = docker::connect_engine().await?;
    let on_engine = lifecycle::engine_setup(&engine, config).await?;
    let engine_status = EngineStatus {
        kind: on_engine.kind.to_string(),
        endpoint: engine.chosen.endpoint.to_string(),
        source: engine.chosen.source.to_string(),
        context: match &engine.chosen.source {
            docker::Source::Context { name, .. } => Some(name.clone()),
            _ => None,
        },
    };
    let docker = engine.docker;
    let state = State::load(&config.state_dir())?;
    let network = network_status(&docker, config).await?;
    let registry = registry_status(&docker, config).await?;
    let (node, client) = node_status(&docker, config).await?;
    let client = client.filter(|_| node.api_ready);
    let mut components = Vec::new();
    for name in config.components.keys() {
        components.push(component_status(config, &state, name, &registry, client.as_ref()).await);
    }
    let drift: Vec<String> = lifecycle::drift(&docker, config, &on_engine.setup)
        .await?
        .iter()
        .map(ToString::to_string)
        .collect();
    let managed = network.is_some()
        || config.registry.external.is_none()
        || config.cluster.provider != Provider::Existing;
    let exists = !managed
        || network.as_ref().is_some_and(|n| n.exists)
        || registry.running
        || node.running
        || node_exists(&docker, config).await?;
    let ok = network.as_ref().is_none_or(|n| n.exists)
        && registry.reachable
        && node.api_ready
        && drift.is_empty()
        && components.iter().all(|c| c.converged);
    Ok(Status {
        name: config.name.clone(),
        engine: engine_status,
        network,
        registry,
        node,
        components,
        drift,
        exists,
        ok,
    })
}

/// The network, when the environment needs one.
async fn network_status(
    docker: &bollard::Docker,
    config: &Config,
) -> Result<Option<NetworkStatus>, Error> {
    if !crate::plan::needs_network(config) {
        return Ok(None);
    }
    let existing = network::inspect(docker, &config.network.name).await?;
    Ok(Some(NetworkStatus {
        name: config.network.name.clone(),
        exists: existing.is_some(),
        host_gateway: existing.as_ref().and_then(network::ipv4_gateway),
    }))
}

/// The registry container (or the external registry), and whether it
/// answers.
async fn registry_status(
    docker: &bollard::Docker,
    config: &Config,
) -> Result<RegistryStatus, Error> {
    if let Some(external) = &config.registry.external {
        return Ok(RegistryStatus {
            name: external.clone(),
            running: true,
            host: Some(external.clone()),
            reachable: reachable(config, external).await,
        });
    }
    let container = docker::inspect_container(docker, &config.registry.name).await?;
    let running = container.as_ref().is_some_and(docker::is_running);
    let port = container
        .as_ref()
        .and_then(|c| docker::published_port(c, REGISTRY_CONTAINER_PORT));
    let host = port.map(|p| format!("localhost:{p}"));
    let reachable = match &host {
        Some(h) if running => reachable(config, h).await,
        _ => false,
    };
    Ok(RegistryStatus {
        name: config.registry.name.clone(),
        running,
        host,
        reachable,
    })
}

/// The node (or the existing cluster's context), whether its API answers,
/// and a client for it when there is one.
async fn node_status(
    docker: &bollard::Docker,
    config: &Config,
) -> Result<(NodeStatus, Option<Client>), Error> {
    let (name, running, api_port) = match config.cluster.provider {
        Provider::Existing => (
            config.cluster.context.clone().unwrap_or_default(),
            true,
            None,
        ),
        Provider::K3s | Provider::Sim => {
            let container = docker::inspect_container(docker, &config.node_name()).await?;
            let api_port = container
                .as_ref()
                .and_then(|c| docker::published_port(c, NODE_API_PORT));
            let running = container.as_ref().is_some_and(docker::is_running);
            (config.node_name(), running, api_port)
        }
    };
    let client = if running {
        deliver::cluster_client(config).await.ok()
    } else {
        None
    };
    let api_ready = match &client {
        Some(c) => ready(c).await,
        None => false,
    };
    let node = NodeStatus {
        name,
        running,
        api_port,
        api_ready,
    };
    Ok((node, client))
}

/// One component: whether the registry still has its pushed digest, and
/// what its workload runs, judged by the rollout wait's rule.
async fn component_status(
    config: &Config,
    state: &State,
    name: &str,
    registry: &RegistryStatus,
    client: Option<&Client>,
) -> ComponentStatus {
    let r = &config.components[name].rollout;
    let pushed = state.images.get(name);
    let mut status = ComponentStatus {
        name: name.to_string(),
        kind: r.kind.to_string(),
        object: format!("{}/{}", r.namespace, r.name),
        pushed_digest: pushed.map(|p| p.digest.clone()),
        pushed_profile: pushed.and_then(|p| p.profile.clone()),
        in_registry: None,
        running_digests: Vec::new(),
        converged: false,
        message: String::new(),
    };
    if let (Some(image), Some(host)) = (pushed, &registry.host)
        && registry.reachable
        && let Ok(client) = crate::registry::client(config, host)
    {
        status.in_registry = client
            .manifest_exists(&image.repository, &image.digest, state.platform.as_ref())
            .await
            .ok();
    }
    match client {
        Some(client) => {
            let want = Want {
                namespace: r.namespace.clone(),
                deployment: r.name.clone(),
                container: r.container.clone(),
                digest: status.pushed_digest.clone(),
                termination: if r.wait_for_termination {
                    workload::Termination::Gone
                } else {
                    workload::Termination::Serving
                },
                generation: 0,
            };
            if let Err(e) = inspect_component(client, r.kind, want, &mut status).await {
                status.message = e.to_string();
            }
        }
        None => status.message = String::from("the cluster is not reachable"),
    }
    if status.in_registry == Some(false) {
        status.converged = false;
        status.message = format!(
            "the registry no longer has {}; run `cargo xtask dev up` (it pushes it again) or `cargo xtask push-image {name}`",
            status.pushed_digest.as_deref().unwrap_or_default()
        );
    }
    status
}

/// Whether the node container exists, running or not.
async fn node_exists(docker: &bollard::Docker, config: &Config) -> Result<bool, Error> {
    if config.cluster.provider == Provider::Existing {
        return Ok(false);
    }
    Ok(docker::inspect_container(docker, &config.node_name())
        .await?
        .is_some())
}

/// The Deployment that runs a component: the declared one, or the one its
/// WorkerPool controls.
pub(crate) async fn deployment_of(
    client: &Client,
    kind: RolloutKind,
    namespace: &str,
    name: &str,
) -> Result<String, Error> {
    if kind == RolloutKind::Deployment {
        return Ok(name.to_string());
    }
    let resource = rollout::worker_pool_resource(client).await?;
    let pools: Api<kube::api::DynamicObject> =
        Api::namespaced_with(client.clone(), namespace, &resource);
    let pool = pools
        .get_opt(name)
        .await
        .map_err(api(format!("WorkerPool {namespace}/{name}")))?
        .ok_or_else(|| Error::Missing {
            kind: "WorkerPool",
            namespace: namespace.to_string(),
            name: name.to_string(),
        })?;
    let uid = pool.uid().unwrap_or_default();
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), namespace);
    deployments
        .list(&ListParams::default())
        .await
        .map_err(api(format!("the Deployments in {namespace}")))?
        .items
        .into_iter()
        .find(|d| d.owner_references().iter().any(|o| o.uid == uid))
        .map(|d| d.name_any())
        .ok_or_else(|| Error::NoOwnedDeployment {
            namespace: namespace.to_string(),
            name: name.to_string(),
        })
}

async fn inspect_component(
    client: &Client,
    kind: RolloutKind,
    mut want: Want,
    status: &mut ComponentStatus,
) -> Result<(), Error> {
    want.deployment = deployment_of(client, kind, &want.namespace, &want.deployment).await?;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &want.namespace);
    let what = format!("Deployment {}/{}", want.namespace, want.deployment);
    let deploy = deployments
        .get_opt(&want.deployment)
        .await
        .map_err(api(what.clone()))?
        .ok_or_else(|| Error::Missing {
            kind: "Deployment",
            namespace: want.namespace.clone(),
            name: want.deployment.clone(),
        })?;
    let selector = workload::selector_of(&deploy);
    let params = ListParams::default().labels(&selector);
    let replica_sets: Api<ReplicaSet> = Api::namespaced(client.clone(), &want.namespace);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &want.namespace);
    let rs: Vec<_> = replica_sets
        .list(&params)
        .await
        .map_err(api(format!("the ReplicaSets of {what}")))?
        .items
        .into_iter()
        .map(std::sync::Arc::new)
        .collect();
    let pods: Vec<_> = pods
        .list(&params)
        .await
        .map_err(api(format!("the pods of {what}")))?
        .items
        .into_iter()
        .map(std::sync::Arc::new)
        .collect();
    let mut digests: Vec<String> = pods
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter_map(|p| p.status.as_ref()?.container_statuses.as_ref())
        .flatten()
        .filter(|c| c.name == want.container && c.ready)
        .filter_map(|c| workload::digest_of(&c.image_id).map(str::to_string))
        .collect();
    digests.sort();
    digests.dedup();
    status.running_digests = digests;
    let verdict = workload::evaluate(&deploy, &rs, &pods, &want);
    status.converged = matches!(verdict, Verdict::Done { .. });
    status.message = verdict.to_string();
    Ok(())
}

async fn reachable(config: &Config, host: &str) -> bool {
    let Ok(client) = crate::registry::client(config, host) else {
        return false;
    };
    matches!(tokio::time::timeout(PROBE, client.ping()).await, Ok(Ok(_)))
}

async fn ready(client: &Client) -> bool {
    let request = http::Request::get("/readyz")
        .body(Vec::new())
        .expect("static request");
    matches!(
        tokio::time::timeout(PROBE, client.request_text(request)).await,
        Ok(Ok(_))
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_reads_one_line_per_object_and_says_what_is_wrong() {
        let status = Status {
            name: String::from("demo"),
            engine: EngineStatus {
                kind: String::from("Docker Desktop"),
                endpoint: String::from("unix:///Users/me/.docker/run/docker.sock"),
                source: String::from("context `desktop-linux`"),
                context: Some(String::from("desktop-linux")),
            },
            network: Some(NetworkStatus {
                name: String::from("demo"),
                exists: true,
                host_gateway: Some(String::from("10.0.0.1")),
            }),
            registry: RegistryStatus {
                name: String::from("demo-registry"),
                running: true,
                host: Some(String::from("localhost:5001")),
                reachable: true,
            },
            node: NodeStatus {
                name: String::from("demo-server-0"),
                running: false,
                api_port: None,
                api_ready: false,
            },
            components: vec![ComponentStatus {
                name: String::from("worker"),
                kind: String::from("WorkerPool"),
                object: String::from("demo/default"),
                pushed_digest: None,
                pushed_profile: None,
                in_registry: None,
                running_digests: Vec::new(),
                converged: false,
                message: String::from("the cluster is not reachable"),
            }],
            drift: vec![String::from("node `demo-server-0`: image was a, now b")],
            exists: true,
            ok: false,
        };
        assert_eq!(
            status.to_string(),
            "ok   engine   Docker Desktop at unix:///Users/me/.docker/run/docker.sock (context `desktop-linux`)\n\
             ok   network  demo (host.docker.internal = 10.0.0.1)\n\
             ok   registry demo-registry at localhost:5001\n\
             DOWN node     demo-server-0\n\
             DOWN worker  WorkerPool demo/default  runs no Ready pods\n\
             \x20      the cluster is not reachable\n\
             DRIFT node `demo-server-0`: image was a, now b\n"
        );
    }
}
