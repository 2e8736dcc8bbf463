//! The API-machinery items of the "ten semantics simulators most often get wrong" (numbers 6 to 10), plus
//! optimistic concurrency and error bodies. Each test fails on a simulator that gets the item wrong.

use std::time::{Duration, Instant};

use futures::StreamExt as _;
use http::Method;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{
    Api, DynamicObject, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams,
};
use kube::core::GroupVersionKind;
use kube::discovery::ApiResource;
use serde_json::{Value, json};

use crate::{
    DEADLINE, GADGET_CRD, WEB_DEPLOYMENT, WIDGET_CRD, apply_web, get, install_crd, json, post, raw,
    start, start_with_api,
};

fn widget_api(client: kube::Client, kind: &str, plural: &str) -> Api<DynamicObject> {
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("example.com", "v1", kind),
        plural,
    );
    Api::namespaced_with(client, "default", &ar)
}

fn generation(obj: &DynamicObject) -> i64 {
    obj.metadata.generation.expect("generation is set")
}

/// Pitfall 6: Deployment annotations bump generation, labels do not; status writes never do.
#[tokio::test]
async fn deployment_generation_follows_spec_and_annotations_only() {
    let sim = start().await;
    let client = sim.client().await.unwrap();
    let (deployments, d) = apply_web(client).await;
    assert_eq!(d.metadata.generation, Some(1));
    let pp = PatchParams::default();
    for (patch, expected, why) in [
        (
            json!({"metadata": {"labels": {"tier": "web"}}}),
            1,
            "labels do not bump generation",
        ),
        (
            json!({"metadata": {"annotations": {"note": "x"}}}),
            2,
            "annotations bump generation",
        ),
        (json!({"spec": {"replicas": 3}}), 3, "spec bumps generation"),
    ] {
        let d = deployments
            .patch("web", &pp, &Patch::Merge(patch))
            .await
            .unwrap();
        assert_eq!(d.metadata.generation, Some(expected), "{why}");
    }
    let d = deployments
        .patch_status(
            "web",
            &pp,
            &Patch::Merge(json!({"status": {"observedGeneration": 3, "replicas": 3}})),
        )
        .await
        .unwrap();
    assert_eq!(
        d.metadata.generation,
        Some(3),
        "status writes do not bump generation"
    );
    assert_eq!(d.status.unwrap().observed_generation, Some(3));
    let d = deployments
        .patch(
            "web",
            &pp,
            &Patch::Merge(json!({"status": {"replicas": 99}})),
        )
        .await
        .unwrap();
    assert_ne!(
        d.status.unwrap().replicas,
        Some(99),
        "the main endpoint keeps the stored status"
    );
}

/// Pitfall 6: CR metadata does not bump generation; CR status writes bump it only without the status subresource.
#[tokio::test]
async fn custom_resource_generation_ignores_metadata_and_counts_status_only_without_subresource() {
    let sim = start().await;
    install_crd(&sim, WIDGET_CRD).await;
    install_crd(&sim, GADGET_CRD).await;
    let client = sim.client().await.unwrap();
    let pp = PatchParams::default();

    let widgets = widget_api(client.clone(), "Widget", "widgets");
    let w = json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {"size": 1}, "status": {"ready": true}});
    let created = widgets
        .create(&PostParams::default(), &serde_json::from_value(w).unwrap())
        .await
        .unwrap();
    assert_eq!(generation(&created), 1);
    assert!(
        created.data.get("status").is_none(),
        "create drops status when the status subresource exists"
    );
    let w = widgets
        .patch(
            "w",
            &pp,
            &Patch::Merge(json!({"metadata": {"labels": {"a": "b"}, "annotations": {"c": "d"}}})),
        )
        .await
        .unwrap();
    assert_eq!(generation(&w), 1, "CR metadata does not bump generation");
    let w = widgets
        .patch_status("w", &pp, &Patch::Merge(json!({"status": {"ready": true}})))
        .await
        .unwrap();
    assert_eq!(
        generation(&w),
        1,
        "status subresource writes do not bump generation"
    );
    assert_eq!(w.data["status"]["ready"], true);
    let both = json!({"spec": {"size": 2}, "status": {"ready": false}});
    let w = widgets.patch("w", &pp, &Patch::Merge(both)).await.unwrap();
    assert_eq!(generation(&w), 2);
    assert_eq!(
        w.data["status"]["ready"], true,
        "the main endpoint keeps the stored status"
    );
    let both = json!({"spec": {"size": 9}, "status": {"ready": false}});
    let w = widgets
        .patch_status("w", &pp, &Patch::Merge(both))
        .await
        .unwrap();
    assert_eq!(
        w.data["spec"]["size"], 2,
        "the status endpoint keeps the stored spec"
    );
    assert_eq!(w.data["status"]["ready"], false);
    assert_eq!(generation(&w), 2);

    let gadgets = widget_api(client, "Gadget", "gadgets");
    let g = json!({"apiVersion": "example.com/v1", "kind": "Gadget", "metadata": {"name": "g"}, "spec": {"x": 1}});
    gadgets
        .create(&PostParams::default(), &serde_json::from_value(g).unwrap())
        .await
        .unwrap();
    let g = gadgets
        .patch("g", &pp, &Patch::Merge(json!({"status": {"phase": "Up"}})))
        .await
        .unwrap();
    assert_eq!(
        generation(&g),
        2,
        "without the status subresource a status write bumps generation"
    );
    let g = gadgets
        .patch(
            "g",
            &pp,
            &Patch::Merge(json!({"metadata": {"labels": {"a": "b"}}})),
        )
        .await
        .unwrap();
    assert_eq!(generation(&g), 2);
}

