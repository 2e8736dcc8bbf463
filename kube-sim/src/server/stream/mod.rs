//! `pods/exec`, `pods/attach` and `pods/portforward`: the connection upgrades clients ask for, served
//! through the
//! [`PodStreams`] a kubelet with real containers installed.
//!
//! - `exec` speaks WebSocket with the `v5.channel.k8s.io` subprotocol (kubectl's first choice since 1.30,
//!   and kube-rs's): binary messages whose first byte is the channel (0 stdin, 1 stdout, 2 stderr, 3 the
//!   final `Status`, 4 terminal resizes, 255 a client closing one of its channels), or SPDY/3.1 with
//!   `v4.channel.k8s.io` for older clients (one SPDY stream per channel).
//! - `portforward` speaks SPDY/3.1 (`portforward.k8s.io`), either over a plain SPDY upgrade or tunnelled
//!   in WebSocket binary messages (subprotocol `SPDY/3.1+portforward.k8s.io`, kubectl's first choice
//!   since 1.31), or the kubelet's WebSocket channel protocol (`v4.channel.k8s.io`, kube-rs's), one
//!   connection per port and WebSocket.

mod dictionary;
mod exec;
mod exec_spdy;
mod portforward;
mod portforward_ws;
mod spdy;
mod tunnel;

use std::sync::Arc;

use http::{HeaderMap, HeaderValue, Request, Response, StatusCode, header};
use hyper::body::Incoming;
use hyper::upgrade::{OnUpgrade, Upgraded};
use hyper_util::rt::TokioIo;
use tokio::sync::watch;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::Role;

use super::{ApiPath, Body, Query, ServerState, full};
use crate::resource::GroupResource;
use crate::store::{self, PodStreams};

/// A streaming session ended with an error (logged; the client already has its upgraded connection).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The HTTP connection was not handed over.
    #[error("the connection upgrade failed")]
    Upgrade(#[source] hyper::Error),
    /// The WebSocket connection failed.
    #[error("the WebSocket connection failed")]
    WebSocket(#[source] tokio_tungstenite::tungstenite::Error),
    /// The SPDY connection failed.
    #[error("the SPDY connection failed")]
    Spdy(#[source] spdy::Error),
    /// Copying between a tunnel and the session failed.
    #[error("the tunnelled connection failed")]
    Io(#[source] std::io::Error),
}

/// Serves `pods/exec`, `pods/attach` or `pods/portforward` of the pod at `p`.
pub(super) async fn serve(
    state: &ServerState,
    req: Request<Incoming>,
    p: &ApiPath,
    streams: Arc<dyn PodStreams>,
) -> Result<Response<Body>, store::Error> {
    let namespace = p.namespace.as_deref().unwrap_or("default");
    let name = p.name.as_deref().unwrap_or("");
    let pod = state
        .store
        .get(&GroupResource::pods(), Some(namespace), name)?;
    let q = Query::parse(req.uri().query());
    let shutdown = state.shutdown.clone();
    match p.subresource.as_deref() {
        Some("exec") => exec::serve(req, &q, &pod, streams, shutdown, exec::Kind::Exec).await,
        Some("attach") => exec::serve(req, &q, &pod, streams, shutdown, exec::Kind::Attach).await,
        _ => portforward::serve(req, pod, streams, shutdown),
    }
}

/// Runs a session on its own task until it ends or the server shuts down; its error is only logged, as
/// the client already has its answer.
fn spawn_session<F>(what: &'static str, mut shutdown: watch::Receiver<bool>, session: F)
where
    F: Future<Output = Result<(), Error>> + Send + 'static,
{
    tokio::spawn(async move {
        let result = tokio::select! {
            r = session => r,
            _ = shutdown.wait_for(|s| *s) => Ok(()),
        };
        if let Err(e) = result {
            tracing::debug!(error = %e, "a {what} session ended with an error");
        }
    });
}

/// The comma-separated values of every `name` header, trimmed.
fn header_values(headers: &HeaderMap, name: &str) -> Vec<String> {
    headers
        .get_all(name)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
        .collect()
}

/// Whether the request asks for a WebSocket upgrade.
fn wants_websocket(headers: &HeaderMap) -> bool {
    header_values(headers, header::UPGRADE.as_str())
        .iter()
        .any(|v| v.eq_ignore_ascii_case("websocket"))
}

/// A `101 Switching Protocols` with `Connection: Upgrade` and the given headers.
fn switching(headers: &[(&'static str, String)]) -> Response<Body> {
    let mut r = Response::new(full(""));
    *r.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    r.headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
    for (name, value) in headers {
        if let Ok(v) = HeaderValue::from_str(value) {
            r.headers_mut().insert(*name, v);
        }
    }
    r
}

/// The `101` accepting a WebSocket upgrade with `protocol`, when the request asks for one and offers
/// that subprotocol.
fn accept_websocket(headers: &HeaderMap, protocol: &str) -> Option<Response<Body>> {
    let offered = header_values(headers, header::SEC_WEBSOCKET_PROTOCOL.as_str());
    if !wants_websocket(headers) || !offered.iter().any(|p| p == protocol) {
        return None;
    }
    let key = headers.get(header::SEC_WEBSOCKET_KEY)?;
    Some(switching(&[
        ("upgrade", "websocket".to_string()),
        (
            header::SEC_WEBSOCKET_ACCEPT.as_str(),
            derive_accept_key(key.as_bytes()),
        ),
        (
            header::SEC_WEBSOCKET_PROTOCOL.as_str(),
            protocol.to_string(),
        ),
    ]))
}

/// The server side of the WebSocket on a connection once it is handed over.
async fn websocket(on_upgrade: OnUpgrade) -> Result<WebSocketStream<TokioIo<Upgraded>>, Error> {
    let io = TokioIo::new(on_upgrade.await.map_err(Error::Upgrade)?);
    Ok(WebSocketStream::from_raw_socket(io, Role::Server, None).await)
}

/// The `101` accepting an upgrade to SPDY/3.1 with `protocol`, when the request asks for one and offers
/// that protocol in `X-Stream-Protocol-Version`.
fn accept_spdy(headers: &HeaderMap, protocol: &str) -> Option<Response<Body>> {
    let spdy = header_values(headers, header::UPGRADE.as_str())
        .iter()
        .any(|v| v.eq_ignore_ascii_case("SPDY/3.1"));
    let offered = header_values(headers, "x-stream-protocol-version");
    (spdy && offered.iter().any(|v| v == protocol)).then(|| {
        switching(&[
            ("upgrade", "SPDY/3.1".to_string()),
            ("x-stream-protocol-version", protocol.to_string()),
        ])
    })
}
