//! One HTTP/1.1 exchange with a registry host, in the clear or over rustls (the `ring` provider), with
//! what fails worded as Go's `net/http` and `crypto/tls` word it, since containerd's messages carry them.
//!
//! TLS trusts the system's roots (what `rustls-native-certs` finds: `SSL_CERT_FILE`, `SSL_CERT_DIR` or the
//! OS store; none in a `FROM scratch` image) and the host's `ca_file`, whose certificates are also trusted
//! as a server's own (see [`super::verify`]), shows `cert_file`/`key_file` as
//! a client certificate, and accepts any server certificate with `insecure_skip_verify` (the handshake's
//! signatures are still checked).

use std::collections::HashMap;
use std::io;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{HeaderMap, HeaderName, Method, Request as HttpRequest, StatusCode, header};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use rustls::ClientConfig;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::config::{Tls, host_name, split_url};

/// The largest response body read (manifests, image configs, token responses).
const MAX_BODY: usize = 4 * 1024 * 1024;

/// A request failed, or a host's TLS settings are unusable; `Display` is Go's wording (containerd's
/// messages carry it).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The URL is not absolute.
    #[error("invalid URL {0:?}")]
    Url(String),
    /// The host cannot be a TLS server name.
    #[error("invalid server name {authority}")]
    ServerName {
        /// The `host:port`.
        authority: String,
        /// The cause.
        #[source]
        source: rustls::pki_types::InvalidDnsNameError,
    },
    /// The connection could not be made.
    #[error("dial tcp {addr}: {}", io_reason(.source))]
    Dial {
        /// The `host:port` dialled.
        addr: String,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// The TLS handshake failed.
    #[error("{}", tls_reason(.0))]
    Handshake(#[source] io::Error),
    /// The HTTP exchange failed.
    #[error("{}", exchange_reason(.0))]
    Exchange(#[source] hyper::Error),
    /// The request could not be built.
    #[error("{0}")]
    Build(#[source] http::Error),
    /// The body could not be read whole (or was too long).
    #[error("{0}")]
    Body(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// `ca_file` could not be read.
    #[error("unable to read CA cert {:?}: open {}: {}", .path.display().to_string(), .path.display(), os_reason(.source))]
    ReadCa {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// `ca_file` holds no usable certificate.
    #[error("unable to load CA cert {:?}", .0.display().to_string())]
    LoadCa(PathBuf),
    /// `cert_file` or `key_file` could not be read.
    #[error("unable to read CERT file {:?}: open {}: {}", .path.display().to_string(), .path.display(), os_reason(.source))]
    ReadCert {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// The client certificate and key do not make a pair.
    #[error("failed to load X509 key pair: {0}")]
    KeyPair(String),
    /// rustls refused the configuration.
    #[error("{0}")]
    Rustls(#[source] rustls::Error),
}

/// A request to send.
pub(super) struct Request {
    /// The method.
    pub method: Method,
    /// The absolute URL.
    pub url: String,
    /// Headers besides `Host`.
    pub headers: Vec<(HeaderName, String)>,
    /// The body (empty for `HEAD` and `GET`).
    pub body: Bytes,
}

/// A response, its body read whole.
pub(super) struct Response {
    /// The status.
    pub status: StatusCode,
    /// The headers.
    pub headers: HeaderMap,
    /// The body (empty for `HEAD`).
    pub body: Bytes,
}

impl Response {
    /// A header's value as text.
    pub fn header(&self, name: &str) -> Option<String> {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    }
}

/// `"<status code> <reason>"` as Go's `Response.Status` reads.
pub(super) fn status_text(status: StatusCode) -> String {
    match status.canonical_reason() {
        Some(reason) => format!("{} {reason}", status.as_u16()),
        None => status.as_u16().to_string(),
    }
}

/// An open HTTP/1.1 connection's request half.
type Sender = hyper::client::conn::http1::SendRequest<Full<Bytes>>;

/// Sends requests for one endpoint host: `http://` URLs in the clear, `https://` ones over TLS with the
/// host's configuration (the system's roots for hosts without one, such as a token realm elsewhere).
/// Connections are kept open between requests, as Go's client keeps them.
pub(super) struct Transport {
    tls: OnceLock<Arc<ClientConfig>>,
    /// Whether a server that answers the TLS handshake in HTTP is asked again in the clear: containerd's
    /// fallback for a host configured for HTTP that has TLS settings, and for a loopback registry's own
    /// endpoint.
    fallback: bool,
    /// Whether a server answered in HTTP, so later requests go in the clear at once.
    plain_from_now: AtomicBool,
    /// Idle connections by `scheme://authority`.
    idle: tokio::sync::Mutex<HashMap<String, Sender>>,
}

impl Transport {
    /// A transport with this TLS configuration (`None`: the system's roots, built when first needed).
    pub(super) fn new(tls: Option<Arc<ClientConfig>>, fallback: bool) -> Transport {
        let cell = OnceLock::new();
        if let Some(config) = tls {
            let _ = cell.set(config);
        }
        Transport {
            tls: cell,
            fallback,
            plain_from_now: AtomicBool::new(false),
            idle: tokio::sync::Mutex::new(HashMap::new()),
        }
    }

    fn tls(&self) -> Result<Arc<ClientConfig>, Error> {
        if let Some(config) = self.tls.get() {
            return Ok(config.clone());
        }
        let config = client_config(&TlsOptions {
            settings: None,
            skip_verify_by_default: false,
        })?;
        Ok(self.tls.get_or_init(|| config).clone())
    }

    /// Sends a request and reads the response; the error reads as Go's (`dial tcp …`, `tls: …`). An idle
    /// connection the server closed meanwhile is replaced by a new one.
    pub(super) async fn send(&self, req: &Request) -> Result<Response, Error> {
        let (scheme, authority, _) =
            split_url(&req.url).ok_or_else(|| Error::Url(req.url.clone()))?;
        let key = format!("{scheme}://{authority}");
        let idle = self.idle.lock().await.remove(&key);
        let mut outcome = None;
        if let Some(mut sender) = idle
            && sender.ready().await.is_ok()
        {
            outcome = match exchange(&mut sender, req).await {
                Err(Error::Exchange(e)) if e.is_canceled() || e.is_closed() => None,
                other => Some((sender, other)),
            };
        }
        let (sender, outcome) = match outcome {
            Some(done) => done,
            None => {
                let mut sender = self.connect(scheme, authority).await?;
                let outcome = exchange(&mut sender, req).await;
                (sender, outcome)
            }
        };
        if outcome.is_ok() && !sender.is_closed() {
            self.idle.lock().await.insert(key, sender);
        }
        outcome
    }

    /// A new connection: in the clear for `http`, else over TLS (or in the clear again, with the
    /// fallback, when the server answered the handshake in HTTP).
    async fn connect(&self, scheme: &str, authority: &str) -> Result<Sender, Error> {
        if scheme == "http" || self.plain_from_now.load(Ordering::Relaxed) {
            return handshake(dial(authority, 80).await?).await;
        }
        let stream = Sniff::new(dial(authority, 443).await?);
        let connector = tokio_rustls::TlsConnector::from(self.tls()?);
        let name = ServerName::try_from(host_name(authority).to_string()).map_err(|source| {
            Error::ServerName {
                authority: authority.to_string(),
                source,
            }
        })?;
        match connector.connect(name, stream).into_fallible().await {
            Ok(tls) => handshake(tls).await,
            Err((_, sniffed)) if self.fallback && sniffed.answered_in_http() => {
                self.plain_from_now.store(true, Ordering::Relaxed);
                handshake(dial(authority, 80).await?).await
            }
            Err((e, _)) => Err(Error::Handshake(e)),
        }
    }
}

/// Connects to `host:port` (`default_port` when the authority has none).
async fn dial(authority: &str, default_port: u16) -> Result<tokio::net::TcpStream, Error> {
    let addr = match super::config::port(authority) {
        Some(_) => authority.to_string(),
        None => format!("{authority}:{default_port}"),
    };
    tokio::net::TcpStream::connect(&addr)
        .await
        .map_err(|source| Error::Dial { addr, source })
}

/// HTTP/1.1 over a connection, its driver on a task of its own.
async fn handshake<S>(stream: S) -> Result<Sender, Error>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(Error::Exchange)?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(sender)
}

/// One request, its response read whole.
async fn exchange(sender: &mut Sender, req: &Request) -> Result<Response, Error> {
    let (_, authority, path) = split_url(&req.url).ok_or_else(|| Error::Url(req.url.clone()))?;
    let mut builder = HttpRequest::builder()
        .method(req.method.clone())
        .uri(path)
        .header(header::HOST, authority);
    for (name, value) in &req.headers {
        builder = builder.header(name, value);
    }
    if !req.body.is_empty() {
        builder = builder.header(header::CONTENT_LENGTH, req.body.len());
    }
    let request = builder
        .body(Full::new(req.body.clone()))
        .map_err(Error::Build)?;
    let resp = sender
        .send_request(request)
        .await
        .map_err(Error::Exchange)?;
    let status = resp.status();
    let headers = resp.headers().clone();
    let body = if req.method == Method::HEAD {
        Bytes::new()
    } else {
        http_body_util::Limited::new(resp.into_body(), MAX_BODY)
            .collect()
            .await
            .map_err(Error::Body)?
            .to_bytes()
    };
    Ok(Response {
        status,
        headers,
        body,
    })
}

fn io_reason(e: &io::Error) -> String {
    match e.kind() {
        io::ErrorKind::ConnectionRefused => "connect: connection refused".into(),
        io::ErrorKind::ConnectionReset => "read: connection reset by peer".into(),
        _ => e.to_string(),
    }
}

/// A failed exchange in Go's words when TLS failed under it (a TLS 1.3 server refuses a client
/// certificate only after the handshake), else hyper's.
fn exchange_reason(e: &hyper::Error) -> String {
    let mut source: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(e);
    while let Some(s) = source {
        // An `io::Error`'s own `source` skips the error it wraps.
        let wrapped = s
            .downcast_ref::<io::Error>()
            .and_then(|io| io.get_ref())
            .map(|inner| inner as &(dyn std::error::Error + 'static));
        for candidate in [Some(s), wrapped].into_iter().flatten() {
            if let Some(rustls_error) = candidate.downcast_ref::<rustls::Error>() {
                return rustls_reason(rustls_error);
            }
        }
        source = s.source();
    }
    e.to_string()
}

/// A failed handshake in Go's words.
fn tls_reason(e: &io::Error) -> String {
    match e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()) {
        Some(rustls_error) => rustls_reason(rustls_error),
        None => io_reason(e),
    }
}

fn rustls_reason(rustls_error: &rustls::Error) -> String {
    match rustls_error {
        rustls::Error::InvalidCertificate(c) => {
            format!("tls: failed to verify certificate: {}", x509_reason(c))
        }
        rustls::Error::AlertReceived(alert) => format!("remote error: tls: {}", alert_text(*alert)),
        rustls::Error::InvalidMessage(_) => {
            "tls: first record does not look like a TLS handshake".into()
        }
        other => format!("tls: {other}"),
    }
}

/// What Go's `x509` package says of a certificate it refuses.
fn x509_reason(e: &CertificateError) -> String {
    let time = |t: &UnixTime| {
        jiff::Timestamp::from_second(t.as_secs() as i64)
            .map(|t| t.to_string())
            .unwrap_or_default()
    };
    match e {
        CertificateError::UnknownIssuer => "x509: certificate signed by unknown authority".into(),
        CertificateError::NotValidForNameContext {
            expected,
            presented,
        } => hostname_reason(expected, presented),
        CertificateError::NotValidForName => "x509: certificate is not valid for the host".into(),
        CertificateError::ExpiredContext {
            time: now,
            not_after,
        } => format!(
            "x509: certificate has expired or is not yet valid: current time {} is after {}",
            time(now),
            time(not_after)
        ),
        CertificateError::NotValidYetContext {
            time: now,
            not_before,
        } => format!(
            "x509: certificate has expired or is not yet valid: current time {} is before {}",
            time(now),
            time(not_before)
        ),
        CertificateError::Expired | CertificateError::NotValidYet => {
            "x509: certificate has expired or is not yet valid".into()
        }
        other => format!("x509: {other:?}"),
    }
}

/// Go's `x509.HostnameError`: an IP address is matched against the certificate's IP SANs, a name
/// against its DNS SANs. `presented` are webpki's (`DnsName("a.test")`, `IpAddress(10.0.0.1)`).
fn hostname_reason(expected: &ServerName<'_>, presented: &[String]) -> String {
    let host = expected.to_str();
    let unwrap = |name: &str, prefix: &str, suffix: &str| {
        name.strip_prefix(prefix)
            .and_then(|rest| rest.strip_suffix(suffix))
            .map(str::to_string)
    };
    let of_kind = |prefix: &str, suffix: &str| -> Vec<String> {
        presented
            .iter()
            .filter_map(|name| unwrap(name, prefix, suffix))
            .collect()
    };
    let valid = if matches!(expected, ServerName::IpAddress(_)) {
        let ips = of_kind("IpAddress(", ")");
        if ips.is_empty() {
            return format!(
                "x509: cannot validate certificate for {host} because it doesn't contain any IP SANs"
            );
        }
        ips
    } else {
        of_kind("DnsName(\"", "\")")
    };
    if valid.is_empty() {
        return format!("x509: certificate is not valid for any names, but wanted to match {host}");
    }
    format!(
        "x509: certificate is valid for {}, not {host}",
        valid.join(", ")
    )
}

/// A TLS alert as Go's `crypto/tls` names it.
fn alert_text(alert: rustls::AlertDescription) -> String {
    use rustls::AlertDescription as A;
    match alert {
        A::BadCertificate => "bad certificate".into(),
        A::UnknownCA => "unknown certificate authority".into(),
        A::HandshakeFailure => "handshake failure".into(),
        A::CertificateRequired => "certificate required".into(),
        A::CertificateExpired => "expired certificate".into(),
        A::CertificateUnknown => "unknown certificate".into(),
        A::ProtocolVersion => "protocol version not supported".into(),
        A::DecryptError => "error decrypting message".into(),
        A::InternalError => "internal error".into(),
        A::AccessDenied => "access denied".into(),
        A::IllegalParameter => "illegal parameter".into(),
        other => format!("{other:?}").to_lowercase(),
    }
}

/// A connection that remembers the first bytes the server sent, to tell a server that answered the TLS
/// handshake in HTTP.
struct Sniff<S> {
    inner: S,
    first: Vec<u8>,
}

impl<S> Sniff<S> {
    fn new(inner: S) -> Sniff<S> {
        Sniff {
            inner,
            first: Vec::new(),
        }
    }

    fn answered_in_http(&self) -> bool {
        self.first.starts_with(b"HTTP/")
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Sniff<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.inner).poll_read(cx, buf);
        let want = 5usize.saturating_sub(this.first.len());
        let new = &buf.filled()[before..];
        this.first.extend_from_slice(&new[..want.min(new.len())]);
        polled
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Sniff<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

/// What a TLS configuration is built from.
pub(super) struct TlsOptions<'a> {
    /// The host's `tls` settings, if any.
    pub settings: Option<&'a Tls>,
    /// Accept any certificate when the settings say nothing (containerd's default for a loopback
    /// registry's own endpoint).
    pub skip_verify_by_default: bool,
}

/// The rustls configuration of an endpoint host; `Err` says in containerd's words which file failed.
/// Hosts without settings share one configuration per verification mode, made once.
pub(super) fn client_config(options: &TlsOptions<'_>) -> Result<Arc<ClientConfig>, Error> {
    static VERIFYING: OnceLock<Arc<ClientConfig>> = OnceLock::new();
    static ACCEPTING: OnceLock<Arc<ClientConfig>> = OnceLock::new();
    if options.settings.is_some() {
        return build_client_config(options);
    }
    let shared = if options.skip_verify_by_default {
        &ACCEPTING
    } else {
        &VERIFYING
    };
    if let Some(config) = shared.get() {
        return Ok(config.clone());
    }
    let config = build_client_config(options)?;
    Ok(shared.get_or_init(|| config).clone())
}

fn build_client_config(options: &TlsOptions<'_>) -> Result<Arc<ClientConfig>, Error> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(Error::Rustls)?;
    let skip = match options.settings {
        Some(tls) => tls.insecure_skip_verify,
        None => options.skip_verify_by_default,
    };
    let builder = if skip {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AcceptAny(provider)))
    } else {
        let (roots, ca_file) = roots(options.settings)?;
        builder
            .dangerous()
            .with_custom_certificate_verifier(super::verify::verifier(roots, ca_file, provider))
    };
    let mut config = match client_identity(options.settings)? {
        Some((chain, key)) => builder
            .with_client_auth_cert(chain, key)
            .map_err(|e| Error::KeyPair(e.to_string()))?,
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// The system's roots (read once) and the host's `ca_file`; and the certificates of `ca_file`.
fn roots(settings: Option<&Tls>) -> Result<(RootCertStore, Vec<CertificateDer<'static>>), Error> {
    static SYSTEM: OnceLock<Vec<CertificateDer<'static>>> = OnceLock::new();
    let system = SYSTEM.get_or_init(|| rustls_native_certs::load_native_certs().certs);
    let mut store = RootCertStore::empty();
    store.add_parsable_certificates(system.iter().cloned());
    if let Some(path) = settings.and_then(|t| t.ca_file.as_ref()) {
        let pem = std::fs::read(path).map_err(|source| Error::ReadCa {
            path: path.clone(),
            source,
        })?;
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&pem)
            .filter_map(Result::ok)
            .collect();
        let (added, _) = store.add_parsable_certificates(certs.iter().cloned());
        if added == 0 {
            return Err(Error::LoadCa(path.clone()));
        }
        return Ok((store, certs));
    }
    Ok((store, Vec::new()))
}

/// The client certificate chain and key of `cert_file`/`key_file`.
fn client_identity(
    settings: Option<&Tls>,
) -> Result<Option<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)>, Error> {
    let Some(cert_file) = settings.and_then(|t| t.cert_file.as_ref()) else {
        return Ok(None);
    };
    let read = |path: &PathBuf| {
        std::fs::read(path).map_err(|source| Error::ReadCert {
            path: path.clone(),
            source,
        })
    };
    let cert_pem = read(cert_file)?;
    let key_pem = match settings.and_then(|t| t.key_file.as_ref()) {
        Some(key_file) => read(key_file)?,
        None => cert_pem.clone(),
    };
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&cert_pem)
        .filter_map(Result::ok)
        .collect();
    if chain.is_empty() {
        return Err(Error::KeyPair(
            "tls: failed to find any PEM data in certificate input".into(),
        ));
    }
    let key = PrivateKeyDer::from_pem_slice(&key_pem)
        .map_err(|_| Error::KeyPair("tls: failed to find any PEM data in key input".into()))?;
    Ok(Some((chain, key)))
}

/// An OS error as Go's `os` package words it (`no such file or directory`).
fn os_reason(e: &io::Error) -> String {
    match e.kind() {
        io::ErrorKind::NotFound => "no such file or directory".into(),
        io::ErrorKind::PermissionDenied => "permission denied".into(),
        _ => e.to_string(),
    }
}

/// `insecure_skip_verify`: any certificate is accepted; the handshake's signatures are still checked.
#[derive(Debug)]
struct AcceptAny(Arc<CryptoProvider>);

impl ServerCertVerifier for AcceptAny {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refused_certificates_are_worded_as_go_words_them() {
        assert_eq!(
            x509_reason(&CertificateError::UnknownIssuer),
            "x509: certificate signed by unknown authority"
        );
        let mismatch = |expected: &str, presented: &[&str]| {
            x509_reason(&CertificateError::NotValidForNameContext {
                expected: ServerName::try_from(expected.to_string()).unwrap(),
                presented: presented.iter().map(|p| p.to_string()).collect(),
            })
        };
        let both = [r#"DnsName("registry.test")"#, "IpAddress(10.0.0.1)"];
        assert_eq!(
            mismatch("127.0.0.1", &both),
            "x509: certificate is valid for 10.0.0.1, not 127.0.0.1"
        );
        assert_eq!(
            mismatch("other.test", &both),
            "x509: certificate is valid for registry.test, not other.test"
        );
        assert_eq!(
            mismatch("127.0.0.1", &both[..1]),
            "x509: cannot validate certificate for 127.0.0.1 because it doesn't contain any IP SANs"
        );
        assert_eq!(
            mismatch("other.test", &both[1..]),
            "x509: certificate is not valid for any names, but wanted to match other.test"
        );
        assert_eq!(
            x509_reason(&CertificateError::ExpiredContext {
                time: UnixTime::since_unix_epoch(std::time::Duration::from_secs(86400)),
                not_after: UnixTime::since_unix_epoch(std::time::Duration::from_secs(0)),
            }),
            "x509: certificate has expired or is not yet valid: current time \
             1970-01-02T00:00:00Z is after 1970-01-01T00:00:00Z"
        );
        assert_eq!(
            alert_text(rustls::AlertDescription::CertificateRequired),
            "certificate required"
        );
    }

    #[test]
    fn a_missing_ca_file_is_named() {
        let tls = Tls {
            ca_file: Some("/nonexistent/ca.pem".into()),
            ..Tls::default()
        };
        let err = client_config(&TlsOptions {
            settings: Some(&tls),
            skip_verify_by_default: false,
        })
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "unable to read CA cert \"/nonexistent/ca.pem\": open /nonexistent/ca.pem: no such file or directory"
        );
    }

    #[test]
    fn statuses_read_as_go_prints_them() {
        assert_eq!(status_text(StatusCode::UNAUTHORIZED), "401 Unauthorized");
    }
}
