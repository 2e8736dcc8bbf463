//! The demo workload: a small HTTP service.
//!
//! `GET /healthz` answers `ok`; `GET /version` answers the build id, which is
//! `BUILD_ID` from the environment when set, else the id compiled in (see
//! `build.rs`). It listens on `PORT` (default 8080), writes a startup line
//! and one line per request to stdout, and exits 0 on SIGTERM or SIGINT.
//! With `WORKER_FAIL_AT_START=1` it exits 1 before listening, which is how
//! tests make pods crash.

use std::{convert::Infallible, net::SocketAddr, sync::Arc};

use http_body_util::Full;
use hyper::{
    Method, Request, Response, StatusCode,
    body::{Bytes, Incoming},
    header,
    server::conn::http1,
    service::service_fn,
};
use hyper_util::rt::TokioIo;
use tokio::{
    net::TcpListener,
    signal::unix::{SignalKind, signal},
};
use tracing::{error, info, warn};

/// The port listened on when `PORT` is not set.
const DEFAULT_PORT: u16 = 8080;
/// The build id compiled into this binary.
const COMPILED_BUILD_ID: &str = env!("WORKER_COMPILED_BUILD_ID");

/// What the process was started with.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Settings {
    port: u16,
    build_id: String,
    fail_at_start: bool,
}

impl Settings {
    /// Reads the settings through `var`, so tests need not touch the
    /// process environment.
    fn from_vars(var: impl Fn(&str) -> Option<String>) -> Result<Settings, String> {
        let port = match var("PORT") {
            Some(port) => port
                .trim()
                .parse()
                .map_err(|_| format!("PORT is `{port}`, not a port number; set it to 1-65535"))?,
            None => DEFAULT_PORT,
        };
        let build_id = var("BUILD_ID")
            .filter(|id| !id.trim().is_empty())
            .unwrap_or_else(|| COMPILED_BUILD_ID.to_string());
        let fail_at_start =
            var("WORKER_FAIL_AT_START").is_some_and(|v| matches!(v.trim(), "1" | "true" | "yes"));
        Ok(Settings {
            port,
            build_id,
            fail_at_start,
        })
    }
}

/// The answer to a request: status, and a plain-text body.
fn respond(method: &Method, path: &str, build_id: &str) -> (StatusCode, String) {
    if method != Method::GET && method != Method::HEAD {
        return (
            StatusCode::METHOD_NOT_ALLOWED,
            String::from("method not allowed\n"),
        );
    }
    match path {
        "/healthz" => (StatusCode::OK, String::from("ok\n")),
        "/version" => (StatusCode::OK, format!("{build_id}\n")),
        _ => (StatusCode::NOT_FOUND, String::from("not found\n")),
    }
}

async fn handle(
    request: Request<Incoming>,
    build_id: Arc<str>,
    peer: SocketAddr,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let method = request.method().clone();
    let path = request.uri().path().to_string();
    let (status, body) = respond(&method, &path, &build_id);
    info!(%peer, %method, %path, status = status.as_u16(), "request");
    let body = if method == Method::HEAD {
        Bytes::new()
    } else {
        Bytes::from(body)
    };
    let response = Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, "text/plain; charset=utf-8")
        .body(Full::new(body))
        .expect("a response from valid parts");
    Ok(response)
}

/// Serves until `shutdown` completes.
async fn serve(
    listener: TcpListener,
    build_id: Arc<str>,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            () = &mut shutdown => return Ok(()),
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    warn!(error = %e, "accept failed");
                    continue;
                }
            },
        };
        let build_id = build_id.clone();
        tokio::spawn(async move {
            let service = service_fn(move |request| handle(request, build_id.clone(), peer));
            if let Err(e) = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await
            {
                warn!(%peer, error = %e, "connection failed");
            }
        });
    }
}

/// Completes on SIGTERM or SIGINT.
async fn terminated() {
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
    let mut int = signal(SignalKind::interrupt()).expect("SIGINT handler");
    let name = tokio::select! {
        _ = term.recv() => "SIGTERM",
        _ = int.recv() => "SIGINT",
    };
    info!(signal = name, "shutting down");
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    use std::io::IsTerminal;
    tracing_subscriber::fmt()
        .with_writer(std::io::stdout)
        .with_ansi(std::io::stdout().is_terminal())
        .with_target(false)
        .init();

    let settings = match Settings::from_vars(|name| std::env::var(name).ok()) {
        Ok(settings) => settings,
        Err(message) => {
            error!("{message}");
            return std::process::ExitCode::FAILURE;
        }
    };
    if settings.fail_at_start {
        error!(
            build_id = %settings.build_id,
            "WORKER_FAIL_AT_START is set: exiting with status 1"
        );
        return std::process::ExitCode::FAILURE;
    }
    let address = SocketAddr::from(([0, 0, 0, 0], settings.port));
    let listener = match TcpListener::bind(address).await {
        Ok(listener) => listener,
        Err(e) => {
            error!(%address, error = %e, "cannot listen");
            return std::process::ExitCode::FAILURE;
        }
    };
    let address = listener.local_addr().unwrap_or(address);
    info!(%address, build_id = %settings.build_id, "worker listening");
    match serve(listener, settings.build_id.into(), terminated()).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            error!(error = %e, "serving failed");
            std::process::ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests;
