//! `dev init`: a starting `dev-env.yaml` for the cargo workspace it runs
//! in, guessed from what is there. One component per binary package that
//! a manifest's Deployment or WorkerPool runs, matched by the last
//! component of the image's repository path; a `Dockerfile` next to the
//! package selects a `docker` build (with the binary built first when the
//! Dockerfile copies it), otherwise a `cargo` build. `provider: sim` when
//! kube-sim's sources are found as the sim provider finds them, `k3s`
//! otherwise. An existing file is never overwritten; what was guessed, and
//! what to check, comes back with the result.

mod scan;

use std::{
    collections::BTreeMap,
    fmt,
    io::Write as _,
    path::{Path, PathBuf},
};

use serde::Serialize;

use crate::{
    config::{self, Provider},
    manifest,
};
use scan::{Binary, Container};

/// The directories looked in for manifests, in this order.
const MANIFEST_DIRS: &[&str] = &["manifests", "k8s", "kubernetes", "deploy", "kube"];

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(
        "{} already exists, and `dev init` never overwrites a file; edit it (README.md describes every key), or move it away to start again",
        path.display()
    )]
    Exists { path: PathBuf },
    #[error("cannot read the cargo workspace at {}: {reason}; make `cargo metadata` succeed there", root.display())]
    Workspace { root: PathBuf, reason: String },
    #[error("cannot read the manifests")]
    Manifests(#[source] manifest::Error),
    #[error("cannot write {}", path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// What `dev init` guessed for a workspace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Guess {
    pub name: String,
    pub provider: String,
    /// The `manifests:` entries, relative to the workspace root.
    pub manifests: Vec<String>,
    pub components: BTreeMap<String, Component>,
    /// What to check before `dev up`.
    pub check: Vec<String>,
}

