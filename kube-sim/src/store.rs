//! The object store: every object as JSON, one global `resourceVersion`, and an event history for watches.
//!
//! # In-process API
//!
//! Code running in the same process (controllers, the kubelet) uses [`Store`] directly; the HTTP server is
//! a thin layer over the same calls, so both see the same semantics. A `Store` is cheap to clone.
//!
//! - Addressing: a resource is a [`GroupResource`] (`GroupResource::pods()`, `GroupResource::of::<Deployment>()`,
//!   `GroupResource::new("apps", "replicasets")`); namespaced resources take `Some(namespace)`, cluster-scoped
//!   ones `None`. Objects are `serde_json::Value`s in their wire form; [`Store::get_as`] and friends convert
//!   to `k8s-openapi` types.
//! - Reads: [`Store::get`], [`Store::list`] (with [`ListOptions`] for label and field selectors; the result
//!   carries the list `resourceVersion`).
//! - Writes: [`Store::create`], [`Store::update`] (the main resource: `status` is kept from the stored object
//!   when a status subresource exists), [`Store::update_status`] (only `status`, plus annotations for built-in
//!   types), [`Store::patch`] (apply, strategic merge, JSON merge and JSON patch, optionally on `status`),
//!   [`Store::delete`]. Every write takes a field manager in [`WriteOptions`] or [`PatchOptions`].
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
//! - Service-account tokens: [`Store::register_token`] adds a bearer token the API server accepts besides its
//!   own, mapped to a user name such as `system:serviceaccount:<ns>:<sa>` (the Docker kubelet's pods use them).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tokio::sync::watch;

use crate::fieldmanager;
use crate::lock::{MutexExt as _, RwLockExt as _};
use crate::meta::{self, metadata_mut};
use crate::patch;
use crate::resource::{self, GenerationRule, GroupResource, ResourceInfo};
use crate::schema::{self, Node};
use crate::selector::{self, FieldSelector, LabelSelector};

/// An API error, convertible to a Kubernetes `Status`.
#[derive(Debug, thiserror::Error, Clone, PartialEq)]
pub enum Error {
    /// The URL names no known resource (also for custom resources whose CRD is not established yet).
    #[error("the server could not find the requested resource")]
    ResourceNotFound,
    /// The object does not exist.
    #[error("{resource} \"{name}\" not found")]
    NotFound {
        /// The resource.
        resource: GroupResource,
        /// The object name.
        name: String,
    },
    /// An object with that name exists already.
    #[error("{resource} \"{name}\" already exists")]
    AlreadyExists {
        /// The resource.
        resource: GroupResource,
        /// The object name.
        name: String,
    },
    /// A precondition (usually `resourceVersion`) failed.
    #[error("Operation cannot be fulfilled on {resource} \"{name}\": {reason}")]
    Conflict {
        /// The resource.
        resource: GroupResource,
        /// The object name.
        name: String,
        /// Why, for example `the object has been modified; please apply your changes to the latest version and try again`.
        reason: String,
    },
    /// Server-side apply found fields owned by other managers.
    #[error("{message}")]
    ApplyConflict {
        /// The full message.
        message: String,
        /// `(message, field)` pairs.
        causes: Vec<(String, String)>,
    },
    /// The object failed validation.
    #[error("{qualified_kind} \"{name}\" is invalid: {message}")]
    Invalid {
        /// `Kind.group`, or `Kind` for the core group.
        qualified_kind: String,
        /// The group.
        group: String,
        /// The kind.
        kind: String,
        /// The object name.
        name: String,
        /// The field errors, joined.
        message: String,
    },
    /// The request is malformed.
    #[error("{0}")]
    BadRequest(String),
    /// The patch type is not accepted for this resource.
    #[error("{0}")]
    UnsupportedMediaType(String),
    /// The operation is refused, for example creating in a terminating namespace.
    #[error("{resource} \"{name}\" is forbidden: {reason}")]
    Forbidden {
        /// The resource.
        resource: GroupResource,
        /// The object name.
        name: String,
        /// Why.
        reason: String,
    },
    /// A watch asked for history that is gone.
    #[error("{0}")]
    Expired(String),
    /// The verb is not supported on this path.
    #[error("the server does not allow this method on the requested resource")]
    MethodNotAllowed,
    /// The request was not authenticated.
    #[error("Unauthorized")]
    Unauthorized,
}

impl Error {
    /// The HTTP status code.
    pub fn code(&self) -> u16 {
        match self {
            Error::ResourceNotFound | Error::NotFound { .. } => 404,
            Error::AlreadyExists { .. } | Error::Conflict { .. } | Error::ApplyConflict { .. } => {
                409
            }
            Error::Invalid { .. } => 422,
            Error::BadRequest(_) => 400,
            Error::UnsupportedMediaType(_) => 415,
            Error::Forbidden { .. } => 403,
            Error::Expired(_) => 410,
            Error::MethodNotAllowed => 405,
            Error::Unauthorized => 401,
        }
    }

    /// The Kubernetes `reason`.
    pub fn reason(&self) -> &'static str {
        match self {
            Error::ResourceNotFound | Error::NotFound { .. } => "NotFound",
            Error::AlreadyExists { .. } => "AlreadyExists",
            Error::Conflict { .. } | Error::ApplyConflict { .. } => "Conflict",
            Error::Invalid { .. } => "Invalid",
            Error::BadRequest(_) => "BadRequest",
            Error::UnsupportedMediaType(_) => "UnsupportedMediaType",
            Error::Forbidden { .. } => "Forbidden",
            Error::Expired(_) => "Expired",
            Error::MethodNotAllowed => "MethodNotAllowed",
            Error::Unauthorized => "Unauthorized",
        }
    }

    /// The `Status` body, as the Kubernetes API server writes it.
    pub fn status(&self) -> Value {
        let details = match self {
            Error::NotFound { resource, name }
            | Error::AlreadyExists { resource, name }
            | Error::Conflict { resource, name, .. }
            | Error::Forbidden { resource, name, .. } => {
                Some(json!({"name": name, "group": resource.group, "kind": resource.resource}))
            }
            Error::ApplyConflict { causes, .. } => {
                Some(json!({"causes": causes.iter().map(|(m, f)| json!({
                "reason": "FieldManagerConflict", "message": m, "field": f})).collect::<Vec<_>>()}))
            }
            Error::Invalid {
                group,
                kind,
                name,
                message,
                ..
            } => Some(json!({"name": name, "group": group, "kind": kind,
                "causes": [{"reason": "FieldValueInvalid", "message": message}]})),
            Error::ResourceNotFound => Some(json!({})),
            _ => None,
        };
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.to_string(),
            "reason": self.reason(),
            "code": self.code(),
        });
        if let (Some(d), Value::Object(m)) = (details, &mut status) {
            m.insert("details".into(), d);
        }
        status
    }

    fn stale(resource: &GroupResource, name: &str) -> Error {
        Error::Conflict {
            resource: resource.clone(),
            name: name.to_string(),
            reason: "the object has been modified; please apply your changes to the latest version and try again"
                .to_string(),
        }
    }
}

/// A store operation result.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// How unknown fields in custom resources are handled (`fieldValidation`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FieldValidation {
    /// Drop them silently.
    Ignore,
    /// Drop them and report warnings (the server default).
    #[default]
    Warn,
    /// Refuse the request.
    Strict,
}

/// Options of create and update.
#[derive(Clone, Debug, Default)]
pub struct WriteOptions {
    /// The field manager recorded in `managedFields`; `kube-sim` when unset.
    pub field_manager: Option<String>,
    /// Validate and return the result without storing it.
    pub dry_run: bool,
    /// Unknown-field handling for custom resources.
    pub field_validation: FieldValidation,
}

