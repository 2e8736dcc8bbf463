//! `pods/exec`, `pods/attach` and `pods/portforward` on the engine: commands run through the engine's
//! exec in the pod's container, attaching goes through the engine's attach, and forwarded ports are
//! dialled at the container's address on the pod network.

use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::time::Duration;

use bollard::Docker;
use bollard::container::LogOutput;
use bollard::exec::{CreateExecOptions, ResizeExecOptions, StartExecOptions, StartExecResults};
use bollard::query_parameters::{AttachContainerOptions, ResizeContainerTTYOptions};
use futures::future::BoxFuture;
use futures::{Stream, StreamExt as _};
use serde_json::Value;

use super::{DockerRuntime, engine_message};
use crate::lock::MutexExt as _;
use crate::meta;
use crate::store::{self, ExecOutput, ExecRequest, ExecSession, PodStreams, Resize};

/// How long the engine may take to report an exec's exit code after its output ended.
const EXIT_CODE_DEADLINE: Duration = Duration::from_secs(10);

/// The streaming side of the Docker runtime.
pub struct DockerStreams {
    docker: Docker,
    runtime: DockerRuntime,
}

impl DockerStreams {
    /// Streams into the containers `runtime` started.
    pub fn new(docker: Docker, runtime: DockerRuntime) -> DockerStreams {
        DockerStreams { docker, runtime }
    }

    /// The running container a request names (or the pod's only one), as [`Self::running`] finds it.
    fn target(
        &self,
        pod: &Value,
        request: &ExecRequest,
    ) -> store::Result<(String, Option<String>)> {
        check_phase(pod)
            .and_then(|()| crate::kubelet::logs::log_container(pod, request.container.as_deref()))
            .and_then(|c| self.running(pod, c))
    }

    /// The Docker ID and pod-network address of the latest container of a pod container, or the
    /// kubelet's error when it does not run.
    fn running(&self, pod: &Value, container: &str) -> store::Result<(String, Option<String>)> {
        let uid = meta::str_at(pod, "/metadata/uid").unwrap_or("");
        let not_found = || {
            store::Error::BadRequest(format!(
                "unable to upgrade connection: container not found (\"{container}\")"
            ))
        };
        let id = self.runtime.latest(uid, container).ok_or_else(not_found)?;
        let ip = self
            .runtime
            .inner
            .containers
            .lock_unpoisoned()
            .get(&id)
            .map(|s| s.ip.clone())
            .ok_or_else(not_found)?;
        Ok((id, ip))
    }
}

/// Refuses pods that finished, as the API server does before it asks the kubelet.
fn check_phase(pod: &Value) -> store::Result<()> {
    match meta::str_at(pod, "/status/phase") {
        Some(phase @ ("Succeeded" | "Failed")) => Err(store::Error::BadRequest(format!(
            "cannot exec into or forward ports of a container in a completed pod; current phase is {phase}"
        ))),
        _ => Ok(()),
    }
}

/// The pod's container names, those that declare `port` first.
fn containers_for_port(pod: &Value, port: u16) -> Vec<String> {
    let containers = pod
        .pointer("/spec/containers")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let declares = |c: &Value| {
        c["ports"].as_array().is_some_and(|ps| {
            ps.iter()
                .any(|p| p["containerPort"].as_u64() == Some(u64::from(port)))
        })
    };
    let (first, rest): (Vec<&Value>, Vec<&Value>) = containers.iter().partition(|c| declares(c));
    first
        .into_iter()
        .chain(rest)
        .filter_map(|c| c["name"].as_str().map(str::to_string))
        .collect()
}

impl PodStreams for DockerStreams {
    fn port_address(&self, pod: &Value, port: u16) -> store::Result<SocketAddr> {
        check_phase(pod)?;
        let mut last_error = None;
        for container in containers_for_port(pod, port) {
            match self.running(pod, &container) {
                Ok((_, Some(ip))) => {
                    let ip: IpAddr = ip.parse().map_err(|_| {
                        store::Error::BadRequest(format!(
                            "the container {container} has no usable address: {ip}"
                        ))
                    })?;
                    return Ok(SocketAddr::new(ip, port));
                }
                Ok((_, None)) => {
                    last_error = Some(store::Error::BadRequest(format!(
                        "the container {container} has no address on the pod network"
                    )))
                }
                Err(e) => last_error = Some(e),
            }
        }
        Err(last_error.unwrap_or_else(|| {
            store::Error::BadRequest(format!("pod {} has no containers", meta::name_of(pod)))
        }))
    }

