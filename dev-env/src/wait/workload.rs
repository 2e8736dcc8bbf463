//! Waiting for a Deployment (directly, or the one a WorkerPool owns) to run
//! what was pushed, driven by watches on the Deployment, its ReplicaSets and
//! its pods. Done means, all at once:
//!
//! - kubectl's rule: `observedGeneration >= generation`, no
//!   `ProgressDeadlineExceeded`, `updatedReplicas >= spec.replicas`,
//!   `replicas <= updatedReplicas`, `availableReplicas >= updatedReplicas`;
//! - no pod of an older ReplicaSet is left, not even a terminating one;
//! - the new ReplicaSet (the one whose revision is the Deployment's) has at
//!   least `spec.replicas` Ready, non-terminating pods, and each reports the
//!   wanted digest in the named container's `imageID` (digest part only).
//!
//! A pod of the new ReplicaSet stuck on a reason that will not fix itself
//! (`ErrImagePull`, `CrashLoopBackOff`, …) fails the wait at once, with the
//! pod, container, reason, message and its last log lines.

use std::{collections::BTreeMap, fmt, time::Duration};

use futures::{StreamExt, stream::BoxStream};
use k8s_openapi::api::{
    apps::v1::{Deployment, ReplicaSet},
    core::v1::Pod,
};
use kube::{
    Api, Client, ResourceExt,
    api::{DynamicObject, LogParams},
    discovery::ApiResource,
    runtime::{
        WatchStreamExt,
        reflector::{self, Store},
        watcher,
    },
};
use serde_json::Value;
use tokio::time::Instant;

/// Waiting reasons that fail a rollout at once.
pub const FATAL_REASONS: &[&str] = &[
    "ErrImagePull",
    "ImagePullBackOff",
    "InvalidImageName",
    "CrashLoopBackOff",
    "CreateContainerConfigError",
    "CreateContainerError",
];

/// Log lines shown with a failing pod.
const LOG_LINES: i64 = 20;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(
        "pod {namespace}/{pod} container `{container}`: {reason}: {message}{}",
        logs.as_ref().map(|l| format!("\nlast log lines:\n{l}")).unwrap_or_default()
    )]
    PodFailed {
        namespace: String,
        pod: String,
        container: String,
        reason: String,
        message: String,
        logs: Option<String>,
    },
    #[error("{namespace}/{name} exceeded its progress deadline: {message}")]
    ProgressDeadline {
        namespace: String,
        name: String,
        message: String,
    },
    #[error("{what} was deleted while waiting")]
    Deleted { what: String },
    #[error("timed out after {}s waiting for {what}; last observed:\n{last}", timeout.as_secs())]
    Timeout {
        what: String,
        timeout: Duration,
        last: String,
    },
    #[error("reading {what}: {}", crate::apply::api_error(error))]
    Api { what: String, error: kube::Error },
}

/// What to wait for.
#[derive(Debug, Clone)]
pub struct Want {
    pub namespace: String,
    /// The Deployment's name.
    pub deployment: String,
    /// The container whose image is checked.
    pub container: String,
    /// `sha256:<hex>` every new pod must run; `None` waits for the rollout
    /// only (a restart).
    pub digest: Option<String>,
}

/// How the wait ended.
#[derive(Debug, Clone)]
pub struct Done {
    /// The Ready pods of the new ReplicaSet.
    pub pods: Vec<String>,
    /// When the wait saw the last condition hold.
    pub at: Instant,
    /// The latest `Ready` transition among those pods, as the API reported it.
    pub last_ready: Option<String>,
}

