//! The event recorder's correlation, as client-go's `EventCorrelator` (`tools/record/events_cache.go`)
//! does it for every component that records core/v1 Events:
//!
//! - **Aggregation**: from the tenth distinct message about the same object, source, type and reason
//!   within ten minutes, one event `(combined from similar events): <message>` stands for them all.
//! - **Deduplication**: an event seen before (the same key, message included, or the combined event) is
//!   not created again: the existing Event's `count`, `lastTimestamp` and `message` are patched.
//! - **Spam filter**: each source and object has a token bucket of 25 events, refilled one every five
//!   minutes; past it, events are dropped.
//!
//! A rollout of a thousand pods so writes ten Events and one combined one per ReplicaSet instead of one
//! per pod, as on a real cluster. The caches hold 4096 keys each, least recently used dropped first.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hasher as _};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::MANAGER;
use crate::meta::{self, rfc3339};
use crate::resource::GroupResource;
use crate::store::{self, Patch, PatchOptions, Store, WriteOptions};

/// How many distinct messages about one object and reason are recorded before they are combined.
const MAX_SIMILAR: usize = 10;
/// How long similar messages count toward [`MAX_SIMILAR`].
const AGGREGATE_WINDOW: Duration = Duration::from_secs(600);
/// The prefix of a combined event's message.
const COMBINED: &str = "(combined from similar events): ";
/// Events one source may record about one object at once.
const SPAM_BURST: f64 = 25.0;
/// The rate the spam filter's bucket refills, per second (one event every five minutes).
const SPAM_REFILL_PER_SECOND: f64 = 1.0 / 300.0;
/// How many keys each cache holds (client-go's `maxLruCacheEntries`).
const CACHE_ENTRIES: usize = 4096;

/// What an event is about and who says it: the fields client-go's keys are made of.
#[derive(Clone, Debug)]
pub(crate) struct EventKey<'a> {
    /// `source.component`.
    pub component: &'a str,
    /// `involvedObject.kind`, `namespace`, `name`, `uid`, `apiVersion` and `fieldPath`.
    pub kind: &'a str,
    pub namespace: &'a str,
    pub name: &'a str,
    pub uid: &'a str,
    pub api_version: &'a str,
    pub field_path: &'a str,
    /// `type` and `reason`.
    pub event_type: &'a str,
    pub reason: &'a str,
}

impl EventKey<'_> {
    /// The spam filter's key: source and object.
    fn spam(&self) -> u64 {
        let object = [self.kind, self.namespace, self.name, self.uid];
        hash(&[&[self.component], &object[..], &[self.api_version]])
    }

    /// The aggregation key: source, object, type and reason.
    fn aggregate(&self) -> u64 {
        let object = [self.kind, self.namespace, self.name, self.uid];
        let what = [
            self.api_version,
            self.event_type,
            self.reason,
            self.component,
        ];
        hash(&[&[self.component], &object[..], &what[..]])
    }

    /// The deduplication key: everything, the message and the part of the object included.
    fn exact(&self, message: &str) -> u64 {
        let object = [
            self.kind,
            self.namespace,
            self.name,
            self.field_path,
            self.uid,
        ];
        let what = [self.api_version, self.event_type, self.reason, message];
        hash(&[&[self.component], &object[..], &what[..]])
    }
}

/// A 64-bit hash of `parts`, each delimited: the caches keep hashes, not the keys, so what they hold is
/// a few fixed-size tables however long the names and messages are.
fn hash(parts: &[&[&str]]) -> u64 {
    let mut h = DefaultHasher::new();
    for part in parts.iter().flat_map(|p| p.iter()) {
        h.write(part.as_bytes());
        h.write_u8(0xff);
    }
    h.finish()
}

/// What to write for an event.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Write {
    /// Create this Event.
    Create(Recorded),
    /// Patch the existing Event of this name to this `count`, `message` and a new `lastTimestamp`, or
    /// create it if it is gone.
    Update(Recorded),
    /// The spam filter dropped it.
    Drop,
}

/// The Event to write.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Recorded {
    /// The Event's name: the new one, or the one recorded before for a repeat.
    pub name: String,
    /// The message, `(combined from similar events): …` for a combined event.
    pub message: String,
    /// How many times it happened.
    pub count: u64,
    /// When it first happened (RFC 3339).
    pub first_timestamp: String,
}

/// An event as the recorder sees it: what it is about, what it says, and when it happened.
#[derive(Clone, Debug)]
pub(crate) struct Occurrence<'a> {
    pub key: EventKey<'a>,
    pub message: &'a str,
    /// Now, which names a new Event (`<object>.<nanoseconds in hex>`) and dates it.
    pub at: jiff::Timestamp,
}