/// Pitfall 6: a no-op patch (the same-second `restartedAt`) changes no resourceVersion and emits no event.
#[tokio::test]
async fn no_op_patch_keeps_the_resource_version_and_emits_no_watch_event() {
    let sim = start().await;
    let client = sim.client().await.unwrap();
    let restart = json!({"spec": {"template": {"metadata": {"annotations": {"kubectl.kubernetes.io/restartedAt": "2026-01-01T00:00:00Z"}}}}});
    let pp = PatchParams {
        field_manager: Some("kubectl-rollout".into()),
        ..PatchParams::default()
    };

    // On a Deployment (which controllers also write) the repeated restart changes neither generation nor template.
    let (deployments, _) = apply_web(client.clone()).await;
    let first = deployments
        .patch("web", &pp, &Patch::Strategic(&restart))
        .await
        .unwrap();
    let second = deployments
        .patch("web", &pp, &Patch::Strategic(&restart))
        .await
        .unwrap();
    assert_eq!(first.metadata.generation, Some(2));
    assert_eq!(second.metadata.generation, Some(2));
    assert_eq!(first.spec.template, second.spec.template);

    // On an object nothing else writes, the no-op keeps the resourceVersion and the watch sees no event.
    let cms: Api<ConfigMap> = Api::namespaced(client, "default");
    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "restart"}})).unwrap();
    let created = cms.create(&PostParams::default(), &cm).await.unwrap();
    let mut events = cms
        .watch(
            &WatchParams::default()
                .fields("metadata.name=restart")
                .timeout(30),
            &created.metadata.resource_version.unwrap(),
        )
        .await
        .unwrap()
        .boxed();
    let note = json!({"metadata": {"annotations": {"kubectl.kubernetes.io/restartedAt": "2026-01-01T00:00:00Z"}}});
    let first = cms
        .patch("restart", &pp, &Patch::Strategic(&note))
        .await
        .unwrap();
    let second = cms
        .patch("restart", &pp, &Patch::Strategic(&note))
        .await
        .unwrap();
    assert_eq!(
        first.metadata.resource_version,
        second.metadata.resource_version
    );
    let third = cms
        .patch(
            "restart",
            &pp,
            &Patch::Merge(json!({"metadata": {"labels": {"after": "noop"}}})),
        )
        .await
        .unwrap();
    let mut seen = Vec::new();
    while seen.len() < 2 {
        match tokio::time::timeout(DEADLINE, events.next())
            .await
            .expect("an event")
            .expect("the stream continues")
            .unwrap()
        {
            WatchEvent::Modified(c) => seen.push(c.metadata.resource_version.unwrap()),
            WatchEvent::Bookmark(_) => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(
        seen,
        [
            first.metadata.resource_version.unwrap(),
            third.metadata.resource_version.unwrap()
        ]
    );
}

/// Pitfall 7: apply is not replace; it keeps fields other managers own and drops only its own removed fields.
#[tokio::test]
async fn apply_keeps_fields_owned_by_other_managers() {
    let (_sim, deployments) = start_with_api::<Deployment>().await;
    let mut desired: Value = serde_yaml::from_str(WEB_DEPLOYMENT).unwrap();
    desired["metadata"]["labels"] = json!({"owner": "dev-env", "temporary": "yes"});
    let apply = PatchParams::apply("dev-env");
    deployments
        .patch("web", &apply, &Patch::Apply(&desired))
        .await
        .unwrap();

    let restart = json!({"spec": {"template": {"metadata": {"annotations": {"kubectl.kubernetes.io/restartedAt": "2026-01-01T00:00:00Z"}}}}});
    let rollout = PatchParams {
        field_manager: Some("kubectl-rollout".into()),
        ..PatchParams::default()
    };
    deployments
        .patch("web", &rollout, &Patch::Strategic(&restart))
        .await
        .unwrap();

    desired["metadata"]["labels"] = json!({"owner": "dev-env"});
    desired["spec"]["template"]["spec"]["containers"][0]["image"] = json!("nginx:1.28");
    let d = deployments
        .patch("web", &apply, &Patch::Apply(&desired))
        .await
        .unwrap();
    let annotations = d
        .spec
        .template
        .metadata
        .as_ref()
        .unwrap()
        .annotations
        .clone()
        .unwrap();
    assert_eq!(
        annotations["kubectl.kubernetes.io/restartedAt"],
        "2026-01-01T00:00:00Z"
    );
    assert_eq!(
        d.spec.template.spec.as_ref().unwrap().containers[0]
            .image
            .as_deref(),
        Some("nginx:1.28")
    );
    let labels = d.metadata.labels.clone().unwrap();
    assert!(
        !labels.contains_key("temporary"),
        "a field dropped from the applied config is removed: {labels:?}"
    );
    let managers: Vec<(String, String)> = d
        .metadata
        .managed_fields
        .unwrap()
        .into_iter()
        .map(|m| (m.manager.unwrap(), m.operation.unwrap()))
        .collect();
    assert!(
        managers.contains(&("kubectl-rollout".into(), "Update".into())),
        "{managers:?}"
    );
    assert!(
        managers.contains(&("dev-env".into(), "Apply".into())),
        "{managers:?}"
    );

    let scale = PatchParams {
        field_manager: Some("kubectl".into()),
        ..PatchParams::default()
    };
    deployments
        .patch(
            "web",
            &scale,
            &Patch::Merge(json!({"spec": {"replicas": 7}})),
        )
        .await
        .unwrap();
    let err = deployments
        .patch("web", &apply, &Patch::Apply(&desired))
        .await
        .unwrap_err();
    let kube::Error::Api(status) = err else {
        panic!("expected a conflict")
    };
    assert_eq!(status.code, 409);
    assert_eq!(
        status.message,
        "Apply failed with 1 conflict: conflict with \"kubectl\" using apps/v1: .spec.replicas"
    );
}

/// Pitfall 8: strategic merge on a custom resource is 415; JSON merge patch replaces lists whole while
/// strategic merge merges containers by name.
#[tokio::test]
async fn strategic_merge_is_415_on_custom_resources_and_merge_patch_replaces_lists() {
    let sim = start().await;
    install_crd(&sim, WIDGET_CRD).await;
    let client = sim.client().await.unwrap();
    let widgets = widget_api(client.clone(), "Widget", "widgets");
    let w = json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {"colors": ["a", "b"]}});
    widgets
        .create(&PostParams::default(), &serde_json::from_value(w).unwrap())
        .await
        .unwrap();
    let err = widgets
        .patch(
            "w",
            &PatchParams::default(),
            &Patch::Strategic(json!({"spec": {"size": 1}})),
        )
        .await
        .unwrap_err();
    let kube::Error::Api(status) = err else {
        panic!("expected an API error")
    };
    assert_eq!(status.code, 415);
    assert_eq!(status.reason, "UnsupportedMediaType");
    let w = widgets
        .patch(
            "w",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"colors": ["c"]}})),
        )
        .await
        .unwrap();
    assert_eq!(w.data["spec"]["colors"], json!(["c"]));

    let (deployments, _) = apply_web(client).await;
    let one = json!({"spec": {"template": {"spec": {"containers": [{"name": "app", "image": "nginx:2"}]}}}});
    let d = deployments
        .patch("web", &PatchParams::default(), &Patch::Strategic(&one))
        .await
        .unwrap();
    assert_eq!(
        d.spec.template.spec.unwrap().containers.len(),
        2,
        "strategic merge merges by name"
    );
    let d = deployments
        .patch("web", &PatchParams::default(), &Patch::Merge(&one))
        .await
        .unwrap();
    let containers = d.spec.template.spec.unwrap().containers;
    assert_eq!(containers.len(), 1, "merge patch replaces the list");
    assert_eq!(containers[0].image.as_deref(), Some("nginx:2"));

    let test_fails = json!([{"op": "test", "path": "/spec/replicas", "value": 99}, {"op": "replace", "path": "/spec/replicas", "value": 1}]);
    let (code, body) = raw(
        &sim.client().await.unwrap(),
        Method::PATCH,
        "/apis/apps/v1/namespaces/default/deployments/web",
        "application/json-patch+json",
        &test_fails.to_string(),
    )
    .await;
    assert_eq!(code, 422, "{body}");
}

