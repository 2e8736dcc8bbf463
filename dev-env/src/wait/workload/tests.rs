use std::sync::Arc;

use serde_json::json;

use k8s_openapi::api::core::v1::Event;

use super::*;

const DIGEST: &str = "sha256:1111111111111111111111111111111111111111111111111111111111111111";
const OLD: &str = "sha256:0000000000000000000000000000000000000000000000000000000000000000";

fn want(digest: Option<&str>) -> Want {
    Want {
        namespace: String::from("demo"),
        deployment: String::from("web"),
        container: String::from("app"),
        digest: digest.map(str::to_string),
        ..Want::default()
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
fn a_deployment_older_than_the_patch_is_pending_however_complete_it_looks() {
    // A watch started before the patch may still hold the previous
    // rollout, complete and on the wanted digest (a restart keeps it).
    let rs = [replica_set("web-new", "2", "new")];
    let pods = vec![
        pod("a", "new", true, &image(DIGEST), false),
        pod("b", "new", true, &image(DIGEST), false),
    ];
    let deploy = deployment(2, 2, (2, 2, 2), "NewReplicaSetAvailable");
    let patched = Want {
        generation: 3,
        ..want(Some(DIGEST))
    };
    let verdict = evaluate(&deploy, &rs, &pods, &patched);
    assert!(
        matches!(&verdict, Verdict::Pending(m) if m.contains("generation 3 (seen 2)")),
        "{verdict}"
    );
    let seen = Want {
        generation: 2,
        ..want(Some(DIGEST))
    };
    assert!(matches!(
        evaluate(&deploy, &rs, &pods, &seen),
        Verdict::Done { .. }
    ));
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
    // Ready with the digest; the old pod is terminating, so it gets no
    // new traffic: done, and the old pod is named.
    let verdict = evaluate(&deploy, &rs, &pods, &want(Some(DIGEST)));
    assert_eq!(
        verdict,
        Verdict::Done {
            pods: vec![String::from("a"), String::from("b")],
            last_ready: Some(String::from("2026-11-29T15:00:00Z")),
            terminating: vec![String::from("c")],
        }
    );
    // Waiting for termination: not yet.
    let gone = Want {
        termination: Termination::Gone,
        ..want(Some(DIGEST))
    };
    let verdict = evaluate(&deploy, &rs, &pods, &gone);
    assert!(
        matches!(&verdict, Verdict::Pending(m) if m.contains("1 old pod(s) still terminating: c")),
        "{verdict}"
    );
    // An old pod Ready and not terminating still serves: not yet either way.
    pods[2] = pod("c", "old", true, &image(OLD), false);
    let verdict = evaluate(&deploy, &rs, &pods, &want(Some(DIGEST)));
    assert!(
        matches!(&verdict, Verdict::Pending(m) if m.contains("1 old pod(s) still Ready and not terminating: c")),
        "{verdict}"
    );
    pods.pop();
    let verdict = evaluate(&deploy, &rs, &pods, &gone);
    assert_eq!(
        verdict,
        Verdict::Done {
            pods: vec![String::from("a"), String::from("b")],
            last_ready: Some(String::from("2026-11-29T15:00:00Z")),
            terminating: Vec::new(),
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
    // Observed is enough to trust the Deployment, not to be done.
    assert!(pool_observed(&pool(4, "True"), 4).0);
    assert!(!pool_observed(&pool(3, "False"), 4).0);
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

fn unstarted_pod(name: &str, hash: &str, status: serde_json::Value) -> Arc<Pod> {
    Arc::new(
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "demo", "creationTimestamp": "2026-11-29T15:00:00Z",
                         "labels": {"app": "web", "pod-template-hash": hash}},
            "spec": {"nodeName": "node-0", "containers": [{"name": "app"}]},
            "status": status,
        }))
        .unwrap(),
    )
}

fn creating() -> serde_json::Value {
    json!({"phase": "Pending",
           "conditions": [{"type": "PodScheduled", "status": "True"},
                          {"type": "Ready", "status": "False", "reason": "ContainersNotReady",
                           "message": "containers with unready status: [app]"}],
           "containerStatuses": [{"name": "app", "image": "x", "imageID": "", "ready": false,
                                  "restartCount": 0, "state": {"waiting": {"reason": "ContainerCreating"}}}]})
}

#[test]
fn pods_stuck_creating_or_unscheduled_have_not_started_and_running_ones_have() {
    let stuck = not_started(&unstarted_pod("a", "new", creating())).expect("not started");
    assert_eq!(stuck.pod, "a");
    assert_eq!(
        stuck.state,
        "Pending, container app waiting in ContainerCreating"
    );
    assert_eq!(
        stuck.conditions,
        "PodScheduled=True, Ready=False (ContainersNotReady: containers with unready status: [app])"
    );
    assert_eq!(stuck.created, Some("2026-11-29T15:00:00Z".parse().unwrap()));

    let unscheduled = unstarted_pod(
        "b",
        "new",
        json!({"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
               "reason": "Unschedulable", "message": "0/1 nodes are available: 1 node(s) had untolerated taint"}]}),
    );
    assert_eq!(
        not_started(&unscheduled).unwrap().state,
        "Pending, not scheduled: Unschedulable: 0/1 nodes are available: 1 node(s) had untolerated taint"
    );
    assert_eq!(
        not_started(&unscheduled).unwrap().unschedulable.as_deref(),
        Some("0/1 nodes are available: 1 node(s) had untolerated taint")
    );
    assert_eq!(stuck.unschedulable, None);

    // Started, failing fast elsewhere, or running an init container: not
    // a start that hangs.
    assert_eq!(not_started(&pod("c", "new", false, "", false)), None);
    let mut pulling = creating();
    pulling["containerStatuses"][0]["state"] = json!({"waiting": {"reason": "ErrImagePull"}});
    assert_eq!(not_started(&unstarted_pod("d", "new", pulling)), None);
    let mut initializing = creating();
    initializing["containerStatuses"][0]["state"] =
        json!({"waiting": {"reason": "PodInitializing"}});
    initializing["initContainerStatuses"] = json!([{"name": "init", "image": "x", "imageID": "",
        "ready": false, "restartCount": 0, "state": {"running": {}}}]);
    assert_eq!(not_started(&unstarted_pod("e", "new", initializing)), None);
}

