//! Validation of pod specs (of Pods and of the templates of workloads) and of Pod updates, which may change
//! only a few fields of a stored pod's spec.

use serde_json::{Map, Value};

use super::{FieldError, builtin, each_item, items};

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
    if items(spec, "containers").is_empty() {
        errors.push(FieldError::required(&format!("{path}.containers"), ""));
    }
    let volumes = volume_names(spec, path, &mut errors);
    let mut names = Vec::new();
    for list in ["initContainers", "containers"] {
        each_item(spec, list, path, |c, at| {
            container(c, at, &mut names, &volumes, &mut errors);
        });
    }
    let grace = spec
        .get("terminationGracePeriodSeconds")
        .and_then(Value::as_i64);
    each_item(spec, "containers", path, |c, at| {
        for hook in ["postStart", "preStop"] {
            if let Some(handler) = c.pointer(&format!("/lifecycle/{hook}")) {
                lifecycle_handler(
                    handler,
                    &format!("{at}.lifecycle.{hook}"),
                    grace,
                    &mut errors,
                );
            }
        }
        probes(c, at, &mut errors);
    });
    each_item(spec, "initContainers", path, |c, at| {
        if c.get("restartPolicy").and_then(Value::as_str) == Some("Always") {
            probes(c, at, &mut errors);
            return;
        }
        for field in PROBES {
            if c.get(field).is_some_and(|p| !p.is_null()) {
                errors.push(FieldError::forbidden(
                    &format!("{at}.{field}"),
                    "may not be set for init containers without restartPolicy=Always",
                ));
            }
        }
    });
    errors
}

/// A container's probes, in the order the API server validates them.
const PROBES: [&str; 3] = ["livenessProbe", "readinessProbe", "startupProbe"];

/// The errors of a container's probes (`validateLivenessProbe`, `validateReadinessProbe` and
/// `validateStartupProbe`): one handler, no negative timing, a positive probe-level grace period (never
/// on a readiness probe), and a single success for liveness and startup probes, which act on the first.
fn probes(c: &Value, at: &str, errors: &mut Vec<FieldError>) {
    for field in PROBES {
        let Some(probe) = c.get(field).filter(|p| !p.is_null()) else {
            continue;
        };
        let at = format!("{at}.{field}");
        handler(
            probe,
            &at,
            &["exec", "httpGet", "tcpSocket", "grpc"],
            errors,
        );
        for timing in [
            "initialDelaySeconds",
            "timeoutSeconds",
            "periodSeconds",
            "successThreshold",
            "failureThreshold",
        ] {
            if let Some(n) = probe.get(timing).and_then(Value::as_i64).filter(|n| *n < 0) {
                let detail = "must be greater than or equal to 0";
                errors.push(FieldError::invalid(
                    &format!("{at}.{timing}"),
                    &Value::from(n),
                    detail,
                ));
            }
        }
        let grace_at = format!("{at}.terminationGracePeriodSeconds");
        let grace = probe
            .get("terminationGracePeriodSeconds")
            .filter(|g| !g.is_null());
        if let Some(n) = grace.and_then(Value::as_i64).filter(|n| *n <= 0) {
            errors.push(FieldError::invalid(
                &grace_at,
                &Value::from(n),
                "must be greater than 0",
            ));
        }
        let successes = probe
            .get("successThreshold")
            .and_then(Value::as_i64)
            .unwrap_or(1);
        match field {
            "readinessProbe" => {
                if let Some(grace) = grace {
                    errors.push(FieldError::invalid(
                        &grace_at,
                        grace,
                        "must not be set for readinessProbes",
                    ));
                }
            }
            _ if successes != 1 => errors.push(FieldError::invalid(
                &format!("{at}.successThreshold"),
                &Value::from(successes),
                "must be 1",
            )),
            _ => {}
        }
    }
}

