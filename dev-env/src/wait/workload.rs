//! Waiting for a Deployment (directly, or the one a WorkerPool owns) to run
//! what was pushed, driven by watches on the Deployment, its ReplicaSets and
//! its pods. Done means, all at once:
//!
//! - kubectl's rule: `observedGeneration >= generation`, no
//!   `ProgressDeadlineExceeded`, `updatedReplicas >= spec.replicas`,
//!   `replicas <= updatedReplicas`, `availableReplicas >= updatedReplicas`;
//! - no pod of an older ReplicaSet is Ready without a `deletionTimestamp`
//!   (with [`Termination::Gone`], none is left at all);
//! - the new ReplicaSet (the one whose revision is the Deployment's) has at
//!   least `spec.replicas` Ready, non-terminating pods, and each reports the
//!   wanted digest in the named container's `imageID` (digest part only).
//!
//! A pod of the new ReplicaSet stuck on a reason that will not fix itself
//! (`ErrImagePull`, `CrashLoopBackOff`, …) fails the wait at once, with the
//! pod, container, reason, message and its last log lines.
//!
//! A pod of the new ReplicaSet that does not start (unscheduled, or stuck
//! in `ContainerCreating`) for longer than the pending grace fails the wait
//! with its conditions and Events (`pending`). Watch errors and a node that
//! stops running end the wait early too (`watch`).

mod pending;
mod watch;

use std::{collections::BTreeMap, fmt, time::Duration};

use futures::stream::SelectAll;
use k8s_openapi::{
    api::{
        apps::v1::{Deployment, ReplicaSet},
        core::v1::Pod,
    },
    jiff::Timestamp,
};
use kube::{
    Api, Client, ResourceExt,
    api::{DynamicObject, LogParams},
    discovery::ApiResource,
    runtime::{reflector::ObjectRef, watcher},
};
use serde_json::Value;
use tokio::time::Instant;

use self::watch::{Events, Watching, watch};
pub use self::{
    pending::{Unstarted, format_events, not_started, pending_for},
    watch::{Class, classify, hint},
};
use crate::wait::node::{self, NodeProbe};

/// Waiting reasons that fail a rollout at once.
pub const FATAL_REASONS: &[&str] = &[
    "ErrImagePull",
    "ImagePullBackOff",
    "InvalidImageName",
    "CrashLoopBackOff",
    "CreateContainerConfigError",
    "CreateContainerError",
];

/// How long a pod of the new ReplicaSet may stay unscheduled or in
/// `ContainerCreating` before the wait fails.
pub const DEFAULT_PENDING_GRACE: Duration = Duration::from_secs(60);

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
    #[error(
        "pod {namespace}/{pod} has not started after {} (the grace is {}s); fix what its events name, or give pods longer to start\nstate: {state}\nconditions: {conditions}\n{events}",
        crate::wait::Elapsed(*pending), grace.as_secs()
    )]
    PodPending {
        namespace: String,
        pod: String,
        pending: Duration,
        grace: Duration,
        state: String,
        conditions: String,
        events: String,
    },
    #[error("{namespace}/{name} exceeded its progress deadline: {message}")]
    ProgressDeadline {
        namespace: String,
        name: String,
        message: String,
    },
    #[error("{what} was deleted while waiting")]
    Deleted { what: String },
    #[error(
        "timed out after {}s waiting for {what}; last observed:\n{last}{}\nwhen it is only slow, give it longer with `--timeout`; `cargo xtask dev logs <component>` shows what the pods say",
        timeout.as_secs(),
        last_error.as_ref().map(|e| format!("\nlast watch error: {e}")).unwrap_or_default()
    )]
    Timeout {
        what: String,
        timeout: Duration,
        last: String,
        last_error: Option<String>,
    },
    #[error("watching {resource}: {message}; {hint}")]
    Watch {
        resource: String,
        message: String,
        hint: &'static str,
        #[source]
        source: watcher::Error,
    },
    #[error(transparent)]
    Node(#[from] node::Error),
}

