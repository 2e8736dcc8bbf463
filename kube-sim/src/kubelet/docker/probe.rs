//! Startup, readiness and liveness probes against real containers: `httpGet` and `tcpSocket` to the container's
//! address on the pod network, `exec` through the engine. Timing follows the probe's
//! `initialDelaySeconds`, `periodSeconds`, `timeoutSeconds`, `successThreshold` and `failureThreshold`.
//!
//! As the kubelet's prober, every failed probe is recorded as a `Warning` Event `Unhealthy` on the
//! container (`Readiness probe failed: <output>`), its output worded as the kubelet's probers word it:
//! Go's dial errors (`dial tcp 10.0.0.5:8080: connect: connection refused`), `HTTP probe failed with
//! statuscode: 503`, or what an `exec` command printed. A container killed for its liveness or startup
//! probe gets the kubelet's `Killing` Event. Until a container's startup probe passes, its readiness and
//! liveness probes do not run and it is neither started nor ready. Once its pod is deleted, its liveness
//! and startup probes stop and it counts as started, as the kubelet's workers do for a quiet shutdown.

use std::sync::Arc;
use std::time::Duration;

use bollard::Docker;
use bollard::exec::{CreateExecOptions, StartExecOptions, StartExecResults};
use bytes::Bytes;
use futures::StreamExt as _;
use http_body_util::Empty;
use hyper_util::rt::TokioIo;
use serde_json::Value;
use tokio::sync::watch;
use tokio::time::Instant;

use super::super::runtime::Probed;
use crate::meta;
use crate::store::Store;

/// What a probe talks to.
#[derive(Clone)]
pub struct Target {
    /// The engine.
    pub docker: Docker,
    /// The Docker ID.
    pub container_id: String,
    /// The container's address on the pod network.
    pub ip: Option<String>,
    /// The container's spec, for named ports.
    pub container: Value,
}

/// Records the Events of one pod container's probes, as the kubelet's recorder does.
#[derive(Clone)]
pub struct Recorder {
    store: Store,
    /// The pod, with the container's `fieldPath`.
    involved: Value,
    container: String,
}

impl Recorder {
    /// Events about `container` of `pod`.
    pub fn new(store: Store, pod: &Value, container: &str) -> Recorder {
        let involved = super::super::pod_workers::container_reference(
            meta::namespace_of(pod),
            meta::name_of(pod),
            meta::str_at(pod, "/metadata/uid").unwrap_or(""),
            container,
        );
        Recorder {
            store,
            involved,
            container: container.to_string(),
        }
    }

    fn record(&self, event_type: &str, reason: &str, message: &str) {
        crate::controller::record_event(
            &self.store,
            &self.involved,
            super::super::MANAGER,
            event_type,
            reason,
            message,
        );
    }

    /// A failed probe: `Unhealthy`, `<Kind> probe failed: <output>`.
    fn failed(&self, kind: &str, output: &str) {
        tracing::debug!(container = %self.container, %output, "{kind} probe failed");
        self.record(
            "Warning",
            "Unhealthy",
            &format!("{kind} probe failed: {output}"),
        );
    }
}

fn seconds(probe: &Value, field: &str, default: f64) -> Duration {
    Duration::from_secs_f64(probe[field].as_f64().unwrap_or(default).max(0.0))
}

fn count(probe: &Value, field: &str, default: u64) -> u64 {
    probe[field].as_u64().unwrap_or(default).max(1)
}

/// What one container's probes share: what they probe, what they say (`started`, `ready`), the ticker
/// they run on, and where their Events go.
#[derive(Clone)]
pub struct Worker {
    pub target: Target,
    pub probed: Arc<watch::Sender<Probed>>,
    /// When the kubelet took the pod up, which starts each probe's ticker.
    pub ticks_from: Instant,
    pub events: Recorder,
}

impl Worker {
    /// Waits until the container's startup probe has passed (at once without one); false if the
    /// container is gone first.
    async fn started(&self) -> bool {
        self.probed
            .subscribe()
            .wait_for(|p| p.started)
            .await
            .is_ok()
    }

    /// Sleeps until the next tick of a probe of `period` that comes at least `initial_delay` after the
    /// container's start (`started_at`), as a probe worker's ticks skip those before the delay.
    async fn next_tick(&self, started_at: Instant, initial_delay: Duration, period: Duration) {
        let not_before = Instant::now().max(started_at + initial_delay);
        tokio::time::sleep_until(next_tick(self.ticks_from, not_before, period)).await;
    }

