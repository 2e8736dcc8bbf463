//! The cluster node: one container that runs `server` (k3s, or kube-sim
//! standing in for it), the way k3d runs a k3s server, driven through the
//! Docker API. Both providers share this code; only the image differs.
//!
//! The node's API is published on 127.0.0.1 only. Its kubeconfig is read
//! out of the container once the server writes it, and rewritten for the
//! host and for the network (see `kubeconfig`).

use std::{collections::HashMap, io::Read, path::PathBuf, time::Duration};

use bollard::{
    Docker,
    models::{
        ContainerCreateBody, EndpointSettings, HostConfig, HostConfigCgroupnsModeEnum, Mount,
        MountType, NetworkingConfig, PortBinding, RestartPolicy, RestartPolicyNameEnum,
    },
    query_parameters::{
        CreateContainerOptionsBuilder, DownloadFromContainerOptionsBuilder, LogsOptionsBuilder,
        UploadToContainerOptionsBuilder,
    },
};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::jiff::Timestamp;

use crate::{
    config::Config,
    docker::{self, inspect_container, is_running, published_port},
    kubeconfig,
    plan::{
        self, Drift, MountSource, NODE_API_PORT, NODE_KUBECONFIG_OUTPUT, NodeSpec, Object,
        Ownership,
    },
    state::State,
    wait::{self, Step},
};

/// How long the server may take to write its kubeconfig and answer `/readyz`.
pub const START_TIMEOUT: Duration = Duration::from_secs(120);

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Docker(#[from] docker::Error),
    #[error(
        "container `{0}` exists but was not created by dev-env; remove it (`docker rm -f {0}`) or change `name` in dev-env.yaml"
    )]
    Foreign(String),
    #[error(
        "cannot find a free port on 127.0.0.1 for the node's API; free one (`ss -ltn` lists those in use) and run `cargo xtask dev up` again"
    )]
    NoFreePort {
        #[source]
        source: std::io::Error,
    },
    #[error("node image `{image}` is not available: {reason}")]
    Image { image: String, reason: String },
    #[error(
        "node `{container}` stopped while starting (exit code {code}); its last log lines:\n{logs}"
    )]
    Exited {
        container: String,
        code: i64,
        logs: String,
    },
    #[error("node `{container}` did not come up; `docker logs {container}` shows why")]
    Wait {
        container: String,
        #[source]
        source: wait::Error,
    },
    #[error(transparent)]
    Kubeconfig(#[from] kubeconfig::Error),
    #[error("node `{container}` wrote an unreadable kubeconfig: {reason}")]
    BadKubeconfig { container: String, reason: String },
}

/// What [`ensure`] found or did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ensured {
    Created,
    /// It existed but was stopped.
    Started,
    Unchanged,
    /// It exists with another configuration; nothing was changed.
    Drifted(Drift),
}

/// The node as it runs.
#[derive(Debug, Clone)]
pub struct Node {
    pub container: String,
    /// The API's port on 127.0.0.1.
    pub api_port: u16,
    pub host_kubeconfig: PathBuf,
    pub network_kubeconfig: PathBuf,
}

