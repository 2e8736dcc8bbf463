//! One worker per pod (`pkg/kubelet/pod_workers.go`): it moves the pod through its stages, starts and
//! restarts its containers with back-off, and stops them when the pod is deleted.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use super::keyring;
use super::lifecycle::{missing_config_reference, missing_volume_source};
use super::reference::Reference;
use super::runtime::{self, ContainerRuntime, Probed, PulledImage};
use super::status::write_status;
use super::{Container, Kubelet, MANAGER, PodRun, Stage};
use crate::meta;
use crate::resource::GroupResource;
use crate::store::{self, DeleteOptions};

/// A container that exited: its index, its id and how it ended. Boxed, because the channel that carries
/// it holds a block of 32 messages from its start, one channel for each of the node's pods.
type Exited = Box<(usize, String, runtime::Exit)>;

pub(super) async fn pod_worker<R: ContainerRuntime>(
    k: Arc<Kubelet<R>>,
    mut rx: watch::Receiver<Arc<Value>>,
) {
    rx.borrow_and_update();
    tokio::select! {
        _ = k.stand_in(k.config.start_delay) => {}
        _ = wait_for_deletion(&mut rx) => {}
    }
    let pod = rx.borrow().clone();
    if pod.pointer("/metadata/deletionTimestamp").is_some() {
        Box::pin(terminate(&k, &pod, &mut Vec::new())).await;
        return;
    }
    let mut run = new_run(&k, &pod);
    let (exit_tx, mut exit_rx) = mpsc::unbounded_channel::<Exited>();
    write_status(&k, &run, &pod);
    // The worker holds no version of its pod while it waits: the one it read is replaced by the status
    // it wrote, and a thousand waiting workers each keeping a stale pod doubled what pods cost.
    drop(pod);
    loop {
        if rx.has_changed().is_err() {
            // The kubelet forgot the pod or stops: no further step, only the containers stopped.
            Box::pin(stop_all(&k, &mut run.containers, Duration::ZERO)).await;
            return;
        }
        let latest = rx.borrow().clone();
        if latest.pointer("/metadata/deletionTimestamp").is_some() {
            Box::pin(terminate(&k, &latest, &mut run.containers)).await;
            return;
        }
        // The worker waits most of its life; the steps' futures are boxed so that a waiting worker's
        // task is small (with them inline, each of a thousand pods' tasks was about 8 KB).
        Box::pin(step(&k, &mut run, &latest, &exit_tx)).await;
        drop(latest);
        let latest = rx.borrow().clone();
        write_status(&k, &run, &latest);
        drop(latest);
        let next = run
            .containers
            .iter()
            .flat_map(|c| [c.next, c.ready_at])
            .chain([run.volumes_next])
            .flatten()
            .min();
        let sleep = async {
            match next {
                Some(t) => tokio::time::sleep_until(t).await,
                None => std::future::pending().await,
            }
        };
        // What the probes say is watched through copies that have seen what the step read.
        let mut probed: Vec<_> = run
            .containers
            .iter()
            .filter_map(|c| c.probed.clone())
            .collect();
        tokio::select! {
            _ = sleep => {}
            _ = probes_changed(&mut probed) => {}
            // A closed channel (the pod gone from the kubelet, or the kubelet stopping) is seen at the
            // top of the loop.
            _ = rx.changed() => {}
            Some(exited) = exit_rx.recv() => {
                let (i, id, exit) = *exited;
                container_exited(&k, &mut run, i, &id, exit)
            }
        }
    }
}

/// Resolves when one of `probed` changes or closes; never when there is none.
async fn probes_changed(probed: &mut [watch::Receiver<Probed>]) {
    if probed.is_empty() {
        return std::future::pending().await;
    }
    let changes = probed.iter_mut().map(|r| Box::pin(r.changed()));
    let _ = futures::future::select_all(changes).await;
}

