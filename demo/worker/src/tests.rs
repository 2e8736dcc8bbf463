use std::collections::HashMap;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::*;

fn settings(vars: &[(&str, &str)]) -> Result<Settings, String> {
    let vars: HashMap<String, String> = vars
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    Settings::from_vars(|name| vars.get(name).cloned())
}

#[test]
fn settings_default_to_port_8080_and_the_compiled_build_id() {
    let settings = settings(&[]).unwrap();
    assert_eq!(settings.port, 8080);
    assert_eq!(settings.build_id, COMPILED_BUILD_ID);
    assert!(!settings.fail_at_start);
}

#[test]
fn settings_come_from_the_environment() {
    let settings = settings(&[
        ("PORT", "9090"),
        ("BUILD_ID", "abc123"),
        ("WORKER_FAIL_AT_START", "1"),
    ])
    .unwrap();
    assert_eq!(
        settings,
        Settings {
            port: 9090,
            build_id: String::from("abc123"),
            fail_at_start: true,
        }
    );
}

#[test]
fn an_empty_build_id_falls_back_to_the_compiled_one() {
    assert_eq!(
        settings(&[("BUILD_ID", " ")]).unwrap().build_id,
        COMPILED_BUILD_ID
    );
}

#[test]
fn a_bad_port_is_an_error_that_names_the_variable() {
    let err = settings(&[("PORT", "http")]).unwrap_err();
    assert!(err.contains("PORT is `http`"), "{err}");
}

#[test]
fn the_compiled_build_id_is_a_source_hash_or_given() {
    let from_sources = COMPILED_BUILD_ID
        .strip_prefix("src-")
        .is_some_and(|hex| hex.len() == 16 && hex.bytes().all(|b| b.is_ascii_hexdigit()));
    assert!(
        from_sources || option_env!("WORKER_BUILD_ID").is_some(),
        "{COMPILED_BUILD_ID}"
    );
}

#[test]
fn routes() {
    let table = [
        (Method::GET, "/healthz", StatusCode::OK, "ok\n"),
        (Method::GET, "/version", StatusCode::OK, "b1\n"),
        (Method::HEAD, "/healthz", StatusCode::OK, "ok\n"),
        (Method::GET, "/", StatusCode::NOT_FOUND, "not found\n"),
        (
            Method::POST,
            "/healthz",
            StatusCode::METHOD_NOT_ALLOWED,
            "method not allowed\n",
        ),
    ];
    for (method, path, status, body) in table {
        assert_eq!(
            respond(&method, path, "b1"),
            (status, body.to_string()),
            "{method} {path}"
        );
    }
}

/// Sends one HTTP/1.1 request and returns the whole response.
async fn get(address: SocketAddr, path: &str) -> String {
    let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nhost: worker\r\nconnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    response
}

#[tokio::test]
async fn serves_healthz_and_version_over_http_until_shut_down() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(serve(listener, Arc::from("build-7"), async {
        stopped.await.ok();
    }));

    let healthz = get(address, "/healthz").await;
    assert!(healthz.starts_with("HTTP/1.1 200 OK\r\n"), "{healthz}");
    assert!(healthz.ends_with("\r\n\r\nok\n"), "{healthz}");
    let version = get(address, "/version").await;
    assert!(version.starts_with("HTTP/1.1 200 OK\r\n"), "{version}");
    assert!(version.ends_with("\r\n\r\nbuild-7\n"), "{version}");
    let missing = get(address, "/nope").await;
    assert!(
        missing.starts_with("HTTP/1.1 404 Not Found\r\n"),
        "{missing}"
    );

    stop.send(()).unwrap();
    server.await.unwrap().unwrap();
}
