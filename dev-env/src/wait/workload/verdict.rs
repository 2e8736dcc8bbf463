//! The verdict on one look at a rollout: pure functions of what the
//! watches hold (the Deployment, its ReplicaSets and their pods), tested on
//! fixtures.

use std::{collections::BTreeMap, fmt};

use k8s_openapi::api::{
    apps::v1::{Deployment, ReplicaSet},
    core::v1::Pod,
};
use kube::ResourceExt;

use super::{FATAL_REASONS, Termination, Unstarted, Want, not_started};

/// One look at the rollout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Done {
        pods: Vec<String>,
        last_ready: Option<String>,
        /// Old pods still terminating.
        terminating: Vec<String>,
    },
    Pending(String),
    ProgressDeadline(String),
    PodFailed {
        pod: String,
        container: String,
        reason: String,
        message: String,
    },
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Verdict::Done { pods, .. } => write!(f, "done: {} pods ready", pods.len()),
            Verdict::Pending(why) => f.write_str(why),
            Verdict::ProgressDeadline(message) => {
                write!(f, "progress deadline exceeded: {message}")
            }
            Verdict::PodFailed {
                pod,
                container,
                reason,
                message,
            } => {
                write!(f, "pod {pod} container {container}: {reason}: {message}")
            }
        }
    }
}

const REVISION: &str = "deployment.kubernetes.io/revision";

/// Decides from what the watches hold. Pure, so it is tested on fixtures.
pub fn evaluate(
    deploy: &Deployment,
    replica_sets: &[std::sync::Arc<ReplicaSet>],
    pods: &[std::sync::Arc<Pod>],
    want: &Want,
) -> Verdict {
    let spec_replicas = deploy.spec.replicas.unwrap_or(1);
    let status = deploy.status.clone().unwrap_or_default();
    let generation = deploy.metadata.generation.unwrap_or(0);
    let observed = status.observed_generation.unwrap_or(0);
    if generation < want.generation {
        return Verdict::Pending(format!(
            "waiting to see the deployment's generation {} (seen {generation})",
            want.generation
        ));
    }
    if observed < generation {
        return Verdict::Pending(format!(
            "waiting for the deployment spec update to be observed (generation {generation}, observed {observed})"
        ));
    }
    if let Some(cond) = status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_.as_deref() == Some("Progressing"))
        && cond.reason.as_deref() == Some("ProgressDeadlineExceeded")
    {
        return Verdict::ProgressDeadline(cond.message.clone().unwrap_or_default());
    }
    let Some(new_rs) = new_replica_set(deploy, replica_sets) else {
        return Verdict::Pending(format!(
            "waiting for the new ReplicaSet (revision {})",
            deploy.annotations().get(REVISION).map_or("?", |r| r)
        ));
    };
    let hash = template_hash(new_rs);
    let new_pods = pods_of(&hash, pods);
    if let Some(failed) = fatal_waiting(&new_pods) {
        return failed;
    }
    let name = deploy.name_any();
    if let Some(pending) = counts_pending(&name, spec_replicas, &status) {
        return pending;
    }
    let (ready, last_ready, waiting_on) = ready_with_digest(&new_pods, want);
    if (ready.len() as i32) < spec_replicas {
        let detail: Vec<String> = waiting_on
            .iter()
            .map(|(p, why)| format!("{p}: {why}"))
            .collect();
        return Verdict::Pending(format!(
            "{name}: {} of {spec_replicas} pods of ReplicaSet {} ready with the pushed image{}{}",
            ready.len(),
            new_rs.name_any(),
            if detail.is_empty() { "" } else { "; " },
            detail.join("; ")
        ));
    }
    let (serving, terminating) = old_pods(&hash, pods);
    if !serving.is_empty() {
        return Verdict::Pending(format!(
            "{name}: {} old pod(s) still Ready and not terminating: {}",
            serving.len(),
            serving.join(", ")
        ));
    }
    if want.termination == Termination::Gone && !terminating.is_empty() {
        return Verdict::Pending(format!(
            "{name}: {} old pod(s) still terminating: {}",
            terminating.len(),
            terminating.join(", ")
        ));
    }
    Verdict::Done {
        pods: ready,
        last_ready,
        terminating,
    }
}

