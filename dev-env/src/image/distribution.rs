//! The OCI distribution API, spoken by dev-env itself ([`wire`]): TLS
//! with the system's roots plus an optional CA file ([`trust`]), Basic and
//! Bearer-token auth (the `WWW-Authenticate` challenge), monolithic
//! uploads, cross-repository mounts.
//!
//! Plain HTTP is spoken only to a loopback registry without a CA file
//! (`localhost`, `127.0.0.0/8`, `::1`: the registry `dev up` runs) or when
//! `registry.insecure: true` says so. Credentials are those `docker login`
//! stored ([`credentials`](super::credentials)). Every request runs under a
//! deadline, and a refusal names the registry and how to log in.

pub mod index;
mod trust;
mod wire;

use std::{
    net::IpAddr,
    path::{Path, PathBuf},
    sync::Arc,
    time::Duration,
};

use bytes::Bytes;
use http::{Method, StatusCode, header};
use rustls::pki_types::{CertificateDer, pem::PemObject as _};

use super::credentials::{self, Credential};
use crate::platform::Platform;
use wire::{Request, Response, Wire};

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
        source: wire::Error,
    },
    #[error("the registry at {host} presented a certificate this machine does not trust: {reason}")]
    Untrusted {
        host: String,
        /// What is wrong with it, and what to do.
        reason: String,
        #[source]
        source: wire::Error,
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
        source: wire::Error,
    },
    #[error("the registry at {host} answered `{what}` with {status}{said}")]
    Answered {
        host: String,
        what: String,
        status: StatusCode,
        /// `: <the registry's error messages>`, or nothing.
        said: String,
    },
    #[error(
        "the registry at {host} answered `{what}` with bytes whose digest is {served}; it does not hold what was asked for"
    )]
    Digest {
        host: String,
        what: String,
        served: String,
    },
    #[error(
        "`{what}` at the registry {host} is an image index without an image for {platform} (it has {found}); push one built for {platform}, the cluster's platform"
    )]
    NoPlatform {
        host: String,
        what: String,
        platform: String,
        /// The platforms of its entries.
        found: String,
    },
    #[error(
        "`{what}` at the registry {host} is an image index whose image for {platform}, {digest}, the registry does not serve"
    )]
    MissingEntry {
        host: String,
        what: String,
        platform: String,
        digest: String,
    },
    #[error("`{what}` at the registry {host} is an image index dev-env cannot read")]
    BadIndex { host: String, what: String },
    #[error("cannot read `registry.caFile` {}; point it at a PEM certificate", path.display())]
    CaFile {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("`registry.caFile` {} holds no PEM certificate; point it at one", path.display())]
    CaFileEmpty { path: PathBuf },
    #[error("cannot make a TLS client for the registry {host}")]
    Tls {
        host: String,
        #[source]
        source: rustls::Error,
    },
    #[error("cannot make a client for the registry {host}")]
    Client {
        host: String,
        #[source]
        source: wire::Error,
    },
    #[error("cannot find the credentials for the registry {host}")]
    Credentials {
        host: String,
        #[source]
        source: credentials::Error,
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
    /// The `Docker-Content-Digest` header as the registry sent it (the
    /// bytes' digest when it sends none).
    pub digest_header: Option<String>,
    /// The manifest's `mediaType`, else the `Content-Type` it was served
    /// with.
    pub media_type: Option<String>,
}

/// An image as a reference names it, for one platform.
#[derive(Debug, Clone)]
pub struct Image {
    /// What the reference serves: an image manifest, or an index of them.
    /// Its digest is the image's: pods that pull by it report it.
    pub served: Manifest,
    /// The image manifest for the platform: `served` itself, or the entry
    /// of the index for the platform.
    pub manifest: Manifest,
}

