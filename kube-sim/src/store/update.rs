//! Updates of the main resource and of the status subresource: system metadata kept, defaults, pruning,
//! validation, generation and field ownership before the object is stored.

use std::sync::{Arc, MutexGuard};

use serde_json::{Value, json};

use super::history::{EventKind, push_event, store_object};
use super::{
    Error, FieldValidation, Key, Result, State, Store, WriteOptions, next_rv, scope_ns, set_rv,
};
use crate::fieldmanager;
use crate::meta::{self, metadata_mut};
use crate::resource::{GenerationRule, GroupResource, ResourceInfo};
use crate::schema;

/// Which endpoint a write goes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Endpoint {
    /// The object itself.
    Main,
    /// Its `status` subresource.
    Status,
}

impl Endpoint {
    pub(super) fn subresource(self) -> Option<&'static str> {
        match self {
            Endpoint::Main => None,
            Endpoint::Status => Some("status"),
        }
    }
}

pub(super) enum Managed<'a> {
    /// Record an `Update` by this manager.
    Update(&'a str),
    /// `managedFields` were computed by apply already.
    Precomputed,
}

/// What a create or an update stored (or, on a dry run, would store).
#[derive(Debug)]
pub struct Written {
    /// The object as written.
    pub object: Value,
    /// Warnings about unknown fields that were pruned.
    pub warnings: Vec<String>,
}

impl Store {
    /// Replaces an object through one of its endpoints: through [`Endpoint::Main`], `status` is kept when a
    /// status subresource exists; through [`Endpoint::Status`], everything but `status` is kept.
    pub fn update(
        &self,
        endpoint: Endpoint,
        gr: &GroupResource,
        namespace: Option<&str>,
        obj: Value,
        opts: &WriteOptions,
    ) -> Result<Written> {
        let manager = opts.field_manager.as_deref().unwrap_or("kube-sim");
        let name = meta::name_of(&obj).to_string();
        if name.is_empty() {
            return Err(Error::BadRequest("name is required for update".to_string()));
        }
        let st = self.lock();
        let info = st.info(gr)?;
        let key = (scope_ns(&info, namespace), name.clone());
        let old = st.stored(gr, &key)?;
        if let Some(rv) = meta::str_at(&obj, "/metadata/resourceVersion").filter(|s| !s.is_empty())
            && Some(rv) != meta::str_at(&old, "/metadata/resourceVersion")
        {
            return Err(Error::stale(gr, &name));
        }
        let (new, warnings) = self.prepare_update(
            &info,
            &old,
            obj,
            endpoint,
            Managed::Update(manager),
            opts.field_validation,
        )?;
        let object = if opts.dry_run {
            new
        } else {
            self.commit_update(st, &info, key, old, new)
        };
        Ok(Written { object, warnings })
    }

    /// Defaults built-in types and prunes custom resources; returns warnings about pruned fields.
    pub(super) fn normalize(
        &self,
        info: &ResourceInfo,
        obj: &mut Value,
        validation: FieldValidation,
    ) -> Result<Vec<String>> {
        let removed = if info.is_custom() {
            let Some(schema) = info.schema(info.preferred_version()) else {
                return Ok(Vec::new());
            };
            let mut removed = schema::prune_custom_metadata(obj);
            removed.extend(schema::prune_custom_resource(obj, schema));
            removed
        } else {
            if let Some(message) =
                crate::validation::decode::type_error(&info.group, &info.plural, &info.kind, obj)
            {
                return Err(Error::BadRequest(message));
            }
            let removed = schema::prune_built_in(&info.group, &info.plural, obj);
            if info.group_resource() == GroupResource::new("", "secrets") {
                crate::validation::builtin::merge_string_data(obj);
            }
            crate::defaults::apply(&info.group, &info.plural, obj);
            removed
        };
        if removed.is_empty() {
            return Ok(Vec::new());
        }
        match validation {
            FieldValidation::Strict => Err(Error::BadRequest(format!(
                "strict decoding error: {}",
                removed
                    .iter()
                    .map(|p| format!("unknown field \"{p}\""))
                    .collect::<Vec<_>>()
                    .join(", ")
            ))),
            FieldValidation::Warn => Ok(removed
                .iter()
                .map(|p| format!("unknown field \"{p}\""))
                .collect()),
            FieldValidation::Ignore => Ok(Vec::new()),
        }
    }

