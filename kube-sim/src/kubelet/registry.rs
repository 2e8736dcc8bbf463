//! Image resolution against real registries over the OCI distribution API, with mirrors configured like
//! k3s' `registries.yaml`.
//!
//! A mirror changes only where the image is fetched from; the image keeps its name. Endpoints are tried in
//! order: the host's mirror endpoints (or those of the `"*"` mirror when the host has none), then the
//! registry itself (`https://<host>`, plain HTTP for `localhost` and loopback addresses,
//! `registry-1.docker.io` for `docker.io`). Only plain HTTP endpoints are reachable; HTTPS ones fail as
//! unreachable.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, StatusCode, header};
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use serde::Deserialize;
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::reference::{DEFAULT_DOMAIN, Reference};

/// The manifest media types a pull accepts, as containerd sends them.
pub const MANIFEST_ACCEPT: &str = "application/vnd.oci.image.index.v1+json, \
application/vnd.docker.distribution.manifest.list.v2+json, \
application/vnd.oci.image.manifest.v1+json, \
application/vnd.docker.distribution.manifest.v2+json";

/// The largest manifest or image config read.
const MAX_DOCUMENT: usize = 4 * 1024 * 1024;

/// Reading the registry configuration or resolving an image failed.
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
    /// Every endpoint failed; the message is the last failure.
    #[error("failed to do request: {0}")]
    Request(String),
    /// The registry answered with something that is not a usable manifest or config.
    #[error("{0}")]
    Invalid(String),
}

/// A k3s-style `registries.yaml`: `mirrors` by registry host (or `"*"`), `configs` by endpoint host.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
pub struct Registries {
    /// Mirrors by registry host.
    #[serde(default)]
    pub mirrors: BTreeMap<String, Mirror>,
    /// Per-host settings; only `auth` with a username and password is used.
    #[serde(default)]
    pub configs: BTreeMap<String, HostConfig>,
}

/// The endpoints of a mirror.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
pub struct Mirror {
    /// Endpoint URLs, tried in order.
    #[serde(default)]
    pub endpoint: Vec<String>,
}

/// Settings of one endpoint host.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
pub struct HostConfig {
    /// Basic credentials.
    #[serde(default)]
    pub auth: Option<Auth>,
}

/// Basic credentials for an endpoint.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
pub struct Auth {
    /// The user name.
    #[serde(default)]
    pub username: Option<String>,
    /// The password.
    #[serde(default)]
    pub password: Option<String>,
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
    /// Parses `registries.yaml` text; an empty document means no mirrors.
    pub fn from_yaml(text: &str) -> Result<Registries, Error> {
        if text.trim().is_empty() {
            return Ok(Registries::default());
        }
        Ok(serde_yaml::from_str(text)?)
    }

    /// Reads `registries.yaml`.
    pub fn load(path: &Path) -> Result<Registries, Error> {
        let text = std::fs::read_to_string(path).map_err(|source| Error::Read {
            path: path.display().to_string(),
            source,
        })?;
        Registries::from_yaml(&text)
    }

    /// The base URLs (ending in `/v2`) to try for a registry host, in order.
    pub fn endpoints(&self, host: &str) -> Vec<String> {
        let mirror = self.mirrors.get(host).or_else(|| self.mirrors.get("*"));
        let mut out: Vec<String> = mirror
            .map(|m| m.endpoint.iter().map(|e| with_v2(e)).collect())
            .unwrap_or_default();
        let default = if host == DEFAULT_DOMAIN {
            "https://registry-1.docker.io/v2".to_string()
        } else if is_loopback(host) {
            format!("http://{host}/v2")
        } else {
            format!("https://{host}/v2")
        };
        if !out.contains(&default) {
            out.push(default);
        }
        out
    }

