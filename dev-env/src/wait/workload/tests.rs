use std::sync::Arc;

use serde_json::json;

use super::*;

const DIGEST: &str = "sha256:1111111111111111111111111111111111111111111111111111111111111111";
const OLD: &str = "sha256:0000000000000000000000000000000000000000000000000000000000000000";

fn want(digest: Option<&str>) -> Want {
    Want {
        namespace: String::from("demo"),
        deployment: String::from("web"),
        container: String::from("app"),
        digest: digest.map(str::to_string),
    }
}

fn deployment(
    generation: i64,
    observed: i64,
    counts: (i32, i32, i32),
    progressing: &str,
) -> Deployment {
    let (replicas, updated, available) = counts;
    serde_json::from_value(json!({
        "metadata": {"name": "web", "namespace": "demo", "uid": "d1", "generation": generation,
                     "annotations": {"deployment.kubernetes.io/revision": "2"}},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}}, "template": {}},
        "status": {"observedGeneration": observed, "replicas": replicas, "updatedReplicas": updated,
                   "availableReplicas": available,
                   "conditions": [{"type": "Progressing", "status": "True", "reason": progressing, "message": "m"}]}
    }))
    .unwrap()
}

fn replica_set(name: &str, revision: &str, hash: &str) -> Arc<ReplicaSet> {
    Arc::new(
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "demo", "labels": {"pod-template-hash": hash},
                         "annotations": {"deployment.kubernetes.io/revision": revision},
                         "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web",
                                              "uid": "d1", "controller": true}]},
        }))
        .unwrap(),
    )
}

fn pod(name: &str, hash: &str, ready: bool, image_id: &str, terminating: bool) -> Arc<Pod> {
    let mut pod = json!({
        "metadata": {"name": name, "namespace": "demo", "labels": {"app": "web", "pod-template-hash": hash}},
        "status": {
            "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" },
                            "lastTransitionTime": "2026-11-29T15:00:00Z"}],
            "containerStatuses": [{"name": "app", "image": "x", "imageID": image_id, "ready": ready,
                                   "restartCount": 0, "state": {"running": {}}}]
        }
    });
    if terminating {
        pod["metadata"]["deletionTimestamp"] = json!("2026-11-29T15:00:00Z");
    }
    Arc::new(serde_json::from_value(pod).unwrap())
}

fn image(digest: &str) -> String {
    format!("reg:5000/demo/web@{digest}")
}

#[test]
fn unobserved_generation_is_pending_even_when_counts_look_complete() {
    let rs = [replica_set("web-new", "2", "new")];
    let pods = [
        pod("a", "new", true, &image(DIGEST), false),
        pod("b", "new", true, &image(DIGEST), false),
    ];
    let verdict = evaluate(
        &deployment(3, 2, (2, 2, 2), "NewReplicaSetAvailable"),
        &rs,
        &pods,
        &want(Some(DIGEST)),
    );
    assert!(
        matches!(&verdict, Verdict::Pending(m) if m.contains("spec update to be observed")),
        "{verdict}"
    );
}

#[test]
fn old_replicas_pending_termination_keep_it_waiting() {
    let rs = [replica_set("web-new", "2", "new")];
    let pods = [
        pod("a", "new", true, &image(DIGEST), false),
        pod("b", "new", true, &image(DIGEST), false),
    ];
    let verdict = evaluate(
        &deployment(2, 2, (3, 2, 2), "ReplicaSetUpdated"),
        &rs,
        &pods,
        &want(Some(DIGEST)),
    );
    assert!(
        matches!(&verdict, Verdict::Pending(m) if m.contains("1 old replicas are pending termination")),
        "{verdict}"
    );
}