    /// The object an update would store (without its new `resourceVersion`), and warnings about pruned
    /// fields: the endpoint's part of the body over the stored object, system metadata kept, defaults,
    /// pruning, validation, generation and field ownership. A write that changes nothing returns the stored
    /// object.
    pub(super) fn prepare_update(
        &self,
        info: &ResourceInfo,
        old: &Value,
        obj: Value,
        endpoint: Endpoint,
        managed: Managed<'_>,
        validation: FieldValidation,
    ) -> Result<(Value, Vec<String>)> {
        require_object(&obj)?;
        let name = meta::name_of(old);
        if meta::name_of(&obj) != name {
            return Err(Error::BadRequest(format!(
                "the name of the object ({}) does not match the name on the URL ({name})",
                meta::name_of(&obj)
            )));
        }
        let mut new = match endpoint {
            Endpoint::Main => main_update(info, old, obj),
            Endpoint::Status => status_update(info, old, &obj)?,
        };
        keep_system_metadata(old, &mut new, &managed, endpoint);
        set_type(info, &mut new);
        let warnings = self.normalize(info, &mut new, validation)?;
        validate(info, &new, Some(old))?;
        if endpoint == Endpoint::Main && bumps_generation(info, old, &new) {
            let g = old
                .pointer("/metadata/generation")
                .and_then(Value::as_i64)
                .unwrap_or(0)
                + 1;
            metadata_mut(&mut new).insert("generation".into(), json!(g));
        }
        if let Managed::Update(manager) = managed {
            // Ownership is computed from the stored entries, not from whatever the client sent back.
            match old.pointer("/metadata/managedFields") {
                Some(mf) => metadata_mut(&mut new).insert("managedFields".into(), mf.clone()),
                None => metadata_mut(&mut new).remove("managedFields"),
            };
            // A write that changes nothing keeps the stored object, field ownership included.
            if same_ignoring_times(old, &new) {
                return Ok((old.clone(), warnings));
            }
            super::track_update(info, Some(old), &mut new, manager, endpoint.subresource());
        }
        Ok((new, warnings))
    }

    pub(super) fn commit_update(
        &self,
        mut st: MutexGuard<'_, State>,
        info: &ResourceInfo,
        key: Key,
        old: Arc<Value>,
        mut new: Value,
    ) -> Value {
        if same_ignoring_times(&old, &new) {
            return (*old).clone();
        }
        let gr = info.group_resource();
        let finished = new.pointer("/metadata/deletionTimestamp").is_some()
            && meta::is_empty_value(new.pointer("/metadata/finalizers"))
            && new
                .pointer("/metadata/deletionGracePeriodSeconds")
                .and_then(Value::as_i64)
                .unwrap_or(0)
                == 0
            && gr != GroupResource::namespaces();
        let rv = next_rv(&mut st);
        set_rv(&mut new, rv);
        let new = Arc::new(new);
        if finished {
            if let Some(m) = st.objects.get_mut(&gr) {
                m.remove(&key);
            }
            push_event(
                &mut st,
                &self.shared.config,
                &gr,
                &key.0,
                EventKind::Deleted,
                new.clone(),
                Some(old),
            );
        } else {
            store_object(
                &mut st,
                &self.shared.config,
                &gr,
                &key,
                EventKind::Modified,
                new.clone(),
                Some(old),
            );
        }
        drop(st);
        self.shared.changed.send_replace(rv);
        (*new).clone()
    }
}

/// Refuses a body that is not a JSON object.
pub(super) fn require_object(obj: &Value) -> Result<()> {
    if obj.is_object() {
        Ok(())
    } else {
        Err(Error::BadRequest(
            "the request body must be a JSON object".to_string(),
        ))
    }
}

