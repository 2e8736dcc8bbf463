//! The object store: every object as JSON, one global `resourceVersion`, and an event history for watches.
//!
//! # In-process API
//!
//! Code running in the same process (controllers, the kubelet) uses [`Store`] directly; the HTTP server is
//! a thin layer over the same calls, so both see the same semantics. A `Store` is cheap to clone.
//!
//! - Addressing: a resource is a [`GroupResource`] (`GroupResource::pods()`, `GroupResource::of::<Deployment>()`,
//!   `GroupResource::new("apps", "replicasets")`); namespaced resources take `Some(namespace)`, cluster-scoped
//!   ones `None`. Objects are `serde_json::Value`s in their wire form; [`Store::get_as`] converts
//!   to a `k8s-openapi` type.
//! - Reads: [`Store::get`], [`Store::list`] (with [`ListOptions`] for label and field selectors; the result
//!   carries the list `resourceVersion`).
//! - Writes: [`Store::create`], [`Store::update`] through an [`Endpoint`] (`Main`: `status` is kept from the
//!   stored object when a status subresource exists; `Status`: only `status`, plus annotations for built-in
//!   types; both return a [`Written`] with the pruning warnings), [`Store::patch`] (apply, strategic merge, JSON merge and JSON patch, optionally on `status`;
//!   [`Patched`] says whether an apply created the object), [`Store::delete`]. Every write takes a field manager in [`WriteOptions`] or [`PatchOptions`].
//!   A `resourceVersion` in the body of an update is a precondition (409 `Conflict` when stale); a write that
//!   changes nothing returns the stored object with its old `resourceVersion` and emits no event.
//! - Deletion: [`Store::delete`] returns [`Deleted::Gone`] when the object is removed, or
//!   [`Deleted::Pending`] when it is only marked with `deletionTimestamp`: objects with finalizers stay until
//!   an update removes the last finalizer; pods on a node get a grace period (`deletionGracePeriodSeconds`)
//!   and stay until someone deletes them again with `grace_period_seconds: Some(0)` (the kubelet's job). Pods
//!   without `spec.nodeName`, or already `Succeeded`/`Failed`, are removed at once, as in Kubernetes.
//! - Watches: [`Store::watch`] returns a [`Watcher`]; `Watcher::next().await` yields [`WatchEvent`]s in
//!   `resourceVersion` order. Starting from `None` or `Some(0)` replays the current objects as `Added` first.
//!   An object that stops matching the selectors arrives as `Deleted`, one that starts matching as `Added`.
//!   A start version older than the kept history yields one `Error` event (410 `Expired`) and the end of the
//!   stream. [`Store::compact`] drops the history, which tests use to force that path.
//! - Errors: [`Error`] maps one-to-one to Kubernetes `Status` bodies ([`Error::status`]).
//! - Pod logs: [`Store::set_pod_logs`] installs the [`PodLogs`] source behind `GET …/pods/<name>/log`.
//! - Pod streams: [`Store::set_pod_streams`] installs the [`PodStreams`] behind `pods/exec` and
//!   `pods/portforward` (only a kubelet with real containers has one).
//! - Service-account tokens: [`Store::issue_token`] issues a bearer token the API server accepts besides its
//!   own for a service account (`TokenRequest`, and the Docker kubelet for its pods); [`Store::token_identity`]
//!   maps it back while the account exists and the token has not expired or been forgotten.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};

use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tokio::sync::watch;

use crate::lock::{MutexExt as _, RwLockExt as _};
use crate::meta::metadata_mut;
use crate::resource::{self, GroupResource, ResourceInfo};

mod admission;
mod binding;
mod create;
mod delete;
mod error;
mod history;
mod list;
mod options;
mod patch;
mod retention;
mod streams;
mod tokens;
mod update;
mod version;
mod watcher;

use history::{EventKind, Histories, push_event};
use version::Version;

pub use admission::SERVICE_ACCOUNT_PATH;
pub use binding::{Binding, update_pod_condition};
pub use delete::FOREGROUND_FINALIZER;
pub use error::{Error, Result};
pub use history::HISTORY_WINDOW;
pub use options::{
    DeleteOptions, Deleted, FieldValidation, ListOptions, ListVersion, LogOptions, LogStream,
    ObjectList, Patch, PatchOptions, PodLogs, StoreConfig, WriteOptions,
};
pub use patch::Patched;
pub use retention::EVENT_TTL;
pub use streams::{ExecOutput, ExecRequest, ExecSession, PodStreams, Resize};
pub use tokens::{IssuedToken, TokenIdentity, TokenOptions};
pub use update::{Endpoint, Written};
pub use watcher::{SharedEvent, WatchEvent, Watcher};

