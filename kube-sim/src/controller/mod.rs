//! The controllers of kube-controller-manager that rollouts depend on: Deployment, ReplicaSet and the
//! garbage collector.
//!
//! They run in-process on the [`Store`]'s Rust API and behave like their Kubernetes counterparts, including
//! the lag: every watch event is handled after a configurable delay, so a status never changes in the same
//! step as the write that caused it. Controllers read the store directly when they sync (there is no cache
//! to go stale); writes carry the `resourceVersion` they read, and a 409 `Conflict` requeues the key.
//!
//! [`run`] starts all three and returns when the shutdown signal flips.

pub mod deployment;
pub mod events;
mod follow;
pub mod gc;
pub mod hash;
mod ownership;
mod queue;
pub mod replicaset;

use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::watch;

use crate::meta;
use crate::resource::GroupResource;
use crate::store::{self, ListOptions, SharedEvent, Store};

pub(crate) use events::record_event;
pub(crate) use follow::{follow, follow_keeping};
pub(crate) use queue::Queue;

/// The field manager of controller writes, as on a k3s server.
pub const MANAGER: &str = "kube-controller-manager";

/// A controller could not sync an object.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A store call failed.
    #[error(transparent)]
    Store(#[from] store::Error),
}

impl Error {
    /// Whether the error is a stale write that a requeue resolves.
    pub fn is_conflict(&self) -> bool {
        matches!(self, Error::Store(store::Error::Conflict { .. }))
    }
}

/// Delays of the controllers. There is no `Default`: use [`Config::fast`] or fill every field.
#[derive(Clone, Debug)]
pub struct Config {
    /// How long after a watch event the Deployment controller syncs the Deployment.
    pub deployment_delay: Duration,
    /// How long after a watch event the ReplicaSet controller syncs the ReplicaSet.
    pub replicaset_delay: Duration,
    /// How long after an owner disappears the garbage collector deletes its dependents.
    pub gc_delay: Duration,
}

impl Config {
    /// Short delays that still keep the order of events real: for tests and local use.
    pub fn fast() -> Config {
        Config {
            deployment_delay: Duration::from_millis(15),
            replicaset_delay: Duration::from_millis(10),
            gc_delay: Duration::from_millis(20),
        }
    }
}

/// Runs the Deployment and ReplicaSet controllers and the garbage collector until `shutdown` flips.
pub async fn run(store: Store, config: Config, shutdown: watch::Receiver<bool>) {
    tokio::join!(
        deployment::run(store.clone(), config.clone(), shutdown.clone()),
        replicaset::run(store.clone(), config.clone(), shutdown.clone()),
        gc::run(store, config, shutdown),
    );
}

/// The object of a watch event, if it carries one.
pub(crate) fn event_object(e: &SharedEvent) -> Option<&Value> {
    e.object().map(|o| &**o)
}

/// What a controller's watches and its worker share: the store, the queue of keys to sync, the delay
/// before a queued sync, and the shutdown signal.
#[derive(Clone)]
pub(crate) struct Feed {
    pub(crate) store: Store,
    pub(crate) queue: Queue<Key>,
    pub(crate) delay: Duration,
    pub(crate) shutdown: watch::Receiver<bool>,
}

impl Feed {
    /// Follows a resource, queueing after the delay the key `key_of` finds in each event.
    pub(crate) async fn follow(
        self,
        gr: GroupResource,
        key_of: impl Fn(&SharedEvent) -> Option<Key>,
    ) {
        let Feed {
            store,
            queue,
            delay,
            shutdown,
        } = self;
        follow(&store, &gr, shutdown, |e| {
            if let Some(key) = key_of(&e) {
                queue.add_after(key, delay);
            }
        })
        .await;
    }

    /// Syncs queued keys until shutdown; a key is queued again when its sync asks to be, after a conflict,
    /// or (reported through `warn`) after a failure.
    pub(crate) async fn work(
        self,
        sync: impl Fn(&Store, &Key) -> Result<Option<Duration>, Error>,
        warn: impl Fn(&Key, &Error),
    ) {
        let Feed {
            store,
            queue,
            delay,
            mut shutdown,
        } = self;
        loop {
            let key = tokio::select! {
                k = queue.next() => k,
                _ = shutdown.wait_for(|s| *s) => return,
            };
            match sync(&store, &key) {
                Ok(Some(after)) => queue.add_after(key, after),
                Ok(None) => {}
                Err(e) if e.is_conflict() => queue.add_after(key, delay),
                Err(e) => {
                    warn(&key, &e);
                    queue.add_after(key, delay.max(Duration::from_millis(200)));
                }
            }
        }
    }
}

/// A namespaced object key.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key {
    /// The namespace.
    pub namespace: String,
    /// The name.
    pub name: String,
}

impl Key {
    /// The key of an object.
    pub fn of(obj: &Value) -> Key {
        Key {
            namespace: meta::namespace_of(obj).to_string(),
            name: meta::name_of(obj).to_string(),
        }
    }

