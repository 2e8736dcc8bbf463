//! The rules of `metadata.labels` and `metadata.annotations`: qualified-name keys, label values, and the
//! total size of annotations.

use serde_json::Value;

use super::FieldError;

/// The most bytes all annotations of an object may hold together.
pub const MAX_ANNOTATIONS_BYTES: usize = 256 * 1024;

const NAME_PART_MSG: &str = "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";
const PREFIX_MSG: &str = "prefix part a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
const VALUE_MSG: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";

/// Whether a string is alphanumeric at both ends with only `-`, `_` and `.` between.
fn is_name_part(s: &str) -> bool {
    !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && s.starts_with(|c: char| c.is_ascii_alphanumeric())
        && s.ends_with(|c: char| c.is_ascii_alphanumeric())
}

/// The messages of a key that is not a qualified name (`[prefix/]name`).
fn qualified_name_messages(key: &str) -> Vec<String> {
    let mut out = Vec::new();
    let (prefix, name) = match key.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    if name.is_empty() {
        out.push("name part must be non-empty".to_string());
    } else {
        if name.len() > 63 {
            out.push("name part must be no more than 63 characters".to_string());
        }
        if !is_name_part(name) {
            out.push(NAME_PART_MSG.to_string());
        }
    }
    match prefix {
        Some("") => out.push("prefix part must be non-empty".to_string()),
        Some(p) if !super::builtin::is_dns_subdomain(p) => out.push(PREFIX_MSG.to_string()),
        _ => {}
    }
    if name.contains('/') {
        out.push(
            "a qualified name must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
                .to_string(),
        );
    }
    out
}

/// The errors of an object's labels and annotations.
pub fn validate(obj: &Value) -> Vec<FieldError> {
    let mut errors = Vec::new();
    if let Some(labels) = obj.pointer("/metadata/labels").and_then(Value::as_object) {
        for (k, v) in labels {
            for m in qualified_name_messages(k) {
                errors.push(FieldError::invalid(
                    "metadata.labels",
                    &Value::from(k.as_str()),
                    &m,
                ));
            }
            let value = v.as_str().unwrap_or("");
            if value.len() > 63 {
                errors.push(FieldError::invalid(
                    "metadata.labels",
                    &Value::from(value),
                    "must be no more than 63 characters",
                ));
            }
            if !value.is_empty() && !is_name_part(value) {
                errors.push(FieldError::invalid(
                    "metadata.labels",
                    &Value::from(value),
                    VALUE_MSG,
                ));
            }
        }
    }
    if let Some(annotations) = obj
        .pointer("/metadata/annotations")
        .and_then(Value::as_object)
    {
        let mut total = 0;
        for (k, v) in annotations {
            for m in qualified_name_messages(&k.to_lowercase()) {
                errors.push(FieldError::invalid(
                    "metadata.annotations",
                    &Value::from(k.as_str()),
                    &m,
                ));
            }
            total += k.len() + v.as_str().map_or(0, str::len);
        }
        if total > MAX_ANNOTATIONS_BYTES {
            errors.push(FieldError::too_long_bytes(
                "metadata.annotations",
                MAX_ANNOTATIONS_BYTES,
            ));
        }
    }
    errors
}

#[cfg(test)]
mod tests {
    use super::validate;
    use crate::validation::messages;
    use serde_json::json;

    #[test]
    fn label_keys_and_values_follow_the_api_server() {
        let ok = json!({"metadata": {"labels": {"app.kubernetes.io/name": "web", "empty": ""},
            "annotations": {"kubectl.kubernetes.io/restartedAt": "2024-01-01T00:00:00Z"}}});
        assert!(validate(&ok).is_empty());
        let bad = json!({"metadata": {"labels": {"bad key": "bad value!"}}});
        let errors = messages(&validate(&bad));
        assert_eq!(errors.len(), 2, "{errors:?}");
        assert!(
            errors[0]
                .starts_with("metadata.labels: Invalid value: \"bad key\": name part must consist")
        );
        assert!(
            errors[1].starts_with(
                "metadata.labels: Invalid value: \"bad value!\": a valid label must be"
            )
        );
    }
}
