//! Probes against containers on the real engine: what they gate (readiness), what they restart
//! (liveness), and the Events a failed probe leaves, read back with kubectl as a user reads them.

use std::time::Duration;

use kube_sim::GroupResource;
use serde_json::{Value, json};

use crate::docker_kubelet::{DEADLINE, Fixture, container_status, create_pod, ready};
use crate::kubectl_ok;
use crate::rollout::{applied, until, watch};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_liveness_probe_restarts_the_container() {
    let fx = Fixture::start().await;
    let sim = fx.sim().await;
    let mut pods = watch(&sim.store().clone(), &GroupResource::pods(), None);
    // The port answers (readiness passes) but `/healthz` never does (liveness fails, after a delay that
    // leaves the readiness probe time to pass first).
    create_pod(
        &sim,
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "unhealthy", "namespace": "default"},
            "spec": {"containers": [{"name": "app", "image": fx.image("demo/app"),
                "env": [{"name": "READY_AFTER_MS", "value": "3600000"}],
                "readinessProbe": {"tcpSocket": {"port": 8080}, "periodSeconds": 1},
                "livenessProbe": {"httpGet": {"path": "/healthz", "port": 8080}, "initialDelaySeconds": 3, "periodSeconds": 1, "failureThreshold": 2}}]}}),
    )
    .await;
    let mut was_ready = false;
    let last = until(
        &mut pods,
        DEADLINE,
        "a restart after failed liveness probes",
        |e| {
            let p = applied(e)?;
            was_ready |= ready(p);
            (container_status(p)["restartCount"].as_i64()? >= 1).then(|| p.clone())
        },
    )
    .await;
    assert!(
        was_ready,
        "the tcpSocket readiness probe passed before the kill"
    );
    let terminated = &container_status(&last)["lastState"]["terminated"];
    assert_eq!(terminated["exitCode"], 137, "killed: {terminated}");
    sim.shutdown().await;
    fx.until_no_containers("after shutdown").await;
}

/// The Events of `pod` in `default` whose reason is `reason`, as kubectl lists them.
async fn events_of(sim: &kube_sim::Sim, pod: &str, reason: &str) -> Vec<Value> {
    let selector = format!("involvedObject.name={pod},reason={reason}");
    let listed = kubectl_ok(
        sim,
        &[
            "get",
            "events",
            "-n",
            "default",
            "--field-selector",
            &selector,
            "-o",
            "json",
        ],
    )
    .await;
    let listed: Value = serde_json::from_str(&listed).expect("kubectl prints JSON");
    listed["items"].as_array().cloned().unwrap_or_default()
}