/// Waits for the Deployment of `want` to complete with `want.digest`.
pub async fn deployment(client: &Client, want: &Want, timeout: Duration) -> Result<Done, Error> {
    let deadline = Instant::now() + timeout;
    let what = format!("deployment {}/{}", want.namespace, want.deployment);
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &want.namespace);
    let api_err = |source| Error::Api {
        what: what.clone(),
        error: source,
    };
    // The selector is immutable, so the pod and ReplicaSet watches can be
    // set up from one read.
    let first = match tokio::time::timeout_at(deadline, wait_exists(&deployments, &want.deployment))
        .await
    {
        Ok(result) => result.map_err(api_err)?,
        Err(_) => {
            return Err(Error::Timeout {
                what,
                timeout,
                last: String::from("the deployment does not exist"),
            });
        }
    };
    let selector = selector_of(&first);

    let (deploy_store, deploy_events) = watch(
        deployments,
        watcher::Config::default().fields(&format!("metadata.name={}", want.deployment)),
    );
    let (rs_store, rs_events) = watch(
        Api::<ReplicaSet>::namespaced(client.clone(), &want.namespace),
        watcher::Config::default().labels(&selector),
    );
    let (pod_store, pod_events) = watch(
        Api::<Pod>::namespaced(client.clone(), &want.namespace),
        watcher::Config::default().labels(&selector),
    );
    let mut events = futures::stream::select_all([deploy_events, rs_events, pod_events]);

    let pods_api: Api<Pod> = Api::namespaced(client.clone(), &want.namespace);
    let mut last = String::from("nothing observed yet");
    let mut seen_deployment = false;
    loop {
        let tick = tokio::time::timeout_at(deadline, events.next()).await;
        match tick {
            Err(_) | Ok(None) => {
                return Err(Error::Timeout {
                    what,
                    timeout,
                    last,
                });
            }
            Ok(Some(_)) => {}
        }
        let Some(deploy) =
            deploy_store.get(&reflector::ObjectRef::new(&want.deployment).within(&want.namespace))
        else {
            if seen_deployment {
                return Err(Error::Deleted { what });
            }
            continue;
        };
        seen_deployment = true;
        let verdict = evaluate(&deploy, &rs_store.state(), &pod_store.state(), want);
        last = verdict.to_string();
        match verdict {
            Verdict::Done { pods, last_ready } => {
                return Ok(Done {
                    pods,
                    at: Instant::now(),
                    last_ready,
                });
            }
            Verdict::Pending(_) => {}
            Verdict::ProgressDeadline(message) => {
                return Err(Error::ProgressDeadline {
                    namespace: want.namespace.clone(),
                    name: want.deployment.clone(),
                    message,
                });
            }
            Verdict::PodFailed {
                pod,
                container,
                reason,
                message,
            } => {
                let params = LogParams {
                    container: Some(container.clone()),
                    tail_lines: Some(LOG_LINES),
                    ..LogParams::default()
                };
                let logs = pods_api
                    .logs(&pod, &params)
                    .await
                    .ok()
                    .filter(|l| !l.trim().is_empty());
                return Err(Error::PodFailed {
                    namespace: want.namespace.clone(),
                    pod,
                    container,
                    reason,
                    message,
                    logs,
                });
            }
        }
    }
}

/// A Deployment's `matchLabels` as a label selector.
pub fn selector_of(deploy: &Deployment) -> String {
    let labels = deploy.spec.selector.match_labels.iter().flatten();
    labels
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

async fn wait_exists(api: &Api<Deployment>, name: &str) -> Result<Deployment, kube::Error> {
    let mut stream = watcher(
        api.clone(),
        watcher::Config::default().fields(&format!("metadata.name={name}")),
    )
    .applied_objects()
    .boxed();
    while let Some(item) = stream.next().await {
        match item {
            Ok(deploy) => return Ok(deploy),
            // The watcher retries on its own; errors here are transient.
            Err(_) => continue,
        }
    }
    api.get(name).await
}

type Events = BoxStream<'static, ()>;

/// A reflector over `api`: its store, and a stream that yields once per
/// change. Watch errors are retried with backoff by the watcher.
fn watch<K>(api: Api<K>, config: watcher::Config) -> (Store<K>, Events)
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let (reader, writer) = reflector::store();
    let stream = reflector::reflector(writer, watcher(api, config).default_backoff())
        .map(|_| ())
        .boxed();
    (reader, stream)
}

/// One look at the rollout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Done {
        pods: Vec<String>,
        last_ready: Option<String>,
    },
    Pending(String),
    ProgressDeadline(String),
    PodFailed {
        pod: String,
        container: String,
        reason: String,
        message: String,
    },
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Verdict::Done { pods, .. } => write!(f, "done: {} pods ready", pods.len()),
            Verdict::Pending(why) => f.write_str(why),
            Verdict::ProgressDeadline(message) => {
                write!(f, "progress deadline exceeded: {message}")
            }
            Verdict::PodFailed {
                pod,
                container,
                reason,
                message,
            } => {
                write!(f, "pod {pod} container {container}: {reason}: {message}")
            }
        }
    }
}

const REVISION: &str = "deployment.kubernetes.io/revision";

