//! Validation as real clients meet it: custom resources refused by their schema and CEL rules, schema
//! defaults, the rules of built-in types, finalizers during deletion, and field validation modes.

use http::Method;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, ValidationDirective};
use kube_sim::Sim;
use serde_json::{Value, json};

use crate::{
    KUBECTL, WEB_DEPLOYMENT, install_crd, json, kubectl_at, kubectl_ok, manifest, post, raw, start,
};

/// A WorkerPool-like CRD, `pools.example.com`: bounds, an enum, defaults, a CEL rule and a transition rule.
const POOL_CRD: &str = include_str!("fixtures/pool-crd.yaml");

const POOLS: &str = "/apis/example.com/v1/namespaces/default/pools";

fn pool(name: &str, spec: &str) -> String {
    format!(
        "apiVersion: example.com/v1\nkind: Pool\nmetadata:\n  name: {name}\n  namespace: default\nspec:\n{spec}"
    )
}

/// Runs kubectl with a manifest; returns whether it succeeded and its stderr.
async fn kubectl_with(sim: &Sim, args: &[&str], contents: &str) -> (bool, String) {
    let (_dir, path) = manifest(contents);
    let mut all: Vec<&str> = args.to_vec();
    all.extend(["-f", path.to_str().unwrap()]);
    let out = kubectl_at(sim.kubeconfig_path(), &all).await;
    assert!(std::path::Path::new(KUBECTL).exists());
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Runs kubectl with a manifest it must refuse; returns kubectl's error text.
async fn kubectl_refused(sim: &Sim, args: &[&str], contents: &str) -> String {
    let (ok, stderr) = kubectl_with(sim, args, contents).await;
    assert!(!ok, "kubectl refuses the manifest: {stderr}");
    stderr
}

/// Asserts that `text` holds `expected`, showing `text` when it does not.
#[track_caller]
fn assert_holds(text: &str, expected: &str) {
    assert!(text.contains(expected), "{expected:?} in: {text}");
}

/// Asserts that an answer has the status code `code` and a body that holds `expected`.
#[track_caller]
fn assert_answer((code, text): (u16, String), expected_code: u16, expected: &str) {
    assert_eq!(code, expected_code, "{text}");
    assert_holds(&text, expected);
}

/// Asserts that an answer is a 422 `Invalid` whose causes include each of `expected` (found by its
/// `field`); returns the answer's `Status`.
#[track_caller]
fn assert_invalid((code, text): (u16, String), expected: &[Value]) -> Value {
    assert_eq!(code, 422, "{text}");
    let status = json(&text);
    assert_eq!(status["reason"], "Invalid");
    let causes = status["details"]["causes"].as_array().unwrap();
    for want in expected {
        let field = &want["field"];
        let cause = causes
            .iter()
            .find(|c| c["field"] == *field)
            .unwrap_or_else(|| panic!("a cause for {field}: {text}"));
        assert_eq!(cause, want);
    }
    status
}

/// The message of an API error, after asserting its status code.
#[track_caller]
fn api_error(err: kube::Error, code: u16) -> String {
    let kube::Error::Api(status) = err else {
        panic!("an API error: {err:?}")
    };
    assert_eq!(status.code, code, "{}", status.message);
    status.message
}

/// A `POST` of a JSON `body` to the pools with `?fieldValidation=<validation>`.
async fn post_pool(client: &kube::Client, validation: &str, body: &str) -> (u16, String) {
    let uri = format!("{POOLS}?fieldValidation={validation}");
    raw(client, Method::POST, &uri, "application/json", body).await
}

async fn pool_sim() -> Sim {
    let sim = start().await;
    install_crd(&sim, POOL_CRD).await;
    sim
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_apply_of_a_custom_resource_with_a_wrong_type_names_the_field() {
    let sim = pool_sim().await;
    let doc = pool("p", "  replicas: \"three\"\n  template: {}\n");
    let stderr = kubectl_refused(&sim, &["apply", "--server-side"], &doc).await;
    assert_holds(
        &stderr,
        "spec.replicas: Invalid value: \"string\": spec.replicas in body must be of type integer: \"string\"",
    );
    assert!(
        stderr.contains("some validation rules were not checked because the object was invalid"),
        "CEL rules do not run on wrongly typed values: {stderr}"
    );
}

#[tokio::test]
async fn enum_and_minimum_violations_are_422_with_one_cause_each() {
    let sim = pool_sim().await;
    let client = sim.client().await.unwrap();
    let body = json!({"apiVersion": "example.com/v1", "kind": "Pool", "metadata": {"name": "p"},
        "spec": {"replicas": -1, "mode": "Medium", "template": {}}});
    let status = assert_invalid(
        post(&client, POOLS, &body).await,
        &[
            json!({"reason": "FieldValueNotSupported", "field": "spec.mode",
                "message": "Unsupported value: \"Medium\": supported values: \"Fast\", \"Slow\""}),
            json!({"reason": "FieldValueInvalid", "field": "spec.replicas",
                "message": "Invalid value: -1: spec.replicas in body should be greater than or equal to 0"}),
        ],
    );
    let message = status["message"].as_str().unwrap();
    assert!(
        message.starts_with("Pool.example.com \"p\" is invalid: ["),
        "{message}"
    );
    let doc = pool("q", "  mode: Medium\n  template: {}\n");
    let stderr = kubectl_refused(&sim, &["apply", "--server-side"], &doc).await;
    assert_holds(&stderr, "spec.mode: Unsupported value: \"Medium\"");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schema_defaults_are_applied_and_read_back() {
    let sim = pool_sim().await;
    let doc = pool("p", "  template: {spec: {containers: []}}\n");
    let (ok, stderr) = kubectl_with(&sim, &["apply", "--server-side"], &doc).await;
    assert!(ok, "{stderr}");
    let out = kubectl_ok(&sim, &["get", "pools", "p", "-o", "json"]).await;
    let spec = json(&out)["spec"].clone();
    assert_eq!(
        spec,
        json!({"replicas": 1, "maxReplicas": 10, "mode": "Fast",
            "template": {"labels": {"pool": "workers"}, "spec": {"containers": []}}})
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cel_rules_and_transition_rules_refuse_writes() {
    let sim = pool_sim().await;
    let doc = pool("p", "  replicas: 5\n  maxReplicas: 3\n  template: {}\n");
    let stderr = kubectl_refused(&sim, &["apply", "--server-side"], &doc).await;
    assert_holds(
        &stderr,
        "spec: Invalid value: \"object\": replicas must not exceed maxReplicas",
    );
    let doc = pool("p", "  tier: gold\n  template: {}\n");
    let (ok, stderr) = kubectl_with(&sim, &["apply", "--server-side"], &doc).await;
    assert!(ok, "a new object has no old value to compare: {stderr}");
    let doc = pool("p", "  tier: silver\n  template: {}\n");
    let stderr = kubectl_refused(&sim, &["apply", "--server-side"], &doc).await;
    assert_holds(
        &stderr,
        "spec.tier: Invalid value: \"string\": tier is immutable",
    );
}

#[tokio::test]
async fn status_writes_are_validated_too() {
    let sim = pool_sim().await;
    let client = sim.client().await.unwrap();
    let body = json!({"apiVersion": "example.com/v1", "kind": "Pool", "metadata": {"name": "p"},
        "spec": {"template": {}}});
    assert_eq!(post(&client, POOLS, &body).await.0, 201);
    let answer = raw(
        &client,
        Method::PATCH,
        &format!("{POOLS}/p/status"),
        "application/merge-patch+json",
        r#"{"status": {"phase": "Bogus"}}"#,
    )
    .await;
    assert_answer(
        answer,
        422,
        "status.phase: Unsupported value: \\\"Bogus\\\"",
    );
}

#[tokio::test]
async fn a_crd_whose_rule_does_not_compile_is_refused() {
    let sim = start().await;
    let client = sim.client().await.unwrap();
    let broken = POOL_CRD.replace(
        "rule: self.replicas <= self.maxReplicas",
        "rule: self.replicas <=",
    );
    let crd: CustomResourceDefinition = serde_yaml::from_str(&broken).unwrap();
    let api: Api<CustomResourceDefinition> = Api::all(client);
    let err = api.create(&PostParams::default(), &crd).await.unwrap_err();
    let message = api_error(err, 422);
    assert!(
        message.contains(
            "spec.versions[0].schema.openAPIV3Schema.properties[spec].x-kubernetes-validations[0].rule: Invalid value"
        ) && message.contains("self.replicas <=")
            && message.contains("compilation failed"),
        "{message}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_refuses_a_deployment_whose_selector_misses_its_labels() {
    let sim = start().await;
    let doc = WEB_DEPLOYMENT.replace("labels: {app: web}", "labels: {app: other}");
    assert_ne!(
        doc, WEB_DEPLOYMENT,
        "the fixture's template labels are replaced"
    );
    let stderr = kubectl_refused(&sim, &["apply"], &doc).await;
    assert_holds(
        &stderr,
        "spec.template.metadata.labels: Invalid value: map[string]string{\"app\":\"other\"}: `selector` does not match template `labels`",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_refuses_lifecycle_hooks_with_no_handler_or_a_sleep_past_the_grace_period() {
    let sim = start().await;
    let pod = |lifecycle: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: hooked, namespace: default}}\nspec:\n  terminationGracePeriodSeconds: 10\n  containers:\n  - name: a\n    image: nginx:1\n    lifecycle: {lifecycle}\n"
        )
    };
    let stderr =
        kubectl_refused(&sim, &["create"], &pod("{preStop: {sleep: {seconds: 20}}}")).await;
    assert_holds(
        &stderr,
        "spec.containers[0].lifecycle.preStop.sleep.seconds: Invalid value: 20: must be greater than 0 and less than terminationGracePeriodSeconds (10)",
    );
    let stderr = kubectl_refused(&sim, &["create"], &pod("{preStop: {}}")).await;
    assert_holds(
        &stderr,
        "spec.containers[0].lifecycle.preStop: Required value: must specify a handler type",
    );
    let both = "{postStart: {sleep: {seconds: 1}, httpGet: {port: 8080}}}";
    let stderr = kubectl_refused(&sim, &["create"], &pod(both)).await;
    assert_holds(&stderr, "may not specify more than 1 handler type");
    let (ok, stderr) =
        kubectl_with(&sim, &["create"], &pod("{preStop: {sleep: {seconds: 10}}}")).await;
    assert!(ok, "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_refuses_a_deployment_without_a_selector_or_containers() {
    let sim = start().await;
    let doc = WEB_DEPLOYMENT.replace("  selector:\n    matchLabels: {app: web}\n", "");
    assert_ne!(doc, WEB_DEPLOYMENT);
    let stderr = kubectl_refused(&sim, &["create"], &doc).await;
    assert_holds(&stderr, "spec.selector: Required value");
    let doc = "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: empty, namespace: default}\nspec:\n  selector: {matchLabels: {app: x}}\n  template:\n    metadata: {labels: {app: x}}\n    spec: {containers: []}\n";
    let stderr = kubectl_refused(&sim, &["create"], doc).await;
    assert_holds(&stderr, "spec.template.spec.containers: Required value");
}

#[tokio::test]
async fn a_deployment_with_a_string_for_replicas_is_a_bad_request() {
    let sim = start().await;
    let client = sim.client().await.unwrap();
    let mut body: Value = serde_yaml::from_str(WEB_DEPLOYMENT).unwrap();
    body["spec"]["replicas"] = json!("two");
    let deployments = "/apis/apps/v1/namespaces/default/deployments";
    assert_answer(
        post(&client, deployments, &body).await,
        400,
        "cannot unmarshal string into Go struct field DeploymentSpec.spec.replicas of type int32",
    );
    body["spec"]["replicas"] = json!(1);
    body["spec"]["template"]["spec"]["containers"][0]
        .as_object_mut()
        .unwrap()
        .remove("image");
    assert_answer(
        post(&client, deployments, &body).await,
        422,
        "spec.template.spec.containers[0].image: Required value",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_immutable_config_map_keeps_its_data_and_secrets_store_string_data_as_data() {
    let sim = start().await;
    let cm = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: frozen, namespace: default}\nimmutable: true\ndata: {a: \"1\"}\n";
    assert!(kubectl_with(&sim, &["apply"], cm).await.0);
    let stderr = kubectl_refused(&sim, &["apply"], &cm.replace("\"1\"", "\"2\"")).await;
    assert_holds(
        &stderr,
        "data: Forbidden: field is immutable when `immutable` is set",
    );
    let secret = "apiVersion: v1\nkind: Secret\nmetadata: {name: s, namespace: default}\ndata: {a: eA==, b: eQ==}\nstringData: {a: hello}\n";
    let (ok, stderr) = kubectl_with(&sim, &["create"], secret).await;
    assert!(ok, "{stderr}");
    let out = json(&kubectl_ok(&sim, &["get", "secret", "s", "-o", "json"]).await);
    assert_eq!(out["data"], json!({"a": "aGVsbG8=", "b": "eQ=="}));
    assert!(out.get("stringData").is_none(), "{out}");
}

#[tokio::test]
async fn data_over_one_mebibyte_is_too_long_and_bodies_over_three_are_too_large() {
    let sim = start().await;
    let client = sim.client().await.unwrap();
    let uri = "/api/v1/namespaces/default/configmaps";
    let big = "x".repeat(1024 * 1024 + 1);
    let body = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "big"},
        "data": {"a": big}});
    assert_answer(
        post(&client, uri, &body).await,
        422,
        "Too long: must have at most 1048576 bytes",
    );
    let huge = "x".repeat(3 * 1024 * 1024 + 1);
    let body = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "huge"},
        "data": {"a": huge}});
    let (code, text) = post(&client, uri, &body).await;
    assert_eq!(code, 413, "{text}");
    assert_eq!(json(&text)["reason"], "RequestEntityTooLarge");
}

#[tokio::test]
async fn no_finalizer_may_be_added_while_an_object_is_deleted() {
    let sim = start().await;
    let client = sim.client().await.unwrap();
    let api: Api<ConfigMap> = Api::namespaced(client, "default");
    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "held",
        "finalizers": ["example.com/a"]}}))
    .unwrap();
    api.create(&PostParams::default(), &cm).await.unwrap();
    api.delete("held", &DeleteParams::default()).await.unwrap();
    let patch = json!({"metadata": {"finalizers": ["example.com/a", "example.com/b"]}});
    let err = api
        .patch("held", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap_err();
    assert_holds(
        &api_error(err, 422),
        "metadata.finalizers: Forbidden: no new finalizers can be added if the object is being deleted",
    );
    let done = json!({"metadata": {"finalizers": []}});
    api.patch("held", &PatchParams::default(), &Patch::Merge(&done))
        .await
        .expect("removing finalizers is allowed");
}