/// Sets `apiVersion` (the preferred version) and `kind`.
pub(super) fn set_type(info: &ResourceInfo, obj: &mut Value) {
    if let Value::Object(m) = obj {
        m.insert(
            "apiVersion".into(),
            json!(info.api_version(info.preferred_version())),
        );
        m.insert("kind".into(), json!(info.kind));
    }
}

/// An update through the main endpoint: the body, with the stored `status` when a status subresource owns it.
fn main_update(info: &ResourceInfo, old: &Value, mut new: Value) -> Value {
    if info.status_subresource
        && let Value::Object(m) = &mut new
    {
        match old.get("status") {
            Some(s) => m.insert("status".into(), s.clone()),
            None => m.remove("status"),
        };
    }
    new
}

/// An update through the status subresource: the stored object with the body's `status` (and, for built-in
/// types, its annotations).
fn status_update(info: &ResourceInfo, old: &Value, obj: &Value) -> Result<Value> {
    if !info.status_subresource {
        return Err(Error::ResourceNotFound);
    }
    let mut new = old.clone();
    if let Value::Object(m) = &mut new {
        match obj.get("status") {
            Some(s) => m.insert("status".into(), s.clone()),
            None => m.remove("status"),
        };
    }
    let md_new = obj.get("metadata");
    let md = metadata_mut(&mut new);
    if let Some(mf) = md_new.and_then(|m| m.get("managedFields")) {
        md.insert("managedFields".into(), mf.clone());
    }
    if !info.is_custom() {
        match md_new.and_then(|m| m.get("annotations")) {
            Some(a) => md.insert("annotations".into(), a.clone()),
            None => md.remove("annotations"),
        };
    }
    Ok(new)
}

/// Keeps the system metadata of the stored object whatever the body says, and its `managedFields` when an
/// update through the main endpoint sends none.
fn keep_system_metadata(old: &Value, new: &mut Value, managed: &Managed<'_>, endpoint: Endpoint) {
    let old_md = old
        .get("metadata")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let md = metadata_mut(new);
    for k in [
        "uid",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "generation",
        "namespace",
        "resourceVersion",
    ] {
        match old_md.get(k) {
            Some(v) => md.insert(k.to_string(), v.clone()),
            None => md.remove(k),
        };
    }
    md.remove("selfLink");
    if let Managed::Update(_) = *managed
        && endpoint == Endpoint::Main
        && !md.contains_key("managedFields")
        && let Some(mf) = old_md.get("managedFields")
    {
        md.insert("managedFields".into(), mf.clone());
    }
}

fn same_ignoring_times(a: &Value, b: &Value) -> bool {
    let mut a = a.clone();
    let mut b = b.clone();
    fieldmanager::strip_times(&mut a);
    fieldmanager::strip_times(&mut b);
    metadata_mut(&mut a).remove("resourceVersion");
    metadata_mut(&mut b).remove("resourceVersion");
    a == b
}

fn bumps_generation(info: &ResourceInfo, old: &Value, new: &Value) -> bool {
    match info.generation {
        GenerationRule::None => false,
        GenerationRule::Spec => old.get("spec") != new.get("spec"),
        GenerationRule::SpecOrAnnotations => {
            old.get("spec") != new.get("spec")
                || old.pointer("/metadata/annotations") != new.pointer("/metadata/annotations")
        }
        GenerationRule::NonMetadata => {
            let strip = |v: &Value| {
                let mut m = v.as_object().cloned().unwrap_or_default();
                m.remove("metadata");
                if info.status_subresource {
                    m.remove("status");
                }
                m
            };
            strip(old) != strip(new)
        }
    }
}

/// Refuses an object that fails validation (`old` is the stored object on updates) with `422 Invalid`.
pub(super) fn validate(info: &ResourceInfo, obj: &Value, old: Option<&Value>) -> Result<()> {
    let errors = crate::validation::validate(info, obj, old);
    if errors.is_empty() {
        Ok(())
    } else {
        Err(Error::invalid(info, meta::name_of(obj), errors))
    }
}
