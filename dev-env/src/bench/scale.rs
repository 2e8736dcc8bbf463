//! kube-sim at scale: many Deployments brought Ready and restarted at once,
//! with the simulator's peak RSS and CPU time.

use std::{
    path::Path,
    time::{Duration, Instant},
};

use k8s_openapi::api::apps::v1::Deployment;
use kube::{
    Api, Client,
    api::{Patch, PatchParams},
};
use serde_json::json;
use xshell::{Shell, cmd};

use super::{Error, Figure, Process, start_registry, step};
use crate::{
    image::{distribution, oci},
    wait::workload::{self, WaitOptions, Want},
};

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
    let dir = tempfile::tempdir().map_err(|e| step("a temporary directory").of(e))?;
    let binary = dir.path().join("kube-sim");
    extract_binary(crate::config::DEFAULT_SIM_IMAGE, "/bin/kube-sim", &binary)
        .await
        .map_err(|e| step("taking kube-sim out of the node image").of(e))?;
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
/// created and waited for, then restarted and waited for again.
async fn scale_run(binary: &Path, deployments: usize, replicas: i32) -> Result<ScaleRun, Error> {
    let dir = tempfile::tempdir().map_err(|e| step("a temporary directory").of(e))?;
    let (_registry, host) = start_registry(dir.path()).await?;
    let reference = push_pause_image(&host).await?;
    let pods = deployments * usize::try_from(replicas).unwrap_or(0);
    let (sim, client) = start_sim(binary, dir.path(), &host, nodes_for(pods)).await?;

    let names: Vec<String> = (0..deployments).map(|i| format!("scale-{i:02}")).collect();
    let api: Api<Deployment> = Api::namespaced(client.clone(), "default");
    let started = Instant::now();
    create_deployments(&api, &names, replicas, &reference).await?;
    wait_all(&client, &names).await?;
    let ready = started.elapsed();

    let started = Instant::now();
    restart_deployments(&api, &names).await?;
    wait_all(&client, &names).await?;
    let rolled = started.elapsed();

    let (peak_rss_mb, cpu_seconds) = usage(sim.0.id())
        .await
        .map_err(|e| step("reading the simulator's usage").of(e))?;
    drop(sim);
    Ok(ScaleRun {
        ready,
        rolled,
        peak_rss_mb,
        cpu_seconds,
    })
}

/// Pushes a small image to the registry at `host`, once; returns the
/// digest-pinned reference pods name it by.
async fn push_pause_image(host: &str) -> Result<String, Error> {
    let image = oci::binary_image("pause", b"#!/pause\n".to_vec());
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
    let sim = Process::spawn(
        cmd!(
            sh,
            "{binary} serve --listen 127.0.0.1:0 --kubeconfig-out {kubeconfig} --registries {registries} --nodes {nodes}"
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
            namespace: String::from("default"),
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

/// Peak resident memory (MB) and user+system CPU seconds of process `pid`,
/// from `/proc`.
async fn usage(pid: u32) -> Result<(f64, f64), Cause> {
    let status = tokio::fs::read_to_string(format!("/proc/{pid}/status")).await?;
    let kb: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .ok_or("no VmHWM in /proc status")?;
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
