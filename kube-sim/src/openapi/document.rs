//! Assembling the served documents from the definitions and the paths of every served resource.
//!
//! The documents of group versions that serve only built-in resources never change: they are encoded once
//! for the process. A change of custom resources rebuilds the documents of their group versions and the
//! index; the Swagger 2.0 document, which only JSON-speaking clients ask for, is encoded when first asked.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, OnceLock};

use serde_json::{Map, Value, json};

use super::builtin::{self, DELETE_OPTIONS, PATCH, SCALE, STATUS};
use super::paths::{Flavor, resource_paths};
use super::{Definitions, Encoded, Error, REF_PREFIX, custom, referenced};
use crate::discovery::KUBERNETES_MINOR;
use crate::lock::MutexExt;
use crate::resource::{self, ResourceInfo};

/// How a reference to a schema starts in OpenAPI 3.0.
const V3_REF_PREFIX: &str = "#/components/schemas/";

/// The documents served for one set of resources.
#[derive(Debug)]
pub struct Built {
    /// The custom resources the documents describe, to notice when they change.
    custom: Vec<Arc<ResourceInfo>>,
    /// Every served resource version, for the Swagger 2.0 document.
    served: Vec<Served>,
    /// The definitions of the custom resources (the built-in ones are [`builtin::definitions`]).
    custom_defs: Definitions,
    /// The Swagger 2.0 document of `/openapi/v2`, once asked for.
    v2: Mutex<Option<Encoded>>,
    /// The index of `/openapi/v3`.
    pub index: Encoded,
    /// The OpenAPI 3.0 documents by key (`api/v1`, `apis/apps/v1`).
    v3: BTreeMap<String, Encoded>,
}

/// One served resource at one served version, with its kind's definition name.
#[derive(Debug)]
struct Served {
    info: Arc<ResourceInfo>,
    version: String,
    kind_ref: String,
}

impl Built {
    /// Builds the documents for the served resources.
    pub(super) fn new(resources: &[Arc<ResourceInfo>]) -> Built {
        let mut custom_defs = Definitions::new();
        let served = served(resources, &mut custom_defs);
        let mut v3 = built_in_documents().clone();
        for (k, members) in by_group_version(&served) {
            if members.iter().any(|s| s.info.is_custom()) || !v3.contains_key(&k) {
                v3.insert(k, Encoded::new(&v3_document(&custom_defs, &members)));
            }
        }
        let index: Map<String, Value> = v3
            .iter()
            .map(|(k, doc)| {
                let url = format!("/openapi/v3/{k}?hash={}", doc.hash);
                (k.clone(), json!({"serverRelativeURL": url}))
            })
            .collect();
        Built {
            custom: custom_resources(resources),
            served,
            custom_defs,
            v2: Mutex::new(None),
            index: Encoded::new(&json!({"paths": index})),
            v3,
        }
    }

    /// Whether these documents were built for the custom resources served now.
    pub(super) fn describes(&self, resources: &[Arc<ResourceInfo>]) -> bool {
        let now = custom_resources(resources);
        now.len() == self.custom.len()
            && now.iter().zip(&self.custom).all(|(a, b)| Arc::ptr_eq(a, b))
    }

    /// The Swagger 2.0 document, encoded on first use.
    pub fn v2(&self) -> Encoded {
        let mut v2 = self.v2.lock_unpoisoned();
        v2.get_or_insert_with(|| Encoded::new(&v2_document(&self.custom_defs, &self.served)))
            .clone()
    }

    /// The OpenAPI 3.0 document of a group version, by its key in the index (`apis/apps/v1`).
    pub fn v3(&self, key: &str) -> Result<&Encoded, Error> {
        self.v3
            .get(key)
            .ok_or_else(|| Error::UnknownGroupVersion(key.to_string()))
    }
}

