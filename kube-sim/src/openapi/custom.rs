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
    let properties = schema
        .entry("properties")
        .or_insert_with(|| json!({}))
        .as_object_mut();
    if let Some(p) = properties {
        p.insert(
            "apiVersion".into(),
            json!({"description": API_VERSION_DESCRIPTION, "type": "string"}),
        );
        p.insert(
            "kind".into(),
            json!({"description": KIND_DESCRIPTION, "type": "string"}),
        );
        p.insert(
            "metadata".into(),
            json!({"$ref": format!("{REF_PREFIX}{OBJECT_META}"), "description": METADATA_DESCRIPTION}),
        );
    }
    schema.insert("x-kubernetes-group-version-kind".into(), json!([gvk]));
    let list = list_definition(&name, &gvk, &info.list_kind);
    vec![
        (list_name(&name, &info.list_kind), list),
        (name, Value::Object(schema)),
    ]
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
                    "size": {"type": "integer", "description": "How big."}}}}}}}]}});
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
        assert_eq!(
            defs["com.example.v1.WidgetList"]["properties"]["items"]["items"]["$ref"],
            format!("{REF_PREFIX}com.example.v1.Widget")
        );
    }
}
