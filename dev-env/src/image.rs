//! The image pipeline: build a component, push it to the environment's
//! registry as `<registry host>/<image>:dev`, and prove that the registry
//! serves exactly what was built.
//!
//! Two backends build images, for the platform [`builds`] planned. [`cargo`]
//! runs a static build with the component's profile (`dev` by default) and
//! assembles a reproducible single-layer image itself ([`oci`]), then pushes
//! it over the distribution API ([`distribution`]), uploading only the blobs
//! the registry lacks. [`docker`] builds a Dockerfile through the engine and
//! lets the engine push, unless [`dockerfile`] can assemble the same image
//! itself; then it is pushed as the cargo backend pushes. An assembled image
//! is kept while its inputs are unchanged ([`kept`]). Either way, the manifest is then fetched back by
//! tag, and the sha256 of its bytes, the registry's `Docker-Content-Digest`
//! and the digest the build reported must all agree ([`verify`]); anything
//! else is an error. Only verified pushes reach the state file.

pub mod builds;
pub mod cargo;
pub mod context;
pub mod credentials;
pub mod distribution;
pub mod docker;
pub mod dockerfile;
mod kept;
pub mod oci;

use std::{
    collections::BTreeSet,
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use bollard::Docker;
use serde::Serialize;
use xshell::{Shell, cmd};

use crate::{
    config::{Build, CargoBinary, Config},
    state::{PushedImage, State},
};

/// The tag every push updates.
pub const DEV_TAG: &str = "dev";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Config(#[from] crate::config::Error),
    #[error("component `{component}`: the registry is not usable")]
    Registry {
        component: String,
        #[source]
        source: Box<distribution::Error>,
    },
    #[error("component `{component}`: cargo build failed")]
    Cargo {
        component: String,
        #[source]
        source: cargo::Error,
    },
    #[error("component `{component}`: builds with Docker")]
    NeedsDocker {
        component: String,
        #[source]
        source: crate::docker::Error,
    },
    #[error("component `{component}`")]
    Docker {
        component: String,
        #[source]
        source: Box<docker::Error>,
    },
    #[error("component `{component}`: push to {registry} failed")]
    Push {
        component: String,
        registry: String,
        #[source]
        source: Box<distribution::Error>,
    },
    #[error(
        "component `{component}`: after the push, the registry has no manifest at `{reference}`; is `registry.external` pointing at the registry the engine pushes to?"
    )]
    Vanished {
        component: String,
        reference: String,
    },
    #[error(
        "component `{component}`: `{reference}` failed verification: the registry served bytes with sha256 {served}, its `Docker-Content-Digest` says {header}, the build reported {reported}; the registry does not hold what was built, so nothing was recorded (push again; if it persists, `cargo xtask dev down --purge` clears the registry)"
    )]
    Mismatch {
        component: String,
        reference: String,
        served: String,
        header: String,
        reported: String,
    },
    #[error(
        "component `{component}`: pushed and verified as {digest}, but the state could not be written ({cause}); push again once it can"
    )]
    Unrecorded {
        component: String,
        digest: String,
        cause: String,
    },
    #[error("cannot record the pushed digests")]
    State {
        #[source]
        source: crate::state::Error,
    },
    #[error("component `{component}`: no target was decided for its cargo build")]
    Unplanned { component: String },
    #[error("cannot tell the git commit of {}; is it a git checkout with `git` installed?", dir.display())]
    Vcs {
        dir: PathBuf,
        #[source]
        source: xshell::Error,
    },
}

/// How to run builds.
#[derive(Clone, Copy)]
pub struct PushOptions<'a> {
    /// Where build output goes as it comes (`--verbose`); `None` shows it
    /// only on failure.
    pub output: Option<&'a dyn crate::report::Reporter>,
    /// Where the progress of builds that compile goes.
    pub progress: Option<&'a dyn crate::report::Reporter>,
    /// Set to stop the builds.
    pub cancel: Option<&'a cargo::Cancel>,
    /// The platform, and each component's target ([`builds::plan`]).
    pub builds: &'a builds::Builds,
}

