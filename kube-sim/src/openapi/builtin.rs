//! The schemas of the built-in kinds, generated from the `k8s-openapi` types through `schemars`.
//!
//! The generator writes every referenced type once under its Kubernetes definition name
//! (`io.k8s.api.apps.v1.Deployment`) with `#/definitions/` references. On top of what the types carry, each
//! served kind gets its `x-kubernetes-group-version-kind`, each kind a `<Kind>List` definition, and the lists
//! the simulator merges by key (see [`crate::schema::Node`]) the `x-kubernetes-list-*` and
//! `x-kubernetes-patch-*` extensions the API server publishes for them.

use std::collections::BTreeSet;
use std::sync::OnceLock;

use k8s_openapi::api::rbac::v1 as rbac;
use k8s_openapi::api::{apps::v1 as apps, autoscaling::v1 as autoscaling, core::v1 as core};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1 as ext;
use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;
use k8s_openapi::schemars::{
    self,
    generate::{SchemaGenerator, SchemaSettings},
};
use serde_json::{Value, json};

use super::{Definitions, Gvk, list_definition, referenced};
use crate::resource;
use crate::schema::{ListType, Node, PatchStrategy};

/// The definition name of `ObjectMeta`, which every kind's `metadata` refers to.
pub const OBJECT_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta";
/// The definition name of `Status`, the body of failed requests and of deletions.
pub const STATUS: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.Status";
/// The definition name of `DeleteOptions`, the body of a DELETE.
pub const DELETE_OPTIONS: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.DeleteOptions";
/// The definition name of `Patch`, the body of a PATCH.
pub const PATCH: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.Patch";
/// The definition name of `autoscaling/v1` `Scale`, the `/scale` subresource's body.
pub const SCALE: &str = "io.k8s.api.autoscaling.v1.Scale";

/// The built-in definitions with their extensions, generated on first use and kept for the process.
pub fn definitions() -> &'static Definitions {
    static DEFINITIONS: OnceLock<Definitions> = OnceLock::new();
    DEFINITIONS.get_or_init(generate)
}

/// The definition name of a built-in kind (`io.k8s.api.core.v1.Pod`), if the simulator serves it.
pub fn kind_definition(group: &str, kind: &str) -> Option<String> {
    kind_type(group, kind).map(|k| k.name)
}

/// A served kind: its definition name, its group, version and kind, and how to generate its schema.
struct KindType {
    name: String,
    gvk: Gvk,
    generate: fn(&mut SchemaGenerator),
}

/// Plain JSON Schema with references under `#/definitions/`, left as the types write them.
fn settings() -> SchemaSettings {
    SchemaSettings::draft07().with(|s| {
        s.definitions_path = "/definitions".into();
        s.meta_schema = None;
        s.transforms.clear();
    })
}

/// Generates the definitions of every built-in kind, their lists and the request and response bodies.
fn generate() -> Definitions {
    let mut generator = SchemaGenerator::new(settings());
    let mut kinds: Vec<(KindType, Option<String>)> = resource::built_ins()
        .iter()
        .filter_map(|r| {
            let list = (!r.review).then(|| r.list_kind.clone());
            Some((kind_type(&r.group, &r.kind)?, list))
        })
        .collect();
    kinds.push((of::<autoscaling::Scale>(), None));
    kinds.push((
        KindType {
            name: STATUS.to_string(),
            gvk: Gvk::new("", "v1", "Status"),
            generate: subschema::<meta::Status>,
        },
        None,
    ));
    for (k, _) in &kinds {
        (k.generate)(&mut generator);
    }
    subschema::<meta::DeleteOptions>(&mut generator);
    subschema::<meta::Patch>(&mut generator);
    let mut defs: Definitions = generator.take_definitions(false).into_iter().collect();
    let roots: Vec<String> = kinds.iter().map(|(k, _)| k.name.clone()).collect();
    annotate_lists(&mut defs, &roots);
    for (k, list_kind) in &kinds {
        if let Some(Value::Object(def)) = defs.get_mut(&k.name) {
            def.insert("x-kubernetes-group-version-kind".into(), json!([k.gvk]));
            relax_required(def, &k.gvk.kind);
        }
        if let Some(list_kind) = list_kind {
            let list = list_definition(&k.name, &k.gvk, list_kind);
            defs.insert(list_name(&k.name, list_kind), list);
        }
    }
    defs
}

