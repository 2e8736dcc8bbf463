//! Validation of objects before they are stored: the structural schema and CEL rules of custom resources,
//! the rules of the built-in types, and the metadata rules every object shares.
//!
//! Every check yields [`FieldError`]s, which read like the API server's `field.Error`s: a field path, a kind
//! (`Invalid value`, `Required value`, ...), the offending value where the kind shows one, and a detail.

pub mod builtin;
pub mod cel;
pub mod crd;
pub mod decode;
pub mod format;
pub mod labels;
pub mod pod;
pub mod strict;
pub mod structural;

use serde_json::Value;

use crate::resource::ResourceInfo;

/// The kind of a field error, with the `reason` of its `Status` cause.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorType {
    /// `Not found`.
    NotFound,
    /// `Required value`.
    Required,
    /// `Duplicate value`.
    Duplicate,
    /// `Invalid value`.
    Invalid,
    /// `Unsupported value`.
    NotSupported,
    /// `Forbidden`.
    Forbidden,
    /// `Too long`.
    TooLong,
    /// `Too many`.
    TooMany,
    /// `Invalid value`, for a value of the wrong type.
    TypeInvalid,
}

impl ErrorType {
    /// The `reason` of the `Status` cause.
    pub fn reason(self) -> &'static str {
        match self {
            ErrorType::NotFound => "FieldValueNotFound",
            ErrorType::Required => "FieldValueRequired",
            ErrorType::Duplicate => "FieldValueDuplicate",
            ErrorType::Invalid => "FieldValueInvalid",
            ErrorType::NotSupported => "FieldValueNotSupported",
            ErrorType::Forbidden => "FieldValueForbidden",
            ErrorType::TooLong => "FieldValueTooLong",
            ErrorType::TooMany => "FieldValueTooMany",
            ErrorType::TypeInvalid => "FieldValueTypeInvalid",
        }
    }

    /// The words that open the message.
    pub fn words(self) -> &'static str {
        match self {
            ErrorType::NotFound => "Not found",
            ErrorType::Required => "Required value",
            ErrorType::Duplicate => "Duplicate value",
            ErrorType::Invalid | ErrorType::TypeInvalid => "Invalid value",
            ErrorType::NotSupported => "Unsupported value",
            ErrorType::Forbidden => "Forbidden",
            ErrorType::TooLong => "Too long",
            ErrorType::TooMany => "Too many",
        }
    }
}

/// The offending value of a field error, as the message shows it.
#[derive(Clone, Debug, PartialEq)]
pub enum BadValue {
    /// Not shown.
    Omit,
    /// A JSON value, shown the way the API server prints decoded JSON.
    Json(Value),
    /// Text shown as it is (a Go rendering of a typed value, such as `map[string]string{"a":"b"}`).
    Raw(String),
}

/// One field-level validation error.
#[derive(Clone, Debug, PartialEq)]
pub struct FieldError {
    /// The kind.
    pub kind: ErrorType,
    /// The field path, such as `spec.replicas` or `spec.containers[0].image`.
    pub field: String,
    /// The offending value.
    pub value: BadValue,
    /// The detail after the value.
    pub detail: String,
}

impl FieldError {
    /// An error of a kind.
    pub fn new(kind: ErrorType, field: &str, value: BadValue, detail: &str) -> FieldError {
        FieldError {
            kind,
            field: field.to_string(),
            value,
            detail: detail.to_string(),
        }
    }

    /// `Invalid value: <value>: <detail>`.
    pub fn invalid(field: &str, value: &Value, detail: &str) -> FieldError {
        FieldError::new(
            ErrorType::Invalid,
            field,
            BadValue::Json(value.clone()),
            detail,
        )
    }

    /// `Required value[: <detail>]`.
    pub fn required(field: &str, detail: &str) -> FieldError {
        FieldError::new(ErrorType::Required, field, BadValue::Omit, detail)
    }

    /// `Duplicate value: <value>`.
    pub fn duplicate(field: &str, value: &Value) -> FieldError {
        FieldError::new(
            ErrorType::Duplicate,
            field,
            BadValue::Json(value.clone()),
            "",
        )
    }

    /// `Not found: <value>`.
    pub fn not_found(field: &str, value: &Value) -> FieldError {
        FieldError::new(
            ErrorType::NotFound,
            field,
            BadValue::Json(value.clone()),
            "",
        )
    }

    /// `Forbidden: <detail>`.
    pub fn forbidden(field: &str, detail: &str) -> FieldError {
        FieldError::new(ErrorType::Forbidden, field, BadValue::Omit, detail)
    }

    /// `Unsupported value: <value>: supported values: "a", "b"`.
    pub fn not_supported(field: &str, value: &Value, supported: &[String]) -> FieldError {
        let detail = if supported.is_empty() {
            String::new()
        } else {
            let quoted: Vec<String> = supported.iter().map(|s| go_quote(s)).collect();
            format!("supported values: {}", quoted.join(", "))
        };
        FieldError::new(
            ErrorType::NotSupported,
            field,
            BadValue::Json(value.clone()),
            &detail,
        )
    }

    /// `Too long: must have at most <max> bytes`.
    pub fn too_long_bytes(field: &str, max: usize) -> FieldError {
        FieldError::new(
            ErrorType::TooLong,
            field,
            BadValue::Omit,
            &format!("must have at most {max} bytes"),
        )
    }

    /// `Too many: <actual>: must have at most <max> items`.
    pub fn too_many(field: &str, actual: usize, max: i64) -> FieldError {
        FieldError::new(
            ErrorType::TooMany,
            field,
            BadValue::Json(Value::from(actual)),
            &format!("must have at most {max} items"),
        )
    }

