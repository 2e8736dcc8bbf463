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
//! with its conditions and Events (`pending`); one the scheduler finds no
//! node for (`Unschedulable`) fails sooner, after [`UNSCHEDULABLE_GRACE`],
//! with the scheduler's message. Watch errors and a node that
//! stops running end the wait early too (`watch`).

mod pending;
mod pool;
mod verdict;
mod watch;

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use futures::StreamExt as _;
use futures::stream::SelectAll;
use k8s_openapi::{
    api::{
        apps::v1::{Deployment, ReplicaSet},
        core::v1::Pod,
    },
    jiff::Timestamp,
};
use kube::{
    Api, Client,
    api::LogParams,
    runtime::{
        reflector::{self, ObjectRef},
        watcher,
    },
};
use tokio::time::Instant;

use self::watch::{Events, Watching, watch};
pub use self::{
    pending::{Unstarted, format_events, not_started, pending_for},
    pool::{
        PoolAt, PoolGoal, pool_converged, pool_observed, progress_deadline_exceeded, worker_pool,
    },
    verdict::{Verdict, digest_of, evaluate, unready, unstarted},
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
    "RunContainerError",
];

/// How long a pod of the new ReplicaSet may stay unscheduled or in
/// `ContainerCreating` before the wait fails.
pub const DEFAULT_PENDING_GRACE: Duration = Duration::from_secs(60);

/// How long a pod of the new ReplicaSet may stay `Unschedulable` before the
/// wait fails (at most the pending grace): long enough for a node to free
/// what a rolling update's old pods hold, short enough that a selector no
/// node matches is named at once.
pub const UNSCHEDULABLE_GRACE: Duration = Duration::from_secs(10);

/// Log lines shown with a failing pod.
const LOG_LINES: i64 = 20;

