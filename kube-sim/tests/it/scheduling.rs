//! The scheduler's verdicts through real clients: pods a node cannot take stay `Pending` with
//! `PodScheduled=False`/`Unschedulable` and a `FailedScheduling` event in the scheduler's words, and are
//! bound once the cause goes; nodes have the kubelet's `max-pods`; pods carry their QoS class and the
//! sandbox condition.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Event, Node, Pod};
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::runtime::wait::await_condition;
use serde_json::json;

use crate::{DEADLINE, kubectl_ok, start, start_with};

/// The `PodScheduled` condition's status, reason and message.
fn scheduled(pod: &Pod) -> Option<(String, Option<String>, Option<String>)> {
    let c = pod
        .status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "PodScheduled")?;
    Some((c.status.clone(), c.reason.clone(), c.message.clone()))
}

fn node_of(pod: &Pod) -> Option<String> {
    pod.spec
        .as_ref()?
        .node_name
        .clone()
        .filter(|n| !n.is_empty())
}

/// Waits until the pod satisfies `f`, returning it.
async fn pod_until(api: &Api<Pod>, name: &str, what: &str, f: impl Fn(&Pod) -> bool) -> Pod {
    tokio::time::timeout(
        DEADLINE,
        await_condition(api.clone(), name, move |p: Option<&Pod>| p.is_some_and(&f)),
    )
    .await
    .unwrap_or_else(|_| panic!("{name}: {what} within the deadline"))
    .expect("the watch works")
    .expect("the pod exists")
}

/// Waits until the pod is `Unschedulable`, returning the scheduler's message.
async fn unschedulable(api: &Api<Pod>, name: &str) -> String {
    let pod = pod_until(api, name, "Unschedulable", |p| {
        scheduled(p).is_some_and(|(s, r, _)| s == "False" && r.as_deref() == Some("Unschedulable"))
    })
    .await;
    assert_eq!(node_of(&pod), None);
    assert_eq!(
        pod.status.as_ref().unwrap().phase.as_deref(),
        Some("Pending")
    );
    scheduled(&pod).unwrap().2.expect("a message")
}

/// Waits until the pod is bound, returning its node.
async fn bound(api: &Api<Pod>, name: &str) -> String {
    let pod = pod_until(api, name, "bound", |p| {
        node_of(p).is_some() && scheduled(p).is_some_and(|(s, _, _)| s == "True")
    })
    .await;
    node_of(&pod).unwrap()
}

/// The `FailedScheduling` events about a pod.
async fn failed_scheduling(client: &kube::Client, pod: &str) -> Vec<Event> {
    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    let fields = format!("involvedObject.name={pod}");
    events
        .list(&ListParams::default().fields(&fields))
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("FailedScheduling"))
        .collect()
}