/// A client for one registry, addressed as `host:port`.
#[derive(Clone)]
pub struct Client {
    host: String,
    /// The name requests go to: `localhost` is dialled as 127.0.0.1, where
    /// the registry is published, when there is no certificate to match.
    dial: String,
    scheme: &'static str,
    credential: Option<Credential>,
    /// Which credentials are used, for messages.
    credentials: String,
    /// `registry.caFile`, for messages.
    ca_file: Option<PathBuf>,
    wire: Arc<Wire>,
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
        let options = Options {
            insecure: true,
            ..Options::default()
        };
        let made = Client::with_credential(host, options, None);
        // Without a CA file and with no TLS to speak, nothing is read that
        // could fail; a client that cannot be made is a broken build.
        made.unwrap_or_else(|e| panic!("a plain-HTTP registry client: {}", crate::error_chain(&e)))
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
        let plain = options.insecure || (options.ca_file.is_none() && is_loopback(host));
        let trusted = match options.ca_file {
            Some(path) => read_ca_file(path)?,
            None => Vec::new(),
        };
        let tls = trust::client_config(trusted).map_err(|source| Error::Tls {
            host: host.to_string(),
            source,
        })?;
        let (scheme, dial) = if plain {
            ("http", loopback_dial(host))
        } else {
            ("https", host.to_string())
        };
        let wire = Wire::new(
            format!("{scheme}://{dial}"),
            tls,
            credential.as_ref(),
            (CONNECT, SMALL_REQUEST),
        )
        .map_err(|source| Error::Client {
            host: host.to_string(),
            source,
        })?;
        let described = match &credential {
            Some(c) => format!("the credentials from {}", c.source),
            None => no_credentials(host),
        };
        Ok(Client {
            host: host.to_string(),
            dial,
            scheme,
            credential,
            credentials: described,
            ca_file: options.ca_file.map(Path::to_path_buf),
            wire: Arc::new(wire),
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
        let nothing = format!("sha256:{}", "0".repeat(64));
        let request = request(Method::HEAD, format!("/v2/dev-env/ping/blobs/{nothing}"));
        let what = "HEAD /v2/dev-env/ping/blobs/…";
        match self
            .exchange(what, SMALL_REQUEST, &request.pull("dev-env/ping"))
            .await
        {
            Ok(_) => Ok(()),
            Err(
                e @ (Error::Unreachable { .. } | Error::Untrusted { .. } | Error::Timeout { .. }),
            ) => Err(e),
            Err(_) => Ok(()),
        }
    }

    /// `HEAD` a blob: whether repository `repo` already has `digest`.
    pub async fn blob_exists(&self, repo: &str, digest: &str) -> Result<bool, Error> {
        let what = format!("HEAD /v2/{repo}/blobs/{digest}");
        let request = request(Method::HEAD, format!("/v2/{repo}/blobs/{digest}")).pull(repo);
        let response = self.exchange(&what, SMALL_REQUEST, &request).await?;
        match response.status {
            StatusCode::OK => Ok(true),
            StatusCode::NOT_FOUND => Ok(false),
            _ => Err(self.answered(&what, &response)),
        }
    }

    /// Whether repository `repo` still serves `digest` (a garbage collection
    /// or a lost volume removes it), for `platform` when given: an index
    /// must have its image for it.
    pub async fn manifest_exists(
        &self,
        repo: &str,
        digest: &str,
        platform: Option<&Platform>,
    ) -> Result<bool, Error> {
        Ok(match platform {
            Some(platform) => self.get_image(repo, digest, platform).await?.is_some(),
            None => self.get_manifest(repo, digest).await?.is_some(),
        })
    }

    /// The image at `reference` for `platform`: what it serves and, when
    /// that is an index, its entry for the platform; `None` when the
    /// registry has nothing there. An index without an entry for the
    /// platform is [`Error::NoPlatform`], naming the platforms it has.
    pub async fn get_image(
        &self,
        repo: &str,
        reference: &str,
        platform: &Platform,
    ) -> Result<Option<Image>, Error> {
        let Some(served) = self.get_manifest(repo, reference).await? else {
            return Ok(None);
        };
        if !index::is_index(served.media_type.as_deref()) {
            let manifest = served.clone();
            return Ok(Some(Image { served, manifest }));
        }
        let what = format!("{repo}:{reference}");
        let digest = match index::choose(&served.bytes, platform) {
            index::Choice::Entry(digest) => digest,
            index::Choice::None(found) => {
                return Err(Error::NoPlatform {
                    host: self.host.clone(),
                    what,
                    platform: platform.to_string(),
                    found: if found.is_empty() {
                        String::from("no entry")
                    } else {
                        found.join(", ")
                    },
                });
            }
            index::Choice::Unreadable => {
                return Err(Error::BadIndex {
                    host: self.host.clone(),
                    what,
                });
            }
        };
        match self.get_manifest(repo, &digest).await? {
            Some(manifest) => Ok(Some(Image { served, manifest })),
            None => Err(Error::MissingEntry {
                host: self.host.clone(),
                what,
                platform: platform.to_string(),
                digest,
            }),
        }
    }

    /// Uploads `bytes` as blob `digest` of `repo` in one request (`POST`,
    /// then one `PUT` with the bytes): one round trip fewer per blob than a
    /// chunked upload's `PATCH`, and the way every registry must accept.
    pub async fn upload_blob(&self, repo: &str, digest: &str, bytes: Bytes) -> Result<(), Error> {
        let what = format!("upload of blob {digest} to {repo}");
        let upload = async {
            let start = request(Method::POST, format!("/v2/{repo}/blobs/uploads/")).push(repo);
            let started = self.exchange(&what, BLOB_UPLOAD, &start).await?;
            let location = match (started.status, started.header(header::LOCATION)) {
                (StatusCode::ACCEPTED, Some(location)) => location.to_string(),
                _ => return Err(self.answered(&what, &started)),
            };
            let separator = if location.contains('?') { '&' } else { '?' };
            let mut put =
                request(Method::PUT, format!("{location}{separator}digest={digest}")).push(repo);
            put.headers
                .push(wire::content_type("application/octet-stream"));
            put.body = Some(bytes);
            let done = self.exchange(&what, BLOB_UPLOAD, &put).await?;
            match done.status {
                StatusCode::CREATED => Ok(()),
                _ => Err(self.answered(&what, &done)),
            }
        };
        match tokio::time::timeout(BLOB_UPLOAD, upload).await {
            Err(_) => Err(self.timeout(BLOB_UPLOAD)),
            Ok(done) => done,
        }
    }

    /// Mounts blob `digest` from repository `from` into `repo` without
    /// uploading it; `false` when the registry does not offer the mount.
    pub async fn mount_blob(&self, repo: &str, from: &str, digest: &str) -> Result<bool, Error> {
        let what = format!("mount of blob {digest} from {from} into {repo}");
        let mut mount = request(
            Method::POST,
            format!("/v2/{repo}/blobs/uploads/?mount={digest}&from={from}"),
        )
        .push(repo);
        mount.scope = format!("{} repository:{from}:pull", mount.scope);
        let response = self.exchange(&what, SMALL_REQUEST, &mount).await?;
        match response.status {
            StatusCode::CREATED => Ok(true),
            // The registry opened an upload instead of mounting.
            StatusCode::ACCEPTED => Ok(false),
            _ => Err(self.answered(&what, &response)),
        }
    }

    /// `PUT` a manifest under `reference` (a tag); returns the digest the
    /// registry states for it (its `Location`, or `Docker-Content-Digest`).
    pub async fn put_manifest(
        &self,
        repo: &str,
        reference: &str,
        media_type: &str,
        bytes: Bytes,
    ) -> Result<Option<String>, Error> {
        let what = format!("PUT /v2/{repo}/manifests/{reference}");
        let mut put = request(Method::PUT, format!("/v2/{repo}/manifests/{reference}")).push(repo);
        put.headers.push(wire::content_type(media_type));
        put.body = Some(bytes);
        let response = self.exchange(&what, SMALL_REQUEST, &put).await?;
        if response.status != StatusCode::CREATED {
            return Err(self.answered(&what, &response));
        }
        let from_location = response
            .header(header::LOCATION)
            .and_then(|l| l.rsplit('/').next())
            .filter(|last| last.starts_with("sha256:"));
        let stated = from_location.or_else(|| response.header(DIGEST_HEADER));
        Ok(stated.map(str::to_string))
    }

    /// `GET` the manifest at `reference` (a tag or a digest) as served: an
    /// image manifest or an index; `None` when the registry does not have
    /// it. A digest reference must be the digest of the bytes served.
    pub async fn get_manifest(
        &self,
        repo: &str,
        reference: &str,
    ) -> Result<Option<Manifest>, Error> {
        let what = format!("GET /v2/{repo}/manifests/{reference}");
        let mut get = request(Method::GET, format!("/v2/{repo}/manifests/{reference}")).pull(repo);
        // Without the index types, a registry answers 404 for an index.
        let accepted = [
            OCI_MANIFEST,
            DOCKER_MANIFEST,
            index::OCI_INDEX,
            index::DOCKER_LIST,
        ];
        get.headers.push((header::ACCEPT, accepted.join(", ")));
        let response = self.exchange(&what, SMALL_REQUEST, &get).await?;
        match response.status {
            StatusCode::OK => {}
            StatusCode::NOT_FOUND => return Ok(None),
            _ => return Err(self.answered(&what, &response)),
        }
        let served = super::oci::sha256_digest(&response.body);
        if reference.starts_with("sha256:") && served != reference {
            return Err(Error::Digest {
                host: self.host.clone(),
                what,
                served,
            });
        }
        let header = response
            .header(DIGEST_HEADER)
            .map_or(served, str::to_string);
        let media_type = serde_json::from_slice::<serde_json::Value>(&response.body)
            .ok()
            .and_then(|v| Some(v.get("mediaType")?.as_str()?.to_string()))
            .or_else(|| {
                let served_as = response.header(header::CONTENT_TYPE)?;
                Some(served_as.split(';').next()?.trim().to_string())
            });
        Ok(Some(Manifest {
            bytes: response.body,
            digest_header: Some(header),
            media_type,
        }))
    }

    /// Sends `request` under `deadline`; a transport failure, and a refusal
    /// of the credentials, turned into an error that says what to do.
    async fn exchange(
        &self,
        what: &str,
        deadline: Duration,
        request: &Request,
    ) -> Result<Response, Error> {
        let response = match tokio::time::timeout(deadline, self.wire.send(request)).await {
            Err(_) => return Err(self.timeout(deadline)),
            Ok(Err(e)) => return Err(self.error(what, e)),
            Ok(Ok(response)) => response,
        };
        match response.status {
            StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => Err(self.refused(what)),
            _ => Ok(response),
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

    fn refused(&self, what: &str) -> Error {
        Error::Unauthorized {
            host: self.host.clone(),
            what: what.to_string(),
            credentials: self.credentials.clone(),
        }
    }

    /// An answer the operation did not expect, with the registry's own
    /// error messages.
    fn answered(&self, what: &str, response: &Response) -> Error {
        let said = registry_errors(&response.body);
        Error::Answered {
            host: self.host.clone(),
            what: what.to_string(),
            status: response.status,
            said: if said.is_empty() {
                String::new()
            } else {
                format!(": {said}")
            },
        }
    }

    fn error(&self, what: &str, source: wire::Error) -> Error {
        match &source {
            wire::Error::TokenRefused { status, .. }
                if *status == StatusCode::UNAUTHORIZED || *status == StatusCode::FORBIDDEN =>
            {
                self.refused(what)
            }
            wire::Error::Send(e) => match trust::tls_error(e) {
                Some(tls) => Error::Untrusted {
                    host: self.host.clone(),
                    reason: trust::refusal(tls, &self.host, self.ca_file.as_deref()),
                    source,
                },
                None if e.is_connect() || e.is_timeout() || e.is_request() => Error::Unreachable {
                    url: self.url(),
                    source,
                },
                None => self.other(what, source),
            },
            _ => self.other(what, source),
        }
    }

    fn other(&self, what: &str, source: wire::Error) -> Error {
        Error::Registry {
            host: self.host.clone(),
            what: what.to_string(),
            source,
        }
    }
}

/// A request with no header, body or scope yet.
fn request(method: Method, target: String) -> Request {
    Request {
        method,
        target,
        scope: String::new(),
        headers: Vec::new(),
        body: None,
    }
}

impl Request {
    /// The request, with the access to read `repo`.
    fn pull(self, repo: &str) -> Request {
        Request {
            scope: format!("repository:{repo}:pull"),
            ..self
        }
    }

    /// The request, with the access to write to `repo`.
    fn push(self, repo: &str) -> Request {
        Request {
            scope: format!("repository:{repo}:pull,push"),
            ..self
        }
    }
}

/// The `code: message` of each error in a registry's error body.
fn registry_errors(body: &[u8]) -> String {
    #[derive(serde::Deserialize)]
    struct Body {
        errors: Vec<Entry>,
    }
    #[derive(serde::Deserialize)]
    struct Entry {
        code: Option<String>,
        message: Option<String>,
    }
    let Ok(body) = serde_json::from_slice::<Body>(body) else {
        return String::new();
    };
    let said: Vec<String> = body
        .errors
        .into_iter()
        .map(|e| match (e.code, e.message) {
            (Some(code), Some(message)) => format!("{code}: {message}"),
            (code, message) => code.or(message).unwrap_or_default(),
        })
        .collect();
    said.join("; ")
}

/// The certificates of `registry.caFile`.
fn read_ca_file(path: &Path) -> Result<Vec<CertificateDer<'static>>, Error> {
    let pem = std::fs::read(path).map_err(|source| Error::CaFile {
        path: path.to_path_buf(),
        source,
    })?;
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&pem)
        .filter_map(Result::ok)
        .collect();
    if certs.is_empty() {
        return Err(Error::CaFileEmpty {
            path: path.to_path_buf(),
        });
    }
    Ok(certs)
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
