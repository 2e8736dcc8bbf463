//! Where `provider: sim` finds kube-sim's sources: wherever cargo has the
//! `kube-sim` package for the workspace around the file. In order: a
//! member of that workspace, a path dependency of a member (both from the
//! `--no-deps` listing the load reads anyway), a package of the resolved
//! graph (a git dependency, in cargo's checkout), and last a `kube-sim/`
//! directory above the file (a project nested in a checkout of dev-env).
//!
//! A workspace that uses dev-env makes kube-sim visible by depending on it
//! in its xtask's `[dev-dependencies]`, which `cargo xtask` never compiles.
//! The node image is built in the workspace that holds `kube-sim/` (its
//! own `Cargo.lock`), so the same sources give the same source hash, and
//! the same image, wherever they are checked out.

use std::path::{Path, PathBuf};

use super::workspace::{Listing, Metadata, Unreadable, metadata, package_names};

/// The package the sim provider builds its node image from.
pub(super) const SIM_PACKAGE: &str = "kube-sim";

/// The directory whose `kube-sim/` holds the package.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct SimSource {
    pub(super) root: PathBuf,
}

/// Why no kube-sim sources were found, and the fix.
#[derive(Debug)]
pub(super) struct NotFound {
    pub(super) message: String,
    pub(super) fix: String,
}

/// Where the sources of `provider: sim` are for a file in `dir`, whose
/// workspace's members `members` lists; `None` when nowhere.
pub(crate) fn sim_source(dir: &Path, members: &Metadata) -> Option<PathBuf> {
    SimSource::find(dir, members).ok().map(|s| s.root)
}

impl SimSource {
    /// Finds the sources for a file in `dir`, whose workspace's members
    /// `members` lists.
    pub(super) fn find(dir: &Path, members: &Metadata) -> Result<SimSource, NotFound> {
        if let Some(manifest) = member_or_path_dependency(members) {
            return SimSource::of_manifest(&manifest);
        }
        let mut unresolved = None;
        match metadata(dir, Listing::Resolved) {
            Ok(resolved) => {
                if let Some(package) = first_named(&resolved) {
                    return SimSource::of_manifest(&package);
                }
            }
            Err(Unreadable::Cargo(reason)) => unresolved = Some(reason),
            Err(Unreadable::NoWorkspace) => {}
        }
        if let Some(root) = crate::lifecycle::sim_workspace(dir) {
            // `kube-sim/` in this very workspace, and no member of it: the
            // build (`-p kube-sim` there) would fail.
            if !paths_equal(&root, &members.workspace_root) {
                return Ok(SimSource { root });
            }
            return Err(NotFound {
                message: format!(
                    "`provider: sim` builds the node image from the `{SIM_PACKAGE}` package, and the cargo workspace at {} has none; it has: {}",
                    members.workspace_root.display(),
                    package_names(members)
                ),
                fix: format!(
                    "add `{SIM_PACKAGE}` to `[workspace] members`, or use `provider: k3s`"
                ),
            });
        }
        let resolved = match unresolved {
            Some(reason) => format!(" (its dependencies could not be listed: {reason})"),
            None => String::new(),
        };
        Err(NotFound {
            message: format!(
                "`provider: sim` builds the node image from the `{SIM_PACKAGE}` package's sources, and the cargo workspace at {} has none: no member, no path or git dependency named `{SIM_PACKAGE}`{resolved}, and no `{SIM_PACKAGE}/` above {}",
                members.workspace_root.display(),
                dir.display()
            ),
            fix: format!(
                "add `{SIM_PACKAGE}` to your xtask's `[dev-dependencies]` beside `dev-env-cli` (README.md, \"Use dev-env in your repository\"), or use `provider: k3s`"
            ),
        })
    }

