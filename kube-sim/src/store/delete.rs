//! Deletion: preconditions, orphaning, pod grace periods, finalizers, and namespace finalization.

use std::sync::{Arc, MutexGuard};

use serde_json::{Value, json};

use super::history::{EventKind, push_event, store_object};
use super::version::Version;
use super::{
    DeleteOptions, Deleted, Error, Key, Result, State, Store, StoreConfig, next_rv, scope_ns,
    set_rv,
};
use crate::meta::{self, metadata_mut};
use crate::resource::GroupResource;

impl Store {
    /// Deletes an object, gracefully for pods on a node and after finalizers for everything.
    pub fn delete(
        &self,
        gr: &GroupResource,
        namespace: Option<&str>,
        name: &str,
        opts: &DeleteOptions,
    ) -> Result<Deleted> {
        let mut st = self.lock();
        let info = st.info(gr)?;
        let key = (scope_ns(&info, namespace), name.to_string());
        let old = st.stored(gr, &key)?;
        check_delete_preconditions(gr, name, &old, opts)?;
        if opts.propagation_policy.as_deref() == Some("Orphan")
            && !opts.dry_run
            && let Some(uid) = meta::str_at(&old, "/metadata/uid")
        {
            orphan_dependents(&mut st, &self.shared.config, uid);
        }
        let is_namespace = *gr == GroupResource::namespaces();
        let foreground = !is_namespace
            && opts.propagation_policy.as_deref() == Some("Foreground")
            && !has_finalizer(&old, FOREGROUND_FINALIZER);
        let has_finalizers =
            foreground || !meta::is_empty_value(old.pointer("/metadata/finalizers"));
        let grace = if *gr == GroupResource::pods() {
            pod_grace(&old, opts.grace_period_seconds)
        } else {
            0
        };
        let marked = old.pointer("/metadata/deletionTimestamp").is_some();
        if marked {
            let current = old
                .pointer("/metadata/deletionGracePeriodSeconds")
                .and_then(Value::as_i64)
                .unwrap_or(0);
            if !foreground && (grace >= current || *gr != GroupResource::pods()) {
                return Ok(Deleted::Pending((*old).clone()));
            }
        }
        if grace > 0 || has_finalizers || is_namespace {
            let marking = Marking {
                grace,
                dry_run: opts.dry_run,
                foreground,
            };
            return Ok(self.mark_deleted(st, gr, key, old, marking));
        }
        self.remove(st, gr, key, old, opts.dry_run)
    }

    /// Marks an object as being deleted (`deletionTimestamp`, and `Terminating` for a namespace); it stays
    /// until its grace period or finalizers are done. A foreground deletion adds the `foregroundDeletion`
    /// finalizer, which the garbage collector removes once the blocking dependents are gone; an object
    /// already marked keeps its `deletionTimestamp` then.
    fn mark_deleted(
        &self,
        mut st: MutexGuard<'_, State>,
        gr: &GroupResource,
        key: Key,
        old: Arc<Value>,
        marking: Marking,
    ) -> Deleted {
        let Marking {
            grace,
            dry_run,
            foreground,
        } = marking;
        let mut new = (*old).clone();
        {
            let md = metadata_mut(&mut new);
            if foreground {
                let finalizers = md.entry("finalizers").or_insert_with(|| json!([]));
                if let Value::Array(list) = finalizers {
                    list.push(json!(FOREGROUND_FINALIZER));
                }
            }
            let current = md.get("deletionGracePeriodSeconds").and_then(Value::as_i64);
            if current.is_none_or(|c| grace < c) {
                md.insert(
                    "deletionTimestamp".into(),
                    json!(meta::rfc3339_after(grace)),
                );
                md.insert("deletionGracePeriodSeconds".into(), json!(grace));
            }
        }
        if *gr == GroupResource::namespaces()
            && let Value::Object(m) = &mut new
        {
            meta::child_map(m, "status").insert("phase".into(), json!("Terminating"));
        }
        if dry_run {
            return Deleted::Pending(new);
        }
        let rv = next_rv(&mut st);
        set_rv(&mut new, rv);
        let new = Arc::new(new);
        store_object(
            &mut st,
            &self.shared.config,
            gr,
            &key,
            EventKind::Modified,
            new.clone(),
            Some(old),
        );
        drop(st);
        self.shared.changed.send_replace(rv);
        Deleted::Pending((*new).clone())
    }

    fn remove(
        &self,
        mut st: MutexGuard<'_, State>,
        gr: &GroupResource,
        key: Key,
        old: Arc<Value>,
        dry_run: bool,
    ) -> Result<Deleted> {
        if dry_run {
            return Ok(Deleted::Gone((*old).clone()));
        }
        let rv = next_rv(&mut st);
        let mut last = (*old).clone();
        set_rv(&mut last, rv);
        let last = Arc::new(last);
        if let Some(m) = st.objects.get_mut(gr) {
            m.remove(&key);
        }
        push_event(
            &mut st,
            &self.shared.config,
            gr,
            &key.0,
            EventKind::Deleted,
            last.clone(),
            Some(old),
        );
        drop(st);
        self.shared.changed.send_replace(rv);
        Ok(Deleted::Gone((*last).clone()))
    }

