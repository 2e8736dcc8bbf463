//! Image resolution against real registries over the OCI distribution API, as containerd's resolver does
//! it (`core/remotes/docker/resolver.go`), with mirrors, credentials and TLS configured like k3s'
//! `registries.yaml` (see [`config`]).
//!
//! A mirror changes only where the image is fetched from; the image keeps its name, and requests to a
//! mirror carry it as `?ns=<registry>`. Endpoints are tried in order: the host's mirror endpoints (or those
//! of the `"*"` mirror), then the registry itself (`https://<host>`; `http://` for `localhost` and loopback
//! addresses, `registry-1.docker.io` for `docker.io`). As containerd's host configuration has it, an
//! `http://` endpoint whose host has `tls` settings, and a loopback registry's own endpoint (its
//! certificate unchecked unless its host has `tls` settings), are asked over TLS first and in the clear
//! when the server answers the handshake in HTTP; port 80 is always plain.
//!
//! Requests go anonymous until a `401` asks for credentials (see [`auth`]): the pull's own (the kubelet's,
//! from the pod's pull secrets) or else the endpoint host's `auth` in `configs`. When every endpoint
//! fails, the error is the most telling one, ranked as containerd ranks them: an error status over "not
//! found" over a failed request.
//!
//! An image index resolves to the entry for the node's platform, chosen as containerd chooses it (see
//! [`crate::platform`]); an index without one fails the pull with containerd's
//! [`NO_PLATFORM_MATCH`](super::runtime::NO_PLATFORM_MATCH), whichever endpoint served it.

mod auth;
mod config;
mod transport;
mod verify;

use std::collections::BTreeMap;
use std::time::Duration;

use http::{Method, StatusCode, header};
use serde_json::Value;
use sha2::{Digest, Sha256};

pub use auth::Credentials;
pub use config::{Auth, AuthError, HostConfig, Mirror, Registries, Tls, WILDCARD, is_loopback};

use super::reference::{DEFAULT_DOMAIN, Reference};
use crate::platform::Platform;
use auth::{Authorizer, Refusal, go_method};
use config::{port, split_url};
use transport::{Request, Response, TlsOptions, Transport, status_text};

/// The manifest media types a pull accepts, as containerd sends them.
pub const MANIFEST_ACCEPT: &str = "application/vnd.oci.image.index.v1+json, \
application/vnd.docker.distribution.manifest.list.v2+json, \
application/vnd.oci.image.manifest.v1+json, \
application/vnd.docker.distribution.manifest.v2+json";

/// The `User-Agent` of registry requests.
const USER_AGENT: &str = "containerd/kube-sim";

/// How many times one request is sent (containerd's `maxAttempts`), answering challenges in between.
const MAX_ATTEMPTS: u32 = 5;

/// How many redirects one request follows (Go's `http.Client`).
const MAX_REDIRECTS: usize = 10;

