//! Validation of custom resources against the structural schema of their version: types, `required`,
//! `enum`, numeric bounds, string lengths, `pattern`, `format`, list and map sizes, and `nullable`, with
//! the messages of the API server's OpenAPI validator.

use serde_json::{Map, Value};

use super::{BadValue, ErrorType, FieldError, child, format};

/// The errors of a custom resource against its version's `openAPIV3Schema`. The root's `apiVersion`,
/// `kind` and `metadata` are not checked against the schema.
/// On updates (`old` is the stored object) values that did not change keep their errors to themselves, as
/// the API server's validation ratcheting does: a schema that got stricter does not block other changes.
pub fn validate(obj: &Value, old: Option<&Value>, schema: &Value) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let Value::Object(map) = obj else {
        return errors;
    };
    let mut root = map.clone();
    for k in ["apiVersion", "kind", "metadata"] {
        root.remove(k);
    }
    let mut root_schema = schema.clone();
    if let Some(Value::Array(req)) = root_schema.get_mut("required") {
        req.retain(|r| !matches!(r.as_str(), Some("apiVersion" | "kind" | "metadata")));
    }
    let old_root = old.and_then(Value::as_object).map(|m| {
        let mut m = m.clone();
        for k in ["apiVersion", "kind", "metadata"] {
            m.remove(k);
        }
        Value::Object(m)
    });
    check(
        &Value::Object(root),
        old_root.as_ref(),
        &root_schema,
        "",
        &mut errors,
    );
    errors
}

/// The errors of a value (such as a schema's `default`) against a schema node, reported at `path`.
pub(super) fn check_value(v: &Value, schema: &Value, path: &str) -> Vec<FieldError> {
    let mut errors = Vec::new();
    check(v, None, schema, path, &mut errors);
    errors
}

/// The JSON type name of a value as the validator reports it.
fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_f64() => "number",
        Value::Number(_) => "integer",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn is_integral(v: &Value) -> bool {
    match v {
        Value::Number(n) => {
            n.is_i64() || n.is_u64() || n.as_f64().is_some_and(|f| f.fract() == 0.0)
        }
        _ => false,
    }
}

fn flag(schema: &Value, key: &str) -> bool {
    schema.get(key).and_then(Value::as_bool) == Some(true)
}

/// Whether a value has the type a schema declares.
fn type_matches(v: &Value, schema: &Value) -> bool {
    if flag(schema, "x-kubernetes-int-or-string") {
        return v.is_string() || is_integral(v);
    }
    match schema.get("type").and_then(Value::as_str) {
        None | Some("") => true,
        Some("integer") => is_integral(v),
        Some("number") => v.is_number(),
        Some("string") => v.is_string(),
        Some("boolean") => v.is_boolean(),
        Some("array") => v.is_array(),
        Some("object") => v.is_object(),
        Some(_) => true,
    }
}

/// Validates one value against its schema node, descending into objects and lists.
fn check(v: &Value, old: Option<&Value>, schema: &Value, path: &str, errors: &mut Vec<FieldError>) {
    if old == Some(v) {
        return;
    }
    if v.is_null() {
        if !flag(schema, "nullable") && schema.get("type").is_some() {
            errors.push(type_error(v, schema, path));
        }
        return;
    }
    if !type_matches(v, schema) {
        errors.push(type_error(v, schema, path));
        return;
    }
    check_enum(v, schema, path, errors);
    match v {
        Value::Number(_) => check_number(v, schema, path, errors),
        Value::String(s) => check_string(s, schema, path, errors),
        Value::Array(items) => check_array(items, old, schema, path, errors),
        Value::Object(map) => check_object(map, old, schema, path, errors),
        _ => {}
    }
}

fn type_error(v: &Value, schema: &Value, path: &str) -> FieldError {
    let want = if flag(schema, "x-kubernetes-int-or-string") {
        "integer,string"
    } else {
        schema.get("type").and_then(Value::as_str).unwrap_or("")
    };
    let got = type_name(v);
    FieldError::new(
        ErrorType::TypeInvalid,
        path,
        BadValue::Json(Value::from(got)),
        &format!("{path} in body must be of type {want}: \"{got}\""),
    )
}

fn check_enum(v: &Value, schema: &Value, path: &str, errors: &mut Vec<FieldError>) {
    let Some(allowed) = schema.get("enum").and_then(Value::as_array) else {
        return;
    };
    if allowed.iter().any(|a| same_value(a, v)) {
        return;
    }
    let names: Vec<String> = allowed
        .iter()
        .map(|a| match a {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        })
        .collect();
    errors.push(FieldError::not_supported(path, v, &names));
}

