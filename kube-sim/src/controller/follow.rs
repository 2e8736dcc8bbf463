//! Following a resource as client-go's reflector and informer do: a list, then a watch from the list's
//! version, and a new list whenever the watch expires (410). Each follower keeps the objects it last saw
//! (shared with the store, not copied), so a new list is a `Replace`: objects that vanished while the watch
//! was expired arrive as `Deleted` with the last state the follower knew (client-go's
//! `DeletedFinalStateUnknown`), new ones as `Added`, changed ones as `Modified`.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::Value;
use tokio::sync::watch;

use crate::meta;
use crate::resource::GroupResource;
use crate::store::{ListOptions, SharedEvent, Store};

/// An object's namespace and name.
type ObjectKey = (String, String);

/// Follows a resource's watch from the current state on, calling `f` for every event. After a 410 the
/// resource is listed again and replaced as described in the module's documentation, so level-triggered
/// handlers catch up and deletions missed in the gap are not lost.
pub(crate) async fn follow(
    store: &Store,
    gr: &GroupResource,
    shutdown: watch::Receiver<bool>,
    f: impl FnMut(SharedEvent),
) {
    follow_keeping(store, gr, shutdown, Arc::clone, f).await;
}

/// [`follow`], remembering of each object only what `keep` makes of it, which is also the last state a
/// `Deleted` after a new list carries: a follower that reads only metadata keeps only that, as
/// client-go's metadata informers do, instead of holding every object alive.
pub(crate) async fn follow_keeping<K: Kept>(
    store: &Store,
    gr: &GroupResource,
    mut shutdown: watch::Receiver<bool>,
    keep: impl Fn(&Arc<Value>) -> K,
    mut f: impl FnMut(SharedEvent),
) {
    let mut known = Known::default();
    loop {
        let mut watcher = match store.watch(gr, None, None, &ListOptions::default()) {
            Ok(w) => w,
            Err(e) => {
                tracing::error!(resource = %gr, error = %e, "cannot watch; the controller stops");
                return;
            }
        };
        known.replace(watcher.take_initial(), &keep, &mut f);
        loop {
            let event = tokio::select! {
                e = watcher.next_shared() => e,
                _ = shutdown.wait_for(|s| *s) => return,
            };
            match event {
                Some(SharedEvent::Error(status)) => {
                    tracing::debug!(resource = %gr, ?status, "watch expired; listing again");
                    break;
                }
                Some(e) => {
                    known.record(&e, &keep);
                    f(e);
                }
                None => break,
            }
        }
        if *shutdown.borrow() {
            return;
        }
    }
}

/// What a follower keeps of an object it saw: enough to tell, after a new list, whether the object is
/// the same one (`uid`) and whether it changed (`resourceVersion`), and the last state a `Deleted` carries.
pub(crate) trait Kept {
    fn uid(&self) -> Option<&str>;
    fn version(&self) -> Option<&str>;
    fn last_state(&self) -> Arc<Value>;
}

/// The whole object, shared with the store.
impl Kept for Arc<Value> {
    fn uid(&self) -> Option<&str> {
        uid_of(self)
    }

    fn version(&self) -> Option<&str> {
        version_of(self)
    }

    fn last_state(&self) -> Arc<Value> {
        self.clone()
    }
}

/// The objects a follower last saw, by key.
struct Known<K>(BTreeMap<ObjectKey, K>);

impl<K> Default for Known<K> {
    fn default() -> Self {
        Known(BTreeMap::new())
    }
}

impl<K: Kept> Known<K> {
    /// Keeps what an event says of its object.
    fn record(&mut self, event: &SharedEvent, keep: impl Fn(&Arc<Value>) -> K) {
        match event {
            SharedEvent::Added(o) | SharedEvent::Modified(o) => {
                self.0.insert(key_of(o), keep(o));
            }
            SharedEvent::Deleted(o) => {
                self.0.remove(&key_of(o));
            }
            SharedEvent::Bookmark(_) | SharedEvent::Error(_) => {}
        }
    }