#[tokio::test]
async fn strict_field_validation_refuses_unknown_and_duplicate_fields() {
    let sim = pool_sim().await;
    let client = sim.client().await.unwrap();
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    api.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "c"}})).unwrap(),
    )
    .await
    .unwrap();
    let strict = PatchParams {
        field_validation: Some(ValidationDirective::Strict),
        ..PatchParams::default()
    };
    let err = api
        .patch("c", &strict, &Patch::Merge(json!({"spec": {"foo": 1}})))
        .await
        .unwrap_err();
    assert_eq!(
        api_error(err, 400),
        "strict decoding error: unknown field \"spec\""
    );
    let typo = json!({"apiVersion": "example.com/v1", "kind": "Pool",
        "metadata": {"name": "t", "labelz": {"a": "b"}}, "spec": {"template": {}}});
    assert_answer(
        post_pool(&client, "Strict", &typo.to_string()).await,
        400,
        "unknown field \\\"metadata.labelz\\\"",
    );
    let body = r#"{"apiVersion": "example.com/v1", "kind": "Pool", "metadata": {"name": "p"},
        "spec": {"replicas": 1, "replicas": 2, "foo": true, "template": {}}}"#;
    assert_answer(
        post_pool(&client, "Strict", body).await,
        400,
        "duplicate field \\\"spec.replicas\\\"",
    );
    let (code, text) = post_pool(&client, "Ignore", body).await;
    assert_eq!(code, 201, "{text}");
    assert_eq!(json(&text)["spec"]["replicas"], 2);
}