    /// The sources of the package whose manifest is `manifest`: its
    /// directory must be `<root>/kube-sim`, as in dev-env's repository.
    fn of_manifest(manifest: &Path) -> Result<SimSource, NotFound> {
        let dir = manifest.parent().unwrap_or(manifest);
        match dir.parent() {
            Some(root) if dir.file_name().is_some_and(|n| n == SIM_PACKAGE) => Ok(SimSource {
                root: root.to_path_buf(),
            }),
            _ => Err(NotFound {
                message: format!(
                    "`provider: sim` builds the node image in the workspace that holds `{SIM_PACKAGE}/`, and the `{SIM_PACKAGE}` package cargo found is at {}",
                    dir.display()
                ),
                fix: format!(
                    "depend on `{SIM_PACKAGE}` from dev-env's repository (git or path), or use `provider: k3s`"
                ),
            }),
        }
    }
}

/// The manifest of a `kube-sim` member, or of a path dependency of a
/// member named `kube-sim`.
fn member_or_path_dependency(members: &Metadata) -> Option<PathBuf> {
    if let Some(manifest) = first_named(members) {
        return Some(manifest);
    }
    members
        .packages
        .iter()
        .flat_map(|p| &p.dependencies)
        .filter(|d| d.name == SIM_PACKAGE)
        .find_map(|d| d.path.as_ref())
        .map(|dir| dir.join("Cargo.toml"))
}

/// The manifest of the listed package named `kube-sim`; of several, the
/// first by manifest path, so the choice is stable.
fn first_named(metadata: &Metadata) -> Option<PathBuf> {
    metadata
        .packages
        .iter()
        .filter(|p| p.name == SIM_PACKAGE)
        .map(|p| p.manifest_path.clone())
        .min()
}

fn paths_equal(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listing(json: serde_json::Value) -> Metadata {
        serde_json::from_value(json).expect("a metadata listing")
    }

    fn package(name: &str, manifest: &str, dependencies: serde_json::Value) -> serde_json::Value {
        serde_json::json!({
            "name": name,
            "manifest_path": manifest,
            "targets": [],
            "dependencies": dependencies,
        })
    }

    #[test]
    fn a_member_is_found_before_a_path_dependency() {
        let members = listing(serde_json::json!({
            "workspace_root": "/ws",
            "packages": [
                package("xtask", "/ws/xtask/Cargo.toml", serde_json::json!([
                    {"name": "kube-sim", "path": "/elsewhere/kube-sim"},
                ])),
                package("kube-sim", "/ws/kube-sim/Cargo.toml", serde_json::json!([])),
            ],
        }));
        assert_eq!(
            member_or_path_dependency(&members),
            Some(PathBuf::from("/ws/kube-sim/Cargo.toml"))
        );
    }

    #[test]
    fn a_path_dependency_of_a_member_is_found() {
        let members = listing(serde_json::json!({
            "workspace_root": "/team",
            "packages": [
                package("xtask", "/team/xtask/Cargo.toml", serde_json::json!([
                    {"name": "dev-env-cli", "path": "/src/dev-env/dev-env-cli"},
                    {"name": "kube-sim", "path": "/src/dev-env/kube-sim"},
                ])),
            ],
        }));
        let manifest = member_or_path_dependency(&members).expect("found");
        assert_eq!(
            SimSource::of_manifest(&manifest).unwrap().root,
            Path::new("/src/dev-env")
        );
    }

    #[test]
    fn a_git_dependency_builds_in_its_checkout() {
        let checkout = "/home/u/.cargo/git/checkouts/dev-env-1a2b/abc1234";
        let resolved = listing(serde_json::json!({
            "workspace_root": "/team",
            "packages": [
                package("serde", "/home/u/.cargo/registry/src/x/serde-1.0.0/Cargo.toml", serde_json::json!([])),
                package("kube-sim", &format!("{checkout}/kube-sim/Cargo.toml"), serde_json::json!([])),
            ],
        }));
        assert!(member_or_path_dependency(&resolved).is_some());
        let manifest = first_named(&resolved).unwrap();
        assert_eq!(
            SimSource::of_manifest(&manifest).unwrap().root,
            Path::new(checkout)
        );
    }

    #[test]
    fn a_package_outside_a_kube_sim_directory_is_refused_with_where_it_is() {
        let err = SimSource::of_manifest(Path::new("/vendor/sim-1.0/Cargo.toml")).unwrap_err();
        assert!(err.message.contains("/vendor/sim-1.0"), "{}", err.message);
        assert!(err.fix.contains("provider: k3s"), "{}", err.fix);
    }
}
