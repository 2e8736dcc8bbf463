//! A small client for the OCI distribution API over plain HTTP: the
//! registry of a dev environment listens on loopback only, so there is no
//! TLS here and no crypto provider to agree on with the Kubernetes client.
//!
//! It does what a push needs and nothing more: `GET /v2/`, `HEAD` a blob,
//! a monolithic blob upload (`POST` then `PUT ?digest=`), `PUT` and `GET` a
//! manifest. Every request runs under a deadline.

use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, StatusCode, header};
use http_body_util::{BodyExt, Full};
use hyper_util::{
    client::legacy::{Client as HyperClient, connect::HttpConnector},
    rt::TokioExecutor,
};

/// The media type of an OCI image manifest.
pub const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
/// The media type of a Docker image manifest (schema 2), which the Docker
/// engine pushes.
pub const DOCKER_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";
/// The header in which the registry states a manifest's digest.
pub const DIGEST_HEADER: &str = "Docker-Content-Digest";

/// The deadline of a request without a large body.
const SMALL_REQUEST: Duration = Duration::from_secs(30);
/// The deadline of a blob upload: large layers take a while even on loopback.
const BLOB_UPLOAD: Duration = Duration::from_secs(600);

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(
        "cannot reach the registry at {url}; is it running? `cargo xtask dev up` starts it, and `registry.external` must name a registry that answers"
    )]
    Unreachable {
        url: String,
        #[source]
        source: hyper_util::client::legacy::Error,
    },
    #[error("the registry at {url} did not answer within {}s; check that it is healthy", after.as_secs())]
    Timeout { url: String, after: Duration },
    #[error("the registry answered `{method} {url}` with {status}: {body}")]
    Status {
        method: Method,
        url: String,
        status: StatusCode,
        body: String,
    },
    #[error("cannot read the registry's answer to `{method} {url}`")]
    Body {
        method: Method,
        url: String,
        #[source]
        source: hyper::Error,
    },
    #[error("the registry answered `{method} {url}` without a usable `{header}` header")]
    MissingHeader {
        method: Method,
        url: String,
        header: &'static str,
    },
}

/// A manifest as the registry serves it.
#[derive(Debug, Clone)]
pub struct Manifest {
    /// The exact bytes served; their sha256 is the manifest's digest.
    pub bytes: Bytes,
    /// The `Docker-Content-Digest` header, when the registry sent one.
    pub digest_header: Option<String>,
    /// The `Content-Type` header.
    pub media_type: Option<String>,
}

/// A client for one registry, addressed as `host:port`.
#[derive(Debug, Clone)]
pub struct Client {
    host: String,
    base: String,
    http: HyperClient<HttpConnector, Full<Bytes>>,
}

struct Response {
    status: StatusCode,
    headers: http::HeaderMap,
    body: Bytes,
}