impl WriteOptions {
    /// Options with a field manager.
    pub fn manager(name: &str) -> WriteOptions {
        WriteOptions {
            field_manager: Some(name.to_string()),
            ..WriteOptions::default()
        }
    }
}

/// A patch body by type.
#[derive(Clone, Debug, PartialEq)]
pub enum Patch {
    /// Server-side apply (`application/apply-patch+yaml`); the body is the applied configuration.
    Apply(Value),
    /// Strategic merge patch (built-in types only).
    Strategic(Value),
    /// RFC 7386 JSON merge patch.
    Merge(Value),
    /// RFC 6902 JSON patch.
    Json(Value),
}

/// Options of patch.
#[derive(Clone, Debug, Default)]
pub struct PatchOptions {
    /// The field manager; required for apply.
    pub field_manager: Option<String>,
    /// Take ownership of conflicting fields (apply only).
    pub force: bool,
    /// Validate and return the result without storing it.
    pub dry_run: bool,
    /// Unknown-field handling for custom resources.
    pub field_validation: FieldValidation,
}

impl PatchOptions {
    /// Apply options for a manager.
    pub fn apply(manager: &str) -> PatchOptions {
        PatchOptions {
            field_manager: Some(manager.to_string()),
            ..PatchOptions::default()
        }
    }
}

/// Options of delete.
#[derive(Clone, Debug, Default)]
pub struct DeleteOptions {
    /// The grace period; pods default to `spec.terminationGracePeriodSeconds`, `Some(0)` removes at once.
    pub grace_period_seconds: Option<i64>,
    /// Precondition on `metadata.resourceVersion`.
    pub resource_version: Option<String>,
    /// Precondition on `metadata.uid`.
    pub uid: Option<String>,
    /// Validate and return the result without storing it.
    pub dry_run: bool,
    /// `Orphan` removes this object from the `ownerReferences` of its dependents before deleting it, so
    /// the garbage collector leaves them alone; `Background` (the default) and `Foreground` leave the
    /// dependents to the garbage collector.
    pub propagation_policy: Option<String>,
}

/// What a delete did.
#[derive(Clone, Debug, PartialEq)]
pub enum Deleted {
    /// The object is gone; this is its last state.
    Gone(Value),
    /// The object is marked for deletion and waits for finalizers or its grace period.
    Pending(Value),
}

/// Options of list and watch.
#[derive(Clone, Debug, Default)]
pub struct ListOptions {
    /// Label selector in query-string form.
    pub label_selector: Option<String>,
    /// Field selector in query-string form.
    pub field_selector: Option<String>,
    /// Page size (list only).
    pub limit: Option<usize>,
    /// Continue token from a previous page (list only).
    pub continue_token: Option<String>,
}

/// One page of a list.
#[derive(Clone, Debug, PartialEq)]
pub struct ObjectList {
    /// The objects, sorted by namespace and name.
    pub items: Vec<Value>,
    /// The list `resourceVersion`.
    pub resource_version: u64,
    /// The token for the next page.
    pub continue_token: Option<String>,
    /// How many objects remain after this page.
    pub remaining: Option<usize>,
}

/// The kind of a stored event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum EventKind {
    Added,
    Modified,
    Deleted,
}

/// An event delivered by a [`Watcher`].
#[derive(Clone, Debug, PartialEq)]
pub enum WatchEvent {
    /// An object appeared (or started matching).
    Added(Value),
    /// An object changed.
    Modified(Value),
    /// An object was removed (or stopped matching).
    Deleted(Value),
    /// The watcher has seen everything up to this `resourceVersion`.
    Bookmark(u64),
    /// The watch cannot continue; the value is a `Status`. The stream ends after it.
    Error(Value),
}

impl WatchEvent {
    /// The wire `type`.
    pub fn type_name(&self) -> &'static str {
        match self {
            WatchEvent::Added(_) => "ADDED",
            WatchEvent::Modified(_) => "MODIFIED",
            WatchEvent::Deleted(_) => "DELETED",
            WatchEvent::Bookmark(_) => "BOOKMARK",
            WatchEvent::Error(_) => "ERROR",
        }
    }
}

/// The source of container logs for `GET /api/v1/namespaces/<ns>/pods/<name>/log`.
pub trait PodLogs: Send + Sync {
    /// The log text of a container of a pod; `container` is `None` when the request named none.
    fn logs(&self, pod: &Value, container: Option<&str>) -> Result<String>;

    /// A streamed log honouring `follow` and `tailLines`, for sources backed by real containers; `None`
    /// (the default) serves [`PodLogs::logs`] as one body.
    fn stream(
        &self,
        _pod: &Value,
        _container: Option<&str>,
        _options: &LogOptions,
    ) -> Option<Result<LogStream>> {
        None
    }
}

/// The options of a log request that a streaming [`PodLogs`] source honours.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LogOptions {
    /// Keep the stream open and send new lines as they come.
    pub follow: bool,
    /// Only the last lines.
    pub tail_lines: Option<i64>,
}

/// A streamed container log.
pub type LogStream = std::pin::Pin<Box<dyn futures::Stream<Item = bytes::Bytes> + Send>>;

/// Tuning of the store.
#[derive(Clone, Debug)]
pub struct StoreConfig {
    /// How many events the watch history keeps before older ones expire.
    pub history: usize,
}

#[derive(Debug)]
struct LogEntry {
    rv: u64,
    resource: GroupResource,
    namespace: String,
    kind: EventKind,
    object: Arc<Value>,
    previous: Option<Arc<Value>>,
}

type Key = (String, String);

struct State {
    rv: u64,
    resources: BTreeMap<GroupResource, Arc<ResourceInfo>>,
    objects: HashMap<GroupResource, BTreeMap<Key, Arc<Value>>>,
    log: VecDeque<LogEntry>,
    compacted_through: u64,
    next_service_ip: u32,
}

struct Shared {
    state: Mutex<State>,
    changed: watch::Sender<u64>,
    logs: RwLock<Option<Arc<dyn PodLogs>>>,
    tokens: RwLock<HashMap<String, String>>,
    config: StoreConfig,
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

/// Which endpoint a write goes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Endpoint {
    Main,
    Status,
}

impl Endpoint {
    fn subresource(self) -> Option<&'static str> {
        match self {
            Endpoint::Main => None,
            Endpoint::Status => Some("status"),
        }
    }
}

