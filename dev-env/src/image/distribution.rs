//! The OCI distribution API through `oci-client`: TLS with the system's
//! roots plus an optional CA file, Basic and Bearer-token auth (the
//! `WWW-Authenticate` challenge), chunked uploads with a monolithic
//! fallback, cross-repository mounts.
//!
//! Plain HTTP is spoken only to a loopback registry without a CA file
//! (`localhost`, `127.0.0.0/8`, `::1`: the registry `dev up` runs) or when
//! `registry.insecure: true` says so. Credentials are those `docker login`
//! stored ([`credentials`](super::credentials)). Every request runs under a
//! deadline, and a refusal names the registry and how to log in.

use std::{
    net::IpAddr,
    path::{Path, PathBuf},
    time::Duration,
};

use bytes::Bytes;
use oci_client::{
    Reference,
    client::{Certificate, CertificateEncoding, ClientConfig, ClientProtocol},
    errors::{OciDistributionError, OciErrorCode},
    secrets::RegistryAuth,
};

use super::credentials::{self, Credential};

/// The media type of an OCI image manifest.
pub const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
/// The media type of a Docker image manifest (schema 2), which the Docker
/// engine pushes.
pub const DOCKER_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";
/// The header in which the registry states a manifest's digest.
pub const DIGEST_HEADER: &str = "Docker-Content-Digest";

/// The deadline of a request without a large body.
const SMALL_REQUEST: Duration = Duration::from_secs(30);
/// The deadline of a blob upload: large layers take a while.
const BLOB_UPLOAD: Duration = Duration::from_secs(600);
/// How long a connection may take to open.
const CONNECT: Duration = Duration::from_secs(5);

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(
        "cannot reach the registry at {url}; is it running? `cargo xtask dev up` starts it, and `registry.external` must name a registry that answers"
    )]
    Unreachable {
        url: String,
        #[source]
        source: OciDistributionError,
    },
    #[error(
        "the registry at {host} presented a certificate this machine does not trust; set `registry.caFile` to the CA certificate that signed it"
    )]
    Untrusted {
        host: String,
        #[source]
        source: OciDistributionError,
    },
    #[error("the registry at {url} did not answer within {}s; check that it is healthy", after.as_secs())]
    Timeout { url: String, after: Duration },
    #[error(
        "the registry {host} refused {credentials} ({what}); log in with `docker login {host}`: dev-env reads the credentials it stores"
    )]
    Unauthorized {
        host: String,
        what: String,
        /// Which credentials were sent, never the secret.
        credentials: String,
    },
    #[error("the registry at {host} answered `{what}` with an error")]
    Registry {
        host: String,
        what: String,
        #[source]
        source: OciDistributionError,
    },
    #[error("cannot read `registry.caFile` {}; point it at a PEM certificate", path.display())]
    CaFile {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot find the credentials for the registry {host}")]
    Credentials {
        host: String,
        #[source]
        source: credentials::Error,
    },
    #[error("`{host}/{repo}` is not a valid image reference")]
    Reference {
        host: String,
        repo: String,
        #[source]
        source: oci_client::ParseError,
    },
}

/// How to reach one registry.
#[derive(Debug, Clone, Copy, Default)]
pub struct Options<'a> {
    /// A PEM CA certificate trusted besides the system's roots.
    pub ca_file: Option<&'a Path>,
    /// Plain HTTP, whatever the host (`registry.insecure: true`).
    pub insecure: bool,
}

/// A manifest as the registry serves it.
#[derive(Debug, Clone)]
pub struct Manifest {
    /// The exact bytes served; their sha256 is the manifest's digest.
    pub bytes: Bytes,
    /// The `Docker-Content-Digest` header, as checked against the bytes
    /// by the client (the bytes' digest when a registry sends none).
    pub digest_header: Option<String>,
    /// The manifest's `mediaType`.
    pub media_type: Option<String>,
}

