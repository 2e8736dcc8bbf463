//! Integration tests: the simulator against real clients (kubectl, kube-rs) and the API semantics that
//! simulators most often get wrong.

mod binary;
mod binding;
mod collect;
mod docker_kubelet;
mod docker_pull_auth;
mod images;
mod kube_rs;
mod kubectl;
mod lifecycle;
mod lists;
mod oci;
mod openapi;
mod ownership;
mod platforms;
mod private_registry;
mod probes;
mod protobuf;
mod rbac;
mod rollout;
mod scale;
mod scheduling;
mod self_signed_registry;
mod semantics;
mod startup;
mod streams;
mod token_server;
mod validation;

use std::path::Path;
use std::process::Output;
use std::time::Duration;

use kube_sim::{Config, Sim};

/// How long any single wait in these tests may take.
pub const DEADLINE: Duration = Duration::from_secs(20);

/// Starts a simulator on an ephemeral port with test settings.
pub async fn start() -> Sim {
    start_with(Config::ephemeral()).await
}

/// Starts a simulator on an ephemeral port with test settings, with a kube-rs API of `K` in `default`.
pub async fn start_with_api<K>() -> (Sim, kube::Api<K>)
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>,
    K::DynamicType: Default,
{
    let sim = start().await;
    let client = sim.client().await.expect("a client");
    (sim, kube::Api::namespaced(client, "default"))
}

/// The `resourceVersion` of a full list through a kube-rs API.
pub async fn list_version<K>(api: &kube::Api<K>) -> String
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let list = api.list(&kube::api::ListParams::default()).await;
    list.expect("the list succeeds")
        .metadata
        .resource_version
        .expect("a list has a resourceVersion")
}

/// Starts a simulator with a given configuration.
pub async fn start_with(config: Config) -> Sim {
    let _ = tracing_subscriber::fmt()
        .with_test_writer()
        .with_env_filter("kube_sim=debug")
        .try_init();
    Sim::start(config).await.expect("the simulator starts")
}

/// The kubectl binary the conformance tests use.
pub const KUBECTL: &str = "/usr/bin/kubectl";

/// Runs kubectl against a kubeconfig; panics (never skips) when kubectl is missing.
pub async fn kubectl_at(kubeconfig: &Path, args: &[&str]) -> Output {
    assert!(
        Path::new(KUBECTL).exists(),
        "kubectl is required for the conformance tests: install it at {KUBECTL} (Debian: kubernetes-client)"
    );
    let kubeconfig = kubeconfig.to_path_buf();
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    let cache = tempfile::tempdir().expect("a temporary kubectl cache");
    let cache_dir = cache.path().to_path_buf();
    tokio::time::timeout(
        DEADLINE,
        tokio::task::spawn_blocking(move || {
            std::process::Command::new(KUBECTL)
                .args(&args)
                .arg("--cache-dir")
                .arg(&cache_dir)
                .env("KUBECONFIG", &kubeconfig)
                .output()
                .expect("kubectl runs")
        }),
    )
    .await
    .expect("kubectl finishes within the deadline")
    .expect("the kubectl task does not panic")
}

