//! Syncing a Deployment's ReplicaSets (`pkg/controller/deployment/sync.go`): the new ReplicaSet found or
//! created with its revision, proportional scaling, history cleanup and the counts of `status`.

use serde_json::{Map, Value, json};

use super::util::{
    add_label, ann_ptr, annotation_int, condition, creation, equal_ignore_hash, is_zero, max_surge,
    max_unavailable, new_condition, revision_of, set_condition, set_min_ready,
    set_new_rs_annotations, set_replicas_annotations, set_revision, sort_by_creation,
    spec_replicas, status_map,
};
use super::{COMPONENT, DESIRED_REPLICAS, HASH_LABEL, MAX_REPLICAS, REVISION, Rollout, reason};
use crate::controller::hash::compute_hash;
use crate::controller::{Error, MANAGER, int_at};
use crate::meta;
use crate::resource::GroupResource;
use crate::store::{self, DeleteOptions, Endpoint, WriteOptions};

impl Rollout<'_> {
    /// `getAllReplicaSetsAndSyncRevision`: finds (or creates) the new ReplicaSet and syncs revisions.
    pub(super) fn all_replica_sets_and_sync_revision(
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

    pub(super) fn next_revision(&self) -> i64 {
        self.old.iter().map(revision_of).max().unwrap_or(0) + 1
    }

    /// `getNewReplicaSet` for an existing new ReplicaSet: syncs its annotations and the revision.
    pub(super) fn sync_existing_new_rs(&mut self, rs: Value) -> Result<Value, Error> {
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
            let found = condition(&self.d, "Progressing").is_none().then(|| {
                let msg = format!("Found new replica set \"{}\"", meta::name_of(&copy));
                (reason::FOUND_NEW_RS, msg)
            });
            self.record_new_rs(&rev, found)?;
            Ok(copy)
        }
    }

    /// `getNewReplicaSet` when there is none: creates `<deploy>-<hash>`.
    pub(super) fn create_new_rs(&mut self) -> Result<Value, Error> {
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
        let name = format!("{}-{hash}", meta::name_of(&self.d));
        let mut rs = self.replica_set_for(&template, &hash);
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
                    self.scaling_event(&format!("Scaled up replica set {name} from 0 to {count}"));
                }
                c.object
            }
            Err(store::Error::AlreadyExists { .. }) => {
                return self.existing_or_collision(&ns, name, &template, collision);
            }
            Err(e) => return Err(e.into()),
        };
        let msg = format!("Created new replica set \"{}\"", meta::name_of(&created));
        self.record_new_rs(
            &new_revision.to_string(),
            Some((reason::NEW_RS_CREATED, msg)),
        )?;
        Ok(created)
    }

    /// Records a `ScalingReplicaSet` event on the Deployment.
    fn scaling_event(&self, message: &str) {
        crate::controller::record_event(
            self.store,
            &self.d,
            COMPONENT,
            "Normal",
            "ScalingReplicaSet",
            message,
        );
    }

    /// Records the new ReplicaSet's revision on the Deployment and, with a progress deadline, the
    /// `Progressing` reason and message given; writes the Deployment's status when either changed it.
    fn record_new_rs(
        &mut self,
        revision: &str,
        progressing: Option<(&str, String)>,
    ) -> Result<(), Error> {
        let mut needs_update = set_revision(&mut self.d, revision);
        if let Some((reason, msg)) = progressing.filter(|_| self.has_progress_deadline()) {
            set_condition(
                &mut self.d,
                new_condition("Progressing", "True", reason, &msg),
            );
            needs_update = true;
        }
        if needs_update {
            self.write_deployment_status()?;
        }
        Ok(())
    }

    /// A new ReplicaSet of the Deployment's template under `hash`: the hash label on its labels, selector and
    /// template, and the Deployment as its controller.
    fn replica_set_for(&self, template: &Value, hash: &str) -> Value {
        let name = format!("{}-{hash}", meta::name_of(&self.d));
        let mut rs_template = template.clone();
        add_label(&mut rs_template, HASH_LABEL, hash);
        let mut selector = self
            .d
            .pointer("/spec/selector")
            .cloned()
            .unwrap_or_default();
        if let Value::Object(s) = &mut selector {
            meta::child_map(s, "matchLabels").insert(HASH_LABEL.into(), json!(hash));
        }
        json!({
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "metadata": {
                "name": name,
                "namespace": meta::namespace_of(&self.d),
                "ownerReferences": [crate::controller::controller_ref(&self.d, "apps/v1", "Deployment")],
                "labels": rs_template.pointer("/metadata/labels").cloned().unwrap_or(json!({})),
            },
            "spec": {"replicas": 0, "selector": selector, "template": rs_template},
        })
    }

    /// When `<deploy>-<hash>` exists already: that ReplicaSet if it is this Deployment's with the same
    /// template, or else a hash collision, counted in `status.collisionCount` so the next sync tries another
    /// hash.
    fn existing_or_collision(
        &mut self,
        ns: &str,
        name: String,
        template: &Value,
        collision: Option<i64>,
    ) -> Result<Value, Error> {
        let found = self
            .store
            .get(&GroupResource::replicasets(), Some(ns), &name)?;
        let uid = meta::str_at(&self.d, "/metadata/uid").unwrap_or("");
        if crate::controller::is_controlled_by(&found, "Deployment", uid)
            && equal_ignore_hash(
                found.pointer("/spec/template").unwrap_or(&Value::Null),
                template,
            )
        {
            return Ok(found);
        }
        // A hash collision: count it and try again with a different hash.
        let n = collision.unwrap_or(0) + 1;
        status_map(&mut self.d).insert("collisionCount".into(), json!(n));
        self.write_deployment_status()?;
        Err(store::Error::AlreadyExists {
            resource: GroupResource::replicasets(),
            name,
        }
        .into())
    }

    /// Writes the Deployment's status (and annotations) as they are now in `self.d`.
    pub(super) fn write_deployment_status(&mut self) -> Result<(), Error> {
        let ns = meta::namespace_of(&self.d).to_string();
        self.d = self
            .store
            .update(
                Endpoint::Status,
                &GroupResource::deployments(),
                Some(&ns),
                self.d.clone(),
                &WriteOptions::manager(MANAGER),
            )?
            .object;
        Ok(())
    }

    pub(super) fn update_rs(&self, rs: Value) -> Result<Value, Error> {
        let ns = meta::namespace_of(&rs).to_string();
        Ok(self
            .store
            .update(
                Endpoint::Main,
                &GroupResource::replicasets(),
                Some(&ns),
                rs,
                &WriteOptions::manager(MANAGER),
            )?
            .object)
    }

    /// `isScalingEvent`: an active ReplicaSet was scaled for a different `spec.replicas`.
    pub(super) fn is_scaling_event(&self) -> bool {
        let replicas = self.replicas();
        self.all()
            .into_iter()
            .filter(|rs| spec_replicas(rs) > 0)
            .any(|rs| {
                annotation_int(rs, DESIRED_REPLICAS).is_some_and(|desired| desired != replicas)
            })
    }

    /// `checkPausedConditions`.
    pub(super) fn check_paused_conditions(&mut self) -> Result<(), Error> {
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
    pub(super) fn sync_scale(&mut self, paused: bool) -> Result<(), Error> {
        self.scale()?;
        if paused {
            self.cleanup()?;
        }
        self.sync_deployment_status()
    }

    /// `scale`: proportional scaling of all active ReplicaSets.
    pub(super) fn scale(&mut self) -> Result<(), Error> {
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
        self.scale_proportionally()
    }

    /// The surge of a rolling Deployment spread over its active ReplicaSets in proportion to their sizes.
    fn scale_proportionally(&mut self) -> Result<(), Error> {
        let replicas = self.replicas();
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
    pub(super) fn proportion(&self, rs: &Value, to_add: i64, added: i64) -> i64 {
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
    pub(super) fn scale_rs(&mut self, rs: &Value, size: i64) -> Result<bool, Error> {
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
            self.scaling_event(&format!(
                "Scaled {direction} replica set {} from {from} to {size}",
                meta::name_of(rs)
            ));
        }
        Ok(size_changed)
    }

    /// `cleanupDeployment`: deletes the oldest old ReplicaSets beyond `revisionHistoryLimit`.
    pub(super) fn cleanup(&mut self) -> Result<(), Error> {
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
    pub(super) fn calculate_status(&self) -> Value {
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
    pub(super) fn sync_deployment_status(&mut self) -> Result<(), Error> {
        let status = self.calculate_status();
        if self.d.get("status") == Some(&status) {
            return Ok(());
        }
        self.d["status"] = status;
        self.write_deployment_status()
    }
}
