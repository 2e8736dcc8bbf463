//! Binding pods to nodes as kube-apiserver does: `pods/binding` sets `spec.nodeName` and
//! `PodScheduled=True` in one write that records no field owner, for kube-sim's own scheduler and for
//! any other scheduler that posts a `Binding`.

use futures::{StreamExt as _, TryStreamExt as _};
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{PostParams, WatchEvent, WatchParams};
use kube_sim::Sim;
use serde_json::{Value, json};

use crate::{DEADLINE, kubectl_at, kubectl_ok, manifest, start};

fn pod(name: &str, scheduler: &str) -> Pod {
    serde_json::from_value(json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"schedulerName": scheduler, "containers": [{"name": "a", "image": "nginx"}]}}))
    .unwrap()
}

/// The managers in a pod's `managedFields`, and whether any of them owns `spec.nodeName`.
fn owners(pod: &Pod) -> (Vec<String>, bool) {
    let entries = pod.metadata.managed_fields.clone().unwrap_or_default();
    let managers = entries.iter().filter_map(|e| e.manager.clone()).collect();
    let owns_node = entries.iter().any(|e| {
        e.fields_v1
            .as_ref()
            .and_then(|f| f.0.pointer("/f:spec/f:nodeName"))
            .is_some()
    });
    (managers, owns_node)
}

fn pod_scheduled(pod: &Pod) -> Option<String> {
    let conditions = pod.status.as_ref()?.conditions.as_ref()?;
    let c = conditions.iter().find(|c| c.type_ == "PodScheduled")?;
    Some(c.status.clone())
}

/// A simulator with pod `name` created for `scheduler`: its API, and the pod as created.
async fn started_with_pod(name: &str, scheduler: &str) -> (Sim, Api<Pod>, Pod) {
    let sim = start().await;
    let client = sim.client().await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client, "default");
    let created = pods
        .create(&PostParams::default(), &pod(name, scheduler))
        .await
        .unwrap();
    (sim, pods, created)
}

/// What kubectl says when the server refuses the body of `file` posted to `url`.
async fn refused(sim: &Sim, url: &str, file: &std::path::Path) -> String {
    let args = ["create", "--raw", url, "-f", file.to_str().unwrap()];
    let out = kubectl_at(sim.kubeconfig_path(), &args).await;
    assert!(!out.status.success(), "{args:?} was accepted");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_binding_posted_with_kubectl_binds_a_pod_of_another_scheduler_once() {
    let (sim, pods, created) = started_with_pod("p", "elsewhere").await;
    let uid = created.metadata.uid.clone().unwrap();
    let url = "/api/v1/namespaces/default/pods/p/binding";
    let binding = |target: Value| {
        manifest(
            &json!({"apiVersion": "v1", "kind": "Binding",
                "metadata": {"name": "p", "uid": uid, "annotations": {"bound-by": "test"}},
                "target": target})
            .to_string(),
        )
    };

    let (_d, wrong_kind) = binding(json!({"kind": "Pod", "name": kube_sim::NODE_NAME}));
    let stderr = refused(&sim, url, &wrong_kind).await;
    assert!(stderr.contains("target.kind"), "{stderr}");
    let unbound = pods.get("p").await.unwrap();
    assert_eq!(unbound.spec.unwrap().node_name, None);

    let (_d, to_node) = binding(json!({"kind": "Node", "name": kube_sim::NODE_NAME}));
    let answer = kubectl_ok(
        &sim,
        &["create", "--raw", url, "-f", to_node.to_str().unwrap()],
    )
    .await;
    let status: Value = serde_json::from_str(&answer).unwrap();
    assert_eq!(
        (&status["kind"], &status["status"], &status["code"]),
        (&json!("Status"), &json!("Success"), &json!(201))
    );
    let bound = pods.get("p").await.unwrap();
    let annotations = bound.metadata.annotations.clone().unwrap_or_default();
    assert_eq!(
        annotations.get("bound-by").map(String::as_str),
        Some("test")
    );
    assert_eq!(pod_scheduled(&bound).as_deref(), Some("True"));
    let (managers, owns_node) = owners(&bound);
    assert_eq!(owners(&created).0, managers, "a binding records no manager");
    assert!(!owns_node, "{managers:?}");
    assert_eq!(
        bound.spec.unwrap().node_name.as_deref(),
        Some(kube_sim::NODE_NAME)
    );

    let stderr = refused(&sim, url, &to_node).await;
    let expected = format!(
        "Operation cannot be fulfilled on pods/binding \"p\": pod p is already assigned to node \"{}\"",
        kube_sim::NODE_NAME
    );
    assert!(stderr.contains(&expected), "{stderr}");
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scheduler_binds_in_one_change_that_no_manager_owns() {
    let (sim, pods, created) = started_with_pod("q", "default-scheduler").await;
    let version = created.metadata.resource_version.clone().unwrap();
    let params = WatchParams::default().fields("metadata.name=q");
    let mut changes = pods.watch(&params, &version).await.unwrap().boxed();
    let first = tokio::time::timeout(DEADLINE, changes.try_next())
        .await
        .expect("a change within the deadline")
        .unwrap()
        .expect("the watch goes on");
    let WatchEvent::Modified(changed) = first else {
        panic!("the first change is a modification: {first:?}");
    };
    assert_eq!(
        changed.spec.as_ref().unwrap().node_name.as_deref(),
        Some(kube_sim::NODE_NAME)
    );
    assert_eq!(pod_scheduled(&changed).as_deref(), Some("True"));
    let (managers, owns_node) = owners(&changed);
    assert!(
        !managers.iter().any(|m| m == "kube-scheduler"),
        "{managers:?}"
    );
    assert!(!owns_node, "{managers:?}");
    sim.shutdown().await;
}
