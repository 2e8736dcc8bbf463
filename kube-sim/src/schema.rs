//! Type knowledge needed for merging: list types for server-side apply, merge keys for strategic merge
//! patch, and pruning plus defaulting of custom resources by their structural schema.
//!
//! Built-in types carry a small table of the list keys Kubernetes declares in its Go types
//! (`+listType=map`, `patchMergeKey`); custom resources use `x-kubernetes-list-type` and
//! `x-kubernetes-list-map-keys` from the CRD schema.

use serde::Deserialize as _;
use serde_json::{Map, Value};

/// How a list merges under server-side apply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ListType {
    /// Replaced as a whole and owned as one field.
    Atomic,
    /// A set of scalars, each owned on its own.
    Set,
    /// Items identified by the values of these keys.
    Map(Vec<String>),
}

/// A position in an object's type: either a path of field names in a built-in type or a node of a
/// custom resource's structural schema.
#[derive(Clone, Debug)]
pub enum Node<'a> {
    /// A built-in type, described by the field names from the root (list items add no name).
    BuiltIn(Vec<String>),
    /// A custom resource; `None` means the schema says nothing (unknown fields preserved).
    Schema(Option<&'a Value>),
}

impl<'a> Node<'a> {
    /// The root node of an object type.
    pub fn root(schema: Option<&'a Value>, built_in: bool) -> Node<'a> {
        if built_in {
            Node::BuiltIn(Vec::new())
        } else {
            Node::Schema(schema)
        }
    }

    /// The node of a field of a map.
    pub fn field(&self, name: &str) -> Node<'a> {
        match self {
            Node::BuiltIn(path) => {
                let mut p = path.clone();
                p.push(name.to_string());
                Node::BuiltIn(p)
            }
            Node::Schema(None) => Node::Schema(None),
            Node::Schema(Some(s)) => {
                if let Some(p) = s.get("properties").and_then(|p| p.get(name)) {
                    return Node::Schema(Some(p));
                }
                match s.get("additionalProperties") {
                    Some(a @ Value::Object(_)) => Node::Schema(Some(a)),
                    _ => Node::Schema(None),
                }
            }
        }
    }

