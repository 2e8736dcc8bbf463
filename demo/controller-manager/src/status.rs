//! A WorkerPool's status, read off its Deployment.
//!
//! `Progressing` is `False` only once the Deployment has rolled out
//! completely by `kubectl rollout status`'s rule, for the template the
//! controller has just applied: `status.observedGeneration` has reached
//! `metadata.generation`, and `updatedReplicas`, `replicas` and
//! `availableReplicas` are equal and at least `spec.replicas`. `Available`
//! copies the Deployment's own `Available` condition.

use k8s_openapi::{
    api::apps::v1::Deployment,
    apimachinery::pkg::apis::meta::v1::{Condition, Time},
};
use kube::ResourceExt;

use crate::{
    WorkerPoolStatus,
    workerpool::{AVAILABLE, PROGRESSING},
};

/// Where a Deployment's rollout stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rollout {
    /// Every replica runs the current template and is available.
    Complete { message: String },
    /// Still going; the message says what it waits for.
    Waiting { message: String },
    /// The Deployment reports `ProgressDeadlineExceeded`.
    DeadlineExceeded { message: String },
}

/// The rollout state of `deployment`, by `kubectl rollout status`'s rule.
pub fn rollout(deployment: &Deployment) -> Rollout {
    let name = deployment.name_any();
    let generation = deployment.metadata.generation.unwrap_or(0);
    let status = deployment.status.clone().unwrap_or_default();
    let observed = status.observed_generation.unwrap_or(0);
    if status.observed_generation.is_none() || observed < generation {
        return Rollout::Waiting {
            message: format!(
                "Waiting for deployment {name:?} spec update to be observed (generation {generation}, observed {observed})"
            ),
        };
    }
    let deadline = status.conditions.iter().flatten().find(|c| {
        c.type_.as_deref() == Some("Progressing")
            && c.reason.as_deref() == Some("ProgressDeadlineExceeded")
    });
    if deadline.is_some() {
        return Rollout::DeadlineExceeded {
            message: format!("deployment {name:?} exceeded its progress deadline"),
        };
    }
    let want = deployment.spec.replicas.unwrap_or(1);
    let updated = status.updated_replicas.unwrap_or(0);
    let replicas = status.replicas.unwrap_or(0);
    let available = status.available_replicas.unwrap_or(0);
    let message = if updated < want {
        format!(
            "Waiting for deployment {name:?} rollout to finish: {updated} out of {want} new replicas have been updated"
        )
    } else if replicas > updated {
        format!(
            "Waiting for deployment {name:?} rollout to finish: {} old replicas are pending termination",
            replicas - updated
        )
    } else if available < updated {
        format!(
            "Waiting for deployment {name:?} rollout to finish: {available} of {updated} updated replicas are available"
        )
    } else {
        return Rollout::Complete {
            message: format!("deployment {name:?} successfully rolled out"),
        };
    };
    Rollout::Waiting { message }
}

/// The status to write for a WorkerPool of generation `generation` whose
/// Deployment is `deployment`. A condition whose status is unchanged from
/// `previous` keeps its `lastTransitionTime`; a new or changed one gets
/// `now`.
pub fn derive(
    generation: Option<i64>,
    deployment: &Deployment,
    previous: Option<&WorkerPoolStatus>,
    now: &Time,
) -> WorkerPoolStatus {
    let status = deployment.status.clone().unwrap_or_default();
    let (progressing, reason, message) = match rollout(deployment) {
        Rollout::Complete { message } => ("False", "RolloutComplete", message),
        Rollout::Waiting { message } => ("True", "RollingOut", message),
        Rollout::DeadlineExceeded { message } => ("True", "ProgressDeadlineExceeded", message),
    };
    let available = status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_.as_deref() == Some("Available"));
    let (available, available_reason, available_message) = match available {
        Some(c) => (
            c.status.as_deref().unwrap_or("Unknown"),
            c.reason
                .clone()
                .unwrap_or_else(|| String::from("DeploymentAvailable")),
            c.message.clone().unwrap_or_default(),
        ),
        None => (
            "Unknown",
            String::from("AwaitingDeploymentStatus"),
            format!(
                "deployment {:?} reports no Available condition yet",
                deployment.name_any()
            ),
        ),
    };
    let condition = |type_: &str, status: &str, reason: String, message: String| {
        let last = previous
            .and_then(|p| p.condition(type_))
            .filter(|c| c.status == status)
            .map(|c| c.last_transition_time.clone());
        Condition {
            type_: type_.to_string(),
            status: status.to_string(),
            reason,
            message,
            observed_generation: generation,
            last_transition_time: last.unwrap_or_else(|| now.clone()),
        }
    };
    WorkerPoolStatus {
        observed_generation: generation,
        replicas: status.replicas.unwrap_or(0),
        updated_replicas: status.updated_replicas.unwrap_or(0),
        ready_replicas: status.ready_replicas.unwrap_or(0),
        available_replicas: status.available_replicas.unwrap_or(0),
        conditions: vec![
            condition(AVAILABLE, available, available_reason, available_message),
            condition(PROGRESSING, progressing, reason.to_string(), message),
        ],
    }
}

/// The current time, to the second, as conditions carry it.
pub fn now() -> Time {
    let now = k8s_openapi::jiff::Timestamp::now();
    Time(k8s_openapi::jiff::Timestamp::from_second(now.as_second()).unwrap_or(now))
}

#[cfg(test)]
mod tests;
