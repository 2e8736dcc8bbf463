//! Protobuf request bodies: kubectl's typed creates (which send `application/vnd.kubernetes.protobuf`)
//! store the objects a JSON client would; unserved body media types get `415`, clients that accept
//! only protobuf get `406`.

use kube_sim::Sim;
use serde_json::Value;

use crate::{json, kubectl_at, kubectl_ok, raw, start};

/// kubectl with `command` split at spaces.
async fn kubectl_words(sim: &Sim, command: &str) -> String {
    let args: Vec<&str> = command.split_whitespace().collect();
    kubectl_ok(sim, &args).await
}

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

    let out = kubectl_words(&sim, "create secret generic s --from-literal=a=b -n x").await;
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
    let out = kubectl_words(&sim, "create deployment web --image=nginx --replicas=3").await;
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

    kubectl_words(&sim, "create deployment idle --image=nginx --replicas=0").await;
    let idle = get_json(&sim, &["deployment", "idle"]).await;
    assert_eq!(idle["spec"]["replicas"], 0, "an explicit zero is kept");

    let out = kubectl_words(&sim, "expose deployment web --port=80 --target-port=8080").await;
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
    let sim = start().await;
    let client = sim.client().await.expect("a client");
    let send = |accept: &'static str| {
        let req = http::Request::builder()
            .uri("/api/v1/namespaces/default/configmaps")
            .header(http::header::ACCEPT, accept)
            .body(kube::client::Body::empty())
            .expect("a valid request");
        crate::send(&client, req)
    };
    let (code, text) = send("application/vnd.kubernetes.protobuf").await;
    assert_eq!(code, 406, "{text}");
    assert_eq!(json(&text)["reason"], "NotAcceptable");
    let (code, text) = send("application/vnd.kubernetes.protobuf,application/json").await;
    assert_eq!(code, 200, "{text}");
    assert_eq!(json(&text)["kind"], "ConfigMapList");
}

/// A Kubernetes protobuf body: the magic prefix and a `runtime.Unknown` holding `message`.
fn protobuf_body(api_version: &str, kind: &str, message: &impl prost::Message) -> Vec<u8> {
    use k8s_pb::apimachinery::pkg::runtime::{TypeMeta, Unknown};
    use prost::Message as _;
    let unknown = Unknown {
        type_meta: Some(TypeMeta {
            api_version: Some(api_version.into()),
            kind: Some(kind.into()),
        }),
        raw: Some(message.encode_to_vec()),
        content_encoding: None,
        content_type: None,
    };
    [b"k8s\0".as_slice(), &unknown.encode_to_vec()].concat()
}