type Key = (String, String);

/// A resource's current objects by key.
type Objects = BTreeMap<Key, Version>;

struct State {
    rv: u64,
    resources: BTreeMap<GroupResource, Arc<ResourceInfo>>,
    objects: HashMap<GroupResource, Objects>,
    history: Histories,
    next_service_ip: u32,
}

struct Shared {
    state: Mutex<State>,
    changed: watch::Sender<u64>,
    logs: RwLock<Option<Arc<dyn PodLogs>>>,
    streams: RwLock<Option<Arc<dyn PodStreams>>>,
    tokens: RwLock<HashMap<String, tokens::TokenIdentity>>,
    events: Mutex<crate::controller::events::Correlator>,
    config: StoreConfig,
}

impl State {
    /// The description of a served resource.
    fn info(&self, gr: &GroupResource) -> Result<Arc<ResourceInfo>> {
        self.resources
            .get(gr)
            .cloned()
            .ok_or(Error::ResourceNotFound)
    }

    /// The stored object under `key`.
    fn stored(&self, gr: &GroupResource, key: &Key) -> Result<Arc<Value>> {
        self.objects
            .get(gr)
            .and_then(|m| m.get(key))
            .map(Version::value)
            .ok_or_else(|| Error::NotFound {
                resource: gr.clone(),
                name: key.1.clone(),
            })
    }
}

/// The object store. Clones share the same data.
#[derive(Clone)]
pub struct Store {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("resource_version", &self.current_resource_version())
            .finish()
    }
}

