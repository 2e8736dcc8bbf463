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

use std::collections::HashSet;
use std::time::{Duration, Instant};

use hashlink::LruCache;
use serde_json::{Value, json};

use super::MANAGER;
use crate::meta;
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
    fn spam(&self) -> String {
        [
            self.component,
            self.kind,
            self.namespace,
            self.name,
            self.uid,
            self.api_version,
        ]
        .join("\u{1f}")
    }

    /// The aggregation key: source, object, type and reason.
    fn aggregate(&self) -> String {
        [&self.spam(), self.event_type, self.reason, self.component].join("\u{1f}")
    }

    /// The deduplication key: everything, the message and the part of the object included.
    fn exact(&self, message: &str) -> String {
        [
            &self.spam(),
            self.field_path,
            self.event_type,
            self.reason,
            message,
        ]
        .join("\u{1f}")
    }
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

/// An event as the recorder sees it: what it is about, what it says, and what it is called and when it
/// happened if it is new.
#[derive(Clone, Debug)]
pub(crate) struct Occurrence<'a> {
    pub key: EventKey<'a>,
    pub message: &'a str,
    /// The name a new Event gets (`<object>.<nanoseconds in hex>`).
    pub new_name: String,
    /// Now, RFC 3339.
    pub timestamp: String,
}

struct Similar {
    messages: HashSet<String>,
    last: Instant,
}

#[derive(Clone)]
struct Observed {
    name: String,
    count: u64,
    first_timestamp: String,
}

struct Bucket {
    tokens: f64,
    at: Instant,
}

/// The recorders' shared caches: keys include the source component, so one cache behaves as one per
/// component would.
pub struct Correlator {
    similar: LruCache<String, Similar>,
    observed: LruCache<String, Observed>,
    spam: LruCache<String, Bucket>,
}

impl Default for Correlator {
    fn default() -> Correlator {
        Correlator {
            similar: LruCache::new(CACHE_ENTRIES),
            observed: LruCache::new(CACHE_ENTRIES),
            spam: LruCache::new(CACHE_ENTRIES),
        }
    }
}

impl std::fmt::Debug for Correlator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Correlator")
            .field("observed", &self.observed.len())
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
        let seen = self.observed.get(&cache_key).cloned();
        let recorded = match seen {
            Some(seen) => Recorded {
                name: seen.name,
                message,
                count: seen.count + 1,
                first_timestamp: seen.first_timestamp,
            },
            None => Recorded {
                name: event.new_name,
                message,
                count: 1,
                first_timestamp: event.timestamp,
            },
        };
        self.observed.insert(
            cache_key,
            Observed {
                name: recorded.name.clone(),
                count: recorded.count,
                first_timestamp: recorded.first_timestamp.clone(),
            },
        );
        if !self.allow(&event.key.spam(), now) {
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
        let aggregate = key.aggregate();
        let fresh = || Similar {
            messages: HashSet::new(),
            last: now,
        };
        let mut similar = self.similar.remove(&aggregate).unwrap_or_else(fresh);
        if now.duration_since(similar.last) > AGGREGATE_WINDOW {
            similar = fresh();
        }
        similar.messages.insert(message.to_string());
        similar.last = now;
        let combine = similar.messages.len() >= MAX_SIMILAR;
        if combine {
            // The set stays below the threshold, as client-go's `PopAny` keeps it.
            let any = similar.messages.iter().next().cloned();
            if let Some(any) = any {
                similar.messages.remove(&any);
            }
        }
        self.similar.insert(aggregate, similar);
        combine.then(|| format!("{COMBINED}{message}"))
    }

    /// Whether the spam filter lets one more event about `key` through (a passive token bucket).
    fn allow(&mut self, key: &str, now: Instant) -> bool {
        if !self.spam.contains_key(key) {
            let full = Bucket {
                tokens: SPAM_BURST,
                at: now,
            };
            self.spam.insert(key.to_string(), full);
        }
        let Some(bucket) = self.spam.get_mut(key) else {
            return true;
        };
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
    let now = meta::now_rfc3339();
    let occurrence = Occurrence {
        key: key.clone(),
        message,
        new_name: format!("{name}.{:x}", jiff::Timestamp::now().as_nanosecond()),
        timestamp: now.clone(),
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

    fn occurrence<'a>(name: &'a str, message: &'a str, i: u64) -> Occurrence<'a> {
        Occurrence {
            key: key(name),
            message,
            new_name: format!("{name}.{i:x}"),
            timestamp: format!("t{i}"),
        }
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
                    name: format!("rs.{i:x}"),
                    message: messages[i].clone(),
                    count: 1,
                    first_timestamp: format!("t{i}"),
                })
            );
        }
        let combined = Recorded {
            name: "rs.9".to_string(),
            message: "(combined from similar events): Created pod: p-9".to_string(),
            count: 1,
            first_timestamp: "t9".to_string(),
        };
        assert_eq!(writes[9], Write::Create(combined));
        let eleventh = recorded(&writes[10]);
        assert!(matches!(writes[10], Write::Update(_)));
        assert_eq!((eleventh.name.as_str(), eleventh.count), ("rs.9", 2));
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
                name: "a.1".to_string(),
                message: "Back-off".to_string(),
                count: 2,
                first_timestamp: "t1".to_string(),
            })
        );
        assert_eq!(recorded(&other).name, "b.3");
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
}
