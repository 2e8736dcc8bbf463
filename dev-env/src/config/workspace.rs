//! The cargo workspace the builds come from: one `cargo metadata` per load,
//! run only when a component builds a cargo binary or the cluster is
//! `provider: sim`, confirms that every named package and binary exists, so
//! a misspelt one is found before anything is created, and tells where the
//! `kube-sim` sources of `provider: sim` are (`sim.rs`).

use std::path::{Path, PathBuf};

use serde::Deserialize;
use xshell::{Shell, cmd};

use super::{Build, Config, Provider, check::Check};

use super::sim::SimSource;

/// The root of the cargo workspace that `dir` belongs to: the nearest
/// directory at or above it whose `Cargo.toml` declares `[workspace]`, or
/// else `dir` itself (a package that is its own workspace). A command run
/// from a workspace's xtask passes the xtask's manifest directory.
pub fn workspace_root(dir: &Path) -> PathBuf {
    dir.ancestors()
        .find(|d| {
            std::fs::read_to_string(d.join("Cargo.toml"))
                .is_ok_and(|text| declares_workspace(&text))
        })
        .unwrap_or(dir)
        .to_path_buf()
}

/// Whether a `Cargo.toml` declares a `[workspace]` table.
fn declares_workspace(manifest: &str) -> bool {
    manifest.lines().any(|line| {
        let line = line.trim();
        line == "[workspace]" || line.starts_with("[workspace.")
    })
}

/// The part of `cargo metadata --format-version 1` read here.
#[derive(Debug, Deserialize)]
pub(crate) struct Metadata {
    pub(crate) workspace_root: PathBuf,
    pub(crate) packages: Vec<Package>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct Package {
    pub(crate) name: String,
    pub(crate) manifest_path: PathBuf,
    targets: Vec<Target>,
    #[serde(default)]
    pub(super) dependencies: Vec<Dependency>,
}

/// A package's dependency as declared; `path` is set for path dependencies.
#[derive(Debug, Deserialize)]
pub(super) struct Dependency {
    pub(super) name: String,
    pub(super) path: Option<PathBuf>,
}

#[derive(Debug, Deserialize)]
struct Target {
    name: String,
    kind: Vec<String>,
}

impl Package {
    pub(crate) fn binaries(&self) -> Vec<&str> {
        self.targets
            .iter()
            .filter(|t| t.kind.iter().any(|k| k == "bin"))
            .map(|t| t.name.as_str())
            .collect()
    }
}

/// Why the workspace could not be read.
pub(crate) enum Unreadable {
    /// No `Cargo.toml` in the directory or above it.
    NoWorkspace,
    /// cargo could not be run, or failed, or printed something else.
    Cargo(String),
}

/// A cargo binary a build names: the dotted key of its `cargo` map.
struct Wanted<'a> {
    key: String,
    package: &'a str,
    bin: &'a str,
    profile: &'a str,
}

fn wanted(config: &Config) -> Vec<Wanted<'_>> {
    let mut wanted = Vec::new();
    for (name, component) in &config.components {
        let (key, c) = match &component.build {
            Build::Cargo(c) => (format!("components.{name}.build.cargo"), c),
            Build::Docker { cargo: Some(c), .. } => {
                (format!("components.{name}.build.docker.cargo"), c)
            }
            Build::Docker { cargo: None, .. } => continue,
        };
        // An empty package is reported where it is declared.
        if !c.package.trim().is_empty() {
            wanted.push(Wanted {
                key,
                package: &c.package,
                bin: &c.bin,
                profile: &c.profile,
            });
        }
    }
    wanted
}

/// Which packages `cargo metadata` lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Listing {
    /// The workspace's members only (`--no-deps`): no resolution, offline.
    Members,
    /// Every package of the resolved graph on the image target, where git
    /// dependencies show their checkout.
    Resolved,
}

/// `cargo metadata` run in `dir` through `$CARGO` (or `cargo`).
pub(crate) fn metadata(dir: &Path, listing: Listing) -> Result<Metadata, Unreadable> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| String::from("cargo"));
    let sh = Shell::new().map_err(|e| Unreadable::Cargo(e.to_string()))?;
    sh.change_dir(dir);
    let target = crate::image::cargo::TARGET;
    let listing: &[&str] = match listing {
        Listing::Members => &["--no-deps"],
        Listing::Resolved => &["--filter-platform", target],
    };
    let output = cmd!(sh, "{cargo} metadata --format-version 1 {listing...}")
        .quiet()
        .ignore_status()
        .output()
        .map_err(|e| Unreadable::Cargo(e.to_string()))?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        if stderr.contains("could not find `Cargo.toml`") {
            return Err(Unreadable::NoWorkspace);
        }
        let last: Vec<&str> = stderr.trim().lines().rev().take(3).collect();
        let last: Vec<&str> = last.into_iter().rev().collect();
        return Err(Unreadable::Cargo(format!(
            "`{cargo} metadata` failed: {}",
            last.join(" ")
        )));
    }
    serde_json::from_slice(&output.stdout)
        .map_err(|e| Unreadable::Cargo(format!("`{cargo} metadata` printed no workspace: {e}")))
}

