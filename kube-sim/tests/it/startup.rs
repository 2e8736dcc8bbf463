//! What operators use at start-up: anonymous health and version, the root CA in every namespace, the
//! service-account admission, Leases for leader election, and the reviews behind `kubectl auth`.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use kube_lease_manager::{LeaseManagerBuilder, LeaseParams};
use serde_json::json;

use crate::{DEADLINE, kubectl_ok, start};

/// A GET without credentials, through a client that trusts the simulator's CA.
async fn anonymous_get(sim: &kube_sim::Sim, path: &str) -> u16 {
    let mut config = kube::Config::new(sim.url().parse().unwrap());
    config.root_cert = Some(vec![rustls_der(sim.ca_pem().expect("a CA"))]);
    let client = kube::Client::try_from(config).expect("an anonymous client");
    let req = http::Request::get(path).body(Vec::new()).unwrap();
    match client.request_text(req).await {
        Ok(_) => 200,
        Err(kube::Error::Api(s)) => s.code,
        Err(e) => panic!("GET {path}: {e}"),
    }
}

fn rustls_der(pem: &str) -> Vec<u8> {
    let body: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
    base64::Engine::decode(&base64::engine::general_purpose::STANDARD, body).unwrap()
}

#[tokio::test]
async fn health_and_version_need_no_credentials_the_api_does() {
    let sim = start().await;
    for path in ["/version", "/healthz", "/readyz", "/livez"] {
        assert_eq!(anonymous_get(&sim, path).await, 200, "{path}");
    }
    assert_eq!(anonymous_get(&sim, "/api/v1/namespaces").await, 401);
}