    /// Removes the contents of terminating namespaces and then the namespaces themselves.
    /// Returns whether a namespace is still waiting for its contents to go.
    pub fn finalize_namespaces(&self) -> bool {
        let terminating: Vec<String> = {
            let st = self.lock();
            st.objects
                .get(&GroupResource::namespaces())
                .map(|m| {
                    m.values()
                        .map(Version::value)
                        .filter(|n| n.pointer("/metadata/deletionTimestamp").is_some())
                        .map(|n| meta::name_of(&n).to_string())
                        .collect()
                })
                .unwrap_or_default()
        };
        let mut waiting = false;
        for ns in terminating {
            let contents: Vec<(GroupResource, String, bool)> = {
                let st = self.lock();
                st.objects
                    .iter()
                    .filter(|(gr, _)| st.resources.get(*gr).is_some_and(|r| r.namespaced))
                    .flat_map(|(gr, m)| {
                        m.iter()
                            .filter(|((n, _), _)| *n == ns)
                            .map(|((_, name), o)| {
                                (
                                    gr.clone(),
                                    name.clone(),
                                    o.selectable().field("metadata.deletionTimestamp").is_some(),
                                )
                            })
                            .collect::<Vec<_>>()
                    })
                    .collect()
            };
            if contents.is_empty() {
                let st = self.lock();
                let key = (String::new(), ns.clone());
                if let Some(old) = st
                    .objects
                    .get(&GroupResource::namespaces())
                    .and_then(|m| m.get(&key))
                    .map(Version::value)
                {
                    let _ = self.remove(st, &GroupResource::namespaces(), key, old, false);
                } else {
                    drop(st);
                }
                continue;
            }
            waiting = true;
            for (gr, name, marked) in contents {
                if !marked {
                    let _ = self.delete(&gr, Some(&ns), &name, &DeleteOptions::default());
                }
            }
        }
        waiting
    }
}

/// The finalizer of a foreground deletion: the object stays until its blocking dependents are gone.
pub const FOREGROUND_FINALIZER: &str = "foregroundDeletion";

/// How [`Store::mark_deleted`] marks an object.
struct Marking {
    grace: i64,
    dry_run: bool,
    /// Add the `foregroundDeletion` finalizer.
    foreground: bool,
}

/// Whether the object lists a finalizer.
fn has_finalizer(obj: &Value, finalizer: &str) -> bool {
    obj.pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .is_some_and(|f| f.iter().any(|x| x == finalizer))
}

/// Refuses a delete whose `resourceVersion` or `uid` precondition the stored object does not meet.
fn check_delete_preconditions(
    gr: &GroupResource,
    name: &str,
    old: &Value,
    opts: &DeleteOptions,
) -> Result<()> {
    if let Some(rv) = &opts.resource_version
        && Some(rv.as_str()) != meta::str_at(old, "/metadata/resourceVersion")
    {
        return Err(Error::Conflict {
            resource: gr.clone(),
            name: name.to_string(),
            reason: format!(
                "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}",
                meta::str_at(old, "/metadata/resourceVersion").unwrap_or("")
            ),
        });
    }
    if let Some(uid) = &opts.uid
        && Some(uid.as_str()) != meta::str_at(old, "/metadata/uid")
    {
        return Err(Error::Conflict {
            resource: gr.clone(),
            name: name.to_string(),
            reason: format!(
                "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                meta::str_at(old, "/metadata/uid").unwrap_or("")
            ),
        });
    }
    Ok(())
}

/// Removes the owner reference to `uid` from every object that has one, each removal a `MODIFIED` event.
/// The caller notifies watchers after its own write.
fn orphan_dependents(st: &mut State, config: &StoreConfig, uid: &str) {
    let mut dependents: Vec<(GroupResource, Key, Arc<Value>)> = Vec::new();
    for (gr, objects) in &st.objects {
        for (key, obj) in objects {
            let owned = obj
                .selectable()
                .field("metadata.ownerReferences")
                .is_some_and(|refs| {
                    refs.as_array()
                        .into_iter()
                        .flatten()
                        .any(|r| r.get("uid").and_then(Value::as_str) == Some(uid))
                });
            if owned {
                dependents.push((gr.clone(), key.clone(), obj.value()));
            }
        }
    }
    for (gr, key, old) in dependents {
        let mut new = (*old).clone();
        let md = metadata_mut(&mut new);
        if let Some(Value::Array(refs)) = md.get_mut("ownerReferences") {
            refs.retain(|r| r.get("uid").and_then(Value::as_str) != Some(uid));
            if refs.is_empty() {
                md.remove("ownerReferences");
            }
        }
        let rv = next_rv(st);
        set_rv(&mut new, rv);
        let new = Arc::new(new);
        store_object(
            st,
            config,
            &gr,
            &key,
            EventKind::Modified,
            new.clone(),
            Some(old),
        );
    }
}

fn pod_grace(pod: &Value, requested: Option<i64>) -> i64 {
    let scheduled = meta::str_at(pod, "/spec/nodeName").is_some_and(|n| !n.is_empty());
    let finished = matches!(
        meta::str_at(pod, "/status/phase"),
        Some("Succeeded" | "Failed")
    );
    if !scheduled || finished {
        return 0;
    }
    let grace = requested
        .or_else(|| {
            pod.pointer("/spec/terminationGracePeriodSeconds")
                .and_then(Value::as_i64)
        })
        .unwrap_or(30);
    grace.max(0)
}
