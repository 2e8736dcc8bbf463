//! Assembling the served documents from the definitions and the paths of every served resource.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde_json::{Map, Value, json};

use super::builtin::{self, DELETE_OPTIONS, PATCH, SCALE, STATUS};
use super::paths::{Flavor, resource_paths};
use super::{Definitions, Encoded, Error, REF_PREFIX, custom, referenced};
use crate::discovery::KUBERNETES_MINOR;
use crate::resource::ResourceInfo;

/// How a reference to a schema starts in OpenAPI 3.0.
const V3_REF_PREFIX: &str = "#/components/schemas/";

/// The documents served for one set of resources, encoded once.
#[derive(Debug)]
pub struct Built {
    /// The custom resources the documents describe, to notice when they change.
    custom: Vec<Arc<ResourceInfo>>,
    /// The Swagger 2.0 document of `/openapi/v2`.
    pub v2: Encoded,
    /// The index of `/openapi/v3`.
    pub index: Encoded,
    /// The OpenAPI 3.0 documents by key (`api/v1`, `apis/apps/v1`).
    v3: BTreeMap<String, Encoded>,
}

/// One served resource at one served version, with its kind's definition name.
struct Served<'a> {
    info: &'a ResourceInfo,
    version: String,
    kind_ref: String,
}

impl Built {
    /// Builds every document for the served resources.
    pub(super) fn new(resources: &[Arc<ResourceInfo>]) -> Result<Built, Error> {
        let mut defs = builtin::definitions().clone();
        let mut ordered: Vec<&Arc<ResourceInfo>> = resources.iter().collect();
        ordered.sort_by_key(|r| r.group_resource());
        let mut served = Vec::new();
        for r in ordered {
            for v in &r.versions {
                let kind_ref = if r.is_custom() {
                    defs.extend(custom::definitions(r, v));
                    Some(custom::definition_name(&r.group, v, &r.kind))
                } else {
                    builtin::kind_definition(&r.group, &r.kind)
                };
                if let Some(kind_ref) = kind_ref {
                    served.push(Served {
                        info: r,
                        version: v.clone(),
                        kind_ref,
                    });
                }
            }
        }
        let mut groups: BTreeMap<String, Vec<&Served<'_>>> = BTreeMap::new();
        for s in &served {
            groups.entry(key(s)).or_default().push(s);
        }
        let mut v3 = BTreeMap::new();
        for (k, members) in &groups {
            v3.insert(k.clone(), Encoded::new(&v3_document(&defs, members))?);
        }
        let index: Map<String, Value> = v3
            .iter()
            .map(|(k, doc)| {
                let url = format!("/openapi/v3/{k}?hash={}", doc.hash);
                (k.clone(), json!({"serverRelativeURL": url}))
            })
            .collect();
        Ok(Built {
            custom: custom_resources(resources),
            v2: Encoded::new(&v2_document(defs, &served))?,
            index: Encoded::new(&json!({"paths": index}))?,
            v3,
        })
    }

    /// Whether these documents were built for the custom resources served now.
    pub(super) fn describes(&self, resources: &[Arc<ResourceInfo>]) -> bool {
        let now = custom_resources(resources);
        now.len() == self.custom.len()
            && now.iter().zip(&self.custom).all(|(a, b)| Arc::ptr_eq(a, b))
    }

    /// The OpenAPI 3.0 document of a group version, by its key in the index (`apis/apps/v1`).
    pub fn v3(&self, key: &str) -> Result<&Encoded, Error> {
        self.v3
            .get(key)
            .ok_or_else(|| Error::UnknownGroupVersion(key.to_string()))
    }
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
fn key(s: &Served<'_>) -> String {
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
fn v2_document(mut defs: Definitions, served: &[Served<'_>]) -> Value {
    let mut paths = Map::new();
    for s in served {
        paths.extend(resource_paths(
            s.info,
            &s.version,
            &s.kind_ref,
            Flavor::Swagger2,
        ));
        if let Some(d) = defs.get_mut(&s.kind_ref).filter(|_| s.info.is_custom()) {
            custom::swagger2(d);
        }
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
fn v3_document(defs: &Definitions, members: &[&Served<'_>]) -> Value {
    let mut paths = Map::new();
    let mut roots = vec![
        STATUS.to_string(),
        DELETE_OPTIONS.to_string(),
        PATCH.to_string(),
    ];
    for s in members {
        for (path, item) in resource_paths(s.info, &s.version, &s.kind_ref, Flavor::OpenApi3) {
            referenced(&item, &mut roots);
            paths.insert(path, to_v3(&item));
        }
        roots.push(s.kind_ref.clone());
        if s.info.scale_subresource {
            roots.push(SCALE.to_string());
        }
    }
    let schemas: Map<String, Value> = closure(defs, roots)
        .into_iter()
        .filter_map(|name| Some((name.clone(), to_v3(defs.get(&name)?))))
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
fn closure(defs: &Definitions, mut roots: Vec<String>) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    while let Some(name) = roots.pop() {
        if !seen.insert(name.clone()) {
            continue;
        }
        if let Some(d) = defs.get(&name) {
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
        let built = Built::new(&resources).expect("the documents build");
        let reversed: Vec<_> = resources.iter().rev().cloned().collect();
        let again = Built::new(&reversed).expect("the documents build");
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
