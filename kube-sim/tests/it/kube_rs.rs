//! Conformance with kube-rs: discovery, watcher relisting after 410, server-side apply conflicts, waiting
//! for a CRD to be established.

use std::time::Duration;

use futures::StreamExt as _;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::GroupVersionKind;
use kube::discovery::{ApiResource, Discovery};
use kube::runtime::wait::{await_condition, conditions};
use kube::runtime::watcher;
use serde_json::json;

use crate::{
    DEADLINE, GADGET_CRD, WEB_DEPLOYMENT, WIDGET_CRD, install_crd, list_version, start,
    start_with_api,
};

#[tokio::test]
async fn discovery_run_sees_built_ins_and_established_crds() {
    let sim = start().await;
    install_crd(&sim, WIDGET_CRD).await;
    let client = sim.client().await.unwrap();
    let discovery = tokio::time::timeout(DEADLINE, Discovery::new(client).run())
        .await
        .unwrap()
        .unwrap();
    for (group, version, kind) in [
        ("", "v1", "Pod"),
        ("", "v1", "ConfigMap"),
        ("", "v1", "Namespace"),
        ("apps", "v1", "Deployment"),
        ("apps", "v1", "ReplicaSet"),
        ("apiextensions.k8s.io", "v1", "CustomResourceDefinition"),
        ("example.com", "v1", "Widget"),
    ] {
        let gvk = GroupVersionKind::gvk(group, version, kind);
        let (res, caps) = discovery
            .resolve_gvk(&gvk)
            .unwrap_or_else(|| panic!("{gvk:?} is discovered"));
        assert!(caps.supports_operation("watch"), "{kind} supports watch");
        if kind == "Deployment" || kind == "Widget" {
            assert!(
                caps.subresources
                    .iter()
                    .any(|(sub, _)| sub.plural == "status"),
                "{kind} has a status subresource: {:?}",
                caps.subresources
            );
        }
        assert_eq!(res.kind, kind);
    }
}

#[tokio::test]
async fn crd_requests_404_until_established_then_await_condition_returns() {
    let mut config = kube_sim::Config::ephemeral();
    config.crd_establish_delay = Duration::from_millis(1500);
    let sim = crate::start_with(config).await;
    let client = sim.client().await.unwrap();
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd: CustomResourceDefinition = serde_yaml::from_str(WIDGET_CRD).unwrap();
    crds.create(&PostParams::default(), &crd).await.unwrap();

    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("example.com", "v1", "Widget"),
        "widgets",
    );
    let widgets: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &ar);
    match widgets.list(&ListParams::default()).await {
        Err(kube::Error::Api(status)) => assert_eq!(status.code, 404, "{status:?}"),
        other => panic!("widgets must 404 before the CRD is established, got {other:?}"),
    }
    let established = tokio::time::timeout(
        DEADLINE,
        await_condition(
            crds.clone(),
            "widgets.example.com",
            conditions::is_crd_established(),
        ),
    )
    .await
    .expect("established within the deadline")
    .unwrap()
    .expect("the CRD exists");
    let conditions = established.status.unwrap().conditions.unwrap();
    let names_accepted = conditions
        .iter()
        .find(|c| c.type_ == "NamesAccepted")
        .expect("NamesAccepted is set");
    assert_eq!(names_accepted.status, "True");
    let est = conditions
        .iter()
        .find(|c| c.type_ == "Established")
        .unwrap();
    assert_eq!(est.reason.as_deref(), Some("InitialNamesAccepted"));
    assert!(
        widgets
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
}

#[tokio::test]
async fn watcher_relists_after_an_in_stream_410() {
    let (sim, cms) = start_with_api::<ConfigMap>().await;
    let mk = |name: &str| -> ConfigMap {
        serde_json::from_value(json!({"metadata": {"name": name}})).unwrap()
    };
    cms.create(&PostParams::default(), &mk("before"))
        .await
        .unwrap();

    let mut stream = watcher(cms.clone(), watcher::Config::default().labels("!ignored")).boxed();
    let mut next = async || {
        tokio::time::timeout(DEADLINE, stream.next())
            .await
            .expect("an event within the deadline")
    };
    let mut inits = 0;
    loop {
        match next().await.expect("the stream continues") {
            Ok(watcher::Event::Init) => inits += 1,
            Ok(watcher::Event::InitDone) => break,
            Ok(_) => {}
            Err(e) => panic!("unexpected error before the first sync: {e}"),
        }
    }
    assert_eq!(inits, 1);

    sim.store().compact();
    cms.create(&PostParams::default(), &mk("after"))
        .await
        .unwrap();

    let mut saw_error_410 = false;
    let mut relisted = Vec::new();
    loop {
        match next().await.expect("the stream continues") {
            Err(watcher::Error::WatchError(status)) => {
                assert_eq!(status.code, 410, "{status:?}");
                assert_eq!(status.reason, "Expired");
                saw_error_410 = true;
            }
            Err(e) => panic!("unexpected error: {e}"),
            Ok(watcher::Event::Init) => relisted.clear(),
            Ok(watcher::Event::InitApply(cm)) => relisted.push(cm.metadata.name.unwrap()),
            Ok(watcher::Event::InitDone) => break,
            Ok(_) => {}
        }
    }
    assert!(saw_error_410, "the watch reported 410 Expired");
    relisted.sort();
    assert!(
        relisted.contains(&"after".to_string()) && relisted.contains(&"before".to_string()),
        "{relisted:?}"
    );
    let rv = list_version(&cms).await;
    assert!(!rv.is_empty());
}