/// The run of a pod that is starting: its IP, start time and containers, none created yet.
fn new_run<R: ContainerRuntime>(k: &Kubelet<R>, pod: &Value) -> PodRun {
    let ip = k.next_ip.fetch_add(1, Ordering::Relaxed);
    let node = meta::str_at(pod, "/spec/nodeName")
        .and_then(|n| k.nodes.get(n))
        .cloned()
        .unwrap_or_else(|| k.config.node_identities().remove(0));
    PodRun {
        uid: meta::str_at(pod, "/metadata/uid").unwrap_or("").to_string(),
        namespace: meta::namespace_of(pod).to_string(),
        name: meta::name_of(pod).to_string(),
        // A real runtime reports the address the network gives the container at its start.
        pod_ip: if k.runtime.is_real() {
            String::new()
        } else {
            format!("{}.{}", node.pod_network, ip % 250 + 2)
        },
        node_ip: node.ip,
        start_time: meta::now_rfc3339(),
        admitted: Instant::now(),
        containers: pod
            .pointer("/spec/containers")
            .and_then(Value::as_array)
            .map(|cs| {
                cs.iter()
                    .map(|c| Container {
                        spec: c.clone(),
                        name: c["name"].as_str().unwrap_or("").to_string(),
                        stage: Stage::Creating,
                        next: None,
                        pulled: None,
                        created: false,
                        container_id: None,
                        started: false,
                        ready: false,
                        ready_at: None,
                        probed: None,
                        restart_count: 0,
                        pull_failures: 0,
                        last_terminated: None,
                        waiter: None,
                    })
                    .collect()
            })
            .unwrap_or_default(),
        restart_policy: meta::str_at(pod, "/spec/restartPolicy")
            .unwrap_or("Always")
            .to_string(),
        volumes_ready: false,
        volumes_next: Some(Instant::now()),
        mount_failure_reported: false,
    }
}

pub(super) async fn wait_for_deletion(rx: &mut watch::Receiver<Arc<Value>>) {
    loop {
        if rx.borrow().pointer("/metadata/deletionTimestamp").is_some() {
            return;
        }
        if rx.changed().await.is_err() {
            return std::future::pending().await;
        }
    }
}

/// Takes every step that is due.
pub(super) async fn step<R: ContainerRuntime>(
    k: &Arc<Kubelet<R>>,
    run: &mut PodRun,
    pod: &Value,
    exit_tx: &mpsc::UnboundedSender<Exited>,
) {
    let now = Instant::now();
    if !run.volumes_ready && !check_volumes(k, run, pod, now) {
        return;
    }
    for i in 0..run.containers.len() {
        let now = Instant::now();
        let c = &mut run.containers[i];
        if let (Stage::Running { .. }, Some(at)) = (&c.stage, c.ready_at)
            && at <= now
        {
            c.ready = true;
            c.ready_at = None;
        }
        if let Some(probed) = &mut c.probed {
            match probed.has_changed() {
                Ok(true) => {
                    let now = *probed.borrow_and_update();
                    c.take(now);
                }
                Ok(false) => {}
                // The runtime forgot the container: not ready, and no probe will say otherwise.
                Err(_) => {
                    c.take(Probed::default());
                    c.probed = None;
                }
            }
        }
        if c.next.is_none_or(|t| t > now) && !matches!(c.stage, Stage::Creating) {
            continue;
        }
        match c.stage.clone() {
            Stage::PullFailed { message } => {
                c.stage = Stage::PullBackOff { message };
                c.next = Some(now + k.config.backoff(c.pull_failures) / 2);
                let image = c.image().to_string();
                event(
                    k,
                    run,
                    "Normal",
                    "BackOff",
                    &format!("Back-off pulling image \"{image}\""),
                );
                event(k, run, "Warning", "Failed", "Error: ImagePullBackOff");
            }
            Stage::StartFailed { .. } => {
                let backoff = k.config.backoff(c.restart_count as u32);
                c.next = Some(now + backoff / 2);
                crash_back_off(k, run, i, backoff);
            }
            Stage::Creating
            | Stage::PullBackOff { .. }
            | Stage::ConfigError { .. }
            | Stage::CreateFailed { .. }
            | Stage::CrashBackOff { .. } => {
                start_container(k, run, i, pod, exit_tx).await;
            }
            Stage::InvalidName { .. } | Stage::Running { .. } | Stage::Terminated => {
                c.next = None;
            }
        }
    }
}