/// Decides from what the watches hold. Pure, so it is tested on fixtures.
pub fn evaluate(
    deploy: &Deployment,
    replica_sets: &[std::sync::Arc<ReplicaSet>],
    pods: &[std::sync::Arc<Pod>],
    want: &Want,
) -> Verdict {
    let spec_replicas = deploy.spec.replicas.unwrap_or(1);
    let status = deploy.status.clone().unwrap_or_default();
    let generation = deploy.metadata.generation.unwrap_or(0);
    let observed = status.observed_generation.unwrap_or(0);
    if observed < generation {
        return Verdict::Pending(format!(
            "waiting for the deployment spec update to be observed (generation {generation}, observed {observed})"
        ));
    }
    if let Some(cond) = status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_.as_deref() == Some("Progressing"))
        && cond.reason.as_deref() == Some("ProgressDeadlineExceeded")
    {
        return Verdict::ProgressDeadline(cond.message.clone().unwrap_or_default());
    }
    let revision = deploy.annotations().get(REVISION);
    let uid = deploy.metadata.uid.as_deref();
    let new_rs = replica_sets.iter().find(|rs| {
        rs.annotations().get(REVISION) == revision
            && rs
                .owner_references()
                .iter()
                .any(|o| Some(o.uid.as_str()) == uid && o.controller == Some(true))
    });
    let Some(new_rs) = new_rs else {
        return Verdict::Pending(format!(
            "waiting for the new ReplicaSet (revision {})",
            revision.map_or("?", |r| r)
        ));
    };
    let hash = new_rs
        .labels()
        .get("pod-template-hash")
        .cloned()
        .unwrap_or_default();
    let new_pods: Vec<&Pod> = pods
        .iter()
        .map(AsRef::as_ref)
        .filter(|p| {
            p.labels().get("pod-template-hash") == Some(&hash)
                && p.metadata.deletion_timestamp.is_none()
        })
        .collect();
    for pod in &new_pods {
        let statuses = pod.status.iter().flat_map(|s| {
            s.init_container_statuses
                .iter()
                .flatten()
                .chain(s.container_statuses.iter().flatten())
        });
        for cs in statuses {
            if let Some(waiting) = cs.state.as_ref().and_then(|s| s.waiting.as_ref())
                && let Some(reason) = waiting.reason.as_deref()
                && FATAL_REASONS.contains(&reason)
            {
                return Verdict::PodFailed {
                    pod: pod.name_any(),
                    container: cs.name.clone(),
                    reason: reason.to_string(),
                    message: waiting.message.clone().unwrap_or_default(),
                };
            }
        }
    }

    let updated = status.updated_replicas.unwrap_or(0);
    let replicas = status.replicas.unwrap_or(0);
    let available = status.available_replicas.unwrap_or(0);
    let name = deploy.name_any();
    if updated < spec_replicas {
        return Verdict::Pending(format!(
            "{name}: {updated} out of {spec_replicas} new replicas have been updated"
        ));
    }
    if replicas > updated {
        return Verdict::Pending(format!(
            "{name}: {} old replicas are pending termination",
            replicas - updated
        ));
    }
    if available < updated {
        return Verdict::Pending(format!(
            "{name}: {available} of {updated} updated replicas are available"
        ));
    }

    let mut ready = Vec::new();
    let mut last_ready: Option<String> = None;
    let mut waiting_on = BTreeMap::new();
    for pod in &new_pods {
        let ready_cond = pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| c.iter().find(|c| c.type_ == "Ready"));
        if ready_cond.map(|c| c.status.as_str()) != Some("True") {
            waiting_on.insert(pod.name_any(), String::from("not Ready"));
            continue;
        }
        if let Some(want_digest) = &want.digest {
            let image_id = pod
                .status
                .as_ref()
                .and_then(|s| s.container_statuses.as_ref())
                .and_then(|cs| cs.iter().find(|c| c.name == want.container))
                .map(|c| c.image_id.clone())
                .unwrap_or_default();
            if digest_of(&image_id) != Some(want_digest.as_str()) {
                let runs = if image_id.is_empty() {
                    String::from("no imageID yet")
                } else {
                    image_id
                };
                waiting_on.insert(pod.name_any(), format!("runs {runs}, not {want_digest}"));
                continue;
            }
        }
        let at = ready_cond
            .and_then(|c| c.last_transition_time.as_ref())
            .map(|t| t.0.to_string());
        if at > last_ready {
            last_ready = at;
        }
        ready.push(pod.name_any());
    }
    if (ready.len() as i32) < spec_replicas {
        let detail: Vec<String> = waiting_on
            .iter()
            .map(|(p, why)| format!("{p}: {why}"))
            .collect();
        return Verdict::Pending(format!(
            "{name}: {} of {spec_replicas} pods of ReplicaSet {} ready with the pushed image{}{}",
            ready.len(),
            new_rs.name_any(),
            if detail.is_empty() { "" } else { "; " },
            detail.join("; ")
        ));
    }
    // Old pods count as gone for kubectl once they terminate; the pushed
    // code is the only code running only once they have stopped.
    let mut old: Vec<String> = pods
        .iter()
        .filter(|p| p.labels().get("pod-template-hash") != Some(&hash))
        .map(|p| p.name_any())
        .collect();
    if !old.is_empty() {
        old.sort();
        return Verdict::Pending(format!(
            "{name}: {} old pod(s) still terminating: {}",
            old.len(),
            old.join(", ")
        ));
    }

    ready.sort();
    Verdict::Done {
        pods: ready,
        last_ready,
    }
}