/// A verified push of one component.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Pushed {
    pub component: String,
    /// The repository path, such as `demo/worker`.
    pub image: String,
    /// `host:port/<image>:dev` as pushed from the host.
    pub reference: String,
    /// `sha256:<hex>` of the manifest.
    pub digest: String,
    /// Bytes sent to the registry: missing blobs, and the manifest when new.
    pub uploaded_bytes: u64,
    pub uploaded_blobs: usize,
    /// Blobs the registry already had.
    pub skipped_blobs: usize,
    /// The cargo profile its binary was built with, when it builds one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
    #[serde(skip)]
    pub elapsed: Duration,
}

/// The reference pods pull: `<cluster host>/<image>@<digest>`, pinned to
/// the digest so that a cached `:dev` can never be run by mistake.
pub fn cluster_reference(config: &Config, image: &str, digest: &str) -> String {
    format!("{}/{image}@{digest}", config.registry.cluster_host)
}

/// Builds, pushes and verifies `components` (all of them run concurrently),
/// then records every verified push in the state. One failure does not stop
/// the others; results come back in the order asked.
pub async fn push_components(
    config: &Config,
    registry: &distribution::Client,
    components: &[String],
    options: PushOptions<'_>,
) -> Vec<Result<Pushed, Error>> {
    let needs_docker = components.iter().any(|name| {
        matches!(
            config.component(name).map(|c| &c.build),
            Ok(Build::Docker { .. })
        )
    });
    // One connection for every Docker build; when it fails, each of them
    // tries again and reports why.
    let docker = if needs_docker {
        crate::docker::connect().await.ok()
    } else {
        None
    };
    let pushes = components
        .iter()
        .map(|name| push_component(config, registry, docker.as_ref(), name, options));
    let mut results = futures::future::join_all(pushes).await;
    let pushed: Vec<&Pushed> = results.iter().filter_map(|r| r.as_ref().ok()).collect();
    if !pushed.is_empty()
        && let Err(e) = record(&config.state_dir(), &pushed)
    {
        let cause = crate::error_chain(&e);
        for result in &mut results {
            if let Ok(it) = result {
                *result = Err(Error::Unrecorded {
                    component: it.component.clone(),
                    digest: it.digest.clone(),
                    cause: cause.clone(),
                });
            }
        }
    }
    results
}

/// Writes `pushed` into the state in `state_dir`, keeping everything else.
pub fn record(state_dir: &Path, pushed: &[&Pushed]) -> Result<(), Error> {
    State::update(state_dir, |state| {
        for it in pushed {
            state.images.insert(
                it.component.clone(),
                PushedImage {
                    digest: it.digest.clone(),
                    repository: it.image.clone(),
                    profile: it.profile.clone(),
                },
            );
        }
    })
    .map(drop)
    .map_err(|source| Error::State { source })
}

/// Builds, pushes and verifies one component. Records nothing.
pub async fn push_component(
    config: &Config,
    registry: &distribution::Client,
    docker: Option<&Docker>,
    name: &str,
    options: PushOptions<'_>,
) -> Result<Pushed, Error> {
    let started = Instant::now();
    let component = config.component(name)?;
    let target = Target {
        registry,
        component: name,
        repo: component.image.as_str(),
        platform: &options.builds.platform,
    };
    registry.ping().await.map_err(|source| Error::Registry {
        component: name.to_string(),
        source: Box::new(source),
    })?;
    let before = tagged(&target).await?;
    let target_of = || {
        options
            .builds
            .target(name)
            .cloned()
            .ok_or_else(|| Error::Unplanned {
                component: name.to_string(),
            })
    };
    let upload = match &component.build {
        Build::Cargo(binary) => {
            let build = cargo::CargoBuild {
                root: &config.root,
                target_dir: config.root.join(cargo::TARGET_DIR),
                package: &binary.package,
                bin: &binary.bin,
                profile: binary.profile.clone(),
                tuning: &[],
                target: target_of()?,
                lines: None,
                progress: None,
                cancel: options.cancel.cloned(),
            };
            let sinks = cargo::Sinks {
                lines: options.output,
                progress: options.progress,
                what: name,
            };
            push_cargo(&target, build, before.as_ref(), sinks).await?
        }
        Build::Docker {
            context,
            dockerfile,
            target: stage,
            build_args,
            cargo: binary,
        } => {
            let repository = format!("{}/{}", registry.host(), target.repo);
            let platform = options.builds.platform.to_string();
            let build = docker::DockerBuild {
                platform: &platform,
                no_cache: false,
                context,
                dockerfile,
                target: stage.as_deref(),
                build_args,
                repository: &repository,
                tag: DEV_TAG,
                staged: &[],
                output: options.output,
            };
            let staged = Staged {
                binary: match binary {
                    Some(binary) => Some((binary, target_of()?)),
                    None => None,
                },
                platform: &options.builds.platform,
                root: &config.root,
                cancel: options.cancel,
                progress: options.progress,
            };
            push_docker(&target, docker, build, staged, before.as_ref()).await?
        }
    };
    Ok(Pushed {
        component: name.to_string(),
        image: target.repo.to_string(),
        reference: format!("{}/{}:{DEV_TAG}", registry.host(), target.repo),
        digest: upload.digest,
        uploaded_bytes: upload.uploaded_bytes,
        uploaded_blobs: upload.uploaded_blobs,
        skipped_blobs: upload.skipped_blobs,
        profile: match &component.build {
            Build::Cargo(binary)
            | Build::Docker {
                cargo: Some(binary),
                ..
            } => Some(binary.profile.clone()),
            Build::Docker { cargo: None, .. } => None,
        },
        elapsed: started.elapsed(),
    })
}

