//! Validation of pod specs (of Pods and of the templates of workloads) and of Pod updates, which may change
//! only a few fields of a stored pod's spec.

use serde_json::{Map, Value};

use super::{BadValue, ErrorType, FieldError, builtin};

const LABEL_MSG: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";

const UPDATE_MSG: &str = "pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)";

/// Adds an error when a port number is outside 1..65535.
pub fn check_port(port: Option<&Value>, path: &str, errors: &mut Vec<FieldError>) {
    let n = port.and_then(Value::as_i64).unwrap_or(0);
    if !(1..=65535).contains(&n) {
        errors.push(FieldError::invalid(
            path,
            &Value::from(n),
            "must be between 1 and 65535, inclusive",
        ));
    }
}

/// The errors of a pod spec at `path` (`spec` or `spec.template.spec`).
pub fn validate_spec(spec: &Value, path: &str) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let containers = spec
        .get("containers")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    if containers.is_empty() {
        errors.push(FieldError::required(&format!("{path}.containers"), ""));
    }
    let mut names = Vec::new();
    for (list, items) in [
        ("initContainers", spec.get("initContainers")),
        ("containers", Some(&Value::Array(containers.to_vec()))),
    ] {
        let items = items
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or(&[]);
        for (i, c) in items.iter().enumerate() {
            let at = format!("{path}.{list}[{i}]");
            container(c, &at, &mut names, &mut errors);
        }
    }
    errors
}

/// The errors of one container: a unique DNS-label name, an image, and valid ports.
fn container(c: &Value, at: &str, names: &mut Vec<String>, errors: &mut Vec<FieldError>) {
    let name = c.get("name").and_then(Value::as_str).unwrap_or("");
    let name_path = format!("{at}.name");
    if name.is_empty() {
        errors.push(FieldError::required(&name_path, ""));
    } else if names.iter().any(|n| n == name) {
        errors.push(FieldError::new(
            ErrorType::Duplicate,
            &name_path,
            BadValue::Json(Value::from(name)),
            "",
        ));
    } else if !builtin::is_dns_label(name) {
        errors.push(FieldError::invalid(
            &name_path,
            &Value::from(name),
            LABEL_MSG,
        ));
    }
    names.push(name.to_string());
    if c.get("image")
        .and_then(Value::as_str)
        .is_none_or(str::is_empty)
    {
        errors.push(FieldError::required(&format!("{at}.image"), ""));
    }
    if let Some(policy) = c.get("imagePullPolicy").and_then(Value::as_str)
        && !matches!(policy, "Always" | "IfNotPresent" | "Never")
    {
        let supported = ["Always", "IfNotPresent", "Never"].map(str::to_string);
        errors.push(FieldError::not_supported(
            &format!("{at}.imagePullPolicy"),
            &Value::from(policy),
            &supported,
        ));
    }
    let ports = c
        .get("ports")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    for (j, p) in ports.iter().enumerate() {
        let pp = format!("{at}.ports[{j}].containerPort");
        match p.get("containerPort").and_then(Value::as_i64) {
            None | Some(0) => errors.push(FieldError::required(&pp, "")),
            Some(_) => check_port(p.get("containerPort"), &pp, errors),
        }
        if let Some(h) = p.get("hostPort").and_then(Value::as_i64)
            && h != 0
        {
            check_port(
                p.get("hostPort"),
                &format!("{at}.ports[{j}].hostPort"),
                errors,
            );
        }
    }
}

/// A Pod: its spec, and on updates only the fields a running pod may change.
pub fn validate_pod(obj: &Value, old: Option<&Value>) -> Vec<FieldError> {
    let spec = obj.get("spec").unwrap_or(&Value::Null);
    let mut errors = validate_spec(spec, "spec");
    if let Some(policy) = spec.get("restartPolicy").and_then(Value::as_str)
        && !matches!(policy, "Always" | "OnFailure" | "Never")
    {
        let supported = ["Always", "OnFailure", "Never"].map(str::to_string);
        errors.push(FieldError::not_supported(
            "spec.restartPolicy",
            &Value::from(policy),
            &supported,
        ));
    }
    if let Some(old) = old {
        let before = old.get("spec").unwrap_or(&Value::Null);
        if !only_mutable_changes(before, spec) {
            errors.push(FieldError::forbidden("spec", UPDATE_MSG));
        }
    }
    errors
}

/// Whether `new` differs from `old` only where a pod update may: container images, the active deadline,
/// added tolerations, a negative grace period set to 1, and the node of an unbound pod.
fn only_mutable_changes(old: &Value, new: &Value) -> bool {
    let mut a = old.as_object().cloned().unwrap_or_default();
    let mut b = new.as_object().cloned().unwrap_or_default();
    for list in ["containers", "initContainers"] {
        let images = |m: &Map<String, Value>| -> Option<Vec<Option<Value>>> {
            m.get(list)
                .and_then(Value::as_array)
                .map(|a| a.iter().map(|c| c.get("image").cloned()).collect())
        };
        let new_images = images(&b);
        if let (Some(Value::Array(ca)), Some(imgs)) = (a.get_mut(list), new_images) {
            for (c, img) in ca.iter_mut().zip(imgs) {
                if let (Value::Object(c), Some(img)) = (c, img) {
                    c.insert("image".into(), img);
                }
            }
        }
    }
    a.remove("activeDeadlineSeconds");
    b.remove("activeDeadlineSeconds");
    let tolerations_added = {
        let ta = a.remove("tolerations");
        let tb = b.remove("tolerations");
        let ta = ta
            .as_ref()
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let tb = tb
            .as_ref()
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        ta.iter().all(|t| tb.contains(t))
    };
    let grace = |m: &Map<String, Value>| {
        m.get("terminationGracePeriodSeconds")
            .and_then(Value::as_i64)
    };
    if grace(&a).is_some_and(|g| g < 0) && grace(&b) == Some(1) {
        a.remove("terminationGracePeriodSeconds");
        b.remove("terminationGracePeriodSeconds");
    }
    let unbound = a
        .get("nodeName")
        .and_then(Value::as_str)
        .is_none_or(str::is_empty);
    if unbound {
        a.remove("nodeName");
        b.remove("nodeName");
    }
    tolerations_added && a == b
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn images_may_change_other_fields_may_not() {
        let old = json!({"spec": {"containers": [{"name": "a", "image": "x:1"}]}});
        let new = json!({"spec": {"containers": [{"name": "a", "image": "x:2"}], "nodeName": "n"}});
        assert!(validate_pod(&new, Some(&old)).is_empty());
        let new = json!({"spec": {"containers": [{"name": "a", "image": "x:1", "args": ["-v"]}]}});
        let errors = validate_pod(&new, Some(&old));
        assert_eq!(errors.len(), 1);
        assert!(
            errors[0]
                .to_string()
                .starts_with("spec: Forbidden: pod updates may not change")
        );
    }

    #[test]
    fn containers_need_names_images_and_ports_in_range() {
        let spec = json!({"containers": [{"name": "a", "ports": [{"containerPort": 70000}]},
            {"name": "a", "image": "x"}]});
        let errors: Vec<String> = validate_spec(&spec, "spec")
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            errors,
            vec![
                "spec.containers[0].image: Required value",
                "spec.containers[0].ports[0].containerPort: Invalid value: 70000: must be between 1 and 65535, inclusive",
                "spec.containers[1].name: Duplicate value: \"a\"",
            ]
        );
        let errors = validate_spec(&json!({}), "spec.template.spec");
        assert_eq!(
            errors[0].to_string(),
            "spec.template.spec.containers: Required value"
        );
    }
}
