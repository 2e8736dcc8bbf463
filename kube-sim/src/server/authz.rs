//! Who is asking and whether they may: the bearer token's user (the admin token, or a service-account
//! token the store issued), impersonation (`Impersonate-User`, `Impersonate-Group`), the request's
//! attributes as kube-apiserver's `RequestInfoFactory` derives them, and the RBAC check with
//! kube-apiserver's `403 Forbidden`.

use http::{HeaderMap, Method, Request, header};

use super::{Query, ServerState};
use crate::rbac::{self, Attributes, User};
use crate::resource::GroupResource;
use crate::store::Error;

/// The user of the request's bearer token: the admin for the kubeconfig's token, or the service account
/// of a token the store issued and still honours. `None` when there is no valid token.
pub fn authenticate<B>(state: &ServerState, req: &Request<B>) -> Option<User> {
    let token = req
        .headers()
        .get(header::AUTHORIZATION)?
        .to_str()
        .ok()?
        .strip_prefix("Bearer ")?
        .trim();
    if token == state.token {
        return Some(User::admin());
    }
    let identity = state.store.token_identity(token)?;
    Some(User::service_account(
        &identity.namespace,
        &identity.service_account,
    ))
}

/// The user the request acts as: `user` itself, or the one its `Impersonate-*` headers name when `user`
/// may impersonate that user and those groups (verb `impersonate` on `users`, `serviceaccounts`,
/// `groups`, `uids` and `userextras/<key>`).
pub fn impersonate(state: &ServerState, headers: &HeaderMap, user: User) -> Result<User, Error> {
    let values = |name: &str| -> Vec<String> {
        headers
            .get_all(name)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .map(str::to_string)
            .collect()
    };
    let names = values("impersonate-user");
    let groups = values("impersonate-group");
    let uids = values("impersonate-uid");
    let extras: Vec<(String, String)> = headers
        .iter()
        .filter_map(|(k, v)| {
            let key = k.as_str().strip_prefix("impersonate-extra-")?;
            Some((key.to_string(), v.to_str().ok()?.to_string()))
        })
        .collect();
    let Some(name) = names.first() else {
        if groups.is_empty() && uids.is_empty() && extras.is_empty() {
            return Ok(user);
        }
        return Err(Error::BadRequest(format!(
            "requested {:?} without impersonating a user",
            groups.iter().chain(&uids).collect::<Vec<_>>()
        )));
    };
    let mut asks = Vec::new();
    let account = rbac::service_account(name);
    asks.push(match account {
        Some((namespace, sa)) => Attributes::resource("impersonate", "", "serviceaccounts")
            .in_namespace(namespace)
            .named(sa),
        None => Attributes::resource("impersonate", "", "users").named(name),
    });
    for g in &groups {
        asks.push(Attributes::resource("impersonate", "", "groups").named(g));
    }
    for u in &uids {
        asks.push(Attributes::resource("impersonate", "authentication.k8s.io", "uids").named(u));
    }
    for (key, value) in &extras {
        let mut a = Attributes::resource("impersonate", "authentication.k8s.io", "userextras");
        a.subresource = key.clone();
        asks.push(a.named(value));
    }
    for ask in &asks {
        check(state, &user, ask)?;
    }
    let mut impersonated = match (account, groups.is_empty()) {
        (Some((namespace, sa)), true) => User::service_account(namespace, sa),
        _ => User {
            name: name.clone(),
            groups,
        },
    };
    if name != "system:anonymous" && !impersonated.groups.iter().any(|g| g == rbac::AUTHENTICATED) {
        impersonated.groups.push(rbac::AUTHENTICATED.to_string());
    }
    Ok(impersonated)
}