    /// The node of a list's items.
    pub fn item(&self) -> Node<'a> {
        match self {
            Node::BuiltIn(path) => Node::BuiltIn(path.clone()),
            Node::Schema(None) => Node::Schema(None),
            Node::Schema(Some(s)) => Node::Schema(s.get("items")),
        }
    }

    fn last_two(&self) -> (&str, &str) {
        match self {
            Node::BuiltIn(path) => {
                let n = path.len();
                let last = path.last().map(String::as_str).unwrap_or("");
                let parent = if n >= 2 { path[n - 2].as_str() } else { "" };
                (parent, last)
            }
            Node::Schema(_) => ("", ""),
        }
    }

    /// The server-side apply list type of the list at this node.
    pub fn list_type(&self) -> ListType {
        match self {
            Node::BuiltIn(_) => {
                let (parent, last) = self.last_two();
                let keys: &[&str] = match (parent, last) {
                    (_, "containers" | "initContainers" | "ephemeralContainers") => &["name"],
                    // A ServiceAccount's `imagePullSecrets` (at the root) is atomic; its `secrets` a map.
                    ("", "imagePullSecrets") => return ListType::Atomic,
                    ("", "secrets") => &["name"],
                    (
                        _,
                        "env" | "volumes" | "imagePullSecrets" | "resourceClaims"
                        | "schedulingGates",
                    ) => &["name"],
                    ("containers" | "initContainers" | "ephemeralContainers", "ports") => {
                        &["containerPort", "protocol"]
                    }
                    ("spec", "ports") => &["port", "protocol"],
                    (_, "volumeMounts") => &["mountPath"],
                    (_, "volumeDevices") => &["devicePath"],
                    (_, "conditions") => &["type"],
                    ("metadata", "ownerReferences") => &["uid"],
                    (_, "hostAliases" | "podIPs" | "hostIPs") => &["ip"],
                    (_, "topologySpreadConstraints") => &["topologyKey", "whenUnsatisfiable"],
                    ("metadata", "finalizers") => return ListType::Set,
                    _ => return ListType::Atomic,
                };
                ListType::Map(keys.iter().map(|k| k.to_string()).collect())
            }
            Node::Schema(None) => ListType::Atomic,
            Node::Schema(Some(s)) => {
                match s.get("x-kubernetes-list-type").and_then(Value::as_str) {
                    Some("set") => ListType::Set,
                    Some("map") => ListType::Map(crate::resource::strings(
                        s.get("x-kubernetes-list-map-keys"),
                    )),
                    _ => ListType::Atomic,
                }
            }
        }
    }

    /// The strategic-merge-patch strategy of the list at this node (built-in types only).
    pub fn patch_strategy(&self) -> PatchStrategy {
        let (parent, last) = self.last_two();
        match (parent, last) {
            (_, "containers" | "initContainers" | "ephemeralContainers") => {
                PatchStrategy::MergeKey("name")
            }
            ("", "imagePullSecrets") => PatchStrategy::Replace,
            ("", "secrets") => PatchStrategy::MergeKey("name"),
            (_, "env" | "volumes" | "imagePullSecrets" | "resourceClaims" | "schedulingGates") => {
                PatchStrategy::MergeKey("name")
            }
            ("containers" | "initContainers" | "ephemeralContainers", "ports") => {
                PatchStrategy::MergeKey("containerPort")
            }
            ("spec", "ports") => PatchStrategy::MergeKey("port"),
            (_, "volumeMounts") => PatchStrategy::MergeKey("mountPath"),
            (_, "volumeDevices") => PatchStrategy::MergeKey("devicePath"),
            (_, "conditions") => PatchStrategy::MergeKey("type"),
            ("metadata", "ownerReferences") => PatchStrategy::MergeKey("uid"),
            (_, "hostAliases" | "podIPs" | "hostIPs") => PatchStrategy::MergeKey("ip"),
            (_, "topologySpreadConstraints") => PatchStrategy::MergeKey("topologyKey"),
            ("status", "addresses") => PatchStrategy::MergeKey("type"),
            ("metadata", "finalizers") => PatchStrategy::MergePrimitives,
            _ => PatchStrategy::Replace,
        }
    }
}

/// How strategic merge patch treats a list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PatchStrategy {
    /// Replace the whole list.
    Replace,
    /// Merge items by this key.
    MergeKey(&'static str),
    /// Union of scalar values.
    MergePrimitives,
}

/// The value of a list-map key in an item, with the defaults Kubernetes applies to key fields.
pub fn key_value(item: &Value, key: &str) -> Value {
    match item.get(key) {
        Some(v) if !v.is_null() => v.clone(),
        _ if key == "protocol" => Value::String("TCP".to_string()),
        _ => Value::Null,
    }
}

/// Removes fields the schema does not declare and fills schema defaults, returning the paths removed.
///
/// `apiVersion`, `kind` and `metadata` at the root are kept; `metadata` is not pruned.
pub fn prune_custom_resource(obj: &mut Value, schema: &Value) -> Vec<String> {
    let mut removed = Vec::new();
    if let Value::Object(map) = obj {
        let props = schema.get("properties").and_then(Value::as_object);
        let keys: Vec<String> = map.keys().cloned().collect();
        for k in keys {
            if k == "apiVersion" || k == "kind" || k == "metadata" {
                continue;
            }
            match props.and_then(|p| p.get(&k)) {
                Some(s) => {
                    if let Some(child) = map.get_mut(&k) {
                        prune(child, s, &k, &mut removed);
                    }
                    drop_null_unless_nullable(map, &k, s);
                }
                None if preserves_unknown(schema) => {}
                None => {
                    map.remove(&k);
                    removed.push(k);
                }
            }
        }
        apply_defaults(map, schema);
    }
    removed
}