/// Pitfall 9: unknown fields are pruned, including an under-specified `spec.template.metadata`.
#[tokio::test]
async fn custom_resources_are_pruned_by_their_structural_schema() {
    let sim = start().await;
    install_crd(&sim, WIDGET_CRD).await;
    let client = sim.client().await.unwrap();
    let widgets = widget_api(client.clone(), "Widget", "widgets");
    let w = json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w", "labels": {"keep": "me"}},
        "spec": {"size": 1, "bogus": true, "template": {"metadata": {"labels": {"app": "x"}}}, "free": {"any": {"thing": 1}}},
        "extra": "dropped"});
    let stored = widgets
        .create(
            &PostParams::default(),
            &serde_json::from_value(w.clone()).unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(
        stored.data["spec"],
        json!({"size": 1, "template": {"metadata": {}}, "free": {"any": {"thing": 1}}})
    );
    assert!(stored.data.get("extra").is_none());
    assert_eq!(stored.metadata.labels.unwrap()["keep"], "me");

    let mut strict = w;
    strict["metadata"]["name"] = json!("strict");
    let (code, body) = post(
        &client,
        "/apis/example.com/v1/namespaces/default/widgets?fieldValidation=Strict",
        &strict,
    )
    .await;
    assert_eq!(code, 400, "{body}");
    assert!(
        json(&body)["message"]
            .as_str()
            .unwrap()
            .contains("unknown field \"spec.bogus\""),
        "{body}"
    );
}

