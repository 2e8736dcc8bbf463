//! The watch history, one per resource like the API server's watch cache: every change as an event, kept
//! for [`HISTORY_WINDOW`] and at most [`StoreConfig::history`] events per resource, whichever is shorter.
//! A watch or a `continue` token from a version older than what a resource keeps gets 410 `Expired`.
//!
//! An event shares the stored object (`Arc`) while that is the object's newest version; once it is
//! replaced or deleted the history keeps it as JSON (see [`super::version`]), freed when its events expire.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::version::{Frozen, Version};
use super::{Error, Key, Objects, Result, State, Store, StoreConfig, next_rv};
use crate::meta;
use crate::resource::GroupResource;

/// How long events are kept: etcd's default compaction interval.
pub const HISTORY_WINDOW: Duration = Duration::from_secs(5 * 60);

/// The kind of a stored event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum EventKind {
    Added,
    Modified,
    Deleted,
}

#[derive(Debug)]
pub(super) struct LogEntry {
    pub(super) rv: u64,
    at: Instant,
    pub(super) namespace: String,
    pub(super) name: String,
    pub(super) kind: EventKind,
    pub(super) object: Version,
    pub(super) previous: Option<Version>,
}

/// The events of one resource and the newest version that has been dropped.
#[derive(Debug, Default)]
pub(super) struct History {
    pub(super) events: VecDeque<LogEntry>,
    compacted_through: u64,
}

/// The histories of every resource, and how long they keep events.
#[derive(Debug)]
pub(super) struct Histories {
    by_resource: HashMap<GroupResource, History>,
    /// The version of the last full compaction ([`Store::compact`]): nothing older is kept anywhere.
    floor: u64,
    window: Duration,
    /// How long Events live (see `retention.rs`).
    pub(super) event_ttl: Duration,
}

impl Default for Histories {
    fn default() -> Self {
        Histories {
            by_resource: HashMap::new(),
            floor: 0,
            window: HISTORY_WINDOW,
            event_ttl: super::retention::EVENT_TTL,
        }
    }
}

impl Histories {
    /// The history of `gr`, when it has one.
    pub(super) fn of(&self, gr: &GroupResource) -> Option<&History> {
        self.by_resource.get(gr)
    }

    /// The newest version `gr` no longer has the events after; a watch or snapshot from an older one
    /// is refused.
    pub(super) fn compacted_through(&self, gr: &GroupResource) -> u64 {
        let own = self.of(gr).map_or(0, |h| h.compacted_through);
        own.max(self.floor)
    }

    /// The 410 `Expired` of a read at `rv` when `gr`'s history no longer reaches back to it.
    pub(super) fn check(&self, gr: &GroupResource, rv: u64) -> Result<()> {
        let through = self.compacted_through(gr);
        if rv < through {
            return Err(Error::Expired(format!(
                "too old resource version: {rv} ({through})"
            )));
        }
        Ok(())
    }

    /// Drops events older than the window, and the oldest beyond `cap` per resource.
    fn trim(&mut self, now: Instant, cap: usize) {
        let window = self.window;
        for h in self.by_resource.values_mut() {
            while let Some(front) = h.events.front() {
                if h.events.len() <= cap && now.duration_since(front.at) <= window {
                    break;
                }
                h.compacted_through = front.rv;
                h.events.pop_front();
            }
            if h.events.capacity() > 2 * h.events.len().max(16) {
                h.events.shrink_to_fit();
            }
        }
    }

    /// How many events are kept over all resources.
    pub(super) fn len(&self) -> usize {
        self.by_resource.values().map(|h| h.events.len()).sum()
    }
}

impl History {
    /// The objects of `current` (a resource's stored objects) as they were at `rv`: the changes after it
    /// undone. The caller has checked that the history reaches back to `rv`.
    pub(super) fn snapshot(&self, current: Option<&Objects>, rv: u64) -> Objects {
        let mut objects = current.cloned().unwrap_or_default();
        let start = self.events.partition_point(|e| e.rv <= rv);
        let mut undone = std::collections::HashSet::new();
        for e in self.events.iter().skip(start) {
            let key = (e.namespace.clone(), e.name.clone());
            if !undone.insert(key.clone()) {
                continue;
            }
            match (e.kind, &e.previous) {
                (EventKind::Added, _) | (_, None) => objects.remove(&key),
                (_, Some(before)) => objects.insert(key, before.clone()),
            };
        }
        objects
    }
}

impl Store {
    /// Drops the whole watch history, like an etcd compaction: the `resourceVersion` moves on by one, every
    /// running watch receives an in-stream 410 `Expired` error, and watches from older versions are refused
    /// the same way. A fresh list returns the new version, from which watching works again.
    pub fn compact(&self) {
        let mut st = self.lock();
        st.history.by_resource.clear();
        let rv = next_rv(&mut st);
        st.history.floor = rv;
        drop(st);
        self.shared.changed.send_replace(rv);
    }

