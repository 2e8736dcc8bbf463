//! Who is asking, and the reviews that tell them: `SelfSubjectReview` (`kubectl auth whoami`),
//! `SelfSubjectAccessReview` (`kubectl auth can-i`) and `SelfSubjectRulesReview` (`kubectl auth can-i
//! --list`). Reviews are answered at once and never stored.
//!
//! Authorisation is permissive: every authenticated user may do everything, so every review says
//! `allowed` and every rules review lists `*`.

use http::{Request, Response, StatusCode, header};
use hyper::body::Incoming;
use serde_json::{Value, json};

use super::protobuf::object_body;
use super::{ApiPath, Body, ServerState, json_response, read_body};
use crate::resource::ResourceInfo;
use crate::store::Error;

/// The user behind the admin token, as k3s names its admin.
const ADMIN: &str = "system:admin";

/// An authenticated user.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct User {
    /// The user name, e.g. `system:serviceaccount:default:default`.
    pub name: String,
    /// The groups, `system:authenticated` last.
    pub groups: Vec<String>,
}

impl User {
    /// The user a name from the token table stands for, with the groups Kubernetes gives it.
    fn named(name: &str) -> User {
        let mut groups = Vec::new();
        if name == ADMIN {
            groups.push("system:masters".to_string());
        } else if let Some(rest) = name.strip_prefix("system:serviceaccount:") {
            let namespace = rest.split(':').next().unwrap_or_default();
            groups.push("system:serviceaccounts".to_string());
            groups.push(format!("system:serviceaccounts:{namespace}"));
        }
        groups.push("system:authenticated".to_string());
        User {
            name: name.to_string(),
            groups,
        }
    }
}

/// The user of the request's bearer token: the admin token, or a token registered in the store (the
/// service-account tokens the Docker kubelet hands to pods). `None` when there is no valid token.
pub fn authenticate<B>(state: &ServerState, req: &Request<B>) -> Option<User> {
    let token = req
        .headers()
        .get(header::AUTHORIZATION)?
        .to_str()
        .ok()?
        .strip_prefix("Bearer ")?
        .trim();
    if token == state.token {
        return Some(User::named(ADMIN));
    }
    state.store.token_user(token).map(|name| User::named(&name))
}

/// Answers a `POST` of a review; every other verb is refused as upstream does.
pub async fn answer(
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
    let status = match info.kind.as_str() {
        "SelfSubjectReview" => json!({"userInfo": {"username": user.name, "groups": user.groups}}),
        "SelfSubjectRulesReview" => json!({
            "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}],
            "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
            "incomplete": false,
        }),
        _ => {
            json!({"allowed": true, "reason": "kube-sim allows every authenticated user everything"})
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn users_get_the_groups_kubernetes_gives_them() {
        assert_eq!(
            User::named("system:admin").groups,
            ["system:masters", "system:authenticated"]
        );
        assert_eq!(
            User::named("system:serviceaccount:team:builder").groups,
            [
                "system:serviceaccounts",
                "system:serviceaccounts:team",
                "system:authenticated"
            ]
        );
    }
}
