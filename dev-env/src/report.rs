//! What the library has to say while it works: typed [`Event`]s handed to
//! one [`Reporter`]. The library never prints; the command line decides
//! how events look (a terminal with progress bars, plain lines, JSON, or
//! nothing under `--quiet`). Every event has a `Display`: the line a person
//! reads.

use std::fmt;

use serde::Serialize;

/// Where a command's events go.
pub trait Reporter: Sync {
    fn report(&self, event: &Event);
}

/// A reporter that drops everything.
#[derive(Debug, Clone, Copy, Default)]
pub struct Silent;

impl Reporter for Silent {
    fn report(&self, _event: &Event) {}
}

/// One thing worth telling while a command runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(
    tag = "event",
    rename_all = "camelCase",
    rename_all_fields = "camelCase"
)]
pub enum Event {
    /// Another run holds the environment's lock; this one waits.
    WaitingForLock {
        env: String,
        holder: Option<u32>,
    },
    /// A drifted object is removed to be made again (`--recreate`).
    Recreating {
        object: String,
        name: String,
    },
    Network {
        name: String,
        step: Step,
    },
    /// Containers attached again to a network that was recreated.
    NetworkReattached {
        name: String,
        containers: Vec<String>,
    },
    Registry {
        host: String,
        step: Step,
    },
    /// The declared registry image cannot be had; a local one is used.
    RegistryImageFallback {
        wanted: String,
        cause: String,
        local: String,
        /// Whether the local image is built now (else: built earlier).
        building: bool,
    },
    /// Something the user should know of the engine: how pods reach the
    /// host there.
    EngineNote {
        note: String,
    },
    /// The published sim node image cannot be had, or was built from other
    /// sources; it is built from the sources here instead.
    NodeImageFallback {
        image: String,
        cause: String,
    },
    /// The node image is being built (sim) or pulled (k3s).
    NodeImage {
        image: String,
        step: Step,
    },
    Node {
        container: String,
        step: Step,
        api_port: Option<u16>,
    },
    /// A node whose image was rebuilt is replaced.
    NodeReplaced {
        container: String,
    },
    /// An existing cluster is used as it is.
    ExistingCluster {
        context: String,
    },
    /// A component is pushed during `dev up`.
    Pushing {
        component: String,
        why: String,
    },
    Applied {
        objects: usize,
        changed: usize,
    },
    /// Objects deleted because no manifest declares them any more,
    /// `Kind/namespace/name`.
    Pruned {
        objects: Vec<String>,
    },
    /// A Namespace or CRD no manifest declares, kept: deleting it would
    /// delete `takes` too, which the prune does not (`--prune-destructive`).
    PruneHeld {
        object: String,
        takes: Vec<String>,
    },
    /// A member no manifest declares, annotated `dev-env.io/prune:
    /// disabled`: it left the set and stays.
    PruneReleased {
        object: String,
    },
    /// A component's progress through push-image or reload.
    Component {
        component: String,
        phase: Phase,
        detail: String,
    },
    /// A line a build printed (with `--verbose`).
    BuildOutput {
        line: String,
    },
    /// How far a build that compiles is: `done` of `total` crates.
    BuildProgress {
        /// What is built: a component, or the node image.
        what: String,
        done: usize,
        total: Option<usize>,
    },
    /// `watch` watches the inputs of `components` in `directories` directories.
    Watching {
        components: Vec<String>,
        directories: usize,
    },
    /// `watch` saw saves touching these components (or `manifests`, or the environment file).
    Saved {
        touches: Vec<String>,
        /// The saved files, relative to the environment file's directory.
        files: Vec<String>,
    },
    /// `watch` has Ready pods running `digest` of `component`, `since_save_ms` after the save.
    Ready {
        component: String,
        digest: String,
        since_save_ms: u64,
    },
    /// `watch` could not act on a save and goes on.
    WatchProblem {
        message: String,
    },
    /// A forward listens on `127.0.0.1:local` for the component's port `remote`.
    Forwarding {
        component: String,
        local: u16,
        remote: u16,
    },
    /// A forward's new connections go to `pod` (none: no Ready pod; they wait for one).
    ForwardTarget {
        component: String,
        pod: Option<String>,
    },
    /// A forwarded connection (on `local`; 0 for the forward as a whole) failed; the forward goes on.
    ForwardProblem {
        component: String,
        local: u16,
        message: String,
    },
}

