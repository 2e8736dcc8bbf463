//! The registry of an environment: a distribution registry container that
//! the host pushes to on `127.0.0.1:<hostPort>` and the cluster pulls from
//! as `<registry.name>:5000` on the shared network.
//!
//! [`ensure`] is idempotent: it reuses the container when it exists (and
//! starts it when stopped), and otherwise creates it from `registry.image`
//! with a named volume on `/var/lib/registry`, so pushed images outlive the
//! container. A `hostPort` of 0 means a free port picked once and kept in
//! the state. With `registry.external` nothing is created: the declared
//! registry is used as it is. Either way the registry counts as up only
//! once `GET /v2/` answers 200, within [`READY_TIMEOUT`].
//!
//! Offline, when `registry.image` is neither present nor pullable and the
//! distribution binary is on the host (Debian's `docker-registry`), an
//! image is built from that binary and the libraries it links
//! ([`build_local_image`]), and used instead.

use std::{
    collections::HashMap,
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use bollard::{
    Docker,
    models::{ContainerCreateBody, EndpointSettings, HostConfig, NetworkingConfig, PortBinding},
    query_parameters::{CreateContainerOptionsBuilder, CreateImageOptionsBuilder},
};
use futures::StreamExt;
use xshell::{Shell, cmd};

use crate::{
    config::{Config, REGISTRY_CONTAINER_PORT},
    docker::{self as engine, LABEL_NAME},
    image::{self, distribution},
    plan,
    report::{Event, Reporter},
    state::State,
};

/// The `dev-env.role` of the registry container and its volume.
pub const ROLE: &str = "registry";
/// The label recording which image the container was created from.
pub const LABEL_IMAGE: &str = "dev-env.image";
/// How long the registry may take to answer `GET /v2/`.
pub const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a pull of `registry.image` may take.
pub const PULL_TIMEOUT: Duration = Duration::from_secs(120);
/// Where Debian's `docker-registry` package installs the distribution binary.
pub const DISTRIBUTION_BINARY: &str = "/usr/bin/docker-registry";
/// The tag of the image built from [`DISTRIBUTION_BINARY`].
pub const LOCAL_IMAGE: &str = "dev-env/registry:distribution";
/// Where the registry keeps its data inside the container.
pub const DATA_DIR: &str = "/var/lib/registry";

/// The registry's configuration inside a locally built image: the same as
/// the upstream image's, with deletes allowed.
const LOCAL_CONFIG: &str = "\
version: 0.1
log:
  fields:
    service: registry
storage:
  cache:
    blobdescriptor: inmemory
  filesystem:
    rootdirectory: /var/lib/registry
  delete:
    enabled: true
http:
  addr: :5000
  headers:
    X-Content-Type-Options: [nosniff]
";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Engine(#[from] engine::Error),
    #[error(transparent)]
    State(#[from] crate::state::Error),
    #[error(
        "container `{container}` exists but does not belong to environment `{name}` (its `{LABEL_NAME}` label is {found:?}); rename `registry.name` or remove that container"
    )]
    Foreign {
        container: String,
        name: String,
        found: Option<String>,
    },
    #[error(
        "registry container `{container}` publishes port {actual}, but `registry.hostPort` is {declared}; run `cargo xtask dev up --recreate` to recreate it"
    )]
    PortDrift {
        container: String,
        declared: u16,
        actual: u16,
    },
    #[error(
        "network `{network}` does not exist; `cargo xtask dev up` creates it before the registry"
    )]
    NoNetwork { network: String },
    #[error(
        "cannot find a free port on 127.0.0.1 for the registry; free one, or set `registry.hostPort` to a port you know is free"
    )]
    NoFreePort {
        #[source]
        source: std::io::Error,
    },
    #[error(
        "registry image `{image}` is not present and cannot be pulled, and {DISTRIBUTION_BINARY} is not installed to build one locally; run `apt-get install -y docker-registry`, or `docker pull {image}` where a registry is reachable, or set `registry.image` to an image you have"
    )]
    NoImage {
        image: String,
        #[source]
        source: PullError,
    },
    #[error("cannot build the local registry image from {}", binary.display())]
    LocalImage {
        binary: PathBuf,
        #[source]
        source: Box<LocalImageError>,
    },
    #[error(
        "the registry at {host} did not answer `GET /v2/` with 200 within {}s; last error: {last}; {hint}",
        timeout.as_secs()
    )]
    NotReady {
        host: String,
        timeout: Duration,
        last: String,
        /// Where to look next.
        hint: String,
    },
    #[error(
        "no registry port is known yet for environment `{name}`; run `cargo xtask dev up` first, or set `registry.hostPort` or `registry.external`"
    )]
    NoPort { name: String },
}

