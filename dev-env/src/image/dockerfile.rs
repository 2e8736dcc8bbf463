//! Dockerfiles dev-env builds without the engine.
//!
//! The usual Dockerfile of a Rust service starts from scratch, copies the
//! static binary dev-env built and staged at the root of the context, and
//! sets the user and the entrypoint. The engine takes seconds to build and
//! push such an image; assembled here the way [`super::oci`] assembles the
//! cargo backend's images, and pushed by dev-env's own client, it takes a
//! fraction of that. It is only worth it if the image is the one the engine
//! would have built, so [`plan`] accepts a small subset of Dockerfiles, read
//! exactly as the engine reads them, and turns everything else down with
//! [`NotPlannable`]: the caller then builds with the engine as before.
//!
//! The reference is the builder that builds the `docker` backend's images:
//! the engine's classic builder (builder version 1 of the build API, moby's
//! `builder/dockerfile`), which reads the Dockerfile with BuildKit's parser.
//!
//! The subset:
//!
//! - comments, blank lines, `\` line continuations, instructions in any case,
//!   and a `# syntax=` directive (the classic builder ignores it);
//! - one stage, `FROM scratch` or `FROM scratch AS <name>`; its config starts
//!   with the engine's default `PATH` ([`DEFAULT_PATH`]);
//! - `COPY [--chown=<uid>[:<gid>]] <src>... <dest>` and the JSON form, from
//!   the build context as the engine receives it: staged files first (with
//!   mode 0755, as the packed context has them), then the context directory
//!   less what `.dockerignore` excludes;
//! - `ENV` and `LABEL` (`k=v ...` and the legacy `k v`, quotes allowed),
//!   `USER`, `WORKDIR`, `ENTRYPOINT` and `CMD` (exec form, or shell form run
//!   by `/bin/sh -c`), `EXPOSE <port>[/tcp|/udp|/sctp]...`, `STOPSIGNAL`.
//!
//! Everything else is the engine's: other instructions, other parser
//! directives, build arguments and `$` anywhere, backslash escapes, flags
//! other than `--chown` (`--chmod` too: the classic builder refuses it),
//! user names in `--chown` (they need the image's `/etc/passwd`), wildcards,
//! `..`, URLs and the whole context as sources, symlinks, files with setuid,
//! setgid or sticky bits, and whatever the engine would reject, so that the
//! engine reports it in its own words.
//!
//! What the classic builder does, and so does [`assemble`]:
//!
//! - a source file keeps its mode; everything a COPY writes is owned by
//!   `--chown`'s IDs (a lone uid is also the gid), by 0:0 without it;
//! - a file goes to `<dest>/<its name>` when the destination ends with `/`
//!   or is a directory already, to `<dest>` otherwise; a relative destination
//!   is relative to the WORKDIR; several sources need a destination ending
//!   with `/`;
//! - a directory source copies its contents, modes kept, not itself; the
//!   destination directory, when new, gets mode 0755 and the COPY's owner;
//! - missing parent directories get mode 0755, and the COPY's owner when a
//!   file is copied, 0:0 when a directory is;
//! - `WORKDIR` creates its directory (0755, owner 0:0) and the ones above;
//! - `ENTRYPOINT` clears a `CMD` only when no `CMD` came before it in the
//!   stage; `ENV` replaces a variable in place, or appends it.
//!
//! The image has one layer (none when nothing is written, as the engine's),
//! holding the image's whole filesystem: entries sorted by path, mtime 0, no
//! user or group names, compressed as [`super::oci`] compresses its layers,
//! so the same inputs give the same digest every time.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};

use serde_json::json;

use super::context::{Ignore, OUTSIDE_DOCKERFILE};
use super::oci::{self, Blob};

mod assemble;
mod parse;

use assemble::*;
use parse::*;

/// The variable the engine starts a Linux stage from scratch with (moby's
/// `oci.DefaultPathEnv`).
pub const DEFAULT_PATH: &str = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// The shell that runs the shell form of `ENTRYPOINT` and `CMD` on Linux.
const SHELL: [&str; 2] = ["/bin/sh", "-c"];

/// The mode of staged files in the context the engine receives
/// ([`super::context::pack`]).
const STAGED_MODE: u32 = 0o755;

/// The mode of directories created on the way: by COPY, by WORKDIR, and by
/// the engine for context directories it only knows from their contents.
const DIR_MODE: u32 = 0o755;

/// Top-level paths of the init layer under the container the engine creates
/// to carry out `WORKDIR`: a directory made below them takes that layer's
/// metadata into the image instead of the image's own.
const INIT_LAYER: [&str; 5] = ["etc", "dev", "proc", "sys", ".dockerenv"];