impl Client {
    /// A client for the registry at `host` (`localhost:5001`). `localhost` is
    /// dialled as 127.0.0.1, where the registry is published.
    pub fn new(host: &str) -> Client {
        let dial = match host.strip_prefix("localhost:") {
            Some(port) => format!("127.0.0.1:{port}"),
            None => host.to_string(),
        };
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(Duration::from_secs(5)));
        connector.set_nodelay(true);
        let http = HyperClient::builder(TokioExecutor::new()).build(connector);
        Client {
            host: host.to_string(),
            base: format!("http://{dial}"),
            http,
        }
    }

    /// The `host:port` this client talks to, as given.
    pub fn host(&self) -> &str {
        &self.host
    }

    /// `GET /v2/`: succeeds when the registry answers 200.
    pub async fn ping(&self) -> Result<(), Error> {
        let url = format!("{}/v2/", self.base);
        let res = self
            .send(Method::GET, &url, &[], Bytes::new(), SMALL_REQUEST)
            .await?;
        expect(Method::GET, &url, res, &[StatusCode::OK]).map(drop)
    }

    /// `HEAD` a blob: whether repository `repo` already has `digest`.
    pub async fn blob_exists(&self, repo: &str, digest: &str) -> Result<bool, Error> {
        let url = format!("{}/v2/{repo}/blobs/{digest}", self.base);
        let res = self
            .send(Method::HEAD, &url, &[], Bytes::new(), SMALL_REQUEST)
            .await?;
        match res.status {
            StatusCode::OK => Ok(true),
            StatusCode::NOT_FOUND => Ok(false),
            _ => expect(Method::HEAD, &url, res, &[]).map(|_| false),
        }
    }

    /// `HEAD` a manifest by digest: whether repository `repo` still serves
    /// `digest` (a garbage collection or a lost volume removes it).
    pub async fn manifest_exists(&self, repo: &str, digest: &str) -> Result<bool, Error> {
        let url = format!("{}/v2/{repo}/manifests/{digest}", self.base);
        let accept = format!("{OCI_MANIFEST}, {DOCKER_MANIFEST}");
        let headers = [(header::ACCEPT, accept.as_str())];
        let res = self
            .send(Method::HEAD, &url, &headers, Bytes::new(), SMALL_REQUEST)
            .await?;
        match res.status {
            StatusCode::OK => Ok(true),
            StatusCode::NOT_FOUND => Ok(false),
            _ => expect(Method::HEAD, &url, res, &[]).map(|_| false),
        }
    }

    /// Uploads `bytes` as blob `digest` of `repo` in one request.
    pub async fn upload_blob(&self, repo: &str, digest: &str, bytes: Bytes) -> Result<(), Error> {
        let url = format!("{}/v2/{repo}/blobs/uploads/", self.base);
        let res = self
            .send(Method::POST, &url, &[], Bytes::new(), SMALL_REQUEST)
            .await?;
        let res = expect(Method::POST, &url, res, &[StatusCode::ACCEPTED])?;
        let location = res
            .headers
            .get(header::LOCATION)
            .and_then(|v| v.to_str().ok())
            .ok_or(Error::MissingHeader {
                method: Method::POST,
                url: url.clone(),
                header: "Location",
            })?;
        let location = if location.starts_with("http://") || location.starts_with("https://") {
            location.to_string()
        } else {
            format!("{}{location}", self.base)
        };
        let separator = if location.contains('?') { '&' } else { '?' };
        let url = format!("{location}{separator}digest={digest}");
        let headers = [(header::CONTENT_TYPE, "application/octet-stream")];
        let res = self
            .send(Method::PUT, &url, &headers, bytes, BLOB_UPLOAD)
            .await?;
        expect(Method::PUT, &url, res, &[StatusCode::CREATED]).map(drop)
    }

    /// `PUT` a manifest under `reference` (a tag); returns the digest the
    /// registry states for it.
    pub async fn put_manifest(
        &self,
        repo: &str,
        reference: &str,
        media_type: &str,
        bytes: Bytes,
    ) -> Result<Option<String>, Error> {
        let url = format!("{}/v2/{repo}/manifests/{reference}", self.base);
        let headers = [(header::CONTENT_TYPE, media_type)];
        let res = self
            .send(Method::PUT, &url, &headers, bytes, SMALL_REQUEST)
            .await?;
        let res = expect(Method::PUT, &url, res, &[StatusCode::CREATED])?;
        Ok(digest_header(&res.headers))
    }

    /// `GET` the manifest at `reference` (a tag or a digest); `None` when
    /// the registry does not have it.
    pub async fn get_manifest(
        &self,
        repo: &str,
        reference: &str,
    ) -> Result<Option<Manifest>, Error> {
        let url = format!("{}/v2/{repo}/manifests/{reference}", self.base);
        let accept = format!("{OCI_MANIFEST}, {DOCKER_MANIFEST}");
        let headers = [(header::ACCEPT, accept.as_str())];
        let res = self
            .send(Method::GET, &url, &headers, Bytes::new(), SMALL_REQUEST)
            .await?;
        if res.status == StatusCode::NOT_FOUND {
            return Ok(None);
        }
        let res = expect(Method::GET, &url, res, &[StatusCode::OK])?;
        Ok(Some(Manifest {
            digest_header: digest_header(&res.headers),
            media_type: res
                .headers
                .get(header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string),
            bytes: res.body,
        }))
    }

    async fn send(
        &self,
        method: Method,
        url: &str,
        headers: &[(header::HeaderName, &str)],
        body: Bytes,
        deadline: Duration,
    ) -> Result<Response, Error> {
        let mut request = Request::builder().method(method.clone()).uri(url);
        for (name, value) in headers {
            request = request.header(name, *value);
        }
        let request = request
            .body(Full::new(body))
            .expect("registry requests are well formed");
        let exchange = async {
            let res = self
                .http
                .request(request)
                .await
                .map_err(|source| Error::Unreachable {
                    url: url.to_string(),
                    source,
                })?;
            let (parts, body) = res.into_parts();
            let body = body
                .collect()
                .await
                .map_err(|source| Error::Body {
                    method: method.clone(),
                    url: url.to_string(),
                    source,
                })?
                .to_bytes();
            Ok(Response {
                status: parts.status,
                headers: parts.headers,
                body,
            })
        };
        tokio::time::timeout(deadline, exchange)
            .await
            .map_err(|_| Error::Timeout {
                url: url.to_string(),
                after: deadline,
            })?
    }
}

fn digest_header(headers: &http::HeaderMap) -> Option<String> {
    headers
        .get(DIGEST_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

/// Passes `res` on when its status is one of `ok`, otherwise turns it into
/// an error that quotes the registry's own words.
fn expect(method: Method, url: &str, res: Response, ok: &[StatusCode]) -> Result<Response, Error> {
    if ok.contains(&res.status) {
        return Ok(res);
    }
    let mut body = String::from_utf8_lossy(&res.body).trim().to_string();
    if body.len() > 500 {
        body.truncate(body.floor_char_boundary(500));
        body.push('…');
    }
    if body.is_empty() {
        body = String::from("(no body)");
    }
    Err(Error::Status {
        method,
        url: url.to_string(),
        status: res.status,
        body,
    })
}
