//! The RollingUpdate strategy (`pkg/controller/deployment/rolling.go`): the new ReplicaSet scaled up
//! within `maxSurge`, old ones down within `maxUnavailable`.

use serde_json::Value;

use super::Rollout;
use super::util::{max_surge, max_unavailable, sort_by_creation, spec_replicas};
use crate::controller::{Error, int_at};
use crate::meta;

impl Rollout<'_> {
    /// `NewRSNewReplicas`: how many replicas the new ReplicaSet may have now, counting the old ones.
    pub(super) fn new_rs_new_replicas(&self, new_rs: &Value) -> i64 {
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

    pub(super) fn is_rolling(&self) -> bool {
        meta::str_at(&self.d, "/spec/strategy/type") != Some("Recreate")
    }

    /// `rolloutRolling`.
    pub(super) fn rollout_rolling(&mut self) -> Result<(), Error> {
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
    pub(super) fn reconcile_new_rs(&mut self) -> Result<bool, Error> {
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
    pub(super) fn reconcile_old_rss(&mut self) -> Result<bool, Error> {
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
    pub(super) fn cleanup_unhealthy_replicas(&mut self, max_cleanup: i64) -> Result<i64, Error> {
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
    pub(super) fn scale_down_old_for_rolling_update(&mut self) -> Result<i64, Error> {
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
}
