//! Rollouts end to end: kubectl and kube-rs against the simulator's Deployment and ReplicaSet controllers
//! and kubelet, with images in a real registry; and the rollout pitfalls 1–4 of the semantics reference.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::wait::{Condition, await_condition, conditions};
use kube_sim::store::{ListOptions, Store, WatchEvent, Watcher};
use kube_sim::{GroupResource, Sim};
use serde_json::{Value, json};

use crate::oci::{MIRROR_NAME, Registry};
use crate::{DEADLINE, apply, kubectl_ok};

/// A Deployment manifest.
pub fn deployment_yaml(name: &str, replicas: u32, image: &str) -> String {
    format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {name}\n  namespace: default\nspec:\n  replicas: {replicas}\n  selector:\n    matchLabels:\n      app: {name}\n  template:\n    metadata:\n      labels:\n        app: {name}\n    spec:\n      containers:\n      - name: app\n        image: {image}\n"
    )
}

/// The same Deployment as a kube-rs object.
pub fn deployment(name: &str, replicas: u32, image: &str) -> Deployment {
    serde_yaml::from_str(&deployment_yaml(name, replicas, image)).expect("the manifest parses")
}

/// A watch of one resource in `default` from the current state on, optionally by label.
pub fn watch(store: &Store, gr: &GroupResource, labels: Option<&str>) -> Watcher {
    let opts = ListOptions {
        label_selector: labels.map(str::to_string),
        ..ListOptions::default()
    };
    store
        .watch(
            gr,
            Some("default"),
            Some(store.current_resource_version()),
            &opts,
        )
        .expect("the watch starts")
}

/// Feeds watch events to `f` until it returns `Some`, within `deadline`.
pub async fn until<T>(
    watcher: &mut Watcher,
    deadline: Duration,
    what: &str,
    mut f: impl FnMut(&WatchEvent) -> Option<T>,
) -> T {
    let found = tokio::time::timeout(deadline, async {
        while let Some(e) = watcher.next().await {
            if let Some(t) = f(&e) {
                return Some(t);
            }
        }
        None
    })
    .await;
    match found {
        Ok(Some(t)) => t,
        Ok(None) => panic!("the watch ended before {what}"),
        Err(_) => panic!("{what} did not happen within {deadline:?}"),
    }
}

/// The object of an `Added` or `Modified` event.
pub fn applied(e: &WatchEvent) -> Option<&Value> {
    match e {
        WatchEvent::Added(o) | WatchEvent::Modified(o) => Some(o),
        _ => None,
    }
}

fn condition<'a>(obj: &'a Value, kind: &str) -> Option<&'a Value> {
    obj.pointer("/status/conditions")?
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
}

fn progressing_reason(d: &Value) -> &str {
    condition(d, "Progressing")
        .and_then(|c| c["reason"].as_str())
        .unwrap_or("")
}

fn int(v: &Value, pointer: &str) -> i64 {
    v.pointer(pointer).and_then(Value::as_i64).unwrap_or(0)
}

fn observed(d: &Value) -> bool {
    int(d, "/status/observedGeneration") >= int(d, "/metadata/generation")
}

/// What kube-rs `is_deployment_completed` says about a stored Deployment.
fn kube_rs_completed(d: &Value) -> bool {
    let typed: Deployment = serde_json::from_value(d.clone()).expect("a Deployment");
    conditions::is_deployment_completed().matches_object(Some(&typed))
}

fn set_image(store: &Store, name: &str, image: &str) -> Value {
    store
        .patch(
            &GroupResource::deployments(),
            Some("default"),
            name,
            None,
            &kube_sim::store::Patch::Strategic(
                json!({"spec": {"template": {"spec": {"containers": [{"name": "app", "image": image}]}}}}),
            ),
            &kube_sim::store::PatchOptions {
                field_manager: Some("test".into()),
                ..Default::default()
            },
        )
        .expect("the image patch applies")
        .object
}

/// Applies a Deployment of `name` running `{MIRROR_NAME}/{name}:v1`.
async fn deploy_v1(sim: &Sim, name: &str, replicas: u32) {
    let image = format!("{MIRROR_NAME}/{name}:v1");
    apply(sim, &deployment_yaml(name, replicas, &image)).await;
}

/// `kubectl rollout status` of a Deployment, required to succeed.
async fn rollout_status(sim: &Sim, name: &str) -> String {
    let target = format!("deployment/{name}");
    kubectl_ok(sim, &["rollout", "status", &target, "--timeout=20s"]).await
}