/// JSON equality with numbers compared by value (`1` equals `1.0`).
fn same_value(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        _ => a == b,
    }
}

/// A bound from the schema, printed the way Go prints a float64.
fn bound(schema: &Value, key: &str) -> Option<(f64, String)> {
    let n = schema.get(key)?;
    let f = n.as_f64()?;
    Some((f, n.to_string().trim_end_matches(".0").to_string()))
}

fn check_number(v: &Value, schema: &Value, path: &str, errors: &mut Vec<FieldError>) {
    let Some(x) = v.as_f64() else { return };
    let mut invalid = |detail: String| errors.push(FieldError::invalid(path, v, &detail));
    if let Some((min, shown)) = bound(schema, "minimum") {
        if flag(schema, "exclusiveMinimum") && x <= min {
            invalid(format!("{path} in body should be greater than {shown}"));
        } else if x < min {
            invalid(format!(
                "{path} in body should be greater than or equal to {shown}"
            ));
        }
    }
    if let Some((max, shown)) = bound(schema, "maximum") {
        if flag(schema, "exclusiveMaximum") && x >= max {
            invalid(format!("{path} in body should be less than {shown}"));
        } else if x > max {
            invalid(format!(
                "{path} in body should be less than or equal to {shown}"
            ));
        }
    }
    if let Some((m, shown)) = bound(schema, "multipleOf")
        && m != 0.0
        && (x / m).fract() != 0.0
    {
        invalid(format!("{path} in body should be a multiple of {shown}"));
    }
}

fn check_string(s: &str, schema: &Value, path: &str, errors: &mut Vec<FieldError>) {
    let v = Value::from(s);
    let len = s.chars().count() as u64;
    if let Some(min) = schema.get("minLength").and_then(Value::as_u64)
        && len < min
    {
        errors.push(FieldError::invalid(
            path,
            &v,
            &format!("{path} in body should be at least {min} chars long"),
        ));
    }
    if let Some(max) = schema.get("maxLength").and_then(Value::as_u64)
        && len > max
    {
        errors.push(FieldError::new(
            ErrorType::TooLong,
            path,
            BadValue::Json(v.clone()),
            &format!("may not be longer than {max}"),
        ));
    }
    if let Some(pattern) = schema.get("pattern").and_then(Value::as_str)
        && let Ok(re) = regex::Regex::new(pattern)
        && !re.is_match(s)
    {
        errors.push(FieldError::invalid(
            path,
            &v,
            &format!("{path} in body should match '{pattern}'"),
        ));
    }
    if let Some(f) = schema.get("format").and_then(Value::as_str)
        && !format::valid(f, s)
    {
        errors.push(FieldError::new(
            ErrorType::TypeInvalid,
            path,
            BadValue::Json(v.clone()),
            &format!("{path} in body must be of type {f}: {}", super::go_quote(s)),
        ));
    }
}

fn check_array(
    items: &[Value],
    old: Option<&Value>,
    schema: &Value,
    path: &str,
    errors: &mut Vec<FieldError>,
) {
    let n = items.len() as u64;
    if let Some(min) = schema.get("minItems").and_then(Value::as_u64)
        && n < min
    {
        errors.push(FieldError::invalid(
            path,
            &Value::from(n),
            &format!("{path} in body should have at least {min} items"),
        ));
    }
    if let Some(max) = schema.get("maxItems").and_then(Value::as_i64)
        && n as i64 > max
    {
        errors.push(FieldError::too_many(path, items.len(), max));
    }
    if flag(schema, "uniqueItems") && has_duplicates(items) {
        errors.push(FieldError::invalid(
            path,
            &Value::from(""),
            &format!("{path} in body shouldn't contain duplicates"),
        ));
    }
    check_list_keys(items, schema, path, errors);
    if let Some(item_schema) = schema.get("items") {
        for (i, item) in items.iter().enumerate() {
            let old_item = old.and_then(|o| super::cel::correlated_item(o, item, schema));
            check(item, old_item, item_schema, &format!("{path}[{i}]"), errors);
        }
    }
}

fn has_duplicates(items: &[Value]) -> bool {
    items
        .iter()
        .enumerate()
        .any(|(i, a)| items[..i].iter().any(|b| same_value(a, b)))
}