    fn auth_for(&self, authority: &str) -> Option<String> {
        use base64::Engine as _;
        let auth = self.configs.get(authority)?.auth.as_ref()?;
        let user = auth.username.as_deref()?;
        let pass = auth.password.as_deref().unwrap_or("");
        Some(format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(format!("{user}:{pass}"))
        ))
    }

    /// Resolves a reference to its manifest digest and reads its config labels.
    pub async fn resolve(
        &self,
        reference: &Reference,
        timeout: Duration,
    ) -> Result<Resolved, Error> {
        let mut last = None;
        let mut not_found = false;
        for base in self.endpoints(&reference.domain) {
            match tokio::time::timeout(timeout, self.resolve_at(&base, reference)).await {
                Ok(Ok(r)) => return Ok(r),
                Ok(Err(Error::NotFound { .. })) => not_found = true,
                Ok(Err(e)) => last = Some(e),
                Err(_) => {
                    last = Some(Error::Request(format!(
                        "Head \"{base}/{}/manifests/{}\": context deadline exceeded",
                        reference.path,
                        reference.lookup()
                    )))
                }
            }
        }
        if not_found {
            return Err(Error::NotFound {
                reference: reference.familiar_with_tag(),
            });
        }
        Err(last.unwrap_or_else(|| Error::Request("no endpoint".into())))
    }

    async fn resolve_at(&self, base: &str, reference: &Reference) -> Result<Resolved, Error> {
        let url = format!("{base}/{}/manifests/{}", reference.path, reference.lookup());
        let head = self.request(Method::HEAD, &url, MANIFEST_ACCEPT).await?;
        let digest = match head.status {
            StatusCode::OK => head.header("docker-content-digest"),
            StatusCode::NOT_FOUND => {
                return Err(Error::NotFound {
                    reference: reference.familiar_with_tag(),
                });
            }
            s => {
                return Err(Error::Request(format!(
                    "Head \"{url}\": unexpected status {s}"
                )));
            }
        };
        // The manifest itself: by digest when the registry named it, to read the config.
        let get_url = match &digest {
            Some(d) => format!("{base}/{}/manifests/{d}", reference.path),
            None => url.clone(),
        };
        let manifest = self.request(Method::GET, &get_url, MANIFEST_ACCEPT).await?;
        if manifest.status != StatusCode::OK {
            return Err(Error::Request(format!(
                "Get \"{get_url}\": unexpected status {}",
                manifest.status
            )));
        }
        let digest = digest.unwrap_or_else(|| sha256_digest(&manifest.body));
        let labels = self
            .config_labels(base, reference, &manifest.body)
            .await
            .unwrap_or_else(|e| {
                tracing::debug!(image = %reference.familiar_with_tag(), error = %e, "no image config labels");
                BTreeMap::new()
            });
        Ok(Resolved { digest, labels })
    }

    /// The labels of the image config, following an index to its linux/amd64 (or first) manifest.
    async fn config_labels(
        &self,
        base: &str,
        reference: &Reference,
        manifest: &[u8],
    ) -> Result<BTreeMap<String, String>, Error> {
        let mut doc: Value = serde_json::from_slice(manifest)
            .map_err(|e| Error::Invalid(format!("manifest is not JSON: {e}")))?;
        if let Some(list) = doc.get("manifests").and_then(Value::as_array) {
            let pick = list
                .iter()
                .find(|m| {
                    m.pointer("/platform/os") == Some(&"linux".into())
                        && m.pointer("/platform/architecture") == Some(&"amd64".into())
                })
                .or_else(|| list.first())
                .and_then(|m| m["digest"].as_str())
                .ok_or_else(|| Error::Invalid("empty image index".into()))?
                .to_string();
            let url = format!("{base}/{}/manifests/{pick}", reference.path);
            let r = self.request(Method::GET, &url, MANIFEST_ACCEPT).await?;
            doc = serde_json::from_slice(&r.body)
                .map_err(|e| Error::Invalid(format!("manifest is not JSON: {e}")))?;
        }
        let config = doc
            .pointer("/config/digest")
            .and_then(Value::as_str)
            .ok_or_else(|| Error::Invalid("manifest has no config".into()))?;
        let url = format!("{base}/{}/blobs/{config}", reference.path);
        let r = self.request(Method::GET, &url, "*/*").await?;
        if r.status != StatusCode::OK {
            return Err(Error::Invalid(format!("config blob: status {}", r.status)));
        }
        let cfg: Value = serde_json::from_slice(&r.body)
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

    /// One HTTP/1.1 request (following redirects a few times, as registries send blobs elsewhere).
    async fn request(&self, method: Method, url: &str, accept: &str) -> Result<Response, Error> {
        let mut url = url.to_string();
        for _ in 0..4 {
            let r = self.request_once(method.clone(), &url, accept).await?;
            if r.status.is_redirection()
                && let Some(location) = r.header("location")
            {
                url = if location.starts_with("http://") || location.starts_with("https://") {
                    location
                } else {
                    let (scheme, authority, _) =
                        split_url(&url).ok_or_else(|| Error::Request(format!("bad URL {url}")))?;
                    format!("{scheme}://{authority}{location}")
                };
                continue;
            }
            return Ok(r);
        }
        Err(Error::Request(format!("too many redirects for {url}")))
    }

    async fn request_once(
        &self,
        method: Method,
        url: &str,
        accept: &str,
    ) -> Result<Response, Error> {
        let verb = if method == Method::HEAD {
            "Head"
        } else {
            "Get"
        };
        let fail = |msg: String| Error::Request(format!("{verb} \"{url}\": {msg}"));
        let (scheme, authority, path) = split_url(url).ok_or_else(|| fail("invalid URL".into()))?;
        if scheme != "http" {
            return Err(fail(
                "https endpoints are not supported by the virtual kubelet; configure an http mirror".into(),
            ));
        }
        let addr = if authority.contains(':') && !authority.ends_with(']') {
            authority.to_string()
        } else {
            format!("{authority}:80")
        };
        let stream = tokio::net::TcpStream::connect(&addr)
            .await
            .map_err(|e| fail(format!("dial tcp {addr}: connect: {}", io_reason(&e))))?;
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| fail(e.to_string()))?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        let mut req = Request::builder()
            .method(method.clone())
            .uri(path)
            .header(header::HOST, authority)
            .header(header::ACCEPT, accept)
            .header(header::USER_AGENT, "containerd/kube-sim");
        if let Some(auth) = self.auth_for(authority) {
            req = req.header(header::AUTHORIZATION, auth);
        }
        let req = req
            .body(Empty::<Bytes>::new())
            .map_err(|e| fail(e.to_string()))?;
        let resp = sender
            .send_request(req)
            .await
            .map_err(|e| fail(e.to_string()))?;
        let status = resp.status();
        let headers = resp.headers().clone();
        let body = if method == Method::HEAD {
            Bytes::new()
        } else {
            let limited = http_body_util::Limited::new(resp.into_body(), MAX_DOCUMENT);
            limited
                .collect()
                .await
                .map_err(|e| fail(e.to_string()))?
                .to_bytes()
        };
        Ok(Response {
            status,
            headers,
            body,
        })
    }
}

