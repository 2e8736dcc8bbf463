//! Type errors in built-in objects: a value of the wrong JSON type where the Go type wants another, reported
//! the way the API server's JSON decoder does (`400 BadRequest`, `cannot unmarshal string into Go struct
//! field DeploymentSpec.spec.replicas of type int32`).

use serde::de::DeserializeOwned;
use serde_json::Value;

/// The decoder's message for the first type error of a built-in object, `None` when it decodes (or its
/// type has no mapping).
pub fn type_error(group: &str, plural: &str, kind: &str, obj: &Value) -> Option<String> {
    use k8s_openapi::api::apps::v1 as apps;
    use k8s_openapi::api::core::v1 as core;
    let error = match (group, plural) {
        ("", "pods") => first_error::<core::Pod>(obj),
        ("", "configmaps") => first_error::<core::ConfigMap>(obj),
        ("", "secrets") => first_error::<core::Secret>(obj),
        ("", "services") => first_error::<core::Service>(obj),
        ("", "serviceaccounts") => first_error::<core::ServiceAccount>(obj),
        ("", "namespaces") => first_error::<core::Namespace>(obj),
        ("apps", "deployments") => first_error::<apps::Deployment>(obj),
        ("apps", "replicasets") => first_error::<apps::ReplicaSet>(obj),
        _ => None,
    }?;
    let (path, inner) = error;
    let version = obj
        .get("apiVersion")
        .and_then(Value::as_str)
        .and_then(|v| v.rsplit('/').next())
        .unwrap_or("v1");
    Some(format!(
        "{kind} in version \"{version}\" cannot be handled as a {kind}: json: cannot unmarshal {} into Go struct field {}.{} of type {}",
        json_type(&inner),
        struct_name(kind, &path),
        go_path(&path),
        go_type(&inner),
    ))
}

/// The path and message of the first error decoding `obj` as `K`.
fn first_error<K: DeserializeOwned>(obj: &Value) -> Option<(Vec<String>, String)> {
    let err = serde_path_to_error::deserialize::<_, K>(obj).err()?;
    // Only values of the wrong type are decoder errors; a missing field is left to validation.
    if !err.inner().to_string().starts_with("invalid type: ") {
        return None;
    }
    let path = err
        .path()
        .iter()
        .filter_map(|s| match s {
            serde_path_to_error::Segment::Map { key } => Some(key.clone()),
            serde_path_to_error::Segment::Seq { .. } => Some("[]".to_string()),
            _ => None,
        })
        .collect();
    Some((path, err.into_inner().to_string()))
}

/// The Go name of the JSON type the body had, from serde's `invalid type: string "x", expected i32`.
fn json_type(message: &str) -> &'static str {
    let got = message
        .strip_prefix("invalid type: ")
        .unwrap_or("")
        .split([' ', ','])
        .next()
        .unwrap_or("");
    match got {
        "string" => "string",
        "integer" | "floating" => "number",
        "boolean" => "bool",
        "map" => "object",
        "sequence" => "array",
        "null" => "null",
        _ => "value",
    }
}

/// The Go type the decoder wanted, from serde's `expected ...`.
fn go_type(message: &str) -> String {
    let want = message
        .split("expected ")
        .nth(1)
        .unwrap_or("")
        .split(" at line")
        .next()
        .unwrap_or("");
    match want {
        "i32" => "int32".into(),
        "i64" => "int64".into(),
        "u32" => "uint32".into(),
        "f64" => "float64".into(),
        "a string" | "a borrowed string" => "string".into(),
        "a boolean" => "bool".into(),
        "a sequence" => "[]interface {}".into(),
        "a map" => "map[string]string".into(),
        other if other.starts_with("struct ") => format!("v1.{}", &other["struct ".len()..]),
        other => other.to_string(),
    }
}

/// The full JSON path of the field, without list indexes, as the decoder prints it.
fn go_path(path: &[String]) -> String {
    path.iter()
        .filter(|s| *s != "[]")
        .cloned()
        .collect::<Vec<_>>()
        .join(".")
}

/// The Go struct holding the field, from the name of the field above it.
fn struct_name(kind: &str, path: &[String]) -> String {
    let parents: Vec<&str> = path[..path.len().saturating_sub(1)]
        .iter()
        .map(String::as_str)
        .filter(|s| *s != "[]")
        .collect();
    let in_template = parents.contains(&"template");
    let (grand, parent) = match parents.as_slice() {
        [] => return kind.to_string(),
        [p] => ("", *p),
        [.., g, p] => (*g, *p),
    };
    match (grand, parent) {
        (_, "spec") if in_template => "PodSpec".into(),
        ("", "spec") => format!("{kind}Spec"),
        ("", "status") => format!("{kind}Status"),
        (_, "metadata") => "ObjectMeta".into(),
        (_, "template") => "PodTemplateSpec".into(),
        (_, "containers" | "initContainers") => "Container".into(),
        ("containers" | "initContainers", "ports") => "ContainerPort".into(),
        ("spec", "ports") => "ServicePort".into(),
        (_, "selector") => "LabelSelector".into(),
        (_, "resources") => "ResourceRequirements".into(),
        (_, "env") => "EnvVar".into(),
        (_, "strategy") => "DeploymentStrategy".into(),
        (_, "rollingUpdate") => "RollingUpdateDeployment".into(),
        (_, p) => {
            let mut c = p.chars();
            c.next()
                .map(|f| f.to_ascii_uppercase().to_string() + c.as_str())
                .unwrap_or_default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::type_error;
    use serde_json::json;

    #[test]
    fn a_string_replicas_reads_like_the_go_decoder() {
        let d = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "a"},
            "spec": {"replicas": "two", "selector": {"matchLabels": {"a": "b"}},
                "template": {"spec": {"containers": [{"name": "a", "image": "x"}]}}}});
        assert_eq!(
            type_error("apps", "deployments", "Deployment", &d).as_deref(),
            Some(
                "Deployment in version \"v1\" cannot be handled as a Deployment: json: cannot unmarshal string into Go struct field DeploymentSpec.spec.replicas of type int32"
            )
        );
        let p = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "a"},
            "spec": {"containers": [{"name": "a", "image": "x", "ports": [{"containerPort": "80"}]}]}});
        let no_selector = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "a"},
            "spec": {"template": {"spec": {"containers": [{"name": "a", "image": "x"}]}}}});
        assert_eq!(
            type_error("apps", "deployments", "Deployment", &no_selector),
            None
        );
        let m = type_error("", "pods", "Pod", &p).unwrap();
        assert!(
            m.ends_with("cannot unmarshal string into Go struct field ContainerPort.spec.containers.ports.containerPort of type int32"),
            "{m}"
        );
    }
}
