//! A real OCI distribution registry for the kubelet tests: Debian's `docker-registry` on a free loopback
//! port with storage in a temporary directory, in the clear or over TLS and behind an `auth:` section,
//! and images pushed with plain HTTP calls (monolithic blob uploads, then the manifest): single-platform
//! images, and image indexes of images for named platforms, assembled here from a `FROM scratch` layer.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, StatusCode, header};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use kube_sim::{Config, Sim};
use serde_json::json;
use sha2::{Digest, Sha256};

/// The registry binary; CI installs it with `apt-get install -y docker-registry`.
pub const REGISTRY_BIN: &str = "/usr/bin/docker-registry";

/// The in-network name tests give the registry, mapped onto the loopback port by `registries.yaml`.
pub const MIRROR_NAME: &str = "clrk-registry:5000";

/// How a registry is started beyond the defaults (plain HTTP, no auth).
#[derive(Default)]
pub struct Options {
    /// Serve HTTPS with this certificate and key (PEM files), trusting `ca` for the test's own requests.
    pub tls: Option<ServingCert>,
    /// A top-level section added to the configuration (`auth: …`).
    pub auth_config: String,
    /// The `Authorization` header of the test's own requests (pushes).
    pub authorization: Option<String>,
}

/// A serving certificate and the CA it is signed by, as files.
#[derive(Clone)]
pub struct ServingCert {
    /// The CA certificate (PEM).
    pub ca: PathBuf,
    /// The serving certificate (PEM).
    pub cert: PathBuf,
    /// The serving key (PEM).
    pub key: PathBuf,
    /// Require client certificates signed by this CA (PEM).
    pub client_ca: Option<PathBuf>,
    /// The client certificate and key (PEM) of the test's own requests.
    pub client: Option<(PathBuf, PathBuf)>,
}

/// A running registry, stopped on drop.
pub struct Registry {
    child: Child,
    /// The port on 127.0.0.1.
    pub port: u16,
    dir: tempfile::TempDir,
    /// The TLS configuration of the test's own requests, for a registry serving HTTPS.
    tls: Option<Arc<rustls::ClientConfig>>,
    authorization: Option<String>,
}

impl Registry {
    /// Starts a plain HTTP registry without auth and waits until `/v2/` answers.
    pub async fn start() -> Registry {
        Registry::start_with(Options::default()).await
    }