impl Check<'_> {
    /// Confirms the packages and binaries that builds name against the
    /// cargo workspace that holds the file's directory, and for `provider:
    /// sim` returns where the `kube-sim` sources are.
    pub(super) fn workspace(&mut self, config: &Config) -> Option<PathBuf> {
        let wanted = wanted(config);
        let sim = config.cluster.provider == Provider::Sim;
        if wanted.is_empty() && !sim {
            return None;
        }
        let metadata = match metadata(self.root, Listing::Members) {
            Ok(m) => m,
            Err(unreadable) => {
                self.unreadable(&wanted, sim, &unreadable);
                return None;
            }
        };
        for w in &wanted {
            self.binary(&metadata, w);
            self.profile(&metadata, w);
        }
        if !sim {
            return None;
        }
        match SimSource::find(self.root, &metadata) {
            Ok(source) => Some(source.root),
            Err(problem) => {
                self.problem("cluster.provider", problem.message, problem.fix);
                None
            }
        }
    }

    fn unreadable(&mut self, wanted: &[Wanted<'_>], sim: bool, unreadable: &Unreadable) {
        let root = self.root.display().to_string();
        match unreadable {
            Unreadable::NoWorkspace => {
                for w in wanted {
                    self.problem(
                        &format!("{}.package", w.key),
                        format!(
                            "builds package `{}` with cargo, and {root} is in no cargo workspace (no `Cargo.toml` there or above it)",
                            w.package
                        ),
                        "move this file into the workspace that holds the package, or use a `docker` build",
                    );
                }
                if sim && wanted.is_empty() {
                    self.problem(
                        "cluster.provider",
                        format!(
                            "`provider: sim` builds the node image from the `kube-sim` package, found through the cargo workspace around this file, and {root} is in no cargo workspace (no `Cargo.toml` there or above it)"
                        ),
                        "keep this file inside the cargo workspace whose xtask uses dev-env, or use `provider: k3s`",
                    );
                }
            }
            Unreadable::Cargo(reason) => {
                // Reported once, at the first key that needed the workspace.
                let key = wanted.first().map_or_else(
                    || String::from("cluster.provider"),
                    |w| format!("{}.package", w.key),
                );
                self.problem(
                    &key,
                    format!("cannot read the cargo workspace of {root}: {reason}"),
                    "make `cargo metadata` succeed there (is cargo installed, or `$CARGO` set? is `Cargo.toml` valid?)",
                );
            }
        }
    }

    fn binary(&mut self, metadata: &Metadata, w: &Wanted<'_>) {
        let Some(package) = metadata.packages.iter().find(|p| p.name == w.package) else {
            self.problem(
                &format!("{}.package", w.key),
                format!(
                    "no package `{}` in the cargo workspace at {}; it has: {}",
                    w.package,
                    metadata.workspace_root.display(),
                    package_names(metadata)
                ),
                "name one of those packages, or add this one to `[workspace] members`",
            );
            return;
        };
        let binaries = package.binaries();
        if binaries.contains(&w.bin) {
            return;
        }
        let bin_key = format!("{}.bin", w.key);
        let defaulted = if self.locations.has(&bin_key) {
            ""
        } else {
            " (`bin` defaults to the package name)"
        };
        let has = if binaries.is_empty() {
            String::from("none")
        } else {
            binaries.join(", ")
        };
        self.problem(
            &bin_key,
            format!(
                "package `{}` has no binary `{}`{defaulted}; its binaries: {has}",
                w.package, w.bin
            ),
            format!(
                "set `bin` to one of its binaries, or add `src/bin/{}.rs` to package `{}`",
                w.bin, w.package
            ),
        );
    }
}

impl Check<'_> {
    /// A profile other than cargo's own must be declared by the workspace's
    /// `Cargo.toml` (`[profile.<name>]`), where cargo looks for it.
    fn profile(&mut self, metadata: &Metadata, w: &Wanted<'_>) {
        if matches!(w.profile, "dev" | "release" | "test" | "bench") {
            return;
        }
        let manifest = metadata.workspace_root.join("Cargo.toml");
        let text = std::fs::read_to_string(&manifest).unwrap_or_default();
        if declares_profile(&text, w.profile) {
            return;
        }
        self.problem(
            &format!("{}.profile", w.key),
            format!(
                "{} declares no profile `{}`",
                manifest.display(),
                w.profile
            ),
            format!(
                "use `dev` or `release`, or add `[profile.{}]` (with `inherits = \"dev\"` or `\"release\"`) to that file",
                w.profile
            ),
        );
    }
}

/// Whether a `Cargo.toml` declares `[profile.<name>]` (or a table below it).
fn declares_profile(manifest: &str, name: &str) -> bool {
    let table = format!("[profile.{name}]");
    let below = format!("[profile.{name}.");
    manifest.lines().any(|line| {
        let line = line.trim();
        line == table || line.starts_with(&below)
    })
}

pub(super) fn package_names(metadata: &Metadata) -> String {
    let mut names: Vec<&str> = metadata.packages.iter().map(|p| p.name.as_str()).collect();
    names.sort_unstable();
    if names.is_empty() {
        String::from("no packages")
    } else {
        names.join(", ")
    }
}