    /// Kills the container for its `kind` probe (`liveness`, `startup`), as the kubelet does once the
    /// probe failed `failureThreshold` times in a row.
    async fn kill_for(&self, kind: &str) {
        tracing::info!(container = %self.target.container_id, "{kind} probe failed; killing the container");
        let message = format!(
            "Container {} failed {kind} probe, will be restarted",
            self.events.container
        );
        self.events.record("Normal", "Killing", &message);
        super::DockerRuntime::kill(&self.target.docker, &self.target.container_id).await;
    }
}

/// The timing of a probe: `initialDelaySeconds`, `periodSeconds` and the two thresholds.
struct Timing {
    initial_delay: Duration,
    period: Duration,
    successes_needed: u64,
    failures_allowed: u64,
}

impl Timing {
    fn of(probe: &Value) -> Timing {
        Timing {
            initial_delay: seconds(probe, "initialDelaySeconds", 0.0),
            period: seconds(probe, "periodSeconds", 10.0).max(Duration::from_millis(100)),
            successes_needed: count(probe, "successThreshold", 1),
            failures_allowed: count(probe, "failureThreshold", 3),
        }
    }
}

/// Keeps `ready` up to date with a readiness probe until aborted; it changes only when the result does,
/// and its receivers are woken then.
///
/// As the kubelet's prober: nothing is probed before the container has started (its startup probe
/// passed); then the status that says so triggers a probe at once, and the others come on a ticker of
/// `periodSeconds` that started when the kubelet took the pod up, not with the container; no probe runs
/// before `initialDelaySeconds` after the container's start. So a probe that fails because the app is
/// not listening yet is followed within a period, not a whole period later.
pub async fn readiness(worker: Worker, probe: Value) {
    let started_at = Instant::now();
    let timing = Timing::of(&probe);
    if !worker.started().await {
        return;
    }
    let (mut successes, mut failures) = (0, 0);
    let set = |value: bool| {
        worker
            .probed
            .send_if_modified(|p| std::mem::replace(&mut p.ready, value) != value);
    };
    loop {
        if started_at.elapsed() >= timing.initial_delay {
            if let Err(output) = once(&worker.target, &probe).await {
                worker.events.failed("Readiness", &output);
                failures += 1;
                successes = 0;
                if failures >= timing.failures_allowed || !worker.probed.borrow().ready {
                    set(false);
                }
            } else {
                successes += 1;
                failures = 0;
                if successes >= timing.successes_needed {
                    set(true);
                }
            }
        }
        tokio::time::sleep_until(next_tick(worker.ticks_from, Instant::now(), timing.period)).await;
    }
}

/// The first tick of a ticker of `period` started at `from` that comes after `now`.
fn next_tick(from: Instant, now: Instant, period: Duration) -> Instant {
    let elapsed = now.saturating_duration_since(from).as_nanos();
    let ticks = elapsed / period.as_nanos() + 1;
    let after = period.as_nanos() * ticks;
    from + Duration::from_nanos(u64::try_from(after).unwrap_or(u64::MAX))
}

/// The probes that kill the container once they fail `failureThreshold` times in a row.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Killing {
    /// Marks the container started at its first success, and stops.
    Startup,
    /// Runs once the container has started, for as long as it runs.
    Liveness,
}

impl Killing {
    /// As the kubelet names the probe in its Events.
    fn name(self) -> &'static str {
        match self {
            Killing::Startup => "Startup",
            Killing::Liveness => "Liveness",
        }
    }
}

/// Marks the container started once its startup probe passes, or kills it once the probe has failed
/// `failureThreshold` times in a row. As the kubelet's startup worker, it probes only on its ticker
/// (nothing triggers it sooner), from `initialDelaySeconds` after the container's start.
pub async fn startup(worker: Worker, probe: Value) {
    probe_until_killed(worker, probe, Killing::Startup).await;
}

/// Kills the container once its liveness probe fails `failureThreshold` times in a row. As the
/// kubelet's liveness worker, it probes on its ticker once the container has started, from
/// `initialDelaySeconds` after the container's start.
pub async fn liveness(worker: Worker, probe: Value) {
    probe_until_killed(worker, probe, Killing::Liveness).await;
}