/// What happened to one object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Step {
    Created,
    Started,
    /// It existed as declared and was left alone.
    Unchanged,
    Building,
    Built,
    Pulling,
    Pulled,
    /// Used as declared, nothing managed (an external registry).
    External,
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Step::Created => "created",
            Step::Started => "started",
            Step::Unchanged => "unchanged",
            Step::Building => "building",
            Step::Built => "built",
            Step::Pulling => "pulling",
            Step::Pulled => "pulled",
            Step::External => "external",
        })
    }
}

/// The phases a component goes through in push-image and reload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Phase {
    /// Build and push (with verification).
    Push,
    Rollout,
    Wait,
    Done,
    Failed,
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Phase::Push => "build+push",
            Phase::Rollout => "rollout",
            Phase::Wait => "wait",
            Phase::Done => "done",
            Phase::Failed => "failed",
        })
    }
}

impl fmt::Display for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Event::WaitingForLock { env, holder } => {
                let holder =
                    holder.map_or_else(|| String::from("pid unknown"), |p| format!("pid {p}"));
                write!(f, "waiting for another dev-env run on {env} ({holder})")
            }
            Event::Recreating { object, name } => write!(f, "recreating {object} `{name}`"),
            Event::Network { name, step } => write!(f, "network  {name}: {step}"),
            Event::NetworkReattached { name, containers } => {
                write!(f, "network  {name}: reattached {}", containers.join(", "))
            }
            Event::Registry { host, step } => write!(f, "registry {host}: {step}"),
            Event::RegistryImageFallback {
                wanted,
                cause,
                local,
                building: true,
            } => write!(
                f,
                "registry image `{wanted}` cannot be pulled ({cause}); building `{local}` from the distribution binary"
            ),
            Event::RegistryImageFallback {
                wanted,
                cause,
                local,
                building: false,
            } => write!(
                f,
                "registry image `{wanted}` cannot be pulled ({cause}); using `{local}`, built earlier from the distribution binary"
            ),
            Event::EngineNote { note } => write!(f, "engine   {note}"),
            Event::NodeImageFallback { image, cause } => write!(
                f,
                "node     image {image}: not pulled ({cause}); building it from kube-sim's sources"
            ),
            Event::NodeImage { image, step } => write!(f, "node     image {image}: {step}"),
            Event::Node {
                container,
                step,
                api_port: Some(port),
            } => write!(f, "node     {container}: {step} (API on 127.0.0.1:{port})"),
            Event::Node {
                container,
                step,
                api_port: None,
            } => write!(f, "node     {container}: {step}"),
            Event::NodeReplaced { container } => {
                write!(f, "node     {container}: replaced, its image was rebuilt")
            }
            Event::ExistingCluster { context } => {
                write!(f, "cluster  existing context `{context}`")
            }
            Event::Pushing { component, why } => write!(f, "pushing  {component} ({why})"),
            Event::Applied { objects, changed } => {
                write!(f, "applied  {objects} objects ({changed} changed)")
            }
            Event::Pruned { objects } => {
                write!(
                    f,
                    "pruned   {} object(s) no manifest declares: {}",
                    objects.len(),
                    objects.join(", ")
                )
            }
            Event::PruneHeld { object, takes } => {
                write!(
                    f,
                    "kept     {object}, no longer declared: deleting it would delete {} object(s) outside the set: {}; \
                     run with --prune-destructive to prune it and them",
                    takes.len(),
                    takes_list(takes)
                )
            }
            Event::PruneReleased { object } => write!(
                f,
                "kept     {object}, no longer declared: annotated dev-env.io/prune: disabled, it leaves the set"
            ),
            Event::Component {
                component,
                phase,
                detail,
            } => write!(f, "{component}: {phase}: {detail}"),
            Event::BuildOutput { line } => f.write_str(line.trim_end()),
            Event::BuildProgress { what, done, total } => match total {
                Some(total) => write!(f, "building {what}: {done}/{total} crates"),
                None => write!(f, "building {what}: {done} crates"),
            },
            Event::Watching {
                components,
                directories,
            } => write!(
                f,
                "watching {} ({directories} directories); Ctrl-C stops",
                components.join(", ")
            ),
            Event::Saved { touches, files } => {
                write!(f, "saved {}: {}", files.join(", "), touches.join(", "))
            }
            Event::Ready {
                component,
                digest,
                since_save_ms,
            } => write!(
                f,
                "{component}: ready {digest} ({:.1}s after the save)",
                *since_save_ms as f64 / 1000.0
            ),
            Event::WatchProblem { message } => write!(f, "watch: {message}"),
            Event::Forwarding {
                component,
                local,
                remote,
            } => write!(f, "forward  {component}: 127.0.0.1:{local} -> {remote}"),
            Event::ForwardTarget {
                component,
                pod: Some(pod),
            } => write!(f, "forward  {component}: to pod {pod}"),
            Event::ForwardTarget {
                component,
                pod: None,
            } => write!(
                f,
                "forward  {component}: no Ready pod; connections wait for one"
            ),
            Event::ForwardProblem {
                component,
                local: 0,
                message,
            } => write!(f, "forward  {component}: {message}"),
            Event::ForwardProblem {
                component,
                local,
                message,
            } => write!(f, "forward  {component} 127.0.0.1:{local}: {message}"),
        }
    }
}

