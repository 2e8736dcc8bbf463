//! The built binary, run as a process: it serves, reports its build, and
//! exits with the status its supervisor expects.

use std::{
    io::{BufRead, BufReader, Read, Write},
    net::TcpStream,
    process::{Command, Stdio},
    sync::mpsc,
    time::Duration,
};

/// How long the process gets for each step.
const DEADLINE: Duration = Duration::from_secs(30);

fn worker() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_worker"));
    command
        .env_remove("BUILD_ID")
        .env_remove("WORKER_FAIL_AT_START")
        .env("PORT", "0")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    command
}

fn get(port: u16, path: &str) -> String {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream.set_read_timeout(Some(DEADLINE)).unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nhost: worker\r\nconnection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    response
}

#[test]
fn serves_logs_each_request_and_exits_zero_on_sigterm() {
    let mut child = worker().env("BUILD_ID", "from-env").spawn().unwrap();
    let (lines_tx, lines) = mpsc::channel();
    let stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            if lines_tx.send(line.unwrap()).is_err() {
                break;
            }
        }
    });

    let startup = lines.recv_timeout(DEADLINE).expect("a startup line");
    assert!(startup.contains("worker listening"), "{startup}");
    assert!(startup.contains("build_id=from-env"), "{startup}");
    let port: u16 = startup
        .split("address=0.0.0.0:")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|port| port.parse().ok())
        .unwrap_or_else(|| panic!("no port in {startup:?}"));

    assert!(get(port, "/healthz").ends_with("\r\n\r\nok\n"));
    assert!(get(port, "/version").ends_with("\r\n\r\nfrom-env\n"));
    for path in ["/healthz", "/version"] {
        let line = lines.recv_timeout(DEADLINE).expect("a request line");
        assert!(line.contains(&format!("path={path}")), "{line}");
        assert!(line.contains("status=200"), "{line}");
    }

    let killed = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(0), "exit status {status}");
}

#[test]
fn fail_at_start_exits_one_and_says_why() {
    let output = worker().env("WORKER_FAIL_AT_START", "1").output().unwrap();
    assert_eq!(output.status.code(), Some(1));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("WORKER_FAIL_AT_START"), "{stdout}");
}
