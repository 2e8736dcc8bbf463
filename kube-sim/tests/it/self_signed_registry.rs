//! The virtual kubelet against a registry whose certificate is made as Docker's registry docs make it:
//! `openssl req -x509` with the registry's names as `subjectAltName`, which OpenSSL 3 marks `CA:TRUE`.
//! Given as the host's `ca_file`, containerd trusts it as the registry's own certificate; so does kube-sim,
//! within its names and dates.

use std::path::Path;

use crate::oci::{Options, Registry, ServingCert};
use crate::private_registry::{
    ca_file_yaml, create_pod, sim_with, until_pull_fails, until_running,
};

/// `cert.pem` and `key.pem` in `dir` by the docs' recipe (an RSA 4096 key, a year), for the names in
/// `san` (`DNS:localhost,IP:127.0.0.1`); the certificate is its own CA.
fn openssl_certificate(dir: &Path, san: &str) -> ServingCert {
    let sh = xshell::Shell::new().expect("a shell");
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    let extension = format!("subjectAltName = {san}");
    xshell::cmd!(
        sh,
        "openssl req -newkey rsa:4096 -nodes -sha256 -keyout {key} -addext {extension} -x509 -days 365 -out {cert} -subj /CN=kube-sim-test"
    )
    .quiet()
    .ignore_stderr()
    .run()
    .expect("openssl makes the certificate (is the openssl CLI installed?)");
    let text = xshell::cmd!(sh, "openssl x509 -in {cert} -noout -text")
        .read()
        .expect("openssl reads the certificate");
    assert!(text.contains("CA:TRUE"), "a CA certificate: {text}");
    ServingCert {
        ca: cert.clone(),
        cert,
        key,
        client_ca: None,
        client: None,
    }
}

async fn registry_with(serving: &ServingCert) -> Registry {
    Registry::start_with(Options {
        tls: Some(serving.clone()),
        ..Options::default()
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_pulls_from_a_registry_whose_certificate_is_its_own_ca_file() {
    let dir = tempfile::tempdir().unwrap();
    let serving = openssl_certificate(dir.path(), "DNS:localhost,IP:127.0.0.1");
    let registry = registry_with(&serving).await;
    let digest = registry.push("team/app", "v1", &[]).await;
    let host = registry.host();
    let sim = sim_with(&format!(
        "configs:\n  \"{host}\":\n    tls: {}\n",
        ca_file_yaml(&serving.cert)
    ))
    .await;
    create_pod(&sim, "self-signed", &format!("{host}/team/app:v1"), &[]).await;
    assert_eq!(
        until_running(&sim, "self-signed").await,
        format!("{host}/team/app@{digest}")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_self_signed_certificate_for_other_names_or_outside_ca_file_is_refused_in_gos_words() {
    let dir = tempfile::tempdir().unwrap();
    let elsewhere = openssl_certificate(dir.path(), "DNS:registry.test,IP:10.9.8.7");
    let registry = registry_with(&elsewhere).await;
    registry.push("team/app", "v1", &[]).await;
    let host = registry.host();
    let sim = sim_with(&format!(
        "configs:\n  \"{host}\":\n    tls: {}\n",
        ca_file_yaml(&elsewhere.cert)
    ))
    .await;
    let image = format!("{host}/team/app:v1");
    let refused = |reason: &str| {
        format!(
            "rpc error: code = Unknown desc = failed to pull and unpack image \"{image}\": failed to resolve \
             reference \"{image}\": failed to do request: Head \"https://{host}/v2/team/app/manifests/v1\": \
             tls: failed to verify certificate: x509: {reason}"
        )
    };
    create_pod(&sim, "elsewhere", &image, &[]).await;
    assert_eq!(
        until_pull_fails(&sim, "elsewhere", &image).await,
        refused("certificate is valid for 10.9.8.7, not 127.0.0.1")
    );
    sim.shutdown().await;

    // Another self-signed certificate of the right names is no CA of this one.
    let other_dir = tempfile::tempdir().unwrap();
    let other = openssl_certificate(other_dir.path(), "DNS:localhost,IP:127.0.0.1");
    let sim = sim_with(&format!(
        "configs:\n  \"{host}\":\n    tls: {}\n",
        ca_file_yaml(&other.cert)
    ))
    .await;
    create_pod(&sim, "unknown", &image, &[]).await;
    assert_eq!(
        until_pull_fails(&sim, "unknown", &image).await,
        refused("certificate signed by unknown authority")
    );
}