/// The errors of a probe's or hook's handler at `at` (`validateHandler`): exactly one of `kinds`, and
/// each action's own fields.
fn handler(handler: &Value, at: &str, kinds: &[&str], errors: &mut Vec<FieldError>) {
    let given: Vec<&str> = kinds
        .iter()
        .copied()
        .filter(|k| handler.get(*k).is_some_and(|v| !v.is_null()))
        .collect();
    match given.as_slice() {
        [] => errors.push(FieldError::required(at, "must specify a handler type")),
        [_] => {}
        [_, rest @ ..] => {
            for kind in rest {
                errors.push(FieldError::forbidden(
                    &format!("{at}.{kind}"),
                    "may not specify more than 1 handler type",
                ));
            }
        }
    }
    if let Some(first) = given.first() {
        action(handler, first, &format!("{at}.{first}"), errors);
    }
}

/// The errors of one handler action at `at`: a command to run, a port by number or name, a supported
/// scheme.
fn action(handler: &Value, kind: &str, at: &str, errors: &mut Vec<FieldError>) {
    let action = &handler[kind];
    match kind {
        "exec" if items(action, "command").is_empty() => {
            errors.push(FieldError::required(&format!("{at}.command"), ""));
        }
        "httpGet" | "tcpSocket" | "grpc" => {
            let port_at = format!("{at}.port");
            match action.get("port") {
                Some(Value::String(name)) if kind != "grpc" => {
                    for m in port_name_messages(name) {
                        errors.push(FieldError::invalid(
                            &port_at,
                            &Value::from(name.as_str()),
                            m,
                        ));
                    }
                }
                port => check_port(port, &port_at, errors),
            }
            let scheme = action
                .get("scheme")
                .and_then(Value::as_str)
                .unwrap_or("HTTP");
            if kind == "httpGet" && !matches!(scheme, "HTTP" | "HTTPS") {
                errors.push(FieldError::not_supported(
                    &format!("{at}.scheme"),
                    &Value::from(scheme),
                    &["HTTP", "HTTPS"].map(str::to_string),
                ));
            }
        }
        _ => {}
    }
}

/// The errors of a lifecycle hook's handler at `at`: exactly one of `exec`, `httpGet`, `tcpSocket` and
/// `sleep`, a sleep no longer than the pod's grace period, ports in range.
fn lifecycle_handler(handler: &Value, at: &str, grace: Option<i64>, errors: &mut Vec<FieldError>) {
    self::handler(
        handler,
        at,
        &["exec", "httpGet", "tcpSocket", "sleep"],
        errors,
    );
    if let Some(seconds) = handler.pointer("/sleep/seconds").and_then(Value::as_i64)
        && let Some(grace) = grace
        && (seconds <= 0 || seconds > grace)
    {
        errors.push(FieldError::invalid(
            &format!("{at}.sleep.seconds"),
            &Value::from(seconds),
            &format!(
                "must be greater than 0 and less than terminationGracePeriodSeconds ({grace}). Enable AllowPodLifecycleSleepActionZeroValue feature gate for zero sleep."
            ),
        ));
    }
}

/// Adds an error when a name at `at` is missing, repeats one of `names` or is not a DNS label; then
/// adds it to `names`.
fn unique_label(name: &str, at: &str, names: &mut Vec<String>, errors: &mut Vec<FieldError>) {
    if name.is_empty() {
        errors.push(FieldError::required(at, ""));
    } else if names.iter().any(|n| n == name) {
        errors.push(FieldError::duplicate(at, &Value::from(name)));
    } else if !builtin::is_dns_label(name) {
        errors.push(FieldError::invalid(at, &Value::from(name), LABEL_MSG));
    }
    names.push(name.to_string());
}

/// The names of a pod spec's volumes, after recording errors for missing, invalid and repeated ones.
fn volume_names(spec: &Value, path: &str, errors: &mut Vec<FieldError>) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    each_item(spec, "volumes", path, |v, at| {
        let name = v.get("name").and_then(Value::as_str).unwrap_or("");
        unique_label(name, &format!("{at}.name"), &mut names, errors);
    });
    names
}

