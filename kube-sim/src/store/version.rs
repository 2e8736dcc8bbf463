//! One version of an object as the watch history keeps it: shared with the store while it is the stored
//! object, and once replaced (or deleted) as its serialized JSON, about a tenth of its size as a `Value`.
//! A replaced version is read again only by a watcher that has not caught up yet, or by a snapshot.

use std::sync::{Arc, Mutex, Weak};

use serde_json::{Map, Value};

use crate::lock::MutexExt as _;
use crate::resource::GroupResource;
use crate::selector;

/// An object version kept by the history.
#[derive(Clone, Debug)]
pub(super) enum Version {
    /// The stored object itself.
    Live(Arc<Value>),
    /// A replaced or deleted version, as JSON.
    Frozen(Arc<Frozen>),
}

/// A version kept as JSON, with what selectors read of it.
#[derive(Debug)]
pub(super) struct Frozen {
    json: Box<[u8]>,
    /// The object's labels, name, namespace and the fields its resource supports in field selectors,
    /// at the same paths as in the object, so watchers filter without parsing the JSON.
    selectable: Value,
    /// The parsed object while some consumer holds it, so the watchers that read a version at about
    /// the same time parse it once.
    parsed: Mutex<Weak<Value>>,
}

impl Version {
    /// Freezes `object`, a version of a `gr` object.
    pub(super) fn freeze(gr: &GroupResource, object: &Value) -> Arc<Frozen> {
        let json = serde_json::to_vec(object)
            .unwrap_or_default()
            .into_boxed_slice();
        Arc::new(Frozen {
            json,
            selectable: selectable(gr, object),
            parsed: Mutex::new(Weak::new()),
        })
    }

    /// Whether this is the live version `object`.
    pub(super) fn is(&self, object: &Arc<Value>) -> bool {
        matches!(self, Version::Live(o) if Arc::ptr_eq(o, object))
    }

    /// What selectors read: the whole object while live, the selectable fields once frozen.
    pub(super) fn selectable(&self) -> &Value {
        match self {
            Version::Live(o) => o,
            Version::Frozen(f) => &f.selectable,
        }
    }

    /// The object, parsed again when frozen.
    pub(super) fn value(&self) -> Arc<Value> {
        match self {
            Version::Live(o) => o.clone(),
            Version::Frozen(f) => f.value(),
        }
    }
}

impl Frozen {
    /// The object, parsed from its JSON unless a consumer still holds an earlier parse.
    pub(super) fn value(&self) -> Arc<Value> {
        let mut parsed = self.parsed.lock_unpoisoned();
        if let Some(v) = parsed.upgrade() {
            return v;
        }
        // The JSON was written by `serde_json` from a `Value`, so it parses back to the same `Value`.
        let v = Arc::new(serde_json::from_slice(&self.json).unwrap_or(Value::Null));
        *parsed = Arc::downgrade(&v);
        v
    }
}

/// The part of `object` label and field selectors read, at the paths they read it from.
fn selectable(gr: &GroupResource, object: &Value) -> Value {
    let mut out = Value::Object(Map::new());
    let labels = ["metadata.labels"];
    let fields = selector::supported_fields(&gr.group, &gr.resource);
    for field in labels.iter().chain(fields.iter()) {
        let pointer = format!("/{}", field.replace('.', "/"));
        if let Some(v) = object.pointer(&pointer) {
            set_path(&mut out, field.split('.'), v.clone());
        }
    }
    out
}

/// Sets `value` at the path of object keys `path` under `out`, making the objects on the way.
fn set_path<'a>(out: &mut Value, mut path: impl Iterator<Item = &'a str>, value: Value) {
    let Some(key) = path.next() else {
        *out = value;
        return;
    };
    if !out.is_object() {
        *out = Value::Object(Map::new());
    }
    if let Value::Object(map) = out {
        let child = map.entry(key).or_insert(Value::Null);
        set_path(child, path, value);
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::selector::{FieldSelector, LabelSelector};

    #[test]
    fn a_frozen_version_parses_back_to_the_object_and_selects_like_it() {
        let pods = GroupResource::pods();
        let pod = json!({"metadata": {"name": "p", "namespace": "ns", "labels": {"app": "web"},
                "managedFields": [{"manager": "m", "fieldsV1": {"f:spec": {}}}]},
            "spec": {"nodeName": "n1", "containers": [{"name": "c"}]},
            "status": {"phase": "Running"}});
        let frozen = Version::Frozen(Version::freeze(&pods, &pod));
        assert_eq!(*frozen.value(), pod);
        assert_eq!(
            frozen.selectable(),
            &json!({"metadata": {"name": "p", "namespace": "ns", "labels": {"app": "web"}},
                "spec": {"nodeName": "n1"}, "status": {"phase": "Running"}})
        );
        let supported = selector::supported_fields("", "pods");
        for (labels, fields) in [
            ("app=web", "spec.nodeName=n1"),
            ("app!=db", "status.phase=Running,metadata.name=p"),
            ("app=db", ""),
            ("", "spec.nodeName=n2"),
            ("!app", "status.podIP="),
        ] {
            let l = LabelSelector::parse(labels).unwrap();
            let f = FieldSelector::parse(fields, &supported).unwrap();
            let live = l.matches(&pod) && f.matches(&pod);
            let kept = l.matches(frozen.selectable()) && f.matches(frozen.selectable());
            assert_eq!(live, kept, "{labels} {fields}");
        }
    }

    #[test]
    fn readers_at_the_same_time_share_one_parse() {
        let frozen = Version::freeze(&GroupResource::pods(), &json!({"metadata": {"name": "p"}}));
        let a = frozen.value();
        let b = frozen.value();
        assert!(Arc::ptr_eq(&a, &b));
        drop((a, b));
        assert_eq!(frozen.parsed.lock_unpoisoned().strong_count(), 0);
    }
}
