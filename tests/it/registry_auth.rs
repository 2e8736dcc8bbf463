//! Pushes to a registry that wants TLS and credentials: Debian's
//! distribution registry with a certificate signed by a CA the test makes
//! and an htpasswd file, credentials from a Docker client configuration as
//! `docker login` writes it (a plain `auths` entry, or a credential helper).

use std::path::Path;

use dev_env::{
    config::Config,
    image::{self, Pushed, credentials, distribution},
};
use dev_env_tests::{
    DockerCleanup, Project, free_port, require_docker,
    secure_registry::{
        CredentialHelper, PASSWORD, SecureRegistry, USER, auths, certificates, docker_config,
        openssl_certificate,
    },
};

/// The project's config with the registry's CA as `registry.caFile`,
/// relative to the config file.
fn project(registry: &SecureRegistry) -> Project {
    let project = Project::new(&registry.host());
    std::fs::copy(registry.ca(), project.dir.path().join("registry-ca.pem")).unwrap();
    let path = project.config_path();
    let text = std::fs::read_to_string(&path).unwrap().replace(
        &format!("registry: {{external: '{}'}}", registry.host()),
        &format!(
            "registry: {{external: '{}', caFile: registry-ca.pem}}",
            registry.host()
        ),
    );
    std::fs::write(&path, text).unwrap();
    project
}

/// Pushes `component` as `push-image --no-rollout` does, with the
/// credentials found in the Docker client configuration `docker_config`.
async fn push(
    project: &Project,
    docker_config: &Path,
    component: &str,
) -> Result<Pushed, image::Error> {
    let config = Config::load(&project.config_path()).expect("the fixture config is valid");
    let host = config.registry.external.clone().unwrap();
    let credential = credentials::lookup_in(&docker_config.join("config.json"), &host).unwrap();
    let options = distribution::Options {
        ca_file: config.registry.ca_file.as_deref(),
        insecure: false,
    };
    let client = distribution::Client::with_credential(&host, options, credential).unwrap();
    let components = [component.to_string()];
    let builds = dev_env_tests::builds_here(&config, &components);
    let mut results =
        image::push_components(&config, &client, &components, dev_env_tests::quiet(&builds)).await;
    results.remove(0)
}

#[tokio::test]
async fn pushes_to_a_tls_registry_with_credentials_docker_login_stored() {
    require_docker();
    let registry = SecureRegistry::start();
    let host = registry.host();
    let project = project(&registry);
    let mut cleanup = DockerCleanup::default();
    cleanup
        .images
        .push(format!("{host}/{}/static:dev", project.name));

    // A plain `auths` entry.
    let plain = docker_config(auths(&host, USER, PASSWORD));
    let first = push(&project, plain.path(), "hello").await.unwrap();
    assert!(first.uploaded_bytes > 100_000, "a static binary: {first:?}");
    let again = push(&project, plain.path(), "hello").await.unwrap();
    assert_eq!(again.digest, first.digest);
    assert_eq!(
        (again.uploaded_bytes, again.uploaded_blobs),
        (0, 0),
        "{again:?}"
    );
    // A build argument leaves the Docker build to the engine, which pushes
    // with the same credentials.
    project.edit(
        "static/Dockerfile",
        "FROM scratch\nARG NOTE=engine\nCOPY a.txt /a.txt\nCOPY b.txt /b.txt\n",
    );
    let docker_built = push(&project, plain.path(), "static").await.unwrap();
    assert_eq!(docker_built.uploaded_blobs, 3, "{docker_built:?}");

    // A credential helper.
    let helper = CredentialHelper::install(&host);
    let helped = docker_config(serde_json::json!({"credHelpers": {&host: &helper.name}}));
    project.edit(
        "hello/src/main.rs",
        "fn main() {\n    println!(\"hello, two\");\n}\n",
    );
    let changed = push(&project, helped.path(), "hello").await.unwrap();
    assert_ne!(changed.digest, first.digest);
    assert!(changed.uploaded_bytes > 0, "{changed:?}");
    project.edit("static/b.txt", "b: pushed with the helper's credentials\n");
    let docker_helped = push(&project, helped.path(), "static").await.unwrap();
    assert_ne!(docker_helped.digest, docker_built.digest);
    let noop = push(&project, helped.path(), "static").await.unwrap();
    assert_eq!(noop.uploaded_bytes, 0, "{noop:?}");

    // A wrong password names the registry and how to log in.
    for component in ["hello", "static"] {
        let wrong = docker_config(auths(&host, USER, "wrong"));
        let err = dev_env::error_chain(&push(&project, wrong.path(), component).await.unwrap_err());
        assert!(err.contains(&format!("docker login {host}")), "{err}");
        assert!(!err.contains("wrong"), "the password is never shown: {err}");
        assert!(!err.contains(PASSWORD), "{err}");
    }
}