/// Makes sure the node of `spec` runs, then writes both kubeconfigs and
/// waits for the API to be ready. A drifted node is left alone and
/// reported, unless `recreate`.
pub async fn ensure(
    docker: &Docker,
    config: &Config,
    spec: &NodeSpec,
    state: &mut State,
    recreate: bool,
) -> Result<(Ensured, Option<Node>), Error> {
    let outcome = match inspect_container(docker, &spec.container).await? {
        Some(existing) => {
            let labels = existing
                .config
                .as_ref()
                .and_then(|c| c.labels.clone())
                .unwrap_or_default();
            match plan::drift_from_labels(&labels, Object::Node, &spec.container, spec) {
                Ownership::NotOurs => return Err(Error::Foreign(spec.container.clone())),
                // Created but never started: a run was interrupted before
                // its files were copied in, so it is incomplete.
                _ if docker::never_started(&existing) => {
                    docker::remove_container(docker, &spec.container).await?;
                    create(docker, config, spec, state).await?;
                    Ensured::Created
                }
                Ownership::Drifted(drift) if !recreate => {
                    return Ok((Ensured::Drifted(drift), None));
                }
                Ownership::Drifted(_) => {
                    docker::remove_container(docker, &spec.container).await?;
                    create(docker, config, spec, state).await?;
                    Ensured::Created
                }
                Ownership::Matches if is_running(&existing) => Ensured::Unchanged,
                Ownership::Matches => {
                    start(docker, &spec.container).await?;
                    Ensured::Started
                }
            }
        }
        None => {
            create(docker, config, spec, state).await?;
            Ensured::Created
        }
    };
    let node = connect(docker, config, spec).await?;
    state.api_port = Some(node.api_port);
    Ok((outcome, Some(node)))
}

/// Removes the node container; `false` when it was already gone. The
/// kubeconfigs go with it: they would name a server that no longer exists.
pub async fn remove(docker: &Docker, config: &Config) -> Result<bool, Error> {
    let node = config.node_name();
    // A stop first: SIGTERM lets kube-sim remove the pod containers it runs,
    // which a forced removal would leave behind.
    if inspect_container(docker, &node)
        .await?
        .is_some_and(|c| is_running(&c))
    {
        let options = bollard::query_parameters::StopContainerOptions {
            t: Some(STOP_TIMEOUT_SECONDS),
            signal: None,
        };
        let _ = docker.stop_container(&node, Some(options)).await;
    }
    let removed = docker::remove_container(docker, &node).await?;
    // Whatever pod containers are still there (a node that was killed
    // cannot clean up) go too.
    for pod in pod_containers(docker, &config.name).await? {
        docker::remove_container(docker, &pod).await?;
    }
    for file in [kubeconfig::HOST_FILE, kubeconfig::NETWORK_FILE] {
        let _ = std::fs::remove_file(config.state_dir().join(file));
    }
    Ok(removed)
}

/// How long a node may take to stop before it is killed.
const STOP_TIMEOUT_SECONDS: i32 = 20;

/// Names of the pod containers a sim node ran for environment `env`.
pub async fn pod_containers(docker: &Docker, env: &str) -> Result<Vec<String>, Error> {
    let labels = vec![
        format!("{}={env}", docker::LABEL_NAME),
        String::from("io.kubernetes.pod.name"),
    ];
    let what = format!("the pod containers of `{env}`");
    let containers = docker::containers_labelled(docker, labels, &what).await?;
    Ok(containers
        .iter()
        .filter_map(docker::container_name)
        .collect())
}