/// Reading the registry configuration or resolving an image failed; messages are containerd's.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The configuration file could not be read.
    #[error("reading {path}")]
    Read {
        /// The file.
        path: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The configuration is not valid YAML of the expected shape.
    #[error("parsing the registries configuration: {0}")]
    Parse(#[from] serde_yaml::Error),
    /// No endpoint has the image.
    #[error("{reference}: not found")]
    NotFound {
        /// The reference, normalised.
        reference: String,
    },
    /// A request could not be made (`Head "<url>": dial tcp …`, `…: tls: failed to verify certificate: …`).
    #[error("failed to do request: {} {:?}: {source}", go_method(.method), .url)]
    Request {
        /// The method.
        method: Method,
        /// The URL.
        url: String,
        /// The cause.
        #[source]
        source: Box<transport::Error>,
    },
    /// An endpoint took longer than the pull timeout.
    #[error("failed to do request: Head {url:?}: context deadline exceeded")]
    Deadline {
        /// The manifest URL asked.
        url: String,
    },
    /// A request was redirected too often.
    #[error("failed to do request: {} {:?}: stopped after {MAX_REDIRECTS} redirects", go_method(.method), .url)]
    Redirects {
        /// The method.
        method: Method,
        /// The last URL.
        url: String,
    },
    /// Credentials were missing or refused (containerd's `ErrInvalidAuthorization`).
    #[error("pull access denied, repository does not exist or may require authorization: {0}")]
    Denied(String),
    /// The registry answered with an error status.
    #[error("unexpected status from {method} request to {url}: {status}")]
    Status {
        /// The method of the request.
        method: Method,
        /// The URL of the request.
        url: String,
        /// `401 Unauthorized`.
        status: String,
    },
    /// A request could not be authorized (the token server refused or failed).
    #[error("failed to authorize: {0}")]
    Authorize(#[source] auth::Error),
    /// An endpoint host's TLS settings are unusable.
    #[error("{0}")]
    Tls(#[source] Box<transport::Error>),
    /// The pull's credentials cannot be read.
    #[error("{0}")]
    Credentials(#[source] AuthError),
    /// An endpoint or a challenge is unusable.
    #[error("{0}")]
    Config(String),
    /// The registry answered with something that is not a usable manifest or config.
    #[error("{0}")]
    Invalid(String),
    /// The image is an index with no manifest for the node's platform (containerd's `LimitManifests`).
    #[error("no match for platform in manifest: not found")]
    NoPlatformMatch,
}

impl Error {
    /// How telling the error is, as containerd's resolver ranks them: the most telling of all endpoints'
    /// errors is reported, the first of equals.
    fn priority(&self) -> u8 {
        match self {
            Error::Status { .. } => 3,
            Error::NotFound { .. } => 2,
            _ => 1,
        }
    }
}

/// What a pull learnt about an image.
#[derive(Clone, Debug, PartialEq)]
pub struct Resolved {
    /// The digest of the manifest (or index) the reference points to.
    pub digest: String,
    /// The labels of the image config (`config.Labels`).
    pub labels: BTreeMap<String, String>,
}

impl Registries {
    /// Resolves a reference to its manifest digest and reads the config labels of its manifest for
    /// `platform`; `credentials` are the pull's own (the CRI's `AuthConfig`), used at every endpoint instead
    /// of `configs`' `auth`. `timeout` bounds each endpoint.
    pub async fn resolve(
        &self,
        reference: &Reference,
        credentials: Option<&Auth>,
        platform: &Platform,
        timeout: Duration,
    ) -> Result<Resolved, Error> {
        let mut endpoints = self
            .endpoints(&reference.domain)
            .iter()
            .map(|base| self.endpoint(base, reference, credentials))
            .collect::<Result<Vec<_>, Error>>()?;
        let mut most_telling: Option<Error> = None;
        for endpoint in &mut endpoints {
            let outcome = tokio::time::timeout(timeout, endpoint.resolve(reference, platform))
                .await
                .unwrap_or_else(|_| {
                    Err(Error::Deadline {
                        url: endpoint.manifest_url(reference),
                    })
                });
            match outcome {
                Ok(resolved) => return Ok(resolved),
                // What the image holds, not how an endpoint serves it: the others have the same.
                Err(Error::NoPlatformMatch) => return Err(Error::NoPlatformMatch),
                Err(e)
                    if most_telling
                        .as_ref()
                        .is_none_or(|m| e.priority() > m.priority()) =>
                {
                    most_telling = Some(e)
                }
                Err(e) => tracing::debug!(error = %e, "a less telling endpoint failure"),
            }
        }
        Err(most_telling.unwrap_or_else(|| Error::NotFound {
            reference: reference.familiar_with_tag(),
        }))
    }

    /// An endpoint of a pull: how it is spoken to (see the module docs), and with which credentials.
    fn endpoint(
        &self,
        base: &str,
        reference: &Reference,
        credentials: Option<&Auth>,
    ) -> Result<Endpoint, Error> {
        let (scheme, authority, path) =
            split_url(base).ok_or_else(|| Error::Config(format!("invalid endpoint {base:?}")))?;
        let config = self.host_config(authority);
        let settings = config.and_then(|c| c.tls.as_ref());
        let own_loopback =
            is_loopback(&reference.domain) && base == format!("http://{}/v2", reference.domain);
        let port_80 = port(authority) == Some("80");
        let tls_first = scheme == "http" && !port_80 && (settings.is_some() || own_loopback);
        let tls = if scheme == "https" || tls_first {
            let options = TlsOptions {
                settings,
                skip_verify_by_default: own_loopback,
            };
            Some(transport::client_config(&options).map_err(|e| Error::Tls(Box::new(e)))?)
        } else {
            None
        };
        let scheme = if tls_first { "https" } else { scheme };
        let proxied = authority != reference.domain
            && !(reference.domain == DEFAULT_DOMAIN && authority == "registry-1.docker.io");
        let credentials = match credentials {
            Some(own) => own.credentials(),
            None => config
                .and_then(|c| c.auth.as_ref())
                .map(Auth::credentials)
                .unwrap_or_else(|| Ok(Credentials::default())),
        };
        Ok(Endpoint {
            base: format!("{scheme}://{authority}{path}"),
            namespace: proxied.then(|| reference.domain.clone()),
            transport: Transport::new(tls, tls_first),
            authorizer: Authorizer::new(authority, credentials, &reference.path),
        })
    }
}

/// One endpoint of one pull.
struct Endpoint {
    /// `https://host:port/v2`.
    base: String,
    /// The registry the image is named by, for a mirror (`?ns=`).
    namespace: Option<String>,
    transport: Transport,
    authorizer: Authorizer,
}

/// A response and the request that got it (after redirects and a `HEAD` turned `GET`).
struct Reply {
    response: Response,
    method: Method,
    url: String,
}

impl Reply {
    fn status_error(&self) -> Error {
        Error::Status {
            method: self.method.clone(),
            url: self.url.clone(),
            status: status_text(self.response.status),
        }
    }
}

impl Endpoint {
    /// The URL of `<repository>/<tail>` at this endpoint.
    fn url(&self, reference: &Reference, tail: &str) -> String {
        let url = format!("{}/{}/{tail}", self.base, reference.path);
        match &self.namespace {
            Some(ns) => format!("{url}?{}", auth::encode_form(&[("ns", ns)])),
            None => url,
        }
    }

    fn manifest_url(&self, reference: &Reference) -> String {
        self.url(reference, &format!("manifests/{}", reference.lookup()))
    }

    /// The manifest digest (from `HEAD`, or the manifest itself) and the labels of the config of the image
    /// for `platform`; an index without an entry for it is [`Error::NoPlatformMatch`].
    async fn resolve(
        &mut self,
        reference: &Reference,
        platform: &Platform,
    ) -> Result<Resolved, Error> {
        let head = self
            .send(Method::HEAD, &self.manifest_url(reference), MANIFEST_ACCEPT)
            .await?;
        let digest = match head.response.status {
            s if s.is_success() => head.response.header("docker-content-digest"),
            StatusCode::NOT_FOUND => {
                return Err(Error::NotFound {
                    reference: reference.familiar_with_tag(),
                });
            }
            _ => return Err(head.status_error()),
        };
        // The manifest itself: by digest when the registry named it, to read the config.
        let get_url = match &digest {
            Some(d) => self.url(reference, &format!("manifests/{d}")),
            None => self.manifest_url(reference),
        };
        let manifest = self.send(Method::GET, &get_url, MANIFEST_ACCEPT).await?;
        if !manifest.response.status.is_success() {
            return Err(manifest.status_error());
        }
        let body = manifest.response.body;
        let digest = digest.unwrap_or_else(|| sha256_digest(&body));
        let labels = match self.platform_manifest(reference, &body, platform).await {
            Ok(manifest) => self.config_labels(reference, &manifest).await,
            Err(Error::NoPlatformMatch) => return Err(Error::NoPlatformMatch),
            Err(e) => Err(e),
        };
        let labels = labels.unwrap_or_else(|e| {
            tracing::debug!(image = %reference.familiar_with_tag(), error = %e, "no image config labels");
            BTreeMap::new()
        });
        Ok(Resolved { digest, labels })
    }

    /// The image manifest for `platform`: the document itself, or an index's entry for the platform (see
    /// [`platform_entry`]), fetched.
    async fn platform_manifest(
        &mut self,
        reference: &Reference,
        manifest: &[u8],
        platform: &Platform,
    ) -> Result<Value, Error> {
        let doc: Value = serde_json::from_slice(manifest)
            .map_err(|e| Error::Invalid(format!("manifest is not JSON: {e}")))?;
        let Some(entries) = doc.get("manifests").and_then(Value::as_array) else {
            return Ok(doc);
        };
        let pick = platform_entry(entries, platform).ok_or(Error::NoPlatformMatch)?;
        let url = self.url(reference, &format!("manifests/{pick}"));
        let r = self.send(Method::GET, &url, MANIFEST_ACCEPT).await?;
        if !r.response.status.is_success() {
            return Err(r.status_error());
        }
        serde_json::from_slice(&r.response.body)
            .map_err(|e| Error::Invalid(format!("manifest is not JSON: {e}")))
    }

    /// The labels of an image manifest's config.
    async fn config_labels(
        &mut self,
        reference: &Reference,
        doc: &Value,
    ) -> Result<BTreeMap<String, String>, Error> {
        let config = doc
            .pointer("/config/digest")
            .and_then(Value::as_str)
            .ok_or_else(|| Error::Invalid("manifest has no config".into()))?;
        let url = self.url(reference, &format!("blobs/{config}"));
        let r = self.send(Method::GET, &url, "*/*").await?;
        if !r.response.status.is_success() {
            return Err(r.status_error());
        }
        let cfg: Value = serde_json::from_slice(&r.response.body)
            .map_err(|e| Error::Invalid(format!("config is not JSON: {e}")))?;
        Ok(cfg
            .pointer("/config/Labels")
            .and_then(Value::as_object)
            .map(|m| {
                m.iter()
                    .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                    .collect()
            })
            .unwrap_or_default())
    }

    /// A request as containerd's `doWithRetries` sends it: sent again after a `401` the authorizer can
    /// answer (at most [`MAX_ATTEMPTS`] times in all), and as `GET` when a registry refuses `HEAD` of a
    /// manifest with `405`.
    async fn send(&mut self, method: Method, url: &str, accept: &str) -> Result<Reply, Error> {
        let mut method = method;
        let mut previous: Option<(Method, String)> = None;
        let mut attempts = 0;
        loop {
            attempts += 1;
            let reply = self.follow(method.clone(), url, accept).await?;
            let this = Some((reply.method.clone(), reply.url.clone()));
            let repeated = previous == this;
            previous = this;
            let last = attempts >= MAX_ATTEMPTS;
            match reply.response.status {
                StatusCode::UNAUTHORIZED => {
                    match self.authorizer.challenged(&reply.response, repeated) {
                        Ok(()) if !last => {}
                        Ok(()) | Err(Refusal::Unsupported) => return Ok(reply),
                        Err(Refusal::Invalid(m)) => return Err(Error::Denied(m)),
                        Err(Refusal::Credentials(e)) => return Err(Error::Credentials(e)),
                        Err(Refusal::Other(m)) => return Err(Error::Config(m)),
                    }
                }
                StatusCode::METHOD_NOT_ALLOWED
                    if method == Method::HEAD && url.contains("/manifests/") && !last =>
                {
                    method = Method::GET;
                }
                _ => return Ok(reply),
            }
        }
    }

    /// One request, following redirects as Go's client does (credentials only for the endpoint's own
    /// host).
    async fn follow(&mut self, method: Method, url: &str, accept: &str) -> Result<Reply, Error> {
        let mut url = url.to_string();
        for _ in 0..=MAX_REDIRECTS {
            let (scheme, authority, _) =
                split_url(&url).ok_or_else(|| Error::Invalid(format!("invalid URL {url:?}")))?;
            let (scheme, authority) = (scheme.to_string(), authority.to_string());
            let mut headers = vec![
                (header::ACCEPT, accept.to_string()),
                (header::USER_AGENT, USER_AGENT.to_string()),
            ];
            if let Some(value) = self
                .authorizer
                .authorize(&authority, &self.transport)
                .await
                .map_err(Error::Authorize)?
            {
                headers.push((header::AUTHORIZATION, value));
            }
            let request = Request {
                method: method.clone(),
                url: url.clone(),
                headers,
                body: bytes::Bytes::new(),
            };
            let response =
                self.transport
                    .send(&request)
                    .await
                    .map_err(|source| Error::Request {
                        method: method.clone(),
                        url: url.clone(),
                        source: Box::new(source),
                    })?;
            match response.header("location") {
                Some(location) if response.status.is_redirection() => {
                    url = if location.contains("://") {
                        location
                    } else {
                        format!("{scheme}://{authority}{location}")
                    };
                }
                _ => {
                    return Ok(Reply {
                        response,
                        method,
                        url,
                    });
                }
            }
        }
        Err(Error::Redirects { method, url })
    }
}

/// The digest of the image index entry a node of `platform` pulls, as containerd's `FilterPlatforms` and
/// `LimitManifests` pick it: the best ranked of the entries for the platform (see [`Platform::rank`]), the
/// first of equals, entries that name no platform after all others; `None` when no entry is for it.
fn platform_entry<'a>(entries: &'a [Value], platform: &Platform) -> Option<&'a str> {
    entries
        .iter()
        .filter_map(|entry| {
            let rank = match entry.get("platform").filter(|p| !p.is_null()) {
                None => usize::MAX,
                Some(p) => {
                    let field = |name: &str| p[name].as_str().unwrap_or("");
                    let named =
                        Platform::new(field("os"), field("architecture"), p["variant"].as_str());
                    platform.rank(&named)?
                }
            };
            Some((rank, entry["digest"].as_str()?))
        })
        .min_by_key(|(rank, _)| *rank)
        .map(|(_, digest)| digest)
}

/// `sha256:<hex>` of some bytes.
pub fn sha256_digest(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_unreachable_registry_is_a_request_error() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        drop(listener);
        let r = Registries::default();
        let reference = Reference::parse(&format!("127.0.0.1:{port}/x:1")).unwrap();
        let err = r
            .resolve(
                &reference,
                None,
                &Platform::linux_of_build(),
                Duration::from_secs(5),
            )
            .await
            .unwrap_err();
        assert!(
            err.to_string().contains("connection refused"),
            "unexpected error: {err}"
        );
    }

    #[test]
    fn an_index_resolves_to_the_entry_for_the_nodes_platform() {
        let entry = |digest: &str, platform: Value| {
            serde_json::json!({"mediaType": "application/vnd.oci.image.manifest.v1+json",
                "digest": digest, "size": 1, "platform": platform})
        };
        fn linux(arch: &str, variant: Option<&str>) -> Value {
            serde_json::json!({"os": "linux", "architecture": arch, "variant": variant})
        }
        let index = [
            entry("sha256:arm7", linux("arm", Some("v7"))),
            entry("sha256:arm64", linux("arm64", Some("v8"))),
            entry("sha256:386", linux("386", None)),
            entry("sha256:amd64", linux("amd64", None)),
            entry(
                "sha256:win",
                serde_json::json!({"os": "windows", "architecture": "amd64"}),
            ),
        ];
        let pick = |machine: &str, entries: &[Value]| {
            platform_entry(entries, &Platform::linux(machine)).map(str::to_string)
        };
        assert_eq!(pick("x86_64", &index).as_deref(), Some("sha256:amd64"));
        assert_eq!(pick("aarch64", &index).as_deref(), Some("sha256:arm64"));
        assert_eq!(pick("armv7l", &index).as_deref(), Some("sha256:arm7"));
        // containerd's fall-backs: 386 on amd64, arm/v7 on arm64.
        assert_eq!(pick("x86_64", &index[2..3]).as_deref(), Some("sha256:386"));
        assert_eq!(pick("aarch64", &index[..1]).as_deref(), Some("sha256:arm7"));
        // No silent fall-back to the first entry.
        assert_eq!(pick("x86_64", &index[..2]), None);
        assert_eq!(pick("s390x", &index), None);
        assert_eq!(pick("x86_64", &index[4..]), None);
        // An entry that names no platform is taken only when none names the node's.
        let unnamed = serde_json::json!({"digest": "sha256:any", "size": 1});
        let with_unnamed = [unnamed.clone(), index[1].clone()];
        assert_eq!(
            pick("aarch64", &with_unnamed).as_deref(),
            Some("sha256:arm64")
        );
        assert_eq!(pick("x86_64", &with_unnamed).as_deref(), Some("sha256:any"));
    }

    #[test]
    fn mirrors_are_asked_with_the_registry_as_namespace() {
        let r = Registries::from_yaml(
            "mirrors:\n  \"registry.test:5000\":\n    endpoint: [\"http://127.0.0.1:5001\"]\n",
        )
        .unwrap();
        let reference = Reference::parse("registry.test:5000/team/app:v1").unwrap();
        let mirror = r
            .endpoint("http://127.0.0.1:5001/v2", &reference, None)
            .unwrap();
        assert_eq!(
            mirror.manifest_url(&reference),
            "http://127.0.0.1:5001/v2/team/app/manifests/v1?ns=registry.test%3A5000"
        );
        let own = r
            .endpoint("https://registry.test:5000/v2", &reference, None)
            .unwrap();
        assert_eq!(
            own.manifest_url(&reference),
            "https://registry.test:5000/v2/team/app/manifests/v1"
        );
        let hub = Reference::parse("nginx").unwrap();
        let hub_endpoint = r
            .endpoint("https://registry-1.docker.io/v2", &hub, None)
            .unwrap();
        assert_eq!(
            hub_endpoint.manifest_url(&hub),
            "https://registry-1.docker.io/v2/library/nginx/manifests/latest"
        );
    }

    #[test]
    fn http_hosts_with_tls_settings_and_loopback_registries_try_tls_first() {
        let r = Registries::from_yaml(
            "configs:\n  \"mirror.test:5000\":\n    tls: {insecure_skip_verify: true}\n",
        )
        .unwrap();
        let reference = Reference::parse("localhost:5000/app:v1").unwrap();
        let with_tls = r
            .endpoint("http://mirror.test:5000/v2", &reference, None)
            .unwrap();
        assert!(with_tls.base.starts_with("https://"), "{}", with_tls.base);
        let plain = r
            .endpoint("http://other.test:5000/v2", &reference, None)
            .unwrap();
        assert!(plain.base.starts_with("http://"), "{}", plain.base);
        let own = r
            .endpoint("http://localhost:5000/v2", &reference, None)
            .unwrap();
        assert!(own.base.starts_with("https://"), "{}", own.base);
        let port_80 = Reference::parse("localhost:80/app:v1").unwrap();
        let own_80 = r
            .endpoint("http://localhost:80/v2", &port_80, None)
            .unwrap();
        assert!(own_80.base.starts_with("http://"), "{}", own_80.base);
    }
}