impl Store {
    /// Creates a store with the built-in resources and the namespaces every cluster has.
    pub fn new(config: StoreConfig) -> Store {
        let (changed, _) = watch::channel(0);
        let resources = resource::built_ins()
            .into_iter()
            .map(|r| (r.group_resource(), Arc::new(r)))
            .collect();
        let store = Store {
            shared: Arc::new(Shared {
                state: Mutex::new(State {
                    rv: 0,
                    resources,
                    objects: HashMap::new(),
                    history: Histories::default(),
                    next_service_ip: 0,
                }),
                changed,
                logs: RwLock::new(None),
                streams: RwLock::new(None),
                tokens: RwLock::new(HashMap::new()),
                events: Mutex::new(crate::controller::events::Correlator::default()),
                config,
            }),
        };
        for ns in ["default", "kube-system", "kube-public", "kube-node-lease"] {
            let obj = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}});
            // The namespaces resource always exists and the names are unique, so this cannot fail.
            let _ = store.create(
                &GroupResource::namespaces(),
                None,
                obj,
                &WriteOptions::manager("kube-apiserver"),
            );
        }
        let kubernetes = json!({"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "kubernetes", "namespace": "default", "labels": {"component": "apiserver", "provider": "kubernetes"}},
            "spec": {"ports": [{"name": "https", "port": 443, "targetPort": 6443}]}});
        let _ = store.create(
            &GroupResource::new("", "services"),
            Some("default"),
            kubernetes,
            &WriteOptions::manager("kube-apiserver"),
        );
        store
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.shared.state.lock_unpoisoned()
    }

    /// The event recorders' correlation caches. The in-process components record events through them
    /// as client-go's recorder does in each of theirs; they are kept here because every component
    /// holds the store.
    pub(crate) fn event_correlator(&self) -> MutexGuard<'_, crate::controller::events::Correlator> {
        self.shared.events.lock_unpoisoned()
    }

    /// The latest `resourceVersion` handed out.
    pub fn current_resource_version(&self) -> u64 {
        self.lock().rv
    }

    /// A receiver that changes whenever any object changes; its value is the latest `resourceVersion`.
    /// Controllers can use it to wake up without polling.
    pub fn subscribe_changes(&self) -> watch::Receiver<u64> {
        self.shared.changed.subscribe()
    }

    /// Installs the source of pod logs.
    pub fn set_pod_logs(&self, logs: Arc<dyn PodLogs>) {
        *self.shared.logs.write_unpoisoned() = Some(logs);
    }

    /// Installs the streaming side of a kubelet with real containers (`pods/exec`, `pods/portforward`).
    pub fn set_pod_streams(&self, streams: Arc<dyn PodStreams>) {
        *self.shared.streams.write_unpoisoned() = Some(streams);
    }

    /// The installed streaming side, if a kubelet with real containers installed one.
    pub fn pod_streams(&self) -> Option<Arc<dyn PodStreams>> {
        self.shared.streams.read_unpoisoned().clone()
    }

    /// The logs of a pod's container, or an empty string when no source is installed.
    pub fn pod_logs(&self, namespace: &str, name: &str, container: Option<&str>) -> Result<String> {
        let pod = self.get(&GroupResource::pods(), Some(namespace), name)?;
        let source = self.shared.logs.read_unpoisoned().clone();
        match source {
            Some(s) => s.logs(&pod, container),
            None => Ok(String::new()),
        }
    }

    /// A streamed log of a pod's container when the installed source streams (see [`PodLogs::stream`]).
    pub fn pod_log_stream(
        &self,
        namespace: &str,
        name: &str,
        options: &LogOptions,
    ) -> Result<Option<LogStream>> {
        let pod = self.get(&GroupResource::pods(), Some(namespace), name)?;
        let source = self.shared.logs.read_unpoisoned().clone();
        source.and_then(|s| s.stream(&pod, options)).transpose()
    }

    /// The stored objects of a resource (in one namespace, or all), shared rather than copied.
    pub fn snapshot(&self, gr: &GroupResource, namespace: Option<&str>) -> Vec<Arc<Value>> {
        let st = self.lock();
        st.objects
            .get(gr)
            .map(|objects| {
                objects
                    .iter()
                    .filter(|((ns, _), _)| namespace.is_none_or(|n| n == ns))
                    .map(|(_, o)| o.value())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The description of a served resource.
    pub fn resource(&self, gr: &GroupResource) -> Result<Arc<ResourceInfo>> {
        self.lock().info(gr)
    }

    /// Every served resource.
    pub fn resources(&self) -> Vec<Arc<ResourceInfo>> {
        self.lock().resources.values().cloned().collect()
    }

    /// Makes a custom resource servable (the CRD is established) or updates its description.
    pub fn register_custom(&self, info: ResourceInfo) {
        let mut st = self.lock();
        let gr = info.group_resource();
        st.resources.insert(gr, Arc::new(info));
    }

    /// Stops serving a custom resource and removes its objects (each with a `DELETED` event).
    pub fn unregister_custom(&self, gr: &GroupResource) {
        let mut st = self.lock();
        if st.resources.get(gr).is_some_and(|r| r.is_custom()) {
            let objects = st.objects.remove(gr).unwrap_or_default();
            for ((ns, _), obj) in objects {
                let obj = obj.value();
                let mut last = (*obj).clone();
                let rv = next_rv(&mut st);
                set_rv(&mut last, rv);
                push_event(
                    &mut st,
                    &self.shared.config,
                    gr,
                    &ns,
                    EventKind::Deleted,
                    Arc::new(last),
                    Some(obj),
                );
            }
            st.resources.remove(gr);
            let rv = st.rv;
            drop(st);
            self.shared.changed.send_replace(rv);
        }
    }

    /// Reads one object.
    pub fn get(&self, gr: &GroupResource, namespace: Option<&str>, name: &str) -> Result<Value> {
        let st = self.lock();
        let info = st.info(gr)?;
        let key = (scope_ns(&info, namespace), name.to_string());
        Ok((*st.stored(gr, &key)?).clone())
    }

    /// Reads one object as a `k8s-openapi` type.
    pub fn get_as<K: k8s_openapi::Resource + DeserializeOwned>(
        &self,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<K> {
        from_value(self.get(&GroupResource::of::<K>(), namespace, name)?)
    }
}

fn scope_ns(info: &ResourceInfo, namespace: Option<&str>) -> String {
    if info.namespaced {
        namespace.unwrap_or("").to_string()
    } else {
        String::new()
    }
}

fn next_rv(st: &mut State) -> u64 {
    st.rv += 1;
    st.rv
}

fn set_rv(obj: &mut Value, rv: u64) {
    metadata_mut(obj).insert("resourceVersion".into(), json!(rv.to_string()));
}

fn from_value<K: DeserializeOwned>(v: Value) -> Result<K> {
    serde_json::from_value(v)
        .map_err(|e| Error::BadRequest(format!("decoding the stored object: {e}")))
}

#[cfg(test)]
mod tests;

/// Records `manager`'s ownership of what an update (or create, with no
/// `old`) changed, against the type's schema at its preferred version.
fn track_update(
    info: &crate::resource::ResourceInfo,
    old: Option<&Value>,
    new: &mut Value,
    manager: &str,
    subresource: Option<&str>,
) {
    let version = info.preferred_version();
    crate::fieldmanager::track_update(
        old,
        new,
        manager,
        &info.api_version(version),
        subresource,
        &crate::schema::Node::root(info.schema(version), !info.is_custom()),
    );
}