/// Where one component's image goes.
struct Target<'a> {
    registry: &'a distribution::Client,
    component: &'a str,
    /// The repository path, such as `demo/worker`.
    repo: &'a str,
    /// The cluster's platform: the image of an index its nodes pull.
    platform: &'a crate::platform::Platform,
}

impl Target<'_> {
    fn push_error(&self, source: distribution::Error) -> Error {
        Error::Push {
            component: self.component.to_string(),
            registry: self.registry.host().to_string(),
            source: Box::new(source),
        }
    }

    fn cargo_error(&self, source: cargo::Error) -> Error {
        Error::Cargo {
            component: self.component.to_string(),
            source,
        }
    }

    fn docker_error(&self, source: docker::Error) -> Error {
        Error::Docker {
            component: self.component.to_string(),
            source: Box::new(source),
        }
    }
}

/// What the tag has before a push, to tell what the push adds; an index
/// without an image for the platform has none of it.
async fn tagged(target: &Target<'_>) -> Result<Option<distribution::Image>, Error> {
    let (registry, repo) = (target.registry, target.repo);
    match registry.get_image(repo, DEV_TAG, target.platform).await {
        Err(distribution::Error::NoPlatform { .. }) => Ok(None),
        other => other.map_err(|e| target.push_error(e)),
    }
}

/// The cargo backend: builds the image, uploads the blobs the registry
/// lacks, tags the manifest when it changed, and verifies it.
async fn push_cargo(
    target: &Target<'_>,
    build: cargo::CargoBuild<'_>,
    before: Option<&distribution::Image>,
    sinks: cargo::Sinks<'_>,
) -> Result<Upload, Error> {
    let image = cargo::off_runtime(build, cargo::build_image, sinks)
        .await
        .map_err(|e| target.cargo_error(e))?;
    upload_image(target, &image, before).await
}

/// Uploads the blobs of `image` the registry lacks, tags its manifest when
/// it changed, and verifies it.
async fn upload_image(
    target: &Target<'_>,
    image: &oci::Image,
    before: Option<&distribution::Image>,
) -> Result<Upload, Error> {
    let (registry, repo) = (target.registry, target.repo);
    let mut upload = Upload {
        digest: image.manifest.digest.clone(),
        ..Upload::default()
    };
    // The blobs go up side by side: each is a round trip or three to the registry.
    let sent =
        futures::future::try_join_all(image.blobs().map(|blob| send_blob(target, blob))).await?;
    for bytes in sent {
        match bytes {
            Some(n) => {
                upload.uploaded_blobs += 1;
                upload.uploaded_bytes += n;
            }
            None => upload.skipped_blobs += 1,
        }
    }
    let unchanged = before.is_some_and(|m| oci::sha256_digest(&m.served.bytes) == upload.digest);
    if !unchanged {
        let manifest = &image.manifest;
        registry
            .put_manifest(repo, DEV_TAG, manifest.media_type, manifest.bytes.clone())
            .await
            .map_err(|e| target.push_error(e))?;
        upload.uploaded_bytes += manifest.bytes.len() as u64;
    }
    verify(
        registry,
        target.component,
        repo,
        &upload.digest,
        target.platform,
    )
    .await?;
    Ok(upload)
}

