//! Rollout progress (`pkg/controller/deployment/progress.go`): the `Progressing` condition, the progress
//! deadline and when to sync again to notice it pass.

use std::time::Duration;

use serde_json::{Value, json};

use super::util::{condition, new_condition, remove_condition, set_condition};
use super::{Rollout, reason};
use crate::controller::{Error, int_at};
use crate::meta;

impl Rollout<'_> {
    /// `DeploymentComplete` for a status.
    pub(super) fn is_complete(&self, status: &Value) -> bool {
        let replicas = self.replicas();
        int_at(status, "/updatedReplicas", 0) == replicas
            && int_at(status, "/replicas", 0) == replicas
            && int_at(status, "/availableReplicas", 0) == replicas
            && int_at(status, "/observedGeneration", 0)
                >= int_at(&self.d, "/metadata/generation", 0)
    }

    /// `syncRolloutStatus`.
    pub(super) fn sync_rollout_status(&mut self) -> Result<(), Error> {
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
    pub(super) fn is_progressing(&self, new: &Value) -> bool {
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
    pub(super) fn timed_out(&self, new: &Value) -> bool {
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
            .and_then(crate::controller::parse_time)
            .is_some_and(|from| from.as_second() + deadline < jiff::Timestamp::now().as_second())
    }

    /// `requeueStuckDeployment`: when to look again for a progress deadline that may pass.
    pub(super) fn requeue_after(&self) -> Option<Duration> {
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
        let from = c["lastUpdateTime"]
            .as_str()
            .and_then(crate::controller::parse_time)?;
        let at = jiff::Timestamp::from_second(from.as_second() + deadline + 1).ok()?;
        Some(crate::controller::until(at).max(Duration::from_millis(100)))
    }
}
