//! The ReplicaSet controller (`pkg/controller/replicaset/replica_set.go`): keeps the number of active pods
//! at `spec.replicas` and reports counts in `status`.
//!
//! - It owns the pods its controller `ownerReference` names: orphans its selector matches are adopted, owned
//!   pods whose labels stop matching are released (and replaced), see [`super::ownership`].
//! - Only active pods count: no `deletionTimestamp`, not `Succeeded` or `Failed`. Terminating pods leave
//!   the counts at once and are replaced at once.
//! - New pods are named `<rs>-<5 random characters>`, carry the template's labels and annotations and a
//!   controller `ownerReference`; the scheduler binds them.
//! - Surplus pods are deleted in the order Kubernetes ranks them: unbound, then pending, then not ready,
//!   then the most recently ready, the most restarted, the newest.
//! - The status written is the one computed before this sync's creates and deletes, as in Kubernetes;
//!   the resulting pod events bring the next sync.

use std::cmp::Ordering;
use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Map, Value, json};
use tokio::sync::watch;

use super::ownership::Owner;
use super::{Config, Error, Feed, Key, MANAGER, Queue};
use crate::lock::MutexExt as _;
use crate::meta;
use crate::resource::GroupResource;
use crate::store::{self, DeleteOptions, Endpoint, ListOptions, Store, WriteOptions};

/// The event source of this controller.
const COMPONENT: &str = "replicaset-controller";

/// The most pods one sync creates (`BurstReplicas`).
const BURST_REPLICAS: i64 = 500;

/// The pods whose changes a ReplicaSet has not synced yet, by ReplicaSet: those of them its selector no
/// longer matches are the ones to release.
#[derive(Clone, Default)]
pub struct Touched(Arc<Mutex<HashMap<Key, BTreeSet<String>>>>);

impl Touched {
    fn add(&self, key: Key, pod: &str) {
        self.0
            .lock_unpoisoned()
            .entry(key)
            .or_default()
            .insert(pod.to_string());
    }

    fn take(&self, key: &Key) -> BTreeSet<String> {
        self.0.lock_unpoisoned().remove(key).unwrap_or_default()
    }
}

/// Runs the controller until `shutdown` flips.
pub async fn run(store: Store, config: Config, shutdown: watch::Receiver<bool>) {
    let feed = Feed {
        store: store.clone(),
        queue: Queue::new(),
        delay: config.replicaset_delay,
        shutdown: shutdown.clone(),
    };
    let touched = Touched::default();
    let rs_events = feed.clone().follow(GroupResource::replicasets(), |e| {
        super::event_object(e).map(Key::of)
    });
    let pods_gr = GroupResource::pods();
    let watch_store = store.clone();
    let pod_events = {
        let (queue, delay, touched) = (feed.queue.clone(), feed.delay, touched.clone());
        super::follow(&watch_store, &pods_gr, shutdown, move |e| {
            let Some(pod) = super::event_object(&e) else {
                return;
            };
            let deleted = matches!(e, store::SharedEvent::Deleted(_));
            if let Some(owner) = super::controller_of(pod, "ReplicaSet") {
                let key = Key::owner(pod, owner);
                if !deleted {
                    touched.add(key.clone(), meta::name_of(pod));
                }
                queue.add_after(key, delay);
            } else if !deleted {
                for key in super::selecting_owners(&store, &GroupResource::replicasets(), pod) {
                    queue.add_after(key, delay);
                }
            }
        })
    };
    let worker = feed.work(
        |store, key| sync(store, &touched, key),
        |key, e| {
            tracing::warn!(namespace = %key.namespace, replicaset = %key.name, error = %e, "sync failed; retrying");
        },
    );
    tokio::join!(rs_events, pod_events, worker);
}