/// Uploads `blob` unless the registry has it: the bytes sent, or `None`.
async fn send_blob(target: &Target<'_>, blob: &oci::Blob) -> Result<Option<u64>, Error> {
    let (registry, repo) = (target.registry, target.repo);
    let present = registry
        .blob_exists(repo, &blob.digest)
        .await
        .map_err(|e| target.push_error(e))?;
    if present {
        return Ok(None);
    }
    registry
        .upload_blob(repo, &blob.digest, blob.bytes.clone())
        .await
        .map_err(|e| target.push_error(e))?;
    Ok(Some(blob.bytes.len() as u64))
}

/// The binary a Dockerfile copies, and the workspace it is built in.
struct Staged<'a> {
    binary: Option<(&'a CargoBinary, crate::platform::RustTarget)>,
    /// What the image runs on.
    platform: &'a crate::platform::Platform,
    root: &'a Path,
    cancel: Option<&'a cargo::Cancel>,
    progress: Option<&'a dyn crate::report::Reporter>,
}

/// The Docker backend: stages the binary the Dockerfile copies (added to
/// the context root under its name), then assembles the image itself when
/// the Dockerfile is one it builds as the engine would ([`dockerfile`]),
/// and pushes it as the cargo backend does; otherwise builds through the
/// engine, lets the engine push, and verifies.
async fn push_docker(
    target: &Target<'_>,
    docker: Option<&Docker>,
    build: docker::DockerBuild<'_>,
    staged: Staged<'_>,
    before: Option<&distribution::Image>,
) -> Result<Upload, Error> {
    let files = match &staged.binary {
        Some((binary, rust_target)) => {
            let rust_target = rust_target.clone();
            vec![stage_binary(target, &staged, binary, rust_target, build.output).await?]
        }
        None => Vec::new(),
    };
    let build = docker::DockerBuild {
        staged: &files,
        ..build
    };
    let kept = staged
        .root
        .join(cargo::TARGET_DIR)
        .join("dockerfile")
        .join(format!("{}.image", target.component));
    if let Some(image) = assemble_without_engine(&build, staged.platform, &kept).await {
        return upload_image(target, &image, before).await;
    }
    let connected;
    let docker = match docker {
        Some(docker) => docker,
        None => {
            connected = crate::docker::connect()
                .await
                .map_err(|source| Error::NeedsDocker {
                    component: target.component.to_string(),
                    source,
                })?;
            &connected
        }
    };
    // A build for another platform than the engine's own must not reuse
    // the engine's cached steps: its legacy builder would take them.
    let engine = crate::platform::of_engine(docker).await.ok();
    let build = docker::DockerBuild {
        no_cache: engine.is_some_and(|e| e.to_string() != build.platform),
        ..build
    };
    docker::build(docker, &build)
        .await
        .map_err(|e| target.docker_error(e))?;
    let credential = target.registry.credential();
    let digest = docker::push(docker, build.repository, DEV_TAG, credential)
        .await
        .map_err(|e| target.docker_error(e))?;
    // The engine does not say what it uploaded: compare the new manifest's
    // blobs with those of the manifest the tag had before.
    let (registry, component, repo) = (target.registry, target.component, target.repo);
    let after = verify(registry, component, repo, &digest, target.platform).await?;
    Ok(compare(before, &after, &digest))
}

/// The image of `build` assembled without the engine, when its Dockerfile
/// is one [`dockerfile::plan`] reads and its sources are all there; `None`
/// leaves the build to the engine, which then builds what dev-env does not
/// carry out, and reports a missing or unreadable source in its own words
/// with its build log.
/// An image whose inputs did not change since it was last assembled is
/// read back from `kept`.
async fn assemble_without_engine(
    build: &docker::DockerBuild<'_>,
    platform: &crate::platform::Platform,
    kept: &Path,
) -> Option<oci::Image> {
    let text = tokio::fs::read_to_string(build.dockerfile).await.ok()?;
    let plan = dockerfile::plan(&text, build.target).ok()?;
    let (context, staged) = (build.context.to_path_buf(), build.staged.to_vec());
    let (platform, kept) = (platform.clone(), kept.to_path_buf());
    let assembled = tokio::task::spawn_blocking(move || {
        let assemble = || {
            let ignore = context::Ignore::load(&context).map_err(drop)?;
            dockerfile::assemble(&plan, &context, &staged, &ignore, &platform).map_err(drop)
        };
        match dockerfile::inputs_key(&plan, &text, &context, &staged, &platform) {
            Some(key) => kept::kept_or(&kept, &key, assemble).ok(),
            None => assemble().ok(),
        }
    });
    assembled.await.ok().flatten()
}

