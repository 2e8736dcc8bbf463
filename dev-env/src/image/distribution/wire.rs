//! One exchange with a registry: a request over reqwest (HTTP/1.1, the
//! TLS configuration [`trust`](super::trust) makes), answered again when
//! the registry challenges it as the challenge asks: Basic credentials, or
//! a Bearer token from the token service the challenge names, fetched with
//! those credentials (anonymously without them) and kept per scope.

use std::{collections::HashMap, sync::Mutex, time::Duration};

use base64::Engine;
use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, header};

use super::super::credentials::Credential;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("the request did not get an answer")]
    Send(#[source] reqwest::Error),
    #[error("the answer could not be read")]
    Read(#[source] reqwest::Error),
    #[error("`{url}` is not a URL")]
    Url {
        url: String,
        #[source]
        source: UrlError,
    },
    #[error("the token service {realm} answered {status}")]
    TokenRefused { realm: String, status: StatusCode },
    #[error("the token service {realm} answered without a token")]
    TokenAnswer {
        realm: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("the HTTP client could not be made")]
    Client(#[source] reqwest::Error),
}

/// What reqwest's URL parser refuses with.
type UrlError = <reqwest::Url as std::str::FromStr>::Err;

/// A request to the registry.
pub struct Request {
    pub method: Method,
    /// A path below the registry (`/v2/…`) or an absolute URL (an upload's
    /// `Location`).
    pub target: String,
    /// The access it needs, as a token service's `scope`s
    /// (`repository:demo/worker:pull,push`), space-separated.
    pub scope: String,
    pub headers: Vec<(HeaderName, String)>,
    pub body: Option<Bytes>,
}

/// An answer, its body read whole (nothing for `HEAD`).
#[derive(Debug)]
pub struct Response {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Response {
    pub fn header(&self, name: impl header::AsHeaderName) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

/// The HTTP side of one registry client.
pub struct Wire {
    http: reqwest::Client,
    /// `http://127.0.0.1:5001`, `https://reg.lan:5000`.
    base: String,
    /// `Basic <base64(user:secret)>` of the credentials, if any.
    basic: Option<String>,
    /// The `Authorization` a challenge was answered with, per scope (and
    /// under `""` for Basic, which holds for every scope).
    granted: Mutex<HashMap<String, String>>,
}

impl std::fmt::Debug for Wire {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Wire")
            .field("base", &self.base)
            .finish_non_exhaustive()
    }
}

/// A challenge of a `WWW-Authenticate` header.
#[derive(Debug, PartialEq, Eq)]
enum Challenge {
    Basic,
    Bearer {
        realm: String,
        service: Option<String>,
        scope: Option<String>,
    },
}

impl Wire {
    /// A client for `base` with `tls`, sending `credential` when challenged;
    /// `timeouts` are those of connecting and of each read.
    pub fn new(
        base: String,
        tls: rustls::ClientConfig,
        credential: Option<&Credential>,
        timeouts: (Duration, Duration),
    ) -> Result<Wire, Error> {
        let (connect, read) = timeouts;
        let http = reqwest::Client::builder()
            .tls_backend_preconfigured(tls)
            .http1_only()
            .connect_timeout(connect)
            .read_timeout(read)
            .user_agent(concat!("dev-env/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(Error::Client)?;
        let basic = credential.map(|c| {
            let pair = format!("{}:{}", c.username, c.secret);
            format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(pair)
            )
        });
        Ok(Wire {
            http,
            base,
            basic,
            granted: Mutex::new(HashMap::new()),
        })
    }

    /// Sends `request`; a `401` with a challenge is answered once, and
    /// what answered it is kept for the next request of the same scope.
    /// Any other status is the caller's to judge.
    pub async fn send(&self, request: &Request) -> Result<Response, Error> {
        let kept = self.kept(&request.scope);
        let first = self.once(request, kept.as_deref()).await?;
        if first.status != StatusCode::UNAUTHORIZED {
            return Ok(first);
        }
        let Some(challenge) = first
            .header(header::WWW_AUTHENTICATE)
            .and_then(parse_challenge)
        else {
            return Ok(first);
        };
        let (key, authorization) = match challenge {
            Challenge::Basic => match &self.basic {
                Some(basic) => (String::new(), basic.clone()),
                None => return Ok(first),
            },
            Challenge::Bearer {
                realm,
                service,
                scope,
            } => {
                let scope = scope.unwrap_or_else(|| request.scope.clone());
                let token = self.token(&realm, service.as_deref(), &scope).await?;
                (request.scope.clone(), format!("Bearer {token}"))
            }
        };
        if kept.as_deref() == Some(authorization.as_str()) {
            return Ok(first);
        }
        self.lock().insert(key, authorization.clone());
        self.once(request, Some(&authorization)).await
    }

    /// The `Authorization` kept for `scope`: its token, or Basic.
    fn kept(&self, scope: &str) -> Option<String> {
        let granted = self.lock();
        granted.get(scope).or_else(|| granted.get("")).cloned()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, String>> {
        // A panic while the map was held leaves it whole: keep using it.
        self.granted
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The URL of `target`: absolute as it is, a path below the registry.
    pub fn url(&self, target: &str) -> String {
        if target.starts_with("http://") || target.starts_with("https://") {
            target.to_string()
        } else {
            format!("{}{target}", self.base)
        }
    }

    async fn once(
        &self,
        request: &Request,
        authorization: Option<&str>,
    ) -> Result<Response, Error> {
        let url = self.url(&request.target);
        let mut builder = self.http.request(request.method.clone(), &url);
        for (name, value) in &request.headers {
            builder = builder.header(name, value);
        }
        if let Some(authorization) = authorization {
            builder = builder.header(header::AUTHORIZATION, authorization);
        }
        if let Some(body) = &request.body {
            builder = builder.body(body.clone());
        }
        let response = builder.send().await.map_err(Error::Send)?;
        let (status, headers) = (response.status(), response.headers().clone());
        let body = if request.method == Method::HEAD {
            Bytes::new()
        } else {
            response.bytes().await.map_err(Error::Read)?
        };
        Ok(Response {
            status,
            headers,
            body,
        })
    }

    /// A token of the service at `realm` for `scope`.
    async fn token(
        &self,
        realm: &str,
        service: Option<&str>,
        scope: &str,
    ) -> Result<String, Error> {
        let mut url: reqwest::Url = realm.parse().map_err(|source| Error::Url {
            url: realm.to_string(),
            source,
        })?;
        {
            let mut query = url.query_pairs_mut();
            if let Some(service) = service {
                query.append_pair("service", service);
            }
            for scope in scope.split_whitespace() {
                query.append_pair("scope", scope);
            }
        }
        let mut builder = self.http.get(url);
        if let Some(basic) = &self.basic {
            builder = builder.header(header::AUTHORIZATION, basic);
        }
        let response = builder.send().await.map_err(Error::Send)?;
        let status = response.status();
        if !status.is_success() {
            return Err(Error::TokenRefused {
                realm: realm.to_string(),
                status,
            });
        }
        let body = response.bytes().await.map_err(Error::Read)?;
        #[derive(serde::Deserialize)]
        struct Answer {
            token: Option<String>,
            access_token: Option<String>,
        }
        let answer: Answer =
            serde_json::from_slice(&body).map_err(|source| Error::TokenAnswer {
                realm: realm.to_string(),
                source,
            })?;
        answer
            .token
            .or(answer.access_token)
            .filter(|t| !t.is_empty())
            .ok_or_else(|| Error::TokenAnswer {
                realm: realm.to_string(),
                source: serde::de::Error::missing_field("token"),
            })
    }
}

/// The challenge of a `WWW-Authenticate` value: `Basic realm="…"` or
/// `Bearer realm="…",service="…",scope="…"`.
fn parse_challenge(value: &str) -> Option<Challenge> {
    let value = value.trim();
    let (scheme, params) = value.split_once(' ').unwrap_or((value, ""));
    if scheme.eq_ignore_ascii_case("basic") {
        return Some(Challenge::Basic);
    }
    if !scheme.eq_ignore_ascii_case("bearer") {
        return None;
    }
    let params = parse_params(params);
    Some(Challenge::Bearer {
        realm: params.get("realm")?.clone(),
        service: params.get("service").cloned(),
        scope: params.get("scope").cloned(),
    })
}

/// `key="value", key=value` into a map, keys in lower case; a quoted value
/// may hold commas and `\"`.
fn parse_params(text: &str) -> HashMap<String, String> {
    let mut params = HashMap::new();
    let mut rest = text.trim_start_matches([' ', ',']);
    while let Some((key, after)) = rest.split_once('=') {
        let key = key.trim().to_ascii_lowercase();
        let after = after.trim_start();
        let (value, next) = match after.strip_prefix('"') {
            Some(quoted) => {
                let mut value = String::new();
                let mut chars = quoted.char_indices();
                let mut end = quoted.len();
                while let Some((i, c)) = chars.next() {
                    match c {
                        '\\' => value.extend(chars.next().map(|(_, c)| c)),
                        '"' => {
                            end = i + 1;
                            break;
                        }
                        c => value.push(c),
                    }
                }
                (value, &quoted[end..])
            }
            None => {
                let end = after.find(',').unwrap_or(after.len());
                (after[..end].trim().to_string(), &after[end..])
            }
        };
        params.insert(key, value);
        rest = next.trim_start_matches([' ', ',']);
    }
    params
}

/// `Content-Type`, as a request header.
pub fn content_type(media_type: &str) -> (HeaderName, String) {
    let valid = HeaderValue::from_str(media_type).is_ok();
    let value = if valid {
        media_type
    } else {
        "application/octet-stream"
    };
    (header::CONTENT_TYPE, value.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn challenges_are_read_as_registries_send_them() {
        assert_eq!(
            parse_challenge(r#"Basic realm="dev-env-test""#),
            Some(Challenge::Basic)
        );
        assert_eq!(
            parse_challenge(
                r#"Bearer realm="https://auth.example/token",service="registry.example",scope="repository:a/b:pull,push""#
            ),
            Some(Challenge::Bearer {
                realm: String::from("https://auth.example/token"),
                service: Some(String::from("registry.example")),
                scope: Some(String::from("repository:a/b:pull,push")),
            })
        );
        assert_eq!(
            parse_challenge(r#"bearer realm="https://a/t?x=\"1\"", error=invalid_token"#),
            Some(Challenge::Bearer {
                realm: String::from(r#"https://a/t?x="1""#),
                service: None,
                scope: None,
            })
        );
        assert_eq!(parse_challenge("Bearer service=x"), None, "no realm");
        assert_eq!(parse_challenge("Negotiate abc"), None);
    }

    /// A registry on `listener` that wants a Bearer token of its token
    /// service (itself, at `/token`), which wants the user's Basic
    /// credentials: each connection answers one request and closes.
    async fn token_registry(listener: tokio::net::TcpListener) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let port = listener.local_addr().unwrap().port();
        let basic = format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode("ci:pw")
        );
        loop {
            let (mut stream, _) = listener.accept().await.unwrap();
            let mut head = Vec::new();
            while !head.ends_with(b"\r\n\r\n") {
                let mut byte = [0u8];
                if stream.read(&mut byte).await.unwrap() == 0 {
                    break;
                }
                head.push(byte[0]);
            }
            let head = String::from_utf8_lossy(&head).to_ascii_lowercase();
            let authorized = |value: &str| head.contains(&format!("authorization: {value}\r\n"));
            let (status, extra, body) = if head.starts_with("get /token?") {
                let asked = head.contains("scope=repository%3ademo%2fapp%3apull");
                match authorized(&basic.to_ascii_lowercase()) && asked {
                    true => ("200 OK", String::new(), r#"{"token":"t0k"}"#),
                    false => ("401 Unauthorized", String::new(), ""),
                }
            } else if authorized("bearer t0k") {
                ("200 OK", String::new(), "served")
            } else {
                let challenge = format!(
                    "WWW-Authenticate: Bearer realm=\"http://127.0.0.1:{port}/token\",service=\"test\",scope=\"repository:demo/app:pull\"\r\n"
                );
                ("401 Unauthorized", challenge, "")
            };
            let answer = format!(
                "HTTP/1.1 {status}\r\n{extra}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            stream.write_all(answer.as_bytes()).await.unwrap();
        }
    }

    #[tokio::test]
    async fn a_bearer_challenge_is_answered_with_a_token_fetched_with_the_credentials() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(token_registry(listener));
        let get = Request {
            method: Method::GET,
            target: String::from("/v2/demo/app/manifests/dev"),
            scope: String::from("repository:demo/app:pull"),
            headers: Vec::new(),
            body: None,
        };
        let tls = super::super::trust::client_config(Vec::new()).unwrap();
        let timeouts = (Duration::from_secs(5), Duration::from_secs(5));
        let credential = Credential {
            username: String::from("ci"),
            secret: String::from("pw"),
            source: String::from("a test"),
        };
        let wire = Wire::new(base.clone(), tls.clone(), Some(&credential), timeouts).unwrap();
        let answer = wire.send(&get).await.unwrap();
        assert_eq!(
            (answer.status, &answer.body[..]),
            (StatusCode::OK, &b"served"[..])
        );
        assert_eq!(wire.kept(&get.scope).as_deref(), Some("Bearer t0k"));
        let again = wire.send(&get).await.unwrap();
        assert_eq!(again.status, StatusCode::OK, "with the kept token at once");

        let wrong = Credential {
            secret: String::from("wrong"),
            ..credential
        };
        let refused = Wire::new(base, tls, Some(&wrong), timeouts).unwrap();
        let err = refused.send(&get).await.unwrap_err();
        assert!(
            matches!(
                err,
                Error::TokenRefused {
                    status: StatusCode::UNAUTHORIZED,
                    ..
                }
            ),
            "{err:?}"
        );
    }
}
