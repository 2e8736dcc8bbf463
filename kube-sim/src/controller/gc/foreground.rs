//! Foreground deletion (`processDeletingDependentsItem` in `pkg/controller/garbagecollector`): an owner
//! marked for deletion with the `foregroundDeletion` finalizer waits for its dependents. The collector
//! deletes each dependent that no other live owner keeps (in the foreground too when it has dependents of
//! its own), drops the reference from those another owner keeps, and removes the finalizer once no
//! dependent with `blockOwnerDeletion: true` remains, which lets the owner go.

use serde_json::Value;

use super::{ObjKey, owner_exists, set_owner_references};
use crate::controller::{Error, MANAGER};
use crate::meta;
use crate::store::{self, DeleteOptions, Endpoint, FOREGROUND_FINALIZER, Store, WriteOptions};

/// Whether an object waits for its dependents: marked for deletion with the foreground finalizer.
pub(super) fn is_waiting(obj: &Value) -> bool {
    obj.pointer("/metadata/deletionTimestamp").is_some()
        && obj
            .pointer("/metadata/finalizers")
            .and_then(Value::as_array)
            .is_some_and(|f| f.iter().any(|x| x == FOREGROUND_FINALIZER))
}

/// One step of an owner's foreground deletion over the dependents the index knows; `has_dependents`
/// tells whether an object (by `uid`) owns others. Returns whether the owner still waits.
pub(super) fn process(
    store: &Store,
    key: &ObjKey,
    dependents: Vec<ObjKey>,
    has_dependents: impl Fn(&str) -> bool,
) -> Result<bool, Error> {
    let ns = (!key.namespace.is_empty()).then_some(key.namespace.as_str());
    let owner = match store.get(&key.resource, ns, &key.name) {
        Ok(o) => o,
        Err(store::Error::NotFound { .. } | store::Error::ResourceNotFound) => return Ok(false),
        Err(e) => return Err(e.into()),
    };
    if !is_waiting(&owner) {
        return Ok(false);
    }
    let uid = meta::str_at(&owner, "/metadata/uid").unwrap_or("");
    let mut blocked = false;
    for dep_key in dependents {
        blocked |= step_dependent(store, &dep_key, uid, &has_dependents)?;
    }
    if blocked {
        return Ok(true);
    }
    let mut done = owner.clone();
    if let Some(Value::Array(f)) = meta::metadata_mut(&mut done).get_mut("finalizers") {
        f.retain(|x| x != FOREGROUND_FINALIZER);
    }
    tracing::debug!(resource = %key.resource, name = %key.name, "dependents gone; foreground deletion ends");
    store.update(
        Endpoint::Main,
        &key.resource,
        ns,
        done,
        &WriteOptions::manager(MANAGER),
    )?;
    Ok(false)
}

/// Deletes a dependent of the owner `uid` (or drops its reference when another owner keeps it); returns
/// whether it still blocks the owner.
fn step_dependent(
    store: &Store,
    key: &ObjKey,
    uid: &str,
    has_dependents: &impl Fn(&str) -> bool,
) -> Result<bool, Error> {
    let ns = (!key.namespace.is_empty()).then_some(key.namespace.as_str());
    let dep = match store.get(&key.resource, ns, &key.name) {
        Ok(d) => d,
        Err(store::Error::NotFound { .. } | store::Error::ResourceNotFound) => return Ok(false),
        Err(e) => return Err(e.into()),
    };
    let refs = dep
        .pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let Some(ours) = refs.iter().find(|r| r["uid"] == uid) else {
        return Ok(false);
    };
    let blocks = ours["blockOwnerDeletion"] == true;
    if dep.pointer("/metadata/deletionTimestamp").is_some() {
        return Ok(blocks);
    }
    let kept_by_another = refs
        .iter()
        .filter(|r| r["uid"] != uid)
        .any(|r| owner_exists(store, &key.namespace, r));
    if kept_by_another {
        let rest: Vec<Value> = refs.into_iter().filter(|r| r["uid"] != uid).collect();
        set_owner_references(store, key, &dep, rest)?;
        return Ok(false);
    }
    let dep_uid = meta::str_at(&dep, "/metadata/uid").unwrap_or("");
    let policy = if has_dependents(dep_uid) {
        "Foreground"
    } else {
        "Background"
    };
    let opts = DeleteOptions {
        uid: Some(dep_uid.to_string()),
        propagation_policy: Some(policy.to_string()),
        ..DeleteOptions::default()
    };
    tracing::debug!(resource = %key.resource, name = %key.name, policy, "deleting a dependent of an owner deleted in the foreground");
    match store.delete(&key.resource, ns, &key.name, &opts) {
        Ok(store::Deleted::Gone(_)) | Err(store::Error::NotFound { .. }) => Ok(false),
        Ok(store::Deleted::Pending(_)) => Ok(blocks),
        Err(e) => Err(e.into()),
    }
}