    fn attach(&self, pod: &Value, request: ExecRequest) -> Starting {
        let target = self.target(pod, &request);
        let docker = self.docker.clone();
        Box::pin(async move {
            let (id, _) = target?;
            let options = AttachContainerOptions {
                stream: true,
                stdin: request.stdin,
                stdout: true,
                stderr: true,
                ..AttachContainerOptions::default()
            };
            let attached = docker
                .attach_container(&id, Some(options))
                .await
                .map_err(|e| {
                    store::Error::BadRequest(format!(
                        "attaching to the container failed: {}",
                        engine_message(&e)
                    ))
                })?;
            let resize = request.tty.then(|| resize_container(docker.clone(), id));
            Ok(ExecSession {
                stdin: request.stdin.then_some(attached.input),
                output: output_of(attached.output),
                exit_code: Box::new(|| Box::pin(async { Some(0) })),
                resize,
            })
        })
    }

    fn exec(&self, pod: &Value, request: ExecRequest) -> Starting {
        let target = self.target(pod, &request);
        let docker = self.docker.clone();
        Box::pin(async move { start_exec(docker, &target?.0, request).await })
    }
}

/// An exec or attach session being started.
type Starting = BoxFuture<'static, store::Result<ExecSession>>;

/// Creates and starts an exec attached to its output (and stdin when asked).
async fn start_exec(
    docker: Docker,
    container_id: &str,
    request: ExecRequest,
) -> store::Result<ExecSession> {
    let failed = |what: &str, e: bollard::errors::Error| {
        store::Error::BadRequest(format!(
            "{what} in the container failed: {}",
            engine_message(&e)
        ))
    };
    let options = CreateExecOptions {
        cmd: Some(request.command),
        attach_stdin: Some(request.stdin),
        attach_stdout: Some(true),
        attach_stderr: Some(true),
        tty: Some(request.tty),
        ..CreateExecOptions::default()
    };
    let created = docker
        .create_exec(container_id, options)
        .await
        .map_err(|e| failed("creating the exec", e))?;
    let start = StartExecOptions {
        detach: false,
        tty: request.tty,
        ..StartExecOptions::default()
    };
    let started = docker
        .start_exec(&created.id, Some(start))
        .await
        .map_err(|e| failed("starting the exec", e))?;
    let StartExecResults::Attached { output, input } = started else {
        return Err(store::Error::BadRequest(
            "the engine started the exec detached".to_string(),
        ));
    };
    let exec_id = created.id;
    let resize = request.tty.then(|| resize(docker.clone(), exec_id.clone()));
    Ok(ExecSession {
        stdin: request.stdin.then_some(input),
        output: output_of(output),
        exit_code: Box::new(move || Box::pin(exit_code(docker, exec_id))),
        resize,
    })
}

/// The engine's multiplexed output as a command's output, until it ends or fails.
fn output_of(
    output: Pin<Box<dyn Stream<Item = Result<LogOutput, bollard::errors::Error>> + Send>>,
) -> Pin<Box<dyn Stream<Item = ExecOutput> + Send>> {
    let output = output
        .take_while(|r| std::future::ready(r.is_ok()))
        .filter_map(|r| {
            std::future::ready(match r {
                Ok(LogOutput::StdOut { message } | LogOutput::Console { message }) => {
                    Some(ExecOutput::Stdout(message))
                }
                Ok(LogOutput::StdErr { message }) => Some(ExecOutput::Stderr(message)),
                _ => None,
            })
        });
    Box::pin(output)
}

/// Resizes the terminal of a container's main process through the engine.
fn resize_container(docker: Docker, id: String) -> Resize {
    Box::new(move |width, height| {
        let (docker, id) = (docker.clone(), id.clone());
        Box::pin(async move {
            let size = ResizeContainerTTYOptions {
                h: i32::from(height),
                w: i32::from(width),
            };
            if let Err(e) = docker.resize_container_tty(&id, size).await {
                tracing::debug!(container = %id, error = %e, "resizing a container's terminal failed");
            }
        })
    })
}

/// Resizes the terminal of an exec through the engine.
fn resize(docker: Docker, exec_id: String) -> Resize {
    Box::new(move |width, height| {
        let (docker, exec_id) = (docker.clone(), exec_id.clone());
        Box::pin(async move {
            let size = ResizeExecOptions { height, width };
            if let Err(e) = docker.resize_exec(&exec_id, size).await {
                tracing::debug!(exec = %exec_id, error = %e, "resizing an exec's terminal failed");
            }
        })
    })
}

/// The exit code of a finished exec, waiting briefly for the engine to see the process end.
async fn exit_code(docker: Docker, exec_id: String) -> Option<i64> {
    let poll = async {
        loop {
            match docker.inspect_exec(&exec_id).await {
                Ok(r) if r.running == Some(true) => {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                Ok(r) => return r.exit_code,
                Err(e) => {
                    tracing::debug!(exec = %exec_id, error = %e, "inspecting an exec failed");
                    return None;
                }
            }
        }
    };
    tokio::time::timeout(EXIT_CODE_DEADLINE, poll)
        .await
        .ok()
        .flatten()
}
