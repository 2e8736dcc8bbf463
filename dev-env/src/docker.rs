//! The Docker engine: one connection, the labels every object carries, and
//! the small idempotent helpers the drivers share (inspect-or-none, ensure a
//! volume, remove-if-present).
//!
//! The engine is the one the Docker CLI would use ([`endpoint`]), reached
//! with bollard over its unix socket or TCP (with TLS when the CLI would
//! use it). bollard speaks a newer API than many engines accept, so
//! [`connect`] negotiates the version before anything else is sent. What
//! kind of engine it is ([`engine`]) decides how nodes reach it and the
//! host.

use std::collections::HashMap;

use bollard::{
    Docker,
    errors::Error as BollardError,
    models::{ContainerInspectResponse, ImageInspect, Volume, VolumeCreateRequest},
    query_parameters::{RemoveContainerOptionsBuilder, RemoveVolumeOptionsBuilder},
};

/// The label every Docker object of an environment carries; its value is
/// the environment's `name`.
pub const LABEL_NAME: &str = "dev-env.name";
/// The label naming the role of an object inside its environment
/// (`registry`, `node`, `network`).
pub const LABEL_ROLE: &str = "dev-env.role";

pub mod endpoint;
pub mod engine;

pub use endpoint::{Endpoint, Resolved, Source};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(
        "cannot reach the Docker engine at {endpoint} ({source_of}); start that engine, or choose another with `DOCKER_HOST` or `docker context use`",
        source_of = chosen.source,
        endpoint = chosen.endpoint
    )]
    Connect {
        /// The engine tried.
        chosen: Box<Resolved>,
        #[source]
        source: BollardError,
    },
    #[error(
        "no Docker engine answers; tried {}. Start Docker, or point `DOCKER_HOST` or a Docker context at a running engine",
        tried.join("; ")
    )]
    NoEngine { tried: Vec<String> },
    #[error(transparent)]
    Endpoint(#[from] endpoint::Error),
    #[error("Docker engine: cannot {action}")]
    Api {
        /// What was being done, such as "inspect container `demo-registry`".
        action: String,
        #[source]
        source: BollardError,
    },
}

impl Error {
    /// Wraps a failed engine call with what it was doing.
    pub fn api(action: impl Into<String>, source: BollardError) -> Error {
        Error::Api {
            action: action.into(),
            source,
        }
    }
}

/// A connected engine and how it was found.
#[derive(Debug, Clone)]
pub struct Engine {
    pub docker: Docker,
    pub chosen: Resolved,
}

/// Connects to the engine the Docker CLI would use ([`endpoint::resolve`])
/// and negotiates the API version it speaks.
pub async fn connect() -> Result<Docker, Error> {
    Ok(connect_engine().await?.docker)
}

/// [`connect`], saying which engine answered and where it was found.
pub async fn connect_engine() -> Result<Engine, Error> {
    let var = |key: &str| std::env::var(key).ok();
    let lookup = endpoint::Lookup {
        var: &var,
        home: std::env::var_os("HOME").map(std::path::PathBuf::from),
    };
    let candidates = endpoint::resolve(&lookup)?;
    if let Some(chosen) = candidates.explicit {
        return match dial(&chosen.endpoint).await {
            Ok(docker) => Ok(Engine { docker, chosen }),
            Err(source) => Err(Error::Connect {
                chosen: Box::new(chosen),
                source,
            }),
        };
    }
    let mut tried = Vec::new();
    for chosen in candidates.fallbacks {
        if let Endpoint::Unix(path) = &chosen.endpoint
            && !path.exists()
        {
            tried.push(format!("{} ({}: absent)", chosen.endpoint, chosen.source));
            continue;
        }
        match dial(&chosen.endpoint).await {
            Ok(docker) => return Ok(Engine { docker, chosen }),
            Err(e) => tried.push(format!("{} ({}: {e})", chosen.endpoint, chosen.source)),
        }
    }
    Err(Error::NoEngine { tried })
}

/// A client of the engine at `endpoint`, its API version negotiated.
async fn dial(endpoint: &Endpoint) -> Result<Docker, BollardError> {
    const TIMEOUT_S: u64 = 120;
    let version = bollard::API_DEFAULT_VERSION;
    let docker = match endpoint {
        Endpoint::Unix(path) => {
            Docker::connect_with_unix(&path.to_string_lossy(), TIMEOUT_S, version)
        }
        Endpoint::Tcp { address, tls: None } => {
            Docker::connect_with_http(address, TIMEOUT_S, version)
        }
        Endpoint::Tcp {
            address,
            tls: Some(tls),
        } => Docker::connect_with_ssl(address, &tls.key, &tls.cert, &tls.ca, TIMEOUT_S, version),
    }?;
    docker.negotiate_version().await
}

/// The labels of an object that belongs to environment `name` in `role`.
pub fn labels(name: &str, role: &str) -> HashMap<String, String> {
    HashMap::from([
        (LABEL_NAME.to_string(), name.to_string()),
        (LABEL_ROLE.to_string(), role.to_string()),
    ])
}

/// Whether an engine error means "no such object".
pub fn is_not_found(err: &BollardError) -> bool {
    matches!(
        err,
        BollardError::DockerResponseServerError {
            status_code: 404,
            ..
        }
    )
}

