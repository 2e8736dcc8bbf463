//! `TokenRequest` (`POST …/serviceaccounts/<name>/token`, `kubectl create token`): a token of the service
//! account, valid for `spec.expirationSeconds` (an hour by default, at least ten minutes), answered at once
//! and never stored.

use http::{Request, Response, StatusCode};
use hyper::body::Incoming;
use serde_json::{Value, json};

use super::protobuf::object_body;
use super::{ApiPath, Body, ServerState, json_response, posted_to, read_body};
use crate::store::{Error, TokenOptions};
use crate::validation::FieldError;

/// The lifetime of a token when the request names none, as kube-apiserver defaults it.
const DEFAULT_EXPIRATION: i64 = 3600;
/// The shortest lifetime a request may ask for.
const MIN_EXPIRATION: i64 = 600;
/// The audiences of a token when the request names none: the API server's own, as on k3s.
const API_AUDIENCES: &[&str] = &["https://kubernetes.default.svc.cluster.local", "k3s"];

/// Answers a `TokenRequest` for the service account the path names.
pub async fn request(
    state: &ServerState,
    req: Request<Incoming>,
    path: &ApiPath,
) -> Result<Response<Body>, Error> {
    let (namespace, name) = posted_to(&req, path)?;
    let (body, content_type) = read_body(req).await?;
    let mut review = object_body(Some(&content_type), &body)?;
    let spec = review.get("spec").cloned().unwrap_or_else(|| json!({}));
    let expiration = spec
        .get("expirationSeconds")
        .and_then(Value::as_i64)
        .unwrap_or(DEFAULT_EXPIRATION);
    let invalid = |detail: &str| {
        let causes = vec![FieldError::invalid(
            "spec.expirationSeconds",
            &json!(expiration),
            detail,
        )];
        Error::Invalid {
            group: "authentication.k8s.io".to_string(),
            kind: "TokenRequest".to_string(),
            name: name.to_string(),
            message: crate::validation::join(&causes),
            causes,
        }
    };
    if expiration < MIN_EXPIRATION {
        return Err(invalid("may not specify a duration less than 10 minutes"));
    }
    if expiration > 1 << 32 {
        return Err(invalid(
            "may not specify a duration larger than 2^32 seconds",
        ));
    }
    let mut audiences: Vec<String> = crate::resource::strings(spec.get("audiences"));
    if audiences.is_empty() {
        audiences = API_AUDIENCES.iter().map(|a| a.to_string()).collect();
    }
    let issued = state.store.issue_token(
        namespace,
        name,
        &TokenOptions {
            expiration_seconds: Some(expiration),
            audiences: audiences.clone(),
        },
    )?;
    let expires = issued
        .expires
        .and_then(|e| jiff::Timestamp::from_second(e).ok())
        .map(crate::meta::rfc3339);
    let Value::Object(m) = &mut review else {
        return Err(Error::BadRequest(
            "the body of a TokenRequest must be an object".to_string(),
        ));
    };
    m.insert("apiVersion".into(), json!("authentication.k8s.io/v1"));
    m.insert("kind".into(), json!("TokenRequest"));
    m.insert(
        "metadata".into(),
        json!({"name": name, "namespace": namespace, "creationTimestamp": null}),
    );
    let mut spec = spec;
    spec["audiences"] = json!(audiences);
    spec["expirationSeconds"] = json!(expiration);
    spec.as_object_mut()
        .map(|s| s.entry("boundObjectRef").or_insert(Value::Null));
    m.insert("spec".into(), spec);
    m.insert(
        "status".into(),
        json!({"token": issued.token, "expirationTimestamp": expires}),
    );
    Ok(json_response(StatusCode::CREATED, &review))
}
