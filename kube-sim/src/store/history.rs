//! The watch history: every change as an event, kept up to [`StoreConfig::history`] events, and the
//! [`Watcher`]s that read it in `resourceVersion` order.

use std::collections::VecDeque;
use std::sync::Arc;

use serde_json::Value;
use tokio::sync::watch;

use super::list::parse_selectors;
use super::{Error, Key, ListOptions, Result, State, Store, StoreConfig, next_rv};
use crate::meta;
use crate::resource::GroupResource;
use crate::selector::{FieldSelector, LabelSelector};

/// The kind of a stored event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum EventKind {
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

#[derive(Debug)]
pub(super) struct LogEntry {
    rv: u64,
    resource: GroupResource,
    namespace: String,
    kind: EventKind,
    object: Arc<Value>,
    previous: Option<Arc<Value>>,
}

impl Store {
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
}

/// Stores `object` under `key` and records its event for watchers.
pub(super) fn store_object(
    st: &mut State,
    config: &StoreConfig,
    gr: &GroupResource,
    key: &Key,
    kind: EventKind,
    object: Arc<Value>,
    previous: Option<Arc<Value>>,
) {
    st.objects
        .entry(gr.clone())
        .or_default()
        .insert(key.clone(), object.clone());
    push_event(st, config, gr, &key.0, kind, object, previous);
}

pub(super) fn push_event(
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