    /// Changes how long the history keeps events ([`HISTORY_WINDOW`] by default), and drops what is older.
    pub fn set_history_window(&self, window: Duration) {
        let mut st = self.lock();
        st.history.window = window;
        let cap = self.shared.config.history.max(1);
        st.history.trim(Instant::now(), cap);
    }

    /// Drops the events that have aged out of the window (writes do it too, this is for idle periods),
    /// and removes Events past their time to live.
    pub fn expire_history(&self) {
        self.expire_events();
        let cap = self.shared.config.history.max(1);
        self.lock().history.trim(Instant::now(), cap);
    }

    /// Drops aged-out events every few seconds until `shutdown` turns `true`, so an idle store gives
    /// back the memory of its last burst of writes.
    pub async fn expire_history_until(self, mut shutdown: tokio::sync::watch::Receiver<bool>) {
        let mut tick = tokio::time::interval(Duration::from_secs(5));
        loop {
            tokio::select! {
                _ = tick.tick() => self.expire_history(),
                _ = shutdown.wait_for(|s| *s) => return,
            }
        }
    }

    /// How many events the history keeps over all resources.
    pub fn history_len(&self) -> usize {
        self.lock().history.len()
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
    let stored = Version::stored(gr, object.clone());
    st.objects
        .entry(gr.clone())
        .or_default()
        .insert(key.clone(), stored.clone());
    record(st, config, gr, (&key.0, &object), kind, stored, previous);
}

/// Records an event of `gr`: `object` as the event has it, `previous` the stored version it replaces or
/// removes. That version, and a deleted object's last state, are kept as JSON from now on: the history's
/// events that share them are frozen with them.
pub(super) fn push_event(
    st: &mut State,
    config: &StoreConfig,
    gr: &GroupResource,
    namespace: &str,
    kind: EventKind,
    object: Arc<Value>,
    previous: Option<Arc<Value>>,
) {
    let version = match kind {
        EventKind::Deleted => Version::Frozen(Version::freeze(gr, &object)),
        EventKind::Added | EventKind::Modified => Version::Live(object.clone()),
    };
    record(
        st,
        config,
        gr,
        (namespace, &object),
        kind,
        version,
        previous,
    );
}

/// Appends the event of `object` (in `namespace`), kept as `version`, to `gr`'s history.
fn record(
    st: &mut State,
    config: &StoreConfig,
    gr: &GroupResource,
    (namespace, object): (&str, &Value),
    kind: EventKind,
    version: Version,
    previous: Option<Arc<Value>>,
) {
    let rv = meta::resource_version_of(object).unwrap_or(st.rv);
    let name = meta::name_of(object).to_string();
    let now = Instant::now();
    let history = st.history.by_resource.entry(gr.clone()).or_default();
    let previous = previous.map(|p| Version::Frozen(history.freeze(gr, &p)));
    history.events.push_back(LogEntry {
        rv,
        at: now,
        namespace: namespace.to_string(),
        name,
        kind,
        object: version,
        previous,
    });
    st.history.trim(now, config.history.max(1));
}

impl History {
    /// Freezes `replaced`, a stored version that a write replaces or removes, in the newest event that
    /// shares it; returns the frozen version for the write's own event.
    fn freeze(&mut self, gr: &GroupResource, replaced: &Arc<Value>) -> Arc<Frozen> {
        if let Some(kept) = self.kept_as_json(replaced) {
            return kept;
        }
        let frozen = Version::freeze(gr, replaced);
        if let Some(e) = self.sharing(replaced) {
            e.object = Version::Frozen(frozen.clone());
        }
        frozen
    }

    /// The JSON of `replaced` when its own event keeps it so already, as for a resource the store keeps
    /// as JSON: the event at its `resourceVersion` wrote it.
    fn kept_as_json(&self, replaced: &Value) -> Option<Arc<Frozen>> {
        let at = self.written_at(meta::resource_version_of(replaced)?)?;
        match &self.events[at].object {
            Version::Frozen(f) => Some(f.clone()),
            Version::Live(_) => None,
        }
    }

    /// Where the event of the write that made version `rv` is (events are in version order), found by
    /// a binary search; `None` once it has left the history.
    fn written_at(&self, rv: u64) -> Option<usize> {
        let at = self.events.partition_point(|e| e.rv < rv);
        self.events
            .get(at)
            .is_some_and(|e| e.rv == rv)
            .then_some(at)
    }

    /// The newest event whose object is `stored`: the one at its `resourceVersion`; by a scan for an
    /// object without one.
    fn sharing(&mut self, stored: &Arc<Value>) -> Option<&mut LogEntry> {
        match meta::resource_version_of(stored) {
            Some(rv) => {
                let at = self.written_at(rv)?;
                Some(&mut self.events[at]).filter(|e| e.object.is(stored))
            }
            None => self.events.iter_mut().rev().find(|e| e.object.is(stored)),
        }
    }
}
