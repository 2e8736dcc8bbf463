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

use std::time::Duration;

use serde_json::{Map, Value, json};
use tokio::sync::watch;

use super::hash::compute_hash;
use super::{Config, Error, Key, MANAGER, Queue, follow, int_at};
use crate::meta;
use crate::resource::GroupResource;
use crate::store::{self, DeleteOptions, ListOptions, Store, WatchEvent, WriteOptions};

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
    let queue: Queue<Key> = Queue::new();
    let delay = config.deployment_delay;
    let deployment_events = {
        let queue = queue.clone();
        let store = store.clone();
        let shutdown = shutdown.clone();
        async move {
            follow(&store, &GroupResource::deployments(), shutdown, |e| {
                if let Some(obj) = super::event_object(&e) {
                    queue.add_after(Key::of(obj), delay);
                }
            })
            .await;
        }
    };
    let rs_events = {
        let queue = queue.clone();
        let store = store.clone();
        let shutdown = shutdown.clone();
        async move {
            follow(&store, &GroupResource::replicasets(), shutdown, |e| {
                if let Some(rs) = super::event_object(&e)
                    && let Some(owner) = super::controller_of(rs, "Deployment")
                {
                    queue.add_after(owner_key(rs, owner), delay);
                }
            })
            .await;
        }
    };
    // Recreate waits for old pods to be gone, so their deletion concerns the Deployment.
    let pod_events = {
        let queue = queue.clone();
        let store = store.clone();
        let shutdown = shutdown.clone();
        let lookup = store.clone();
        async move {
            follow(&store, &GroupResource::pods(), shutdown, |e| {
                let WatchEvent::Deleted(pod) = &e else { return };
                let Some(rs_ref) = super::controller_of(pod, "ReplicaSet") else {
                    return;
                };
                let ns = meta::namespace_of(pod);
                let Ok(rs) = lookup.get(
                    &GroupResource::replicasets(),
                    Some(ns),
                    rs_ref["name"].as_str().unwrap_or(""),
                ) else {
                    return;
                };
                if let Some(owner) = super::controller_of(&rs, "Deployment") {
                    queue.add_after(owner_key(&rs, owner), delay);
                }
            })
            .await;
        }
    };
    let worker = {
        let queue = queue.clone();
        let mut shutdown = shutdown.clone();
        async move {
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
                        tracing::warn!(namespace = %key.namespace, deployment = %key.name, error = %e, "sync failed; retrying");
                        queue.add_after(key, delay.max(Duration::from_millis(200)));
                    }
                }
            }
        }
    };
    tokio::join!(deployment_events, rs_events, pod_events, worker);
}

