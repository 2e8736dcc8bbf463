//! Answers `/openapi/v2`, `/openapi/v3` and `/openapi/v3/<group version>` from the kept documents.
//!
//! Only JSON is served: a client that accepts nothing but the protobuf encoding gets 406 with a `Status`, as
//! from an API server that does not speak that encoding. A group version's document asked for at the hash the
//! index lists is immutable and cached for a year; at another hash the client is sent to the current one.

use std::sync::Arc;

use http::{HeaderValue, Method, Request, Response, StatusCode, header};
use hyper::body::Incoming;
use serde_json::json;

use super::{Body, Query, ServerState, error_response, full, json_response};
use crate::openapi::Encoded;
use crate::store::Error;

/// The answer to a request under `/openapi/`.
pub(super) async fn respond(
    state: &Arc<ServerState>,
    req: &Request<Incoming>,
    path: &str,
) -> Response<Body> {
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return error_response(&Error::MethodNotAllowed);
    }
    let accept = req
        .headers()
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if !accepts_json(accept) {
        return not_acceptable(accept);
    }
    let query = Query::parse(req.uri().query());
    let if_none_match = req
        .headers()
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    // Building after a CRD changed takes a while; it runs off the async workers.
    let building = state.clone();
    let built =
        tokio::task::spawn_blocking(move || building.openapi.current(&building.store.resources()))
            .await;
    let Ok(built) = built else {
        return status(
            StatusCode::INTERNAL_SERVER_ERROR,
            "InternalError",
            "building the OpenAPI documents failed",
        );
    };
    let response = match path.trim_end_matches('/') {
        "/openapi/v2" => document(&built.v2(), "no-cache, private"),
        "/openapi/v3" => document(&built.index, "no-cache, private"),
        other => {
            let Some(key) = other.strip_prefix("/openapi/v3/") else {
                return error_response(&Error::ResourceNotFound);
            };
            let Ok(doc) = built.v3(key) else {
                return error_response(&Error::ResourceNotFound);
            };
            match query.get("hash") {
                Some(h) if h == doc.hash => immutable(doc),
                Some(_) => moved(key, doc),
                None => document(doc, "no-cache, private"),
            }
        }
    };
    not_modified(response, &if_none_match)
}

/// 304 without a body when the client already holds the document it would get (`If-None-Match`).
fn not_modified(mut response: Response<Body>, if_none_match: &str) -> Response<Body> {
    let held = response
        .headers()
        .get(header::ETAG)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|etag| if_none_match.split(',').any(|t| t.trim() == etag));
    if held && response.status() == StatusCode::OK {
        *response.status_mut() = StatusCode::NOT_MODIFIED;
        *response.body_mut() = full("");
    }
    response
}

/// Whether an `Accept` header lets the server answer with JSON.
fn accepts_json(accept: &str) -> bool {
    accept.trim().is_empty()
        || accept.split(',').any(|range| {
            let media = range.split(';').next().unwrap_or("").trim();
            matches!(media, "application/json" | "application/*" | "*/*")
        })
}

/// A JSON document with its `ETag` and the given `Cache-Control`.
fn document(doc: &Encoded, cache_control: &'static str) -> Response<Body> {
    let mut r = Response::new(full(doc.bytes.clone()));
    let headers = r.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    headers.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static(cache_control),
    );
    if let Ok(etag) = HeaderValue::from_str(&format!("\"{}\"", doc.hash)) {
        headers.insert(header::ETAG, etag);
    }
    headers.insert(header::VARY, HeaderValue::from_static("Accept"));
    r
}

/// A document asked for at its current hash: it never changes, so it may be cached for a year.
fn immutable(doc: &Encoded) -> Response<Body> {
    let mut r = document(doc, "public, immutable");
    let expires = jiff::Timestamp::now()
        .checked_add(jiff::SignedDuration::from_hours(24 * 365))
        .ok()
        .and_then(|t| {
            jiff::fmt::rfc2822::DateTimePrinter::new()
                .timestamp_to_rfc9110_string(&t)
                .ok()
        })
        .and_then(|s| HeaderValue::from_str(&s).ok());
    if let Some(v) = expires {
        r.headers_mut().insert(header::EXPIRES, v);
    }
    r
}

/// A document asked for at an old hash: a permanent redirect to the current one.
fn moved(key: &str, doc: &Encoded) -> Response<Body> {
    let mut r = Response::new(full(""));
    *r.status_mut() = StatusCode::MOVED_PERMANENTLY;
    let location = format!("/openapi/v3/{key}?hash={}", doc.hash);
    if let Ok(v) = HeaderValue::from_str(&location) {
        r.headers_mut().insert(header::LOCATION, v);
    }
    r.headers_mut().insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("no-cache, private"),
    );
    r
}

/// 406 with a `Status` naming the media types the server does not offer.
fn not_acceptable(accept: &str) -> Response<Body> {
    let message = format!(
        "only the following media types are accepted: application/json; asked for {accept}"
    );
    status(StatusCode::NOT_ACCEPTABLE, "NotAcceptable", &message)
}

/// A failure `Status` with its code, reason and message.
fn status(code: StatusCode, reason: &str, message: &str) -> Response<Body> {
    json_response(
        code,
        &json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": reason, "code": code.as_u16()}),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_is_acceptable_unless_only_protobuf_is_asked_for() {
        assert!(accepts_json(""));
        assert!(accepts_json("application/json"));
        assert!(accepts_json(
            "application/com.github.proto-openapi.spec.v2@v1.0+protobuf, application/json;q=0.9"
        ));
        assert!(accepts_json("*/*"));
        assert!(!accepts_json(
            "application/com.github.proto-openapi.spec.v2@v1.0+protobuf"
        ));
    }
}
