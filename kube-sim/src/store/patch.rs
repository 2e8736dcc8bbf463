//! Patches: server-side apply (which creates missing objects), strategic merge, JSON merge and JSON patch,
//! each ending in the update pipeline.

use serde_json::{Value, json};

use super::update::{Endpoint, Managed};
use super::version::Version;
use super::{Error, Patch, PatchOptions, Result, Store, scope_ns};
use crate::fieldmanager;
use crate::meta::{self, metadata_mut};
use crate::patch;
use crate::resource::{GroupResource, ResourceInfo};
use crate::schema::Node;

/// What a patch stored (or, on a dry run, would store).
#[derive(Debug)]
pub struct Patched {
    /// The object after the patch.
    pub object: Value,
    /// Warnings about unknown fields that were pruned.
    pub warnings: Vec<String>,
    /// Whether an apply created the object.
    pub created: bool,
}

impl Store {
    /// Patches an object (or its status with `subresource: Some("status")`). Apply creates missing objects.
    pub fn patch(
        &self,
        gr: &GroupResource,
        namespace: Option<&str>,
        name: &str,
        subresource: Option<&str>,
        patch: &Patch,
        opts: &PatchOptions,
    ) -> Result<Patched> {
        let endpoint = patch_endpoint(subresource, patch, opts)?;
        let manager = opts.field_manager.as_deref().unwrap_or("kube-sim");
        let mut st = self.lock();
        let info = st.info(gr)?;
        if matches!(patch, Patch::Strategic(_)) && info.is_custom() {
            return Err(Error::UnsupportedMediaType(
                "the body of the request was in an unknown format - accepted media types include: \
                 application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml"
                    .to_string(),
            ));
        }
        let key = (scope_ns(&info, namespace), name.to_string());
        let existing = st
            .objects
            .get(gr)
            .and_then(|m| m.get(&key))
            .map(Version::value);
        let Some(old) = existing else {
            let not_found = || Error::NotFound {
                resource: gr.clone(),
                name: name.to_string(),
            };
            let Patch::Apply(body) = patch else {
                return Err(not_found());
            };
            if endpoint == Endpoint::Status {
                return Err(not_found());
            }
            let api_version = info.api_version(info.preferred_version());
            let req = apply_req(&info, manager, &api_version, opts.force, endpoint);
            let merged = apply_to_missing(&info, &key, body, &req)?;
            let (obj, warnings) = self.prepare_create(
                &mut st,
                &info,
                namespace,
                merged,
                Managed::Precomputed,
                opts.field_validation,
            )?;
            let object = if opts.dry_run {
                obj
            } else {
                self.insert_new(st, &info, obj)
            };
            return Ok(Patched {
                object,
                warnings,
                created: true,
            });
        };
        let (new, managed) = patched(&info, &old, name, patch, manager, opts, endpoint)?;
        let (new, warnings) =
            self.prepare_update(&info, &old, new, endpoint, managed, opts.field_validation)?;
        let object = if opts.dry_run {
            new
        } else {
            self.commit_update(st, &info, key, old, new)
        };
        Ok(Patched {
            object,
            warnings,
            created: false,
        })
    }
}

/// The endpoint a patch goes to, once its options are valid for its type.
fn patch_endpoint(
    subresource: Option<&str>,
    patch: &Patch,
    opts: &PatchOptions,
) -> Result<Endpoint> {
    let endpoint = match subresource {
        None => Endpoint::Main,
        Some("status") => Endpoint::Status,
        Some(_) => return Err(Error::MethodNotAllowed),
    };
    let is_apply = matches!(patch, Patch::Apply(_));
    if is_apply && opts.field_manager.as_deref().is_none_or(str::is_empty) {
        return Err(patch_options_invalid(
            "fieldManager: Required value: is required for apply patch",
        ));
    }
    if !is_apply && opts.force {
        return Err(patch_options_invalid(
            "force: Forbidden: may not be specified for non-apply patch",
        ));
    }
    Ok(endpoint)
}

/// The object an apply creates where none is stored: the configuration applied to its bare identity.
fn apply_to_missing(
    info: &ResourceInfo,
    key: &(String, String),
    body: &Value,
    req: &fieldmanager::Apply<'_>,
) -> Result<Value> {
    check_apply_body(info, body, &key.1)?;
    let mut seed =
        json!({"apiVersion": req.api_version, "kind": info.kind, "metadata": {"name": key.1}});
    if info.namespaced {
        metadata_mut(&mut seed).insert("namespace".into(), json!(key.0));
    }
    fieldmanager::apply(&seed, body, req).map_err(apply_error)
}

