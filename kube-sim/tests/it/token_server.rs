//! A token server for the distribution registry's `token` auth, as the distribution token spec has it:
//! `GET /token?service=…&scope=…` answers `{"token": <JWT>}`, an ES256 JWT signed by a key whose
//! self-signed certificate is the registry's `rootcertbundle` (named in the token's `x5c` header).
//! Anonymous requests get a token granting nothing; [`Self::user`] with [`Self::password`] (Basic) gets
//! the scopes it asks for. `POST` is answered `404`, as registries without OAuth2 support answer it. Every
//! request is recorded.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use bytes::Bytes;
use http::{Request, Response, StatusCode, header};
use http_body_util::Full;
use hyper_util::rt::TokioIo;
use rcgen::{CertificateParams, KeyPair, SigningKey as _};
use serde_json::{Value, json};

/// The `service` the registry and its tokens name.
pub const SERVICE: &str = "kube-sim-test";
/// The issuer the registry trusts.
pub const ISSUER: &str = "kube-sim-test-issuer";

/// What the server was asked.
#[derive(Clone, Debug)]
pub struct Asked {
    /// The method.
    pub method: String,
    /// The query.
    pub query: String,
    /// Whether it came with Basic credentials.
    pub with_credentials: bool,
}

/// A running token server, stopped on drop.
pub struct TokenServer {
    /// `http://127.0.0.1:<port>/token`.
    pub realm: String,
    /// The user that gets access.
    pub user: String,
    /// Its password.
    pub password: String,
    /// The certificate tokens are verified with (PEM), for `rootcertbundle`.
    pub bundle: PathBuf,
    signer: Arc<Signer>,
    asked: Arc<Mutex<Vec<Asked>>>,
    task: tokio::task::JoinHandle<()>,
    _dir: tempfile::TempDir,
}

/// The key tokens are signed with and its certificate.
struct Signer {
    key: KeyPair,
    cert_der: Vec<u8>,
}

impl TokenServer {
    /// Starts a server on a free loopback port.
    pub async fn start(user: &str, password: &str) -> TokenServer {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let key = KeyPair::generate().expect("a signing key");
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, ISSUER);
        let cert = params.self_signed(&key).expect("the token certificate");
        let bundle = dir.path().join("token.pem");
        std::fs::write(&bundle, cert.pem()).unwrap();
        let signer = Arc::new(Signer {
            key,
            cert_der: cert.der().to_vec(),
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let realm = format!("http://{}/token", listener.local_addr().unwrap());
        let asked = Arc::new(Mutex::new(Vec::new()));
        let basic = format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"))
        );
        let task = tokio::spawn(serve(listener, signer.clone(), asked.clone(), basic));
        TokenServer {
            realm,
            user: user.to_string(),
            password: password.to_string(),
            bundle,
            signer,
            asked,
            task,
            _dir: dir,
        }
    }

    /// The registry's `auth:` section for this server.
    pub fn auth_config(&self) -> String {
        format!(
            "auth:\n  token:\n    realm: {}\n    service: {SERVICE}\n    issuer: {ISSUER}\n    rootcertbundle: {}\n",
            self.realm,
            self.bundle.display()
        )
    }

    /// A token granting `actions` on `repository`, for the test's own pushes.
    pub fn token(&self, repository: &str, actions: &[&str]) -> String {
        self.signer.sign(
            "test",
            &[json!({"type": "repository", "name": repository, "actions": actions})],
        )
    }

    /// Every request so far.
    pub fn asked(&self) -> Vec<Asked> {
        self.asked.lock().unwrap().clone()
    }
}

impl Drop for TokenServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn serve(
    listener: tokio::net::TcpListener,
    signer: Arc<Signer>,
    asked: Arc<Mutex<Vec<Asked>>>,
    basic: String,
) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            return;
        };
        let (signer, asked, basic) = (signer.clone(), asked.clone(), basic.clone());
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
                let answer = answer(&req, &signer, &asked, &basic);
                async move { Ok::<_, std::convert::Infallible>(answer) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

/// The answer to one token request.
fn answer<B>(
    req: &Request<B>,
    signer: &Signer,
    asked: &Mutex<Vec<Asked>>,
    basic: &str,
) -> Response<Full<Bytes>> {
    let given = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    let query = req.uri().query().unwrap_or("").to_string();
    asked.lock().unwrap().push(Asked {
        method: req.method().to_string(),
        query: query.clone(),
        with_credentials: given.is_some(),
    });
    let reply = |status: StatusCode, body: String| {
        Response::builder()
            .status(status)
            .header(header::CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::from(body)))
            .unwrap()
    };
    if req.method() != http::Method::GET {
        return reply(StatusCode::NOT_FOUND, "{}".into());
    }
    let access: Vec<Value> = match given {
        None => Vec::new(),
        Some(g) if g == basic => scopes(&query),
        Some(_) => {
            return reply(
                StatusCode::UNAUTHORIZED,
                r#"{"details":"bad credentials"}"#.into(),
            );
        }
    };
    let subject = if given.is_some() { "puller" } else { "" };
    let token = signer.sign(subject, &access);
    reply(StatusCode::OK, json!({"token": token}).to_string())
}

/// The `repository:<name>:<actions>` scopes of a query as token claims.
fn scopes(query: &str) -> Vec<Value> {
    query
        .split('&')
        .filter_map(|pair| pair.strip_prefix("scope="))
        .map(|s| s.replace("%3A", ":").replace("%2F", "/").replace("%2C", ","))
        .filter_map(|scope| {
            let mut parts = scope.splitn(3, ':');
            let (kind, name, actions) = (parts.next()?, parts.next()?, parts.next()?);
            Some(json!({"type": kind, "name": name, "actions": actions.split(',').collect::<Vec<_>>()}))
        })
        .collect()
}

impl Signer {
    /// An ES256 JWT for `subject` with these access claims.
    fn sign(&self, subject: &str, access: &[Value]) -> String {
        let url = |bytes: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes);
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs();
        let header = json!({"typ": "JWT", "alg": "ES256",
            "x5c": [base64::engine::general_purpose::STANDARD.encode(&self.cert_der)]});
        let claims = json!({"iss": ISSUER, "sub": subject, "aud": SERVICE,
            "exp": now + 300, "nbf": now - 10, "iat": now,
            "jti": kube_sim::meta::random_hex(8), "access": access});
        let signing_input = format!(
            "{}.{}",
            url(header.to_string().as_bytes()),
            url(claims.to_string().as_bytes())
        );
        let der = self
            .key
            .sign(signing_input.as_bytes())
            .expect("the token is signed");
        format!("{signing_input}.{}", url(&raw_signature(&der)))
    }
}

/// An ASN.1 `SEQUENCE { r INTEGER, s INTEGER }` ECDSA signature as JWS's fixed 64-byte `r || s`.
fn raw_signature(der: &[u8]) -> Vec<u8> {
    let integer = |at: usize| -> (&[u8], usize) {
        assert_eq!(der[at], 0x02, "an INTEGER");
        let len = der[at + 1] as usize;
        (&der[at + 2..at + 2 + len], at + 2 + len)
    };
    // A P-256 signature's SEQUENCE is short enough for a one-byte length.
    assert_eq!(der[0], 0x30, "a SEQUENCE");
    let (r, next) = integer(2);
    let (s, _) = integer(next);
    let mut out = Vec::with_capacity(64);
    for n in [r, s] {
        let n = &n[n.len().saturating_sub(32)..];
        out.extend(std::iter::repeat_n(0u8, 32 - n.len()));
        out.extend_from_slice(n);
    }
    out
}
