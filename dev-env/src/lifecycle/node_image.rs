//! The node image: present, built locally from the `kube-sim` package
//! wherever cargo has it (`provider: sim`, labelled with the hash of its sources so an
//! unchanged simulator is never rebuilt), or pulled (k3s).

use std::path::Path;

use bollard::{Docker, query_parameters::CreateImageOptionsBuilder};
use futures::StreamExt;

use super::{Error, NodeImage, sim_source::Recipe};
use crate::{
    config::{Config, Provider},
    docker,
    image::{self, cargo as cargo_build},
    platform::{self, RustTarget},
    report::{Event, Reporter, Step},
};

/// Makes sure the engine has the node image: present, built locally (the
/// kube-sim image of `provider: sim`), or pulled (k3s).
pub(super) async fn ensure_node_image(
    docker: &Docker,
    config: &Config,
    verbose: bool,
    reporter: &dyn Reporter,
) -> Result<NodeImage, Error> {
    let image = &config.cluster.image;
    let present = docker::inspect_image(docker, image).await?;
    if config.cluster.provider == Provider::Sim {
        let output = verbose.then_some(reporter);
        return ensure_sim_image(docker, config, present.as_ref(), output, reporter).await;
    }
    if present.is_some() {
        return Ok(NodeImage::Present);
    }
    reporter.report(&Event::NodeImage {
        image: image.clone(),
        step: Step::Pulling,
    });
    let options = CreateImageOptionsBuilder::default()
        .from_image(image)
        .build();
    let mut pull = docker.create_image(Some(options), None, None);
    while let Some(step) = pull.next().await {
        if let Err(source) = step {
            return Err(Error::NodePull {
                image: image.clone(),
                source: Box::new(source),
            });
        }
    }
    Ok(NodeImage::Pulled)
}

/// The kube-sim node image, rebuilt whenever the simulator's sources
/// change, so a node never runs a stale simulator.
async fn ensure_sim_image(
    docker: &Docker,
    config: &Config,
    present: Option<&bollard::models::ImageInspect>,
    output: Option<&dyn Reporter>,
    reporter: &dyn Reporter,
) -> Result<NodeImage, Error> {
    let image = &config.cluster.image;
    // Located when the file was loaded: a member, a path or git dependency
    // of the workspace, or a `kube-sim/` above the file.
    let workspace = config.cluster.sim_source.clone().ok_or_else(|| Error::NodeImage {
        image: image.clone(),
        reason: format!(
            "no `kube-sim` package was found for {}; the sim provider builds the node image from its sources",
            config.file.display()
        ),
    })?;
    let failed = |source: BuildError| Error::NodeImageBuild {
        image: image.clone(),
        source: Box::new(source),
    };
    // Reading every source file blocks: off the runtime.
    let root = workspace.clone();
    let source = tokio::task::spawn_blocking(move || sim_source_hash(&root))
        .await
        .map_err(|e| std::io::Error::other(e.to_string()))
        .and_then(|hashed| hashed)
        .map_err(|source| {
            failed(BuildError::Hash {
                root: workspace.clone(),
                source,
            })
        })?;
    let built_from = present.and_then(source_label);
    if built_from.as_deref() == Some(source.as_str()) {
        return Ok(NodeImage::Present);
    }
    let step = |step| Event::NodeImage {
        image: image.clone(),
        step,
    };
    if is_published(image) {
        reporter.report(&step(Step::Pulling));
        match pull_published(docker, image, &source).await {
            Ok(()) => {
                reporter.report(&step(Step::Pulled));
                return Ok(NodeImage::Pulled);
            }
            Err(cause) => reporter.report(&Event::NodeImageFallback {
                image: image.clone(),
                cause,
            }),
        }
    }
    let target = sim_target(docker, &workspace)
        .await
        .map_err(|reason| Error::NodeImage {
            image: image.clone(),
            reason,
        })?;
    reporter.report(&step(Step::Building));
    let sinks = cargo_build::Sinks {
        lines: output,
        progress: Some(reporter),
        what: "the kube-sim node image",
    };
    let sim = SimBuild {
        workspace: &workspace,
        target_dir: simulator_target_dir(&workspace, &config.root),
        image,
        source: &source,
        target,
    };
    build_sim_image(docker, &sim, sinks).await.map_err(failed)?;
    reporter.report(&step(Step::Built));
    Ok(NodeImage::Built)
}

/// The hash of the sources an image was built from, its [`SIM_SOURCE_LABEL`].
fn source_label(image: &bollard::models::ImageInspect) -> Option<String> {
    image
        .config
        .as_ref()
        .and_then(|c| c.labels.as_ref())
        .and_then(|l| l.get(SIM_SOURCE_LABEL).cloned())
}

