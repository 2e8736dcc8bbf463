//! Container logs: one line per container start, served through `GET …/pods/<name>/log`.

use std::collections::HashMap;
use std::sync::Mutex;

use serde_json::Value;

use crate::lock::MutexExt as _;
use crate::meta;
use crate::sparse::ShrinkWhenSparse as _;
use crate::store::{self, LogOptions, LogStream, PodLogs};

/// Log lines by pod `uid` and container name, for the pods of a kubelet's nodes.
pub struct Logs {
    nodes: Vec<String>,
    lines: Mutex<HashMap<String, HashMap<String, Vec<String>>>>,
}

impl Logs {
    /// No logs yet for the pods of these nodes.
    pub fn new(nodes: &[String]) -> Logs {
        Logs {
            nodes: nodes.to_vec(),
            lines: Mutex::new(HashMap::new()),
        }
    }

    /// Appends a line for a container start.
    pub fn started(&self, pod_uid: &str, container: &str, image: &str, at: &str) {
        let line = format!("{at} kube-sim: started container {container} image {image}");
        self.lines
            .lock_unpoisoned()
            .entry(pod_uid.to_string())
            .or_default()
            .entry(container.to_string())
            .or_default()
            .push(line);
    }

    /// Forgets a pod.
    pub fn remove(&self, pod_uid: &str) {
        let mut lines = self.lines.lock_unpoisoned();
        lines.remove(pod_uid);
        lines.shrink_when_sparse();
    }
}

impl PodLogs for Logs {
    /// The whole log, or its last `tailLines` lines. Virtual containers write nothing after their start
    /// line, so a `follow` request ends with the text there is.
    fn stream(&self, pod: &Value, options: &LogOptions) -> Option<store::Result<LogStream>> {
        let text = match self.logs(pod, options.container.as_deref()) {
            Ok(t) => t,
            Err(e) => return Some(Err(e)),
        };
        let text = match options.tail_lines {
            Some(n) if n >= 0 => tail(&text, n as usize),
            _ => text,
        };
        Some(Ok(Box::pin(futures::stream::once(async move {
            bytes::Bytes::from(text)
        }))))
    }

    fn logs(&self, pod: &Value, container: Option<&str>) -> store::Result<String> {
        let container = log_container(pod, container)?;
        let uid = meta::str_at(pod, "/metadata/uid").unwrap_or("");
        let lines = self
            .lines
            .lock_unpoisoned()
            .get(uid)
            .and_then(|m| m.get(container))
            .cloned();
        match lines {
            Some(lines) => Ok(lines.iter().map(|l| format!("{l}\n")).collect()),
            // Pods of other nodes are not this kubelet's to speak for.
            None if !self
                .nodes
                .iter()
                .any(|n| meta::str_at(pod, "/spec/nodeName") == Some(n.as_str())) =>
            {
                Ok(String::new())
            }
            None => Err(waiting_to_start(pod, container)),
        }
    }
}

/// The error a kubelet answers a log request with while the container has not started.
pub(crate) fn waiting_to_start(pod: &Value, container: &str) -> store::Error {
    let name = meta::name_of(pod);
    let reason = pod
        .pointer("/status/containerStatuses")
        .and_then(Value::as_array)
        .and_then(|cs| cs.iter().find(|c| c["name"] == container))
        .and_then(|c| c.pointer("/state/waiting/reason"))
        .and_then(Value::as_str)
        .unwrap_or("ContainerCreating");
    store::Error::BadRequest(format!(
        "container \"{container}\" in pod \"{name}\" is waiting to start: {reason}"
    ))
}

/// The last `n` lines of a text whose lines all end in a newline.
fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..]
        .iter()
        .map(|l| format!("{l}\n"))
        .collect()
}

/// The container a log request is for: the one named, or the pod's only
/// one; the API server's errors otherwise.
pub(crate) fn log_container<'a>(
    pod: &'a Value,
    container: Option<&'a str>,
) -> store::Result<&'a str> {
    let name = meta::name_of(pod);
    let names: Vec<&str> = pod
        .pointer("/spec/containers")
        .and_then(Value::as_array)
        .map(|cs| cs.iter().filter_map(|c| c["name"].as_str()).collect())
        .unwrap_or_default();
    let container = match container {
        Some(c) => c,
        None if names.len() == 1 => names[0],
        None => {
            return Err(store::Error::BadRequest(format!(
                "a container name must be specified for pod {name}, choose one of: [{}]",
                names.join(" ")
            )));
        }
    };
    if !names.contains(&container) {
        return Err(store::Error::BadRequest(format!(
            "container {container} is not valid for pod {name}"
        )));
    }
    Ok(container)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tail_keeps_the_last_lines() {
        assert_eq!(tail("a\nb\nc\n", 2), "b\nc\n");
        assert_eq!(tail("a\n", 5), "a\n");
        assert_eq!(tail("a\nb\n", 0), "");
    }
}
