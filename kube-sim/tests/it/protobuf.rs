//! Protobuf request bodies: kubectl's typed creates (which send `application/vnd.kubernetes.protobuf`)
//! store the objects a JSON client would; unserved body media types get `415`, clients that accept
//! only protobuf get `406`.

use kube_sim::Sim;
use serde_json::Value;

use crate::{DEADLINE, json, kubectl_at, kubectl_ok, raw, start};

async fn get_json(sim: &Sim, what: &[&str]) -> Value {
    let args = [&["get"], what, &["-o", "json"]].concat();
    serde_json::from_str(&kubectl_ok(sim, &args).await).expect("kubectl prints JSON")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_creates_namespaces_configmaps_secrets_and_service_accounts() {
    let sim = start().await;
    let out = kubectl_ok(&sim, &["create", "namespace", "x"]).await;
    assert!(out.contains("namespace/x created"), "{out}");
    let ns = get_json(&sim, &["namespace", "x"]).await;
    assert_eq!(ns["metadata"]["name"], "x");
    assert_eq!(ns["status"]["phase"], "Active");

    let out = kubectl_ok(&sim, &["create", "configmap", "c", "--from-literal=a=b"]).await;
    assert!(out.contains("configmap/c created"), "{out}");
    let cm = get_json(&sim, &["configmap", "c"]).await;
    assert_eq!(cm["data"], serde_json::json!({"a": "b"}));
    assert_eq!(cm["metadata"]["namespace"], "default");

    let args = [
        "create",
        "secret",
        "generic",
        "s",
        "--from-literal=a=b",
        "-n",
        "x",
    ];
    let out = kubectl_ok(&sim, &args).await;
    assert!(out.contains("secret/s created"), "{out}");
    let secret = get_json(&sim, &["secret", "s", "-n", "x"]).await;
    assert_eq!(secret["data"], serde_json::json!({"a": "Yg=="}));
    assert_eq!(secret["type"], "Opaque");

    let out = kubectl_ok(&sim, &["create", "serviceaccount", "robot"]).await;
    assert!(out.contains("serviceaccount/robot created"), "{out}");
    let sa = get_json(&sim, &["serviceaccount", "robot"]).await;
    assert_eq!(sa["metadata"]["name"], "robot");
    assert!(sa["metadata"]["uid"].is_string(), "{sa}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_creates_and_exposes_a_deployment_and_runs_a_pod() {
    let sim = start().await;
    let args = [
        "create",
        "deployment",
        "web",
        "--image=nginx",
        "--replicas=3",
    ];
    let out = kubectl_ok(&sim, &args).await;
    assert!(out.contains("deployment.apps/web created"), "{out}");
    let deploy = get_json(&sim, &["deployment", "web"]).await;
    assert_eq!(deploy["spec"]["replicas"], 3);
    assert_eq!(deploy["spec"]["selector"]["matchLabels"]["app"], "web");
    let pod_spec = &deploy["spec"]["template"]["spec"];
    assert_eq!(pod_spec["containers"][0]["image"], "nginx");
    assert_eq!(pod_spec["containers"][0]["name"], "nginx");
    assert_eq!(
        deploy["spec"]["template"]["metadata"]["labels"]["app"],
        "web"
    );

    let args = [
        "create",
        "deployment",
        "idle",
        "--image=nginx",
        "--replicas=0",
    ];
    kubectl_ok(&sim, &args).await;
    let idle = get_json(&sim, &["deployment", "idle"]).await;
    assert_eq!(idle["spec"]["replicas"], 0, "an explicit zero is kept");

    let args = [
        "expose",
        "deployment",
        "web",
        "--port=80",
        "--target-port=8080",
    ];
    let out = kubectl_ok(&sim, &args).await;
    assert!(out.contains("service/web exposed"), "{out}");
    let svc = get_json(&sim, &["service", "web"]).await;
    let port = &svc["spec"]["ports"][0];
    assert_eq!(port["port"], 80);
    assert_eq!(port["targetPort"], 8080);
    assert_eq!(port["protocol"], "TCP");
    assert_eq!(svc["spec"]["selector"]["app"], "web");

    let out = kubectl_ok(&sim, &["run", "p", "--image=busybox", "--port=8080"]).await;
    assert!(out.contains("pod/p created"), "{out}");
    let pod = get_json(&sim, &["pod", "p"]).await;
    assert_eq!(pod["spec"]["containers"][0]["image"], "busybox");
    assert_eq!(
        pod["spec"]["containers"][0]["ports"][0]["containerPort"],
        8080
    );
    assert_eq!(pod["metadata"]["labels"]["run"], "p");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_server_dry_runs_print_the_object_and_store_nothing() {
    let sim = start().await;
    let cases: [&[&str]; 3] = [
        &["create", "deployment", "dry", "--image=nginx"],
        &["create", "configmap", "dry", "--from-literal=a=b"],
        &["run", "dry", "--image=busybox"],
    ];
    for args in cases {
        let args = [args, &["--dry-run=server", "-o", "yaml"]].concat();
        let out = kubectl_ok(&sim, &args).await;
        let printed: Value = serde_yaml::from_str(&out).expect("kubectl prints YAML");
        assert_eq!(printed["metadata"]["name"], "dry", "{out}");
        assert!(printed["metadata"]["uid"].is_string(), "{out}");
    }
    for kind in ["deployment", "configmap", "pod"] {
        let missing = kubectl_at(sim.kubeconfig_path(), &["get", kind, "dry"]).await;
        let stderr = String::from_utf8_lossy(&missing.stderr);
        assert!(
            stderr.contains("NotFound"),
            "{kind} dry is not stored: {stderr}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unserved_body_media_types_are_unsupported() {
    let sim = start().await;
    let client = sim.client().await.expect("a client");
    let uri = "/api/v1/namespaces/default/configmaps";
    let body = r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"m"}}"#;
    for content_type in ["application/cbor", "text/plain", "application/x-unknown"] {
        let (code, text) = raw(&client, http::Method::POST, uri, content_type, body).await;
        assert_eq!(code, 415, "{content_type}: {text}");
        let status = json(&text);
        assert_eq!(status["kind"], "Status");
        assert_eq!(status["reason"], "UnsupportedMediaType");
        assert_eq!(status["code"], 415);
    }
    let put = format!("{uri}/m");
    let (code, _) = raw(&client, http::Method::PUT, &put, "application/cbor", body).await;
    assert_eq!(code, 415, "an update reads its body the same way");

    let (code, text) = raw(&client, http::Method::POST, uri, "application/json", body).await;
    assert_eq!(code, 201, "{text}");
    let yaml = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: y}\ndata: {k: v}\n";
    let (code, text) = raw(&client, http::Method::POST, uri, "application/yaml", yaml).await;
    assert_eq!(code, 201, "{text}");
    assert_eq!(json(&text)["data"]["k"], "v");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_accepting_only_protobuf_are_not_acceptable() {
    use http_body_util::BodyExt as _;
    let sim = start().await;
    let client = sim.client().await.expect("a client");
    let send = |accept: &'static str| {
        let client = client.clone();
        async move {
            let req = http::Request::builder()
                .uri("/api/v1/namespaces/default/configmaps")
                .header(http::header::ACCEPT, accept)
                .body(kube::client::Body::empty())
                .expect("a valid request");
            let res = tokio::time::timeout(DEADLINE, client.send(req))
                .await
                .expect("the request finishes within the deadline")
                .expect("the request is sent");
            let code = res.status().as_u16();
            let body = res.into_body().collect().await.expect("a body").to_bytes();
            (code, String::from_utf8_lossy(&body).into_owned())
        }
    };
    let (code, text) = send("application/vnd.kubernetes.protobuf").await;
    assert_eq!(code, 406, "{text}");
    assert_eq!(json(&text)["reason"], "NotAcceptable");
    let (code, text) = send("application/vnd.kubernetes.protobuf,application/json").await;
    assert_eq!(code, 200, "{text}");
    assert_eq!(json(&text)["kind"], "ConfigMapList");
}
