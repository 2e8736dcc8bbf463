//! `push-image` and `reload`: build, push, roll out and wait, for several
//! components at once. Builds and pushes run concurrently, then rollouts
//! and waits run concurrently; one component's failure never hides the
//! others' results.

use std::time::{Duration, Instant};

use serde::Serialize;

use crate::{
    apply,
    config::{Config, Provider},
    image::{self, PushOptions, Pushed, distribution},
    kubeconfig, lock, manifest, registry,
    report::{Event, Phase, Reporter},
    rollout,
    state::State,
    wait::{
        node::{self, NodeProbe},
        workload::WaitOptions,
    },
};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Registry(#[from] registry::Error),
    #[error(transparent)]
    State(#[from] crate::state::Error),
    #[error(transparent)]
    Kubeconfig(#[from] kubeconfig::Error),
    #[error(transparent)]
    Manifest(#[from] manifest::Error),
    #[error(transparent)]
    Apply(#[from] apply::Error),
    #[error(transparent)]
    Lock(#[from] lock::Error),
    #[error(transparent)]
    Node(#[from] node::Error),
}

/// Tells `reporter` that `component` entered `phase`.
fn tell(reporter: &dyn Reporter, component: &str, phase: Phase, detail: &str) {
    reporter.report(&Event::Component {
        component: component.to_string(),
        phase,
        detail: detail.to_string(),
    });
}

/// Holds the environment's lock for a `push` or `reload`.
async fn lock(config: &Config, reporter: &dyn Reporter) -> Result<lock::Lock, lock::Error> {
    lock::environment(config, &|w| {
        reporter.report(&Event::WaitingForLock {
            env: w.env.clone(),
            holder: w.holder,
        })
    })
    .await
}

/// What happened to one component.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Outcome {
    pub component: String,
    /// The in-cluster reference pods run, digest-pinned.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    pub uploaded_bytes: u64,
    pub skipped_blobs: usize,
    /// Whether the workload was patched (false when it already ran the
    /// digest, or with `--no-rollout`).
    pub rolled_out: bool,
    /// The Ready pods that run it.
    pub pods: Vec<String>,
    pub wait_ms: u64,
    pub elapsed_ms: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl Outcome {
    fn new(component: &str) -> Outcome {
        Outcome {
            component: component.to_string(),
            image: None,
            digest: None,
            uploaded_bytes: 0,
            skipped_blobs: 0,
            rolled_out: false,
            pods: Vec::new(),
            wait_ms: 0,
            elapsed_ms: 0,
            error: None,
        }
    }
}

/// How `push` runs.
#[derive(Debug, Clone, Copy)]
pub struct PushFlags {
    pub rollout: bool,
    pub timeout: Duration,
    pub verbose: bool,
}

/// A client for the cluster of `config`: the node's `kubeconfig.host`, or
/// the declared context of the user's kubeconfig. The API is asked for its
/// version first, so that a cluster that cannot be reached is reported
/// here, with the node's state when the environment has a node.
pub async fn cluster_client(config: &Config) -> Result<kube::Client, kubeconfig::Error> {
    let client = match (config.cluster.provider, &config.cluster.context) {
        (Provider::Existing, Some(context)) => kubeconfig::user_client(context).await?,
        _ => kubeconfig::client(&config.state_dir().join(kubeconfig::HOST_FILE), None).await?,
    };
    match client.apiserver_version().await {
        Err(err) if node::is_unreachable(&err) => {
            Err(node::explain_unreachable(config, err).await.into())
        }
        // Any answer, even a refusal, means the API is there; the calls
        // that follow report their own errors.
        _ => Ok(client),
    }
}

/// How rollouts of `config` are waited for: `timeout`, `cluster.podStartGrace`
/// and the node container when there is one. An engine that cannot
/// be reached leaves the wait without a probe; the API's own errors still
/// end it.
async fn wait_options(config: &Config, timeout: Duration) -> WaitOptions {
    let node = NodeProbe::for_config(config).await.ok().flatten();
    WaitOptions {
        timeout,
        pending_grace: config.cluster.pod_start_grace,
        node,
    }
}

/// `err`, or the node's state when the node is down: then nothing that
/// needs the API can succeed, and the node is what to fix.
async fn or_node_down(config: &Config, err: String) -> String {
    match node::node_down(config).await {
        Some(down) => down.to_string(),
        None => err,
    }
}

/// Builds, pushes and (unless told not to) rolls out `components`, waiting
/// until Ready pods run the pushed digests.
pub async fn push(
    config: &Config,
    components: &[String],
    flags: PushFlags,
    reporter: &dyn Reporter,
) -> Result<Vec<Outcome>, Error> {
    let started = Instant::now();
    let _lock = lock(config, reporter).await?;
    let state = State::load(&config.state_dir())?;
    let registry = distribution::Client::new(&registry::host(config, &state)?);
    for name in components {
        tell(reporter, name, Phase::Push, "building");
    }
    let pushes = image::push_components(
        config,
        &registry,
        components,
        PushOptions {
            verbose: flags.verbose,
        },
    )
    .await;
    let mut outcomes: Vec<Outcome> = Vec::new();
    let mut pushed: Vec<(usize, Pushed)> = Vec::new();
    for (name, result) in components.iter().zip(pushes) {
        let mut outcome = Outcome::new(name);
        match result {
            Ok(p) => {
                outcome.image = Some(image::cluster_reference(config, &p.image, &p.digest));
                outcome.digest = Some(p.digest.clone());
                outcome.uploaded_bytes = p.uploaded_bytes;
                outcome.skipped_blobs = p.skipped_blobs;
                let phase = if flags.rollout {
                    Phase::Rollout
                } else {
                    Phase::Done
                };
                tell(reporter, name, phase, &format!("pushed {}", p.digest));
                pushed.push((outcomes.len(), p));
            }
            Err(e) => {
                tell(reporter, name, Phase::Failed, &e.to_string());
                outcome.error = Some(e.to_string());
            }
        }
        outcomes.push(outcome);
    }
    if flags.rollout && !pushed.is_empty() {
        match cluster_client(config).await {
            Ok(client) => {
                let options = &wait_options(config, flags.timeout).await;
                let rolls = pushed.iter().map(|(i, p)| {
                    let image = outcomes[*i].image.clone();
                    roll_and_wait(
                        &client,
                        config,
                        &p.component,
                        image,
                        Some(p.digest.clone()),
                        false,
                        options,
                        reporter,
                    )
                });
                for ((i, _), result) in pushed.iter().zip(futures::future::join_all(rolls).await) {
                    merge(&mut outcomes[*i], result);
                }
            }
            Err(e) => {
                for (i, _) in &pushed {
                    outcomes[*i].error = Some(e.to_string());
                    tell(
                        reporter,
                        &outcomes[*i].component,
                        Phase::Failed,
                        &e.to_string(),
                    );
                }
            }
        }
    }
    for outcome in &mut outcomes {
        outcome.elapsed_ms = started.elapsed().as_millis() as u64;
    }
    Ok(outcomes)
}

/// Re-applies the manifests (images pinned to their pushed digests), then
/// restarts `components` and waits for them.
pub async fn reload(
    config: &Config,
    components: &[String],
    timeout: Duration,
    reporter: &dyn Reporter,
) -> Result<Vec<Outcome>, Error> {
    let started = Instant::now();
    let manifests = manifest::load(&config.manifests)?;
    let _lock = lock(config, reporter).await?;
    let state = State::load(&config.state_dir())?;
    let client = cluster_client(config).await?;
    let applied = apply::apply_all(
        &client,
        &manifests,
        &apply::pinned_images(config, &state),
        timeout,
    )
    .await;
    if let Err(err) = applied {
        return Err(match node::node_down(config).await {
            Some(down) => down.into(),
            None => err.into(),
        });
    }
    let options = &wait_options(config, timeout).await;
    let rolls = components.iter().map(|name| {
        tell(reporter, name, Phase::Rollout, "restarting");
        let digest = state.images.get(name).map(|p| p.digest.clone());
        roll_and_wait(&client, config, name, None, digest, true, options, reporter)
    });
    let results = futures::future::join_all(rolls).await;
    Ok(components
        .iter()
        .zip(results)
        .map(|(name, result)| {
            let mut outcome = Outcome::new(name);
            outcome.digest = state.images.get(name).map(|p| p.digest.clone());
            merge(&mut outcome, result);
            outcome.elapsed_ms = started.elapsed().as_millis() as u64;
            outcome
        })
        .collect())
}

struct Rolled {
    patched: bool,
    pods: Vec<String>,
    wait: Duration,
}

fn merge(outcome: &mut Outcome, result: Result<Rolled, String>) {
    match result {
        Ok(r) => {
            outcome.rolled_out = r.patched;
            outcome.pods = r.pods;
            outcome.wait_ms = r.wait.as_millis() as u64;
        }
        Err(e) => outcome.error = Some(e),
    }
}

#[allow(clippy::too_many_arguments)]
async fn roll_and_wait(
    client: &kube::Client,
    config: &Config,
    name: &str,
    image: Option<String>,
    digest: Option<String>,
    restart: bool,
    options: &WaitOptions,
    reporter: &dyn Reporter,
) -> Result<Rolled, String> {
    let result = async {
        let rolled = rollout::roll(
            client,
            config,
            name,
            image.as_deref(),
            digest.as_deref(),
            restart,
            options.timeout,
        )
        .await?;
        let detail = if rolled.patched {
            "rolling out"
        } else {
            "already runs this digest; checking pods"
        };
        tell(reporter, name, Phase::Wait, detail);
        let wait_started = Instant::now();
        let done = rollout::wait(client, &rolled, options).await?;
        Ok::<_, rollout::Error>(Rolled {
            patched: rolled.patched,
            pods: done.pods,
            wait: wait_started.elapsed(),
        })
    }
    .await;
    match result {
        Ok(r) => {
            tell(
                reporter,
                name,
                Phase::Done,
                &format!("{} pod(s) ready", r.pods.len()),
            );
            Ok(r)
        }
        Err(e) => {
            let message = or_node_down(config, e.to_string()).await;
            tell(reporter, name, Phase::Failed, &message);
            Err(message)
        }
    }
}

impl std::fmt::Display for Outcome {
    /// The result line of one component: digest, upload, rollout, timing.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let o = self;
        let mut parts = vec![o.component.clone()];
        if let Some(digest) = &o.digest {
            parts.push(digest.clone());
        }
        if o.uploaded_bytes > 0 || o.skipped_blobs > 0 {
            parts.push(format!(
                "uploaded {}, {} blob(s) already there",
                bytes(o.uploaded_bytes),
                o.skipped_blobs
            ));
        }
        if o.rolled_out {
            parts.push(String::from("rolled out"));
        } else if !o.pods.is_empty() {
            parts.push(String::from("already running it"));
        }
        if !o.pods.is_empty() {
            parts.push(format!(
                "{} pod(s) ready in {:.1}s",
                o.pods.len(),
                o.wait_ms as f64 / 1000.0
            ));
        }
        parts.push(format!("{:.1}s", o.elapsed_ms as f64 / 1000.0));
        f.write_str(&parts.join("  "))
    }
}

fn bytes(n: u64) -> String {
    match n {
        n if n >= 1 << 20 => format!("{:.1} MB", n as f64 / f64::from(1 << 20)),
        n if n >= 1 << 10 => format!("{:.1} kB", n as f64 / f64::from(1 << 10)),
        n => format!("{n} B"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome() -> Outcome {
        serde_json::from_value(serde_json::json!({
            "component": "worker",
            "image": "demo-registry:5000/demo/worker@sha256:ab",
            "digest": "sha256:ab",
            "uploadedBytes": 1536,
            "skippedBlobs": 1,
            "rolledOut": true,
            "pods": ["w-1", "w-2"],
            "waitMs": 1250,
            "elapsedMs": 2500,
        }))
        .unwrap()
    }

    #[test]
    fn summaries_carry_the_documented_fields() {
        let o = outcome();
        let json = serde_json::to_value(&o).unwrap();
        for key in [
            "component",
            "image",
            "digest",
            "uploadedBytes",
            "skippedBlobs",
            "rolledOut",
            "pods",
            "waitMs",
            "elapsedMs",
        ] {
            assert!(json.get(key).is_some(), "{key} missing from {json}");
        }
        assert!(json.get("error").is_none());
        assert_eq!(
            o.to_string(),
            "worker  sha256:ab  uploaded 1.5 kB, 1 blob(s) already there  rolled out  2 pod(s) ready in 1.2s  2.5s"
        );
    }
}
