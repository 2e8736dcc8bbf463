//! The kubelet stand-in against a real registry: image IDs carry the pushed manifest digest, names are
//! normalised like containerd's, missing images back off, crashing ones loop with their image ID set
//! (pitfall 5 of the semantics reference).

use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::PostParams;
use kube_sim::GroupResource;
use kube_sim::store::Store;
use serde_json::{Value, json};

use crate::oci::{MIRROR_NAME, Registry};
use crate::rollout::{applied, until, watch};
use crate::{DEADLINE, kubectl_ok};

fn pod(name: &str, image: &str) -> Pod {
    serde_json::from_value(json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": {"test": name}},
        "spec": {"containers": [{"name": "app", "image": image}]}}))
    .expect("a pod")
}

pub(crate) fn status(p: &Value) -> &Value {
    &p["status"]["containerStatuses"][0]
}

pub(crate) fn waiting(p: &Value) -> Option<&str> {
    status(p).pointer("/state/waiting/reason")?.as_str()
}

fn ready(p: &Value) -> bool {
    p["status"]["conditions"].as_array().is_some_and(|cs| {
        cs.iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True")
    })
}

/// Creates pods through kube-rs and returns every version of each until `done` holds for all of them.
pub(crate) async fn run_pods(
    sim: &kube_sim::Sim,
    pods: &[(&str, String)],
    done: impl Fn(&Value) -> bool,
) -> Vec<Vec<Value>> {
    let store: Store = sim.store().clone();
    let mut w = watch(&store, &GroupResource::pods(), None);
    let api: Api<Pod> = Api::namespaced(sim.client().await.unwrap(), "default");
    for (name, image) in pods {
        api.create(&PostParams::default(), &pod(name, image))
            .await
            .unwrap();
    }
    let names: Vec<&str> = pods.iter().map(|(n, _)| *n).collect();
    let mut seen: Vec<Vec<Value>> = vec![Vec::new(); pods.len()];
    until(&mut w, DEADLINE, "the pods to reach their state", |e| {
        if let Some(p) = applied(e)
            && let Some(i) = names.iter().position(|n| p["metadata"]["name"] == *n)
        {
            seen[i].push(p.clone());
        }
        seen.iter()
            .all(|versions| versions.last().is_some_and(&done))
            .then_some(())
    })
    .await;
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn image_id_is_the_pushed_digest_through_a_mirror_and_through_localhost() {
    let registry = Registry::start().await;
    let digest = registry.push("app", "v1", &[]).await;
    let sim = registry.sim(|_| {}).await;
    let local = format!("localhost:{}/app:v1", registry.port);
    let pinned = format!("{MIRROR_NAME}/app:ignored@{digest}");
    let seen = run_pods(
        &sim,
        &[
            ("mirrored", format!("{MIRROR_NAME}/app:v1")),
            ("local", local.clone()),
            ("pinned", pinned),
        ],
        ready,
    )
    .await;
    let last = |i: usize| seen[i].last().unwrap();
    assert_eq!(
        status(last(0))["imageID"],
        format!("{MIRROR_NAME}/app@{digest}")
    );
    assert_eq!(status(last(0))["image"], format!("{MIRROR_NAME}/app:v1"));
    assert_eq!(
        status(last(1))["imageID"],
        format!("localhost:{}/app@{digest}", registry.port)
    );
    assert_eq!(
        status(last(2))["imageID"],
        format!("{MIRROR_NAME}/app@{digest}"),
        "a pinned digest is kept and the tag dropped"
    );
    for versions in &seen {
        let p = versions.last().unwrap();
        assert_eq!(p["status"]["phase"], "Running");
        assert!(
            status(p)["containerID"]
                .as_str()
                .is_some_and(|id| id.starts_with("containerd://"))
        );
        assert_eq!(status(p)["started"], true);
        assert!(status(p).pointer("/state/running/startedAt").is_some());
    }
    let logs = kubectl_ok(&sim, &["logs", "mirrored"]).await;
    assert!(
        logs.trim_end().ends_with(&format!(
            "kube-sim: started container app image {MIRROR_NAME}/app:v1"
        )),
        "{logs}"
    );
}

/// Runs one pod until `ImagePullBackOff`; returns the states it went through and the first `ErrImagePull` one.
async fn until_back_off(sim: &kube_sim::Sim, name: &str, image: String) -> (Vec<Value>, Value) {
    let states = run_pods(sim, &[(name, image)], |p| {
        waiting(p) == Some("ImagePullBackOff")
    })
    .await
    .remove(0);
    let err = states
        .iter()
        .find(|p| waiting(p) == Some("ErrImagePull"))
        .expect("ErrImagePull shows before the back-off")
        .clone();
    (states, err)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_image_reaches_image_pull_back_off() {
    let registry = Registry::start().await;
    let sim = registry.sim(|_| {}).await;
    let (states, err) =
        until_back_off(&sim, "missing", format!("{MIRROR_NAME}/nothing-here:v1")).await;
    let message = status(&err)["state"]["waiting"]["message"]
        .as_str()
        .unwrap();
    assert!(
        message.contains("not found") && message.contains("nothing-here"),
        "{message}"
    );
    let last = states.last().unwrap();
    assert_eq!(last["status"]["phase"], "Pending");
    assert_eq!(status(last)["imageID"], "");
    // Since Kubernetes 1.32 the back-off message carries the last pull error.
    assert_eq!(
        status(last)["state"]["waiting"]["message"],
        format!(
            "Back-off pulling image \"{MIRROR_NAME}/nothing-here:v1\": ErrImagePull: {message}"
        )
    );
    let events = sim
        .store()
        .list(
            &GroupResource::events(),
            Some("default"),
            &kube_sim::store::ListOptions {
                field_selector: Some("involvedObject.name=missing".into()),
                ..Default::default()
            },
        )
        .unwrap()
        .items;
    let said = |reason: &str, prefix: &str| {
        events.iter().any(|e| {
            e["reason"] == reason
                && e["message"].as_str().is_some_and(|m| m.starts_with(prefix))
                && e["source"]["component"] == "kubelet"
        })
    };
    assert!(
        said(
            "Failed",
            &format!("Failed to pull image \"{MIRROR_NAME}/nothing-here:v1\"")
        ),
        "{events:?}"
    );
    assert!(said("Failed", "Error: ErrImagePull"), "{events:?}");
    assert!(said("BackOff", "Back-off pulling image"), "{events:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_registry_is_an_image_pull_error() {
    let registry = Registry::start().await;
    let sim = registry.sim(|_| {}).await;
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let (_, err) = until_back_off(&sim, "unreachable", format!("127.0.0.1:{closed}/x:v1")).await;
    assert!(
        status(&err)["state"]["waiting"]["message"]
            .as_str()
            .unwrap()
            .contains("connection refused")
    );
}

/// Pitfall 5: `imageID` is normalised, empty before the container exists, and set during CrashLoopBackOff.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pitfall_5_image_id_is_normalised_empty_before_start_and_set_in_crash_loop() {
    let registry = Registry::start().await;
    let web = registry.push("library/web", "v1", &[]).await;
    let crashy = registry
        .push("library/crashy", "v1", &[("dev-env.sim/crash", "true")])
        .await;
    let sim = registry.sim(|_| {}).await;
    let seen = run_pods(
        &sim,
        &[("web", "web:v1".into()), ("crashy", "crashy:v1".into())],
        |p| match p["metadata"]["name"].as_str() {
            Some("crashy") => {
                waiting(p) == Some("CrashLoopBackOff")
                    && status(p)["restartCount"].as_i64() >= Some(2)
            }
            _ => ready(p),
        },
    )
    .await;
    let creating = seen[0]
        .iter()
        .find(|p| waiting(p) == Some("ContainerCreating"))
        .expect("ContainerCreating is visible");
    assert_eq!(status(creating)["imageID"], "");
    assert_eq!(status(creating)["image"], "web:v1");
    let running = seen[0].last().unwrap();
    assert_eq!(
        status(running)["imageID"],
        format!("docker.io/library/web@{web}"),
        "not the spec string"
    );
    assert_eq!(status(running)["image"], "docker.io/library/web:v1");

    let looping = seen[1].last().unwrap();
    let c = status(looping);
    assert_eq!(c["imageID"], format!("docker.io/library/crashy@{crashy}"));
    assert_eq!(c["ready"], false);
    assert_eq!(c["lastState"]["terminated"]["exitCode"], 1);
    assert!(c["containerID"].is_string());
    assert_eq!(looping["status"]["phase"], "Running");
    assert!(
        seen[1]
            .iter()
            .any(|p| waiting(p) == Some("ContainerCreating") && status(p)["imageID"] == ""),
        "the crashing container also started without an image ID"
    );
    // One log line per container start; `tailLines` keeps the last.
    let all = kubectl_ok(&sim, &["logs", "crashy"]).await;
    assert!(all.lines().count() >= 2, "{all}");
    let last = kubectl_ok(&sim, &["logs", "crashy", "--tail=1"]).await;
    assert_eq!(last.lines().count(), 1, "{last}");
    assert_eq!(last.lines().next(), all.lines().last());
}
