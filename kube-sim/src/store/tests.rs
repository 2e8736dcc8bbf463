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

const NS: Option<&str> = Some("default");

fn deploy() -> GroupResource {
    GroupResource::deployments()
}

fn create(s: &Store, gr: &GroupResource, obj: Value) -> Result<Value, Error> {
    s.create(gr, NS, obj, &WriteOptions::manager("t"))
        .map(|w| w.object)
}

fn merge(s: &Store, gr: &GroupResource, name: &str, sub: Option<&str>, patch: Value) -> Value {
    let patch = Patch::Merge(patch);
    s.patch(
        gr,
        Some("default"),
        name,
        sub,
        &patch,
        &PatchOptions::default(),
    )
    .unwrap()
    .object
}

#[test]
fn stale_update_is_a_conflict_with_the_kubernetes_message() {
    let s = store();
    let created = create(&s, &deploy(), deployment("web")).unwrap();
    let mut first = created.clone();
    first["spec"]["replicas"] = json!(3);
    s.update(
        Endpoint::Main,
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
            Endpoint::Main,
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
    let created = create(&s, &deploy(), deployment("web")).unwrap();
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
        .unwrap()
        .object;
    assert_eq!(
        same["metadata"]["resourceVersion"],
        created["metadata"]["resourceVersion"]
    );
    assert_eq!(s.current_resource_version(), rv);
}

#[test]
fn deployment_generation_follows_spec_and_annotations_but_not_labels_or_status() {
    let s = store();
    create(&s, &deploy(), deployment("web")).unwrap();
    let generation = |s: &Store| {
        s.get(&deploy(), NS, "web").unwrap()["metadata"]["generation"]
            .as_i64()
            .unwrap()
    };
    assert_eq!(generation(&s), 1);
    for (sub, patch, expected) in [
        (None, json!({"metadata": {"labels": {"x": "y"}}}), 1),
        (None, json!({"metadata": {"annotations": {"x": "y"}}}), 2),
        (None, json!({"spec": {"replicas": 4}}), 3),
        (
            Some("status"),
            json!({"status": {"observedGeneration": 3}}),
            3,
        ),
    ] {
        merge(&s, &deploy(), "web", sub, patch.clone());
        assert_eq!(generation(&s), expected, "after {patch}");
    }
    let obj = s.get(&deploy(), NS, "web").unwrap();
    assert_eq!(obj["status"]["observedGeneration"], json!(3));
    let mut main = obj.clone();
    main["status"] = json!({"observedGeneration": 99});
    let after = s
        .update(
            Endpoint::Main,
            &deploy(),
            NS,
            main,
            &WriteOptions::manager("t"),
        )
        .unwrap()
        .object;
    assert_eq!(
        after["status"]["observedGeneration"],
        json!(3),
        "the main endpoint keeps status"
    );
}

#[tokio::test]
async fn watch_replays_and_expires() {
    let s = store();
    create(&s, &deploy(), deployment("a")).unwrap();
    let mut w = s
        .watch(&deploy(), NS, Some(0), &ListOptions::default())
        .unwrap();
    assert!(matches!(w.next().await, Some(WatchEvent::Added(_))));
    create(&s, &deploy(), deployment("b")).unwrap();
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
        .watch(&deploy(), NS, Some(old), &ListOptions::default())
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
    let cm = GroupResource::new("", "configmaps");
    create(
        &s,
        &cm,
        json!({"metadata": {"name": "c", "labels": {"a": "1"}}}),
    )
    .unwrap();
    let opts = ListOptions {
        label_selector: Some("a=2".into()),
        ..ListOptions::default()
    };
    let mut w = s
        .watch(&cm, NS, Some(s.current_resource_version()), &opts)
        .unwrap();
    let relabel = |a: &str| {
        merge(
            &s,
            &cm,
            "c",
            None,
            json!({"metadata": {"labels": {"a": a}}}),
        )
    };
    relabel("2");
    assert!(matches!(w.next().await, Some(WatchEvent::Added(_))));
    relabel("3");
    assert!(matches!(w.next().await, Some(WatchEvent::Deleted(_))));
}

#[test]
fn finalizers_and_pod_grace_delay_removal() {
    let s = store();
    let cm = GroupResource::new("", "configmaps");
    create(
        &s,
        &cm,
        json!({"metadata": {"name": "f", "finalizers": ["x/y"]}}),
    )
    .unwrap();
    let d = s.delete(&cm, NS, "f", &DeleteOptions::default()).unwrap();
    let Deleted::Pending(marked) = d else {
        panic!("expected pending")
    };
    assert!(marked["metadata"]["deletionTimestamp"].is_string());
    merge(
        &s,
        &cm,
        "f",
        None,
        json!({"metadata": {"finalizers": null}}),
    );
    assert_eq!(s.get(&cm, NS, "f").unwrap_err().code(), 404);

    let pods = GroupResource::pods();
    let pod = json!({"metadata": {"name": "p"}, "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "i"}]}});
    create(&s, &pods, pod).unwrap();
    let Deleted::Pending(p) = s.delete(&pods, NS, "p", &DeleteOptions::default()).unwrap() else {
        panic!("pending")
    };
    assert_eq!(p["metadata"]["deletionGracePeriodSeconds"], 30);
    let again = DeleteOptions {
        grace_period_seconds: Some(0),
        ..DeleteOptions::default()
    };
    assert!(matches!(
        s.delete(&pods, NS, "p", &again).unwrap(),
        Deleted::Gone(_)
    ));
    let unscheduled =
        json!({"metadata": {"name": "q"}, "spec": {"containers": [{"name": "c", "image": "i"}]}});
    create(&s, &pods, unscheduled).unwrap();
    assert!(matches!(
        s.delete(&pods, NS, "q", &DeleteOptions::default()).unwrap(),
        Deleted::Gone(_)
    ));
}

#[test]
fn generate_name_and_missing_namespace() {
    let s = store();
    let cm = GroupResource::new("", "configmaps");
    let made = create(&s, &cm, json!({"metadata": {"generateName": "x-"}})).unwrap();
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

#[tokio::test]
async fn every_watcher_shares_the_stored_object() {
    let s = store();
    let mut watchers: Vec<Watcher> = (0..3)
        .map(|_| {
            s.watch(
                &deploy(),
                NS,
                Some(s.current_resource_version()),
                &ListOptions::default(),
            )
            .unwrap()
        })
        .collect();
    create(&s, &deploy(), deployment("a")).unwrap();
    let mut objects = Vec::new();
    for w in &mut watchers {
        match w.next_shared().await {
            Some(SharedEvent::Added(o)) => objects.push(o),
            other => panic!("unexpected {other:?}"),
        }
    }
    assert!(objects.windows(2).all(|p| Arc::ptr_eq(&p[0], &p[1])));
    let stored = s
        .lock()
        .stored(&deploy(), &("default".into(), "a".into()))
        .unwrap();
    assert!(Arc::ptr_eq(&objects[0], &stored), "the store's own copy");
}

#[tokio::test]
async fn the_history_is_bounded_per_resource() {
    let s = Store::new(StoreConfig { history: 5 });
    let cms = GroupResource::new("", "configmaps");
    let quiet = s.current_resource_version();
    create(&s, &deploy(), deployment("a")).unwrap();
    let mut deployments = s
        .watch(&deploy(), NS, Some(quiet), &ListOptions::default())
        .unwrap();
    for i in 0..20 {
        let cm =
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("c{i}")}});
        create(&s, &cms, cm).unwrap();
    }
    assert!(
        matches!(deployments.next().await, Some(WatchEvent::Added(ref o)) if o["metadata"]["name"] == "a"),
        "churn elsewhere does not expire a quiet resource's watch"
    );
    let mut old = s
        .watch(&cms, NS, Some(quiet), &ListOptions::default())
        .unwrap();
    assert!(
        matches!(old.next().await, Some(WatchEvent::Error(ref st)) if st["code"] == 410),
        "a busy resource keeps only its last events"
    );
}

#[tokio::test]
async fn a_watcher_busy_with_a_burst_keeps_up_with_the_history() {
    let s = Store::new(StoreConfig { history: 3 });
    let cms = GroupResource::new("", "configmaps");
    let cm = |i: usize| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("c{i}")}});
    let mut w = s
        .watch(
            &cms,
            NS,
            Some(s.current_resource_version()),
            &ListOptions::default(),
        )
        .unwrap();
    let mut names = Vec::new();
    let mut take = async |w: &mut Watcher| match w.next().await {
        Some(WatchEvent::Added(o)) => {
            names.push(o["metadata"]["name"].as_str().unwrap().to_string())
        }
        other => panic!("unexpected {other:?}"),
    };
    for i in 1..=3 {
        create(&s, &cms, cm(i)).unwrap();
    }
    take(&mut w).await;
    for i in 4..=5 {
        create(&s, &cms, cm(i)).unwrap();
    }
    take(&mut w).await;
    for i in 6..=8 {
        create(&s, &cms, cm(i)).unwrap();
    }
    for _ in 0..6 {
        take(&mut w).await;
    }
    assert_eq!(names, (1..=8).map(|i| format!("c{i}")).collect::<Vec<_>>());
}