/// Why an image could not be pulled.
#[derive(Debug, thiserror::Error)]
pub enum PullError {
    #[error(transparent)]
    Engine(#[from] bollard::errors::Error),
    #[error("no answer within {}s", .0.as_secs())]
    Timeout(Duration),
}

/// Why the registry image could not be built from the distribution binary.
#[derive(Debug, thiserror::Error)]
pub enum LocalImageError {
    #[error("cannot stage {} for the image", path.display())]
    Stage {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot list the libraries it links (`ldd`)")]
    Libraries(#[source] xshell::Error),
    #[error(transparent)]
    Build(#[from] image::docker::Error),
}

/// How the host reaches the registry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// `localhost:<port>`, or the `registry.external` address.
    pub host: String,
    /// What [`ensure`] did, for the user.
    pub action: Action,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// `registry.external`: nothing is managed.
    External,
    /// The container was running already.
    Reused,
    /// The container existed and was started.
    Started,
    /// The container was created, from the image named.
    Created { image: String },
}

impl Endpoint {
    /// A distribution client for this registry, when dev-env runs it.
    pub fn client(&self) -> distribution::Client {
        distribution::Client::new(&self.host)
    }
}

/// A distribution client for the registry of `config` at `host`: the
/// registry dev-env runs over plain HTTP, an external one with its
/// `caFile`, `insecure` and the credentials `docker login` stored.
pub fn client(config: &Config, host: &str) -> Result<distribution::Client, distribution::Error> {
    if config.registry.external.is_none() {
        return Ok(distribution::Client::new(host));
    }
    let options = distribution::Options {
        ca_file: config.registry.ca_file.as_deref(),
        insecure: config.registry.insecure,
    };
    distribution::Client::connect(host, options)
}

/// The host address of the registry of `config` without touching Docker:
/// `registry.external`, or `localhost:<port>` with the declared port or the
/// one kept in the state.
pub fn host(config: &Config, state: &State) -> Result<String, Error> {
    if let Some(external) = &config.registry.external {
        return Ok(external.clone());
    }
    let port = match config.registry.host_port {
        0 => state.registry_port.ok_or_else(|| Error::NoPort {
            name: config.name.clone(),
        })?,
        port => port,
    };
    Ok(format!("localhost:{port}"))
}

/// Makes sure the registry of `config` runs and answers; records a picked
/// port in the state in `config.state_dir()`. A container it creates
/// carries the drift gate's labels for [`plan::registry_spec`].
pub async fn ensure(
    docker: &Docker,
    config: &Config,
    reporter: &dyn Reporter,
) -> Result<Endpoint, Error> {
    let labels = plan::labels(&config.name, ROLE, &plan::registry_spec(config));
    ensure_labelled(docker, config, labels, reporter).await
}

/// [`ensure`], with `labels` added to a container it creates (such as the
/// drift gate's spec hash). The environment and role labels are always set.
pub async fn ensure_labelled(
    docker: &Docker,
    config: &Config,
    labels: HashMap<String, String>,
    reporter: &dyn Reporter,
) -> Result<Endpoint, Error> {
    let registry = &config.registry;
    if let Some(external) = &registry.external {
        let endpoint = Endpoint {
            host: external.clone(),
            action: Action::External,
        };
        let client = client(config, external).map_err(|source| Error::NotReady {
            host: external.clone(),
            timeout: Duration::ZERO,
            last: crate::error_chain(&source),
            hint: String::from("fix the registry settings above"),
        })?;
        wait_ready_with(&endpoint, &client, external, READY_TIMEOUT).await?;
        return Ok(endpoint);
    }
    let state_dir = config.state_dir();
    let state = State::load(&state_dir)?;
    let name = registry.name.as_str();
    let existing = match engine::inspect_container(docker, name).await? {
        // Created but never started (an interrupted run): the data is in
        // the volume, so the container is simply made again.
        Some(existing)
            if engine::never_started(&existing) && owner_of(&existing) == Some(&config.name) =>
        {
            engine::remove_container(docker, name).await?;
            None
        }
        other => other,
    };
    let (port, action) = match existing {
        Some(existing) => reuse(docker, config, &existing, &state).await?,
        None => {
            let port = match (registry.host_port, state.registry_port) {
                (0, Some(kept)) => kept,
                (0, None) => {
                    engine::free_loopback_port().map_err(|source| Error::NoFreePort { source })?
                }
                (declared, _) => declared,
            };
            let image = resolve_image(docker, &registry.image, LOCAL_IMAGE, reporter).await?;
            create(docker, config, &image, port, labels).await?;
            (port, Action::Created { image })
        }
    };
    if registry.host_port == 0 && state.registry_port != Some(port) {
        State::update(&state_dir, |state| state.registry_port = Some(port))?;
    }
    let endpoint = Endpoint {
        host: format!("localhost:{port}"),
        action,
    };
    wait_ready(&endpoint, name).await?;
    Ok(endpoint)
}

/// Uses the existing registry container of the environment, starting it
/// when stopped; the port it publishes, checked against the declared one.
async fn reuse(
    docker: &Docker,
    config: &Config,
    existing: &bollard::models::ContainerInspectResponse,
    state: &State,
) -> Result<(u16, Action), Error> {
    let registry = &config.registry;
    let name = registry.name.as_str();
    let owner = owner_of(existing).cloned();
    if owner.as_deref() != Some(config.name.as_str()) {
        return Err(Error::Foreign {
            container: name.to_string(),
            name: config.name.clone(),
            found: owner,
        });
    }
    let action = if engine::is_running(existing) {
        Action::Reused
    } else {
        docker
            .start_container(name, None)
            .await
            .map_err(|e| engine::Error::api(format!("start container `{name}`"), e))?;
        Action::Started
    };
    // A stopped container reports no ports: read them once running.
    let running = engine::inspect_container(docker, name).await?;
    let actual = running
        .as_ref()
        .and_then(|c| engine::published_port(c, REGISTRY_CONTAINER_PORT));
    match (registry.host_port, actual) {
        (0, Some(actual)) => Ok((actual, action)),
        (declared, Some(actual)) if declared != actual => Err(Error::PortDrift {
            container: name.to_string(),
            declared,
            actual,
        }),
        (declared, _) if declared != 0 => Ok((declared, action)),
        (_, _) => Ok((state.registry_port.unwrap_or(0), action)),
    }
}

fn owner_of(container: &bollard::models::ContainerInspectResponse) -> Option<&String> {
    container.config.as_ref()?.labels.as_ref()?.get(LABEL_NAME)
}

/// Removes the registry container (not its volume); `false` when there
/// was none. With `registry.external` there is nothing to remove.
pub async fn remove(docker: &Docker, config: &Config) -> Result<bool, Error> {
    if config.registry.external.is_some() {
        return Ok(false);
    }
    Ok(engine::remove_container(docker, &config.registry.name).await?)
}

/// Polls `GET /v2/` until it answers 200 or [`READY_TIMEOUT`] passes.
pub async fn wait_ready(endpoint: &Endpoint, container: &str) -> Result<(), Error> {
    wait_ready_within(endpoint, container, READY_TIMEOUT).await
}

/// Polls `GET /v2/` until it answers 200 or `timeout` passes.
pub async fn wait_ready_within(
    endpoint: &Endpoint,
    container: &str,
    timeout: Duration,
) -> Result<(), Error> {
    wait_ready_with(endpoint, &endpoint.client(), container, timeout).await
}

async fn wait_ready_with(
    endpoint: &Endpoint,
    client: &distribution::Client,
    container: &str,
    timeout: Duration,
) -> Result<(), Error> {
    let started = Instant::now();
    loop {
        let last = match client.ping().await {
            Ok(()) => return Ok(()),
            Err(e) => crate::error_chain(&e),
        };
        if started.elapsed() >= timeout {
            let hint = match endpoint.action {
                Action::External => {
                    String::from("check that `registry.external` names a running registry")
                }
                _ => format!("look at `docker logs {container}`"),
            };
            return Err(Error::NotReady {
                host: endpoint.host.clone(),
                timeout,
                last,
                hint,
            });
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// `wanted` when the engine has it or can pull it; otherwise `local`, built
/// from [`DISTRIBUTION_BINARY`] unless it exists already. Reports whenever
/// it falls back.
pub async fn resolve_image(
    docker: &Docker,
    wanted: &str,
    local: &str,
    reporter: &dyn Reporter,
) -> Result<String, Error> {
    if engine::inspect_image(docker, wanted).await?.is_some() {
        return Ok(wanted.to_string());
    }
    let cause = match pull(docker, wanted).await {
        Ok(()) => return Ok(wanted.to_string()),
        Err(cause) => cause,
    };
    if engine::inspect_image(docker, local).await?.is_some() {
        reporter.report(&Event::RegistryImageFallback {
            wanted: wanted.to_string(),
            cause: crate::error_chain(&cause),
            local: local.to_string(),
            building: false,
        });
        return Ok(local.to_string());
    }
    let binary = Path::new(DISTRIBUTION_BINARY);
    if !binary.exists() {
        return Err(Error::NoImage {
            image: wanted.to_string(),
            source: cause,
        });
    }
    reporter.report(&Event::RegistryImageFallback {
        wanted: wanted.to_string(),
        cause: crate::error_chain(&cause),
        local: local.to_string(),
        building: true,
    });
    build_local_image(docker, binary, local).await?;
    Ok(local.to_string())
}

/// Pulls `image` under [`PULL_TIMEOUT`]; the error is the engine's words.
pub(crate) async fn pull(docker: &Docker, image: &str) -> Result<(), PullError> {
    let options = CreateImageOptionsBuilder::default()
        .from_image(image)
        .build();
    let pulling = async {
        let mut stream = docker.create_image(Some(options), None, None);
        while let Some(item) = stream.next().await {
            item?;
        }
        Ok(())
    };
    tokio::time::timeout(PULL_TIMEOUT, pulling)
        .await
        .unwrap_or(Err(PullError::Timeout(PULL_TIMEOUT)))
}

/// Builds image `tag` `FROM scratch` holding the distribution `binary`,
/// the shared libraries `ldd` lists for it, and a registry configuration
/// that serves `/var/lib/registry` on port 5000. Docker provides
/// `/etc/hosts` and `/etc/resolv.conf` at run time; nothing else is needed.
pub async fn build_local_image(docker: &Docker, binary: &Path, tag: &str) -> Result<(), Error> {
    build_local_image_from(docker, binary, tag)
        .await
        .map_err(|source| Error::LocalImage {
            binary: binary.to_path_buf(),
            source: Box::new(source),
        })
}

async fn build_local_image_from(
    docker: &Docker,
    binary: &Path,
    tag: &str,
) -> Result<(), LocalImageError> {
    let stage = |path: &Path| {
        let path = path.to_path_buf();
        move |source| LocalImageError::Stage { path, source }
    };
    let dir = tempfile::tempdir().map_err(stage(Path::new("a temporary directory")))?;
    let rootfs = dir.path().join("rootfs");
    let mut files: Vec<PathBuf> = vec![binary.to_path_buf()];
    files.extend(linked_libraries(binary).map_err(LocalImageError::Libraries)?);
    for file in &files {
        let dest = rootfs.join(file.strip_prefix("/").unwrap_or(file));
        std::fs::create_dir_all(dest.parent().expect("a file has a parent"))
            .map_err(stage(&dest))?;
        // Copies the target of a symlink, under the name the loader asks for.
        std::fs::copy(file, &dest).map_err(stage(file))?;
    }
    let config_dir = rootfs.join("etc/docker/registry");
    for dir in [
        &config_dir,
        &rootfs.join("var/lib/registry"),
        &rootfs.join("tmp"),
    ] {
        std::fs::create_dir_all(dir).map_err(stage(dir))?;
    }
    let config_file = config_dir.join("config.yml");
    std::fs::write(&config_file, LOCAL_CONFIG).map_err(stage(&config_file))?;
    let entrypoint = format!("/{}", binary.strip_prefix("/").unwrap_or(binary).display());
    let dockerfile = format!(
        "FROM scratch\nCOPY rootfs/ /\nEXPOSE 5000\nVOLUME {DATA_DIR}\nENTRYPOINT [\"{entrypoint}\"]\nCMD [\"serve\", \"/etc/docker/registry/config.yml\"]\n"
    );
    let dockerfile_path = dir.path().join("Dockerfile");
    std::fs::write(&dockerfile_path, dockerfile).map_err(stage(&dockerfile_path))?;
    let (repository, tag) = tag.rsplit_once(':').unwrap_or((tag, "latest"));
    let build = image::docker::DockerBuild {
        context: dir.path(),
        dockerfile: &dockerfile_path,
        target: None,
        build_args: &Default::default(),
        repository,
        tag,
        platform: "",
        no_cache: false,
        staged: &[],
        output: None,
    };
    image::docker::build(docker, &build).await?;
    Ok(())
}

/// The absolute paths of the shared libraries `ldd` lists for `binary`,
/// the dynamic loader included.
fn linked_libraries(binary: &Path) -> Result<Vec<PathBuf>, xshell::Error> {
    let sh = Shell::new()?;
    let output = cmd!(sh, "ldd {binary}").quiet().ignore_status().read()?;
    Ok(parse_ldd(&output))
}

fn parse_ldd(output: &str) -> Vec<PathBuf> {
    output
        .lines()
        .filter_map(|line| {
            let line = line.trim();
            let path = match line.split_once("=>") {
                Some((_, rest)) => rest.trim(),
                None => line,
            };
            let path = path.split_whitespace().next()?;
            path.starts_with('/').then(|| PathBuf::from(path))
        })
        .collect()
}

/// Creates and starts the registry container.
async fn create(
    docker: &Docker,
    config: &Config,
    image: &str,
    port: u16,
    extra_labels: HashMap<String, String>,
) -> Result<(), Error> {
    let registry = &config.registry;
    let network = &config.network.name;
    match docker.inspect_network(network, None).await {
        Ok(_) => {}
        Err(e) if engine::is_not_found(&e) => {
            return Err(Error::NoNetwork {
                network: network.clone(),
            });
        }
        Err(e) => return Err(engine::Error::api(format!("inspect network `{network}`"), e).into()),
    }
    engine::ensure_volume(docker, &registry.volume, engine::labels(&config.name, ROLE)).await?;
    let mut labels = extra_labels;
    labels.extend(engine::labels(&config.name, ROLE));
    labels.insert(LABEL_IMAGE.to_string(), image.to_string());
    let container_port = format!("{REGISTRY_CONTAINER_PORT}/tcp");
    let body = ContainerCreateBody {
        image: Some(image.to_string()),
        labels: Some(labels),
        exposed_ports: Some(vec![container_port.clone()]),
        host_config: Some(HostConfig {
            binds: Some(vec![format!("{}:{DATA_DIR}", registry.volume)]),
            port_bindings: Some(HashMap::from([(
                container_port,
                Some(vec![PortBinding {
                    host_ip: Some(String::from("127.0.0.1")),
                    host_port: Some(port.to_string()),
                }]),
            )])),
            ..HostConfig::default()
        }),
        networking_config: Some(NetworkingConfig {
            endpoints_config: Some(HashMap::from([(
                network.clone(),
                EndpointSettings {
                    aliases: Some(vec![registry.name.clone()]),
                    ..EndpointSettings::default()
                },
            )])),
        }),
        ..ContainerCreateBody::default()
    };
    let options = CreateContainerOptionsBuilder::default()
        .name(&registry.name)
        .build();
    let name = registry.name.as_str();
    match docker.create_container(Some(options), body).await {
        Ok(_) => {}
        // Another process created it first: use theirs.
        Err(e) if engine::is_conflict(&e) => {}
        Err(e) => return Err(engine::Error::api(format!("create container `{name}`"), e).into()),
    }
    docker
        .start_container(name, None)
        .await
        .map_err(|e| engine::Error::api(format!("start container `{name}`"), e))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ldd_output_gives_library_paths() {
        let output = "\tlinux-vdso.so.1 (0x00007ffd)\n\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f)\n\t/lib64/ld-linux-x86-64.so.2 (0x00007f)\n";
        assert_eq!(
            parse_ldd(output),
            [
                PathBuf::from("/lib/x86_64-linux-gnu/libc.so.6"),
                PathBuf::from("/lib64/ld-linux-x86-64.so.2")
            ]
        );
        assert!(parse_ldd("\tstatically linked\n").is_empty());
    }

    #[test]
    fn host_prefers_external_then_declared_then_kept_port() {
        let parse = |text: &str| {
            let dir = tempfile::tempdir().unwrap();
            Config::parse(&dir.path().join("dev-env.yaml"), text).unwrap()
        };
        let kept = State {
            registry_port: Some(5123),
            ..State::default()
        };
        let config = parse("name: a\nregistry: {external: 'localhost:5000'}\n");
        assert_eq!(host(&config, &kept).unwrap(), "localhost:5000");
        let config = parse("name: a\nregistry: {hostPort: 5001}\n");
        assert_eq!(host(&config, &kept).unwrap(), "localhost:5001");
        let config = parse("name: a\n");
        assert_eq!(host(&config, &kept).unwrap(), "localhost:5123");
        let err = host(&config, &State::default()).unwrap_err().to_string();
        assert!(err.contains("cargo xtask dev up"), "{err}");
    }
}