struct Response {
    status: StatusCode,
    headers: http::HeaderMap,
    body: Bytes,
}

impl Response {
    fn header(&self, name: &str) -> Option<String> {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    }
}

/// `sha256:<hex>` of some bytes.
pub fn sha256_digest(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

fn io_reason(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::ConnectionRefused => "connection refused".into(),
        _ => e.to_string(),
    }
}

/// Whether the host (with an optional port) is `localhost` or a loopback address.
fn is_loopback(host: &str) -> bool {
    let name = match host.rsplit_once(':') {
        Some((h, p)) if p.chars().all(|c| c.is_ascii_digit()) && !h.is_empty() => h,
        _ => host,
    };
    let name = name.trim_start_matches('[').trim_end_matches(']');
    name == "localhost"
        || name
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// An endpoint URL as a base ending in `/v2`: an empty path gets `/v2`, any other path is kept.
fn with_v2(endpoint: &str) -> String {
    let e = endpoint.trim_end_matches('/');
    match split_url(e) {
        Some((_, _, path)) if path != "/" && !path.is_empty() => e.to_string(),
        _ => format!("{e}/v2"),
    }
}

/// `(scheme, authority, path-and-query)` of an absolute URL.
fn split_url(url: &str) -> Option<(&str, &str, &str)> {
    let (scheme, rest) = url.split_once("://")?;
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    Some((scheme, authority, path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mirrors_come_first_and_the_registry_itself_last() {
        let r = Registries::from_yaml(
            r#"
mirrors:
  "docker.io":
    endpoint: ["http://clrk-registry:5000"]
  "clrk-registry:5000":
    endpoint: ["http://127.0.0.1:41234"]
  "localhost:41234":
    endpoint:
      - http://clrk-registry:5000/
configs:
  "clrk-registry:5000":
    auth: {username: u, password: p}
"#,
        )
        .unwrap();
        assert_eq!(
            r.endpoints("docker.io"),
            [
                "http://clrk-registry:5000/v2",
                "https://registry-1.docker.io/v2"
            ]
        );
        assert_eq!(
            r.endpoints("clrk-registry:5000"),
            ["http://127.0.0.1:41234/v2", "https://clrk-registry:5000/v2"]
        );
        assert_eq!(
            r.endpoints("localhost:41234"),
            ["http://clrk-registry:5000/v2", "http://localhost:41234/v2"]
        );
        assert_eq!(r.endpoints("127.0.0.1:5000"), ["http://127.0.0.1:5000/v2"]);
        assert_eq!(
            r.auth_for("clrk-registry:5000").as_deref(),
            Some("Basic dTpw")
        );
        assert_eq!(Registries::from_yaml("").unwrap(), Registries::default());
    }

    #[test]
    fn endpoint_paths_are_kept() {
        assert_eq!(with_v2("http://m:5000"), "http://m:5000/v2");
        assert_eq!(with_v2("http://m:5000/v2"), "http://m:5000/v2");
        assert_eq!(with_v2("http://m/some/path"), "http://m/some/path");
    }

    #[tokio::test]
    async fn an_unreachable_registry_is_a_request_error() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        drop(listener);
        let r = Registries::default();
        let reference = Reference::parse(&format!("127.0.0.1:{port}/x:1")).unwrap();
        let err = r
            .resolve(&reference, Duration::from_secs(5))
            .await
            .unwrap_err();
        assert!(
            err.to_string().contains("connection refused"),
            "unexpected error: {err}"
        );
    }
}
