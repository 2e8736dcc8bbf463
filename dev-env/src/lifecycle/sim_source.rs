//! What the kube-sim node image is built from, as one hash, its label: an
//! unchanged simulator is never rebuilt, and a change elsewhere in the
//! workspace (another member's source, a dependency only others use) does
//! not rebuild it.
//!
//! The hash covers how the image is built (the [`Recipe`]: profile and
//! `--config` values), `kube-sim/` (sources and manifest, in path order,
//! tests excluded), the locked packages of kube-sim's dependency graph in
//! `Cargo.lock` (name, version, source and checksum), and what of the
//! workspace's `Cargo.toml` its build reads: `[workspace.package]`, the
//! `[workspace.dependencies]` entries kube-sim inherits, and the tables of
//! the recipe's profile.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

/// The package the node image is built from.
const PACKAGE: &str = "kube-sim";

/// How the node image's binary is built: what of the build the sources
/// alone do not say.
#[derive(Debug, Clone, Copy)]
pub struct Recipe<'a> {
    /// The cargo profile, such as `dev`.
    pub profile: &'a str,
    /// The `cargo --config` values the build adds.
    pub tuning: &'a [&'a str],
}

/// sha256 of what the node image of the workspace at `root` is built from,
/// and how.
pub fn hash(root: &Path, recipe: Recipe<'_>) -> std::io::Result<String> {
    let mut files = Vec::new();
    walk(&root.join(PACKAGE), &mut files)?;
    files.sort();
    let mut hasher = Sha256::new();
    let mut put = |part: &[u8]| {
        hasher.update(part);
        hasher.update([0]);
    };
    put(recipe.profile.as_bytes());
    for value in recipe.tuning {
        put(value.as_bytes());
    }
    for file in &files {
        put(file
            .strip_prefix(root)
            .unwrap_or(file)
            .to_string_lossy()
            .as_bytes());
        put(&std::fs::read(file)?);
    }
    let lock = std::fs::read_to_string(root.join("Cargo.lock"))?;
    for package in locked_graph(&lock, PACKAGE) {
        put(package.as_bytes());
    }
    let manifest = std::fs::read_to_string(root.join("Cargo.toml"))?;
    let own = std::fs::read_to_string(root.join(PACKAGE).join("Cargo.toml"))?;
    for line in workspace_inputs(&manifest, &inherited(&own), recipe.profile) {
        put(line.as_bytes());
    }
    Ok(hex::encode(hasher.finalize()))
}

/// Every file below `dir`, except under `target/` and `tests/`.
fn walk(dir: &Path, files: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            if path
                .file_name()
                .is_some_and(|n| n != "target" && n != "tests")
            {
                walk(&path, files)?;
            }
        } else {
            files.push(path);
        }
    }
    Ok(())
}

/// One `[[package]]` of a `Cargo.lock`.
#[derive(Debug, Default, Clone)]
struct Locked {
    name: String,
    version: String,
    /// `name version source checksum`, as hashed.
    line: String,
    /// As the lockfile names them: `name`, or `name version [(source)]`.
    dependencies: Vec<String>,
}

/// The packages `root` depends on, itself included, through the lockfile's
/// `dependencies` lists: each as `name version source checksum`, sorted.
fn locked_graph(lock: &str, root: &str) -> Vec<String> {
    let packages = parse_lock(lock);
    let mut by_name: BTreeMap<&str, Vec<&Locked>> = BTreeMap::new();
    for package in &packages {
        by_name.entry(&package.name).or_default().push(package);
    }
    let mut seen = BTreeSet::new();
    let mut pending: Vec<&Locked> = by_name.get(root).cloned().unwrap_or_default();
    while let Some(package) = pending.pop() {
        if !seen.insert(package.line.clone()) {
            continue;
        }
        for dependency in &package.dependencies {
            let mut words = dependency.split(' ');
            let name = words.next().unwrap_or_default();
            let version = words.next();
            let candidates = by_name.get(name).into_iter().flatten();
            pending.extend(candidates.filter(|p| version.is_none_or(|v| p.version == v)));
        }
    }
    seen.into_iter().collect()
}

