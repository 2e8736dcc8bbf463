//! kube-sim at scale: many Deployments brought Ready and restarted at once,
//! ten times over, then their namespace deleted, with the simulator's
//! resident memory after each phase, its peak RSS and its CPU time.

use std::{
    path::Path,
    time::{Duration, Instant},
};

use k8s_openapi::api::{apps::v1::Deployment, core::v1::Namespace};
use kube::{
    Api, Client,
    api::{DeleteParams, Patch, PatchParams},
};
use serde_json::json;
use xshell::{Shell, cmd};

use super::{Error, Figure, Process, start_registry, step};
use crate::{
    image::{distribution, oci},
    wait::workload::{self, WaitOptions, Want},
};

/// The watch history window and the Events' time to live the simulator
/// runs with here: short, so the memory figures after ten rollouts and
/// after the namespace is deleted need not wait etcd's five minutes and
/// kube-apiserver's one hour (with those, the Events of every rollout, several per
/// pod, stay for an hour).
const HISTORY_WINDOW: Duration = Duration::from_secs(30);

/// How long a settled figure waits: the history window and the Events' time to live, plus a little.
/// Right after a rollout, the simulator holds the Events of every rollout of the last
/// [`HISTORY_WINDOW`], so how many rollouts that covers depends on how fast they go (the Ready burst
/// and one rollout after the first, four or five after the tenth); once they aged out, what is left is
/// what the simulator keeps.
const SETTLE: Duration = Duration::from_secs(HISTORY_WINDOW.as_secs() + 10);

/// How many times every Deployment is restarted in a run.
const ROLLOUTS: usize = 10;

/// The namespace the Deployments live in, deleted at the end of a run.
const NAMESPACE: &str = "bench-scale";

/// What one scale run measured (memory in MiB, as `/proc` reports it).
struct ScaleRun {
    ready: Duration,
    rolled: Duration,
    peak_rss_mb: f64,
    cpu_seconds: f64,
    /// Resident memory of the freshly started simulator.
    empty_rss: f64,
    /// Resident memory once every pod is Ready.
    ready_rss: f64,
    /// Resident memory right after the first rollout, and right after the last.
    first_rollout_rss: f64,
    last_rollout_rss: f64,
    /// Resident memory after the first rollout and after the last, each once what the rollouts wrote
    /// that the simulator forgets by itself (Events, the watch history) aged out: what it keeps.
    first_settled_rss: f64,
    last_settled_rss: f64,
    /// CPU seconds the first rollout took.
    rollout_cpu: f64,
    /// Resident memory once the namespace is gone.
    deleted_rss: f64,
}

/// kube-sim at scale: `deployments` Deployments of `replicas` pods created
/// and brought Ready, then all restarted at once, [`ROLLOUTS`] times, then
/// their namespace deleted; the simulator's resident memory after each
/// phase, its peak RSS and CPU time. kube-sim runs as its own process with
/// the virtual kubelet, pulling a small image from the real distribution
/// registry: `binary` when given, else both the `release` build of the
/// workspace at `root` and the binary taken out of the sim node image
/// (which `inner_loop`'s `dev up` makes when missing), each figure of the
/// node image's beside the release one's, with their ratio.
pub async fn sim_scale(
    root: &Path,
    runs: usize,
    shape: (usize, i32),
    binary: Option<&Path>,
) -> Result<Vec<Figure>, Error> {
    let dir = tempfile::tempdir().map_err(|e| step("a temporary directory").of(e))?;
    if let Some(binary) = binary {
        return measure(binary, runs, shape).await;
    }
    let release = release_binary(root)?;
    let node_image = dir.path().join("kube-sim");
    extract_binary(
        crate::config::DEFAULT_SIM_IMAGE,
        "/bin/kube-sim",
        &node_image,
    )
    .await
    .map_err(|e| step("taking kube-sim out of the node image").of(e))?;
    let release = measure(&release, runs, shape).await?;
    let node_image = measure(&node_image, runs, shape).await?;
    Ok(side_by_side(release, node_image))
}

/// `runs` scale runs of `binary`, as figures.
async fn measure(binary: &Path, runs: usize, shape: (usize, i32)) -> Result<Vec<Figure>, Error> {
    let mut samples = Vec::new();
    for _ in 0..runs {
        samples.push(scale_run(binary, shape.0, shape.1).await?);
    }
    Ok(figures(&samples, shape.0, shape.1))
}

/// kube-sim's `release` build in the workspace at `root`
/// (`target/release/kube-sim`), built when missing or stale.
fn release_binary(root: &Path) -> Result<std::path::PathBuf, Error> {
    let fail = step("cargo build --release -p kube-sim");
    let sh = Shell::new().map_err(|e| fail.of(e))?;
    sh.change_dir(root);
    let target = root.join("target");
    cmd!(
        sh,
        "cargo build --quiet --release -p kube-sim --bin kube-sim"
    )
    .env("CARGO_TARGET_DIR", &target)
    .run()
    .map_err(|e| fail.of(e))?;
    Ok(target.join("release/kube-sim"))
}

