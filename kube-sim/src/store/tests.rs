use serde_json::json;

use super::*;

fn store() -> Store {
    Store::new(StoreConfig { history: 1000 })
}

fn deployment(name: &str) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "labels": {"app": name}},
        "spec": {"selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": [{"name": "app", "image": "nginx:1"}]}}}})
}

fn deploy() -> GroupResource {
    GroupResource::deployments()
}

#[test]
fn stale_update_is_a_conflict_with_the_kubernetes_message() {
    let s = store();
    let created = s
        .create(
            &deploy(),
            Some("default"),
            deployment("web"),
            &WriteOptions::manager("t"),
        )
        .unwrap();
    let mut first = created.clone();
    first["spec"]["replicas"] = json!(3);
    s.update(
        &deploy(),
        Some("default"),
        first,
        &WriteOptions::manager("t"),
    )
    .unwrap();
    let mut stale = created;
    stale["spec"]["replicas"] = json!(5);
    let err = s
        .update(
            &deploy(),
            Some("default"),
            stale,
            &WriteOptions::manager("t"),
        )
        .unwrap_err();
    assert_eq!(err.code(), 409);
    assert_eq!(
        err.to_string(),
        "Operation cannot be fulfilled on deployments.apps \"web\": the object has been modified; please apply your changes to the latest version and try again"
    );
}

#[test]
fn no_op_write_keeps_the_resource_version_and_emits_nothing() {
    let s = store();
    let created = s
        .create(
            &deploy(),
            Some("default"),
            deployment("web"),
            &WriteOptions::manager("t"),
        )
        .unwrap();
    let rv = s.current_resource_version();
    let same = s
        .patch(
            &deploy(),
            Some("default"),
            "web",
            None,
            &Patch::Merge(json!({"spec": {"replicas": 1}})),
            &PatchOptions::default(),
        )
        .unwrap();
    assert_eq!(
        same["metadata"]["resourceVersion"],
        created["metadata"]["resourceVersion"]
    );
    assert_eq!(s.current_resource_version(), rv);
}

#[test]
fn deployment_generation_follows_spec_and_annotations_but_not_labels_or_status() {
    let s = store();
    let ns = Some("default");
    s.create(
        &deploy(),
        ns,
        deployment("web"),
        &WriteOptions::manager("t"),
    )
    .unwrap();
    let generation = |s: &Store| {
        s.get(&deploy(), ns, "web").unwrap()["metadata"]["generation"]
            .as_i64()
            .unwrap()
    };
    assert_eq!(generation(&s), 1);
    let opts = PatchOptions::default();
    s.patch(
        &deploy(),
        ns,
        "web",
        None,
        &Patch::Merge(json!({"metadata": {"labels": {"x": "y"}}})),
        &opts,
    )
    .unwrap();
    assert_eq!(generation(&s), 1);
    s.patch(
        &deploy(),
        ns,
        "web",
        None,
        &Patch::Merge(json!({"metadata": {"annotations": {"x": "y"}}})),
        &opts,
    )
    .unwrap();
    assert_eq!(generation(&s), 2);
    s.patch(
        &deploy(),
        ns,
        "web",
        None,
        &Patch::Merge(json!({"spec": {"replicas": 4}})),
        &opts,
    )
    .unwrap();
    assert_eq!(generation(&s), 3);
    s.patch(
        &deploy(),
        ns,
        "web",
        Some("status"),
        &Patch::Merge(json!({"status": {"observedGeneration": 3}})),
        &opts,
    )
    .unwrap();
    assert_eq!(generation(&s), 3);
    let obj = s.get(&deploy(), ns, "web").unwrap();
    assert_eq!(obj["status"]["observedGeneration"], json!(3));
    let mut main = obj.clone();
    main["status"] = json!({"observedGeneration": 99});
    let after = s
        .update(&deploy(), ns, main, &WriteOptions::manager("t"))
        .unwrap();
    assert_eq!(
        after["status"]["observedGeneration"],
        json!(3),
        "the main endpoint keeps status"
    );
}

