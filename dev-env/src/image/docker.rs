//! The `docker` backend: a Dockerfile build through the engine (legacy
//! builder, no pulls beyond what the Dockerfile's base images need), then
//! a push by the engine itself.
//!
//! The build log is kept quiet unless asked for; on failure its tail is
//! part of the error. The push stream carries no per-layer IDs in bollard's
//! types, so the digest is read from its closing status line
//! (`dev: digest: sha256:… size: N`) and verified against the registry.

use std::{collections::HashMap, path::Path, time::Duration};

use bollard::{
    Docker,
    auth::DockerCredentials,
    query_parameters::{BuildImageOptionsBuilder, PushImageOptionsBuilder},
};
use futures::StreamExt;

use super::{cargo::tail, context, credentials::Credential};

/// How many lines of the build log a failure shows.
const LOG_TAIL: usize = 30;
/// How long a Docker build may run.
pub const BUILD_TIMEOUT: Duration = Duration::from_secs(30 * 60);
/// How long the engine may take to push an image.
pub const PUSH_TIMEOUT: Duration = Duration::from_secs(10 * 60);

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Context(#[from] context::Error),
    #[error("the Docker build failed: {message}; last lines of the build log:\n{tail}")]
    Build { message: String, tail: String },
    #[error("the Docker build ended without an image ID; last lines of the build log:\n{tail}")]
    NoImage { tail: String },
    #[error(
        "the registry {host} refused the Docker engine's push of `{reference}` with {credentials}: {message}; log in with `docker login {host}`: dev-env reads the credentials it stores"
    )]
    Unauthorized {
        host: String,
        reference: String,
        credentials: String,
        message: String,
    },
    #[error("the Docker engine could not push `{reference}`")]
    Push {
        reference: String,
        #[source]
        source: bollard::errors::Error,
    },
    #[error(
        "the Docker engine pushed `{reference}` but never reported a digest; its last status lines:\n{tail}"
    )]
    NoDigest { reference: String, tail: String },
    #[error(
        "the Docker {step} did not finish within {} minutes; last lines:\n{tail}",
        after.as_secs() / 60
    )]
    Deadline {
        step: &'static str,
        after: Duration,
        tail: String,
    },
}

/// A Dockerfile build.
#[derive(Clone)]
pub struct DockerBuild<'a> {
    pub context: &'a Path,
    pub dockerfile: &'a Path,
    pub target: Option<&'a str>,
    pub build_args: &'a std::collections::BTreeMap<String, String>,
    /// `host:port/repository`, without a tag.
    pub repository: &'a str,
    pub tag: &'a str,
    /// `linux/arm64/v8`: what the image is built for; empty: the engine's.
    pub platform: &'a str,
    /// Build every step again: the legacy builder's cache does not tell
    /// platforms apart, so a build for another platform than the engine's
    /// would reuse a step built for the engine's.
    pub no_cache: bool,
    /// Files added at the context root: (name, path on disk).
    pub staged: &'a [(String, std::path::PathBuf)],
    /// Where the build log goes line by line as it comes (`--verbose`);
    /// `None` shows it only on failure.
    pub output: Option<&'a dyn crate::report::Reporter>,
}

/// Builds the image and tags it `<repository>:<tag>`; returns the image ID.
pub async fn build(docker: &Docker, build: &DockerBuild<'_>) -> Result<String, Error> {
    let (context_dir, dockerfile) = (build.context.to_path_buf(), build.dockerfile.to_path_buf());
    let staged = build.staged.to_vec();
    let packed =
        tokio::task::spawn_blocking(move || context::pack(&context_dir, &dockerfile, &staged))
            .await
            .expect("packing the context does not panic")?;
    let tag = format!("{}:{}", build.repository, build.tag);
    let build_args: HashMap<String, String> = build
        .build_args
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let mut options = BuildImageOptionsBuilder::default()
        .dockerfile(&packed.dockerfile)
        .t(&tag)
        .rm(true)
        .forcerm(true)
        .buildargs(&build_args);
    if let Some(target) = build.target {
        options = options.target(target);
    }
    if !build.platform.is_empty() {
        options = options.platform(build.platform);
    }
    if build.no_cache {
        options = options.nocache(true);
    }
    let mut stream = docker.build_image(
        options.build(),
        None,
        Some(bollard::body_full(packed.tar.into())),
    );
    let mut log = String::new();
    let mut image_id = None;
    let deadline = tokio::time::Instant::now() + BUILD_TIMEOUT;
    loop {
        let Ok(next) = tokio::time::timeout_at(deadline, stream.next()).await else {
            return Err(Error::Deadline {
                step: "build",
                after: BUILD_TIMEOUT,
                tail: tail(&log, LOG_TAIL),
            });
        };
        let Some(item) = next else { break };
        match item {
            Ok(info) => {
                if let Some(line) = info.stream.as_deref().or(info.status.as_deref()) {
                    if let Some(output) = build.output {
                        for text in line.lines().filter(|l| !l.trim().is_empty()) {
                            output.report(&crate::report::Event::BuildOutput {
                                line: text.to_string(),
                            });
                        }
                    }
                    // The tail shown on failure keeps only lines that say something.
                    for text in line.lines().filter(|l| !matches!(l.trim(), "" | "--->")) {
                        log.push_str(text);
                        log.push('\n');
                    }
                }
                if let Some(id) = info.aux.and_then(|aux| aux.id) {
                    image_id = Some(id);
                }
            }
            Err(e) => {
                let message = match e {
                    bollard::errors::Error::DockerStreamError { error } => error,
                    other => other.to_string(),
                };
                return Err(Error::Build {
                    message: message.trim().to_string(),
                    tail: tail(&log, LOG_TAIL),
                });
            }
        }
    }
    image_id.ok_or_else(|| Error::NoImage {
        tail: tail(&log, LOG_TAIL),
    })
}

