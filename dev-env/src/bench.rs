//! Benchmarks behind `cargo xtask bench`: figures measured on this machine,
//! reported as median, min and max over several runs. Nothing here is a
//! test: no figure is asserted.

use std::{
    path::Path,
    process::{Child, Stdio},
    time::{Duration, Instant},
};

use k8s_openapi::api::apps::v1::Deployment;
use kube::{
    Api, Client,
    api::{Patch, PatchParams},
};
use serde::Serialize;
use serde_json::json;
use xshell::{Shell, cmd};

use crate::{
    image::{cargo, distribution, oci},
    wait::workload::{self, WaitOptions, Want},
};

/// The distribution registry binary from Debian's `docker-registry` package.
pub const DISTRIBUTION_BINARY: &str = "/usr/bin/docker-registry";

/// One reported figure.
#[derive(Debug, Clone, Serialize)]
pub struct Figure {
    pub name: String,
    pub unit: String,
    pub median: f64,
    pub min: f64,
    pub max: f64,
    pub runs: usize,
}

impl Figure {
    /// Summarises `samples` (at least one).
    pub fn of(name: &str, unit: &str, mut samples: Vec<f64>) -> Figure {
        samples.sort_by(f64::total_cmp);
        let n = samples.len();
        let median = if n % 2 == 1 {
            samples[n / 2]
        } else {
            (samples[n / 2 - 1] + samples[n / 2]) / 2.0
        };
        Figure {
            name: name.to_string(),
            unit: unit.to_string(),
            median,
            min: samples[0],
            max: samples[n - 1],
            runs: n,
        }
    }
}

/// The figures as a Markdown table.
pub fn markdown(figures: &[Figure]) -> String {
    let mut out = String::from(
        "| figure | median | min | max | unit | runs |\n|---|---:|---:|---:|---|---:|\n",
    );
    for f in figures {
        out.push_str(&format!(
            "| {} | {:.3} | {:.3} | {:.3} | {} | {} |\n",
            f.name, f.median, f.min, f.max, f.unit, f.runs
        ));
    }
    out
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{what}: {reason}")]
    Step { what: String, reason: String },
}

fn step(what: &str) -> impl Fn(String) -> Error + '_ {
    move |reason| Error::Step {
        what: what.to_string(),
        reason,
    }
}