/// The `[[package]]` tables of a `Cargo.lock`, as cargo writes them.
fn parse_lock(lock: &str) -> Vec<Locked> {
    let mut packages: Vec<Locked> = Vec::new();
    let mut fields: BTreeMap<&str, &str> = BTreeMap::new();
    let mut in_dependencies = false;
    let finish = |fields: &mut BTreeMap<&str, &str>, packages: &mut Vec<Locked>| {
        if let Some(last) = packages.last_mut() {
            let get = |key| fields.get(key).copied().unwrap_or_default();
            last.name = get("name").to_string();
            last.version = get("version").to_string();
            last.line = format!(
                "{} {} {} {}",
                last.name,
                last.version,
                get("source"),
                get("checksum")
            );
        }
        fields.clear();
    };
    for line in lock.lines().map(str::trim) {
        if line == "[[package]]" {
            finish(&mut fields, &mut packages);
            packages.push(Locked::default());
            in_dependencies = false;
        } else if in_dependencies {
            match line {
                "]" => in_dependencies = false,
                _ => {
                    let dependency = line.trim_end_matches(',').trim_matches('"');
                    if let Some(last) = packages.last_mut() {
                        last.dependencies.push(dependency.to_string());
                    }
                }
            }
        } else if line == "dependencies = [" {
            in_dependencies = true;
        } else if let Some((key, value)) = line.split_once(" = ") {
            fields.insert(key, value.trim_matches('"'));
        }
    }
    finish(&mut fields, &mut packages);
    packages
}

/// The dependencies a package's manifest inherits from the workspace
/// (`name.workspace = true`, `name = { workspace = true, ... }`).
fn inherited(manifest: &str) -> BTreeSet<String> {
    manifest
        .lines()
        .map(str::trim)
        .filter_map(|line| {
            let (key, value) = line.split_once('=')?;
            let key = key.trim();
            if let Some(name) = key.strip_suffix(".workspace") {
                return (value.trim() == "true").then(|| name.to_string());
            }
            let inline = value.replace(' ', "");
            inline.contains("workspace=true").then(|| key.to_string())
        })
        .collect()
}