    /// Replaces what is known with a fresh list, telling `f` the difference: first `Deleted` (with the
    /// last known state) for every object that is gone, or whose name now belongs to a new object (another
    /// `uid`), then `Added` for new objects and `Modified` for changed ones. Objects whose
    /// `resourceVersion` did not change are not replayed: nothing happened to them.
    fn replace(
        &mut self,
        listed: Vec<Arc<Value>>,
        keep: impl Fn(&Arc<Value>) -> K,
        f: &mut impl FnMut(SharedEvent),
    ) {
        let fresh: BTreeMap<ObjectKey, Arc<Value>> =
            listed.into_iter().map(|o| (key_of(&o), o)).collect();
        let old = std::mem::take(&mut self.0);
        let mut kept = Vec::new();
        for (key, last) in old {
            match fresh.get(&key) {
                Some(now) if uid_of(now) == last.uid() => kept.push((key, last)),
                _ => f(SharedEvent::Deleted(last.last_state())),
            }
        }
        let kept: BTreeMap<ObjectKey, K> = kept.into_iter().collect();
        for (key, now) in &fresh {
            match kept.get(key) {
                None => f(SharedEvent::Added(now.clone())),
                Some(last) if last.version() != version_of(now) => {
                    f(SharedEvent::Modified(now.clone()))
                }
                Some(_) => {}
            }
        }
        self.0 = fresh
            .iter()
            .map(|(key, o)| (key.clone(), keep(o)))
            .collect();
    }
}

fn key_of(obj: &Value) -> ObjectKey {
    (
        meta::namespace_of(obj).to_string(),
        meta::name_of(obj).to_string(),
    )
}

fn uid_of(obj: &Value) -> Option<&str> {
    meta::str_at(obj, "/metadata/uid")
}

fn version_of(obj: &Value) -> Option<&str> {
    meta::str_at(obj, "/metadata/resourceVersion")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(name: &str, uid: &str, rv: &str) -> Arc<Value> {
        Arc::new(
            json!({"metadata": {"namespace": "ns", "name": name, "uid": uid, "resourceVersion": rv}}),
        )
    }

    fn replay(
        known: &mut Known<Arc<Value>>,
        listed: Vec<Arc<Value>>,
    ) -> Vec<(&'static str, String)> {
        let mut seen = Vec::new();
        known.replace(listed, Arc::clone, &mut |e| {
            let o = e.object().expect("an object event");
            seen.push((
                e.type_name(),
                format!("{}/{}", meta::name_of(o), uid_of(o).unwrap_or("")),
            ));
        });
        seen
    }

    #[test]
    fn a_new_list_replaces_what_was_known() {
        let mut known = Known::<Arc<Value>>::default();
        let first = replay(
            &mut known,
            vec![pod("a", "1", "1"), pod("b", "2", "2"), pod("c", "3", "3")],
        );
        assert_eq!(first.len(), 3);
        assert!(first.iter().all(|(t, _)| *t == "ADDED"));

        // While the watch was expired: a deleted, b changed, c deleted and recreated, d created.
        let second = replay(
            &mut known,
            vec![pod("b", "2", "5"), pod("c", "9", "6"), pod("d", "4", "7")],
        );
        assert_eq!(
            second,
            vec![
                ("DELETED", "a/1".to_string()),
                ("DELETED", "c/3".to_string()),
                ("MODIFIED", "b/2".to_string()),
                ("ADDED", "c/9".to_string()),
                ("ADDED", "d/4".to_string()),
            ]
        );

        // Nothing changed: nothing is replayed.
        let third = replay(
            &mut known,
            vec![pod("b", "2", "5"), pod("c", "9", "6"), pod("d", "4", "7")],
        );
        assert!(third.is_empty(), "{third:?}");
    }

    #[test]
    fn what_is_kept_is_what_a_deletion_after_a_new_list_carries() {
        let mut known = Known::<Arc<Value>>::default();
        let name_only = |o: &Arc<Value>| {
            let md = &o["metadata"];
            Arc::new(
                json!({"metadata": {"namespace": md["namespace"], "name": md["name"],
                "uid": md["uid"], "resourceVersion": md["resourceVersion"]}}),
            )
        };
        let full = Arc::new(
            json!({"metadata": {"namespace": "ns", "name": "a", "uid": "1",
            "resourceVersion": "1"}, "spec": {"big": "x"}}),
        );
        known.replace(vec![full.clone()], name_only, &mut |_| {});
        known.record(&SharedEvent::Modified(full), name_only);
        let mut seen = Vec::new();
        known.replace(Vec::new(), name_only, &mut |e| seen.push(e));
        let [SharedEvent::Deleted(last)] = seen.as_slice() else {
            panic!("{seen:?}")
        };
        assert_eq!(last.get("spec"), None);
        assert_eq!(uid_of(last), Some("1"));
    }
}