/// Pushes `<repository>:<tag>` through the engine with `credential` (the
/// ones dev-env's own client uses); returns the digest the engine reports.
pub async fn push(
    docker: &Docker,
    repository: &str,
    tag: &str,
    credential: Option<&Credential>,
) -> Result<String, Error> {
    let reference = format!("{repository}:{tag}");
    let options = PushImageOptionsBuilder::default().tag(tag).build();
    let host = repository.split('/').next().unwrap_or(repository);
    let credentials = credential.map(|c| engine_credentials(c, host));
    let mut stream = docker.push_image(repository, Some(options), credentials);
    let mut statuses = String::new();
    let mut digest = None;
    let deadline = tokio::time::Instant::now() + PUSH_TIMEOUT;
    loop {
        let Ok(next) = tokio::time::timeout_at(deadline, stream.next()).await else {
            return Err(Error::Deadline {
                step: "push",
                after: PUSH_TIMEOUT,
                tail: tail(&statuses, 10),
            });
        };
        let Some(item) = next else { break };
        let info = item.map_err(|source| refused(&reference, host, credential, source))?;
        if let Some(status) = info.status {
            if let Some(found) = digest_of_status(&status) {
                digest = Some(found);
            }
            statuses.push_str(&status);
            statuses.push('\n');
        }
    }
    digest.ok_or_else(|| Error::NoDigest {
        reference,
        tail: tail(&statuses, 10),
    })
}

/// The engine's credentials for `host`: a user name and password, or an
/// identity token when there is no user name.
fn engine_credentials(credential: &Credential, host: &str) -> DockerCredentials {
    let token = credential.username.is_empty();
    DockerCredentials {
        username: (!token).then(|| credential.username.clone()),
        password: (!token).then(|| credential.secret.clone()),
        identitytoken: token.then(|| credential.secret.clone()),
        serveraddress: Some(host.to_string()),
        ..DockerCredentials::default()
    }
}

/// A failed push, as a refusal that says how to log in when the registry
/// refused the credentials.
fn refused(
    reference: &str,
    host: &str,
    credential: Option<&Credential>,
    source: bollard::errors::Error,
) -> Error {
    let message = match &source {
        bollard::errors::Error::DockerStreamError { error } => error.clone(),
        other => other.to_string(),
    };
    let lower = message.to_ascii_lowercase();
    let refusal = [
        "unauthorized",
        "authentication required",
        "no basic auth",
        "denied",
    ];
    if !refusal.iter().any(|r| lower.contains(r)) {
        return Error::Push {
            reference: reference.to_string(),
            source,
        };
    }
    Error::Unauthorized {
        host: host.to_string(),
        reference: reference.to_string(),
        credentials: match credential {
            Some(c) => format!("the credentials from {}", c.source),
            None => String::from("no credentials"),
        },
        message: message.trim().to_string(),
    }
}

/// The digest of a push's closing status line,
/// `<tag>: digest: sha256:<hex> size: <n>`.
fn digest_of_status(status: &str) -> Option<String> {
    let rest = &status[status.find("digest: ")? + "digest: ".len()..];
    let digest = rest.split_whitespace().next()?;
    let hex = digest.strip_prefix("sha256:")?;
    (hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit())).then(|| digest.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digest_comes_from_the_closing_status_line() {
        let hex = "286203413105f855d4a5de340054d822864653ac1d70082b135f67d67e0818fb";
        assert_eq!(
            digest_of_status(&format!("dev: digest: sha256:{hex} size: 524")),
            Some(format!("sha256:{hex}"))
        );
        assert_eq!(digest_of_status("Pushed"), None);
        assert_eq!(digest_of_status("dev: digest: sha256:abc size: 1"), None);
    }
}