async fn create(
    docker: &Docker,
    config: &Config,
    spec: &NodeSpec,
    state: &mut State,
) -> Result<(), Error> {
    if docker::inspect_image(docker, &spec.image).await?.is_none() {
        return Err(Error::Image {
            image: spec.image.clone(),
            reason: String::from(
                "the engine does not have it; pull it (`docker pull`) or build it, then run `cargo xtask dev up` again",
            ),
        });
    }
    let token = match &state.node_token {
        Some(token) => token.clone(),
        None => {
            let token = random_token();
            state.node_token = Some(token.clone());
            token
        }
    };
    let mut env: Vec<String> = spec.env.iter().map(|(k, v)| format!("{k}={v}")).collect();
    env.push(format!("K3S_TOKEN={token}"));
    // Keep the port of an earlier run when it is still free, so kubeconfigs
    // handed to other tools stay valid; otherwise pick a free one. The port
    // is fixed in the container's config, so restarts keep it too.
    let host_port = match state.api_port.filter(|p| docker::loopback_port_is_free(*p)) {
        Some(port) => port,
        None => docker::free_loopback_port().map_err(|source| Error::NoFreePort { source })?,
    };
    state.api_port = Some(host_port);
    let port_key = format!("{NODE_API_PORT}/tcp");
    let host_config = host_config(spec, &port_key, host_port);
    let body = ContainerCreateBody {
        image: Some(spec.image.clone()),
        hostname: Some(spec.container.clone()),
        entrypoint: (!spec.entrypoint.is_empty()).then(|| spec.entrypoint.clone()),
        cmd: Some(spec.command.clone()),
        env: Some(env),
        labels: Some(plan::labels(&config.name, "node", spec)),
        exposed_ports: Some(vec![port_key]),
        host_config: Some(host_config),
        networking_config: Some(NetworkingConfig {
            endpoints_config: Some(HashMap::from([(
                spec.network.clone(),
                EndpointSettings {
                    aliases: Some(vec![spec.container.clone()]),
                    ..EndpointSettings::default()
                },
            )])),
        }),
        ..ContainerCreateBody::default()
    };
    let options = CreateContainerOptionsBuilder::default()
        .name(&spec.container)
        .build();
    docker
        .create_container(Some(options), body)
        .await
        .map_err(|e| docker::Error::api(format!("create container `{}`", spec.container), e))?;
    // Files go in before the first start, as k3d's pre-start hooks do: no
    // bind mounts, so this works against a remote engine too.
    let archive = tar_files(&spec.files);
    let options = UploadToContainerOptionsBuilder::default().path("/").build();
    docker
        .upload_to_container(
            &spec.container,
            Some(options),
            bollard::body_full(archive.into()),
        )
        .await
        .map_err(|e| docker::Error::api(format!("copy files into `{}`", spec.container), e))?;
    start(docker, &spec.container).await
}

/// How the engine runs the node: the API on 127.0.0.1 only, and what the
/// provider needs (privileges, namespaces, mounts).
fn host_config(spec: &NodeSpec, port_key: &str, host_port: u16) -> HostConfig {
    HostConfig {
        privileged: Some(spec.privileged),
        userns_mode: spec.userns_host.then(|| String::from("host")),
        cgroupns_mode: spec
            .cgroupns_private
            .then_some(HostConfigCgroupnsModeEnum::PRIVATE),
        // The server is PID 1 itself: k3s sets up cgroups v2 as PID 1.
        init: Some(false),
        extra_hosts: Some(
            spec.extra_hosts
                .iter()
                .map(|(name, address)| format!("{name}:{address}"))
                .collect(),
        ),
        tmpfs: Some(spec.tmpfs.clone().into_iter().collect()),
        devices: (!spec.devices.is_empty()).then(|| {
            spec.devices
                .iter()
                .map(|path| bollard::models::DeviceMapping {
                    path_on_host: Some(path.clone()),
                    path_in_container: Some(path.clone()),
                    cgroup_permissions: Some(String::from("rwm")),
                })
                .collect()
        }),
        mounts: Some(
            spec.mounts
                .iter()
                .map(|(target, source)| {
                    let (typ, source) = match source {
                        MountSource::Volume(v) => (MountType::VOLUME, v),
                        MountSource::Bind(p) => (MountType::BIND, p),
                    };
                    Mount {
                        target: Some(target.clone()),
                        source: Some(source.clone()),
                        typ: Some(typ),
                        ..Mount::default()
                    }
                })
                .collect(),
        ),
        port_bindings: Some(HashMap::from([(
            port_key.to_string(),
            Some(vec![PortBinding {
                host_ip: Some(String::from("127.0.0.1")),
                host_port: Some(host_port.to_string()),
            }]),
        )])),
        network_mode: Some(spec.network.clone()),
        restart_policy: Some(RestartPolicy {
            name: Some(RestartPolicyNameEnum::UNLESS_STOPPED),
            maximum_retry_count: None,
        }),
        ..HostConfig::default()
    }
}

async fn start(docker: &Docker, container: &str) -> Result<(), Error> {
    docker
        .start_container(container, None)
        .await
        .map_err(|e| docker::Error::api(format!("start container `{container}`"), e).into())
}

