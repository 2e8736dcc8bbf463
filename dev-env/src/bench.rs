//! Benchmarks behind `cargo xtask bench`: figures measured on this machine,
//! reported as median, min and max over several runs. Nothing here is a
//! test: no figure is asserted.
//!
//! Four sets: the inner loop against the same change by hand, then under
//! `watch` ([`inner_loop`]), the loop on the repository's own operator
//! ([`operator_loop`]), a large layer against `curl` ([`blob_upload`]), and
//! kube-sim at scale ([`sim_scale`]).

mod first_run;
mod inner_loop;
mod operator;
mod scale;
mod upload;
mod watching;

use std::{
    path::Path,
    process::{Child, Stdio},
    time::{Duration, Instant},
};

use serde::Serialize;
use xshell::{Shell, cmd};

pub use self::{
    first_run::first_run,
    inner_loop::{app_source, inner_loop},
    operator::operator_loop,
    scale::sim_scale,
    upload::blob_upload,
};

/// The distribution registry binary from Debian's `docker-registry` package.
pub const DISTRIBUTION_BINARY: &str = "/usr/bin/docker-registry";

/// One reported figure.
#[derive(Debug, Clone, Serialize)]
pub struct Figure {
    pub name: String,
    pub unit: String,
    pub median: f64,
    pub min: f64,
    pub max: f64,
    pub runs: usize,
}

impl Figure {
    /// Summarises `samples` (at least one).
    pub fn of(name: &str, unit: &str, mut samples: Vec<f64>) -> Figure {
        samples.sort_by(f64::total_cmp);
        let n = samples.len();
        let median = if n % 2 == 1 {
            samples[n / 2]
        } else {
            (samples[n / 2 - 1] + samples[n / 2]) / 2.0
        };
        Figure {
            name: name.to_string(),
            unit: unit.to_string(),
            median,
            min: samples[0],
            max: samples[n - 1],
            runs: n,
        }
    }
}

/// The figures as a Markdown table.
pub fn markdown(figures: &[Figure]) -> String {
    let mut out = String::from(
        "| figure | median | min | max | unit | runs |\n|---|---:|---:|---:|---|---:|\n",
    );
    for f in figures {
        out.push_str(&format!(
            "| {} | {:.3} | {:.3} | {:.3} | {} | {} |\n",
            f.name, f.median, f.min, f.max, f.unit, f.runs
        ));
    }
    out
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{what}")]
    Step {
        what: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

/// A step of a benchmark, to name in its errors.
#[derive(Debug, Clone, Copy)]
struct Step<'a>(&'a str);

impl Step<'_> {
    /// The error of this step, keeping `cause` as its source.
    fn of(self, cause: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Error {
        Error::Step {
            what: self.0.to_string(),
            source: cause.into(),
        }
    }
}

fn step(what: &str) -> Step<'_> {
    Step(what)
}

/// A child process killed when dropped.
struct Process(Child);

impl Process {
    /// Starts `command` in the background with no stdio; a failure to start
    /// is an error of step `step`.
    fn spawn(command: xshell::Cmd<'_>, step: Step<'_>) -> Result<Process, Error> {
        let mut command: std::process::Command = command.into();
        let child = command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn();
        Ok(Process(child.map_err(|e| step.of(e))?))
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The distribution registry on a free loopback port, storage in `dir`.
async fn start_registry(dir: &Path) -> Result<(Process, String), Error> {
    let fail = step("starting the distribution registry");
    if !Path::new(DISTRIBUTION_BINARY).exists() {
        return Err(fail.of(format!(
            "{DISTRIBUTION_BINARY} is missing; `apt-get install -y docker-registry`"
        )));
    }
    let port = crate::docker::free_loopback_port().map_err(|e| fail.of(e))?;
    let config = dir.join("registry.yml");
    let text = format!(
        "version: 0.1\nlog: {{level: warn}}\nstorage: {{filesystem: {{rootdirectory: {}}}}}\nhttp: {{addr: 127.0.0.1:{port}}}\n",
        dir.join("data").display()
    );
    tokio::fs::write(&config, text)
        .await
        .map_err(|e| fail.of(e))?;
    let sh = Shell::new().map_err(|e| fail.of(e))?;
    let process = Process::spawn(cmd!(sh, "{DISTRIBUTION_BINARY} serve {config}"), fail)?;
    let deadline = Instant::now() + Duration::from_secs(15);
    while tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .is_err()
    {
        if Instant::now() > deadline {
            return Err(fail.of(format!("port {port} did not open within 15s")));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok((process, format!("127.0.0.1:{port}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_summarise_samples_and_render_as_a_table() {
        let f = Figure::of("x", "s", vec![3.0, 1.0, 2.0, 10.0, 4.0]);
        assert_eq!((f.median, f.min, f.max, f.runs), (3.0, 1.0, 10.0, 5));
        let even = Figure::of("y", "ms", vec![1.0, 3.0]);
        assert_eq!(even.median, 2.0);
        let table = markdown(&[f]);
        assert!(
            table.contains("| x | 3.000 | 1.000 | 10.000 | s | 5 |"),
            "{table}"
        );
    }
}
