//! Discovery documents: `/version`, `/api`, `/apis`, `/apis/<group>`, and the resource lists of each version.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{Value, json};

use crate::platform::Platform;
use crate::resource::{ResourceInfo, compare_versions};

/// The Kubernetes version the simulator claims to be.
pub const KUBERNETES_MINOR: &str = "32";

/// The `/version` document. Its `platform` is the binary's own, as an API server reports its
/// `runtime.GOOS/GOARCH`.
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
        "platform": Platform::of_build().os_arch()
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
            list.push(
                json!({"name": "pods/binding", "singularName": "", "namespaced": true,
                "kind": "Binding", "verbs": ["create"]}),
            );
        }
        if is_service_accounts(r) {
            list.push(json!({"name": "serviceaccounts/token", "singularName": "", "namespaced": true,
                "group": "authentication.k8s.io", "version": "v1", "kind": "TokenRequest", "verbs": ["create"]}));
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
        subresources.push(json!({"subresource": "binding",
            "responseKind": kind("", "v1", "Binding"), "verbs": ["create"]}));
    }
    if is_service_accounts(r) {
        subresources.push(json!({"subresource": "token",
            "responseKind": kind("authentication.k8s.io", "v1", "TokenRequest"), "verbs": ["create"]}));
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

/// Whether `r` is the core `serviceaccounts`, whose `token` subresource issues tokens.
fn is_service_accounts(r: &ResourceInfo) -> bool {
    r.group.is_empty() && r.plural == "serviceaccounts"
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