/// How a wait runs.
#[derive(Debug, Clone)]
pub struct WaitOptions {
    /// When the wait gives up.
    pub timeout: Duration,
    /// How long a pod may stay unscheduled or in `ContainerCreating`.
    pub pending_grace: Duration,
    /// The node container to watch while waiting; `None` when the cluster
    /// has none (`provider: existing`).
    pub node: Option<NodeProbe>,
}

impl WaitOptions {
    /// `timeout`, the default pending grace, and no node.
    pub fn new(timeout: Duration) -> WaitOptions {
        WaitOptions {
            timeout,
            pending_grace: DEFAULT_PENDING_GRACE,
            node: None,
        }
    }

    /// The same options, with `pending_grace`.
    pub fn with_grace(self, pending_grace: Duration) -> WaitOptions {
        WaitOptions {
            pending_grace,
            ..self
        }
    }

    /// The same options, watching `node`.
    pub fn with_node(self, node: Option<NodeProbe>) -> WaitOptions {
        WaitOptions { node, ..self }
    }
}

/// What to wait for.
#[derive(Debug, Clone, Default)]
pub struct Want {
    pub namespace: String,
    /// The Deployment's name.
    pub deployment: String,
    /// The container whose image is checked.
    pub container: String,
    /// `sha256:<hex>` every new pod must run; `None` waits for the rollout
    /// only (a restart).
    pub digest: Option<String>,
    /// Whether old pods that are terminating still hold the wait.
    pub termination: Termination,
}

/// What the wait asks of the old ReplicaSets' pods.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Termination {
    /// Done once none of them is Ready without a `deletionTimestamp`: a
    /// terminating pod has left the Service's endpoints and gets no new
    /// traffic, as `kubectl rollout status` has it.
    #[default]
    Serving,
    /// Done only once they are all gone (`--wait-for-termination`).
    Gone,
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
    /// Pods of older ReplicaSets still terminating when the wait ended.
    pub terminating: Vec<String>,
}

/// Waits for the Deployment of `want` to complete with `want.digest`.
pub async fn deployment(
    client: &Client,
    want: &Want,
    options: &WaitOptions,
) -> Result<Done, Error> {
    let (ns, name) = (&want.namespace, &want.deployment);
    let mut w = Watching::new(format!("deployment {ns}/{name}"), options);
    let (deploy_store, deploy_events) = watch(
        Api::<Deployment>::namespaced(client.clone(), ns),
        watcher::Config::default().fields(&format!("metadata.name={name}")),
        format!("Deployment {ns}/{name}"),
        (),
    );
    let mut events: SelectAll<Events> = SelectAll::new();
    events.push(deploy_events);
    let key = ObjectRef::new(name).within(ns);
    w.last = String::from("the deployment does not exist");
    // The selector is immutable, so the pod and ReplicaSet watches are set
    // up from the first sight of the Deployment.
    let first = loop {
        w.next(&mut events).await?;
        if let Some(deploy) = deploy_store.get(&key) {
            break deploy;
        }
    };
    let selector = selector_of(&first);
    let (rs_store, rs_events) = watch(
        Api::<ReplicaSet>::namespaced(client.clone(), ns),
        watcher::Config::default().labels(&selector),
        format!("ReplicaSets in {ns} ({selector})"),
        (),
    );
    let (pod_store, pod_events) = watch(
        Api::<Pod>::namespaced(client.clone(), ns),
        watcher::Config::default().labels(&selector),
        format!("Pods in {ns} ({selector})"),
        (),
    );
    events.push(rs_events);
    events.push(pod_events);

    let mut clock = pending::Clock::default();
    loop {
        w.next(&mut events).await?;
        let Some(deploy) = deploy_store.get(&key) else {
            return Err(Error::Deleted {
                what: w.what().to_string(),
            });
        };
        let (replica_sets, pods) = (rs_store.state(), pod_store.state());
        let verdict = evaluate(&deploy, &replica_sets, &pods, want);
        w.last = verdict.to_string();
        match verdict {
            Verdict::Done {
                pods,
                last_ready,
                terminating,
            } => {
                return Ok(Done {
                    pods,
                    at: Instant::now(),
                    last_ready,
                    terminating,
                });
            }
            Verdict::Pending(_) => {
                let stuck = unstarted(&deploy, &replica_sets, &pods);
                let grace = options.pending_grace;
                if let Some((pod, pending)) =
                    clock.overdue(stuck, grace, Instant::now(), Timestamp::now())
                {
                    return Err(pod_pending(client, ns, pod, pending, grace).await);
                }
            }
            Verdict::ProgressDeadline(message) => {
                return Err(Error::ProgressDeadline {
                    namespace: ns.clone(),
                    name: name.clone(),
                    message,
                });
            }
            failed @ Verdict::PodFailed { .. } => {
                return Err(pod_failed(client, ns, failed).await);
            }
        }
    }
}