/// The attributes of a request (`RequestInfoFactory.NewRequestInfo`): paths under `/api/<version>/` and
/// `/apis/<group>/<version>/` are resource requests, everything else a non-resource URL.
pub fn attributes(method: &Method, path: &str, query: &Query) -> Attributes {
    let method_verb = method.as_str().to_ascii_lowercase();
    let parts: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let rest = match parts.as_slice() {
        ["api", version, rest @ ..] if !rest.is_empty() => Some(("", *version, rest)),
        ["apis", group, version, rest @ ..] if !rest.is_empty() => Some((*group, *version, rest)),
        _ => None,
    };
    let Some((group, version, mut rest)) = rest else {
        return Attributes::non_resource(&method_verb, path);
    };
    let mut a = Attributes {
        resource_request: true,
        api_group: group.to_string(),
        api_version: version.to_string(),
        ..Attributes::default()
    };
    match rest {
        ["watch", tail @ ..] if !tail.is_empty() => {
            a.verb = "watch".to_string();
            rest = tail;
        }
        _ => {
            a.verb = match *method {
                Method::POST => "create",
                Method::GET | Method::HEAD => "get",
                Method::PUT => "update",
                Method::PATCH => "patch",
                Method::DELETE => "delete",
                _ => "",
            }
            .to_string();
        }
    }
    if rest[0] == "namespaces" && rest.len() > 1 {
        a.namespace = rest[1].to_string();
        if rest.len() > 2 && !matches!(rest[2], "status" | "finalize") {
            rest = &rest[2..];
        }
    }
    a.resource = rest[0].to_string();
    if let Some(name) = rest.get(1) {
        a.name = name.to_string();
    }
    if let Some(sub) = rest.get(2) {
        a.subresource = sub.to_string();
    }
    if a.name.is_empty() && a.verb == "get" {
        a.verb = if query.flag("watch") { "watch" } else { "list" }.to_string();
        if let Some(name) = query
            .get("fieldSelector")
            .and_then(|s| s.strip_prefix("metadata.name="))
            .filter(|n| !n.is_empty() && !n.contains([',', '/', '=', '!']))
        {
            a.name = name.to_string();
        }
    }
    if a.name.is_empty() && a.verb == "delete" {
        a.verb = "deletecollection".to_string();
    }
    a
}

/// `Ok` when `user` may do what `attributes` ask, else kube-apiserver's `403 Forbidden`.
pub fn check(state: &ServerState, user: &User, attributes: &Attributes) -> Result<(), Error> {
    let decision = rbac::authorize(&state.store, user, attributes);
    if decision.allowed {
        return Ok(());
    }
    let mut message = attributes.forbidden_message(&user.name);
    if !decision.reason.is_empty() {
        message = format!("{message}: {}", decision.reason);
    }
    let resource = if attributes.resource_request {
        GroupResource::new(&attributes.api_group, &attributes.resource)
    } else {
        GroupResource::new("", "")
    };
    Err(Error::Denied {
        resource,
        name: attributes.name.clone(),
        message,
    })
}

/// Authorizes a request as `user`: its own attributes and, for a `GET` that opens a stream into a pod
/// (`exec`, `attach`, `portforward` over WebSocket), `create` as well, as kube-apiserver does since 1.31.
pub fn authorize(
    state: &ServerState,
    user: &User,
    method: &Method,
    path: &str,
    query: &Query,
) -> Result<(), Error> {
    let a = attributes(method, path, query);
    check(state, user, &a)?;
    if a.resource_request
        && a.verb == "get"
        && a.api_group.is_empty()
        && a.resource == "pods"
        && matches!(a.subresource.as_str(), "exec" | "attach" | "portforward")
    {
        check(
            state,
            user,
            &Attributes {
                verb: "create".to_string(),
                ..a
            },
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(method: Method, path_and_query: &str) -> Attributes {
        let (path, query) = path_and_query
            .split_once('?')
            .unwrap_or((path_and_query, ""));
        attributes(&method, path, &Query::parse(Some(query)))
    }

    #[test]
    fn requests_get_kube_apiservers_attributes() {
        let a = at(Method::GET, "/api/v1/namespaces/demo/secrets");
        assert_eq!(
            (a.verb.as_str(), a.namespace.as_str(), a.resource.as_str()),
            ("list", "demo", "secrets")
        );
        let a = at(Method::GET, "/apis/apps/v1/deployments?watch=true");
        assert_eq!((a.verb.as_str(), a.api_group.as_str()), ("watch", "apps"));
        let a = at(
            Method::PATCH,
            "/apis/demo.dev-env.io/v1alpha1/namespaces/demo/workerpools/default/status",
        );
        assert_eq!(a.combined_resource(), "workerpools/status");
        assert_eq!((a.verb.as_str(), a.name.as_str()), ("patch", "default"));
        let a = at(Method::GET, "/api/v1/namespaces/demo");
        assert_eq!(
            (a.resource.as_str(), a.name.as_str(), a.namespace.as_str()),
            ("namespaces", "demo", "demo")
        );
        let a = at(Method::DELETE, "/api/v1/namespaces/demo/pods");
        assert_eq!(a.verb, "deletecollection");
        let a = at(
            Method::GET,
            "/api/v1/namespaces/demo/pods?fieldSelector=metadata.name%3Dweb",
        );
        assert_eq!((a.verb.as_str(), a.name.as_str()), ("list", "web"));
        let a = at(Method::GET, "/apis/apps/v1");
        assert!(!a.resource_request);
        assert_eq!((a.verb.as_str(), a.path.as_str()), ("get", "/apis/apps/v1"));
        let a = at(
            Method::POST,
            "/api/v1/namespaces/demo/serviceaccounts/sa/token",
        );
        assert_eq!(
            (a.verb.as_str(), a.combined_resource().as_str()),
            ("create", "serviceaccounts/token")
        );
    }
}