/// Whether an engine error means "already exists" (a creation race).
pub fn is_conflict(err: &BollardError) -> bool {
    matches!(
        err,
        BollardError::DockerResponseServerError {
            status_code: 409,
            ..
        }
    )
}

/// Inspects container `name`; `None` when it does not exist.
pub async fn inspect_container(
    docker: &Docker,
    name: &str,
) -> Result<Option<ContainerInspectResponse>, Error> {
    match docker.inspect_container(name, None).await {
        Ok(it) => Ok(Some(it)),
        Err(e) if is_not_found(&e) => Ok(None),
        Err(e) => Err(Error::api(format!("inspect container `{name}`"), e)),
    }
}

/// Inspects image `reference`; `None` when the engine does not have it.
pub async fn inspect_image(
    docker: &Docker,
    reference: &str,
) -> Result<Option<ImageInspect>, Error> {
    match docker.inspect_image(reference).await {
        Ok(it) => Ok(Some(it)),
        Err(e) if is_not_found(&e) => Ok(None),
        Err(e) => Err(Error::api(format!("inspect image `{reference}`"), e)),
    }
}

/// Makes sure volume `name` exists, creating it with `labels` when missing.
/// An existing volume is kept as it is, whatever its labels: it holds data.
pub async fn ensure_volume(
    docker: &Docker,
    name: &str,
    labels: HashMap<String, String>,
) -> Result<Volume, Error> {
    match docker.inspect_volume(name).await {
        Ok(it) => return Ok(it),
        Err(e) if is_not_found(&e) => {}
        Err(e) => return Err(Error::api(format!("inspect volume `{name}`"), e)),
    }
    let request = VolumeCreateRequest {
        name: Some(name.to_string()),
        labels: Some(labels),
        ..VolumeCreateRequest::default()
    };
    docker
        .create_volume(request)
        .await
        .map_err(|e| Error::api(format!("create volume `{name}`"), e))
}

/// Removes container `name` (running or not) with its anonymous volumes;
/// `false` when there was nothing to remove.
pub async fn remove_container(docker: &Docker, name: &str) -> Result<bool, Error> {
    let options = RemoveContainerOptionsBuilder::default()
        .force(true)
        .v(true)
        .build();
    match docker.remove_container(name, Some(options)).await {
        Ok(()) => Ok(true),
        Err(e) if is_not_found(&e) => Ok(false),
        Err(e) => Err(Error::api(format!("remove container `{name}`"), e)),
    }
}

/// Every container (running or not) that carries all of `labels`
/// (`key=value`, or `key` for any value); `what` names them in errors.
pub async fn containers_labelled(
    docker: &Docker,
    labels: Vec<String>,
    what: &str,
) -> Result<Vec<bollard::models::ContainerSummary>, Error> {
    let filters = HashMap::from([(String::from("label"), labels)]);
    let options = bollard::query_parameters::ListContainersOptions {
        all: true,
        filters: Some(filters),
        ..Default::default()
    };
    docker
        .list_containers(Some(options))
        .await
        .map_err(|e| Error::api(format!("list {what}"), e))
}

/// A listed container's name, without the engine's leading `/`.
pub fn container_name(container: &bollard::models::ContainerSummary) -> Option<String> {
    container
        .names
        .as_ref()?
        .first()
        .map(|n| n.trim_start_matches('/').to_string())
}

/// Removes volume `name`; `false` when there was nothing to remove. Not
/// forced: the engine answers a forced removal of a missing volume with
/// success, and a volume still in use must not go.
pub async fn remove_volume(docker: &Docker, name: &str) -> Result<bool, Error> {
    let options = RemoveVolumeOptionsBuilder::default().force(false).build();
    match docker.remove_volume(name, Some(options)).await {
        Ok(()) => Ok(true),
        Err(e) if is_not_found(&e) => Ok(false),
        Err(e) => Err(Error::api(format!("remove volume `{name}`"), e)),
    }
}

/// The host port that container port `port/tcp` is published on, read from
/// an inspected container.
pub fn published_port(container: &ContainerInspectResponse, port: u16) -> Option<u16> {
    let key = format!("{port}/tcp");
    let ports = container.network_settings.as_ref()?.ports.as_ref()?;
    let bindings = ports.get(&key)?.as_ref()?;
    bindings
        .iter()
        .find_map(|b| b.host_port.as_deref()?.parse().ok())
}

/// Whether an inspected container was created but never started: a run
/// interrupted between creating and starting it, or a start that failed.
pub fn never_started(container: &ContainerInspectResponse) -> bool {
    container
        .state
        .as_ref()
        .and_then(|s| s.status)
        .is_some_and(|s| s == bollard::models::ContainerStateStatusEnum::CREATED)
}

/// Whether an inspected container is running.
pub fn is_running(container: &ContainerInspectResponse) -> bool {
    container
        .state
        .as_ref()
        .and_then(|s| s.running)
        .unwrap_or(false)
}

/// A port on 127.0.0.1 that is free right now: where the harness publishes
/// what it runs when no port is declared.
pub fn free_loopback_port() -> std::io::Result<u16> {
    Ok(std::net::TcpListener::bind(("127.0.0.1", 0))?
        .local_addr()?
        .port())
}

/// Whether `port` on 127.0.0.1 is free right now.
pub fn loopback_port_is_free(port: u16) -> bool {
    std::net::TcpListener::bind(("127.0.0.1", port)).is_ok()
}