#[test]
fn only_pods_of_the_new_replica_set_are_judged_for_the_grace() {
    let rs = [
        replica_set("web-old", "1", "old"),
        replica_set("web-new", "2", "new"),
    ];
    let pods = [
        unstarted_pod("old-a", "old", creating()),
        unstarted_pod("new-a", "new", creating()),
        pod("new-b", "new", true, &image(DIGEST), false),
    ];
    let deploy = deployment(2, 2, (3, 2, 1), "ReplicaSetUpdated");
    let found: Vec<String> = unstarted(&deploy, &rs, &pods)
        .into_iter()
        .map(|u| u.pod)
        .collect();
    assert_eq!(found, vec![String::from("new-a")]);
}

#[test]
fn running_pods_of_the_new_replica_set_that_are_not_ready_are_the_unready_ones() {
    let rs = [
        replica_set("web-old", "1", "old"),
        replica_set("web-new", "2", "new"),
    ];
    let running = |name: &str, hash: &str, ready: bool, terminating: bool| {
        let mut pod = (*pod(name, hash, ready, &image(DIGEST), terminating)).clone();
        pod.status.as_mut().unwrap().phase = Some(String::from("Running"));
        Arc::new(pod)
    };
    let pods = [
        running("old-unready", "old", false, false),
        running("new-ready", "new", true, false),
        running("new-unready-b", "new", false, false),
        running("new-unready-a", "new", false, false),
        running("new-leaving", "new", false, true),
        unstarted_pod("new-creating", "new", creating()),
    ];
    let deploy = deployment(2, 2, (3, 1, 1), "ReplicaSetUpdated");
    assert_eq!(
        unready(&deploy, &rs, &pods),
        vec![String::from("new-unready-a"), String::from("new-unready-b")]
    );
}

#[test]
fn pending_time_runs_from_the_later_of_creation_and_first_sight() {
    let now: Timestamp = "2026-11-29T15:02:00Z".parse().unwrap();
    let created = Some("2026-11-29T15:00:00Z".parse().unwrap());
    let secs = Duration::from_secs;
    // Created two minutes ago, seen for five seconds: five seconds.
    assert_eq!(pending_for(created, now, secs(5)), secs(5));
    // Seen for longer than it exists (a cluster clock ahead): its age.
    let recent = Some("2026-11-29T15:01:58Z".parse().unwrap());
    assert_eq!(pending_for(recent, now, secs(30)), secs(2));
    // Created "in the future": not pending yet.
    let ahead = Some("2026-11-29T15:03:00Z".parse().unwrap());
    assert_eq!(pending_for(ahead, now, secs(30)), secs(0));
    assert_eq!(pending_for(None, now, secs(7)), secs(7));
}

#[test]
fn an_unschedulable_pod_is_overdue_after_its_shorter_grace() {
    let wall: Timestamp = "2026-11-29T16:00:00Z".parse().unwrap();
    let unscheduled = unstarted_pod(
        "b",
        "new",
        json!({"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
               "reason": "Unschedulable", "message": "0/1 nodes are available: 1 Too many pods."}]}),
    );
    let pods = || {
        vec![
            not_started(&unstarted_pod("a", "new", creating())).unwrap(),
            not_started(&unscheduled).unwrap(),
        ]
    };
    let grace_of = |u: &Unstarted| match u.unschedulable {
        Some(_) => Duration::from_secs(10),
        None => Duration::from_secs(60),
    };
    let t0 = Instant::now();
    let mut clock = pending::Clock::default();
    assert_eq!(clock.overdue(pods(), grace_of, t0, wall), None);
    let (pod, _) = clock
        .overdue(pods(), grace_of, t0 + Duration::from_secs(11), wall)
        .expect("the unschedulable pod is overdue");
    assert_eq!(pod.pod, "b");
}