/// `x-kubernetes-list-type: set` items and `map` keys must be unique.
fn check_list_keys(items: &[Value], schema: &Value, path: &str, errors: &mut Vec<FieldError>) {
    let keys: Vec<&str> = schema
        .get("x-kubernetes-list-map-keys")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let identity = |v: &Value| -> Value {
        if keys.is_empty() {
            v.clone()
        } else {
            Value::Array(
                keys.iter()
                    .map(|k| v.get(*k).cloned().unwrap_or(Value::Null))
                    .collect(),
            )
        }
    };
    match schema.get("x-kubernetes-list-type").and_then(Value::as_str) {
        Some("set") | Some("map") => {}
        _ => return,
    }
    for (i, item) in items.iter().enumerate() {
        let id = identity(item);
        if items[..i].iter().any(|b| identity(b) == id) {
            let shown = if keys.is_empty() {
                id
            } else {
                Value::Object(
                    keys.iter()
                        .map(|k| (k.to_string(), item.get(*k).cloned().unwrap_or(Value::Null)))
                        .collect(),
                )
            };
            errors.push(FieldError::duplicate(&format!("{path}[{i}]"), &shown));
        }
    }
}

fn check_object(
    map: &Map<String, Value>,
    old: Option<&Value>,
    schema: &Value,
    path: &str,
    errors: &mut Vec<FieldError>,
) {
    let n = map.len() as u64;
    if let Some(min) = schema.get("minProperties").and_then(Value::as_u64)
        && n < min
    {
        errors.push(FieldError::invalid(
            path,
            &Value::from(n),
            &format!("{path} in body should have at least {min} properties"),
        ));
    }
    if let Some(max) = schema.get("maxProperties").and_then(Value::as_i64)
        && n as i64 > max
    {
        errors.push(FieldError::new(
            ErrorType::TooMany,
            path,
            BadValue::Json(Value::from(n)),
            &format!("must have at most {max} items"),
        ));
    }
    if let Some(required) = schema.get("required").and_then(Value::as_array) {
        for r in required.iter().filter_map(Value::as_str) {
            if !map.contains_key(r) {
                errors.push(FieldError::required(&child(path, r), ""));
            }
        }
    }
    let props = schema.get("properties").and_then(Value::as_object);
    let additional = schema.get("additionalProperties").filter(|a| a.is_object());
    for (k, v) in map {
        let embedded = flag(schema, "x-kubernetes-embedded-resource");
        if embedded && k == "metadata" {
            continue;
        }
        if let Some(s) = props.and_then(|p| p.get(k)).or(additional) {
            check(v, old.and_then(|o| o.get(k)), s, &child(path, k), errors);
        }
    }
}

