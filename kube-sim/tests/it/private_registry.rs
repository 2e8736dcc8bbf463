//! The virtual kubelet against a private registry, as a k3s node pulls from one: Debian's distribution
//! registry over TLS (a CA made here with rcgen) behind htpasswd auth or a token server, with credentials
//! and the CA from `registries.yaml`, or from the pod's pull secrets (added to the `default`
//! ServiceAccount with kubectl server-side apply and copied into pods by the ServiceAccount admission).
//! Pods are created, waited on and read with kubectl.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use base64::Engine as _;
use kube_sim::kubelet::Registries;
use kube_sim::{Config, Sim};

use crate::oci::{Options, Registry, ServingCert};
use crate::token_server::{self, TokenServer};
use crate::{DEADLINE, apply, kubectl_at, kubectl_ok};

/// The user the registry accepts.
pub(crate) const USER: &str = "puller";
/// Its password.
pub(crate) const PASSWORD: &str = "s3cret-pull";

/// The name pods give the registry; only `registries.yaml` maps it onto the loopback endpoint.
const PRIVATE: &str = "registry.test:5000";

/// A CA and a serving certificate for `127.0.0.1` and `localhost` signed by it, in a directory.
pub(crate) struct Pki {
    dir: tempfile::TempDir,
}

impl Pki {
    pub(crate) fn new(name: &str) -> Pki {
        use rcgen::{
            BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer,
            KeyPair, KeyUsagePurpose,
        };
        let dir = tempfile::tempdir().expect("a temporary directory");
        let ca_key = KeyPair::generate().unwrap();
        let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca.distinguished_name.push(DnType::CommonName, name);
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca_cert = ca.self_signed(&ca_key).unwrap();
        let issuer = Issuer::new(ca, ca_key);
        let key = KeyPair::generate().unwrap();
        let mut leaf =
            CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()]).unwrap();
        leaf.distinguished_name.push(DnType::CommonName, "registry");
        leaf.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let cert = leaf.signed_by(&key, &issuer).unwrap();
        let client_key = KeyPair::generate().unwrap();
        let mut client = CertificateParams::new(Vec::<String>::new()).unwrap();
        client
            .distinguished_name
            .push(DnType::CommonName, "kube-sim-node");
        client.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let client_cert = client.signed_by(&client_key, &issuer).unwrap();
        let write = |file: &str, pem: String| std::fs::write(dir.path().join(file), pem).unwrap();
        write("ca.pem", ca_cert.pem());
        write("cert.pem", cert.pem());
        write("key.pem", key.serialize_pem());
        write("client.pem", client_cert.pem());
        write("client-key.pem", client_key.serialize_pem());
        Pki { dir }
    }

    /// A client certificate signed by the CA, and its key.
    fn client(&self) -> (PathBuf, PathBuf) {
        (
            self.dir.path().join("client.pem"),
            self.dir.path().join("client-key.pem"),
        )
    }

    fn ca(&self) -> PathBuf {
        self.dir.path().join("ca.pem")
    }

    fn serving(&self) -> ServingCert {
        ServingCert {
            ca: self.ca(),
            cert: self.dir.path().join("cert.pem"),
            key: self.dir.path().join("key.pem"),
            client_ca: None,
            client: None,
        }
    }
}

/// `Basic base64(user:password)`.
fn basic(user: &str, password: &str) -> String {
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"))
    )
}

/// A registry over TLS with the PKI's certificate, accepting [`USER`] through an htpasswd file.
pub(crate) async fn secure_registry(pki: &Pki) -> Registry {
    let hash = bcrypt::hash(PASSWORD, 5).unwrap();
    let htpasswd = pki.dir.path().join("htpasswd");
    std::fs::write(&htpasswd, format!("{USER}:{hash}\n")).unwrap();
    Registry::start_with(Options {
        tls: Some(pki.serving()),
        auth_config: format!(
            "auth:\n  htpasswd:\n    realm: kube-sim-test\n    path: {}\n",
            htpasswd.display()
        ),
        authorization: Some(basic(USER, PASSWORD)),
    })
    .await
}

