//! The watch loop on the inner loop's project: from a saved one-line change
//! to the build starting, and to the session reporting Ready pods on the
//! new digest.

use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::{Error, Figure, step};
use crate::report::{Event, Reporter};
use crate::watch::{self, WatchOptions};

/// How long one save may take to be Ready.
const SAVE_TIMEOUT: Duration = Duration::from_secs(180);

/// Every event of the session, with when it came.
#[derive(Default)]
struct Clock(Mutex<Vec<(Instant, Event)>>);

impl Reporter for Clock {
    fn report(&self, event: &Event) {
        let mut events = self.0.lock().unwrap_or_else(|p| p.into_inner());
        events.push((Instant::now(), event.clone()));
    }
}

impl Clock {
    /// When the first event after `since` that `what` accepts came.
    fn first_after(&self, since: Instant, what: impl Fn(&Event) -> bool) -> Option<Instant> {
        let events = self.0.lock().unwrap_or_else(|p| p.into_inner());
        events
            .iter()
            .find(|(at, e)| *at >= since && what(e))
            .map(|(at, _)| *at)
    }

    /// Waits up to [`SAVE_TIMEOUT`] for such an event.
    async fn wait(&self, since: Instant, what: impl Fn(&Event) -> bool) -> Option<Instant> {
        let deadline = since + SAVE_TIMEOUT;
        while Instant::now() < deadline {
            if let Some(at) = self.first_after(since, &what) {
                return Some(at);
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        None
    }
}

/// A watch session to measure: the environment file, the component whose
/// source the saves change, and how the figures name the change.
pub struct Watched<'a> {
    pub file: &'a Path,
    pub component: &'a str,
    pub change: &'a str,
}

/// Runs a watch session of `watched.component` and saves `runs` one-line
/// changes of its source through `save`, each once the previous one is
/// Ready. Figures: save to build start (ms), save to Ready (s).
pub async fn watch_loop<F, Fut>(
    watched: Watched<'_>,
    runs: usize,
    save: F,
) -> Result<Vec<Figure>, Error>
where
    F: Fn(usize) -> Fut,
    Fut: std::future::Future<Output = Result<(), Error>>,
{
    let name = watched.component;
    let building = |e: &Event| matches!(e, Event::Component { component, detail, .. } if component == name && detail == "building");
    let ready = |e: &Event| matches!(e, Event::Ready { component, .. } if component == name);
    let file = watched.file;
    let clock = Clock::default();
    let options = WatchOptions {
        components: vec![name.to_string()],
        timeout: SAVE_TIMEOUT,
        wait_for_termination: false,
        prune: crate::apply::Prune::DECLARED,
    };
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let session = watch::run(file, &options, &clock, async {
        let _ = stopped.await;
    });
    let measure = async {
        let started = Instant::now();
        clock
            .wait(started, ready)
            .await
            .ok_or_else(|| step("the watch session").of("no first Ready"))?;
        let (mut to_build, mut to_ready) = (Vec::new(), Vec::new());
        for run in 0..runs {
            save(run).await?;
            let saved = Instant::now();
            let built = clock.wait(saved, building).await;
            let done = clock.wait(saved, ready).await;
            let (Some(built), Some(done)) = (built, done) else {
                return Err(step("a watched save").of("no Ready within the deadline"));
            };
            to_build.push(built.duration_since(saved).as_secs_f64() * 1000.0);
            to_ready.push(done.duration_since(saved).as_secs_f64());
        }
        Ok((to_build, to_ready))
    };
    let driver = async move {
        let measured: Result<_, Error> = measure.await;
        let _ = stop.send(());
        measured
    };
    let (ended, measured) = tokio::join!(session, driver);
    let (to_build, to_ready) = measured?;
    ended.map_err(|e| step("the watch session").of(e))?;
    let change = watched.change;
    Ok(vec![
        Figure::of(&format!("{change}: save to build start"), "ms", to_build),
        Figure::of(&format!("{change}: save to Ready"), "s", to_ready),
    ])
}