/// A client for one registry, addressed as `host:port`.
#[derive(Clone)]
pub struct Client {
    host: String,
    /// The name requests go to: `localhost` is dialled as 127.0.0.1, where
    /// the registry is published, when there is no certificate to match.
    dial: String,
    scheme: &'static str,
    auth: Option<RegistryAuth>,
    credential: Option<Credential>,
    /// Which credentials are used, for messages.
    credentials: String,
    oci: oci_client::Client,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("host", &self.host)
            .field("scheme", &self.scheme)
            .field("credentials", &self.credentials)
            .finish_non_exhaustive()
    }
}

impl Client {
    /// An anonymous plain-HTTP client for a loopback registry at `host`
    /// (`localhost:5001`), such as the one `dev up` runs.
    pub fn new(host: &str) -> Client {
        crate::install_crypto_provider();
        let dial = loopback_dial(host);
        let config = ClientConfig {
            protocol: ClientProtocol::Http,
            ..client_config()
        };
        Client {
            host: host.to_string(),
            dial,
            scheme: "http",
            auth: None,
            credential: None,
            credentials: String::from("anonymous access"),
            oci: oci_client::Client::new(config),
        }
    }

    /// A client for the registry at `host` with the credentials `docker
    /// login` stored for it: TLS unless the host is loopback without a CA
    /// file, or `options.insecure`.
    pub fn connect(host: &str, options: Options<'_>) -> Result<Client, Error> {
        let credential = credentials::lookup(host).map_err(|source| Error::Credentials {
            host: host.to_string(),
            source,
        })?;
        Client::with_credential(host, options, credential)
    }

    /// [`Client::connect`] with the credentials given.
    pub fn with_credential(
        host: &str,
        options: Options<'_>,
        credential: Option<Credential>,
    ) -> Result<Client, Error> {
        crate::install_crypto_provider();
        let plain = options.insecure || (options.ca_file.is_none() && is_loopback(host));
        let mut config = client_config();
        config.protocol = if plain {
            ClientProtocol::Http
        } else {
            ClientProtocol::Https
        };
        if let Some(path) = options.ca_file {
            let data = std::fs::read(path).map_err(|source| Error::CaFile {
                path: path.to_path_buf(),
                source,
            })?;
            config.extra_root_certificates.push(Certificate {
                encoding: CertificateEncoding::Pem,
                data,
            });
        }
        let (auth, described) = match &credential {
            Some(c) => (
                Some(registry_auth(c)),
                format!("the credentials from {}", c.source),
            ),
            None => (None, no_credentials(host)),
        };
        let oci = oci_client::Client::try_from(config).map_err(|source| Error::Registry {
            host: host.to_string(),
            what: String::from("a client for it"),
            source,
        })?;
        Ok(Client {
            host: host.to_string(),
            dial: if plain {
                loopback_dial(host)
            } else {
                host.to_string()
            },
            scheme: if plain { "http" } else { "https" },
            auth,
            credential,
            credentials: described,
            oci,
        })
    }

    /// The `host:port` this client talks to, as given.
    pub fn host(&self) -> &str {
        &self.host
    }

    /// The credentials this client sends, for the engine's push.
    pub fn credential(&self) -> Option<&Credential> {
        self.credential.as_ref()
    }

    /// Whether the registry answers over HTTP at all (`HEAD` of a blob no
    /// one has; any answer counts, a refusal included): whether a push can
    /// start.
    pub async fn ping(&self) -> Result<(), Error> {
        let reference = self.reference("dev-env/ping", None)?;
        let nothing = format!("sha256:{}", "0".repeat(64));
        self.authorise(&reference).await;
        let asked = self.oci.blob_exists(&reference, &nothing);
        match tokio::time::timeout(SMALL_REQUEST, asked).await {
            Err(_) => Err(self.timeout(SMALL_REQUEST)),
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => match self.error("HEAD /v2/dev-env/ping/blobs/…", e) {
                e @ (Error::Unreachable { .. } | Error::Untrusted { .. }) => Err(e),
                _ => Ok(()),
            },
        }
    }

