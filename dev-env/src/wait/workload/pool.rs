//! Waiting for a WorkerPool: its controller observes the generation, then
//! its status says the rollout is complete; a progress deadline fails the
//! wait at once.

use futures::stream::SelectAll;
use kube::{
    Api, Client,
    api::DynamicObject,
    discovery::ApiResource,
    runtime::{reflector::ObjectRef, watcher},
};
use serde_json::Value;

use super::watch::{Events, Watching, watch};
use super::{Error, WaitOptions};

/// A WorkerPool and the generation its controller must reach.
#[derive(Debug, Clone, Copy)]
pub struct PoolAt<'a> {
    pub resource: &'a ApiResource,
    pub namespace: &'a str,
    pub name: &'a str,
    pub generation: i64,
}

/// What a wait on a WorkerPool waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PoolGoal {
    /// The controller has observed the generation: from then on the
    /// Deployment it owns carries that generation's template, so a wait on
    /// the Deployment cannot mistake the previous rollout for this one.
    Observed,
    /// `observedGeneration >= generation` with `Available=True` and
    /// `Progressing=False`: the controller's verdict on the rollout that
    /// the generation asked for.
    Converged,
}

/// Waits for `pool` to reach `goal`, failing at once on a progress
/// deadline.
pub async fn worker_pool(
    client: &Client,
    pool: PoolAt<'_>,
    goal: PoolGoal,
    options: &WaitOptions,
) -> Result<(), Error> {
    let done = match goal {
        PoolGoal::Observed => pool_observed,
        PoolGoal::Converged => pool_converged,
    };
    watch_pool(client, &pool, options, done).await
}

/// Watches a WorkerPool until `done` says so, failing at once on a
/// progress deadline.
async fn watch_pool(
    client: &Client,
    pool: &PoolAt<'_>,
    options: &WaitOptions,
    done: fn(&Value, i64) -> (bool, String),
) -> Result<(), Error> {
    let PoolAt {
        resource,
        namespace,
        name,
        generation,
    } = *pool;
    let kind = &resource.kind;
    let mut w = Watching::new(
        format!("{kind} {namespace}/{name} (generation {generation})"),
        options,
    );
    let (store, pool_events) = watch(
        Api::<DynamicObject>::namespaced_with(client.clone(), namespace, resource),
        watcher::Config::default().fields(&format!("metadata.name={name}")),
        format!("{kind} {namespace}/{name}"),
        resource.clone(),
    );
    let mut events: SelectAll<Events> = SelectAll::new();
    events.push(pool_events);
    let key = ObjectRef::new_with(name, resource.clone()).within(namespace);
    loop {
        w.next(&mut events).await?;
        let Some(pool) = store.get(&key) else {
            w.last = format!("the {kind} does not exist");
            continue;
        };
        // The controller reports a Deployment that ran out of time as
        // Progressing with that reason: fail at once.
        if let Some(message) = progress_deadline_exceeded(&pool.data) {
            return Err(Error::ProgressDeadline {
                namespace: namespace.to_string(),
                name: name.to_string(),
                message,
            });
        }
        let (finished, seen) = done(&pool.data, generation);
        w.last = seen;
        if finished {
            return Ok(());
        }
    }
}

/// The message of a `Progressing` condition whose reason is
/// `ProgressDeadlineExceeded`, if there is one.
pub fn progress_deadline_exceeded(data: &Value) -> Option<String> {
    data.pointer("/status/conditions")?
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Progressing" && c["reason"] == "ProgressDeadlineExceeded")
        .map(|c| c["message"].as_str().unwrap_or_default().to_string())
}

/// Whether a WorkerPool's controller has observed `generation`, and what
/// its status says.
pub fn pool_observed(data: &Value, generation: i64) -> (bool, String) {
    let observed = data
        .pointer("/status/observedGeneration")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    (
        observed >= generation,
        format!("observedGeneration {observed} (want >= {generation})"),
    )
}

/// Whether a WorkerPool's status says the rollout of `generation` is
/// complete, and what it says.
pub fn pool_converged(data: &Value, generation: i64) -> (bool, String) {
    let observed = data
        .pointer("/status/observedGeneration")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    let condition = |kind: &str| {
        data.pointer("/status/conditions")
            .and_then(Value::as_array)
            .and_then(|c| c.iter().find(|c| c["type"] == kind))
            .map(|c| {
                (
                    c["status"].as_str().unwrap_or("").to_string(),
                    c["message"].as_str().unwrap_or("").to_string(),
                )
            })
    };
    let available = condition("Available");
    let progressing = condition("Progressing");
    let show = |c: &Option<(String, String)>| {
        c.as_ref()
            .map_or(String::from("unset"), |(s, m)| format!("{s} ({m})"))
    };
    let seen = format!(
        "observedGeneration {observed} (want >= {generation}), Available {}, Progressing {}",
        show(&available),
        show(&progressing)
    );
    let done = observed >= generation
        && available.as_ref().is_some_and(|(s, _)| s == "True")
        && progressing.as_ref().is_some_and(|(s, _)| s == "False");
    (done, seen)
}