/// Sends a protobuf body through a kube client: the status code and the (JSON) body text.
async fn send_protobuf(
    client: &kube::Client,
    method: http::Method,
    uri: &str,
    body: Vec<u8>,
) -> (u16, String) {
    let req = http::Request::builder()
        .method(method)
        .uri(uri)
        .header(
            http::header::CONTENT_TYPE,
            "application/vnd.kubernetes.protobuf",
        )
        .header(
            http::header::ACCEPT,
            "application/vnd.kubernetes.protobuf,application/json",
        )
        .body(kube::client::Body::from(body))
        .expect("a valid request");
    crate::send(client, req).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protobuf_bodies_create_update_and_delete() {
    use k8s_pb::api::core::v1::ConfigMap;
    use k8s_pb::apimachinery::pkg::apis::meta::v1::{DeleteOptions, ObjectMeta};
    let sim = start().await;
    let client = sim.client().await.expect("a client");
    let uri = "/api/v1/namespaces/default/configmaps";
    let mut cm = ConfigMap {
        metadata: Some(ObjectMeta {
            name: Some("pb".into()),
            ..Default::default()
        }),
        data: [("a".to_string(), "b".to_string())].into(),
        binary_data: [("bin".to_string(), vec![0, 1, 2])].into(),
        ..Default::default()
    };
    let body = protobuf_body("v1", "ConfigMap", &cm);
    let (code, text) = send_protobuf(&client, http::Method::POST, uri, body).await;
    assert_eq!(code, 201, "{text}");
    let created = json(&text);
    assert_eq!(created["data"]["a"], "b");
    assert_eq!(created["binaryData"]["bin"], "AAEC");
    let rv = created["metadata"]["resourceVersion"]
        .as_str()
        .expect("a resourceVersion");

    if let Some(m) = cm.metadata.as_mut() {
        m.resource_version = Some(rv.to_string());
    }
    cm.data = [("a".to_string(), "c".to_string())].into();
    let body = protobuf_body("v1", "ConfigMap", &cm);
    let (code, text) = send_protobuf(&client, http::Method::PUT, &format!("{uri}/pb"), body).await;
    assert_eq!(code, 200, "{text}");
    assert_eq!(json(&text)["data"]["a"], "c");

    let options = DeleteOptions {
        grace_period_seconds: Some(0),
        ..Default::default()
    };
    let body = protobuf_body("v1", "DeleteOptions", &options);
    let (code, text) =
        send_protobuf(&client, http::Method::DELETE, &format!("{uri}/pb"), body).await;
    assert_eq!(code, 200, "{text}");
    let (code, _) = crate::get(&client, &format!("{uri}/pb")).await;
    assert_eq!(code, 404, "the ConfigMap is gone");

    let garbage = b"k8s\0\x0a\xff".to_vec();
    let (code, text) = send_protobuf(&client, http::Method::POST, uri, garbage).await;
    assert_eq!(code, 400, "{text}");
    assert_eq!(json(&text)["reason"], "BadRequest");
}

/// An object as stored, with its managed fields, without what differs between two creates of the
/// same object (name, identity, times, the status controllers write).
fn comparable(mut obj: Value, name: &str) -> Value {
    let text = obj.to_string().replace(&format!("\"{name}\""), "\"NAME\"");
    obj = serde_json::from_str(&text).expect("still JSON");
    if let Some(o) = obj.as_object_mut() {
        o.remove("status");
    }
    let meta = obj["metadata"].as_object_mut().expect("metadata");
    for key in ["uid", "resourceVersion", "creationTimestamp"] {
        meta.remove(key);
    }
    // The Deployment controller's revision annotation and status writes come when they come.
    if let Some(Value::Object(annotations)) = meta.get_mut("annotations") {
        annotations.remove("deployment.kubernetes.io/revision");
        if annotations.is_empty() {
            meta.remove("annotations");
        }
    }
    // An object with no fields set (a bare ServiceAccount) has no managed fields.
    if let Some(Value::Array(managed)) = meta.get_mut("managedFields") {
        managed.retain(|entry| entry["manager"] == "kubectl-create");
        for entry in managed.iter_mut() {
            entry.as_object_mut().expect("an entry").remove("time");
        }
    }
    obj
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protobuf_creates_store_what_json_creates_store() {
    let sim = start().await;
    let cases: [(&str, &[&str]); 3] = [
        (
            "deployment",
            &["deployment", "--image=nginx", "--replicas=2"],
        ),
        (
            "secret",
            &["secret", "generic", "--from-literal=a=b", "--type=Opaque"],
        ),
        ("serviceaccount", &["serviceaccount"]),
    ];
    for (kind, create) in cases {
        let (head, flags) = create.split_at(if kind == "secret" { 2 } else { 1 });
        let typed = [&["create"], head, &["pb"], flags].concat();
        kubectl_ok(&sim, &typed).await;
        let client_side = [
            &["create"],
            head,
            &["js"],
            flags,
            &["--dry-run=client", "-o", "json"],
        ];
        let printed = kubectl_ok(&sim, &client_side.concat()).await;
        let (_dir, path) = crate::manifest(&printed);
        kubectl_ok(&sim, &["create", "-f", path.to_str().unwrap()]).await;
        let get = |name| [kind, name, "--show-managed-fields"];
        let from_protobuf = comparable(get_json(&sim, &get("pb")).await, "pb");
        let from_json = comparable(get_json(&sim, &get("js")).await, "js");
        assert_eq!(from_protobuf, from_json, "{kind}");
        if kind != "serviceaccount" {
            let manager = &from_protobuf["metadata"]["managedFields"][0]["manager"];
            assert_eq!(manager, "kubectl-create", "{kind}: the field sets compared");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_creates_roles_and_bindings() {
    let sim = start().await;
    let creates: [&[&str]; 4] = [
        &["create", "role", "r", "--verb=get,list", "--resource=pods"],
        &[
            "create",
            "rolebinding",
            "rb",
            "--role=r",
            "--serviceaccount=default:robot",
        ],
        &[
            "create",
            "clusterrole",
            "cr",
            "--verb=get",
            "--resource=nodes",
        ],
        &[
            "create",
            "clusterrolebinding",
            "crb",
            "--clusterrole=cr",
            "--user=ann",
        ],
    ];
    for args in creates {
        let out = kubectl_ok(&sim, args).await;
        assert!(out.contains("created"), "{out}");
    }
    let role = get_json(&sim, &["role", "r"]).await;
    assert_eq!(
        role["rules"][0]["verbs"],
        serde_json::json!(["get", "list"])
    );
    assert_eq!(role["rules"][0]["resources"], serde_json::json!(["pods"]));
    let binding = get_json(&sim, &["rolebinding", "rb"]).await;
    assert_eq!(binding["roleRef"]["name"], "r");
    assert_eq!(binding["subjects"][0]["kind"], "ServiceAccount");
    assert_eq!(binding["subjects"][0]["namespace"], "default");
    let cluster_binding = get_json(&sim, &["clusterrolebinding", "crb"]).await;
    assert_eq!(cluster_binding["subjects"][0]["name"], "ann");
    assert_eq!(
        cluster_binding["roleRef"]["apiGroup"],
        "rbac.authorization.k8s.io"
    );
}