/// A watcher takes at most a buffer's worth of events ahead of its consumer; a consumer that falls
/// behind the history is expired rather than kept alive with every version it has yet to read.
#[tokio::test]
async fn a_slow_watcher_is_expired_instead_of_buffering_the_history() {
    let s = Store::new(StoreConfig { history: 150 });
    let cms = GroupResource::new("", "configmaps");
    let cm = |i: usize| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("c{i}")}});
    let from = s.current_resource_version();
    let mut w = s
        .watch(&cms, NS, Some(from), &ListOptions::default())
        .unwrap();
    for i in 0..120 {
        create(&s, &cms, cm(i)).unwrap();
    }
    assert!(matches!(w.next().await, Some(WatchEvent::Added(_))));
    // The history moves 300 events on while the consumer still reads what its watcher took.
    for i in 120..420 {
        create(&s, &cms, cm(i)).unwrap();
    }
    let mut read = 1;
    loop {
        match w.next().await {
            Some(WatchEvent::Added(_)) => read += 1,
            Some(WatchEvent::Error(status)) => {
                assert_eq!(status["code"], 410);
                break;
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    assert!(read < 420, "the watcher buffered {read} events");
}

/// The versions `gr`'s history keeps as JSON and as live objects.
fn kept_versions(s: &Store, gr: &GroupResource) -> (usize, usize) {
    let st = s.lock();
    let history = st.history.of(gr).expect("a history");
    let versions = history
        .events
        .iter()
        .flat_map(|e| std::iter::once(&e.object).chain(e.previous.as_ref()));
    versions.fold((0, 0), |(frozen, live), v| match v {
        version::Version::Frozen(_) => (frozen + 1, live),
        version::Version::Live(_) => (frozen, live + 1),
    })
}

#[tokio::test]
async fn the_history_keeps_replaced_versions_as_json_and_replays_them_unchanged() {
    let s = store();
    let from = s.current_resource_version();
    let web = GroupResource::deployments();
    let mut written = vec![create(&s, &web, deployment("web")).unwrap()];
    for replicas in 2..=4 {
        written.push(merge(
            &s,
            &web,
            "web",
            None,
            json!({"spec": {"replicas": replicas}}),
        ));
    }
    let deleted = match s
        .delete(&web, NS, "web", &DeleteOptions::default())
        .unwrap()
    {
        Deleted::Gone(o) => o,
        other => panic!("unexpected {other:?}"),
    };
    // Every version but none live: the four replaced ones (each an event's object and the next one's
    // previous), and the deleted object's last state.
    assert_eq!(kept_versions(&s, &web), (9, 0));

    let selected = ListOptions {
        label_selector: Some("app=web".into()),
        ..ListOptions::default()
    };
    for opts in [ListOptions::default(), selected] {
        let mut w = s.watch(&web, NS, Some(from), &opts).unwrap();
        let mut events = Vec::new();
        for _ in 0..5 {
            events.push(w.next().await.unwrap());
        }
        let mut expected: Vec<WatchEvent> = written
            .iter()
            .enumerate()
            .map(|(i, o)| match i {
                0 => WatchEvent::Added(o.clone()),
                _ => WatchEvent::Modified(o.clone()),
            })
            .collect();
        expected.push(WatchEvent::Deleted(deleted.clone()));
        assert_eq!(events, expected);
    }

    let at_second = written[1]["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let opts = ListOptions {
        version: ListVersion::Exact(at_second),
        ..ListOptions::default()
    };
    let snapshot = s.list(&web, NS, &opts).unwrap();
    assert_eq!(snapshot.items, vec![written[1].clone()]);
}

#[tokio::test]
async fn the_newest_version_stays_shared_with_the_store() {
    let s = store();
    let web = GroupResource::deployments();
    create(&s, &web, deployment("web")).unwrap();
    merge(&s, &web, "web", None, json!({"spec": {"replicas": 2}}));
    // The created version is frozen (as its event's object and the update's previous); the update's
    // object is the stored one.
    assert_eq!(kept_versions(&s, &web), (2, 1));
}

/// The watcher's next event, within a second.
async fn next(w: &mut Watcher) -> WatchEvent {
    let event = tokio::time::timeout(std::time::Duration::from_secs(1), w.next()).await;
    event.expect("an event within a second").expect("an event")
}

fn event(name: &str, reason: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": name},
        "involvedObject": {"kind": "Pod", "name": "p", "namespace": "default"},
        "reason": reason, "message": "m", "type": "Normal", "count": 1,
        "lastTimestamp": "2026-01-01T00:00:00Z", "source": {"component": "kubelet"}})
}