/// Signal names the engine accepts for `STOPSIGNAL` on Linux, without `SIG`.
const SIGNALS: [&str; 34] = [
    "ABRT", "ALRM", "BUS", "CHLD", "CLD", "CONT", "FPE", "HUP", "ILL", "INT", "IO", "IOT", "KILL",
    "PIPE", "POLL", "PROF", "PWR", "QUIT", "SEGV", "STKFLT", "STOP", "SYS", "TERM", "TRAP", "TSTP",
    "TTIN", "TTOU", "URG", "USR1", "USR2", "VTALRM", "WINCH", "XCPU", "XFSZ",
];

/// Why a Dockerfile is left to the engine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotPlannable {
    /// The line the instruction starts on, from 1; `None` when the file as
    /// a whole is the reason.
    pub line: Option<usize>,
    /// The instruction, its continuation lines joined.
    pub instruction: String,
    /// What in it needs the engine.
    pub reason: String,
}

impl fmt::Display for NotPlannable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(line) => write!(
                f,
                "the engine builds it: line {line} `{}` needs it: {}",
                shorten(&self.instruction),
                self.reason
            ),
            None => write!(f, "the engine builds it: {}", self.reason),
        }
    }
}

impl std::error::Error for NotPlannable {}

/// A long instruction cut to a length that fits in a message.
fn shorten(text: &str) -> String {
    const MAX: usize = 72;
    if text.chars().count() <= MAX {
        return text.to_string();
    }
    let mut short: String = text.chars().take(MAX - 1).collect();
    short.push('…');
    short
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(
        "line {line} `{}`: `{path}` is not in the build context {} (file not found in build context or excluded by .dockerignore); add it there, or change the pattern of .dockerignore that excludes it",
        shorten(instruction),
        context.display()
    )]
    NotFound {
        line: usize,
        instruction: String,
        /// The source as the Dockerfile names it, relative to the context.
        path: String,
        context: PathBuf,
    },
    #[error("line {line} `{}`: cannot read {}", shorten(instruction), path.display())]
    Read {
        line: usize,
        instruction: String,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "line {line} `{}`: `/{path}` is a file in the image where a directory is needed; copy to another path, or do not put a file there",
        shorten(instruction)
    )]
    NotADirectory {
        line: usize,
        instruction: String,
        path: String,
    },
    /// Something the plan could not see, such as a symlink in the context:
    /// the engine builds the image.
    #[error(transparent)]
    NeedsEngine(#[from] NotPlannable),
    #[error("cannot write the image's layer")]
    Layer {
        #[source]
        source: std::io::Error,
    },
}

impl Error {
    /// Whether the image is one to build with the engine rather than a
    /// mistake to report.
    pub fn needs_engine(&self) -> bool {
        matches!(self, Error::NeedsEngine(_))
    }
}

/// What dev-env carries out for a Dockerfile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// The stage's name (`FROM scratch AS <name>`), lowercase as the engine
    /// keeps it.
    pub stage: Option<String>,
    /// What writes to the filesystem, in order.
    pub steps: Vec<Step>,
    /// The image's config after the last instruction.
    pub config: RunConfig,
    /// Every instruction as written, for the image's history.
    pub instructions: Vec<String>,
}

/// An instruction that writes to the filesystem.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    Copy(CopyStep),
    /// Creates the directory and the ones above it.
    Workdir {
        line: usize,
        /// Absolute and clean, such as `/app`.
        path: String,
    },
}

/// A COPY from the build context.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CopyStep {
    pub line: usize,
    pub instruction: String,
    /// Clean relative paths inside the context, such as `bin/server`.
    pub sources: Vec<String>,
    /// Absolute and clean (`/` for the root), resolved against the WORKDIR.
    pub dest: String,
    /// The destination as written ends with `/`: a directory.
    pub dest_is_dir: bool,
    /// The uid and gid of everything the COPY writes.
    pub owner: (u32, u32),
}

/// The config fields a Dockerfile sets; `None` and empty ones stay out of
/// the image's config.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunConfig {
    /// `NAME=value`, in the order the engine keeps them.
    pub env: Vec<String>,
    pub user: Option<String>,
    pub working_dir: Option<String>,
    pub entrypoint: Option<Vec<String>>,
    pub cmd: Option<Vec<String>>,
    /// `8080/tcp`.
    pub exposed_ports: BTreeSet<String>,
    pub labels: BTreeMap<String, String>,
    pub stop_signal: Option<String>,
}

/// Reads `dockerfile_text` as the engine would, for the build of stage
/// `target` (docker's `--target`): what dev-env carries out to build the
/// same image, or why the engine must.
pub fn plan(dockerfile_text: &str, target: Option<&str>) -> Result<Plan, NotPlannable> {
    let text = dockerfile_text
        .strip_prefix('\u{feff}')
        .unwrap_or(dockerfile_text);
    let lines = physical_lines(text)?;
    check_directives(&lines)?;
    let mut builder = Builder::default();
    for instruction in instructions(&lines) {
        builder.dispatch(&instruction)?;
    }
    builder.finish(target)
}