#[tokio::test]
async fn server_side_apply_conflicts_without_force_and_takes_over_with_force() {
    let (_sim, deployments) = start_with_api::<Deployment>().await;
    let mut desired: serde_json::Value = serde_yaml::from_str(WEB_DEPLOYMENT).unwrap();
    deployments
        .patch(
            "web",
            &PatchParams::apply("dev-env"),
            &Patch::Apply(&desired),
        )
        .await
        .unwrap();

    desired["spec"]["replicas"] = json!(5);
    let err = deployments
        .patch("web", &PatchParams::apply("other"), &Patch::Apply(&desired))
        .await
        .unwrap_err();
    let kube::Error::Api(status) = err else {
        panic!("expected an API error, got {err:?}")
    };
    assert_eq!(status.code, 409);
    assert_eq!(status.reason, "Conflict");
    assert_eq!(
        status.message,
        "Apply failed with 1 conflict: conflict with \"dev-env\": .spec.replicas"
    );
    let causes = status.details.unwrap().causes;
    assert_eq!(causes[0].field, ".spec.replicas");
    assert_eq!(causes[0].reason, "FieldManagerConflict");
    assert_eq!(deployments.get("web").await.unwrap().spec.replicas, Some(2));

    let forced = deployments
        .patch(
            "web",
            &PatchParams::apply("other").force(),
            &Patch::Apply(&desired),
        )
        .await
        .unwrap();
    assert_eq!(forced.spec.replicas, Some(5));
    let managed = forced.metadata.managed_fields.unwrap();
    let owner_of_replicas: Vec<&str> = managed
        .iter()
        .filter(|m| {
            m.fields_v1
                .as_ref()
                .is_some_and(|f| f.0.pointer("/f:spec/f:replicas").is_some())
        })
        .map(|m| m.manager.as_deref().unwrap())
        .collect();
    assert_eq!(owner_of_replicas, ["other"]);

    let err = deployments
        .patch("web", &PatchParams::default(), &Patch::Apply(&desired))
        .await
        .unwrap_err();
    let kube::Error::Api(status) = err else {
        panic!("expected an API error")
    };
    assert_eq!(status.code, 422);
    assert!(
        status
            .message
            .contains("fieldManager: Required value: is required for apply patch"),
        "{}",
        status.message
    );
}

#[tokio::test]
async fn apply_creates_custom_resources_and_conflicts_on_them_too() {
    let sim = start().await;
    install_crd(&sim, GADGET_CRD).await;
    let client = sim.client().await.unwrap();
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("example.com", "v1", "Gadget"),
        "gadgets",
    );
    let gadgets: Api<DynamicObject> = Api::namespaced_with(client, "default", &ar);
    let body = json!({"apiVersion": "example.com/v1", "kind": "Gadget", "metadata": {"name": "g"}, "spec": {"mode": "a"}});
    gadgets
        .patch("g", &PatchParams::apply("one"), &Patch::Apply(&body))
        .await
        .unwrap();
    let other = json!({"apiVersion": "example.com/v1", "kind": "Gadget", "metadata": {"name": "g"}, "spec": {"mode": "b"}});
    let err = gadgets
        .patch("g", &PatchParams::apply("two"), &Patch::Apply(&other))
        .await
        .unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 409),
        "{err:?}"
    );
    let got = gadgets
        .patch(
            "g",
            &PatchParams::apply("two").force(),
            &Patch::Apply(&other),
        )
        .await
        .unwrap();
    assert_eq!(got.data["spec"]["mode"], "b");
}

#[tokio::test]
async fn streaming_list_watcher_gets_initial_events_and_the_end_bookmark() {
    let (_sim, cms) = start_with_api::<ConfigMap>().await;
    for name in ["one", "two"] {
        let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
        cms.create(&PostParams::default(), &cm).await.unwrap();
    }
    let mut stream = watcher(cms.clone(), watcher::Config::default().streaming_lists()).boxed();
    let mut names = Vec::new();
    loop {
        match tokio::time::timeout(DEADLINE, stream.next())
            .await
            .expect("an event")
            .expect("the stream continues")
        {
            Ok(watcher::Event::InitApply(cm)) => names.push(cm.metadata.name.unwrap()),
            Ok(watcher::Event::InitDone) => break,
            Ok(_) => {}
            Err(e) => panic!("unexpected error: {e}"),
        }
    }
    names.sort();
    assert_eq!(
        names,
        ["kube-root-ca.crt", "one", "two"],
        "with the published CA"
    );
    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "three"}})).unwrap();
    cms.create(&PostParams::default(), &cm).await.unwrap();
    match tokio::time::timeout(DEADLINE, stream.next())
        .await
        .unwrap()
        .unwrap()
    {
        Ok(watcher::Event::Apply(cm)) => assert_eq!(cm.metadata.name.as_deref(), Some("three")),
        other => panic!("unexpected {other:?}"),
    }
}

#[tokio::test]
async fn aggregated_discovery_lists_every_group_in_one_document() {
    let sim = start().await;
    install_crd(&sim, WIDGET_CRD).await;
    let client = sim.client().await.unwrap();
    let discovery = tokio::time::timeout(DEADLINE, Discovery::new(client.clone()).run_aggregated())
        .await
        .unwrap()
        .unwrap();
    for (group, kind) in [
        ("", "Pod"),
        ("apps", "Deployment"),
        ("example.com", "Widget"),
    ] {
        let gvk = GroupVersionKind::gvk(group, "v1", kind);
        let (_, caps) = discovery
            .resolve_gvk(&gvk)
            .unwrap_or_else(|| panic!("{gvk:?} is discovered"));
        assert!(caps.supports_operation("patch"));
    }
    let (code, body) = crate::get(&client, "/apis").await;
    assert_eq!(code, 200);
    assert_eq!(
        crate::json(&body)["kind"],
        "APIGroupList",
        "without the aggregated Accept header, the legacy list"
    );
}