/// Each release figure, then the node image's of the same name, then, for
/// times and sizes, the node image's median over the release one's.
fn side_by_side(release: Vec<Figure>, node_image: Vec<Figure>) -> Vec<Figure> {
    let mut out = Vec::new();
    for (r, n) in release.into_iter().zip(node_image) {
        let ratio = (r.unit != "x" && r.median > 0.0).then(|| {
            Figure::of(
                &format!("{}: node image / release", r.name),
                "x",
                vec![n.median / r.median],
            )
        });
        let named = |f: Figure, build: &str| Figure {
            name: format!("{} ({build})", f.name),
            ..f
        };
        out.push(named(r, "release"));
        out.push(named(n, "node image"));
        out.extend(ratio);
    }
    out
}

/// The figures of `samples`.
fn figures(samples: &[ScaleRun], deployments: usize, replicas: i32) -> Vec<Figure> {
    let pods = deployments as i32 * replicas;
    let of = |name: &str, unit: &str, f: fn(&ScaleRun) -> f64| {
        Figure::of(name, unit, samples.iter().map(f).collect())
    };
    vec![
        of(
            &format!("kube-sim: {deployments} Deployments x {replicas} pods Ready ({pods} pods)"),
            "s",
            |s| s.ready.as_secs_f64(),
        ),
        of(
            &format!("kube-sim: {pods} pods rolled at once (restart of every Deployment)"),
            "s",
            |s| s.rolled.as_secs_f64(),
        ),
        of("kube-sim RSS, started and empty", "MiB", |s| s.empty_rss),
        of(&format!("kube-sim RSS, {pods} pods Ready"), "MiB", |s| {
            s.ready_rss
        }),
        of("kube-sim RSS, after the first rollout", "MiB", |s| {
            s.first_rollout_rss
        }),
        of(
            &format!(
                "kube-sim RSS right after {ROLLOUTS} rollouts / right after the first ({} s Event TTL)",
                HISTORY_WINDOW.as_secs()
            ),
            "x",
            |s| s.last_rollout_rss / s.first_rollout_rss,
        ),
        of(
            &format!(
                "kube-sim RSS after {ROLLOUTS} rollouts / after the first, each {} s later (Events and history aged out)",
                SETTLE.as_secs()
            ),
            "x",
            |s| s.last_settled_rss / s.first_settled_rss,
        ),
        of(
            &format!(
                "kube-sim RSS after deleting the namespace ({} s history window) / started and empty",
                HISTORY_WINDOW.as_secs()
            ),
            "x",
            |s| s.deleted_rss / s.empty_rss,
        ),
        of(
            &format!("kube-sim CPU time, one rollout of {pods} pods"),
            "s",
            |s| s.rollout_cpu,
        ),
        of("kube-sim peak RSS", "MiB", |s| s.peak_rss_mb),
        of("kube-sim CPU time, whole run", "s", |s| s.cpu_seconds),
    ]
}

/// Why a helper step of the scale figure failed.
type Cause = Box<dyn std::error::Error + Send + Sync>;

/// Copies the file at `path` out of `image` to `dest`, executable.
async fn extract_binary(image: &str, path: &str, dest: &Path) -> Result<(), Cause> {
    use std::{io::Read, os::unix::fs::PermissionsExt};

    use futures::TryStreamExt;

    let docker = crate::docker::connect().await?;
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
    let archive = archive?;
    let mut entries = tar::Archive::new(archive.as_slice());
    let mut entry = entries.entries()?.next().ok_or("an empty archive")??;
    let mut bytes = Vec::new();
    entry.read_to_end(&mut bytes)?;
    tokio::fs::write(dest, bytes).await?;
    tokio::fs::set_permissions(dest, std::fs::Permissions::from_mode(0o755)).await?;
    Ok(())
}