/// Every served version of every resource that has a schema, in a stable order; the definitions of the
/// custom ones go into `custom_defs`.
fn served(resources: &[Arc<ResourceInfo>], custom_defs: &mut Definitions) -> Vec<Served> {
    let mut ordered: Vec<&Arc<ResourceInfo>> = resources.iter().collect();
    ordered.sort_by_key(|r| r.group_resource());
    let mut out = Vec::new();
    for r in ordered {
        for v in &r.versions {
            let kind_ref = if r.is_custom() {
                custom_defs.extend(custom::definitions(r, v));
                Some(custom::definition_name(&r.group, v, &r.kind))
            } else {
                builtin::kind_definition(&r.group, &r.kind)
            };
            if let Some(kind_ref) = kind_ref {
                out.push(Served {
                    info: r.clone(),
                    version: v.clone(),
                    kind_ref,
                });
            }
        }
    }
    out
}

/// The served resource versions grouped by the key of their group version.
fn by_group_version(served: &[Served]) -> BTreeMap<String, Vec<&Served>> {
    let mut groups: BTreeMap<String, Vec<&Served>> = BTreeMap::new();
    for s in served {
        groups.entry(key(s)).or_default().push(s);
    }
    groups
}

/// The documents of the group versions of the built-in resources, encoded once for the process.
fn built_in_documents() -> &'static BTreeMap<String, Encoded> {
    static DOCUMENTS: OnceLock<BTreeMap<String, Encoded>> = OnceLock::new();
    DOCUMENTS.get_or_init(|| {
        let resources: Vec<Arc<ResourceInfo>> =
            resource::built_ins().into_iter().map(Arc::new).collect();
        let none = Definitions::new();
        let served = served(&resources, &mut Definitions::new());
        by_group_version(&served)
            .into_iter()
            .map(|(k, members)| (k, Encoded::new(&v3_document(&none, &members))))
            .collect()
    })
}

/// A definition by name: a custom resource's, else a built-in one.
fn definition<'a>(custom_defs: &'a Definitions, name: &str) -> Option<&'a Value> {
    custom_defs
        .get(name)
        .or_else(|| builtin::definitions().get(name))
}

/// The custom resources among the served ones, in a stable order.
fn custom_resources(resources: &[Arc<ResourceInfo>]) -> Vec<Arc<ResourceInfo>> {
    let mut out: Vec<Arc<ResourceInfo>> = resources
        .iter()
        .filter(|r| r.is_custom())
        .cloned()
        .collect();
    out.sort_by_key(|r| r.group_resource());
    out
}

/// The index key of a served group version: `api/v1` or `apis/<group>/<version>`.
fn key(s: &Served) -> String {
    if s.info.group.is_empty() {
        format!("api/{}", s.version)
    } else {
        format!("apis/{}/{}", s.info.group, s.version)
    }
}

/// The document's `info`.
fn info() -> Value {
    json!({"title": "Kubernetes", "version": format!("v1.{KUBERNETES_MINOR}.0")})
}

/// The Swagger 2.0 document: every path and every definition.
fn v2_document(custom_defs: &Definitions, served: &[Served]) -> Value {
    let mut defs = builtin::definitions().clone();
    for (name, def) in custom_defs {
        let mut def = def.clone();
        custom::swagger2(&mut def);
        defs.insert(name.clone(), def);
    }
    let mut paths = Map::new();
    for s in served {
        paths.extend(resource_paths(
            &s.info,
            &s.version,
            &s.kind_ref,
            Flavor::Swagger2,
        ));
    }
    json!({
        "swagger": "2.0",
        "info": info(),
        "paths": paths,
        "definitions": defs,
        "securityDefinitions": {"BearerToken": {"description": "Bearer Token authentication", "in": "header",
            "name": "authorization", "type": "apiKey"}},
        "security": [{"BearerToken": []}],
    })
}

/// The OpenAPI 3.0 document of one group version: its paths and the schemas they reach.
fn v3_document(custom_defs: &Definitions, members: &[&Served]) -> Value {
    let mut paths = Map::new();
    let mut roots = vec![
        STATUS.to_string(),
        DELETE_OPTIONS.to_string(),
        PATCH.to_string(),
    ];
    for s in members {
        for (path, item) in resource_paths(&s.info, &s.version, &s.kind_ref, Flavor::OpenApi3) {
            referenced(&item, &mut roots);
            paths.insert(path, to_v3(&item));
        }
        roots.push(s.kind_ref.clone());
        if s.info.scale_subresource {
            roots.push(SCALE.to_string());
        }
    }
    let schemas: Map<String, Value> = closure(custom_defs, roots)
        .into_iter()
        .filter_map(|name| Some((name.clone(), to_v3(definition(custom_defs, &name)?))))
        .collect();
    json!({
        "openapi": "3.0.0",
        "info": info(),
        "paths": paths,
        "components": {
            "schemas": schemas,
            "securitySchemes": {"BearerToken": {"type": "apiKey", "description": "Bearer Token authentication",
                "name": "authorization", "in": "header"}},
        },
        "security": [{"BearerToken": []}],
    })
}