/// The first few of `objects`, and how many more.
fn takes_list(objects: &[String]) -> String {
    const SHOWN: usize = 5;
    let mut text = objects
        .iter()
        .take(SHOWN)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    if objects.len() > SHOWN {
        text.push_str(&format!(" and {} more", objects.len() - SHOWN));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_read_as_lines_and_serialize_with_their_kind() {
        let cases = [
            (
                Event::WaitingForLock {
                    env: "demo".into(),
                    holder: Some(42),
                },
                "waiting for another dev-env run on demo (pid 42)",
            ),
            (
                Event::Registry {
                    host: "localhost:5001".into(),
                    step: Step::Created,
                },
                "registry localhost:5001: created",
            ),
            (
                Event::Node {
                    container: "demo-server-0".into(),
                    step: Step::Unchanged,
                    api_port: Some(6443),
                },
                "node     demo-server-0: unchanged (API on 127.0.0.1:6443)",
            ),
            (
                Event::Applied {
                    objects: 8,
                    changed: 0,
                },
                "applied  8 objects (0 changed)",
            ),
            (
                Event::PruneHeld {
                    object: "Namespace/shop".into(),
                    takes: (1..=7).map(|i| format!("Secret/shop/s{i}")).collect(),
                },
                "kept     Namespace/shop, no longer declared: deleting it would delete 7 object(s) outside the set: \
                 Secret/shop/s1, Secret/shop/s2, Secret/shop/s3, Secret/shop/s4, Secret/shop/s5 and 2 more; \
                 run with --prune-destructive to prune it and them",
            ),
            (
                Event::PruneReleased {
                    object: "ConfigMap/shop/keep".into(),
                },
                "kept     ConfigMap/shop/keep, no longer declared: annotated dev-env.io/prune: disabled, it leaves the set",
            ),
            (
                Event::Component {
                    component: "worker".into(),
                    phase: Phase::Push,
                    detail: "building".into(),
                },
                "worker: build+push: building",
            ),
        ];
        for (event, line) in cases {
            assert_eq!(event.to_string(), line);
            let text = event.to_string();
            assert!(!text.contains("Some(") && !text.contains('{'), "{text}");
        }
        let json = serde_json::to_value(Event::Node {
            container: "n".into(),
            step: Step::Created,
            api_port: Some(1),
        })
        .unwrap();
        assert_eq!(
            json,
            serde_json::json!({"event": "node", "container": "n", "step": "created", "apiPort": 1})
        );
    }
}
