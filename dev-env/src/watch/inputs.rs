//! What each component is built from, derived and never listed by hand:
//!
//! - a `cargo` build: the package's directory and the directory of every
//!   local package it depends on (normal and build dependencies, through
//!   path dependencies and workspace members alike, from `cargo metadata`),
//!   plus the workspace's `Cargo.toml` and `Cargo.lock`;
//! - a `docker` build: its context (without what `.dockerignore` excludes),
//!   its Dockerfile, and the inputs of the `cargo` binary it stages.
//!
//! Besides, the manifests and the environment file. [`Inputs::owners`] says
//! what a changed path touches; paths git ignores, `target/`, `.git/`,
//! `.dev-env/` and editor temporaries touch nothing.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use serde::Deserialize;
use xshell::{Shell, cmd};

use crate::config::{Build, Config};
use crate::image::context::Ignore as DockerIgnore;

/// Why the inputs could not be derived.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot run `cargo metadata` in {dir}")]
    Cargo {
        dir: PathBuf,
        #[source]
        source: xshell::Error,
    },
    #[error("`cargo metadata` in {dir} failed: {stderr}")]
    Metadata { dir: PathBuf, stderr: String },
    #[error("`cargo metadata` in {dir} printed no workspace")]
    Parse {
        dir: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error("package `{package}` is not in the cargo workspace at {root}")]
    NoPackage { package: String, root: PathBuf },
    #[error("cannot read the `.dockerignore` of {context}")]
    DockerIgnore {
        context: PathBuf,
        #[source]
        source: Box<crate::image::context::Error>,
    },
}

/// What a changed path touches.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Owner {
    /// A component's build input.
    Component(String),
    /// A file of `manifests:`.
    Manifests,
    /// The environment file itself.
    Config,
}

impl std::fmt::Display for Owner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Owner::Component(name) => f.write_str(name),
            Owner::Manifests => f.write_str("manifests"),
            Owner::Config => f.write_str("the environment file"),
        }
    }
}

/// One component's inputs.
#[derive(Debug, Default)]
struct Sources {
    /// Directories whose whole tree is an input.
    trees: Vec<PathBuf>,
    /// Single files.
    files: Vec<PathBuf>,
    /// A Docker context with its `.dockerignore`: paths it excludes are not inputs.
    context: Option<(PathBuf, DockerIgnore)>,
}

impl Sources {
    fn holds(&self, path: &Path) -> bool {
        if self.files.iter().any(|f| f == path) || self.trees.iter().any(|t| path.starts_with(t)) {
            return true;
        }
        let Some((dir, ignore)) = &self.context else {
            return false;
        };
        let Ok(rel) = path.strip_prefix(dir) else {
            return false;
        };
        let rel = rel.to_string_lossy().replace('\\', "/");
        !ignore.is_excluded(&rel)
    }
}

/// Every component's inputs, the manifests and the environment file.
#[derive(Debug)]
pub struct Inputs {
    components: BTreeMap<String, Sources>,
    manifests: Vec<PathBuf>,
    config: PathBuf,
    ignored: Ignored,
}

impl Inputs {
    /// Derives the inputs of every component of `config`.
    pub fn derive(config: &Config) -> Result<Inputs, Error> {
        let mut metadata = None;
        let mut components = BTreeMap::new();
        for (name, component) in &config.components {
            let mut sources = Sources::default();
            let cargo = match &component.build {
                Build::Cargo(binary) => Some(&binary.package),
                Build::Docker {
                    context,
                    dockerfile,
                    cargo,
                    ..
                } => {
                    let ignore =
                        DockerIgnore::load(context).map_err(|source| Error::DockerIgnore {
                            context: context.clone(),
                            source: Box::new(source),
                        })?;
                    sources.context = Some((context.clone(), ignore));
                    sources.files.push(dockerfile.clone());
                    cargo.as_ref().map(|c| &c.package)
                }
            };
            if let Some(package) = cargo {
                let metadata = match &mut metadata {
                    Some(m) => m,
                    None => metadata.insert(Metadata::read(&config.root)?),
                };
                sources.trees.extend(metadata.local_closure(package)?);
                sources
                    .files
                    .push(metadata.workspace_root.join("Cargo.toml"));
                sources
                    .files
                    .push(metadata.workspace_root.join("Cargo.lock"));
            }
            components.insert(name.clone(), sources);
        }
        Ok(Inputs {
            components,
            manifests: config.manifests.clone(),
            config: config.file.clone(),
            ignored: Ignored::new(&config.root),
        })
    }

