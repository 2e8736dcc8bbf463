//! Resources that are a second view of another group's objects: `events.k8s.io/v1` Events are core
//! Events, stored once, as the API server keeps them. Bodies that come in are turned into the stored form
//! before the store sees them (objects and patches alike); objects that go out are turned into the view's.

use serde_json::{Map, Value, json};

use crate::resource::ResourceInfo;
use crate::store::Patch;

/// `(events.k8s.io/v1 field, core/v1 field)` pairs; every other field has the same name in both.
const EVENT_FIELDS: &[(&str, &str)] = &[
    ("regarding", "involvedObject"),
    ("note", "message"),
    ("deprecatedSource", "source"),
    ("deprecatedFirstTimestamp", "firstTimestamp"),
    ("deprecatedLastTimestamp", "lastTimestamp"),
    ("deprecatedCount", "count"),
    ("reportingController", "reportingComponent"),
];

/// Whether `info` is a view of objects stored under another resource.
pub fn is_view(info: &ResourceInfo) -> bool {
    info.stored_as.is_some()
}

/// Renames the top-level fields of `obj` from one side of [`EVENT_FIELDS`] to the other.
fn rename(obj: &mut Map<String, Value>, to_core: bool) {
    for (view, core) in EVENT_FIELDS {
        let (from, to) = if to_core { (view, core) } else { (core, view) };
        if let Some(v) = obj.remove(*from) {
            obj.insert(to.to_string(), v);
        }
    }
}

/// An object sent to `info`'s endpoint, in the form the store keeps.
pub fn incoming(info: &ResourceInfo, mut obj: Value) -> Value {
    if !is_view(info) {
        return obj;
    }
    if let Value::Object(m) = &mut obj {
        rename(m, true);
        if m.contains_key("apiVersion") {
            m.insert("apiVersion".into(), json!("v1"));
        }
    }
    obj
}

/// A stored object, as `info`'s endpoint shows it (its `apiVersion` is set by the caller).
pub fn outgoing(info: &ResourceInfo, mut obj: Value) -> Value {
    if let (true, Value::Object(m)) = (is_view(info), &mut obj) {
        rename(m, false);
    }
    obj
}

/// A patch sent to `info`'s endpoint, as a patch of the stored form: the fields of merge and apply
/// bodies are renamed, and so are the first segments of JSON patch paths.
pub fn incoming_patch(info: &ResourceInfo, patch: Patch) -> Patch {
    if !is_view(info) {
        return patch;
    }
    match patch {
        Patch::Apply(body) => Patch::Apply(incoming(info, body)),
        Patch::Merge(body) => Patch::Merge(incoming(info, body)),
        Patch::Strategic(body) => Patch::Strategic(incoming(info, body)),
        Patch::Json(mut ops) => {
            for op in ops.as_array_mut().into_iter().flatten() {
                for key in ["path", "from"] {
                    if let Some(path) = op.get(key).and_then(Value::as_str) {
                        op[key] = json!(core_path(path));
                    }
                }
            }
            Patch::Json(ops)
        }
    }
}

/// A JSON pointer into the view, as a pointer into the stored form.
fn core_path(path: &str) -> String {
    let rest = path.strip_prefix('/').unwrap_or(path);
    let (first, tail) = rest
        .split_once('/')
        .map_or((rest, None), |(f, t)| (f, Some(t)));
    let first = EVENT_FIELDS
        .iter()
        .find(|(view, _)| *view == first)
        .map_or(first, |(_, core)| core);
    match tail {
        Some(t) => format!("/{first}/{t}"),
        None => format!("/{first}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resource::built_ins;

    fn events_view() -> ResourceInfo {
        built_ins()
            .into_iter()
            .find(|r| r.group == "events.k8s.io")
            .expect("events.k8s.io is served")
    }

    #[test]
    fn an_events_k8s_io_event_is_a_core_event_and_back() {
        let info = events_view();
        let view = json!({"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "e"},
            "regarding": {"kind": "Pod", "name": "p"}, "note": "hello", "reason": "Started",
            "reportingController": "op", "reportingInstance": "op-1", "deprecatedCount": 2});
        let core = incoming(&info, view.clone());
        assert_eq!(core["apiVersion"], "v1");
        assert_eq!(core["involvedObject"]["name"], "p");
        assert_eq!(core["message"], "hello");
        assert_eq!(core["reportingComponent"], "op");
        assert_eq!(core["reportingInstance"], "op-1");
        assert_eq!(core["count"], 2);
        assert!(core.get("note").is_none());
        let mut back = outgoing(&info, core);
        back["apiVersion"] = json!("events.k8s.io/v1");
        assert_eq!(back, view);
    }

    #[test]
    fn json_patch_paths_point_into_the_stored_form() {
        let patch = Patch::Json(json!([{"op": "replace", "path": "/note", "value": "x"},
            {"op": "replace", "path": "/series/count", "value": 3}]));
        let Patch::Json(ops) = incoming_patch(&events_view(), patch) else {
            panic!("still a JSON patch");
        };
        assert_eq!(ops[0]["path"], "/message");
        assert_eq!(ops[1]["path"], "/series/count");
    }
}
