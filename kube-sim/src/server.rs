//! The HTTP(S) API server: authentication, routing of Kubernetes REST paths onto the [`Store`], watch streams.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full, Limited, StreamBody, combinators::BoxBody};
use hyper::body::{Frame, Incoming};
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use tokio_rustls::TlsAcceptor;

use crate::discovery;
use crate::resource::{GroupResource, ResourceInfo};
use crate::store::{
    DeleteOptions, Deleted, Error, FieldValidation, ListOptions, Patch, PatchOptions, Store,
    WatchEvent, WriteOptions,
};

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
    pub shutdown: watch::Receiver<bool>,
}

/// Accepts connections until shutdown, over TLS when `tls` is set.
pub async fn serve(listener: TcpListener, tls: Option<TlsAcceptor>, state: Arc<ServerState>) {
    let mut shutdown = state.shutdown.clone();
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
    let conn = hyper::server::conn::http1::Builder::new()
        .keep_alive(true)
        .serve_connection(io, service);
    tokio::select! {
        r = conn => if let Err(e) = r { tracing::debug!(%peer, error = %e, "connection ended with an error") },
        _ = shutdown.wait_for(|s| *s) => {},
    }
}

fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into()).map_err(|e| match e {}).boxed()
}

fn json_response(code: StatusCode, v: &Value) -> Response<Body> {
    let mut r = Response::new(full(v.to_string()));
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
        let text = format!("299 - \"{}\"", w.replace('"', "'"));
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
    match path.as_str() {
        "/healthz" | "/readyz" | "/livez" => {
            let mut r = Response::new(full("ok"));
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/plain; charset=utf-8"),
            );
            return r;
        }
        _ => {}
    }
    // Besides the admin token, tokens registered in the store (the service-account tokens the Docker
    // kubelet hands to pods) authenticate. Authorisation is permissive: every authenticated user may do
    // everything, so a pod's service account acts with the admin's rights.
    let authorized = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .is_some_and(|t| t.trim() == state.token || state.store.token_user(t.trim()).is_some());
    if !authorized {
        return error_response(&Error::Unauthorized);
    }
    if path == "/version" {
        return json_response(StatusCode::OK, &discovery::version());
    }
    if path == "/openapi/v3" {
        let resources = state.store.resources();
        return json_response(StatusCode::OK, &discovery::openapi_v3_index(&resources));
    }
    if let Some(key) = path.strip_prefix("/openapi/v3/") {
        return match discovery::openapi_v3_group_version(&state.store.resources(), key) {
            Some(doc) => json_response(StatusCode::OK, &doc),
            None => error_response(&Error::ResourceNotFound),
        };
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
        Route::Resource(p) => match resource_request(&state, req, p).await {
            Ok(r) => r,
            Err(e) => error_response(&e),
        },
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
        .map_err(|e| Error::BadRequest(format!("reading the request body: {e}")))?
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
fn present(info: &ResourceInfo, version: &str, mut obj: Value) -> Value {
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
) -> Result<Response<Body>, Error> {
    let gr = GroupResource::new(&p.group, &p.resource);
    let info = state.store.resource(&gr)?;
    if !info.serves(&p.version) {
        return Err(Error::ResourceNotFound);
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
        Some(_) => return Err(Error::ResourceNotFound),
    }
    let q = Query::parse(req.uri().query());
    let accept = req
        .headers()
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let table = crate::table::wants_table(accept)
        .then(|| crate::table::IncludeObject::parse(q.get("includeObject")));
    let user_agent = req
        .headers()
        .get(header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let ns = p.namespace.as_deref();
    let store = &state.store;
    let method = req.method().clone();
    match (method, p.name.as_deref(), p.subresource.as_deref()) {
        (Method::GET, None, None) => {
            let opts = ListOptions {
                label_selector: q.get("labelSelector").map(str::to_string),
                field_selector: q.get("fieldSelector").map(str::to_string),
                limit: q.get("limit").and_then(|l| l.parse().ok()),
                continue_token: q
                    .get("continue")
                    .filter(|c| !c.is_empty())
                    .map(str::to_string),
            };
            if q.flag("watch") {
                return start_watch(state, &info, &p.version, ns, &q, opts, table);
            }
            let list = store.list(&gr, ns, &opts)?;
            let mut metadata = json!({"resourceVersion": list.resource_version.to_string()});
            if let Some(c) = &list.continue_token {
                metadata["continue"] = json!(c);
            }
            if let Some(r) = list.remaining {
                metadata["remainingItemCount"] = json!(r);
            }
            let items: Vec<Value> = list
                .items
                .into_iter()
                .map(|o| present(&info, &p.version, o))
                .collect();
            if let Some(include) = table {
                return Ok(json_response(
                    StatusCode::OK,
                    &crate::table::render(&info, &p.version, &items, metadata, include),
                ));
            }
            Ok(json_response(
                StatusCode::OK,
                &json!({"kind": info.list_kind, "apiVersion": info.api_version(&p.version), "metadata": metadata, "items": items}),
            ))
        }
        (Method::GET, Some(name), None | Some("status")) => {
            let obj = store.get(&gr, ns, name)?;
            if let Some(include) = table {
                let obj = present(&info, &p.version, obj);
                let metadata = json!({"resourceVersion": obj.pointer("/metadata/resourceVersion")});
                return Ok(json_response(
                    StatusCode::OK,
                    &crate::table::render(&info, &p.version, &[obj], metadata, include),
                ));
            }
            Ok(json_response(
                StatusCode::OK,
                &present(&info, &p.version, obj),
            ))
        }
        (Method::GET, Some(name), Some("scale")) => {
            let obj = store.get(&gr, ns, name)?;
            Ok(json_response(StatusCode::OK, &scale_of(&obj)))
        }
        (Method::GET, Some(name), Some("log")) => {
            let options = crate::store::LogOptions {
                follow: q.get("follow").is_some_and(|v| v == "true" || v == "1"),
                tail_lines: q.get("tailLines").and_then(|v| v.parse().ok()),
            };
            if let Some(stream) =
                store.pod_log_stream(ns.unwrap_or(""), name, q.get("container"), &options)?
            {
                // The body must be `Sync`; a task forwards the stream until the client goes away.
                let (tx, rx) = mpsc::channel::<Result<Frame<Bytes>, Infallible>>(16);
                tokio::spawn(async move {
                    let mut stream = stream;
                    while let Some(chunk) = futures::StreamExt::next(&mut stream).await {
                        if tx.send(Ok(Frame::data(chunk))).await.is_err() {
                            break;
                        }
                    }
                });
                let frames = futures::stream::unfold(rx, |mut rx| async move {
                    rx.recv().await.map(|f| (f, rx))
                });
                let mut r = Response::new(BodyExt::boxed(StreamBody::new(frames)));
                r.headers_mut()
                    .insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
                return Ok(r);
            }
            let text = store.pod_logs(ns.unwrap_or(""), name, q.get("container"))?;
            let mut r = Response::new(full(text));
            r.headers_mut()
                .insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
            Ok(r)
        }
        (Method::POST, None, None) => {
            let (body, _) = read_body(req).await?;
            let obj = parse_json(&body)?;
            check_kind(&info, &p.version, &obj)?;
            let opts = WriteOptions {
                field_manager: Some(field_manager(&q, &user_agent)),
                dry_run: dry_run(&q),
                field_validation: field_validation(&q),
            };
            let created = store.create(&gr, ns, obj, &opts)?;
            Ok(json_response(
                StatusCode::CREATED,
                &present(&info, &p.version, created),
            ))
        }
        (Method::PUT, Some(name), sub) => {
            let (body, _) = read_body(req).await?;
            let obj = parse_json(&body)?;
            let opts = WriteOptions {
                field_manager: Some(field_manager(&q, &user_agent)),
                dry_run: dry_run(&q),
                field_validation: field_validation(&q),
            };
            let out = match sub {
                None => {
                    check_kind(&info, &p.version, &obj)?;
                    check_name(&obj, name)?;
                    store.update(&gr, ns, obj, &opts)?
                }
                Some("status") => {
                    check_name(&obj, name)?;
                    store.update_status(&gr, ns, obj, &opts)?
                }
                Some("scale") => {
                    let replicas = obj.pointer("/spec/replicas").cloned().unwrap_or(json!(0));
                    let mut patch = json!({"spec": {"replicas": replicas}});
                    if let Some(rv) = obj.pointer("/metadata/resourceVersion") {
                        patch["metadata"] = json!({"resourceVersion": rv});
                    }
                    let popts = PatchOptions {
                        field_manager: opts.field_manager.clone(),
                        dry_run: opts.dry_run,
                        ..PatchOptions::default()
                    };
                    let updated = store.patch(&gr, ns, name, None, &Patch::Merge(patch), &popts)?;
                    return Ok(json_response(StatusCode::OK, &scale_of(&updated)));
                }
                Some(_) => return Err(Error::MethodNotAllowed),
            };
            Ok(json_response(
                StatusCode::OK,
                &present(&info, &p.version, out),
            ))
        }
        (Method::PATCH, Some(name), sub) => {
            let (body, content_type) = read_body(req).await?;
            let media = content_type
                .split(';')
                .next()
                .unwrap_or("")
                .trim()
                .to_string();
            let patch = match media.as_str() {
                "application/apply-patch+yaml" | "application/apply-patch+cbor" => {
                    Patch::Apply(parse_json_or_yaml(&body)?)
                }
                "application/strategic-merge-patch+json" => Patch::Strategic(parse_json(&body)?),
                "application/merge-patch+json" => Patch::Merge(parse_json(&body)?),
                "application/json-patch+json" => Patch::Json(parse_json(&body)?),
                _ => {
                    return Err(Error::UnsupportedMediaType(format!(
                        "the body of the request was in an unknown format - accepted media types include: \
                         application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml{}",
                        if info.is_custom() {
                            ""
                        } else {
                            ", application/strategic-merge-patch+json"
                        }
                    )));
                }
            };
            let force = match q.get("force") {
                Some("true") => true,
                Some("false") | None => false,
                Some(other) => {
                    return Err(Error::BadRequest(format!("invalid force value {other:?}")));
                }
            };
            let is_apply = matches!(patch, Patch::Apply(_));
            let manager = match q.get("fieldManager").filter(|m| !m.is_empty()) {
                Some(m) => Some(m.to_string()),
                None if is_apply => None,
                None => Some(field_manager(&q, &user_agent)),
            };
            let opts = PatchOptions {
                field_manager: manager,
                force,
                dry_run: dry_run(&q),
                field_validation: field_validation(&q),
            };
            if sub == Some("scale") {
                let current = store.get(&gr, ns, name)?;
                let mut scale = scale_of(&current);
                match &patch {
                    Patch::Merge(b) | Patch::Strategic(b) => {
                        crate::patch::merge_patch(&mut scale, b)
                    }
                    Patch::Json(b) => crate::patch::json_patch(&mut scale, b)
                        .map_err(|e| Error::BadRequest(e.to_string()))?,
                    Patch::Apply(_) => return Err(Error::MethodNotAllowed),
                }
                let replicas = scale.pointer("/spec/replicas").cloned().unwrap_or(json!(0));
                let popts = PatchOptions {
                    force: false,
                    ..opts
                };
                let updated = store.patch(
                    &gr,
                    ns,
                    name,
                    None,
                    &Patch::Merge(json!({"spec": {"replicas": replicas}})),
                    &popts,
                )?;
                return Ok(json_response(StatusCode::OK, &scale_of(&updated)));
            }
            let existed = store.get(&gr, ns, name).is_ok();
            let (out, warnings) = store.patch_with_warnings(&gr, ns, name, sub, &patch, &opts)?;
            let code = if existed || !is_apply {
                StatusCode::OK
            } else {
                StatusCode::CREATED
            };
            Ok(with_warnings(
                json_response(code, &present(&info, &p.version, out)),
                &warnings,
            ))
        }
        (Method::DELETE, Some(name), None) => {
            let (body, _) = read_body(req).await?;
            let opts = delete_options(&q, &body)?;
            match store.delete(&gr, ns, name, &opts)? {
                Deleted::Pending(obj) => Ok(json_response(
                    StatusCode::ACCEPTED,
                    &present(&info, &p.version, obj),
                )),
                Deleted::Gone(obj) => {
                    if info.is_custom() || gr == GroupResource::pods() || gr.resource == "services"
                    {
                        Ok(json_response(
                            StatusCode::OK,
                            &present(&info, &p.version, obj),
                        ))
                    } else {
                        Ok(json_response(StatusCode::OK, &success_status(&info, &obj)))
                    }
                }
            }
        }
        (Method::DELETE, None, None) => {
            let (body, _) = read_body(req).await?;
            let opts = delete_options(&q, &body)?;
            let list_opts = ListOptions {
                label_selector: q.get("labelSelector").map(str::to_string),
                field_selector: q.get("fieldSelector").map(str::to_string),
                ..ListOptions::default()
            };
            let list = store.list(&gr, ns, &list_opts)?;
            let mut items = Vec::new();
            for obj in list.items {
                let name = crate::meta::name_of(&obj).to_string();
                let obj_ns = crate::meta::namespace_of(&obj).to_string();
                let target_ns = if info.namespaced {
                    Some(obj_ns.as_str())
                } else {
                    None
                };
                match store.delete(&gr, target_ns, &name, &opts) {
                    Ok(Deleted::Gone(o) | Deleted::Pending(o)) => {
                        items.push(present(&info, &p.version, o))
                    }
                    Err(Error::NotFound { .. }) => {}
                    Err(e) => return Err(e),
                }
            }
            let rv = store.current_resource_version().to_string();
            Ok(json_response(
                StatusCode::OK,
                &json!({"kind": info.list_kind, "apiVersion": info.api_version(&p.version), "metadata": {"resourceVersion": rv}, "items": items}),
            ))
        }
        _ => Err(Error::MethodNotAllowed),
    }
}

fn check_kind(info: &ResourceInfo, version: &str, obj: &Value) -> Result<(), Error> {
    let kind = crate::meta::str_at(obj, "/kind").unwrap_or("");
    let api_version = crate::meta::str_at(obj, "/apiVersion").unwrap_or("");
    if (!kind.is_empty() && kind != info.kind)
        || (!api_version.is_empty() && api_version != info.api_version(version))
    {
        return Err(Error::BadRequest(format!(
            "the API version in the data ({api_version}) does not match the expected API version ({})",
            info.api_version(version)
        )));
    }
    Ok(())
}

fn check_name(obj: &Value, name: &str) -> Result<(), Error> {
    let body_name = crate::meta::name_of(obj);
    if body_name != name {
        return Err(Error::BadRequest(format!(
            "the name of the object ({body_name}) does not match the name on the URL ({name})"
        )));
    }
    Ok(())
}

fn success_status(info: &ResourceInfo, obj: &Value) -> Value {
    json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "details": {
            "name": crate::meta::name_of(obj),
            "group": info.group,
            "kind": info.plural,
            "uid": crate::meta::str_at(obj, "/metadata/uid").unwrap_or(""),
        }
    })
}

