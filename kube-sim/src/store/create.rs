//! Creation: names, namespaces and system metadata set before the object is stored.

use std::sync::{Arc, MutexGuard};

use serde_json::{Value, json};

use super::history::{EventKind, store_object};
use super::update::{Managed, Written, require_object, set_type, validate};
use super::version::Version;
use super::{
    Error, FieldValidation, Result, State, Store, WriteOptions, next_rv, scope_ns, set_rv,
};
use crate::meta::{self, metadata_mut};
use crate::resource::{GenerationRule, GroupResource, ResourceInfo};

impl Store {
    /// Creates an object. `metadata.generateName` is honoured; the namespace must exist and not be terminating.
    pub fn create(
        &self,
        gr: &GroupResource,
        namespace: Option<&str>,
        obj: Value,
        opts: &WriteOptions,
    ) -> Result<Written> {
        let mut st = self.lock();
        let info = st.info(gr)?;
        let managed = opts.managed();
        let validation = opts.field_validation;
        let (obj, warnings) =
            self.prepare_create(&mut st, &info, namespace, obj, managed, validation)?;
        let object = if opts.dry_run {
            obj
        } else {
            self.insert_new(st, &info, obj)
        };
        Ok(Written { object, warnings })
    }

    /// The object a create would store (without its `resourceVersion`), and warnings about pruned fields:
    /// names and namespace settled, system metadata reset, defaults, pruning, validation, and field ownership.
    pub(super) fn prepare_create(
        &self,
        st: &mut State,
        info: &ResourceInfo,
        namespace: Option<&str>,
        mut obj: Value,
        managed: Managed<'_>,
        validation: FieldValidation,
    ) -> Result<(Value, Vec<String>)> {
        let gr = info.group_resource();
        require_object(&obj)?;
        let ns = scope_ns(info, namespace);
        settle_create_metadata(info, &ns, &mut obj)?;
        let name = meta::name_of(&obj).to_string();
        if info.namespaced {
            check_namespace_open(st, &gr, &ns, &name)?;
        }
        if st
            .objects
            .get(&gr)
            .is_some_and(|m| m.contains_key(&(ns.clone(), name.clone())))
        {
            return Err(Error::AlreadyExists {
                resource: gr.clone(),
                name,
            });
        }
        set_type_and_initial_status(info, &mut obj);
        let warnings = self.normalize(info, &mut obj, validation)?;
        if gr == GroupResource::new("", "services") {
            allocate_cluster_ip(st, &mut obj);
        }
        if gr == GroupResource::pods() {
            super::admission::admit_pod(st, &ns, &mut obj);
        }
        validate(info, &obj, None)?;
        stamp_system_metadata(info, &mut obj);
        if let Managed::Update(manager) = managed {
            super::track_update(info, None, &mut obj, manager, None);
        }
        Ok((obj, warnings))
    }

    pub(super) fn insert_new(
        &self,
        mut st: MutexGuard<'_, State>,
        info: &ResourceInfo,
        mut obj: Value,
    ) -> Value {
        let gr = info.group_resource();
        let rv = next_rv(&mut st);
        set_rv(&mut obj, rv);
        let key = (
            meta::namespace_of(&obj).to_string(),
            meta::name_of(&obj).to_string(),
        );
        let obj = Arc::new(obj);
        store_object(
            &mut st,
            &self.shared.config,
            &gr,
            &key,
            EventKind::Added,
            obj.clone(),
            None,
        );
        drop(st);
        self.shared.changed.send_replace(rv);
        (*obj).clone()
    }
}