    /// Starts a registry with these options and waits until `/v2/` answers (`401` counts).
    pub async fn start_with(options: Options) -> Registry {
        assert!(
            Path::new(REGISTRY_BIN).exists(),
            "the kubelet tests need a registry: install it with `apt-get install -y docker-registry` ({REGISTRY_BIN})"
        );
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let dir = tempfile::tempdir().expect("a temporary directory");
        let config = dir.path().join("config.yml");
        let tls_config = options.tls.as_ref().map(|t| {
            let client_cas = t
                .client_ca
                .as_ref()
                .map(|ca| format!("    clientcas:\n      - {}\n", ca.display()))
                .unwrap_or_default();
            format!(
                "  tls:\n    certificate: {}\n    key: {}\n{client_cas}",
                t.cert.display(),
                t.key.display()
            )
        });
        std::fs::write(
            &config,
            format!(
                "version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n    rootdirectory: {}\nhttp:\n  addr: 127.0.0.1:{port}\n{}{}",
                dir.path().join("data").display(),
                tls_config.unwrap_or_default(),
                options.auth_config,
            ),
        )
        .expect("the registry config is written");
        let child = Command::new(REGISTRY_BIN)
            .arg("serve")
            .arg(&config)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("docker-registry starts");
        let registry = Registry {
            child,
            port,
            dir,
            tls: options.tls.as_ref().map(client_config),
            authorization: options.authorization,
        };
        let ready = tokio::time::timeout(crate::DEADLINE, async {
            loop {
                if let Ok((StatusCode::OK | StatusCode::UNAUTHORIZED, _, _)) = registry
                    .request(Method::GET, "/v2/", None, Bytes::new())
                    .await
                {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
        .await;
        assert!(
            ready.is_ok(),
            "the registry on port {port} did not answer /v2/"
        );
        registry
    }

    /// `127.0.0.1:<port>`.
    pub fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// A k3s `registries.yaml` that sends `clrk-registry:5000` and `docker.io` to this registry.
    pub fn registries_file(&self) -> PathBuf {
        let path = self.dir.path().join("registries.yaml");
        let endpoint = format!("http://{}", self.host());
        std::fs::write(
            &path,
            format!(
                "mirrors:\n  \"{MIRROR_NAME}\":\n    endpoint:\n      - {endpoint}\n  docker.io:\n    endpoint:\n      - {endpoint}\n"
            ),
        )
        .expect("registries.yaml is written");
        path
    }

    /// Starts a simulator whose kubelet uses this registry's mirrors, after adjusting the configuration.
    pub async fn sim(&self, adjust: impl FnOnce(&mut Config)) -> Sim {
        let mut config = Config::ephemeral();
        config.registries = Some(self.registries_file());
        adjust(&mut config);
        crate::start_with(config).await
    }

    /// Pushes a one-layer image and returns its manifest digest.
    pub async fn push(&self, repo: &str, tag: &str, labels: &[(&str, &str)]) -> String {
        let layer = Bytes::from(format!("kube-sim test layer {repo}:{tag}"));
        let layer_digest = digest(&layer);
        let labels: serde_json::Map<String, serde_json::Value> = labels
            .iter()
            .map(|(k, v)| (k.to_string(), json!(v)))
            .collect();
        let config = Bytes::from(
            serde_json::to_vec(&json!({
                "architecture": "amd64", "os": "linux",
                "config": {"Labels": labels},
                "rootfs": {"type": "layers", "diff_ids": [layer_digest]},
            }))
            .expect("the config serialises"),
        );
        let config_digest = digest(&config);
        self.upload(repo, &layer).await;
        self.upload(repo, &config).await;
        let manifest = Bytes::from(
            serde_json::to_vec(&json!({
                "schemaVersion": 2,
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": config_digest, "size": config.len()},
                "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": layer_digest, "size": layer.len()}],
            }))
            .expect("the manifest serialises"),
        );
        let manifest_digest = digest(&manifest);
        let (status, headers, body) = self
            .request(
                Method::PUT,
                &format!("/v2/{repo}/manifests/{tag}"),
                Some("application/vnd.oci.image.manifest.v1+json"),
                manifest,
            )
            .await
            .expect("the manifest upload connects");
        assert_eq!(
            status,
            StatusCode::CREATED,
            "manifest upload: {}",
            String::from_utf8_lossy(&body)
        );
        assert_eq!(
            headers
                .get("docker-content-digest")
                .and_then(|v| v.to_str().ok()),
            Some(manifest_digest.as_str())
        );
        manifest_digest
    }

    /// Pushes an image for `platform` (`{"os", "architecture", "variant"?}`) whose one layer holds the
    /// executable `/app` with `app`'s bytes and whose config runs it with `labels`, under `reference` (a
    /// tag, or its digest when `None`); returns the manifest's descriptor, `platform` included, for
    /// [`Registry::push_index`].
    pub async fn push_platform_image(
        &self,
        repo: &str,
        reference: Option<&str>,
        platform: &serde_json::Value,
        app: &[u8],
        labels: &[(&str, &str)],
    ) -> serde_json::Value {
        let (layer, diff_id) = app_layer(app);
        let labels: serde_json::Map<String, serde_json::Value> = labels
            .iter()
            .map(|(k, v)| (k.to_string(), json!(v)))
            .collect();
        let mut config = json!({
            "os": platform["os"], "architecture": platform["architecture"],
            "config": {"Labels": labels, "Entrypoint": ["/app"]},
            "rootfs": {"type": "layers", "diff_ids": [diff_id]},
        });
        if let Some(variant) = platform.get("variant") {
            config["variant"] = variant.clone();
        }
        let config = Bytes::from(serde_json::to_vec(&config).expect("the config serialises"));
        self.upload(repo, &layer).await;
        self.upload(repo, &config).await;
        let manifest = json!({
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": digest(&config), "size": config.len()},
            "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": digest(&layer), "size": layer.len()}],
        });
        let manifest = Bytes::from(serde_json::to_vec(&manifest).expect("the manifest serialises"));
        let manifest_digest = digest(&manifest);
        let reference = reference.unwrap_or(&manifest_digest);
        let size = manifest.len();
        self.put_manifest(repo, reference, OCI_MANIFEST, manifest)
            .await;
        json!({"mediaType": OCI_MANIFEST, "digest": manifest_digest, "size": size,
            "platform": platform})
    }

