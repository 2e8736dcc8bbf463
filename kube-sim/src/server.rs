//! The HTTP(S) API server: authentication and RBAC authorization, routing of Kubernetes REST paths onto the
//! [`Store`], watch streams.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full, Limited, StreamBody, combinators::BoxBody};
use hyper::body::{Frame, Incoming};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_rustls::TlsAcceptor;

use crate::discovery;
use crate::resource::{GroupResource, ResourceInfo};
use crate::store::{Error, FieldValidation, Store};

mod authz;
mod binding;
mod convert;
mod handlers;
mod list;
mod openapi;
mod protobuf;
mod review;
mod stream;
mod token;
mod watch;

use handlers::Call;

/// The largest request body accepted, as in Kubernetes (3 MiB).
const MAX_BODY: usize = 3 * 1024 * 1024;

/// A response body: whole or streamed.
pub type Body = BoxBody<Bytes, Infallible>;

/// What the request handlers share.
pub struct ServerState {
    /// The object store.
    pub store: Store,
    /// The bearer token clients must present.
    pub token: String,
    /// The address clients use, for `/api`.
    pub advertise: String,
    /// How often watches with `allowWatchBookmarks` get a bookmark.
    pub bookmark_interval: Duration,
    /// Flips to `true` when the server shuts down; ends watch streams.
    pub shutdown: tokio::sync::watch::Receiver<bool>,
    /// The OpenAPI documents, kept between requests.
    pub openapi: crate::openapi::Documents,
}

/// Accepts connections until shutdown, over TLS when `tls` is set.
pub async fn serve(listener: TcpListener, tls: Option<TlsAcceptor>, state: Arc<ServerState>) {
    let mut shutdown = state.shutdown.clone();
    let warm = state.clone();
    tokio::task::spawn_blocking(move || warm.openapi.current(&warm.store.resources()));
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = shutdown.wait_for(|s| *s) => return,
        };
        let (tcp, peer) = match accepted {
            Ok(a) => a,
            Err(e) => {
                tracing::warn!(error = %e, "accept failed");
                continue;
            }
        };
        let _ = tcp.set_nodelay(true);
        let state = state.clone();
        let tls = tls.clone();
        tokio::spawn(async move {
            match tls {
                Some(acceptor) => match acceptor.accept(tcp).await {
                    Ok(stream) => serve_connection(TokioIo::new(stream), peer, state).await,
                    Err(e) => tracing::debug!(%peer, error = %e, "TLS handshake failed"),
                },
                None => serve_connection(TokioIo::new(tcp), peer, state).await,
            }
        });
    }
}

async fn serve_connection<I>(io: I, peer: SocketAddr, state: Arc<ServerState>)
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let mut shutdown = state.shutdown.clone();
    let svc_state = state.clone();
    let service = service_fn(move |req| {
        let state = svc_state.clone();
        async move { Ok::<_, Infallible>(handle(state, req).await) }
    });
    // HTTP/2 when the client starts with its preface (ALPN `h2` over TLS), else HTTP/1.1 with upgrades
    // for exec, attach and port-forward.
    let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
    let conn = builder.serve_connection_with_upgrades(io, service);
    tokio::select! {
        r = conn => if let Err(e) = r { tracing::debug!(%peer, error = %e, "connection ended with an error") },
        _ = shutdown.wait_for(|s| *s) => {},
    }
}

fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into()).map_err(|e| match e {}).boxed()
}

