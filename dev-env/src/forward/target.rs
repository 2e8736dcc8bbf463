//! Which pod a forward's new connections go to: a Ready pod, not
//! terminating, of the newest ReplicaSet that has one (by the Deployment
//! controller's `deployment.kubernetes.io/revision`), keeping the current
//! one while it still qualifies so connections do not hop between equal
//! pods.

use std::collections::BTreeMap;

use k8s_openapi::api::{apps::v1::ReplicaSet, core::v1::Pod};
use kube::ResourceExt;

/// The annotation the Deployment controller numbers its ReplicaSets with.
const REVISION: &str = "deployment.kubernetes.io/revision";

/// The pods and ReplicaSets of one component, as its watches last saw them.
#[derive(Debug, Default)]
pub(crate) struct View {
    pub(crate) pods: BTreeMap<String, Pod>,
    pub(crate) replica_sets: BTreeMap<String, ReplicaSet>,
}

impl View {
    /// The pod new connections should go to, given the one they go to now.
    pub(crate) fn target(&self, current: Option<&str>) -> Option<String> {
        let candidates: Vec<(u64, &str)> = self
            .pods
            .values()
            .filter(|p| serves(p))
            .map(|p| {
                (
                    self.revision_of(p),
                    p.metadata.name.as_deref().unwrap_or(""),
                )
            })
            .collect();
        let newest = candidates.iter().map(|(r, _)| *r).max()?;
        let mut best = candidates.iter().filter(|(r, _)| *r == newest);
        match best.clone().find(|(_, name)| Some(*name) == current) {
            Some((_, name)) => Some(name.to_string()),
            None => best.next().map(|(_, name)| name.to_string()),
        }
    }

    /// The revision of the ReplicaSet that controls `pod`; 0 when unknown.
    fn revision_of(&self, pod: &Pod) -> u64 {
        pod.owner_references()
            .iter()
            .find(|o| o.kind == "ReplicaSet" && o.controller == Some(true))
            .and_then(|o| self.replica_sets.get(&o.name))
            .and_then(|rs| rs.annotations().get(REVISION))
            .and_then(|r| r.parse().ok())
            .unwrap_or(0)
    }
}

/// Running, Ready and not being deleted.
fn serves(pod: &Pod) -> bool {
    let Some(status) = &pod.status else {
        return false;
    };
    pod.metadata.deletion_timestamp.is_none()
        && status.phase.as_deref() == Some("Running")
        && status
            .conditions
            .iter()
            .flatten()
            .any(|c| c.type_ == "Ready" && c.status == "True")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rs(name: &str, revision: u64) -> ReplicaSet {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "annotations": {REVISION: revision.to_string()}}
        }))
        .unwrap()
    }

    fn pod(name: &str, rs: &str, ready: bool, deleting: bool) -> Pod {
        let mut metadata = serde_json::json!({
            "name": name,
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": rs, "uid": rs, "controller": true}]
        });
        if deleting {
            metadata["deletionTimestamp"] = serde_json::json!("2026-01-01T00:00:00Z");
        }
        serde_json::from_value(serde_json::json!({
            "metadata": metadata,
            "status": {
                "phase": "Running",
                "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]
            }
        }))
        .unwrap()
    }

    fn view(pods: Vec<Pod>, sets: Vec<ReplicaSet>) -> View {
        View {
            pods: pods.into_iter().map(|p| (p.name_any(), p)).collect(),
            replica_sets: sets.into_iter().map(|r| (r.name_any(), r)).collect(),
        }
    }

    #[test]
    fn the_newest_replica_set_with_a_ready_pod_wins_and_the_current_pod_is_kept() {
        let old = vec![pod("a-1", "a", true, false), pod("a-2", "a", true, false)];
        let sets = vec![rs("a", 1), rs("b", 2)];
        let v = view(old.clone(), sets.clone());
        assert_eq!(v.target(Some("a-2")).as_deref(), Some("a-2"));
        assert_eq!(v.target(None).as_deref(), Some("a-1"));

        // The new ReplicaSet's pod is not Ready yet: stay.
        let mut pods = old.clone();
        pods.push(pod("b-1", "b", false, false));
        assert_eq!(
            view(pods.clone(), sets.clone())
                .target(Some("a-2"))
                .as_deref(),
            Some("a-2")
        );

        // Ready: move to it, even though the old pods still serve.
        pods.push(pod("b-2", "b", true, false));
        assert_eq!(
            view(pods, sets.clone()).target(Some("a-2")).as_deref(),
            Some("b-2")
        );

        // Terminating pods never qualify; none left is no target.
        let gone = vec![pod("a-1", "a", true, true)];
        assert_eq!(view(gone, sets).target(Some("a-1")), None);
    }
}
