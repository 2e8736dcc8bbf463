//! The Deployment a WorkerPool owns: what it should be, and what to undo
//! when someone else changed its pod template.

use std::collections::BTreeMap;

use k8s_openapi::{
    api::apps::v1::{Deployment, DeploymentSpec},
    apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta},
};
use kube::{Resource, ResourceExt};
use serde_json::{Map, Value, json};

use crate::WorkerPool;

/// The label that ties a Deployment, its selector and its pods to their
/// WorkerPool. Its value is the WorkerPool's name.
pub const POOL_LABEL: &str = "demo.dev-env.io/workerpool";
/// The label naming the controller on the Deployments it makes.
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("WorkerPool `{name}` has no namespace, uid or name yet; it must be read from the API")]
    Unstored { name: String },
}

/// The Deployment `pool` should own: same name and namespace, a controller
/// owner reference to `pool`, `spec.replicas`, and `spec.template` with the
/// pool label added to its labels. The selector is the pool label alone, so
/// it never changes when the template does.
pub fn desired(pool: &WorkerPool) -> Result<Deployment, Error> {
    let name = pool.name_any();
    let unstored = || Error::Unstored { name: name.clone() };
    let namespace = pool.namespace().ok_or_else(unstored)?;
    let mut owner = pool.controller_owner_ref(&()).ok_or_else(unstored)?;
    owner.block_owner_deletion = Some(true);

    let mut template = pool.spec.template.clone();
    let template_meta = template.metadata.get_or_insert_with(ObjectMeta::default);
    template_meta
        .labels
        .get_or_insert_with(BTreeMap::new)
        .insert(POOL_LABEL.to_string(), name.clone());

    Ok(Deployment {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            namespace: Some(namespace),
            labels: Some(BTreeMap::from([
                (POOL_LABEL.to_string(), name.clone()),
                (
                    MANAGED_BY_LABEL.to_string(),
                    crate::FIELD_MANAGER.to_string(),
                ),
            ])),
            owner_references: Some(vec![owner]),
            ..ObjectMeta::default()
        },
        spec: DeploymentSpec {
            replicas: Some(pool.spec.replicas),
            selector: LabelSelector {
                match_labels: Some(BTreeMap::from([(POOL_LABEL.to_string(), name)])),
                ..LabelSelector::default()
            },
            template,
            ..DeploymentSpec::default()
        },
        status: None,
    })
}

/// Whether `deployment` is controlled by `pool` (by uid).
pub fn is_owned_by(deployment: &Deployment, pool: &WorkerPool) -> bool {
    let uid = pool.meta().uid.as_deref();
    uid.is_some()
        && deployment
            .owner_references()
            .iter()
            .any(|o| o.controller == Some(true) && Some(o.uid.as_str()) == uid)
}

/// A JSON merge patch that removes the pod-template labels and annotations
/// `live` has and `desired` does not, or `None` when there are none.
///
/// Server-side apply leaves fields that other managers set in place, so a
/// restart annotation patched onto the Deployment directly survives the
/// controller's apply; this patch is what reverts it. The workers restart
/// only when their WorkerPool's template changes.
pub fn stray_template_metadata(desired: &Deployment, live: &Deployment) -> Option<Value> {
    let template_meta = |d: &Deployment| d.spec.template.metadata.clone().unwrap_or_default();
    let (want, have) = (template_meta(desired), template_meta(live));
    let stray = |want: &Option<BTreeMap<String, String>>,
                 have: &Option<BTreeMap<String, String>>| {
        let want = want.as_ref();
        let nulls: Map<String, Value> = have
            .iter()
            .flatten()
            .filter(|(key, _)| !want.is_some_and(|w| w.contains_key(*key)))
            .map(|(key, _)| (key.clone(), Value::Null))
            .collect();
        nulls
    };
    let labels = stray(&want.labels, &have.labels);
    let annotations = stray(&want.annotations, &have.annotations);
    if labels.is_empty() && annotations.is_empty() {
        return None;
    }
    let mut metadata = Map::new();
    if !labels.is_empty() {
        metadata.insert("labels".to_string(), Value::Object(labels));
    }
    if !annotations.is_empty() {
        metadata.insert("annotations".to_string(), Value::Object(annotations));
    }
    Some(json!({ "spec": { "template": { "metadata": metadata } } }))
}

#[cfg(test)]
mod tests;