fn json_response(code: StatusCode, v: &Value) -> Response<Body> {
    // Serializing a `Value` cannot fail.
    let body = serde_json::to_vec(&crate::wire::Wire(v)).unwrap_or_default();
    let mut r = Response::new(full(body));
    *r.status_mut() = code;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

fn error_response(e: &Error) -> Response<Body> {
    let code = StatusCode::from_u16(e.code()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    json_response(code, &e.status())
}

fn with_warnings(mut r: Response<Body>, warnings: &[String]) -> Response<Body> {
    for w in warnings {
        let text = format!("299 - \"{}\"", w.replace('\\', "\\\\").replace('"', "\\\""));
        if let Ok(v) = HeaderValue::from_str(&text) {
            r.headers_mut().append("Warning", v);
        }
    }
    r
}

/// Decoded query parameters.
struct Query(Vec<(String, String)>);

impl Query {
    fn parse(q: Option<&str>) -> Query {
        let pairs = q
            .unwrap_or("")
            .split('&')
            .filter(|p| !p.is_empty())
            .map(|p| {
                let (k, v) = p.split_once('=').unwrap_or((p, ""));
                (percent_decode(k), percent_decode(v))
            })
            .collect();
        Query(pairs)
    }

    fn get(&self, key: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    fn flag(&self, key: &str) -> bool {
        matches!(self.get(key), Some("true" | "1" | ""))
    }
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3])
                    .ok()
                    .and_then(|h| u8::from_str_radix(h, 16).ok());
                match hex {
                    Some(b) => {
                        out.push(b);
                        i += 2;
                    }
                    None => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A parsed resource path.
struct ApiPath {
    group: String,
    version: String,
    namespace: Option<String>,
    resource: String,
    name: Option<String>,
    subresource: Option<String>,
}

enum Route {
    Discovery(Value),
    Resource(ApiPath),
    NotFound,
}

fn route(state: &ServerState, path: &str) -> Route {
    let segments: Vec<&str> = path
        .trim_matches('/')
        .split('/')
        .filter(|s| !s.is_empty())
        .collect();
    let resources = state.store.resources();
    let (group, version, rest) = match segments.as_slice() {
        ["api"] => return Route::Discovery(discovery::core_versions(&state.advertise)),
        ["api", v, rest @ ..] => (String::new(), v.to_string(), rest),
        ["apis"] => return Route::Discovery(discovery::group_list(&resources)),
        ["apis", g] => {
            return match discovery::group(&resources, g) {
                Some(d) => Route::Discovery(d),
                None => Route::NotFound,
            };
        }
        ["apis", g, v, rest @ ..] => (g.to_string(), v.to_string(), rest),
        _ => return Route::NotFound,
    };
    if rest.is_empty() {
        return match discovery::resource_list(&resources, &group, &version) {
            Some(d) => Route::Discovery(d),
            None => Route::NotFound,
        };
    }
    let (namespace, rest) = match rest {
        ["namespaces", ns, tail @ ..]
            if !tail.is_empty() && tail[0] != "status" && tail[0] != "finalize" =>
        {
            (Some(ns.to_string()), tail)
        }
        _ => (None, rest),
    };
    let (resource, name, subresource) = match rest {
        [r] => (r.to_string(), None, None),
        [r, n] => (r.to_string(), Some(n.to_string()), None),
        [r, n, s] => (r.to_string(), Some(n.to_string()), Some(s.to_string())),
        _ => return Route::NotFound,
    };
    Route::Resource(ApiPath {
        group,
        version,
        namespace,
        resource,
        name,
        subresource,
    })
}

async fn handle(state: Arc<ServerState>, req: Request<Incoming>) -> Response<Body> {
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    tracing::debug!(%method, uri = %req.uri(), "request");
    // What `system:public-info-viewer` grants everyone, authenticated or not (anonymous requests get no
    // further).
    match path.as_str() {
        "/healthz" | "/readyz" | "/livez" => {
            let mut r = Response::new(full("ok"));
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/plain; charset=utf-8"),
            );
            return r;
        }
        "/version" | "/version/" => {
            return json_response(StatusCode::OK, &discovery::version());
        }
        _ => {}
    }
    let Some(user) = authz::authenticate(&state, &req) else {
        return error_response(&Error::Unauthorized);
    };
    let user = match authz::impersonate(&state, req.headers(), user) {
        Ok(user) => user,
        Err(e) => return error_response(&e),
    };
    let query = Query::parse(req.uri().query());
    if let Err(e) = authz::authorize(&state, &user, &method, &path, &query) {
        return error_response(&e);
    }
    if path.starts_with("/openapi/") {
        return openapi::respond(&state, &req, &path).await;
    }
    let accept = req
        .headers()
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if (path == "/api" || path == "/apis")
        && method == Method::GET
        && discovery::wants_aggregated(accept)
    {
        let doc = discovery::aggregated(&state.store.resources(), path == "/api");
        let mut r = json_response(StatusCode::OK, &doc);
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static(discovery::AGGREGATED_MEDIA_TYPE),
        );
        return r;
    }
    match route(&state, &path) {
        Route::Discovery(doc) if method == Method::GET => json_response(StatusCode::OK, &doc),
        Route::Discovery(_) => error_response(&Error::MethodNotAllowed),
        Route::NotFound => error_response(&Error::ResourceNotFound),
        Route::Resource(p) => match resource_request(&state, req, p, &user).await {
            Ok(r) => r,
            Err(e) => error_response(&e),
        },
    }
}

/// The namespace and name of the object whose subresource a request `POST`s to (`token`, `binding`):
/// 405 for another method, 404 when the path names no namespaced object.
fn posted_to<'p>(req: &Request<Incoming>, path: &'p ApiPath) -> Result<(&'p str, &'p str), Error> {
    if req.method() != http::Method::POST {
        return Err(Error::MethodNotAllowed);
    }
    match (path.namespace.as_deref(), path.name.as_deref()) {
        (Some(namespace), Some(name)) => Ok((namespace, name)),
        _ => Err(Error::ResourceNotFound),
    }
}

