//! The scheduler (`pkg/scheduler`): binds each pod that names no node (and asks for `default-scheduler`)
//! to a node that passes the filters of [`filter`], and leaves the others `Pending`.
//!
//! - It runs its own loop: a pass is queued by any Node event and by pod events that can change a verdict
//!   (a pod waiting for a node, a pod gone or finished, which frees its node's resources).
//! - A pass reads every node and pod, counts what the bound pods that have not finished ask of their node
//!   (CPU, memory, one pod each), and takes the waiting pods by priority, then age.
//! - A pod that fits is bound to the feasible node with the fewest pods (spreading, as the default
//!   scoring does for equal pods) through the store's binding, which sets `spec.nodeName` and
//!   `PodScheduled=True` in one write, and a `Scheduled` event.
//! - A pod that fits nowhere gets `PodScheduled=False`, reason `Unschedulable`, and a `FailedScheduling`
//!   Warning event with the scheduler's message (`0/1 nodes are available: 1 Insufficient cpu. preemption:
//!   …`), written again only when the message changes. It is bound by the first pass after the cause goes.

pub mod filter;
pub mod resources;

use std::collections::HashMap;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::watch;

use crate::controller::{Queue, follow, record_event};
use crate::meta;
use crate::resource::GroupResource;
use crate::store::{self, Binding, Endpoint, SharedEvent, Store, WriteOptions};
use resources::{Resources, pod_requests};

/// The scheduler's name: pods asking for it (`spec.schedulerName`, the default) are its to bind.
pub const NAME: &str = "default-scheduler";

/// The field manager of scheduler writes.
pub const MANAGER: &str = "kube-scheduler";

/// The scheduler's timing. There is no `Default`: use [`Config::fast`] or fill every field.
#[derive(Clone, Debug)]
pub struct Config {
    /// How long after an event a pass runs; events within it share the pass.
    pub delay: Duration,
}

impl Config {
    /// A short delay: for tests and local use.
    pub fn fast() -> Config {
        Config {
            delay: Duration::from_millis(20),
        }
    }
}

/// Runs the scheduler until `shutdown` flips.
pub async fn run(store: Store, config: Config, mut shutdown: watch::Receiver<bool>) {
    let queue: Queue<()> = Queue::new();
    let delay = config.delay;
    let (pods_gr, nodes_gr) = (GroupResource::pods(), GroupResource::nodes());
    let pods = {
        let queue = queue.clone();
        follow(&store, &pods_gr, shutdown.clone(), move |e| {
            if may_change_a_verdict(&e) {
                queue.add_after((), delay);
            }
        })
    };
    let nodes = {
        let queue = queue.clone();
        follow(&store, &nodes_gr, shutdown.clone(), move |_| {
            queue.add_after((), delay);
        })
    };
    let worker = async {
        loop {
            tokio::select! {
                () = queue.next() => {}
                _ = shutdown.wait_for(|s| *s) => return,
            }
            if let Err(e) = schedule_pending(&store) {
                tracing::warn!(error = %e, "scheduling pass failed; retrying");
                queue.add_after((), delay.max(Duration::from_millis(200)));
            }
        }
    };
    tokio::join!(pods, nodes, worker);
}

/// Whether a pod event can bind a pod or free a node's resources.
fn may_change_a_verdict(e: &SharedEvent) -> bool {
    match e {
        SharedEvent::Deleted(_) => true,
        SharedEvent::Added(p) | SharedEvent::Modified(p) => {
            is_waiting(p)
                || matches!(
                    meta::str_at(p, "/status/phase"),
                    Some("Succeeded" | "Failed")
                )
        }
        SharedEvent::Bookmark(_) | SharedEvent::Error(_) => false,
    }
}

/// A pod this scheduler has to place: no node, asking for this scheduler, not being deleted.
fn is_waiting(pod: &Value) -> bool {
    meta::str_at(pod, "/spec/nodeName").is_none_or(str::is_empty)
        && meta::str_at(pod, "/spec/schedulerName").unwrap_or(NAME) == NAME
        && pod.pointer("/metadata/deletionTimestamp").is_none()
}

/// Whether a bound pod still holds its node's resources (it has not finished).
fn holds_resources(pod: &Value) -> bool {
    !matches!(
        meta::str_at(pod, "/status/phase"),
        Some("Succeeded" | "Failed")
    )
}

