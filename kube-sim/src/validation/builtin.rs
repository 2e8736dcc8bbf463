//! Validation of the built-in types the simulator serves, and of the metadata every object shares: names,
//! finalizers, Deployment and ReplicaSet selectors, immutable ConfigMaps and Secrets, their sizes, and
//! Service ports. Pod specs are checked in [`super::pod`].

use serde_json::{Map, Value};

use super::{BadValue, ErrorType, FieldError, go_quote, go_string_map, pod};
use crate::resource::ResourceInfo;

/// The most bytes the `data` of a ConfigMap or Secret may hold.
pub const MAX_DATA_BYTES: usize = 1024 * 1024;

const SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
const LABEL_MSG: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";
const DNS1035_MSG: &str = "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')";
const CONFIG_KEY_MSG: &str = "a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')";

/// Whether a string is a lowercase RFC 1123 label (at most 63 characters).
pub fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && s.starts_with(|c: char| c.is_ascii_alphanumeric())
        && s.ends_with(|c: char| c.is_ascii_alphanumeric())
}

/// Whether a string is a lowercase RFC 1123 subdomain (at most 253 characters).
pub fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty() && s.len() <= 253 && s.split('.').all(is_dns_label)
}

/// The errors of a name under one of the API server's name rules.
fn name_errors(field: &str, name: &str, rule: NameRule) -> Vec<FieldError> {
    let (ok, msg, max) = match rule {
        NameRule::Subdomain => (is_dns_subdomain(name), SUBDOMAIN_MSG, 253),
        NameRule::Label => (is_dns_label(name), LABEL_MSG, 63),
        NameRule::Dns1035 => (
            is_dns_label(name) && name.starts_with(|c: char| c.is_ascii_lowercase()),
            DNS1035_MSG,
            63,
        ),
    };
    let mut errors = Vec::new();
    let value = Value::from(name);
    if name.len() > max {
        errors.push(FieldError::invalid(
            field,
            &value,
            &format!("must be no more than {max} characters"),
        ));
    }
    if !ok {
        errors.push(FieldError::invalid(field, &value, msg));
    }
    errors
}

/// The names of roles and bindings (`system:discovery`): any path segment (`IsValidPathSegmentName`).
fn path_segment_errors(field: &str, name: &str) -> Vec<FieldError> {
    let value = Value::from(name);
    let mut errors = Vec::new();
    if name == "." || name == ".." {
        errors.push(FieldError::invalid(
            field,
            &value,
            &format!("may not be '{name}'"),
        ));
    }
    for c in ['/', '%'] {
        if name.contains(c) {
            errors.push(FieldError::invalid(
                field,
                &value,
                &format!("may not contain '{c}'"),
            ));
        }
    }
    errors
}

/// A rule for object names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum NameRule {
    /// A DNS-1123 subdomain (most types).
    Subdomain,
    /// A DNS-1123 label (namespaces).
    Label,
    /// A DNS-1035 label (services).
    Dns1035,
}

/// The metadata rules every object shares: a valid name, no new finalizers while being deleted.
pub fn metadata(info: &ResourceInfo, obj: &Value, old: Option<&Value>) -> Vec<FieldError> {
    let name = crate::meta::name_of(obj);
    let mut errors = match (info.group.as_str(), info.plural.as_str()) {
        ("", "events") => Vec::new(),
        ("", "namespaces") => name_errors("metadata.name", name, NameRule::Label),
        ("", "services") => name_errors("metadata.name", name, NameRule::Dns1035),
        ("rbac.authorization.k8s.io", _) => path_segment_errors("metadata.name", name),
        _ => name_errors("metadata.name", name, NameRule::Subdomain),
    };
    errors.extend(super::labels::validate(obj));
    if let Some(old) = old
        && old.pointer("/metadata/deletionTimestamp").is_some()
    {
        let list = |v: &Value| crate::resource::strings(v.pointer("/metadata/finalizers"));
        let before = list(old);
        let mut added: Vec<String> = list(obj)
            .into_iter()
            .filter(|f| !before.contains(f))
            .collect();
        added.sort();
        added.dedup();
        if !added.is_empty() {
            let shown: Vec<String> = added.iter().map(|f| go_quote(f)).collect();
            errors.push(FieldError::forbidden(
                "metadata.finalizers",
                &format!(
                    "no new finalizers can be added if the object is being deleted, found new finalizers []string{{{}}}",
                    shown.join(", ")
                ),
            ));
        }
    }
    errors
}