/// Whether the sim node image `image` names a registry (its first
/// component a host: it holds a `.` or a `:`, or is `localhost`), so that a
/// published image may be pulled. The default, `dev-env/kube-sim:dev`, names
/// none: it is only ever built here, and `dev up` stays offline.
pub fn is_published(image: &str) -> bool {
    image.split_once('/').is_some_and(|(first, _)| {
        first == "localhost" || first.contains('.') || first.contains(':')
    })
}

/// Pulls the published node image and keeps it when it was built from the
/// sources hashed `source`; otherwise why not, in words.
async fn pull_published(docker: &Docker, image: &str, source: &str) -> Result<(), String> {
    crate::registry::pull(docker, image)
        .await
        .map_err(|e| format!("the engine cannot pull it: {}", crate::error_chain(&e)))?;
    let pulled = docker::inspect_image(docker, image)
        .await
        .map_err(|e| crate::error_chain(&e))?;
    match pulled.as_ref().and_then(source_label) {
        Some(label) if label == source => Ok(()),
        Some(label) => Err(format!(
            "it was built from other sources: its {SIM_SOURCE_LABEL} is {label}, these sources hash to {source}"
        )),
        None => Err(format!(
            "it has no {SIM_SOURCE_LABEL} label: it is not a kube-sim node image"
        )),
    }
}

/// How the simulator is built to run on the engine's machine, or why this
/// machine cannot.
async fn sim_target(docker: &Docker, workspace: &Path) -> Result<RustTarget, String> {
    let engine = platform::of_engine(docker)
        .await
        .map_err(|e| crate::error_chain(&e))?;
    let toolchain = platform::toolchain(workspace).map_err(|e| crate::error_chain(&e))?;
    platform::choose(&engine, &toolchain, None).map_err(|refusal| refusal.to_string())
}

/// The nearest directory at or above `root` that holds the `kube-sim`
/// package: where the node image is built from when the workspace around
/// the file knows no `kube-sim` package.
pub fn sim_workspace(root: &Path) -> Option<std::path::PathBuf> {
    root.ancestors()
        .find(|dir| dir.join("kube-sim/Cargo.toml").is_file())
        .map(Path::to_path_buf)
}

/// The image label holding the hash of the sources a sim image was built from.
pub const SIM_SOURCE_LABEL: &str = "dev-env.sim-source";

/// The hash of what the node image is built from, and how: see
/// [`super::sim_source`].
pub fn sim_source_hash(root: &Path) -> std::io::Result<String> {
    super::sim_source::hash(root, SIMULATOR)
}

/// How the simulator is built: `release`, except for the crates whose code
/// runs only at start or on rare requests (the built-in types' OpenAPI
/// schemas, protobuf messages, CEL rules, the engine API's types, the
/// command line), which are where a cold build spends most and the
/// simulator gains least. The `dev` profile builds in less than half the
/// time but runs a thousand pods 3 to 6 times slower (BENCHMARKS.md has the
/// figures). Its own target directory, so the component builds beside it,
/// in [`cargo_build::TARGET_DIR`], never wait for its lock.
pub const SIMULATOR: Recipe<'static> = Recipe {
    profile: "release",
    tuning: &[
        "profile.release.package.k8s-openapi.opt-level=0",
        "profile.release.package.k8s-pb.opt-level=0",
        "profile.release.package.bollard-stubs.opt-level=0",
        "profile.release.package.clap_builder.opt-level=0",
        "profile.release.package.cel.opt-level=1",
        "profile.release.package.antlr4rust.opt-level=1",
    ],
};

/// The simulator's target directory, below the root of a workspace.
pub const SIMULATOR_TARGET_DIR: &str = "target/node-image";

/// Where the simulator of the sources at `workspace` builds for the
/// environment whose `dev-env.yaml` is at `project`: in the workspace that
/// holds the sources, so every environment built from them shares one
/// build (cargo's lock on the directory lets one compile while the others
/// wait, then find it fresh), except when cargo checked them out for a git
/// dependency, where the checkout may be read-only: then in the project.
pub fn simulator_target_dir(workspace: &Path, project: &Path) -> std::path::PathBuf {
    target_dir_for(workspace, project, cargo_build::cargo_home().as_deref())
}

/// [`simulator_target_dir`], with cargo's home at `cargo_home`.
fn target_dir_for(
    workspace: &Path,
    project: &Path,
    cargo_home: Option<&Path>,
) -> std::path::PathBuf {
    let checked_out = cargo_home.is_some_and(|home| {
        ["git", "registry"]
            .iter()
            .any(|dir| workspace.starts_with(home.join(dir)))
    });
    let base = if checked_out { project } else { workspace };
    base.join(SIMULATOR_TARGET_DIR)
}