#[test]
fn done_needs_every_ready_new_pod_on_the_digest_and_no_old_pod_left() {
    let rs = [
        replica_set("web-old", "1", "old"),
        replica_set("web-new", "2", "new"),
    ];
    let mut pods = vec![
        pod("a", "new", true, &image(DIGEST), false),
        pod("b", "new", true, &image(OLD), false),
        // A terminating old pod may still be Ready with the old image.
        pod("c", "old", true, &image(OLD), true),
    ];
    let deploy = deployment(2, 2, (2, 2, 2), "NewReplicaSetAvailable");
    let verdict = evaluate(&deploy, &rs, &pods, &want(Some(DIGEST)));
    assert!(
        matches!(&verdict, Verdict::Pending(m) if m.contains("b: runs reg:5000/demo/web@sha256:0000")),
        "{verdict}"
    );

    pods[1] = pod(
        "b",
        "new",
        true,
        &format!("docker.io/library/web@{DIGEST}"),
        false,
    );
    // Ready with the digest, but an old pod still runs: not yet.
    let verdict = evaluate(&deploy, &rs, &pods, &want(Some(DIGEST)));
    assert!(
        matches!(&verdict, Verdict::Pending(m) if m.contains("1 old pod(s) still terminating: c")),
        "{verdict}"
    );
    pods.pop();
    let verdict = evaluate(&deploy, &rs, &pods, &want(Some(DIGEST)));
    assert_eq!(
        verdict,
        Verdict::Done {
            pods: vec![String::from("a"), String::from("b")],
            last_ready: Some(String::from("2026-11-29T15:00:00Z"))
        }
    );
    // A restart waits for the rollout only.
    assert!(matches!(
        evaluate(&deploy, &rs, &pods, &want(None)),
        Verdict::Done { .. }
    ));
}

#[test]
fn a_fatal_waiting_reason_in_the_new_replica_set_fails_at_once() {
    let rs = [replica_set("web-new", "2", "new")];
    let mut failing: Pod = (*pod("a", "new", false, &image(DIGEST), false)).clone();
    failing
        .status
        .as_mut()
        .unwrap()
        .container_statuses
        .as_mut()
        .unwrap()[0]
        .state = Some(
        serde_json::from_value(
            json!({"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 10s"}}),
        )
        .unwrap(),
    );
    let verdict = evaluate(
        &deployment(2, 2, (2, 2, 0), "ReplicaSetUpdated"),
        &rs,
        &[Arc::new(failing)],
        &want(Some(DIGEST)),
    );
    assert_eq!(
        verdict,
        Verdict::PodFailed {
            pod: String::from("a"),
            container: String::from("app"),
            reason: String::from("CrashLoopBackOff"),
            message: String::from("back-off 10s"),
        }
    );
}

#[test]
fn progress_deadline_is_an_error() {
    let verdict = evaluate(
        &deployment(2, 2, (2, 1, 1), "ProgressDeadlineExceeded"),
        &[],
        &[],
        &want(None),
    );
    assert_eq!(verdict, Verdict::ProgressDeadline(String::from("m")));
}

#[test]
fn digest_is_compared_without_the_name() {
    assert_eq!(digest_of(&image(DIGEST)), Some(DIGEST));
    assert_eq!(digest_of(DIGEST), Some(DIGEST));
    assert_eq!(digest_of("reg:5000/demo/web:dev"), None);
}

#[test]
fn a_pool_converges_only_for_the_asked_generation() {
    let pool = |observed: i64, progressing: &str| {
        json!({"status": {"observedGeneration": observed, "conditions": [
            {"type": "Available", "status": "True", "message": "ok"},
            {"type": "Progressing", "status": progressing, "message": "rolling"}]}})
    };
    assert!(!pool_converged(&pool(3, "False"), 4).0);
    assert!(!pool_converged(&pool(4, "True"), 4).0);
    let (done, seen) = pool_converged(&pool(4, "False"), 4);
    assert!(done, "{seen}");
}

#[test]
fn a_pool_past_its_progress_deadline_is_reported() {
    let pool = json!({"status": {"conditions": [
        {"type": "Progressing", "status": "True", "reason": "ProgressDeadlineExceeded", "message": "too slow"}]}});
    assert_eq!(
        progress_deadline_exceeded(&pool),
        Some(String::from("too slow"))
    );
    assert_eq!(progress_deadline_exceeded(&json!({"status": {}})), None);
}