/// Whether the pod's volume sources exist; while one is missing, a `FailedMount` event (once) and another
/// look after the back-off.
fn check_volumes<R: ContainerRuntime>(
    k: &Arc<Kubelet<R>>,
    run: &mut PodRun,
    pod: &Value,
    now: Instant,
) -> bool {
    if run.volumes_next.is_some_and(|t| t > now) {
        return false;
    }
    match missing_volume_source(&k.store, pod) {
        None => {
            run.volumes_ready = true;
            run.volumes_next = None;
            true
        }
        Some(what) => {
            tracing::debug!(pod = %run.name, %what, "waiting for a volume source");
            if !run.mount_failure_reported {
                event(
                    k,
                    run,
                    "Warning",
                    "FailedMount",
                    &format!("MountVolume.SetUp failed: {what}"),
                );
                run.mount_failure_reported = true;
            }
            run.volumes_next = Some(now + k.config.backoff_base);
            false
        }
    }
}

/// Pulls the image if needed, checks configuration references, and starts the container.
pub(super) async fn start_container<R: ContainerRuntime>(
    k: &Arc<Kubelet<R>>,
    run: &mut PodRun,
    i: usize,
    pod: &Value,
    exit_tx: &mpsc::UnboundedSender<Exited>,
) {
    let cfg = &k.config;
    let image = run.containers[i].image().to_string();
    let reference = match Reference::parse(&image) {
        Ok(r) => r,
        Err(e) => {
            let c = &mut run.containers[i];
            let message = format!("Failed to apply default image tag \"{image}\": {e}");
            c.stage = Stage::InvalidName {
                message: message.clone(),
            };
            c.next = None;
            event(k, run, "Warning", "InspectFailed", &message);
            event(k, run, "Warning", "Failed", "Error: InvalidImageName");
            return;
        }
    };
    let Some(pulled) = pull_image(k, run, i, pod, &reference).await else {
        return;
    };
    if let Some(message) = missing_config_reference(&k.store, pod, &run.containers[i].spec) {
        let c = &mut run.containers[i];
        let first = !matches!(&c.stage, Stage::ConfigError { message: m } if *m == message);
        c.stage = Stage::ConfigError {
            message: message.clone(),
        };
        if first {
            event(k, run, "Warning", "Failed", &format!("Error: {message}"));
        }
        let c = &mut run.containers[i];
        c.next = Some(Instant::now() + cfg.backoff_base);
        return;
    }
    let id = match k
        .runtime
        .start(pod, &run.containers[i].spec, &pulled, run.admitted)
        .await
    {
        Ok(id) => {
            let name = run.containers[i].name.clone();
            container_event(k, run, i, "Created", &format!("Created container: {name}"));
            container_event(k, run, i, "Started", &format!("Started container {name}"));
            id
        }
        Err(error) => {
            start_failed(k, run, i, error, pulled);
            return;
        }
    };
    mark_running(k, run, i, id, pulled, exit_tx);
}

/// Records a container the runtime did not start as the kubelet's `startContainer` reports each step's
/// failure: a `Failed` Event (`Error: <message>`; once while a configuration error stays the same), the
/// step's waiting reason, and another attempt after the back-off. A container that was created but did not
/// start (`RunContainerError`) is recorded as containerd records it, as one that exited at once (reason
/// `StartError`, exit code 128), and is restarted as an exited one is.
fn start_failed<R: ContainerRuntime>(
    k: &Arc<Kubelet<R>>,
    run: &mut PodRun,
    i: usize,
    error: runtime::StartError,
    pulled: PulledImage,
) {
    let cfg = &k.config;
    let c = &mut run.containers[i];
    let message = error.to_string();
    let (stage, report) = match error {
        runtime::StartError::Config(message) => {
            let again = matches!(&c.stage, Stage::ConfigError { message: m } if *m == message);
            (Stage::ConfigError { message }, !again)
        }
        runtime::StartError::Create(message) => (Stage::CreateFailed { message }, true),
        runtime::StartError::Run {
            container_id,
            message,
        } => {
            let name = c.name.clone();
            container_event(k, run, i, "Created", &format!("Created container: {name}"));
            container_warning(k, run, i, "Failed", &format!("Error: {message}"));
            ended_at_start(k, run, i, container_id, message, pulled);
            return;
        }
    };
    c.stage = stage;
    c.next = Some(Instant::now() + cfg.backoff_base);
    if report {
        container_warning(k, run, i, "Failed", &format!("Error: {message}"));
    }
}