#[tokio::test]
async fn events_are_kept_as_json_and_read_back_unchanged() {
    let s = store();
    let events = GroupResource::events();
    let from = s.current_resource_version();
    let created = create(&s, &events, event("e1", "Pulled")).unwrap();
    create(&s, &events, event("e2", "Started")).unwrap();
    let counted = merge(&s, &events, "e1", None, json!({"count": 2}));
    // Not one version live, the stored ones included: the two creates, the update, and the update's
    // previous (the first create's own JSON, not a second copy).
    assert_eq!(kept_versions(&s, &events), (4, 0));
    {
        let st = s.lock();
        let kept = st.history.of(&events).unwrap();
        let (first, previous) = (&kept.events[0].object, kept.events[2].previous.as_ref());
        match (first, previous) {
            (version::Version::Frozen(a), Some(version::Version::Frozen(b))) => {
                assert!(Arc::ptr_eq(a, b))
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    assert_eq!(s.get(&events, NS, "e1").unwrap(), counted);
    let listed = s.list(&events, NS, &ListOptions::default()).unwrap();
    assert_eq!(listed.items.len(), 2);
    assert_eq!(listed.items[0], counted);
    let by_reason = ListOptions {
        field_selector: Some("reason=Started".into()),
        ..ListOptions::default()
    };
    let started = s.list(&events, NS, &by_reason).unwrap();
    assert_eq!(started.items.len(), 1);
    assert_eq!(started.items[0]["metadata"]["name"], "e2");

    let mut replay = s.watch(&events, NS, None, &by_reason).unwrap();
    match next(&mut replay).await {
        WatchEvent::Added(o) => assert_eq!(o["metadata"]["name"], "e2"),
        other => panic!("unexpected {other:?}"),
    }
    let mut w = s
        .watch(&events, NS, Some(from), &ListOptions::default())
        .unwrap();
    assert_eq!(next(&mut w).await, WatchEvent::Added(created));
    next(&mut w).await;
    assert_eq!(next(&mut w).await, WatchEvent::Modified(counted));

    // Past their time to live (none here: their creation, to the second, is already past) they go,
    // each with a DELETED event, though the store reads their last write without parsing them.
    s.set_event_ttl(std::time::Duration::ZERO);
    s.expire_history();
    match next(&mut w).await {
        WatchEvent::Deleted(o) => assert_eq!(o["metadata"]["name"], "e1"),
        other => panic!("unexpected {other:?}"),
    }
    assert!(
        s.list(&events, NS, &ListOptions::default())
            .unwrap()
            .items
            .is_empty()
    );
}