async fn eventually<T>(mut check: impl AsyncFnMut() -> Option<T>) -> T {
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(tokio::time::Instant::now() < deadline, "in time");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn every_namespace_gets_the_root_ca_and_keeps_it() {
    let sim = start().await;
    let ca = sim.ca_pem().expect("a CA").to_string();
    let client = sim.client().await.unwrap();
    let default: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    eventually(async || default.get_opt("kube-root-ca.crt").await.unwrap()).await;
    let out = kubectl_ok(
        &sim,
        &[
            "get",
            "configmap",
            "kube-root-ca.crt",
            "-n",
            "default",
            "-o",
            "jsonpath={.data.ca\\.crt}",
        ],
    )
    .await;
    assert_eq!(out, ca, "kubectl reads the CA the server presents");
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    let ns = serde_json::from_value(json!({"metadata": {"name": "team"}})).unwrap();
    namespaces
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(client, "team");
    let first = eventually(async || cms.get_opt("kube-root-ca.crt").await.unwrap()).await;
    assert_eq!(first.data.unwrap()["ca.crt"], ca);
    cms.delete("kube-root-ca.crt", &DeleteParams::default())
        .await
        .unwrap();
    let again = eventually(async || {
        let cm = cms.get_opt("kube-root-ca.crt").await.unwrap()?;
        (cm.metadata.uid != first.metadata.uid).then_some(cm)
    })
    .await;
    assert_eq!(
        again.data.unwrap()["ca.crt"],
        ca,
        "the publisher restores it"
    );
}

fn pod(name: &str, extra: serde_json::Value) -> Pod {
    let mut v = json!({"metadata": {"name": name},
        "spec": {"containers": [{"name": "app", "image": "app:1"}], "initContainers": [{"name": "init", "image": "init:1"}]}});
    if let (Some(spec), serde_json::Value::Object(extra)) = (v["spec"].as_object_mut(), extra) {
        spec.extend(extra);
    }
    serde_json::from_value(v).unwrap()
}

#[tokio::test]
async fn pods_run_as_a_service_account_with_its_credentials_mounted_unless_they_opt_out() {
    let sim = start().await;
    let pods: Api<Pod> = Api::namespaced(sim.client().await.unwrap(), "default");
    let pp = PostParams::default();
    let with = pods.create(&pp, &pod("with", json!({}))).await.unwrap();
    let spec = with.spec.unwrap();
    assert_eq!(spec.service_account_name.as_deref(), Some("default"));
    let volumes = spec.volumes.unwrap();
    assert_eq!(volumes.len(), 1);
    let volume = &volumes[0];
    assert!(
        volume.name.starts_with("kube-api-access-"),
        "{}",
        volume.name
    );
    let sources = volume.projected.as_ref().unwrap().sources.as_ref().unwrap();
    assert_eq!(
        sources[0].service_account_token.as_ref().unwrap().path,
        "token"
    );
    assert_eq!(
        sources[1].config_map.as_ref().unwrap().name,
        "kube-root-ca.crt"
    );
    for c in spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
    {
        let mounts = c.volume_mounts.as_ref().unwrap();
        assert_eq!(mounts[0].name, volume.name);
        assert_eq!(mounts[0].mount_path, kube_sim::store::SERVICE_ACCOUNT_PATH);
        assert_eq!(mounts[0].read_only, Some(true));
    }
    let without = pods
        .create(
            &pp,
            &pod("without", json!({"automountServiceAccountToken": false})),
        )
        .await
        .unwrap();
    assert_eq!(without.spec.unwrap().volumes, None, "the pod opted out");
    let out = kubectl_ok(
        &sim,
        &[
            "get",
            "pod",
            "with",
            "-o",
            "jsonpath={.spec.serviceAccountName}",
        ],
    )
    .await;
    assert_eq!(out, "default");
}

#[tokio::test]
async fn a_kube_rs_leader_election_acquires_renews_and_hands_over_a_lease() {
    let sim = start().await;
    let client = sim.client().await.unwrap();
    let manager = |identity: &str| {
        LeaseManagerBuilder::new(client.clone(), "controller-leader")
            .with_namespace("default")
            .with_parameters(LeaseParams::new(identity, 2, 1))
            .build()
    };
    let (mut leading, task) = manager("first")
        .await
        .expect("a lease manager")
        .watch()
        .await;
    let _ = tokio::time::timeout(DEADLINE, leading.wait_for(|l| *l))
        .await
        .expect("the first candidate leads in time");
    let leases: Api<Lease> = Api::namespaced(client.clone(), "default");
    let spec = leases.get("controller-leader").await.unwrap().spec.unwrap();
    assert_eq!(spec.holder_identity.as_deref(), Some("first"));
    assert_eq!(spec.lease_duration_seconds, Some(2));
    let acquired = spec.renew_time.unwrap();
    let second = manager("second").await.unwrap();
    let waiting = tokio::time::timeout(Duration::from_secs(4), second.changed()).await;
    assert!(
        waiting.is_err(),
        "the second candidate waits while the first renews"
    );
    let renewed = leases.get("controller-leader").await.unwrap().spec.unwrap();
    assert_eq!(renewed.holder_identity.as_deref(), Some("first"));
    assert!(
        renewed.renew_time.unwrap().0 > acquired.0,
        "the lease was renewed"
    );
    drop(leading);
    let first = task
        .await
        .unwrap()
        .expect("the first manager stops cleanly");
    first.release().await.unwrap();
    let led = tokio::time::timeout(DEADLINE, second.changed()).await;
    assert!(led.expect("the second candidate leads in time").unwrap());
    let after = leases.get("controller-leader").await.unwrap().spec.unwrap();
    assert_eq!(after.holder_identity.as_deref(), Some("second"));
    assert!(after.lease_transitions.unwrap_or(0) >= 1);
}

#[tokio::test]
async fn kubectl_auth_says_who_and_what() {
    let sim = start().await;
    let who = kubectl_ok(&sim, &["auth", "whoami", "-o", "json"]).await;
    let who: serde_json::Value = serde_json::from_str(&who).unwrap();
    assert_eq!(who["status"]["userInfo"]["username"], "system:admin");
    assert_eq!(who["kind"], "SelfSubjectReview");
    let can = kubectl_ok(
        &sim,
        &["auth", "can-i", "create", "deployments", "-n", "default"],
    )
    .await;
    assert_eq!(can.trim(), "yes");
    let list = kubectl_ok(&sim, &["auth", "can-i", "--list"]).await;
    assert!(list.contains("*.*"), "{list}");
    let resources = kubectl_ok(
        &sim,
        &[
            "api-resources",
            "--api-group=authorization.k8s.io",
            "-o",
            "wide",
        ],
    )
    .await;
    let row = resources
        .lines()
        .find(|l| l.starts_with("selfsubjectaccessreviews "))
        .unwrap_or_else(|| panic!("{resources}"));
    let verbs: Vec<&str> = row.split_whitespace().skip(4).collect();
    assert_eq!(verbs, ["create"], "a review is only created: {row}");
}

#[tokio::test]
async fn events_published_through_events_k8s_io_read_as_core_events_and_back() {
    use kube::runtime::events::{Event, EventType, Recorder, Reporter};
    let sim = start().await;
    let client = sim.client().await.unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let cm = eventually(async || cms.get_opt("kube-root-ca.crt").await.unwrap()).await;
    let reporter = Reporter {
        controller: "demo-operator".into(),
        instance: Some("demo-operator-0".into()),
    };
    let recorder = Recorder::new(client.clone(), reporter);
    let event = Event {
        type_: EventType::Normal,
        reason: "Checked".into(),
        note: Some("the CA is there".into()),
        action: "Check".into(),
        secondary: None,
    };
    let reference = kube::Resource::object_ref(&cm, &());
    recorder.publish(&event, &reference).await.unwrap();
    recorder.publish(&event, &reference).await.unwrap();

    let core = crate::kubectl_ok(
        &sim,
        &[
            "get",
            "events",
            "--field-selector",
            "reason=Checked",
            "-o",
            "json",
        ],
    )
    .await;
    let core: serde_json::Value = serde_json::from_str(&core).unwrap();
    let item = &core["items"][0];
    assert_eq!(
        core["items"].as_array().unwrap().len(),
        1,
        "one event, patched: {core}"
    );
    assert_eq!(item["apiVersion"], "v1");
    assert_eq!(item["message"], "the CA is there");
    assert_eq!(item["involvedObject"]["name"], "kube-root-ca.crt");
    assert_eq!(item["reportingComponent"], "demo-operator");
    assert_eq!(item["series"]["count"], 2, "the repeat patched the series");
    let name = item["metadata"]["name"].as_str().unwrap();
    let view = crate::kubectl_ok(
        &sim,
        &["get", "events.v1.events.k8s.io", name, "-o", "json"],
    )
    .await;
    let view: serde_json::Value = serde_json::from_str(&view).unwrap();
    assert_eq!(view["apiVersion"], "events.k8s.io/v1");
    assert_eq!(view["note"], "the CA is there");
    assert_eq!(view["regarding"]["kind"], "ConfigMap");
    assert!(view.get("message").is_none());
    let described = crate::kubectl_ok(&sim, &["describe", "configmap", "kube-root-ca.crt"]).await;
    assert!(
        described.contains("Checked") && described.contains("the CA is there"),
        "{described}"
    );
}