/// Container `i`, created as `container_id` but not started, as containerd records it: exited at once with
/// code 128 and reason `StartError`. It shows `RunContainerError` for the first half of its restart
/// back-off and `CrashLoopBackOff` for the rest, or is terminated when its pod does not restart it.
fn ended_at_start<R: ContainerRuntime>(
    k: &Arc<Kubelet<R>>,
    run: &mut PodRun,
    i: usize,
    container_id: String,
    message: String,
    pulled: PulledImage,
) {
    let restart = run.restart_policy != "Never";
    let c = &mut run.containers[i];
    c.pulled = Some(pulled);
    c.created = true;
    c.started = false;
    c.ready = false;
    c.last_terminated = Some(json!({"terminated": {
        "exitCode": 128, "reason": "StartError", "message": message,
        "startedAt": "1970-01-01T00:00:00Z", "finishedAt": meta::now_rfc3339(),
        "containerID": container_id}}));
    c.container_id = Some(container_id);
    if !restart {
        c.stage = Stage::Terminated;
        c.next = None;
        return;
    }
    c.restart_count += 1;
    c.stage = Stage::StartFailed { message };
    c.next = Some(Instant::now() + k.config.backoff(c.restart_count as u32) / 2);
}

/// The image of container `i` as its pull policy allows (pulls one at a time, with the pod's pull
/// secrets), or `None` with the container in `ErrImagePull` and its back-off set.
async fn pull_image<R: ContainerRuntime>(
    k: &Arc<Kubelet<R>>,
    run: &mut PodRun,
    i: usize,
    pod: &Value,
    reference: &Reference,
) -> Option<PulledImage> {
    let cfg = &k.config;
    let image = run.containers[i].image().to_string();
    let policy = run.containers[i].spec["imagePullPolicy"]
        .as_str()
        .unwrap_or_else(|| crate::defaults::default_pull_policy(&image))
        .to_string();
    let secrets = keyring::pull_secrets(&k.store, pod);
    if !secrets.missing.is_empty() {
        let message = keyring::missing_message(&secrets.missing);
        event(
            k,
            run,
            "Warning",
            "FailedToRetrieveImagePullSecret",
            &message,
        );
    }
    let serial = k.pulls.lock().await;
    let cached = k.runtime.cached(reference);
    let pulled = match (policy.as_str(), cached) {
        ("Always", _) | (_, None) if policy != "Never" => {
            fetch(k, run, i, reference, &secrets.secrets).await?
        }
        (_, Some(p)) => {
            let message = format!("Container image \"{image}\" already present on machine");
            container_event(k, run, i, "Pulled", &message);
            p
        }
        (_, None) => {
            let c = &mut run.containers[i];
            c.stage = Stage::PullFailed {
                message: format!(
                    "Container image \"{image}\" is not present with pull policy of Never"
                ),
            };
            c.next = Some(Instant::now() + cfg.backoff_base);
            return None;
        }
    };
    drop(serial);
    Some(pulled)
}

/// Pulls the image of container `i` with the credentials the pod's pull secrets hold for it, recording the
/// outcome as the kubelet's events; `None` leaves the container in `ErrImagePull` with its back-off set.
async fn fetch<R: ContainerRuntime>(
    k: &Arc<Kubelet<R>>,
    run: &mut PodRun,
    i: usize,
    reference: &Reference,
    secrets: &[Value],
) -> Option<PulledImage> {
    let cfg = &k.config;
    let image = run.containers[i].image().to_string();
    container_event(k, run, i, "Pulling", &format!("Pulling image \"{image}\""));
    let started = Instant::now();
    k.stand_in(cfg.pull_delay).await;
    let pulled = match keyring::Keyring::from_secrets(secrets) {
        Ok(keyring) => {
            let credentials = keyring.lookup(&reference.name());
            keyring::pull_with(&k.runtime, reference, &credentials).await
        }
        Err(e) => Err(runtime::PullError {
            message: e.to_string(),
        }),
    };
    match pulled {
        Ok(p) => {
            run.containers[i].pull_failures = 0;
            let took = humanize(started.elapsed());
            let message = format!(
                "Successfully pulled image \"{image}\" in {took} ({took} including waiting)"
            );
            container_event(k, run, i, "Pulled", &message);
            Some(p)
        }
        Err(e) => {
            let c = &mut run.containers[i];
            c.pull_failures += 1;
            tracing::debug!(pod = %run.name, container = %c.name, error = %e, "image pull failed");
            c.stage = Stage::PullFailed {
                message: e.message.clone(),
            };
            c.next = Some(Instant::now() + cfg.backoff(c.pull_failures) / 2);
            event(
                k,
                run,
                "Warning",
                "Failed",
                &format!("Failed to pull image \"{image}\": {}", e.message),
            );
            event(k, run, "Warning", "Failed", "Error: ErrImagePull");
            None
        }
    }
}