/// One pass over every waiting pod.
fn schedule_pending(store: &Store) -> Result<(), store::Error> {
    // The stored objects, shared: a pass reads every pod, and copying them all for each pass of a
    // rollout cost more than the pass. Most passes (a bound pod gone) find no pod waiting.
    let pods = store.snapshot(&GroupResource::pods(), None);
    if !pods.iter().any(|p| is_waiting(p)) {
        return Ok(());
    }
    let nodes = store.snapshot(&GroupResource::nodes(), None);
    let mut used: HashMap<String, Resources> = HashMap::new();
    for pod in pods.iter().filter(|p| holds_resources(p)) {
        if let Some(node) = meta::str_at(pod, "/spec/nodeName").filter(|n| !n.is_empty()) {
            used.entry(node.to_string())
                .or_default()
                .add(pod_requests(pod));
        }
    }
    let mut waiting: Vec<&Value> = pods
        .iter()
        .map(|p| &**p)
        .filter(|p| is_waiting(p))
        .collect();
    waiting.sort_by_key(|p| {
        (
            -p.pointer("/spec/priority")
                .and_then(Value::as_i64)
                .unwrap_or(0),
            meta::str_at(p, "/metadata/creationTimestamp")
                .unwrap_or("")
                .to_string(),
            meta::name_of(p).to_string(),
        )
    });
    for pod in waiting {
        let mut refusals = Vec::new();
        let mut best: Option<(&str, i64)> = None;
        for node in &nodes {
            let name = meta::name_of(node);
            let node_used = used.get(name).copied().unwrap_or_default();
            match filter::fits(pod, node, node_used) {
                Ok(()) if best.is_none_or(|(_, pods)| node_used.pods < pods) => {
                    best = Some((name, node_used.pods));
                }
                Ok(()) => {}
                Err(r) => refusals.push(r),
            }
        }
        match best {
            Some((node, _)) => {
                if bind(store, pod, node)? {
                    used.entry(node.to_string())
                        .or_default()
                        .add(pod_requests(pod));
                }
            }
            None => unschedulable(store, pod, &filter::message(nodes.len(), &refusals))?,
        }
    }
    Ok(())
}

/// Binds a pod to a node through the store's binding, which marks it scheduled in the same write; `false`
/// when the pod changed under the pass (a newer pass handles it).
fn bind(store: &Store, pod: &Value, node: &str) -> Result<bool, store::Error> {
    let ns = meta::namespace_of(pod);
    let binding = Binding {
        node: node.to_string(),
        uid: meta::str_at(pod, "/metadata/uid").map(str::to_string),
        ..Binding::default()
    };
    let bound = match store.bind(ns, meta::name_of(pod), &binding) {
        Ok(b) => b,
        Err(store::Error::Conflict { .. } | store::Error::NotFound { .. }) => return Ok(false),
        Err(e) => return Err(e),
    };
    let message = format!(
        "Successfully assigned {ns}/{} to {node}",
        meta::name_of(pod)
    );
    record_event(store, &bound, NAME, "Normal", "Scheduled", &message);
    Ok(true)
}

/// Marks a pod `Unschedulable` with the scheduler's message, and records it, when the message is new.
fn unschedulable(store: &Store, pod: &Value, message: &str) -> Result<(), store::Error> {
    let current = pod
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .and_then(|cs| cs.iter().find(|c| c["type"] == "PodScheduled"));
    if current.is_some_and(|c| c["reason"] == "Unschedulable" && c["message"] == message) {
        return Ok(());
    }
    tracing::debug!(pod = %meta::name_of(pod), %message, "unschedulable");
    record_event(store, pod, NAME, "Warning", "FailedScheduling", message);
    let mut new = pod.clone();
    new["status"]["phase"] = json!("Pending");
    store::update_pod_condition(
        &mut new,
        json!({"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}),
    );
    write_status(store, new)
}

fn write_status(store: &Store, pod: Value) -> Result<(), store::Error> {
    let ns = meta::namespace_of(&pod).to_string();
    match store.update(
        Endpoint::Status,
        &GroupResource::pods(),
        Some(&ns),
        pod,
        &WriteOptions::manager(MANAGER),
    ) {
        Ok(_) | Err(store::Error::Conflict { .. } | store::Error::NotFound { .. }) => Ok(()),
        Err(e) => Err(e),
    }
}
