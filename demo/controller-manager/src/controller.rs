//! The reconcile loop: for every WorkerPool, apply its Deployment, undo
//! changes others made to that Deployment's pod template, and write the
//! WorkerPool's status from what the Deployment reports.
//!
//! Reconciles are triggered by changes to WorkerPools and to the
//! Deployments they own (so drift on a Deployment is noticed), and repeat
//! every [`RESYNC`] regardless.

use std::{sync::Arc, time::Duration};

use futures::StreamExt;
use k8s_openapi::{
    api::{
        apps::v1::Deployment,
        core::v1::{Event, EventSource},
    },
    apimachinery::pkg::apis::meta::v1::ObjectMeta,
};
use kube::{
    Api, Client, Resource, ResourceExt,
    api::{Patch, PatchParams, PostParams},
    runtime::{Controller, controller::Action, watcher},
};
use serde_json::json;
use tracing::{debug, info, warn};

use crate::{FIELD_MANAGER, WorkerPool, deployment, status};

/// How often a WorkerPool is reconciled when nothing changes.
pub const RESYNC: Duration = Duration::from_secs(300);
/// How long after a failed reconcile it is tried again.
pub const RETRY: Duration = Duration::from_secs(2);

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Desired(#[from] deployment::Error),
    #[error(
        "Deployment {namespace}/{name} exists and is not controlled by WorkerPool {namespace}/{name}; delete it or rename the WorkerPool"
    )]
    Foreign { namespace: String, name: String },
    #[error("cannot {action} for WorkerPool {namespace}/{name}: {source}")]
    Api {
        action: &'static str,
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },
}

/// What every reconcile shares.
pub struct Context {
    pub client: Client,
}

/// Runs the controller until `shutdown` completes, then lets running
/// reconciles finish and returns.
pub async fn run(client: Client, shutdown: impl Future<Output = ()> + Send + Sync + 'static) {
    let pools = Api::<WorkerPool>::all(client.clone());
    let deployments = Api::<Deployment>::all(client.clone());
    info!("reconciling WorkerPools");
    Controller::new(pools, watcher::Config::default())
        .owns(deployments, watcher::Config::default())
        .graceful_shutdown_on(shutdown)
        .run(reconcile, error_policy, Arc::new(Context { client }))
        .for_each(|result| async move {
            match result {
                Ok((object, _)) => debug!(workerpool = %object, "reconciled"),
                Err(e) => warn!(error = %e, "controller"),
            }
        })
        .await;
    info!("stopped");
}

