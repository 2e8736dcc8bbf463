//! The Docker engine: one connection, the labels every object carries, and
//! the small idempotent helpers the drivers share (inspect-or-none, ensure a
//! volume, remove-if-present).
//!
//! The engine is reached through its local socket with bollard. bollard
//! speaks a newer API than many engines accept, so [`connect`] negotiates
//! the version before anything else is sent.

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

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(
        "cannot reach the Docker engine at {at}; start Docker, or point `DOCKER_HOST` at a running engine's socket"
    )]
    Connect {
        /// The socket tried.
        at: String,
        #[source]
        source: BollardError,
    },
    #[error(
        "`DOCKER_HOST={host}` is not a unix socket; dev-env reaches the engine through its socket (`unix:///var/run/docker.sock`), so point `DOCKER_HOST` at one or unset it"
    )]
    UnsupportedHost { host: String },
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

/// Connects to the engine and negotiates the API version it speaks: the
/// unix socket `DOCKER_HOST` names (`unix://…`), or the default socket.
pub async fn connect() -> Result<Docker, Error> {
    let host = std::env::var("DOCKER_HOST").ok().filter(|h| !h.is_empty());
    let docker = match host.as_deref() {
        None => Docker::connect_with_socket_defaults(),
        Some(host) if host.starts_with("unix://") => {
            Docker::connect_with_unix(host, 120, bollard::API_DEFAULT_VERSION)
        }
        Some(host) => {
            return Err(Error::UnsupportedHost {
                host: host.to_string(),
            });
        }
    };
    let at = host.unwrap_or_else(|| String::from("unix:///var/run/docker.sock"));
    let connect = |source| Error::Connect {
        at: at.clone(),
        source,
    };
    docker
        .map_err(connect)?
        .negotiate_version()
        .await
        .map_err(connect)
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
