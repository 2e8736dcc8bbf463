//! The garbage collector, with background propagation (`pkg/controller/garbagecollector`): once every
//! owner named in an object's `ownerReferences` is gone (no object with that name and `uid`), the object
//! is deleted; references to some owners that are gone while others remain are removed.
//!
//! It watches every served resource but Events (see [`ignored`]), custom resources included, keeps an
//! index from owner `uid` to dependents, and checks a dependent against the store (never against the
//! index alone) before acting.
//! Deleting a ReplicaSet thus deletes its pods (gracefully), a Deployment its ReplicaSets, and a custom
//! resource the Deployments it owns.
//!
//! Foreground deletion (an owner marked with the `foregroundDeletion` finalizer) is in [`foreground`].

mod foreground;
mod inbox;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::{Config, Error, MANAGER, Queue};
use crate::meta;
use crate::resource::GroupResource;
use crate::sparse::ShrinkWhenSparse as _;
use crate::store::{self, DeleteOptions, Endpoint, Store, WriteOptions};
use inbox::{Change, Inbox, Summary};

/// How often the set of served resources is checked for new custom resources.
const DISCOVERY_INTERVAL: Duration = Duration::from_millis(500);

/// How often an owner deleted in the foreground looks at its dependents again without an event.
const FOREGROUND_RECHECK: Duration = Duration::from_secs(1);

/// The collector's queues: objects whose owners may be gone, and owners waiting for their dependents.
struct Queues<'a> {
    collect: &'a Queue<ObjKey>,
    waiting: &'a Queue<ObjKey>,
}

/// One object, by resource, namespace and name.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct ObjKey {
    resource: GroupResource,
    namespace: String,
    name: String,
}

/// Runs the garbage collector until `shutdown` flips.
pub async fn run(store: Store, config: Config, mut shutdown: watch::Receiver<bool>) {
    let inbox = Inbox::default();
    let mut watched: HashMap<GroupResource, JoinHandle<()>> = HashMap::new();
    let queue: Queue<ObjKey> = Queue::new();
    let waiting: Queue<ObjKey> = Queue::new();
    let mut index = Index::default();
    let mut tick = tokio::time::interval(DISCOVERY_INTERVAL);
    let watch_shutdown = shutdown.clone();
    loop {
        tokio::select! {
            _ = shutdown.wait_for(|s| *s) => break,
            _ = tick.tick() => discover(&store, &inbox, &mut watched, &watch_shutdown),
            change = inbox.next() => {
                let crd_changed = change_resource(&change) == &GroupResource::crds();
                index.apply(change, &Queues { collect: &queue, waiting: &waiting }, config.gc_delay);
                if crd_changed {
                    discover(&store, &inbox, &mut watched, &watch_shutdown);
                }
            }
            key = waiting.next() => {
                let (dependents, uid) = index.dependents_of(&key);
                let has_dependents = |u: &str| index.dependents.get(u).is_some_and(|d| !d.is_empty());
                match foreground::process(&store, &key, dependents, has_dependents) {
                    // Dependents' events wake the owner; the timer covers events seen before the marking.
                    Ok(true) => waiting.add_after(key, FOREGROUND_RECHECK),
                    Ok(false) => {
                        index.waiting.remove(&uid);
                    }
                    Err(e) if e.is_conflict() => waiting.add_after(key, config.gc_delay),
                    Err(e) => {
                        tracing::warn!(resource = %key.resource, name = %key.name, error = %e, "foreground deletion failed");
                        waiting.add_after(key, FOREGROUND_RECHECK);
                    }
                }
            }
            key = queue.next() => {
                if let Err(e) = check(&store, &key) {
                    if e.is_conflict() {
                        queue.add_after(key, config.gc_delay);
                    } else {
                        tracing::warn!(resource = %key.resource, namespace = %key.namespace, name = %key.name, error = %e, "garbage collection failed");
                    }
                }
            }
        }
    }
    for (_, task) in watched {
        task.abort();
    }
}

