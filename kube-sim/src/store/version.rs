//! One version of an object as the watch history keeps it: shared with the store while it is the stored
//! object, and once replaced (or deleted) as its serialized JSON, about a tenth of its size as a `Value`.
//! A replaced version is read again only by a watcher that has not caught up yet, or by a snapshot.
//!
//! What is kept as JSON comes and goes in bursts that expire together (a rollout's Events, the versions
//! its pods went through), while pods, nodes and the store's tables live on. Each frozen version's bytes
//! are therefore written into shared blocks ([`blocks`]), one after another, rather than allocated among
//! the long-lived objects: a block is freed with the last version in it, so once a burst expires its
//! blocks go back to the system whole instead of leaving pages that a few long-lived objects pin.

use std::borrow::Cow;
use std::sync::{Arc, Mutex, Weak};

use bytes::Bytes;
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
    /// The JSON, then the labels and the selectable fields ([`Packed`]), in a block shared with other
    /// frozen versions.
    bytes: Bytes,
    /// Where the JSON ends in `bytes`.
    json_end: u32,
    /// What selectors read of the object, so watchers filter without parsing the JSON.
    labels: Packed,
    fields: Packed,
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
        let mut bytes = serde_json::to_vec(object).unwrap_or_default();
        let json_end = offset(bytes.len());
        let labels = object
            .pointer("/metadata/labels")
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
            .filter_map(|(k, v)| Some((k.as_str(), v.as_str()?.to_string())));
        let labels = Packed::write(&mut bytes, labels);
        let mut read = selector::supported_fields(&gr.group, &gr.resource);
        if keeps_json(gr) {
            read.extend(STORE_READS);
        }
        let fields = read
            .into_iter()
            .filter_map(|f| Some((f, object.field(f)?.to_string())));
        let fields = Packed::write(&mut bytes, fields);
        Arc::new(Frozen {
            bytes: blocks::write(gr, &bytes),
            json_end,
            labels,
            fields,
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
            Version::Frozen(f) => &**f,
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
        let json = &self.bytes[..self.json_end as usize];
        let v = Arc::new(serde_json::from_slice(json).unwrap_or(Value::Null));
        *parsed = Arc::downgrade(&v);
        v
    }
}

impl Selectable for Frozen {
    fn label(&self, key: &str) -> Option<&str> {
        self.labels.get(&self.bytes, key)
    }

    fn field(&self, path: &str) -> Option<Cow<'_, Value>> {
        // Written by `serde_json` from a `Value`, so it parses back.
        let json = self.fields.get(&self.bytes, path)?;
        Some(Cow::Owned(
            serde_json::from_str(json).unwrap_or(Value::Null),
        ))
    }
}

/// Offsets fit in `u32`: a kept version is far below 4 GiB.
fn offset(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// Names and values one after another, then where each name and each value ends (two little-endian
/// `u32`s per entry, counted from `start`): two ranges of a frozen version's bytes instead of an
/// allocation per label and per field.
#[derive(Debug, Clone, Copy)]
struct Packed {
    start: u32,
    /// Where the names and values end and their ends begin.
    text_end: u32,
    end: u32,
}

impl Packed {
    /// Appends `entries` to `bytes`.
    fn write<'a>(
        bytes: &mut Vec<u8>,
        entries: impl IntoIterator<Item = (&'a str, String)>,
    ) -> Packed {
        let start = bytes.len();
        let mut ends = Vec::new();
        for (name, value) in entries {
            bytes.extend_from_slice(name.as_bytes());
            let name_end = offset(bytes.len() - start);
            bytes.extend_from_slice(value.as_bytes());
            ends.push((name_end, offset(bytes.len() - start)));
        }
        let text_end = bytes.len();
        for (name_end, value_end) in ends {
            bytes.extend_from_slice(&name_end.to_le_bytes());
            bytes.extend_from_slice(&value_end.to_le_bytes());
        }
        Packed {
            start: offset(start),
            text_end: offset(text_end),
            end: offset(bytes.len()),
        }
    }

    /// The value stored under `name` in `bytes`.
    fn get<'a>(&self, bytes: &'a [u8], name: &str) -> Option<&'a str> {
        let text = bytes.get(self.start as usize..self.text_end as usize)?;
        let ends = bytes.get(self.text_end as usize..self.end as usize)?;
        let mut start = 0;
        for entry in ends.chunks_exact(8) {
            let at =
                |i: usize| u32::from_le_bytes([entry[i], entry[i + 1], entry[i + 2], entry[i + 3]]);
            let (name_end, value_end) = (at(0) as usize, at(4) as usize);
            if text.get(start..name_end) == Some(name.as_bytes()) {
                return std::str::from_utf8(text.get(name_end..value_end)?).ok();
            }
            start = value_end;
        }
        None
    }
}