async fn probe_until_killed(worker: Worker, probe: Value, killing: Killing) {
    let started_at = Instant::now();
    let timing = Timing::of(&probe);
    if killing == Killing::Liveness && !worker.started().await {
        return;
    }
    let mut failures = 0;
    loop {
        worker
            .next_tick(started_at, timing.initial_delay, timing.period)
            .await;
        match once(&worker.target, &probe).await {
            Ok(()) if killing == Killing::Startup => {
                worker.probed.send_modify(|p| p.started = true);
                return;
            }
            Ok(()) => failures = 0,
            Err(output) => {
                worker.events.failed(killing.name(), &output);
                failures += 1;
            }
        }
        if failures >= timing.failures_allowed {
            return worker.kill_for(&killing.name().to_lowercase()).await;
        }
    }
}

/// Runs a lifecycle hook's handler (`exec` or `httpGet`) against the container, as the kubelet runs
/// `preStop`; `Err` says what failed, worded like the kubelet's hook errors.
pub async fn hook(target: &Target, handler: &Value) -> Result<(), String> {
    if handler.get("tcpSocket").is_some() {
        return Err("TCPSocket is not supported as a lifecycle handler".to_string());
    }
    if attempt(target, handler).await.is_ok() {
        return Ok(());
    }
    Err(match handler.pointer("/exec/command") {
        Some(command) => format!("Exec lifecycle hook ({command}) failed"),
        None => format!(
            "HTTP lifecycle hook ({}) failed",
            handler
                .pointer("/httpGet/path")
                .and_then(Value::as_str)
                .unwrap_or("/")
        ),
    })
}

/// Runs a probe once within its `timeoutSeconds`; `Err` is the failure's output.
async fn once(target: &Target, probe: &Value) -> Result<(), String> {
    let timeout = seconds(probe, "timeoutSeconds", 1.0).max(Duration::from_millis(100));
    match tokio::time::timeout(timeout, attempt(target, probe)).await {
        Ok(outcome) => outcome,
        Err(_) => Err(timed_out(target, probe)),
    }
}

/// Where an `httpGet` or `tcpSocket` probe connects: its `host`, else the pod's address.
fn address(target: &Target, action: &Value) -> Result<(String, u16), String> {
    let port = port(target, &action["port"])
        .ok_or_else(|| format!("unknown port {} of the container", action["port"]))?;
    let host = action["host"]
        .as_str()
        .map(str::to_string)
        .or_else(|| target.ip.clone())
        .ok_or("the pod has no IP address yet")?;
    Ok((host, port))
}

/// The URL an `httpGet` probe asks for, as Go prints it.
fn url(host: &str, port: u16, http: &Value) -> String {
    let scheme = http["scheme"].as_str().unwrap_or("HTTP").to_lowercase();
    let path = http["path"].as_str().unwrap_or("");
    let slash = if path.starts_with('/') { "" } else { "/" };
    format!("{scheme}://{host}:{port}{slash}{path}")
}

/// The output of a probe that ran out of `timeoutSeconds`, as the kubelet words it.
fn timed_out(target: &Target, probe: &Value) -> String {
    if let Some(http) = probe.get("httpGet") {
        return match address(target, http) {
            Ok((host, port)) => format!(
                "Get \"{}\": context deadline exceeded (Client.Timeout exceeded while awaiting headers)",
                url(&host, port, http)
            ),
            Err(e) => e,
        };
    }
    if let Some(tcp) = probe.get("tcpSocket") {
        return match address(target, tcp) {
            Ok((host, port)) => format!("dial tcp {host}:{port}: i/o timeout"),
            Err(e) => e,
        };
    }
    format!("command {:?} timed out", command_line(probe))
}

async fn attempt(target: &Target, probe: &Value) -> Result<(), String> {
    if let Some(http) = probe.get("httpGet") {
        let (host, port) = address(target, http)?;
        let path = http["path"].as_str().unwrap_or("/");
        let status = http_get(&host, port, path, &http["httpHeaders"])
            .await
            .map_err(|e| format!("Get \"{}\": {e}", url(&host, port, http)))?;
        if (200..400).contains(&status) {
            return Ok(());
        }
        return Err(format!("HTTP probe failed with statuscode: {status}"));
    }
    if let Some(tcp) = probe.get("tcpSocket") {
        let (host, port) = address(target, tcp)?;
        return dial(&host, port).await.map(drop);
    }
    if let Some(command) = probe.pointer("/exec/command").and_then(Value::as_array) {
        let cmd: Vec<String> = command
            .iter()
            .filter_map(|c| c.as_str().map(str::to_string))
            .collect();
        return exec(target, cmd).await;
    }
    // gRPC probes are not run; they count as passing.
    Ok(())
}