/// Starts a watch for every served resource not watched yet, and stops those no longer served.
fn discover(
    store: &Store,
    inbox: &Inbox,
    watched: &mut HashMap<GroupResource, JoinHandle<()>>,
    shutdown: &watch::Receiver<bool>,
) {
    let served: HashSet<GroupResource> = store
        .resources()
        .iter()
        .map(|r| r.group_resource())
        .filter(|gr| !ignored(gr))
        .collect();
    watched.retain(|gr, task| {
        let keep = served.contains(gr);
        if !keep {
            task.abort();
        }
        keep
    });
    for gr in served {
        if watched.contains_key(&gr) {
            continue;
        }
        let task = tokio::spawn(watch_resource(
            store.clone(),
            gr.clone(),
            inbox.clone(),
            shutdown.clone(),
        ));
        watched.insert(gr, task);
    }
}

/// Whether the collector leaves `gr` alone, as kube-controller-manager's does by default
/// (`garbagecollector.DefaultIgnoredResources`): Events, in either API group. They come by the thousand
/// and own nothing; an Event's `ownerReferences` are not acted on.
fn ignored(gr: &GroupResource) -> bool {
    gr.resource == "events" && (gr.group.is_empty() || gr.group == "events.k8s.io")
}

/// Follows one resource into the collector's inbox; an expired watch is listed again, and what vanished
/// meanwhile arrives as `Deleted` (see [`super::follow`]).
async fn watch_resource(
    store: Store,
    gr: GroupResource,
    inbox: Inbox,
    shutdown: watch::Receiver<bool>,
) {
    super::follow_keeping(&store, &gr.clone(), shutdown, KeptMetadata::of, |e| {
        if let Some(change) = Change::of(&gr, &e) {
            inbox.put(change);
        }
    })
    .await;
}

/// The resource a change is of.
fn change_resource(change: &Change) -> &GroupResource {
    match change {
        Change::Present(s) | Change::Gone(s) => &s.key.resource,
    }
}

/// A reference to an owner.
#[derive(Clone, Debug, PartialEq, Eq)]
struct OwnerRef {
    uid: String,
}

#[derive(Default)]
struct Index {
    /// Every object with owners: its `uid` and owner `uid`s.
    objects: HashMap<ObjKey, (String, Vec<OwnerRef>)>,
    /// Object `uid`s by key, for every object seen (owners included).
    uids: HashMap<ObjKey, String>,
    /// Dependents by owner `uid`.
    dependents: HashMap<String, HashSet<ObjKey>>,
    /// Owners deleted in the foreground, by `uid`.
    waiting: HashMap<String, ObjKey>,
}

impl Index {
    fn apply(&mut self, change: Change, queues: &Queues<'_>, delay: Duration) {
        let queue = queues.collect;
        match change {
            Change::Present(obj) => {
                self.note_waiting(&obj, queues.waiting, delay);
                let Summary {
                    key, uid, owners, ..
                } = obj;
                if let Some(old_uid) = self.uids.get(&key)
                    && *old_uid != uid
                {
                    // The name was reused: the old object is gone.
                    let old_uid = old_uid.clone();
                    self.gone(&key, &old_uid, queue, delay);
                }
                self.uids.insert(key.clone(), uid.clone());
                let previous = self.objects.get(&key).map(|(_, o)| o.clone());
                if previous.as_ref() == Some(&owners) {
                    return;
                }
                for o in previous.unwrap_or_default() {
                    if let Some(set) = self.dependents.get_mut(&o.uid) {
                        set.remove(&key);
                    }
                }
                if owners.is_empty() {
                    self.objects.remove(&key);
                    return;
                }
                for o in &owners {
                    self.dependents
                        .entry(o.uid.clone())
                        .or_default()
                        .insert(key.clone());
                }
                self.objects.insert(key.clone(), (uid, owners));
                queue.add_after(key, delay);
            }
            Change::Gone(obj) => {
                self.wake_owners(&obj, queues.waiting, delay);
                if self.uids.get(&obj.key) == Some(&obj.uid) {
                    self.uids.remove(&obj.key);
                }
                self.gone(&obj.key, &obj.uid, queue, delay);
                self.shrink_when_sparse();
            }
        }
    }