/// Runs kubectl against a simulator and requires success, returning stdout.
pub async fn kubectl_ok(sim: &Sim, args: &[&str]) -> String {
    let out = kubectl_at(sim.kubeconfig_path(), args).await;
    assert!(
        out.status.success(),
        "kubectl {args:?} failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Sends SIGTERM and waits up to `deadline` for a clean exit.
pub async fn terminate(mut child: std::process::Child, deadline: Duration) {
    let status = std::process::Command::new("kill")
        .arg("-TERM")
        .arg(child.id().to_string())
        .status()
        .expect("kill runs");
    assert!(status.success());
    let exit = tokio::time::timeout(deadline, tokio::task::spawn_blocking(move || child.wait()))
        .await
        .expect("kube-sim exits within the deadline after SIGTERM")
        .unwrap()
        .unwrap();
    assert!(exit.success(), "kube-sim exits cleanly: {exit:?}");
}

/// Writes a manifest into a temporary directory and returns the directory guard and the path.
pub fn manifest(contents: &str) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = dir.path().join("manifest.yaml");
    std::fs::write(&path, contents).expect("the manifest is written");
    (dir, path)
}

/// Applies a manifest with `kubectl apply --server-side` and returns kubectl's output.
pub async fn apply(sim: &Sim, contents: &str) -> String {
    let (_dir, path) = manifest(contents);
    kubectl_ok(
        sim,
        &["apply", "--server-side", "-f", path.to_str().unwrap()],
    )
    .await
}

/// A CRD for `widgets.example.com` with a status subresource and a template whose metadata schema has no properties.
pub const WIDGET_CRD: &str = include_str!("fixtures/widget-crd.yaml");

/// A CRD for `gadgets.example.com` without a status subresource.
pub const GADGET_CRD: &str = include_str!("fixtures/gadget-crd.yaml");

/// A two-replica Deployment named `web`.
pub const WEB_DEPLOYMENT: &str = include_str!("fixtures/web-deployment.yaml");

/// Applies [`WEB_DEPLOYMENT`] server-side as field manager `dev-env`; returns the Deployments of `default` and
/// the applied object.
pub async fn apply_web(
    client: kube::Client,
) -> (
    kube::Api<k8s_openapi::api::apps::v1::Deployment>,
    k8s_openapi::api::apps::v1::Deployment,
) {
    let deployments = kube::Api::namespaced(client, "default");
    let desired: serde_json::Value = serde_yaml::from_str(WEB_DEPLOYMENT).unwrap();
    let applied = deployments
        .patch(
            "web",
            &kube::api::PatchParams::apply("dev-env"),
            &kube::api::Patch::Apply(&desired),
        )
        .await
        .unwrap();
    (deployments, applied)
}

/// Creates a CRD from YAML through the store and waits until it is established.
pub async fn install_crd(sim: &Sim, yaml: &str) {
    use kube::runtime::wait::{await_condition, conditions};
    let crd: k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition =
        serde_yaml::from_str(yaml).expect("the CRD parses");
    let name = crd.metadata.name.clone().expect("the CRD has a name");
    let client = sim.client().await.expect("a client");
    let api: kube::Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
        kube::Api::all(client);
    api.create(&kube::api::PostParams::default(), &crd)
        .await
        .expect("the CRD is created");
    tokio::time::timeout(
        DEADLINE,
        await_condition(api, &name, conditions::is_crd_established()),
    )
    .await
    .expect("the CRD is established within the deadline")
    .expect("the CRD watch works");
}

/// Sends a raw request through a kube client and returns the status code and the body text.
pub async fn raw(
    client: &kube::Client,
    method: http::Method,
    uri: &str,
    content_type: &str,
    body: &str,
) -> (u16, String) {
    let req = http::Request::builder()
        .method(method)
        .uri(uri)
        .header(http::header::CONTENT_TYPE, content_type)
        .body(kube::client::Body::from(body.as_bytes().to_vec()))
        .expect("a valid request");
    send(client, req).await
}

/// Sends a request through a kube client and returns the status code and the body text.
pub async fn send(client: &kube::Client, req: http::Request<kube::client::Body>) -> (u16, String) {
    use http_body_util::BodyExt as _;
    let res = tokio::time::timeout(DEADLINE, client.send(req))
        .await
        .expect("the request finishes within the deadline")
        .expect("the request is sent");
    let code = res.status().as_u16();
    let bytes = tokio::time::timeout(DEADLINE, res.into_body().collect())
        .await
        .expect("the body arrives within the deadline")
        .expect("the body is read")
        .to_bytes();
    (code, String::from_utf8_lossy(&bytes).into_owned())
}

/// A `GET` through a kube client: the status code and the body text.
pub async fn get(client: &kube::Client, uri: &str) -> (u16, String) {
    raw(client, http::Method::GET, uri, "application/json", "").await
}

/// A JSON `POST` through a kube client: the status code and the body text.
pub async fn post(client: &kube::Client, uri: &str, body: &serde_json::Value) -> (u16, String) {
    raw(
        client,
        http::Method::POST,
        uri,
        "application/json",
        &body.to_string(),
    )
    .await
}

/// Parses a JSON body, failing with the body text.
pub fn json(body: &str) -> serde_json::Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("not JSON ({e}): {body}"))
}
