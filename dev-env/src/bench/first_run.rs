//! A newcomer's first `cargo xtask dev up`: the repository cloned into a
//! temporary directory (an empty `target/`), its node image absent, timed
//! once from `cargo xtask` to the environment up, with a breakdown read off
//! the progress events `dev up --json` prints as they come.
//!
//! The clone's environment gets a name and a node image tag of its own, and
//! no fixed subnet, so it never meets the repository's own environment; it
//! is purged, and its image removed, when the run ends.

use std::{
    io::BufRead,
    path::Path,
    process::Stdio,
    time::{Duration, Instant},
};

use serde_json::Value;
use xshell::{Shell, cmd};

use super::{Error, Figure, step};

/// What a first run took.
#[derive(Debug, Clone, Default)]
struct Breakdown {
    /// `cargo build -p xtask` in the clone.
    xtask: f64,
    /// `cargo xtask dev up` after it, to its end.
    up: f64,
    /// The node image, from `building` to `built`.
    node_image: Option<f64>,
    /// Each component, from its push starting to its build's last
    /// progress (its crates all compiled).
    components: Vec<(String, f64)>,
}

/// Clones `root` into a temporary directory and times the first `dev up`
/// there, once. Blocking: it runs cargo and the whole environment.
pub fn first_run(root: &Path) -> Result<Vec<Figure>, Error> {
    let fail = step("the first run on a fresh clone");
    let dir = tempfile::Builder::new()
        .prefix("dev-env-first-run-")
        .tempdir()
        .map_err(|e| fail.of(e))?;
    let clone = dir.path().join("repo");
    let sh = Shell::new().map_err(|e| fail.of(e))?;
    cmd!(sh, "git clone --quiet --no-hardlinks {root} {clone}")
        .run()
        .map_err(|e| fail.of(e))?;
    let name = format!("first-run-{}", std::process::id());
    let image = format!("dev-env/kube-sim:{name}");
    own_environment(&clone.join("dev-env.yaml"), &name, &image).map_err(|e| fail.of(e))?;
    sh.change_dir(&clone);
    let measured = measure(&sh);
    // The environment and its image go, however the run ended.
    let _ = cmd!(sh, "cargo xtask -q dev reset --purge")
        .quiet()
        .ignore_stderr()
        .run();
    let _ = cmd!(sh, "docker image rm {image}")
        .quiet()
        .ignore_stdout()
        .ignore_stderr()
        .run();
    Ok(figures(&measured?))
}

/// Gives the clone's `dev-env.yaml` its own name, node image and subnet
/// (one the repository's own environment, up beside it, does not use).
fn own_environment(file: &Path, name: &str, image: &str) -> Result<(), Error> {
    let fail = step("rewriting the clone's dev-env.yaml");
    let text = std::fs::read_to_string(file).map_err(|e| fail.of(e))?;
    let mut config: Value = serde_yaml::from_str(&text).map_err(|e| fail.of(e))?;
    config["name"] = Value::from(name);
    let subnet = format!("10.253.{}.0/24", std::process::id() % 250);
    config["network"]["ipv4Subnet"] = Value::from(subnet);
    config["cluster"]["image"] = Value::from(image);
    let text = serde_yaml::to_string(&config).map_err(|e| fail.of(e))?;
    std::fs::write(file, text).map_err(|e| fail.of(e))
}

/// Times the xtask build, then `dev up --json`, stamping its events.
fn measure(sh: &Shell) -> Result<Breakdown, Error> {
    let fail = step("cargo xtask dev up on the fresh clone");
    let started = Instant::now();
    cmd!(sh, "cargo build -q -p xtask")
        .quiet()
        .run()
        .map_err(|e| fail.of(e))?;
    let xtask = started.elapsed().as_secs_f64();
    let up_started = Instant::now();
    let mut command: std::process::Command = cmd!(sh, "cargo xtask dev up --json").into();
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| fail.of(e))?;
    let stderr = child.stderr.take().expect("stderr is piped");
    let mut stamps = Stamps::default();
    // What is not an event (cargo's lines, the error) is kept for a failure.
    let mut said = Vec::new();
    for line in std::io::BufReader::new(stderr).lines() {
        let Ok(line) = line else { break };
        match serde_json::from_str::<Value>(&line) {
            Ok(event) => stamps.note(&event, up_started.elapsed()),
            Err(_) => said.push(line),
        }
    }
    let status = child.wait().map_err(|e| fail.of(e))?;
    if !status.success() {
        let last = said[said.len().saturating_sub(5)..].join("\n");
        return Err(fail.of(format!(
            "`cargo xtask dev up` exited with {status}:\n{last}"
        )));
    }
    Ok(Breakdown {
        xtask,
        up: up_started.elapsed().as_secs_f64(),
        node_image: stamps.node_image(),
        components: stamps.components(),
    })
}