/// Messages seen about one object and reason: hashes, fewer than [`MAX_SIMILAR`].
#[derive(Clone, Copy)]
struct Similar {
    messages: [u64; MAX_SIMILAR],
    len: usize,
    last: Instant,
}

/// The Event a key was last written as.
#[derive(Clone, Copy)]
struct Observed {
    /// The time in its name.
    named_at: jiff::Timestamp,
    count: u64,
    first: jiff::Timestamp,
}

#[derive(Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

/// The recorders' shared caches: keys include the source component, so one cache behaves as one per
/// component would.
#[derive(Default)]
pub struct Correlator {
    similar: Bounded<Similar>,
    observed: Bounded<Observed>,
    spam: Bounded<Bucket>,
}

impl std::fmt::Debug for Correlator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Correlator")
            .field("observed", &self.observed.entries.len())
            .finish_non_exhaustive()
    }
}

impl Correlator {
    /// What to write for `event` at `now`: aggregated, then observed (so a dropped event still counts),
    /// then filtered.
    pub(crate) fn correlate(&mut self, event: Occurrence<'_>, now: Instant) -> Write {
        // A combined event is new under the aggregation key, named like any new event.
        let (message, cache_key) = match self.aggregate(&event.key, event.message, now) {
            Some(combined) => (combined, event.key.aggregate()),
            None => (event.message.to_string(), event.key.exact(event.message)),
        };
        let unseen = Observed {
            named_at: event.at,
            count: 0,
            first: event.at,
        };
        let observed = self.observed.entry(cache_key, unseen);
        observed.count += 1;
        let observed = *observed;
        let recorded = Recorded {
            name: format!("{}.{:x}", event.key.name, observed.named_at.as_nanosecond()),
            message,
            count: observed.count,
            first_timestamp: rfc3339(observed.first),
        };
        if !self.allow(event.key.spam(), now) {
            Write::Drop
        } else if recorded.count > 1 {
            Write::Update(recorded)
        } else {
            Write::Create(recorded)
        }
    }

    /// The combined message, once `message` is one of [`MAX_SIMILAR`] distinct ones within
    /// [`AGGREGATE_WINDOW`] (`EventAggregator.EventAggregate`).
    fn aggregate(&mut self, key: &EventKey<'_>, message: &str, now: Instant) -> Option<String> {
        let fresh = Similar {
            messages: [0; MAX_SIMILAR],
            len: 0,
            last: now,
        };
        let similar = self.similar.entry(key.aggregate(), fresh);
        if now.duration_since(similar.last) > AGGREGATE_WINDOW {
            *similar = fresh;
        }
        let text = hash(&[&[message]]);
        if !similar.messages[..similar.len].contains(&text) {
            similar.messages[similar.len] = text;
            similar.len += 1;
        }
        similar.last = now;
        let combine = similar.len >= MAX_SIMILAR;
        if combine {
            // The set stays below the threshold, as client-go's `PopAny` keeps it.
            similar.len -= 1;
        }
        combine.then(|| format!("{COMBINED}{message}"))
    }