/// Waits until `pod` has an Event `reason` whose message satisfies `wanted`, and returns it.
async fn until_event(
    sim: &kube_sim::Sim,
    pod: &str,
    reason: &str,
    wanted: impl Fn(&str) -> bool,
) -> Value {
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        let events = events_of(sim, pod, reason).await;
        if let Some(e) = events
            .iter()
            .find(|e| e["message"].as_str().is_some_and(&wanted))
        {
            return e.clone();
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no {reason} Event of {pod} as wanted within {DEADLINE:?}; seen: {events:#?}"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_probe_is_an_unhealthy_event_worded_as_the_kubelet_words_it() {
    let fx = Fixture::start().await;
    let sim = fx.sim().await;
    let image = fx.image("demo/app");
    // `/healthz` answers 503 for an hour; the exec probe prints to stderr and exits 7; nothing
    // listens on 9090, so the liveness probe is refused.
    create_pod(
        &sim,
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "starting", "namespace": "default"},
            "spec": {"containers": [{"name": "app", "image": image,
                "env": [{"name": "READY_AFTER_MS", "value": "3600000"}],
                "readinessProbe": {"httpGet": {"path": "/healthz", "port": 8080}, "periodSeconds": 1}}]}}),
    )
    .await;
    create_pod(
        &sim,
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "refused", "namespace": "default"},
            "spec": {"containers": [{"name": "app", "image": image,
                "readinessProbe": {"exec": {"command": ["/app", "fail", "7"]}, "periodSeconds": 1},
                "livenessProbe": {"tcpSocket": {"port": 9090}, "periodSeconds": 1, "failureThreshold": 2}}]}}),
    )
    .await;

    let http = until_event(&sim, "starting", "Unhealthy", |m| {
        m == "Readiness probe failed: HTTP probe failed with statuscode: 503"
    })
    .await;
    assert_eq!(http["type"], "Warning");
    assert_eq!(http["source"]["component"], "kubelet");
    assert_eq!(http["involvedObject"]["kind"], "Pod");
    assert_eq!(http["involvedObject"]["fieldPath"], "spec.containers{app}");
    // Repeats of one failure are one Event with a count, as the kubelet's recorder aggregates them.
    // The first probe may run before the app listens, so a refused connection can be a second,
    // different Event: count only the 503's.
    let is_503 = |e: &&Value| e["message"] == http["message"];
    let again = tokio::time::Instant::now() + DEADLINE;
    let mut count = http["count"].as_i64().unwrap_or(0);
    while count < 2 && tokio::time::Instant::now() < again {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let events = events_of(&sim, "starting", "Unhealthy").await;
        count = events
            .iter()
            .find(is_503)
            .map_or(0, |e| e["count"].as_i64().unwrap_or(0));
    }
    assert!(
        count >= 2,
        "the repeated failure is counted on one Event: {count}"
    );
    let events = events_of(&sim, "starting", "Unhealthy").await;
    assert_eq!(
        events.iter().filter(is_503).count(),
        1,
        "one Event for one failure: {events:#?}"
    );

    let exec = until_event(&sim, "refused", "Unhealthy", |m| m.starts_with("Readiness")).await;
    assert_eq!(
        exec["message"], "Readiness probe failed: failing with 7\n",
        "an exec probe's output is what the command printed"
    );
    let pod: Value = serde_json::from_str(
        &kubectl_ok(
            &sim,
            &["get", "pod", "refused", "-n", "default", "-o", "json"],
        )
        .await,
    )
    .expect("kubectl prints JSON");
    let ip = pod["status"]["podIP"].as_str().expect("the pod has an IP");
    let refused = format!("Liveness probe failed: dial tcp {ip}:9090: connect: connection refused");
    until_event(&sim, "refused", "Unhealthy", |m| m == refused).await;
    let killing = until_event(&sim, "refused", "Killing", |_| true).await;
    assert_eq!(killing["type"], "Normal");
    assert_eq!(
        killing["message"],
        "Container app failed liveness probe, will be restarted"
    );
    sim.shutdown().await;
    fx.until_no_containers("after shutdown").await;
}

/// A startup probe holds a container's other probes until it passes: the container runs but is neither
/// started nor ready, although its readiness probe (a bare port check) would pass; once `/healthz`
/// answers, it is started and then ready. A startup probe that keeps failing kills the container, which
/// never becomes ready in between.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_startup_probe_holds_the_other_probes_until_it_passes_and_restarts_on_failure() {
    let fx = Fixture::start().await;
    let sim = fx.sim().await;
    let mut pods = watch(&sim.store().clone(), &GroupResource::pods(), None);
    let pod = |name: &str, ready_after_ms: &str, failures: u32| {
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
            "spec": {"containers": [{"name": "app", "image": fx.image("demo/app"),
                "env": [{"name": "READY_AFTER_MS", "value": ready_after_ms}],
                "startupProbe": {"httpGet": {"path": "/healthz", "port": 8080}, "periodSeconds": 1, "failureThreshold": failures},
                "readinessProbe": {"tcpSocket": {"port": 8080}, "periodSeconds": 1}}]}})
    };
    create_pod(&sim, pod("slow", "2500", 30)).await;
    create_pod(&sim, pod("stuck", "3600000", 2)).await;

    let (mut held, mut stuck_ready) = (false, false);
    let (mut slow_ready, mut stuck_restarted) = (false, false);
    until(&mut pods, DEADLINE, "slow Ready and stuck restarted", |e| {
        let p = applied(e)?;
        let c = container_status(p);
        let running = c.pointer("/state/running").is_some();
        match p["metadata"]["name"].as_str()? {
            "slow" => {
                held |= running && c["started"] == false && !ready(p);
                assert!(
                    !ready(p) || c["started"] == true,
                    "ready before started: {p:#}"
                );
                slow_ready |= ready(p);
            }
            _ => {
                stuck_ready |= ready(p);
                stuck_restarted |= c["restartCount"].as_i64().unwrap_or(0) >= 1;
            }
        }
        (slow_ready && stuck_restarted).then_some(())
    })
    .await;
    assert!(
        held,
        "slow ran, neither started nor ready, while /healthz answered 503"
    );
    assert!(
        !stuck_ready,
        "the readiness probe does not run before the startup probe passes"
    );
    until_event(&sim, "slow", "Unhealthy", |m| {
        m == "Startup probe failed: HTTP probe failed with statuscode: 503"
    })
    .await;
    let killing = until_event(&sim, "stuck", "Killing", |_| true).await;
    assert_eq!(
        killing["message"],
        "Container app failed startup probe, will be restarted"
    );
    sim.shutdown().await;
    fx.until_no_containers("after shutdown").await;
}