/// A simulator whose kubelet reads `registries.yaml` from this text, as an in-process caller builds it.
pub(crate) async fn sim_with(registries_yaml: &str) -> Sim {
    let mut config = Config::ephemeral();
    config.kubelet.registries =
        Registries::from_yaml(registries_yaml).expect("the registries configuration parses");
    crate::start_with(config).await
}

/// `kubectl create secret docker-registry <name>` for `server` with a user and password.
pub(crate) async fn create_pull_secret(
    sim: &Sim,
    name: &str,
    server: &str,
    user: &str,
    password: &str,
) {
    kubectl_ok(
        sim,
        &[
            "create",
            "secret",
            "docker-registry",
            name,
            &format!("--docker-server={server}"),
            &format!("--docker-username={user}"),
            &format!("--docker-password={password}"),
        ],
    )
    .await;
}

/// Creates a pod of one container through `kubectl apply --server-side`.
pub(crate) async fn create_pod(sim: &Sim, name: &str, image: &str, pull_secrets: &[&str]) {
    let secrets: String = pull_secrets
        .iter()
        .map(|s| format!("\n  - name: {s}"))
        .collect();
    let secrets = if secrets.is_empty() {
        String::new()
    } else {
        format!("\n  imagePullSecrets:{secrets}")
    };
    apply(
        sim,
        &format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:{secrets}\n  containers:\n  - name: app\n    image: {image}\n"
        ),
    )
    .await;
}

/// `kubectl get pod <name> -o jsonpath=<path>`.
pub(crate) async fn jsonpath(sim: &Sim, name: &str, path: &str) -> String {
    kubectl_ok(
        sim,
        &["get", "pod", name, "-o", &format!("jsonpath={path}")],
    )
    .await
}

