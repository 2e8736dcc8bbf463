//! Whether the node container is alive, for waits and for commands whose
//! API calls fail. A killed node can leave a watch hanging instead of
//! failing it, and its API then only says "connection refused": the
//! container's state says what happened and what to do.

use std::fmt;

use bollard::{Docker, models::ContainerState};

use crate::{
    config::{Config, Provider},
    docker,
};

/// How often a wait looks at the node while it waits.
pub const PROBE_INTERVAL: std::time::Duration = std::time::Duration::from_secs(2);

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("the node {container} is not running ({state}); `cargo xtask dev up` restarts it")]
    NotRunning { container: String, state: String },
    #[error("the node {container} is paused; `docker unpause {container}` resumes it")]
    Paused { container: String },
    #[error("the node {container} does not exist; `cargo xtask dev up` creates it")]
    Missing { container: String },
    #[error("cannot tell whether the node {container} is running")]
    Inspect {
        container: String,
        #[source]
        source: docker::Error,
    },
    #[error("cannot reach the Kubernetes API; {hint}")]
    Unreachable {
        hint: String,
        #[source]
        source: kube::Error,
    },
}

impl Error {
    /// Whether the node is known to be down (stopped, killed or removed),
    /// so nothing that needs its API can succeed until it is started again.
    pub fn is_down(&self) -> bool {
        matches!(
            self,
            Error::NotRunning { .. } | Error::Paused { .. } | Error::Missing { .. }
        )
    }
}

/// The node container of an environment, looked at through the engine.
#[derive(Clone)]
pub struct NodeProbe {
    pub docker: Docker,
    pub container: String,
}

impl fmt::Debug for NodeProbe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NodeProbe")
            .field("container", &self.container)
            .finish_non_exhaustive()
    }
}

impl NodeProbe {
    /// The probe of `config`'s node; `None` for `provider: existing`, which
    /// has no node container.
    pub async fn for_config(config: &Config) -> Result<Option<NodeProbe>, docker::Error> {
        if config.cluster.provider == Provider::Existing {
            return Ok(None);
        }
        Ok(Some(NodeProbe {
            docker: docker::connect().await?,
            container: config.node_name(),
        }))
    }

    /// `Ok` while the container runs; why not otherwise.
    pub async fn check(&self) -> Result<(), Error> {
        let inspected = docker::inspect_container(&self.docker, &self.container)
            .await
            .map_err(|source| Error::Inspect {
                container: self.container.clone(),
                source,
            })?;
        let Some(inspected) = inspected else {
            return Err(Error::Missing {
                container: self.container.clone(),
            });
        };
        let container = self.container.clone();
        match inspected.state.as_ref().and_then(not_running) {
            None => Ok(()),
            Some(state) if state == PAUSED => Err(Error::Paused { container }),
            Some(state) => Err(Error::NotRunning { container, state }),
        }
    }
}

/// What [`not_running`] says of a paused container.
const PAUSED: &str = "paused";

/// What a container's state says when it does not run (`exited 137`,
/// `paused`, …); `None` while it runs.
pub fn not_running(state: &ContainerState) -> Option<String> {
    if state.running == Some(true) && state.paused != Some(true) && state.restarting != Some(true) {
        return None;
    }
    if state.paused == Some(true) {
        return Some(String::from(PAUSED));
    }
    if state.restarting == Some(true) {
        return Some(String::from("restarting"));
    }
    let status = state
        .status
        .map(|s| s.to_string())
        .unwrap_or_else(|| String::from("unknown state"));
    Some(match (status.as_str(), state.exit_code) {
        ("exited" | "dead", Some(code)) => format!("exited {code}"),
        ("created", _) => String::from("created, never started"),
        _ => status,
    })
}

/// Whether an API call failed before the server answered: the connection
/// was refused or reset, TLS failed, or a timeout passed.
pub fn is_unreachable(err: &kube::Error) -> bool {
    matches!(
        err,
        kube::Error::HyperError(_) | kube::Error::Service(_) | kube::Error::ReadEvents(_)
    )
}

/// Why the API of `config`'s cluster cannot be reached (`err` being what
/// the client said): the node's state when there is a node and it is not
/// running, otherwise the client's error with where to look.
pub async fn explain_unreachable(config: &Config, err: kube::Error) -> Error {
    let hint = match (&config.cluster.provider, &config.cluster.context) {
        (Provider::Existing, context) => format!(
            "is the cluster of context `{}` up and reachable?",
            context.as_deref().unwrap_or("(current)")
        ),
        _ => {
            let container = config.node_name();
            match node_down(config).await {
                Some(down) => return down,
                None => format!(
                    "the node {container} is running; `docker logs {container}` shows why its API does not answer"
                ),
            }
        }
    };
    Error::Unreachable { hint, source: err }
}

/// The node of `config` when it is known to be down; `None` when it runs,
/// when there is no node (`provider: existing`), or when the engine cannot
/// say.
pub async fn node_down(config: &Config) -> Option<Error> {
    let probe = NodeProbe::for_config(config).await.ok()??;
    probe.check().await.err().filter(Error::is_down)
}

#[cfg(test)]
mod tests {
    use bollard::models::ContainerStateStatusEnum;

    use super::*;

    fn state(status: ContainerStateStatusEnum, running: bool, code: i64) -> ContainerState {
        ContainerState {
            status: Some(status),
            running: Some(running),
            paused: Some(false),
            restarting: Some(false),
            exit_code: Some(code),
            ..ContainerState::default()
        }
    }

    #[test]
    fn a_container_state_says_why_the_node_is_not_running() {
        assert_eq!(
            not_running(&state(ContainerStateStatusEnum::RUNNING, true, 0)),
            None
        );
        assert_eq!(
            not_running(&state(ContainerStateStatusEnum::EXITED, false, 137)).as_deref(),
            Some("exited 137")
        );
        assert_eq!(
            not_running(&state(ContainerStateStatusEnum::CREATED, false, 0)).as_deref(),
            Some("created, never started")
        );
        let mut paused = state(ContainerStateStatusEnum::PAUSED, true, 0);
        paused.paused = Some(true);
        assert_eq!(not_running(&paused).as_deref(), Some("paused"));
    }

    #[test]
    fn the_not_running_message_names_the_node_and_the_fix() {
        let err = Error::NotRunning {
            container: String::from("demo-server-0"),
            state: String::from("exited 137"),
        };
        assert_eq!(
            err.to_string(),
            "the node demo-server-0 is not running (exited 137); `cargo xtask dev up` restarts it"
        );
        assert!(err.is_down());
        let missing = Error::Missing {
            container: String::from("demo-server-0"),
        };
        assert!(missing.to_string().contains("does not exist"));
    }

    #[test]
    fn connection_failures_are_unreachable_and_answers_are_not() {
        let refused = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        assert!(is_unreachable(&kube::Error::Service(Box::new(refused))));
        let reset = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "reset");
        assert!(is_unreachable(&kube::Error::ReadEvents(reset)));
        let forbidden = kube::core::Status::failure("no", "Forbidden").with_code(403);
        assert!(!is_unreachable(&kube::Error::Api(forbidden.boxed())));
    }
}