/// Syncs one ReplicaSet; returns when to sync it again, if a time-based change (`minReadySeconds`) is due.
pub fn sync(store: &Store, touched: &Touched, key: &Key) -> Result<Option<Duration>, Error> {
    let rs_gr = GroupResource::replicasets();
    let rs = match store.get(&rs_gr, Some(&key.namespace), &key.name) {
        Ok(rs) => rs,
        Err(store::Error::NotFound { .. }) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let pods = claimed_pods(store, &rs, touched.take(key))?;
    let active: Vec<&Value> = pods.iter().filter(|p| super::is_pod_active(p)).collect();
    let desired = super::int_at(&rs, "/spec/replicas", 1);
    let min_ready = super::int_at(&rs, "/spec/minReadySeconds", 0);
    let now = jiff::Timestamp::now();

    let status = calculate_status(&rs, &active, min_ready, now);
    if rs.pointer("/metadata/deletionTimestamp").is_none() {
        manage_replicas(store, &rs, &active, desired)?;
    }
    write_status(store, &rs, status)?;

    // Pods that are Ready but not yet available become available by the clock alone.
    let next = active
        .iter()
        .filter(|p| !super::is_pod_available(p, min_ready, now))
        .filter_map(|p| super::available_at(p, min_ready))
        .min();
    Ok(next.map(super::until))
}

/// The pods this ReplicaSet controls, after adopting the orphans its selector matches and releasing the
/// pods among `touched` it no longer matches. Only those can have stopped matching since the last sync.
fn claimed_pods(store: &Store, rs: &Value, touched: BTreeSet<String>) -> Result<Vec<Value>, Error> {
    let ns = meta::namespace_of(rs);
    let opts = ListOptions {
        label_selector: Some(selector_string(rs.pointer("/spec/selector"))),
        ..ListOptions::default()
    };
    let mut candidates = store.list(&GroupResource::pods(), Some(ns), &opts)?.items;
    for name in touched {
        if candidates.iter().any(|p| meta::name_of(p) == name) {
            continue;
        }
        match store.get(&GroupResource::pods(), Some(ns), &name) {
            Ok(pod) => candidates.push(pod),
            Err(store::Error::NotFound { .. }) => {}
            Err(e) => return Err(e.into()),
        }
    }
    let owner = Owner {
        obj: rs,
        api_version: "apps/v1",
        kind: "ReplicaSet",
        dependents: GroupResource::pods(),
    };
    owner.claim(store, candidates)
}

/// A `LabelSelector` object in query-string form.
pub fn selector_string(selector: Option<&Value>) -> String {
    let mut terms = Vec::new();
    let Some(sel) = selector else {
        return String::new();
    };
    if let Some(Value::Object(m)) = sel.get("matchLabels") {
        for (k, v) in m {
            terms.push(format!("{k}={}", v.as_str().unwrap_or("")));
        }
    }
    if let Some(Value::Array(exprs)) = sel.get("matchExpressions") {
        for e in exprs {
            let key = e["key"].as_str().unwrap_or("");
            let values: Vec<&str> = e["values"]
                .as_array()
                .map(|a| a.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            match e["operator"].as_str().unwrap_or("") {
                "In" => terms.push(format!("{key} in ({})", values.join(","))),
                "NotIn" => terms.push(format!("{key} notin ({})", values.join(","))),
                "Exists" => terms.push(key.to_string()),
                "DoesNotExist" => terms.push(format!("!{key}")),
                _ => {}
            }
        }
    }
    terms.join(",")
}

fn calculate_status(rs: &Value, active: &[&Value], min_ready: i64, now: jiff::Timestamp) -> Value {
    let template_labels = rs
        .pointer("/spec/template/metadata/labels")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let fully_labeled = active
        .iter()
        .filter(|p| {
            let labels = p.pointer("/metadata/labels").and_then(Value::as_object);
            template_labels
                .iter()
                .all(|(k, v)| labels.and_then(|l| l.get(k)) == Some(v))
        })
        .count();
    let ready = active.iter().filter(|p| super::is_pod_ready(p)).count();
    let available = active
        .iter()
        .filter(|p| super::is_pod_available(p, min_ready, now))
        .count();
    let mut status = Map::new();
    status.insert("replicas".into(), json!(active.len()));
    for (k, n) in [
        ("fullyLabeledReplicas", fully_labeled),
        ("readyReplicas", ready),
        ("availableReplicas", available),
    ] {
        if n > 0 {
            status.insert(k.into(), json!(n));
        }
    }
    if let Some(g) = rs.pointer("/metadata/generation") {
        status.insert("observedGeneration".into(), g.clone());
    }
    // Conditions (ReplicaFailure) are kept as they are.
    if let Some(c) = rs.pointer("/status/conditions") {
        status.insert("conditions".into(), c.clone());
    }
    Value::Object(status)
}

fn write_status(store: &Store, rs: &Value, status: Value) -> Result<(), Error> {
    if rs.get("status") == Some(&status) {
        return Ok(());
    }
    let mut new = rs.clone();
    new["status"] = status;
    store.update(
        Endpoint::Status,
        &GroupResource::replicasets(),
        Some(meta::namespace_of(rs)),
        new,
        &WriteOptions::manager(MANAGER),
    )?;
    Ok(())
}

fn manage_replicas(
    store: &Store,
    rs: &Value,
    active: &[&Value],
    desired: i64,
) -> Result<(), Error> {
    let diff = active.len() as i64 - desired;
    match diff.cmp(&0) {
        Ordering::Less => {
            let n = (-diff).min(BURST_REPLICAS);
            for _ in 0..n {
                create_pod(store, rs)?;
            }
        }
        Ordering::Greater => {
            let mut ranked: Vec<&Value> = active.to_vec();
            ranked.sort_by(|a, b| deletion_order(a, b));
            for pod in ranked.into_iter().take(diff as usize) {
                let opts = DeleteOptions {
                    uid: meta::str_at(pod, "/metadata/uid").map(str::to_string),
                    ..DeleteOptions::default()
                };
                match store.delete(
                    &GroupResource::pods(),
                    Some(meta::namespace_of(pod)),
                    meta::name_of(pod),
                    &opts,
                ) {
                    Ok(_) => super::record_event(
                        store,
                        rs,
                        COMPONENT,
                        "Normal",
                        "SuccessfulDelete",
                        &format!("Deleted pod: {}", meta::name_of(pod)),
                    ),
                    Err(store::Error::NotFound { .. }) => {}
                    Err(e) => return Err(e.into()),
                }
            }
        }
        Ordering::Equal => {}
    }
    Ok(())
}

/// The pod a ReplicaSet creates from its template (`GetPodFromTemplate`).
pub fn pod_from_template(rs: &Value) -> Value {
    let template = rs.pointer("/spec/template").cloned().unwrap_or(json!({}));
    let mut metadata = Map::new();
    metadata.insert(
        "generateName".into(),
        json!(format!("{}-", meta::name_of(rs))),
    );
    metadata.insert("namespace".into(), json!(meta::namespace_of(rs)));
    for k in ["labels", "annotations", "finalizers"] {
        if let Some(v) = template.pointer(&format!("/metadata/{k}")) {
            metadata.insert(k.into(), v.clone());
        }
    }
    metadata.insert(
        "ownerReferences".into(),
        json!([super::controller_ref(rs, "apps/v1", "ReplicaSet")]),
    );
    let spec = template.get("spec").cloned().unwrap_or(json!({}));
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec})
}

