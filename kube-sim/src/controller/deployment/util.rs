//! Helpers over Deployments and ReplicaSets (`pkg/controller/deployment/util`): revisions and their
//! annotations, template equality, surge and unavailability, and conditions.

use serde_json::{Map, Value, json};

use super::{DESIRED_REPLICAS, HASH_LABEL, MAX_REPLICAS, REVISION, REVISION_HISTORY, SKIP_COPY};
use crate::controller::int_at;
use crate::meta;

/// `spec.replicas` of a ReplicaSet.
pub fn spec_replicas(rs: &Value) -> i64 {
    int_at(rs, "/spec/replicas", 0)
}

pub(super) fn creation(v: &Value) -> (String, String) {
    (
        meta::str_at(v, "/metadata/creationTimestamp")
            .unwrap_or("")
            .to_string(),
        meta::name_of(v).to_string(),
    )
}

/// Oldest first; ties by name (`ReplicaSetsByCreationTimestamp`).
pub(super) fn sort_by_creation(list: &mut [Value]) {
    list.sort_by_key(creation);
}

pub(super) fn is_zero(v: Option<&Value>) -> bool {
    v.is_none_or(|v| v.as_i64() == Some(0) || v.is_null())
}

pub(super) fn set_min_ready(rs: &mut Value, min_ready: Option<Value>) {
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

pub(super) fn ann_ptr(key: &str) -> String {
    format!(
        "/metadata/annotations/{}",
        key.replace('~', "~0").replace('/', "~1")
    )
}

pub(super) fn annotation_int(v: &Value, key: &str) -> Option<i64> {
    meta::str_at(v, &ann_ptr(key)).and_then(|s| s.parse().ok())
}

/// The revision number of a ReplicaSet (0 when missing or malformed).
pub fn revision_of(rs: &Value) -> i64 {
    annotation_int(rs, REVISION).unwrap_or(0)
}

pub(super) fn annotations_mut(v: &mut Value) -> &mut Map<String, Value> {
    meta::child_map(meta::metadata_mut(v), "annotations")
}

pub(super) fn add_label(template: &mut Value, key: &str, value: &str) {
    let labels = meta::child_map(meta::metadata_mut(template), "labels");
    labels.insert(key.into(), json!(value));
}

/// `SetDeploymentRevision`.
pub(super) fn set_revision(d: &mut Value, revision: &str) -> bool {
    let anns = annotations_mut(d);
    if anns.get(REVISION).and_then(Value::as_str) == Some(revision) {
        return false;
    }
    anns.insert(REVISION.into(), json!(revision));
    true
}

/// `SetReplicasAnnotations`.
pub(super) fn set_replicas_annotations(rs: &mut Value, desired: i64, max: i64) -> bool {
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
pub(super) fn set_new_rs_annotations(
    d: &Value,
    rs: &mut Value,
    new_revision: i64,
    exists: bool,
) -> bool {
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

pub(super) fn prune_empty(v: &mut Value) {
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
pub(super) fn new_condition(kind: &str, status: &str, reason: &str, message: &str) -> Value {
    let now = meta::now_rfc3339();
    json!({"type": kind, "status": status, "lastUpdateTime": now, "lastTransitionTime": now,
        "reason": reason, "message": message})
}

pub(super) fn status_map(obj: &mut Value) -> &mut Map<String, Value> {
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
pub(super) fn set_condition(obj: &mut Value, mut cond: Value) {
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

pub(super) fn remove_condition(obj: &mut Value, kind: &str) {
    if let Some(Value::Array(list)) = obj.pointer_mut("/status/conditions") {
        list.retain(|c| c["type"] != kind);
    }
}