/// Polls a pod's field through kubectl until `done` holds, failing with the last value at the deadline.
async fn until(sim: &Sim, name: &str, path: &str, done: impl Fn(&str) -> bool) -> String {
    let start = Instant::now();
    loop {
        let value = jsonpath(sim, name, path).await;
        if done(&value) {
            return value;
        }
        assert!(
            start.elapsed() < DEADLINE,
            "pod {name}: {path} is {value:?} after {DEADLINE:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until the pod's container runs; returns its `imageID`.
pub(crate) async fn until_running(sim: &Sim, name: &str) -> String {
    until(sim, name, "{.status.phase}", |p| p == "Running").await;
    jsonpath(sim, name, "{.status.containerStatuses[0].imageID}").await
}

/// The messages of the pod's events of one reason, through kubectl.
async fn events(sim: &Sim, name: &str, reason: &str) -> String {
    kubectl_ok(
        sim,
        &[
            "get",
            "events",
            &format!("--field-selector=involvedObject.name={name},reason={reason}"),
            "-o",
            "jsonpath={.items[*].message}",
        ],
    )
    .await
}

/// Waits until the pod's container backs off pulling `image`; returns the pull error, which the
/// back-off message carries (since Kubernetes 1.32) and the kubelet's `Failed` events name.
pub(crate) async fn until_pull_fails(sim: &Sim, name: &str, image: &str) -> String {
    // Reason and message in one read: the container moves on between back-offs.
    let waiting = "{.status.containerStatuses[0].state.waiting.reason}|{.status.containerStatuses[0].state.waiting.message}";
    let state = until(sim, name, waiting, |w| w.starts_with("ImagePullBackOff|")).await;
    let backoff = &state["ImagePullBackOff|".len()..];
    let prefix = format!("Back-off pulling image \"{image}\": ErrImagePull: ");
    let message = backoff
        .strip_prefix(&prefix)
        .unwrap_or_else(|| panic!("the back-off message names the pull error: {backoff}"))
        .to_string();
    let failed = events(sim, name, "Failed").await;
    assert!(
        failed.contains(&format!("Failed to pull image \"{image}\": {message}"))
            && failed.contains("Error: ErrImagePull"),
        "{failed}"
    );
    message
}

pub(crate) fn ca_file_yaml(path: &Path) -> String {
    format!("{{ca_file: {}}}", path.display())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registries_yaml_with_the_ca_file_and_auth_pulls_over_tls_through_a_mirror() {
    let pki = Pki::new("kube-sim-test-ca");
    let registry = secure_registry(&pki).await;
    let digest = registry.push("team/app", "v1", &[]).await;
    let host = registry.host();
    let sim = sim_with(&format!(
        "mirrors:\n  \"{PRIVATE}\":\n    endpoint: [\"https://{host}\"]\nconfigs:\n  \"{host}\":\n    auth: {{username: {USER}, password: {PASSWORD}}}\n    tls: {}\n",
        ca_file_yaml(&pki.ca())
    ))
    .await;
    create_pod(&sim, "private", &format!("{PRIVATE}/team/app:v1"), &[]).await;
    assert_eq!(
        until_running(&sim, "private").await,
        format!("{PRIVATE}/team/app@{digest}")
    );
    assert_eq!(
        jsonpath(&sim, "private", "{.status.containerStatuses[0].image}").await,
        format!("{PRIVATE}/team/app:v1")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_credentials_the_pull_is_denied_and_a_pull_secret_of_the_service_account_lets_it_run()
 {
    let pki = Pki::new("kube-sim-test-ca");
    let registry = secure_registry(&pki).await;
    let digest = registry.push("team/app", "v1", &[]).await;
    let host = registry.host();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("registries.yaml");
    std::fs::write(
        &file,
        format!(
            "configs:\n  \"{host}\":\n    tls: {}\n",
            ca_file_yaml(&pki.ca())
        ),
    )
    .unwrap();
    let mut config = Config::ephemeral();
    config.registries = Some(file);
    let sim = crate::start_with(config).await;
    let image = format!("{host}/team/app:v1");

    create_pod(&sim, "anonymous", &image, &[]).await;
    let message = until_pull_fails(&sim, "anonymous", &image).await;
    assert_eq!(
        message,
        format!(
            "rpc error: code = Unknown desc = failed to pull and unpack image \"{image}\": failed to resolve \
             reference \"{image}\": pull access denied, repository does not exist or may require \
             authorization: authorization failed: no basic auth credentials"
        )
    );

    let config_json = serde_json::json!({"auths": {host.clone(): {
        "auth": base64::engine::general_purpose::STANDARD.encode(format!("{USER}:{PASSWORD}"))}}});
    kubectl_ok(
        &sim,
        &[
            "create",
            "secret",
            "generic",
            "regcred",
            "--type=kubernetes.io/dockerconfigjson",
            &format!("--from-literal=.dockerconfigjson={config_json}"),
        ],
    )
    .await;
    apply(
        &sim,
        "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: default\nimagePullSecrets:\n- name: regcred\n",
    )
    .await;
    create_pod(&sim, "with-secret", &image, &[]).await;
    assert_eq!(
        jsonpath(&sim, "with-secret", "{.spec.imagePullSecrets}").await,
        r#"[{"name":"regcred"}]"#,
        "the admission copies the service account's pull secrets"
    );
    assert_eq!(
        until_running(&sim, "with-secret").await,
        format!("{host}/team/app@{digest}")
    );
    // The secret's credentials were never written to the pod or its events.
    let described = kubectl_ok(&sim, &["describe", "pod", "with-secret", "anonymous"]).await;
    assert!(!described.contains(PASSWORD), "{described}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn insecure_skip_verify_trusts_any_certificate_and_a_wrong_ca_is_an_x509_failure() {
    let pki = Pki::new("kube-sim-test-ca");
    let other = Pki::new("another-ca");
    let registry = secure_registry(&pki).await;
    let digest = registry.push("team/app", "v1", &[]).await;
    let host = registry.host();
    let sim = sim_with(&format!(
        "mirrors:\n  \"{PRIVATE}\":\n    endpoint: [\"https://{host}\"]\nconfigs:\n  \"{host}\":\n    auth: {{username: {USER}, password: {PASSWORD}}}\n    tls: {{insecure_skip_verify: true}}\n"
    ))
    .await;
    create_pod(&sim, "unverified", &format!("{PRIVATE}/team/app:v1"), &[]).await;
    assert_eq!(
        until_running(&sim, "unverified").await,
        format!("{PRIVATE}/team/app@{digest}")
    );
    sim.shutdown().await;

    let sim = sim_with(&format!(
        "configs:\n  \"{host}\":\n    auth: {{username: {USER}, password: {PASSWORD}}}\n    tls: {}\n",
        ca_file_yaml(&other.ca())
    ))
    .await;
    let image = format!("{host}/team/app:v1");
    create_pod(&sim, "wrong-ca", &image, &[]).await;
    assert_eq!(
        until_pull_fails(&sim, "wrong-ca", &image).await,
        format!(
            "rpc error: code = Unknown desc = failed to pull and unpack image \"{image}\": failed to resolve \
             reference \"{image}\": failed to do request: Head \"https://{host}/v2/team/app/manifests/v1\": \
             tls: failed to verify certificate: x509: certificate signed by unknown authority"
        )
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_password_is_the_registrys_401_and_a_missing_pull_secret_is_a_warning() {
    let pki = Pki::new("kube-sim-test-ca");
    let registry = secure_registry(&pki).await;
    registry.push("team/app", "v1", &[]).await;
    let host = registry.host();
    let sim = sim_with(&format!(
        "configs:\n  \"{host}\":\n    auth: {{username: {USER}, password: {PASSWORD}}}\n    tls: {}\n",
        ca_file_yaml(&pki.ca())
    ))
    .await;
    create_pull_secret(&sim, "wrong", &format!("https://{host}/v1/"), USER, "wrong").await;
    let image = format!("{host}/team/app:v1");
    // The pull secret's credentials replace the node's: the registry refuses them.
    create_pod(&sim, "refused", &image, &["gone", "wrong"]).await;
    assert_eq!(
        until_pull_fails(&sim, "refused", &image).await,
        format!(
            "rpc error: code = Unknown desc = failed to pull and unpack image \"{image}\": failed to resolve \
             reference \"{image}\": unexpected status from HEAD request to \
             https://{host}/v2/team/app/manifests/v1: 401 Unauthorized"
        )
    );
    let events = events(&sim, "refused", "FailedToRetrieveImagePullSecret").await;
    assert!(
        events.starts_with(
            "Unable to retrieve some image pull secrets (gone); attempting to pull the image may not succeed."
        ),
        "{events}"
    );
    // Without a matching pull secret the node's credentials are used.
    create_pod(&sim, "node-credentials", &image, &["gone"]).await;
    until_running(&sim, "node-credentials").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admission_copies_a_service_accounts_pull_secrets_whose_list_apply_owns_atomically() {
    let sim = crate::start().await;
    let account = |secrets: &str| {
        format!(
            "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: builder\nimagePullSecrets:{secrets}\n"
        )
    };
    apply(&sim, &account("\n- name: first\n- name: second")).await;
    apply(
        &sim,
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: inherits\nspec:\n  serviceAccountName: builder\n  automountServiceAccountToken: false\n  containers:\n  - name: app\n    image: app:v1\n",
    )
    .await;
    apply(
        &sim,
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: own\nspec:\n  serviceAccountName: builder\n  imagePullSecrets:\n  - name: mine\n  containers:\n  - name: app\n    image: app:v1\n",
    )
    .await;
    let secrets = "{.spec.imagePullSecrets}";
    assert_eq!(
        jsonpath(&sim, "inherits", secrets).await,
        r#"[{"name":"first"},{"name":"second"}]"#
    );
    assert_eq!(jsonpath(&sim, "own", secrets).await, r#"[{"name":"mine"}]"#);

    // `imagePullSecrets` of a ServiceAccount is atomic: another manager's list conflicts as a whole,
    // and forcing it replaces the list rather than merging by name.
    let (_dir, path) = crate::manifest(&account("\n- name: third"));
    let path = path.to_str().unwrap();
    let conflict = kubectl_at(
        sim.kubeconfig_path(),
        &[
            "apply",
            "--server-side",
            "--field-manager=other",
            "-f",
            path,
        ],
    )
    .await;
    assert!(!conflict.status.success());
    let stderr = String::from_utf8_lossy(&conflict.stderr);
    assert!(
        stderr.contains(r#"conflict with "kubectl""#) && stderr.contains(".imagePullSecrets"),
        "{stderr}"
    );
    kubectl_ok(
        &sim,
        &[
            "apply",
            "--server-side",
            "--field-manager=other",
            "--force-conflicts",
            "-f",
            path,
        ],
    )
    .await;
    assert_eq!(
        kubectl_ok(
            &sim,
            &[
                "get",
                "serviceaccount",
                "builder",
                "-o",
                "jsonpath={.imagePullSecrets}"
            ],
        )
        .await,
        r#"[{"name":"third"}]"#
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registry_behind_a_token_server_is_pulled_with_a_token_for_the_pull_secrets_credentials()
{
    let pki = Pki::new("kube-sim-test-ca");
    let tokens = TokenServer::start(USER, PASSWORD).await;
    let registry = Registry::start_with(Options {
        tls: Some(pki.serving()),
        auth_config: tokens.auth_config(),
        authorization: Some(format!(
            "Bearer {}",
            tokens.token("team/app", &["pull", "push"])
        )),
    })
    .await;
    let digest = registry.push("team/app", "v1", &[]).await;
    let host = registry.host();
    let sim = sim_with(&format!(
        "configs:\n  \"{host}\":\n    tls: {}\n",
        ca_file_yaml(&pki.ca())
    ))
    .await;
    let image = format!("{host}/team/app:v1");

    // An anonymous token grants nothing: asked once more, then refused in the registry's words.
    create_pod(&sim, "anonymous", &image, &[]).await;
    assert_eq!(
        until_pull_fails(&sim, "anonymous", &image).await,
        format!(
            "rpc error: code = Unknown desc = failed to pull and unpack image \"{image}\": failed to resolve \
             reference \"{image}\": pull access denied, repository does not exist or may require \
             authorization: server message: insufficient_scope: authorization failed"
        )
    );
    assert!(
        tokens
            .asked()
            .iter()
            .all(|a| a.method == "GET" && !a.with_credentials),
        "{:?}",
        tokens.asked()
    );

    create_pull_secret(&sim, "regcred", &host, &tokens.user, &tokens.password).await;
    let before = tokens.asked().len();
    create_pod(&sim, "authorized", &image, &["regcred"]).await;
    assert_eq!(
        until_running(&sim, "authorized").await,
        format!("{host}/team/app@{digest}")
    );
    // With a secret, the OAuth2 POST comes first; this server refuses it, so the token is fetched
    // with GET and Basic credentials, for the repository's pull scope. (The anonymous pod goes on
    // asking without credentials meanwhile.)
    let asked: Vec<_> = tokens
        .asked()
        .split_off(before)
        .into_iter()
        .filter(|a| a.method == "POST" || a.with_credentials)
        .collect();
    assert_eq!(asked[0].method, "POST", "{asked:?}");
    let get = &asked[1];
    assert!(get.method == "GET" && get.with_credentials, "{asked:?}");
    assert_eq!(
        get.query,
        format!(
            "scope=repository%3Ateam%2Fapp%3Apull&service={}",
            token_server::SERVICE
        )
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registry_that_requires_a_client_certificate_is_shown_cert_file_and_key_file() {
    let pki = Pki::new("kube-sim-test-ca");
    let (cert, key) = pki.client();
    let registry = Registry::start_with(Options {
        tls: Some(ServingCert {
            client_ca: Some(pki.ca()),
            client: Some(pki.client()),
            ..pki.serving()
        }),
        ..Options::default()
    })
    .await;
    let digest = registry.push("team/app", "v1", &[]).await;
    let host = registry.host();
    let image = format!("{host}/team/app:v1");
    let ca = pki.ca();
    let sim = sim_with(&format!(
        "configs:\n  \"{host}\":\n    tls:\n      ca_file: {}\n      cert_file: {}\n      key_file: {}\n",
        ca.display(),
        cert.display(),
        key.display()
    ))
    .await;
    create_pod(&sim, "identified", &image, &[]).await;
    assert_eq!(
        until_running(&sim, "identified").await,
        format!("{host}/team/app@{digest}")
    );
    sim.shutdown().await;

    let sim = sim_with(&format!(
        "configs:\n  \"{host}\":\n    tls: {}\n",
        ca_file_yaml(&ca)
    ))
    .await;
    // Without one, the registry's alert (Go's server answers a missing certificate with `bad
    // certificate`) is the pull error, in Go's words.
    create_pod(&sim, "anonymous", &image, &[]).await;
    let message = until_pull_fails(&sim, "anonymous", &image).await;
    assert!(
        message.ends_with(&format!(
            "failed to do request: Head \"https://{host}/v2/team/app/manifests/v1\": remote error: tls: bad certificate"
        )),
        "{message}"
    );
}
