//! The Deployment controller (`pkg/controller/deployment/{sync,rolling,recreate,progress}.go`).
//!
//! - One ReplicaSet per pod template: the new one is the oldest whose template equals the Deployment's,
//!   ignoring the `pod-template-hash` label; a missing one is created as `<deploy>-<hash>` with the hash
//!   label on its labels, selector and template, a controller `ownerReference` and the annotations
//!   `deployment.kubernetes.io/{revision,desired-replicas,max-replicas}`.
//! - RollingUpdate scales the new ReplicaSet up within `maxSurge` and old ones down within
//!   `maxUnavailable`; Recreate scales old ones to zero, waits for their pods to be gone, then scales up.
//! - Every sync sets `status.observedGeneration`; counts come from ReplicaSet statuses; the `Progressing`
//!   condition moves through `NewReplicaSetCreated`/`FoundNewReplicaSet`, `ReplicaSetUpdated` and
//!   `NewReplicaSetAvailable`, or `ProgressDeadlineExceeded` when `progressDeadlineSeconds` pass without
//!   progress; `Available` follows `maxUnavailable`, so it normally stays `True` during a rollout.
//! - Old ReplicaSets beyond `revisionHistoryLimit` with no replicas are deleted.
//! - A paused Deployment is only scaled.
//! - It owns the ReplicaSets its controller `ownerReference` names: orphans its selector matches are
//!   adopted, owned ones whose labels stop matching are released (see [`super::ownership`]).

use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::watch;

use super::{Config, Error, Feed, Key, Queue, int_at};
use crate::meta;
use crate::resource::GroupResource;
use crate::store::{self, ListOptions, SharedEvent, Store};

mod progress;
mod recreate;
mod rolling;
mod sync;
mod util;

pub use util::{
    condition, equal_ignore_hash, max_surge, max_unavailable, resolve_fenceposts, revision_of,
    scaled_value, spec_replicas,
};

/// The event source of this controller.
const COMPONENT: &str = "deployment-controller";

/// The label that tells ReplicaSets (and their pods) of one Deployment apart.
pub const HASH_LABEL: &str = "pod-template-hash";
/// The revision annotation on Deployments and ReplicaSets.
pub const REVISION: &str = "deployment.kubernetes.io/revision";
/// Previous revisions of a ReplicaSet that a rollback reused.
pub const REVISION_HISTORY: &str = "deployment.kubernetes.io/revision-history";
/// The Deployment's `spec.replicas` when the ReplicaSet was last scaled.
pub const DESIRED_REPLICAS: &str = "deployment.kubernetes.io/desired-replicas";
/// `spec.replicas + maxSurge` when the ReplicaSet was last scaled.
pub const MAX_REPLICAS: &str = "deployment.kubernetes.io/max-replicas";

/// Deployment annotations that are not copied to ReplicaSets.
const SKIP_COPY: &[&str] = &[
    "kubectl.kubernetes.io/last-applied-configuration",
    REVISION,
    REVISION_HISTORY,
    DESIRED_REPLICAS,
    MAX_REPLICAS,
    "deprecated.deployment.rollback.to",
];

/// Condition reasons (`pkg/controller/deployment/util/deployment_util.go`).
pub mod reason {
    /// A new ReplicaSet was created.
    pub const NEW_RS_CREATED: &str = "NewReplicaSetCreated";
    /// An existing ReplicaSet was adopted as the new one.
    pub const FOUND_NEW_RS: &str = "FoundNewReplicaSet";
    /// The rollout made progress.
    pub const RS_UPDATED: &str = "ReplicaSetUpdated";
    /// The rollout is complete.
    pub const NEW_RS_AVAILABLE: &str = "NewReplicaSetAvailable";
    /// No progress within `progressDeadlineSeconds`.
    pub const TIMED_OUT: &str = "ProgressDeadlineExceeded";
    /// Enough replicas are available.
    pub const MIN_AVAILABLE: &str = "MinimumReplicasAvailable";
    /// Too few replicas are available.
    pub const MIN_UNAVAILABLE: &str = "MinimumReplicasUnavailable";
    /// The Deployment is paused.
    pub const PAUSED: &str = "DeploymentPaused";
    /// The Deployment was resumed.
    pub const RESUMED: &str = "DeploymentResumed";
}

