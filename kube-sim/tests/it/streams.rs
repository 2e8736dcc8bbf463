//! `kubectl port-forward` and `kubectl exec` against pods of the Docker kubelet: real containers of the
//! test app (see `docker_kubelet`), reached through kube-sim's SPDY and WebSocket upgrades.

use std::io::{BufRead as _, BufReader, Write as _};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use futures::SinkExt as _;
use k8s_openapi::api::core::v1::{Pod, Service};
use kube_sim::{GroupResource, Sim};
use serde_json::json;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

use crate::KUBECTL;
use crate::docker_kubelet::{DEADLINE, Fixture, create_pod, ready};
use crate::rollout::{applied, until, watch};

/// How long one forwarded request or one kubectl command may take.
const STEP: Duration = Duration::from_secs(30);

/// Starts a pod of the test app serving on 8080 and waits until it is ready.
async fn serving_pod(fx: &Fixture, sim: &Sim, name: &str) {
    let mut pods = watch(&sim.store().clone(), &GroupResource::pods(), None);
    create_pod(
        sim,
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default", "labels": {"app": name}},
            "spec": {"containers": [{"name": "app", "image": fx.image("demo/app"),
                "ports": [{"containerPort": 8080}],
                "readinessProbe": {"tcpSocket": {"port": 8080}, "periodSeconds": 1}}]}}),
    )
    .await;
    until(&mut pods, DEADLINE, "the pod is ready", |e| {
        let p = applied(e)?;
        (p["metadata"]["name"] == name && ready(p)).then_some(())
    })
    .await;
}

/// Starts `command` and reads the first line it prints, within [`STEP`]; the rest of its output is
/// read and dropped until it exits (kubectl dies of SIGPIPE when its stdout closes).
async fn first_line(mut command: Command) -> (Child, Option<String>) {
    let mut child = command
        .stdout(Stdio::piped())
        .spawn()
        .expect("kubectl runs");
    let stdout = child.stdout.take().expect("kubectl's stdout");
    let line = tokio::time::timeout(
        STEP,
        tokio::task::spawn_blocking(move || {
            let mut reader = BufReader::new(stdout);
            let mut line = String::new();
            let _ = reader.read_line(&mut line);
            std::thread::spawn(move || std::io::copy(&mut reader, &mut std::io::sink()));
            line
        }),
    )
    .await
    .ok()
    .map(|read| read.expect("the reading task does not panic"));
    (child, line)
}

/// A running `kubectl port-forward`, killed on drop.
struct PortForward {
    child: Option<Child>,
    local: u16,
}

