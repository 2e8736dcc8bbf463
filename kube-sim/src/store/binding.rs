//! Binding a pod to a node (`pods/binding`), as kube-apiserver's `BindingREST` does: one write that sets
//! `spec.nodeName`, the binding's annotations and `PodScheduled=True` together. kube-apiserver makes it
//! straight in storage, past the field manager, so a bound pod's `managedFields` do not change and no
//! manager owns `spec.nodeName`.

use serde_json::{Map, Value, json};

use super::{Error, Result, Store};
use crate::meta::{self, metadata_mut};
use crate::resource::GroupResource;

/// A request to bind a pod, the parts of a `Binding` the API server reads.
#[derive(Clone, Debug, Default)]
pub struct Binding {
    /// The node the pod runs on (`target.name`).
    pub node: String,
    /// The pod's UID when the binder names one (`metadata.uid`): a precondition.
    pub uid: Option<String>,
    /// Annotations the binding adds to the pod (`metadata.annotations`).
    pub annotations: Map<String, Value>,
}

impl Store {
    /// Binds pod `namespace/name` to `binding.node`, and returns the pod as stored.
    ///
    /// Refused with 409 `Conflict` on `pods/binding` when the UID differs, the pod is being deleted or is
    /// bound already, or it has scheduling gates; 404 when it does not exist.
    pub fn bind(&self, namespace: &str, name: &str, binding: &Binding) -> Result<Value> {
        let gr = GroupResource::pods();
        let st = self.lock();
        let info = st.info(&gr)?;
        let key = (namespace.to_string(), name.to_string());
        let old = st.stored(&gr, &key)?;
        if let Some(reason) = refusal(&old, binding) {
            return Err(Error::Conflict {
                resource: GroupResource::new("", "pods/binding"),
                name: name.to_string(),
                reason,
            });
        }
        let mut new = (*old).clone();
        new["spec"]["nodeName"] = json!(binding.node);
        if !binding.annotations.is_empty() {
            let md = metadata_mut(&mut new);
            let annotations = md.entry("annotations").or_insert_with(|| json!({}));
            if let Value::Object(a) = annotations {
                a.extend(binding.annotations.clone());
            }
        }
        update_pod_condition(&mut new, json!({"type": "PodScheduled", "status": "True"}));
        // Checked like any write of a pod, so a binding cannot store what an update could not.
        super::update::validate(&info, &new, Some(&old))?;
        Ok(self.commit_update(st, &info, key, old, new))
    }
}

/// Why kube-apiserver refuses to bind `pod` (`setPodNodeAndMetadata`), if it does.
fn refusal(pod: &Value, binding: &Binding) -> Option<String> {
    let name = meta::name_of(pod);
    if let Some(uid) = binding.uid.as_deref().filter(|u| !u.is_empty())
        && meta::str_at(pod, "/metadata/uid") != Some(uid)
    {
        return Some(format!(
            "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
            meta::str_at(pod, "/metadata/uid").unwrap_or("")
        ));
    }
    if pod.pointer("/metadata/deletionTimestamp").is_some() {
        return Some(format!(
            "pod {name} is being deleted, cannot be assigned to a host"
        ));
    }
    if let Some(node) = meta::str_at(pod, "/spec/nodeName").filter(|n| !n.is_empty()) {
        return Some(format!("pod {name} is already assigned to node \"{node}\""));
    }
    if !meta::is_empty_value(pod.pointer("/spec/schedulingGates")) {
        return Some(format!("pod {name} has non-empty .spec.schedulingGates"));
    }
    None
}

/// Sets `condition` in a pod's status as `UpdatePodCondition` does, for the API server's binding and
/// for the scheduler alike: it replaces the condition of its type in place (keeping its transition time
/// when its status is the same) or is appended, with no probe time.
pub fn update_pod_condition(pod: &mut Value, mut condition: Value) {
    let status = pod
        .as_object_mut()
        .map(|o| o.entry("status").or_insert_with(|| json!({})));
    let Some(Value::Object(status)) = status else {
        return;
    };
    let conditions = status
        .entry("conditions")
        .or_insert_with(|| Value::Array(Vec::new()));
    if !conditions.is_array() {
        *conditions = Value::Array(Vec::new());
    }
    let Value::Array(conditions) = conditions else {
        return;
    };
    condition["lastProbeTime"] = Value::Null;
    condition["lastTransitionTime"] = json!(meta::now_rfc3339());
    match conditions
        .iter_mut()
        .find(|c| c["type"] == condition["type"])
    {
        Some(old) => {
            if old["status"] == condition["status"] {
                condition["lastTransitionTime"] = old["lastTransitionTime"].clone();
            }
            *old = condition;
        }
        None => conditions.push(condition),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pending_pod_is_marked_scheduled_in_place_and_a_new_condition_is_appended() {
        let mut pending = json!({"status": {"conditions": [
            {"type": "Other", "status": "True"},
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "no",
             "lastTransitionTime": "2026-01-01T00:00:00Z"},
        ]}});
        update_pod_condition(
            &mut pending,
            json!({"type": "PodScheduled", "status": "True"}),
        );
        let conditions = pending["status"]["conditions"].as_array().unwrap();
        assert_eq!(conditions.len(), 2);
        assert_eq!(conditions[1]["status"], "True");
        assert!(conditions[1].get("reason").is_none());
        assert_ne!(conditions[1]["lastTransitionTime"], "2026-01-01T00:00:00Z");

        let mut fresh = json!({"status": {"conditions": [{"type": "Other", "status": "True"}]}});
        update_pod_condition(
            &mut fresh,
            json!({"type": "PodScheduled", "status": "True"}),
        );
        assert_eq!(fresh["status"]["conditions"][1]["type"], "PodScheduled");

        // A new message under the same status keeps when the status last changed.
        let waiting = |message: &str| json!({"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message});
        let mut unschedulable = json!({"status": {"conditions": [
            {"type": "PodScheduled", "status": "False", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}});
        update_pod_condition(&mut unschedulable, waiting("again"));
        let condition = &unschedulable["status"]["conditions"][0];
        assert_eq!(condition["lastTransitionTime"], "2026-01-01T00:00:00Z");
        assert_eq!(
            (&condition["message"], &condition["lastProbeTime"]),
            (&json!("again"), &Value::Null)
        );
    }

    #[test]
    fn a_bound_deleted_gated_or_other_pod_is_refused() {
        let binding = Binding {
            node: "n".into(),
            uid: Some("u1".into()),
            ..Binding::default()
        };
        let pod = |extra: Value| {
            let mut p = json!({"metadata": {"name": "p", "uid": "u1"}, "spec": {}});
            crate::patch::merge_patch(&mut p, &extra);
            p
        };
        assert_eq!(refusal(&pod(json!({})), &binding), None);
        let other = refusal(&pod(json!({"metadata": {"uid": "u2"}})), &binding).unwrap();
        assert!(other.contains("UID in precondition: u1"), "{other}");
        let bound = refusal(&pod(json!({"spec": {"nodeName": "m"}})), &binding).unwrap();
        assert_eq!(bound, "pod p is already assigned to node \"m\"");
        let deleted = pod(json!({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"}}));
        assert!(
            refusal(&deleted, &binding)
                .unwrap()
                .contains("is being deleted")
        );
        let gated = pod(json!({"spec": {"schedulingGates": [{"name": "g"}]}}));
        assert!(
            refusal(&gated, &binding)
                .unwrap()
                .contains("schedulingGates")
        );
    }
}