/// One run: a registry and a simulator of their own, the Deployments
/// created and waited for, then restarted and waited for again
/// [`ROLLOUTS`] times, then their namespace deleted.
async fn scale_run(binary: &Path, deployments: usize, replicas: i32) -> Result<ScaleRun, Error> {
    let dir = tempfile::tempdir().map_err(|e| step("a temporary directory").of(e))?;
    let (_registry, host) = start_registry(dir.path()).await?;
    let reference = push_pause_image(&host).await?;
    let pods = deployments * usize::try_from(replicas).unwrap_or(0);
    let (sim, client) = start_sim(binary, dir.path(), &host, nodes_for(pods)).await?;
    let pid = sim.0.id();
    create_namespace(&client).await?;
    let empty_rss = usage(pid).await?.rss;

    let names: Vec<String> = (0..deployments).map(|i| format!("scale-{i:02}")).collect();
    let api: Api<Deployment> = Api::namespaced(client.clone(), NAMESPACE);
    let started = Instant::now();
    create_deployments(&api, &names, replicas, &reference).await?;
    wait_all(&client, &names).await?;
    let ready = started.elapsed();
    let at_ready = usage(pid).await?;

    let started = Instant::now();
    restart_deployments(&api, &names).await?;
    wait_all(&client, &names).await?;
    let rolled = started.elapsed();
    let after_first = usage(pid).await?;
    tokio::time::sleep(SETTLE).await;
    let first_settled_rss = usage(pid).await?.rss;
    for _ in 1..ROLLOUTS {
        restart_deployments(&api, &names).await?;
        wait_all(&client, &names).await?;
    }
    let last_rollout_rss = usage(pid).await?.rss;
    tokio::time::sleep(SETTLE).await;
    let last_settled_rss = usage(pid).await?.rss;

    delete_namespace(&client).await?;
    let end = usage(pid).await?;
    drop(sim);
    Ok(ScaleRun {
        ready,
        rolled,
        peak_rss_mb: end.peak_rss,
        cpu_seconds: end.cpu,
        empty_rss,
        ready_rss: at_ready.rss,
        first_rollout_rss: after_first.rss,
        last_rollout_rss,
        first_settled_rss,
        last_settled_rss,
        rollout_cpu: after_first.cpu - at_ready.cpu,
        deleted_rss: end.rss,
    })
}

/// Creates the benchmark's namespace.
async fn create_namespace(client: &Client) -> Result<(), Error> {
    let api: Api<Namespace> = Api::all(client.clone());
    let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}});
    api.patch(
        NAMESPACE,
        &PatchParams::apply("dev-env-bench").force(),
        &Patch::Apply(&ns),
    )
    .await
    .map(|_| ())
    .map_err(|e| step("creating the namespace").of(e))
}