/// Why the kube-sim node image could not be made.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error("the sim provider builds the workspace's `kube-sim` package, and that build failed")]
    Binary {
        #[source]
        source: cargo_build::Error,
    },
    #[error("cannot stage the image's files in a temporary directory")]
    Stage {
        #[source]
        source: std::io::Error,
    },
    #[error("cannot hash the sources under {}", root.display())]
    Hash {
        root: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Image(#[from] image::docker::Error),
}

/// What the node image is built from and where.
#[derive(Debug, Clone)]
pub struct SimBuild<'a> {
    /// The workspace that holds the `kube-sim` package.
    pub workspace: &'a Path,
    /// The build's target directory.
    pub target_dir: std::path::PathBuf,
    /// The image's name.
    pub image: &'a str,
    /// The hash of kube-sim's sources, the image's label.
    pub source: &'a str,
    /// The engine's platform, and how this machine builds for it.
    pub target: RustTarget,
}

/// Builds the kube-sim node image: a static `kube-sim` binary in an empty
/// image whose entrypoint takes k3s's `server` arguments, labelled with the
/// hash of its sources.
pub async fn build_sim_image(
    docker: &Docker,
    sim: &SimBuild<'_>,
    sinks: cargo_build::Sinks<'_>,
) -> Result<(), BuildError> {
    let (image, source) = (sim.image, sim.source);
    let build = cargo_build::CargoBuild {
        root: sim.workspace,
        target_dir: sim.target_dir.clone(),
        package: "kube-sim",
        bin: "kube-sim",
        profile: SIMULATOR.profile.to_string(),
        tuning: SIMULATOR.tuning,
        target: sim.target.clone(),
        lines: None,
        progress: None,
        cancel: None,
    };
    let binary = cargo_build::off_runtime(build, cargo_build::build_binary, sinks)
        .await
        .map_err(|source| BuildError::Binary { source })?;
    let stage = |source| BuildError::Stage { source };
    let dir = tempfile::tempdir().map_err(stage)?;
    std::fs::copy(&binary, dir.path().join("kube-sim")).map_err(stage)?;
    let dockerfile = dir.path().join("Dockerfile");
    let text = format!(
        "FROM scratch\nCOPY kube-sim /bin/kube-sim\nLABEL {SIM_SOURCE_LABEL}={source}\nENTRYPOINT [\"/bin/kube-sim\"]\n"
    );
    std::fs::write(&dockerfile, text).map_err(stage)?;
    let (repository, tag) = match image.rsplit_once(':') {
        Some((r, t)) if !t.contains('/') => (r, t),
        _ => (image, "latest"),
    };
    let build_args = Default::default();
    let platform = sim.target.platform.to_string();
    let build = image::docker::DockerBuild {
        platform: &platform,
        no_cache: false,
        context: dir.path(),
        dockerfile: &dockerfile,
        target: None,
        build_args: &build_args,
        repository,
        tag,
        staged: &[],
        output: sinks.lines,
    };
    image::docker::build(docker, &build).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::{is_published, target_dir_for};

    #[test]
    fn only_an_image_that_names_a_registry_is_pulled() {
        for published in [
            "ghcr.io/team/kube-sim:v1",
            "localhost:5000/kube-sim:dev",
            "localhost/kube-sim",
            "registry.internal:443/dev-env/kube-sim",
        ] {
            assert!(is_published(published), "{published}");
        }
        for local in [
            "dev-env/kube-sim:dev",
            "kube-sim",
            "kube-sim:dev",
            "team/kube-sim",
        ] {
            assert!(!is_published(local), "{local}");
        }
    }

    #[test]
    fn environments_built_from_one_checkout_share_its_build_and_a_cargo_checkout_is_left_alone() {
        let home = Path::new("/home/u/.cargo");
        let project = Path::new("/home/u/app");
        // A member, a path dependency or a checkout above the project: its own target directory.
        assert_eq!(
            target_dir_for(Path::new("/home/u/dev-env"), project, Some(home)),
            Path::new("/home/u/dev-env/target/node-image")
        );
        assert_eq!(
            target_dir_for(project, project, Some(home)),
            Path::new("/home/u/app/target/node-image")
        );
        // cargo's checkout of a git dependency, or an unpacked crate: the project's.
        let git = Path::new("/home/u/.cargo/git/checkouts/dev-env-1a2b/3c4d5e6");
        assert_eq!(
            target_dir_for(git, project, Some(home)),
            Path::new("/home/u/app/target/node-image")
        );
        let registry = Path::new("/home/u/.cargo/registry/src/index.crates.io-1/kube-sim-0.1.0");
        assert_eq!(
            target_dir_for(registry, project, Some(home)),
            Path::new("/home/u/app/target/node-image")
        );
        // A directory merely named like cargo's is not cargo's.
        assert_eq!(
            target_dir_for(Path::new("/src/git/dev-env"), project, None),
            Path::new("/src/git/dev-env/target/node-image")
        );
    }
}