/// A child process killed when dropped.
struct Process(Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The distribution registry on a free loopback port, storage in `dir`.
fn start_registry(dir: &Path) -> Result<(Process, String), Error> {
    let fail = step("starting the distribution registry");
    if !Path::new(DISTRIBUTION_BINARY).exists() {
        return Err(fail(format!(
            "{DISTRIBUTION_BINARY} is missing; `apt-get install -y docker-registry`"
        )));
    }
    let port = crate::docker::free_loopback_port().map_err(|e| fail(e.to_string()))?;
    let config = dir.join("registry.yml");
    let text = format!(
        "version: 0.1\nlog: {{level: warn}}\nstorage: {{filesystem: {{rootdirectory: {}}}}}\nhttp: {{addr: 127.0.0.1:{port}}}\n",
        dir.join("data").display()
    );
    std::fs::write(&config, text).map_err(|e| fail(e.to_string()))?;
    let sh = Shell::new().map_err(|e| fail(e.to_string()))?;
    let mut command: std::process::Command =
        cmd!(sh, "{DISTRIBUTION_BINARY} serve {config}").into();
    let child = command
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn();
    let process = Process(child.map_err(|e| fail(e.to_string()))?);
    let deadline = Instant::now() + Duration::from_secs(15);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        if Instant::now() > deadline {
            return Err(fail(format!("port {port} did not open within 15s")));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok((process, format!("127.0.0.1:{port}")))
}

/// A 200 MB layer pushed by the harness's distribution client, and the
/// same bytes uploaded by `curl` (monolithic POST then PUT, as the
/// distribution API documents it), to the same registry. Each run uploads
/// new bytes, so nothing is skipped.
pub async fn blob_upload(runs: usize, megabytes: usize) -> Result<Vec<Figure>, Error> {
    let dir = tempfile::tempdir().map_err(|e| step("a temporary directory")(e.to_string()))?;
    let (_registry, host) = start_registry(dir.path())?;
    let client = distribution::Client::new(&host);
    let sh = Shell::new().map_err(|e| step("a shell")(e.to_string()))?;
    let (mut ours, mut curl) = (Vec::new(), Vec::new());
    for run in 0..runs {
        for (who, samples) in [("ours", &mut ours), ("curl", &mut curl)] {
            let bytes = pseudo_random(
                megabytes << 20,
                (run * 2 + usize::from(who == "curl")) as u64,
            );
            let digest = oci::sha256_digest(&bytes);
            let fail = step("uploading the benchmark blob");
            let started = Instant::now();
            if who == "ours" {
                client
                    .upload_blob("bench/ours", &digest, bytes.into())
                    .await
                    .map_err(|e| fail(e.to_string()))?;
            } else {
                let file = dir.path().join("blob");
                std::fs::write(&file, &bytes).map_err(|e| fail(e.to_string()))?;
                let started_here = Instant::now();
                let url = format!("http://{host}/v2/bench/curl/blobs/uploads/");
                let headers = cmd!(sh, "curl -sf -D - -o /dev/null -X POST {url}")
                    .quiet()
                    .read()
                    .map_err(|e| fail(e.to_string()))?;
                let location = headers
                    .lines()
                    .find_map(|l| {
                        l.strip_prefix("Location: ")
                            .or_else(|| l.strip_prefix("location: "))
                    })
                    .ok_or_else(|| fail(String::from("no Location header")))?
                    .trim()
                    .to_string();
                let location = if location.starts_with("http") {
                    location
                } else {
                    format!("http://{host}{location}")
                };
                let separator = if location.contains('?') { '&' } else { '?' };
                let put = format!("{location}{separator}digest={digest}");
                let data = format!("@{}", file.display());
                cmd!(sh, "curl -sf -o /dev/null -X PUT -H Content-Type:application/octet-stream --data-binary {data} {put}")
                    .quiet()
                    .run()
                    .map_err(|e| fail(e.to_string()))?;
                samples.push(started_here.elapsed().as_secs_f64());
                continue;
            }
            samples.push(started.elapsed().as_secs_f64());
        }
    }
    let ratio: Vec<f64> = ours.iter().zip(&curl).map(|(o, c)| o / c).collect();
    Ok(vec![
        Figure::of(
            &format!("{megabytes} MB layer pushed by dev-env"),
            "s",
            ours,
        ),
        Figure::of(&format!("{megabytes} MB layer uploaded by curl"), "s", curl),
        Figure::of("layer upload, dev-env / curl", "ratio", ratio),
    ])
}

/// `len` bytes from a xorshift generator: incompressible and different for
/// every `seed`.
fn pseudo_random(len: usize, seed: u64) -> Vec<u8> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        out.extend_from_slice(&state.to_le_bytes());
    }
    out.truncate(len);
    out
}

