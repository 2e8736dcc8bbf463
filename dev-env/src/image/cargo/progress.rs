//! Progress of a cargo build, read from its JSON messages
//! (`--message-format json-render-diagnostics`): one `compiler-artifact`
//! per crate compiled, `fresh` when it was already up to date.
//!
//! Nothing is sent while every crate is fresh, so an up-to-date build stays
//! silent; once a crate really compiles, the count is sent at most every
//! [`EVERY`], and once more when the build finishes. The total is the
//! number of packages `cargo tree` lists for the build, asked only when a
//! second crate compiles: a build that compiles one crate (a one-line
//! change) ends without waiting for `cargo tree`, its total the crates it
//! counted.

use std::io::{BufRead, BufReader, Read};
use std::time::{Duration, Instant};

use serde::Deserialize;

/// How often progress is sent at most.
pub const EVERY: Duration = Duration::from_millis(250);

/// How far a build is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    /// Crates compiled or found fresh.
    pub done: usize,
    /// Crates in the build, when known.
    pub total: Option<usize>,
}

/// The sending end of a build's progress.
pub type ProgressSender = tokio::sync::mpsc::UnboundedSender<Progress>;

#[derive(Deserialize)]
struct Message {
    reason: String,
    #[serde(default)]
    fresh: bool,
    #[serde(default)]
    target: Option<Target>,
}

#[derive(Deserialize)]
struct Target {
    #[serde(default)]
    kind: Vec<String>,
}

/// Reads cargo's messages from `stdout` until it closes, sending progress
/// to `sender`; `total` is asked once, when a second crate compiles.
pub fn follow(stdout: impl Read, sender: &ProgressSender, total: impl FnOnce() -> Option<usize>) {
    let mut total = Some(total);
    let mut known: Option<usize> = None;
    let mut done = 0;
    let mut compiled = 0;
    let mut last: Option<Instant> = None;
    let send = |done: usize, known: Option<usize>| {
        let _ = sender.send(Progress {
            done,
            total: known.map(|t| t.max(done)),
        });
    };
    for line in BufReader::new(stdout).lines() {
        let Ok(line) = line else { break };
        let Ok(message) = serde_json::from_str::<Message>(&line) else {
            continue;
        };
        match message.reason.as_str() {
            "compiler-artifact" => {
                let build_script = message
                    .target
                    .is_some_and(|t| t.kind.iter().any(|k| k == "custom-build"));
                if build_script {
                    continue;
                }
                done += 1;
                if !message.fresh {
                    compiled += 1;
                }
                if let Some(ask) = total.take_if(|_| compiled >= 2) {
                    known = ask();
                }
                if compiled > 0 && last.is_none_or(|at| at.elapsed() >= EVERY) {
                    send(done, known);
                    last = Some(Instant::now());
                }
            }
            "build-finished" if compiled > 0 => send(done, known.or(Some(done))),
            _ => {}
        }
    }
}

/// The number of distinct packages in `cargo tree`'s output (one per line
/// with `--prefix none`, repeats marked ` (*)`).
pub fn packages_in_tree(tree: &str) -> usize {
    let mut packages: Vec<&str> = tree
        .lines()
        .map(|l| l.trim_end_matches(" (*)").trim())
        .filter(|l| !l.is_empty())
        .collect();
    packages.sort_unstable();
    packages.dedup();
    packages.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn artifact(name: &str, fresh: bool, kind: &str) -> String {
        format!(
            r#"{{"reason":"compiler-artifact","package_id":"{name}","target":{{"kind":["{kind}"],"name":"{name}"}},"fresh":{fresh}}}"#
        )
    }

    fn run(lines: &[String]) -> Vec<Progress> {
        let (sender, mut receiver) = tokio::sync::mpsc::unbounded_channel();
        let text = lines.join("\n");
        follow(text.as_bytes(), &sender, || Some(4));
        drop(sender);
        let mut seen = Vec::new();
        while let Ok(p) = receiver.try_recv() {
            seen.push(p);
        }
        seen
    }

    #[test]
    fn an_up_to_date_build_sends_nothing() {
        let lines = [
            artifact("a", true, "lib"),
            artifact("b", true, "bin"),
            String::from(r#"{"reason":"build-finished","success":true}"#),
        ];
        assert_eq!(run(&lines), []);
    }

    #[test]
    fn a_compiling_build_counts_crates_but_not_build_scripts() {
        let lines = [
            artifact("a", true, "lib"),
            artifact("b", true, "custom-build"),
            artifact("b", false, "lib"),
            String::from("not json: ignored"),
            artifact("c", false, "bin"),
            String::from(r#"{"reason":"build-finished","success":true}"#),
        ];
        let seen = run(&lines);
        // The first crate that compiles is counted before the total is
        // known; the second asks for it.
        assert_eq!(
            seen.first(),
            Some(&Progress {
                done: 2,
                total: None
            })
        );
        assert_eq!(
            seen.last(),
            Some(&Progress {
                done: 3,
                total: Some(4)
            })
        );
    }

    #[test]
    fn a_build_that_compiles_one_crate_never_asks_for_the_total() {
        let (sender, mut receiver) = tokio::sync::mpsc::unbounded_channel();
        let lines = [
            artifact("a", true, "lib"),
            artifact("app", false, "bin"),
            String::from(r#"{"reason":"build-finished","success":true}"#),
        ]
        .join("\n");
        follow(lines.as_bytes(), &sender, || {
            panic!("cargo tree is not asked for one crate")
        });
        drop(sender);
        let mut seen = Vec::new();
        while let Ok(p) = receiver.try_recv() {
            seen.push(p);
        }
        assert_eq!(
            seen,
            [
                Progress {
                    done: 2,
                    total: None
                },
                Progress {
                    done: 2,
                    total: Some(2)
                }
            ]
        );
    }

    #[test]
    fn packages_are_counted_once() {
        let tree = "app v0.1.0 (/w/app)\nserde v1.0.0\nserde_derive v1.0.0 (proc-macro)\nserde v1.0.0 (*)\n";
        assert_eq!(packages_in_tree(tree), 3);
    }
}
