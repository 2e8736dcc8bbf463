//! The Recreate strategy (`pkg/controller/deployment/recreate.go`): old ReplicaSets scaled to zero, their
//! pods gone, then the new one scaled up.

use serde_json::Value;

use super::Rollout;
use super::util::spec_replicas;
use crate::controller::{Error, int_at};
use crate::meta;
use crate::resource::GroupResource;
use crate::store::ListOptions;

impl Rollout<'_> {
    /// `rolloutRecreate`.
    pub(super) fn rollout_recreate(&mut self) -> Result<(), Error> {
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
    pub(super) fn old_pods_running(&self) -> Result<bool, Error> {
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
                label_selector: Some(crate::controller::replicaset::selector_string(
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
                    .any(|uid| crate::controller::is_controlled_by(p, "ReplicaSet", uid))
        }))
    }
}
