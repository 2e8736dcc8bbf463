//! The Docker kubelet against the real engine: images built here `FROM scratch` from a tiny static binary,
//! pushed to a real registry on loopback and pulled through a `registries.yaml` that names it by an
//! in-network name, as the `sim` provider does. Every Docker object a test makes has a unique name and is
//! removed by a drop guard.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::Duration;

use futures::AsyncBufReadExt as _;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{LogParams, PostParams};
use kube_sim::kubelet::docker::DockerConfig;
use kube_sim::store::Store;
use kube_sim::{Config, GroupResource, KubeletBackend, Sim};
use serde_json::{Value, json};

use crate::oci::Registry;
use crate::rollout::{applied, until, watch};
use crate::{kubectl_ok, manifest};

/// How long a wait on the engine may take (pulls, starts, probes, restarts).
pub(crate) const DEADLINE: Duration = Duration::from_secs(90);

/// How long building the test binary may take.
const BUILD_DEADLINE: Duration = Duration::from_secs(600);

/// The in-network name the pods use for the registry; only the node's `registries.yaml` knows it.
const REGISTRY_NAME: &str = "kube-sim-it-registry:5000";

/// The label that marks this test run's pod containers.
const TEST_LABEL: &str = "kube-sim-it";

/// A tiny HTTP server: `/healthz` answers 503 until `READY_AFTER_MS` passed, then 200, `/big` answers
/// 1 MiB, other paths answer `ok <path>`. It prints its environment and whether the API server's address
/// answers; with the argument `crash` it exits 1, with `check` it exits 0 at once (for exec probes). For
/// `kubectl exec`: `echo <words>` prints the words, `fail <code>` says so on stderr and exits with the
/// code, `cat` copies stdin to stdout, `size <cols>` waits for a terminal that wide and prints its size; `tick` prints a line every 200 ms (for
/// `kubectl attach`).
const APP: &str = r#"
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_default()
}

