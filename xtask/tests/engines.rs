//! The engine found as the Docker CLI finds it, with the real binary
//! against this machine's engine: through a Docker context in a
//! `DOCKER_CONFIG` of the test's own, through `DOCKER_HOST=tcp://…`
//! forwarded by the test to the engine's socket, and a context whose
//! socket is missing.

use std::{
    io::{Read, Write},
    net::{Shutdown, TcpListener, TcpStream},
    os::unix::net::UnixStream,
    path::{Path, PathBuf},
    process::{Command, Output},
};

use dev_env_tests::SimProject;

/// The binary with `config`, the engine chosen only by `engine`'s
/// variables: `DOCKER_HOST` and `DOCKER_CONTEXT` of the test's own
/// environment are removed.
fn xtask(config: &Path, engine: &[(&str, &str)], args: &[&str]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_xtask"));
    command
        .arg("--config")
        .arg(config)
        .args(args)
        .env_remove("DEV_ENV_CONFIG")
        .env_remove("DOCKER_HOST")
        .env_remove("DOCKER_CONTEXT");
    for (key, value) in engine {
        command.env(key, value);
    }
    command.output().unwrap()
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The socket of this machine's engine, as the tests reach it.
fn engine_socket() -> PathBuf {
    std::env::var("DOCKER_HOST")
        .ok()
        .and_then(|h| h.strip_prefix("unix://").map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from("/var/run/docker.sock"))
}

/// Writes context `name` for `host` as `docker context create` does, and
/// makes it the current context of `config.json`.
fn use_context(docker_config: &Path, name: &str, host: &str) {
    let id = dev_env::docker::endpoint::context_id(name);
    let meta = docker_config.join("contexts/meta").join(id);
    std::fs::create_dir_all(&meta).unwrap();
    let context = serde_json::json!({
        "Name": name,
        "Metadata": {"Description": "made by the test"},
        "Endpoints": {"docker": {"Host": host, "SkipTLSVerify": false}},
    });
    std::fs::write(meta.join("meta.json"), context.to_string()).unwrap();
    let current = serde_json::json!({"auths": {}, "currentContext": name});
    std::fs::write(docker_config.join("config.json"), current.to_string()).unwrap();
}

/// A TCP port on 127.0.0.1 whose connections are carried to `socket`, as
/// `socat TCP-LISTEN:…,fork UNIX-CONNECT:…` would.
fn forward_tcp_to(socket: PathBuf) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for client in listener.incoming().flatten() {
            let Ok(engine) = UnixStream::connect(&socket) else {
                continue;
            };
            carry(client, engine);
        }
    });
    port
}

/// Copies bytes both ways until each side has closed its half.
fn carry(client: TcpStream, engine: UnixStream) {
    let (mut client_in, mut engine_out) =
        (client.try_clone().unwrap(), engine.try_clone().unwrap());
    std::thread::spawn(move || {
        pump(&mut client_in, &mut engine_out);
        let _ = engine_out.shutdown(Shutdown::Write);
    });
    let (mut engine_in, mut client_out) = (engine, client);
    std::thread::spawn(move || {
        pump(&mut engine_in, &mut client_out);
        let _ = client_out.shutdown(Shutdown::Write);
    });
}

fn pump(from: &mut impl Read, to: &mut impl Write) {
    let mut buffer = [0u8; 64 * 1024];
    while let Ok(n) = from.read(&mut buffer) {
        if n == 0 || to.write_all(&buffer[..n]).is_err() {
            break;
        }
    }
}