    /// Pushes an OCI image index of these manifest descriptors under `tag`; returns its digest.
    pub async fn push_index(
        &self,
        repo: &str,
        tag: &str,
        manifests: &[serde_json::Value],
    ) -> String {
        let index = json!({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": manifests});
        let index = Bytes::from(serde_json::to_vec(&index).expect("the index serialises"));
        self.put_manifest(repo, tag, OCI_INDEX, index).await
    }

    /// Puts a manifest (or index) under a tag or its digest; returns the digest the registry names.
    async fn put_manifest(
        &self,
        repo: &str,
        reference: &str,
        media_type: &str,
        body: Bytes,
    ) -> String {
        let expected = digest(&body);
        let (status, headers, answer) = self
            .request(
                Method::PUT,
                &format!("/v2/{repo}/manifests/{reference}"),
                Some(media_type),
                body,
            )
            .await
            .expect("the manifest upload connects");
        assert_eq!(
            status,
            StatusCode::CREATED,
            "manifest upload: {}",
            String::from_utf8_lossy(&answer)
        );
        let named = headers
            .get("docker-content-digest")
            .and_then(|v| v.to_str().ok());
        assert_eq!(named, Some(expected.as_str()));
        expected
    }

    async fn upload(&self, repo: &str, blob: &Bytes) {
        let (status, headers, _) = self
            .request(
                Method::POST,
                &format!("/v2/{repo}/blobs/uploads/"),
                None,
                Bytes::new(),
            )
            .await
            .expect("the upload starts");
        assert_eq!(status, StatusCode::ACCEPTED);
        let location = headers
            .get(header::LOCATION)
            .and_then(|v| v.to_str().ok())
            .expect("an upload location")
            .to_string();
        let path = location
            .split_once("://")
            .map(|(_, rest)| rest[rest.find('/').unwrap_or(rest.len())..].to_string())
            .unwrap_or(location);
        let sep = if path.contains('?') { '&' } else { '?' };
        let (status, _, body) = self
            .request(
                Method::PUT,
                &format!("{path}{sep}digest={}", digest(blob)),
                Some("application/octet-stream"),
                blob.clone(),
            )
            .await
            .expect("the upload completes");
        assert_eq!(
            status,
            StatusCode::CREATED,
            "blob upload: {}",
            String::from_utf8_lossy(&body)
        );
    }

    async fn request(
        &self,
        method: Method,
        path: &str,
        content_type: Option<&str>,
        body: Bytes,
    ) -> Result<(StatusCode, http::HeaderMap, Bytes), String> {
        let stream = tokio::net::TcpStream::connect(("127.0.0.1", self.port))
            .await
            .map_err(|e| e.to_string())?;
        let mut sender = match &self.tls {
            Some(config) => {
                let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
                let tls = tokio_rustls::TlsConnector::from(config.clone())
                    .connect(name, stream)
                    .await
                    .map_err(|e| e.to_string())?;
                send_request(tls).await?
            }
            None => send_request(stream).await?,
        };
        let mut req = Request::builder()
            .method(method)
            .uri(path)
            .header(header::HOST, self.host())
            .header(header::CONTENT_LENGTH, body.len());
        if let Some(ct) = content_type {
            req = req.header(header::CONTENT_TYPE, ct);
        }
        if let Some(authorization) = &self.authorization {
            req = req.header(header::AUTHORIZATION, authorization);
        }
        let req = req.body(Full::new(body)).map_err(|e| e.to_string())?;
        let resp = sender.send_request(req).await.map_err(|e| e.to_string())?;
        let status = resp.status();
        let headers = resp.headers().clone();
        let body = resp
            .into_body()
            .collect()
            .await
            .map_err(|e| e.to_string())?
            .to_bytes();
        Ok((status, headers, body))
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An HTTP/1.1 connection's request half.
async fn send_request<S>(
    stream: S,
) -> Result<hyper::client::conn::http1::SendRequest<Full<Bytes>>, String>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(sender)
}

/// A client configuration that trusts only the serving certificate's CA, with its client certificate.
fn client_config(tls: &ServingCert) -> Arc<rustls::ClientConfig> {
    use rustls::pki_types::pem::PemObject as _;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let certs = |path: &Path| -> Vec<CertificateDer<'static>> {
        CertificateDer::pem_file_iter(path)
            .expect("a certificate file is read")
            .map(|c| c.expect("a certificate"))
            .collect()
    };
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .expect("TLS versions");
    let (ca, serving) = (certs(&tls.ca), certs(&tls.cert));
    // A self-signed serving certificate that is its own CA (`openssl req -x509`, `CA:TRUE`), which
    // webpki refuses as a server's: the test's own requests accept exactly that certificate.
    let builder = if ca == serving {
        let pinned = Pinned {
            cert: serving.into_iter().next().expect("a serving certificate"),
            provider,
        };
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(pinned))
    } else {
        let mut roots = rustls::RootCertStore::empty();
        for cert in ca {
            roots.add(cert).expect("the CA is usable");
        }
        builder.with_root_certificates(roots)
    };
    let config = match &tls.client {
        Some((cert, key)) => builder
            .with_client_auth_cert(
                certs(cert),
                PrivateKeyDer::from_pem_file(key).expect("the client key"),
            )
            .expect("the client certificate is usable"),
        None => builder.with_no_client_auth(),
    };
    Arc::new(config)
}

/// Accepts the one certificate the test's registry serves; the handshake's signatures are checked.
#[derive(Debug)]
struct Pinned {
    cert: rustls::pki_types::CertificateDer<'static>,
    provider: Arc<rustls::crypto::CryptoProvider>,
}

impl rustls::client::danger::ServerCertVerifier for Pinned {
    fn verify_server_cert(
        &self,
        end_entity: &rustls::pki_types::CertificateDer<'_>,
        _intermediates: &[rustls::pki_types::CertificateDer<'_>],
        _server_name: &rustls::pki_types::ServerName<'_>,
        _ocsp_response: &[u8],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        if end_entity.as_ref() == self.cert.as_ref() {
            Ok(rustls::client::danger::ServerCertVerified::assertion())
        } else {
            Err(rustls::CertificateError::UnknownIssuer.into())
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        let algorithms = &self.provider.signature_verification_algorithms;
        rustls::crypto::verify_tls12_signature(message, cert, dss, algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        let algorithms = &self.provider.signature_verification_algorithms;
        rustls::crypto::verify_tls13_signature(message, cert, dss, algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// The media type of an OCI image manifest.
const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";

/// The media type of an OCI image index.
const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";

/// A `FROM scratch` layer holding the executable `/app`: the gzipped tar and the digest of the tar (the
/// config's `diff_id`).
fn app_layer(app: &[u8]) -> (Bytes, String) {
    let mut header = tar::Header::new_gnu();
    header.set_mode(0o755);
    header.set_size(app.len() as u64);
    header.set_cksum();
    let mut builder = tar::Builder::new(Vec::new());
    builder
        .append_data(&mut header, "app", app)
        .expect("the layer is packed");
    let tar = builder.into_inner().expect("the layer is packed");
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    std::io::Write::write_all(&mut gz, &tar).expect("the layer is compressed");
    let gzipped = gz.finish().expect("the layer is compressed");
    (Bytes::from(gzipped), digest(&tar))
}

/// `sha256:<hex>` of some bytes.
pub fn digest(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}