enum Managed<'a> {
    /// Record an `Update` by this manager.
    Update(&'a str),
    /// `managedFields` were computed by apply already.
    Precomputed,
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
                    log: VecDeque::new(),
                    compacted_through: 0,
                    next_service_ip: 0,
                }),
                changed,
                logs: RwLock::new(None),
                tokens: RwLock::new(HashMap::new()),
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

    /// The latest `resourceVersion` handed out.
    pub fn current_resource_version(&self) -> u64 {
        self.lock().rv
    }

    /// A receiver that changes whenever any object changes; its value is the latest `resourceVersion`.
    /// Controllers can use it to wake up without polling.
    pub fn subscribe_changes(&self) -> watch::Receiver<u64> {
        self.shared.changed.subscribe()
    }

    /// Drops the whole watch history, like an etcd compaction: the `resourceVersion` moves on by one, every
    /// running watch receives an in-stream 410 `Expired` error, and watches from older versions are refused
    /// the same way. A fresh list returns the new version, from which watching works again.
    pub fn compact(&self) {
        let mut st = self.lock();
        st.log.clear();
        let rv = next_rv(&mut st);
        st.compacted_through = rv;
        drop(st);
        self.shared.changed.send_replace(rv);
    }

    /// Installs the source of pod logs.
    pub fn set_pod_logs(&self, logs: Arc<dyn PodLogs>) {
        *self.shared.logs.write_unpoisoned() = Some(logs);
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
        container: Option<&str>,
        options: &LogOptions,
    ) -> Result<Option<LogStream>> {
        let pod = self.get(&GroupResource::pods(), Some(namespace), name)?;
        let source = self.shared.logs.read_unpoisoned().clone();
        source
            .and_then(|s| s.stream(&pod, container, options))
            .transpose()
    }

    /// Adds a bearer token that authenticates as `user` (for example `system:serviceaccount:default:default`).
    pub fn register_token(&self, token: &str, user: &str) {
        self.shared
            .tokens
            .write_unpoisoned()
            .insert(token.to_string(), user.to_string());
    }

    /// Removes a token added with [`Store::register_token`].
    pub fn forget_token(&self, token: &str) {
        self.shared.tokens.write_unpoisoned().remove(token);
    }

    /// The user a registered token authenticates as.
    pub fn token_user(&self, token: &str) -> Option<String> {
        self.shared.tokens.read_unpoisoned().get(token).cloned()
    }

    /// The description of a served resource.
    pub fn resource(&self, gr: &GroupResource) -> Result<Arc<ResourceInfo>> {
        self.lock()
            .resources
            .get(gr)
            .cloned()
            .ok_or(Error::ResourceNotFound)
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
        let info = st
            .resources
            .get(gr)
            .cloned()
            .ok_or(Error::ResourceNotFound)?;
        let key = (scope_ns(&info, namespace), name.to_string());
        st.objects
            .get(gr)
            .and_then(|m| m.get(&key))
            .map(|v| (**v).clone())
            .ok_or_else(|| Error::NotFound {
                resource: gr.clone(),
                name: name.to_string(),
            })
    }

    /// Reads one object as a `k8s-openapi` type.
    pub fn get_as<K: k8s_openapi::Resource + DeserializeOwned>(
        &self,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<K> {
        from_value(self.get(&GroupResource::of::<K>(), namespace, name)?)
    }

    /// Lists objects; `namespace: None` lists across all namespaces.
    pub fn list(
        &self,
        gr: &GroupResource,
        namespace: Option<&str>,
        opts: &ListOptions,
    ) -> Result<ObjectList> {
        let (labels, fields) = parse_selectors(gr, opts)?;
        let st = self.lock();
        if !st.resources.contains_key(gr) {
            return Err(Error::ResourceNotFound);
        }
        let (start, list_rv) = match &opts.continue_token {
            Some(t) => decode_continue(t)?,
            None => (None, st.rv),
        };
        let mut items = Vec::new();
        let mut remaining = 0usize;
        let mut last_key: Option<Key> = None;
        if let Some(objects) = st.objects.get(gr) {
            for (key, obj) in objects.iter() {
                if let Some(ns) = namespace
                    && key.0 != ns
                {
                    continue;
                }
                if start.as_ref().is_some_and(|s| key <= s) {
                    continue;
                }
                if !labels.matches(obj) || !fields.matches(obj) {
                    continue;
                }
                if opts.limit.is_some_and(|l| l > 0 && items.len() >= l) {
                    remaining += 1;
                    continue;
                }
                last_key = Some(key.clone());
                items.push((**obj).clone());
            }
        }
        let continue_token = if remaining > 0 {
            last_key.map(|k| encode_continue(&k, list_rv))
        } else {
            None
        };
        Ok(ObjectList {
            items,
            resource_version: list_rv,
            continue_token,
            remaining: (remaining > 0).then_some(remaining),
        })
    }

    /// Lists objects as a `k8s-openapi` type.
    pub fn list_as<K: k8s_openapi::Resource + DeserializeOwned>(
        &self,
        namespace: Option<&str>,
        opts: &ListOptions,
    ) -> Result<Vec<K>> {
        self.list(&GroupResource::of::<K>(), namespace, opts)?
            .items
            .into_iter()
            .map(from_value)
            .collect()
    }

    /// Creates an object. `metadata.generateName` is honoured; the namespace must exist and not be terminating.
    pub fn create(
        &self,
        gr: &GroupResource,
        namespace: Option<&str>,
        obj: Value,
        opts: &WriteOptions,
    ) -> Result<Value> {
        let manager = opts.field_manager.as_deref().unwrap_or("kube-sim");
        let mut st = self.lock();
        let info = st
            .resources
            .get(gr)
            .cloned()
            .ok_or(Error::ResourceNotFound)?;
        let (obj, _warnings) = self.prepare_create(
            &mut st,
            &info,
            namespace,
            obj,
            Managed::Update(manager),
            opts.field_validation,
        )?;
        if opts.dry_run {
            return Ok(obj);
        }
        Ok(self.insert_new(st, &info, obj))
    }

    /// Creates a `k8s-openapi` object.
    pub fn create_as<K: k8s_openapi::Resource + Serialize + DeserializeOwned>(
        &self,
        namespace: Option<&str>,
        obj: &K,
        opts: &WriteOptions,
    ) -> Result<K> {
        from_value(self.create(&GroupResource::of::<K>(), namespace, to_value(obj)?, opts)?)
    }

    /// Replaces an object through the main endpoint; `status` is kept when a status subresource exists.
    pub fn update(
        &self,
        gr: &GroupResource,
        namespace: Option<&str>,
        obj: Value,
        opts: &WriteOptions,
    ) -> Result<Value> {
        self.update_at(gr, namespace, obj, opts, Endpoint::Main)
    }

    /// Replaces an object's `status` through the status subresource; `spec` is kept.
    pub fn update_status(
        &self,
        gr: &GroupResource,
        namespace: Option<&str>,
        obj: Value,
        opts: &WriteOptions,
    ) -> Result<Value> {
        self.update_at(gr, namespace, obj, opts, Endpoint::Status)
    }

    /// Replaces a `k8s-openapi` object through the main endpoint.
    pub fn update_as<K: k8s_openapi::Resource + Serialize + DeserializeOwned>(
        &self,
        namespace: Option<&str>,
        obj: &K,
        opts: &WriteOptions,
    ) -> Result<K> {
        from_value(self.update(&GroupResource::of::<K>(), namespace, to_value(obj)?, opts)?)
    }

    /// Replaces a `k8s-openapi` object's status.
    pub fn update_status_as<K: k8s_openapi::Resource + Serialize + DeserializeOwned>(
        &self,
        namespace: Option<&str>,
        obj: &K,
        opts: &WriteOptions,
    ) -> Result<K> {
        from_value(self.update_status(
            &GroupResource::of::<K>(),
            namespace,
            to_value(obj)?,
            opts,
        )?)
    }

    fn update_at(
        &self,
        gr: &GroupResource,
        namespace: Option<&str>,
        obj: Value,
        opts: &WriteOptions,
        endpoint: Endpoint,
    ) -> Result<Value> {
        let manager = opts.field_manager.as_deref().unwrap_or("kube-sim");
        let name = meta::name_of(&obj).to_string();
        if name.is_empty() {
            return Err(Error::BadRequest("name is required for update".to_string()));
        }
        let st = self.lock();
        let info = st
            .resources
            .get(gr)
            .cloned()
            .ok_or(Error::ResourceNotFound)?;
        let key = (scope_ns(&info, namespace), name.clone());
        let old = st
            .objects
            .get(gr)
            .and_then(|m| m.get(&key))
            .cloned()
            .ok_or_else(|| Error::NotFound {
                resource: gr.clone(),
                name: name.clone(),
            })?;
        if let Some(rv) = meta::str_at(&obj, "/metadata/resourceVersion").filter(|s| !s.is_empty())
            && Some(rv) != meta::str_at(&old, "/metadata/resourceVersion")
        {
            return Err(Error::stale(gr, &name));
        }
        let (new, _warnings) = self.prepare_update(
            &info,
            &old,
            obj,
            endpoint,
            Managed::Update(manager),
            opts.field_validation,
        )?;
        if opts.dry_run {
            return Ok(new);
        }
        Ok(self.commit_update(st, &info, key, old, new))
    }

    /// Patches an object (or its status with `subresource: Some("status")`). Apply creates missing objects.
    pub fn patch(
        &self,
        gr: &GroupResource,
        namespace: Option<&str>,
        name: &str,
        subresource: Option<&str>,
        patch: &Patch,
        opts: &PatchOptions,
    ) -> Result<Value> {
        Ok(self
            .patch_with_warnings(gr, namespace, name, subresource, patch, opts)?
            .0)
    }

    /// Like [`Store::patch`], also returning warnings about pruned unknown fields.
    pub fn patch_with_warnings(
        &self,
        gr: &GroupResource,
        namespace: Option<&str>,
        name: &str,
        subresource: Option<&str>,
        patch: &Patch,
        opts: &PatchOptions,
    ) -> Result<(Value, Vec<String>)> {
        let endpoint = match subresource {
            None => Endpoint::Main,
            Some("status") => Endpoint::Status,
            Some(_) => return Err(Error::MethodNotAllowed),
        };
        let is_apply = matches!(patch, Patch::Apply(_));
        if is_apply && opts.field_manager.as_deref().is_none_or(str::is_empty) {
            return Err(patch_options_invalid(
                "fieldManager: Required value: is required for apply patch",
            ));
        }
        if !is_apply && opts.force {
            return Err(patch_options_invalid(
                "force: Forbidden: may not be specified for non-apply patch",
            ));
        }
        let manager = opts.field_manager.as_deref().unwrap_or("kube-sim");
        let mut st = self.lock();
        let info = st
            .resources
            .get(gr)
            .cloned()
            .ok_or(Error::ResourceNotFound)?;
        if matches!(patch, Patch::Strategic(_)) && info.is_custom() {
            return Err(Error::UnsupportedMediaType(
                "the body of the request was in an unknown format - accepted media types include: \
                 application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml"
                    .to_string(),
            ));
        }
        let key = (scope_ns(&info, namespace), name.to_string());
        let existing = st.objects.get(gr).and_then(|m| m.get(&key)).cloned();
        let api_version = info.api_version(info.preferred_version());
        let Some(old) = existing else {
            let Patch::Apply(body) = patch else {
                return Err(Error::NotFound {
                    resource: gr.clone(),
                    name: name.to_string(),
                });
            };
            if endpoint == Endpoint::Status {
                return Err(Error::NotFound {
                    resource: gr.clone(),
                    name: name.to_string(),
                });
            }
            check_apply_body(&info, body, name)?;
            let mut seed =
                json!({"apiVersion": api_version, "kind": info.kind, "metadata": {"name": name}});
            if info.namespaced {
                metadata_mut(&mut seed).insert("namespace".into(), json!(key.0));
            }
            let merged = fieldmanager::apply(
                &seed,
                body,
                &apply_req(&info, manager, &api_version, opts.force, endpoint),
            )
            .map_err(apply_error)?;
            let (obj, warnings) = self.prepare_create(
                &mut st,
                &info,
                namespace,
                merged,
                Managed::Precomputed,
                opts.field_validation,
            )?;
            if opts.dry_run {
                return Ok((obj, warnings));
            }
            return Ok((self.insert_new(st, &info, obj), warnings));
        };
        let mut new = (*old).clone();
        let managed = match patch {
            Patch::Apply(body) => {
                check_apply_body(&info, body, name)?;
                if let Some(rv) =
                    meta::str_at(body, "/metadata/resourceVersion").filter(|s| !s.is_empty())
                    && Some(rv) != meta::str_at(&old, "/metadata/resourceVersion")
                {
                    return Err(Error::stale(gr, name));
                }
                new = fieldmanager::apply(
                    &old,
                    body,
                    &apply_req(&info, manager, &api_version, opts.force, endpoint),
                )
                .map_err(apply_error)?;
                Managed::Precomputed
            }
            Patch::Merge(body) => {
                patch::merge_patch(&mut new, body);
                Managed::Update(manager)
            }
            Patch::Strategic(body) => {
                patch::strategic_merge_patch(&mut new, body)
                    .map_err(|e| Error::BadRequest(e.to_string()))?;
                Managed::Update(manager)
            }
            Patch::Json(body) => {
                patch::json_patch(&mut new, body).map_err(|e| match e {
                    patch::Error::TestFailed { .. } => Error::Invalid {
                        qualified_kind: qualified_kind(&info),
                        group: info.group.clone(),
                        kind: info.kind.clone(),
                        name: name.to_string(),
                        message: e.to_string(),
                    },
                    patch::Error::Invalid(m) => Error::BadRequest(m),
                })?;
                Managed::Update(manager)
            }
        };
        if meta::name_of(&new) != name {
            return Err(Error::BadRequest(format!(
                "the name of the object ({}) does not match the name on the URL ({name})",
                meta::name_of(&new)
            )));
        }
        if !matches!(patch, Patch::Apply(_))
            && let Some(rv) = meta::str_at(&new, "/metadata/resourceVersion")
            && Some(rv) != meta::str_at(&old, "/metadata/resourceVersion")
        {
            return Err(Error::stale(gr, name));
        }
        let (new, warnings) =
            self.prepare_update(&info, &old, new, endpoint, managed, opts.field_validation)?;
        if opts.dry_run {
            return Ok((new, warnings));
        }
        Ok((self.commit_update(st, &info, key, old, new), warnings))
    }

    /// Patches a `k8s-openapi` object.
    pub fn patch_as<K: k8s_openapi::Resource + DeserializeOwned>(
        &self,
        namespace: Option<&str>,
        name: &str,
        subresource: Option<&str>,
        patch: &Patch,
        opts: &PatchOptions,
    ) -> Result<K> {
        from_value(self.patch(
            &GroupResource::of::<K>(),
            namespace,
            name,
            subresource,
            patch,
            opts,
        )?)
    }

    /// Deletes an object, gracefully for pods on a node and after finalizers for everything.
    pub fn delete(
        &self,
        gr: &GroupResource,
        namespace: Option<&str>,
        name: &str,
        opts: &DeleteOptions,
    ) -> Result<Deleted> {
        let mut st = self.lock();
        let info = st
            .resources
            .get(gr)
            .cloned()
            .ok_or(Error::ResourceNotFound)?;
        let key = (scope_ns(&info, namespace), name.to_string());
        let old = st
            .objects
            .get(gr)
            .and_then(|m| m.get(&key))
            .cloned()
            .ok_or_else(|| Error::NotFound {
                resource: gr.clone(),
                name: name.to_string(),
            })?;
        if let Some(rv) = &opts.resource_version
            && Some(rv.as_str()) != meta::str_at(&old, "/metadata/resourceVersion")
        {
            return Err(Error::Conflict {
                resource: gr.clone(),
                name: name.to_string(),
                reason: format!(
                    "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}",
                    meta::str_at(&old, "/metadata/resourceVersion").unwrap_or("")
                ),
            });
        }
        if let Some(uid) = &opts.uid
            && Some(uid.as_str()) != meta::str_at(&old, "/metadata/uid")
        {
            return Err(Error::Conflict {
                resource: gr.clone(),
                name: name.to_string(),
                reason: format!(
                    "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                    meta::str_at(&old, "/metadata/uid").unwrap_or("")
                ),
            });
        }
        if opts.propagation_policy.as_deref() == Some("Orphan")
            && !opts.dry_run
            && let Some(uid) = meta::str_at(&old, "/metadata/uid")
        {
            orphan_dependents(&mut st, &self.shared.config, uid);
        }
        let has_finalizers = !meta::is_empty_value(old.pointer("/metadata/finalizers"));
        let is_namespace = *gr == GroupResource::namespaces();
        let grace = if *gr == GroupResource::pods() {
            pod_grace(&old, opts.grace_period_seconds)
        } else {
            0
        };
        let marked = old.pointer("/metadata/deletionTimestamp").is_some();
        if marked {
            let current = old
                .pointer("/metadata/deletionGracePeriodSeconds")
                .and_then(Value::as_i64)
                .unwrap_or(0);
            if grace >= current || *gr != GroupResource::pods() {
                return Ok(Deleted::Pending((*old).clone()));
            }
        }
        if grace > 0 || has_finalizers || is_namespace {
            let mut new = (*old).clone();
            {
                let md = metadata_mut(&mut new);
                md.insert(
                    "deletionTimestamp".into(),
                    json!(meta::rfc3339_after(grace)),
                );
                md.insert("deletionGracePeriodSeconds".into(), json!(grace));
            }
            if is_namespace && let Value::Object(m) = &mut new {
                meta::child_map(m, "status").insert("phase".into(), json!("Terminating"));
            }
            if grace == 0 && !has_finalizers && !is_namespace {
                return self.remove(st, gr, key, old, opts.dry_run);
            }
            if opts.dry_run {
                return Ok(Deleted::Pending(new));
            }
            let rv = next_rv(&mut st);
            set_rv(&mut new, rv);
            let new = Arc::new(new);
            st.objects
                .entry(gr.clone())
                .or_default()
                .insert(key.clone(), new.clone());
            push_event(
                &mut st,
                &self.shared.config,
                gr,
                &key.0,
                EventKind::Modified,
                new.clone(),
                Some(old),
            );
            drop(st);
            self.shared.changed.send_replace(rv);
            return Ok(Deleted::Pending((*new).clone()));
        }
        self.remove(st, gr, key, old, opts.dry_run)
    }

    fn remove(
        &self,
        mut st: MutexGuard<'_, State>,
        gr: &GroupResource,
        key: Key,
        old: Arc<Value>,
        dry_run: bool,
    ) -> Result<Deleted> {
        if dry_run {
            return Ok(Deleted::Gone((*old).clone()));
        }
        let rv = next_rv(&mut st);
        let mut last = (*old).clone();
        set_rv(&mut last, rv);
        let last = Arc::new(last);
        if let Some(m) = st.objects.get_mut(gr) {
            m.remove(&key);
        }
        push_event(
            &mut st,
            &self.shared.config,
            gr,
            &key.0,
            EventKind::Deleted,
            last.clone(),
            Some(old),
        );
        drop(st);
        self.shared.changed.send_replace(rv);
        Ok(Deleted::Gone((*last).clone()))
    }

    /// Starts a watch. `from: None` or `Some(0)` replays the current objects as `Added` first.
    pub fn watch(
        &self,
        gr: &GroupResource,
        namespace: Option<&str>,
        from: Option<u64>,
        opts: &ListOptions,
    ) -> Result<Watcher> {
        let (labels, fields) = parse_selectors(gr, opts)?;
        let st = self.lock();
        if !st.resources.contains_key(gr) {
            return Err(Error::ResourceNotFound);
        }
        let mut pending = VecDeque::new();
        let cursor = match from {
            None | Some(0) => {
                if let Some(objects) = st.objects.get(gr) {
                    for ((ns, _), obj) in objects {
                        if namespace.is_some_and(|n| n != ns) {
                            continue;
                        }
                        if labels.matches(obj) && fields.matches(obj) {
                            pending.push_back(WatchEvent::Added((**obj).clone()));
                        }
                    }
                }
                st.rv
            }
            Some(rv) => rv,
        };
        let rx = self.shared.changed.subscribe();
        drop(st);
        Ok(Watcher {
            store: self.clone(),
            resource: gr.clone(),
            namespace: namespace.map(str::to_string),
            labels,
            fields,
            cursor,
            rx,
            initial: pending.len(),
            pending,
            done: false,
        })
    }

    /// Removes the contents of terminating namespaces and then the namespaces themselves.
    /// Returns whether a namespace is still waiting for its contents to go.
    pub fn finalize_namespaces(&self) -> bool {
        let terminating: Vec<String> = {
            let st = self.lock();
            st.objects
                .get(&GroupResource::namespaces())
                .map(|m| {
                    m.values()
                        .filter(|n| n.pointer("/metadata/deletionTimestamp").is_some())
                        .map(|n| meta::name_of(n).to_string())
                        .collect()
                })
                .unwrap_or_default()
        };
        let mut waiting = false;
        for ns in terminating {
            let contents: Vec<(GroupResource, String, bool)> = {
                let st = self.lock();
                st.objects
                    .iter()
                    .filter(|(gr, _)| st.resources.get(*gr).is_some_and(|r| r.namespaced))
                    .flat_map(|(gr, m)| {
                        m.iter()
                            .filter(|((n, _), _)| *n == ns)
                            .map(|((_, name), o)| {
                                (
                                    gr.clone(),
                                    name.clone(),
                                    o.pointer("/metadata/deletionTimestamp").is_some(),
                                )
                            })
                            .collect::<Vec<_>>()
                    })
                    .collect()
            };
            if contents.is_empty() {
                let st = self.lock();
                let key = (String::new(), ns.clone());
                if let Some(old) = st
                    .objects
                    .get(&GroupResource::namespaces())
                    .and_then(|m| m.get(&key))
                    .cloned()
                {
                    let _ = self.remove(st, &GroupResource::namespaces(), key, old, false);
                } else {
                    drop(st);
                }
                continue;
            }
            waiting = true;
            for (gr, name, marked) in contents {
                if !marked {
                    let _ = self.delete(&gr, Some(&ns), &name, &DeleteOptions::default());
                }
            }
        }
        waiting
    }

    fn prepare_create(
        &self,
        st: &mut State,
        info: &ResourceInfo,
        namespace: Option<&str>,
        mut obj: Value,
        managed: Managed<'_>,
        validation: FieldValidation,
    ) -> Result<(Value, Vec<String>)> {
        let gr = info.group_resource();
        if !obj.is_object() {
            return Err(Error::BadRequest(
                "the request body must be a JSON object".to_string(),
            ));
        }
        let ns = scope_ns(info, namespace);
        {
            let body_ns = meta::namespace_of(&obj).to_string();
            let md = metadata_mut(&mut obj);
            if info.namespaced {
                if ns.is_empty() {
                    return Err(Error::BadRequest(
                        "a namespace is required for a namespaced resource".to_string(),
                    ));
                }
                if !body_ns.is_empty() && body_ns != ns {
                    return Err(Error::BadRequest(
                        "the namespace of the provided object does not match the namespace sent on the request"
                            .to_string(),
                    ));
                }
                md.insert("namespace".into(), json!(ns));
            } else {
                md.remove("namespace");
            }
            let has_name = md
                .get("name")
                .and_then(Value::as_str)
                .is_some_and(|n| !n.is_empty());
            if !has_name {
                match md.get("generateName").and_then(Value::as_str) {
                    Some(prefix) if !prefix.is_empty() => {
                        let name = format!("{prefix}{}", meta::random_suffix(5));
                        md.insert("name".into(), json!(name));
                    }
                    _ => {
                        return Err(Error::Invalid {
                            qualified_kind: qualified_kind(info),
                            group: info.group.clone(),
                            kind: info.kind.clone(),
                            name: String::new(),
                            message:
                                "metadata.name: Required value: name or generateName is required"
                                    .to_string(),
                        });
                    }
                }
            }
            for k in [
                "resourceVersion",
                "uid",
                "creationTimestamp",
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
                "generation",
                "selfLink",
            ] {
                md.remove(k);
            }
        }
        let name = meta::name_of(&obj).to_string();
        if info.namespaced {
            let ns_obj = st
                .objects
                .get(&GroupResource::namespaces())
                .and_then(|m| m.get(&(String::new(), ns.clone())));
            match ns_obj {
                None => {
                    return Err(Error::NotFound {
                        resource: GroupResource::namespaces(),
                        name: ns.clone(),
                    });
                }
                Some(n) if n.pointer("/metadata/deletionTimestamp").is_some() => {
                    return Err(Error::Forbidden {
                        resource: gr.clone(),
                        name: name.clone(),
                        reason: format!(
                            "unable to create new content in namespace {ns} because it is being terminated"
                        ),
                    });
                }
                Some(_) => {}
            }
        }
        if st
            .objects
            .get(&gr)
            .is_some_and(|m| m.contains_key(&(ns.clone(), name.clone())))
        {
            return Err(Error::AlreadyExists {
                resource: gr.clone(),
                name,
            });
        }
        if let Value::Object(m) = &mut obj {
            m.insert(
                "apiVersion".into(),
                json!(info.api_version(info.preferred_version())),
            );
            m.insert("kind".into(), json!(info.kind));
            if info.status_subresource {
                m.remove("status");
            }
        }
        if gr == GroupResource::pods() {
            let status = crate::defaults::initial_pod_status(&obj);
            if let Value::Object(m) = &mut obj {
                m.insert("status".into(), status);
            }
        }
        let warnings = self.normalize(info, &mut obj, validation)?;
        if gr == GroupResource::new("", "services") {
            allocate_cluster_ip(st, &mut obj);
        }
        validate(info, &obj)?;
        {
            let md = metadata_mut(&mut obj);
            md.insert("uid".into(), json!(meta::new_uid()));
            md.insert("creationTimestamp".into(), json!(meta::now_rfc3339()));
            if info.generation != GenerationRule::None {
                md.insert("generation".into(), json!(1));
            }
        }
        if let Managed::Update(manager) = managed {
            let api_version = info.api_version(info.preferred_version());
            fieldmanager::track_update(
                None,
                &mut obj,
                manager,
                &api_version,
                None,
                &Node::root(info.schema(info.preferred_version()), !info.is_custom()),
            );
        }
        Ok((obj, warnings))
    }

    fn insert_new(
        &self,
        mut st: MutexGuard<'_, State>,
        info: &ResourceInfo,
        mut obj: Value,
    ) -> Value {
        let gr = info.group_resource();
        let rv = next_rv(&mut st);
        set_rv(&mut obj, rv);
        let key = (
            meta::namespace_of(&obj).to_string(),
            meta::name_of(&obj).to_string(),
        );
        let obj = Arc::new(obj);
        st.objects
            .entry(gr.clone())
            .or_default()
            .insert(key.clone(), obj.clone());
        push_event(
            &mut st,
            &self.shared.config,
            &gr,
            &key.0,
            EventKind::Added,
            obj.clone(),
            None,
        );
        drop(st);
        self.shared.changed.send_replace(rv);
        (*obj).clone()
    }

    /// Defaults built-in types and prunes custom resources; returns warnings about pruned fields.
    fn normalize(
        &self,
        info: &ResourceInfo,
        obj: &mut Value,
        validation: FieldValidation,
    ) -> Result<Vec<String>> {
        let removed = if info.is_custom() {
            let Some(schema) = info.schema(info.preferred_version()) else {
                return Ok(Vec::new());
            };
            schema::prune_custom_resource(obj, schema)
        } else {
            let removed = schema::prune_built_in(&info.group, &info.plural, obj);
            crate::defaults::apply(&info.group, &info.plural, obj);
            removed
        };
        if removed.is_empty() {
            return Ok(Vec::new());
        }
        match validation {
            FieldValidation::Strict => Err(Error::BadRequest(format!(
                "strict decoding error: {}",
                removed
                    .iter()
                    .map(|p| format!("unknown field \"{p}\""))
                    .collect::<Vec<_>>()
                    .join(", ")
            ))),
            FieldValidation::Warn => Ok(removed
                .iter()
                .map(|p| format!("unknown field \"{p}\""))
                .collect()),
            FieldValidation::Ignore => Ok(Vec::new()),
        }
    }

    fn prepare_update(
        &self,
        info: &ResourceInfo,
        old: &Value,
        obj: Value,
        endpoint: Endpoint,
        managed: Managed<'_>,
        validation: FieldValidation,
    ) -> Result<(Value, Vec<String>)> {
        if !obj.is_object() {
            return Err(Error::BadRequest(
                "the request body must be a JSON object".to_string(),
            ));
        }
        let name = meta::name_of(old);
        if meta::name_of(&obj) != name {
            return Err(Error::BadRequest(format!(
                "the name of the object ({}) does not match the name on the URL ({name})",
                meta::name_of(&obj)
            )));
        }
        let mut new = match endpoint {
            Endpoint::Main => {
                let mut new = obj;
                if info.status_subresource
                    && let Value::Object(m) = &mut new
                {
                    match old.get("status") {
                        Some(s) => m.insert("status".into(), s.clone()),
                        None => m.remove("status"),
                    };
                }
                new
            }
            Endpoint::Status => {
                if !info.status_subresource {
                    return Err(Error::ResourceNotFound);
                }
                let mut new = old.clone();
                if let Value::Object(m) = &mut new {
                    match obj.get("status") {
                        Some(s) => m.insert("status".into(), s.clone()),
                        None => m.remove("status"),
                    };
                }
                let md_new = obj.get("metadata");
                let md = metadata_mut(&mut new);
                if let Some(mf) = md_new.and_then(|m| m.get("managedFields")) {
                    md.insert("managedFields".into(), mf.clone());
                }
                if !info.is_custom() {
                    match md_new.and_then(|m| m.get("annotations")) {
                        Some(a) => md.insert("annotations".into(), a.clone()),
                        None => md.remove("annotations"),
                    };
                }
                new
            }
        };
        {
            let old_md = old
                .get("metadata")
                .and_then(Value::as_object)
                .cloned()
                .unwrap_or_default();
            let md = metadata_mut(&mut new);
            for k in [
                "uid",
                "creationTimestamp",
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
                "generation",
                "namespace",
                "resourceVersion",
            ] {
                match old_md.get(k) {
                    Some(v) => md.insert(k.to_string(), v.clone()),
                    None => md.remove(k),
                };
            }
            md.remove("selfLink");
            if let Managed::Update(_) = managed
                && endpoint == Endpoint::Main
                && !md.contains_key("managedFields")
                && let Some(mf) = old_md.get("managedFields")
            {
                md.insert("managedFields".into(), mf.clone());
            }
        }
        if let Value::Object(m) = &mut new {
            m.insert(
                "apiVersion".into(),
                json!(info.api_version(info.preferred_version())),
            );
            m.insert("kind".into(), json!(info.kind));
        }
        let warnings = self.normalize(info, &mut new, validation)?;
        validate(info, &new)?;
        if endpoint == Endpoint::Main && bumps_generation(info, old, &new) {
            let g = old
                .pointer("/metadata/generation")
                .and_then(Value::as_i64)
                .unwrap_or(0)
                + 1;
            metadata_mut(&mut new).insert("generation".into(), json!(g));
        }
        if let Managed::Update(manager) = managed {
            let api_version = info.api_version(info.preferred_version());
            let node = Node::root(info.schema(info.preferred_version()), !info.is_custom());
            let mut base = new.clone();
            // Ownership is computed from the stored entries, not from whatever the client sent back.
            if let Some(mf) = old.pointer("/metadata/managedFields") {
                metadata_mut(&mut base).insert("managedFields".into(), mf.clone());
            } else {
                metadata_mut(&mut base).remove("managedFields");
            }
            new = base;
            // A write that changes nothing keeps the stored object, field ownership included.
            if same_ignoring_times(old, &new) {
                return Ok((old.clone(), warnings));
            }
            fieldmanager::track_update(
                Some(old),
                &mut new,
                manager,
                &api_version,
                endpoint.subresource(),
                &node,
            );
        }
        Ok((new, warnings))
    }

    fn commit_update(
        &self,
        mut st: MutexGuard<'_, State>,
        info: &ResourceInfo,
        key: Key,
        old: Arc<Value>,
        mut new: Value,
    ) -> Value {
        if same_ignoring_times(&old, &new) {
            return (*old).clone();
        }
        let gr = info.group_resource();
        let finished = new.pointer("/metadata/deletionTimestamp").is_some()
            && meta::is_empty_value(new.pointer("/metadata/finalizers"))
            && new
                .pointer("/metadata/deletionGracePeriodSeconds")
                .and_then(Value::as_i64)
                .unwrap_or(0)
                == 0
            && gr != GroupResource::namespaces();
        let rv = next_rv(&mut st);
        set_rv(&mut new, rv);
        let new = Arc::new(new);
        if finished {
            if let Some(m) = st.objects.get_mut(&gr) {
                m.remove(&key);
            }
            push_event(
                &mut st,
                &self.shared.config,
                &gr,
                &key.0,
                EventKind::Deleted,
                new.clone(),
                Some(old),
            );
        } else {
            st.objects
                .entry(gr.clone())
                .or_default()
                .insert(key.clone(), new.clone());
            push_event(
                &mut st,
                &self.shared.config,
                &gr,
                &key.0,
                EventKind::Modified,
                new.clone(),
                Some(old),
            );
        }
        drop(st);
        self.shared.changed.send_replace(rv);
        (*new).clone()
    }
}