/// Runs the controller until `shutdown` flips.
pub async fn run(store: Store, config: Config, shutdown: watch::Receiver<bool>) {
    let feed = Feed {
        store: store.clone(),
        queue: Queue::new(),
        delay: config.deployment_delay,
        shutdown,
    };
    let deployment_events = feed.clone().follow(GroupResource::deployments(), |e| {
        super::event_object(e).map(Key::of)
    });
    let rs_gr = GroupResource::replicasets();
    let watch_store = store.clone();
    let rs_events = {
        let (queue, delay, store) = (feed.queue.clone(), feed.delay, store.clone());
        super::follow(&watch_store, &rs_gr, feed.shutdown.clone(), move |e| {
            let Some(rs) = super::event_object(&e) else {
                return;
            };
            if let Some(owner) = super::controller_of(rs, "Deployment") {
                queue.add_after(Key::owner(rs, owner), delay);
            } else if !matches!(e, SharedEvent::Deleted(_)) {
                for key in super::selecting_owners(&store, &GroupResource::deployments(), rs) {
                    queue.add_after(key, delay);
                }
            }
        })
    };
    // Recreate waits for old pods to be gone, so their deletion concerns the Deployment.
    let pod_events = feed.clone().follow(GroupResource::pods(), move |e| {
        let SharedEvent::Deleted(pod) = e else {
            return None;
        };
        let rs_ref = super::controller_of(pod, "ReplicaSet")?;
        let rs = store
            .get(
                &GroupResource::replicasets(),
                Some(meta::namespace_of(pod)),
                rs_ref["name"].as_str().unwrap_or(""),
            )
            .ok()?;
        super::controller_of(&rs, "Deployment").map(|owner| Key::owner(&rs, owner))
    });
    let worker = feed.work(sync, |key, e| {
        tracing::warn!(namespace = %key.namespace, deployment = %key.name, error = %e, "sync failed; retrying");
    });
    tokio::join!(deployment_events, rs_events, pod_events, worker);
}

/// The state of one sync: the Deployment as last written, its new ReplicaSet and the old ones.
struct Rollout<'a> {
    store: &'a Store,
    d: Value,
    new_rs: Option<Value>,
    old: Vec<Value>,
}

/// Syncs one Deployment (`syncDeployment`); returns when to sync it again for a time-based change.
pub fn sync(store: &Store, key: &Key) -> Result<Option<Duration>, Error> {
    let d = match store.get(
        &GroupResource::deployments(),
        Some(&key.namespace),
        &key.name,
    ) {
        Ok(d) => d,
        Err(store::Error::NotFound { .. }) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let candidates = store
        .list(
            &GroupResource::replicasets(),
            Some(&key.namespace),
            &ListOptions::default(),
        )?
        .items;
    let owner = super::ownership::Owner {
        obj: &d,
        api_version: "apps/v1",
        kind: "Deployment",
        dependents: GroupResource::replicasets(),
    };
    let rs_list = owner.claim(store, candidates)?;
    let mut r = Rollout {
        store,
        d,
        new_rs: None,
        old: Vec::new(),
    };
    if r.d.pointer("/metadata/deletionTimestamp").is_some() {
        r.all_replica_sets_and_sync_revision(rs_list, false)?;
        r.sync_deployment_status()?;
        return Ok(None);
    }
    r.check_paused_conditions()?;
    r.all_replica_sets_and_sync_revision(rs_list, false)?;
    if r.d.pointer("/spec/paused") == Some(&json!(true)) {
        r.sync_scale(true)?;
        return Ok(None);
    }
    if r.is_scaling_event() {
        r.sync_scale(false)?;
        return Ok(None);
    }
    let recreate = meta::str_at(&r.d, "/spec/strategy/type") == Some("Recreate");
    if recreate {
        r.rollout_recreate()?;
    } else {
        r.rollout_rolling()?;
    }
    Ok(r.requeue_after())
}

impl Rollout<'_> {
    fn replicas(&self) -> i64 {
        int_at(&self.d, "/spec/replicas", 1)
    }

    fn all(&self) -> Vec<&Value> {
        self.old.iter().chain(self.new_rs.iter()).collect()
    }

    fn has_progress_deadline(&self) -> bool {
        self.d
            .pointer("/spec/progressDeadlineSeconds")
            .and_then(Value::as_i64)
            .is_some_and(|s| s != i64::from(i32::MAX))
    }
}

#[cfg(test)]
mod tests;