/// The rules of a built-in type; `old` is the stored object on updates.
pub fn validate(info: &ResourceInfo, obj: &Value, old: Option<&Value>) -> Vec<FieldError> {
    match (info.group.as_str(), info.plural.as_str()) {
        ("apps", "deployments") => workload(obj, old, "deployment"),
        ("apps", "replicasets") => workload(obj, old, "replicaset"),
        ("", "pods") => pod::validate_pod(obj, old),
        ("", "configmaps") => config_data(obj, old, false),
        ("", "secrets") => config_data(obj, old, true),
        ("", "services") => service(obj),
        ("apiextensions.k8s.io", "customresourcedefinitions") => {
            super::crd::validate_definition(obj, old)
        }
        _ => Vec::new(),
    }
}

/// Whether `labels` satisfy a `LabelSelector` object (`matchLabels` and `matchExpressions`).
pub fn selector_matches(selector: &Value, labels: Option<&Map<String, Value>>) -> bool {
    let get = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
    let by_labels = selector
        .get("matchLabels")
        .and_then(Value::as_object)
        .is_none_or(|m| m.iter().all(|(k, v)| get(k) == v.as_str()));
    let exprs = super::items(selector, "matchExpressions");
    by_labels
        && exprs.iter().all(|e| {
            let key = e.get("key").and_then(Value::as_str).unwrap_or("");
            let values: Vec<&str> = e
                .get("values")
                .and_then(Value::as_array)
                .map(|a| a.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            match e.get("operator").and_then(Value::as_str) {
                Some("In") => get(key).is_some_and(|v| values.contains(&v)),
                Some("NotIn") => get(key).is_none_or(|v| !values.contains(&v)),
                Some("Exists") => get(key).is_some(),
                Some("DoesNotExist") => get(key).is_none(),
                _ => false,
            }
        })
}

/// A `LabelSelector` in the Go form the API server prints in an immutable-field error.
fn go_selector(selector: &Value) -> String {
    let labels = go_string_map(selector.get("matchLabels").and_then(Value::as_object));
    let exprs =
        match selector.get("matchExpressions").and_then(Value::as_array) {
            None => "[]v1.LabelSelectorRequirement(nil)".to_string(),
            Some(a) => {
                let items: Vec<String> = a
                .iter()
                .map(|e| {
                    let values: Vec<String> = e
                        .get("values")
                        .and_then(Value::as_array)
                        .map(|v| v.iter().map(|s| go_quote(s.as_str().unwrap_or(""))).collect())
                        .unwrap_or_default();
                    format!(
                        "v1.LabelSelectorRequirement{{Key:{}, Operator:{}, Values:[]string{{{}}}}}",
                        go_quote(e.get("key").and_then(Value::as_str).unwrap_or("")),
                        go_quote(e.get("operator").and_then(Value::as_str).unwrap_or("")),
                        values.join(", ")
                    )
                })
                .collect();
                format!("[]v1.LabelSelectorRequirement{{{}}}", items.join(", "))
            }
        };
    format!("v1.LabelSelector{{MatchLabels:{labels}, MatchExpressions:{exprs}}}")
}

/// Deployments and ReplicaSets: a selector that is set, not empty, matches the template's labels and does
/// not change; replicas not negative; a pod template whose spec is valid and restarts always.
fn workload(obj: &Value, old: Option<&Value>, noun: &str) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let selector = obj.pointer("/spec/selector").filter(|s| !s.is_null());
    let labels = obj
        .pointer("/spec/template/metadata/labels")
        .and_then(Value::as_object);
    let mismatch = || {
        FieldError::new(
            ErrorType::Invalid,
            "spec.template.metadata.labels",
            BadValue::Raw(go_string_map(labels)),
            "`selector` does not match template `labels`",
        )
    };
    match selector {
        None => {
            // A missing selector selects nothing, so the template's labels do not match it either.
            errors.push(FieldError::required("spec.selector", ""));
            errors.push(mismatch());
        }
        Some(s) => {
            let count = |k: &str| {
                s.get(k).and_then(Value::as_object).map_or(0, Map::len)
                    + s.get(k).and_then(Value::as_array).map_or(0, Vec::len)
            };
            if count("matchLabels") + count("matchExpressions") == 0 {
                errors.push(FieldError::new(
                    ErrorType::Invalid,
                    "spec.selector",
                    BadValue::Raw(go_selector(s)),
                    &format!("empty selector is invalid for {noun}"),
                ));
            } else if !selector_matches(s, labels) {
                errors.push(mismatch());
            }
        }
    }
    for field in ["replicas", "minReadySeconds", "revisionHistoryLimit"] {
        if let Some(n) = obj
            .get("spec")
            .and_then(|s| s.get(field))
            .and_then(Value::as_i64)
            && n < 0
        {
            errors.push(FieldError::invalid(
                &format!("spec.{field}"),
                &Value::from(n),
                "must be greater than or equal to 0",
            ));
        }
    }
    let seconds = |k: &str| obj.pointer(&format!("/spec/{k}")).and_then(Value::as_i64);
    if let Some(deadline) = seconds("progressDeadlineSeconds")
        && deadline <= seconds("minReadySeconds").unwrap_or(0)
    {
        errors.push(FieldError::invalid(
            "spec.progressDeadlineSeconds",
            &Value::from(deadline),
            "must be greater than minReadySeconds",
        ));
    }
    let template_spec = obj.pointer("/spec/template/spec").unwrap_or(&Value::Null);
    errors.extend(pod::validate_spec(template_spec, "spec.template.spec"));
    let restart = template_spec
        .get("restartPolicy")
        .and_then(Value::as_str)
        .unwrap_or("Always");
    if restart != "Always" {
        errors.push(FieldError::not_supported(
            "spec.template.spec.restartPolicy",
            &Value::from(restart),
            &["Always".to_string()],
        ));
    }
    if noun == "deployment" {
        errors.extend(strategy(obj.pointer("/spec/strategy")));
    }
    if let Some(old) = old
        && let Some(before) = old.pointer("/spec/selector")
        && selector.is_some_and(|s| s != before)
    {
        errors.push(FieldError::new(
            ErrorType::Invalid,
            "spec.selector",
            BadValue::Raw(go_selector(selector.unwrap_or(&Value::Null))),
            "field is immutable",
        ));
    }
    errors
}