/// A deleted pod's liveness and startup probes stop, as the kubelet's workers do for a quiet shutdown:
/// a container draining in its `preStop` hook is not killed by a probe that keeps failing meanwhile,
/// where the same probe kills the container of a pod that is not deleted. Each deleted container is
/// `Killing` with "Stopping container app", as the kubelet words a stop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_pods_liveness_and_startup_probes_stop_while_it_drains() {
    let fx = Fixture::start().await;
    let sim = fx.sim().await;
    let mut pods = watch(&sim.store().clone(), &GroupResource::pods(), None);
    // Nothing listens on 9090: the probe fails from the container's start and kills it at its fifth
    // failure, about 4 s in, well inside the 6 s preStop sleep of a pod deleted once it runs.
    let pod = |name: &str, probe: &str| {
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
            "spec": {"terminationGracePeriodSeconds": 8, "containers": [{"name": "app", "image": fx.image("demo/app"),
                probe: {"tcpSocket": {"port": 9090}, "periodSeconds": 1, "failureThreshold": 5},
                "lifecycle": {"preStop": {"sleep": {"seconds": 6}}}}]}})
    };
    create_pod(&sim, pod("kept", "livenessProbe")).await;
    create_pod(&sim, pod("live", "livenessProbe")).await;
    create_pod(&sim, pod("start", "startupProbe")).await;
    let mut running = std::collections::BTreeSet::new();
    until(&mut pods, DEADLINE, "live and start running", |e| {
        let p = applied(e)?;
        let name = p["metadata"]["name"].as_str()?;
        if name != "kept" && container_status(p).pointer("/state/running").is_some() {
            running.insert(name.to_string());
        }
        (running.len() == 2).then_some(())
    })
    .await;
    kubectl_ok(
        &sim,
        &[
            "delete",
            "pod",
            "live",
            "start",
            "-n",
            "default",
            "--wait=false",
        ],
    )
    .await;
    let mut gone = std::collections::BTreeSet::new();
    until(&mut pods, DEADLINE, "live and start gone", |e| {
        if let kube_sim::store::WatchEvent::Deleted(p) = e {
            gone.insert(p["metadata"]["name"].as_str()?.to_string());
        }
        (gone.len() == 2).then_some(())
    })
    .await;

    let kept = until_event(&sim, "kept", "Killing", |_| true).await;
    assert_eq!(
        kept["message"], "Container app failed liveness probe, will be restarted",
        "the probe kills a container whose pod is not deleted"
    );
    for name in ["live", "start"] {
        let killed = events_of(&sim, name, "Killing").await;
        let messages: Vec<_> = killed.iter().map(|e| e["message"].clone()).collect();
        assert_eq!(
            messages,
            [json!("Stopping container app")],
            "{name} was stopped for its deletion, and no probe killed it while it drained"
        );
    }
    sim.shutdown().await;
    fx.until_no_containers("after shutdown").await;
}
