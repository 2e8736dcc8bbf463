//! Pods of the new ReplicaSet that do not start: unscheduled, or whose
//! containers stay in `ContainerCreating`/`PodInitializing` (a volume whose
//! source is missing, a sandbox image that cannot be pulled, a taint no
//! toleration matches). Past the grace they fail the wait, with the pod's
//! state, its conditions and its recent Events; a pod the scheduler found
//! no node for (`Unschedulable`) has a shorter grace of its own.

use std::{collections::HashMap, time::Duration};

use k8s_openapi::{
    api::core::v1::{Event, Pod},
    jiff::Timestamp,
};
use kube::{Api, Client, ResourceExt, api::ListParams};
use tokio::time::Instant;

/// Waiting reasons of a container that is still being set up.
pub const STARTING_REASONS: &[&str] = &["ContainerCreating", "PodInitializing"];

/// Events shown with a pod that does not start.
const EVENT_LINES: usize = 10;

/// A pod that has not started yet, and what it shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unstarted {
    pub pod: String,
    pub created: Option<Timestamp>,
    /// Its phase and why it is not running, in one line.
    pub state: String,
    /// Its conditions, `Type=Status (Reason: message)`, comma-separated.
    pub conditions: String,
    /// The scheduler's message when it found no node for the pod
    /// (`PodScheduled=False`, reason `Unschedulable`).
    pub unschedulable: Option<String>,
}

/// Whether `pod` has not started: `Pending` with no container running,
/// and either unscheduled or every waiting container in a starting reason.
/// A container waiting on any other reason is judged elsewhere (fatal
/// reasons) or is not a start that hangs. Pure.
pub fn not_started(pod: &Pod) -> Option<Unstarted> {
    let status = pod.status.as_ref();
    if status.and_then(|s| s.phase.as_deref()).unwrap_or("Pending") != "Pending" {
        return None;
    }
    let containers: Vec<_> = status
        .into_iter()
        .flat_map(|s| {
            s.init_container_statuses
                .iter()
                .flatten()
                .chain(s.container_statuses.iter().flatten())
        })
        .collect();
    if containers
        .iter()
        .any(|c| c.state.as_ref().is_some_and(|s| s.running.is_some()))
    {
        return None;
    }
    let conditions = status.and_then(|s| s.conditions.as_ref());
    let scheduled = conditions.and_then(|c| c.iter().find(|c| c.type_ == "PodScheduled"));
    let state = match scheduled {
        Some(c) if c.status != "True" => format!(
            "Pending, not scheduled: {}: {}",
            c.reason.as_deref().unwrap_or("Unschedulable"),
            c.message.as_deref().unwrap_or("")
        ),
        None if pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.as_ref())
            .is_none() =>
        {
            String::from("Pending, not scheduled yet")
        }
        _ => {
            let mut waiting = Vec::new();
            for c in &containers {
                let Some(w) = c.state.as_ref().and_then(|s| s.waiting.as_ref()) else {
                    continue;
                };
                let reason = w.reason.as_deref().unwrap_or("ContainerCreating");
                if !STARTING_REASONS.contains(&reason) {
                    return None;
                }
                waiting.push(format!("container {} waiting in {reason}", c.name));
            }
            if waiting.is_empty() {
                String::from("Pending, no container created yet")
            } else {
                format!("Pending, {}", waiting.join(", "))
            }
        }
    };
    let unschedulable = scheduled
        .filter(|c| c.status == "False" && c.reason.as_deref() == Some("Unschedulable"))
        .map(|c| c.message.clone().unwrap_or_default());
    Some(Unstarted {
        unschedulable,
        pod: pod.name_any(),
        created: pod.metadata.creation_timestamp.as_ref().map(|t| t.0),
        state,
        conditions: conditions
            .into_iter()
            .flatten()
            .map(|c| match (&c.reason, &c.message) {
                (Some(r), Some(m)) => format!("{}={} ({r}: {m})", c.type_, c.status),
                (Some(r), None) => format!("{}={} ({r})", c.type_, c.status),
                _ => format!("{}={}", c.type_, c.status),
            })
            .collect::<Vec<_>>()
            .join(", "),
    })
}

/// How long a pod has been pending: since the later of its
/// `creationTimestamp` and the moment this wait first saw it not started
/// (`seen_for` ago). The later of the two, so that neither a cluster clock
/// behind the host's (which makes a new pod look old) nor a pod left from
/// an earlier rollout fails a wait before the wait itself watched the pod
/// for the whole grace; a cluster clock ahead only delays the verdict.
pub fn pending_for(created: Option<Timestamp>, now: Timestamp, seen_for: Duration) -> Duration {
    let Some(created) = created else {
        return seen_for;
    };
    let age_ms = now
        .as_millisecond()
        .saturating_sub(created.as_millisecond());
    seen_for.min(Duration::from_millis(age_ms.max(0) as u64))
}

/// When the wait first saw each pod not started.
#[derive(Debug, Default)]
pub struct Clock {
    first_seen: HashMap<String, Instant>,
}

impl Clock {
    /// The first of `unstarted` pending longer than its grace at `now`
    /// (`wall` on the cluster's clock), with how long. Pods no longer
    /// listed are forgotten.
    pub fn overdue(
        &mut self,
        unstarted: Vec<Unstarted>,
        grace_of: impl Fn(&Unstarted) -> Duration,
        now: Instant,
        wall: Timestamp,
    ) -> Option<(Unstarted, Duration)> {
        self.first_seen
            .retain(|pod, _| unstarted.iter().any(|u| &u.pod == pod));
        let mut overdue = None;
        for u in unstarted {
            let seen = *self.first_seen.entry(u.pod.clone()).or_insert(now);
            let pending = pending_for(u.created, wall, now.saturating_duration_since(seen));
            if pending > grace_of(&u) && overdue.is_none() {
                overdue = Some((u, pending));
            }
        }
        overdue
    }
}

/// The recent Events about pod `namespace/pod`, one line each; what went
/// wrong reading them, if it did.
pub async fn events_of(client: &Client, namespace: &str, pod: &str) -> String {
    let api: Api<Event> = Api::namespaced(client.clone(), namespace);
    let params = ListParams::default().fields(&format!(
        "involvedObject.name={pod},involvedObject.namespace={namespace}"
    ));
    match api.list(&params).await {
        Ok(list) => format_events(list.items),
        Err(e) => format!(
            "its events could not be read: {}",
            crate::apply::api_error(&e)
        ),
    }
}

/// Events, oldest first, the last [`EVENT_LINES`] of them:
/// `Warning FailedMount (x3): message`. Pure.
pub fn format_events(mut events: Vec<Event>) -> String {
    if events.is_empty() {
        return String::from("no events were recorded about it");
    }
    let when = |e: &Event| {
        e.last_timestamp
            .as_ref()
            .map(|t| t.0)
            .or_else(|| e.event_time.as_ref().map(|t| t.0))
            .or_else(|| e.metadata.creation_timestamp.as_ref().map(|t| t.0))
    };
    events.sort_by_key(when);
    let skip = events.len().saturating_sub(EVENT_LINES);
    let lines: Vec<String> = events[skip..]
        .iter()
        .map(|e| {
            format!(
                "  {} {} (x{}): {}",
                e.type_.as_deref().unwrap_or("Normal"),
                e.reason.as_deref().unwrap_or("-"),
                e.count.unwrap_or(1),
                e.message.as_deref().unwrap_or("").trim()
            )
        })
        .collect();
    format!("events:\n{}", lines.join("\n"))
}