#[test]
fn the_clock_reports_a_pod_only_once_it_was_pending_past_the_grace() {
    let grace = Duration::from_secs(60);
    let wall: Timestamp = "2026-11-29T16:00:00Z".parse().unwrap();
    let stuck = || vec![not_started(&unstarted_pod("a", "new", creating())).unwrap()];
    let t0 = Instant::now();
    let mut clock = pending::Clock::default();
    assert_eq!(clock.overdue(stuck(), |_| grace, t0, wall), None);
    assert_eq!(
        clock.overdue(stuck(), |_| grace, t0 + Duration::from_secs(59), wall),
        None
    );
    let (pod, pending) = clock
        .overdue(stuck(), |_| grace, t0 + Duration::from_secs(61), wall)
        .expect("overdue");
    assert_eq!((pod.pod.as_str(), pending), ("a", Duration::from_secs(61)));
    // A pod that started in between is forgotten: its time starts again.
    let t1 = t0 + Duration::from_secs(62);
    assert_eq!(clock.overdue(Vec::new(), |_| grace, t1, wall), None);
    assert_eq!(
        clock.overdue(stuck(), |_| grace, t1 + Duration::from_secs(1), wall),
        None
    );
}

#[test]
fn events_are_shown_oldest_first_with_type_reason_count_and_message() {
    let event = |reason: &str, at: &str, count: i32| -> Event {
        serde_json::from_value(json!({
            "metadata": {"name": reason, "namespace": "demo"},
            "involvedObject": {"kind": "Pod", "name": "a"},
            "type": "Warning", "reason": reason, "message": format!("{reason} happened"),
            "count": count, "lastTimestamp": at,
        }))
        .unwrap()
    };
    let shown = format_events(vec![
        event("FailedMount", "2026-11-29T15:00:05Z", 3),
        event("Scheduled", "2026-11-29T15:00:00Z", 1),
    ]);
    assert_eq!(
        shown,
        "events:\n  Warning Scheduled (x1): Scheduled happened\n  Warning FailedMount (x3): FailedMount happened"
    );
    assert_eq!(
        format_events(Vec::new()),
        "no events were recorded about it"
    );
}

fn status(code: u16, reason: &str, message: &str) -> Box<kube::core::Status> {
    kube::core::Status::failure(message, reason)
        .with_code(code)
        .boxed()
}

#[test]
fn watch_errors_that_waiting_cannot_fix_are_fatal_and_connection_errors_are_not() {
    use kube::runtime::watcher::Error as W;
    let forbidden = W::InitialListFailed(kube::Error::Api(status(
        403,
        "Forbidden",
        "pods is forbidden: User \"dev\" cannot list resource \"pods\"",
    )));
    assert_eq!(
        classify(&forbidden),
        Class::Fatal {
            code: 403,
            message: String::from(
                "pods is forbidden: User \"dev\" cannot list resource \"pods\" (403 Forbidden)"
            )
        }
    );
    for code in [400, 401, 404, 422] {
        assert!(
            matches!(classify(&W::WatchError(status(code, "R", "m"))), Class::Fatal { code: c, .. } if c == code),
            "{code}"
        );
    }
    assert_eq!(
        classify(&W::WatchError(status(410, "Expired", "too old"))),
        Class::Expired
    );
    for code in [429, 500, 503] {
        assert_eq!(
            classify(&W::WatchStartFailed(kube::Error::Api(status(
                code, "R", "m"
            )))),
            Class::Transient
        );
    }
    let refused = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
    assert_eq!(
        classify(&W::WatchFailed(kube::Error::Service(Box::new(refused)))),
        Class::Transient
    );
    assert!(matches!(
        classify(&W::NoResourceVersion),
        Class::Fatal { code: 0, .. }
    ));
}

#[test]
fn a_refused_watch_and_a_timeout_say_what_was_watched_and_why() {
    let err = Error::Watch {
        resource: String::from("Pods in demo (app=web)"),
        message: String::from("pods is forbidden (403 Forbidden)"),
        hint: hint(403),
        source: kube::runtime::watcher::Error::WatchError(status(403, "Forbidden", "m")),
    };
    assert_eq!(
        err.to_string(),
        "watching Pods in demo (app=web): pods is forbidden (403 Forbidden); the kubeconfig's user may not list and watch it; grant `list` and `watch` on it"
    );
    let timeout = Error::Timeout {
        what: String::from("deployment demo/web"),
        timeout: Duration::from_secs(5),
        last: String::from("web: 0 out of 2 new replicas have been updated"),
        last_error: Some(String::from(
            "watching Pods in demo: client error (Connect)",
        )),
    };
    assert_eq!(
        timeout.to_string(),
        "timed out after 5s waiting for deployment demo/web; last observed:\nweb: 0 out of 2 new replicas have been updated\nlast watch error: watching Pods in demo: client error (Connect)\nwhen it is only slow, give it longer with `--timeout`; `cargo xtask dev logs <component>` shows what the pods say"
    );
}