/// The inner loop on a project of its own under `target/bench/loop/`: a
/// one-crate HTTP service as a Deployment of 2 pods, on the sim provider
/// with the real registry. Figures: cold and warm `dev up`, a no-op
/// `push-image`, a one-line change split into build, push and rollout+wait,
/// the wait's detection latency against an independent watch, and the same
/// change done by hand (`docker build`, `docker push`, `kubectl set image`,
/// `kubectl rollout status`) as a ratio.
pub async fn inner_loop(root: &Path, runs: usize) -> Result<Vec<Figure>, Error> {
    let project = LoopProject::create(&root.join("target/bench/loop"))?;
    let config = crate::config::Config::load(&project.dir.join("dev-env.yaml"))
        .map_err(|e| step("the bench project's dev-env.yaml")(e.to_string()))?;
    let options = crate::lifecycle::UpOptions {
        recreate: false,
        verbose: false,
        timeout: LOOP_TIMEOUT,
    };
    let quiet = |_: &str| {};
    let up = |what: &'static str| {
        let config = &config;
        async move {
            crate::lifecycle::up(config, options, &quiet)
                .await
                .map_err(|e| step(what)(e.to_string()))
        }
    };
    // Images (node, registry, the project's first build) are made once.
    up("preparing the bench environment").await?;
    let (mut cold, mut warm) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        crate::lifecycle::down(&config, crate::lifecycle::DownOptions::RESET_PURGE, &|_| {})
            .await
            .map_err(|e| step("dev reset")(e.to_string()))?;
        let started = Instant::now();
        up("cold dev up").await?;
        cold.push(started.elapsed().as_secs_f64());
        let started = Instant::now();
        up("warm dev up").await?;
        warm.push(started.elapsed().as_secs_f64());
    }

    let flags = crate::deliver::PushFlags {
        rollout: true,
        timeout: LOOP_TIMEOUT,
        verbose: false,
    };
    let components = [String::from("app")];
    let push = || async {
        let outcome = crate::deliver::push(&config, &components, flags, &Silent).await;
        let outcome = outcome
            .map_err(|e| step("push-image")(e.to_string()))?
            .remove(0);
        match &outcome.error {
            Some(e) => Err(step("push-image")(e.clone())),
            None => Ok(outcome),
        }
    };
    let mut noop = Vec::new();
    for _ in 0..runs {
        let started = Instant::now();
        push().await?;
        noop.push(started.elapsed().as_secs_f64());
    }

    let client = crate::deliver::cluster_client(&config)
        .await
        .map_err(|e| step("a cluster client")(e.to_string()))?;
    let (mut build, mut upload, mut rollout, mut total, mut latency, mut baseline) = (
        Vec::new(),
        Vec::new(),
        Vec::new(),
        Vec::new(),
        Vec::new(),
        Vec::new(),
    );
    for run in 0..runs {
        project.source(&format!("v{}", run + 2))?;
        let started = Instant::now();
        let cargo_build = cargo::CargoBuild {
            root: &project.dir,
            package: "app",
            bin: "app",
            verbose: false,
        };
        tokio::task::block_in_place(|| cargo::build_binary(&cargo_build))
            .map_err(|e| step("cargo build")(e.to_string()))?;
        build.push(started.elapsed().as_secs_f64());
        let observer = observe_rollout(client.clone(), "bench", "app=app");
        let pushed = Instant::now();
        let outcome = push().await?;
        let returned = Instant::now();
        let wait = outcome.wait_ms as f64 / 1000.0;
        upload.push(returned.duration_since(pushed).as_secs_f64() - wait);
        rollout.push(wait);
        total.push(started.elapsed().as_secs_f64());
        if let Ok(Ok(seen)) = tokio::time::timeout(Duration::from_secs(5), observer).await {
            latency.push(returned.saturating_duration_since(seen).as_secs_f64() * 1000.0);
        }
        baseline.push(by_hand(&config, &project, run).await?);
    }
    let ratio: Vec<f64> = total
        .iter()
        .zip(&baseline)
        .map(|(ours, theirs)| ours / theirs)
        .collect();
    crate::lifecycle::down(&config, crate::lifecycle::DownOptions::RESET_PURGE, &|_| {})
        .await
        .map_err(|e| step("dev reset")(e.to_string()))?;
    let mut figures = vec![
        Figure::of("cold dev up (images local)", "s", cold),
        Figure::of("warm dev up", "s", warm),
        Figure::of("push-image, no change", "s", noop),
        Figure::of("push-image after a one-line change: build", "s", build),
        Figure::of("push-image after a one-line change: push", "s", upload),
        Figure::of(
            "push-image after a one-line change: rollout+wait",
            "s",
            rollout,
        ),
        Figure::of("push-image after a one-line change: total", "s", total),
    ];
    if !latency.is_empty() {
        figures.push(Figure::of(
            "wait detection after an independent watch sees the rollout done",
            "ms",
            latency,
        ));
    }
    figures.push(Figure::of(
        "by hand: docker build + push + kubectl set image + rollout status",
        "s",
        baseline,
    ));
    figures.push(Figure::of(
        "one-line change, dev-env / by hand",
        "ratio",
        ratio,
    ));
    Ok(figures)
}

/// Deadline of each wait in the loop figures.
const LOOP_TIMEOUT: Duration = Duration::from_secs(180);

struct Silent;

impl crate::deliver::Progress for Silent {
    fn phase(&self, _: &str, _: crate::deliver::Phase, _: &str) {}
}

