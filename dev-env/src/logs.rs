//! `dev logs`: the logs of one component's pods, or of every component's,
//! each line with the component and pod it came from. With `follow`, the
//! pods of each component are watched: a pod that starts later (a rollout,
//! a restart of its container) is streamed from its first line, and a
//! deleted pod's stream is dropped. `since` and `tail` apply to the pods
//! running when the command starts.

use std::{collections::BTreeSet, pin::Pin, time::Duration};

use futures::{
    AsyncBufReadExt, Stream, StreamExt,
    stream::{self, AbortHandle, Abortable, SelectAll},
};
use k8s_openapi::api::{apps::v1::Deployment, core::v1::Pod};
use kube::{
    Api, ResourceExt,
    api::{ListParams, LogParams},
    runtime::{WatchStreamExt, watcher},
};

use crate::{config::Config, deliver, kubeconfig, status, wait::workload};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Config(#[from] crate::config::Error),
    #[error(transparent)]
    Kubeconfig(#[from] kubeconfig::Error),
    #[error(transparent)]
    Status(#[from] status::Error),
    #[error("reading {what}: {}", crate::apply::api_error(error))]
    Api { what: String, error: kube::Error },
}

/// Which lines, and whether to keep streaming.
#[derive(Debug, Clone, Copy, Default)]
pub struct LogOptions {
    /// Keep streaming, picking up pods that start later.
    pub follow: bool,
    /// Only lines newer than this, for the pods running at the start.
    pub since: Option<Duration>,
    /// Only the last this many lines of each pod running at the start.
    pub tail: Option<u32>,
}

/// One line of one pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogLine {
    pub component: String,
    pub pod: String,
    pub text: String,
}

/// Where a component's pods are.
struct Source {
    component: String,
    pods: Api<Pod>,
    container: String,
    selector: String,
}

type Lines = Pin<Box<dyn Stream<Item = LogLine> + Send>>;

/// Streams the logs of `components` (every declared one when empty) to
/// `sink`. Returns how many pods were streamed.
pub async fn stream(
    config: &Config,
    components: &[String],
    options: LogOptions,
    sink: &(dyn Fn(&LogLine) + Sync),
) -> Result<usize, Error> {
    let names: Vec<String> = if components.is_empty() {
        config.components.keys().cloned().collect()
    } else {
        components.to_vec()
    };
    let client = deliver::cluster_client(config).await?;
    let mut sources = Vec::new();
    for name in &names {
        let r = &config.component(name)?.rollout;
        let deployment = status::deployment_of(&client, r.kind, &r.namespace, &r.name).await?;
        let deploy = Api::<Deployment>::namespaced(client.clone(), &r.namespace)
            .get(&deployment)
            .await
            .map_err(|error| Error::Api {
                what: format!("Deployment {}/{deployment}", r.namespace),
                error,
            })?;
        sources.push(Source {
            component: name.clone(),
            pods: Api::namespaced(client.clone(), &r.namespace),
            container: r.container.clone(),
            selector: workload::selector_of(&deploy),
        });
    }
    if options.follow {
        Ok(follow(&sources, options, sink).await)
    } else {
        once(&sources, options, sink).await
    }
}

/// The lines each pod has now, then the end.
async fn once(
    sources: &[Source],
    options: LogOptions,
    sink: &(dyn Fn(&LogLine) + Sync),
) -> Result<usize, Error> {
    let mut lines = SelectAll::new();
    let mut count = 0;
    for source in sources {
        let list = source
            .pods
            .list(&ListParams::default().labels(&source.selector))
            .await
            .map_err(|error| Error::Api {
                what: format!("the pods of `{}`", source.component),
                error,
            })?;
        for pod in list.items {
            lines.push(pod_lines(
                source,
                &pod.name_any(),
                params(source, options, true),
            ));
            count += 1;
        }
    }
    while let Some(line) = lines.next().await {
        sink(&line);
    }
    Ok(count)
}

/// The log parameters of a pod: `since` and `tail` only for pods running
/// at the start (`initial`).
fn params(source: &Source, options: LogOptions, initial: bool) -> LogParams {
    LogParams {
        container: Some(source.container.clone()),
        follow: options.follow,
        since_seconds: options
            .since
            .filter(|_| initial)
            .map(|d| i64::try_from(d.as_secs().max(1)).unwrap_or(i64::MAX)),
        tail_lines: options.tail.filter(|_| initial).map(i64::from),
        ..LogParams::default()
    }
}

/// The lines of one pod's container, each tagged; a pod whose logs cannot
/// be read yields one line that says why.
fn pod_lines(source: &Source, pod: &str, params: LogParams) -> Lines {
    let (api, component, pod) = (
        source.pods.clone(),
        source.component.clone(),
        pod.to_string(),
    );
    let line = move |component: &str, pod: &str, text: String| LogLine {
        component: component.to_string(),
        pod: pod.to_string(),
        text,
    };
    stream::once(async move {
        match api.log_stream(&pod, &params).await {
            Ok(reader) => reader
                .lines()
                .map(move |l| line(&component, &pod, l.unwrap_or_default()))
                .boxed(),
            Err(e) => {
                let text = format!("(no logs: {})", crate::apply::api_error(&e));
                stream::once(async move { line(&component, &pod, text) }).boxed()
            }
        }
    })
    .flatten()
    .boxed()
}

/// Streams every pod that runs, as the watches see them, until interrupted.
async fn follow(
    sources: &[Source],
    options: LogOptions,
    sink: &(dyn Fn(&LogLine) + Sync),
) -> usize {
    let watches = sources.iter().enumerate().map(|(i, source)| {
        let config = watcher::Config::default().labels(&source.selector);
        watcher(source.pods.clone(), config)
            .default_backoff()
            .map(move |event| (i, event))
            .boxed()
    });
    let mut events = stream::select_all(watches);
    let mut lines: SelectAll<Lines> = SelectAll::new();
    let mut streaming = Streaming::default();
    loop {
        tokio::select! {
            Some((i, event)) = events.next() => {
                for (pod, uid, params) in streaming.apply(&sources[i], options, event) {
                    let (handle, registration) = AbortHandle::new_pair();
                    let pod_lines = pod_lines(&sources[i], &pod, params);
                    lines.push(Abortable::new(pod_lines, registration).boxed());
                    streaming.aborts.push((uid, handle));
                }
            }
            Some(line) = lines.next(), if !lines.is_empty() => sink(&line),
            else => return streaming.seen.len(),
        }
    }
}

/// The containers streamed so far, and how to stop each.
#[derive(Default)]
struct Streaming {
    /// `(pod uid, restart count)` of every container streamed.
    seen: BTreeSet<(String, i32)>,
    /// Sources whose first list is complete: their later pods are new.
    listed: BTreeSet<String>,
    aborts: Vec<(String, AbortHandle)>,
}

impl Streaming {
    /// The pods to start streaming after one watch event.
    fn apply(
        &mut self,
        source: &Source,
        options: LogOptions,
        event: Result<watcher::Event<Pod>, watcher::Error>,
    ) -> Vec<(String, String, LogParams)> {
        let initial = !self.listed.contains(&source.component);
        match event {
            Ok(watcher::Event::Apply(pod) | watcher::Event::InitApply(pod)) => {
                let Some(restarts) = started(&pod, &source.container) else {
                    return Vec::new();
                };
                let uid = pod.uid().unwrap_or_default();
                if !self.seen.insert((uid.clone(), restarts)) {
                    return Vec::new();
                }
                let mut params = params(source, options, initial && restarts == 0);
                params.follow = true;
                vec![(pod.name_any(), uid, params)]
            }
            Ok(watcher::Event::InitDone) => {
                self.listed.insert(source.component.clone());
                Vec::new()
            }
            Ok(watcher::Event::Delete(pod)) => {
                let uid = pod.uid().unwrap_or_default();
                self.aborts.retain(|(u, handle)| {
                    if *u == uid {
                        handle.abort();
                    }
                    *u != uid
                });
                Vec::new()
            }
            Ok(watcher::Event::Init) | Err(_) => Vec::new(),
        }
    }
}

/// The restart count of `container` in `pod` once it has started (running
/// or ended), else `None`.
fn started(pod: &Pod, container: &str) -> Option<i32> {
    let status = pod
        .status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .iter()
        .find(|c| c.name == container)?;
    let state = status.state.as_ref()?;
    (state.running.is_some() || state.terminated.is_some()).then_some(status.restart_count)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, running: bool, restarts: i32) -> Pod {
        let state = if running {
            serde_json::json!({"running": {}})
        } else {
            serde_json::json!({"waiting": {"reason": "ContainerCreating"}})
        };
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "uid": format!("uid-{name}")},
            "status": {"containerStatuses": [{
                "name": "app", "image": "i", "imageID": "", "ready": running,
                "restartCount": restarts, "state": state
            }]}
        }))
        .unwrap()
    }

    #[tokio::test]
    async fn pods_are_streamed_once_per_started_container_and_later_ones_from_their_start() {
        let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
        let client = kube::Client::try_from(config).unwrap();
        let source = Source {
            component: String::from("web"),
            pods: Api::namespaced(client, "shop"),
            container: String::from("app"),
            selector: String::from("app=web"),
        };
        let options = LogOptions {
            follow: true,
            since: Some(Duration::from_secs(600)),
            tail: Some(5),
        };
        let mut streaming = Streaming::default();
        let mut apply = |event| streaming.apply(&source, options, Ok(event));

        // At the start: a running pod gets `since` and `tail`; a pending one waits.
        let first = apply(watcher::Event::InitApply(pod("a", true, 0)));
        assert_eq!(first.len(), 1);
        assert_eq!(
            (first[0].2.tail_lines, first[0].2.since_seconds),
            (Some(5), Some(600))
        );
        assert!(apply(watcher::Event::InitApply(pod("b", false, 0))).is_empty());
        assert!(apply(watcher::Event::InitDone).is_empty());
        // The same container again is not streamed twice.
        assert!(apply(watcher::Event::Apply(pod("a", true, 0))).is_empty());
        // Pods that start later, and restarted containers, stream from their first line.
        for later in [pod("b", true, 0), pod("a", true, 1)] {
            let started = apply(watcher::Event::Apply(later));
            assert_eq!(started.len(), 1);
            assert!(started[0].2.follow);
            assert_eq!(
                (started[0].2.tail_lines, started[0].2.since_seconds),
                (None, None)
            );
        }
    }
}
