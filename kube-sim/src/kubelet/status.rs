//! Pod status (`pkg/kubelet/status`): the container statuses, the pod phase and conditions, written back
//! through the status subresource.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{Map, Value, json};

use super::runtime::ContainerRuntime;
use super::{Container, Kubelet, MANAGER, PodRun, Stage};
use crate::meta;
use crate::resource::GroupResource;
use crate::store::{self, Endpoint, WriteOptions};

/// The container status a real kubelet reports for a container in this state.
pub(super) fn container_status(c: &Container) -> Value {
    let waiting = |reason: &str, message: Option<&str>| {
        let mut w = Map::new();
        w.insert("reason".into(), json!(reason));
        if let Some(m) = message {
            w.insert("message".into(), json!(m));
        }
        json!({"waiting": w})
    };
    let state = match &c.stage {
        Stage::Creating => waiting("ContainerCreating", None),
        Stage::PullFailed { message } => waiting("ErrImagePull", Some(message)),
        Stage::PullBackOff { message } => waiting(
            "ImagePullBackOff",
            Some(&format!(
                "Back-off pulling image \"{}\": ErrImagePull: {message}",
                c.image()
            )),
        ),
        Stage::InvalidName { message } => waiting("InvalidImageName", Some(message)),
        Stage::ConfigError { message } => waiting("CreateContainerConfigError", Some(message)),
        Stage::CreateFailed { message } => waiting("CreateContainerError", Some(message)),
        Stage::StartFailed { message } => waiting("RunContainerError", Some(message)),
        Stage::Running { started_at } => json!({"running": {"startedAt": started_at}}),
        Stage::CrashBackOff { message } => waiting("CrashLoopBackOff", Some(message)),
        Stage::Terminated => c
            .last_terminated
            .clone()
            .unwrap_or_else(|| json!({"terminated": {"exitCode": 0, "reason": "Completed"}})),
    };
    let mut s = Map::new();
    s.insert("name".into(), json!(c.name));
    match (&c.pulled, c.created) {
        (Some(p), true) => {
            s.insert("image".into(), json!(p.image));
            s.insert("imageID".into(), json!(p.image_id));
        }
        _ => {
            s.insert("image".into(), json!(c.image()));
            s.insert("imageID".into(), json!(""));
        }
    }
    if c.created
        && let Some(id) = &c.container_id
    {
        s.insert("containerID".into(), json!(id));
    }
    s.insert(
        "lastState".into(),
        c.last_terminated.clone().unwrap_or(json!({})),
    );
    s.insert("ready".into(), json!(c.ready));
    s.insert("restartCount".into(), json!(c.restart_count));
    s.insert(
        "started".into(),
        json!(c.started && matches!(c.stage, Stage::Running { .. })),
    );
    s.insert("state".into(), state);
    Value::Object(s)
}

/// The pod status for the current stages, keeping condition transition times that did not change.
pub(super) fn pod_status(run: &PodRun, pod: &Value) -> Value {
    let node_ip = &run.node_ip;
    let old = pod.get("status").cloned().unwrap_or(json!({}));
    let statuses: Vec<Value> = run.containers.iter().map(container_status).collect();
    let unready: Vec<&str> = run
        .containers
        .iter()
        .filter(|c| !c.ready)
        .map(|c| c.name.as_str())
        .collect();
    let conds = Conditions {
        old: &old,
        now: meta::now_rfc3339(),
    };
    let containers_ready = unready.is_empty();
    let unready_message = format!("containers with unready status: [{}]", unready.join(" "));
    let containers_ready_cond = if containers_ready {
        conds.condition("ContainersReady", true, None, None)
    } else {
        conds.condition(
            "ContainersReady",
            false,
            Some("ContainersNotReady"),
            Some(unready_message.clone()),
        )
    };
    let ready_cond = if !containers_ready {
        conds.condition(
            "Ready",
            false,
            Some("ContainersNotReady"),
            Some(unready_message),
        )
    } else {
        conds.readiness_gates_condition(pod)
    };
    let ours = [
        "PodReadyToStartContainers",
        "Initialized",
        "Ready",
        "ContainersReady",
        "PodScheduled",
    ];
    // The sandbox exists once volumes are mounted, and is gone once every container has finished.
    let sandbox = run.volumes_ready
        && !run
            .containers
            .iter()
            .all(|c| matches!(c.stage, Stage::Terminated));
    let mut conditions = vec![
        conds.condition("PodReadyToStartContainers", sandbox, None, None),
        conds.condition("Initialized", true, None, None),
        ready_cond,
        containers_ready_cond,
        conds.condition("PodScheduled", true, None, None),
    ];
    if let Some(others) = old["conditions"].as_array() {
        conditions.extend(
            others
                .iter()
                .filter(|c| !ours.contains(&c["type"].as_str().unwrap_or("")))
                .cloned(),
        );
    }
    let mut status = old.as_object().cloned().unwrap_or_default();
    status.insert("phase".into(), json!(pod_phase(run)));
    status.insert("conditions".into(), json!(conditions));
    status.insert("containerStatuses".into(), json!(statuses));
    status.insert("hostIP".into(), json!(node_ip));
    status.insert("hostIPs".into(), json!([{"ip": node_ip}]));
    status.insert("podIP".into(), json!(run.pod_ip));
    status.insert("podIPs".into(), json!([{"ip": run.pod_ip}]));
    status.insert("startTime".into(), json!(run.start_time));
    Value::Object(status)
}