/// An `exec` probe's command as one line, the way the kubelet quotes it.
fn command_line(probe: &Value) -> String {
    probe
        .pointer("/exec/command")
        .and_then(Value::as_array)
        .map(|c| {
            c.iter()
                .filter_map(Value::as_str)
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_default()
}

/// A TCP connection, or Go's wording of why there is none: `dial tcp 10.0.0.5:8080: connect:
/// connection refused`.
async fn dial(host: &str, port: u16) -> Result<tokio::net::TcpStream, String> {
    tokio::net::TcpStream::connect((host, port))
        .await
        .map_err(|e| format!("dial tcp {host}:{port}: connect: {}", os_error(&e)))
}

/// An OS error as Go prints it: the C library's text in lower case, without Rust's `(os error N)`.
fn os_error(e: &std::io::Error) -> String {
    let text = e.to_string();
    let text = match text.find(" (os error") {
        Some(at) => &text[..at],
        None => text.as_str(),
    };
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_lowercase().chain(chars).collect(),
        None => text.to_string(),
    }
}

/// A port number, or the number of a named container port.
fn port(target: &Target, port: &Value) -> Option<u16> {
    if let Some(n) = port.as_u64() {
        return u16::try_from(n).ok();
    }
    let name = port.as_str()?;
    if let Ok(n) = name.parse() {
        return Some(n);
    }
    target.container["ports"]
        .as_array()?
        .iter()
        .find(|p| p["name"] == name)
        .and_then(|p| p["containerPort"].as_u64())
        .and_then(|n| u16::try_from(n).ok())
}

/// Asks for `path`: the answer's status, or why there is none.
async fn http_get(host: &str, port: u16, path: &str, headers: &Value) -> Result<u16, String> {
    let stream = dial(host, port).await?;
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake::<_, Empty<Bytes>>(TokioIo::new(stream))
            .await
            .map_err(|e| e.to_string())?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    let mut req = http::Request::get(path)
        .header(http::header::HOST, format!("{host}:{port}"))
        .header(http::header::USER_AGENT, "kube-probe/1.32");
    if let Some(hs) = headers.as_array() {
        for h in hs {
            if let (Some(n), Some(v)) = (h["name"].as_str(), h["value"].as_str()) {
                req = req.header(n, v);
            }
        }
    }
    let req = req.body(Empty::new()).map_err(|e| e.to_string())?;
    let answer = sender.send_request(req).await.map_err(|e| e.to_string())?;
    Ok(answer.status().as_u16())
}

/// Runs `cmd` in the container; `Err` is what it printed when it exits non-zero, as the kubelet's
/// exec prober reports it.
async fn exec(target: &Target, cmd: Vec<String>) -> Result<(), String> {
    let options = CreateExecOptions {
        cmd: Some(cmd),
        attach_stdout: Some(true),
        attach_stderr: Some(true),
        ..CreateExecOptions::default()
    };
    let created = target
        .docker
        .create_exec(&target.container_id, options)
        .await
        .map_err(|e| e.to_string())?;
    let started = target
        .docker
        .start_exec(&created.id, None::<StartExecOptions>)
        .await
        .map_err(|e| e.to_string())?;
    let mut printed = Vec::new();
    if let StartExecResults::Attached { mut output, .. } = started {
        while let Some(Ok(chunk)) = output.next().await {
            printed.extend_from_slice(&chunk.into_bytes());
        }
    }
    let code = loop {
        match target.docker.inspect_exec(&created.id).await {
            Ok(r) if r.running == Some(true) => {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Ok(r) => break r.exit_code,
            Err(e) => return Err(e.to_string()),
        }
    };
    if code == Some(0) {
        return Ok(());
    }
    Err(String::from_utf8_lossy(&printed).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probes_tick_on_the_schedule_that_started_with_the_pod() {
        let from = Instant::now();
        let period = Duration::from_secs(1);
        let at = |ms| from + Duration::from_millis(ms);
        // A container that started 700 ms into the pod's life is probed again at 1 s, not at 1.7 s.
        assert_eq!(next_tick(from, at(700), period), at(1000));
        assert_eq!(next_tick(from, at(1000), period), at(2000));
        assert_eq!(next_tick(from, at(2300), period), at(3000));
        // A start before the schedule's origin (a clock read late) waits for its first tick.
        assert_eq!(next_tick(at(500), from, period), at(1500));
    }
}