/// The blocks frozen versions are written into, one series per resource: a resource's versions leave
/// the history in the order they came (Events expire in the order of their last writes), but a pod's
/// version stays seconds while a Deployment's stays the whole window, and a block is freed only with the
/// last version in it.
mod blocks {
    use std::collections::HashMap;
    use std::sync::{LazyLock, Mutex};

    use bytes::{Bytes, BytesMut};

    use crate::lock::MutexExt as _;
    use crate::resource::GroupResource;

    /// How big a block is: about ten Events, three pods.
    pub(super) const BLOCK: usize = 16 * 1024;

    /// Each resource's block being filled: its unwritten rest.
    static FILLING: LazyLock<Mutex<HashMap<GroupResource, BytesMut>>> =
        LazyLock::new(Mutex::default);

    /// A copy of `data`, a version of a `gr` object, in `gr`'s block being filled (a new one when it
    /// has no room); data bigger than half a block gets an allocation of its own.
    pub(super) fn write(gr: &GroupResource, data: &[u8]) -> Bytes {
        if data.len() > BLOCK / 2 {
            return Bytes::copy_from_slice(data);
        }
        let mut filling = FILLING.lock_unpoisoned();
        let block = match filling.get_mut(gr) {
            Some(block) => block,
            None => filling.entry(gr.clone()).or_default(),
        };
        if block.capacity() < data.len() {
            *block = BytesMut::with_capacity(BLOCK);
        }
        block.extend_from_slice(data);
        // The written part leaves with the block's count of users; the rest stays for the next one.
        block.split().freeze()
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
    fn frozen_versions_share_blocks_and_big_ones_have_their_own() {
        let pods = GroupResource::pods();
        let pod = |name: &str| json!({"metadata": {"name": name, "labels": {"app": name}}});
        let (a, b) = (
            Version::freeze(&pods, &pod("a")),
            Version::freeze(&pods, &pod("b")),
        );
        // One after the other in the same block.
        let a_end = a.bytes.as_ptr_range().end;
        assert_eq!(a_end, b.bytes.as_ptr());
        assert_eq!(*a.value(), pod("a"));
        assert_eq!(b.label("app"), Some("b"));
        // Freeing the first leaves the second readable: the block lives while any version in it does.
        drop(a);
        assert_eq!(*b.value(), pod("b"));
        // Another resource's versions fill blocks of their own.
        let events = GroupResource::events();
        let event = Version::freeze(&events, &json!({"metadata": {"name": "e"}}));
        let c = Version::freeze(&pods, &pod("c"));
        assert_eq!(b.bytes.as_ptr_range().end, c.bytes.as_ptr());
        assert_ne!(b.bytes.as_ptr_range().end, event.bytes.as_ptr());
        let big = json!({"metadata": {"name": "big"}, "data": {"x": "y".repeat(blocks::BLOCK)}});
        let frozen = Version::freeze(&pods, &big);
        assert_eq!(*frozen.value(), big);
        let d = Version::freeze(&pods, &pod("d"));
        assert_eq!(c.bytes.as_ptr_range().end, d.bytes.as_ptr());
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