/// Waits until the Deployment is observed and complete by kubectl's rules.
async fn rolled_out(store: &Store, name: &str) -> Value {
    let mut w = watch(store, &GroupResource::deployments(), None);
    if let Ok(d) = store.get(&GroupResource::deployments(), Some("default"), name)
        && complete(&d)
    {
        return d;
    }
    until(&mut w, DEADLINE, "the rollout to complete", |e| {
        applied(e)
            .filter(|d| d["metadata"]["name"] == name && complete(d))
            .cloned()
    })
    .await
}

/// `kubectl rollout status`'s notion of done.
fn complete(d: &Value) -> bool {
    let spec = int(d, "/spec/replicas");
    observed(d)
        && int(d, "/status/updatedReplicas") == spec
        && int(d, "/status/replicas") == spec
        && int(d, "/status/availableReplicas") == spec
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_rolls_out_restarts_and_deletes_a_deployment() {
    let registry = Registry::start().await;
    registry.push("web", "v1", &[]).await;
    let sim = registry.sim(|_| {}).await;
    let store = sim.store().clone();
    deploy_v1(&sim, "web", 3).await;
    let out = rollout_status(&sim, "web").await;
    assert!(
        out.contains("deployment \"web\" successfully rolled out"),
        "{out}"
    );
    let rs = GroupResource::replicasets();
    let first: Vec<Value> = store
        .list(&rs, Some("default"), &ListOptions::default())
        .unwrap()
        .items;
    assert_eq!(first.len(), 1);
    let old_pods: BTreeSet<String> = store
        .list(
            &GroupResource::pods(),
            Some("default"),
            &ListOptions {
                label_selector: Some("app=web".into()),
                ..Default::default()
            },
        )
        .unwrap()
        .items
        .iter()
        .map(|p| p["metadata"]["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(old_pods.len(), 3);

    let mut pod_events = watch(&store, &GroupResource::pods(), Some("app=web"));
    kubectl_ok(&sim, &["rollout", "restart", "deployment/web"]).await;
    let out = rollout_status(&sim, "web").await;
    assert!(
        out.contains("deployment \"web\" successfully rolled out"),
        "{out}"
    );
    let all = store
        .list(&rs, Some("default"), &ListOptions::default())
        .unwrap()
        .items;
    assert_eq!(all.len(), 2, "the restart made a new ReplicaSet");
    let sizes: BTreeMap<String, i64> = all
        .iter()
        .map(|r| {
            (
                r["metadata"]["name"].as_str().unwrap().to_string(),
                int(r, "/spec/replicas"),
            )
        })
        .collect();
    let old_name = first[0]["metadata"]["name"].as_str().unwrap();
    assert_eq!(sizes[old_name], 0, "{sizes:?}");
    assert_eq!(sizes.values().sum::<i64>(), 3, "{sizes:?}");

    // Every old pod was first marked terminating, then removed.
    let mut terminating = BTreeSet::new();
    let mut gone = BTreeSet::new();
    until(
        &mut pod_events,
        DEADLINE,
        "the old pods to terminate and go",
        |e| {
            match e {
                WatchEvent::Modified(p) if p["metadata"]["deletionTimestamp"].is_string() => {
                    terminating.insert(p["metadata"]["name"].as_str().unwrap().to_string());
                }
                WatchEvent::Deleted(p) => {
                    let name = p["metadata"]["name"].as_str().unwrap().to_string();
                    assert!(
                        terminating.contains(&name) || !old_pods.contains(&name),
                        "{name} disappeared without terminating first"
                    );
                    gone.insert(name);
                }
                _ => {}
            }
            old_pods.is_subset(&gone).then_some(())
        },
    )
    .await;
    assert!(old_pods.is_subset(&terminating));

    let out = kubectl_ok(&sim, &["delete", "deployment", "web"]).await;
    assert!(out.contains("deployment.apps \"web\" deleted"), "{out}");
    // The garbage collector removes the ReplicaSets, then their pods.
    let mut left = watch(&store, &GroupResource::pods(), Some("app=web"));
    let remaining = |store: &Store| {
        store
            .list(
                &GroupResource::pods(),
                Some("default"),
                &ListOptions::default(),
            )
            .unwrap()
            .items
            .len()
    };
    if remaining(&store) > 0 {
        until(&mut left, DEADLINE, "the pods to be collected", |e| {
            matches!(e, WatchEvent::Deleted(_))
                .then(|| remaining(&store))
                .filter(|n| *n == 0)
        })
        .await;
    }
    assert!(
        store
            .list(&rs, Some("default"), &ListOptions::default())
            .unwrap()
            .items
            .is_empty()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_rs_await_condition_sees_the_deployment_complete() {
    let registry = Registry::start().await;
    registry.push("api", "v1", &[]).await;
    let sim = registry.sim(|_| {}).await;
    let client = sim.client().await.unwrap();
    let api: Api<Deployment> = Api::namespaced(client, "default");
    api.create(
        &PostParams::default(),
        &deployment("api", 2, &format!("{MIRROR_NAME}/api:v1")),
    )
    .await
    .unwrap();
    let done = tokio::time::timeout(
        DEADLINE,
        await_condition(api.clone(), "api", conditions::is_deployment_completed()),
    )
    .await
    .expect("the rollout completes within the deadline")
    .unwrap()
    .expect("the Deployment exists");
    let status = done.status.unwrap();
    assert_eq!(status.updated_replicas, Some(2));
    assert_eq!(status.available_replicas, Some(2));
    assert_eq!(status.observed_generation, done.metadata.generation);
}

/// Pitfall 1: the status is never written in the same step as the spec.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pitfall_1_status_lags_the_spec_write() {
    let registry = Registry::start().await;
    registry.push("lag", "v1", &[]).await;
    registry.push("lag", "v2", &[]).await;
    let sim = registry.sim(|_| {}).await;
    let client = sim.client().await.unwrap();
    let api: Api<Deployment> = Api::namespaced(client, "default");
    let created = api
        .create(
            &PostParams::default(),
            &deployment("lag", 1, &format!("{MIRROR_NAME}/lag:v1")),
        )
        .await
        .unwrap();
    assert_eq!(created.metadata.generation, Some(1));
    assert!(
        created
            .status
            .as_ref()
            .and_then(|s| s.observed_generation)
            .is_none(),
        "a new Deployment has no observed generation yet"
    );
    let store = sim.store().clone();
    rolled_out(&store, "lag").await;
    let patched = api
        .patch(
            "lag",
            &PatchParams::default(),
            &Patch::Strategic(
                json!({"spec": {"template": {"spec": {"containers": [{"name": "app", "image": format!("{MIRROR_NAME}/lag:v2")}]}}}}),
            ),
        )
        .await
        .unwrap();
    assert_eq!(patched.metadata.generation, Some(2));
    assert_eq!(
        patched.status.and_then(|s| s.observed_generation),
        Some(1),
        "the write that bumps the generation cannot carry its observation"
    );
    let d = rolled_out(&store, "lag").await;
    assert_eq!(int(&d, "/status/observedGeneration"), 2);
}

/// Pitfall 2: `Progressing=NewReplicaSetAvailable` stays until the controller observes the new template, so
/// kube-rs `is_deployment_completed` alone is true right after the change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pitfall_2_stale_new_replica_set_available_lingers_until_observed() {
    let registry = Registry::start().await;
    registry.push("stale", "v1", &[]).await;
    registry.push("stale", "v2", &[]).await;
    let sim = registry.sim(|_| {}).await;
    let store = sim.store().clone();
    deploy_v1(&sim, "stale", 2).await;
    let done = rolled_out(&store, "stale").await;
    assert_eq!(progressing_reason(&done), "NewReplicaSetAvailable");

    let mut events = watch(&store, &GroupResource::deployments(), None);
    let changed = set_image(&store, "stale", &format!("{MIRROR_NAME}/stale:v2"));
    assert!(!observed(&changed));
    assert_eq!(
        progressing_reason(&changed),
        "NewReplicaSetAvailable",
        "the old condition lingers"
    );
    assert!(
        kube_rs_completed(&changed),
        "a wait on the condition alone is fooled"
    );
    // Once observed, the condition moves away from NewReplicaSetAvailable before the rollout completes.
    let first_observed = until(&mut events, DEADLINE, "the change to be observed", |e| {
        applied(e).filter(|d| observed(d)).cloned()
    })
    .await;
    assert_ne!(
        progressing_reason(&first_observed),
        "NewReplicaSetAvailable",
        "{first_observed:#}"
    );
    assert!(!kube_rs_completed(&first_observed));
    let done = until(&mut events, DEADLINE, "the new rollout to complete", |e| {
        applied(e)
            .filter(|d| complete(d) && progressing_reason(d) == "NewReplicaSetAvailable")
            .cloned()
    })
    .await;
    assert!(kube_rs_completed(&done));
    assert_eq!(int(&done, "/status/updatedReplicas"), 2);
}

/// Pitfall 3: `Available=True` holds during a rollout; it does not mean the rollout is complete.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pitfall_3_available_during_a_rollout_is_not_completion() {
    let registry = Registry::start().await;
    registry.push("avail", "v1", &[]).await;
    registry.push("avail", "v2", &[]).await;
    let sim = registry.sim(|_| {}).await;
    let store = sim.store().clone();
    deploy_v1(&sim, "avail", 4).await;
    rolled_out(&store, "avail").await;
    let mut events = watch(&store, &GroupResource::deployments(), None);
    set_image(&store, "avail", &format!("{MIRROR_NAME}/avail:v2"));
    let mut available_but_incomplete = 0;
    let mut unavailable = 0;
    until(&mut events, DEADLINE, "the rollout to complete", |e| {
        let d = applied(e)?;
        if observed(d) && !complete(d) {
            if condition(d, "Available").is_some_and(|c| c["status"] == "True") {
                available_but_incomplete += 1;
            } else {
                unavailable += 1;
            }
        }
        (complete(d) && progressing_reason(d) == "NewReplicaSetAvailable").then_some(())
    })
    .await;
    assert!(
        available_but_incomplete > 0,
        "Available=True was reported while the rollout was still under way"
    );
    assert_eq!(
        unavailable, 0,
        "with maxUnavailable=1 of 4, availability never drops"
    );
}

/// Pitfall 4: old pods terminate with a `deletionTimestamp`, can stay Ready, and keep their old `imageID`
/// after the Deployment's counts have converged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pitfall_4_old_pods_terminate_with_their_old_image_id() {
    let registry = Registry::start().await;
    let v1 = registry.push("term", "v1", &[]).await;
    let v2 = registry.push("term", "v2", &[]).await;
    assert_ne!(v1, v2);
    let sim = registry
        .sim(|c| c.kubelet.termination_delay = Duration::from_secs(3))
        .await;
    let store = sim.store().clone();
    deploy_v1(&sim, "term", 2).await;
    rolled_out(&store, "term").await;
    let mut events = watch(&store, &GroupResource::deployments(), None);
    set_image(&store, "term", &format!("{MIRROR_NAME}/term:v2"));
    until(&mut events, DEADLINE, "the counts to converge", |e| {
        applied(e).filter(|d| complete(d)).map(|_| ())
    })
    .await;
    let pods = store
        .list(
            &GroupResource::pods(),
            Some("default"),
            &ListOptions {
                label_selector: Some("app=term".into()),
                ..Default::default()
            },
        )
        .unwrap()
        .items;
    let old_id = format!("{MIRROR_NAME}/term@{v1}");
    let new_id = format!("{MIRROR_NAME}/term@{v2}");
    let image_id = |p: &Value| {
        p.pointer("/status/containerStatuses/0/imageID")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    let terminating: Vec<&Value> = pods
        .iter()
        .filter(|p| p["metadata"]["deletionTimestamp"].is_string())
        .collect();
    assert!(
        !terminating.is_empty(),
        "old pods are still terminating when the counts converge"
    );
    for p in &terminating {
        assert_eq!(image_id(p), old_id, "a terminating pod keeps its old image");
    }
    assert!(
        terminating
            .iter()
            .any(|p| condition(p, "Ready").is_some_and(|c| c["status"] == "True")),
        "terminating pods may stay Ready"
    );
    let current: Vec<&Value> = pods
        .iter()
        .filter(|p| !p["metadata"]["deletionTimestamp"].is_string())
        .collect();
    assert_eq!(current.len(), 2);
    for p in current {
        assert_eq!(image_id(p), new_id);
    }
}

/// A rollout that cannot progress reports `ProgressDeadlineExceeded`, which `kubectl rollout status` turns
/// into an error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stuck_rollout_exceeds_its_progress_deadline() {
    let registry = Registry::start().await;
    let sim = registry.sim(|_| {}).await;
    let store = sim.store().clone();
    let yaml = deployment_yaml("stuck", 1, &format!("{MIRROR_NAME}/absent:v1")).replace(
        "spec:\n  replicas",
        "spec:\n  progressDeadlineSeconds: 1\n  replicas",
    );
    apply(&sim, &yaml).await;
    let mut events = watch(&store, &GroupResource::deployments(), None);
    let timed_out = until(
        &mut events,
        DEADLINE,
        "the progress deadline to pass",
        |e| {
            applied(e)
                .filter(|d| progressing_reason(d) == "ProgressDeadlineExceeded")
                .cloned()
        },
    )
    .await;
    let c = condition(&timed_out, "Progressing").unwrap();
    assert_eq!(c["status"], "False");
    assert!(
        c["message"]
            .as_str()
            .is_some_and(|m| m.ends_with("has timed out progressing.")),
        "{c}"
    );
    assert_eq!(
        condition(&timed_out, "Available").unwrap()["reason"],
        "MinimumReplicasUnavailable"
    );
    let out = crate::kubectl_at(
        sim.kubeconfig_path(),
        &["rollout", "status", "deployment/stuck", "--timeout=10s"],
    )
    .await;
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("deployment \"stuck\" exceeded its progress deadline"),
        "{stderr}"
    );
}