/// One pass over one WorkerPool.
pub async fn reconcile(pool: Arc<WorkerPool>, context: Arc<Context>) -> Result<Action, Error> {
    if pool.metadata.deletion_timestamp.is_some() {
        // Garbage collection removes the Deployment with its owner.
        return Ok(Action::await_change());
    }
    let name = pool.name_any();
    let namespace = pool.namespace().unwrap_or_default();
    let api_err = |action| {
        let (namespace, name) = (namespace.clone(), name.clone());
        move |source| Error::Api {
            action,
            namespace,
            name,
            source,
        }
    };
    let pools = Api::<WorkerPool>::namespaced(context.client.clone(), &namespace);
    let deployments = Api::<Deployment>::namespaced(context.client.clone(), &namespace);

    // The cache can lag: reconcile the WorkerPool as the API server has it
    // now. When it is gone, applying would recreate the Deployment of a
    // WorkerPool that no longer exists.
    let current = pools
        .get_opt(&name)
        .await
        .map_err(api_err("read the WorkerPool"))?;
    let pool = match current {
        Some(current)
            if current.metadata.uid == pool.metadata.uid
                && current.metadata.deletion_timestamp.is_none() =>
        {
            current
        }
        _ => {
            debug!(workerpool = %format!("{namespace}/{name}"), "gone; nothing to do");
            return Ok(Action::await_change());
        }
    };
    let desired = deployment::desired(&pool)?;

    if let Some(existing) = deployments
        .get_opt(&name)
        .await
        .map_err(api_err("read the Deployment"))?
    {
        let controlled = existing
            .owner_references()
            .iter()
            .any(|o| o.controller == Some(true));
        if controlled && !deployment::is_owned_by(&existing, &pool) {
            return Err(Error::Foreign { namespace, name });
        }
    }

    let applied = deployments
        .patch(
            &name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&desired),
        )
        .await
        .map_err(api_err("apply the Deployment"))?;
    let live = match deployment::stray_template_metadata(&desired, &applied) {
        Some(revert) => {
            info!(
                workerpool = %format!("{namespace}/{name}"),
                patch = %revert,
                "reverting pod-template metadata set on the Deployment directly"
            );
            let params = PatchParams {
                field_manager: Some(FIELD_MANAGER.to_string()),
                ..PatchParams::default()
            };
            let reverted = deployments
                .patch(&name, &params, &Patch::Merge(&revert))
                .await
                .map_err(api_err("revert the Deployment's pod template"))?;
            let keys = revert_keys(&revert);
            let message = format!(
                "Removed {keys} from Deployment {name}'s pod template: it follows spec.template; restart the workers by annotating the WorkerPool's spec.template instead"
            );
            record(&context.client, &pool, "Warning", "DriftReverted", &message).await;
            reverted
        }
        None => applied,
    };

    let generation = pool.metadata.generation;
    let new_status = status::derive(generation, &live, pool.status.as_ref(), &status::now());
    if pool.status.as_ref() != Some(&new_status) {
        let params = PatchParams {
            field_manager: Some(FIELD_MANAGER.to_string()),
            ..PatchParams::default()
        };
        pools
            .patch_status(
                &name,
                &params,
                &Patch::Merge(json!({ "status": new_status })),
            )
            .await
            .map_err(api_err("write the WorkerPool's status"))?;
        debug!(workerpool = %format!("{namespace}/{name}"), ?generation, "status written");
    }
    Ok(Action::requeue(RESYNC))
}

/// The label and annotation keys a revert patch removes, for a message.
fn revert_keys(revert: &serde_json::Value) -> String {
    let metadata = &revert["spec"]["template"]["metadata"];
    let mut keys = Vec::new();
    for (field, noun) in [("labels", "label"), ("annotations", "annotation")] {
        if let Some(map) = metadata[field].as_object() {
            keys.extend(map.keys().map(|key| format!("{noun} {key}")));
        }
    }
    keys.join(", ")
}

/// Records a core/v1 Event about `pool`, so `kubectl describe` shows it.
/// Events are best effort: failing to record one is only logged.
async fn record(client: &Client, pool: &WorkerPool, type_: &str, reason: &str, message: &str) {
    let namespace = pool.namespace().unwrap_or_default();
    let now = status::now();
    let event = Event {
        metadata: ObjectMeta {
            generate_name: Some(format!("{}.", pool.name_any())),
            namespace: Some(namespace.clone()),
            ..ObjectMeta::default()
        },
        involved_object: pool.object_ref(&()),
        type_: Some(type_.to_string()),
        reason: Some(reason.to_string()),
        message: Some(message.to_string()),
        source: Some(EventSource {
            component: Some(FIELD_MANAGER.to_string()),
            host: None,
        }),
        reporting_component: Some(FIELD_MANAGER.to_string()),
        first_timestamp: Some(now.clone()),
        last_timestamp: Some(now),
        count: Some(1),
        ..Event::default()
    };
    let events = Api::<Event>::namespaced(client.clone(), &namespace);
    if let Err(e) = events.create(&PostParams::default(), &event).await {
        debug!(error = %e, reason, "cannot record an event");
    }
}

/// Logs the failure and tries again after [`RETRY`].
pub fn error_policy(pool: Arc<WorkerPool>, error: &Error, _: Arc<Context>) -> Action {
    warn!(
        workerpool = %format!("{}/{}", pool.namespace().unwrap_or_default(), pool.name_any()),
        error = %error,
        "reconcile failed"
    );
    Action::requeue(RETRY)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_revert_message_names_every_key() {
        let revert = json!({"spec": {"template": {"metadata": {
            "labels": {"extra": null},
            "annotations": {"a/b": null, "c": null},
        }}}});
        assert_eq!(
            revert_keys(&revert),
            "label extra, annotation a/b, annotation c"
        );
    }
}