/// Pitfall 10: the list resourceVersion is set, `resourceVersion=0` replays as ADDED, and field selectors
/// filter lists and watches.
#[tokio::test]
async fn list_and_watch_honour_resource_versions_and_selectors() {
    let (_sim, cms) = start_with_api::<ConfigMap>().await;
    for (name, tier) in [("a", "front"), ("b", "back"), ("c", "db")] {
        let cm: ConfigMap =
            serde_json::from_value(json!({"metadata": {"name": name, "labels": {"tier": tier}}}))
                .unwrap();
        cms.create(&PostParams::default(), &cm).await.unwrap();
    }
    let list = cms.list(&ListParams::default()).await.unwrap();
    let rv = list.metadata.resource_version.clone().unwrap();
    assert!(!rv.is_empty());
    let names = |l: &kube::core::ObjectList<ConfigMap>| -> Vec<String> {
        l.items
            .iter()
            .map(|c| c.metadata.name.clone().unwrap())
            .collect()
    };
    for (params, expected) in [
        (
            ListParams::default().labels("tier in (front,db)"),
            vec!["a", "c"],
        ),
        (
            ListParams::default().labels("tier,tier!=front"),
            vec!["b", "c"],
        ),
        (ListParams::default().fields("metadata.name=b"), vec!["b"]),
    ] {
        let listed = cms.list(&params).await.unwrap();
        assert_eq!(names(&listed), expected, "{params:?}");
    }

    let mut replay = cms
        .watch(&WatchParams::default().timeout(10), "0")
        .await
        .unwrap()
        .boxed();
    let mut added = Vec::new();
    while added.len() < 3 {
        match tokio::time::timeout(DEADLINE, replay.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap()
        {
            WatchEvent::Added(cm) => added.push(cm.metadata.name.unwrap()),
            other => panic!("expected ADDED, got {other:?}"),
        }
    }
    added.sort();
    assert_eq!(added, ["a", "b", "c"]);

    let mut only_b = cms
        .watch(
            &WatchParams::default().fields("metadata.name=b").timeout(10),
            &rv,
        )
        .await
        .unwrap()
        .boxed();
    let pp = PatchParams::default();
    cms.patch("a", &pp, &Patch::Merge(json!({"data": {"k": "1"}})))
        .await
        .unwrap();
    cms.patch("b", &pp, &Patch::Merge(json!({"data": {"k": "2"}})))
        .await
        .unwrap();
    match tokio::time::timeout(DEADLINE, only_b.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap()
    {
        WatchEvent::Modified(cm) => assert_eq!(cm.metadata.name.as_deref(), Some("b")),
        other => panic!("expected b MODIFIED, got {other:?}"),
    }
}

/// Pitfall 10: a too-old resourceVersion gets HTTP 200 and then an in-stream ERROR with 410 `Expired`.
#[tokio::test]
async fn too_old_watch_gets_200_then_an_expired_error_event() {
    let sim = start().await;
    let client = sim.client().await.unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "x"}})).unwrap();
    cms.create(&PostParams::default(), &cm).await.unwrap();
    sim.store().compact();
    let current = sim.store().current_resource_version();
    let (code, body) = get(
        &client,
        "/api/v1/namespaces/default/configmaps?watch=true&resourceVersion=1",
    )
    .await;
    assert_eq!(code, 200);
    let lines: Vec<Value> = body.lines().map(json).collect();
    assert_eq!(lines.len(), 1, "{body}");
    assert_eq!(lines[0]["type"], "ERROR");
    let status = &lines[0]["object"];
    assert_eq!(status["kind"], "Status");
    assert_eq!(status["status"], "Failure");
    assert_eq!(status["code"], 410);
    assert_eq!(status["reason"], "Expired");
    assert_eq!(
        status["message"],
        format!("too old resource version: 1 ({current})")
    );
}

