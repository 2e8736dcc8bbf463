//! Watch streams (`endpoints/handlers/watch.go`): one JSON event per line, bookmarks, the end of a
//! streaming list's initial events, and tables for clients that asked for them.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::Response;
use hyper::body::Frame;
use serde_json::{Value, json};
use tokio::sync::{mpsc, watch};

use super::{Body, Query, ServerState, present, streamed};
use crate::resource::ResourceInfo;
use crate::store::{Error, ListOptions, WatchEvent, Watcher};
use crate::table::IncludeObject;

/// Starts a watch of a collection and streams its events until the timeout, the client leaving, an error
/// event, or shutdown.
pub(super) fn start_watch(
    state: &ServerState,
    info: &Arc<ResourceInfo>,
    version: &str,
    namespace: Option<&str>,
    q: &Query,
    opts: ListOptions,
    table: Option<IncludeObject>,
) -> Result<Response<Body>, Error> {
    let from = match q.get("resourceVersion").filter(|s| !s.is_empty()) {
        None => None,
        Some(rv) => Some(
            rv.parse::<u64>()
                .map_err(|_| Error::BadRequest(format!("invalid resource version: {rv}")))?,
        ),
    };
    let send_initial = q.flag("sendInitialEvents");
    // A streaming list (`sendInitialEvents=true`) replays the current state whatever the version says.
    let from = if send_initial { None } else { from };
    let watcher = state.store.watch(&info.storage(), namespace, from, &opts)?;
    let timeout = q
        .get("timeoutSeconds")
        .and_then(|t| t.parse::<u64>().ok())
        .map(Duration::from_secs)
        .unwrap_or(Duration::from_secs(1800));
    let stream = WatchStream {
        watcher,
        info: info.clone(),
        version: version.to_string(),
        table,
        send_initial,
        bookmarks: q.flag("allowWatchBookmarks"),
        interval: state.bookmark_interval,
        timeout,
        shutdown: state.shutdown.clone(),
    };
    let (tx, rx) = mpsc::channel::<Result<Frame<Bytes>, Infallible>>(64);
    tokio::spawn(stream.run(tx));
    Ok(streamed(rx, "application/json"))
}

/// A running watch and how its events are written.
struct WatchStream {
    watcher: Watcher,
    info: Arc<ResourceInfo>,
    version: String,
    table: Option<IncludeObject>,
    send_initial: bool,
    bookmarks: bool,
    interval: Duration,
    timeout: Duration,
    shutdown: watch::Receiver<bool>,
}

impl WatchStream {
    /// Sends events as lines on `tx` until the stream ends.
    async fn run(mut self, tx: mpsc::Sender<Result<Frame<Bytes>, Infallible>>) {
        let deadline = tokio::time::sleep(self.timeout);
        tokio::pin!(deadline);
        let mut ticker =
            tokio::time::interval_at(tokio::time::Instant::now() + self.interval, self.interval);
        let mut initial_left = if self.send_initial {
            Some(self.watcher.initial_events())
        } else {
            None
        };
        let send = |line: String| tx.send(Ok(Frame::data(Bytes::from(line))));
        loop {
            if initial_left == Some(0) {
                initial_left = None;
                if send(format!("{}\n", self.initial_events_end()))
                    .await
                    .is_err()
                {
                    break;
                }
            }
            let event = tokio::select! {
                e = self.watcher.next() => match e {
                    Some(e) => e,
                    None => break,
                },
                _ = ticker.tick(), if self.bookmarks => WatchEvent::Bookmark(self.watcher.resource_version()),
                _ = &mut deadline => break,
                _ = tx.closed() => break,
                _ = self.shutdown.wait_for(|s| *s) => break,
            };
            if let Some(n) = initial_left.as_mut() {
                *n = n.saturating_sub(1);
            }
            let object = self.object(&event);
            let line = format!("{}\n", json!({"type": event.type_name(), "object": object}));
            if send(line).await.is_err() {
                break;
            }
            if matches!(event, WatchEvent::Error(_)) {
                break;
            }
        }
    }

    /// The bookmark that ends a streaming list's initial events.
    fn initial_events_end(&self) -> Value {
        json!({"type": "BOOKMARK", "object": {"kind": self.info.kind, "apiVersion": self.info.api_version(&self.version),
            "metadata": {"resourceVersion": self.watcher.resource_version().to_string(),
                "annotations": {"k8s.io/initial-events-end": "true"}}}})
    }

    /// The `object` of an event: the object at the requested version (or its table row), a bookmark's
    /// version, or an error's `Status`.
    fn object(&self, event: &WatchEvent) -> Value {
        let (info, version) = (&self.info, &self.version);
        let object = match event {
            WatchEvent::Added(o) | WatchEvent::Modified(o) | WatchEvent::Deleted(o) => {
                present(info, version, o.clone())
            }
            WatchEvent::Bookmark(rv) => {
                json!({"kind": info.kind, "apiVersion": info.api_version(version),
                "metadata": {"resourceVersion": rv.to_string()}})
            }
            WatchEvent::Error(status) => status.clone(),
        };
        match (event, self.table) {
            (
                WatchEvent::Added(_) | WatchEvent::Modified(_) | WatchEvent::Deleted(_),
                Some(include),
            ) => {
                let metadata =
                    json!({"resourceVersion": object.pointer("/metadata/resourceVersion")});
                crate::table::render(
                    info,
                    version,
                    std::slice::from_ref(&object),
                    metadata,
                    include,
                )
            }
            _ => object,
        }
    }
}
