//! The paths of a resource's REST operations as the OpenAPI documents list them.
//!
//! Clients read three things here: each operation's `x-kubernetes-group-version-kind` (`kubectl explain`
//! finds the kind of a resource through it), its `x-kubernetes-action`, and the query parameters it accepts
//! (kubectl checks for `fieldValidation` on PATCH before it relies on server-side field validation).

use serde_json::{Value, json};

use super::builtin::{DELETE_OPTIONS, PATCH, SCALE, STATUS, list_name};
use super::{Gvk, REF_PREFIX};
use crate::resource::ResourceInfo;

/// Which OpenAPI version a path is written for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flavor {
    /// Swagger 2.0: `parameters` with `type`, bodies as `in: body` parameters, `schema` on responses.
    Swagger2,
    /// OpenAPI 3.0: parameters with `schema`, `requestBody`, responses with `content`.
    OpenApi3,
}

/// The query parameters of a list or watch.
const LIST: &[&str] = &[
    "allowWatchBookmarks",
    "continue",
    "fieldSelector",
    "labelSelector",
    "limit",
    "resourceVersion",
    "resourceVersionMatch",
    "sendInitialEvents",
    "timeoutSeconds",
    "watch",
];
/// The query parameters of a create or replace.
const WRITE: &[&str] = &["dryRun", "fieldManager", "fieldValidation"];
/// The query parameters of a patch.
const PATCH_QUERY: &[&str] = &["dryRun", "fieldManager", "fieldValidation", "force"];
/// The query parameters of a delete.
const DELETE: &[&str] = &["dryRun", "gracePeriodSeconds", "propagationPolicy"];

/// One operation on a path.
struct Op<'a> {
    method: &'static str,
    action: &'static str,
    gvk: &'a Gvk,
    response: &'a str,
    body: Option<&'a str>,
    query: &'static [&'static str],
}

/// The paths of one resource at one version: the collection, the item, the list across namespaces for a
/// namespaced resource, and the `status` and `scale` subresources it has. `kind_ref` is the kind's
/// definition name.
pub fn resource_paths(
    r: &ResourceInfo,
    version: &str,
    kind_ref: &str,
    flavor: Flavor,
) -> Vec<(String, Value)> {
    let prefix = if r.group.is_empty() {
        format!("/api/{version}")
    } else {
        format!("/apis/{}/{version}", r.group)
    };
    let scope = if r.namespaced {
        format!("{prefix}/namespaces/{{namespace}}")
    } else {
        prefix.clone()
    };
    let gvk = Gvk::new(&r.group, version, &r.kind);
    let list_ref = list_name(kind_ref, &r.list_kind);
    let op = |method, action, response, body, query| Op {
        method,
        action,
        gvk: &gvk,
        response,
        body,
        query,
    };
    let collection = vec![
        op("get", "list", &list_ref, None, LIST),
        op("post", "post", kind_ref, Some(kind_ref), WRITE),
        op(
            "delete",
            "deletecollection",
            STATUS,
            Some(DELETE_OPTIONS),
            DELETE,
        ),
    ];
    let item = |response: &'static str| {
        let response = if response.is_empty() {
            kind_ref
        } else {
            response
        };
        vec![
            op("get", "get", response, None, &[]),
            op("put", "put", response, Some(response), WRITE),
            op("patch", "patch", response, Some(PATCH), PATCH_QUERY),
        ]
    };
    let mut object = item("");
    object.push(op("delete", "delete", STATUS, Some(DELETE_OPTIONS), DELETE));
    let base = format!("{scope}/{}", r.plural);
    let mut out = vec![
        path_item(&base, r, &collection, flavor),
        path_item(&format!("{base}/{{name}}"), r, &object, flavor),
    ];
    if r.namespaced {
        let all = vec![op("get", "list", &list_ref, None, LIST)];
        out.push(path_item(
            &format!("{prefix}/{}", r.plural),
            r,
            &all,
            flavor,
        ));
    }
    if r.status_subresource {
        let status = item("");
        out.push(path_item(
            &format!("{base}/{{name}}/status"),
            r,
            &status,
            flavor,
        ));
    }
    if r.scale_subresource {
        let scale_gvk = Gvk::new("autoscaling", "v1", "Scale");
        let mut scale = item(SCALE);
        scale.iter_mut().for_each(|o| o.gvk = &scale_gvk);
        out.push(path_item(
            &format!("{base}/{{name}}/scale"),
            r,
            &scale,
            flavor,
        ));
    }
    out
}