    /// Whether the spam filter lets one more event about `key` through (a passive token bucket).
    fn allow(&mut self, key: u64, now: Instant) -> bool {
        let full = Bucket {
            tokens: SPAM_BURST,
            at: now,
        };
        let bucket = self.spam.entry(key, full);
        let refill = now.duration_since(bucket.at).as_secs_f64() * SPAM_REFILL_PER_SECOND;
        bucket.tokens = (bucket.tokens + refill).min(SPAM_BURST);
        bucket.at = now;
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// A map of at most [`CACHE_ENTRIES`] values by key hash, kept in one table. Full, it forgets the
/// quarter of its entries used longest ago (client-go's caches are LRUs of the same size).
struct Bounded<T> {
    entries: HashMap<u64, (u64, T)>,
    /// A counter that orders uses.
    clock: u64,
}

impl<T> Default for Bounded<T> {
    fn default() -> Bounded<T> {
        Bounded {
            entries: HashMap::new(),
            clock: 0,
        }
    }
}

impl<T> Bounded<T> {
    /// The value of `key`, `value` inserted first when there is none; either way, used now.
    fn entry(&mut self, key: u64, value: T) -> &mut T {
        self.make_room(key);
        self.clock += 1;
        let (used, value) = self.entries.entry(key).or_insert((self.clock, value));
        *used = self.clock;
        value
    }

    fn make_room(&mut self, key: u64) {
        if self.entries.len() < CACHE_ENTRIES || self.entries.contains_key(&key) {
            return;
        }
        let mut uses: Vec<u64> = self.entries.values().map(|(used, _)| *used).collect();
        let quarter = CACHE_ENTRIES / 4;
        let (_, cutoff, _) = uses.select_nth_unstable(quarter);
        let cutoff = *cutoff;
        self.entries.retain(|_, (used, _)| *used > cutoff);
    }
}

/// Records a core/v1 Event about an object, as client-go's event recorder writes it after
/// correlating it ([`Correlator`]); a `fieldPath` next to the object's `metadata`
/// (`spec.containers{app}`) names the part of it the event is about. Failures are only logged: events
/// are best effort in Kubernetes too.
pub(crate) fn record_event(
    store: &Store,
    involved: &Value,
    component: &str,
    event_type: &str,
    reason: &str,
    message: &str,
) {
    let name = meta::name_of(involved);
    let key = EventKey {
        component,
        kind: text(involved.get("kind")),
        namespace: meta::namespace_of(involved),
        name,
        uid: text(involved.pointer("/metadata/uid")),
        api_version: text(involved.get("apiVersion")),
        field_path: text(involved.get("fieldPath")),
        event_type,
        reason,
    };
    let at = jiff::Timestamp::now();
    let now = rfc3339(at);
    let occurrence = Occurrence {
        key: key.clone(),
        message,
        at,
    };
    let write = store
        .event_correlator()
        .correlate(occurrence, Instant::now());
    let written = match write {
        Write::Drop => {
            tracing::trace!(%reason, object = %name, "an event dropped by the spam filter");
            return;
        }
        Write::Create(recorded) => create(store, &key, involved, &recorded, &now),
        Write::Update(recorded) => match update(store, involved, &recorded, &now) {
            Err(store::Error::NotFound { .. }) => create(store, &key, involved, &recorded, &now),
            other => other,
        },
    };
    if let Err(e) = written {
        tracing::debug!(%reason, error = %e, "recording an event failed");
    }
}

fn text(v: Option<&Value>) -> &str {
    v.and_then(Value::as_str).unwrap_or("")
}

/// The repeat of an Event: its count, message and last time, as a strategic merge patch.
fn update(store: &Store, involved: &Value, recorded: &Recorded, now: &str) -> store::Result<()> {
    let patch = json!({"count": recorded.count, "lastTimestamp": now, "message": recorded.message});
    let opts = PatchOptions {
        field_manager: Some(MANAGER.to_string()),
        ..PatchOptions::default()
    };
    let ns = Some(meta::namespace_of(involved));
    store
        .patch(
            &GroupResource::events(),
            ns,
            &recorded.name,
            None,
            &Patch::Strategic(patch),
            &opts,
        )
        .map(drop)
}

/// Creates the Event `recorded` about `involved`, as it reads at `now`.
fn create(
    store: &Store,
    key: &EventKey<'_>,
    involved: &Value,
    recorded: &Recorded,
    now: &str,
) -> store::Result<()> {
    let ns = meta::namespace_of(involved);
    let event = json!({
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": recorded.name, "namespace": ns},
        "involvedObject": {
            "apiVersion": involved["apiVersion"], "kind": involved["kind"],
            "namespace": ns, "name": meta::name_of(involved),
            "uid": involved.pointer("/metadata/uid"),
            "resourceVersion": involved.pointer("/metadata/resourceVersion"),
            "fieldPath": involved.get("fieldPath"),
        },
        "reason": key.reason,
        "message": recorded.message,
        "type": key.event_type,
        "source": {"component": key.component},
        "firstTimestamp": recorded.first_timestamp,
        "lastTimestamp": now,
        "count": recorded.count,
        "reportingComponent": key.component,
        "reportingInstance": "",
    });
    store
        .create(
            &GroupResource::events(),
            Some(ns),
            event,
            &WriteOptions::manager(MANAGER),
        )
        .map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> EventKey<'_> {
        EventKey {
            component: "replicaset-controller",
            kind: "ReplicaSet",
            namespace: "default",
            name,
            uid: "u",
            api_version: "apps/v1",
            field_path: "",
            event_type: "Normal",
            reason: "SuccessfulCreate",
        }
    }

    fn stamp(i: u64) -> jiff::Timestamp {
        jiff::Timestamp::from_second(1_800_000_000 + i as i64).unwrap()
    }

    fn occurrence<'a>(name: &'a str, message: &'a str, i: u64) -> Occurrence<'a> {
        Occurrence {
            key: key(name),
            message,
            at: stamp(i),
        }
    }

    fn name(object: &str, i: u64) -> String {
        format!("{object}.{:x}", stamp(i).as_nanosecond())
    }

    fn recorded(write: &Write) -> &Recorded {
        match write {
            Write::Create(r) | Write::Update(r) => r,
            Write::Drop => panic!("dropped"),
        }
    }

    #[test]
    fn the_tenth_distinct_message_starts_one_combined_event_that_later_ones_count_on() {
        let mut c = Correlator::default();
        let now = Instant::now();
        let messages: Vec<String> = (0..12).map(|i| format!("Created pod: p-{i}")).collect();
        let writes: Vec<Write> = (0..12)
            .map(|i| c.correlate(occurrence("rs", &messages[i], i as u64), now))
            .collect();
        for (i, w) in writes[..9].iter().enumerate() {
            assert_eq!(
                w,
                &Write::Create(Recorded {
                    name: name("rs", i as u64),
                    message: messages[i].clone(),
                    count: 1,
                    first_timestamp: rfc3339(stamp(i as u64)),
                })
            );
        }
        let combined = Recorded {
            name: name("rs", 9),
            message: "(combined from similar events): Created pod: p-9".to_string(),
            count: 1,
            first_timestamp: rfc3339(stamp(9)),
        };
        assert_eq!(writes[9], Write::Create(combined));
        let eleventh = recorded(&writes[10]);
        assert!(matches!(writes[10], Write::Update(_)));
        assert_eq!((eleventh.name.clone(), eleventh.count), (name("rs", 9), 2));
        assert_eq!(
            eleventh.message,
            "(combined from similar events): Created pod: p-10"
        );
        assert_eq!(recorded(&writes[11]).count, 3);
    }

    #[test]
    fn a_repeated_event_counts_on_the_first_and_others_are_apart() {
        let mut c = Correlator::default();
        let now = Instant::now();
        let first = c.correlate(occurrence("a", "Back-off", 1), now);
        let again = c.correlate(occurrence("a", "Back-off", 2), now);
        let other = c.correlate(occurrence("b", "Back-off", 3), now);
        assert!(matches!(first, Write::Create(_)));
        assert_eq!(
            again,
            Write::Update(Recorded {
                name: name("a", 1),
                message: "Back-off".to_string(),
                count: 2,
                first_timestamp: rfc3339(stamp(1)),
            })
        );
        assert_eq!(recorded(&other).name, name("b", 3));
        assert!(matches!(other, Write::Create(_)));
    }

    #[test]
    fn past_twenty_five_events_about_an_object_one_gets_through_every_five_minutes() {
        let mut c = Correlator::default();
        let start = Instant::now();
        let dropped = |w: &Write| matches!(w, Write::Drop);
        for i in 0..25 {
            assert!(
                !dropped(&c.correlate(occurrence("x", "same", i), start)),
                "{i}"
            );
        }
        assert!(dropped(&c.correlate(occurrence("x", "same", 25), start)));
        assert!(!dropped(&c.correlate(occurrence("y", "same", 26), start)));
        let later = start + Duration::from_secs(301);
        let through = c.correlate(occurrence("x", "same", 27), later);
        // Dropped events were still counted.
        assert_eq!(recorded(&through).count, 27);
        assert!(dropped(&c.correlate(occurrence("x", "same", 28), later)));
    }

    #[test]
    fn similar_messages_older_than_ten_minutes_start_over() {
        let mut c = Correlator::default();
        let start = Instant::now();
        let messages: Vec<String> = (0..10).map(|i| format!("m{i}")).collect();
        for (i, m) in messages[..9].iter().enumerate() {
            c.correlate(occurrence("o", m, i as u64), start);
        }
        let later = start + AGGREGATE_WINDOW + Duration::from_secs(1);
        let tenth = c.correlate(occurrence("o", &messages[9], 9), later);
        assert_eq!(recorded(&tenth).message, "m9");
    }

    #[test]
    fn a_full_cache_forgets_the_quarter_used_longest_ago() {
        let mut cache = Bounded::default();
        for key in 0..CACHE_ENTRIES as u64 {
            cache.entry(key, key);
        }
        // Key 0 is used again, so it is among the most recent.
        assert_eq!(*cache.entry(0, u64::MAX), 0);
        cache.entry(u64::MAX, 1);
        assert!(cache.entries.len() <= CACHE_ENTRIES * 3 / 4 + 1);
        assert!(cache.entries.contains_key(&0));
        assert!(!cache.entries.contains_key(&1));
        assert!(cache.entries.contains_key(&u64::MAX));
        assert!(cache.entries.contains_key(&(CACHE_ENTRIES as u64 - 1)));
    }
}