/// Waits for the kubeconfig the server writes, rewrites it for the host and
/// the network, and waits for `/readyz`.
async fn connect(docker: &Docker, config: &Config, spec: &NodeSpec) -> Result<Node, Error> {
    let container = spec.container.clone();
    let dir = config.state_dir();
    let host_kubeconfig = dir.join(kubeconfig::HOST_FILE);
    let network_kubeconfig = dir.join(kubeconfig::NETWORK_FILE);
    // One poll for the whole handshake: a kubeconfig that does not reach a
    // ready API (a previous run's, with its old CA) is read again.
    let api_port = wait::poll("the node's API", START_TIMEOUT, || async {
        let Some(inspected) = inspect_container(docker, &container).await? else {
            return Ok(Step::Pending(String::from("container missing")));
        };
        let (port, text) = match current_kubeconfig(docker, &container, &inspected).await? {
            Step::Done(found) => found,
            Step::Pending(why) => return Ok(Step::Pending(why)),
        };
        let (port, host, network) = match rewritten(&text, &config.name, port, &container) {
            Step::Done(rewritten) => rewritten,
            Step::Pending(why) => return Ok(Step::Pending(why)),
        };
        kubeconfig::write(&host_kubeconfig, &host)?;
        kubeconfig::write(&network_kubeconfig, &network)?;
        let client = kubeconfig::client(&host_kubeconfig, None).await?;
        let request = http::Request::get("/readyz")
            .body(Vec::new())
            .expect("static request");
        Ok::<_, Error>(match client.request_text(request).await {
            Ok(_) => Step::Done(port),
            Err(e) => Step::Pending(format!("/readyz: {e}")),
        })
    })
    .await
    .map_err(|source| Error::Wait {
        container: container.clone(),
        source,
    })??;
    Ok(Node {
        container,
        api_port,
        host_kubeconfig,
        network_kubeconfig,
    })
}

/// The API port and the kubeconfig the running server wrote since it last
/// started, or why there is none yet. A node that stopped fails at once
/// with its last log lines.
async fn current_kubeconfig(
    docker: &Docker,
    container: &str,
    inspected: &bollard::models::ContainerInspectResponse,
) -> Result<Step<(u16, String)>, Error> {
    if !is_running(inspected) {
        let code = inspected
            .state
            .as_ref()
            .and_then(|s| s.exit_code)
            .unwrap_or(-1);
        return Err(Error::Exited {
            container: container.to_string(),
            code,
            logs: logs_tail(docker, container, 20).await,
        });
    }
    let Some(port) = published_port(inspected, NODE_API_PORT) else {
        return Ok(Step::Pending(String::from("API port not published yet")));
    };
    // A restarted server writes a new kubeconfig (kube-sim even a new CA);
    // one older than this start is the previous run's. The file's time has
    // whole seconds and the engine records the start after the process
    // began, so one second of slack; a stale file that slips through fails
    // `/readyz` and is read again.
    let started = inspected
        .state
        .as_ref()
        .and_then(|s| s.started_at.as_deref())
        .and_then(|t| t.parse::<Timestamp>().ok())
        .map_or(0, |t| t.as_second());
    Ok(
        match read_file(docker, container, NODE_KUBECONFIG_OUTPUT).await {
            Some((text, mtime)) if mtime + 1 >= started => Step::Done((port, text)),
            Some(_) => Step::Pending(format!(
                "{NODE_KUBECONFIG_OUTPUT} is from before this start"
            )),
            None => Step::Pending(format!("{NODE_KUBECONFIG_OUTPUT} not written yet")),
        },
    )
}