fn delete_options(q: &Query, body: &[u8]) -> Result<DeleteOptions, Error> {
    let mut opts = DeleteOptions {
        dry_run: dry_run(q),
        ..DeleteOptions::default()
    };
    if let Some(g) = q.get("gracePeriodSeconds") {
        opts.grace_period_seconds = Some(
            g.parse()
                .map_err(|_| Error::BadRequest(format!("invalid gracePeriodSeconds {g:?}")))?,
        );
    }
    opts.propagation_policy = q.get("propagationPolicy").map(str::to_string);
    if !body.iter().all(u8::is_ascii_whitespace) {
        let v = parse_json(body)?;
        if let Some(g) = v.get("gracePeriodSeconds").and_then(Value::as_i64) {
            opts.grace_period_seconds = Some(g);
        }
        if let Some(rv) = v
            .pointer("/preconditions/resourceVersion")
            .and_then(Value::as_str)
        {
            opts.resource_version = Some(rv.to_string());
        }
        if let Some(uid) = v.pointer("/preconditions/uid").and_then(Value::as_str) {
            opts.uid = Some(uid.to_string());
        }
        if let Some(policy) = v.get("propagationPolicy").and_then(Value::as_str) {
            opts.propagation_policy = Some(policy.to_string());
        }
        if v.get("orphanDependents") == Some(&Value::Bool(true)) {
            opts.propagation_policy = Some("Orphan".to_string());
        }
        if v.get("dryRun")
            .and_then(Value::as_array)
            .is_some_and(|a| a.iter().any(|d| d == "All"))
        {
            opts.dry_run = true;
        }
    }
    Ok(opts)
}

