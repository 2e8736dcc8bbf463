//! The OpenAPI documents kube-apiserver publishes: Swagger 2.0 at `/openapi/v2`, the OpenAPI 3.0 index at
//! `/openapi/v3` and one OpenAPI 3.0 document per served group version (`/openapi/v3/apis/apps/v1`).
//!
//! Built-in schemas come from the `k8s-openapi` types ([`builtin`]); custom resources from their CRD's
//! `openAPIV3Schema` ([`custom`]). [`Documents`] keeps the serialized documents and builds them again only
//! when the set of custom resources changes.

mod builtin;
mod custom;
mod document;
mod paths;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use serde::Serialize;
use serde_json::{Value, json};

use crate::lock::MutexExt;
use crate::resource::ResourceInfo;

pub use document::Built;

/// Schemas by definition name, with references in Swagger 2.0 form (`#/definitions/<name>`).
pub type Definitions = BTreeMap<String, Value>;

/// How a reference to a definition starts in Swagger 2.0.
pub const REF_PREFIX: &str = "#/definitions/";

/// Why a document cannot be served.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No served group version has this key (`api/v1`, `apis/<group>/<version>`).
    #[error("no OpenAPI document is served at {0}")]
    UnknownGroupVersion(String),
}

/// A group, version and kind as `x-kubernetes-group-version-kind` lists it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Gvk {
    /// The API group, empty for the core group.
    pub group: String,
    /// The version.
    pub version: String,
    /// The kind.
    pub kind: String,
}

impl Gvk {
    /// Builds a group, version and kind.
    pub fn new(group: &str, version: &str, kind: &str) -> Gvk {
        Gvk {
            group: group.to_string(),
            version: version.to_string(),
            kind: kind.to_string(),
        }
    }
}

/// The served documents, rebuilt when a custom resource is added, changed or removed.
#[derive(Default)]
pub struct Documents {
    built: Mutex<Option<Arc<Built>>>,
}

impl Documents {
    /// The documents for the resources served now; built on first use and after a custom resource changed.
    pub fn current(&self, resources: &[Arc<ResourceInfo>]) -> Arc<Built> {
        let mut built = self.built.lock_unpoisoned();
        match built.as_ref().filter(|b| b.describes(resources)) {
            Some(b) => b.clone(),
            None => built.insert(Arc::new(Built::new(resources))).clone(),
        }
    }
}

/// The definition of `<Kind>List`: the list's `metadata` and `items` of the kind.
fn list_definition(kind_name: &str, kind: &Gvk, list_kind: &str) -> Value {
    json!({
        "description": format!("{list_kind} is a list of {}", kind.kind),
        "type": "object",
        "properties": {
            "apiVersion": {"description": API_VERSION_DESCRIPTION, "type": "string"},
            "items": {
                "description": format!("List of {}.", kind.kind),
                "type": "array",
                "items": {"$ref": format!("{REF_PREFIX}{kind_name}")},
            },
            "kind": {"description": KIND_DESCRIPTION, "type": "string"},
            "metadata": {
                "$ref": format!("{REF_PREFIX}io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta"),
                "description": "Standard list metadata. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds",
            },
        },
        "required": ["items"],
        "x-kubernetes-group-version-kind": [Gvk::new(&kind.group, &kind.version, list_kind)],
    })
}

/// The description of every kind's `apiVersion`.
const API_VERSION_DESCRIPTION: &str = "APIVersion defines the versioned schema of this representation of an object. Servers should convert recognized schemas to the latest internal value, and may reject unrecognized values. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#resources";

/// The description of every kind's `kind`.
const KIND_DESCRIPTION: &str = "Kind is a string value representing the REST resource this object represents. Servers may infer this from the endpoint the client submits requests to. Cannot be updated. In CamelCase. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds";

/// Collects the definition names a schema refers to (Swagger 2.0 references), in order of appearance.
fn referenced(schema: &Value, out: &mut Vec<String>) {
    match schema {
        Value::Object(m) => {
            for (k, v) in m {
                match (k.as_str(), v) {
                    ("$ref", Value::String(r)) => {
                        if let Some(name) = r.strip_prefix(REF_PREFIX) {
                            out.push(name.to_string());
                        }
                    }
                    _ => referenced(v, out),
                }
            }
        }
        Value::Array(a) => a.iter().for_each(|v| referenced(v, out)),
        _ => {}
    }
}

/// A document as served: the JSON bytes and the hash clients cache it by.
#[derive(Clone, Debug)]
pub struct Encoded {
    /// The JSON text.
    pub bytes: Bytes,
    /// Upper-case hex SHA-256 of the bytes.
    pub hash: String,
}

impl Encoded {
    /// Serializes a document and hashes it.
    fn new(doc: &Value) -> Encoded {
        use sha2::Digest;
        let bytes = doc.to_string().into_bytes();
        let hash = hex::encode_upper(sha2::Sha256::digest(&bytes));
        Encoded {
            bytes: Bytes::from(bytes),
            hash,
        }
    }
}
