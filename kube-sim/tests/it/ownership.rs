//! The controllers' ownership rules through real clients: ReplicaSets adopt matching orphan pods and
//! release pods whose labels stop matching, Deployments do the same for ReplicaSets, and foreground
//! deletion keeps an owner until its blocking dependents are gone; an owner removed while the garbage
//! collector's watch was expired still has its dependents collected.

use std::time::Duration;

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::Api;
use kube::api::{ListParams, PostParams};
use serde_json::{Value, json};

use crate::{DEADLINE, kubectl_ok, raw, start};

/// Polls `f` until it returns `Some`, within the deadline.
async fn eventually<T, F: std::future::Future<Output = Option<T>>>(
    what: &str,
    mut f: impl FnMut() -> F,
) -> T {
    tokio::time::timeout(DEADLINE, async {
        loop {
            if let Some(t) = f().await {
                return t;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("{what} within the deadline"))
}

fn controller_uid<K: kube::Resource>(obj: &K) -> Option<String> {
    obj.meta()
        .owner_references
        .as_ref()?
        .iter()
        .find(|r| r.controller == Some(true))
        .map(|r| r.uid.clone())
}

fn replica_set(name: &str, app: &str, replicas: i32) -> ReplicaSet {
    serde_json::from_value(json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
        "metadata": {"name": name, "namespace": "default", "labels": {"app": app}},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": app}},
            "template": {"metadata": {"labels": {"app": app}},
                "spec": {"containers": [{"name": "a", "image": "nginx"}]}}}}))
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_set_adopts_a_matching_orphan_and_releases_a_relabelled_pod() {
    let sim = start().await;
    let client = sim.client().await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let sets: Api<ReplicaSet> = Api::namespaced(client, "default");
    let orphan: Pod = serde_json::from_value(json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "stray", "namespace": "default", "labels": {"app": "web"}},
        "spec": {"containers": [{"name": "a", "image": "nginx"}]}}))
    .unwrap();
    pods.create(&PostParams::default(), &orphan).await.unwrap();
    let rs = sets
        .create(&PostParams::default(), &replica_set("web", "web", 2))
        .await
        .unwrap();
    let rs_uid = rs.metadata.uid.clone().unwrap();

    let owned = eventually("the orphan is adopted and one pod added", || {
        let (pods, rs_uid) = (pods.clone(), rs_uid.clone());
        async move {
            let list = pods
                .list(&ListParams::default().labels("app=web"))
                .await
                .ok()?;
            let stray = list
                .items
                .iter()
                .find(|p| p.metadata.name.as_deref() == Some("stray"))?;
            let all_owned = list
                .items
                .iter()
                .all(|p| controller_uid(p) == Some(rs_uid.clone()));
            // The controller adopts before it creates what is missing,
            // so a look between the two sees the orphan alone.
            let count = list.items.len();
            (controller_uid(stray) == Some(rs_uid) && all_owned && count >= 2).then_some(count)
        }
    })
    .await;
    assert_eq!(
        owned, 2,
        "the adopted orphan counts as one of the two replicas"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    let settled = pods
        .list(&ListParams::default().labels("app=web"))
        .await
        .unwrap();
    assert_eq!(
        settled.items.len(),
        2,
        "no pod is made in the orphan's place"
    );
    let stray = pods.get("stray").await.unwrap();
    let reference = &stray.metadata.owner_references.unwrap()[0];
    assert_eq!(
        (reference.kind.as_str(), reference.name.as_str()),
        ("ReplicaSet", "web")
    );
    assert_eq!(reference.block_owner_deletion, Some(true));

    kubectl_ok(&sim, &["label", "pod", "stray", "app=gone", "--overwrite"]).await;
    eventually("the relabelled pod is released and replaced", || {
        let (pods, rs_uid) = (pods.clone(), rs_uid.clone());
        async move {
            let stray = pods.get("stray").await.ok()?;
            let web = pods
                .list(&ListParams::default().labels("app=web"))
                .await
                .ok()?;
            let replaced = web.items.len() == 2
                && web
                    .items
                    .iter()
                    .all(|p| controller_uid(p) == Some(rs_uid.clone()));
            (stray.metadata.owner_references.is_none() && replaced).then_some(())
        }
    })
    .await;
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deployment_adopts_a_matching_orphan_replica_set_and_releases_it_when_relabelled() {
    let sim = start().await;
    let client = sim.client().await.unwrap();
    let sets: Api<ReplicaSet> = Api::namespaced(client.clone(), "default");
    let deployments: Api<Deployment> = Api::namespaced(client, "default");
    sets.create(&PostParams::default(), &replica_set("api-old", "api", 1))
        .await
        .unwrap();
    kubectl_ok(&sim, &["create", "deployment", "api", "--image=nginx:2"]).await;
    let d_uid = deployments.get("api").await.unwrap().metadata.uid.unwrap();
    eventually("the orphan ReplicaSet is adopted", || {
        let (sets, d_uid) = (sets.clone(), d_uid.clone());
        async move {
            let rs = sets.get("api-old").await.ok()?;
            (controller_uid(&rs) == Some(d_uid)).then_some(())
        }
    })
    .await;

    kubectl_ok(&sim, &["label", "rs", "api-old", "app=gone", "--overwrite"]).await;
    eventually("the relabelled ReplicaSet is released", || {
        let sets = sets.clone();
        async move {
            let rs = sets.get("api-old").await.ok()?;
            rs.metadata.owner_references.is_none().then_some(())
        }
    })
    .await;
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreground_deletion_keeps_the_deployment_until_its_replica_sets_and_pods_are_gone() {
    let sim = start().await;
    let client = sim.client().await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "default");
    kubectl_ok(
        &sim,
        &[
            "create",
            "deployment",
            "fg",
            "--image=nginx",
            "--replicas=2",
        ],
    )
    .await;
    eventually("two pods", || {
        let pods = pods.clone();
        async move {
            let n = pods
                .list(&ListParams::default().labels("app=fg"))
                .await
                .ok()?
                .items
                .len();
            (n == 2).then_some(())
        }
    })
    .await;

    let uri = "/apis/apps/v1/namespaces/default/deployments/fg";
    let body =
        json!({"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Foreground"});
    let (code, text) = raw(
        &client,
        http::Method::DELETE,
        uri,
        "application/json",
        &body.to_string(),
    )
    .await;
    assert_eq!(code, 200, "{text}");
    let answered: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(answered["kind"], "Deployment");
    assert_eq!(
        answered["metadata"]["finalizers"],
        json!(["foregroundDeletion"])
    );
    assert!(answered["metadata"]["deletionTimestamp"].is_string());

    // While pods remain, the Deployment stays, marked.
    let d = deployments.get("fg").await.unwrap();
    assert!(d.metadata.deletion_timestamp.is_some());
    assert!(
        !pods
            .list(&ListParams::default().labels("app=fg"))
            .await
            .unwrap()
            .items
            .is_empty()
    );

    let leftovers = eventually("the Deployment goes", || {
        let (deployments, pods, client) = (deployments.clone(), pods.clone(), client.clone());
        async move {
            if deployments.get_opt("fg").await.ok()?.is_some() {
                return None;
            }
            let sets: Api<ReplicaSet> = Api::namespaced(client, "default");
            let rs = sets
                .list(&ListParams::default().labels("app=fg"))
                .await
                .ok()?
                .items
                .len();
            let p = pods
                .list(&ListParams::default().labels("app=fg"))
                .await
                .ok()?
                .items
                .len();
            Some(rs + p)
        }
    })
    .await;
    assert_eq!(leftovers, 0, "no ReplicaSet or pod outlives the Deployment");
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delete_that_waits_answers_200_and_the_legacy_cascade_202() {
    let sim = start().await;
    let client = sim.client().await.unwrap();
    for name in ["kept", "legacy"] {
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "finalizers": ["example.com/hold"]}});
        let (code, text) = crate::post(&client, "/api/v1/namespaces/default/configmaps", &cm).await;
        assert_eq!(code, 201, "{text}");
    }
    let uri = |n: &str| format!("/api/v1/namespaces/default/configmaps/{n}");
    let (code, text) = raw(
        &client,
        http::Method::DELETE,
        &uri("kept"),
        "application/json",
        "",
    )
    .await;
    assert_eq!(code, 200, "{text}");
    assert_eq!(
        serde_json::from_str::<Value>(&text).unwrap()["kind"],
        "ConfigMap"
    );
    let body = json!({"kind": "DeleteOptions", "apiVersion": "v1", "orphanDependents": false});
    let (code, text) = raw(
        &client,
        http::Method::DELETE,
        &uri("legacy"),
        "application/json",
        &body.to_string(),
    )
    .await;
    assert_eq!(code, 202, "{text}");
    let answered: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        answered["metadata"]["finalizers"],
        json!(["example.com/hold", "foregroundDeletion"])
    );
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_cascade_foreground_returns_once_the_replica_sets_and_pods_are_gone() {
    let sim = start().await;
    let client = sim.client().await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let sets: Api<ReplicaSet> = Api::namespaced(client, "default");
    kubectl_ok(
        &sim,
        &[
            "create",
            "deployment",
            "kc",
            "--image=nginx",
            "--replicas=3",
        ],
    )
    .await;
    eventually("three pods", || {
        let pods = pods.clone();
        async move {
            let n = pods
                .list(&ListParams::default().labels("app=kc"))
                .await
                .ok()?
                .items
                .len();
            (n == 3).then_some(())
        }
    })
    .await;
    let out = kubectl_ok(
        &sim,
        &["delete", "deployment", "kc", "--cascade=foreground"],
    )
    .await;
    assert!(out.contains("deployment.apps \"kc\" deleted"), "{out}");
    let left_pods = pods
        .list(&ListParams::default().labels("app=kc"))
        .await
        .unwrap()
        .items;
    let left_sets = sets
        .list(&ListParams::default().labels("app=kc"))
        .await
        .unwrap()
        .items;
    assert!(
        left_pods.is_empty() && left_sets.is_empty(),
        "kubectl waited for the Deployment, which waited for {} ReplicaSet(s) and {} pod(s)",
        left_sets.len(),
        left_pods.len()
    );
    sim.shutdown().await;
}