impl PortForward {
    /// Starts `kubectl port-forward <target> :<remote>` and waits for its "Forwarding from" line, which
    /// names the local port kubectl chose. kubectl tunnels SPDY in WebSocket unless `websockets` is false
    /// (then it upgrades to SPDY directly).
    async fn start(sim: &Sim, target: &str, remote: u16, websockets: bool) -> PortForward {
        let mut command = Command::new(KUBECTL);
        command
            .args(["port-forward", target, &format!(":{remote}")])
            .env("KUBECONFIG", sim.kubeconfig_path())
            .env("KUBECTL_PORT_FORWARD_WEBSOCKETS", websockets.to_string())
            .stderr(Stdio::piped());
        let (child, line) = first_line(command).await;
        let line = line.expect("kubectl port-forward says it forwards within the deadline");
        let local = line
            .strip_prefix("Forwarding from 127.0.0.1:")
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|port| port.parse().ok());
        let mut forward = PortForward {
            child: Some(child),
            local: local.unwrap_or(0),
        };
        if local.is_none() {
            let out = forward.finish().await;
            panic!(
                "kubectl port-forward did not start: {line}{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        forward
    }

    /// Waits for kubectl to exit by itself within the deadline (killing it otherwise) and returns its
    /// output.
    async fn finish(&mut self) -> Output {
        let child = self.child.take().expect("kubectl port-forward runs");
        let waited = tokio::time::timeout(
            STEP,
            tokio::task::spawn_blocking(move || child.wait_with_output()),
        )
        .await;
        waited
            .expect("kubectl port-forward exits within the deadline")
            .expect("the waiting task does not panic")
            .expect("kubectl's output")
    }
}

impl Drop for PortForward {
    fn drop(&mut self) {
        if let Some(child) = self.child.as_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Sends one `GET <path>` with `Connection: close` to the local port and reads the whole answer.
async fn try_get(local: u16, path: &str) -> std::io::Result<String> {
    let exchange = async {
        let mut tcp = TcpStream::connect(("127.0.0.1", local)).await?;
        let request = format!("GET {path} HTTP/1.1\r\nHost: pod\r\nConnection: close\r\n\r\n");
        tcp.write_all(request.as_bytes()).await?;
        let mut answer = Vec::new();
        tcp.read_to_end(&mut answer).await?;
        Ok::<_, std::io::Error>(String::from_utf8_lossy(&answer).into_owned())
    };
    tokio::time::timeout(STEP, exchange)
        .await
        .unwrap_or_else(|_| panic!("GET {path} through the forward did not finish within {STEP:?}"))
}

/// [`try_get`] that must succeed.
async fn get(local: u16, path: &str) -> String {
    try_get(local, path)
        .await
        .unwrap_or_else(|e| panic!("GET {path} through the forward failed: {e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_port_forward_reaches_the_pods_port_tunnelled_or_not_and_reports_a_closed_one() {
    let fx = Fixture::start().await;
    let sim = fx.sim().await;
    serving_pod(&fx, &sim, "web").await;

    let forward = PortForward::start(&sim, "pod/web", 8080, true).await;
    for path in ["/first", "/second"] {
        let answer = get(forward.local, path).await;
        assert!(answer.starts_with("HTTP/1.1 200 OK"), "{path}: {answer}");
        assert!(answer.ends_with(&format!("ok {path}")), "{path}: {answer}");
    }
    // A body of many data frames.
    let answer = get(forward.local, "/big").await;
    let body = answer.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or("");
    assert_eq!(body.len(), 1 << 20, "the whole body arrives");
    drop(forward);

    // kubectl resolves a service to one of its pods and the service port to the container port; this
    // time it upgrades to SPDY without the WebSocket tunnel.
    let services: kube::Api<Service> =
        kube::Api::namespaced(sim.client().await.expect("a client"), "default");
    let service = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
        "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": 8080}]}});
    services
        .create(
            &kube::api::PostParams::default(),
            &serde_json::from_value(service).expect("a service"),
        )
        .await
        .expect("the service is created");
    let forward = PortForward::start(&sim, "svc/web", 80, false).await;
    let answer = get(forward.local, "/through-the-service").await;
    assert!(answer.ends_with("ok /through-the-service"), "{answer}");
    drop(forward);

    // Nothing listens on 9999: the connection ends, and kubectl reports the kubelet's error.
    let mut closed = PortForward::start(&sim, "pod/web", 9999, true).await;
    // kubectl closes the local connection, or resets it when the request was still unread.
    let answer = try_get(closed.local, "/nothing").await;
    assert!(
        answer.as_ref().is_ok_and(String::is_empty) || answer.is_err(),
        "nothing answers on a closed port: {answer:?}"
    );
    let out = closed.finish().await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("error forwarding port 9999 to pod default/web"),
        "{stderr}"
    );
    assert!(!out.status.success(), "kubectl fails: {stderr}");
    sim.shutdown().await;
}