/// Builds the binary a Dockerfile copies: its name, and its path.
async fn stage_binary(
    target: &Target<'_>,
    staged: &Staged<'_>,
    binary: &CargoBinary,
    rust_target: crate::platform::RustTarget,
    output: Option<&dyn crate::report::Reporter>,
) -> Result<(String, PathBuf), Error> {
    let build = cargo::CargoBuild {
        root: staged.root,
        target_dir: staged.root.join(cargo::TARGET_DIR),
        package: &binary.package,
        bin: &binary.bin,
        profile: binary.profile.clone(),
        tuning: &[],
        target: rust_target,
        lines: None,
        progress: None,
        cancel: staged.cancel.cloned(),
    };
    let sinks = cargo::Sinks {
        lines: output,
        progress: staged.progress,
        what: target.component,
    };
    let path = cargo::off_runtime(build, cargo::build_binary, sinks)
        .await
        .map_err(|e| target.cargo_error(e))?;
    Ok((binary.bin.clone(), path))
}

/// What one push sent: the manifest's digest, and the bytes and blobs
/// uploaded or found present.
#[derive(Debug, Default)]
struct Upload {
    digest: String,
    uploaded_bytes: u64,
    uploaded_blobs: usize,
    skipped_blobs: usize,
}

/// What a push sent, judged by the blobs of the image manifest (an index's
/// for the platform) before and after.
fn compare(
    before: Option<&distribution::Image>,
    after: &distribution::Image,
    digest: &str,
) -> Upload {
    let had: BTreeSet<String> = before
        .map(|m| {
            let blobs = descriptors(&m.manifest.bytes).into_iter();
            blobs.map(|(d, _)| d).collect()
        })
        .unwrap_or_default();
    let mut upload = Upload {
        digest: digest.to_string(),
        ..Upload::default()
    };
    for (blob, size) in descriptors(&after.manifest.bytes) {
        if had.contains(&blob) {
            upload.skipped_blobs += 1;
        } else {
            upload.uploaded_blobs += 1;
            upload.uploaded_bytes += size;
        }
    }
    let unchanged = before.is_some_and(|m| oci::sha256_digest(&m.served.bytes) == digest);
    if !unchanged {
        upload.uploaded_bytes += after.served.bytes.len() as u64;
        if after.manifest.bytes != after.served.bytes {
            upload.uploaded_bytes += after.manifest.bytes.len() as u64;
        }
    }
    upload
}

/// The `(digest, size)` of the config and layers a manifest names.
fn descriptors(manifest: &[u8]) -> Vec<(String, u64)> {
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(manifest) else {
        return Vec::new();
    };
    let config = value.get("config").into_iter();
    let layers = value
        .get("layers")
        .and_then(|l| l.as_array())
        .into_iter()
        .flatten();
    config
        .chain(layers)
        .filter_map(|d| {
            Some((
                d.get("digest")?.as_str()?.to_string(),
                d.get("size")?.as_u64()?,
            ))
        })
        .collect()
}

/// Fetches the image at `<repo>:dev` for `platform` and checks that the
/// sha256 of the served bytes, the registry's `Docker-Content-Digest` and
/// `reported` are one and the same digest. An index (what engines with the
/// containerd image store push) must have an image for `platform`; its own
/// digest stays the image's, the digest pods pulling by it report.
pub async fn verify(
    registry: &distribution::Client,
    component: &str,
    repo: &str,
    reported: &str,
    platform: &crate::platform::Platform,
) -> Result<distribution::Image, Error> {
    let reference = format!("{}/{repo}:{DEV_TAG}", registry.host());
    let image = registry
        .get_image(repo, DEV_TAG, platform)
        .await
        .map_err(|source| Error::Push {
            component: component.to_string(),
            registry: registry.host().to_string(),
            source: Box::new(source),
        })?
        .ok_or_else(|| Error::Vanished {
            component: component.to_string(),
            reference: reference.clone(),
        })?;
    let served = oci::sha256_digest(&image.served.bytes);
    let header = image.served.digest_header.clone().unwrap_or_default();
    if served != header || served != reported {
        return Err(Error::Mismatch {
            component: component.to_string(),
            reference,
            served,
            header: if header.is_empty() {
                String::from("nothing")
            } else {
                header
            },
            reported: reported.to_string(),
        });
    }
    Ok(image)
}