fn patch_options_invalid(message: &str) -> Error {
    Error::Invalid {
        qualified_kind: "PatchOptions.meta.k8s.io".to_string(),
        group: "meta.k8s.io".to_string(),
        kind: "PatchOptions".to_string(),
        name: String::new(),
        message: message.to_string(),
    }
}

fn apply_req<'a>(
    info: &'a ResourceInfo,
    manager: &'a str,
    api_version: &'a str,
    force: bool,
    endpoint: Endpoint,
) -> fieldmanager::Apply<'a> {
    fieldmanager::Apply {
        manager,
        api_version,
        force,
        subresource: endpoint.subresource(),
        node: Node::root(info.schema(info.preferred_version()), !info.is_custom()),
    }
}

fn apply_error(e: fieldmanager::Error) -> Error {
    match e {
        fieldmanager::Error::Conflict { message, causes } => {
            Error::ApplyConflict { message, causes }
        }
    }
}

fn check_apply_body(info: &ResourceInfo, body: &Value, name: &str) -> Result<()> {
    if !body.is_object() {
        return Err(Error::BadRequest(
            "the apply configuration must be an object".to_string(),
        ));
    }
    let api_version = meta::str_at(body, "/apiVersion").unwrap_or("");
    let kind = meta::str_at(body, "/kind").unwrap_or("");
    if api_version.is_empty() || kind.is_empty() {
        return Err(Error::BadRequest(
            "invalid object type: /, Kind=".to_string() + if kind.is_empty() { "" } else { kind },
        ));
    }
    if kind != info.kind
        || !info
            .versions
            .iter()
            .any(|v| info.api_version(v) == api_version)
    {
        return Err(Error::BadRequest(format!(
            "the API version in the data ({api_version}) does not match the expected API version ({})",
            info.api_version(info.preferred_version())
        )));
    }
    let body_name = meta::name_of(body);
    if !body_name.is_empty() && body_name != name {
        return Err(Error::BadRequest(format!(
            "the name of the object ({body_name}) does not match the name on the URL ({name})"
        )));
    }
    Ok(())
}