/// `Succeeded` or `Failed` once every container terminated, `Running` once one was created, else `Pending`.
fn pod_phase(run: &PodRun) -> &'static str {
    let ever_started = run.containers.iter().any(|c| c.created);
    let all_done = !run.containers.is_empty()
        && run
            .containers
            .iter()
            .all(|c| matches!(c.stage, Stage::Terminated));
    if all_done {
        let failed = run.containers.iter().any(|c| {
            c.last_terminated
                .as_ref()
                .and_then(|t| t.pointer("/terminated/exitCode"))
                .and_then(Value::as_i64)
                != Some(0)
        });
        if failed { "Failed" } else { "Succeeded" }
    } else if ever_started {
        "Running"
    } else {
        "Pending"
    }
}

/// Pod conditions made against the previous status, so a condition that keeps its status keeps its
/// `lastTransitionTime`.
struct Conditions<'a> {
    old: &'a Value,
    now: String,
}

impl Conditions<'_> {
    fn old_condition(&self, kind: &str) -> Option<Value> {
        self.old["conditions"]
            .as_array()
            .and_then(|cs| cs.iter().find(|c| c["type"] == kind))
            .cloned()
    }

    fn condition(
        &self,
        kind: &str,
        ok: bool,
        reason: Option<&str>,
        message: Option<String>,
    ) -> Value {
        let status = if ok { "True" } else { "False" };
        let since = self
            .old_condition(kind)
            .filter(|c| c["status"] == status)
            .and_then(|c| c.get("lastTransitionTime").cloned())
            .unwrap_or(json!(self.now));
        let mut c = Map::new();
        c.insert("type".into(), json!(kind));
        c.insert("status".into(), json!(status));
        c.insert("lastTransitionTime".into(), since);
        if let Some(r) = reason {
            c.insert("reason".into(), json!(r));
        }
        if let Some(m) = message {
            c.insert("message".into(), json!(m));
        }
        Value::Object(c)
    }

    /// `Ready` of a pod whose containers are ready: every readiness gate's condition must be True.
    fn readiness_gates_condition(&self, pod: &Value) -> Value {
        let gates_missing: Vec<String> = pod
            .pointer("/spec/readinessGates")
            .and_then(Value::as_array)
            .map(|gates| {
                gates
                    .iter()
                    .filter_map(|g| g["conditionType"].as_str())
                    .filter(|t| self.old_condition(t).is_none_or(|c| c["status"] != "True"))
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default();
        if gates_missing.is_empty() {
            return self.condition("Ready", true, None, None);
        }
        let list = gates_missing
            .iter()
            .map(|g| {
                format!("corresponding condition of pod readiness gate \"{g}\" does not exist.")
            })
            .collect::<Vec<_>>()
            .join(", ");
        self.condition("Ready", false, Some("ReadinessGatesNotReady"), Some(list))
    }
}

/// Writes the pod status if it changed; a conflict is retried against the latest pod.
pub(super) fn write_status<R: ContainerRuntime>(k: &Arc<Kubelet<R>>, run: &PodRun, pod: &Value) {
    let mut pod = pod.clone();
    for _ in 0..5 {
        if meta::str_at(&pod, "/metadata/uid") != Some(run.uid.as_str()) {
            return;
        }
        let status = pod_status(run, &pod);
        if pod.get("status") == Some(&status) {
            return;
        }
        let mut new = pod.clone();
        new["status"] = status;
        match k.store.update(
            Endpoint::Status,
            &GroupResource::pods(),
            Some(&run.namespace),
            new,
            &WriteOptions::manager(MANAGER),
        ) {
            Ok(_) => return,
            Err(store::Error::Conflict { .. }) => {
                match k
                    .store
                    .get(&GroupResource::pods(), Some(&run.namespace), &run.name)
                {
                    Ok(p) => pod = p,
                    Err(_) => return,
                }
            }
            Err(store::Error::NotFound { .. }) => return,
            Err(e) => {
                tracing::warn!(pod = %run.name, error = %e, "writing the pod status failed");
                return;
            }
        }
    }
}

/// The image digests reported for a pod's containers, by container name (for tests and tools).
pub fn image_ids(pod: &Value) -> BTreeMap<String, String> {
    pod.pointer("/status/containerStatuses")
        .and_then(Value::as_array)
        .map(|cs| {
            cs.iter()
                .filter_map(|c| {
                    Some((
                        c["name"].as_str()?.to_string(),
                        c["imageID"].as_str()?.to_string(),
                    ))
                })
                .collect()
        })
        .unwrap_or_default()
}