    /// `HEAD` a blob: whether repository `repo` already has `digest`.
    pub async fn blob_exists(&self, repo: &str, digest: &str) -> Result<bool, Error> {
        let reference = self.reference(repo, None)?;
        let what = format!("HEAD /v2/{repo}/blobs/{digest}");
        self.authorise(&reference).await;
        self.call(
            &what,
            SMALL_REQUEST,
            self.oci.blob_exists(&reference, digest),
        )
        .await
    }

    /// `HEAD` a manifest by digest: whether repository `repo` still serves
    /// `digest` (a garbage collection or a lost volume removes it).
    pub async fn manifest_exists(&self, repo: &str, digest: &str) -> Result<bool, Error> {
        Ok(self.get_manifest(repo, digest).await?.is_some())
    }

    /// Uploads `bytes` as blob `digest` of `repo`: in chunks, or in one
    /// request when the registry does not take chunks.
    pub async fn upload_blob(&self, repo: &str, digest: &str, bytes: Bytes) -> Result<(), Error> {
        let reference = self.reference(repo, None)?;
        let what = format!("upload of blob {digest} to {repo}");
        self.authorise(&reference).await;
        self.call(
            &what,
            BLOB_UPLOAD,
            self.oci.push_blob(&reference, bytes, digest),
        )
        .await
        .map(drop)
    }