/// Runs `kubectl exec` with `stdin` as its input, over WebSocket unless `websockets` is false (then
/// over SPDY).
async fn kubectl_exec_over(sim: &Sim, args: &[&str], stdin: &[u8], websockets: bool) -> Output {
    let mut child = Command::new(KUBECTL)
        .arg("exec")
        .args(args)
        .env("KUBECONFIG", sim.kubeconfig_path())
        .env("KUBECTL_REMOTE_COMMAND_WEBSOCKETS", websockets.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubectl runs");
    let mut input = child.stdin.take().expect("kubectl's stdin");
    let stdin = stdin.to_vec();
    let shown = args.join(" ");
    let run = tokio::task::spawn_blocking(move || {
        input.write_all(&stdin).expect("kubectl reads stdin");
        drop(input);
        child.wait_with_output()
    });
    tokio::time::timeout(STEP, run)
        .await
        .unwrap_or_else(|_| panic!("kubectl exec {shown} did not finish within {STEP:?}"))
        .expect("the kubectl task does not panic")
        .expect("kubectl's output")
}

/// Runs `kubectl exec` over WebSocket with `stdin` as its input.
async fn kubectl_exec(sim: &Sim, args: &[&str], stdin: &[u8]) -> Output {
    kubectl_exec_over(sim, args, stdin, true).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_exec_runs_commands_in_the_container_with_their_output_stdin_and_exit_code_over_websocket_and_spdy()
 {
    let fx = Fixture::start().await;
    let sim = fx.sim().await;
    serving_pod(&fx, &sim, "web").await;

    let out = kubectl_exec(&sim, &["web", "--", "/app", "echo", "hello", "world"], b"").await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "hello world\n");

    let out = kubectl_exec(&sim, &["web", "--", "/app", "fail", "3"], b"").await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(stderr.contains("failing with 3"), "{stderr}");

    let out = kubectl_exec(&sim, &["-i", "web", "--", "/app", "cat"], b"piped\ninput\n").await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "piped\ninput\n");

    // The same over SPDY, as kubectl before 1.30 speaks it.
    let over_spdy = |args: &'static [&'static str], stdin: &'static [u8]| {
        kubectl_exec_over(&sim, args, stdin, false)
    };
    let out = over_spdy(&["web", "--", "/app", "echo", "over", "spdy"], b"").await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "over spdy\n");
    let out = over_spdy(&["web", "--", "/app", "fail", "5"], b"").await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(5), "{stderr}");
    assert!(stderr.contains("failing with 5"), "{stderr}");
    let out = over_spdy(&["-i", "web", "--", "/app", "cat"], b"spdy\nstdin\n").await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "spdy\nstdin\n");

    // A command the image does not have: the runtime's error and its exit code, not a hang.
    let out = kubectl_exec(&sim, &["web", "--", "/no-such-binary"], b"").await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        matches!(out.status.code(), Some(code) if code > 1),
        "{:?}: {stderr}",
        out.status
    );
    // The engine writes its error into the command's output.
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("no-such-binary"), "{stdout} / {stderr}");

    let out = kubectl_exec(&sim, &["web", "-c", "nope", "--", "/app", "echo"], b"").await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("container nope is not valid for pod web"),
        "{stderr}"
    );
    sim.shutdown().await;
    fx.until_no_containers("after shutdown").await;
}

