//! The options of reads and writes, their results, the source of pod logs, and the store's tuning.

use serde_json::Value;

use super::Result;

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

    /// How the write records field ownership: an `Update` by its manager
    /// (`kube-sim` when none is named).
    pub(super) fn managed(&self) -> super::update::Managed<'_> {
        super::update::Managed::Update(self.field_manager.as_deref().unwrap_or("kube-sim"))
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
    /// Which version a list reads (`resourceVersion` with `resourceVersionMatch`); ignored with a
    /// continue token, which carries its own.
    pub version: ListVersion,
}

/// The version a list reads.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ListVersion {
    /// The latest state (no `resourceVersion`, or `resourceVersion=0`: any version, and the latest is one).
    #[default]
    Latest,
    /// The latest state, which must be at least this version (`resourceVersionMatch=NotOlderThan`, or a
    /// bare non-zero `resourceVersion`); a version the store has not reached is 504 `Timeout`.
    NotOlderThan(u64),
    /// The state at exactly this version (`resourceVersionMatch=Exact`); 410 `Expired` when the history
    /// no longer reaches back to it, 504 `Timeout` when the store has not reached it.
    Exact(u64),
}

impl ListVersion {
    /// The version the store must have reached before the list can be answered.
    pub fn minimum(self) -> u64 {
        match self {
            ListVersion::Latest => 0,
            ListVersion::NotOlderThan(rv) | ListVersion::Exact(rv) => rv,
        }
    }
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

/// The source of container logs for `GET /api/v1/namespaces/<ns>/pods/<name>/log`.
pub trait PodLogs: Send + Sync {
    /// The log text of a container of a pod; `container` is `None` when the request named none.
    fn logs(&self, pod: &Value, container: Option<&str>) -> Result<String>;

    /// A streamed log honouring `follow` and `tailLines`, for sources backed by real containers; `None`
    /// (the default) serves [`PodLogs::logs`] as one body.
    fn stream(&self, _pod: &Value, _options: &LogOptions) -> Option<Result<LogStream>> {
        None
    }
}

/// The options of a log request that a streaming [`PodLogs`] source honours.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LogOptions {
    /// The container; `None` when the request named none.
    pub container: Option<String>,
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
    /// How many events the watch history keeps per resource before older ones expire (they also expire
    /// after [`HISTORY_WINDOW`](super::HISTORY_WINDOW)).
    pub history: usize,
}