/// A path with its operations and its path parameters.
fn path_item(path: &str, r: &ResourceInfo, ops: &[Op<'_>], flavor: Flavor) -> (String, Value) {
    let mut item = serde_json::Map::new();
    for o in ops {
        item.insert(o.method.to_string(), operation(o, r, flavor));
    }
    let mut params = vec![parameter("pretty", "query", flavor)];
    if path.contains("{name}") {
        params.push(parameter("name", "path", flavor));
    }
    if path.contains("{namespace}") {
        params.push(parameter("namespace", "path", flavor));
    }
    item.insert("parameters".into(), Value::Array(params));
    (path.to_string(), Value::Object(item))
}

/// One operation: its identity, its extensions, its query parameters, its body and its response.
fn operation(o: &Op<'_>, r: &ResourceInfo, flavor: Flavor) -> Value {
    let reference = |name: &str| json!({"$ref": format!("{REF_PREFIX}{name}")});
    let mut params: Vec<Value> = o
        .query
        .iter()
        .map(|q| parameter(q, "query", flavor))
        .collect();
    let consumes = body_types(o.method, r);
    let mut op = json!({
        "operationId": format!("{}{}", o.action, r.kind),
        "x-kubernetes-action": o.action,
        "x-kubernetes-group-version-kind": o.gvk,
    });
    let responses = match flavor {
        Flavor::Swagger2 => {
            json!({"200": {"description": "OK", "schema": reference(o.response)}, "401": {"description": "Unauthorized"}})
        }
        Flavor::OpenApi3 => json!({"200": {"description": "OK", "content": {
            "application/json": {"schema": reference(o.response)}}}, "401": {"description": "Unauthorized"}}),
    };
    let Value::Object(m) = &mut op else {
        return op;
    };
    m.insert("responses".into(), responses);
    match (flavor, o.body) {
        (Flavor::Swagger2, body) => {
            if let Some(b) = body {
                params.push(
                    json!({"name": "body", "in": "body", "required": true, "schema": reference(b)}),
                );
            }
            m.insert("consumes".into(), json!(consumes));
            m.insert(
                "produces".into(),
                json!(["application/json", "application/yaml"]),
            );
            m.insert("schemes".into(), json!(["https"]));
        }
        (Flavor::OpenApi3, Some(b)) => {
            let content: serde_json::Map<String, Value> = consumes
                .iter()
                .map(|t| (t.to_string(), json!({"schema": reference(b)})))
                .collect();
            m.insert(
                "requestBody".into(),
                json!({"content": content, "required": true}),
            );
        }
        (Flavor::OpenApi3, None) => {}
    }
    m.insert("parameters".into(), Value::Array(params));
    op
}

/// The media types an operation's body may come in.
fn body_types(method: &str, r: &ResourceInfo) -> Vec<&'static str> {
    if method != "patch" {
        return vec!["*/*"];
    }
    let mut types = vec![
        "application/apply-patch+yaml",
        "application/json-patch+json",
        "application/merge-patch+json",
    ];
    if !r.is_custom() {
        types.push("application/strategic-merge-patch+json");
    }
    types
}

/// A parameter with the type the API server declares for it.
fn parameter(name: &str, location: &str, flavor: Flavor) -> Value {
    let type_ = match name {
        "allowWatchBookmarks" | "force" | "sendInitialEvents" | "watch" => "boolean",
        "gracePeriodSeconds" | "limit" | "timeoutSeconds" => "integer",
        _ => "string",
    };
    let mut p = match flavor {
        Flavor::Swagger2 => {
            json!({"name": name, "in": location, "type": type_, "uniqueItems": true})
        }
        Flavor::OpenApi3 => {
            json!({"name": name, "in": location, "schema": {"type": type_, "uniqueItems": true}})
        }
    };
    if location == "path"
        && let Value::Object(m) = &mut p
    {
        m.insert("required".into(), json!(true));
    }
    p
}