/// The `sha256:<hex>` part of an `imageID` such as
/// `reg:5000/demo/worker@sha256:…` or a bare `sha256:…`.
pub fn digest_of(image_id: &str) -> Option<&str> {
    let start = image_id.rfind("sha256:")?;
    Some(&image_id[start..])
}

/// Waits for a WorkerPool to report `observedGeneration >= generation`
/// with `Available=True` and `Progressing=False`: the controller's verdict
/// on the rollout that `generation` asked for.
pub async fn worker_pool(
    client: &Client,
    resource: &ApiResource,
    namespace: &str,
    name: &str,
    generation: i64,
    timeout: Duration,
) -> Result<(), Error> {
    let what = format!(
        "{} {namespace}/{name} (generation {generation})",
        resource.kind
    );
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, resource);
    let mut stream = watcher(
        api,
        watcher::Config::default().fields(&format!("metadata.name={name}")),
    )
    .default_backoff()
    .applied_objects()
    .boxed();
    let deadline = Instant::now() + timeout;
    let mut last = String::from("nothing observed yet");
    loop {
        match tokio::time::timeout_at(deadline, stream.next()).await {
            Err(_) | Ok(None) => {
                return Err(Error::Timeout {
                    what,
                    timeout,
                    last,
                });
            }
            Ok(Some(Err(_))) => continue,
            Ok(Some(Ok(pool))) => {
                // The controller reports a Deployment that ran out of time as
                // Progressing with that reason: fail at once.
                if let Some(message) = progress_deadline_exceeded(&pool.data) {
                    return Err(Error::ProgressDeadline {
                        namespace: namespace.to_string(),
                        name: name.to_string(),
                        message,
                    });
                }
                let (done, seen) = pool_converged(&pool.data, generation);
                last = seen;
                if done {
                    return Ok(());
                }
            }
        }
    }
}

/// The message of a `Progressing` condition whose reason is
/// `ProgressDeadlineExceeded`, if there is one.
pub fn progress_deadline_exceeded(data: &Value) -> Option<String> {
    data.pointer("/status/conditions")?
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Progressing" && c["reason"] == "ProgressDeadlineExceeded")
        .map(|c| c["message"].as_str().unwrap_or_default().to_string())
}

/// Whether a WorkerPool's status says the rollout of `generation` is
/// complete, and what it says.
pub fn pool_converged(data: &Value, generation: i64) -> (bool, String) {
    let observed = data
        .pointer("/status/observedGeneration")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    let condition = |kind: &str| {
        data.pointer("/status/conditions")
            .and_then(Value::as_array)
            .and_then(|c| c.iter().find(|c| c["type"] == kind))
            .map(|c| {
                (
                    c["status"].as_str().unwrap_or("").to_string(),
                    c["message"].as_str().unwrap_or("").to_string(),
                )
            })
    };
    let available = condition("Available");
    let progressing = condition("Progressing");
    let show = |c: &Option<(String, String)>| {
        c.as_ref()
            .map_or(String::from("unset"), |(s, m)| format!("{s} ({m})"))
    };
    let seen = format!(
        "observedGeneration {observed} (want >= {generation}), Available {}, Progressing {}",
        show(&available),
        show(&progressing)
    );
    let done = observed >= generation
        && available.as_ref().is_some_and(|(s, _)| s == "True")
        && progressing.as_ref().is_some_and(|(s, _)| s == "False");
    (done, seen)
}

#[cfg(test)]
mod tests;