/// The error of a pod that did not start within the grace, with its events.
async fn pod_pending(
    client: &Client,
    namespace: &str,
    pod: Unstarted,
    pending: Duration,
    grace: Duration,
) -> Error {
    let events = pending::events_of(client, namespace, &pod.pod).await;
    Error::PodPending {
        namespace: namespace.to_string(),
        pod: pod.pod,
        pending,
        grace,
        state: pod.state,
        conditions: pod.conditions,
        events,
    }
}

/// The error of a pod stuck on a fatal reason, with its last log lines.
async fn pod_failed(client: &Client, namespace: &str, verdict: Verdict) -> Error {
    let Verdict::PodFailed {
        pod,
        container,
        reason,
        message,
    } = verdict
    else {
        unreachable!("called with a failed pod's verdict only");
    };
    let params = LogParams {
        container: Some(container.clone()),
        tail_lines: Some(LOG_LINES),
        ..LogParams::default()
    };
    let logs = Api::<Pod>::namespaced(client.clone(), namespace)
        .logs(&pod, &params)
        .await
        .ok()
        .filter(|l| !l.trim().is_empty());
    Error::PodFailed {
        namespace: namespace.to_string(),
        pod,
        container,
        reason,
        message,
        logs,
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

/// One look at the rollout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Done {
        pods: Vec<String>,
        last_ready: Option<String>,
        /// Old pods still terminating.
        terminating: Vec<String>,
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
    let Some(new_rs) = new_replica_set(deploy, replica_sets) else {
        return Verdict::Pending(format!(
            "waiting for the new ReplicaSet (revision {})",
            deploy.annotations().get(REVISION).map_or("?", |r| r)
        ));
    };
    let hash = template_hash(new_rs);
    let new_pods = pods_of(&hash, pods);
    if let Some(failed) = fatal_waiting(&new_pods) {
        return failed;
    }
    let name = deploy.name_any();
    if let Some(pending) = counts_pending(&name, spec_replicas, &status) {
        return pending;
    }
    let (ready, last_ready, waiting_on) = ready_with_digest(&new_pods, want);
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
    let (serving, terminating) = old_pods(&hash, pods);
    if !serving.is_empty() {
        return Verdict::Pending(format!(
            "{name}: {} old pod(s) still Ready and not terminating: {}",
            serving.len(),
            serving.join(", ")
        ));
    }
    if want.termination == Termination::Gone && !terminating.is_empty() {
        return Verdict::Pending(format!(
            "{name}: {} old pod(s) still terminating: {}",
            terminating.len(),
            terminating.join(", ")
        ));
    }
    Verdict::Done {
        pods: ready,
        last_ready,
        terminating,
    }
}

/// The pods of older ReplicaSets (not of template `hash`), by name: those
/// still Ready without a `deletionTimestamp` (still serving), and those
/// terminating. Pods neither Ready nor terminating serve nothing.
fn old_pods(hash: &str, pods: &[std::sync::Arc<Pod>]) -> (Vec<String>, Vec<String>) {
    let old = pods
        .iter()
        .filter(|p| p.labels().get("pod-template-hash").map(String::as_str) != Some(hash));
    let (mut serving, mut terminating) = (Vec::new(), Vec::new());
    for pod in old {
        if pod.metadata.deletion_timestamp.is_some() {
            terminating.push(pod.name_any());
        } else if is_ready(pod) {
            serving.push(pod.name_any());
        }
    }
    serving.sort();
    terminating.sort();
    (serving, terminating)
}

fn is_ready(pod: &Pod) -> bool {
    pod.status
        .iter()
        .flat_map(|s| s.conditions.iter().flatten())
        .any(|c| c.type_ == "Ready" && c.status == "True")
}

/// The first container of `new_pods` waiting on a reason in
/// [`FATAL_REASONS`], as a verdict.
fn fatal_waiting(new_pods: &[&Pod]) -> Option<Verdict> {
    for pod in new_pods {
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
                return Some(Verdict::PodFailed {
                    pod: pod.name_any(),
                    container: cs.name.clone(),
                    reason: reason.to_string(),
                    message: waiting.message.clone().unwrap_or_default(),
                });
            }
        }
    }

    None
}

