//! Images on the engine: the name the engine pulls an image by (registry mirrors it cannot resolve replaced
//! by loopback ones), pulls for the node's platform, and pulls recorded with the digest pods run.

use bollard::auth::DockerCredentials;
use bollard::query_parameters::CreateImageOptionsBuilder;
use futures::StreamExt as _;

use super::{DockerRuntime, engine_message};
use crate::kubelet::reference::Reference;
use crate::kubelet::registry::{Auth, AuthError, Registries};
use crate::kubelet::runtime::{PullError, PulledImage, no_platform_match};
use crate::lock::MutexExt as _;

impl DockerRuntime {
    /// The name the engine pulls for an image: registry mirrors the engine cannot resolve are replaced by
    /// a loopback mirror key with the same endpoint, or by a loopback endpoint.
    pub fn engine_reference(&self, image: &Reference) -> String {
        let domain = engine_domain(&self.inner.registries, &image.domain);
        let tail = match (&image.digest, &image.tag) {
            (Some(d), _) => format!("@{d}"),
            (None, Some(t)) => format!(":{t}"),
            (None, None) => ":latest".to_string(),
        };
        format!("{domain}/{}{tail}", image.path)
    }

    /// Pulls an image through the engine under its engine-side name, for the node's platform, and records
    /// the name pods run it by: the engine's name with the digest, so a restart runs the same image. The
    /// engine is given the kubelet's credentials, or else the `auth` that `registries.yaml` has for the
    /// registry's endpoints (or for the engine's name of it). An index without an entry for the platform
    /// fails as containerd fails it, whatever the engine's words for it.
    pub(super) async fn pull_image(
        &self,
        image: &Reference,
        credentials: Option<&Auth>,
    ) -> Result<PulledImage, PullError> {
        let shown = image.familiar_with_tag();
        let engine_ref = self.engine_reference(image);
        let platform = self.inner.platform.to_string();
        tracing::info!(image = %shown, pull = %engine_ref, %platform, "pulling");
        let options = CreateImageOptionsBuilder::default()
            .from_image(&engine_ref)
            .platform(&platform)
            .build();
        let engine_host = engine_domain(&self.inner.registries, &image.domain);
        let credentials = credentials.or_else(|| {
            self.inner
                .registries
                .auth_for_registry(&image.domain, &engine_host)
        });
        let credentials = match credentials.map(|c| engine_credentials(c, &engine_host)) {
            Some(Ok(c)) => Some(c),
            Some(Err(e)) => {
                return Err(PullError {
                    message: format!("failed to pull image \"{shown}\": {e}"),
                });
            }
            None => None,
        };
        let mut stream = self
            .inner
            .docker
            .create_image(Some(options), None, credentials);
        while let Some(step) = stream.next().await {
            let failure = match step {
                Ok(info) => info.error_detail.and_then(|d| d.message),
                Err(e) => Some(engine_message(&e)),
            };
            if let Some(message) = failure {
                if is_no_platform_match(&message) {
                    tracing::debug!(image = %shown, %message, "no entry for the node's platform");
                    return Err(no_platform_match(image));
                }
                return Err(PullError {
                    message: format!(
                        "failed to pull image \"{shown}\" (as \"{engine_ref}\"): {message}"
                    ),
                });
            }
        }
        let inspected = self
            .inner
            .docker
            .inspect_image(&engine_ref)
            .await
            .map_err(|e| PullError {
                message: format!(
                    "the pulled image \"{engine_ref}\" cannot be inspected: {}",
                    engine_message(&e)
                ),
            })?;
        let engine_name = engine_name(&engine_ref);
        let repo_digest = repo_digest(inspected.repo_digests.unwrap_or_default(), &engine_name);
        let (image_id, run_ref) = match (&image.digest, repo_digest) {
            (Some(d), _) => (image.image_id(d), format!("{engine_name}@{d}")),
            (None, Some(d)) => (image.image_id(&d), format!("{engine_name}@{d}")),
            // An image without a repo digest is reported by its config digest, as containerd does.
            (None, None) => (inspected.id.clone().unwrap_or_default(), engine_ref.clone()),
        };
        let labels = inspected
            .config
            .and_then(|c| c.labels)
            .unwrap_or_default()
            .into_iter()
            .collect();
        let pulled = PulledImage {
            image: shown.clone(),
            image_id,
            labels,
        };
        self.inner
            .images
            .lock_unpoisoned()
            .insert(shown, (pulled.clone(), run_ref));
        Ok(pulled)
    }
}