/// An owner removed while the garbage collector's watch was expired (a compaction before it saw the
/// removal) is found missing when the collector lists again, and its dependent is collected.
#[tokio::test]
async fn a_dependent_of_an_owner_removed_while_the_watch_was_expired_is_collected() {
    let sim = start().await;
    let client = sim.client().await.unwrap();
    let maps: Api<ConfigMap> = Api::namespaced(client, "default");
    let owner: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "owner", "namespace": "default"}}))
            .unwrap();
    let owner = maps.create(&PostParams::default(), &owner).await.unwrap();
    let dependent: ConfigMap = serde_json::from_value(json!({"metadata": {
        "name": "dependent", "namespace": "default",
        "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "owner",
            "uid": owner.metadata.uid.clone().unwrap()}]}}))
    .unwrap();
    maps.create(&PostParams::default(), &dependent)
        .await
        .unwrap();
    // The collector has no API to ask; its watch delivers both objects well within this.
    tokio::time::sleep(Duration::from_millis(500)).await;

    // No await between the two: the collector's watch never delivers the removal.
    let removed = sim.store().delete(
        &kube_sim::resource::GroupResource::new("", "configmaps"),
        Some("default"),
        "owner",
        &kube_sim::store::DeleteOptions::default(),
    );
    assert!(removed.is_ok(), "{removed:?}");
    sim.store().compact();

    eventually("the dependent is collected", || {
        let maps = maps.clone();
        async move {
            maps.get_opt("dependent")
                .await
                .ok()?
                .is_none()
                .then_some(())
        }
    })
    .await;
}