/// A Deployment's strategy: `rollingUpdate` only with the `RollingUpdate` type, and not both of its
/// `maxSurge` and `maxUnavailable` zero.
fn strategy(strategy: Option<&Value>) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let Some(strategy) = strategy else {
        return errors;
    };
    let rolling = strategy.get("rollingUpdate").filter(|r| !r.is_null());
    match strategy.get("type").and_then(Value::as_str) {
        Some("Recreate") if rolling.is_some() => errors.push(FieldError::forbidden(
            "spec.strategy.rollingUpdate",
            "may not be specified when strategy `type` is 'Recreate'",
        )),
        Some("Recreate") | None => {}
        Some("RollingUpdate") => {
            let zero = |k: &str| {
                rolling
                    .and_then(|r| r.get(k))
                    .is_some_and(|v| v == &Value::from(0) || v == &Value::from("0%"))
            };
            if zero("maxSurge") && zero("maxUnavailable") {
                let shown = match rolling.and_then(|r| r.get("maxUnavailable")) {
                    Some(Value::String(s)) => {
                        format!(
                            "intstr.IntOrString{{Type:1, IntVal:0, StrVal:{}}}",
                            go_quote(s)
                        )
                    }
                    _ => "intstr.IntOrString{Type:0, IntVal:0, StrVal:\"\"}".to_string(),
                };
                errors.push(FieldError::new(
                    ErrorType::Invalid,
                    "spec.strategy.rollingUpdate.maxUnavailable",
                    BadValue::Raw(shown),
                    "may not be 0 when `maxSurge` is 0",
                ));
            }
        }
        Some(other) => errors.push(FieldError::not_supported(
            "spec.strategy.type",
            &Value::from(other),
            &["Recreate".to_string(), "RollingUpdate".to_string()],
        )),
    }
    errors
}