/// How many running but unready pods a timeout shows the Events of.
const UNREADY_SHOWN: usize = 2;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(
        "pod {namespace}/{pod} container `{container}`: {reason}: {message}{}{}",
        events.as_ref().map(|e| format!("\n{e}")).unwrap_or_default(),
        logs.as_ref().map(|l| format!("\nlast log lines:\n{l}")).unwrap_or_default()
    )]
    PodFailed {
        namespace: String,
        pod: String,
        container: String,
        reason: String,
        message: String,
        /// The pod's Events, for a container that keeps restarting: they say
        /// whether it exited by itself or was killed (a failed liveness or
        /// startup probe), which its logs do not.
        events: Option<String>,
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
    #[error(
        "pod {namespace}/{pod} cannot be scheduled (for {}): {message}\nchange what the scheduler names: the pod's nodeSelector, affinity, tolerations or resource requests, or the nodes\n{events}",
        crate::wait::Elapsed(*pending)
    )]
    Unschedulable {
        namespace: String,
        pod: String,
        pending: Duration,
        /// The scheduler's message.
        message: String,
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
    /// The Deployment's `metadata.generation` after the rollout's patch: a
    /// watch started earlier may still hold an older one.
    pub generation: i64,
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

/// The watches behind a Deployment wait: the Deployment, and its
/// ReplicaSets and pods by the Deployment's selector (immutable, so read
/// once, when the Deployment is first seen). A task of their own drives
/// them, so a watch started before a push has its stores filled by the
/// time the rollout begins; the wait reads what they saw from `events`.
pub struct DeploymentWatch {
    key: ObjectRef<Deployment>,
    deploy: reflector::Store<Deployment>,
    owned: Arc<OnceLock<(reflector::Store<ReplicaSet>, reflector::Store<Pod>)>>,
    events: SelectAll<Events>,
    driver: tokio::task::JoinHandle<()>,
}

impl Drop for DeploymentWatch {
    fn drop(&mut self) {
        self.driver.abort();
    }
}

impl DeploymentWatch {
    /// Starts watching Deployment `namespace/name`; returns at once.
    pub fn start(client: &Client, namespace: &str, name: &str) -> DeploymentWatch {
        let key = ObjectRef::new(name).within(namespace);
        let (deploy, deploy_events) = watch(
            Api::<Deployment>::namespaced(client.clone(), namespace),
            watcher::Config::default().fields(&format!("metadata.name={name}")),
            format!("Deployment {namespace}/{name}"),
            (),
        );
        let owned = Arc::new(OnceLock::new());
        let (sender, receiver) = tokio::sync::mpsc::unbounded_channel();
        let driver = tokio::spawn(drive(DriveWatches {
            client: client.clone(),
            key: key.clone(),
            deploy: deploy.clone(),
            deploy_events,
            owned: owned.clone(),
            sender,
        }));
        let received = futures::stream::unfold(receiver, |mut r| async move {
            r.recv().await.map(|item| (item, r))
        });
        let mut events: SelectAll<Events> = SelectAll::new();
        events.push(received.boxed());
        DeploymentWatch {
            key,
            deploy,
            owned,
            events,
            driver,
        }
    }

    /// The Deployment, its ReplicaSets and its pods, once all are watched.
    fn state(&self) -> Option<Seen> {
        let (replica_sets, pods) = self.owned.get()?;
        Some(Seen {
            deploy: self.deploy.get(&self.key)?,
            replica_sets: replica_sets.state(),
            pods: pods.state(),
        })
    }
}

/// What a [`DeploymentWatch`] holds at one moment.
struct Seen {
    deploy: Arc<Deployment>,
    replica_sets: Vec<Arc<ReplicaSet>>,
    pods: Vec<Arc<Pod>>,
}

/// What the task behind a [`DeploymentWatch`] drives.
struct DriveWatches {
    client: Client,
    key: ObjectRef<Deployment>,
    deploy: reflector::Store<Deployment>,
    deploy_events: Events,
    owned: Arc<OnceLock<(reflector::Store<ReplicaSet>, reflector::Store<Pod>)>>,
    sender: tokio::sync::mpsc::UnboundedSender<Result<(), watch::Failure>>,
}

/// Drives the Deployment's watch until it is first seen, then its
/// ReplicaSets' and pods' too, passing on every change or failure.
async fn drive(mut d: DriveWatches) {
    let first = loop {
        let Some(item) = d.deploy_events.next().await else {
            return;
        };
        let seen = d.deploy.get(&d.key);
        if d.sender.send(item).is_err() {
            return;
        }
        if let Some(first) = seen {
            break first;
        }
    };
    let ns = d.key.namespace.as_deref().unwrap_or_default();
    let selector = selector_of(&first);
    let (replica_sets, rs_events) = watch(
        Api::<ReplicaSet>::namespaced(d.client.clone(), ns),
        watcher::Config::default().labels(&selector),
        format!("ReplicaSets in {ns} ({selector})"),
        (),
    );
    let (pods, pod_events) = watch(
        Api::<Pod>::namespaced(d.client.clone(), ns),
        watcher::Config::default().labels(&selector),
        format!("Pods in {ns} ({selector})"),
        (),
    );
    let _ = d.owned.set((replica_sets, pods));
    let mut all: SelectAll<Events> = SelectAll::new();
    all.extend([d.deploy_events, rs_events, pod_events]);
    while let Some(item) = all.next().await {
        if d.sender.send(item).is_err() {
            return;
        }
    }
}

/// Waits for the Deployment of `want` to complete with `want.digest`.
pub async fn deployment(
    client: &Client,
    want: &Want,
    options: &WaitOptions,
) -> Result<Done, Error> {
    let watched = DeploymentWatch::start(client, &want.namespace, &want.deployment);
    deployment_watched(client, watched, want, options).await
}

/// [`deployment`] on a watch started earlier (before the push, say), so
/// nothing waits on a fresh list.
pub async fn deployment_watched(
    client: &Client,
    mut watched: DeploymentWatch,
    want: &Want,
    options: &WaitOptions,
) -> Result<Done, Error> {
    let (ns, name) = (&want.namespace, &want.deployment);
    let mut w = Watching::new(format!("deployment {ns}/{name}"), options);
    w.last = String::from("the deployment does not exist");
    let mut clock = pending::Clock::default();
    let mut seen = false;
    loop {
        // What the watches already hold counts before anything new comes.
        let Some(Seen {
            deploy,
            replica_sets,
            pods,
        }) = watched.state()
        else {
            if seen {
                return Err(Error::Deleted {
                    what: w.what().to_string(),
                });
            }
            w.next(&mut watched.events).await?;
            continue;
        };
        seen = true;
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
                let grace_of = |u: &Unstarted| match u.unschedulable {
                    Some(_) => grace.min(UNSCHEDULABLE_GRACE),
                    None => grace,
                };
                if let Some((pod, pending)) =
                    clock.overdue(stuck, grace_of, Instant::now(), Timestamp::now())
                {
                    return Err(pod_pending(client, ns, pod, pending, grace).await);
                }
            }
            Verdict::ProgressDeadline(message) => {
                let unready_pods = unready(&deploy, &replica_sets, &pods);
                let message = message + &unready_events(client, ns, &unready_pods).await;
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
        if let Err(e) = w.next(&mut watched.events).await {
            return Err(with_unready(client, ns, e, &watched).await);
        }
    }
}

/// A timeout, with the Events of the new pods that run but are not Ready
/// in what `watched` holds now (a failing readiness probe's `Unhealthy`);
/// other errors as they are. Only a failed wait looks for them.
async fn with_unready(
    client: &Client,
    namespace: &str,
    error: Error,
    watched: &DeploymentWatch,
) -> Error {
    match error {
        Error::Timeout {
            what,
            timeout,
            last,
            last_error,
        } => Error::Timeout {
            what,
            timeout,
            last: last + &unready_events(client, namespace, &unready_in(watched)).await,
            last_error,
        },
        other => other,
    }
}

/// The new pods in what `watched` holds that run but are not Ready.
fn unready_in(watched: &DeploymentWatch) -> Vec<String> {
    watched
        .state()
        .map(|s| unready(&s.deploy, &s.replica_sets, &s.pods))
        .unwrap_or_default()
}

/// `\npod <ns>/<pod> is running but not Ready; events: …` for the first
/// [`UNREADY_SHOWN`] of `unready`, and how many more there are.
async fn unready_events(client: &Client, namespace: &str, unready: &[String]) -> String {
    let mut told = String::new();
    for pod in unready.iter().take(UNREADY_SHOWN) {
        let events = pending::events_of(client, namespace, pod).await;
        told.push_str(&format!(
            "\npod {namespace}/{pod} is running but not Ready; {events}"
        ));
    }
    let more = unready.len().saturating_sub(UNREADY_SHOWN);
    if more > 0 {
        told.push_str(&format!(
            "\n{more} more pod(s) of the new ReplicaSet are not Ready"
        ));
    }
    told
}

/// The error of a pod that did not start within its grace, with its events.
async fn pod_pending(
    client: &Client,
    namespace: &str,
    pod: Unstarted,
    pending: Duration,
    grace: Duration,
) -> Error {
    let events = pending::events_of(client, namespace, &pod.pod).await;
    if let Some(message) = pod.unschedulable {
        return Error::Unschedulable {
            namespace: namespace.to_string(),
            pod: pod.pod,
            pending,
            message,
            events,
        };
    }
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

/// The error of a pod stuck on a fatal reason, with its last log lines,
/// and its Events when it keeps restarting.
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
    let events = match reason.as_str() {
        "CrashLoopBackOff" => Some(pending::events_of(client, namespace, &pod).await),
        _ => None,
    };
    Error::PodFailed {
        namespace: namespace.to_string(),
        pod,
        container,
        reason,
        message,
        events,
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

#[cfg(test)]
mod tests;