/// Pitfall 10: bookmarks carry only a resourceVersion, and `timeoutSeconds` ends the stream.
#[tokio::test]
async fn bookmarks_carry_only_a_resource_version_and_timeout_ends_the_watch() {
    let mut config = kube_sim::Config::ephemeral();
    config.bookmark_interval = Duration::from_millis(300);
    let sim = crate::start_with(config).await;
    let client = sim.client().await.unwrap();
    let rv = sim.store().current_resource_version();
    let started = Instant::now();
    let uri = format!(
        "/api/v1/namespaces/default/configmaps?watch=true&allowWatchBookmarks=true&timeoutSeconds=2&resourceVersion={rv}"
    );
    let (code, body) = get(&client, &uri).await;
    let elapsed = started.elapsed();
    assert_eq!(code, 200);
    assert!(
        elapsed >= Duration::from_millis(1900) && elapsed < Duration::from_secs(6),
        "{elapsed:?}"
    );
    let events: Vec<Value> = body.lines().map(json).collect();
    assert!(!events.is_empty(), "bookmarks arrived");
    for e in &events {
        assert_eq!(e["type"], "BOOKMARK", "{e}");
        let obj = &e["object"];
        assert_eq!(obj["kind"], "ConfigMap");
        assert_eq!(obj["apiVersion"], "v1");
        let metadata = obj["metadata"].as_object().unwrap();
        assert_eq!(
            metadata.keys().collect::<Vec<_>>(),
            ["resourceVersion"],
            "{e}"
        );
        let bookmark_rv: u64 = metadata["resourceVersion"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap();
        assert!(
            bookmark_rv >= rv,
            "a bookmark never goes back: {bookmark_rv} < {rv}"
        );
        assert!(obj.get("data").is_none() && obj.get("spec").is_none());
    }
}

/// Optimistic concurrency: a stale resourceVersion on update is a 409 with the Kubernetes message.
#[tokio::test]
async fn stale_update_is_a_conflict_with_the_kubernetes_message() {
    let sim = start().await;
    install_crd(&sim, WIDGET_CRD).await;
    let widgets = widget_api(sim.client().await.unwrap(), "Widget", "widgets");
    let w = json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "web"}, "spec": {"size": 1}});
    let original = widgets
        .create(&PostParams::default(), &serde_json::from_value(w).unwrap())
        .await
        .unwrap();
    let mut newer = original.clone();
    newer.data["spec"]["size"] = json!(4);
    widgets
        .replace("web", &PostParams::default(), &newer)
        .await
        .unwrap();
    let mut stale = original;
    stale.data["spec"]["size"] = json!(5);
    let err = widgets
        .replace("web", &PostParams::default(), &stale)
        .await
        .unwrap_err();
    let kube::Error::Api(status) = err else {
        panic!("expected a conflict")
    };
    assert_eq!(status.code, 409);
    assert_eq!(status.reason, "Conflict");
    assert_eq!(
        status.message,
        "Operation cannot be fulfilled on widgets.example.com \"web\": the object has been modified; please apply your changes to the latest version and try again"
    );
    assert_eq!(status.details.unwrap().group, "example.com");
}