/// ConfigMaps and Secrets: valid keys, at most 1 MiB of data, and nothing changed once `immutable` is set.
fn config_data(obj: &Value, old: Option<&Value>, secret: bool) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let fields: &[&str] = if secret {
        &["data"]
    } else {
        &["data", "binaryData"]
    };
    let mut total = 0;
    for f in fields {
        let Some(map) = obj.get(*f).and_then(Value::as_object) else {
            continue;
        };
        for (k, v) in map {
            let key_ok = !k.is_empty()
                && k.len() <= 253
                && k.chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
                && k != "."
                && k != ".."
                && !k.starts_with("..");
            if !key_ok {
                errors.push(FieldError::invalid(
                    &format!("{f}[{k}]"),
                    &Value::from(k.as_str()),
                    CONFIG_KEY_MSG,
                ));
            }
            total += data_len(v, secret || *f == "binaryData");
            if *f == "binaryData" && obj.get("data").and_then(|d| d.get(k)).is_some() {
                errors.push(FieldError::invalid(
                    &format!("data[{k}]"),
                    &Value::from(k.as_str()),
                    "duplicate of key present in binaryData",
                ));
            }
        }
    }
    if secret {
        errors.extend(secret_type(obj, old));
    }
    if total > MAX_DATA_BYTES {
        errors.push(FieldError::too_long_bytes(
            if secret { "data" } else { "" },
            MAX_DATA_BYTES,
        ));
    }
    if let Some(old) = old
        && old.get("immutable").and_then(Value::as_bool) == Some(true)
    {
        const DETAIL: &str = "field is immutable when `immutable` is set";
        if obj.get("immutable").and_then(Value::as_bool) != Some(true) {
            errors.push(FieldError::forbidden("immutable", DETAIL));
        }
        for f in fields {
            if old.get(*f) != obj.get(*f) {
                errors.push(FieldError::forbidden(f, DETAIL));
            }
        }
    }
    errors
}

/// The keys a Secret's type requires in its `data`, and a type that does not change.
fn secret_type(obj: &Value, old: Option<&Value>) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let ty = obj.get("type").and_then(Value::as_str).unwrap_or("Opaque");
    let required: &[&str] = match ty {
        "kubernetes.io/tls" => &["tls.crt", "tls.key"],
        "kubernetes.io/dockerconfigjson" => &[".dockerconfigjson"],
        "kubernetes.io/dockercfg" => &[".dockercfg"],
        "kubernetes.io/ssh-auth" => &["ssh-privatekey"],
        _ => &[],
    };
    for key in required {
        if obj.get("data").and_then(|d| d.get(*key)).is_none() {
            errors.push(FieldError::required(&format!("data[{key}]"), ""));
        }
    }
    const SA_NAME: &str = "kubernetes.io/service-account.name";
    if ty == "kubernetes.io/service-account-token"
        && obj
            .pointer("/metadata/annotations")
            .and_then(|a| a.get(SA_NAME))
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
    {
        errors.push(FieldError::required(
            &format!("metadata.annotations[{SA_NAME}]"),
            "",
        ));
    }
    if let Some(old) = old {
        let before = old.get("type").and_then(Value::as_str).unwrap_or("Opaque");
        if before != ty {
            errors.push(FieldError::invalid(
                "type",
                &Value::from(ty),
                "field is immutable",
            ));
        }
    }
    errors
}

/// The length of a data value: the decoded bytes of base64 values, the bytes of strings.
fn data_len(v: &Value, base64_encoded: bool) -> usize {
    use base64::Engine as _;
    let s = v.as_str().unwrap_or("");
    if base64_encoded {
        base64::engine::general_purpose::STANDARD
            .decode(s)
            .map_or(s.len(), |b| b.len())
    } else {
        s.len()
    }
}

