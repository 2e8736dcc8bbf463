//! The loop that turns by itself: bring the environment up, push what
//! changed, then rebuild, push, roll out and wait for every component whose
//! inputs are saved again, exactly as `push-image` does.
//!
//! The session holds the environment's lock from start to end, so no other
//! command changes the environment under it; its own steps run inside that
//! session. Saves are debounced (a quiet period of [`DEBOUNCE`]).
//! Components build in parallel, each at most once at a time: a save that
//! arrives while its component builds stops that build; one that arrives
//! while it pushes or rolls out lets that finish; either way the component
//! runs again, so what ends up running is the last saved content.
//! A failure is reported and the session goes on; the next save retries.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use futures::stream::{FuturesUnordered, StreamExt};
use notify_debouncer_full::notify::{EventKind, RecommendedWatcher, RecursiveMode};
use notify_debouncer_full::{DebounceEventResult, Debouncer, RecommendedCache, new_debouncer};
use tokio::sync::mpsc;

use super::inputs::{self, Inputs, Owner};
use crate::config::{self, Config};
use crate::deliver::{self, Outcome, PushFlags};
use crate::forward;
use crate::image::cargo::Cancel;
use crate::lifecycle::{self, UpOptions};
use crate::lock;
use crate::report::{Event, Reporter};

/// How long the files stay quiet before a batch of saves counts.
pub const DEBOUNCE: Duration = Duration::from_millis(200);
/// How long the watcher merges the events of one write (an editor's
/// create, write and rename of one save).
const MERGE: Duration = Duration::from_millis(20);