    /// Gives back the room a burst of objects made, once most of them are gone.
    fn shrink_when_sparse(&mut self) {
        self.objects.shrink_when_sparse();
        self.uids.shrink_when_sparse();
        self.dependents.shrink_when_sparse();
        self.waiting.shrink_when_sparse();
    }

    /// Records an owner deleted in the foreground, and wakes the waiting owners of a changed dependent.
    fn note_waiting(&mut self, obj: &Summary, waiting: &Queue<ObjKey>, delay: Duration) {
        if obj.waiting {
            self.waiting.insert(obj.uid.clone(), obj.key.clone());
            waiting.add_after(obj.key.clone(), delay);
        } else {
            self.waiting.remove(&obj.uid);
        }
        self.wake_owners(obj, waiting, delay);
    }

    /// Queues the owners of `obj` that wait for their dependents.
    fn wake_owners(&self, obj: &Summary, waiting: &Queue<ObjKey>, delay: Duration) {
        for owner in &obj.owners {
            if let Some(key) = self.waiting.get(&owner.uid) {
                waiting.add_after(key.clone(), delay);
            }
        }
    }

    /// The dependents the index knows of an object, and its `uid`.
    fn dependents_of(&self, key: &ObjKey) -> (Vec<ObjKey>, String) {
        let uid = self.uids.get(key).cloned().unwrap_or_default();
        let deps = self
            .dependents
            .get(&uid)
            .map(|d| d.iter().cloned().collect())
            .unwrap_or_default();
        (deps, uid)
    }

    /// An object is gone: forget its own references and check its dependents.
    fn gone(&mut self, key: &ObjKey, uid: &str, queue: &Queue<ObjKey>, delay: Duration) {
        if let Some((own_uid, owners)) = self.objects.get(key)
            && own_uid == uid
        {
            for o in owners.clone() {
                if let Some(set) = self.dependents.get_mut(&o.uid) {
                    set.remove(key);
                    if set.is_empty() {
                        self.dependents.remove(&o.uid);
                    }
                }
            }
            self.objects.remove(key);
        }
        if let Some(deps) = self.dependents.get(uid) {
            for d in deps {
                queue.add_after(d.clone(), delay);
            }
        }
    }
}

/// What the collector keeps of each object it follows: what it reads of it ([`MetadataOf`]) as JSON,
/// about a fifth of its size as a `Value` (whose every map takes a 640-byte node), with the `uid` and
/// version a new list is compared against. The collector follows every resource, Events included, so
/// this is kept for tens of thousands of objects after a few rollouts.
struct KeptMetadata {
    uid: Option<Box<str>>,
    version: Option<Box<str>>,
    json: Box<[u8]>,
}

impl KeptMetadata {
    fn of(obj: &Arc<Value>) -> KeptMetadata {
        let text = |p| meta::str_at(obj, p).map(Box::from);
        KeptMetadata {
            uid: text("/metadata/uid"),
            version: text("/metadata/resourceVersion"),
            json: serde_json::to_vec(&MetadataOf::of(obj))
                .unwrap_or_default()
                .into_boxed_slice(),
        }
    }
}

impl super::follow::Kept for KeptMetadata {
    fn uid(&self) -> Option<&str> {
        self.uid.as_deref()
    }

    fn version(&self) -> Option<&str> {
        self.version.as_deref()
    }

    /// The metadata parsed again; it was written by `serde_json`, so it parses back.
    fn last_state(&self) -> Arc<Value> {
        Arc::new(serde_json::from_slice(&self.json).unwrap_or(Value::Null))
    }
}

/// What the collector reads of an object, as upstream's collector follows every resource through
/// metadata informers: its kind, name, `uid`, version, owners, finalizers and deletion mark. Borrowed
/// from the object and serialized as it is, in the keys' order, as a JSON object of them would be.
#[derive(serde::Serialize)]
struct MetadataOf<'a> {
    #[serde(rename = "apiVersion", skip_serializing_if = "Option::is_none")]
    api_version: Option<&'a Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    kind: Option<&'a Value>,
    metadata: BTreeMap<&'static str, &'a Value>,
}