/// Services: ports in 1..65535 (target ports too), ports required unless headless or `ExternalName`.
fn service(obj: &Value) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let spec = obj.get("spec").unwrap_or(&Value::Null);
    let kind = spec
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("ClusterIP");
    let headless = spec.get("clusterIP").and_then(Value::as_str) == Some("None");
    let ports = super::items(spec, "ports");
    if ports.is_empty() && !headless && kind != "ExternalName" {
        errors.push(FieldError::required("spec.ports", ""));
    }
    for (i, p) in ports.iter().enumerate() {
        let path = format!("spec.ports[{i}]");
        pod::check_port(p.get("port"), &format!("{path}.port"), &mut errors);
        match p.get("targetPort") {
            Some(t @ Value::Number(_)) => {
                pod::check_port(Some(t), &format!("{path}.targetPort"), &mut errors)
            }
            Some(Value::String(t)) => {
                for m in pod::port_name_messages(t) {
                    errors.push(FieldError::invalid(
                        &format!("{path}.targetPort"),
                        &Value::from(t.as_str()),
                        m,
                    ));
                }
            }
            _ => {}
        }
        if let Some(n) = p.get("name").and_then(Value::as_str)
            && !n.is_empty()
        {
            errors.extend(name_errors(&format!("{path}.name"), n, NameRule::Label));
        }
        if ports.len() > 1
            && p.get("name")
                .and_then(Value::as_str)
                .is_none_or(str::is_empty)
        {
            errors.push(FieldError::required(&format!("{path}.name"), ""));
        }
    }
    errors
}

/// Merges a Secret's `stringData` into its base64 `data` (the `stringData` value wins) and drops it, as the
/// API server does before it stores a Secret.
pub fn merge_string_data(obj: &mut Value) {
    use base64::Engine as _;
    let Value::Object(m) = obj else { return };
    let Some(Value::Object(string_data)) = m.remove("stringData") else {
        return;
    };
    let data = m.entry("data").or_insert_with(|| Value::Object(Map::new()));
    if !data.is_object() {
        *data = Value::Object(Map::new());
    }
    if let Value::Object(data) = data {
        for (k, v) in string_data {
            let text = v.as_str().unwrap_or("").to_string();
            let encoded = base64::engine::general_purpose::STANDARD.encode(text.as_bytes());
            data.insert(k, Value::from(encoded));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::validation::messages;
    use serde_json::json;

    #[test]
    fn a_selector_that_misses_the_labels_reads_like_the_api_server() {
        let d = json!({"spec": {"selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "db"}},
                "spec": {"containers": [{"name": "a", "image": "x"}]}}}});
        let errors = messages(&workload(&d, None, "deployment"));
        assert_eq!(
            errors,
            vec![
                "spec.template.metadata.labels: Invalid value: map[string]string{\"app\":\"db\"}: `selector` does not match template `labels`"
            ]
        );
    }

    #[test]
    fn a_missing_selector_and_a_recreate_strategy_with_rolling_parameters_are_refused() {
        let d = json!({"spec": {"template": {"metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "a", "image": "x"}]}},
            "strategy": {"type": "Recreate", "rollingUpdate": {"maxSurge": 1}}}});
        let errors = messages(&workload(&d, None, "deployment"));
        assert_eq!(
            errors,
            vec![
                "spec.selector: Required value",
                "spec.template.metadata.labels: Invalid value: map[string]string{\"app\":\"web\"}: `selector` does not match template `labels`",
                "spec.strategy.rollingUpdate: Forbidden: may not be specified when strategy `type` is 'Recreate'",
            ]
        );
    }

    #[test]
    fn secrets_keep_their_type_and_carry_the_keys_it_needs() {
        let old = json!({"type": "Opaque", "data": {}});
        let new = json!({"type": "kubernetes.io/tls", "data": {"tls.crt": "eA=="}});
        let errors = messages(&config_data(&new, Some(&old), true));
        assert_eq!(
            errors,
            vec![
                "data[tls.key]: Required value",
                "type: Invalid value: \"kubernetes.io/tls\": field is immutable"
            ]
        );
    }

    #[test]
    fn string_data_wins_over_data() {
        let mut s = json!({"data": {"a": "eA==", "b": "eQ=="}, "stringData": {"a": "hello"}});
        merge_string_data(&mut s);
        assert_eq!(s, json!({"data": {"a": "aGVsbG8=", "b": "eQ=="}}));
    }

    #[test]
    fn immutable_config_maps_refuse_changes() {
        let old = json!({"immutable": true, "data": {"a": "1"}});
        let new = json!({"data": {"a": "2"}});
        let errors = messages(&config_data(&new, Some(&old), false));
        assert_eq!(
            errors,
            vec![
                "immutable: Forbidden: field is immutable when `immutable` is set",
                "data: Forbidden: field is immutable when `immutable` is set"
            ]
        );
    }
}
