//! The structural-schema rules a CRD's `openAPIV3Schema` must follow before the API server accepts it:
//! every specified node has a type, an object at the root, items for arrays, `properties` and
//! `additionalProperties` not together, and no `uniqueItems`.

use serde_json::Value;

use super::FieldError;

/// Where a schema node sits, which words its missing-type error uses.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Level {
    Root,
    Field,
    Item,
}

/// The errors of a version's schema at `path` (`spec.versions[0].schema.openAPIV3Schema`).
pub fn validate(schema: &Value, path: &str) -> Vec<FieldError> {
    let mut errors = Vec::new();
    node(schema, path, Level::Root, &mut errors);
    errors
}

fn flag(schema: &Value, key: &str) -> bool {
    schema.get(key).and_then(Value::as_bool) == Some(true)
}

fn node(schema: &Value, path: &str, level: Level, errors: &mut Vec<FieldError>) {
    let ty = schema.get("type").and_then(Value::as_str).unwrap_or("");
    let embedded = flag(schema, "x-kubernetes-embedded-resource");
    if embedded && ty != "object" {
        let at = format!("{path}.type");
        let detail = "must be object if x-kubernetes-embedded-resource is true";
        errors.push(if ty.is_empty() {
            FieldError::required(&at, detail)
        } else {
            FieldError::invalid(&at, &Value::from(ty), detail)
        });
    } else if ty.is_empty()
        && !flag(schema, "x-kubernetes-int-or-string")
        && !flag(schema, "x-kubernetes-preserve-unknown-fields")
    {
        let detail = match level {
            Level::Root => "must not be empty at the root",
            Level::Item => "must not be empty for specified array items",
            Level::Field => "must not be empty for specified object fields",
        };
        errors.push(FieldError::required(&format!("{path}.type"), detail));
    }
    if level == Level::Root && !ty.is_empty() && ty != "object" {
        errors.push(FieldError::invalid(
            &format!("{path}.type"),
            &Value::from(ty),
            "must be object at the root",
        ));
    }
    if flag(schema, "uniqueItems") {
        errors.push(FieldError::forbidden(
            &format!("{path}.uniqueItems"),
            "uniqueItems cannot be set to true since the runtime complexity becomes quadratic",
        ));
    }
    let props = schema.get("properties").and_then(Value::as_object);
    let additional = schema.get("additionalProperties");
    if props.is_some_and(|p| !p.is_empty()) && additional.is_some_and(|a| a != &Value::Bool(true)) {
        errors.push(FieldError::forbidden(
            &format!("{path}.additionalProperties"),
            "additionalProperties and properties are mutual exclusive",
        ));
    }
    if ty == "array" && schema.get("items").is_none() {
        errors.push(FieldError::required(
            &format!("{path}.items"),
            "must be specified",
        ));
    }
    check_default(schema, path, level, errors);
    for (k, s) in props.into_iter().flatten() {
        node(s, &format!("{path}.properties[{k}]"), Level::Field, errors);
    }
    if let Some(s @ Value::Object(_)) = additional {
        node(
            s,
            &format!("{path}.additionalProperties"),
            Level::Field,
            errors,
        );
    }
    if let Some(s) = schema.get("items").filter(|i| i.is_object()) {
        node(s, &format!("{path}.items"), Level::Item, errors);
    }
}

/// A node's `default`: not at the root, and valid against the node once pruned and defaulted itself.
fn check_default(schema: &Value, path: &str, level: Level, errors: &mut Vec<FieldError>) {
    let Some(default) = schema.get("default") else {
        return;
    };
    let at = format!("{path}.default");
    if level == Level::Root {
        errors.push(FieldError::forbidden(&at, "must not be set at the root"));
        return;
    }
    // The default is checked as it is stored: pruned, with the defaults under it applied.
    let mut holder = serde_json::json!({ "d": default });
    let holder_schema = serde_json::json!({"type": "object", "properties": {"d": schema}});
    crate::schema::prune_custom_resource(&mut holder, &holder_schema);
    let default = holder.get("d").unwrap_or(default);
    for mut e in super::crd::check_value(default, schema, &at) {
        e.detail = e.detail.replacen(&format!("{at} in body"), "in body", 1);
        errors.push(e);
    }
}

#[cfg(test)]
mod tests {
    use super::validate;
    use crate::validation::messages;
    use serde_json::json;

    #[test]
    fn non_structural_schemas_are_named() {
        let schema = json!({"type": "object", "properties": {
            "spec": {"properties": {"xs": {"type": "array"}, "ok": {"x-kubernetes-int-or-string": true}}},
            "free": {"x-kubernetes-preserve-unknown-fields": true}}});
        let errors = messages(&validate(&schema, "s"));
        assert_eq!(
            errors,
            vec![
                "s.properties[spec].type: Required value: must not be empty for specified object fields",
                "s.properties[spec].properties[xs].items: Required value: must be specified",
            ]
        );
        let nested_defaults = json!({"type": "object", "properties": {
            "o": {"type": "object", "required": ["x"], "default": {},
                "properties": {"x": {"type": "integer", "default": 1}}}}});
        assert!(validate(&nested_defaults, "s").is_empty());
        let with_bad_default = json!({"type": "object", "properties": {
            "n": {"type": "integer", "minimum": 1, "default": 0}}});
        assert_eq!(
            validate(&with_bad_default, "s")[0].to_string(),
            "s.properties[n].default: Invalid value: 0: in body should be greater than or equal to 1"
        );
        assert_eq!(
            validate(&json!({"type": "string"}), "s")[0].to_string(),
            "s.type: Invalid value: \"string\": must be object at the root"
        );
    }
}