/// Records container `i` as running under `id` and starts waiting for it to exit.
fn mark_running<R: ContainerRuntime>(
    k: &Arc<Kubelet<R>>,
    run: &mut PodRun,
    i: usize,
    id: String,
    pulled: PulledImage,
    exit_tx: &mpsc::UnboundedSender<Exited>,
) {
    let cfg = &k.config;
    let started_at = meta::now_rfc3339();
    let c = &mut run.containers[i];
    k.logs
        .started(&run.uid, &c.name, &pulled.image, &started_at);
    let probe_delay = c
        .spec
        .pointer("/readinessProbe/initialDelaySeconds")
        .and_then(Value::as_f64)
        .map(|s| Duration::from_secs_f64((s * cfg.probe_scale).max(0.0)))
        .unwrap_or_default();
    let probed = k.runtime.probed(&id);
    let ready_in = cfg.ready_delay + probe_delay;
    if let Some(ip) = k.runtime.pod_ip(&id) {
        run.pod_ip = ip;
    }
    c.pulled = Some(pulled);
    c.created = true;
    c.container_id = Some(id.clone());
    c.stage = Stage::Running { started_at };
    c.next = None;
    c.ready_at = None;
    c.started = true;
    if let Some(mut probed) = probed {
        let now = *probed.borrow_and_update();
        c.take(now);
        c.probed = Some(probed);
    } else if ready_in.is_zero() {
        c.ready = true;
    } else {
        c.ready = false;
        c.ready_at = Some(Instant::now() + ready_in);
    }
    if let Some(w) = c.waiter.take() {
        w.abort();
    }
    let tx = exit_tx.clone();
    let kubelet = k.clone();
    c.waiter = Some(tokio::spawn(async move {
        let exit = kubelet.runtime.wait(&id).await;
        let _ = tx.send(Box::new((i, id, exit)));
    }));
}

pub(super) fn container_exited<R: ContainerRuntime>(
    k: &Arc<Kubelet<R>>,
    run: &mut PodRun,
    i: usize,
    id: &str,
    exit: runtime::Exit,
) {
    let restart_policy = run.restart_policy.clone();
    let Some(c) = run.containers.get_mut(i) else {
        return;
    };
    if c.container_id.as_deref() != Some(id) {
        return;
    }
    let Stage::Running { started_at } = c.stage.clone() else {
        return;
    };
    c.waiter = None;
    c.started = false;
    c.ready = false;
    c.ready_at = None;
    c.probed = None;
    c.last_terminated = Some(json!({"terminated": {
        "exitCode": exit.code, "reason": exit.reason, "startedAt": started_at,
        "finishedAt": meta::now_rfc3339(), "containerID": id}}));
    let restart = match restart_policy.as_str() {
        "Never" => false,
        "OnFailure" => exit.code != 0,
        _ => true,
    };
    if !restart {
        c.stage = Stage::Terminated;
        c.next = None;
        return;
    }
    // A container in CrashLoopBackOff keeps its last container ID and image ID.
    c.restart_count += 1;
    let backoff = k.config.backoff(c.restart_count as u32);
    c.next = Some(Instant::now() + backoff);
    crash_back_off(k, run, i, backoff);
}

