//! The collector's inbox: what its followers saw of each object, reduced to what the index reads (key,
//! `uid`, owners, whether it waits for its dependents) and kept once per object, the newest change
//! replacing an older one not yet taken. However far the collector falls behind, the inbox holds at most
//! one small summary per object and never an object version.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use serde_json::Value;
use tokio::sync::Notify;

use super::{ObjKey, OwnerRef, foreground, obj_key, owner_refs};
use crate::lock::MutexExt as _;
use crate::meta;
use crate::resource::GroupResource;
use crate::store::SharedEvent;

/// What the index needs of one object.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Summary {
    pub(super) key: ObjKey,
    pub(super) uid: String,
    pub(super) owners: Vec<OwnerRef>,
    /// Marked for deletion in the foreground.
    pub(super) waiting: bool,
}

impl Summary {
    fn of(gr: &GroupResource, obj: &Value) -> Summary {
        Summary {
            key: obj_key(gr, obj),
            uid: meta::str_at(obj, "/metadata/uid").unwrap_or("").to_string(),
            owners: owner_refs(obj),
            waiting: foreground::is_waiting(obj),
        }
    }
}

/// The newest change of an object.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Change {
    /// The object exists in this state (added or modified).
    Present(Summary),
    /// The object is gone; its last state.
    Gone(Summary),
}

impl Change {
    /// The change an event makes, if any.
    pub(super) fn of(gr: &GroupResource, event: &SharedEvent) -> Option<Change> {
        match event {
            SharedEvent::Added(o) | SharedEvent::Modified(o) => {
                Some(Change::Present(Summary::of(gr, o)))
            }
            SharedEvent::Deleted(o) => Some(Change::Gone(Summary::of(gr, o))),
            SharedEvent::Bookmark(_) | SharedEvent::Error(_) => None,
        }
    }

    fn key(&self) -> &ObjKey {
        match self {
            Change::Present(s) | Change::Gone(s) => &s.key,
        }
    }
}

/// Changes by object, in the order objects first changed since they were last taken. Clones share it.
#[derive(Clone, Default)]
pub(super) struct Inbox {
    shared: Arc<Shared>,
}

#[derive(Default)]
struct Shared {
    state: Mutex<State>,
    notify: Notify,
}

#[derive(Default)]
struct State {
    order: VecDeque<ObjKey>,
    changes: HashMap<ObjKey, Change>,
}

impl Inbox {
    /// Keeps `change`, replacing the object's change not yet taken. A name reused by a new object
    /// replaces its old object's `Gone`: the index tells them apart by `uid`.
    pub(super) fn put(&self, change: Change) {
        let mut st = self.shared.state.lock_unpoisoned();
        let key = change.key().clone();
        if st.changes.insert(key.clone(), change).is_none() {
            st.order.push_back(key);
        }
        drop(st);
        self.shared.notify.notify_one();
    }

    /// The oldest change, waiting for one.
    pub(super) async fn next(&self) -> Change {
        loop {
            let notified = self.shared.notify.notified();
            if let Some(change) = self.take() {
                return change;
            }
            notified.await;
        }
    }

    fn take(&self) -> Option<Change> {
        let mut st = self.shared.state.lock_unpoisoned();
        let key = st.order.pop_front()?;
        if st.order.capacity() > 2 * st.order.len().max(64) {
            st.order.shrink_to_fit();
            st.changes.shrink_to_fit();
        }
        st.changes.remove(&key)
    }

    /// How many objects have a change waiting.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.shared.state.lock_unpoisoned().changes.len()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::json;

    use super::*;

    fn pod(name: &str, uid: &str, owner: &str) -> Arc<Value> {
        Arc::new(
            json!({"metadata": {"namespace": "ns", "name": name, "uid": uid,
            "ownerReferences": [{"uid": owner}], "managedFields": [{"fieldsV1": {"f:a": {}}}]}}),
        )
    }

    #[test]
    fn an_unread_change_is_replaced_and_holds_no_object() {
        let gr = GroupResource::pods();
        let inbox = Inbox::default();
        let first = pod("a", "1", "rs-1");
        let weak = Arc::downgrade(&first);
        inbox.put(Change::of(&gr, &SharedEvent::Added(first)).unwrap());
        assert_eq!(weak.strong_count(), 0, "the inbox keeps no object");
        inbox.put(Change::of(&gr, &SharedEvent::Added(pod("b", "2", "rs-1"))).unwrap());
        inbox.put(Change::of(&gr, &SharedEvent::Deleted(pod("a", "1", "rs-1"))).unwrap());
        assert_eq!(inbox.len(), 2);
        let Some(Change::Gone(a)) = inbox.take() else {
            panic!("a's newest change first, in a's place")
        };
        assert_eq!((a.key.name.as_str(), a.uid.as_str()), ("a", "1"));
        assert_eq!(a.owners, vec![OwnerRef { uid: "rs-1".into() }]);
        let Some(Change::Present(b)) = inbox.take() else {
            panic!("then b")
        };
        assert_eq!(b.key.name, "b");
        assert!(inbox.take().is_none());
    }
}