/// Resolves when an independent watch first sees only Ready pods of one
/// template hash matching `selector` (the rollout done), with the instant.
fn observe_rollout(
    client: Client,
    namespace: &str,
    selector: &str,
) -> tokio::task::JoinHandle<Instant> {
    use futures::StreamExt;
    use kube::runtime::{WatchStreamExt, reflector, watcher};

    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(client, namespace);
    let config = watcher::Config::default().labels(selector);
    tokio::spawn(async move {
        let (reader, writer) = reflector::store();
        let mut events = reflector::reflector(writer, watcher(pods, config))
            .default_backoff()
            .boxed();
        let mut seen_other = false;
        let mut first_hash: Option<String> = None;
        while events.next().await.is_some() {
            let pods = reader.state();
            let hashes: std::collections::BTreeSet<_> = pods
                .iter()
                .filter_map(|p| {
                    p.metadata
                        .labels
                        .as_ref()?
                        .get("pod-template-hash")
                        .cloned()
                })
                .collect();
            if first_hash.is_none() {
                first_hash = hashes.iter().next().cloned();
            }
            seen_other |= hashes.iter().any(|h| Some(h) != first_hash.as_ref());
            let ready = pods.len() == 2
                && hashes.len() == 1
                && pods.iter().all(|p| {
                    p.status
                        .iter()
                        .flat_map(|s| s.container_statuses.iter().flatten())
                        .all(|c| c.ready)
                });
            if seen_other && ready {
                return Instant::now();
            }
        }
        Instant::now()
    })
}

/// The same one-line change done by hand, timed: build the image with the
/// engine from the binary just built, push it, set it on the Deployment
/// with kubectl, and wait with `kubectl rollout status`.
async fn by_hand(
    config: &crate::config::Config,
    project: &LoopProject,
    run: usize,
) -> Result<f64, Error> {
    let fail = step("the by-hand baseline");
    project.source(&format!("hand-{run}"))?;
    let state = crate::state::State::load(&config.state_dir()).map_err(|e| fail(e.to_string()))?;
    let host = crate::registry::host(config, &state).map_err(|e| fail(e.to_string()))?;
    let dir = project.dir.clone();
    let kubeconfig = config.state_dir().join(crate::kubeconfig::HOST_FILE);
    let image_name = format!("{host}/bench/app:hand-{run}");
    let in_cluster = format!("{}/bench/app:hand-{run}", config.registry.cluster_host);
    tokio::task::block_in_place(|| {
        let started = Instant::now();
        let build = cargo::CargoBuild {
            root: &dir,
            package: "app",
            bin: "app",
            verbose: false,
        };
        let binary = cargo::build_binary(&build).map_err(|e| fail(e.to_string()))?;
        let context = dir.join("hand");
        std::fs::create_dir_all(&context).map_err(|e| fail(e.to_string()))?;
        std::fs::copy(&binary, context.join("app")).map_err(|e| fail(e.to_string()))?;
        std::fs::write(
            context.join("Dockerfile"),
            "FROM scratch\nCOPY app /app\nENTRYPOINT [\"/app\"]\n",
        )
        .map_err(|e| fail(e.to_string()))?;
        let sh = Shell::new().map_err(|e| fail(e.to_string()))?;
        let run = |cmd: xshell::Cmd<'_>| {
            cmd.quiet()
                .ignore_stdout()
                .ignore_stderr()
                .run()
                .map_err(|e| fail(e.to_string()))
        };
        run(cmd!(sh, "docker build -q -t {image_name} {context}"))?;
        run(cmd!(sh, "docker push -q {image_name}"))?;
        run(cmd!(
            sh,
            "kubectl --kubeconfig {kubeconfig} -n bench set image deployment/app app={in_cluster}"
        ))?;
        run(cmd!(
            sh,
            "kubectl --kubeconfig {kubeconfig} -n bench rollout status deployment/app --timeout=180s"
        ))?;
        Ok(started.elapsed().as_secs_f64())
    })
}

/// The loop figures' project: a one-crate workspace `app` serving HTTP on
/// 8080, its namespace and Deployment, and its `dev-env.yaml`.
struct LoopProject {
    dir: std::path::PathBuf,
}