/// The lines of the workspace's `Cargo.toml` a member's build reads:
/// `[workspace.package]`, the `[workspace.dependencies]` entries named in
/// `inherited`, and the tables of `profile` (`[profile.dev]`,
/// `[profile.dev.package.…]`, …).
fn workspace_inputs(manifest: &str, inherited: &BTreeSet<String>, profile: &str) -> Vec<String> {
    let own = format!("[profile.{profile}]");
    let overrides = format!("[profile.{profile}.");
    let mut table = "";
    let mut out = Vec::new();
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            table = line;
            continue;
        }
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let wanted = match table {
            "[workspace.package]" => true,
            "[workspace.dependencies]" => line
                .split_once('=')
                .is_some_and(|(key, _)| inherited.contains(key.trim())),
            t => t == own || t.starts_with(&overrides),
        };
        if wanted {
            out.push(format!("{table} {line}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOCK: &str = r#"# This file is automatically @generated by Cargo.
version = 4

[[package]]
name = "kube-sim"
version = "0.0.0"
dependencies = [
 "serde",
 "tokio",
]

[[package]]
name = "other"
version = "0.0.0"
dependencies = [
 "regex",
]

[[package]]
name = "regex"
version = "1.11.0"
source = "registry+https://github.com/rust-lang/crates.io-index"
checksum = "aaaa"

[[package]]
name = "serde"
version = "1.0.200"
source = "registry+https://github.com/rust-lang/crates.io-index"
checksum = "bbbb"

[[package]]
name = "tokio"
version = "1.50.0"
source = "registry+https://github.com/rust-lang/crates.io-index"
checksum = "cccc"
dependencies = [
 "pin-project-lite",
]

[[package]]
name = "pin-project-lite"
version = "0.2.16"
source = "registry+https://github.com/rust-lang/crates.io-index"
checksum = "dddd"
"#;

    const MANIFEST: &str = "[workspace]\nmembers = [\"kube-sim\", \"other\"]\n\n[workspace.package]\nedition = \"2024\"\n\n\
        [workspace.dependencies]\nserde = \"1\"\ntokio = { version = \"1.50\", features = [\"rt\"] }\nregex = \"1\"\n\n\
        [profile.release]\nopt-level = 3\n\n[profile.dev]\ndebug = false\n\n[profile.dev.package.serde]\nopt-level = 3\n";

    /// The node image's recipe in these tests.
    const RECIPE: Recipe<'static> = Recipe {
        profile: "dev",
        tuning: &["profile.dev.package.tokio.opt-level=1"],
    };

    /// A workspace of kube-sim and another member.
    fn workspace() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let write = |path: &str, text: &str| {
            let path = dir.path().join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        };
        write("Cargo.toml", MANIFEST);
        write("Cargo.lock", LOCK);
        write(
            "kube-sim/Cargo.toml",
            "[package]\nname = \"kube-sim\"\n\n[dependencies]\nserde.workspace = true\ntokio = { workspace = true, features = [\"net\"] }\n",
        );
        write("kube-sim/src/main.rs", "fn main() {}\n");
        write("kube-sim/tests/it.rs", "#[test]\nfn t() {}\n");
        write("other/src/lib.rs", "pub fn f() {}\n");
        dir
    }

    #[test]
    fn only_kube_sims_sources_and_dependency_graph_change_the_hash() {
        let dir = workspace();
        let root = dir.path();
        let edit = |path: &str, from: &str, to: &str| {
            let path = root.join(path);
            let text = std::fs::read_to_string(&path).unwrap();
            assert!(text.contains(from), "{from} in {}", path.display());
            std::fs::write(path, text.replace(from, to)).unwrap();
        };
        let first = hash(root, RECIPE).unwrap();
        // Outside the graph: another member's source, a locked package
        // only it uses, a dependency only it inherits, another profile,
        // kube-sim's tests.
        edit("other/src/lib.rs", "f()", "g()");
        edit("Cargo.lock", "checksum = \"aaaa\"", "checksum = \"eeee\"");
        edit("Cargo.toml", "regex = \"1\"", "regex = \"1.12\"");
        edit(
            "Cargo.toml",
            "opt-level = 3\n\n[profile.dev]",
            "opt-level = 2\n\n[profile.dev]",
        );
        edit("kube-sim/tests/it.rs", "fn t()", "fn u()");
        assert_eq!(hash(root, RECIPE).unwrap(), first);
        // Inside: each changes it.
        let mut seen = BTreeSet::from([first]);
        for (path, from, to) in [
            ("kube-sim/src/main.rs", "fn main() {}", "fn main() { () }"),
            ("Cargo.lock", "checksum = \"dddd\"", "checksum = \"ffff\""),
            (
                "Cargo.lock",
                "version = \"1.0.200\"",
                "version = \"1.0.201\"",
            ),
            (
                "Cargo.toml",
                "features = [\"rt\"]",
                "features = [\"rt\", \"fs\"]",
            ),
            ("Cargo.toml", "debug = false", "debug = true"),
            (
                "Cargo.toml",
                "serde]\nopt-level = 3",
                "serde]\nopt-level = 1",
            ),
            ("Cargo.toml", "edition = \"2024\"", "edition = \"2021\""),
        ] {
            edit(path, from, to);
            assert!(
                seen.insert(hash(root, RECIPE).unwrap()),
                "{path}: {from} -> {to}"
            );
        }
        // And so does how it is built.
        let tuned = Recipe {
            tuning: &["profile.dev.package.tokio.opt-level=2"],
            ..RECIPE
        };
        let release = Recipe {
            profile: "release",
            ..RECIPE
        };
        for recipe in [tuned, release] {
            assert!(seen.insert(hash(root, recipe).unwrap()), "{recipe:?}");
        }
    }

    #[test]
    fn the_graph_follows_the_lockfiles_dependency_lists() {
        let graph = locked_graph(LOCK, "kube-sim");
        let names: Vec<&str> = graph.iter().map(|l| l.split(' ').next().unwrap()).collect();
        assert_eq!(names, ["kube-sim", "pin-project-lite", "serde", "tokio"]);
        assert!(
            graph.contains(&String::from(
                "tokio 1.50.0 registry+https://github.com/rust-lang/crates.io-index cccc"
            )),
            "{graph:?}"
        );
    }
}