fn owner_key(obj: &Value, owner: &Value) -> Key {
    Key {
        namespace: meta::namespace_of(obj).to_string(),
        name: owner["name"].as_str().unwrap_or("").to_string(),
    }
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
    let uid = meta::str_at(&d, "/metadata/uid").unwrap_or("").to_string();
    let rs_list: Vec<Value> = store
        .list(
            &GroupResource::replicasets(),
            Some(&key.namespace),
            &ListOptions::default(),
        )?
        .items
        .into_iter()
        .filter(|rs| super::is_controlled_by(rs, "Deployment", &uid))
        .collect();
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

    /// `getAllReplicaSetsAndSyncRevision`: finds (or creates) the new ReplicaSet and syncs revisions.
    fn all_replica_sets_and_sync_revision(
        &mut self,
        mut rs_list: Vec<Value>,
        create: bool,
    ) -> Result<(), Error> {
        sort_by_creation(&mut rs_list);
        let template = self
            .d
            .pointer("/spec/template")
            .cloned()
            .unwrap_or_default();
        let new_idx = rs_list.iter().position(|rs| {
            equal_ignore_hash(
                rs.pointer("/spec/template").unwrap_or(&Value::Null),
                &template,
            )
        });
        let existing = new_idx.map(|i| rs_list.remove(i));
        self.old = rs_list;
        self.new_rs = match existing {
            Some(rs) => Some(self.sync_existing_new_rs(rs)?),
            None if create => Some(self.create_new_rs()?),
            None => None,
        };
        Ok(())
    }

    fn next_revision(&self) -> i64 {
        self.old.iter().map(revision_of).max().unwrap_or(0) + 1
    }

    /// `getNewReplicaSet` for an existing new ReplicaSet: syncs its annotations and the revision.
    fn sync_existing_new_rs(&mut self, rs: Value) -> Result<Value, Error> {
        let new_revision = self.next_revision();
        {
            let mut copy = rs.clone();
            let changed = set_new_rs_annotations(&self.d, &mut copy, new_revision, true);
            let min_ready = self.d.pointer("/spec/minReadySeconds").cloned();
            let min_ready_changed = copy.pointer("/spec/minReadySeconds") != min_ready.as_ref()
                && !(is_zero(copy.pointer("/spec/minReadySeconds")) && is_zero(min_ready.as_ref()));
            if changed || min_ready_changed {
                set_min_ready(&mut copy, min_ready);
                return self.update_rs(copy);
            }
            let rev = meta::str_at(&copy, &ann_ptr(REVISION))
                .unwrap_or("")
                .to_string();
            let mut needs_update = set_revision(&mut self.d, &rev);
            if self.has_progress_deadline() && condition(&self.d, "Progressing").is_none() {
                let msg = format!("Found new replica set \"{}\"", meta::name_of(&copy));
                set_condition(
                    &mut self.d,
                    new_condition("Progressing", "True", reason::FOUND_NEW_RS, &msg),
                );
                needs_update = true;
            }
            if needs_update {
                self.write_deployment_status()?;
            }
            Ok(copy)
        }
    }

    /// `getNewReplicaSet` when there is none: creates `<deploy>-<hash>`.
    fn create_new_rs(&mut self) -> Result<Value, Error> {
        let new_revision = self.next_revision();
        let collision = self
            .d
            .pointer("/status/collisionCount")
            .and_then(Value::as_i64);
        let template = self
            .d
            .pointer("/spec/template")
            .cloned()
            .unwrap_or_default();
        let hash = compute_hash(&template, collision);
        let mut rs_template = template.clone();
        add_label(&mut rs_template, HASH_LABEL, &hash);
        let mut selector = self
            .d
            .pointer("/spec/selector")
            .cloned()
            .unwrap_or_default();
        if let Value::Object(s) = &mut selector {
            meta::child_map(s, "matchLabels").insert(HASH_LABEL.into(), json!(hash));
        }
        let name = format!("{}-{hash}", meta::name_of(&self.d));
        let mut rs = json!({
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "metadata": {
                "name": name,
                "namespace": meta::namespace_of(&self.d),
                "ownerReferences": [super::controller_ref(&self.d, "apps/v1", "Deployment")],
                "labels": rs_template.pointer("/metadata/labels").cloned().unwrap_or(json!({})),
            },
            "spec": {"replicas": 0, "selector": selector, "template": rs_template},
        });
        set_min_ready(&mut rs, self.d.pointer("/spec/minReadySeconds").cloned());
        let count = self.new_rs_new_replicas(&rs);
        rs["spec"]["replicas"] = json!(count);
        set_new_rs_annotations(&self.d, &mut rs, new_revision, false);
        let ns = meta::namespace_of(&self.d).to_string();
        let created = match self.store.create(
            &GroupResource::replicasets(),
            Some(&ns),
            rs,
            &WriteOptions::manager(MANAGER),
        ) {
            Ok(c) => {
                if count > 0 {
                    super::record_event(
                        self.store,
                        &self.d,
                        COMPONENT,
                        "Normal",
                        "ScalingReplicaSet",
                        &format!("Scaled up replica set {name} from 0 to {count}"),
                    );
                }
                c
            }
            Err(store::Error::AlreadyExists { .. }) => {
                let found = self
                    .store
                    .get(&GroupResource::replicasets(), Some(&ns), &name)?;
                let uid = meta::str_at(&self.d, "/metadata/uid").unwrap_or("");
                if super::is_controlled_by(&found, "Deployment", uid)
                    && equal_ignore_hash(
                        found.pointer("/spec/template").unwrap_or(&Value::Null),
                        &template,
                    )
                {
                    return Ok(found);
                }
                // A hash collision: count it and try again with a different hash.
                let n = collision.unwrap_or(0) + 1;
                status_map(&mut self.d).insert("collisionCount".into(), json!(n));
                self.write_deployment_status()?;
                return Err(store::Error::AlreadyExists {
                    resource: GroupResource::replicasets(),
                    name,
                }
                .into());
            }
            Err(e) => return Err(e.into()),
        };
        let mut needs_update = set_revision(&mut self.d, &new_revision.to_string());
        if self.has_progress_deadline() {
            let msg = format!("Created new replica set \"{}\"", meta::name_of(&created));
            set_condition(
                &mut self.d,
                new_condition("Progressing", "True", reason::NEW_RS_CREATED, &msg),
            );
            needs_update = true;
        }
        if needs_update {
            self.write_deployment_status()?;
        }
        Ok(created)
    }

    /// Writes the Deployment's status (and annotations) as they are now in `self.d`.
    fn write_deployment_status(&mut self) -> Result<(), Error> {
        let ns = meta::namespace_of(&self.d).to_string();
        self.d = self.store.update_status(
            &GroupResource::deployments(),
            Some(&ns),
            self.d.clone(),
            &WriteOptions::manager(MANAGER),
        )?;
        Ok(())
    }

    fn update_rs(&self, rs: Value) -> Result<Value, Error> {
        let ns = meta::namespace_of(&rs).to_string();
        Ok(self.store.update(
            &GroupResource::replicasets(),
            Some(&ns),
            rs,
            &WriteOptions::manager(MANAGER),
        )?)
    }

    /// `NewRSNewReplicas`: how many replicas the new ReplicaSet may have now, counting the old ones.
    fn new_rs_new_replicas(&self, new_rs: &Value) -> i64 {
        let replicas = self.replicas();
        let new_spec = spec_replicas(new_rs);
        if !self.is_rolling() {
            return replicas;
        }
        let surge = max_surge(&self.d);
        let current: i64 = self.old.iter().map(spec_replicas).sum::<i64>() + new_spec;
        let max_total = replicas + surge;
        if current >= max_total {
            return new_spec;
        }
        let up = (max_total - current).min(replicas - new_spec);
        new_spec + up
    }

    fn is_rolling(&self) -> bool {
        meta::str_at(&self.d, "/spec/strategy/type") != Some("Recreate")
    }

    /// `isScalingEvent`: an active ReplicaSet was scaled for a different `spec.replicas`.
    fn is_scaling_event(&self) -> bool {
        let replicas = self.replicas();
        self.all()
            .into_iter()
            .filter(|rs| spec_replicas(rs) > 0)
            .any(|rs| {
                annotation_int(rs, DESIRED_REPLICAS).is_some_and(|desired| desired != replicas)
            })
    }

    /// `checkPausedConditions`.
    fn check_paused_conditions(&mut self) -> Result<(), Error> {
        if !self.has_progress_deadline() {
            return Ok(());
        }
        let paused = self.d.pointer("/spec/paused") == Some(&json!(true));
        let current = condition(&self.d, "Progressing").cloned();
        let timed_out = current
            .as_ref()
            .is_some_and(|c| c["reason"] == reason::TIMED_OUT);
        let paused_reason = current
            .as_ref()
            .is_some_and(|c| c["reason"] == reason::PAUSED);
        let mut needs_update = false;
        if paused && !paused_reason && !timed_out {
            set_condition(
                &mut self.d,
                new_condition(
                    "Progressing",
                    "Unknown",
                    reason::PAUSED,
                    "Deployment is paused",
                ),
            );
            needs_update = true;
        } else if !paused && paused_reason {
            set_condition(
                &mut self.d,
                new_condition(
                    "Progressing",
                    "Unknown",
                    reason::RESUMED,
                    "Deployment is resumed",
                ),
            );
            needs_update = true;
        }
        if needs_update {
            self.write_deployment_status()?;
        }
        Ok(())
    }

    /// `sync`: scaling only (paused Deployments and scaling events).
    fn sync_scale(&mut self, paused: bool) -> Result<(), Error> {
        self.scale()?;
        if paused {
            self.cleanup()?;
        }
        self.sync_deployment_status()
    }

    /// `scale`: proportional scaling of all active ReplicaSets.
    fn scale(&mut self) -> Result<(), Error> {
        let replicas = self.replicas();
        let active_count = self.all().iter().filter(|rs| spec_replicas(rs) > 0).count();
        // One active ReplicaSet (or none: the newest) takes the whole count.
        if active_count <= 1 {
            let target = if active_count == 1 {
                self.all()
                    .into_iter()
                    .find(|rs| spec_replicas(rs) > 0)
                    .cloned()
            } else {
                self.new_rs.clone().or_else(|| self.old.last().cloned())
            };
            if let Some(rs) = target
                && spec_replicas(&rs) != replicas
            {
                self.scale_rs(&rs, replicas)?;
            }
            return Ok(());
        }
        // A saturated new ReplicaSet means old ones go to zero.
        if let Some(new_rs) = &self.new_rs
            && spec_replicas(new_rs) == replicas
            && annotation_int(new_rs, DESIRED_REPLICAS) == Some(replicas)
            && int_at(new_rs, "/status/availableReplicas", 0) == replicas
        {
            for rs in self.old.clone() {
                if spec_replicas(&rs) > 0 {
                    self.scale_rs(&rs, 0)?;
                }
            }
            return Ok(());
        }
        if !self.is_rolling() {
            return Ok(());
        }
        let mut active: Vec<Value> = self
            .all()
            .into_iter()
            .filter(|rs| spec_replicas(rs) > 0)
            .cloned()
            .collect();
        let current: i64 = active.iter().map(spec_replicas).sum();
        let allowed = if replicas > 0 {
            replicas + max_surge(&self.d)
        } else {
            0
        };
        let to_add = allowed - current;
        if to_add > 0 {
            // Largest first, newer first on ties.
            active.sort_by(|a, b| {
                spec_replicas(b)
                    .cmp(&spec_replicas(a))
                    .then_with(|| creation(b).cmp(&creation(a)))
            });
        } else if to_add < 0 {
            // Largest first, older first on ties.
            active.sort_by(|a, b| {
                spec_replicas(b)
                    .cmp(&spec_replicas(a))
                    .then_with(|| creation(a).cmp(&creation(b)))
            });
        }
        let mut added = 0;
        let mut sizes: Vec<i64> = Vec::with_capacity(active.len());
        for rs in &active {
            if to_add != 0 {
                let p = self.proportion(rs, to_add, added);
                sizes.push(spec_replicas(rs) + p);
                added += p;
            } else {
                sizes.push(spec_replicas(rs));
            }
        }
        if to_add != 0
            && let Some(first) = sizes.first_mut()
        {
            *first = (*first + to_add - added).max(0);
        }
        for (rs, size) in active.iter().zip(sizes) {
            self.scale_rs(rs, size)?;
        }
        Ok(())
    }

    /// `GetProportion`.
    fn proportion(&self, rs: &Value, to_add: i64, added: i64) -> i64 {
        if spec_replicas(rs) == 0 || to_add == 0 || to_add == added {
            return 0;
        }
        let fraction = {
            let replicas = self.replicas();
            if replicas == 0 {
                -spec_replicas(rs)
            } else {
                let deployment_replicas = replicas + max_surge(&self.d);
                let annotated = annotation_int(rs, MAX_REPLICAS)
                    .unwrap_or_else(|| int_at(&self.d, "/status/replicas", 0));
                if annotated == 0 {
                    0
                } else {
                    let size = (spec_replicas(rs) * deployment_replicas) as f64 / annotated as f64;
                    size.round() as i64 - spec_replicas(rs)
                }
            }
        };
        let allowed = to_add - added;
        if to_add > 0 {
            fraction.min(allowed)
        } else {
            fraction.max(allowed)
        }
    }

    /// `scaleReplicaSet`: sets the size and the replica annotations, and updates the local copies.
    fn scale_rs(&mut self, rs: &Value, size: i64) -> Result<bool, Error> {
        let replicas = self.replicas();
        let max = replicas + max_surge(&self.d);
        let size_changed = spec_replicas(rs) != size;
        let annotations_changed = annotation_int(rs, DESIRED_REPLICAS) != Some(replicas)
            || annotation_int(rs, MAX_REPLICAS) != Some(max);
        if !size_changed && !annotations_changed {
            return Ok(false);
        }
        let mut copy = rs.clone();
        copy["spec"]["replicas"] = json!(size);
        set_replicas_annotations(&mut copy, replicas, max);
        let updated = self.update_rs(copy)?;
        let uid = meta::str_at(&updated, "/metadata/uid").map(str::to_string);
        let same = |x: &Value| meta::str_at(x, "/metadata/uid").map(str::to_string) == uid;
        if self.new_rs.as_ref().is_some_and(same) {
            self.new_rs = Some(updated.clone());
        }
        for o in self.old.iter_mut() {
            if same(o) {
                *o = updated.clone();
            }
        }
        if size_changed {
            let from = spec_replicas(rs);
            let direction = if size > from { "up" } else { "down" };
            super::record_event(
                self.store,
                &self.d,
                COMPONENT,
                "Normal",
                "ScalingReplicaSet",
                &format!(
                    "Scaled {direction} replica set {} from {from} to {size}",
                    meta::name_of(rs)
                ),
            );
        }
        Ok(size_changed)
    }

    /// `rolloutRolling`.
    fn rollout_rolling(&mut self) -> Result<(), Error> {
        if self.new_rs.is_none() {
            self.new_rs = Some(self.create_new_rs()?);
        }
        if self.reconcile_new_rs()? {
            return self.sync_rollout_status();
        }
        if self.reconcile_old_rss()? {
            return self.sync_rollout_status();
        }
        if self.is_complete(self.d.get("status").unwrap_or(&Value::Null)) {
            self.cleanup()?;
        }
        self.sync_rollout_status()
    }

    /// `reconcileNewReplicaSet`.
    fn reconcile_new_rs(&mut self) -> Result<bool, Error> {
        let Some(new_rs) = self.new_rs.clone() else {
            return Ok(false);
        };
        let replicas = self.replicas();
        let current = spec_replicas(&new_rs);
        if current == replicas {
            return Ok(false);
        }
        if current > replicas {
            return self.scale_rs(&new_rs, replicas);
        }
        let count = self.new_rs_new_replicas(&new_rs);
        self.scale_rs(&new_rs, count)
    }

    /// `reconcileOldReplicaSets`.
    fn reconcile_old_rss(&mut self) -> Result<bool, Error> {
        let old_count: i64 = self.old.iter().map(spec_replicas).sum();
        if old_count == 0 {
            return Ok(false);
        }
        let Some(new_rs) = self.new_rs.clone() else {
            return Ok(false);
        };
        let all_count: i64 = self.all().iter().map(|rs| spec_replicas(rs)).sum();
        let max_unavailable = max_unavailable(&self.d);
        let min_available = self.replicas() - max_unavailable;
        let new_unavailable =
            spec_replicas(&new_rs) - int_at(&new_rs, "/status/availableReplicas", 0);
        let max_scaled_down = all_count - min_available - new_unavailable;
        if max_scaled_down <= 0 {
            return Ok(false);
        }
        let cleaned = self.cleanup_unhealthy_replicas(max_scaled_down)?;
        let scaled = self.scale_down_old_for_rolling_update()?;
        Ok(cleaned + scaled > 0)
    }

    /// `cleanupUnhealthyReplicas`: scales down old replicas that are not available, oldest first.
    fn cleanup_unhealthy_replicas(&mut self, max_cleanup: i64) -> Result<i64, Error> {
        let mut old = self.old.clone();
        sort_by_creation(&mut old);
        let mut total = 0;
        for rs in old {
            if total >= max_cleanup {
                break;
            }
            let spec = spec_replicas(&rs);
            let available = int_at(&rs, "/status/availableReplicas", 0);
            if spec == 0 || spec == available {
                continue;
            }
            let down = (max_cleanup - total).min(spec - available);
            self.scale_rs(&rs, spec - down)?;
            total += down;
        }
        Ok(total)
    }

    /// `scaleDownOldReplicaSetsForRollingUpdate`: scales down old replicas within `maxUnavailable`.
    fn scale_down_old_for_rolling_update(&mut self) -> Result<i64, Error> {
        let min_available = self.replicas() - max_unavailable(&self.d);
        let available: i64 = self
            .all()
            .iter()
            .map(|rs| int_at(rs, "/status/availableReplicas", 0))
            .sum();
        if available <= min_available {
            return Ok(0);
        }
        let total_down = available - min_available;
        let mut old = self.old.clone();
        sort_by_creation(&mut old);
        let mut total = 0;
        for rs in old {
            if total >= total_down {
                break;
            }
            let spec = spec_replicas(&rs);
            if spec == 0 {
                continue;
            }
            let down = spec.min(total_down - total);
            self.scale_rs(&rs, spec - down)?;
            total += down;
        }
        Ok(total)
    }

    /// `rolloutRecreate`.
    fn rollout_recreate(&mut self) -> Result<(), Error> {
        let mut scaled_down = false;
        for rs in self.old.clone() {
            if spec_replicas(&rs) > 0 {
                self.scale_rs(&rs, 0)?;
                scaled_down = true;
            }
        }
        if scaled_down {
            return self.sync_rollout_status();
        }
        if self.old_pods_running()? {
            return self.sync_rollout_status();
        }
        if self.new_rs.is_none() {
            self.new_rs = Some(self.create_new_rs()?);
        }
        if let Some(new_rs) = self.new_rs.clone() {
            let replicas = self.replicas();
            if spec_replicas(&new_rs) != replicas {
                self.scale_rs(&new_rs, replicas)?;
            }
        }
        if self.is_complete(self.d.get("status").unwrap_or(&Value::Null)) {
            self.cleanup()?;
        }
        self.sync_rollout_status()
    }

    /// `oldPodsRunning`: old ReplicaSets still report replicas, or their pods still exist.
    fn old_pods_running(&self) -> Result<bool, Error> {
        if self
            .old
            .iter()
            .map(|rs| int_at(rs, "/status/replicas", 0))
            .sum::<i64>()
            > 0
        {
            return Ok(true);
        }
        let old_uids: Vec<&str> = self
            .old
            .iter()
            .filter_map(|rs| meta::str_at(rs, "/metadata/uid"))
            .collect();
        if old_uids.is_empty() {
            return Ok(false);
        }
        let pods = self.store.list(
            &GroupResource::pods(),
            Some(meta::namespace_of(&self.d)),
            &ListOptions {
                label_selector: Some(super::replicaset::selector_string(
                    self.d.pointer("/spec/selector"),
                )),
                ..ListOptions::default()
            },
        )?;
        Ok(pods.items.iter().any(|p| {
            let phase = meta::str_at(p, "/status/phase").unwrap_or("");
            phase != "Succeeded"
                && phase != "Failed"
                && old_uids
                    .iter()
                    .any(|uid| super::is_controlled_by(p, "ReplicaSet", uid))
        }))
    }

    /// `cleanupDeployment`: deletes the oldest old ReplicaSets beyond `revisionHistoryLimit`.
    fn cleanup(&mut self) -> Result<(), Error> {
        let Some(limit) = self
            .d
            .pointer("/spec/revisionHistoryLimit")
            .and_then(Value::as_i64)
        else {
            return Ok(());
        };
        let mut cleanable: Vec<Value> = self
            .old
            .iter()
            .filter(|rs| rs.pointer("/metadata/deletionTimestamp").is_none())
            .cloned()
            .collect();
        let diff = cleanable.len() as i64 - limit;
        if diff <= 0 {
            return Ok(());
        }
        cleanable.sort_by(|a, b| {
            revision_of(a)
                .cmp(&revision_of(b))
                .then_with(|| creation(a).cmp(&creation(b)))
        });
        for rs in cleanable.into_iter().take(diff as usize) {
            if int_at(&rs, "/status/replicas", 0) != 0
                || spec_replicas(&rs) != 0
                || int_at(&rs, "/metadata/generation", 0)
                    > int_at(&rs, "/status/observedGeneration", 0)
            {
                continue;
            }
            let opts = DeleteOptions {
                uid: meta::str_at(&rs, "/metadata/uid").map(str::to_string),
                ..DeleteOptions::default()
            };
            match self.store.delete(
                &GroupResource::replicasets(),
                Some(meta::namespace_of(&rs)),
                meta::name_of(&rs),
                &opts,
            ) {
                Ok(_) | Err(store::Error::NotFound { .. }) => {
                    tracing::debug!(replicaset = %meta::name_of(&rs), "deleted old replica set");
                }
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    /// `calculateStatus`.
    fn calculate_status(&self) -> Value {
        let all = self.all();
        let sum = |ptr: &str| -> i64 { all.iter().map(|rs| int_at(rs, ptr, 0)).sum() };
        let available = sum("/status/availableReplicas");
        let total_spec: i64 = all.iter().map(|rs| spec_replicas(rs)).sum();
        let unavailable = (total_spec - available).max(0);
        let mut status = Map::new();
        let mut put = |k: &str, n: i64| {
            if n != 0 {
                status.insert(k.into(), json!(n));
            }
        };
        put(
            "observedGeneration",
            int_at(&self.d, "/metadata/generation", 0),
        );
        put("replicas", sum("/status/replicas"));
        put(
            "updatedReplicas",
            self.new_rs
                .as_ref()
                .map(|rs| int_at(rs, "/status/replicas", 0))
                .unwrap_or(0),
        );
        put("readyReplicas", sum("/status/readyReplicas"));
        put("availableReplicas", available);
        put("unavailableReplicas", unavailable);
        if let Some(c) = self.d.pointer("/status/collisionCount") {
            status.insert("collisionCount".into(), c.clone());
        }
        if let Some(c) = self.d.pointer("/status/conditions") {
            status.insert("conditions".into(), c.clone());
        }
        let mut holder = json!({"status": Value::Object(status)});
        if available >= self.replicas() - max_unavailable(&self.d) {
            set_condition(
                &mut holder,
                new_condition(
                    "Available",
                    "True",
                    reason::MIN_AVAILABLE,
                    "Deployment has minimum availability.",
                ),
            );
        } else {
            set_condition(
                &mut holder,
                new_condition(
                    "Available",
                    "False",
                    reason::MIN_UNAVAILABLE,
                    "Deployment does not have minimum availability.",
                ),
            );
        }
        holder["status"].take()
    }

    /// `syncDeploymentStatus`.
    fn sync_deployment_status(&mut self) -> Result<(), Error> {
        let status = self.calculate_status();
        if self.d.get("status") == Some(&status) {
            return Ok(());
        }
        self.d["status"] = status;
        self.write_deployment_status()
    }

    /// `DeploymentComplete` for a status.
    fn is_complete(&self, status: &Value) -> bool {
        let replicas = self.replicas();
        int_at(status, "/updatedReplicas", 0) == replicas
            && int_at(status, "/replicas", 0) == replicas
            && int_at(status, "/availableReplicas", 0) == replicas
            && int_at(status, "/observedGeneration", 0)
                >= int_at(&self.d, "/metadata/generation", 0)
    }

    /// `syncRolloutStatus`.
    fn sync_rollout_status(&mut self) -> Result<(), Error> {
        let mut holder = json!({"status": self.calculate_status()});
        if !self.has_progress_deadline() {
            remove_condition(&mut holder, "Progressing");
        }
        let current = condition(&self.d, "Progressing").cloned();
        let new_status = holder["status"].clone();
        let is_complete_deployment = int_at(&new_status, "/replicas", 0)
            == int_at(&new_status, "/updatedReplicas", 0)
            && current
                .as_ref()
                .is_some_and(|c| c["reason"] == reason::NEW_RS_AVAILABLE);
        if self.has_progress_deadline() && !is_complete_deployment {
            let rs_name = self.new_rs.as_ref().map(|rs| meta::name_of(rs).to_string());
            let subject = |what: &str| match &rs_name {
                Some(n) => format!("ReplicaSet \"{n}\" {what}"),
                None => format!("Deployment \"{}\" {what}", meta::name_of(&self.d)),
            };
            if self.is_complete(&new_status) {
                set_condition(
                    &mut holder,
                    new_condition(
                        "Progressing",
                        "True",
                        reason::NEW_RS_AVAILABLE,
                        &subject("has successfully progressed."),
                    ),
                );
            } else if self.is_progressing(&new_status) {
                let mut c = new_condition(
                    "Progressing",
                    "True",
                    reason::RS_UPDATED,
                    &subject("is progressing."),
                );
                if let Some(cur) = &current {
                    if cur["status"] == "True" {
                        c["lastTransitionTime"] = cur["lastTransitionTime"].clone();
                    }
                    remove_condition(&mut holder, "Progressing");
                }
                set_condition(&mut holder, c);
            } else if self.timed_out(&new_status) {
                set_condition(
                    &mut holder,
                    new_condition(
                        "Progressing",
                        "False",
                        reason::TIMED_OUT,
                        &subject("has timed out progressing."),
                    ),
                );
            }
        }
        let new_status = holder["status"].take();
        if self.d.get("status") == Some(&new_status) {
            return Ok(());
        }
        self.d["status"] = new_status;
        self.write_deployment_status()
    }

    /// `DeploymentProgressing`: the new status shows progress over the stored one.
    fn is_progressing(&self, new: &Value) -> bool {
        let old = self.d.get("status").unwrap_or(&Value::Null);
        let get = |s: &Value, k: &str| int_at(s, &format!("/{k}"), 0);
        let old_old = get(old, "replicas") - get(old, "updatedReplicas");
        let new_old = get(new, "replicas") - get(new, "updatedReplicas");
        get(new, "updatedReplicas") > get(old, "updatedReplicas")
            || new_old < old_old
            || get(new, "readyReplicas") > get(old, "readyReplicas")
            || get(new, "availableReplicas") > get(old, "availableReplicas")
    }

    /// `DeploymentTimedOut`.
    fn timed_out(&self, new: &Value) -> bool {
        let Some(deadline) = self
            .d
            .pointer("/spec/progressDeadlineSeconds")
            .and_then(Value::as_i64)
        else {
            return false;
        };
        let holder = json!({"status": new});
        let Some(c) = condition(&holder, "Progressing") else {
            return false;
        };
        if c["reason"] == reason::NEW_RS_AVAILABLE {
            return false;
        }
        if c["reason"] == reason::TIMED_OUT {
            return true;
        }
        c["lastUpdateTime"]
            .as_str()
            .and_then(super::parse_time)
            .is_some_and(|from| from.as_second() + deadline < jiff::Timestamp::now().as_second())
    }

    /// `requeueStuckDeployment`: when to look again for a progress deadline that may pass.
    fn requeue_after(&self) -> Option<Duration> {
        if !self.has_progress_deadline() {
            return None;
        }
        let deadline = self
            .d
            .pointer("/spec/progressDeadlineSeconds")
            .and_then(Value::as_i64)?;
        let c = condition(&self.d, "Progressing")?;
        let status = self.d.get("status").unwrap_or(&Value::Null);
        if self.is_complete(status) || c["reason"] == reason::TIMED_OUT {
            return None;
        }
        let from = c["lastUpdateTime"].as_str().and_then(super::parse_time)?;
        let at = jiff::Timestamp::from_second(from.as_second() + deadline + 1).ok()?;
        Some(super::until(at).max(Duration::from_millis(100)))
    }
}

/// `spec.replicas` of a ReplicaSet.
pub fn spec_replicas(rs: &Value) -> i64 {
    int_at(rs, "/spec/replicas", 0)
}

fn creation(v: &Value) -> (String, String) {
    (
        meta::str_at(v, "/metadata/creationTimestamp")
            .unwrap_or("")
            .to_string(),
        meta::name_of(v).to_string(),
    )
}

/// Oldest first; ties by name (`ReplicaSetsByCreationTimestamp`).
fn sort_by_creation(list: &mut [Value]) {
    list.sort_by_key(creation);
}

fn is_zero(v: Option<&Value>) -> bool {
    v.is_none_or(|v| v.as_i64() == Some(0) || v.is_null())
}

fn set_min_ready(rs: &mut Value, min_ready: Option<Value>) {
    if let Some(spec) = rs.get_mut("spec").and_then(Value::as_object_mut) {
        match min_ready {
            Some(v) if !is_zero(Some(&v)) => {
                spec.insert("minReadySeconds".into(), v);
            }
            _ => {
                spec.remove("minReadySeconds");
            }
        }
    }
}

fn ann_ptr(key: &str) -> String {
    format!(
        "/metadata/annotations/{}",
        key.replace('~', "~0").replace('/', "~1")
    )
}

fn annotation_int(v: &Value, key: &str) -> Option<i64> {
    meta::str_at(v, &ann_ptr(key)).and_then(|s| s.parse().ok())
}

/// The revision number of a ReplicaSet (0 when missing or malformed).
pub fn revision_of(rs: &Value) -> i64 {
    annotation_int(rs, REVISION).unwrap_or(0)
}

fn annotations_mut(v: &mut Value) -> &mut Map<String, Value> {
    meta::child_map(meta::metadata_mut(v), "annotations")
}

fn add_label(template: &mut Value, key: &str, value: &str) {
    let labels = meta::child_map(meta::metadata_mut(template), "labels");
    labels.insert(key.into(), json!(value));
}

/// `SetDeploymentRevision`.
fn set_revision(d: &mut Value, revision: &str) -> bool {
    let anns = annotations_mut(d);
    if anns.get(REVISION).and_then(Value::as_str) == Some(revision) {
        return false;
    }
    anns.insert(REVISION.into(), json!(revision));
    true
}

/// `SetReplicasAnnotations`.
fn set_replicas_annotations(rs: &mut Value, desired: i64, max: i64) -> bool {
    let anns = annotations_mut(rs);
    let mut changed = false;
    for (k, v) in [(DESIRED_REPLICAS, desired), (MAX_REPLICAS, max)] {
        let s = v.to_string();
        if anns.get(k).and_then(Value::as_str) != Some(s.as_str()) {
            anns.insert(k.into(), json!(s));
            changed = true;
        }
    }
    changed
}

/// `SetNewReplicaSetAnnotations`: copies Deployment annotations, bumps the revision (keeping a history
/// on rollbacks) and, for a ReplicaSet about to be created, sets the replica annotations.
fn set_new_rs_annotations(d: &Value, rs: &mut Value, new_revision: i64, exists: bool) -> bool {
    let mut changed = false;
    if let Some(Value::Object(d_anns)) = d.pointer("/metadata/annotations") {
        let anns = annotations_mut(rs);
        for (k, v) in d_anns {
            if SKIP_COPY.contains(&k.as_str()) || anns.get(k) == Some(v) {
                continue;
            }
            anns.insert(k.clone(), v.clone());
            changed = true;
        }
    }
    let old_revision = meta::str_at(rs, &ann_ptr(REVISION)).map(str::to_string);
    let old_int = match old_revision.as_deref() {
        None | Some("") => 0,
        Some(s) => match s.parse::<i64>() {
            Ok(n) => n,
            Err(_) => return false,
        },
    };
    if old_int < new_revision {
        let anns = annotations_mut(rs);
        anns.insert(REVISION.into(), json!(new_revision.to_string()));
        changed = true;
        if let Some(old) = old_revision.filter(|s| !s.is_empty()) {
            let history = match anns.get(REVISION_HISTORY).and_then(Value::as_str) {
                Some(h) if !h.is_empty() => format!("{h},{old}"),
                _ => old,
            };
            anns.insert(REVISION_HISTORY.into(), json!(history));
        }
    }
    if !exists {
        let replicas = int_at(d, "/spec/replicas", 1);
        if set_replicas_annotations(rs, replicas, replicas + max_surge(d)) {
            changed = true;
        }
    }
    changed
}

/// Whether two pod templates are equal apart from the `pod-template-hash` label (`EqualIgnoreHash`).
/// Empty and missing maps and lists count as equal, as in Kubernetes' semantic equality.
pub fn equal_ignore_hash(a: &Value, b: &Value) -> bool {
    let strip = |t: &Value| {
        let mut t = t.clone();
        if let Some(Value::Object(labels)) = t.pointer_mut("/metadata/labels") {
            labels.remove(HASH_LABEL);
        }
        prune_empty(&mut t);
        t
    };
    strip(a) == strip(b)
}

fn prune_empty(v: &mut Value) {
    match v {
        Value::Object(m) => {
            for x in m.values_mut() {
                prune_empty(x);
            }
            m.retain(|_, x| !meta::is_empty_value(Some(x)));
        }
        Value::Array(a) => a.iter_mut().for_each(prune_empty),
        _ => {}
    }
}

/// An `IntOrString` scaled against `total` (`GetScaledValueFromIntOrPercent`).
pub fn scaled_value(v: Option<&Value>, total: i64, round_up: bool) -> i64 {
    match v {
        Some(Value::Number(n)) => n.as_i64().unwrap_or(0),
        Some(Value::String(s)) => match s.strip_suffix('%') {
            Some(p) => {
                let p: i64 = p.trim().parse().unwrap_or(0);
                let scaled = p * total;
                if round_up {
                    (scaled + 99).div_euclid(100)
                } else {
                    scaled.div_euclid(100)
                }
            }
            None => s.parse().unwrap_or(0),
        },
        _ => 0,
    }
}

/// `ResolveFenceposts`: `(maxSurge, maxUnavailable)` as pod counts; both zero makes unavailable 1.
pub fn resolve_fenceposts(d: &Value) -> (i64, i64) {
    let replicas = int_at(d, "/spec/replicas", 1);
    let ru = d.pointer("/spec/strategy/rollingUpdate");
    let surge = scaled_value(
        ru.and_then(|r| r.get("maxSurge")).or(Some(&json!("25%"))),
        replicas,
        true,
    );
    let unavailable = scaled_value(
        ru.and_then(|r| r.get("maxUnavailable"))
            .or(Some(&json!("25%"))),
        replicas,
        false,
    );
    if surge == 0 && unavailable == 0 {
        return (0, 1);
    }
    (surge, unavailable)
}

/// `MaxSurge`.
pub fn max_surge(d: &Value) -> i64 {
    if meta::str_at(d, "/spec/strategy/type") == Some("Recreate") {
        return 0;
    }
    resolve_fenceposts(d).0
}

/// `MaxUnavailable`.
pub fn max_unavailable(d: &Value) -> i64 {
    let replicas = int_at(d, "/spec/replicas", 1);
    if meta::str_at(d, "/spec/strategy/type") == Some("Recreate") || replicas == 0 {
        return 0;
    }
    resolve_fenceposts(d).1.min(replicas)
}

/// A condition of an object's `status.conditions` by type.
pub fn condition<'a>(obj: &'a Value, kind: &str) -> Option<&'a Value> {
    obj.pointer("/status/conditions")
        .and_then(Value::as_array)?
        .iter()
        .find(|c| c["type"] == kind)
}

/// `NewDeploymentCondition`: both times are now.
fn new_condition(kind: &str, status: &str, reason: &str, message: &str) -> Value {
    let now = meta::now_rfc3339();
    json!({"type": kind, "status": status, "lastUpdateTime": now, "lastTransitionTime": now,
        "reason": reason, "message": message})
}

fn status_map(obj: &mut Value) -> &mut Map<String, Value> {
    if !obj.is_object() {
        *obj = json!({});
    }
    let Value::Object(root) = obj else {
        unreachable!("made an object above")
    };
    meta::child_map(root, "status")
}

/// `SetDeploymentCondition`: nothing changes when status and reason are the same; the transition time
/// is kept when only the reason changes.
fn set_condition(obj: &mut Value, mut cond: Value) {
    let kind = cond["type"].as_str().unwrap_or("").to_string();
    if let Some(cur) = condition(obj, &kind) {
        if cur["status"] == cond["status"] && cur["reason"] == cond["reason"] {
            return;
        }
        if cur["status"] == cond["status"] {
            cond["lastTransitionTime"] = cur["lastTransitionTime"].clone();
        }
    }
    let status = status_map(obj);
    let list = status.entry("conditions").or_insert_with(|| json!([]));
    if let Value::Array(list) = list {
        list.retain(|c| c["type"] != kind.as_str());
        list.push(cond);
    }
}

fn remove_condition(obj: &mut Value, kind: &str) {
    if let Some(Value::Array(list)) = obj.pointer_mut("/status/conditions") {
        list.retain(|c| c["type"] != kind);
    }
}

#[cfg(test)]
mod tests;