fn create_pod(store: &Store, rs: &Value) -> Result<(), Error> {
    let pod = pod_from_template(rs);
    // A generated name can collide with an existing pod; Kubernetes retries, so does this.
    let mut last = None;
    for _ in 0..3 {
        match store.create(
            &GroupResource::pods(),
            Some(meta::namespace_of(rs)),
            pod.clone(),
            &WriteOptions::manager(MANAGER),
        ) {
            Ok(created) => {
                super::record_event(
                    store,
                    rs,
                    COMPONENT,
                    "Normal",
                    "SuccessfulCreate",
                    &format!("Created pod: {}", meta::name_of(&created.object)),
                );
                return Ok(());
            }
            Err(e @ store::Error::AlreadyExists { .. }) => last = Some(e),
            Err(e) => return Err(e.into()),
        }
    }
    Err(last
        .map(Error::from)
        .unwrap_or_else(|| Error::Store(store::Error::BadRequest("pod creation failed".into()))))
}

/// The order in which surplus pods are deleted (`ActivePodsWithRanks.Less`): the first sorts first.
pub fn deletion_order(a: &Value, b: &Value) -> Ordering {
    let bound = |p: &Value| meta::str_at(p, "/spec/nodeName").is_some_and(|n| !n.is_empty());
    let phase_rank = |p: &Value| match meta::str_at(p, "/status/phase").unwrap_or("") {
        "Pending" => 0,
        "Unknown" => 1,
        "Running" => 2,
        _ => 0,
    };
    let ready_since = |p: &Value| {
        super::ready_condition(p)
            .filter(|c| c["status"] == "True")
            .and_then(|c| c["lastTransitionTime"].as_str())
            .and_then(super::parse_time)
    };
    let restarts = |p: &Value| {
        p.pointer("/status/containerStatuses")
            .and_then(Value::as_array)
            .map(|cs| {
                cs.iter()
                    .map(|c| c["restartCount"].as_i64().unwrap_or(0))
                    .max()
                    .unwrap_or(0)
            })
            .unwrap_or(0)
    };
    let created = |p: &Value| {
        meta::str_at(p, "/metadata/creationTimestamp")
            .and_then(super::parse_time)
            .map(|t| t.as_second())
    };
    bound(a)
        .cmp(&bound(b))
        .then(phase_rank(a).cmp(&phase_rank(b)))
        .then(super::is_pod_ready(a).cmp(&super::is_pod_ready(b)))
        // Both ready: the more recently ready goes first.
        .then_with(|| match (ready_since(a), ready_since(b)) {
            (Some(x), Some(y)) => y.cmp(&x),
            _ => Ordering::Equal,
        })
        .then(restarts(b).cmp(&restarts(a)))
        // Newer pods go first; a missing timestamp counts as newest.
        .then_with(|| match (created(a), created(b)) {
            (Some(x), Some(y)) => y.cmp(&x),
            (None, Some(_)) => Ordering::Less,
            (Some(_), None) => Ordering::Greater,
            (None, None) => Ordering::Equal,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, phase: &str, ready: Option<&str>, created: &str) -> Value {
        let mut p = json!({"metadata": {"name": name, "creationTimestamp": created},
            "spec": {"nodeName": "n"}, "status": {"phase": phase}});
        if let Some(t) = ready {
            p["status"]["conditions"] =
                json!([{"type": "Ready", "status": "True", "lastTransitionTime": t}]);
        }
        p
    }

    #[test]
    fn surplus_pods_are_chosen_not_ready_and_newest_first() {
        let old_ready = pod(
            "old-ready",
            "Running",
            Some("2026-01-01T00:00:10Z"),
            "2026-01-01T00:00:00Z",
        );
        let new_ready = pod(
            "new-ready",
            "Running",
            Some("2026-01-01T00:01:10Z"),
            "2026-01-01T00:01:00Z",
        );
        let pending = pod("pending", "Pending", None, "2026-01-01T00:00:00Z");
        let running_not_ready = pod("starting", "Running", None, "2026-01-01T00:00:00Z");
        let mut pods = [&old_ready, &new_ready, &running_not_ready, &pending];
        pods.sort_by(|a, b| deletion_order(a, b));
        let names: Vec<&str> = pods.iter().map(|p| meta::name_of(p)).collect();
        assert_eq!(names, ["pending", "starting", "new-ready", "old-ready"]);
    }

    #[test]
    fn selectors_render_like_kubectl() {
        let sel = json!({"matchLabels": {"app": "web"}, "matchExpressions": [
            {"key": "tier", "operator": "In", "values": ["a", "b"]},
            {"key": "canary", "operator": "DoesNotExist"}]});
        assert_eq!(selector_string(Some(&sel)), "app=web,tier in (a,b),!canary");
    }

    #[test]
    fn pods_from_a_template_are_owned() {
        let rs = json!({"metadata": {"name": "web-abc", "namespace": "default", "uid": "u1"},
            "spec": {"template": {"metadata": {"labels": {"app": "web", "pod-template-hash": "abc"}},
                "spec": {"containers": [{"name": "a", "image": "nginx"}]}}}});
        let pod = pod_from_template(&rs);
        assert_eq!(pod["metadata"]["generateName"], "web-abc-");
        assert_eq!(pod["metadata"]["labels"]["pod-template-hash"], "abc");
        assert_eq!(pod["metadata"]["ownerReferences"][0]["uid"], "u1");
        assert_eq!(pod["metadata"]["ownerReferences"][0]["controller"], true);
        assert!(pod["spec"].get("nodeName").is_none());
    }
}