fn status(config: &Path, engine: &[(&str, &str)]) -> serde_json::Value {
    let out = xtask(config, engine, &["dev", "status", "--json"]);
    assert!(out.status.success(), "{}", text(&out));
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn a_docker_context_and_a_tcp_docker_host_reach_the_engine_and_status_names_them() {
    let env = SimProject::with_component("eng");
    let config = env.dir.join("dev-env.yaml");
    let docker_config = tempfile::tempdir().unwrap();
    let socket = engine_socket();
    use_context(
        docker_config.path(),
        "it-engine",
        &format!("unix://{}", socket.display()),
    );
    let in_context = [("DOCKER_CONFIG", docker_config.path().to_str().unwrap())];

    let up = xtask(&config, &in_context, &["dev", "up"]);
    assert!(up.status.success(), "{}", text(&up));
    let main = env.dir.join("app/src/main.rs");
    let source = std::fs::read_to_string(&main).unwrap();
    std::fs::write(&main, source.replace("86400", "86401")).unwrap();
    let push = xtask(&config, &in_context, &["push-image", "app"]);
    assert!(push.status.success(), "{}", text(&push));
    let seen = status(&config, &in_context);
    assert_eq!(seen["ok"], true, "{seen}");
    assert_eq!(seen["engine"]["context"], "it-engine", "{seen}");
    assert_eq!(
        seen["engine"]["endpoint"],
        format!("unix://{}", socket.display()),
        "{seen}"
    );
    let plain = xtask(&config, &in_context, &["dev", "status"]);
    assert!(
        text(&plain).contains("engine   Docker Engine at unix://")
            && text(&plain).contains("(context `it-engine`)"),
        "{}",
        text(&plain)
    );

    // The same environment through TCP: `DOCKER_HOST` wins over the
    // current context.
    let port = forward_tcp_to(socket);
    let host = format!("tcp://127.0.0.1:{port}");
    let over_tcp = [
        ("DOCKER_CONFIG", docker_config.path().to_str().unwrap()),
        ("DOCKER_HOST", host.as_str()),
    ];
    std::fs::write(&main, source.replace("86400", "86402")).unwrap();
    let push = xtask(&config, &over_tcp, &["push-image", "app", "--json"]);
    assert!(push.status.success(), "{}", text(&push));
    let pushed: serde_json::Value = serde_json::from_slice(&push.stdout).unwrap();
    assert!(pushed["components"][0]["digest"].is_string(), "{pushed}");
    let up = xtask(&config, &over_tcp, &["dev", "up"]);
    assert!(up.status.success(), "{}", text(&up));
    let seen = status(&config, &over_tcp);
    assert_eq!(seen["ok"], true, "{seen}");
    assert_eq!(seen["engine"]["endpoint"], host, "{seen}");
    assert_eq!(seen["engine"]["source"], "DOCKER_HOST", "{seen}");
    assert_eq!(seen["engine"]["context"], serde_json::Value::Null, "{seen}");

    let down = xtask(&config, &in_context, &["dev", "reset", "--purge"]);
    assert!(down.status.success(), "{}", text(&down));
}

#[test]
fn a_context_whose_socket_is_missing_fails_with_its_name_and_path() {
    let env = SimProject::with_config_map("gone");
    let config = env.dir.join("dev-env.yaml");
    let docker_config = tempfile::tempdir().unwrap();
    let missing = docker_config.path().join("no-engine/docker.sock");
    use_context(
        docker_config.path(),
        "laptop-vm",
        &format!("unix://{}", missing.display()),
    );
    let engine = [("DOCKER_CONFIG", docker_config.path().to_str().unwrap())];
    for args in [&["dev", "up"][..], &["dev", "status"]] {
        let out = xtask(&config, &engine, args);
        let said = text(&out);
        assert!(!out.status.success(), "{args:?}: {said}");
        assert!(said.contains("context `laptop-vm`"), "{args:?}: {said}");
        assert!(
            said.contains(&missing.display().to_string()),
            "{args:?}: {said}"
        );
    }
    let named = xtask(
        &config,
        &[
            ("DOCKER_CONFIG", docker_config.path().to_str().unwrap()),
            ("DOCKER_CONTEXT", "nowhere"),
        ],
        &["dev", "status"],
    );
    let said = text(&named);
    assert!(!named.status.success(), "{said}");
    assert!(
        said.contains("context `nowhere` (named by DOCKER_CONTEXT) does not exist"),
        "{said}"
    );
}
