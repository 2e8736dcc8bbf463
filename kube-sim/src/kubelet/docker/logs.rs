//! `GET …/pods/<name>/log` from the engine: the latest container of the pod container, stdout and stderr,
//! with `follow` and `tailLines`.

use bollard::Docker;
use bollard::query_parameters::LogsOptionsBuilder;
use futures::StreamExt as _;
use serde_json::Value;

use super::DockerRuntime;
use crate::meta;
use crate::store::{self, LogOptions, LogStream, PodLogs};

/// The pod log source of the Docker runtime.
pub struct DockerLogs {
    docker: Docker,
    node_name: String,
    runtime: DockerRuntime,
}

impl DockerLogs {
    /// Logs of the containers `runtime` started.
    pub fn new(docker: Docker, node_name: String, runtime: DockerRuntime) -> DockerLogs {
        DockerLogs {
            docker,
            node_name,
            runtime,
        }
    }

    /// The Docker ID behind a log request, or the error a kubelet answers with.
    fn container_id(&self, pod: &Value, container: Option<&str>) -> store::Result<Option<String>> {
        let container = crate::kubelet::logs::log_container(pod, container)?;
        let uid = meta::str_at(pod, "/metadata/uid").unwrap_or("");
        match self.runtime.latest(uid, container) {
            Some(id) => Ok(Some(id)),
            // Pods of other nodes are not this kubelet's to speak for.
            None if meta::str_at(pod, "/spec/nodeName") != Some(self.node_name.as_str()) => {
                Ok(None)
            }
            None => Err(crate::kubelet::logs::waiting_to_start(pod, container)),
        }
    }

    fn engine_stream(&self, id: &str, options: &LogOptions) -> LogStream {
        let tail = options
            .tail_lines
            .map(|n| n.max(0).to_string())
            .unwrap_or_else(|| "all".to_string());
        let query = LogsOptionsBuilder::default()
            .follow(options.follow)
            .stdout(true)
            .stderr(true)
            .tail(&tail)
            .build();
        let id = id.to_string();
        let stream = self
            .docker
            .logs(&id, Some(query))
            .take_while(move |r| {
                if let Err(e) = r {
                    tracing::debug!(container = %id, error = %e, "the log stream ended");
                }
                std::future::ready(r.is_ok())
            })
            .filter_map(|r| std::future::ready(r.ok().map(|o| o.into_bytes())));
        Box::pin(stream)
    }
}

impl PodLogs for DockerLogs {
    /// The whole log at once; the API server streams through [`PodLogs::stream`] instead. Outside a
    /// multi-threaded runtime the text is empty.
    fn logs(&self, pod: &Value, container: Option<&str>) -> store::Result<String> {
        let Some(id) = self.container_id(pod, container)? else {
            return Ok(String::new());
        };
        let stream = self.engine_stream(&id, &LogOptions::default());
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            return Ok(String::new());
        };
        if handle.runtime_flavor() != tokio::runtime::RuntimeFlavor::MultiThread {
            return Ok(String::new());
        }
        let chunks: Vec<bytes::Bytes> =
            tokio::task::block_in_place(|| handle.block_on(stream.collect()));
        Ok(chunks
            .iter()
            .map(|c| String::from_utf8_lossy(c))
            .collect::<String>())
    }

    fn stream(&self, pod: &Value, options: &LogOptions) -> Option<store::Result<LogStream>> {
        match self.container_id(pod, options.container.as_deref()) {
            Ok(Some(id)) => Some(Ok(self.engine_stream(&id, options))),
            Ok(None) => None,
            Err(e) => Some(Err(e)),
        }
    }
}