impl LoopProject {
    fn create(dir: &Path) -> Result<LoopProject, Error> {
        let fail = step("writing the bench project");
        let write = |path: &str, text: &str| -> Result<(), Error> {
            let path = dir.join(path);
            std::fs::create_dir_all(path.parent().expect("a parent"))
                .map_err(|e| fail(e.to_string()))?;
            std::fs::write(path, text).map_err(|e| fail(e.to_string()))
        };
        write(
            "Cargo.toml",
            "[workspace]\nmembers = [\"app\"]\nresolver = \"3\"\n",
        )?;
        write(
            "app/Cargo.toml",
            "[package]\nname = \"app\"\nversion = \"0.1.0\"\nedition = \"2024\"\n",
        )?;
        write(
            "dev-env.yaml",
            "name: bench-loop\nnetwork: {ipv4Subnet: 10.252.9.0/24}\ncluster: {provider: sim}\nmanifests: [manifests]\n\
             components:\n  app:\n    image: bench/app\n    build: {cargo: {package: app}}\n    \
             rollout: {kind: Deployment, namespace: bench, name: app, container: app}\n",
        )?;
        write(
            "manifests/app.yaml",
            "apiVersion: v1\nkind: Namespace\nmetadata: {name: bench}\n---\n\
             apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: app, namespace: bench}\nspec:\n  replicas: 2\n  \
             selector: {matchLabels: {app: app}}\n  template:\n    metadata: {labels: {app: app}}\n    spec:\n      \
             terminationGracePeriodSeconds: 1\n      containers:\n      - name: app\n        image: bench/app:dev\n        \
             readinessProbe: {httpGet: {path: /, port: 8080}, periodSeconds: 1}\n",
        )?;
        let project = LoopProject {
            dir: dir.to_path_buf(),
        };
        project.source("v1")?;
        Ok(project)
    }

    /// The service's source, answering every request with `version`.
    fn source(&self, version: &str) -> Result<(), Error> {
        let text = format!(
            "use std::io::{{Read, Write}};\nfn main() {{\n    println!(\"app {version} listening on 8080\");\n    \
             let listener = std::net::TcpListener::bind(\"0.0.0.0:8080\").unwrap();\n    \
             for stream in listener.incoming() {{\n        let Ok(mut s) = stream else {{ continue }};\n        \
             let mut buf = [0u8; 1024];\n        let _ = s.read(&mut buf);\n        \
             let _ = s.write_all(b\"HTTP/1.1 200 OK\\r\\ncontent-length: 2\\r\\n\\r\\nok\");\n    }}\n}}\n"
        );
        let path = self.dir.join("app/src/main.rs");
        std::fs::create_dir_all(path.parent().expect("a parent"))
            .map_err(|e| step("writing the bench project")(e.to_string()))?;
        std::fs::write(path, text).map_err(|e| step("writing the bench project")(e.to_string()))
    }
}

/// What one scale run measured.
struct ScaleRun {
    ready: Duration,
    rolled: Duration,
    peak_rss_mb: f64,
    cpu_seconds: f64,
}

/// kube-sim at scale: `deployments` Deployments of `replicas` pods created
/// and brought Ready, then all restarted at once; the simulator's peak RSS
/// and CPU time over the run. kube-sim runs as its own process (the binary
/// taken out of the sim node image, which `inner_loop`'s `dev up` makes
/// when missing) with the virtual kubelet, pulling a small image from the
/// real distribution registry.
pub async fn sim_scale(
    runs: usize,
    deployments: usize,
    replicas: i32,
) -> Result<Vec<Figure>, Error> {
    // The simulator measured is the one the sim node runs: the binary in
    // the node image (built by the loop figures' `dev up` when missing).
    let dir = tempfile::tempdir().map_err(|e| step("a temporary directory")(e.to_string()))?;
    let binary = dir.path().join("kube-sim");
    extract_binary(crate::config::DEFAULT_SIM_IMAGE, "/bin/kube-sim", &binary)
        .await
        .map_err(|reason| Error::Step {
            what: String::from("taking kube-sim out of the node image"),
            reason,
        })?;
    let mut samples = Vec::new();
    for _ in 0..runs {
        samples.push(scale_run(&binary, deployments, replicas).await?);
    }
    let pods = deployments as i32 * replicas;
    Ok(vec![
        Figure::of(
            &format!("kube-sim: {deployments} Deployments x {replicas} pods Ready ({pods} pods)"),
            "s",
            samples.iter().map(|s| s.ready.as_secs_f64()).collect(),
        ),
        Figure::of(
            &format!("kube-sim: {pods} pods rolled at once (restart of every Deployment)"),
            "s",
            samples.iter().map(|s| s.rolled.as_secs_f64()).collect(),
        ),
        Figure::of(
            "kube-sim peak RSS",
            "MB",
            samples.iter().map(|s| s.peak_rss_mb).collect(),
        ),
        Figure::of(
            "kube-sim CPU time",
            "s",
            samples.iter().map(|s| s.cpu_seconds).collect(),
        ),
    ])
}