    /// The key of an object's owner, which lives in the object's namespace.
    pub(crate) fn owner(obj: &Value, owner: &Value) -> Key {
        Key {
            namespace: meta::namespace_of(obj).to_string(),
            name: owner["name"].as_str().unwrap_or("").to_string(),
        }
    }
}

/// The controller `ownerReference` of an object, if it has one of the given kind.
pub(crate) fn controller_of<'a>(obj: &'a Value, kind: &str) -> Option<&'a Value> {
    obj.pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)?
        .iter()
        .find(|r| r["controller"] == true && r["kind"] == kind)
}

/// The controller `ownerReference` of an object, whatever its kind.
pub(crate) fn controller_of_any(obj: &Value) -> Option<&Value> {
    obj.pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)?
        .iter()
        .find(|r| r["controller"] == true)
}

/// The keys of the owners of `kind` in the object's namespace whose selector selects it, for an orphan
/// that one of them may adopt.
pub(crate) fn selecting_owners(store: &Store, gr: &GroupResource, obj: &Value) -> Vec<Key> {
    if controller_of_any(obj).is_some() || obj.pointer("/metadata/deletionTimestamp").is_some() {
        return Vec::new();
    }
    let ns = meta::namespace_of(obj);
    store
        .list(gr, Some(ns), &ListOptions::default())
        .map(|l| l.items)
        .unwrap_or_default()
        .iter()
        .filter(|owner| ownership::selector_of(owner).is_some_and(|s| s.matches(obj)))
        .map(Key::of)
        .collect()
}

/// A controller `ownerReference` pointing at `owner`.
pub(crate) fn controller_ref(owner: &Value, api_version: &str, kind: &str) -> Value {
    json!({
        "apiVersion": api_version,
        "kind": kind,
        "name": meta::name_of(owner),
        "uid": meta::str_at(owner, "/metadata/uid").unwrap_or(""),
        "controller": true,
        "blockOwnerDeletion": true,
    })
}

/// Whether an object is controlled by the owner with this `uid`.
pub(crate) fn is_controlled_by(obj: &Value, kind: &str, uid: &str) -> bool {
    controller_of(obj, kind).is_some_and(|r| r["uid"] == uid)
}

/// An RFC 3339 timestamp as a point in time.
pub(crate) fn parse_time(s: &str) -> Option<jiff::Timestamp> {
    s.parse().ok()
}

/// An `int32` field, or a default.
pub(crate) fn int_at(v: &Value, pointer: &str, default: i64) -> i64 {
    v.pointer(pointer)
        .and_then(Value::as_i64)
        .unwrap_or(default)
}

/// Whether the pod counts for its ReplicaSet: not terminating, not `Succeeded` or `Failed`
/// (`IsPodActive` in `pkg/controller/controller_utils.go`).
pub fn is_pod_active(pod: &Value) -> bool {
    let phase = meta::str_at(pod, "/status/phase").unwrap_or("");
    phase != "Succeeded"
        && phase != "Failed"
        && pod.pointer("/metadata/deletionTimestamp").is_none()
}

/// The pod's `Ready` condition.
pub(crate) fn ready_condition(pod: &Value) -> Option<&Value> {
    pod.pointer("/status/conditions")
        .and_then(Value::as_array)?
        .iter()
        .find(|c| c["type"] == "Ready")
}

/// Whether the pod is Ready (`IsPodReady`).
pub fn is_pod_ready(pod: &Value) -> bool {
    ready_condition(pod).is_some_and(|c| c["status"] == "True")
}

/// Whether the pod has been Ready for `min_ready_seconds` at `now` (`IsPodAvailable`).
pub fn is_pod_available(pod: &Value, min_ready_seconds: i64, now: jiff::Timestamp) -> bool {
    if !is_pod_ready(pod) {
        return false;
    }
    if min_ready_seconds <= 0 {
        return true;
    }
    ready_condition(pod)
        .and_then(|c| c["lastTransitionTime"].as_str())
        .and_then(parse_time)
        .is_some_and(|t| t.as_second() + min_ready_seconds < now.as_second())
}

/// When a pod becomes available, if it is Ready but not yet available.
pub(crate) fn available_at(pod: &Value, min_ready_seconds: i64) -> Option<jiff::Timestamp> {
    if !is_pod_ready(pod) || min_ready_seconds <= 0 {
        return None;
    }
    let since = ready_condition(pod)
        .and_then(|c| c["lastTransitionTime"].as_str())
        .and_then(parse_time)?;
    jiff::Timestamp::from_second(since.as_second() + min_ready_seconds + 1).ok()
}

/// How long from now until `t` (zero if past).
pub(crate) fn until(t: jiff::Timestamp) -> Duration {
    let now = jiff::Timestamp::now();
    let ms = t.as_millisecond() - now.as_millisecond();
    Duration::from_millis(ms.max(0) as u64)
}