/// When the events of interest came, from the start of `dev up`.
#[derive(Debug, Default)]
struct Stamps {
    node_building: Option<Duration>,
    node_built: Option<Duration>,
    /// Per component, when its push started and when its build last
    /// reported progress.
    components: Vec<(String, Duration, Option<Duration>)>,
}

impl Stamps {
    fn note(&mut self, event: &Value, at: Duration) {
        match event["event"].as_str() {
            Some("nodeImage") => match event["step"].as_str() {
                Some("building") => self.node_building = Some(at),
                Some("built") => self.node_built = Some(at),
                _ => {}
            },
            Some("pushing") => {
                let component = event["component"].as_str().unwrap_or_default();
                self.components.push((component.to_string(), at, None));
            }
            Some("buildProgress") => {
                let what = event["what"].as_str().unwrap_or_default();
                if let Some(entry) = self.components.iter_mut().find(|c| c.0 == what) {
                    entry.2 = Some(at);
                }
            }
            _ => {}
        }
    }

    fn node_image(&self) -> Option<f64> {
        Some((self.node_built? - self.node_building?).as_secs_f64())
    }

    fn components(&self) -> Vec<(String, f64)> {
        self.components
            .iter()
            .filter_map(|(name, from, to)| Some((name.clone(), ((*to)? - *from).as_secs_f64())))
            .collect()
    }
}

/// The run as figures: the total against the goal, then its parts.
fn figures(b: &Breakdown) -> Vec<Figure> {
    let one = |name: &str, seconds: f64| Figure::of(name, "s", vec![seconds]);
    let mut figures = vec![
        one("first dev up on a fresh clone: total", b.xtask + b.up),
        one("first dev up: compiling xtask", b.xtask),
        one("first dev up: dev up", b.up),
    ];
    if let Some(node) = b.node_image {
        figures.push(one("first dev up: node image", node));
    }
    for (component, seconds) in &b.components {
        figures.push(one(
            &format!("first dev up: building {component}"),
            *seconds,
        ));
    }
    figures
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_breakdown_is_read_off_the_events() {
        let mut stamps = Stamps::default();
        let events = [
            (r#"{"event":"nodeImage","image":"i","step":"building"}"#, 1),
            (
                r#"{"event":"pushing","component":"worker","why":"never pushed"}"#,
                2,
            ),
            (r#"{"event":"nodeImage","image":"i","step":"built"}"#, 61),
            (
                r#"{"event":"buildProgress","what":"worker","done":3,"total":9}"#,
                50,
            ),
            (
                r#"{"event":"buildProgress","what":"worker","done":9,"total":9}"#,
                92,
            ),
        ];
        for (line, at) in events {
            let event: Value = serde_json::from_str(line).unwrap();
            stamps.note(&event, Duration::from_secs(at));
        }
        assert_eq!(stamps.node_image(), Some(60.0));
        assert_eq!(stamps.components(), [(String::from("worker"), 90.0)]);
        let b = Breakdown {
            xtask: 30.0,
            up: 100.0,
            node_image: stamps.node_image(),
            components: stamps.components(),
        };
        let names: Vec<(String, f64)> = figures(&b)
            .into_iter()
            .map(|f| (f.name, f.median))
            .collect();
        assert_eq!(
            names[0],
            (String::from("first dev up on a fresh clone: total"), 130.0)
        );
        assert!(names.contains(&(String::from("first dev up: building worker"), 90.0)));
    }
}
