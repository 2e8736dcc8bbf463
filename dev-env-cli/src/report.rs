//! How the library's events look: progress bars per component on a
//! terminal, plain lines otherwise, one JSON object per line with `--json`,
//! nothing under `--quiet`. Events go to stderr; stdout carries only a
//! command's result.

use std::{
    collections::HashMap,
    io::IsTerminal,
    sync::Mutex,
    time::{Duration, Instant},
};

use dev_env::report::{Event, Phase, Reporter};
use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

/// How events are shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    /// Bars on a terminal, plain lines otherwise.
    Human,
    /// One JSON object per event, on stderr.
    Json,
    /// One JSON object per event, on stdout: the result of `watch`.
    JsonOut,
    /// Nothing.
    Quiet,
}

/// The reporter of one command.
pub struct Terminal {
    style: Style,
    multi: Option<MultiProgress>,
    bars: Mutex<HashMap<String, ProgressBar>>,
    /// The bars of builds that compile, by what they build.
    builds: Mutex<HashMap<String, ProgressBar>>,
    /// When a build's progress was last printed as a line.
    printed: Mutex<HashMap<String, Instant>>,
    started: Instant,
}

/// How often a build's progress is printed as a line off a terminal.
const PROGRESS_LINES_EVERY: Duration = Duration::from_secs(5);

impl Terminal {
    pub fn new(style: Style) -> Terminal {
        let interactive = style == Style::Human && std::io::stderr().is_terminal();
        let multi =
            interactive.then(|| MultiProgress::with_draw_target(ProgressDrawTarget::stderr()));
        Terminal {
            style,
            multi,
            bars: Mutex::new(HashMap::new()),
            builds: Mutex::new(HashMap::new()),
            printed: Mutex::new(HashMap::new()),
            started: Instant::now(),
        }
    }

    /// Leaves the bars as they are on screen.
    pub fn finish(&self) {
        let builds = self.builds.lock().expect("progress lock");
        for bar in self
            .bars
            .lock()
            .expect("progress lock")
            .values()
            .chain(builds.values())
        {
            if !bar.is_finished() {
                bar.abandon();
            }
        }
    }

    /// A line above the bars, or on stderr.
    fn line(&self, text: &str) {
        match &self.multi {
            Some(multi) => {
                let _ = multi.println(text);
            }
            None => eprintln!("{text}"),
        }
    }

    /// A bar of `done`/`total` crates for what a build makes.
    fn build_bar(&self, multi: &MultiProgress, what: &str, done: usize, total: Option<usize>) {
        let mut builds = self.builds.lock().expect("progress lock");
        let bar = builds.entry(what.to_string()).or_insert_with(|| {
            let bar = multi.add(ProgressBar::new(0));
            bar.set_style(
                ProgressStyle::with_template("building {prefix} [{bar:30}] {pos}/{len} crates")
                    .expect("valid template")
                    .progress_chars("=> "),
            );
            bar.set_prefix(what.to_string());
            bar
        });
        bar.set_length(total.unwrap_or(done) as u64);
        bar.set_position(done as u64);
        if total.is_some_and(|t| done >= t) {
            bar.finish();
        }
    }

    /// Whether a progress line for `what` is due: the first, the last, and
    /// one every [`PROGRESS_LINES_EVERY`] between.
    fn progress_due(&self, what: &str, last: bool) -> bool {
        let mut printed = self.printed.lock().expect("progress lock");
        let due = last
            || printed
                .get(what)
                .is_none_or(|at| at.elapsed() >= PROGRESS_LINES_EVERY);
        if due {
            printed.insert(what.to_string(), Instant::now());
        }
        due
    }

    fn component(&self, multi: &MultiProgress, component: &str, phase: Phase, detail: &str) {
        let mut bars = self.bars.lock().expect("progress lock");
        // A component that runs again (under `watch`) gets a live bar again.
        if bars.get(component).is_some_and(|b| b.is_finished())
            && phase != Phase::Done
            && let Some(old) = bars.remove(component)
        {
            multi.remove(&old);
        }
        let bar = bars.entry(component.to_string()).or_insert_with(|| {
            let bar = multi.add(ProgressBar::new_spinner());
            bar.set_style(
                ProgressStyle::with_template("{spinner} {prefix:<20} [{elapsed:>4}] {msg}")
                    .expect("valid template"),
            );
            bar.set_prefix(component.to_string());
            bar.enable_steady_tick(Duration::from_millis(120));
            bar
        });
        let line = format!("{phase}: {detail}");
        match phase {
            Phase::Done | Phase::Failed => bar.finish_with_message(line),
            _ => bar.set_message(line),
        }
    }
}

impl Reporter for Terminal {
    fn report(&self, event: &Event) {
        match self.style {
            Style::Quiet => {}
            Style::Json => {
                if let Ok(line) = serde_json::to_string(event) {
                    eprintln!("{line}");
                }
            }
            Style::JsonOut => {
                if let Ok(line) = serde_json::to_string(event) {
                    outln!("{line}");
                }
            }
            Style::Human => match (event, &self.multi) {
                (
                    Event::Ready {
                        component, digest, ..
                    },
                    Some(multi),
                ) => {
                    let detail = event.to_string();
                    let detail = detail.split_once(": ").map_or(digest.as_str(), |(_, d)| d);
                    self.component(multi, component, Phase::Done, detail);
                }
                (
                    Event::Component {
                        component,
                        phase,
                        detail,
                    },
                    Some(multi),
                ) => self.component(multi, component, *phase, detail),
                (Event::BuildProgress { what, done, total }, Some(multi)) => {
                    self.build_bar(multi, what, *done, *total)
                }
                (Event::BuildProgress { what, done, total }, None) => {
                    if self.progress_due(what, total.is_some_and(|t| *done >= t)) {
                        self.line(&event.to_string());
                    }
                }
                (Event::Component { .. }, None) => {
                    let elapsed = self.started.elapsed().as_secs_f64();
                    eprintln!("[{elapsed:>6.1}s] {event}");
                }
                _ => self.line(&event.to_string()),
            },
        }
    }
}