fn preserves_unknown(schema: &Value) -> bool {
    schema
        .get("x-kubernetes-preserve-unknown-fields")
        .and_then(Value::as_bool)
        == Some(true)
}

fn drop_null_unless_nullable(map: &mut Map<String, Value>, key: &str, schema: &Value) {
    let nullable = schema.get("nullable").and_then(Value::as_bool) == Some(true);
    if !nullable && map.get(key).is_some_and(Value::is_null) && schema.get("default").is_none() {
        map.remove(key);
    }
}

fn apply_defaults(map: &mut Map<String, Value>, schema: &Value) {
    if let Some(props) = schema.get("properties").and_then(Value::as_object) {
        for (k, s) in props {
            if let Some(d) = s.get("default") {
                let missing = matches!(map.get(k), None | Some(Value::Null));
                if missing {
                    let mut d = d.clone();
                    prune(&mut d, s, k, &mut Vec::new());
                    map.insert(k.clone(), d);
                }
            }
        }
    }
}

fn prune(v: &mut Value, schema: &Value, path: &str, removed: &mut Vec<String>) {
    match v {
        Value::Object(map) => {
            let embedded = schema
                .get("x-kubernetes-embedded-resource")
                .and_then(Value::as_bool)
                == Some(true);
            let props = schema.get("properties").and_then(Value::as_object);
            let additional = schema.get("additionalProperties");
            let keys: Vec<String> = map.keys().cloned().collect();
            for k in keys {
                if embedded && (k == "apiVersion" || k == "kind" || k == "metadata") {
                    continue;
                }
                let child_schema = props.and_then(|p| p.get(&k)).or(match additional {
                    Some(a @ Value::Object(_)) => Some(a),
                    _ => None,
                });
                let child_path = format!("{path}.{k}");
                match child_schema {
                    Some(s) => {
                        if let Some(child) = map.get_mut(&k) {
                            prune(child, s, &child_path, removed);
                        }
                        drop_null_unless_nullable(map, &k, s);
                    }
                    None if preserves_unknown(schema) || additional == Some(&Value::Bool(true)) => {
                    }
                    None => {
                        map.remove(&k);
                        removed.push(child_path);
                    }
                }
            }
            apply_defaults(map, schema);
        }
        Value::Array(items) => {
            if let Some(s) = schema.get("items") {
                for (i, item) in items.iter_mut().enumerate() {
                    prune(item, s, &format!("{path}[{i}]"), removed);
                }
            }
        }
        _ => {}
    }
}

/// Drops the fields `ObjectMeta` does not declare from a custom resource's `metadata`, returning their paths.
pub fn prune_custom_metadata(obj: &mut Value) -> Vec<String> {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    let Some(md) = obj.get_mut("metadata") else {
        return Vec::new();
    };
    let Some(mut typed) = ObjectMeta::deserialize(&*md)
        .ok()
        .and_then(|m| serde_json::to_value(m).ok())
    else {
        return Vec::new();
    };
    drop_invented_objects(md, &mut typed);
    let mut removed = Vec::new();
    removed_paths(md, &typed, "metadata", &mut removed);
    *md = typed;
    removed
}

