//! Watches: a [`Watcher`] reads its resource's history in `resourceVersion` order, its events sharing the
//! stored objects until a consumer asks for its own copy. Versions the history keeps as JSON are parsed
//! when the consumer takes their event, outside the store's lock.

use std::collections::VecDeque;
use std::sync::Arc;

use serde_json::Value;
use tokio::sync::watch;

use super::history::EventKind;
use super::list::parse_selectors;
use super::version::Version;
use super::{Error, ListOptions, Result, Store};
use crate::resource::GroupResource;
use crate::selector::{FieldSelector, LabelSelector};

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

/// A [`WatchEvent`] whose object is the stored one, shared with the store, its history and every other
/// watcher; for consumers that only read it (the HTTP server serializes it).
#[derive(Clone, Debug, PartialEq)]
pub enum SharedEvent {
    /// An object appeared (or started matching).
    Added(Arc<Value>),
    /// An object changed.
    Modified(Arc<Value>),
    /// An object was removed (or stopped matching).
    Deleted(Arc<Value>),
    /// The watcher has seen everything up to this `resourceVersion`.
    Bookmark(u64),
    /// The watch cannot continue; the value is a `Status`. The stream ends after it.
    Error(Value),
}

impl SharedEvent {
    /// The wire `type`.
    pub fn type_name(&self) -> &'static str {
        match self {
            SharedEvent::Added(_) => "ADDED",
            SharedEvent::Modified(_) => "MODIFIED",
            SharedEvent::Deleted(_) => "DELETED",
            SharedEvent::Bookmark(_) => "BOOKMARK",
            SharedEvent::Error(_) => "ERROR",
        }
    }

    /// The object of an `ADDED`, `MODIFIED` or `DELETED` event.
    pub fn object(&self) -> Option<&Arc<Value>> {
        match self {
            SharedEvent::Added(o) | SharedEvent::Modified(o) | SharedEvent::Deleted(o) => Some(o),
            _ => None,
        }
    }

    fn owned(self) -> WatchEvent {
        let own = |o: Arc<Value>| Arc::try_unwrap(o).unwrap_or_else(|o| (*o).clone());
        match self {
            SharedEvent::Added(o) => WatchEvent::Added(own(o)),
            SharedEvent::Modified(o) => WatchEvent::Modified(own(o)),
            SharedEvent::Deleted(o) => WatchEvent::Deleted(own(o)),
            SharedEvent::Bookmark(rv) => WatchEvent::Bookmark(rv),
            SharedEvent::Error(s) => WatchEvent::Error(s),
        }
    }
}

impl Store {
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
                        if labels.matches(obj.selectable()) && fields.matches(obj.selectable()) {
                            pending.push_back(Queued::Added(obj.clone()));
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

/// How many events a watcher takes out of the history ahead of its consumer, like the watch cache's
/// per-watcher buffer. The objects of taken events stay alive while they wait, so a slow consumer must
/// not take them all: it reads the rest from the history, or is expired (410) once the history has moved
/// past it.
const BUFFERED: usize = 100;

/// An event taken out of the history, its object not yet parsed when the history keeps it as JSON.
enum Queued {
    Added(Version),
    Modified(Version),
    Deleted(Version),
    Error(Value),
}

impl Queued {
    fn shared(self) -> SharedEvent {
        match self {
            Queued::Added(v) => SharedEvent::Added(v.value()),
            Queued::Modified(v) => SharedEvent::Modified(v.value()),
            Queued::Deleted(v) => SharedEvent::Deleted(v.value()),
            Queued::Error(s) => SharedEvent::Error(s),
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
    pending: VecDeque<Queued>,
    initial: usize,
    done: bool,
}

impl Watcher {
    /// The next event; `None` after an `Error` event.
    pub async fn next(&mut self) -> Option<WatchEvent> {
        self.next_shared().await.map(SharedEvent::owned)
    }

    /// The next event with the object shared with the store; `None` after an `Error` event.
    pub async fn next_shared(&mut self) -> Option<SharedEvent> {
        loop {
            // Take what changed before handing out what is queued: a consumer that is slow with a burst
            // of events must not fall behind the history meanwhile (and be expired into a full relist).
            if !self.done && self.rx.has_changed().unwrap_or(false) {
                self.rx.borrow_and_update();
                self.fill();
            }
            if let Some(e) = self.pending.pop_front() {
                return Some(e.shared());
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

    /// Takes the objects of the initial replay (none when starting from a version) off the front of the
    /// stream, for a follower that compares them with what it knew. Call it before reading any event.
    pub fn take_initial(&mut self) -> Vec<Arc<Value>> {
        let n = self.initial.min(self.pending.len());
        self.pending
            .drain(..n)
            .filter_map(|e| e.shared().object().cloned())
            .collect()
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
        if let Err(err) = st.history.check(&self.resource, self.cursor) {
            self.pending.push_back(Queued::Error(err.status()));
            self.done = true;
            return;
        }
        if let Some(history) = st.history.of(&self.resource) {
            let start = history.events.partition_point(|e| e.rv <= self.cursor);
            for e in history.events.iter().skip(start) {
                if self.pending.len() >= BUFFERED {
                    // The rest stays in the history; a consumer that falls behind its end is expired.
                    self.cursor = e.rv - 1;
                    return;
                }
                if self.namespace.as_ref().is_some_and(|n| *n != e.namespace) {
                    continue;
                }
                let selected = |v: &Version| {
                    let v = v.selectable();
                    self.labels.matches(v) && self.fields.matches(v)
                };
                let now = selected(&e.object);
                let before = e.previous.as_ref().is_some_and(selected);
                let obj = || e.object.clone();
                let event = match e.kind {
                    EventKind::Added if now => Some(Queued::Added(obj())),
                    EventKind::Modified if now && before => Some(Queued::Modified(obj())),
                    EventKind::Modified if now => Some(Queued::Added(obj())),
                    EventKind::Modified if before => Some(Queued::Deleted(obj())),
                    EventKind::Deleted if now || before => Some(Queued::Deleted(obj())),
                    _ => None,
                };
                if let Some(ev) = event {
                    self.pending.push_back(ev);
                }
            }
        }
        self.cursor = self.cursor.max(st.rv);
    }
}