    /// Mounts blob `digest` from repository `from` into `repo` without
    /// uploading it; `false` when the registry does not offer the mount.
    pub async fn mount_blob(&self, repo: &str, from: &str, digest: &str) -> Result<bool, Error> {
        let (reference, source) = (self.reference(repo, None)?, self.reference(from, None)?);
        let what = format!("mount of blob {digest} from {from} into {repo}");
        self.authorise(&reference).await;
        match self
            .call(
                &what,
                SMALL_REQUEST,
                self.oci.mount_blob(&reference, &source, digest),
            )
            .await
        {
            Ok(()) => Ok(true),
            // 202: the registry opened an upload instead of mounting.
            Err(Error::Registry {
                source: OciDistributionError::SpecViolationError(_),
                ..
            }) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// `PUT` a manifest under `reference` (a tag); returns the digest the
    /// registry's `Location` states for it.
    pub async fn put_manifest(
        &self,
        repo: &str,
        reference: &str,
        media_type: &str,
        bytes: Bytes,
    ) -> Result<Option<String>, Error> {
        let target = self.reference(repo, Some(reference))?;
        let what = format!("PUT /v2/{repo}/manifests/{reference}");
        let content_type = http::HeaderValue::from_str(media_type)
            .unwrap_or(http::HeaderValue::from_static(OCI_MANIFEST));
        self.authorise(&target).await;
        let location = self
            .call(
                &what,
                SMALL_REQUEST,
                self.oci.push_manifest_raw(&target, bytes, content_type),
            )
            .await?;
        Ok(location
            .rsplit('/')
            .next()
            .filter(|last| last.starts_with("sha256:"))
            .map(str::to_string))
    }

    /// `GET` the manifest at `reference` (a tag or a digest); `None` when
    /// the registry does not have it. The client checks the registry's
    /// `Docker-Content-Digest` against the bytes, and a digest reference
    /// against both.
    pub async fn get_manifest(
        &self,
        repo: &str,
        reference: &str,
    ) -> Result<Option<Manifest>, Error> {
        let target = self.reference(repo, Some(reference))?;
        let what = format!("GET /v2/{repo}/manifests/{reference}");
        self.authorise(&target).await;
        let pulled = self.oci.pull_manifest_raw(
            &target,
            self.auth.as_ref().unwrap_or(&RegistryAuth::Anonymous),
            &[OCI_MANIFEST, DOCKER_MANIFEST],
        );
        let pulled = tokio::time::timeout(SMALL_REQUEST, pulled).await;
        let (bytes, digest) = match pulled {
            Err(_) => return Err(self.timeout(SMALL_REQUEST)),
            Ok(Err(e)) if is_not_found(&e) => return Ok(None),
            Ok(Err(e)) => return Err(self.error(&what, e)),
            Ok(Ok(pulled)) => pulled,
        };
        let media_type = serde_json::from_slice::<serde_json::Value>(&bytes)
            .ok()
            .and_then(|v| Some(v.get("mediaType")?.as_str()?.to_string()));
        Ok(Some(Manifest {
            bytes,
            digest_header: Some(digest),
            media_type,
        }))
    }

    /// `<host>/<repo>[:tag|@digest]` as the client addresses it.
    fn reference(&self, repo: &str, at: Option<&str>) -> Result<Reference, Error> {
        let text = match at {
            Some(d) if d.contains(':') => format!("{}/{repo}@{d}", self.dial),
            Some(tag) => format!("{}/{repo}:{tag}", self.dial),
            None => format!("{}/{repo}", self.dial),
        };
        text.parse().map_err(|source| Error::Reference {
            host: self.host.clone(),
            repo: repo.to_string(),
            source,
        })
    }

    /// Hands the credentials to the client for this registry; it asks for a
    /// token when the registry challenges for one, once per repository.
    async fn authorise(&self, reference: &Reference) {
        if let Some(auth) = &self.auth {
            self.oci
                .store_auth_if_needed(reference.resolve_registry(), auth)
                .await;
        }
    }

    /// Runs `call` under `deadline`, its error turned into one that says
    /// what to do.
    async fn call<T>(
        &self,
        what: &str,
        deadline: Duration,
        call: impl Future<Output = Result<T, OciDistributionError>>,
    ) -> Result<T, Error> {
        match tokio::time::timeout(deadline, call).await {
            Err(_) => Err(self.timeout(deadline)),
            Ok(result) => result.map_err(|e| self.error(what, e)),
        }
    }

    fn timeout(&self, after: Duration) -> Error {
        Error::Timeout {
            url: self.url(),
            after,
        }
    }

    fn url(&self) -> String {
        format!("{}://{}", self.scheme, self.dial)
    }

    fn error(&self, what: &str, source: OciDistributionError) -> Error {
        match classify(&source) {
            Kind::Refused => Error::Unauthorized {
                host: self.host.clone(),
                what: what.to_string(),
                credentials: self.credentials.clone(),
            },
            Kind::Untrusted => Error::Untrusted {
                host: self.host.clone(),
                source,
            },
            Kind::Unreachable => Error::Unreachable {
                url: self.url(),
                source,
            },
            Kind::Other => Error::Registry {
                host: self.host.clone(),
                what: what.to_string(),
                source,
            },
        }
    }
}

/// What a failure of the client means to the user.
enum Kind {
    Refused,
    Untrusted,
    Unreachable,
    Other,
}

fn classify(e: &OciDistributionError) -> Kind {
    let refused = |code: u16| code == 401 || code == 403;
    match e {
        OciDistributionError::UnauthorizedError { .. }
        | OciDistributionError::AuthenticationFailure(_) => Kind::Refused,
        OciDistributionError::ServerError { code, .. } if refused(*code) => Kind::Refused,
        OciDistributionError::RegistryError { envelope, .. }
            if envelope
                .errors
                .iter()
                .any(|e| matches!(e.code, OciErrorCode::Unauthorized | OciErrorCode::Denied)) =>
        {
            Kind::Refused
        }
        OciDistributionError::RequestError(r) => {
            if r.status().is_some_and(|s| refused(s.as_u16())) {
                return Kind::Refused;
            }
            let chain = crate::error_chain(r);
            if chain.contains("certificate") || chain.contains("UnknownIssuer") {
                Kind::Untrusted
            } else if r.is_connect() || r.is_timeout() || r.is_request() {
                Kind::Unreachable
            } else {
                Kind::Other
            }
        }
        _ => Kind::Other,
    }
}

/// Whether the registry said it has no such manifest or repository.
fn is_not_found(e: &OciDistributionError) -> bool {
    match e {
        OciDistributionError::ServerError { code, .. } => *code == 404,
        OciDistributionError::ImageManifestNotFoundError(_) => true,
        OciDistributionError::RegistryError { envelope, .. } => envelope.errors.iter().all(|e| {
            matches!(
                e.code,
                OciErrorCode::ManifestUnknown
                    | OciErrorCode::NameUnknown
                    | OciErrorCode::BlobUnknown
            )
        }),
        OciDistributionError::RequestError(r) => r.status().is_some_and(|s| s.as_u16() == 404),
        _ => false,
    }
}

/// Blobs go up monolithically (`POST`, then one `PUT` with the bytes):
/// one round trip fewer per blob than a chunked upload's `PATCH`, and the
/// way every registry must accept.
fn client_config() -> ClientConfig {
    ClientConfig {
        connect_timeout: Some(CONNECT),
        read_timeout: Some(SMALL_REQUEST),
        use_monolithic_push: true,
        ..ClientConfig::default()
    }
}

fn registry_auth(credential: &Credential) -> RegistryAuth {
    // An identity token stands in for the password of the token exchange,
    // as registries that issue them accept.
    RegistryAuth::Basic(credential.username.clone(), credential.secret.clone())
}

fn no_credentials(host: &str) -> String {
    match credentials::config_path() {
        Some(path) => format!(
            "anonymous access (no credentials for {host} in {})",
            path.display()
        ),
        None => String::from("anonymous access (no Docker client configuration found)"),
    }
}

/// Whether `host` (`host:port`, `[::1]:port`) names this machine.
pub fn is_loopback(host: &str) -> bool {
    let name = match host.strip_prefix('[') {
        Some(rest) => rest.split(']').next().unwrap_or(rest),
        None => host.rsplit_once(':').map_or(host, |(name, _)| name),
    };
    name.eq_ignore_ascii_case("localhost")
        || name.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// `localhost:<port>` as `127.0.0.1:<port>`, where the registry is
/// published; any other host as it is.
fn loopback_dial(host: &str) -> String {
    match host.strip_prefix("localhost:") {
        Some(port) => format!("127.0.0.1:{port}"),
        None => host.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_hosts_are_localhost_127_and_the_ipv6_one() {
        for host in [
            "localhost:5000",
            "127.0.0.1:5000",
            "127.3.2.1:80",
            "[::1]:5000",
            "localhost",
        ] {
            assert!(is_loopback(host), "{host}");
        }
        for host in [
            "ghcr.io",
            "reg.lan:5000",
            "10.0.0.1:5000",
            "[fd00::1]:5000",
            "localhost.example:1",
        ] {
            assert!(!is_loopback(host), "{host}");
        }
    }

    #[test]
    fn tls_unless_loopback_without_a_ca_or_insecure() {
        let scheme = |host: &str, options: Options<'_>| {
            Client::with_credential(host, options, None).unwrap().scheme
        };
        assert_eq!(scheme("localhost:5000", Options::default()), "http");
        assert_eq!(scheme("reg.lan:5000", Options::default()), "https");
        let insecure = Options {
            insecure: true,
            ..Options::default()
        };
        assert_eq!(scheme("reg.lan:5000", insecure), "http");
        let dir = tempfile::tempdir().unwrap();
        let ca = dir.path().join("ca.pem");
        let key = rcgen::KeyPair::generate().unwrap();
        let params = rcgen::CertificateParams::new(vec![String::from("localhost")]).unwrap();
        std::fs::write(&ca, params.self_signed(&key).unwrap().pem()).unwrap();
        let with_ca = Options {
            ca_file: Some(&ca),
            ..Options::default()
        };
        assert_eq!(scheme("127.0.0.1:5000", with_ca), "https");
    }

    #[test]
    fn a_missing_ca_file_is_named() {
        let options = Options {
            ca_file: Some(Path::new("/nonexistent/ca.pem")),
            ..Options::default()
        };
        let err = Client::with_credential("reg.lan", options, None)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("/nonexistent/ca.pem") && err.contains("registry.caFile"),
            "{err}"
        );
    }

    #[test]
    fn debug_shows_no_secret() {
        let credential = Credential {
            username: String::from("ci"),
            secret: String::from("hunter2"),
            source: String::from("a test"),
        };
        let client =
            Client::with_credential("reg.lan", Options::default(), Some(credential)).unwrap();
        let shown = format!("{client:?}");
        assert!(
            !shown.contains("hunter2") && shown.contains("a test"),
            "{shown}"
        );
    }
}