/// Drops from a kind's `required` the fields `k8s-openapi` requires only to make them non-optional in Rust:
/// `metadata` (the API server requires it of events alone) and the `spec` of Deployments and ReplicaSets.
fn relax_required(def: &mut serde_json::Map<String, Value>, kind: &str) {
    let Some(Value::Array(required)) = def.get_mut("required") else {
        return;
    };
    required.retain(|field| match field.as_str() {
        Some("metadata") => kind == "Event",
        Some("spec") => !matches!(kind, "Deployment" | "ReplicaSet"),
        _ => true,
    });
    if required.is_empty() {
        def.remove("required");
    }
}

/// The definition name of a kind's list: the kind's name with the last segment replaced.
pub fn list_name(kind_name: &str, list_kind: &str) -> String {
    match kind_name.rsplit_once('.') {
        Some((prefix, _)) => format!("{prefix}.{list_kind}"),
        None => list_kind.to_string(),
    }
}

/// Adds a type (and every type it references) to the generator.
fn subschema<T: schemars::JsonSchema>(generator: &mut SchemaGenerator) {
    generator.subschema_for::<T>();
}

/// The [`KindType`] of a `k8s-openapi` resource type.
fn of<K: schemars::JsonSchema + k8s_openapi::Resource>() -> KindType {
    KindType {
        name: K::schema_name().into_owned(),
        gvk: Gvk::new(K::GROUP, K::VERSION, K::KIND),
        generate: subschema::<K>,
    }
}

/// The `k8s-openapi` type of a served built-in kind; `None` for a kind without one.
fn kind_type(group: &str, kind: &str) -> Option<KindType> {
    Some(match (group, kind) {
        ("", "Namespace") => of::<core::Namespace>(),
        ("", "Node") => of::<core::Node>(),
        ("", "ConfigMap") => of::<core::ConfigMap>(),
        ("", "Secret") => of::<core::Secret>(),
        ("", "Service") => of::<core::Service>(),
        ("", "ServiceAccount") => of::<core::ServiceAccount>(),
        ("", "Event") => of::<core::Event>(),
        ("", "Pod") => of::<core::Pod>(),
        ("apps", "Deployment") => of::<apps::Deployment>(),
        ("apps", "ReplicaSet") => of::<apps::ReplicaSet>(),
        ("rbac.authorization.k8s.io", "Role") => of::<rbac::Role>(),
        ("rbac.authorization.k8s.io", "RoleBinding") => of::<rbac::RoleBinding>(),
        ("rbac.authorization.k8s.io", "ClusterRole") => of::<rbac::ClusterRole>(),
        ("rbac.authorization.k8s.io", "ClusterRoleBinding") => of::<rbac::ClusterRoleBinding>(),
        ("apiextensions.k8s.io", "CustomResourceDefinition") => {
            of::<ext::CustomResourceDefinition>()
        }
        ("coordination.k8s.io", "Lease") => of::<k8s_openapi::api::coordination::v1::Lease>(),
        ("events.k8s.io", "Event") => of::<k8s_openapi::api::events::v1::Event>(),
        ("authorization.k8s.io", "SelfSubjectAccessReview") => {
            of::<k8s_openapi::api::authorization::v1::SelfSubjectAccessReview>()
        }
        ("authorization.k8s.io", "SelfSubjectRulesReview") => {
            of::<k8s_openapi::api::authorization::v1::SelfSubjectRulesReview>()
        }
        ("authentication.k8s.io", "SelfSubjectReview") => {
            of::<k8s_openapi::api::authentication::v1::SelfSubjectReview>()
        }
        _ => return None,
    })
}