/// The pods of older ReplicaSets (not of template `hash`), by name: those
/// still Ready without a `deletionTimestamp` (still serving), and those
/// terminating. Pods neither Ready nor terminating serve nothing.
fn old_pods(hash: &str, pods: &[std::sync::Arc<Pod>]) -> (Vec<String>, Vec<String>) {
    let old = pods
        .iter()
        .filter(|p| p.labels().get("pod-template-hash").map(String::as_str) != Some(hash));
    let (mut serving, mut terminating) = (Vec::new(), Vec::new());
    for pod in old {
        if pod.metadata.deletion_timestamp.is_some() {
            terminating.push(pod.name_any());
        } else if is_ready(pod) {
            serving.push(pod.name_any());
        }
    }
    serving.sort();
    terminating.sort();
    (serving, terminating)
}

fn is_ready(pod: &Pod) -> bool {
    pod.status
        .iter()
        .flat_map(|s| s.conditions.iter().flatten())
        .any(|c| c.type_ == "Ready" && c.status == "True")
}

/// The first container of `new_pods` waiting on a reason in
/// [`FATAL_REASONS`], as a verdict.
fn fatal_waiting(new_pods: &[&Pod]) -> Option<Verdict> {
    for pod in new_pods {
        let statuses = pod.status.iter().flat_map(|s| {
            s.init_container_statuses
                .iter()
                .flatten()
                .chain(s.container_statuses.iter().flatten())
        });
        for cs in statuses {
            if let Some(waiting) = cs.state.as_ref().and_then(|s| s.waiting.as_ref())
                && let Some(reason) = waiting.reason.as_deref()
                && FATAL_REASONS.contains(&reason)
            {
                return Some(Verdict::PodFailed {
                    pod: pod.name_any(),
                    container: cs.name.clone(),
                    reason: reason.to_string(),
                    message: waiting.message.clone().unwrap_or_default(),
                });
            }
        }
    }

    None
}

/// kubectl's rule on the Deployment's counts; `None` once it holds.
fn counts_pending(
    name: &str,
    spec_replicas: i32,
    status: &k8s_openapi::api::apps::v1::DeploymentStatus,
) -> Option<Verdict> {
    let updated = status.updated_replicas.unwrap_or(0);
    let replicas = status.replicas.unwrap_or(0);
    let available = status.available_replicas.unwrap_or(0);
    if updated < spec_replicas {
        return Some(Verdict::Pending(format!(
            "{name}: {updated} out of {spec_replicas} new replicas have been updated"
        )));
    }
    if replicas > updated {
        return Some(Verdict::Pending(format!(
            "{name}: {} old replicas are pending termination",
            replicas - updated
        )));
    }
    if available < updated {
        return Some(Verdict::Pending(format!(
            "{name}: {available} of {updated} updated replicas are available"
        )));
    }

    None
}

/// The Ready pods among `new_pods` that run the wanted digest (sorted),
/// the latest `Ready` transition among them, and why each other is not.
fn ready_with_digest(
    new_pods: &[&Pod],
    want: &Want,
) -> (Vec<String>, Option<String>, BTreeMap<String, String>) {
    let mut ready = Vec::new();
    let mut last_ready: Option<String> = None;
    let mut waiting_on = BTreeMap::new();
    for pod in new_pods {
        let ready_cond = pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| c.iter().find(|c| c.type_ == "Ready"));
        if ready_cond.map(|c| c.status.as_str()) != Some("True") {
            waiting_on.insert(pod.name_any(), String::from("not Ready"));
            continue;
        }
        if let Some(want_digest) = &want.digest {
            let image_id = pod
                .status
                .as_ref()
                .and_then(|s| s.container_statuses.as_ref())
                .and_then(|cs| cs.iter().find(|c| c.name == want.container))
                .map(|c| c.image_id.clone())
                .unwrap_or_default();
            if digest_of(&image_id) != Some(want_digest.as_str()) {
                let runs = if image_id.is_empty() {
                    String::from("no imageID yet")
                } else {
                    image_id
                };
                waiting_on.insert(pod.name_any(), format!("runs {runs}, not {want_digest}"));
                continue;
            }
        }
        let at = ready_cond
            .and_then(|c| c.last_transition_time.as_ref())
            .map(|t| t.0.to_string());
        if at > last_ready {
            last_ready = at;
        }
        ready.push(pod.name_any());
    }
    ready.sort();
    (ready, last_ready, waiting_on)
}

