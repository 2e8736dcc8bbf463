//! The schemas of custom resources, from each served CRD version's `openAPIV3Schema`.
//!
//! As the API server publishes them: the kind's definition is named after the reversed group
//! (`com.example.v1.Widget`), carries `x-kubernetes-group-version-kind`, and its `apiVersion`, `kind` and
//! `metadata` are the standard ones, `metadata` referring to `ObjectMeta`.

use serde_json::{Map, Value, json};

use super::builtin::{OBJECT_META, list_name};
use super::{API_VERSION_DESCRIPTION, Gvk, KIND_DESCRIPTION, REF_PREFIX, list_definition};
use crate::resource::ResourceInfo;

/// The description of a custom resource's `metadata`.
const METADATA_DESCRIPTION: &str = "Standard object's metadata. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata";

/// The definition name of a custom kind: the group's labels reversed, the version and the kind.
pub fn definition_name(group: &str, version: &str, kind: &str) -> String {
    let reversed: Vec<&str> = group.split('.').rev().collect();
    format!("{}.{version}.{kind}", reversed.join("."))
}

/// The definitions of a custom resource at one served version: the kind and its list.
pub fn definitions(info: &ResourceInfo, version: &str) -> Vec<(String, Value)> {
    let name = definition_name(&info.group, version, &info.kind);
    let gvk = Gvk::new(&info.group, version, &info.kind);
    let mut schema = match info.schema(version) {
        Some(Value::Object(m)) => m.clone(),
        _ => {
            let mut m = Map::new();
            m.insert("x-kubernetes-preserve-unknown-fields".into(), json!(true));
            m
        }
    };
    schema.entry("type").or_insert_with(|| json!("object"));
    if let Some(Value::Object(p)) = schema.get_mut("properties") {
        p.values_mut().for_each(embedded_resources);
    }
    standard_fields(&mut schema, true);
    schema.insert("x-kubernetes-group-version-kind".into(), json!([gvk]));
    let list = list_definition(&name, &gvk, &info.list_kind);
    vec![
        (list_name(&name, &info.list_kind), list),
        (name, Value::Object(schema)),
    ]
}

/// Gives an object schema the standard `apiVersion`, `kind` and `metadata` fields; `replace` also replaces
/// ones the schema declares (at a kind's root, where the API server owns them).
fn standard_fields(schema: &mut Map<String, Value>, replace: bool) {
    let Some(p) = schema
        .entry("properties")
        .or_insert_with(|| json!({}))
        .as_object_mut()
    else {
        return;
    };
    let fields = [
        (
            "apiVersion",
            json!({"description": API_VERSION_DESCRIPTION, "type": "string"}),
        ),
        (
            "kind",
            json!({"description": KIND_DESCRIPTION, "type": "string"}),
        ),
        (
            "metadata",
            json!({"$ref": format!("{REF_PREFIX}{OBJECT_META}"), "description": METADATA_DESCRIPTION}),
        ),
    ];
    for (name, field) in fields {
        if replace || !p.contains_key(name) {
            p.insert(name.into(), field);
        }
    }
}

/// Gives every `x-kubernetes-embedded-resource` object below a schema node the standard fields it lacks.
fn embedded_resources(schema: &mut Value) {
    let Value::Object(m) = schema else { return };
    for key in ["properties", "patternProperties"] {
        if let Some(Value::Object(p)) = m.get_mut(key) {
            p.values_mut().for_each(embedded_resources);
        }
    }
    for key in ["items", "additionalProperties"] {
        if let Some(v) = m.get_mut(key) {
            embedded_resources(v);
        }
    }
    if m.get("x-kubernetes-embedded-resource") == Some(&json!(true)) {
        standard_fields(m, false);
    }
}

/// Drops what Swagger 2.0 cannot say from a structural schema (`nullable` and the `anyOf`, `oneOf` and `not`
/// validations), as the API server does for the custom resources in `/openapi/v2`.
pub fn swagger2(schema: &mut Value) {
    match schema {
        Value::Object(m) => {
            for key in ["nullable", "anyOf", "oneOf", "not"] {
                m.remove(key);
            }
            m.values_mut().for_each(swagger2);
        }
        Value::Array(a) => a.iter_mut().for_each(swagger2),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_crd_version_becomes_a_kind_with_standard_metadata_and_a_list() {
        let crd = json!({"metadata": {"name": "widgets.example.com"}, "spec": {"group": "example.com",
            "names": {"kind": "Widget", "plural": "widgets"}, "scope": "Namespaced",
            "versions": [{"name": "v1", "served": true, "storage": true, "schema": {"openAPIV3Schema":
                {"type": "object", "properties": {"spec": {"type": "object", "properties": {
                    "size": {"type": "integer", "description": "How big."},
                    "pod": {"type": "object", "x-kubernetes-embedded-resource": true}}}}}}}]}});
        let info = crate::resource::from_crd(&crd).expect("a valid CRD");
        let defs: std::collections::BTreeMap<_, _> = definitions(&info, "v1").into_iter().collect();
        let widget = &defs["com.example.v1.Widget"];
        assert_eq!(
            widget["x-kubernetes-group-version-kind"],
            json!([{"group": "example.com", "version": "v1", "kind": "Widget"}])
        );
        assert_eq!(
            widget["properties"]["metadata"]["$ref"],
            format!("{REF_PREFIX}{OBJECT_META}")
        );
        assert_eq!(
            widget["properties"]["spec"]["properties"]["size"]["description"],
            "How big."
        );
        let embedded = &widget["properties"]["spec"]["properties"]["pod"]["properties"];
        assert_eq!(embedded["kind"]["type"], "string");
        assert_eq!(
            embedded["metadata"]["$ref"],
            format!("{REF_PREFIX}{OBJECT_META}")
        );
        assert_eq!(
            defs["com.example.v1.WidgetList"]["properties"]["items"]["items"]["$ref"],
            format!("{REF_PREFIX}com.example.v1.Widget")
        );
    }
}