/// One guessed component.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Component {
    pub image: String,
    pub build: Build,
    pub rollout: Rollout,
    /// `file:line` of the workload that runs it.
    pub found_in: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Build {
    Cargo {
        package: String,
        bin: String,
    },
    Docker {
        /// The context, relative to the workspace root.
        context: String,
        dockerfile: String,
        /// The binary built first and added to the context root.
        cargo: Option<(String, String)>,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Rollout {
    pub kind: String,
    pub namespace: String,
    pub name: String,
    pub container: String,
}

/// The file `dev init` wrote and what it guessed.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Written {
    pub file: PathBuf,
    #[serde(flatten)]
    pub guess: Guess,
}

/// Guesses the environment of the workspace at `root` and writes it to
/// `file`, which must not exist.
pub fn init(root: &Path, file: &Path) -> Result<Written, Error> {
    if file.exists() {
        return Err(Error::Exists {
            path: file.to_path_buf(),
        });
    }
    let mut guess = guess(root)?;
    if let Some(dir) = file.parent() {
        guess.rebase(root, dir);
    }
    let write = |source| Error::Write {
        path: file.to_path_buf(),
        source,
    };
    // `create_new`: a file made meanwhile is not overwritten either.
    let mut out = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(file)
        .map_err(|source| match source.kind() {
            std::io::ErrorKind::AlreadyExists => Error::Exists {
                path: file.to_path_buf(),
            },
            _ => write(source),
        })?;
    out.write_all(render(&guess).as_bytes()).map_err(write)?;
    Ok(Written {
        file: file.to_path_buf(),
        guess,
    })
}

/// What `dev init` would write for the workspace at `root`.
pub fn guess(root: &Path) -> Result<Guess, Error> {
    let members = config::metadata(root, config::Listing::Members).map_err(|unreadable| {
        Error::Workspace {
            root: root.to_path_buf(),
            reason: match unreadable {
                config::Unreadable::NoWorkspace => {
                    String::from("no `Cargo.toml` there or above it")
                }
                config::Unreadable::Cargo(reason) => reason,
            },
        }
    })?;
    let binaries: Vec<Binary> = members
        .packages
        .iter()
        .flat_map(|p| {
            p.binaries().into_iter().map(|bin| Binary {
                package: p.name.clone(),
                bin: bin.to_string(),
            })
        })
        .collect();
    let manifests: Vec<String> = MANIFEST_DIRS
        .iter()
        .filter(|d| root.join(d).is_dir())
        .map(ToString::to_string)
        .collect();
    let paths: Vec<PathBuf> = manifests.iter().map(|d| root.join(d)).collect();
    let documents = manifest::load(&paths).map_err(Error::Manifests)?;
    let containers = scan::containers(&documents, root);
    let mut check = Vec::new();
    let components = components(root, &containers, &binaries, &members, &mut check);
    let provider = match config::sim_source(root, &members) {
        Some(_) => Provider::Sim,
        None => {
            check.push(String::from(
                "`provider: k3s` pulls docker.io/rancher/k3s: no `kube-sim` package was found; add it to the xtask's `[dev-dependencies]` for the offline `provider: sim`",
            ));
            Provider::K3s
        }
    };
    if manifests.is_empty() {
        check.push(format!(
            "no manifest directory ({}) was found: list your manifests under `manifests:`, and add components by hand",
            MANIFEST_DIRS.join(", ")
        ));
    }
    let name = environment_name(root);
    check.extend(general_checks(&name));
    Ok(Guess {
        name,
        provider: provider.to_string(),
        manifests,
        components,
        check,
    })
}

impl Guess {
    /// Makes the paths, relative to the workspace root `root`, relative to
    /// `dir`, where the file goes (absolute when `dir` is not above them).
    fn rebase(&mut self, root: &Path, dir: &Path) {
        let base = match root.strip_prefix(dir) {
            Ok(below) => below.to_path_buf(),
            Err(_) => root.to_path_buf(),
        };
        if base.as_os_str().is_empty() {
            return;
        }
        let rebased = |path: &str| base.join(path).to_string_lossy().into_owned();
        for m in &mut self.manifests {
            *m = rebased(m);
        }
        for c in self.components.values_mut() {
            if let Build::Docker { context, .. } = &mut c.build {
                *context = rebased(context);
            }
        }
    }
}

/// One component per binary package a rollout target runs.
fn components(
    root: &Path,
    containers: &[Container],
    binaries: &[Binary],
    members: &config::Metadata,
    check: &mut Vec<String>,
) -> BTreeMap<String, Component> {
    let mut components = BTreeMap::new();
    for c in containers {
        let Some(binary) = scan::binary_of(&c.repository, binaries) else {
            check.push(format!(
                "image `{}` of {} ({}) is no binary of this workspace: not a component",
                c.repository, c.workload, c.found_in
            ));
            continue;
        };
        let Some(kind) = c.kind else {
            check.push(format!(
                "{} ({}) runs `{}` of package `{}`, and dev-env rolls out Deployments and WorkerPools only: not a component",
                c.workload, c.found_in, binary.bin, binary.package
            ));
            continue;
        };
        if let Some(first) = components.get(&binary.package) {
            let first: &Component = first;
            check.push(format!(
                "{} ({}) also runs package `{}`; the component rolls out {} {}/{} only",
                c.workload,
                c.found_in,
                binary.package,
                first.rollout.kind,
                first.rollout.namespace,
                first.rollout.name
            ));
            continue;
        }
        let namespace = c.namespace.clone().unwrap_or_else(|| {
            check.push(format!(
                "{} ({}) declares no namespace: the component's rollout says `default`",
                c.workload, c.found_in
            ));
            String::from("default")
        });
        let build = build(root, binary, members, check);
        components.insert(
            binary.package.clone(),
            Component {
                image: c.repository.clone(),
                build,
                rollout: Rollout {
                    kind: kind.to_string(),
                    namespace,
                    name: c.name.clone(),
                    container: c.container.clone(),
                },
                found_in: c.found_in.clone(),
            },
        );
    }
    let used: Vec<&str> = components.keys().map(String::as_str).collect();
    for b in binaries
        .iter()
        .filter(|b| !used.contains(&b.package.as_str()))
    {
        if b.package != "xtask" {
            check.push(format!(
                "binary `{}` of package `{}` runs in no Deployment or WorkerPool of the manifests: not a component",
                b.bin, b.package
            ));
        }
    }
    components
}

/// A `docker` build when the package has a Dockerfile, else a `cargo` one.
fn build(
    root: &Path,
    binary: &Binary,
    members: &config::Metadata,
    check: &mut Vec<String>,
) -> Build {
    let cargo = || Build::Cargo {
        package: binary.package.clone(),
        bin: binary.bin.clone(),
    };
    let manifest = members
        .packages
        .iter()
        .find(|p| p.name == binary.package)
        .map(|p| p.manifest_path.clone());
    let Some(dir) = manifest.as_deref().and_then(Path::parent) else {
        return cargo();
    };
    let Ok(dockerfile) = std::fs::read_to_string(dir.join("Dockerfile")) else {
        return cargo();
    };
    let context = dir
        .strip_prefix(root)
        .unwrap_or(dir)
        .to_string_lossy()
        .into_owned();
    let copies = scan::copies_binary(&dockerfile, &binary.bin);
    check.push(if copies {
        format!(
            "{context}/Dockerfile copies the binary `{}`: dev-env builds it statically first and adds it to the context root",
            binary.bin
        )
    } else {
        format!(
            "{context}/Dockerfile builds package `{}` itself: check that the context `{context}` holds what it copies",
            binary.package
        )
    });
    Build::Docker {
        context,
        dockerfile: String::from("Dockerfile"),
        cargo: copies.then(|| (binary.package.clone(), binary.bin.clone())),
    }
}

fn general_checks(name: &str) -> Vec<String> {
    vec![
        format!(
            "`name: {name}` prefixes every Docker object of the environment and names its state under `.dev-env/{name}/`: keep it unique on this machine"
        ),
        format!(
            "the network takes {} unless `network.ipv4Subnet` says otherwise; `dev up` refuses a subnet another Docker network has",
            config::DEFAULT_IPV4_SUBNET
        ),
    ]
}

/// The workspace directory's name as a DNS label.
fn environment_name(root: &Path) -> String {
    let raw = root
        .file_name()
        .map(|n| n.to_string_lossy().to_ascii_lowercase())
        .unwrap_or_default();
    let label: String = raw
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    let label: String = label.trim_matches('-').chars().take(40).collect();
    let label = label.trim_end_matches('-').to_string();
    if label.is_empty() || !label.starts_with(|c: char| c.is_ascii_lowercase()) {
        format!("dev-{label}").trim_end_matches('-').to_string()
    } else {
        label
    }
}

/// The file's text.
pub fn render(guess: &Guess) -> String {
    let mut out = String::from(
        "# Written by `cargo xtask dev init` from this workspace's binary packages\n\
         # and manifests: a starting point. Every key is described in dev-env's\n\
         # README.md; omitted keys take the defaults there.\n",
    );
    out.push_str(&format!("name: {}\n", scalar(&guess.name)));
    out.push_str(&format!("cluster:\n  provider: {}\n", guess.provider));
    out.push_str("manifests:");
    if guess.manifests.is_empty() {
        out.push_str(" []\n");
    } else {
        out.push('\n');
        for m in &guess.manifests {
            out.push_str(&format!("  - {}\n", scalar(m)));
        }
    }
    out.push_str("components:");
    if guess.components.is_empty() {
        out.push_str(" {}\n");
        return out;
    }
    out.push('\n');
    for (name, c) in &guess.components {
        out.push_str(&format!("  {}:\n", scalar(name)));
        out.push_str(&format!("    image: {}\n", scalar(&c.image)));
        out.push_str("    build:\n");
        match &c.build {
            Build::Cargo { package, bin } => out.push_str(&format!(
                "      cargo: {{package: {}, bin: {}}}\n",
                scalar(package),
                scalar(bin)
            )),
            Build::Docker {
                context,
                dockerfile,
                cargo,
            } => {
                out.push_str(&format!(
                    "      docker:\n        context: {}\n        dockerfile: {}\n",
                    scalar(context),
                    scalar(dockerfile)
                ));
                if let Some((package, bin)) = cargo {
                    out.push_str(&format!(
                        "        cargo: {{package: {}, bin: {}}}\n",
                        scalar(package),
                        scalar(bin)
                    ));
                }
            }
        }
        let r = &c.rollout;
        out.push_str(&format!(
            "    rollout: {{kind: {}, namespace: {}, name: {}, container: {}}}\n",
            r.kind,
            scalar(&r.namespace),
            scalar(&r.name),
            scalar(&r.container)
        ));
    }
    out
}

/// A YAML scalar: plain when it is a simple word or path, else quoted.
fn scalar(text: &str) -> String {
    let plain = !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./".contains(c))
        && text.starts_with(|c: char| c.is_ascii_alphanumeric());
    if plain {
        text.to_string()
    } else {
        serde_json::to_string(text).unwrap_or_default()
    }
}

impl fmt::Display for Written {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let g = &self.guess;
        writeln!(
            f,
            "dev init: wrote {} (`{}`, provider {}, {} component{})",
            self.file.display(),
            g.name,
            g.provider,
            g.components.len(),
            if g.components.len() == 1 { "" } else { "s" }
        )?;
        for (name, c) in &g.components {
            let build = match &c.build {
                Build::Cargo { package, bin } => format!("cargo build of {package}/{bin}"),
                Build::Docker { context, cargo, .. } => match cargo {
                    Some((package, bin)) => {
                        format!("docker build of {context}/Dockerfile with {package}/{bin}")
                    }
                    None => format!("docker build of {context}/Dockerfile"),
                },
            };
            let r = &c.rollout;
            writeln!(
                f,
                "  {name}: image {}, {build}, rolled out by {} {}/{} (container {}, {})",
                c.image, r.kind, r.namespace, r.name, r.container, c.found_in
            )?;
        }
        writeln!(f, "check:")?;
        for line in &g.check {
            writeln!(f, "  - {line}")?;
        }
        let first = g
            .components
            .keys()
            .next()
            .map_or("<component>", String::as_str);
        write!(
            f,
            "then: `cargo xtask dev up`, and after an edit `cargo xtask push-image {first}`"
        )
    }
}

#[cfg(test)]
mod tests;