/// The names of the definitions reachable from `roots` through references.
fn closure(custom_defs: &Definitions, mut roots: Vec<String>) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    while let Some(name) = roots.pop() {
        if !seen.insert(name.clone()) {
            continue;
        }
        if let Some(d) = definition(custom_defs, &name) {
            referenced(d, &mut roots);
        }
    }
    seen
}

/// A Swagger 2.0 schema in OpenAPI 3.0 form: references point into `components/schemas`, and a reference
/// with a description or default beside it moves into a one-element `allOf`, as the API server writes it.
fn to_v3(schema: &Value) -> Value {
    match schema {
        Value::Object(m) => {
            let mut out: Map<String, Value> = m
                .iter()
                .filter(|(k, _)| k.as_str() != "$ref")
                .map(|(k, v)| (k.clone(), to_v3(v)))
                .collect();
            if let Some(Value::String(r)) = m.get("$ref") {
                let r = match r.strip_prefix(REF_PREFIX) {
                    Some(name) => format!("{V3_REF_PREFIX}{name}"),
                    None => r.clone(),
                };
                if out.is_empty() {
                    out.insert("$ref".into(), json!(r));
                } else {
                    out.insert("allOf".into(), json!([{"$ref": r}]));
                }
            }
            Value::Object(out)
        }
        Value::Array(a) => Value::Array(a.iter().map(to_v3).collect()),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reference_with_a_description_moves_into_all_of() {
        let v2 = json!({"properties": {"metadata": {"$ref": "#/definitions/X", "description": "d"},
            "items": {"type": "array", "items": {"$ref": "#/definitions/Y"}}}});
        assert_eq!(
            to_v3(&v2),
            json!({"properties": {"metadata": {"allOf": [{"$ref": "#/components/schemas/X"}], "description": "d"},
                "items": {"type": "array", "items": {"$ref": "#/components/schemas/Y"}}}})
        );
    }

    #[test]
    fn the_built_in_documents_describe_every_served_group_version() {
        let resources: Vec<Arc<ResourceInfo>> = crate::resource::built_ins()
            .into_iter()
            .map(Arc::new)
            .collect();
        let built = Built::new(&resources);
        let reversed: Vec<_> = resources.iter().rev().cloned().collect();
        let again = Built::new(&reversed);
        assert_eq!(
            built.index.bytes, again.index.bytes,
            "the hashes are stable"
        );
        let index: Value = serde_json::from_slice(&built.index.bytes).unwrap();
        for key in [
            "api/v1",
            "apis/apps/v1",
            "apis/rbac.authorization.k8s.io/v1",
        ] {
            let url = index["paths"][key]["serverRelativeURL"].as_str().unwrap();
            assert!(url.ends_with(&built.v3(key).unwrap().hash), "{url}");
        }
        let apps: Value = serde_json::from_slice(&built.v3("apis/apps/v1").unwrap().bytes).unwrap();
        let schemas = &apps["components"]["schemas"];
        assert_eq!(
            schemas["io.k8s.api.apps.v1.DeploymentSpec"]["properties"]["replicas"]["type"],
            "integer"
        );
        assert!(schemas["io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"].is_object());
        assert!(schemas.get("io.k8s.api.core.v1.Namespace").is_none());
        let patch =
            &apps["paths"]["/apis/apps/v1/namespaces/{namespace}/deployments/{name}"]["patch"];
        assert!(
            patch["parameters"]
                .as_array()
                .unwrap()
                .iter()
                .any(|p| p["name"] == "fieldValidation")
        );
    }
}