impl<'a> MetadataOf<'a> {
    fn of(obj: &'a Value) -> MetadataOf<'a> {
        const READ: [&str; 7] = [
            "name",
            "namespace",
            "uid",
            "resourceVersion",
            "ownerReferences",
            "finalizers",
            "deletionTimestamp",
        ];
        let all = obj.get("metadata");
        MetadataOf {
            api_version: obj.get("apiVersion"),
            kind: obj.get("kind"),
            metadata: READ
                .into_iter()
                .filter_map(|key| Some((key, all?.get(key)?)))
                .collect(),
        }
    }
}

fn obj_key(gr: &GroupResource, obj: &Value) -> ObjKey {
    ObjKey {
        resource: gr.clone(),
        namespace: meta::namespace_of(obj).to_string(),
        name: meta::name_of(obj).to_string(),
    }
}

fn owner_refs(obj: &Value) -> Vec<OwnerRef> {
    obj.pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .map(|refs| {
            refs.iter()
                .filter_map(|r| r["uid"].as_str())
                .map(|uid| OwnerRef {
                    uid: uid.to_string(),
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Whether the owner a reference names exists with that `uid`.
fn owner_exists(store: &Store, namespace: &str, reference: &Value) -> bool {
    let api_version = reference["apiVersion"].as_str().unwrap_or("");
    let group = api_version
        .split_once('/')
        .map(|(g, _)| g)
        .unwrap_or_default();
    let kind = reference["kind"].as_str().unwrap_or("");
    let Some(info) = store
        .resources()
        .into_iter()
        .find(|r| r.group == group && r.kind == kind)
    else {
        return false;
    };
    let ns = info.namespaced.then_some(namespace);
    store
        .get(
            &info.group_resource(),
            ns,
            reference["name"].as_str().unwrap_or(""),
        )
        .is_ok_and(|o| meta::str_at(&o, "/metadata/uid") == reference["uid"].as_str())
}

/// Deletes the object if all its owners are gone, or drops references to the owners that are gone.
fn check(store: &Store, key: &ObjKey) -> Result<(), Error> {
    let ns = (!key.namespace.is_empty()).then_some(key.namespace.as_str());
    let obj = match store.get(&key.resource, ns, &key.name) {
        Ok(o) => o,
        Err(store::Error::NotFound { .. } | store::Error::ResourceNotFound) => return Ok(()),
        Err(e) => return Err(e.into()),
    };
    let Some(refs) = obj
        .pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .filter(|r| !r.is_empty())
    else {
        return Ok(());
    };
    let (alive, dangling): (Vec<&Value>, Vec<&Value>) = refs
        .iter()
        .partition(|r| owner_exists(store, &key.namespace, r));
    if dangling.is_empty() {
        return Ok(());
    }
    if alive.is_empty() {
        if obj.pointer("/metadata/deletionTimestamp").is_some() {
            return Ok(());
        }
        let opts = DeleteOptions {
            uid: meta::str_at(&obj, "/metadata/uid").map(str::to_string),
            ..DeleteOptions::default()
        };
        tracing::debug!(resource = %key.resource, namespace = %key.namespace, name = %key.name, "deleting an object whose owners are gone");
        return match store.delete(&key.resource, ns, &key.name, &opts) {
            Ok(_) | Err(store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(e.into()),
        };
    }
    let kept: Vec<Value> = alive.into_iter().cloned().collect();
    set_owner_references(store, key, &obj, kept)
}

/// Writes `obj` back with `refs` as its `ownerReferences`, as the garbage collector does when it drops
/// owners that are gone or being deleted.
fn set_owner_references(
    store: &Store,
    key: &ObjKey,
    obj: &Value,
    refs: Vec<Value>,
) -> Result<(), Error> {
    let mut new = obj.clone();
    meta::metadata_mut(&mut new).insert("ownerReferences".into(), Value::Array(refs));
    let ns = (!key.namespace.is_empty()).then_some(key.namespace.as_str());
    store.update(
        Endpoint::Main,
        &key.resource,
        ns,
        new,
        &WriteOptions::manager(MANAGER),
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::store::{Deleted, StoreConfig};

    fn create(store: &Store, gr: &GroupResource, obj: Value) -> Value {
        store
            .create(gr, Some("default"), obj, &WriteOptions::manager("test"))
            .unwrap()
            .object
    }

    fn owned_by(owner: &Value, kind: &str, api_version: &str) -> Value {
        json!([{"apiVersion": api_version, "kind": kind, "name": owner["metadata"]["name"],
            "uid": owner["metadata"]["uid"], "controller": true}])
    }

    #[test]
    fn the_collector_keeps_only_what_it_reads_and_gives_it_back_after_a_new_list() {
        use super::super::follow::Kept as _;
        let pod = Arc::new(json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "ns", "uid": "u1", "resourceVersion": "7",
                "labels": {"app": "web"}, "finalizers": ["f"],
                "ownerReferences": [{"uid": "o1", "kind": "ReplicaSet", "name": "rs"}]},
            "spec": {"containers": [{"name": "c"}]}}));
        let kept = KeptMetadata::of(&pod);
        assert_eq!((kept.uid(), kept.version()), (Some("u1"), Some("7")));
        assert_eq!(
            *kept.last_state(),
            json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "p", "namespace": "ns", "uid": "u1", "resourceVersion": "7",
                    "finalizers": ["f"],
                    "ownerReferences": [{"uid": "o1", "kind": "ReplicaSet", "name": "rs"}]}})
        );
        let bare = KeptMetadata::of(&Arc::new(json!({"metadata": {"name": "x"}})));
        assert_eq!(&*bare.json, br#"{"metadata":{"name":"x"}}"#);
        assert_eq!((bare.uid(), bare.version()), (None, None));
    }

    #[test]
    fn dependents_of_a_missing_owner_are_deleted_and_dangling_references_dropped() {
        let store = Store::new(StoreConfig { history: 100 });
        let cm = GroupResource::new("", "configmaps");
        let a = create(&store, &cm, json!({"metadata": {"name": "a"}}));
        let b = create(&store, &cm, json!({"metadata": {"name": "b"}}));
        let mut refs = owned_by(&a, "ConfigMap", "v1");
        refs.as_array_mut()
            .unwrap()
            .push(owned_by(&b, "ConfigMap", "v1")[0].clone());
        create(
            &store,
            &cm,
            json!({"metadata": {"name": "both", "ownerReferences": refs}}),
        );
        create(
            &store,
            &cm,
            json!({"metadata": {"name": "only-a", "ownerReferences": owned_by(&a, "ConfigMap", "v1")}}),
        );
        let deleted = store
            .delete(&cm, Some("default"), "a", &DeleteOptions::default())
            .unwrap();
        assert!(matches!(deleted, Deleted::Gone(_)));
        for name in ["both", "only-a"] {
            let key = ObjKey {
                resource: cm.clone(),
                namespace: "default".into(),
                name: name.into(),
            };
            check(&store, &key).unwrap();
        }
        assert!(
            store.get(&cm, Some("default"), "only-a").is_err(),
            "deleted"
        );
        let both = store.get(&cm, Some("default"), "both").unwrap();
        assert_eq!(
            both["metadata"]["ownerReferences"]
                .as_array()
                .unwrap()
                .len(),
            1
        );
        assert_eq!(both["metadata"]["ownerReferences"][0]["name"], "b");
    }

    #[test]
    fn an_owner_recreated_under_the_same_name_does_not_keep_old_dependents() {
        let store = Store::new(StoreConfig { history: 100 });
        let cm = GroupResource::new("", "configmaps");
        let a = create(&store, &cm, json!({"metadata": {"name": "a"}}));
        create(
            &store,
            &cm,
            json!({"metadata": {"name": "dep", "ownerReferences": owned_by(&a, "ConfigMap", "v1")}}),
        );
        store
            .delete(&cm, Some("default"), "a", &DeleteOptions::default())
            .unwrap();
        create(&store, &cm, json!({"metadata": {"name": "a"}}));
        let key = ObjKey {
            resource: cm.clone(),
            namespace: "default".into(),
            name: "dep".into(),
        };
        check(&store, &key).unwrap();
        assert!(store.get(&cm, Some("default"), "dep").is_err());
    }
}