/// Puts container `i` in `CrashLoopBackOff` for `backoff`, with the kubelet's `BackOff` Event.
fn crash_back_off<R: ContainerRuntime>(
    k: &Arc<Kubelet<R>>,
    run: &mut PodRun,
    i: usize,
    backoff: Duration,
) {
    let pod_ref = format!("{}_{}({})", run.name, run.namespace, run.uid);
    let c = &mut run.containers[i];
    c.stage = Stage::CrashBackOff {
        message: format!(
            "back-off {} restarting failed container={} pod={pod_ref}",
            humanize(backoff),
            c.name
        ),
    };
    let message = format!(
        "Back-off restarting failed container {} in pod {pod_ref}",
        c.name
    );
    event(k, run, "Warning", "BackOff", &message);
}

/// Records a `Normal` event about container `i` of the pod, from the kubelet.
pub(super) fn container_event<R: ContainerRuntime>(
    k: &Arc<Kubelet<R>>,
    run: &PodRun,
    i: usize,
    reason: &str,
    message: &str,
) {
    record_container_event(k, run, i, ("Normal", reason), message);
}

/// Records a `Warning` event about container `i` of the pod, from the kubelet.
fn container_warning<R: ContainerRuntime>(
    k: &Arc<Kubelet<R>>,
    run: &PodRun,
    i: usize,
    reason: &str,
    message: &str,
) {
    record_container_event(k, run, i, ("Warning", reason), message);
}

/// Records an event of `(type, reason)` about container `i` of the pod.
fn record_container_event<R: ContainerRuntime>(
    k: &Arc<Kubelet<R>>,
    run: &PodRun,
    i: usize,
    (kind, reason): (&str, &str),
    message: &str,
) {
    let involved =
        container_reference(&run.namespace, &run.name, &run.uid, &run.containers[i].name);
    crate::controller::record_event(&k.store, &involved, MANAGER, kind, reason, message);
}

/// The object an Event about `container` of a pod names: the pod, with the container's `fieldPath`,
/// as the kubelet's container references have it.
pub(super) fn container_reference(namespace: &str, pod: &str, uid: &str, container: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": pod, "namespace": namespace, "uid": uid},
        "fieldPath": format!("spec.containers{{{container}}}")})
}

/// Records an event about the pod, from the kubelet.
pub(super) fn event<R: ContainerRuntime>(
    k: &Arc<Kubelet<R>>,
    run: &PodRun,
    event_type: &str,
    reason: &str,
    message: &str,
) {
    let involved = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": run.name, "namespace": run.namespace, "uid": run.uid}});
    crate::controller::record_event(&k.store, &involved, MANAGER, event_type, reason, message);
}

/// A back-off the way Go prints a duration: `10s`, `1m20s`, `200ms`.
pub(super) fn humanize(d: Duration) -> String {
    let ms = d.as_millis();
    if ms < 1000 {
        return format!("{ms}ms");
    }
    let s = d.as_secs();
    if s < 60 {
        return format!("{s}s");
    }
    format!("{}m{}s", s / 60, s % 60)
}

/// The kubelet's minimum shutdown window after a `preStop` hook (`minimumGracePeriodInSeconds`).
const MINIMUM_GRACE: Duration = Duration::from_secs(2);

/// Runs the `preStop` hooks of a terminating pod's started containers at once, each bounded by `grace`;
/// a hook that fails or runs out of time is reported as a `FailedPreStopHook` event. Returns how many
/// hooks ran.
async fn pre_stop_all<R: ContainerRuntime>(
    k: &Arc<Kubelet<R>>,
    pod: &Value,
    containers: &[Container],
    grace: Duration,
) -> usize {
    let hooks: Vec<_> = containers
        .iter()
        .filter_map(|c| {
            let handler = c.spec.pointer("/lifecycle/preStop")?;
            let id = c.container_id.as_deref()?;
            (!grace.is_zero()).then(|| pre_stop(k, pod, c, id, handler, grace))
        })
        .collect();
    let ran = hooks.len();
    futures::future::join_all(hooks).await;
    ran
}