/// The stored object with the patch applied, and how its field ownership is to be recorded.
fn patched<'a>(
    info: &ResourceInfo,
    old: &Value,
    name: &str,
    patch: &Patch,
    manager: &'a str,
    opts: &PatchOptions,
    endpoint: Endpoint,
) -> Result<(Value, Managed<'a>)> {
    let mut new = old.clone();
    let managed = match patch {
        Patch::Apply(body) => {
            check_apply_body(info, body, name)?;
            if let Some(rv) =
                meta::str_at(body, "/metadata/resourceVersion").filter(|s| !s.is_empty())
                && Some(rv) != meta::str_at(old, "/metadata/resourceVersion")
            {
                return Err(Error::stale(&info.group_resource(), name));
            }
            let api_version = info.api_version(info.preferred_version());
            new = fieldmanager::apply(
                old,
                body,
                &apply_req(info, manager, &api_version, opts.force, endpoint),
            )
            .map_err(apply_error)?;
            Managed::Precomputed
        }
        Patch::Merge(body) => {
            patch::merge_patch(&mut new, body);
            Managed::Update(manager)
        }
        Patch::Strategic(body) => {
            patch::strategic_merge_patch(&mut new, body)
                .map_err(|e| Error::BadRequest(e.to_string()))?;
            Managed::Update(manager)
        }
        Patch::Json(body) => {
            patch::json_patch(&mut new, body).map_err(|e| match e {
                patch::Error::TestFailed { .. } => Error::Invalid {
                    group: info.group.clone(),
                    kind: info.kind.clone(),
                    name: name.to_string(),
                    message: e.to_string(),
                    causes: Vec::new(),
                },
                patch::Error::Invalid(m) => Error::BadRequest(m),
            })?;
            Managed::Update(manager)
        }
    };
    if meta::name_of(&new) != name {
        return Err(Error::BadRequest(format!(
            "the name of the object ({}) does not match the name on the URL ({name})",
            meta::name_of(&new)
        )));
    }
    if !matches!(patch, Patch::Apply(_))
        && let Some(rv) = meta::str_at(&new, "/metadata/resourceVersion")
        && Some(rv) != meta::str_at(old, "/metadata/resourceVersion")
    {
        return Err(Error::stale(&info.group_resource(), name));
    }
    Ok((new, managed))
}

fn patch_options_invalid(message: &str) -> Error {
    Error::Invalid {
        group: "meta.k8s.io".to_string(),
        kind: "PatchOptions".to_string(),
        name: String::new(),
        message: message.to_string(),
        causes: Vec::new(),
    }
}

fn apply_req<'a>(
    info: &'a ResourceInfo,
    manager: &'a str,
    api_version: &'a str,
    force: bool,
    endpoint: Endpoint,
) -> fieldmanager::Apply<'a> {
    fieldmanager::Apply {
        manager,
        api_version,
        force,
        subresource: endpoint.subresource(),
        node: Node::root(info.schema(info.preferred_version()), !info.is_custom()),
    }
}

fn apply_error(e: fieldmanager::Error) -> Error {
    match e {
        fieldmanager::Error::Conflict { message, causes } => {
            Error::ApplyConflict { message, causes }
        }
    }
}

fn check_apply_body(info: &ResourceInfo, body: &Value, name: &str) -> Result<()> {
    if !body.is_object() {
        return Err(Error::BadRequest(
            "the apply configuration must be an object".to_string(),
        ));
    }
    let api_version = meta::str_at(body, "/apiVersion").unwrap_or("");
    let kind = meta::str_at(body, "/kind").unwrap_or("");
    if api_version.is_empty() || kind.is_empty() {
        return Err(Error::BadRequest(
            "invalid object type: /, Kind=".to_string() + if kind.is_empty() { "" } else { kind },
        ));
    }
    if kind != info.kind
        || !info
            .versions
            .iter()
            .any(|v| info.api_version(v) == api_version)
    {
        return Err(Error::BadRequest(format!(
            "the API version in the data ({api_version}) does not match the expected API version ({})",
            info.api_version(info.preferred_version())
        )));
    }
    let body_name = meta::name_of(body);
    if !body_name.is_empty() && body_name != name {
        return Err(Error::BadRequest(format!(
            "the name of the object ({body_name}) does not match the name on the URL ({name})"
        )));
    }
    Ok(())
}
