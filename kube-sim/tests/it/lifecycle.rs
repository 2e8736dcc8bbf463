//! Object lifecycle over HTTP: graceful pod deletion, finalizers, namespace termination, defaulting, scale.

use futures::StreamExt as _;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod};
use kube::api::{
    Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams,
};
use serde_json::json;

use crate::{DEADLINE, start};

fn pod(name: &str, node: Option<&str>) -> Pod {
    let mut spec = json!({"containers": [{"name": "app", "image": "registry.local:5000/app:v1"}]});
    if let Some(n) = node {
        spec["nodeName"] = json!(n);
    }
    serde_json::from_value(
        json!({"metadata": {"name": name, "labels": {"app": "x"}}, "spec": spec}),
    )
    .unwrap()
}

#[tokio::test]
async fn pods_are_defaulted_and_deleted_gracefully_when_scheduled() {
    let sim = start().await;
    let client = sim.client().await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client, "default");
    let created = pods
        .create(&PostParams::default(), &pod("p", Some("node-1")))
        .await
        .unwrap();
    let spec = created.spec.clone().unwrap();
    assert_eq!(spec.termination_grace_period_seconds, Some(30));
    assert_eq!(spec.restart_policy.as_deref(), Some("Always"));
    assert_eq!(
        spec.containers[0].image_pull_policy.as_deref(),
        Some("IfNotPresent")
    );
    assert_eq!(
        spec.containers[0].termination_message_path.as_deref(),
        Some("/dev/termination-log")
    );
    assert_eq!(created.status.unwrap().phase.as_deref(), Some("Pending"));
    assert!(created.metadata.uid.is_some() && created.metadata.creation_timestamp.is_some());

    let deleted = pods.delete("p", &DeleteParams::default()).await.unwrap();
    let terminating = deleted
        .left()
        .expect("a graceful delete returns the object");
    assert!(terminating.metadata.deletion_timestamp.is_some());
    assert_eq!(terminating.metadata.deletion_grace_period_seconds, Some(30));
    assert!(
        pods.get("p").await.is_ok(),
        "the pod stays until the kubelet confirms"
    );

    let gone = pods
        .delete(
            "p",
            &DeleteParams {
                grace_period_seconds: Some(0),
                ..DeleteParams::default()
            },
        )
        .await;
    assert!(gone.is_ok());
    assert!(matches!(pods.get("p").await, Err(kube::Error::Api(s)) if s.code == 404));

    pods.create(&PostParams::default(), &pod("unscheduled", None))
        .await
        .unwrap();
    pods.delete("unscheduled", &DeleteParams::default())
        .await
        .unwrap();
    assert!(
        pods.get_opt("unscheduled").await.unwrap().is_none(),
        "an unscheduled pod goes at once"
    );
}

#[tokio::test]
async fn finalizers_hold_deletion_until_removed() {
    let sim = start().await;
    let client = sim.client().await.unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(client, "default");
    let cm: ConfigMap = serde_json::from_value(
        json!({"metadata": {"name": "f", "finalizers": ["example.com/hold"]}}),
    )
    .unwrap();
    let created = cms.create(&PostParams::default(), &cm).await.unwrap();
    let mut events = cms
        .watch(
            &WatchParams::default().fields("metadata.name=f").timeout(20),
            &created.metadata.resource_version.unwrap(),
        )
        .await
        .unwrap()
        .boxed();
    cms.delete("f", &DeleteParams::default()).await.unwrap();
    let marked = cms.get("f").await.unwrap();
    assert!(marked.metadata.deletion_timestamp.is_some());
    cms.patch(
        "f",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    let mut kinds = Vec::new();
    while kinds.last() != Some(&"DELETED") {
        let e = tokio::time::timeout(DEADLINE, events.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        kinds.push(match e {
            WatchEvent::Modified(_) => "MODIFIED",
            WatchEvent::Deleted(_) => "DELETED",
            other => panic!("unexpected {other:?}"),
        });
    }
    assert_eq!(kinds, ["MODIFIED", "DELETED"]);
}

#[tokio::test]
async fn deleting_a_namespace_removes_its_contents_then_itself() {
    let sim = start().await;
    let client = sim.client().await.unwrap();
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": "doomed"}})).unwrap();
    let created = namespaces
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
    assert_eq!(
        created.metadata.labels.unwrap()["kubernetes.io/metadata.name"],
        "doomed"
    );
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "doomed");
    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "c"}})).unwrap();
    cms.create(&PostParams::default(), &cm).await.unwrap();

    let rv = namespaces
        .get("doomed")
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let mut events = namespaces
        .watch(
            &WatchParams::default()
                .fields("metadata.name=doomed")
                .timeout(20),
            &rv,
        )
        .await
        .unwrap()
        .boxed();
    namespaces
        .delete("doomed", &DeleteParams::default())
        .await
        .unwrap();
    loop {
        match tokio::time::timeout(DEADLINE, events.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap()
        {
            WatchEvent::Deleted(_) => break,
            WatchEvent::Modified(n) => {
                assert_eq!(n.status.unwrap().phase.as_deref(), Some("Terminating"));
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    assert!(
        cms.list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
    let err = cms.create(&PostParams::default(), &cm).await.unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 404),
        "{err:?}"
    );
}

#[tokio::test]
async fn a_thousand_pods_list_and_watch_consistently() {
    let sim = start().await;
    let client = sim.client().await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client, "default");
    let before = pods
        .list(&ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let mut stream = pods
        .watch(
            &WatchParams::default().labels("group=g7").timeout(60),
            &before,
        )
        .await
        .unwrap()
        .boxed();
    for i in 0..1000 {
        let p: Pod = serde_json::from_value(json!({"metadata": {"name": format!("p{i}"), "labels": {"group": format!("g{}", i % 20)}},
            "spec": {"containers": [{"name": "c", "image": "i:1"}]}}))
        .unwrap();
        sim.store()
            .create_as(
                Some("default"),
                &p,
                &kube_sim::store::WriteOptions::manager("bench"),
            )
            .unwrap();
    }
    let all = pods.list(&ListParams::default()).await.unwrap();
    assert_eq!(all.items.len(), 1000);
    let g7 = pods
        .list(&ListParams::default().labels("group=g7"))
        .await
        .unwrap();
    assert_eq!(g7.items.len(), 50);
    let mut page = pods.list(&ListParams::default().limit(300)).await.unwrap();
    let mut paged = page.items.len();
    while let Some(token) = page.metadata.continue_.clone().filter(|t| !t.is_empty()) {
        page = pods
            .list(&ListParams::default().limit(300).continue_token(&token))
            .await
            .unwrap();
        paged += page.items.len();
    }
    assert_eq!(paged, 1000);
    let mut seen = 0;
    while seen < 50 {
        match tokio::time::timeout(DEADLINE, stream.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap()
        {
            WatchEvent::Added(p) => {
                assert_eq!(p.metadata.labels.unwrap()["group"], "g7");
                seen += 1;
            }
            other => panic!("unexpected {other:?}"),
        }
    }
}