async fn read_body(req: Request<Incoming>) -> Result<(Bytes, String), Error> {
    let content_type = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("application/json")
        .to_string();
    let body = Limited::new(req.into_body(), MAX_BODY)
        .collect()
        .await
        .map_err(|e| {
            if e.is::<http_body_util::LengthLimitError>() {
                Error::RequestEntityTooLarge(format!("limit is {MAX_BODY}"))
            } else {
                Error::BadRequest(format!("reading the request body: {e}"))
            }
        })?
        .to_bytes();
    Ok((body, content_type))
}

fn parse_json(body: &[u8]) -> Result<Value, Error> {
    serde_json::from_slice(body)
        .map_err(|e| Error::BadRequest(format!("the request body is not valid JSON: {e}")))
}

fn parse_json_or_yaml(body: &[u8]) -> Result<Value, Error> {
    if let Ok(v) = serde_json::from_slice(body) {
        return Ok(v);
    }
    serde_yaml::from_slice::<Value>(body)
        .map_err(|e| Error::BadRequest(format!("error decoding YAML: {e}")))
}

fn field_validation(q: &Query) -> FieldValidation {
    match q.get("fieldValidation") {
        Some("Strict") => FieldValidation::Strict,
        Some("Ignore") => FieldValidation::Ignore,
        _ => FieldValidation::Warn,
    }
}

fn dry_run(q: &Query) -> bool {
    q.get("dryRun") == Some("All")
}

/// Sets the `apiVersion` an object is returned with (custom resources may be read at any served version).
fn present(info: &ResourceInfo, version: &str, obj: Value) -> Value {
    let mut obj = convert::outgoing(info, obj);
    if let Value::Object(m) = &mut obj {
        m.insert("apiVersion".into(), json!(info.api_version(version)));
    }
    obj
}

/// The field manager for a write: `fieldManager`, or the first part of the `User-Agent` like Kubernetes.
fn field_manager(q: &Query, user_agent: &str) -> String {
    if let Some(m) = q.get("fieldManager").filter(|m| !m.is_empty()) {
        return m.to_string();
    }
    let prefix = user_agent.split('/').next().unwrap_or("").trim();
    if prefix.is_empty() {
        "unknown".to_string()
    } else {
        prefix.chars().take(128).collect()
    }
}