/// `kubectl rollout history` and `undo` read the revision annotations and go back to the previous
/// ReplicaSet, which gets the next revision.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_rollout_undo_returns_to_the_previous_replica_set() {
    let registry = Registry::start().await;
    registry.push("undo", "v1", &[]).await;
    registry.push("undo", "v2", &[]).await;
    let sim = registry.sim(|_| {}).await;
    let store = sim.store().clone();
    deploy_v1(&sim, "undo", 2).await;
    rolled_out(&store, "undo").await;
    set_image(&store, "undo", &format!("{MIRROR_NAME}/undo:v2"));
    rollout_status(&sim, "undo").await;
    let history = kubectl_ok(&sim, &["rollout", "history", "deployment/undo"]).await;
    let revisions: Vec<&str> = history
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|w| w.chars().all(|c| c.is_ascii_digit()))
        .collect();
    assert_eq!(revisions, ["1", "2"], "{history}");

    kubectl_ok(&sim, &["rollout", "undo", "deployment/undo"]).await;
    rollout_status(&sim, "undo").await;
    let d = store
        .get(&GroupResource::deployments(), Some("default"), "undo")
        .unwrap();
    assert_eq!(
        d["spec"]["template"]["spec"]["containers"][0]["image"],
        format!("{MIRROR_NAME}/undo:v1")
    );
    assert_eq!(
        d["metadata"]["annotations"]["deployment.kubernetes.io/revision"],
        "3"
    );
    let rss = store
        .list(
            &GroupResource::replicasets(),
            Some("default"),
            &ListOptions::default(),
        )
        .unwrap()
        .items;
    assert_eq!(rss.len(), 2, "the first ReplicaSet was reused");
    let active: Vec<&Value> = rss
        .iter()
        .filter(|r| int(r, "/spec/replicas") > 0)
        .collect();
    assert_eq!(active.len(), 1);
    assert_eq!(
        active[0]["metadata"]["annotations"]["deployment.kubernetes.io/revision"],
        "3"
    );
    assert_eq!(
        active[0]["metadata"]["annotations"]["deployment.kubernetes.io/revision-history"],
        "1"
    );
}

/// `minReadySeconds`: pods count as available only after being Ready that long.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn min_ready_seconds_delays_availability() {
    let registry = Registry::start().await;
    registry.push("slow", "v1", &[]).await;
    let sim = registry.sim(|_| {}).await;
    let store = sim.store().clone();
    let yaml = deployment_yaml("slow", 2, &format!("{MIRROR_NAME}/slow:v1")).replace(
        "spec:\n  replicas",
        "spec:\n  minReadySeconds: 1\n  replicas",
    );
    let mut events = watch(&store, &GroupResource::deployments(), None);
    apply(&sim, &yaml).await;
    let mut ready_not_available = false;
    until(&mut events, DEADLINE, "the rollout to complete", |e| {
        let d = applied(e)?;
        if int(d, "/status/readyReplicas") == 2 && int(d, "/status/availableReplicas") < 2 {
            ready_not_available = true;
        }
        complete(d).then_some(())
    })
    .await;
    assert!(
        ready_not_available,
        "pods were Ready before they counted as available"
    );
}