/// The messages of a port name that is not an IANA service name, as the API server words them.
pub fn port_name_messages(name: &str) -> Vec<&'static str> {
    let mut out = Vec::new();
    if name.len() > 15 {
        out.push("must be no more than 15 characters");
    }
    if !name
        .chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
    {
        out.push("must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)");
    }
    if name.contains("--") {
        out.push("must not contain consecutive hyphens");
    }
    if !name.chars().any(|c| c.is_ascii_alphabetic()) {
        out.push("must contain at least one letter (a-z)");
    }
    if name.starts_with('-') || name.ends_with('-') {
        out.push("must not begin or end with a hyphen");
    }
    out
}

/// The errors of a container's volume mounts: a name among the pod's volumes and a mount path.
fn mounts(c: &Value, at: &str, volumes: &[String], errors: &mut Vec<FieldError>) {
    each_item(c, "volumeMounts", at, |m, mp| {
        let name = m.get("name").and_then(Value::as_str).unwrap_or("");
        if name.is_empty() {
            errors.push(FieldError::required(&format!("{mp}.name"), ""));
        } else if !volumes.iter().any(|v| v == name) {
            errors.push(FieldError::not_found(
                &format!("{mp}.name"),
                &Value::from(name),
            ));
        }
        if m.get("mountPath")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
        {
            errors.push(FieldError::required(&format!("{mp}.mountPath"), ""));
        }
    });
}

/// The errors of one container: a unique DNS-label name, an image, valid ports and mounts of declared
/// volumes.
fn container(
    c: &Value,
    at: &str,
    names: &mut Vec<String>,
    volumes: &[String],
    errors: &mut Vec<FieldError>,
) {
    mounts(c, at, volumes, errors);
    let name = c.get("name").and_then(Value::as_str).unwrap_or("");
    unique_label(name, &format!("{at}.name"), names, errors);
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
    each_item(c, "ports", at, |p, pp| container_port(p, pp, errors));
}

/// The errors of one of a container's ports at `pp`: an IANA service name, a container port and a host
/// port in range.
fn container_port(p: &Value, pp: &str, errors: &mut Vec<FieldError>) {
    if let Some(port_name) = p.get("name").and_then(Value::as_str)
        && !port_name.is_empty()
    {
        for m in port_name_messages(port_name) {
            errors.push(FieldError::invalid(
                &format!("{pp}.name"),
                &Value::from(port_name),
                m,
            ));
        }
    }
    let container_port = format!("{pp}.containerPort");
    match p.get("containerPort").and_then(Value::as_i64) {
        None | Some(0) => errors.push(FieldError::required(&container_port, "")),
        Some(_) => check_port(p.get("containerPort"), &container_port, errors),
    }
    if let Some(h) = p.get("hostPort").and_then(Value::as_i64)
        && h != 0
    {
        check_port(p.get("hostPort"), &format!("{pp}.hostPort"), errors);
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
        if let Some(e) = active_deadline_change(before, spec) {
            errors.push(e);
        } else if !only_mutable_changes(before, spec) {
            errors.push(FieldError::forbidden("spec", UPDATE_MSG));
        }
    }
    errors
}