/// The rules of a CustomResourceDefinition beyond its type: its name, and schemas the API server accepts
/// (structural, with CEL rules that compile), and a scope that does not change.
pub fn validate_definition(crd: &Value, old: Option<&Value>) -> Vec<FieldError> {
    let mut errors = Vec::new();
    if let Some(old) = old
        && let Some(scope) = crd.pointer("/spec/scope")
        && old.pointer("/spec/scope").is_some_and(|s| s != scope)
    {
        errors.push(FieldError::invalid(
            "spec.scope",
            scope,
            "field is immutable",
        ));
    }
    let name = crate::meta::name_of(crd);
    let str_at = |p: &str| crate::meta::str_at(crd, p).unwrap_or("");
    let expected = format!("{}.{}", str_at("/spec/names/plural"), str_at("/spec/group"));
    if name != expected {
        errors.push(FieldError::invalid(
            "metadata.name",
            &Value::from(name),
            "must be spec.names.plural+\".\"+spec.group",
        ));
    }
    let versions = crd
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    for (i, v) in versions.iter().enumerate() {
        if let Some(schema) = v.pointer("/schema/openAPIV3Schema") {
            let path = format!("spec.versions[{i}].schema.openAPIV3Schema");
            errors.extend(super::structural::validate(schema, &path));
            super::cel::compile_errors(schema, &path, &mut errors);
        }
    }
    errors
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({"type": "object", "required": ["spec"], "properties": {"spec": {"type": "object",
        "required": ["image"],
        "properties": {
            "replicas": {"type": "integer", "minimum": 0, "maximum": 10},
            "image": {"type": "string", "minLength": 1, "maxLength": 8, "pattern": "^[a-z]+$"},
            "mode": {"type": "string", "enum": ["Fast", "Slow"]},
            "ratio": {"type": "number", "minimum": 0, "exclusiveMinimum": true},
            "tags": {"type": "array", "minItems": 1, "maxItems": 2, "items": {"type": "string"},
                "x-kubernetes-list-type": "set"},
            "labels": {"type": "object", "maxProperties": 1,
                "additionalProperties": {"type": "string"}},
            "port": {"x-kubernetes-int-or-string": true},
            "note": {"type": "string", "nullable": true},
            "when": {"type": "string", "format": "date-time"}
        }}}})
    }

    fn messages(obj: Value) -> Vec<String> {
        crate::validation::messages(&validate(&obj, None, &schema()))
    }

    #[test]
    fn unchanged_values_keep_their_errors_on_updates() {
        let old = json!({"spec": {"image": "a", "replicas": 50}});
        let new = json!({"spec": {"image": "b", "replicas": 50}});
        assert!(validate(&new, Some(&old), &schema()).is_empty());
        let new = json!({"spec": {"image": "b", "replicas": 51}});
        assert_eq!(validate(&new, Some(&old), &schema()).len(), 1);
    }

    #[test]
    fn a_crd_keeps_its_scope_and_its_name_follows_its_names() {
        let crd = |scope: &str| {
            json!({"metadata": {"name": "pools.example.com"}, "spec": {"group": "example.com",
                "names": {"plural": "pools"}, "scope": scope, "versions": []}})
        };
        assert!(validate_definition(&crd("Namespaced"), Some(&crd("Namespaced"))).is_empty());
        let errors = crate::validation::messages(&validate_definition(
            &crd("Cluster"),
            Some(&crd("Namespaced")),
        ));
        assert_eq!(
            errors,
            vec!["spec.scope: Invalid value: \"Cluster\": field is immutable"]
        );
        let mut renamed = crd("Namespaced");
        renamed["spec"]["names"]["plural"] = json!("pool");
        assert_eq!(
            validate_definition(&renamed, None)[0].to_string(),
            "metadata.name: Invalid value: \"pools.example.com\": must be spec.names.plural+\".\"+spec.group"
        );
    }

    #[test]
    fn a_valid_object_passes() {
        let obj = json!({"apiVersion": "x/v1", "kind": "X", "metadata": {"name": "a"},
            "spec": {"replicas": 3, "image": "abc", "mode": "Fast", "ratio": 0.5, "tags": ["a"],
                "labels": {"a": "b"}, "port": "http", "note": null, "when": "2024-01-02T03:04:05Z"}});
        assert_eq!(messages(obj), Vec::<String>::new());
    }

    #[test]
    fn types_name_the_field() {
        let m = messages(json!({"spec": {"image": "a", "replicas": "three", "port": true}}));
        assert_eq!(
            m,
            vec![
                "spec.port: Invalid value: \"boolean\": spec.port in body must be of type integer,string: \"boolean\"",
                "spec.replicas: Invalid value: \"string\": spec.replicas in body must be of type integer: \"string\"",
            ]
        );
    }

    #[test]
    fn bounds_enums_and_required() {
        let m = messages(json!({"spec": {"replicas": -1, "mode": "Medium", "ratio": 0}}));
        assert_eq!(
            m,
            vec![
                "spec.image: Required value",
                "spec.mode: Unsupported value: \"Medium\": supported values: \"Fast\", \"Slow\"",
                "spec.ratio: Invalid value: 0: spec.ratio in body should be greater than 0",
                "spec.replicas: Invalid value: -1: spec.replicas in body should be greater than or equal to 0",
            ]
        );
        assert_eq!(messages(json!({})), vec!["spec: Required value"]);
    }

    #[test]
    fn strings_lists_maps_and_formats() {
        let m = messages(
            json!({"spec": {"image": "ABCDEFGHIJ", "tags": ["a", "a", "b"],
            "labels": {"a": "1", "b": "2"}, "when": "yesterday"}}),
        );
        assert_eq!(
            m,
            vec![
                "spec.image: Too long: may not be longer than 8",
                "spec.image: Invalid value: \"ABCDEFGHIJ\": spec.image in body should match '^[a-z]+$'",
                "spec.labels: Too many: 2: must have at most 1 items",
                "spec.tags: Too many: 3: must have at most 2 items",
                "spec.tags[1]: Duplicate value: \"a\"",
                "spec.when: Invalid value: \"yesterday\": spec.when in body must be of type date-time: \"yesterday\"",
            ]
        );
        let m = messages(json!({"spec": {"image": "", "tags": []}}));
        assert_eq!(
            m,
            vec![
                "spec.image: Invalid value: \"\": spec.image in body should be at least 1 chars long",
                "spec.image: Invalid value: \"\": spec.image in body should match '^[a-z]+$'",
                "spec.tags: Invalid value: 0: spec.tags in body should have at least 1 items",
            ]
        );
    }
}
