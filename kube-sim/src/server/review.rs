//! The reviews that tell a user who they are and what they may do: `SelfSubjectReview` (`kubectl auth
//! whoami`), `SelfSubjectAccessReview` (`kubectl auth can-i`) and `SelfSubjectRulesReview` (`kubectl auth
//! can-i --list`), answered by the same RBAC authorizer that guards every request, for the user the
//! request acts as (after impersonation). Reviews are answered at once and never stored.

use http::{Request, Response, StatusCode};
use hyper::body::Incoming;
use k8s_openapi::api::rbac::v1::PolicyRule;
use serde_json::{Value, json};

use super::protobuf::object_body;
use super::{ApiPath, Body, ServerState, json_response, read_body};
use crate::rbac::{self, Attributes, User};
use crate::resource::ResourceInfo;
use crate::store::Error;

/// Answers a `POST` of a review; every other verb is refused as upstream does.
pub async fn answer(
    state: &ServerState,
    info: &ResourceInfo,
    req: Request<Incoming>,
    path: &ApiPath,
    user: &User,
) -> Result<Response<Body>, Error> {
    if req.method() != http::Method::POST || path.name.is_some() {
        return Err(Error::MethodNotAllowed);
    }
    let (body, content_type) = read_body(req).await?;
    let mut review = object_body(Some(&content_type), &body)?;
    let spec = review.get("spec").cloned().unwrap_or(Value::Null);
    let status = match info.kind.as_str() {
        "SelfSubjectReview" => json!({"userInfo": {"username": user.name, "groups": user.groups}}),
        "SelfSubjectRulesReview" => rules_review(state, user, &spec),
        _ => access_review(state, user, &spec)?,
    };
    let Value::Object(m) = &mut review else {
        return Err(Error::BadRequest(format!(
            "the body of a {} must be an object",
            info.kind
        )));
    };
    m.insert("apiVersion".into(), json!(info.api_version(&path.version)));
    m.insert("kind".into(), json!(info.kind));
    m.entry("metadata").or_insert_with(|| json!({}));
    m.insert("status".into(), status);
    Ok(json_response(StatusCode::CREATED, &review))
}

/// The status of a `SelfSubjectAccessReview`: whether the user may do what `spec` describes.
fn access_review(state: &ServerState, user: &User, spec: &Value) -> Result<Value, Error> {
    let text = |v: &Value, key: &str| v.get(key).and_then(Value::as_str).unwrap_or("").to_string();
    let attributes = if let Some(r) = spec.get("resourceAttributes") {
        Attributes {
            verb: text(r, "verb"),
            resource_request: true,
            namespace: text(r, "namespace"),
            api_group: text(r, "group"),
            api_version: text(r, "version"),
            resource: text(r, "resource"),
            subresource: text(r, "subresource"),
            name: text(r, "name"),
            path: String::new(),
        }
    } else if let Some(n) = spec.get("nonResourceAttributes") {
        Attributes::non_resource(&text(n, "verb"), &text(n, "path"))
    } else {
        return Err(Error::Invalid {
            group: "authorization.k8s.io".to_string(),
            kind: "SelfSubjectAccessReview".to_string(),
            name: String::new(),
            message: "spec.resourceAttributes: Invalid value: \"null\": exactly one of nonResourceAttributes or resourceAttributes must be specified".to_string(),
            causes: Vec::new(),
        });
    };
    let decision = rbac::authorize(&state.store, user, &attributes);
    let mut status = json!({"allowed": decision.allowed});
    if !decision.reason.is_empty() {
        status["reason"] = json!(decision.reason);
    }
    Ok(status)
}

/// The status of a `SelfSubjectRulesReview`: every rule the user has in `spec.namespace`.
fn rules_review(state: &ServerState, user: &User, spec: &Value) -> Value {
    let namespace = spec.get("namespace").and_then(Value::as_str).unwrap_or("");
    let rules = rbac::rules_for(&state.store, user, namespace);
    let resource: Vec<Value> = rules.resource_rules.iter().map(resource_rule).collect();
    let non_resource: Vec<Value> = rules
        .non_resource_rules
        .iter()
        .map(|r| json!({"verbs": r.verbs, "nonResourceURLs": r.non_resource_urls.clone().unwrap_or_default()}))
        .collect();
    let mut status = json!({
        "resourceRules": resource,
        "nonResourceRules": non_resource,
        "incomplete": !rules.evaluation_error.is_empty(),
    });
    if !rules.evaluation_error.is_empty() {
        status["evaluationError"] = json!(rules.evaluation_error);
    }
    status
}

fn resource_rule(r: &PolicyRule) -> Value {
    let mut rule = json!({"verbs": r.verbs});
    for (key, values) in [
        ("apiGroups", &r.api_groups),
        ("resources", &r.resources),
        ("resourceNames", &r.resource_names),
    ] {
        if let Some(v) = values.as_ref().filter(|v| !v.is_empty()) {
            rule[key] = json!(v);
        }
    }
    rule
}