async fn resource_request(
    state: &ServerState,
    req: Request<Incoming>,
    p: ApiPath,
    user: &crate::rbac::User,
) -> Result<Response<Body>, Error> {
    let gr = GroupResource::new(&p.group, &p.resource);
    let info = state.store.resource(&gr)?;
    if !info.serves(&p.version) {
        return Err(Error::ResourceNotFound);
    }
    if info.review {
        return review::answer(state, &info, req, &p, user).await;
    }
    if info.namespaced != p.namespace.is_some() && p.name.is_some() {
        return Err(Error::ResourceNotFound);
    }
    if !info.namespaced && p.namespace.is_some() {
        return Err(Error::ResourceNotFound);
    }
    match p.subresource.as_deref() {
        None => {}
        Some("status") if info.status_subresource => {}
        Some("scale") if info.scale_subresource => {}
        Some("log") if info.log_subresource => {}
        Some("token") if gr == GroupResource::new("", "serviceaccounts") && p.name.is_some() => {
            return token::request(state, req, &p).await;
        }
        Some("binding") if gr == GroupResource::pods() && p.name.is_some() => {
            return binding::request(state, req, &p).await;
        }
        Some(sub @ ("exec" | "attach" | "portforward"))
            if gr == GroupResource::pods() && p.name.is_some() =>
        {
            return match state.store.pod_streams() {
                Some(streams) => stream::serve(state, req, &p, streams).await,
                None => Err(not_served(&gr, sub)),
            };
        }
        Some(sub) => return Err(not_served(&gr, sub)),
    }
    let q = Query::parse(req.uri().query());
    let accept = req
        .headers()
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    protobuf::check_accept(accept, p.subresource.as_deref() == Some("log"))?;
    let table = crate::table::wants_table(accept)
        .then(|| crate::table::IncludeObject::parse(q.get("includeObject")));
    let user_agent = req
        .headers()
        .get(header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let call = Call {
        state,
        gr: info.storage(),
        info,
        version: p.version,
        namespace: p.namespace,
        q,
        table,
        user_agent,
    };
    let method = req.method().clone();
    match (method, p.name.as_deref(), p.subresource.as_deref()) {
        (Method::GET, None, None) => call.list().await,
        (Method::GET, Some(name), None | Some("status")) => call.get(name),
        (Method::GET, Some(name), Some("scale")) => call.get_scale(name),
        (Method::GET, Some(name), Some("log")) => call.log(name),
        (Method::POST, None, None) => call.create(req).await,
        (Method::PUT, Some(name), sub) => call.update(req, name, sub).await,
        (Method::PATCH, Some(name), sub) => call.patch(req, name, sub).await,
        (Method::DELETE, Some(name), None) => call.delete(req, name).await,
        (Method::DELETE, None, None) => call.delete_collection(req).await,
        _ => Err(Error::MethodNotAllowed),
    }
}

/// A streamed response of the frames a task sends into `rx`.
fn streamed(
    rx: mpsc::Receiver<Result<Frame<Bytes>, Infallible>>,
    content_type: &'static str,
) -> Response<Body> {
    let frames =
        futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|f| (f, rx)) });
    let mut r = Response::new(BodyExt::boxed(StreamBody::new(frames)));
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    r
}

/// Why a subresource Kubernetes serves is not served here, as a Status that says so; a 404 for the rest.
fn not_served(gr: &GroupResource, subresource: &str) -> Error {
    let why = match (gr.group.as_str(), gr.resource.as_str(), subresource) {
        ("", "pods", "exec") => {
            "the virtual kubelet runs no containers, so kube-sim does not run commands in containers: \
             run kube-sim with the Docker kubelet (`--kubelet docker`) to exec into pods"
        }
        ("", "pods", "attach") => {
            "the virtual kubelet runs no containers, so kube-sim does not attach to containers: run \
             kube-sim with the Docker kubelet (`--kubelet docker`) to attach"
        }
        ("", "pods", "portforward") => {
            "the virtual kubelet runs no containers, so kube-sim does not forward or proxy connections to \
             pods: run kube-sim with the Docker kubelet (`--kubelet docker`) to forward ports"
        }
        ("", "pods" | "services" | "nodes", "proxy") => {
            "kube-sim does not forward or proxy connections through the API server's proxy: with the \
             Docker kubelet, use `kubectl port-forward` or reach the pod's container on its Docker network"
        }
        ("", "pods", "eviction" | "ephemeralcontainers" | "resize") => {
            "kube-sim does not serve this pod subresource"
        }
        _ => return Error::ResourceNotFound,
    };
    Error::NotImplemented(format!("{}/{subresource}: {why}", gr.resource))
}
