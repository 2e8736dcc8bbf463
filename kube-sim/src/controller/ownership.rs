//! Claiming dependents (`pkg/controller/controller_ref_manager.go`): a controller owns the objects whose
//! controller `ownerReference` names its `uid`; it adopts matching orphans and releases those it owns whose
//! labels stop matching its selector.
//!
//! - An orphan (no controller reference) that matches the selector, is not being deleted, and whose
//!   would-be owner is not being deleted, is adopted: a controller reference with `blockOwnerDeletion`.
//! - An owned object that no longer matches is released: the reference to the owner is removed, unless
//!   the owner is being deleted (then it is left for the garbage collector).
//! - Objects another controller owns are never touched.
//!
//! Writes read the object again and carry its `resourceVersion` and `uid`, so a concurrent change makes
//! a 409 that requeues the owner.

use serde_json::{Value, json};

use super::Error;
use crate::meta;
use crate::resource::GroupResource;
use crate::selector::LabelSelector;
use crate::store::{self, Endpoint, Store, WriteOptions};

/// The owner side of a claim.
pub(crate) struct Owner<'a> {
    /// The owner as just read.
    pub(crate) obj: &'a Value,
    /// Its `apiVersion` and `kind`, for the reference.
    pub(crate) api_version: &'a str,
    pub(crate) kind: &'a str,
    /// The resource of its dependents.
    pub(crate) dependents: GroupResource,
}

impl Owner<'_> {
    fn uid(&self) -> &str {
        meta::str_at(self.obj, "/metadata/uid").unwrap_or("")
    }

    fn deleting(&self) -> bool {
        self.obj.pointer("/metadata/deletionTimestamp").is_some()
    }

    /// Whether the owner's `spec.selector` selects an object; an empty or invalid selector selects
    /// nothing.
    pub(crate) fn selects(&self, obj: &Value) -> bool {
        selector_of(self.obj).is_some_and(|s| s.matches(obj))
    }

    /// The objects among `candidates` this owner controls once orphans are adopted and strays released.
    pub(crate) fn claim(&self, store: &Store, candidates: Vec<Value>) -> Result<Vec<Value>, Error> {
        let mut claimed = Vec::new();
        for obj in candidates {
            let controller = super::controller_of_any(&obj);
            match controller {
                Some(r) if r["uid"] != self.uid() => {}
                Some(_) if self.selects(&obj) => claimed.push(obj),
                Some(_) if !self.deleting() => self.release(store, &obj)?,
                Some(_) => {}
                None if self.selects(&obj)
                    && !self.deleting()
                    && obj.pointer("/metadata/deletionTimestamp").is_none() =>
                {
                    if let Some(adopted) = self.adopt(store, &obj)? {
                        claimed.push(adopted);
                    }
                }
                None => {}
            }
        }
        Ok(claimed)
    }

    /// Adds this owner's controller reference to an orphan; `None` when it is gone or was claimed meanwhile.
    fn adopt(&self, store: &Store, obj: &Value) -> Result<Option<Value>, Error> {
        let Some(mut current) = self.fresh(store, obj)? else {
            return Ok(None);
        };
        if super::controller_of_any(&current).is_some() || !self.selects(&current) {
            return Ok(None);
        }
        let reference = super::controller_ref(self.obj, self.api_version, self.kind);
        let refs = meta::metadata_mut(&mut current)
            .entry("ownerReferences")
            .or_insert_with(|| json!([]));
        if let Value::Array(refs) = refs {
            refs.retain(|r| r["uid"] != self.uid());
            refs.push(reference);
        }
        tracing::debug!(owner = %meta::name_of(self.obj), dependent = %meta::name_of(obj), "adopting");
        Ok(Some(self.write(store, current)?))
    }

    /// Removes this owner's reference from an object it no longer selects.
    fn release(&self, store: &Store, obj: &Value) -> Result<(), Error> {
        let Some(mut current) = self.fresh(store, obj)? else {
            return Ok(());
        };
        let md = meta::metadata_mut(&mut current);
        if let Some(Value::Array(refs)) = md.get_mut("ownerReferences") {
            refs.retain(|r| r["uid"] != self.uid());
            if refs.is_empty() {
                md.remove("ownerReferences");
            }
        }
        tracing::debug!(owner = %meta::name_of(self.obj), dependent = %meta::name_of(obj), "releasing");
        self.write(store, current)?;
        Ok(())
    }

    /// The object as stored now, if it is still the same object (`uid`).
    fn fresh(&self, store: &Store, obj: &Value) -> Result<Option<Value>, Error> {
        match store.get(
            &self.dependents,
            Some(meta::namespace_of(obj)),
            meta::name_of(obj),
        ) {
            Ok(current) if current.pointer("/metadata/uid") == obj.pointer("/metadata/uid") => {
                Ok(Some(current))
            }
            Ok(_) | Err(store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    fn write(&self, store: &Store, obj: Value) -> Result<Value, Error> {
        let ns = meta::namespace_of(&obj).to_string();
        Ok(store
            .update(
                Endpoint::Main,
                &self.dependents,
                Some(&ns),
                obj,
                &WriteOptions::manager(super::MANAGER),
            )?
            .object)
    }
}

/// An owner's `spec.selector` as a label selector; `None` when empty or invalid.
pub(crate) fn selector_of(owner: &Value) -> Option<LabelSelector> {
    let text = super::replicaset::selector_string(owner.pointer("/spec/selector"));
    if text.is_empty() {
        return None;
    }
    LabelSelector::parse(&text).ok()
}