    /// The directories to watch, each on its own (not recursively): every
    /// directory of every tree that is not ignored, and the directory of
    /// every single file. A directory made later is watched once the
    /// inputs are derived again (see [`Inputs::is_new_directory`]).
    pub fn directories(&self) -> BTreeSet<PathBuf> {
        let mut trees: Vec<&Path> = Vec::new();
        let mut dirs = BTreeSet::new();
        for s in self.components.values() {
            trees.extend(s.trees.iter().map(PathBuf::as_path));
            trees.extend(s.context.iter().map(|(d, _)| d.as_path()));
            dirs.extend(
                s.files
                    .iter()
                    .filter_map(|f| f.parent().map(Path::to_path_buf)),
            );
        }
        for m in &self.manifests {
            if m.is_dir() {
                trees.push(m);
            } else {
                dirs.extend(m.parent().map(Path::to_path_buf));
            }
        }
        dirs.extend(self.config.parent().map(Path::to_path_buf));
        for tree in trees {
            self.walk(tree, &mut dirs);
        }
        dirs
    }

    /// Adds `dir` and every directory below it that is not ignored.
    fn walk(&self, dir: &Path, into: &mut BTreeSet<PathBuf>) {
        if self.ignored.ignores(dir) || !dir.is_dir() {
            return;
        }
        into.insert(dir.to_path_buf());
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                self.walk(&entry.path(), into);
            }
        }
    }

    /// Whether `path` is a directory made inside an input tree since the
    /// inputs were derived, so the watch must grow.
    pub fn is_new_directory(&self, path: &Path, watched: &BTreeSet<PathBuf>) -> bool {
        path.is_dir() && !watched.contains(path) && !self.owners(path).is_empty()
    }

    /// What the changed `path` touches; empty when it is ignored or no input.
    pub fn owners(&self, path: &Path) -> BTreeSet<Owner> {
        let mut owners = BTreeSet::new();
        if self.ignored.ignores(path) {
            return owners;
        }
        if path == self.config {
            owners.insert(Owner::Config);
        }
        if self
            .manifests
            .iter()
            .any(|m| path == m || path.starts_with(m))
        {
            owners.insert(Owner::Manifests);
        }
        for (name, sources) in &self.components {
            if sources.holds(path) {
                owners.insert(Owner::Component(name.clone()));
            }
        }
        owners
    }
}

/// What never counts as a change: what git ignores under the root, `target/`,
/// `.git/`, `.dev-env/`, and editor temporaries.
#[derive(Debug)]
struct Ignored {
    root: PathBuf,
    git: ignore::gitignore::Gitignore,
}

impl Ignored {
    fn new(root: &Path) -> Ignored {
        let mut builder = ignore::gitignore::GitignoreBuilder::new(root);
        for file in gitignore_files(root) {
            // An unreadable `.gitignore` ignores nothing, as with git.
            let _ = builder.add(file);
        }
        let git = builder
            .build()
            .unwrap_or_else(|_| ignore::gitignore::Gitignore::empty());
        Ignored {
            root: root.to_path_buf(),
            git,
        }
    }

    fn ignores(&self, path: &Path) -> bool {
        let temporary = path.file_name().and_then(|n| n.to_str()).is_some_and(|n| {
            n.ends_with(".swp") || n.ends_with('~') || n.starts_with(".#") || n == "4913"
        });
        // Only below the root: the project itself may live in a `target/`.
        let below = path.strip_prefix(&self.root).unwrap_or(path);
        let special = below
            .components()
            .any(|c| matches!(c.as_os_str().to_str(), Some("target" | ".git" | ".dev-env")));
        temporary
            || special
            || (path.starts_with(self.git.path())
                && self
                    .git
                    .matched_path_or_any_parents(path, path.is_dir())
                    .is_ignore())
    }
}

/// The `.gitignore` files under `root`, outside `target/` and `.git/`.
fn gitignore_files(root: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let name = entry.file_name();
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                if !matches!(name.to_str(), Some("target" | ".git" | ".dev-env")) {
                    dirs.push(path);
                }
            } else if name == ".gitignore" {
                found.push(path);
            }
        }
    }
    found
}

/// The part of `cargo metadata --format-version 1` read here.
#[derive(Debug, Deserialize)]
struct Metadata {
    workspace_root: PathBuf,
    packages: Vec<Package>,
    resolve: Resolve,
}