fn main() {
    let mode = std::env::args().nth(1).unwrap_or_default();
    let rest: Vec<String> = std::env::args().skip(2).collect();
    match mode.as_str() {
        "check" => std::process::exit(0),
        "echo" => {
            println!("{}", rest.join(" "));
            std::process::exit(0);
        }
        "fail" => {
            eprintln!("failing with {}", rest.join(" "));
            std::process::exit(rest.first().and_then(|c| c.parse().ok()).unwrap_or(1));
        }
        "tick" => {
            for n in 0.. {
                println!("tick {n}");
                std::thread::sleep(Duration::from_millis(200));
            }
        }
        "size" => {
            // Waits for the terminal to be resized to the given width, then prints `rows cols`.
            #[repr(C)]
            #[derive(Default)]
            struct Winsize { rows: u16, cols: u16, x: u16, y: u16 }
            extern "C" { fn ioctl(fd: i32, request: u64, ...) -> i32; }
            let want: u16 = rest.first().and_then(|w| w.parse().ok()).unwrap_or(0);
            let mut size = Winsize::default();
            for _ in 0..200 {
                unsafe { ioctl(1, 0x5413, &mut size as *mut Winsize) };
                if size.cols == want {
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            println!("{} {}", size.rows, size.cols);
            std::process::exit(0);
        }
        "cat" => {
            let mut input = Vec::new();
            let _ = std::io::stdin().read_to_end(&mut input);
            let _ = std::io::stdout().write_all(&input);
            std::process::exit(0);
        }
        _ => {}
    }
    println!(
        "hello from {} greeting={} secret={} ns={} sa={}",
        env("POD_NAME"), env("GREETING"), env("SECRET"), env("POD_NAMESPACE"), env("SA")
    );
    let api = format!("{}:{}", env("KUBERNETES_SERVICE_HOST"), env("KUBERNETES_SERVICE_PORT"));
    let reachable = api
        .to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .and_then(|a| TcpStream::connect_timeout(&a, Duration::from_secs(3)).ok())
        .is_some();
    println!("api {api} reachable={reachable}");
    let dir = "/var/run/secrets/kubernetes.io/serviceaccount";
    let ns = std::fs::read_to_string(format!("{dir}/namespace")).unwrap_or_default();
    let token = std::fs::read_to_string(format!("{dir}/token")).unwrap_or_default();
    let ca = std::fs::read_to_string(format!("{dir}/ca.crt")).unwrap_or_default();
    println!("serviceaccount namespace={ns} token={} ca={}", !token.is_empty(), ca.contains("BEGIN CERTIFICATE"));
    if mode == "crash" {
        eprintln!("crashing now");
        std::process::exit(1);
    }
    let ready_after = Duration::from_millis(env("READY_AFTER_MS").parse().unwrap_or(0));
    let start = Instant::now();
    let listener = TcpListener::bind("0.0.0.0:8080").expect("port 8080");
    println!("listening on 8080");
    for stream in listener.incoming() {
        let Ok(mut stream) = stream else { continue };
        let mut buf = [0u8; 2048];
        let n = stream.read(&mut buf).unwrap_or(0);
        let request = String::from_utf8_lossy(&buf[..n]);
        let path = request.split_whitespace().nth(1).unwrap_or("/").to_string();
        let (code, body) = if path == "/healthz" && start.elapsed() < ready_after {
            ("503 Service Unavailable", "starting".to_string())
        } else if path == "/big" {
            ("200 OK", "x".repeat(1 << 20))
        } else {
            ("200 OK", format!("ok {path}"))
        };
        let _ = write!(stream, "HTTP/1.1 {code}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len());
    }
}
"#;

/// Runs a command within a deadline; panics (never skips) when it cannot run.
pub(crate) async fn run(
    program: &str,
    args: &[&str],
    envs: &[(&str, &str)],
    deadline: Duration,
) -> Output {
    let mut cmd = Command::new(program);
    cmd.args(args);
    for (k, v) in envs {
        cmd.env(k, v);
    }
    let shown = format!("{program} {}", args.join(" "));
    tokio::time::timeout(
        deadline,
        tokio::task::spawn_blocking(move || cmd.output()),
    )
    .await
    .unwrap_or_else(|_| panic!("`{shown}` did not finish within {deadline:?}"))
    .expect("the command task does not panic")
    .unwrap_or_else(|e| panic!("`{shown}` cannot run (the Docker tests need the docker CLI and a running engine): {e}"))
}

/// Runs `docker …` and requires success, returning stdout.
pub(crate) async fn docker_ok(args: &[&str]) -> String {
    let out = run("docker", args, &[("DOCKER_BUILDKIT", "0")], BUILD_DEADLINE).await;
    assert!(
        out.status.success(),
        "docker {args:?} failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Best-effort `docker …` for clean-up in `Drop`.
fn docker_quiet(args: &[&str]) {
    let _ = Command::new("docker").args(args).output();
}

/// Builds the test binary once per target directory (cargo skips the work when nothing changed).
pub(crate) async fn build_app() -> PathBuf {
    let root = std::env::temp_dir().join("kube-sim-docker-it");
    let src = root.join("app/src");
    std::fs::create_dir_all(&src).expect("the app directory");
    let write_if_changed = |path: PathBuf, contents: &str| {
        if std::fs::read_to_string(&path).ok().as_deref() != Some(contents) {
            std::fs::write(&path, contents).expect("an app file is written");
        }
    };
    write_if_changed(
        root.join("app/Cargo.toml"),
        "[package]\nname = \"kube-sim-it-app\"\nversion = \"0.0.0\"\nedition = \"2021\"\n\n[workspace]\n\n[profile.release]\nopt-level = \"s\"\n",
    );
    write_if_changed(src.join("main.rs"), APP);
    let manifest = root.join("app/Cargo.toml");
    let target_dir = root.join("target");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let out = run(
        &cargo,
        &[
            "build",
            "--release",
            "--quiet",
            "--target",
            "x86_64-unknown-linux-gnu",
            "--manifest-path",
            manifest.to_str().expect("a UTF-8 path"),
        ],
        &[
            ("RUSTFLAGS", "-C target-feature=+crt-static"),
            (
                "CARGO_TARGET_DIR",
                target_dir.to_str().expect("a UTF-8 path"),
            ),
        ],
        BUILD_DEADLINE,
    )
    .await;
    assert!(
        out.status.success(),
        "building the test binary failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    target_dir.join("x86_64-unknown-linux-gnu/release/kube-sim-it-app")
}

/// The Docker objects of one test: a network, a registry with images, the names to untag at the end.
pub(crate) struct Fixture {
    id: String,
    network: String,
    gateway: String,
    pub(crate) registry: Registry,
    images: Vec<String>,
    _context: tempfile::TempDir,
}

impl Fixture {
    /// A network and a registry, with the test app pushed as `demo/app:v1` (serving) and `demo/crash:v1`
    /// (exiting 1).
    pub(crate) async fn start() -> Fixture {
        let app = build_app().await;
        let id = kube_sim::meta::random_hex(6);
        let network = format!("kube-sim-it-{id}");
        docker_ok(&[
            "network",
            "create",
            "--label",
            &format!("{TEST_LABEL}={id}"),
            &network,
        ])
        .await;
        let registry = Registry::start().await;
        let context = tempfile::tempdir().expect("a build context");
        std::fs::copy(&app, context.path().join("app")).expect("the binary is copied");
        let mut fixture = Fixture {
            gateway: String::new(),
            id,
            network,
            registry,
            images: Vec::new(),
            _context: context,
        };
        fixture.gateway = docker_ok(&[
            "network",
            "inspect",
            "--format",
            "{{(index .IPAM.Config 0).Gateway}}",
            &fixture.network,
        ])
        .await
        .trim()
        .to_string();
        assert!(!fixture.gateway.is_empty(), "the network has a gateway");
        for (repo, cmd) in [("demo/app", "serve"), ("demo/crash", "crash")] {
            fixture.build_and_push(repo, cmd).await;
        }
        fixture
    }

    async fn build_and_push(&mut self, repo: &str, cmd: &str) {
        let dir = self._context.path();
        std::fs::write(
            dir.join("Dockerfile"),
            // The label, first, makes this fixture's images and their intermediate layers its own: tests
            // running at once would build identical ones, and one test's clean-up (which prunes untagged
            // parents) must not delete an image another test still builds on or pushes.
            format!(
                "FROM scratch\nLABEL {TEST_LABEL}={}\nCOPY app /app\nENTRYPOINT [\"/app\"]\nCMD [\"{cmd}\"]\n",
                self.id
            ),
        )
        .expect("the Dockerfile is written");
        let tag = format!("127.0.0.1:{}/{repo}:v1", self.registry.port);
        self.images.push(tag.clone());
        docker_ok(&[
            "build",
            "--quiet",
            "-t",
            &tag,
            dir.to_str().expect("a UTF-8 path"),
        ])
        .await;
        docker_ok(&["push", &tag]).await;
    }

    /// The manifest digest the registry serves for `repo:v1`.
    async fn registry_digest(&self, repo: &str) -> String {
        let out = run(
            "curl",
            &[
                "-sSfI",
                "-H",
                "Accept: application/vnd.docker.distribution.manifest.v2+json",
                "-H",
                "Accept: application/vnd.oci.image.manifest.v1+json",
                &format!(
                    "http://127.0.0.1:{}/v2/{repo}/manifests/v1",
                    self.registry.port
                ),
            ],
            &[],
            DEADLINE,
        )
        .await;
        let headers = String::from_utf8_lossy(&out.stdout).into_owned();
        headers
            .lines()
            .find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.eq_ignore_ascii_case("docker-content-digest")
                    .then(|| v.trim().to_string())
            })
            .unwrap_or_else(|| panic!("the registry names no digest for {repo}: {headers}"))
    }

    /// The image as pods write it.
    pub(crate) fn image(&self, repo: &str) -> String {
        format!("{REGISTRY_NAME}/{repo}:v1")
    }

    /// A `registries.yaml` like the `sim` provider's: the in-network name and a `localhost:<port>` key
    /// share one endpoint.
    fn registries_file(&self) -> PathBuf {
        let registries = self._context.path().join("registries.yaml");
        let endpoint = format!("http://{REGISTRY_NAME}");
        std::fs::write(
            &registries,
            format!(
                "mirrors:\n  \"{REGISTRY_NAME}\":\n    endpoint: [\"{endpoint}\"]\n  \"localhost:{}\":\n    endpoint: [\"{endpoint}\"]\n",
                self.registry.port
            ),
        )
        .expect("registries.yaml is written");
        registries
    }

    /// A simulator with the Docker kubelet on this network, listening on the network's gateway so pods
    /// reach the API server, with the registry mapped like the `sim` provider maps it.
    pub(crate) async fn sim(&self) -> Sim {
        crate::start_with(self.config()).await
    }

    /// The configuration of [`Fixture::sim`].
    pub(crate) fn config(&self) -> Config {
        let registries = self.registries_file();
        let mut config = Config::ephemeral();
        config.listen = format!("{}:0", self.gateway).parse().expect("an address");
        config.registries = Some(registries);
        config.kubelet_backend = KubeletBackend::Docker(DockerConfig {
            network: self.network.clone(),
            labels: BTreeMap::from([(TEST_LABEL.to_string(), self.id.clone())]),
            api_host: None,
            api_port: None,
        });
        config
    }

    /// The IDs of every container (running or not) with this test's label.
    pub(crate) async fn containers(&self) -> Vec<String> {
        docker_ok(&[
            "ps",
            "-aq",
            "--filter",
            &format!("label={TEST_LABEL}={}", self.id),
        ])
        .await
        .lines()
        .map(str::to_string)
        .collect()
    }

    /// Waits until no container has this test's label.
    pub(crate) async fn until_no_containers(&self, what: &str) {
        let gone = tokio::time::timeout(DEADLINE, async {
            loop {
                if self.containers().await.is_empty() {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        })
        .await;
        assert!(
            gone.is_ok(),
            "{what}: containers with label {TEST_LABEL}={} remain: {:?}",
            self.id,
            self.containers().await
        );
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        let filter = format!("label={TEST_LABEL}={}", self.id);
        if let Ok(out) = Command::new("docker")
            .args(["ps", "-aq", "--filter", &filter])
            .output()
        {
            for id in String::from_utf8_lossy(&out.stdout).lines() {
                docker_quiet(&["rm", "-f", "-v", id]);
            }
        }
        docker_quiet(&["network", "rm", &self.network]);
        // The pushed tags and whatever the engine pulled from this registry.
        let mut names = self.images.clone();
        if let Ok(out) = Command::new("docker")
            .args([
                "images",
                "--digests",
                "--format",
                "{{.Repository}} {{.Tag}} {{.Digest}}",
            ])
            .output()
        {
            let prefix = format!("localhost:{}/", self.registry.port);
            for line in String::from_utf8_lossy(&out.stdout).lines() {
                let parts: Vec<&str> = line.split_whitespace().collect();
                if let [repo, tag, digest] = parts[..]
                    && repo.starts_with(&prefix)
                {
                    if tag != "<none>" {
                        names.push(format!("{repo}:{tag}"));
                    }
                    if digest != "<none>" {
                        names.push(format!("{repo}@{digest}"));
                    }
                }
            }
        }
        for name in names {
            docker_quiet(&["rmi", &name]);
        }
    }
}

pub(crate) fn container_status(p: &Value) -> &Value {
    &p["status"]["containerStatuses"][0]
}

pub(crate) fn ready(p: &Value) -> bool {
    p["status"]["conditions"].as_array().is_some_and(|cs| {
        cs.iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True")
    })
}

fn running(p: &Value) -> bool {
    container_status(p).pointer("/state/running").is_some()
}

pub(crate) fn waiting_reason(p: &Value) -> Option<&str> {
    container_status(p)
        .pointer("/state/waiting/reason")?
        .as_str()
}

pub(crate) async fn create_pod(sim: &Sim, pod: Value) {
    let api: Api<Pod> = Api::namespaced(sim.client().await.expect("a client"), "default");
    api.create(
        &PostParams::default(),
        &serde_json::from_value(pod).expect("a pod"),
    )
    .await
    .expect("the pod is created");
}

/// Reads `/var/run/secrets/…/<file>` out of a container through the engine.
async fn service_account_file(container: &str, file: &str) -> String {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let dest = dir.path().join(file);
    docker_ok(&[
        "cp",
        &format!("{container}:/var/run/secrets/kubernetes.io/serviceaccount/{file}"),
        dest.to_str().expect("a UTF-8 path"),
    ])
    .await;
    std::fs::read_to_string(&dest).expect("the copied file is read")
}

/// Calls the API server as a pod would, with the token and CA from the pod's container: the status of a
/// `GET` of `path` (200, 401 or 403).
async fn get_as(sim: &Sim, ca_pem: &str, token: &str, path: &str) -> u16 {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let kubeconfig = dir.path().join("kubeconfig");
    let ca = base64_encode(ca_pem.as_bytes());
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {}\n    certificate-authority-data: {ca}\nusers:\n- name: u\n  user:\n    token: {token}\ncontexts:\n- name: c\n  context: {{cluster: c, user: u}}\ncurrent-context: c\n",
            sim.url()
        ),
    )
    .expect("the kubeconfig is written");
    let out = crate::kubectl_at(&kubeconfig, &["get", "--raw", path]).await;
    if out.status.success() {
        return 200;
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    if stderr.contains("Unauthorized") {
        401
    } else if stderr.contains("(Forbidden)")
        && stderr.contains("User \"system:serviceaccount:default:default\" cannot")
    {
        403
    } else {
        panic!("kubectl with the pod's credentials failed: {stderr}")
    }
}

fn base64_encode(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deployment_pods_run_as_containers_gated_by_their_readiness_probe_and_leave_nothing_behind()
{
    let fx = Fixture::start().await;
    let digest = fx.registry_digest("demo/app").await;
    let sim = fx.sim().await;
    let store: Store = sim.store().clone();
    let mut pods = watch(&store, &GroupResource::pods(), Some("app=web"));
    let (_dir, path) = manifest(&format!(
        r#"
apiVersion: v1
kind: ConfigMap
metadata: {{name: web-config, namespace: default}}
data: {{greeting: hi}}
---
apiVersion: v1
kind: Secret
metadata: {{name: web-secret, namespace: default}}
stringData: {{password: s3cr3t}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {{name: web, namespace: default}}
spec:
  replicas: 2
  selector: {{matchLabels: {{app: web}}}}
  template:
    metadata: {{labels: {{app: web}}}}
    spec:
      terminationGracePeriodSeconds: 2
      containers:
      - name: app
        image: {image}
        ports: [{{name: http, containerPort: 8080}}]
        env:
        - {{name: READY_AFTER_MS, value: "1500"}}
        - {{name: GREETING, valueFrom: {{configMapKeyRef: {{name: web-config, key: greeting}}}}}}
        - {{name: SECRET, valueFrom: {{secretKeyRef: {{name: web-secret, key: password}}}}}}
        - {{name: POD_NAME, valueFrom: {{fieldRef: {{fieldPath: metadata.name}}}}}}
        - {{name: POD_NAMESPACE, valueFrom: {{fieldRef: {{fieldPath: metadata.namespace}}}}}}
        - {{name: SA, valueFrom: {{fieldRef: {{fieldPath: spec.serviceAccountName}}}}}}
        readinessProbe:
          httpGet: {{path: /healthz, port: http}}
          periodSeconds: 1
        securityContext: {{runAsUser: 65532, runAsNonRoot: true, readOnlyRootFilesystem: true, allowPrivilegeEscalation: false}}
"#,
        image = fx.image("demo/app")
    ));
    kubectl_ok(&sim, &["apply", "-f", path.to_str().unwrap()]).await;

    // Each pod is seen running but unready (the probe answers 503 at first) before it is Ready.
    let mut seen_unready_running: BTreeMap<String, bool> = BTreeMap::new();
    let mut latest: BTreeMap<String, Value> = BTreeMap::new();
    until(&mut pods, DEADLINE, "both pods to become Ready", |e| {
        let p = applied(e)?;
        let name = p["metadata"]["name"].as_str()?.to_string();
        if running(p) && !ready(p) {
            seen_unready_running.insert(name.clone(), true);
        }
        latest.insert(name, p.clone());
        (latest.len() == 2 && latest.values().all(ready)).then_some(())
    })
    .await;
    for (name, p) in &latest {
        assert_eq!(
            seen_unready_running.get(name),
            Some(&true),
            "{name} was Ready before its readiness probe passed"
        );
        let s = container_status(p);
        assert_eq!(s["image"], fx.image("demo/app"));
        assert_eq!(
            s["imageID"],
            format!("{REGISTRY_NAME}/demo/app@{digest}"),
            "imageID carries the registry's digest"
        );
        let id = s["containerID"]
            .as_str()
            .and_then(|id| id.strip_prefix("docker://"))
            .expect("a docker:// container ID");
        let inspected: Value =
            serde_json::from_str(&docker_ok(&["inspect", "--type", "container", id]).await)
                .expect("docker inspect prints JSON");
        let c = &inspected[0];
        assert_eq!(c["State"]["Running"], true);
        assert_eq!(c["Config"]["User"], "65532", "runAsUser is honoured");
        assert_eq!(c["HostConfig"]["ReadonlyRootfs"], true);
        let uid = p["metadata"]["uid"].as_str().unwrap();
        assert_eq!(
            c["Name"],
            format!("/k8s_app_{name}_default_{}", &uid[..8]),
            "docker ps shows the pod"
        );
        assert_eq!(c["Config"]["Labels"]["io.kubernetes.pod.uid"], uid);
        assert_eq!(
            p["status"]["podIP"], c["NetworkSettings"]["Networks"][&fx.network]["IPAddress"],
            "the pod IP is the container's address on the network"
        );
        assert!(s.pointer("/state/running/startedAt").is_some());
    }

    // kubectl logs shows the container's own output, including what it got from the API objects.
    let name = latest.keys().next().unwrap().clone();
    let logs = kubectl_ok(&sim, &["logs", &name]).await;
    assert!(
        logs.contains(&format!(
            "hello from {name} greeting=hi secret=s3cr3t ns=default sa=default"
        )),
        "{logs}"
    );
    assert!(
        logs.contains("serviceaccount namespace=default token=true ca=true"),
        "{logs}"
    );
    assert!(
        logs.contains(&format!(
            "api {}:{} reachable=true",
            fx.gateway,
            sim.addr().port()
        )),
        "the pod reaches the API server at KUBERNETES_SERVICE_HOST:PORT: {logs}"
    );
    let tail = kubectl_ok(&sim, &["logs", "--tail=1", &name]).await;
    assert_eq!(tail.trim_end(), "listening on 8080");
    // A followed log stream delivers the output while the container keeps running.
    let api: Api<Pod> = Api::namespaced(sim.client().await.unwrap(), "default");
    let mut lines = api
        .log_stream(
            &name,
            &LogParams {
                follow: true,
                ..LogParams::default()
            },
        )
        .await
        .expect("a followed log stream")
        .lines();
    let first = tokio::time::timeout(DEADLINE, futures::StreamExt::next(&mut lines))
        .await
        .expect("a followed line within the deadline")
        .expect("the stream has a line")
        .expect("the line is read");
    assert!(first.starts_with("hello from"), "{first}");
    drop(lines);

    // The pod's service-account credentials authenticate against the API server as `default:default`,
    // which RBAC lets read nothing until a binding grants it; a made-up token does not authenticate.
    let id = container_status(&latest[&name])["containerID"]
        .as_str()
        .unwrap()
        .trim_start_matches("docker://")
        .to_string();
    let token = service_account_file(&id, "token").await;
    let ca = service_account_file(&id, "ca.crt").await;
    assert_eq!(service_account_file(&id, "namespace").await, "default");
    const PODS: &str = "/api/v1/namespaces/default/pods";
    const SECRETS: &str = "/api/v1/namespaces/default/secrets";
    assert_eq!(get_as(&sim, &ca, &token, PODS).await, 403);
    assert_eq!(get_as(&sim, &ca, &token, SECRETS).await, 403);
    assert_eq!(get_as(&sim, &ca, &token, "/apis").await, 200, "discovery");
    assert_eq!(get_as(&sim, &ca, "not-a-token", PODS).await, 401);
    kubectl_ok(
        &sim,
        &[
            "create",
            "rolebinding",
            "default-view",
            "--clusterrole=view",
            "--serviceaccount=default:default",
        ],
    )
    .await;
    assert_eq!(
        get_as(&sim, &ca, &token, PODS).await,
        200,
        "view grants pods"
    );
    assert_eq!(
        get_as(&sim, &ca, &token, SECRETS).await,
        403,
        "view grants no secrets"
    );

    // Deleting the Deployment deletes its pods; a terminating pod's container gets its grace period
    // (the app, PID 1 without a SIGTERM handler, ignores SIGTERM), so it still exists while the pod is
    // marked, and both are gone at the end.
    kubectl_ok(&sim, &["delete", "deployment", "web", "--wait=false"]).await;
    let terminating = until(
        &mut pods,
        DEADLINE,
        "a pod to be marked for deletion",
        |e| {
            applied(e)
                .filter(|p| p.pointer("/metadata/deletionTimestamp").is_some())
                .map(|p| {
                    container_status(p)["containerID"]
                        .as_str()
                        .unwrap_or("")
                        .to_string()
                })
        },
    )
    .await;
    let id = terminating.trim_start_matches("docker://");
    let out = run(
        "docker",
        &["inspect", "--type", "container", id],
        &[],
        DEADLINE,
    )
    .await;
    assert!(
        out.status.success(),
        "the container of a terminating pod is still there during its grace period"
    );
    let mut deleted = 0;
    until(&mut pods, DEADLINE, "both pods to be deleted", |e| {
        if let kube_sim::store::WatchEvent::Deleted(_) = e {
            deleted += 1;
        }
        (deleted == 2).then_some(())
    })
    .await;
    fx.until_no_containers("after the pods were deleted").await;
    assert_eq!(
        get_as(&sim, &ca, &token, PODS).await,
        401,
        "a removed pod's token is revoked"
    );
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_image_that_exits_non_zero_reaches_crash_loop_back_off_with_increasing_restarts() {
    let fx = Fixture::start().await;
    let digest = fx.registry_digest("demo/crash").await;
    let sim = fx.sim().await;
    let mut pods = watch(&sim.store().clone(), &GroupResource::pods(), None);
    create_pod(
        &sim,
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "crasher", "namespace": "default"},
            "spec": {"containers": [{"name": "app", "image": fx.image("demo/crash")}]}}),
    )
    .await;
    let mut restarts: Vec<i64> = Vec::new();
    let last = until(
        &mut pods,
        DEADLINE,
        "two restarts in CrashLoopBackOff",
        |e| {
            let p = applied(e)?;
            let count = container_status(p)["restartCount"].as_i64()?;
            if restarts.last() != Some(&count) {
                restarts.push(count);
            }
            (waiting_reason(p) == Some("CrashLoopBackOff") && count >= 2).then(|| p.clone())
        },
    )
    .await;
    assert!(
        restarts.windows(2).all(|w| w[0] < w[1]),
        "restart counts only increase: {restarts:?}"
    );
    let s = container_status(&last);
    assert_eq!(s["lastState"]["terminated"]["exitCode"], 1);
    assert_eq!(s["lastState"]["terminated"]["reason"], "Error");
    assert_eq!(s["imageID"], format!("{REGISTRY_NAME}/demo/crash@{digest}"));
    assert_eq!(s["ready"], false);
    let logs = kubectl_ok(&sim, &["logs", "crasher"]).await;
    assert!(logs.contains("crashing now"), "{logs}");
    sim.shutdown().await;
    fx.until_no_containers("after shutdown").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_image_reaches_image_pull_back_off_with_the_engines_error() {
    let fx = Fixture::start().await;
    let sim = fx.sim().await;
    let mut pods = watch(&sim.store().clone(), &GroupResource::pods(), None);
    create_pod(
        &sim,
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "missing", "namespace": "default"},
            "spec": {"containers": [{"name": "app", "image": fx.image("demo/missing")}]}}),
    )
    .await;
    let mut pull_error: Option<String> = None;
    let back_off = until(&mut pods, DEADLINE, "ImagePullBackOff", |e| {
        let p = applied(e)?;
        let message = container_status(p)
            .pointer("/state/waiting/message")
            .and_then(Value::as_str)
            .map(str::to_string);
        if waiting_reason(p) == Some("ErrImagePull") {
            pull_error = message.clone();
        }
        if waiting_reason(p) == Some("ImagePullBackOff") && pull_error.is_some() {
            return message;
        }
        None
    })
    .await;
    let message = pull_error.unwrap();
    assert_eq!(
        back_off,
        format!(
            "Back-off pulling image \"{}\": ErrImagePull: {message}",
            fx.image("demo/missing")
        ),
        "the back-off message carries the engine's error, as kubelets since 1.32 do"
    );
    // The engine pulled through the loopback name and said why it failed.
    assert!(
        message.contains(&format!("localhost:{}/demo/missing", fx.registry.port))
            && (message.contains("not found") || message.contains("manifest unknown")),
        "{message}"
    );
    assert!(fx.containers().await.is_empty(), "no container was created");
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_removes_pod_containers_and_a_restarted_node_removes_leftovers() {
    let fx = Fixture::start().await;
    // A container with this node's labels, as a crashed earlier run would leave.
    let leftover = format!("k8s_app_leftover_default_{}", fx.id);
    docker_ok(&[
        "create",
        "--name",
        &leftover,
        "--label",
        &format!("{TEST_LABEL}={}", fx.id),
        "--label",
        &format!("kube-sim.node={}", kube_sim::NODE_NAME),
        &fx.images[0],
    ])
    .await;
    let sim = fx.sim().await;
    let mut pods = watch(&sim.store().clone(), &GroupResource::pods(), None);
    create_pod(
        &sim,
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "server", "namespace": "default"},
            "spec": {"containers": [{"name": "app", "image": fx.image("demo/app"),
                "readinessProbe": {"exec": {"command": ["/app", "check"]}, "periodSeconds": 1}}]}}),
    )
    .await;
    until(&mut pods, DEADLINE, "the pod to become Ready", |e| {
        applied(e).filter(|p| ready(p)).map(|_| ())
    })
    .await;
    let containers = fx.containers().await;
    assert_eq!(
        containers.len(),
        1,
        "only the pod's container: {containers:?}"
    );
    let names = docker_ok(&[
        "ps",
        "-a",
        "--format",
        "{{.Names}}",
        "--filter",
        &format!("name={leftover}"),
    ])
    .await;
    assert!(
        names.trim().is_empty(),
        "the leftover was removed at start: {names}"
    );
    sim.shutdown().await;
    assert!(
        fx.containers().await.is_empty(),
        "shutdown removed the pod's container"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_runs_pods_on_docker_and_removes_them_on_sigterm() {
    let fx = Fixture::start().await;
    let dir = tempfile::tempdir().expect("a temporary directory");
    let kubeconfig = dir.path().join("kubeconfig.yaml");
    let registries = fx.registries_file();
    let label = format!("{TEST_LABEL}={}", fx.id);
    let listen = format!("{}:0", fx.gateway);
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_kube-sim"))
        .args(["serve", "--listen", &listen, "--kubeconfig-out"])
        .arg(&kubeconfig)
        .arg("--registries")
        .arg(&registries)
        .args([
            "--kubelet",
            "docker",
            "--docker-network",
            &fx.network,
            "--docker-label",
            &label,
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("kube-sim starts");
    let stdout = child.stdout.take().expect("stdout is piped");
    let url = tokio::time::timeout(
        DEADLINE,
        tokio::task::spawn_blocking(move || {
            let mut line = String::new();
            std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut line)
                .map(|_| line)
        }),
    )
    .await
    .expect("the URL is printed within the deadline")
    .unwrap()
    .unwrap();
    assert!(url.starts_with("https://"), "{url}");
    let pod = format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: server, namespace: default}}\nspec:\n  containers:\n  - name: app\n    image: {}\n    readinessProbe: {{httpGet: {{path: /healthz, port: 8080}}, periodSeconds: 1}}\n",
        fx.image("demo/app")
    );
    let (_m, path) = manifest(&pod);
    let apply = crate::kubectl_at(&kubeconfig, &["apply", "-f", path.to_str().unwrap()]).await;
    assert!(
        apply.status.success(),
        "{}",
        String::from_utf8_lossy(&apply.stderr)
    );
    let wait = run(
        crate::KUBECTL,
        &[
            "wait",
            "--for=condition=Ready",
            "pod/server",
            "--timeout=80s",
        ],
        &[("KUBECONFIG", kubeconfig.to_str().unwrap())],
        DEADLINE,
    )
    .await;
    assert!(
        wait.status.success(),
        "{}",
        String::from_utf8_lossy(&wait.stderr)
    );
    assert_eq!(
        fx.containers().await.len(),
        1,
        "the pod runs as a container"
    );
    crate::terminate(child, DEADLINE).await;
    assert!(
        fx.containers().await.is_empty(),
        "SIGTERM removed the pod containers: {:?}",
        fx.containers().await
    );
}
