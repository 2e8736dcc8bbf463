//! Progress of `push-image` and `reload`: a line per component with its
//! phase and elapsed time on a terminal, plain lines otherwise.

use std::{
    collections::HashMap,
    io::IsTerminal,
    sync::Mutex,
    time::{Duration, Instant},
};

use dev_env::deliver::{Phase, Progress};
use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

pub(crate) struct Bars {
    multi: Option<MultiProgress>,
    bars: Mutex<HashMap<String, ProgressBar>>,
    started: Instant,
    quiet: bool,
}

impl Bars {
    pub(crate) fn new(quiet: bool) -> Bars {
        let interactive = std::io::stderr().is_terminal() && !quiet;
        let multi =
            interactive.then(|| MultiProgress::with_draw_target(ProgressDrawTarget::stderr()));
        Bars {
            multi,
            bars: Mutex::new(HashMap::new()),
            started: Instant::now(),
            quiet,
        }
    }

    /// Leaves the bars as they are on screen.
    pub(crate) fn finish(&self) {
        for bar in self.bars.lock().expect("progress lock").values() {
            if !bar.is_finished() {
                bar.abandon();
            }
        }
    }
}

fn name(phase: Phase) -> &'static str {
    match phase {
        Phase::Push => "build+push",
        Phase::Rollout => "rollout",
        Phase::Wait => "wait",
        Phase::Done => "done",
        Phase::Failed => "failed",
    }
}

impl Progress for Bars {
    fn waiting(&self, waiting: &dev_env::lock::Waiting) {
        if !self.quiet {
            match &self.multi {
                Some(multi) => {
                    let _ = multi.println(waiting.to_string());
                }
                None => eprintln!("{waiting}"),
            }
        }
    }

    fn phase(&self, component: &str, phase: Phase, detail: &str) {
        let Some(multi) = &self.multi else {
            if !self.quiet || phase == Phase::Failed {
                let elapsed = self.started.elapsed().as_secs_f64();
                eprintln!("[{elapsed:>6.1}s] {component}: {}: {detail}", name(phase));
            }
            return;
        };
        let mut bars = self.bars.lock().expect("progress lock");
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
        let line = format!("{}: {detail}", name(phase));
        match phase {
            Phase::Done | Phase::Failed => bar.finish_with_message(line),
            _ => bar.set_message(line),
        }
    }
}
