//! Watch streams (`endpoints/handlers/watch.go`): one JSON event per line, bookmarks (every interval and
//! once just before the timeout, as the watch cache sends them), the end of a streaming list's initial
//! events, and tables for clients that asked for them.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::Response;
use hyper::body::Frame;
use serde_json::{Value, json};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use super::{Body, Query, ServerState, present, streamed};
use crate::resource::ResourceInfo;
use crate::store::{Error, ListOptions, SharedEvent, Watcher};
use crate::table::IncludeObject;
use crate::wire::Wire;

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

/// How long before a watch's timeout it gets its last bookmark (the cacher sends one 2 s before the deadline).
const BOOKMARK_BEFORE_TIMEOUT: Duration = Duration::from_secs(2);

impl WatchStream {
    /// Sends events as lines on `tx` until the stream ends.
    async fn run(mut self, tx: mpsc::Sender<Result<Frame<Bytes>, Infallible>>) {
        let deadline = Instant::now() + self.timeout;
        let interval = self.interval;
        let mut next_bookmark = next_bookmark_after(interval, Instant::now(), deadline);
        let mut initial_left = if self.send_initial {
            Some(self.watcher.initial_events())
        } else {
            None
        };
        let send = |line: Vec<u8>| tx.send(Ok(Frame::data(Bytes::from(line))));
        loop {
            if initial_left == Some(0) {
                initial_left = None;
                let mut line = self.initial_events_end().to_string().into_bytes();
                line.push(b'\n');
                if send(line).await.is_err() {
                    break;
                }
            }
            let event = tokio::select! {
                e = self.watcher.next_shared() => match e {
                    Some(e) => e,
                    None => break,
                },
                _ = tokio::time::sleep_until(next_bookmark), if self.bookmarks => {
                    next_bookmark = next_bookmark_after(interval, Instant::now(), deadline);
                    SharedEvent::Bookmark(self.watcher.resource_version())
                }
                _ = tokio::time::sleep_until(deadline) => break,
                _ = tx.closed() => break,
                _ = self.shutdown.wait_for(|s| *s) => break,
            };
            if let Some(n) = initial_left.as_mut() {
                *n = n.saturating_sub(1);
            }
            if send(self.line(&event)).await.is_err() {
                break;
            }
            if matches!(event, SharedEvent::Error(_)) {
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

    /// An event as one line. Objects stored at the requested version and sent as they are serialize
    /// straight from the store's copy.
    fn line(&self, event: &SharedEvent) -> Vec<u8> {
        let mut line = format!("{{\"type\":\"{}\",\"object\":", event.type_name()).into_bytes();
        let api_version = self.info.api_version(&self.version);
        let written = match event.object() {
            Some(o)
                if self.table.is_none()
                    && !super::convert::is_view(&self.info)
                    && o.get("apiVersion").and_then(Value::as_str)
                        == Some(api_version.as_str()) =>
            {
                serde_json::to_writer(&mut line, &Wire(o))
            }
            _ => serde_json::to_writer(&mut line, &Wire(&self.object(event))),
        };
        if written.is_err() {
            line.truncate(0);
        }
        line.extend_from_slice(b"}\n");
        line
    }

    /// The `object` of an event: the object at the requested version (or its table row), a bookmark's
    /// version, or an error's `Status`.
    fn object(&self, event: &SharedEvent) -> Value {
        let (info, version) = (&self.info, &self.version);
        let object = match event {
            SharedEvent::Added(o) | SharedEvent::Modified(o) | SharedEvent::Deleted(o) => {
                present(info, version, (**o).clone())
            }
            SharedEvent::Bookmark(rv) => {
                json!({"kind": info.kind, "apiVersion": info.api_version(version),
                "metadata": {"resourceVersion": rv.to_string()}})
            }
            SharedEvent::Error(status) => status.clone(),
        };
        match (event.object(), self.table) {
            (Some(_), Some(include)) => {
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

/// When the bookmark after `now` is due: one interval on, or just before the deadline when that comes
/// first, so a client that reconnects after the timeout resumes from a recent version.
fn next_bookmark_after(interval: Duration, now: Instant, deadline: Instant) -> Instant {
    let periodic = now + interval;
    let last = deadline.checked_sub(BOOKMARK_BEFORE_TIMEOUT).unwrap_or(now);
    if last > now && last < periodic {
        last
    } else {
        periodic
    }
}