/// Copies the file at `path` out of `image` to `dest`, executable.
async fn extract_binary(image: &str, path: &str, dest: &Path) -> Result<(), String> {
    use std::{io::Read, os::unix::fs::PermissionsExt};

    use futures::TryStreamExt;

    let docker = crate::docker::connect().await.map_err(|e| e.to_string())?;
    let body = bollard::models::ContainerCreateBody {
        image: Some(image.to_string()),
        ..Default::default()
    };
    let created = docker
        .create_container(None, body)
        .await
        .map_err(|e| format!("`{image}`: {e}"))?;
    let options = bollard::query_parameters::DownloadFromContainerOptionsBuilder::default()
        .path(path)
        .build();
    let archive: Result<Vec<u8>, _> = docker
        .download_from_container(&created.id, Some(options))
        .map_ok(|c| c.to_vec())
        .try_concat()
        .await;
    let _ = crate::docker::remove_container(&docker, &created.id).await;
    let archive = archive.map_err(|e| e.to_string())?;
    let mut entries = tar::Archive::new(archive.as_slice());
    let mut entry = entries
        .entries()
        .map_err(|e| e.to_string())?
        .next()
        .ok_or("an empty archive")?
        .map_err(|e| e.to_string())?;
    let mut bytes = Vec::new();
    entry.read_to_end(&mut bytes).map_err(|e| e.to_string())?;
    std::fs::write(dest, bytes).map_err(|e| e.to_string())?;
    std::fs::set_permissions(dest, std::fs::Permissions::from_mode(0o755))
        .map_err(|e| e.to_string())
}

async fn scale_run(binary: &Path, deployments: usize, replicas: i32) -> Result<ScaleRun, Error> {
    let dir = tempfile::tempdir().map_err(|e| step("a temporary directory")(e.to_string()))?;
    let (_registry, host) = start_registry(dir.path())?;

    // A small image, pushed once; pods name it digest-pinned.
    let image = oci::binary_image("pause", b"#!/pause\n".to_vec());
    let client = distribution::Client::new(&host);
    let push = step("pushing the benchmark image");
    for blob in image.blobs() {
        client
            .upload_blob("bench/pause", &blob.digest, blob.bytes.clone())
            .await
            .map_err(|e| push(e.to_string()))?;
    }
    client
        .put_manifest(
            "bench/pause",
            "dev",
            image.manifest.media_type,
            image.manifest.bytes.clone(),
        )
        .await
        .map_err(|e| push(e.to_string()))?;
    let reference = format!("bench-registry:5000/bench/pause@{}", image.manifest.digest);

    let registries = dir.path().join("registries.yaml");
    let text =
        format!("mirrors:\n  \"bench-registry:5000\":\n    endpoint:\n      - \"http://{host}\"\n");
    std::fs::write(&registries, text)
        .map_err(|e| step("writing registries.yaml")(e.to_string()))?;
    let kubeconfig = dir.path().join("kubeconfig");
    let start = step("starting kube-sim");
    let sh = Shell::new().map_err(|e| start(e.to_string()))?;
    let mut command: std::process::Command =
        cmd!(sh, "{binary} serve --listen 127.0.0.1:0 --kubeconfig-out {kubeconfig} --registries {registries}").into();
    let child = command
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn();
    let sim = Process(child.map_err(|e| start(e.to_string()))?);
    let pid = sim.0.id();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !kubeconfig.exists() {
        if Instant::now() > deadline {
            return Err(start(String::from("no kubeconfig within 30s")));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let client = crate::kubeconfig::client(&kubeconfig, None)
        .await
        .map_err(|e| start(e.to_string()))?;

    let names: Vec<String> = (0..deployments).map(|i| format!("scale-{i:02}")).collect();
    let api: Api<Deployment> = Api::namespaced(client.clone(), "default");
    let params = PatchParams::apply("dev-env-bench").force();
    let started = Instant::now();
    for name in &names {
        let deploy = json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": {"app": name}},
                "template": {"metadata": {"labels": {"app": name}},
                             "spec": {"containers": [{"name": "app", "image": reference}]}}
            }
        });
        api.patch(name, &params, &Patch::Apply(&deploy))
            .await
            .map_err(|e| step("creating Deployments")(e.to_string()))?;
    }
    wait_all(&client, &names).await?;
    let ready = started.elapsed();

    let started = Instant::now();
    let restart = json!({"spec": {"template": {"metadata": {"annotations": {"dev-env.io/restartedAt": k8s_openapi::jiff::Timestamp::now().to_string()}}}}});
    for name in &names {
        api.patch(name, &PatchParams::default(), &Patch::Strategic(&restart))
            .await
            .map_err(|e| step("restarting Deployments")(e.to_string()))?;
    }
    wait_all(&client, &names).await?;
    let rolled = started.elapsed();

    let (peak_rss_mb, cpu_seconds) = usage(pid).map_err(step("reading the simulator's usage"))?;
    drop(sim);
    Ok(ScaleRun {
        ready,
        rolled,
        peak_rss_mb,
        cpu_seconds,
    })
}