/// Why the session could not start or had to stop.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Config(#[from] config::Error),
    #[error(transparent)]
    Lock(#[from] lock::Error),
    #[error(transparent)]
    Up(#[from] lifecycle::Error),
    #[error(transparent)]
    Push(#[from] deliver::Error),
    #[error(transparent)]
    Forward(#[from] Box<forward::Error>),
    #[error("cannot tell what the components are built from")]
    Inputs(#[from] inputs::Error),
    #[error("cannot watch {}", dir.display())]
    Watch {
        dir: PathBuf,
        #[source]
        source: notify_debouncer_full::notify::Error,
    },
}

/// How the session runs.
#[derive(Debug, Clone)]
pub struct WatchOptions {
    /// The components to keep running; all declared when empty.
    pub components: Vec<String>,
    /// The deadline of each rollout.
    pub timeout: Duration,
    /// Hold each wait until old pods are gone, not only terminating.
    pub wait_for_termination: bool,
    /// What each `dev up` of the session prunes.
    pub prune: crate::apply::Prune,
}

/// One component's run: what it was, and when the save that started it came.
type Run<'a> = Pin<Box<dyn Future<Output = (String, Instant, Result<Outcome, String>)> + 'a>>;

/// What the loop keeps between batches.
struct Loop<'a> {
    config: Arc<Config>,
    options: &'a WatchOptions,
    reporter: &'a dyn Reporter,
    components: Vec<String>,
    /// The components that run, each with the flag that stops its build.
    running: BTreeMap<String, Cancel>,
    /// Components saved again while they ran, with the first such save.
    again: BTreeMap<String, Instant>,
    runs: FuturesUnordered<Run<'a>>,
    /// What the components are built from, as last derived.
    inputs: Inputs,
    /// The directories the watcher watches.
    watched: BTreeSet<PathBuf>,
}

/// `first` and every batch that follows it without [`DEBOUNCE`] of quiet.
async fn quiet(
    mut first: Vec<PathBuf>,
    saves: &mut mpsc::UnboundedReceiver<Vec<PathBuf>>,
) -> Vec<PathBuf> {
    while let Ok(Some(more)) = tokio::time::timeout(DEBOUNCE, saves.recv()).await {
        first.extend(more);
    }
    first.sort();
    first.dedup();
    first
}

/// Runs the session of the environment file `file` until `shutdown`
/// completes.
pub async fn run(
    file: &Path,
    options: &WatchOptions,
    reporter: &dyn Reporter,
    shutdown: impl Future<Output = ()>,
) -> Result<(), Error> {
    let config = Arc::new(Config::load(file)?);
    let components = if options.components.is_empty() {
        config.components.keys().cloned().collect()
    } else {
        options.components.clone()
    };
    for name in &components {
        config.component(name).map_err(deliver::Error::from)?;
    }
    let _session = lock::session(&config, reporter).await?;
    let up = UpOptions {
        recreate: false,
        verbose: false,
        timeout: options.timeout,
        prune: options.prune,
    };
    lifecycle::up(&config, up, reporter).await?;
    let mut forwarders = Vec::new();
    for name in &components {
        if !config.components[name].forward.is_empty() {
            forwarders.push(forward::bind(&config, name, &[]).await.map_err(Box::new)?);
        }
    }
    let inputs = Inputs::derive(&config)?;
    let mut turn = Loop {
        config,
        options,
        reporter,
        components,
        running: BTreeMap::new(),
        again: BTreeMap::new(),
        runs: FuturesUnordered::new(),
        inputs,
        watched: BTreeSet::new(),
    };
    let now = Instant::now();
    for name in turn.components.clone() {
        turn.start(&name, now);
    }
    // The declared forwards stay open, following rollouts, while the
    // session runs.
    let forwarding = async {
        futures::future::join_all(forwarders.into_iter().map(|f| f.run(reporter))).await;
        std::future::pending::<()>().await;
    };
    tokio::select! {
        result = turn.watch(shutdown) => result,
        () = forwarding => Ok(()),
    }
}

impl<'a> Loop<'a> {
    /// Watches the inputs and turns on every batch of saves until `shutdown`.
    async fn watch(&mut self, shutdown: impl Future<Output = ()>) -> Result<(), Error> {
        let mut shutdown = std::pin::pin!(shutdown);
        let (mut _debouncer, mut saves) = self.watcher()?;
        loop {
            tokio::select! {
                () = &mut shutdown => return Ok(()),
                Some(paths) = saves.recv() => {
                    let paths = quiet(paths, &mut saves).await;
                    if self.saved(paths).await? {
                        (_debouncer, saves) = self.watcher()?;
                    }
                }
                Some((name, saved, result)) = self.runs.next(), if !self.runs.is_empty() => {
                    self.finished(&name, saved, result);
                }
            }
        }
    }

    /// A watcher of every input directory (of the inputs derived anew), and
    /// the batches of saved paths.
    #[allow(clippy::type_complexity)]
    fn watcher(
        &mut self,
    ) -> Result<
        (
            Debouncer<RecommendedWatcher, RecommendedCache>,
            mpsc::UnboundedReceiver<Vec<PathBuf>>,
        ),
        Error,
    > {
        self.inputs = Inputs::derive(&self.config)?;
        let (tx, rx) = mpsc::unbounded_channel();
        let mut debouncer = new_debouncer(MERGE, None, move |result: DebounceEventResult| {
            // Reads (a build opening `Cargo.toml`) change nothing.
            let Ok(events) = result else { return };
            let paths: Vec<PathBuf> = events
                .into_iter()
                .filter(|e| !matches!(e.kind, EventKind::Access(_)))
                .flat_map(|e| e.event.paths)
                .collect();
            if !paths.is_empty() {
                let _ = tx.send(paths);
            }
        })
        .map_err(|source| Error::Watch {
            dir: self.config.root.clone(),
            source,
        })?;
        let dirs = self.inputs.directories();
        for dir in &dirs {
            debouncer
                .watch(dir, RecursiveMode::NonRecursive)
                .map_err(|source| Error::Watch {
                    dir: dir.clone(),
                    source,
                })?;
        }
        self.reporter.report(&Event::Watching {
            components: self.components.clone(),
            directories: dirs.len(),
        });
        self.watched = dirs;
        Ok((debouncer, rx))
    }

    /// Turns on a batch of saved paths; says whether the inputs must be
    /// watched anew (the environment file changed).
    async fn saved(&mut self, paths: Vec<PathBuf>) -> Result<bool, Error> {
        let now = Instant::now();
        let grown = paths
            .iter()
            .any(|p| self.inputs.is_new_directory(p, &self.watched));
        let mut touched = BTreeSet::new();
        let mut files = Vec::new();
        for path in &paths {
            let owners = self.inputs.owners(path);
            if !owners.is_empty() {
                let shown = path.strip_prefix(&self.config.root).unwrap_or(path);
                files.push(shown.display().to_string());
                touched.extend(owners);
            }
        }
        if touched.is_empty() {
            return Ok(grown);
        }
        self.reporter.report(&Event::Saved {
            touches: touched.iter().map(Owner::to_string).collect(),
            files,
        });
        let mut rewatch = grown;
        if touched.contains(&Owner::Config) {
            rewatch |= self.reload().await;
        } else if touched.contains(&Owner::Manifests) {
            self.converge().await;
        }
        for owner in &touched {
            if let Owner::Component(name) = owner
                && self.components.contains(name)
            {
                self.start(name, now);
            }
        }
        Ok(rewatch)
    }

    /// Reads the environment file again and converges on it; a file that
    /// does not load, or a change `dev up` refuses, is reported and the
    /// session keeps what it had.
    async fn reload(&mut self) -> bool {
        let config = match Config::load(&self.config.file) {
            Ok(config) => Arc::new(config),
            Err(e) => {
                self.warn(&e);
                return false;
            }
        };
        let up = self.up_options();
        if let Err(e) = lifecycle::up(&config, up, self.reporter).await {
            self.warn(&e);
            return false;
        }
        self.config = config;
        if self.options.components.is_empty() {
            self.components = self.config.components.keys().cloned().collect();
        }
        let now = Instant::now();
        for name in self.components.clone() {
            self.start(&name, now);
        }
        true
    }

    /// Applies the manifests again (images pinned) and waits for the
    /// environment to converge.
    async fn converge(&mut self) {
        let up = self.up_options();
        if let Err(e) = lifecycle::up(&self.config, up, self.reporter).await {
            self.warn(&e);
        }
    }

    fn up_options(&self) -> UpOptions {
        UpOptions {
            recreate: false,
            verbose: false,
            timeout: self.options.timeout,
            prune: self.options.prune,
        }
    }

    fn warn(&self, error: &(dyn std::error::Error + 'static)) {
        self.reporter.report(&Event::WatchProblem {
            message: crate::error_chain(error),
        });
    }

    /// Pushes `name` as `push-image` does, unless it runs already: then its
    /// build stops, if it still builds, and it runs again once this run ends.
    fn start(&mut self, name: &str, saved: Instant) {
        if let Some(cancel) = self.running.get(name) {
            cancel.store(true, Ordering::Relaxed);
            self.again.entry(name.to_string()).or_insert(saved);
            return;
        }
        let cancel = Cancel::default();
        self.running.insert(name.to_string(), cancel.clone());
        let config = self.config.clone();
        let flags = PushFlags {
            rollout: true,
            timeout: self.options.timeout,
            verbose: false,
            wait_for_termination: self.options.wait_for_termination,
        };
        let reporter = self.reporter;
        let name = name.to_string();
        self.runs.push(Box::pin(async move {
            let components = std::slice::from_ref(&name);
            let pushed =
                deliver::push_cancellable(&config, components, flags, &cancel, reporter).await;
            let result = match pushed {
                Ok(mut outcomes) if !outcomes.is_empty() => {
                    let outcome = outcomes.remove(0);
                    match outcome.error.clone() {
                        Some(error) => Err(error),
                        None => Ok(outcome),
                    }
                }
                Ok(_) => Err(String::from("nothing was pushed")),
                Err(e) => Err(crate::error_chain(&e)),
            };
            (name, saved, result)
        }));
    }

    /// A run ended: it is reported, and the component runs again when it
    /// was saved meanwhile.
    fn finished(&mut self, name: &str, saved: Instant, result: Result<Outcome, String>) {
        self.running.remove(name);
        // A failed push reported the failure with its reason already.
        if let Ok(outcome) = result {
            self.reporter.report(&Event::Ready {
                component: name.to_string(),
                digest: outcome.digest.unwrap_or_default(),
                since_save_ms: saved.elapsed().as_millis() as u64,
            });
        }
        if let Some(again) = self.again.remove(name) {
            self.start(name, again);
        }
    }
}
