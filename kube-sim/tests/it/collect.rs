//! Garbage collection with background propagation: deleting an owner removes its dependents, down the
//! chain custom resource → Deployment → ReplicaSet → pods.

use k8s_openapi::api::apps::v1::Deployment;
use kube::Api;
use kube::api::{DeleteParams, DynamicObject, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube_sim::GroupResource;
use kube_sim::store::{ListOptions, Store, WatchEvent};
use serde_json::json;

use crate::oci::{MIRROR_NAME, Registry};
use crate::rollout::{deployment, until, watch};
use crate::{DEADLINE, WIDGET_CRD, install_crd};

fn count(store: &Store, gr: &GroupResource) -> usize {
    store
        .list(gr, Some("default"), &ListOptions::default())
        .unwrap()
        .items
        .len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_custom_resource_collects_its_deployment_replica_sets_and_pods() {
    let registry = Registry::start().await;
    registry.push("owned", "v1", &[]).await;
    let sim = registry.sim(|_| {}).await;
    install_crd(&sim, WIDGET_CRD).await;
    let client = sim.client().await.unwrap();
    let gvk = GroupVersionKind::gvk("example.com", "v1", "Widget");
    let widgets: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), "default", &ApiResource::from_gvk(&gvk));
    let widget: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "example.com/v1", "kind": "Widget",
        "metadata": {"name": "owner"}, "spec": {"size": 2}}))
    .unwrap();
    let widget = widgets
        .create(&PostParams::default(), &widget)
        .await
        .unwrap();
    let mut d = deployment("owned", 2, &format!("{MIRROR_NAME}/owned:v1"));
    d.metadata.owner_references = Some(vec![
        serde_json::from_value(json!({
            "apiVersion": "example.com/v1", "kind": "Widget", "name": "owner",
            "uid": widget.metadata.uid.clone().unwrap(), "controller": true, "blockOwnerDeletion": true}))
        .unwrap(),
    ]);
    let deployments: Api<Deployment> = Api::namespaced(client, "default");
    deployments
        .create(&PostParams::default(), &d)
        .await
        .unwrap();

    let store = sim.store().clone();
    let mut pods = watch(&store, &GroupResource::pods(), Some("app=owned"));
    until(&mut pods, DEADLINE, "two pods to be Ready", |_| {
        let ready = store
            .list(
                &GroupResource::pods(),
                Some("default"),
                &ListOptions {
                    label_selector: Some("app=owned".into()),
                    ..Default::default()
                },
            )
            .unwrap()
            .items
            .iter()
            .filter(|p| {
                p["status"]["conditions"].as_array().is_some_and(|cs| {
                    cs.iter()
                        .any(|c| c["type"] == "Ready" && c["status"] == "True")
                })
            })
            .count();
        (ready == 2).then_some(())
    })
    .await;
    assert_eq!(count(&store, &GroupResource::replicasets()), 1);

    widgets
        .delete("owner", &DeleteParams::default())
        .await
        .unwrap();
    until(&mut pods, DEADLINE, "the pods to be collected", |e| {
        (matches!(e, WatchEvent::Deleted(_)) && count(&store, &GroupResource::pods()) == 0)
            .then_some(())
    })
    .await;
    assert_eq!(count(&store, &GroupResource::deployments()), 0);
    assert_eq!(count(&store, &GroupResource::replicasets()), 0);
}

#[tokio::test]
async fn events_are_left_alone_as_kube_controller_manager_leaves_them() {
    use k8s_openapi::api::core::v1::{ConfigMap, Event};
    let sim = crate::start().await;
    let client = sim.client().await.unwrap();
    let (cms, events) = (
        Api::<ConfigMap>::namespaced(client.clone(), "default"),
        Api::<Event>::namespaced(client, "default"),
    );
    let owner: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "owner"}})).unwrap();
    let uid = cms
        .create(&PostParams::default(), &owner)
        .await
        .unwrap()
        .metadata
        .uid
        .unwrap();
    let owned = json!({"name": "owned", "ownerReferences": [
        {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": uid}]});
    let dependent: ConfigMap = serde_json::from_value(json!({"metadata": owned})).unwrap();
    cms.create(&PostParams::default(), &dependent)
        .await
        .unwrap();
    let event: Event = serde_json::from_value(json!({"metadata": owned, "reason": "Tested",
        "involvedObject": {"kind": "ConfigMap", "name": "owner", "namespace": "default"}}))
    .unwrap();
    events.create(&PostParams::default(), &event).await.unwrap();
    cms.delete("owner", &DeleteParams::background())
        .await
        .unwrap();
    // The ConfigMap that the owner owned goes; the Event it owned stays.
    let gone = tokio::time::timeout(DEADLINE, async {
        while cms.get_opt("owned").await.unwrap().is_some() {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(gone.is_ok(), "the dependent ConfigMap was not collected");
    // A collector that followed Events would have taken this one within its delay (20 ms) too.
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    let kept = events.get("owned").await.unwrap();
    assert_eq!(kept.metadata.owner_references.unwrap()[0].uid, uid);
}