#[tokio::test]
async fn watch_replays_and_expires() {
    let s = store();
    let ns = Some("default");
    s.create(&deploy(), ns, deployment("a"), &WriteOptions::manager("t"))
        .unwrap();
    let mut w = s
        .watch(&deploy(), ns, Some(0), &ListOptions::default())
        .unwrap();
    assert!(matches!(w.next().await, Some(WatchEvent::Added(_))));
    s.create(&deploy(), ns, deployment("b"), &WriteOptions::manager("t"))
        .unwrap();
    match w.next().await {
        Some(WatchEvent::Added(o)) => assert_eq!(o["metadata"]["name"], "b"),
        other => panic!("unexpected {other:?}"),
    }
    let old = 1;
    s.compact();
    assert!(
        matches!(w.next().await, Some(WatchEvent::Error(ref st)) if st["code"] == 410),
        "a running watch is expired by compaction"
    );
    assert_eq!(w.next().await, None);
    let mut expired = s
        .watch(&deploy(), ns, Some(old), &ListOptions::default())
        .unwrap();
    match expired.next().await {
        Some(WatchEvent::Error(status)) => {
            assert_eq!(status["code"], 410);
            assert_eq!(status["reason"], "Expired");
            let rv = s.current_resource_version();
            assert_eq!(
                status["message"],
                format!("too old resource version: {old} ({rv})")
            );
        }
        other => panic!("unexpected {other:?}"),
    }
    assert_eq!(expired.next().await, None);
}

#[tokio::test]
async fn selector_transitions_become_added_and_deleted() {
    let s = store();
    let ns = Some("default");
    let cm = GroupResource::new("", "configmaps");
    s.create(
        &cm,
        ns,
        json!({"metadata": {"name": "c", "labels": {"a": "1"}}}),
        &WriteOptions::manager("t"),
    )
    .unwrap();
    let opts = ListOptions {
        label_selector: Some("a=2".into()),
        ..ListOptions::default()
    };
    let mut w = s
        .watch(&cm, ns, Some(s.current_resource_version()), &opts)
        .unwrap();
    let p = PatchOptions::default();
    s.patch(
        &cm,
        ns,
        "c",
        None,
        &Patch::Merge(json!({"metadata": {"labels": {"a": "2"}}})),
        &p,
    )
    .unwrap();
    assert!(matches!(w.next().await, Some(WatchEvent::Added(_))));
    s.patch(
        &cm,
        ns,
        "c",
        None,
        &Patch::Merge(json!({"metadata": {"labels": {"a": "3"}}})),
        &p,
    )
    .unwrap();
    assert!(matches!(w.next().await, Some(WatchEvent::Deleted(_))));
}

#[test]
fn finalizers_and_pod_grace_delay_removal() {
    let s = store();
    let ns = Some("default");
    let cm = GroupResource::new("", "configmaps");
    s.create(
        &cm,
        ns,
        json!({"metadata": {"name": "f", "finalizers": ["x/y"]}}),
        &WriteOptions::manager("t"),
    )
    .unwrap();
    let d = s.delete(&cm, ns, "f", &DeleteOptions::default()).unwrap();
    let Deleted::Pending(marked) = d else {
        panic!("expected pending")
    };
    assert!(marked["metadata"]["deletionTimestamp"].is_string());
    s.patch(
        &cm,
        ns,
        "f",
        None,
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        &PatchOptions::default(),
    )
    .unwrap();
    assert_eq!(s.get(&cm, ns, "f").unwrap_err().code(), 404);

    let pods = GroupResource::pods();
    let pod = json!({"metadata": {"name": "p"}, "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "i"}]}});
    s.create(&pods, ns, pod, &WriteOptions::manager("t"))
        .unwrap();
    let Deleted::Pending(p) = s.delete(&pods, ns, "p", &DeleteOptions::default()).unwrap() else {
        panic!("pending")
    };
    assert_eq!(p["metadata"]["deletionGracePeriodSeconds"], 30);
    let again = DeleteOptions {
        grace_period_seconds: Some(0),
        ..DeleteOptions::default()
    };
    assert!(matches!(
        s.delete(&pods, ns, "p", &again).unwrap(),
        Deleted::Gone(_)
    ));
    let unscheduled =
        json!({"metadata": {"name": "q"}, "spec": {"containers": [{"name": "c", "image": "i"}]}});
    s.create(&pods, ns, unscheduled, &WriteOptions::manager("t"))
        .unwrap();
    assert!(matches!(
        s.delete(&pods, ns, "q", &DeleteOptions::default()).unwrap(),
        Deleted::Gone(_)
    ));
}

#[test]
fn generate_name_and_missing_namespace() {
    let s = store();
    let cm = GroupResource::new("", "configmaps");
    let made = s
        .create(
            &cm,
            Some("default"),
            json!({"metadata": {"generateName": "x-"}}),
            &WriteOptions::manager("t"),
        )
        .unwrap();
    let name = made["metadata"]["name"].as_str().unwrap();
    assert!(name.starts_with("x-") && name.len() == 7, "{name}");
    let err = s
        .create(
            &cm,
            Some("nope"),
            json!({"metadata": {"name": "a"}}),
            &WriteOptions::manager("t"),
        )
        .unwrap_err();
    assert_eq!(err.to_string(), "namespaces \"nope\" not found");
}
