//! Discovery documents: `/version`, `/api`, `/apis`, `/apis/<group>`, and the resource lists of each version.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{Value, json};

use crate::resource::{ResourceInfo, compare_versions};

/// The Kubernetes version the simulator claims to be.
pub const KUBERNETES_MINOR: &str = "32";

/// The `/version` document.
pub fn version() -> Value {
    json!({
        "major": "1",
        "minor": KUBERNETES_MINOR,
        "gitVersion": format!("v1.{KUBERNETES_MINOR}.0+kube-sim"),
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2026-01-01T00:00:00Z",
        "goVersion": "go1.23.0",
        "compiler": "gc",
        "platform": "linux/amd64"
    })
}

/// The `/api` document (`APIVersions`).
pub fn core_versions(server_address: &str) -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}]
    })
}

fn groups(resources: &[Arc<ResourceInfo>]) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for r in resources.iter().filter(|r| !r.group.is_empty()) {
        let versions = out.entry(r.group.clone()).or_default();
        for v in &r.versions {
            if !versions.contains(v) {
                versions.push(v.clone());
            }
        }
    }
    for versions in out.values_mut() {
        versions.sort_by(|a, b| compare_versions(a, b));
    }
    out
}

fn group_doc(name: &str, versions: &[String]) -> Value {
    let vs: Vec<Value> = versions
        .iter()
        .map(|v| json!({"groupVersion": format!("{name}/{v}"), "version": v}))
        .collect();
    json!({
        "name": name,
        "versions": vs,
        "preferredVersion": vs.first().cloned().unwrap_or(Value::Null)
    })
}

/// The `/apis` document (`APIGroupList`).
pub fn group_list(resources: &[Arc<ResourceInfo>]) -> Value {
    let groups: Vec<Value> = groups(resources)
        .iter()
        .map(|(g, vs)| group_doc(g, vs))
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// The `/apis/<group>` document (`APIGroup`), if the group is served.
pub fn group(resources: &[Arc<ResourceInfo>], name: &str) -> Option<Value> {
    let groups = groups(resources);
    let versions = groups.get(name)?;
    let mut doc = group_doc(name, versions);
    if let Value::Object(m) = &mut doc {
        m.insert("kind".into(), json!("APIGroup"));
        m.insert("apiVersion".into(), json!("v1"));
    }
    Some(doc)
}

/// The `APIResourceList` of one group version, if it serves anything.
pub fn resource_list(resources: &[Arc<ResourceInfo>], group: &str, version: &str) -> Option<Value> {
    let mut list = Vec::new();
    for r in resources
        .iter()
        .filter(|r| r.group == group && r.serves(version))
    {
        let mut entry = json!({
            "name": r.plural,
            "singularName": r.singular,
            "namespaced": r.namespaced,
            "kind": r.kind,
            "verbs": r.verbs(),
        });
        if let Value::Object(m) = &mut entry {
            insert_kubectl_names(m, r);
        }
        list.push(entry);
        if r.status_subresource {
            list.push(json!({"name": format!("{}/status", r.plural), "singularName": "", "namespaced": r.namespaced,
                "kind": r.kind, "verbs": ["get", "patch", "update"]}));
        }
        if r.scale_subresource {
            list.push(json!({"name": format!("{}/scale", r.plural), "singularName": "", "namespaced": r.namespaced,
                "group": "autoscaling", "version": "v1", "kind": "Scale", "verbs": ["get", "patch", "update"]}));
        }
        if r.log_subresource {
            list.push(json!({"name": format!("{}/log", r.plural), "singularName": "", "namespaced": r.namespaced,
                "kind": "Pod", "verbs": ["get"]}));
        }
    }
    if list.is_empty() {
        return None;
    }
    let group_version = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    Some(
        json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version, "resources": list}),
    )
}

/// The `/openapi/v3` index: one entry per served group version.
pub fn openapi_v3_index(resources: &[Arc<ResourceInfo>]) -> Value {
    use std::hash::{Hash, Hasher};
    let mut hashes: BTreeMap<String, std::collections::hash_map::DefaultHasher> = BTreeMap::new();
    for r in resources {
        for v in &r.versions {
            let key = if r.group.is_empty() {
                format!("api/{v}")
            } else {
                format!("apis/{}/{v}", r.group)
            };
            let h = hashes.entry(key).or_default();
            (&r.plural, &r.kind, r.namespaced).hash(h);
            r.schema(v).map(|s| s.to_string()).hash(h);
        }
    }
    let paths: serde_json::Map<String, Value> = hashes
        .into_iter()
        .map(|(key, h)| {
            let url = format!("/openapi/v3/{key}?hash={:016X}", h.finish());
            (key, json!({"serverRelativeURL": url}))
        })
        .collect();
    json!({"paths": paths})
}