/// The engine's `X-Registry-Auth` for credentials: the user name and password, or an identity token.
fn engine_credentials(auth: &Auth, server: &str) -> Result<DockerCredentials, AuthError> {
    let c = auth.credentials()?;
    let (username, password, identitytoken) = if c.username().is_empty() {
        (None, None, Some(c.secret().to_string()))
    } else {
        (
            Some(c.username().to_string()),
            Some(c.secret().to_string()),
            None,
        )
    };
    Ok(DockerCredentials {
        username,
        password,
        identitytoken,
        serveraddress: Some(server.to_string()),
        ..DockerCredentials::default()
    })
}

/// The repository an engine reference names: without its digest or tag.
fn engine_name(engine_ref: &str) -> String {
    engine_ref
        .split_once('@')
        .map(|(n, _)| n)
        .unwrap_or_else(|| {
            let last_slash = engine_ref.rfind('/').unwrap_or(0);
            match engine_ref[last_slash..].rfind(':') {
                Some(i) => &engine_ref[..last_slash + i],
                None => engine_ref,
            }
        })
        .to_string()
}

/// The digest of the image among its repo digests that belongs to the repository it was pulled from.
fn repo_digest(repo_digests: Vec<String>, engine_name: &str) -> Option<String> {
    repo_digests.into_iter().find_map(|d| {
        let (name, digest) = d.split_once('@')?;
        (name == engine_name
            || Reference::parse(name)
                .is_ok_and(|r| Reference::parse(engine_name).is_ok_and(|e| e.name() == r.name())))
        .then(|| digest.to_string())
    })
}

/// Whether an engine's pull error says that the image index has no manifest for the platform asked: the
/// classic image store's `no matching manifest for linux/arm64 in the manifest list entries`, or
/// containerd's `no match for platform in manifest` (the engine's containerd image store).
fn is_no_platform_match(message: &str) -> bool {
    message.contains("no matching manifest for")
        || message.contains("no match for platform in manifest")
}

/// Whether a registry host is the engine's loopback.
fn is_loopback(host: &str) -> bool {
    let name = host.rsplit_once(':').map(|(h, _)| h).unwrap_or(host);
    name == "localhost" || name == "127.0.0.1" || name == "[::1]"
}

/// The registry host the engine pulls from for `domain` (see [`DockerRuntime::engine_reference`]).
pub fn engine_domain(registries: &Registries, domain: &str) -> String {
    if is_loopback(domain) {
        return domain.to_string();
    }
    let Some(mirror) = registries.mirrors.get(domain) else {
        return domain.to_string();
    };
    let same_endpoint = registries.mirrors.iter().find(|(key, m)| {
        is_loopback(key) && m.endpoint.iter().any(|e| mirror.endpoint.contains(e))
    });
    if let Some((key, _)) = same_endpoint {
        return key.clone();
    }
    for endpoint in &mirror.endpoint {
        let host = endpoint
            .trim_start_matches("http://")
            .trim_start_matches("https://")
            .split('/')
            .next()
            .unwrap_or("");
        if is_loopback(host) {
            return host.to_string();
        }
    }
    domain.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn registries(yaml: &str) -> Registries {
        Registries::from_yaml(yaml).unwrap()
    }

    #[test]
    fn an_in_network_mirror_is_pulled_through_the_loopback_key_with_the_same_endpoint() {
        let r = registries(
            "mirrors:\n  \"dev-env-registry:5000\":\n    endpoint: [\"http://dev-env-registry:5000\"]\n  \"localhost:36099\":\n    endpoint: [\"http://dev-env-registry:5000\"]\n",
        );
        assert_eq!(
            engine_domain(&r, "dev-env-registry:5000"),
            "localhost:36099"
        );
        assert_eq!(engine_domain(&r, "localhost:36099"), "localhost:36099");
        assert_eq!(engine_domain(&r, "ghcr.io"), "ghcr.io");
    }

    #[test]
    fn the_engines_words_for_an_index_without_the_platform_are_recognised() {
        assert!(is_no_platform_match(
            "no matching manifest for linux/arm64/v8 in the manifest list entries"
        ));
        assert!(is_no_platform_match(
            "no match for platform in manifest: not found"
        ));
        assert!(!is_no_platform_match(
            "manifest for localhost:5000/x:v1 not found: manifest unknown: manifest unknown"
        ));
    }

    #[test]
    fn a_loopback_endpoint_is_used_when_no_loopback_key_matches() {
        let r =
            registries("mirrors:\n  \"reg:5000\":\n    endpoint: [\"http://127.0.0.1:5001\"]\n");
        assert_eq!(engine_domain(&r, "reg:5000"), "127.0.0.1:5001");
    }
}