/// kubectl's rule on the Deployment's counts; `None` once it holds.
fn counts_pending(
    name: &str,
    spec_replicas: i32,
    status: &k8s_openapi::api::apps::v1::DeploymentStatus,
) -> Option<Verdict> {
    let updated = status.updated_replicas.unwrap_or(0);
    let replicas = status.replicas.unwrap_or(0);
    let available = status.available_replicas.unwrap_or(0);
    if updated < spec_replicas {
        return Some(Verdict::Pending(format!(
            "{name}: {updated} out of {spec_replicas} new replicas have been updated"
        )));
    }
    if replicas > updated {
        return Some(Verdict::Pending(format!(
            "{name}: {} old replicas are pending termination",
            replicas - updated
        )));
    }
    if available < updated {
        return Some(Verdict::Pending(format!(
            "{name}: {available} of {updated} updated replicas are available"
        )));
    }

    None
}

/// The Ready pods among `new_pods` that run the wanted digest (sorted),
/// the latest `Ready` transition among them, and why each other is not.
fn ready_with_digest(
    new_pods: &[&Pod],
    want: &Want,
) -> (Vec<String>, Option<String>, BTreeMap<String, String>) {
    let mut ready = Vec::new();
    let mut last_ready: Option<String> = None;
    let mut waiting_on = BTreeMap::new();
    for pod in new_pods {
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
    ready.sort();
    (ready, last_ready, waiting_on)
}

/// The Deployment's ReplicaSet for its current revision, once it exists.
fn new_replica_set<'a>(
    deploy: &Deployment,
    replica_sets: &'a [std::sync::Arc<ReplicaSet>],
) -> Option<&'a ReplicaSet> {
    let revision = deploy.annotations().get(REVISION);
    let uid = deploy.metadata.uid.as_deref();
    replica_sets.iter().map(AsRef::as_ref).find(|rs| {
        rs.annotations().get(REVISION) == revision
            && rs
                .owner_references()
                .iter()
                .any(|o| Some(o.uid.as_str()) == uid && o.controller == Some(true))
    })
}

fn template_hash(rs: &ReplicaSet) -> String {
    rs.labels()
        .get("pod-template-hash")
        .cloned()
        .unwrap_or_default()
}

/// The non-terminating pods of the ReplicaSet whose template hash is `hash`.
fn pods_of<'a>(hash: &str, pods: &'a [std::sync::Arc<Pod>]) -> Vec<&'a Pod> {
    pods.iter()
        .map(AsRef::as_ref)
        .filter(|p| {
            p.labels().get("pod-template-hash").map(String::as_str) == Some(hash)
                && p.metadata.deletion_timestamp.is_none()
        })
        .collect()
}