/// Waits (10 minutes at most) until every Deployment in `names` completed
/// by the harness's own rule (kubectl's, plus the new ReplicaSet's pods all
/// Ready and no old pod left): kube-rs's `is_deployment_completed` reads
/// only the `Progressing` reason, which lingers from the previous rollout.
async fn wait_all(client: &Client, names: &[String]) -> Result<(), Error> {
    let timeout = Duration::from_secs(600);
    let waits = names.iter().map(|name| {
        let want = Want {
            namespace: String::from("default"),
            deployment: name.clone(),
            container: String::from("app"),
            digest: None,
        };
        async move { workload::deployment(client, &want, &WaitOptions::new(timeout)).await }
    });
    futures::future::try_join_all(waits)
        .await
        .map(|_| ())
        .map_err(|e| step("waiting for Deployments")(e.to_string()))
}

/// Peak resident memory (MB) and user+system CPU seconds of process `pid`,
/// from `/proc`.
fn usage(pid: u32) -> Result<(f64, f64), String> {
    let status =
        std::fs::read_to_string(format!("/proc/{pid}/status")).map_err(|e| e.to_string())?;
    let kb: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .ok_or("no VmHWM in /proc status")?;
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).map_err(|e| e.to_string())?;
    // Fields after the command name (which may hold spaces) start at 3.
    let rest = stat
        .rsplit_once(')')
        .map(|(_, r)| r)
        .ok_or("malformed /proc stat")?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // utime and stime are fields 14 and 15; `rest` starts at field 3.
    let cpu = (ticks(11) + ticks(12)) / clock_ticks();
    Ok((kb / 1024.0, cpu))
}

/// Clock ticks per second (`getconf CLK_TCK`), 100 on Linux.
fn clock_ticks() -> f64 {
    Shell::new()
        .ok()
        .and_then(|sh| cmd!(sh, "getconf CLK_TCK").quiet().read().ok())
        .and_then(|t| t.trim().parse().ok())
        .unwrap_or(100.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_summarise_samples_and_render_as_a_table() {
        let f = Figure::of("x", "s", vec![3.0, 1.0, 2.0, 10.0, 4.0]);
        assert_eq!((f.median, f.min, f.max, f.runs), (3.0, 1.0, 10.0, 5));
        let even = Figure::of("y", "ms", vec![1.0, 3.0]);
        assert_eq!(even.median, 2.0);
        let table = markdown(&[f]);
        assert!(
            table.contains("| x | 3.000 | 1.000 | 10.000 | s | 5 |"),
            "{table}"
        );
    }
}