/// The node's kubeconfig rewritten for the host and for the network. The
/// server may be caught halfway through writing it: a file that does not
/// parse yet, or names no cluster yet, is not ready rather than an error.
fn rewritten(
    text: &str,
    name: &str,
    port: u16,
    container: &str,
) -> Step<(u16, kube::config::Kubeconfig, kube::config::Kubeconfig)> {
    let rewrite = |server: String| kubeconfig::rewrite(text, name, &server);
    match (
        rewrite(format!("https://127.0.0.1:{port}")),
        rewrite(format!("https://{container}:{NODE_API_PORT}")),
    ) {
        (Ok(host), Ok(network)) => Step::Done((port, host, network)),
        (Err(e), _) | (_, Err(e)) => Step::Pending(format!(
            "{NODE_KUBECONFIG_OUTPUT} is not complete yet ({e})"
        )),
    }
}

/// The content of the file at `path` in the container and its mtime in
/// seconds, if it exists and is not empty.
async fn read_file(docker: &Docker, container: &str, path: &str) -> Option<(String, i64)> {
    let options = DownloadFromContainerOptionsBuilder::default()
        .path(path)
        .build();
    let bytes: Vec<u8> = docker
        .download_from_container(container, Some(options))
        .map_ok(|chunk| chunk.to_vec())
        .try_concat()
        .await
        .ok()?;
    let mut archive = tar::Archive::new(bytes.as_slice());
    let mut entry = archive.entries().ok()?.next()?.ok()?;
    let mtime = entry.header().mtime().ok()? as i64;
    let mut text = String::new();
    entry.read_to_string(&mut text).ok()?;
    (!text.trim().is_empty()).then_some((text, mtime))
}

/// The last `n` lines the container logged.
pub async fn logs_tail(docker: &Docker, container: &str, n: usize) -> String {
    let options = LogsOptionsBuilder::default()
        .stdout(true)
        .stderr(true)
        .tail(&n.to_string())
        .build();
    let lines: Vec<String> = docker
        .logs(container, Some(options))
        .filter_map(|line| async move { line.ok().map(|l| l.to_string()) })
        .collect()
        .await;
    if lines.is_empty() {
        String::from("(no output)")
    } else {
        lines.concat()
    }
}

fn tar_files(files: &std::collections::BTreeMap<String, String>) -> Vec<u8> {
    let mut builder = tar::Builder::new(Vec::new());
    for (path, content) in files {
        let mut header = tar::Header::new_gnu();
        header.set_size(content.len() as u64);
        header.set_mode(0o644);
        header.set_mtime(0);
        header.set_cksum();
        builder
            .append_data(
                &mut header,
                path.trim_start_matches('/'),
                content.as_bytes(),
            )
            .expect("writing to memory");
    }
    builder.into_inner().expect("writing to memory")
}

fn random_token() -> String {
    let mut bytes = [0u8; 24];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .expect("/dev/urandom is readable");
    hex::encode(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    const KUBECONFIG: &str = "apiVersion: v1\nclusters:\n- cluster:\n    certificate-authority-data: Q0E=\n    server: https://127.0.0.1:6443\n  name: default\ncontexts:\n- context:\n    cluster: default\n    user: default\n  name: default\ncurrent-context: default\nkind: Config\nusers:\n- name: default\n  user:\n    token: t\n";

    #[test]
    fn a_kubeconfig_caught_half_written_is_not_ready_yet() {
        for cut in [10, 40, KUBECONFIG.len() / 2] {
            let step = rewritten(&KUBECONFIG[..cut], "env", 4321, "env-server-0");
            let Step::Pending(why) = step else {
                panic!("a kubeconfig cut at {cut} bytes counts as ready")
            };
            assert!(why.contains("not complete yet"), "cut at {cut}: {why}");
        }
        let Step::Done((port, host, network)) = rewritten(KUBECONFIG, "env", 4321, "env-server-0")
        else {
            panic!("a whole kubeconfig is ready")
        };
        assert_eq!(port, 4321);
        let server = |k: &kube::config::Kubeconfig| {
            k.clusters[0]
                .cluster
                .as_ref()
                .unwrap()
                .server
                .clone()
                .unwrap()
        };
        assert_eq!(server(&host), "https://127.0.0.1:4321");
        assert_eq!(server(&network), "https://env-server-0:6443");
    }
}