fn qualified_kind(info: &ResourceInfo) -> String {
    if info.group.is_empty() {
        info.kind.clone()
    } else {
        format!("{}.{}", info.kind, info.group)
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

fn push_event(
    st: &mut State,
    config: &StoreConfig,
    gr: &GroupResource,
    namespace: &str,
    kind: EventKind,
    object: Arc<Value>,
    previous: Option<Arc<Value>>,
) {
    let rv = meta::resource_version_of(&object).unwrap_or(st.rv);
    st.log.push_back(LogEntry {
        rv,
        resource: gr.clone(),
        namespace: namespace.to_string(),
        kind,
        object,
        previous,
    });
    while st.log.len() > config.history.max(1) {
        if let Some(e) = st.log.pop_front() {
            st.compacted_through = e.rv;
        }
    }
}

/// Removes the owner reference to `uid` from every object that has one, each removal a `MODIFIED` event.
/// The caller notifies watchers after its own write.
fn orphan_dependents(st: &mut State, config: &StoreConfig, uid: &str) {
    let mut dependents: Vec<(GroupResource, Key, Arc<Value>)> = Vec::new();
    for (gr, objects) in &st.objects {
        for (key, obj) in objects {
            let owned = obj
                .pointer("/metadata/ownerReferences")
                .and_then(Value::as_array)
                .is_some_and(|refs| {
                    refs.iter()
                        .any(|r| r.get("uid").and_then(Value::as_str) == Some(uid))
                });
            if owned {
                dependents.push((gr.clone(), key.clone(), obj.clone()));
            }
        }
    }
    for (gr, key, old) in dependents {
        let mut new = (*old).clone();
        let md = metadata_mut(&mut new);
        if let Some(Value::Array(refs)) = md.get_mut("ownerReferences") {
            refs.retain(|r| r.get("uid").and_then(Value::as_str) != Some(uid));
            if refs.is_empty() {
                md.remove("ownerReferences");
            }
        }
        let rv = next_rv(st);
        set_rv(&mut new, rv);
        let new = Arc::new(new);
        st.objects
            .entry(gr.clone())
            .or_default()
            .insert(key.clone(), new.clone());
        push_event(st, config, &gr, &key.0, EventKind::Modified, new, Some(old));
    }
}

fn same_ignoring_times(a: &Value, b: &Value) -> bool {
    let mut a = a.clone();
    let mut b = b.clone();
    fieldmanager::strip_times(&mut a);
    fieldmanager::strip_times(&mut b);
    metadata_mut(&mut a).remove("resourceVersion");
    metadata_mut(&mut b).remove("resourceVersion");
    a == b
}

fn bumps_generation(info: &ResourceInfo, old: &Value, new: &Value) -> bool {
    match info.generation {
        GenerationRule::None => false,
        GenerationRule::Spec => old.get("spec") != new.get("spec"),
        GenerationRule::SpecOrAnnotations => {
            old.get("spec") != new.get("spec")
                || old.pointer("/metadata/annotations") != new.pointer("/metadata/annotations")
        }
        GenerationRule::NonMetadata => {
            let strip = |v: &Value| {
                let mut m = v.as_object().cloned().unwrap_or_default();
                m.remove("metadata");
                if info.status_subresource {
                    m.remove("status");
                }
                m
            };
            strip(old) != strip(new)
        }
    }
}

fn pod_grace(pod: &Value, requested: Option<i64>) -> i64 {
    let scheduled = meta::str_at(pod, "/spec/nodeName").is_some_and(|n| !n.is_empty());
    let finished = matches!(
        meta::str_at(pod, "/status/phase"),
        Some("Succeeded" | "Failed")
    );
    if !scheduled || finished {
        return 0;
    }
    let grace = requested
        .or_else(|| {
            pod.pointer("/spec/terminationGracePeriodSeconds")
                .and_then(Value::as_i64)
        })
        .unwrap_or(30);
    grace.max(0)
}

fn allocate_cluster_ip(st: &mut State, obj: &mut Value) {
    let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    if spec
        .get("clusterIP")
        .and_then(Value::as_str)
        .is_some_and(|s| !s.is_empty())
    {
        let ip = spec.get("clusterIP").cloned().unwrap_or(Value::Null);
        spec.entry("clusterIPs").or_insert_with(|| json!([ip]));
    } else if spec.get("type").and_then(Value::as_str) != Some("ExternalName") {
        let n = st.next_service_ip;
        st.next_service_ip += 1;
        let ip = format!("10.43.{}.{}", n / 254, n % 254 + 1);
        spec.insert("clusterIP".into(), json!(ip));
        spec.insert("clusterIPs".into(), json!([ip]));
    }
    spec.entry("ipFamilies").or_insert_with(|| json!(["IPv4"]));
    spec.entry("ipFamilyPolicy")
        .or_insert_with(|| json!("SingleStack"));
}

fn validate(info: &ResourceInfo, obj: &Value) -> Result<()> {
    let invalid = |message: String| Error::Invalid {
        qualified_kind: qualified_kind(info),
        group: info.group.clone(),
        kind: info.kind.clone(),
        name: meta::name_of(obj).to_string(),
        message,
    };
    let name = meta::name_of(obj);
    let dns_ok = |s: &str| {
        !s.is_empty()
            && s.len() <= 253
            && s.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
            && s.starts_with(|c: char| c.is_ascii_alphanumeric())
            && s.ends_with(|c: char| c.is_ascii_alphanumeric())
    };
    if !dns_ok(name) && info.plural != "events" {
        return Err(invalid(format!(
            "metadata.name: Invalid value: \"{name}\": a lowercase RFC 1123 subdomain must consist of lower case \
             alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character"
        )));
    }
    if info.group == "apps" && (info.plural == "deployments" || info.plural == "replicasets") {
        let Some(selector) = obj
            .pointer("/spec/selector/matchLabels")
            .and_then(Value::as_object)
        else {
            return Err(invalid("spec.selector: Required value".to_string()));
        };
        let labels = obj
            .pointer("/spec/template/metadata/labels")
            .and_then(Value::as_object);
        let matches = selector
            .iter()
            .all(|(k, v)| labels.and_then(|l| l.get(k)) == Some(v));
        if !matches || selector.is_empty() {
            return Err(invalid(format!(
                "spec.template.metadata.labels: Invalid value: {}: `selector` does not match template `labels`",
                labels
                    .map(|l| Value::Object(l.clone()))
                    .unwrap_or(Value::Null)
            )));
        }
    }
    if info.plural == "customresourcedefinitions" {
        let spec_name = format!(
            "{}.{}",
            meta::str_at(obj, "/spec/names/plural").unwrap_or(""),
            meta::str_at(obj, "/spec/group").unwrap_or("")
        );
        if spec_name != name {
            return Err(invalid(format!(
                "metadata.name: Invalid value: \"{name}\": must be spec.names.plural+\".\"+spec.group"
            )));
        }
    }
    Ok(())
}

fn parse_selectors(
    gr: &GroupResource,
    opts: &ListOptions,
) -> Result<(LabelSelector, FieldSelector)> {
    let labels = LabelSelector::parse(opts.label_selector.as_deref().unwrap_or(""))
        .map_err(|e| Error::BadRequest(e.to_string()))?;
    let supported = selector::supported_fields(&gr.group, &gr.resource);
    let fields = FieldSelector::parse(opts.field_selector.as_deref().unwrap_or(""), &supported)
        .map_err(|e| Error::BadRequest(e.to_string()))?;
    Ok((labels, fields))
}

fn encode_continue(key: &Key, rv: u64) -> String {
    use base64::Engine as _;
    let raw = json!({"rv": rv, "ns": key.0, "name": key.1}).to_string();
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(raw)
}

fn decode_continue(token: &str) -> Result<(Option<Key>, u64)> {
    use base64::Engine as _;
    let bad = || Error::BadRequest("continue key is not valid".to_string());
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(token)
        .map_err(|_| bad())?;
    let v: Value = serde_json::from_slice(&raw).map_err(|_| bad())?;
    let ns = meta::str_at(&v, "/ns").ok_or_else(bad)?.to_string();
    let name = meta::str_at(&v, "/name").ok_or_else(bad)?.to_string();
    let rv = v.get("rv").and_then(Value::as_u64).ok_or_else(bad)?;
    Ok((Some((ns, name)), rv))
}

fn from_value<K: DeserializeOwned>(v: Value) -> Result<K> {
    serde_json::from_value(v)
        .map_err(|e| Error::BadRequest(format!("decoding the stored object: {e}")))
}

fn to_value<K: Serialize>(obj: &K) -> Result<Value> {
    serde_json::to_value(obj).map_err(|e| Error::BadRequest(format!("encoding the object: {e}")))
}

/// A running watch over one resource. Dropping it ends the watch.
pub struct Watcher {
    store: Store,
    resource: GroupResource,
    namespace: Option<String>,
    labels: LabelSelector,
    fields: FieldSelector,
    cursor: u64,
    rx: watch::Receiver<u64>,
    pending: VecDeque<WatchEvent>,
    initial: usize,
    done: bool,
}

impl Watcher {
    /// The next event; `None` after an `Error` event.
    pub async fn next(&mut self) -> Option<WatchEvent> {
        loop {
            if let Some(e) = self.pending.pop_front() {
                return Some(e);
            }
            if self.done {
                return None;
            }
            self.rx.borrow_and_update();
            self.fill();
            if !self.pending.is_empty() {
                continue;
            }
            if self.rx.changed().await.is_err() {
                return None;
            }
        }
    }

    /// How many `Added` events the initial replay produced (zero when starting from a version).
    pub fn initial_events(&self) -> usize {
        self.initial
    }

    /// The `resourceVersion` this watcher has caught up to, for bookmarks.
    pub fn resource_version(&self) -> u64 {
        self.cursor
    }

    fn fill(&mut self) {
        let st = self.store.lock();
        if self.cursor < st.compacted_through {
            let err = Error::Expired(format!(
                "too old resource version: {} ({})",
                self.cursor, st.compacted_through
            ));
            self.pending.push_back(WatchEvent::Error(err.status()));
            self.done = true;
            return;
        }
        let start = st.log.partition_point(|e| e.rv <= self.cursor);
        for e in st.log.iter().skip(start) {
            if e.resource != self.resource
                || self.namespace.as_ref().is_some_and(|n| *n != e.namespace)
            {
                continue;
            }
            let now = self.labels.matches(&e.object) && self.fields.matches(&e.object);
            let before = e
                .previous
                .as_ref()
                .is_some_and(|p| self.labels.matches(p) && self.fields.matches(p));
            let obj = || (*e.object).clone();
            let event = match e.kind {
                EventKind::Added if now => Some(WatchEvent::Added(obj())),
                EventKind::Modified if now && before => Some(WatchEvent::Modified(obj())),
                EventKind::Modified if now => Some(WatchEvent::Added(obj())),
                EventKind::Modified if before => Some(WatchEvent::Deleted(obj())),
                EventKind::Deleted if now || before => Some(WatchEvent::Deleted(obj())),
                _ => None,
            };
            if let Some(ev) = event {
                self.pending.push_back(ev);
            }
        }
        self.cursor = self.cursor.max(st.rv);
    }
}

#[cfg(test)]
mod tests;