/// The Deployment's ReplicaSet for its current revision, once it exists.
fn new_replica_set<'a>(
    deploy: &Deployment,
    replica_sets: &'a [std::sync::Arc<ReplicaSet>],
) -> Option<&'a ReplicaSet> {
    let revision = deploy.annotations().get(REVISION);
    let uid = deploy.metadata.uid.as_deref();
    replica_sets.iter().map(AsRef::as_ref).find(|rs| {
        rs.annotations().get(REVISION) == revision
            && rs
                .owner_references()
                .iter()
                .any(|o| Some(o.uid.as_str()) == uid && o.controller == Some(true))
    })
}

fn template_hash(rs: &ReplicaSet) -> String {
    rs.labels()
        .get("pod-template-hash")
        .cloned()
        .unwrap_or_default()
}

/// The non-terminating pods of the ReplicaSet whose template hash is `hash`.
fn pods_of<'a>(hash: &str, pods: &'a [std::sync::Arc<Pod>]) -> Vec<&'a Pod> {
    pods.iter()
        .map(AsRef::as_ref)
        .filter(|p| {
            p.labels().get("pod-template-hash").map(String::as_str) == Some(hash)
                && p.metadata.deletion_timestamp.is_none()
        })
        .collect()
}

/// The pods of the new ReplicaSet that have not started (see
/// [`not_started`]). Pure, so it is tested on fixtures.
pub fn unstarted(
    deploy: &Deployment,
    replica_sets: &[std::sync::Arc<ReplicaSet>],
    pods: &[std::sync::Arc<Pod>],
) -> Vec<Unstarted> {
    new_pods(deploy, replica_sets, pods)
        .into_iter()
        .filter_map(not_started)
        .collect()
}

/// The non-terminating pods of the new ReplicaSet; none before it exists.
fn new_pods<'a>(
    deploy: &Deployment,
    replica_sets: &[std::sync::Arc<ReplicaSet>],
    pods: &'a [std::sync::Arc<Pod>],
) -> Vec<&'a Pod> {
    match new_replica_set(deploy, replica_sets) {
        Some(new_rs) => pods_of(&template_hash(new_rs), pods),
        None => Vec::new(),
    }
}

/// The pods of the new ReplicaSet in phase `Running` that are not Ready:
/// the ones a failing readiness probe holds back. Pure, so it is tested
/// on fixtures.
pub fn unready(
    deploy: &Deployment,
    replica_sets: &[std::sync::Arc<ReplicaSet>],
    pods: &[std::sync::Arc<Pod>],
) -> Vec<String> {
    let mut names: Vec<String> = new_pods(deploy, replica_sets, pods)
        .into_iter()
        .filter(|p| {
            let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
            phase == Some("Running") && !is_ready(p)
        })
        .map(ResourceExt::name_any)
        .collect();
    names.sort();
    names
}

/// The `sha256:<hex>` part of an `imageID` such as
/// `reg:5000/demo/worker@sha256:…` or a bare `sha256:…`.
pub fn digest_of(image_id: &str) -> Option<&str> {
    let start = image_id.rfind("sha256:")?;
    Some(&image_id[start..])
}