#[tokio::test]
async fn a_certificate_of_another_ca_says_ca_file_holds_no_ca_that_signed_it() {
    let registry = SecureRegistry::start();
    let dir = tempfile::tempdir().unwrap();
    let other_ca = dir.path().join("other-ca.pem");
    std::fs::write(&other_ca, certificates().0).unwrap();
    let options = distribution::Options {
        ca_file: Some(&other_ca),
        insecure: false,
    };
    let client = distribution::Client::with_credential(&registry.host(), options, None).unwrap();
    let err = dev_env::error_chain(&client.ping().await.unwrap_err());
    assert!(err.contains(&registry.host()), "{err}");
    let named = format!(
        "not signed by a CA in `registry.caFile` ({})",
        other_ca.display()
    );
    assert!(err.contains(&named), "{err}");
}

/// Docker's registry docs make a registry's certificate with `openssl req
/// -x509`, which OpenSSL 3 marks `CA:TRUE`, a certificate webpki refuses as
/// a server's own. Given as `registry.caFile`, it is trusted as the
/// registry's own, as docker, curl and containerd trust it.
#[tokio::test]
async fn pushes_to_a_registry_whose_certificate_is_made_by_dockers_openssl_recipe() {
    let registry = SecureRegistry::start_openssl("DNS:localhost,IP:127.0.0.1");
    let sh = xshell::Shell::new().unwrap();
    let ca = registry.ca();
    let text = xshell::cmd!(sh, "openssl x509 -in {ca} -noout -text")
        .read()
        .unwrap();
    assert!(text.contains("CA:TRUE"), "a CA certificate: {text}");
    let project = project(&registry);
    let login = docker_config(auths(&registry.host(), USER, PASSWORD));
    let pushed = push(&project, login.path(), "hello").await.unwrap();
    assert!(pushed.uploaded_bytes > 100_000, "{pushed:?}");
    let credential = credentials::lookup_in(&login.path().join("config.json"), &registry.host());
    let options = distribution::Options {
        ca_file: Some(&ca),
        insecure: false,
    };
    let client =
        distribution::Client::with_credential(&registry.host(), options, credential.unwrap())
            .unwrap();
    let repo = format!("{}/hello", project.name);
    let here = dev_env::platform::Platform::linux(std::env::consts::ARCH);
    let served = client.manifest_exists(&repo, &pushed.digest, Some(&here));
    assert!(served.await.unwrap());
}

/// What is not the certificate of `registry.caFile`, or not for the name
/// the registry is reached by, is still refused, in words of its cause.
#[tokio::test]
async fn a_self_signed_certificate_for_another_name_or_not_in_ca_file_is_refused_by_its_cause() {
    let ping = |host: String, ca_file: std::path::PathBuf| async move {
        let options = distribution::Options {
            ca_file: Some(&ca_file),
            insecure: false,
        };
        let client = distribution::Client::with_credential(&host, options, None).unwrap();
        dev_env::error_chain(&client.ping().await.unwrap_err())
    };
    let elsewhere = SecureRegistry::start_openssl("DNS:registry.test");
    let err = ping(elsewhere.host(), elsewhere.ca()).await;
    assert!(
        err.contains("not valid for the name 127.0.0.1 (it is valid for registry.test)"),
        "{err}"
    );
    assert!(!err.contains("set `registry.caFile`"), "it is set: {err}");

    let here = SecureRegistry::start_openssl("DNS:localhost,IP:127.0.0.1");
    let dir = tempfile::tempdir().unwrap();
    openssl_certificate(dir.path(), "DNS:localhost,IP:127.0.0.1");
    let err = ping(here.host(), dir.path().join("cert.pem")).await;
    assert!(err.contains(&here.host()), "{err}");
    assert!(
        err.contains("it is a CA certificate") && err.contains("does not"),
        "another certificate of the same names: {err}"
    );
}

/// kube and the registry client both speak TLS through rustls with ring,
/// one provider for the process: both work side by side.
#[tokio::test]
async fn a_kube_client_and_a_tls_registry_client_work_in_one_process() {
    let registry = SecureRegistry::start();
    let kube_config = kube::Config::new(
        format!("https://127.0.0.1:{}", free_port())
            .parse()
            .unwrap(),
    );
    dev_env::install_crypto_provider();
    let kube_client = kube::Client::try_from(kube_config).expect("a kube client builds");
    let options = distribution::Options {
        ca_file: Some(&registry.ca()),
        insecure: false,
    };
    let credential = credentials::lookup_in(
        &docker_config(auths(&registry.host(), USER, PASSWORD))
            .path()
            .join("config.json"),
        &registry.host(),
    )
    .unwrap();
    let registry_client =
        distribution::Client::with_credential(&registry.host(), options, credential).unwrap();
    registry_client.ping().await.unwrap();
    assert!(kube_client.apiserver_version().await.is_err());
    let missing = registry_client.get_manifest("nothing/here", "dev").await;
    let missing = missing.unwrap();
    assert!(missing.is_none(), "authenticated, and nothing there");
}