fn pod(name: &str, spec: serde_json::Value) -> Pod {
    serde_json::from_value(json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"}, "spec": spec}))
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_selector_no_node_matches_waits_until_the_node_is_relabelled() {
    let sim = start().await;
    let client = sim.client().await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let spec =
        json!({"nodeSelector": {"disk": "ssd"}, "containers": [{"name": "a", "image": "nginx"}]});
    pods.create(&PostParams::default(), &pod("picky", spec))
        .await
        .unwrap();
    let message = unschedulable(&pods, "picky").await;
    let expected = "0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector. preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling.";
    assert_eq!(message, expected);
    let events = failed_scheduling(&client, "picky").await;
    assert!(
        events.iter().any(
            |e| e.type_.as_deref() == Some("Warning") && e.message.as_deref() == Some(expected)
        ),
        "{events:?}"
    );

    kubectl_ok(&sim, &["label", "node", kube_sim::NODE_NAME, "disk=ssd"]).await;
    assert_eq!(bound(&pods, "picky").await, kube_sim::NODE_NAME);
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn required_node_affinity_is_honoured_like_a_selector() {
    let sim = start().await;
    let pods: Api<Pod> = Api::namespaced(sim.client().await.unwrap(), "default");
    let affinity = |op: &str| {
        json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": op, "values": [kube_sim::NODE_NAME]}]}]}}})
    };
    for (name, op) in [("near", "In"), ("far", "NotIn")] {
        let spec =
            json!({"affinity": affinity(op), "containers": [{"name": "a", "image": "nginx"}]});
        pods.create(&PostParams::default(), &pod(name, spec))
            .await
            .unwrap();
    }
    assert_eq!(bound(&pods, "near").await, kube_sim::NODE_NAME);
    assert!(
        unschedulable(&pods, "far")
            .await
            .contains("1 node(s) didn't match Pod's node affinity/selector")
    );
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_untolerated_taint_keeps_a_deployment_pending_until_it_is_removed() {
    let sim = start().await;
    let client = sim.client().await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    kubectl_ok(
        &sim,
        &[
            "taint",
            "node",
            kube_sim::NODE_NAME,
            "dedicated=db:NoSchedule",
        ],
    )
    .await;
    kubectl_ok(&sim, &["create", "deployment", "web", "--image=nginx"]).await;
    let name = tokio::time::timeout(DEADLINE, async {
        loop {
            let list = pods
                .list(&ListParams::default().labels("app=web"))
                .await
                .unwrap();
            if let Some(p) = list.items.first() {
                return p.metadata.name.clone().unwrap();
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("the Deployment makes a pod");
    let message = unschedulable(&pods, &name).await;
    assert_eq!(
        message,
        "0/1 nodes are available: 1 node(s) had untolerated taint {dedicated: db}. preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling."
    );
    let described = kubectl_ok(&sim, &["describe", "pod", &name]).await;
    assert!(described.contains("FailedScheduling"), "{described}");

    kubectl_ok(
        &sim,
        &[
            "taint",
            "node",
            kube_sim::NODE_NAME,
            "dedicated=db:NoSchedule-",
        ],
    )
    .await;
    assert_eq!(bound(&pods, &name).await, kube_sim::NODE_NAME);
    sim.shutdown().await;
}

/// A Deployment whose one pod requests `cpu`.
fn hungry(name: &str, replicas: i32, cpu: &str) -> Deployment {
    serde_json::from_value(json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": [
                {"name": "a", "image": "nginx", "resources": {"requests": {"cpu": cpu}}}]}}}}))
    .unwrap()
}

/// The only pod of a Deployment, once it exists.
async fn only_pod(pods: &Api<Pod>, app: &str) -> String {
    tokio::time::timeout(DEADLINE, async {
        loop {
            let list = pods
                .list(&ListParams::default().labels(&format!("app={app}")))
                .await
                .unwrap();
            if let [p] = list.items.as_slice() {
                return p.metadata.name.clone().unwrap();
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("one pod")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_beyond_the_free_cpu_wait_until_another_deployment_shrinks() {
    let sim = start().await;
    let client = sim.client().await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let deployments: Api<Deployment> = Api::namespaced(client, "default");
    deployments
        .create(&PostParams::default(), &hungry("big", 1, "1500m"))
        .await
        .unwrap();
    let big = only_pod(&pods, "big").await;
    bound(&pods, &big).await;
    deployments
        .create(&PostParams::default(), &hungry("late", 1, "1"))
        .await
        .unwrap();
    let late = only_pod(&pods, "late").await;
    assert_eq!(
        unschedulable(&pods, &late).await,
        "0/1 nodes are available: 1 Insufficient cpu. preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod."
    );

    deployments
        .patch(
            "big",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 0}})),
        )
        .await
        .unwrap();
    assert_eq!(bound(&pods, &late).await, kube_sim::NODE_NAME);
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_nodes_of_max_pods_each_hold_what_fits_and_no_more() {
    let sim = start_with({
        let mut c = kube_sim::Config::ephemeral();
        c.kubelet.nodes = 2;
        c.kubelet.max_pods = 3;
        c
    })
    .await;
    let client = sim.client().await.unwrap();
    let nodes: Api<Node> = Api::all(client.clone());
    let listed = nodes.list(&ListParams::default()).await.unwrap();
    let names: Vec<String> = listed
        .items
        .iter()
        .map(|n| n.metadata.name.clone().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            kube_sim::NODE_NAME.to_string(),
            format!("{}-1", kube_sim::NODE_NAME)
        ]
    );
    for n in &listed.items {
        let pods_capacity = &n.status.as_ref().unwrap().allocatable.as_ref().unwrap()["pods"];
        assert_eq!(pods_capacity.0, "3");
    }

    kubectl_ok(
        &sim,
        &[
            "create",
            "deployment",
            "many",
            "--image=nginx",
            "--replicas=7",
        ],
    )
    .await;
    let pods: Api<Pod> = Api::namespaced(client, "default");
    let settled = tokio::time::timeout(DEADLINE, async {
        loop {
            let list = pods
                .list(&ListParams::default().labels("app=many"))
                .await
                .unwrap();
            let waiting: Vec<&Pod> = list
                .items
                .iter()
                .filter(|p| {
                    scheduled(p).is_some_and(|(_, r, _)| r.as_deref() == Some("Unschedulable"))
                })
                .collect();
            let placed = list.items.iter().filter(|p| node_of(p).is_some()).count();
            if list.items.len() == 7 && placed == 6 && waiting.len() == 1 {
                return (
                    list.items.clone(),
                    scheduled(waiting[0]).unwrap().2.unwrap(),
                );
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    })
    .await;
    let (items, message) = settled.expect("six pods are bound and one waits");
    assert_eq!(
        message,
        "0/2 nodes are available: 2 Too many pods. preemption: 0/2 nodes are available: 2 No preemption victims found for incoming pod."
    );
    for node in &names {
        let on_node = items
            .iter()
            .filter(|p| node_of(p).as_ref() == Some(node))
            .count();
        assert_eq!(on_node, 3, "{node}");
    }
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_carry_their_qos_class_and_the_sandbox_condition() {
    let sim = start().await;
    let pods: Api<Pod> = Api::namespaced(sim.client().await.unwrap(), "default");
    let both = json!({"cpu": "250m", "memory": "64Mi"});
    let cases = [
        ("guaranteed", json!({"limits": both}), "Guaranteed"),
        (
            "burstable",
            json!({"requests": {"cpu": "100m"}}),
            "Burstable",
        ),
        ("besteffort", json!({}), "BestEffort"),
    ];
    for (name, resources, _) in &cases {
        let spec = json!({"containers": [{"name": "a", "image": "nginx", "resources": resources}]});
        pods.create(&PostParams::default(), &pod(name, spec))
            .await
            .unwrap();
    }
    for (name, _, class) in &cases {
        let p = pod_until(&pods, name, "PodReadyToStartContainers", |p| {
            p.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|cs| {
                    cs.iter()
                        .any(|c| c.type_ == "PodReadyToStartContainers" && c.status == "True")
                })
        })
        .await;
        assert_eq!(
            p.status.as_ref().unwrap().qos_class.as_deref(),
            Some(*class),
            "{name}"
        );
    }
    let guaranteed = pods.get("guaranteed").await.unwrap();
    let requests = guaranteed.spec.unwrap().containers[0]
        .resources
        .clone()
        .unwrap()
        .requests
        .unwrap();
    assert_eq!(
        requests["memory"].0, "64Mi",
        "requests are defaulted from limits"
    );
    sim.shutdown().await;
}