/// A tag for non-dev pushes: the first 8 hex digits of the commit checked
/// out in `dir`, with `-dirty` when the work tree has changes.
pub fn vcs_tag(dir: &Path) -> Result<String, Error> {
    let vcs = |source| Error::Vcs {
        dir: dir.to_path_buf(),
        source,
    };
    let sh = Shell::new().map_err(vcs)?;
    sh.change_dir(dir);
    let commit = cmd!(sh, "git rev-parse HEAD").quiet().read().map_err(vcs)?;
    let status = cmd!(sh, "git status --porcelain --untracked-files=normal")
        .quiet()
        .read()
        .map_err(vcs)?;
    Ok(vcs_tag_of(&commit, !status.trim().is_empty()))
}

fn vcs_tag_of(commit: &str, dirty: bool) -> String {
    let short: String = commit.trim().chars().take(8).collect();
    if dirty {
        format!("{short}-dirty")
    } else {
        short
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vcs_tag_is_eight_hex_digits_and_marks_a_dirty_tree() {
        let commit = "0123456789abcdef0123456789abcdef01234567\n";
        assert_eq!(vcs_tag_of(commit, false), "01234567");
        assert_eq!(vcs_tag_of(commit, true), "01234567-dirty");
    }

    #[test]
    fn vcs_tag_reads_the_checkout() {
        let dir = tempfile::tempdir().unwrap();
        let sh = Shell::new().unwrap();
        sh.change_dir(dir.path());
        let git = |args: &[&str]| {
            cmd!(sh, "git -c user.name=t -c user.email=t@t {args...}")
                .quiet()
                .ignore_stdout()
                .ignore_stderr()
                .run()
                .unwrap()
        };
        git(&["init", "-q"]);
        std::fs::write(dir.path().join("a"), "1").unwrap();
        git(&["add", "a"]);
        git(&["commit", "-q", "-m", "one"]);
        let commit = cmd!(sh, "git rev-parse HEAD").read().unwrap();
        assert_eq!(vcs_tag(dir.path()).unwrap(), commit[..8]);
        std::fs::write(dir.path().join("a"), "2").unwrap();
        assert_eq!(
            vcs_tag(dir.path()).unwrap(),
            format!("{}-dirty", &commit[..8])
        );
    }

    #[test]
    fn compare_counts_only_new_blobs() {
        let manifest = |layers: &[(&str, u64)]| {
            let layers: Vec<_> = layers
                .iter()
                .map(|(d, s)| serde_json::json!({"digest": d, "size": s}))
                .collect();
            let bytes = serde_json::to_vec(&serde_json::json!({
                "config": {"digest": format!("c{}", layers.len()), "size": 7},
                "layers": layers,
            }))
            .unwrap();
            distribution::Manifest {
                bytes: bytes.into(),
                digest_header: None,
                media_type: None,
            }
        };
        let image = |manifest: distribution::Manifest| distribution::Image {
            served: manifest.clone(),
            manifest,
        };
        let before = image(manifest(&[("a", 100), ("b", 200)]));
        let after = image(manifest(&[("a", 100), ("c", 300)]));
        let digest = oci::sha256_digest(&after.served.bytes);
        let upload = compare(Some(&before), &after, &digest);
        assert_eq!(upload.skipped_blobs, 2, "config and layer a were there");
        assert_eq!(upload.uploaded_blobs, 1);
        assert_eq!(upload.uploaded_bytes, 300 + after.served.bytes.len() as u64);
        let same = compare(Some(&after), &after, &digest);
        assert_eq!((same.uploaded_blobs, same.uploaded_bytes), (0, 0));
    }
}
