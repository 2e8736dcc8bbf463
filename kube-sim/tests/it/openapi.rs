//! The OpenAPI documents: what `kubectl explain` prints from them for built-in kinds and custom resources, how
//! they follow CRD changes, and what raw clients get from `/openapi/v2` and `/openapi/v3`.

use serde_json::Value;

use crate::{
    WEB_DEPLOYMENT, WIDGET_CRD, apply, install_crd, json, kubectl_at, kubectl_ok, manifest, start,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_explain_prints_the_type_and_description_of_built_in_fields() {
    let sim = start().await;
    let replicas = kubectl_ok(&sim, &["explain", "deployment.spec.replicas"]).await;
    assert!(replicas.contains("KIND:       Deployment"), "{replicas}");
    assert!(replicas.contains("FIELD: replicas <integer>"), "{replicas}");
    assert!(
        replicas
            .contains("Number of desired pods. This is a pointer to distinguish between explicit"),
        "{replicas}"
    );
    let deployment = kubectl_ok(&sim, &["explain", "deployment"]).await;
    assert!(
        deployment.contains("  metadata\t<ObjectMeta>\n")
            && deployment.contains("  spec\t<DeploymentSpec>\n"),
        "neither is required of a Deployment: {deployment}"
    );
    let image = kubectl_ok(&sim, &["explain", "pods.spec.containers.image"]).await;
    assert!(image.contains("FIELD: image <string>"), "{image}");
    assert!(image.contains("Container image name."), "{image}");
    let containers = kubectl_ok(&sim, &["explain", "pods.spec.containers"]).await;
    for line in [
        "FIELD: containers <[]Container>",
        "  image\t<string>",
        "  name\t<string> -required-",
    ] {
        assert!(containers.contains(line), "{line:?} in {containers}");
    }
}

/// The served group versions listed in the `/openapi/v3` index, with their URLs.
async fn v3_index(client: &kube::Client) -> serde_json::Map<String, Value> {
    let (code, body) = crate::get(client, "/openapi/v3").await;
    assert_eq!(code, 200, "{body}");
    json(&body)["paths"]
        .as_object()
        .expect("the index has paths")
        .clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_explain_follows_a_crd_while_it_is_added_changed_and_removed() {
    let sim = start().await;
    let client = sim.client().await.expect("a client");
    assert!(!v3_index(&client).await.contains_key("apis/example.com/v1"));
    install_crd(&sim, WIDGET_CRD).await;
    let index = v3_index(&client).await;
    let first_url = index["apis/example.com/v1"]["serverRelativeURL"].clone();
    assert!(index.contains_key("apis/apps/v1") && index.contains_key("api/v1"));

    let size = kubectl_ok(&sim, &["explain", "widget.spec.size"]).await;
    assert!(size.contains("GROUP:      example.com"), "{size}");
    assert!(size.contains("FIELD: size <integer>"), "{size}");
    let recursive = kubectl_ok(&sim, &["explain", "widget", "--recursive"]).await;
    for line in [
        "  metadata\t<ObjectMeta>",
        "    size\t<integer>",
        "    colors\t<[]string>",
    ] {
        assert!(recursive.contains(line), "{line:?} in {recursive}");
    }

    let changed = WIDGET_CRD.replace(
        "size: {type: integer}",
        "diameter: {type: integer, description: How wide the widget is.}",
    );
    let (_dir, path) = manifest(&changed);
    // A client-side apply: kubectl computes the patch of the CRD from the OpenAPI v3 schema.
    kubectl_ok(&sim, &["apply", "-f", path.to_str().unwrap()]).await;
    let diameter = kubectl_ok(&sim, &["explain", "widget.spec.diameter"]).await;
    assert!(diameter.contains("FIELD: diameter <integer>"), "{diameter}");
    assert!(diameter.contains("How wide the widget is."), "{diameter}");
    let gone = kubectl_at(sim.kubeconfig_path(), &["explain", "widget.spec.size"]).await;
    assert!(!gone.status.success());
    let stderr = String::from_utf8_lossy(&gone.stderr);
    assert!(stderr.contains("field \"size\" does not exist"), "{stderr}");
    let index = v3_index(&client).await;
    assert_ne!(index["apis/example.com/v1"]["serverRelativeURL"], first_url);

    kubectl_ok(&sim, &["delete", "crd", "widgets.example.com"]).await;
    let index = v3_index(&client).await;
    assert!(!index.contains_key("apis/example.com/v1"), "{index:?}");
    assert!(index.contains_key("apis/apps/v1"));
}

/// A `GET` with an `Accept` header: the status, the headers and the body text.
async fn get_accepting(
    client: &kube::Client,
    uri: &str,
    accept: &str,
) -> (u16, http::HeaderMap, String) {
    use http_body_util::BodyExt as _;
    let req = http::Request::builder()
        .uri(uri)
        .header(http::header::ACCEPT, accept)
        .body(kube::client::Body::empty())
        .expect("a valid request");
    let res = client.send(req).await.expect("the request is sent");
    let (parts, body) = res.into_parts();
    let bytes = body.collect().await.expect("the body is read").to_bytes();
    (
        parts.status.as_u16(),
        parts.headers,
        String::from_utf8_lossy(&bytes).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openapi_v2_is_swagger_json_and_protobuf_alone_is_not_acceptable() {
    let sim = start().await;
    let client = sim.client().await.expect("a client");
    let protobuf = "application/com.github.proto-openapi.spec.v2@v1.0+protobuf";
    let accept = format!("{protobuf}, application/json;q=0.9");
    let (code, _, body) = get_accepting(&client, "/openapi/v2", &accept).await;
    assert_eq!(code, 200);
    let doc = json(&body);
    assert_eq!(doc["swagger"], "2.0");
    let deployment = &doc["definitions"]["io.k8s.api.apps.v1.Deployment"];
    assert_eq!(
        deployment["x-kubernetes-group-version-kind"][0]["kind"],
        "Deployment"
    );
    assert_eq!(
        deployment["properties"]["metadata"]["$ref"],
        "#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
    );
    assert!(
        doc["paths"]["/apis/apps/v1/namespaces/{namespace}/deployments/{name}"]["patch"]
            .is_object()
    );

    let (code, _, body) = get_accepting(&client, "/openapi/v2", protobuf).await;
    assert_eq!(code, 406, "{body}");
    let status = json(&body);
    assert_eq!(status["kind"], "Status");
    assert_eq!(status["reason"], "NotAcceptable");

    let (code, body) = crate::post(&client, "/openapi/v2", &serde_json::json!({})).await;
    assert_eq!(code, 405, "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_version_document_at_its_hash_is_immutable() {
    let sim = start().await;
    let client = sim.client().await.expect("a client");
    let index = v3_index(&client).await;
    let url = index["apis/apps/v1"]["serverRelativeURL"]
        .as_str()
        .expect("a URL")
        .to_string();
    let (code, headers, body) = get_accepting(&client, &url, "application/json").await;
    assert_eq!(code, 200);
    assert_eq!(headers[http::header::CACHE_CONTROL], "public, immutable");
    assert!(headers.contains_key(http::header::EXPIRES));
    let doc = json(&body);
    assert_eq!(doc["openapi"], "3.0.0");
    let spec = &doc["components"]["schemas"]["io.k8s.api.apps.v1.DeploymentSpec"];
    assert_eq!(spec["properties"]["replicas"]["type"], "integer");
    assert_eq!(
        spec["properties"]["template"]["allOf"][0]["$ref"],
        "#/components/schemas/io.k8s.api.core.v1.PodTemplateSpec"
    );
    let (code, headers, _) =
        get_accepting(&client, "/openapi/v3/apis/apps/v1", "application/json").await;
    assert_eq!(code, 200);
    assert_eq!(headers[http::header::CACHE_CONTROL], "no-cache, private");
    let etag = headers[http::header::ETAG].to_str().unwrap().to_string();
    assert!(url.ends_with(etag.trim_matches('"')), "{etag} names {url}");
    let req = http::Request::builder()
        .uri("/openapi/v3/apis/apps/v1")
        .header(http::header::IF_NONE_MATCH, &etag)
        .body(kube::client::Body::empty())
        .unwrap();
    let res = client.send(req).await.expect("the request is sent");
    assert_eq!(res.status(), 304);
    let (code, headers, _) = get_accepting(
        &client,
        "/openapi/v3/apis/apps/v1?hash=0BSOLETE",
        "application/json",
    )
    .await;
    assert_eq!(code, 301);
    assert_eq!(headers[http::header::LOCATION], url.as_str());
    let (code, _, body) = get_accepting(&client, "/openapi/v3/apis/nothing.example/v1", "").await;
    assert_eq!(code, 404);
    assert_eq!(json(&body)["reason"], "NotFound");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_client_side_apply_deletes_and_merges_containers_by_the_openapi_merge_key() {
    let sim = start().await;
    let (_dir, path) = manifest(WEB_DEPLOYMENT);
    let path = path.to_str().unwrap();
    kubectl_ok(&sim, &["apply", "--validate=strict", "-f", path]).await;
    kubectl_ok(
        &sim,
        &[
            "set",
            "resources",
            "deployment/web",
            "-c",
            "app",
            "--limits=cpu=200m",
        ],
    )
    .await;
    // Without the schema's merge keys kubectl would send the whole list, which the server merges by name:
    // the sidecar would stay.
    let without_sidecar = WEB_DEPLOYMENT
        .replace("nginx:1.27", "nginx:1.28")
        .replace("      - name: sidecar\n        image: busybox:1.36\n", "");
    assert!(!without_sidecar.contains("sidecar"));
    let (_dir2, changed) = manifest(&without_sidecar);
    let out = kubectl_at(
        sim.kubeconfig_path(),
        &[
            "apply",
            "--validate=strict",
            "-f",
            changed.to_str().unwrap(),
        ],
    )
    .await;
    assert!(out.status.success(), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("openapi"), "{stderr}");
    let got = json(&kubectl_ok(&sim, &["get", "deployment", "web", "-o", "json"]).await);
    let containers = got["spec"]["template"]["spec"]["containers"]
        .as_array()
        .unwrap();
    assert_eq!(containers.len(), 1, "{containers:?}");
    let app = &containers[0];
    assert_eq!(app["image"], "nginx:1.28");
    assert_eq!(app["resources"]["limits"]["cpu"], "200m", "{app}");
}

/// Runs `kubectl edit` with a `sed` script as the editor; returns kubectl's output.
async fn kubectl_edit(sim: &kube_sim::Sim, what: &str, script: &str) -> std::process::Output {
    let kubeconfig = sim.kubeconfig_path().to_path_buf();
    let cache = tempfile::tempdir().expect("a temporary kubectl cache");
    let (what, editor) = (what.to_string(), format!("sed -i {script}"));
    tokio::time::timeout(
        crate::DEADLINE,
        tokio::task::spawn_blocking(move || {
            std::process::Command::new(crate::KUBECTL)
                .args(["edit", &what, "--validate=strict", "--cache-dir"])
                .arg(cache.path())
                .env("KUBECONFIG", &kubeconfig)
                .env("KUBE_EDITOR", &editor)
                .output()
                .expect("kubectl runs")
        }),
    )
    .await
    .expect("kubectl finishes within the deadline")
    .expect("the kubectl task does not panic")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_edit_patches_built_in_and_custom_objects_and_strict_validation_holds() {
    let sim = start().await;
    install_crd(&sim, WIDGET_CRD).await;
    let widget = "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w1, namespace: default}\nspec: {size: 2}\n";
    let (_dir, path) = manifest(&widget.replace("size: 2", "size: 2, bogus: 1"));
    let out = kubectl_at(
        sim.kubeconfig_path(),
        &["create", "--validate=strict", "-f", path.to_str().unwrap()],
    )
    .await;
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("unknown field \"spec.bogus\""), "{stderr}");
    let (_dir, path) = manifest(widget);
    kubectl_ok(
        &sim,
        &["create", "--validate=strict", "-f", path.to_str().unwrap()],
    )
    .await;
    apply(&sim, WEB_DEPLOYMENT).await;

    let out = kubectl_edit(&sim, "deployment/web", "s/replicas:\\ 2/replicas:\\ 4/").await;
    assert!(out.status.success(), "{out:?}");
    let out = kubectl_edit(&sim, "widget/w1", "s/size:\\ 2/size:\\ 6/").await;
    assert!(out.status.success(), "{out:?}");
    let replicas = kubectl_ok(
        &sim,
        &[
            "get",
            "deployment",
            "web",
            "-o",
            "jsonpath={.spec.replicas}",
        ],
    )
    .await;
    assert_eq!(replicas, "4");
    let size = kubectl_ok(
        &sim,
        &["get", "widget", "w1", "-o", "jsonpath={.spec.size}"],
    )
    .await;
    assert_eq!(size, "6");
}
