//! What the store forgets by itself, as kube-apiserver's storage does: Events after their time to live
//! (`--event-ttl`, one hour by default; etcd drops the key when its lease ends), each with a `DELETED`
//! watch event.

use std::sync::Arc;
use std::time::Duration;

use super::history::{EventKind, push_event};
use super::{Key, Store, next_rv, set_rv};
use crate::resource::GroupResource;
use crate::selector::Selectable;

/// How long an Event lives after its last write: kube-apiserver's `--event-ttl` default.
pub const EVENT_TTL: Duration = Duration::from_secs(60 * 60);

impl Store {
    /// Changes how long Events live ([`EVENT_TTL`] by default); expired ones go at the next
    /// [`Store::expire_history`].
    pub fn set_event_ttl(&self, ttl: Duration) {
        self.lock().history.event_ttl = ttl;
    }

    /// Removes the Events whose last write is older than their time to live.
    pub(super) fn expire_events(&self) {
        let gr = GroupResource::events();
        let mut st = self.lock();
        let ttl = jiff::SignedDuration::try_from(st.history.event_ttl).unwrap_or_default();
        let cutoff = jiff::Timestamp::now() - ttl;
        let expired: Vec<Key> = st
            .objects
            .get(&gr)
            .into_iter()
            .flatten()
            .filter(|(_, event)| last_write(event.selectable()).is_some_and(|t| t < cutoff))
            .map(|(key, _)| key.clone())
            .collect();
        if expired.is_empty() {
            return;
        }
        for key in expired {
            let Some(old) = st.objects.get_mut(&gr).and_then(|m| m.remove(&key)) else {
                continue;
            };
            let old = old.value();
            let rv = next_rv(&mut st);
            let mut last = (*old).clone();
            set_rv(&mut last, rv);
            let config = &self.shared.config;
            push_event(
                &mut st,
                config,
                &gr,
                &key.0,
                EventKind::Deleted,
                Arc::new(last),
                Some(old),
            );
        }
        let rv = st.rv;
        drop(st);
        self.shared.changed.send_replace(rv);
    }
}

/// When an Event was last written: its `lastTimestamp` or `eventTime`, else its creation.
fn last_write(event: &dyn Selectable) -> Option<jiff::Timestamp> {
    ["lastTimestamp", "eventTime", "metadata.creationTimestamp"]
        .iter()
        .filter_map(|p| event.field(p)?.as_str()?.parse::<jiff::Timestamp>().ok())
        .max()
}