/// Deletes the benchmark's namespace and waits (10 minutes at most) until
/// it is gone, then for the simulator's watch history to age out of its
/// window (plus a little), so the figure is what an idle simulator keeps.
async fn delete_namespace(client: &Client) -> Result<(), Error> {
    let fail = step("deleting the namespace");
    let api: Api<Namespace> = Api::all(client.clone());
    api.delete(NAMESPACE, &DeleteParams::default())
        .await
        .map_err(|e| fail.of(e))?;
    let deadline = Instant::now() + Duration::from_secs(600);
    while api
        .get_opt(NAMESPACE)
        .await
        .map_err(|e| fail.of(e))?
        .is_some()
    {
        if Instant::now() > deadline {
            return Err(fail.of(String::from("still there after 10 minutes")));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    tokio::time::sleep(SETTLE).await;
    Ok(())
}

/// Pushes a small image to the registry at `host`, once; returns the
/// digest-pinned reference pods name it by.
async fn push_pause_image(host: &str) -> Result<String, Error> {
    let image = oci::binary_image(
        "pause",
        b"#!/pause\n".to_vec(),
        &crate::platform::Platform::linux(std::env::consts::ARCH),
    );
    let client = distribution::Client::new(host);
    let push = step("pushing the benchmark image");
    for blob in image.blobs() {
        client
            .upload_blob("bench/pause", &blob.digest, blob.bytes.clone())
            .await
            .map_err(|e| push.of(e))?;
    }
    client
        .put_manifest(
            "bench/pause",
            "dev",
            image.manifest.media_type,
            image.manifest.bytes.clone(),
        )
        .await
        .map_err(|e| push.of(e))?;
    Ok(format!(
        "bench-registry:5000/bench/pause@{}",
        image.manifest.digest
    ))
}

/// A node's pod capacity, the kubelet's default `max-pods`.
const MAX_PODS: usize = 110;

/// Nodes enough for `pods` and as many again, so a rolling restart's
/// new pods fit next to the old ones within real per-node limits.
fn nodes_for(pods: usize) -> String {
    (2 * pods).div_ceil(MAX_PODS).max(1).to_string()
}

/// Starts kube-sim from `binary` on a free loopback port with `nodes`
/// nodes, its images mirrored to the registry at `host`, and a client of it.
async fn start_sim(
    binary: &Path,
    dir: &Path,
    host: &str,
    nodes: String,
) -> Result<(Process, Client), Error> {
    let registries = dir.join("registries.yaml");
    let text =
        format!("mirrors:\n  \"bench-registry:5000\":\n    endpoint:\n      - \"http://{host}\"\n");
    tokio::fs::write(&registries, text)
        .await
        .map_err(|e| step("writing registries.yaml").of(e))?;
    let kubeconfig = dir.join("kubeconfig");
    let start = step("starting kube-sim");
    let sh = Shell::new().map_err(|e| start.of(e))?;
    let window = format!("{}s", HISTORY_WINDOW.as_secs());
    let sim = Process::spawn(
        cmd!(
            sh,
            "{binary} serve --listen 127.0.0.1:0 --kubeconfig-out {kubeconfig} --registries {registries} --nodes {nodes} --watch-history-window {window} --event-ttl {window}"
        ),
        start,
    )?;
    let deadline = Instant::now() + Duration::from_secs(30);
    while !tokio::fs::try_exists(&kubeconfig).await.unwrap_or(false) {
        if Instant::now() > deadline {
            return Err(start.of(String::from("no kubeconfig within 30s")));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let client = crate::kubeconfig::client(&kubeconfig, None)
        .await
        .map_err(|e| start.of(e))?;
    Ok((sim, client))
}

/// Creates Deployment `name` of `replicas` pods running `image` for each
/// of `names`.
async fn create_deployments(
    api: &Api<Deployment>,
    names: &[String],
    replicas: i32,
    image: &str,
) -> Result<(), Error> {
    let params = PatchParams::apply("dev-env-bench").force();
    for name in names {
        let deploy = json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": {"app": name}},
                "template": {"metadata": {"labels": {"app": name}},
                             "spec": {"containers": [{"name": "app", "image": image}]}}
            }
        });
        api.patch(name, &params, &Patch::Apply(&deploy))
            .await
            .map_err(|e| step("creating Deployments").of(e))?;
    }
    Ok(())
}

/// Restarts every Deployment of `names` at once, as `reload` does.
async fn restart_deployments(api: &Api<Deployment>, names: &[String]) -> Result<(), Error> {
    let restart = json!({"spec": {"template": {"metadata": {"annotations": {"dev-env.io/restartedAt": k8s_openapi::jiff::Timestamp::now().to_string()}}}}});
    for name in names {
        api.patch(name, &PatchParams::default(), &Patch::Strategic(&restart))
            .await
            .map_err(|e| step("restarting Deployments").of(e))?;
    }
    Ok(())
}

/// Waits (10 minutes at most) until every Deployment in `names` completed
/// by the harness's own rule (kubectl's, plus the new ReplicaSet's pods all
/// Ready and no old pod left): kube-rs's `is_deployment_completed` reads
/// only the `Progressing` reason, which lingers from the previous rollout.
async fn wait_all(client: &Client, names: &[String]) -> Result<(), Error> {
    let timeout = Duration::from_secs(600);
    let waits = names.iter().map(|name| {
        let want = Want {
            namespace: String::from(NAMESPACE),
            deployment: name.clone(),
            container: String::from("app"),
            digest: None,
            ..Want::default()
        };
        async move { workload::deployment(client, &want, &WaitOptions::new(timeout)).await }
    });
    futures::future::try_join_all(waits)
        .await
        .map(|_| ())
        .map_err(|e| step("waiting for Deployments").of(e))
}

/// What `/proc` says of a process.
struct Usage {
    /// Resident memory now, MiB (`VmRSS`).
    rss: f64,
    /// Peak resident memory, MiB (`VmHWM`).
    peak_rss: f64,
    /// User and system CPU seconds.
    cpu: f64,
}

/// The resident memory and user+system CPU seconds of process `pid`.
async fn usage(pid: u32) -> Result<Usage, Error> {
    read_usage(pid)
        .await
        .map_err(|e| step("reading the simulator's usage").of(e))
}

async fn read_usage(pid: u32) -> Result<Usage, Cause> {
    let status = tokio::fs::read_to_string(format!("/proc/{pid}/status")).await?;
    let mib = |key: &str| -> Result<f64, Cause> {
        let kb: f64 = status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .ok_or_else(|| format!("no {key} in /proc status"))?;
        Ok(kb / 1024.0)
    };
    let (rss, peak_rss) = (mib("VmRSS:")?, mib("VmHWM:")?);
    let stat = tokio::fs::read_to_string(format!("/proc/{pid}/stat")).await?;
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
    Ok(Usage { rss, peak_rss, cpu })
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
    fn each_node_image_figure_follows_its_release_one_with_their_ratio() {
        let release = vec![
            Figure::of("ready", "s", vec![10.0]),
            Figure::of("growth", "x", vec![1.1]),
        ];
        let node_image = vec![
            Figure::of("ready", "s", vec![15.0]),
            Figure::of("growth", "x", vec![1.2]),
        ];
        let rows: Vec<(String, f64)> = side_by_side(release, node_image)
            .into_iter()
            .map(|f| (f.name, f.median))
            .collect();
        let names: Vec<&str> = rows.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            [
                "ready (release)",
                "ready (node image)",
                "ready: node image / release",
                "growth (release)",
                "growth (node image)",
            ]
        );
        assert_eq!(rows[2].1, 1.5);
    }
}
