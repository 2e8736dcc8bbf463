//! Readiness and liveness probes against real containers: `httpGet` and `tcpSocket` to the container's
//! address on the pod network, `exec` through the engine. Timing follows the probe's
//! `initialDelaySeconds`, `periodSeconds`, `timeoutSeconds`, `successThreshold` and `failureThreshold`.

use std::sync::Arc;
use std::time::Duration;

use bollard::Docker;
use bollard::exec::{CreateExecOptions, StartExecOptions};
use bytes::Bytes;
use http_body_util::Empty;
use hyper_util::rt::TokioIo;
use serde_json::Value;
use tokio::sync::watch;
use tokio::time::Instant;

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

fn seconds(probe: &Value, field: &str, default: f64) -> Duration {
    Duration::from_secs_f64(probe[field].as_f64().unwrap_or(default).max(0.0))
}

fn count(probe: &Value, field: &str, default: u64) -> u64 {
    probe[field].as_u64().unwrap_or(default).max(1)
}

/// Keeps `ready` up to date with a readiness probe until aborted; `ready` changes only when the result
/// does, and its receivers are woken then.
///
/// As the kubelet's prober: the container's start triggers a probe at once, and the others come on a
/// ticker of `periodSeconds` that started when the kubelet took the pod up (`ticks_from`), not with the
/// container; no probe runs before `initialDelaySeconds` after the start. So a probe that fails because
/// the app is not listening yet is followed within a period, not a whole period later.
pub async fn readiness(
    target: Target,
    probe: Value,
    ready: Arc<watch::Sender<bool>>,
    ticks_from: Instant,
) {
    let started = Instant::now();
    let initial_delay = seconds(&probe, "initialDelaySeconds", 0.0);
    let period = seconds(&probe, "periodSeconds", 10.0).max(Duration::from_millis(100));
    let (successes_needed, failures_allowed) = (
        count(&probe, "successThreshold", 1),
        count(&probe, "failureThreshold", 3),
    );
    let (mut successes, mut failures) = (0, 0);
    let set = |value: bool| {
        ready.send_if_modified(|ready| std::mem::replace(ready, value) != value);
    };
    loop {
        if started.elapsed() >= initial_delay {
            if once(&target, &probe).await {
                successes += 1;
                failures = 0;
                if successes >= successes_needed {
                    set(true);
                }
            } else {
                failures += 1;
                successes = 0;
                if failures >= failures_allowed || !*ready.borrow() {
                    set(false);
                }
            }
        }
        tokio::time::sleep_until(next_tick(ticks_from, Instant::now(), period)).await;
    }
}

/// The first tick of a ticker of `period` started at `from` that comes after `now`.
fn next_tick(from: Instant, now: Instant, period: Duration) -> Instant {
    let elapsed = now.saturating_duration_since(from).as_nanos();
    let ticks = elapsed / period.as_nanos() + 1;
    let after = period.as_nanos() * ticks;
    from + Duration::from_nanos(u64::try_from(after).unwrap_or(u64::MAX))
}

/// Kills the container once its liveness probe fails `failureThreshold` times in a row.
pub async fn liveness(target: Target, probe: Value) {
    tokio::time::sleep(seconds(&probe, "initialDelaySeconds", 0.0)).await;
    let period = seconds(&probe, "periodSeconds", 10.0);
    let failures_allowed = count(&probe, "failureThreshold", 3);
    let mut failures = 0;
    loop {
        if once(&target, &probe).await {
            failures = 0;
        } else {
            failures += 1;
            if failures >= failures_allowed {
                tracing::info!(container = %target.container_id, "liveness probe failed; killing the container");
                super::DockerRuntime::kill(&target.docker, &target.container_id).await;
                return;
            }
        }
        tokio::time::sleep(period).await;
    }
}

/// Runs a probe once within its `timeoutSeconds`.
/// Runs a lifecycle hook's handler (`exec` or `httpGet`) against the container, as the kubelet runs
/// `preStop`; `Err` says what failed, worded like the kubelet's hook errors.
pub async fn hook(target: &Target, handler: &Value) -> Result<(), String> {
    if handler.get("tcpSocket").is_some() {
        return Err("TCPSocket is not supported as a lifecycle handler".to_string());
    }
    if attempt(target, handler).await {
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

async fn once(target: &Target, probe: &Value) -> bool {
    let timeout = seconds(probe, "timeoutSeconds", 1.0).max(Duration::from_millis(100));
    tokio::time::timeout(timeout, attempt(target, probe))
        .await
        .unwrap_or(false)
}

async fn attempt(target: &Target, probe: &Value) -> bool {
    if let Some(http) = probe.get("httpGet") {
        let Some(port) = port(target, &http["port"]) else {
            return false;
        };
        let host = http["host"]
            .as_str()
            .map(str::to_string)
            .or_else(|| target.ip.clone());
        let Some(host) = host else { return false };
        let path = http["path"].as_str().unwrap_or("/");
        return http_get(&host, port, path, &http["httpHeaders"]).await;
    }
    if let Some(tcp) = probe.get("tcpSocket") {
        let (Some(port), Some(host)) = (
            port(target, &tcp["port"]),
            tcp["host"]
                .as_str()
                .map(str::to_string)
                .or_else(|| target.ip.clone()),
        ) else {
            return false;
        };
        return tokio::net::TcpStream::connect((host.as_str(), port))
            .await
            .is_ok();
    }
    if let Some(command) = probe.pointer("/exec/command").and_then(Value::as_array) {
        let cmd: Vec<String> = command
            .iter()
            .filter_map(|c| c.as_str().map(str::to_string))
            .collect();
        return exec(target, cmd).await;
    }
    // gRPC probes are not run; they count as passing.
    true
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

async fn http_get(host: &str, port: u16, path: &str, headers: &Value) -> bool {
    let Ok(stream) = tokio::net::TcpStream::connect((host, port)).await else {
        return false;
    };
    let Ok((mut sender, conn)) =
        hyper::client::conn::http1::handshake::<_, Empty<Bytes>>(TokioIo::new(stream)).await
    else {
        return false;
    };
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
    let Ok(req) = req.body(Empty::new()) else {
        return false;
    };
    match sender.send_request(req).await {
        Ok(resp) => (200..400).contains(&resp.status().as_u16()),
        Err(_) => false,
    }
}

async fn exec(target: &Target, cmd: Vec<String>) -> bool {
    let options = CreateExecOptions {
        cmd: Some(cmd),
        attach_stdout: Some(false),
        attach_stderr: Some(false),
        ..CreateExecOptions::default()
    };
    let Ok(created) = target
        .docker
        .create_exec(&target.container_id, options)
        .await
    else {
        return false;
    };
    let start = StartExecOptions {
        detach: true,
        ..StartExecOptions::default()
    };
    if target
        .docker
        .start_exec(&created.id, Some(start))
        .await
        .is_err()
    {
        return false;
    }
    loop {
        match target.docker.inspect_exec(&created.id).await {
            Ok(r) if r.running == Some(true) => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Ok(r) => return r.exit_code == Some(0),
            Err(_) => return false,
        }
    }
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