#[derive(Debug, Deserialize)]
struct Package {
    id: String,
    name: String,
    manifest_path: PathBuf,
    /// `None` for local packages (workspace members and path dependencies).
    source: Option<String>,
}

#[derive(Debug, Deserialize)]
struct Resolve {
    nodes: Vec<Node>,
}

#[derive(Debug, Deserialize)]
struct Node {
    id: String,
    deps: Vec<Dep>,
}

#[derive(Debug, Deserialize)]
struct Dep {
    pkg: String,
    dep_kinds: Vec<DepKind>,
}

#[derive(Debug, Deserialize)]
struct DepKind {
    /// `None` for a normal dependency, `dev` or `build` otherwise.
    kind: Option<String>,
}

impl Metadata {
    /// `cargo metadata` of the workspace that holds `dir`, through `$CARGO`.
    fn read(dir: &Path) -> Result<Metadata, Error> {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| String::from("cargo"));
        let sh = Shell::new().map_err(|source| Error::Cargo {
            dir: dir.to_path_buf(),
            source,
        })?;
        sh.change_dir(dir);
        let output = cmd!(sh, "{cargo} metadata --format-version 1")
            .quiet()
            .ignore_status()
            .output()
            .map_err(|source| Error::Cargo {
                dir: dir.to_path_buf(),
                source,
            })?;
        if !output.status.success() {
            return Err(Error::Metadata {
                dir: dir.to_path_buf(),
                stderr: String::from_utf8_lossy(&output.stderr).trim().to_string(),
            });
        }
        serde_json::from_slice(&output.stdout).map_err(|source| Error::Parse {
            dir: dir.to_path_buf(),
            source,
        })
    }

    /// The directories of `package` and of every local package it needs to
    /// build (dev-dependencies do not count).
    fn local_closure(&self, package: &str) -> Result<Vec<PathBuf>, Error> {
        let by_id: HashMap<&str, &Package> =
            self.packages.iter().map(|p| (p.id.as_str(), p)).collect();
        let start = self
            .packages
            .iter()
            .find(|p| p.name == package && p.source.is_none())
            .ok_or_else(|| Error::NoPackage {
                package: package.to_string(),
                root: self.workspace_root.clone(),
            })?;
        let nodes: HashMap<&str, &Node> = self
            .resolve
            .nodes
            .iter()
            .map(|n| (n.id.as_str(), n))
            .collect();
        let mut seen = BTreeSet::from([start.id.as_str()]);
        let mut todo = vec![start.id.as_str()];
        while let Some(id) = todo.pop() {
            let Some(node) = nodes.get(id) else { continue };
            for dep in &node.deps {
                let builds = dep
                    .dep_kinds
                    .iter()
                    .any(|k| k.kind.as_deref() != Some("dev"));
                let local = by_id
                    .get(dep.pkg.as_str())
                    .is_some_and(|p| p.source.is_none());
                if builds && local && seen.insert(dep.pkg.as_str()) {
                    todo.push(dep.pkg.as_str());
                }
            }
        }
        Ok(seen
            .into_iter()
            .filter_map(|id| by_id.get(id)?.manifest_path.parent().map(Path::to_path_buf))
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(path: &Path, text: &str) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    fn component(name: &str) -> BTreeSet<Owner> {
        BTreeSet::from([Owner::Component(name.to_string())])
    }

    /// A workspace where `api` and `job` share the path dependency `shared`,
    /// `job` has `testkit` only as a dev-dependency, and `site` is a Docker
    /// build whose context ignores `*.md`.
    fn workspace() -> (tempfile::TempDir, Config) {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        write(
            &root.join("Cargo.toml"),
            "[workspace]\nmembers = [\"api\", \"job\", \"libs/shared\", \"libs/testkit\"]\nresolver = \"2\"\n",
        );
        let package = |name: &str, deps: &str| {
            format!("[package]\nname = \"{name}\"\nversion = \"0.1.0\"\nedition = \"2021\"\n{deps}")
        };
        let shared = "[dependencies]\nshared = { path = \"../libs/shared\" }\n";
        write(&root.join("api/Cargo.toml"), &package("api", shared));
        write(&root.join("api/src/main.rs"), "fn main() {}\n");
        let job =
            format!("{shared}[dev-dependencies]\ntestkit = {{ path = \"../libs/testkit\" }}\n");
        write(&root.join("job/Cargo.toml"), &package("job", &job));
        write(&root.join("job/src/main.rs"), "fn main() {}\n");
        for lib in ["shared", "testkit"] {
            write(
                &root.join(format!("libs/{lib}/Cargo.toml")),
                &package(lib, ""),
            );
            write(&root.join(format!("libs/{lib}/src/lib.rs")), "\n");
        }
        write(
            &root.join("site/Dockerfile"),
            "FROM scratch\nCOPY index.html /\n",
        );
        write(&root.join("site/.dockerignore"), "*.md\n");
        write(&root.join(".gitignore"), "/scratch/\n*.log\n");
        write(&root.join("manifests/app.yaml"), "kind: List\n");
        let file = root.join("dev-env.yaml");
        write(
            &file,
            "name: w\ncomponents:\n  api:\n    image: api\n    build: {cargo: {package: api}}\n    rollout: {kind: Deployment, namespace: default, name: api}\n  job:\n    image: job\n    build: {cargo: {package: job}}\n    rollout: {kind: Deployment, namespace: default, name: job}\n  site:\n    image: site\n    build: {docker: {context: site}}\n    rollout: {kind: Deployment, namespace: default, name: site}\nmanifests: [manifests]\n",
        );
        let config = Config::load(&file).expect("the test environment loads");
        (dir, config)
    }

    #[test]
    fn a_change_touches_the_components_built_from_it() {
        let (dir, config) = workspace();
        let root = dir.path();
        let inputs = Inputs::derive(&config).unwrap();
        let owners = |rel: &str| inputs.owners(&root.join(rel));
        assert_eq!(owners("api/src/main.rs"), component("api"));
        assert_eq!(owners("job/src/main.rs"), component("job"));
        let both: BTreeSet<Owner> = component("api")
            .into_iter()
            .chain(component("job"))
            .collect();
        assert_eq!(
            owners("libs/shared/src/lib.rs"),
            both,
            "a shared path dependency"
        );
        assert_eq!(owners("Cargo.lock"), both);
        assert_eq!(owners("Cargo.toml"), both);
        assert!(
            owners("libs/testkit/src/lib.rs").is_empty(),
            "a dev-dependency"
        );
        assert_eq!(owners("site/index.html"), component("site"));
        assert_eq!(owners("site/Dockerfile"), component("site"));
        assert!(owners("site/README.md").is_empty(), ".dockerignore");
        assert_eq!(
            owners("manifests/app.yaml"),
            BTreeSet::from([Owner::Manifests])
        );
        assert_eq!(owners("dev-env.yaml"), BTreeSet::from([Owner::Config]));
    }

    #[test]
    fn ignored_paths_touch_nothing() {
        let (dir, config) = workspace();
        let root = dir.path();
        let inputs = Inputs::derive(&config).unwrap();
        for rel in [
            "api/target/debug/api",
            "target/release/api",
            ".git/index",
            ".dev-env/w/state.json",
            "api/src/.main.rs.swp",
            "api/src/main.rs~",
            "api/src/.#main.rs",
            "api/src/4913",
            "api/src/debug.log",
            "scratch/api/src/main.rs",
        ] {
            assert!(inputs.owners(&root.join(rel)).is_empty(), "{rel}");
        }
    }

    #[test]
    fn the_watched_directories_are_the_inputs_and_nothing_ignored() {
        let (dir, config) = workspace();
        let root = dir.path();
        std::fs::create_dir_all(root.join("api/target/debug")).unwrap();
        std::fs::create_dir_all(root.join("target/release")).unwrap();
        let inputs = Inputs::derive(&config).unwrap();
        let watched = inputs.directories();
        let want: BTreeSet<PathBuf> = [
            "",
            "api",
            "api/src",
            "job",
            "job/src",
            "libs/shared",
            "libs/shared/src",
            "site",
            "manifests",
        ]
        .iter()
        .map(|rel| {
            if rel.is_empty() {
                root.to_path_buf()
            } else {
                root.join(rel)
            }
        })
        .collect();
        assert_eq!(watched, want);
        std::fs::create_dir_all(root.join("api/src/handlers")).unwrap();
        assert!(inputs.is_new_directory(&root.join("api/src/handlers"), &watched));
        assert!(!inputs.is_new_directory(&root.join("api/src"), &watched));
        std::fs::create_dir_all(root.join("api/target/release")).unwrap();
        assert!(!inputs.is_new_directory(&root.join("api/target/release"), &watched));
    }
}