/// Drops the fields a built-in type does not declare, by decoding the object into its `k8s-openapi` type and
/// encoding it again (which also normalises values the way the API server does, such as numeric quantities
/// becoming strings). Returns the removed paths. Objects that do not decode, and types without a mapping,
/// are left unchanged.
pub fn prune_built_in(group: &str, plural: &str, obj: &mut Value) -> Vec<String> {
    use k8s_openapi::api::apps::v1 as apps;
    use k8s_openapi::api::core::v1 as core;
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1 as ext;

    fn round_trip<K: serde::Serialize + serde::de::DeserializeOwned>(v: &Value) -> Option<Value> {
        let typed = K::deserialize(v).ok()?;
        serde_json::to_value(typed).ok()
    }
    let typed = match (group, plural) {
        ("", "pods") => round_trip::<core::Pod>(obj),
        ("", "configmaps") => round_trip::<core::ConfigMap>(obj),
        ("", "secrets") => round_trip::<core::Secret>(obj),
        ("", "services") => round_trip::<core::Service>(obj),
        ("", "serviceaccounts") => round_trip::<core::ServiceAccount>(obj),
        ("", "namespaces") => round_trip::<core::Namespace>(obj),
        ("", "nodes") => round_trip::<core::Node>(obj),
        ("", "events") => round_trip::<core::Event>(obj),
        ("apps", "deployments") => round_trip::<apps::Deployment>(obj),
        ("apps", "replicasets") => round_trip::<apps::ReplicaSet>(obj),
        ("coordination.k8s.io", "leases") => {
            round_trip::<k8s_openapi::api::coordination::v1::Lease>(obj)
        }
        ("apiextensions.k8s.io", "customresourcedefinitions") => {
            round_trip::<ext::CustomResourceDefinition>(obj)
        }
        _ => None,
    };
    let Some(typed) = typed else {
        return Vec::new();
    };
    let mut typed = typed;
    drop_invented_objects(obj, &mut typed);
    let mut removed = Vec::new();
    removed_paths(obj, &typed, "", &mut removed);
    *obj = typed;
    removed
}

/// Removes the empty objects decoding invented for required fields the body left out (such as a
/// Deployment's `spec.selector`), so that validation sees them missing as the API server does.
fn drop_invented_objects(before: &Value, after: &mut Value) {
    let (Value::Object(b), Value::Object(a)) = (before, after) else {
        return;
    };
    a.retain(|k, v| b.contains_key(k) || !v.as_object().is_some_and(Map::is_empty));
    for (k, v) in a.iter_mut() {
        if let Some(bv) = b.get(k) {
            drop_invented_objects(bv, v);
        }
    }
}

fn removed_paths(before: &Value, after: &Value, path: &str, out: &mut Vec<String>) {
    match (before, after) {
        (Value::Object(b), Value::Object(a)) => {
            for (k, bv) in b {
                let child = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                match a.get(k) {
                    None if !bv.is_null() => out.push(child),
                    None => {}
                    Some(av) => removed_paths(bv, av, &child, out),
                }
            }
        }
        (Value::Array(b), Value::Array(a)) if a.len() == b.len() => {
            for (i, (bv, av)) in b.iter().zip(a).enumerate() {
                removed_paths(bv, av, &format!("{path}[{i}]"), out);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn pruning_drops_undeclared_fields_and_keeps_preserved_ones() {
        let schema = json!({"type": "object", "properties": {
            "spec": {"type": "object", "properties": {
                "replicas": {"type": "integer", "default": 1},
                "template": {"type": "object", "properties": {"metadata": {"type": "object"}}},
                "extra": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}
            }}
        }});
        let mut obj = json!({"apiVersion": "x/v1", "kind": "X", "metadata": {"name": "a", "labels": {"l": "v"}},
            "spec": {"template": {"metadata": {"labels": {"a": "b"}}}, "extra": {"free": 1}, "junk": true},
            "status": {"x": 1}});
        let removed = prune_custom_resource(&mut obj, &schema);
        assert_eq!(
            obj,
            json!({"apiVersion": "x/v1", "kind": "X", "metadata": {"name": "a", "labels": {"l": "v"}},
                "spec": {"template": {"metadata": {}}, "extra": {"free": 1}, "replicas": 1}})
        );
        assert!(removed.contains(&"spec.junk".to_string()));
        assert!(removed.contains(&"spec.template.metadata.labels".to_string()));
    }
}
