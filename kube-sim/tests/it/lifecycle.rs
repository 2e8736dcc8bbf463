//! Object lifecycle over HTTP: graceful pod deletion, finalizers, namespace termination, defaulting, scale.

use futures::StreamExt as _;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod};
use kube::api::{
    Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams,
};
use serde_json::json;

use crate::{DEADLINE, list_version, start, start_with_api};

fn pod(name: &str, node: Option<&str>) -> Pod {
    let mut spec = json!({"containers": [{"name": "app", "image": "registry.local:5000/app:v1"}]});
    if let Some(n) = node {
        spec["nodeName"] = json!(n);
    }
    serde_json::from_value(
        json!({"metadata": {"name": name, "labels": {"app": "x"}}, "spec": spec}),
    )
    .unwrap()
}

#[tokio::test]
async fn pods_are_defaulted_and_deleted_gracefully_when_scheduled() {
    let (_sim, pods) = start_with_api::<Pod>().await;
    let created = pods
        .create(&PostParams::default(), &pod("p", Some("node-1")))
        .await
        .unwrap();
    let spec = created.spec.clone().unwrap();
    assert_eq!(spec.termination_grace_period_seconds, Some(30));
    assert_eq!(spec.restart_policy.as_deref(), Some("Always"));
    assert_eq!(
        spec.containers[0].image_pull_policy.as_deref(),
        Some("IfNotPresent")
    );
    assert_eq!(
        spec.containers[0].termination_message_path.as_deref(),
        Some("/dev/termination-log")
    );
    assert_eq!(created.status.unwrap().phase.as_deref(), Some("Pending"));
    assert!(created.metadata.uid.is_some() && created.metadata.creation_timestamp.is_some());

    let deleted = pods.delete("p", &DeleteParams::default()).await.unwrap();
    let terminating = deleted
        .left()
        .expect("a graceful delete returns the object");
    assert!(terminating.metadata.deletion_timestamp.is_some());
    assert_eq!(terminating.metadata.deletion_grace_period_seconds, Some(30));
    assert!(
        pods.get("p").await.is_ok(),
        "the pod stays until the kubelet confirms"
    );

    let gone = pods
        .delete(
            "p",
            &DeleteParams {
                grace_period_seconds: Some(0),
                ..DeleteParams::default()
            },
        )
        .await;
    assert!(gone.is_ok());
    assert!(matches!(pods.get("p").await, Err(kube::Error::Api(s)) if s.code == 404));
}