/// Assembles the image `plan` describes, reading sources from `staged`
/// (name at the context root, path on disk) and from the directory
/// `context` less what `ignore` excludes, for `platform`.
pub fn assemble(
    plan: &Plan,
    context: &Path,
    staged: &[(String, PathBuf)],
    ignore: &Ignore,
    platform: &crate::platform::Platform,
) -> Result<oci::Image, Error> {
    let view = ContextView {
        root: context,
        staged,
        ignore,
    };
    let mut tree = Tree::default();
    for step in &plan.steps {
        match step {
            Step::Workdir { line, path } => {
                tree.mkdir_all(&path[1..], DIR_MODE, (0, 0))
                    .map_err(|file| Error::NotADirectory {
                        line: *line,
                        instruction: format!("WORKDIR {path}"),
                        path: file,
                    })?;
            }
            Step::Copy(copy) => apply_copy(&mut tree, &view, copy)?,
        }
    }
    let layers = match tree.nodes.is_empty() {
        true => Vec::new(),
        false => vec![layer(&tree).map_err(|source| Error::Layer { source })?],
    };
    let config = image_config(plan, &layers, platform);
    Ok(oci::image(
        config,
        layers.into_iter().map(|(blob, _)| blob).collect(),
    ))
}

/// What names everything the image of `plan` is made from, as it is now:
/// the Dockerfile's text, the platform, `.dockerignore`, and the size,
/// modification time and inode of every source (staged files first, as
/// the assembly takes them; directories walked). `None` when a source
/// cannot be looked at: then the image is made anew, and the assembly
/// says why.
pub fn inputs_key(
    plan: &Plan,
    dockerfile_text: &str,
    context: &Path,
    staged: &[(String, PathBuf)],
    platform: &crate::platform::Platform,
) -> Option<String> {
    use sha2::{Digest, Sha256};
    let mut hasher = Sha256::new();
    let mut put = |part: &str| {
        hasher.update(part.as_bytes());
        hasher.update([0]);
    };
    put(dockerfile_text);
    put(&platform.to_string());
    put(&std::fs::read_to_string(context.join(".dockerignore")).unwrap_or_default());
    for step in &plan.steps {
        let Step::Copy(copy) = step else { continue };
        for source in &copy.sources {
            put(source);
            match staged.iter().find(|(name, _)| name == source) {
                Some((_, path)) => put(&super::kept::stamp(path).ok()?),
                None => stamp_tree(&context.join(source), &mut put)?,
            }
        }
    }
    Some(format!("sha256:{}", hex::encode(hasher.finalize())))
}

/// Puts the stamp of `path`, and of everything below it in name order.
fn stamp_tree(path: &Path, put: &mut impl FnMut(&str)) -> Option<()> {
    put(&super::kept::stamp(path).ok()?);
    if path.is_dir() {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(path)
            .ok()?
            .map(|e| e.map(|e| e.path()))
            .collect::<Result<_, _>>()
            .ok()?;
        entries.sort();
        for entry in entries {
            put(&entry.to_string_lossy());
            stamp_tree(&entry, put)?;
        }
    }
    Some(())
}

/// The image config: platform, run config, layers and history.
fn image_config(
    plan: &Plan,
    layers: &[(Blob, String)],
    platform: &crate::platform::Platform,
) -> serde_json::Value {
    let run = &plan.config;
    let mut config = serde_json::Map::new();
    config.insert("Env".into(), json!(run.env));
    let mut put = |key: &str, value: Option<serde_json::Value>| {
        if let Some(value) = value {
            config.insert(key.into(), value);
        }
    };
    put("User", run.user.as_ref().map(|u| json!(u)));
    put("WorkingDir", run.working_dir.as_ref().map(|w| json!(w)));
    put("Entrypoint", run.entrypoint.as_ref().map(|e| json!(e)));
    put("Cmd", run.cmd.as_ref().map(|c| json!(c)));
    let ports: serde_json::Map<_, _> = run
        .exposed_ports
        .iter()
        .map(|p| (p.clone(), json!({})))
        .collect();
    put("ExposedPorts", (!ports.is_empty()).then(|| json!(ports)));
    put(
        "Labels",
        (!run.labels.is_empty()).then(|| json!(run.labels)),
    );
    put("StopSignal", run.stop_signal.as_ref().map(|s| json!(s)));
    let diff_ids: Vec<&str> = layers.iter().map(|(_, diff_id)| diff_id.as_str()).collect();
    let mut history = json!({
        "created_by": format!("dev-env, without the engine: {}", plan.instructions.join("; ")),
    });
    if layers.is_empty() {
        history["empty_layer"] = json!(true);
    }
    let mut image = json!({
        "architecture": platform.architecture,
        "os": platform.os,
        "config": config,
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
        "history": [history],
    });
    if let Some(variant) = &platform.variant {
        image["variant"] = json!(variant);
    }
    image
}

#[cfg(test)]
mod tests;