/// The OpenAPI v3 document of a group version: for every resource, the item path with its operations.
///
/// Only what clients inspect is described: the `x-kubernetes-group-version-kind` of each operation and the
/// query parameters (kubectl checks `fieldValidation` on PATCH before relying on server-side validation).
/// Schemas are open objects.
pub fn openapi_v3_group_version(resources: &[Arc<ResourceInfo>], key: &str) -> Option<Value> {
    let (group, version) = match key.split('/').collect::<Vec<_>>().as_slice() {
        ["api", v] => (String::new(), v.to_string()),
        ["apis", g, v] => (g.to_string(), v.to_string()),
        _ => return None,
    };
    let prefix = if group.is_empty() {
        format!("/api/{version}")
    } else {
        format!("/apis/{group}/{version}")
    };
    let query = |name: &str| json!({"name": name, "in": "query", "schema": {"type": "string", "uniqueItems": true}});
    let mut paths = serde_json::Map::new();
    let mut schemas = serde_json::Map::new();
    for r in resources
        .iter()
        .filter(|r| r.group == group && r.serves(&version))
    {
        let gvk = json!({"group": group, "version": version, "kind": r.kind});
        let schema_name = format!(
            "{}.{}.{}",
            if group.is_empty() {
                "io.k8s.api.core"
            } else {
                &group
            },
            version,
            r.kind
        );
        schemas.insert(
            schema_name.clone(),
            json!({"type": "object", "x-kubernetes-group-version-kind": [gvk.clone()],
            "x-kubernetes-preserve-unknown-fields": true}),
        );
        let body = json!({"content": {"application/json": {"schema": {"$ref": format!("#/components/schemas/{schema_name}")}}}});
        let ok = json!({"200": body, "201": body});
        let write_params = json!([
            query("dryRun"),
            query("fieldManager"),
            query("fieldValidation")
        ]);
        let mut patch_params = write_params.clone();
        if let Value::Array(a) = &mut patch_params {
            a.push(json!({"name": "force", "in": "query", "schema": {"type": "boolean", "uniqueItems": true}}));
        }
        let op = |verb: &str, params: &Value| {
            json!({"operationId": format!("{verb}{}", r.kind), "x-kubernetes-action": verb,
                "x-kubernetes-group-version-kind": gvk, "parameters": params, "responses": ok})
        };
        let item = if r.namespaced {
            format!("{prefix}/namespaces/{{namespace}}/{}/{{name}}", r.plural)
        } else {
            format!("{prefix}/{}/{{name}}", r.plural)
        };
        let collection = item.trim_end_matches("/{name}").to_string();
        paths.insert(
            item,
            json!({"get": op("get", &json!([])), "put": op("put", &write_params), "patch": op("patch", &patch_params),
                "delete": op("delete", &json!([query("dryRun")]))}),
        );
        paths.insert(
            collection,
            json!({"get": op("list", &json!([])), "post": op("post", &write_params)}),
        );
    }
    if paths.is_empty() {
        return None;
    }
    Some(json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": format!("v1.{KUBERNETES_MINOR}.0")},
        "paths": paths,
        "components": {"schemas": schemas}
    }))
}

/// The media type of aggregated discovery (`apidiscovery.k8s.io/v2`).
pub const AGGREGATED_MEDIA_TYPE: &str =
    "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";

/// Whether an `Accept` header prefers aggregated discovery v2.
pub fn wants_aggregated(accept: &str) -> bool {
    accept.split(',').next().is_some_and(|first| {
        first.contains("as=APIGroupDiscoveryList")
            && first.contains("g=apidiscovery.k8s.io")
            && first.contains("v=v2")
            && !first.contains("v=v2beta1")
    })
}

/// The aggregated discovery document of `/api` (`core: true`) or `/apis`: every group with every version
/// and its resources in one `APIGroupDiscoveryList`.
pub fn aggregated(resources: &[Arc<ResourceInfo>], core: bool) -> Value {
    let mut groups: Vec<(String, Vec<String>)> = if core {
        vec![(String::new(), vec!["v1".to_string()])]
    } else {
        self::groups(resources).into_iter().collect()
    };
    groups.retain(|(g, _)| g.is_empty() == core);
    let items: Vec<Value> = groups
        .iter()
        .map(|(group, versions)| {
            let versions: Vec<Value> = versions
                .iter()
                .map(|v| {
                    let list: Vec<Value> = resources
                        .iter()
                        .filter(|r| r.group == *group && r.serves(v))
                        .map(|r| aggregated_resource(r, v))
                        .collect();
                    json!({"version": v, "resources": list, "freshness": "Current"})
                })
                .collect();
            json!({"metadata": {"name": group, "creationTimestamp": null}, "versions": versions})
        })
        .collect();
    json!({"kind": "APIGroupDiscoveryList", "apiVersion": "apidiscovery.k8s.io/v2", "metadata": {}, "items": items})
}

fn aggregated_resource(r: &ResourceInfo, version: &str) -> Value {
    let kind = |g: &str, v: &str, k: &str| json!({"group": g, "version": v, "kind": k});
    let mut subresources = Vec::new();
    if r.status_subresource {
        subresources.push(
            json!({"subresource": "status", "responseKind": kind(&r.group, version, &r.kind),
            "verbs": ["get", "patch", "update"]}),
        );
    }
    if r.scale_subresource {
        subresources.push(
            json!({"subresource": "scale", "responseKind": kind("autoscaling", "v1", "Scale"),
            "verbs": ["get", "patch", "update"]}),
        );
    }
    if r.log_subresource {
        subresources.push(
            json!({"subresource": "log", "responseKind": kind("", "v1", "Pod"), "verbs": ["get"]}),
        );
    }
    let mut entry = json!({
        "resource": r.plural,
        "responseKind": kind(&r.group, version, &r.kind),
        "scope": if r.namespaced { "Namespaced" } else { "Cluster" },
        "singularResource": r.singular,
        "verbs": r.verbs(),
    });
    if let Value::Object(m) = &mut entry {
        insert_kubectl_names(m, r);
        if !subresources.is_empty() {
            m.insert("subresources".into(), Value::Array(subresources));
        }
    }
    entry
}

/// The short names and categories of a resource, where it has any, on its discovery entry.
fn insert_kubectl_names(entry: &mut serde_json::Map<String, Value>, r: &ResourceInfo) {
    if !r.short_names.is_empty() {
        entry.insert("shortNames".into(), json!(r.short_names));
    }
    if !r.categories.is_empty() {
        entry.insert("categories".into(), json!(r.categories));
    }
}
