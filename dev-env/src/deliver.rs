//! `push-image` and `reload`: build, push, roll out and wait, for several
//! components at once. Builds and pushes run concurrently, then rollouts
//! and waits run concurrently; one component's failure never hides the
//! others' results.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::{
    apply,
    config::{Config, Provider, RolloutKind},
    image::{self, PushOptions, Pushed, cargo::Cancel},
    kubeconfig, lock, manifest, registry,
    report::{Event, Phase, Reporter},
    rollout,
    state::State,
    wait::{
        node::{self, NodeProbe},
        workload::{self, WaitOptions},
    },
};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Registry(#[from] registry::Error),
    #[error(transparent)]
    RegistryClient(#[from] Box<crate::image::distribution::Error>),
    #[error(transparent)]
    State(#[from] crate::state::Error),
    #[error(transparent)]
    Kubeconfig(#[from] kubeconfig::Error),
    #[error(transparent)]
    Manifest(#[from] manifest::Error),
    #[error(transparent)]
    Apply(#[from] apply::Error),
    #[error(transparent)]
    Targets(#[from] crate::targets::Error),
    #[error(transparent)]
    Builds(#[from] image::builds::Error),
    #[error(transparent)]
    Lock(#[from] lock::Error),
    #[error(transparent)]
    UnknownComponent(#[from] crate::config::Error),
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
    /// The cargo profile the image's binary was built with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
    pub uploaded_bytes: u64,
    pub skipped_blobs: usize,
    /// Whether the workload was patched (false when it already ran the
    /// digest, or with `--no-rollout`).
    pub rolled_out: bool,
    /// The Ready pods that run it.
    pub pods: Vec<String>,
    pub wait_ms: u64,
    /// Pods of older ReplicaSets still terminating when the wait ended.
    #[serde(default)]
    pub terminating: usize,
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
            profile: None,
            uploaded_bytes: 0,
            skipped_blobs: 0,
            rolled_out: false,
            pods: Vec::new(),
            wait_ms: 0,
            terminating: 0,
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
    /// Hold each wait until old pods are gone, not only terminating.
    pub wait_for_termination: bool,
}

/// How `reload` runs.
#[derive(Debug, Clone, Copy)]
pub struct ReloadFlags {
    pub timeout: Duration,
    /// Hold each wait until old pods are gone, not only terminating.
    pub wait_for_termination: bool,
    /// What to prune of what the manifests no longer declare, before
    /// restarting.
    pub prune: apply::Prune,
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

/// What a push reaches before its images are pushed: a client for the
/// cluster, the options of the waits on it, and the watches of the
/// components' Deployments; or why the cluster cannot be reached.
type Connected = Result<Reached, kubeconfig::Error>;

struct Reached {
    client: kube::Client,
    options: WaitOptions,
    watches: HashMap<String, workload::DeploymentWatch>,
}

/// Reaches the cluster of `config` and the node the waits watch, at once,
/// then starts watching the Deployments `components` roll.
async fn connect(config: &Config, components: &[String], timeout: Duration) -> Connected {
    let (client, options) = tokio::join!(cluster_client(config), wait_options(config, timeout));
    let client = client?;
    let watches = components
        .iter()
        .filter_map(|name| {
            let rollout = &config.components.get(name)?.rollout;
            (rollout.kind == RolloutKind::Deployment).then(|| {
                let watch =
                    workload::DeploymentWatch::start(&client, &rollout.namespace, &rollout.name);
                (name.clone(), watch)
            })
        })
        .collect();
    Ok(Reached {
        client,
        options,
        watches,
    })
}

/// Builds, pushes and (unless told not to) rolls out `components`, waiting
/// until Ready pods run the pushed digests.
pub async fn push(
    config: &Config,
    components: &[String],
    flags: PushFlags,
    reporter: &dyn Reporter,
) -> Result<Vec<Outcome>, Error> {
    push_until(config, components, flags, None, reporter).await
}

/// [`push`], whose builds stop (and fail as cancelled) once `cancel` is set.
pub async fn push_cancellable(
    config: &Config,
    components: &[String],
    flags: PushFlags,
    cancel: &Cancel,
    reporter: &dyn Reporter,
) -> Result<Vec<Outcome>, Error> {
    push_until(config, components, flags, Some(cancel), reporter).await
}

async fn push_until(
    config: &Config,
    components: &[String],
    flags: PushFlags,
    cancel: Option<&Cancel>,
    reporter: &dyn Reporter,
) -> Result<Vec<Outcome>, Error> {
    let started = Instant::now();
    for name in components {
        config.component(name)?;
    }
    // A rollout target the manifests do not declare fails the push before
    // anything is built.
    if flags.rollout {
        let manifests = manifest::load(&config.manifests)?;
        crate::targets::verify(config, components, &manifests).await?;
    }
    // So does a machine that cannot build for the cluster's platform (as
    // the last `dev up` found it).
    let platform = match State::load(&config.state_dir())?.platform {
        Some(platform) => platform,
        None => image::builds::cluster_platform(config, None).await?,
    };
    let builds = image::builds::plan(config, components, &platform)?;
    let _lock = lock::environment(config, reporter).await?;
    let state = State::load(&config.state_dir())?;
    let registry = registry::client(config, &registry::host(config, &state)?).map_err(Box::new)?;
    for name in components {
        tell(reporter, name, Phase::Push, "building");
    }
    let pushing = image::push_components(
        config,
        &registry,
        components,
        PushOptions {
            builds: &builds,
            output: flags.verbose.then_some(reporter),
            progress: Some(reporter),
            cancel,
        },
    );
    // The cluster is reached while the images build and upload, so the
    // rollout starts the moment they are pushed.
    let connecting = async {
        match flags.rollout {
            true => Some(connect(config, components, flags.timeout).await),
            false => None,
        }
    };
    let (pushes, connected) = tokio::join!(pushing, connecting);
    let mut outcomes: Vec<Outcome> = Vec::new();
    let mut pushed: Vec<(usize, Pushed)> = Vec::new();
    for (name, result) in components.iter().zip(pushes) {
        let mut outcome = Outcome::new(name);
        match result {
            Ok(p) => {
                outcome.image = Some(image::cluster_reference(config, &p.image, &p.digest));
                outcome.digest = Some(p.digest.clone());
                outcome.profile.clone_from(&p.profile);
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
                let error = crate::error_chain(&e);
                // A build stopped for a newer save is not a failure: the next run follows.
                let superseded =
                    cancel.is_some_and(|c| c.load(std::sync::atomic::Ordering::Relaxed));
                if superseded {
                    tell(reporter, name, Phase::Push, "superseded by a newer save");
                } else {
                    tell(reporter, name, Phase::Failed, &error);
                }
                outcome.error = Some(error);
            }
        }
        outcomes.push(outcome);
    }
    if let Some(connected) = connected
        && !pushed.is_empty()
    {
        roll_pushed(config, connected, &pushed, &mut outcomes, flags, reporter).await;
    }
    for outcome in &mut outcomes {
        outcome.elapsed_ms = started.elapsed().as_millis() as u64;
    }
    Ok(outcomes)
}

/// Rolls every pushed component out and waits for it, recording each
/// result in its outcome.
async fn roll_pushed(
    config: &Config,
    connected: Connected,
    pushed: &[(usize, Pushed)],
    outcomes: &mut [Outcome],
    flags: PushFlags,
    reporter: &dyn Reporter,
) {
    let Reached {
        client,
        options,
        mut watches,
    } = match connected {
        Ok(connected) => connected,
        Err(e) => {
            let error = crate::error_chain(&e);
            for (i, _) in pushed {
                outcomes[*i].error = Some(error.clone());
                tell(reporter, &outcomes[*i].component, Phase::Failed, &error);
            }
            return;
        }
    };
    let rolling = Rolling {
        client: &client,
        config,
        options: &options,
        reporter,
    };
    let rolls = pushed.iter().map(|(i, p)| {
        let request = Roll {
            component: &p.component,
            spec: &config.components[&p.component],
            image: outcomes[*i].image.clone(),
            digest: Some(p.digest.clone()),
            restart: false,
            wait_for_termination: flags.wait_for_termination,
            watched: watches.remove(&p.component),
        };
        rolling.roll_and_wait(request)
    });
    let results = futures::future::join_all(rolls).await;
    for ((i, _), result) in pushed.iter().zip(results) {
        merge(&mut outcomes[*i], result);
    }
}

/// Re-applies the manifests (images pinned to their pushed digests), then
/// restarts `components` and waits for them.
pub async fn reload(
    config: &Config,
    components: &[String],
    flags: ReloadFlags,
    reporter: &dyn Reporter,
) -> Result<Vec<Outcome>, Error> {
    let timeout = flags.timeout;
    let started = Instant::now();
    for name in components {
        config.component(name)?;
    }
    let manifests = manifest::load(&config.manifests)?;
    let pull_secret = apply::PullSecret::of(config).map_err(apply::Error::from)?;
    let client = cluster_client(config).await?;
    let set = apply::ApplySet::of_environment(&config.name);
    // What the manifests and the configuration say must agree before
    // anything is applied, pruned or restarted.
    apply::refuse_everything(&client, &manifests, &set, flags.prune).await?;
    let outside = crate::targets::check(config, &manifests)?;
    crate::targets::check_in_cluster(&client, config, outside).await?;
    let _lock = lock::environment(config, reporter).await?;
    let state = State::load(&config.state_dir())?;
    let options = apply::Options {
        pins: &apply::pinned_images(config, &state),
        timeout,
        set: &set,
        prune: flags.prune,
        pull_secret: pull_secret.as_ref(),
    };
    match apply::apply_all(&client, &manifests, options).await {
        Ok(report) => report.pruning.report(reporter),
        Err(err) => {
            return Err(match node::node_down(config).await {
                Some(down) => down.into(),
                None => err.into(),
            });
        }
    }
    let rolling = Rolling {
        client: &client,
        config,
        options: &wait_options(config, timeout).await,
        reporter,
    };
    let rolls = components.iter().map(|name| {
        tell(reporter, name, Phase::Rollout, "restarting");
        let request = Roll {
            component: name,
            spec: &config.components[name],
            image: None,
            digest: state.images.get(name).map(|p| p.digest.clone()),
            restart: true,
            wait_for_termination: flags.wait_for_termination,
            watched: None,
        };
        rolling.roll_and_wait(request)
    });
    let results = futures::future::join_all(rolls).await;
    Ok(components
        .iter()
        .zip(results)
        .map(|(name, result)| {
            let mut outcome = Outcome::new(name);
            outcome.digest = state.images.get(name).map(|p| p.digest.clone());
            outcome.profile = state.images.get(name).and_then(|p| p.profile.clone());
            merge(&mut outcome, result);
            outcome.elapsed_ms = started.elapsed().as_millis() as u64;
            outcome
        })
        .collect())
}

/// How one component's roll ended well.
struct Settled {
    patched: bool,
    pods: Vec<String>,
    wait: Duration,
    terminating: usize,
}

/// Why one component's roll failed: the rollout's own error, or the node
/// that went down under it (then that is what to fix).
#[derive(Debug, thiserror::Error)]
enum RollError {
    #[error(transparent)]
    Rollout(#[from] rollout::Error),
    #[error(transparent)]
    NodeDown(#[from] node::Error),
}

fn merge(outcome: &mut Outcome, result: Result<Settled, RollError>) {
    match result {
        Ok(r) => {
            outcome.rolled_out = r.patched;
            outcome.pods = r.pods;
            outcome.wait_ms = r.wait.as_millis() as u64;
            outcome.terminating = r.terminating;
        }
        Err(e) => outcome.error = Some(crate::error_chain(&e)),
    }
}

/// What every roll of one command shares.
struct Rolling<'a> {
    client: &'a kube::Client,
    config: &'a Config,
    options: &'a WaitOptions,
    reporter: &'a dyn Reporter,
}

/// One component to roll: to `image` (or keeping its image), waiting for
/// `digest`, restarting it when `restart`.
struct Roll<'a> {
    /// Hold the wait until old pods are gone.
    wait_for_termination: bool,
    component: &'a str,
    /// The component as the config declares it.
    spec: &'a crate::config::Component,
    image: Option<String>,
    digest: Option<String>,
    restart: bool,
    /// The Deployment's watch, when it started before the roll.
    watched: Option<workload::DeploymentWatch>,
}

impl Rolling<'_> {
    async fn roll_and_wait(&self, mut roll: Roll<'_>) -> Result<Settled, RollError> {
        let name = roll.component;
        let watched = roll.watched.take();
        let result = self.roll_and_wait_inner(&roll, watched).await;
        match result {
            Ok(r) => {
                let detail = format!("{} pod(s) ready", r.pods.len());
                tell(self.reporter, name, Phase::Done, &detail);
                Ok(r)
            }
            Err(e) => {
                let err = match node::node_down(self.config).await {
                    Some(down) => RollError::NodeDown(down),
                    None => RollError::Rollout(e),
                };
                tell(
                    self.reporter,
                    name,
                    Phase::Failed,
                    &crate::error_chain(&err),
                );
                Err(err)
            }
        }
    }

    async fn roll_and_wait_inner(
        &self,
        roll: &Roll<'_>,
        watched: Option<workload::DeploymentWatch>,
    ) -> Result<Settled, rollout::Error> {
        let (client, options) = (self.client, self.options);
        let change = rollout::Change {
            image: roll.image.as_deref(),
            digest: roll.digest.as_deref(),
            restart: roll.restart,
            wait_for_termination: roll.wait_for_termination,
        };
        let rolled = rollout::roll(client, roll.spec, change, options.timeout).await?;
        let detail = if rolled.patched {
            "rolling out"
        } else {
            "already runs this digest; checking pods"
        };
        tell(self.reporter, roll.component, Phase::Wait, detail);
        let wait_started = Instant::now();
        let done = rollout::wait_watched(client, &rolled, options, watched).await?;
        Ok(Settled {
            patched: rolled.patched,
            pods: done.pods,
            wait: wait_started.elapsed(),
            terminating: done.terminating.len(),
        })
    }
}

impl std::fmt::Display for Outcome {
    /// The result line of one component: digest, upload, rollout, timing.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let o = self;
        let mut parts = vec![o.component.clone()];
        match (&o.digest, &o.profile) {
            (Some(digest), Some(profile)) => parts.push(format!("{digest} ({profile})")),
            (Some(digest), None) => parts.push(digest.clone()),
            _ => {}
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
        if o.terminating > 0 {
            parts.push(format!("{} old pod(s) still terminating", o.terminating));
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
            "profile": "dev",
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
            "profile",
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
            "worker  sha256:ab (dev)  uploaded 1.5 kB, 1 blob(s) already there  rolled out  2 pod(s) ready in 1.2s  2.5s"
        );
    }
}