#[tokio::test]
async fn finalizers_hold_deletion_until_removed() {
    let (_sim, cms) = start_with_api::<ConfigMap>().await;
    let cm: ConfigMap = serde_json::from_value(
        json!({"metadata": {"name": "f", "finalizers": ["example.com/hold"]}}),
    )
    .unwrap();
    let created = cms.create(&PostParams::default(), &cm).await.unwrap();
    let mut events = cms
        .watch(
            &WatchParams::default().fields("metadata.name=f").timeout(20),
            &created.metadata.resource_version.unwrap(),
        )
        .await
        .unwrap()
        .boxed();
    cms.delete("f", &DeleteParams::default()).await.unwrap();
    let marked = cms.get("f").await.unwrap();
    assert!(marked.metadata.deletion_timestamp.is_some());
    cms.patch(
        "f",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    let mut kinds = Vec::new();
    while kinds.last() != Some(&"DELETED") {
        let e = tokio::time::timeout(DEADLINE, events.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        kinds.push(match e {
            WatchEvent::Modified(_) => "MODIFIED",
            WatchEvent::Deleted(_) => "DELETED",
            other => panic!("unexpected {other:?}"),
        });
    }
    assert_eq!(kinds, ["MODIFIED", "DELETED"]);
}

#[tokio::test]
async fn deleting_a_namespace_removes_its_contents_then_itself() {
    let sim = start().await;
    let client = sim.client().await.unwrap();
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": "doomed"}})).unwrap();
    let created = namespaces
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
    assert_eq!(
        created.metadata.labels.unwrap()["kubernetes.io/metadata.name"],
        "doomed"
    );
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "doomed");
    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "c"}})).unwrap();
    cms.create(&PostParams::default(), &cm).await.unwrap();

    let rv = namespaces
        .get("doomed")
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let mut events = namespaces
        .watch(
            &WatchParams::default()
                .fields("metadata.name=doomed")
                .timeout(20),
            &rv,
        )
        .await
        .unwrap()
        .boxed();
    namespaces
        .delete("doomed", &DeleteParams::default())
        .await
        .unwrap();
    loop {
        match tokio::time::timeout(DEADLINE, events.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap()
        {
            WatchEvent::Deleted(_) => break,
            WatchEvent::Modified(n) => {
                assert_eq!(n.status.unwrap().phase.as_deref(), Some("Terminating"));
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    assert!(
        cms.list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
    let err = cms.create(&PostParams::default(), &cm).await.unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 404),
        "{err:?}"
    );
}

#[tokio::test]
async fn a_thousand_objects_list_page_and_watch_consistently() {
    let (sim, cms) = start_with_api::<ConfigMap>().await;
    let before = list_version(&cms).await;
    let mut stream = cms
        .watch(
            &WatchParams::default().labels("group=g7").timeout(60),
            &before,
        )
        .await
        .unwrap()
        .boxed();
    for i in 0..1000 {
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": format!("c{i}"), "labels": {"group": format!("g{}", i % 20)}}, "data": {"i": i.to_string()}});
        sim.store()
            .create(
                &kube_sim::GroupResource::new("", "configmaps"),
                Some("default"),
                cm,
                &kube_sim::store::WriteOptions::manager("bench"),
            )
            .unwrap();
    }
    let all = cms
        .list(&ListParams::default().labels("group"))
        .await
        .unwrap();
    assert_eq!(all.items.len(), 1000);
    let g7 = cms
        .list(&ListParams::default().labels("group=g7"))
        .await
        .unwrap();
    assert_eq!(g7.items.len(), 50);
    let mut page = cms
        .list(&ListParams::default().labels("group").limit(300))
        .await
        .unwrap();
    let mut paged = page.items.len();
    while let Some(token) = page.metadata.continue_.clone().filter(|t| !t.is_empty()) {
        page = cms
            .list(
                &ListParams::default()
                    .labels("group")
                    .limit(300)
                    .continue_token(&token),
            )
            .await
            .unwrap();
        paged += page.items.len();
    }
    assert_eq!(paged, 1000);
    let mut seen = 0;
    while seen < 50 {
        match tokio::time::timeout(DEADLINE, stream.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap()
        {
            WatchEvent::Added(cm) => {
                assert_eq!(cm.metadata.labels.unwrap()["group"], "g7");
                seen += 1;
            }
            other => panic!("unexpected {other:?}"),
        }
    }
}

struct FixedLogs;

impl kube_sim::store::PodLogs for FixedLogs {
    fn logs(
        &self,
        pod: &serde_json::Value,
        container: Option<&str>,
    ) -> kube_sim::store::Result<String> {
        let name = pod["metadata"]["name"].as_str().unwrap_or("");
        Ok(format!("{name}/{} started\n", container.unwrap_or("app")))
    }
}

/// Sends one plain-HTTP request and returns the status code and body.
async fn http_get(addr: std::net::SocketAddr, path: &str, token: &str) -> (u16, String) {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let req = format!(
        "GET {path} HTTP/1.1\r\nHost: sim\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n\r\n"
    );
    tcp.write_all(req.as_bytes()).await.unwrap();
    let mut response = String::new();
    tokio::time::timeout(DEADLINE, tcp.read_to_string(&mut response))
        .await
        .unwrap()
        .unwrap();
    let code = response[9..12].parse().unwrap();
    let body = response[response.find("\r\n\r\n").unwrap() + 4..].to_string();
    (code, body)
}

#[tokio::test]
async fn pod_logs_come_from_the_installed_source() {
    use kube_sim::store::{Store, StoreConfig, WriteOptions};
    let store = Store::new(StoreConfig { history: 100 });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, shutdown) = tokio::sync::watch::channel(false);
    let state = std::sync::Arc::new(kube_sim::server::ServerState {
        store: store.clone(),
        token: "secret".into(),
        advertise: addr.to_string(),
        bookmark_interval: std::time::Duration::from_secs(60),
        shutdown,
        openapi: Default::default(),
    });
    let server = tokio::spawn(kube_sim::server::serve(listener, None, state));
    let p = serde_json::to_value(pod("logged", Some("node-1"))).unwrap();
    store
        .create(
            &kube_sim::GroupResource::pods(),
            Some("default"),
            p,
            &WriteOptions::manager("t"),
        )
        .unwrap();

    let path = "/api/v1/namespaces/default/pods/logged/log?container=app";
    assert_eq!(
        http_get(addr, path, "secret").await,
        (200, String::new()),
        "no source installed yet"
    );
    store.set_pod_logs(std::sync::Arc::new(FixedLogs));
    assert_eq!(
        http_get(addr, path, "secret").await,
        (200, "logged/app started\n".to_string())
    );
    let (code, body) = http_get(
        addr,
        "/api/v1/namespaces/default/pods/missing/log",
        "secret",
    )
    .await;
    assert_eq!(code, 404, "{body}");
    assert_eq!(http_get(addr, path, "wrong").await.0, 401);
    stop.send(true).unwrap();
    tokio::time::timeout(DEADLINE, server)
        .await
        .unwrap()
        .unwrap();
}

#[tokio::test]
async fn the_kubernetes_service_has_the_first_cluster_ip() {
    let sim = start().await;
    let services: Api<k8s_openapi::api::core::v1::Service> =
        Api::namespaced(sim.client().await.unwrap(), "default");
    let svc = services.get("kubernetes").await.unwrap();
    assert_eq!(svc.spec.unwrap().cluster_ip.as_deref(), Some("10.43.0.1"));
}

#[tokio::test]
async fn delete_collection_honours_the_label_selector() {
    let (_sim, cms) = start_with_api::<ConfigMap>().await;
    for (name, keep) in [("a", "no"), ("b", "no"), ("c", "yes")] {
        let cm: ConfigMap =
            serde_json::from_value(json!({"metadata": {"name": name, "labels": {"keep": keep}}}))
                .unwrap();
        cms.create(&PostParams::default(), &cm).await.unwrap();
    }
    cms.delete_collection(
        &DeleteParams::default(),
        &ListParams::default().labels("keep=no"),
    )
    .await
    .unwrap();
    let left: Vec<String> = cms
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|c| c.metadata.name.unwrap())
        .collect();
    assert_eq!(
        left,
        ["c", "kube-root-ca.crt"],
        "the selector spared the CA"
    );
}

#[tokio::test]
async fn plain_http_mode_serves_the_same_api_and_still_requires_the_token() {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let mut config = kube_sim::Config::ephemeral();
    config.tls = false;
    let sim = crate::start_with(config).await;
    assert!(sim.url().starts_with("http://"), "{}", sim.url());
    assert!(sim.ca_pem().is_none());
    let namespaces: Api<Namespace> = Api::all(sim.client().await.unwrap());
    assert!(namespaces.get("default").await.is_ok());

    let mut tcp = tokio::net::TcpStream::connect(sim.addr()).await.unwrap();
    tcp.write_all(b"GET /api/v1/namespaces HTTP/1.1\r\nHost: sim\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut response = String::new();
    tokio::time::timeout(DEADLINE, tcp.read_to_string(&mut response))
        .await
        .unwrap()
        .unwrap();
    assert!(response.starts_with("HTTP/1.1 401"), "{response}");
    let body = &response[response.find("\r\n\r\n").unwrap() + 4..];
    let status = crate::json(body);
    assert_eq!(status["code"], 401);
    assert_eq!(status["status"], "Failure");
    for path in ["/healthz", "/readyz", "/livez"] {
        let (code, body) = http_get(sim.addr(), path, "none").await;
        assert_eq!((code, body.as_str()), (200, "ok"), "{path} needs no token");
    }
}

#[tokio::test]
async fn orphan_deletion_removes_the_owner_reference_from_dependents() {
    let (_sim, cms) = start_with_api::<ConfigMap>().await;
    let owner: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "owner"}})).unwrap();
    let owner = cms.create(&PostParams::default(), &owner).await.unwrap();
    let uid = owner.metadata.uid.unwrap();
    let dependent: ConfigMap = serde_json::from_value(
        json!({"metadata": {"name": "dependent", "ownerReferences": [
        {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": uid}]}}),
    )
    .unwrap();
    cms.create(&PostParams::default(), &dependent)
        .await
        .unwrap();
    cms.delete("owner", &DeleteParams::orphan()).await.unwrap();
    assert!(cms.get_opt("owner").await.unwrap().is_none());
    let orphaned = cms.get("dependent").await.unwrap();
    assert!(
        orphaned.metadata.owner_references.is_none(),
        "{:?}",
        orphaned.metadata.owner_references
    );
}