    /// The message without the field: the kind's words, the value and the detail.
    pub fn body(&self) -> String {
        let mut s = match (&self.kind, &self.value) {
            (ErrorType::Required | ErrorType::Forbidden | ErrorType::TooLong, _)
            | (_, BadValue::Omit) => self.kind.words().to_string(),
            (_, BadValue::Json(v)) => format!("{}: {}", self.kind.words(), go_value(v)),
            (_, BadValue::Raw(r)) => format!("{}: {r}", self.kind.words()),
        };
        if !self.detail.is_empty() {
            s.push_str(": ");
            s.push_str(&self.detail);
        }
        s
    }
}

impl std::fmt::Display for FieldError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field, self.body())
    }
}

/// The path of the field `name` of the object at `path`; `name` alone at the root.
pub fn child(path: &str, name: &str) -> String {
    if path.is_empty() {
        name.to_string()
    } else {
        format!("{path}.{name}")
    }
}

/// The items of the list at `key` of `v`; none when it is absent or not a list.
pub fn items<'a>(v: &'a Value, key: &str) -> &'a [Value] {
    v.get(key)
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[])
}

/// Calls `check` with each item of the list at `key` of `v` and the item's path, `path.key[i]`.
pub fn each_item<'a>(v: &'a Value, key: &str, path: &str, mut check: impl FnMut(&'a Value, &str)) {
    for (i, item) in items(v, key).iter().enumerate() {
        check(item, &format!("{}[{i}]", child(path, key)));
    }
}

/// The messages of a list of errors, one a line as the API server prints them.
#[cfg(test)]
pub(crate) fn messages(errors: &[FieldError]) -> Vec<String> {
    errors.iter().map(ToString::to_string).collect()
}

/// The message of a list of errors as the API server joins them: one as it is, several in brackets.
pub fn join(errors: &[FieldError]) -> String {
    let mut seen = Vec::new();
    for e in errors {
        let m = e.to_string();
        if !seen.contains(&m) {
            seen.push(m);
        }
    }
    if seen.len() == 1 {
        seen.remove(0)
    } else {
        format!("[{}]", seen.join(", "))
    }
}

/// A string quoted the way Go's `%q` does for printable text.
pub fn go_quote(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_default()
}

/// A decoded JSON value printed the way Go prints it in a field error: scalars plainly, strings quoted,
/// objects and lists in `%#v` form.
pub fn go_value(v: &Value) -> String {
    match v {
        Value::Null => "\"null\"".to_string(),
        Value::String(s) => go_quote(s),
        _ => go_repr(v),
    }
}

/// The `%#v` rendering of a decoded JSON value.
fn go_repr(v: &Value) -> String {
    match v {
        Value::Null => "interface {}(nil)".to_string(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => go_quote(s),
        Value::Array(items) => {
            let inner: Vec<String> = items.iter().map(go_repr).collect();
            format!("[]interface {{}}{{{}}}", inner.join(", "))
        }
        Value::Object(map) => {
            let inner: Vec<String> = map
                .iter()
                .map(|(k, v)| format!("{}:{}", go_quote(k), go_repr(v)))
                .collect();
            format!("map[string]interface {{}}{{{}}}", inner.join(", "))
        }
    }
}

/// A map of strings in Go's `%#v` form, `map[string]string{"a":"b"}`.
pub fn go_string_map(map: Option<&serde_json::Map<String, Value>>) -> String {
    let Some(map) = map else {
        return "map[string]string(nil)".to_string();
    };
    let inner: Vec<String> = map
        .iter()
        .map(|(k, v)| format!("{}:{}", go_quote(k), go_quote(v.as_str().unwrap_or(""))))
        .collect();
    format!("map[string]string{{{}}}", inner.join(", "))
}

/// Every error of an object about to be stored: `old` is the stored object on updates.
pub fn validate(info: &ResourceInfo, obj: &Value, old: Option<&Value>) -> Vec<FieldError> {
    let mut errors = builtin::metadata(info, obj, old);
    if info.is_custom() {
        if let Some(schema) = info.schema(info.preferred_version()) {
            let schema_errors = crd::validate(obj, old, schema);
            let blocking = schema_errors
                .iter()
                .any(|e| e.kind == ErrorType::TypeInvalid);
            errors.extend(schema_errors);
            if !blocking {
                errors.extend(cel::validate(obj, old, schema));
            } else if cel::has_rules(schema) {
                // Rules cannot run on values of the wrong type.
                errors.push(FieldError::invalid(
                    "<nil>",
                    &Value::Null,
                    "some validation rules were not checked because the object was invalid; \
                     correct the existing errors to complete validation",
                ));
            }
        }
    } else {
        errors.extend(builtin::validate(info, obj, old));
    }
    errors
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn errors_read_like_the_api_server() {
        let e = FieldError::new(
            ErrorType::TypeInvalid,
            "spec.replicas",
            BadValue::Json(json!("string")),
            "spec.replicas in body must be of type integer: \"string\"",
        );
        assert_eq!(
            e.to_string(),
            "spec.replicas: Invalid value: \"string\": spec.replicas in body must be of type integer: \"string\""
        );
        assert_eq!(
            FieldError::required("spec.selector", "").to_string(),
            "spec.selector: Required value"
        );
        let e = FieldError::not_supported("spec.mode", &json!("x"), &["a".into(), "b".into()]);
        assert_eq!(
            e.to_string(),
            "spec.mode: Unsupported value: \"x\": supported values: \"a\", \"b\""
        );
        assert_eq!(
            go_value(&json!(["a", 1])),
            "[]interface {}{\"a\", 1}".to_string()
        );
        assert_eq!(join(&[e.clone(), e.clone()]), e.to_string());
    }
}