fn scale_of(obj: &Value) -> Value {
    let selector = obj
        .pointer("/spec/selector/matchLabels")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
                .collect::<Vec<_>>()
                .join(",")
        })
        .unwrap_or_default();
    json!({
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {
            "name": obj.pointer("/metadata/name"),
            "namespace": obj.pointer("/metadata/namespace"),
            "uid": obj.pointer("/metadata/uid"),
            "resourceVersion": obj.pointer("/metadata/resourceVersion"),
            "creationTimestamp": obj.pointer("/metadata/creationTimestamp"),
        },
        "spec": {"replicas": obj.pointer("/spec/replicas").cloned().unwrap_or(json!(0))},
        "status": {"replicas": obj.pointer("/status/replicas").cloned().unwrap_or(json!(0)), "selector": selector},
    })
}

fn start_watch(
    state: &ServerState,
    info: &Arc<ResourceInfo>,
    version: &str,
    namespace: Option<&str>,
    q: &Query,
    opts: ListOptions,
    table: Option<crate::table::IncludeObject>,
) -> Result<Response<Body>, Error> {
    let from = match q.get("resourceVersion").filter(|s| !s.is_empty()) {
        None => None,
        Some(rv) => Some(
            rv.parse::<u64>()
                .map_err(|_| Error::BadRequest(format!("invalid resource version: {rv}")))?,
        ),
    };
    let send_initial = q.flag("sendInitialEvents");
    // A streaming list (`sendInitialEvents=true`) replays the current state whatever the version says.
    let from = if send_initial { None } else { from };
    let mut watcher = state
        .store
        .watch(&info.group_resource(), namespace, from, &opts)?;
    let timeout = q
        .get("timeoutSeconds")
        .and_then(|t| t.parse::<u64>().ok())
        .map(Duration::from_secs)
        .unwrap_or(Duration::from_secs(1800));
    let bookmarks = q.flag("allowWatchBookmarks");
    let interval = state.bookmark_interval;
    let mut shutdown = state.shutdown.clone();
    let (tx, rx) = mpsc::channel::<Result<Frame<Bytes>, Infallible>>(64);
    let info = info.clone();
    let version = version.to_string();
    tokio::spawn(async move {
        let deadline = tokio::time::sleep(timeout);
        tokio::pin!(deadline);
        let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
        let mut initial_left = if send_initial {
            Some(watcher.initial_events())
        } else {
            None
        };
        loop {
            if initial_left == Some(0) {
                initial_left = None;
                let end = json!({"type": "BOOKMARK", "object": {"kind": info.kind, "apiVersion": info.api_version(&version),
                    "metadata": {"resourceVersion": watcher.resource_version().to_string(),
                        "annotations": {"k8s.io/initial-events-end": "true"}}}});
                if tx
                    .send(Ok(Frame::data(Bytes::from(format!("{end}\n")))))
                    .await
                    .is_err()
                {
                    break;
                }
            }
            let event = tokio::select! {
                e = watcher.next() => match e {
                    Some(e) => e,
                    None => break,
                },
                _ = ticker.tick(), if bookmarks => WatchEvent::Bookmark(watcher.resource_version()),
                _ = &mut deadline => break,
                _ = tx.closed() => break,
                _ = shutdown.wait_for(|s| *s) => break,
            };
            if let Some(n) = initial_left.as_mut() {
                *n = n.saturating_sub(1);
            }
            let object = match &event {
                WatchEvent::Added(o) | WatchEvent::Modified(o) | WatchEvent::Deleted(o) => {
                    present(&info, &version, o.clone())
                }
                WatchEvent::Bookmark(rv) => {
                    json!({"kind": info.kind, "apiVersion": info.api_version(&version),
                    "metadata": {"resourceVersion": rv.to_string()}})
                }
                WatchEvent::Error(status) => status.clone(),
            };
            let object = match (&event, table) {
                (
                    WatchEvent::Added(_) | WatchEvent::Modified(_) | WatchEvent::Deleted(_),
                    Some(include),
                ) => {
                    let metadata =
                        json!({"resourceVersion": object.pointer("/metadata/resourceVersion")});
                    crate::table::render(
                        &info,
                        &version,
                        std::slice::from_ref(&object),
                        metadata,
                        include,
                    )
                }
                _ => object,
            };
            let line = format!("{}\n", json!({"type": event.type_name(), "object": object}));
            if tx.send(Ok(Frame::data(Bytes::from(line)))).await.is_err() {
                break;
            }
            if matches!(event, WatchEvent::Error(_)) {
                break;
            }
        }
    });
    let stream =
        futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|f| (f, rx)) });
    let mut r = Response::new(BodyExt::boxed(StreamBody::new(stream)));
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    Ok(r)
}
