//! The watches a workload wait runs on, and the loop that turns their
//! items, the deadline and the node's liveness into "look again" or "stop".
//!
//! Watch errors are classified, never swallowed: an answer that will not
//! change by waiting (401, 403, 404, 422, …) ends the wait at once with the
//! server's words; a connection that fails makes the wait look at the node
//! and, while it runs, is retried with the watcher's backoff, the last such
//! error kept for the timeout message. The node is also looked at every
//! [`PROBE_INTERVAL`], since a killed node may leave a watch hanging rather
//! than failing it.

use std::{fmt, hash::Hash};

use futures::{
    StreamExt,
    stream::{BoxStream, SelectAll},
};
use kube::{
    Api,
    runtime::{
        WatchStreamExt,
        reflector::{self, Store, store::Writer},
        watcher,
    },
};
use tokio::time::{Instant, Interval, MissedTickBehavior};

use super::{Error, WaitOptions};
use crate::wait::node::PROBE_INTERVAL;

/// A watch that failed, and what it watched.
pub(super) struct Failure {
    pub resource: String,
    pub error: watcher::Error,
}

/// One item per change seen by any of a wait's watches.
pub(super) type Events = BoxStream<'static, Result<(), Failure>>;

/// A reflector over `api` (`resource` names it in messages): its store, and
/// a stream with one item per change or failure. The watcher retries failed
/// watches with its default backoff.
pub(super) fn watch<K>(
    api: Api<K>,
    config: watcher::Config,
    resource: String,
    dyntype: K::DynamicType,
) -> (Store<K>, Events)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + fmt::Debug + Send + Sync + 'static,
    K::DynamicType: Eq + Hash + Clone + Send + Sync,
{
    let writer = Writer::new(dyntype);
    let reader = writer.as_reader();
    let stream = reflector::reflector(writer, watcher(api, config).default_backoff())
        .map(move |item| {
            item.map(|_| ()).map_err(|error| Failure {
                resource: resource.clone(),
                error,
            })
        })
        .boxed();
    (reader, stream)
}

/// What a watcher error means for the wait.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Class {
    /// 410 Gone: the watcher lists again by itself.
    Expired,
    /// An answer that waiting will not change: the status code (0 when the
    /// answer could not be read at all) and the server's message.
    Fatal { code: u16, message: String },
    /// The connection failed, or the server could not answer for now.
    Transient,
}

/// Classifies a watcher error. Pure, so it is tested on fixtures.
pub fn classify(err: &watcher::Error) -> Class {
    use watcher::Error as W;
    let status = match err {
        W::WatchError(status) => status.as_ref(),
        W::InitialListFailed(e) | W::WatchStartFailed(e) | W::WatchFailed(e) => match e {
            kube::Error::Api(status) => status.as_ref(),
            kube::Error::SerdeError(_) | kube::Error::FromUtf8(_) => {
                return Class::Fatal {
                    code: 0,
                    message: format!("the server's answer cannot be read: {e}"),
                };
            }
            _ => return Class::Transient,
        },
        W::NoResourceVersion => {
            return Class::Fatal {
                code: 0,
                message: String::from("the list has no resourceVersion, so it cannot be watched"),
            };
        }
    };
    match status.code {
        410 => Class::Expired,
        0 | 408 | 429 | 500.. => Class::Transient,
        code => Class::Fatal {
            code,
            message: crate::apply::api_error(&kube::Error::Api(Box::new(status.clone()))),
        },
    }
}

/// How to fix a watch the API server refused with `code`.
pub fn hint(code: u16) -> &'static str {
    match code {
        401 => {
            "the cluster does not accept the kubeconfig's credentials; `cargo xtask dev up` writes a fresh kubeconfig (with `provider: existing`, log in again)"
        }
        403 => "the kubeconfig's user may not list and watch it; grant `list` and `watch` on it",
        404 => {
            "the cluster does not serve this resource; is its CRD applied (`cargo xtask dev up`)?"
        }
        _ => "the API server refused the watch, and waiting will not change its answer",
    }
}

/// Why a wait woke up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Wake {
    /// A watch saw a change.
    Changed,
    /// Time passed (the node was looked at and runs): time-based checks
    /// such as the pending grace are due.
    Tick,
}

/// The deadline, the node probe and the last state of one wait.
pub(super) struct Watching<'a> {
    what: String,
    options: &'a WaitOptions,
    deadline: Instant,
    probe: Interval,
    /// What the wait last observed, for the timeout message.
    pub last: String,
    /// The last watch error retried since the watches last delivered.
    last_error: Option<String>,
}

impl<'a> Watching<'a> {
    pub fn new(what: String, options: &'a WaitOptions) -> Watching<'a> {
        let mut probe = tokio::time::interval(PROBE_INTERVAL);
        probe.set_missed_tick_behavior(MissedTickBehavior::Delay);
        Watching {
            what,
            options,
            deadline: Instant::now() + options.timeout,
            probe,
            last: String::from("nothing observed yet"),
            last_error: None,
        }
    }

    pub fn what(&self) -> &str {
        &self.what
    }

    /// Waits until `events` sees a change or the next probe tick finds the
    /// node running; an error when the wait must end.
    pub async fn next(&mut self, events: &mut SelectAll<Events>) -> Result<Wake, Error> {
        loop {
            let item = tokio::select! {
                () = tokio::time::sleep_until(self.deadline) => return Err(self.timeout()),
                _ = self.probe.tick() => {
                    self.check_node().await?;
                    return Ok(Wake::Tick);
                }
                item = events.next() => item,
            };
            match item {
                Some(Ok(())) => {
                    self.last_error = None;
                    return Ok(Wake::Changed);
                }
                Some(Err(failure)) => self.failed(failure).await?,
                // Watchers never end; without any there is nothing to wait on.
                None => return Err(self.timeout()),
            }
        }
    }

    async fn failed(&mut self, failure: Failure) -> Result<(), Error> {
        match classify(&failure.error) {
            Class::Expired => Ok(()),
            Class::Fatal { code, message } => Err(Error::Watch {
                resource: failure.resource,
                message,
                hint: hint(code),
                source: failure.error,
            }),
            Class::Transient => {
                self.last_error = Some(format!("watching {}: {}", failure.resource, failure.error));
                self.check_node().await
            }
        }
    }

    /// Ends the wait when the node is known to be down.
    async fn check_node(&mut self) -> Result<(), Error> {
        let Some(node) = &self.options.node else {
            return Ok(());
        };
        match tokio::time::timeout_at(self.deadline, node.check()).await {
            Err(_) => Err(self.timeout()),
            Ok(Ok(())) => Ok(()),
            Ok(Err(down)) if down.is_down() => Err(Error::Node(down)),
            Ok(Err(unknown)) => {
                self.last_error = Some(crate::error_chain(&unknown));
                Ok(())
            }
        }
    }

    pub fn timeout(&self) -> Error {
        Error::Timeout {
            what: self.what.clone(),
            timeout: self.options.timeout,
            last: self.last.clone(),
            last_error: self.last_error.clone(),
        }
    }
}