/// Pitfall 10: Status error bodies carry `kind`, `apiVersion`, `metadata`, `status`, `code`, `reason`, `details`.
#[tokio::test]
async fn errors_are_status_bodies_and_unauthenticated_requests_get_401() {
    let sim = start().await;
    let client = sim.client().await.unwrap();
    let (code, body) = get(&client, "/apis/apps/v1/namespaces/default/deployments/nope").await;
    assert_eq!(code, 404);
    assert_eq!(
        json(&body),
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": "deployments.apps \"nope\" not found", "reason": "NotFound",
            "details": {"name": "nope", "group": "apps", "kind": "deployments"}, "code": 404})
    );
    let (code, body) = get(&client, "/apis/nothing.example.com/v1/things").await;
    assert_eq!(code, 404);
    assert_eq!(json(&body)["reason"], "NotFound");

    let kubeconfig = kube::config::Kubeconfig::read_from(sim.kubeconfig_path()).unwrap();
    let mut config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .unwrap();
    config.auth_info.token = Some("wrong".to_string().into());
    let anonymous = kube::Client::try_from(config).unwrap();
    let (code, body) = get(&anonymous, "/api/v1/namespaces").await;
    assert_eq!(code, 401);
    let status = json(&body);
    assert_eq!(
        (status["kind"].as_str(), status["code"].as_i64()),
        (Some("Status"), Some(401))
    );
    assert_eq!(status["reason"], "Unauthorized");
}

/// Built-in types drop undeclared fields like the API server, and `fieldValidation=Strict` (kubectl's
/// default) refuses them, so a typo in a manifest fails here as it would on a real cluster.
#[tokio::test]
async fn built_in_objects_drop_unknown_fields_and_strict_validation_rejects_them() {
    let sim = start().await;
    let client = sim.client().await.unwrap();
    let body = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "typo"}, "data": {"a": "1"}, "dta": {"b": "2"}});
    let (code, text) = post(&client, "/api/v1/namespaces/default/configmaps", &body).await;
    assert_eq!(code, 201, "{text}");
    let stored = json(&text);
    assert!(stored.get("dta").is_none(), "{stored}");
    assert_eq!(stored["data"], json!({"a": "1"}));

    let mut strict = body.clone();
    strict["metadata"]["name"] = json!("strict");
    let (code, text) = post(
        &client,
        "/api/v1/namespaces/default/configmaps?fieldValidation=Strict",
        &strict,
    )
    .await;
    assert_eq!(code, 400, "{text}");
    assert_eq!(
        json(&text)["message"],
        "strict decoding error: unknown field \"dta\""
    );

    let mut deployment: Value = serde_yaml::from_str(WEB_DEPLOYMENT).unwrap();
    deployment["spec"]["replcas"] = json!(3);
    deployment["spec"]["template"]["spec"]["containers"][0]["resources"] =
        json!({"limits": {"cpu": 1}});
    let deployments: Api<Deployment> = Api::namespaced(client, "default");
    let d = deployments
        .patch(
            "web",
            &PatchParams::apply("dev-env"),
            &Patch::Apply(&deployment),
        )
        .await
        .unwrap();
    let limits = d.spec.template.spec.unwrap().containers[0]
        .resources
        .clone()
        .unwrap()
        .limits
        .unwrap();
    assert_eq!(
        limits["cpu"].0, "1",
        "numeric quantities are stored as strings"
    );
    let err = deployments
        .patch(
            "web",
            &PatchParams {
                field_validation: Some(kube::api::ValidationDirective::Strict),
                ..PatchParams::apply("dev-env")
            },
            &Patch::Apply(&deployment),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 400 && s.message.contains("unknown field \"spec.replcas\"")),
        "{err:?}"
    );
}