#[tokio::test]
async fn warn_field_validation_drops_unknown_fields_with_a_warning() {
    let sim = pool_sim().await;
    let client = sim.client().await.unwrap();
    let req = http::Request::builder()
        .method(Method::POST)
        .uri(format!("{POOLS}?fieldValidation=Warn"))
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(kube::client::Body::from(
            json!({"apiVersion": "example.com/v1", "kind": "Pool", "metadata": {"name": "p"},
                "spec": {"foo": 1, "template": {}}})
            .to_string()
            .into_bytes(),
        ))
        .unwrap();
    let res = client.send(req).await.unwrap();
    assert_eq!(res.status().as_u16(), 201);
    let warnings: Vec<&str> = res
        .headers()
        .get_all("Warning")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .collect();
    assert_eq!(warnings, vec![r#"299 - "unknown field \"spec.foo\"""#]);
    let pools: Api<kube::api::DynamicObject> = Api::namespaced_with(
        client,
        "default",
        &kube::discovery::ApiResource::from_gvk_with_plural(
            &kube::core::GroupVersionKind::gvk("example.com", "v1", "Pool"),
            "pools",
        ),
    );
    let warn = PatchParams {
        field_validation: Some(ValidationDirective::Warn),
        ..PatchParams::default()
    };
    let patched = pools
        .patch("p", &warn, &Patch::Merge(json!({"spec": {"bar": 1}})))
        .await
        .expect("Warn accepts the patch");
    assert!(patched.data["spec"].get("bar").is_none());
    let doc = pool("k", "  foo: 1\n  template: {}\n");
    let (ok, stderr) = kubectl_with(&sim, &["apply", "--validate=warn"], &doc).await;
    assert!(ok, "{stderr}");
    assert!(stderr.contains("unknown field \"spec.foo\""), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_refuses_a_crd_whose_schema_is_not_structural() {
    let sim = start().await;
    let doc = POOL_CRD.replace(
        "phase: {type: string, enum: [Pending, Ready]}",
        "phase: {enum: [Pending, Ready]}",
    );
    assert_ne!(doc, POOL_CRD);
    let stderr = kubectl_refused(&sim, &["apply"], &doc).await;
    assert_holds(
        &stderr,
        "spec.versions[0].schema.openAPIV3Schema.properties[status].properties[phase].type: Required value: must not be empty for specified object fields",
    );
}

#[tokio::test]
async fn a_pod_may_change_its_images_but_not_the_rest_of_its_spec() {
    let sim = start().await;
    let client = sim.client().await.unwrap();
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(client, "default");
    let pod = serde_json::from_value(json!({"metadata": {"name": "p"},
        "spec": {"containers": [{"name": "app", "image": "nginx:1.27"}]}}))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    let image = json!({"spec": {"containers": [{"name": "app", "image": "nginx:1.28"}]}});
    pods.patch("p", &PatchParams::default(), &Patch::Strategic(&image))
        .await
        .expect("the image may change");
    let env =
        json!({"spec": {"containers": [{"name": "app", "env": [{"name": "A", "value": "1"}]}]}});
    let err = pods
        .patch("p", &PatchParams::default(), &Patch::Strategic(&env))
        .await
        .unwrap_err();
    assert_holds(
        &api_error(err, 422),
        "spec: Forbidden: pod updates may not change fields other than `spec.containers[*].image`",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_refuses_a_service_port_out_of_range() {
    let sim = start().await;
    let svc = "apiVersion: v1\nkind: Service\nmetadata: {name: web, namespace: default}\nspec:\n  selector: {app: web}\n  ports: [{port: 70000, targetPort: 8080}]\n";
    let stderr = kubectl_refused(&sim, &["apply"], svc).await;
    assert_holds(
        &stderr,
        "spec.ports[0].port: Invalid value: 70000: must be between 1 and 65535, inclusive",
    );
}