/// The pods of the new ReplicaSet that have not started (see
/// [`not_started`]). Pure, so it is tested on fixtures.
pub fn unstarted(
    deploy: &Deployment,
    replica_sets: &[std::sync::Arc<ReplicaSet>],
    pods: &[std::sync::Arc<Pod>],
) -> Vec<Unstarted> {
    let Some(new_rs) = new_replica_set(deploy, replica_sets) else {
        return Vec::new();
    };
    pods_of(&template_hash(new_rs), pods)
        .into_iter()
        .filter_map(not_started)
        .collect()
}

/// The `sha256:<hex>` part of an `imageID` such as
/// `reg:5000/demo/worker@sha256:…` or a bare `sha256:…`.
pub fn digest_of(image_id: &str) -> Option<&str> {
    let start = image_id.rfind("sha256:")?;
    Some(&image_id[start..])
}

/// A WorkerPool and the generation its controller must reach.
#[derive(Debug, Clone, Copy)]
pub struct PoolAt<'a> {
    pub resource: &'a ApiResource,
    pub namespace: &'a str,
    pub name: &'a str,
    pub generation: i64,
}

/// What a wait on a WorkerPool waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PoolGoal {
    /// The controller has observed the generation: from then on the
    /// Deployment it owns carries that generation's template, so a wait on
    /// the Deployment cannot mistake the previous rollout for this one.
    Observed,
    /// `observedGeneration >= generation` with `Available=True` and
    /// `Progressing=False`: the controller's verdict on the rollout that
    /// the generation asked for.
    Converged,
}

/// Waits for `pool` to reach `goal`, failing at once on a progress
/// deadline.
pub async fn worker_pool(
    client: &Client,
    pool: PoolAt<'_>,
    goal: PoolGoal,
    options: &WaitOptions,
) -> Result<(), Error> {
    let done = match goal {
        PoolGoal::Observed => pool_observed,
        PoolGoal::Converged => pool_converged,
    };
    watch_pool(client, &pool, options, done).await
}

/// Watches a WorkerPool until `done` says so, failing at once on a
/// progress deadline.
async fn watch_pool(
    client: &Client,
    pool: &PoolAt<'_>,
    options: &WaitOptions,
    done: fn(&Value, i64) -> (bool, String),
) -> Result<(), Error> {
    let PoolAt {
        resource,
        namespace,
        name,
        generation,
    } = *pool;
    let kind = &resource.kind;
    let mut w = Watching::new(
        format!("{kind} {namespace}/{name} (generation {generation})"),
        options,
    );
    let (store, pool_events) = watch(
        Api::<DynamicObject>::namespaced_with(client.clone(), namespace, resource),
        watcher::Config::default().fields(&format!("metadata.name={name}")),
        format!("{kind} {namespace}/{name}"),
        resource.clone(),
    );
    let mut events: SelectAll<Events> = SelectAll::new();
    events.push(pool_events);
    let key = ObjectRef::new_with(name, resource.clone()).within(namespace);
    loop {
        w.next(&mut events).await?;
        let Some(pool) = store.get(&key) else {
            w.last = format!("the {kind} does not exist");
            continue;
        };
        // The controller reports a Deployment that ran out of time as
        // Progressing with that reason: fail at once.
        if let Some(message) = progress_deadline_exceeded(&pool.data) {
            return Err(Error::ProgressDeadline {
                namespace: namespace.to_string(),
                name: name.to_string(),
                message,
            });
        }
        let (finished, seen) = done(&pool.data, generation);
        w.last = seen;
        if finished {
            return Ok(());
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

/// Whether a WorkerPool's controller has observed `generation`, and what
/// its status says.
pub fn pool_observed(data: &Value, generation: i64) -> (bool, String) {
    let observed = data
        .pointer("/status/observedGeneration")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    (
        observed >= generation,
        format!("observedGeneration {observed} (want >= {generation})"),
    )
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