/// Runs a command in a terminal that kube-rs resizes to 123x45, returning what it printed.
async fn resized_terminal(pods: &kube::Api<Pod>) -> String {
    use kube::api::{AttachParams, TerminalSize};

    let mut size = pods
        .exec(
            "web",
            ["/app", "size", "123"],
            &AttachParams::interactive_tty(),
        )
        .await
        .expect("exec starts");
    let mut resize = size.terminal_size().expect("a terminal");
    resize
        .send(TerminalSize {
            width: 123,
            height: 45,
        })
        .await
        .expect("the size is sent");
    let mut output = String::new();
    let mut stdout = size.stdout().expect("stdout");
    stdout
        .read_to_string(&mut output)
        .await
        .expect("stdout is read");
    output
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_rs_exec_streams_stdin_stdout_and_terminal_sizes_and_reports_the_exit_status() {
    use kube::api::AttachParams;

    let fx = Fixture::start().await;
    let sim = fx.sim().await;
    serving_pod(&fx, &sim, "web").await;
    let pods: kube::Api<Pod> =
        kube::Api::namespaced(sim.client().await.expect("a client"), "default");

    let session = async {
        let params = AttachParams::default().stdin(true).stderr(false);
        let mut cat = pods
            .exec("web", ["/app", "cat"], &params)
            .await
            .expect("exec starts");
        let mut stdin = cat.stdin().expect("stdin");
        stdin
            .write_all(b"from kube-rs\n")
            .await
            .expect("stdin is written");
        stdin.shutdown().await.expect("stdin is closed");
        let mut stdout = cat.stdout().expect("stdout");
        let mut output = String::new();
        stdout
            .read_to_string(&mut output)
            .await
            .expect("stdout is read");
        let status = cat.take_status().expect("a status").await;
        (output, status)
    };
    let (output, status) = tokio::time::timeout(STEP, session)
        .await
        .expect("the kube-rs exec finishes within the deadline");
    assert_eq!(output, "from kube-rs\n");
    assert_eq!(status.and_then(|s| s.status).as_deref(), Some("Success"));

    let output = tokio::time::timeout(STEP, resized_terminal(&pods))
        .await
        .expect("the terminal exec finishes within the deadline");
    assert_eq!(output.trim(), "45 123");

    let failing = async {
        let mut fail = pods
            .exec("web", ["/app", "fail", "4"], &AttachParams::default())
            .await
            .expect("exec starts");
        fail.take_status().expect("a status").await
    };
    let status = tokio::time::timeout(STEP, failing)
        .await
        .expect("the failing exec finishes within the deadline")
        .expect("a status");
    let cause = &status.details.expect("details").causes.expect("causes")[0];
    assert_eq!(
        (cause.reason.as_deref(), cause.message.as_deref()),
        (Some("ExitCode"), Some("4")),
        "{:?}",
        status.message
    );
    sim.shutdown().await;
}

/// Runs `kubectl attach -i <pod>` with `input` as its stdin, until kubectl ends.
async fn kubectl_attach_with_input(sim: &Sim, pod: &str, input: &'static [u8]) -> Output {
    let mut child = Command::new(KUBECTL)
        .args(["attach", "-i", pod])
        .env("KUBECONFIG", sim.kubeconfig_path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubectl runs");
    let mut stdin = child.stdin.take().expect("kubectl's stdin");
    let run = tokio::task::spawn_blocking(move || {
        stdin.write_all(input).expect("kubectl reads stdin");
        drop(stdin);
        child.wait_with_output()
    });
    tokio::time::timeout(STEP, run)
        .await
        .expect("kubectl attach -i ends with the process within the deadline")
        .expect("the kubectl task does not panic")
        .expect("kubectl's output")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_attach_streams_the_main_process_output_and_feeds_its_stdin() {
    let fx = Fixture::start().await;
    let sim = fx.sim().await;
    let mut pods = watch(&sim.store().clone(), &GroupResource::pods(), None);
    create_pod(
        &sim,
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "ticker", "namespace": "default"},
            "spec": {"containers": [{"name": "app", "image": fx.image("demo/app"), "args": ["tick"]}]}}),
    )
    .await;
    until(&mut pods, DEADLINE, "the ticker is ready", |e| {
        applied(e).filter(|p| ready(p)).map(|_| ())
    })
    .await;
    let mut command = Command::new(KUBECTL);
    command
        .args(["attach", "ticker"])
        .env("KUBECONFIG", sim.kubeconfig_path())
        .stderr(Stdio::null());
    let (mut child, line) = first_line(command).await;
    let _ = child.kill();
    let _ = child.wait();
    let line = line.expect("kubectl attach prints within the deadline");
    assert!(line.starts_with("tick "), "{line:?}");

    // With `stdin` and `stdinOnce`, the attached client's stdin reaches the main process and its end
    // closes it.
    create_pod(
        &sim,
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "reader", "namespace": "default"},
            "spec": {"restartPolicy": "Never", "containers": [{"name": "app", "image": fx.image("demo/app"),
                "args": ["cat"], "stdin": true, "stdinOnce": true}]}}),
    )
    .await;
    until(&mut pods, DEADLINE, "the reader runs", |e| {
        applied(e)
            .filter(|p| p["metadata"]["name"] == "reader" && ready(p))
            .map(|_| ())
    })
    .await;
    let out = kubectl_attach_with_input(&sim, "reader", b"attached input\n").await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("attached input"),
        "{stdout} / {}",
        String::from_utf8_lossy(&out.stderr)
    );
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_rs_port_forward_speaks_the_websocket_channel_protocol_and_reports_a_closed_port() {
    let fx = Fixture::start().await;
    let sim = fx.sim().await;
    serving_pod(&fx, &sim, "web").await;
    let pods: kube::Api<Pod> =
        kube::Api::namespaced(sim.client().await.expect("a client"), "default");

    let session = async {
        let mut forwarder = pods
            .portforward("web", &[8080])
            .await
            .expect("the upgrade is accepted");
        let mut stream = forwarder.take_stream(8080).expect("a stream for 8080");
        stream
            .write_all(b"GET /kube-rs HTTP/1.0\r\nHost: web\r\n\r\n")
            .await
            .expect("the request is sent");
        let mut answer = String::new();
        stream
            .read_to_string(&mut answer)
            .await
            .expect("the answer is read");
        drop(stream);
        // The server closed the WebSocket when the pod closed the connection, as the kubelet does;
        // kube-rs then fails to send its own close, which is not the server's doing.
        forwarder.abort();
        answer
    };
    let answer = tokio::time::timeout(STEP, session)
        .await
        .expect("the forward answers within the deadline");
    assert!(answer.starts_with("HTTP/1.1 200 OK"), "{answer}");
    assert!(answer.ends_with("ok /kube-rs"), "{answer}");

    // Nothing listens on 9999: the error channel carries the kubelet's message.
    let closed = async {
        let mut forwarder = pods.portforward("web", &[9999]).await.expect("the upgrade");
        let error = forwarder.take_error(9999).expect("an error channel");
        error.await
    };
    let error = tokio::time::timeout(STEP, closed)
        .await
        .expect("the error arrives within the deadline");
    assert!(
        error
            .as_deref()
            .is_some_and(|e| e.contains("error forwarding port 9999 to pod default/web")),
        "{error:?}"
    );
    sim.shutdown().await;
}
