//! The Docker kubelet pulls a private image through the engine with the credentials the kubelet finds: the
//! pod's pull secret, or the node's `registries.yaml`. The registry serves TLS on 127.0.0.1, which the
//! engine trusts as an insecure loopback registry, behind htpasswd auth; the image is the Docker
//! fixture's, pushed there by the docker CLI with credentials from a configuration of the test's own.

use std::process::Command;

use base64::Engine as _;
use kube_sim::{Config, KubeletBackend, Sim};

use crate::docker_kubelet::{Fixture, docker_ok, run};
use crate::private_registry::{
    PASSWORD, Pki, USER, create_pod, create_pull_secret, secure_registry, until_pull_fails,
    until_running,
};

/// A pushed private image, untagged from the engine on drop (with what the engine pulled of it).
struct PrivateImage {
    /// `127.0.0.1:<port>/demo/app:v1`.
    name: String,
    /// `127.0.0.1:<port>/demo/app@sha256:…`, as the registry serves it.
    repo_digest: String,
}

impl Drop for PrivateImage {
    fn drop(&mut self) {
        for name in [&self.name, &self.repo_digest] {
            let _ = Command::new("docker").args(["rmi", name]).output();
        }
    }
}

/// Tags the fixture's `demo/app` into the registry at `host` and pushes it with the docker CLI, its
/// credentials in a configuration of its own (`DOCKER_CONFIG`), then untags it so pods pull it.
async fn push_private(fx: &Fixture, host: &str) -> PrivateImage {
    let built = format!("127.0.0.1:{}/demo/app:v1", fx.registry.port);
    let name = format!("{host}/demo/app:v1");
    docker_ok(&["tag", &built, &name]).await;
    let config = tempfile::tempdir().expect("a docker configuration directory");
    let auth = base64::engine::general_purpose::STANDARD.encode(format!("{USER}:{PASSWORD}"));
    std::fs::write(
        config.path().join("config.json"),
        serde_json::json!({"auths": {host: {"auth": auth}}}).to_string(),
    )
    .expect("the docker configuration is written");
    let dir = config.path().to_str().expect("a UTF-8 path");
    let out = run(
        "docker",
        &["push", &name],
        &[("DOCKER_CONFIG", dir)],
        crate::docker_kubelet::DEADLINE,
    )
    .await;
    assert!(
        out.status.success(),
        "docker push {name}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let repo_digest = docker_ok(&[
        "inspect",
        "--format",
        &format!("{{{{range .RepoDigests}}}}{{{{if eq (index (split . \"@\") 0) \"{host}/demo/app\"}}}}{{{{.}}}}{{{{end}}}}{{{{end}}}}"),
        &name,
    ])
    .await
    .trim()
    .to_string();
    assert!(repo_digest.contains("@sha256:"), "{repo_digest:?}");
    let image = PrivateImage { name, repo_digest };
    docker_ok(&["rmi", &image.name]).await;
    image
}

/// A Docker-kubelet simulator of the fixture whose `registries.yaml` is this text.
async fn sim_with(fx: &Fixture, registries_yaml: &str) -> Sim {
    let mut config: Config = fx.config();
    let KubeletBackend::Docker(_) = &config.kubelet_backend else {
        panic!("the fixture runs the Docker kubelet");
    };
    config.registries = None;
    config.kubelet.registries = kube_sim::kubelet::Registries::from_yaml(registries_yaml)
        .expect("the registries configuration parses");
    crate::start_with(config).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_engine_pulls_a_private_image_with_the_pull_secret_or_the_nodes_credentials() {
    let fx = Fixture::start().await;
    let pki = Pki::new("kube-sim-docker-test-ca");
    let registry = secure_registry(&pki).await;
    let host = registry.host();
    let image = push_private(&fx, &host).await;

    let sim = sim_with(&fx, "").await;
    create_pod(&sim, "anonymous", &image.name, &[]).await;
    let message = until_pull_fails(&sim, "anonymous", &image.name).await;
    // The engine's own words: it tries HTTPS, then (a loopback registry being insecure to it) plain
    // HTTP, and reports the last attempt.
    assert!(
        message.starts_with(&format!(
            "failed to pull image \"{}\" (as \"{}\"): ",
            image.name, image.name
        )),
        "{message}"
    );
    create_pull_secret(&sim, "regcred", &host, USER, PASSWORD).await;
    create_pod(&sim, "with-secret", &image.name, &["regcred"]).await;
    assert_eq!(until_running(&sim, "with-secret").await, image.repo_digest);
    sim.shutdown().await;
    fx.until_no_containers("after the pull secret's pod").await;

    // The node's own credentials, for a pod without pull secrets.
    let sim = sim_with(
        &fx,
        &format!("configs:\n  \"{host}\":\n    auth: {{username: {USER}, password: {PASSWORD}}}\n"),
    )
    .await;
    create_pod(&sim, "node-credentials", &image.name, &[]).await;
    assert_eq!(
        until_running(&sim, "node-credentials").await,
        image.repo_digest
    );
    sim.shutdown().await;
    fx.until_no_containers("after the node's credentials' pod")
        .await;
}