/// One container's `preStop` hook: a `sleep` here, other handlers in the runtime.
async fn pre_stop<R: ContainerRuntime>(
    k: &Arc<Kubelet<R>>,
    pod: &Value,
    c: &Container,
    id: &str,
    handler: &Value,
    grace: Duration,
) {
    let run = async {
        match handler.pointer("/sleep/seconds").and_then(Value::as_u64) {
            Some(seconds) => {
                tokio::time::sleep(Duration::from_secs(seconds)).await;
                Ok(())
            }
            None => k.runtime.pre_stop(id, &c.spec, handler).await,
        }
    };
    let failed = match tokio::time::timeout(grace, run).await {
        Ok(Ok(())) => return,
        Ok(Err(reason)) => reason,
        Err(_) => format!(
            "did not finish within the grace period of {}",
            humanize(grace)
        ),
    };
    let message = format!(
        "PreStop hook for Container {:?} in Pod \"{}_{}({})\" failed - error: {failed}",
        c.name,
        meta::name_of(pod),
        meta::namespace_of(pod),
        meta::str_at(pod, "/metadata/uid").unwrap_or(""),
    );
    let involved = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": meta::name_of(pod), "namespace": meta::namespace_of(pod),
            "uid": meta::str_at(pod, "/metadata/uid")}});
    crate::controller::record_event(
        &k.store,
        &involved,
        MANAGER,
        "Warning",
        "FailedPreStopHook",
        &message,
    );
}

/// What the kubelet does first for each running container of a deleted pod: stops its liveness and
/// startup probes and records `Killing` ("Stopping container app"), before the `preStop` hook runs.
fn begin_killing<R: ContainerRuntime>(k: &Arc<Kubelet<R>>, pod: &Value, containers: &[Container]) {
    let (namespace, name) = (meta::namespace_of(pod), meta::name_of(pod));
    let uid = meta::str_at(pod, "/metadata/uid").unwrap_or("");
    for c in containers {
        let (Stage::Running { .. }, Some(id)) = (&c.stage, c.container_id.as_deref()) else {
            continue;
        };
        k.runtime.terminating(id);
        let involved = container_reference(namespace, name, uid, &c.name);
        let message = format!("Stopping container {}", c.name);
        crate::controller::record_event(
            &k.store, &involved, MANAGER, "Normal", "Killing", &message,
        );
    }
}

/// Stops every container of a pod at once, each within `grace`.
pub(super) async fn stop_all<R: ContainerRuntime>(
    k: &Arc<Kubelet<R>>,
    containers: &mut [Container],
    grace: Duration,
) {
    let mut stops = Vec::new();
    for c in containers.iter_mut() {
        if let Some(w) = c.waiter.take() {
            w.abort();
        }
        if let Some(id) = &c.container_id {
            stops.push(k.runtime.stop_within(id, grace));
        }
    }
    futures::future::join_all(stops).await;
}

/// Lets a terminating pod go as the kubelet kills a pod: its liveness and startup probes stop (nothing
/// restarts a draining container), each container's `preStop` hook runs first, within
/// the grace period, then the container is stopped within what is left of it (never less than 2 s, as
/// the kubelet's minimum); a virtual pod stays as it is for `termination_delay` (at most its grace
/// period) instead. Then it is deleted with grace period 0.
pub(super) async fn terminate<R: ContainerRuntime>(
    k: &Arc<Kubelet<R>>,
    pod: &Value,
    containers: &mut [Container],
) {
    let grace = Duration::from_secs(
        pod.pointer("/metadata/deletionGracePeriodSeconds")
            .and_then(Value::as_i64)
            .unwrap_or(0)
            .max(0) as u64,
    );
    let started = Instant::now();
    begin_killing(k, pod, containers);
    let hooks = pre_stop_all(k, pod, containers, grace).await;
    let left = grace.saturating_sub(started.elapsed());
    // Real containers take their grace period in the stop itself.
    k.stand_in(k.config.termination_delay.min(left)).await;
    let stop_within = if hooks > 0 {
        left.max(MINIMUM_GRACE)
    } else {
        grace
    };
    stop_all(k, containers, stop_within).await;
    let opts = DeleteOptions {
        grace_period_seconds: Some(0),
        uid: meta::str_at(pod, "/metadata/uid").map(str::to_string),
        ..DeleteOptions::default()
    };
    match k.store.delete(
        &GroupResource::pods(),
        Some(meta::namespace_of(pod)),
        meta::name_of(pod),
        &opts,
    ) {
        Ok(_) | Err(store::Error::NotFound { .. }) | Err(store::Error::Conflict { .. }) => {}
        Err(e) => {
            tracing::warn!(pod = %meta::name_of(pod), error = %e, "removing a terminated pod failed")
        }
    }
}
