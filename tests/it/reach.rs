//! Reaching what runs: port forwards that follow a rollout, `dev logs
//! --follow` picking up pods that start later, and pods calling a process
//! on the host as `host.docker.internal`. The real engine and registry, a
//! kube-sim node whose pods run as containers.

use std::{
    io::{Read, Write},
    net::TcpStream,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use dev_env::{
    config::PortForward,
    forward,
    logs::{self, LogLine, LogOptions},
};
use dev_env_tests::{Recorder, SimProject, free_port, runtime, up};
use xshell::{Shell, cmd};

use crate::deliver::{App, push};

/// The body of `GET path` on 127.0.0.1:`port`, or why there is none.
fn get(port: u16, path: &str) -> Result<String, String> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(|e| e.to_string())?;
    write!(stream, "GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n").map_err(|e| e.to_string())?;
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    match answer.split_once("\r\n\r\n") {
        Some((_, body)) => Ok(body.to_string()),
        None => Err(format!("no HTTP answer: {answer:?}")),
    }
}

/// `GET path` until it answers `want`, for at most `deadline`; the last
/// answer otherwise.
fn get_until(port: u16, path: &str, want: &str, deadline: Duration) -> Result<String, String> {
    let end = Instant::now() + deadline;
    loop {
        let got = get(port, path);
        if got.as_deref() == Ok(want) || Instant::now() > end {
            return got;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Waits until `lines` holds one matching `found`, for at most `deadline`.
fn wait_for_line(
    lines: &Mutex<Vec<LogLine>>,
    deadline: Duration,
    found: impl Fn(&LogLine) -> bool,
) -> Option<LogLine> {
    let end = Instant::now() + deadline;
    while Instant::now() < end {
        if let Some(line) = lines.lock().unwrap().iter().find(|l| found(l)) {
            return Some(line.clone());
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    None
}

#[test]
fn forwards_and_followed_logs_move_to_the_pods_of_a_rollout() {
    let app = App::new();
    let port = free_port();
    let yaml = std::fs::read_to_string(app.dir.join("dev-env.yaml")).unwrap();
    app.write(
        "dev-env.yaml",
        &format!("{yaml}    forward: [\"{port}:8080\"]\n"),
    );
    let config = app.config();
    assert_eq!(
        config.components["app"].forward,
        [PortForward {
            local: port,
            remote: 8080
        }]
    );
    up(&config).expect("dev up builds, pushes and runs the component");
    let rt = runtime();

    // The declared forward answers with the version the pods run.
    let forwarder = rt
        .block_on(forward::bind(&config, "app", &[]))
        .expect("the declared port binds");
    let events = Recorder::default();
    let seen = events.clone();
    let forwarding = rt.spawn(async move { forwarder.run(&seen).await });
    assert_eq!(
        get_until(port, "/version", "v1", Duration::from_secs(30)),
        Ok(String::from("v1"))
    );

    // A taken port fails at once, naming the port and the component.
    let holder = std::net::TcpListener::bind(("127.0.0.1", 0)).unwrap();
    let taken = holder.local_addr().unwrap().port();
    let started = Instant::now();
    let refused = rt.block_on(forward::bind(
        &config,
        "app",
        &[PortForward {
            local: taken,
            remote: 8080,
        }],
    ));
    let Err(err) = refused else {
        panic!("a taken port must fail")
    };
    let message = err.to_string();
    assert!(
        matches!(err, forward::Error::PortTaken { port, .. } if port == taken),
        "{message}"
    );
    assert!(
        message.contains(&format!("127.0.0.1:{taken}")) && message.contains("`app`"),
        "{message}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );

    // `dev logs --follow` of every component, started before the rollout.
    let lines = Arc::new(Mutex::new(Vec::<LogLine>::new()));
    let (kept, follow_config) = (lines.clone(), config.clone());
    let following = rt.spawn(async move {
        let sink = move |line: &LogLine| kept.lock().unwrap().push(line.clone());
        let options = LogOptions {
            follow: true,
            ..LogOptions::default()
        };
        logs::stream(&follow_config, &[], options, &sink).await
    });
    let first = wait_for_line(&lines, Duration::from_secs(30), |l| {
        l.component == "app" && l.text.contains("app v1 listening")
    })
    .expect("the running pods' lines");
    let before: Vec<String> = lines
        .lock()
        .unwrap()
        .iter()
        .map(|l| l.pod.clone())
        .collect();
    assert!(before.contains(&first.pod));

    // A changed worker rolls out; the same forward now reaches it.
    app.source("v2", false);
    let changed = push(&config);
    assert_eq!(changed.error, None, "{changed:?}");
    assert_eq!(
        get_until(port, "/version", "v2", Duration::from_secs(30)),
        Ok(String::from("v2"))
    );
    assert!(!forwarding.is_finished(), "the forward kept running");
    let targets = events.lines.lock().unwrap().clone();
    assert!(
        changed
            .pods
            .iter()
            .any(|p| targets.contains(&format!("forward  app: to pod {p}"))),
        "{targets:?} / {:?}",
        changed.pods
    );

    // The followed logs show a pod that started after the command did.
    let later = wait_for_line(&lines, Duration::from_secs(30), |l| {
        l.text.contains("app v2 listening") && !before.contains(&l.pod)
    })
    .expect("lines of a pod started by the rollout");
    assert!(changed.pods.contains(&later.pod), "{later:?} {changed:?}");
    assert!(!following.is_finished(), "logs --follow kept running");
    forwarding.abort();
    following.abort();
}

/// A static client: reads `host.docker.internal` from `/etc/hosts` as the
/// resolver's `files` source does (the image has no NSS modules), fetches
/// `/` on `port` there until it answers, and prints the answer.
fn host_client(port: u16) -> String {
    r#"use std::io::{Read, Write};

fn host() -> Option<String> {
    let hosts = std::fs::read_to_string("/etc/hosts").ok()?;
    hosts.lines().filter_map(|l| {
        let mut f = l.split_whitespace();
        let ip = f.next()?;
        f.any(|n| n == "host.docker.internal").then(|| ip.to_string())
    }).last()
}

fn main() {
    loop {
        match host() {
            None => println!("no host.docker.internal in /etc/hosts"),
            Some(ip) => match std::net::TcpStream::connect((ip.as_str(), PORT)) {
                Ok(mut s) => {
                    let _ = s.write_all(b"GET / HTTP/1.0\r\nHost: host.docker.internal\r\n\r\n");
                    let mut answer = String::new();
                    let _ = s.read_to_string(&mut answer);
                    if let Some((_, body)) = answer.split_once("\r\n\r\n") {
                        println!("answer from {ip}: {body}");
                        break;
                    }
                }
                Err(e) => println!("{ip}:PORT not yet: {e}"),
            },
        }
        std::thread::sleep(std::time::Duration::from_millis(300));
    }
    std::thread::sleep(std::time::Duration::from_secs(86400));
}
"#
    .replace("PORT", &port.to_string())
}

#[test]
fn pods_reach_a_listener_on_the_host_as_host_docker_internal() {
    let env = SimProject::with_component("host");
    let port = free_port();
    env.write("app/src/main.rs", &host_client(port));
    let config = env.config();
    up(&config).expect("dev up runs the client");

    let sh = Shell::new().unwrap();
    let network = &env.name;
    let format = "{{(index .IPAM.Config 0).Gateway}}";
    let gateway = cmd!(sh, "docker network inspect -f {format} {network}")
        .read()
        .unwrap();
    let status = runtime()
        .block_on(dev_env::status::status(&config))
        .expect("dev status");
    assert_eq!(
        status.network.and_then(|n| n.host_gateway),
        Some(gateway.clone()),
        "dev status reports the address pods reach the host at"
    );

    // A listener on the host, bound to the network's gateway only.
    let listener = std::net::TcpListener::bind((gateway.as_str(), port)).unwrap();
    let nonce = format!("hello-{}", std::process::id());
    let reply = nonce.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut s) = stream else { continue };
            let mut buf = [0u8; 1024];
            let _ = s.read(&mut buf);
            let _ = write!(
                s,
                "HTTP/1.0 200 OK\r\ncontent-length: {}\r\n\r\n{reply}",
                reply.len()
            );
        }
    });

    let kc = config.state_dir().join("kubeconfig.host");
    let want = format!("answer from {gateway}: {nonce}");
    let end = Instant::now() + Duration::from_secs(60);
    let mut logs = String::new();
    while Instant::now() < end && !logs.contains(&want) {
        std::thread::sleep(Duration::from_millis(500));
        logs = cmd!(sh, "kubectl --kubeconfig {kc} -n app logs deploy/app")
            .ignore_status()
            .read()
            .unwrap_or_default();
    }
    assert!(
        logs.contains(&want),
        "want {want:?} in the pod's logs:\n{logs}"
    );
}