/// Settles the namespace and the name (from `generateName` when missing) and drops the system metadata a
/// client may not set.
fn settle_create_metadata(info: &ResourceInfo, ns: &str, obj: &mut Value) -> Result<()> {
    let body_ns = meta::namespace_of(obj).to_string();
    let md = metadata_mut(obj);
    if info.namespaced {
        if ns.is_empty() {
            return Err(Error::BadRequest(
                "a namespace is required for a namespaced resource".to_string(),
            ));
        }
        if !body_ns.is_empty() && body_ns != ns {
            return Err(Error::BadRequest(
                "the namespace of the provided object does not match the namespace sent on the request"
                    .to_string(),
            ));
        }
        md.insert("namespace".into(), json!(ns));
    } else {
        md.remove("namespace");
    }
    let has_name = md
        .get("name")
        .and_then(Value::as_str)
        .is_some_and(|n| !n.is_empty());
    if !has_name {
        match md.get("generateName").and_then(Value::as_str) {
            Some(prefix) if !prefix.is_empty() => {
                let name = format!("{prefix}{}", meta::random_suffix(5));
                md.insert("name".into(), json!(name));
            }
            _ => {
                return Err(Error::invalid(
                    info,
                    "",
                    vec![crate::validation::FieldError::required(
                        "metadata.name",
                        "name or generateName is required",
                    )],
                ));
            }
        }
    }
    for k in [
        "resourceVersion",
        "uid",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "generation",
        "selfLink",
    ] {
        md.remove(k);
    }
    Ok(())
}

/// Refuses a create in a namespace that does not exist or is being terminated.
fn check_namespace_open(st: &State, gr: &GroupResource, ns: &str, name: &str) -> Result<()> {
    let ns_obj = st
        .objects
        .get(&GroupResource::namespaces())
        .and_then(|m| m.get(&(String::new(), ns.to_string())))
        .map(Version::value);
    match ns_obj {
        None => Err(Error::NotFound {
            resource: GroupResource::namespaces(),
            name: ns.to_string(),
        }),
        Some(n) if n.pointer("/metadata/deletionTimestamp").is_some() => Err(Error::Forbidden {
            resource: gr.clone(),
            name: name.to_string(),
            reason: format!(
                "unable to create new content in namespace {ns} because it is being terminated"
            ),
        }),
        Some(_) => Ok(()),
    }
}

/// Sets `apiVersion` and `kind`, drops a `status` the status subresource owns, and gives pods their
/// initial status.
fn set_type_and_initial_status(info: &ResourceInfo, obj: &mut Value) {
    set_type(info, obj);
    if info.status_subresource
        && let Value::Object(m) = obj
    {
        m.remove("status");
    }
    if info.group_resource() == GroupResource::pods() {
        let status = crate::defaults::initial_pod_status(obj);
        if let Value::Object(m) = obj {
            m.insert("status".into(), status);
        }
    }
}

/// Sets `uid`, `creationTimestamp` and the first `generation`.
fn stamp_system_metadata(info: &ResourceInfo, obj: &mut Value) {
    let md = metadata_mut(obj);
    md.insert("uid".into(), json!(meta::new_uid()));
    md.insert("creationTimestamp".into(), json!(meta::now_rfc3339()));
    if info.generation != GenerationRule::None {
        md.insert("generation".into(), json!(1));
    }
}

fn allocate_cluster_ip(st: &mut State, obj: &mut Value) {
    let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    if spec
        .get("clusterIP")
        .and_then(Value::as_str)
        .is_some_and(|s| !s.is_empty())
    {
        let ip = spec.get("clusterIP").cloned().unwrap_or(Value::Null);
        spec.entry("clusterIPs").or_insert_with(|| json!([ip]));
    } else if spec.get("type").and_then(Value::as_str) != Some("ExternalName") {
        let n = st.next_service_ip;
        st.next_service_ip += 1;
        let ip = format!("10.43.{}.{}", n / 254, n % 254 + 1);
        spec.insert("clusterIP".into(), json!(ip));
        spec.insert("clusterIPs".into(), json!([ip]));
    }
    spec.entry("ipFamilies").or_insert_with(|| json!(["IPv4"]));
    spec.entry("ipFamilyPolicy")
        .or_insert_with(|| json!("SingleStack"));
}
