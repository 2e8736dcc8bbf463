//! The cargo workspace the builds come from: one `cargo metadata` per load,
//! run only when a component builds a cargo binary or the cluster is
//! `provider: sim`, confirms that every named package and binary exists, so
//! a misspelt one is found before anything is created.

use std::path::{Path, PathBuf};

use serde::Deserialize;
use xshell::{Shell, cmd};

use super::{Build, Config, Provider, check::Check};

/// The package the sim provider builds its node image from.
const SIM_PACKAGE: &str = "kube-sim";

/// The part of `cargo metadata --format-version 1 --no-deps` read here.
#[derive(Debug, Deserialize)]
struct Metadata {
    workspace_root: PathBuf,
    packages: Vec<Package>,
}

#[derive(Debug, Deserialize)]
struct Package {
    name: String,
    targets: Vec<Target>,
}

#[derive(Debug, Deserialize)]
struct Target {
    name: String,
    kind: Vec<String>,
}

impl Package {
    fn binaries(&self) -> Vec<&str> {
        self.targets
            .iter()
            .filter(|t| t.kind.iter().any(|k| k == "bin"))
            .map(|t| t.name.as_str())
            .collect()
    }
}

/// Why the workspace could not be read.
enum Unreadable {
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
}

fn wanted(config: &Config) -> Vec<Wanted<'_>> {
    let mut wanted = Vec::new();
    for (name, component) in &config.components {
        let (key, package, bin) = match &component.build {
            Build::Cargo { package, bin } => {
                (format!("components.{name}.build.cargo"), package, bin)
            }
            Build::Docker { cargo: Some(c), .. } => (
                format!("components.{name}.build.docker.cargo"),
                &c.package,
                &c.bin,
            ),
            Build::Docker { cargo: None, .. } => continue,
        };
        // An empty package is reported where it is declared.
        if !package.trim().is_empty() {
            wanted.push(Wanted { key, package, bin });
        }
    }
    wanted
}

/// `cargo metadata` run in `dir` through `$CARGO` (or `cargo`).
fn metadata(dir: &Path) -> Result<Metadata, Unreadable> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| String::from("cargo"));
    let sh = Shell::new().map_err(|e| Unreadable::Cargo(e.to_string()))?;
    sh.change_dir(dir);
    let output = cmd!(sh, "{cargo} metadata --format-version 1 --no-deps")
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
    /// Confirms the packages and binaries that builds name, and the
    /// `kube-sim` package of `provider: sim`, against the cargo workspace
    /// that holds the file's directory.
    pub(super) fn workspace(&mut self, config: &Config) {
        let wanted = wanted(config);
        let sim = config.cluster.provider == Provider::Sim;
        if wanted.is_empty() && !sim {
            return;
        }
        // The node image is built where `dev up` finds `kube-sim/`: the same
        // rule, so the check and the build never disagree.
        let sim_root = crate::lifecycle::sim_workspace(self.root);
        if sim && sim_root.is_none() {
            self.problem(
                "cluster.provider",
                format!(
                    "`provider: sim` builds the node image from the `{SIM_PACKAGE}` package, and there is no `{SIM_PACKAGE}/Cargo.toml` in {} or above it",
                    self.root.display()
                ),
                "keep this file inside a checkout that has `kube-sim/`, or use `provider: k3s`",
            );
        }
        let metadata = match metadata(self.root) {
            Ok(m) => m,
            Err(unreadable) => return self.unreadable(&wanted, sim, &unreadable),
        };
        for w in &wanted {
            self.binary(&metadata, w);
        }
        let same_workspace = sim_root.is_some_and(|r| paths_equal(&r, &metadata.workspace_root));
        if sim && same_workspace && !metadata.packages.iter().any(|p| p.name == SIM_PACKAGE) {
            self.problem(
                "cluster.provider",
                format!(
                    "`provider: sim` builds the node image from the `{SIM_PACKAGE}` package, and the cargo workspace at {} has none; it has: {}",
                    metadata.workspace_root.display(),
                    package_names(&metadata)
                ),
                format!("add `{SIM_PACKAGE}` to `[workspace] members`, or use `provider: k3s`"),
            );
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
                            "`provider: sim` builds the node image with cargo, and {root} is in no cargo workspace (no `Cargo.toml` there or above it)"
                        ),
                        "keep this file inside a checkout that has `kube-sim/`, or use `provider: k3s`",
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

fn package_names(metadata: &Metadata) -> String {
    let mut names: Vec<&str> = metadata.packages.iter().map(|p| p.name.as_str()).collect();
    names.sort_unstable();
    if names.is_empty() {
        String::from("no packages")
    } else {
        names.join(", ")
    }
}

fn paths_equal(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}
