//! One version of an object as the watch history keeps it: shared with the store while it is the stored
//! object, and once replaced (or deleted) as its serialized JSON, about a tenth of its size as a `Value`.
//! A replaced version is read again only by a watcher that has not caught up yet, or by a snapshot.

use std::borrow::Cow;
use std::sync::{Arc, Mutex, Weak};

use serde_json::Value;

use crate::lock::MutexExt as _;
use crate::resource::GroupResource;
use crate::selector::{self, Selectable};

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
    /// What selectors read of the object, so watchers filter without parsing the JSON.
    selectable: Selected,
    /// The parsed object while some consumer holds it, so the watchers that read a version at about
    /// the same time parse it once.
    parsed: Mutex<Weak<Value>>,
}

/// Whether the store keeps `gr`'s current objects as JSON too, not only their replaced versions: Events,
/// the one resource whose objects come by the thousand and that no controller follows. An object kept
/// so is parsed again when read (readers at about the same time share one parse).
pub(super) fn keeps_json(gr: &GroupResource) -> bool {
    *gr == GroupResource::events()
}

/// What the store itself reads of an object it keeps as JSON, besides what selectors read: the
/// namespace controller's deletion mark, the owners an orphaning deletion removes, and an Event's last
/// write for its time to live.
const STORE_READS: [&str; 5] = [
    "metadata.deletionTimestamp",
    "metadata.ownerReferences",
    "metadata.creationTimestamp",
    "lastTimestamp",
    "eventTime",
];

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

    /// `object` as the store keeps it as the current version of a `gr` object: shared, or as JSON for
    /// the resources that [`keeps_json`], with `object` as the parse its readers share meanwhile.
    pub(super) fn stored(gr: &GroupResource, object: Arc<Value>) -> Version {
        if !keeps_json(gr) {
            return Version::Live(object);
        }
        let frozen = Version::freeze(gr, &object);
        *frozen.parsed.lock_unpoisoned() = Arc::downgrade(&object);
        Version::Frozen(frozen)
    }

    /// Whether this is the live version `object`.
    pub(super) fn is(&self, object: &Arc<Value>) -> bool {
        matches!(self, Version::Live(o) if Arc::ptr_eq(o, object))
    }

    /// What selectors read: the whole object while live, the selectable fields once frozen.
    pub(super) fn selectable(&self) -> &dyn Selectable {
        match self {
            Version::Live(o) => &**o,
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

/// The labels of an object and the fields its resource supports in field selectors, each packed into
/// one string: two allocations per kept version instead of two per label and one per field, which for an
/// Event (fifteen selectable fields) halves what it costs besides its JSON.
#[derive(Debug)]
struct Selected {
    /// Label keys and values.
    labels: Packed,
    /// Field paths, and their values as JSON.
    fields: Packed,
}

/// Names and values one after another in one string, with where each name and each value ends.
#[derive(Debug)]
struct Packed {
    text: Box<str>,
    ends: Box<[(u32, u32)]>,
}

impl Packed {
    fn new<'a>(entries: impl IntoIterator<Item = (&'a str, String)>) -> Packed {
        let mut text = String::new();
        let mut ends = Vec::new();
        for (name, value) in entries {
            text.push_str(name);
            let name_end = text.len();
            text.push_str(&value);
            // Offsets fit in `u32`: a kept version's selectable values are far below 4 GiB.
            ends.push((
                u32::try_from(name_end).unwrap_or(u32::MAX),
                u32::try_from(text.len()).unwrap_or(u32::MAX),
            ));
        }
        Packed {
            text: text.into_boxed_str(),
            ends: ends.into_boxed_slice(),
        }
    }

    /// The value stored under `name`.
    fn get(&self, name: &str) -> Option<&str> {
        let mut start = 0;
        for &(name_end, value_end) in &self.ends {
            let (name_end, value_end) = (name_end as usize, value_end as usize);
            if self.text.get(start..name_end) == Some(name) {
                return self.text.get(name_end..value_end);
            }
            start = value_end;
        }
        None
    }
}

impl Selectable for Selected {
    fn label(&self, key: &str) -> Option<&str> {
        self.labels.get(key)
    }

    fn field(&self, path: &str) -> Option<Cow<'_, Value>> {
        // Written by `serde_json` from a `Value`, so it parses back.
        let json = self.fields.get(path)?;
        Some(Cow::Owned(
            serde_json::from_str(json).unwrap_or(Value::Null),
        ))
    }
}

/// What label and field selectors read of `object`, a `gr` object.
fn selectable(gr: &GroupResource, object: &Value) -> Selected {
    let labels = object
        .pointer("/metadata/labels")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| Some((k.as_str(), v.as_str()?.to_string())));
    let mut read = selector::supported_fields(&gr.group, &gr.resource);
    if keeps_json(gr) {
        read.extend(STORE_READS);
    }
    let fields = read
        .into_iter()
        .filter_map(|f| Some((f, object.field(f)?.to_string())));
    Selected {
        labels: Packed::new(labels),
        fields: Packed::new(fields),
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
        let pod = json!({"metadata": {"name": "p", "namespace": "ns",
                "labels": {"app": "web", "app.kubernetes.io/name": "shop", "a": ""},
                "managedFields": [{"manager": "m", "fieldsV1": {"f:spec": {}}}]},
            "spec": {"nodeName": "n1", "containers": [{"name": "c"}]},
            "status": {"phase": "Running"}});
        let frozen = Version::Frozen(Version::freeze(&pods, &pod));
        assert_eq!(*frozen.value(), pod);
        let kept = frozen.selectable();
        assert_eq!(kept.label("app"), Some("web"));
        assert_eq!(kept.label("tier"), None);
        assert_eq!(kept.label("app.kubernetes.io/name"), Some("shop"));
        assert_eq!(kept.label("a"), Some(""));
        assert_eq!(kept.label("ap"), None);
        assert_eq!(kept.field("metadata.name").as_deref(), Some(&json!("p")));
        assert_eq!(kept.field("spec.nodeName").as_deref(), Some(&json!("n1")));
        assert_eq!(kept.field("status.podIP"), None);
        assert_eq!(kept.field("spec.containers"), None);
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
    fn a_frozen_event_selects_its_source_component() {
        let events = GroupResource::events();
        let event = json!({"kind": "Event", "metadata": {"name": "e", "namespace": "ns"},
            "involvedObject": {"kind": "Pod", "name": "p"}, "reason": "Started", "count": 1,
            "source": {"component": "kubelet"}, "lastTimestamp": "2026-01-01T00:00:00Z"});
        let frozen = Version::Frozen(Version::freeze(&events, &event));
        let kept = frozen.selectable();
        assert_eq!(kept.field("source").as_deref(), Some(&json!("kubelet")));
        assert_eq!(
            kept.field("involvedObject.name").as_deref(),
            Some(&json!("p"))
        );
        assert_eq!(
            kept.field("lastTimestamp").as_deref(),
            Some(&json!("2026-01-01T00:00:00Z"))
        );
        let supported = selector::supported_fields("", "events");
        for (fields, matches) in [
            ("source=kubelet,reason=Started", true),
            ("source=default-scheduler", false),
            ("involvedObject.kind=Pod,involvedObject.name!=q", true),
        ] {
            let f = FieldSelector::parse(fields, &supported).unwrap();
            assert_eq!(f.matches(kept), matches, "{fields}");
            assert_eq!(f.matches(&event), matches, "{fields} on the object");
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