/// Walks the definitions from the kinds down, giving every array property the list type and patch strategy
/// the simulator uses for it. A definition is judged by the field that first reaches it (the simulator's own
/// table keys on the field and its parent).
fn annotate_lists(defs: &mut Definitions, roots: &[String]) {
    let mut seen = BTreeSet::new();
    let mut queue: Vec<(String, String)> =
        roots.iter().map(|r| (r.clone(), String::new())).collect();
    while let Some((name, via)) = queue.pop() {
        if !seen.insert(name.clone()) {
            continue;
        }
        let Some(props) = defs
            .get_mut(&name)
            .and_then(|d| d.get_mut("properties"))
            .and_then(Value::as_object_mut)
        else {
            continue;
        };
        for (field, prop) in props.iter_mut() {
            if prop.get("type").and_then(Value::as_str) == Some("array") {
                let node = Node::BuiltIn(vec![via.clone(), field.clone()]);
                mark_list(prop, &node);
            }
            let mut refs = Vec::new();
            referenced(prop, &mut refs);
            queue.extend(refs.into_iter().map(|r| (r, field.clone())));
        }
    }
}

/// Writes the list extensions of the list at `node` onto its schema.
fn mark_list(prop: &mut Value, node: &Node<'_>) {
    let Value::Object(m) = prop else { return };
    match node.list_type() {
        ListType::Map(keys) => {
            m.insert("x-kubernetes-list-type".into(), json!("map"));
            m.insert("x-kubernetes-list-map-keys".into(), json!(keys));
        }
        ListType::Set => {
            m.insert("x-kubernetes-list-type".into(), json!("set"));
        }
        ListType::Atomic => {}
    }
    match node.patch_strategy() {
        PatchStrategy::MergeKey(key) => {
            m.insert("x-kubernetes-patch-strategy".into(), json!("merge"));
            m.insert("x-kubernetes-patch-merge-key".into(), json!(key));
        }
        PatchStrategy::MergePrimitives => {
            m.insert("x-kubernetes-patch-strategy".into(), json!("merge"));
        }
        PatchStrategy::Replace => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::openapi::REF_PREFIX;

    #[test]
    fn every_served_built_in_kind_has_a_schema_with_its_group_version_kind() {
        let defs = definitions();
        for r in resource::built_ins() {
            let name = kind_definition(&r.group, &r.kind)
                .unwrap_or_else(|| panic!("{} has no k8s-openapi type", r.kind));
            let gvk = defs[&name]["x-kubernetes-group-version-kind"][0].clone();
            assert_eq!(gvk, json!(Gvk::new(&r.group, "v1", &r.kind)), "{name}");
            let list = defs.contains_key(&list_name(&name, &r.list_kind));
            assert_eq!(list, !r.review, "a list exists of what is stored: {name}");
        }
        assert!(
            defs["io.k8s.api.apps.v1.Deployment"]
                .get("required")
                .is_none()
        );
        assert_eq!(
            defs["io.k8s.api.core.v1.Event"]["required"],
            json!(["involvedObject", "metadata"])
        );
        let deployment = &defs["io.k8s.api.apps.v1.Deployment"];
        assert_eq!(
            deployment["properties"]["metadata"]["$ref"],
            format!("{REF_PREFIX}{OBJECT_META}")
        );
    }

    #[test]
    fn merged_lists_carry_their_keys() {
        let containers = &definitions()["io.k8s.api.core.v1.PodSpec"]["properties"]["containers"];
        assert_eq!(containers["x-kubernetes-patch-merge-key"], "name");
        assert_eq!(containers["x-kubernetes-list-map-keys"], json!(["name"]));
        let ports = &definitions()["io.k8s.api.core.v1.Container"]["properties"]["ports"];
        assert_eq!(ports["x-kubernetes-patch-merge-key"], "containerPort");
        let args = &definitions()["io.k8s.api.core.v1.Container"]["properties"]["args"];
        assert!(args.get("x-kubernetes-patch-strategy").is_none());
    }
}