/// The error of an `activeDeadlineSeconds` update: it may be set or lowered, not raised or removed.
fn active_deadline_change(old: &Value, new: &Value) -> Option<FieldError> {
    const FIELD: &str = "spec.activeDeadlineSeconds";
    let before = old.get("activeDeadlineSeconds").and_then(Value::as_i64);
    match new.get("activeDeadlineSeconds").and_then(Value::as_i64) {
        Some(n) if !(0..=i64::from(i32::MAX)).contains(&n) => Some(FieldError::invalid(
            FIELD,
            &Value::from(n),
            "must be between 0 and 2147483647, inclusive",
        )),
        Some(n) if before.is_some_and(|b| b < n) => Some(FieldError::invalid(
            FIELD,
            &Value::from(n),
            "must be less than or equal to previous value",
        )),
        None if before.is_some() => Some(FieldError::invalid(
            FIELD,
            &Value::Null,
            "must not update from a positive integer to nil value",
        )),
        _ => None,
    }
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
    use crate::validation::messages;
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
    fn mounts_need_declared_volumes_and_port_names_are_short() {
        let spec = json!({"volumes": [{"name": "data", "emptyDir": {}}],
            "containers": [{"name": "a", "image": "x",
                "ports": [{"name": "metrics-endpoint", "containerPort": 9090}],
                "volumeMounts": [{"name": "data", "mountPath": "/d"}, {"name": "cache", "mountPath": "/c"}]}]});
        let errors = messages(&validate_spec(&spec, "spec"));
        assert_eq!(
            errors,
            vec![
                "spec.containers[0].volumeMounts[1].name: Not found: \"cache\"",
                "spec.containers[0].ports[0].name: Invalid value: \"metrics-endpoint\": must be no more than 15 characters",
            ]
        );
    }

    #[test]
    fn the_active_deadline_may_only_go_down() {
        let old = json!({"spec": {"containers": [{"name": "a", "image": "x"}], "activeDeadlineSeconds": 60}});
        let lower = json!({"spec": {"containers": [{"name": "a", "image": "x"}], "activeDeadlineSeconds": 30}});
        assert!(validate_pod(&lower, Some(&old)).is_empty());
        let errors = messages(&validate_pod(&old, Some(&lower)));
        assert_eq!(
            errors,
            vec![
                "spec.activeDeadlineSeconds: Invalid value: 60: must be less than or equal to previous value"
            ]
        );
    }

    #[test]
    fn probes_are_checked_as_the_api_server_checks_them() {
        let spec = json!({"containers": [{"name": "a", "image": "x",
            "livenessProbe": {"httpGet": {"port": 8080, "scheme": "FTP"}, "exec": {"command": ["true"]},
                "successThreshold": 2, "periodSeconds": -1},
            "readinessProbe": {"tcpSocket": {"port": "web--port"}, "terminationGracePeriodSeconds": 5},
            "startupProbe": {"initialDelaySeconds": 3, "successThreshold": 1}}],
            "initContainers": [{"name": "i", "image": "x", "readinessProbe": {"exec": {"command": []}}},
                {"name": "s", "image": "x", "restartPolicy": "Always", "startupProbe": {"exec": {"command": []}}}]});
        let errors = messages(&validate_spec(&spec, "spec"));
        // As `validateHandler`: the first handler in the order exec, httpGet, tcpSocket, grpc is checked
        // (this `exec` is fine), the others are refused.
        assert_eq!(
            errors,
            vec![
                "spec.containers[0].livenessProbe.httpGet: Forbidden: may not specify more than 1 handler type",
                "spec.containers[0].livenessProbe.periodSeconds: Invalid value: -1: must be greater than or equal to 0",
                "spec.containers[0].livenessProbe.successThreshold: Invalid value: 2: must be 1",
                "spec.containers[0].readinessProbe.tcpSocket.port: Invalid value: \"web--port\": must not contain consecutive hyphens",
                "spec.containers[0].readinessProbe.terminationGracePeriodSeconds: Invalid value: 5: must not be set for readinessProbes",
                "spec.containers[0].startupProbe: Required value: must specify a handler type",
                "spec.initContainers[0].readinessProbe: Forbidden: may not be set for init containers without restartPolicy=Always",
                "spec.initContainers[1].startupProbe.exec.command: Required value",
            ]
        );
        let fine = json!({"containers": [{"name": "a", "image": "x",
            "readinessProbe": {"httpGet": {"port": "http", "scheme": "HTTPS"}, "successThreshold": 3},
            "livenessProbe": {"grpc": {"port": 9090}, "terminationGracePeriodSeconds": 10}}]});
        assert_eq!(
            messages(&validate_spec(&fine, "spec")),
            Vec::<String>::new()
        );
    }

    #[test]
    fn containers_need_names_images_and_ports_in_range() {
        let spec = json!({"containers": [{"name": "a", "ports": [{"containerPort": 70000}]},
            {"name": "a", "image": "x"}]});
        let errors = messages(&validate_spec(&spec, "spec"));
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
