//! Registry authentication as containerd's docker authorizer does it (`core/remotes/docker/authorizer.go`
//! and `auth/`): requests go anonymous until a `401` names a scheme in `WWW-Authenticate`; `Basic` is
//! answered with the pull's credentials, `Bearer` with a token fetched from the challenge's realm
//! (`POST` of an OAuth2 form when there is a secret, falling back to `GET` where registries refuse it;
//! anonymous `GET` otherwise), kept per scope for the rest of the pull.

use std::collections::BTreeMap;
use std::fmt;

use bytes::Bytes;
use http::{HeaderMap, Method, StatusCode, header};
use serde::Deserialize;

use super::config::AuthError;
use super::transport::{self, Request, Response, Transport, status_text};

/// What a pull shows a registry host: a user name and a secret (a password, or an identity token with
/// no user name); both empty is anonymous. `Debug` shows the user name only.
#[derive(Clone, Default, PartialEq)]
pub struct Credentials {
    username: String,
    secret: String,
}

impl Credentials {
    /// Credentials from a user name and a secret.
    pub fn new(username: &str, secret: &str) -> Credentials {
        Credentials {
            username: username.to_string(),
            secret: secret.to_string(),
        }
    }

    /// The user name (empty with an identity token).
    pub fn username(&self) -> &str {
        &self.username
    }

    /// The password or identity token.
    pub fn secret(&self) -> &str {
        &self.secret
    }
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("username", &self.username)
            .field("secret", &(!self.secret.is_empty()).then_some("<hidden>"))
            .finish()
    }
}

/// Why a `401` cannot be answered.
#[derive(Debug, PartialEq)]
pub(super) enum Refusal {
    /// No scheme the authorizer speaks: the `401` stands as the response.
    Unsupported,
    /// containerd's `ErrInvalidAuthorization`: credentials are missing or were refused.
    Invalid(String),
    /// The pull's credentials cannot be read.
    Credentials(AuthError),
    /// The challenge is malformed.
    Other(String),
}

/// A `WWW-Authenticate` challenge.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Challenge {
    /// The scheme, lower case (`basic`, `bearer`).
    pub scheme: String,
    /// The parameters (`realm`, `service`, `scope`, `error`).
    pub params: BTreeMap<String, String>,
}

/// How requests to the endpoint host are answered once a challenge was seen.
enum Handler {
    Basic,
    Bearer {
        realm: String,
        service: String,
        scopes: Vec<String>,
        /// Tokens fetched, by the scopes they were asked for.
        tokens: BTreeMap<String, String>,
    },
}

/// The authorizer of one pull at one endpoint host.
pub(super) struct Authorizer {
    /// The endpoint's `host:port`; requests elsewhere (redirects) carry no credentials.
    authority: String,
    /// The pull's credentials for this host, or why they cannot be read.
    credentials: Result<Credentials, AuthError>,
    /// The scope the pulled repository needs (`repository:<path>:pull`).
    scope: String,
    handler: Option<Handler>,
}

impl Authorizer {
    /// An authorizer for pulls of `repository` from `authority` with these credentials.
    pub(super) fn new(
        authority: &str,
        credentials: Result<Credentials, AuthError>,
        repository: &str,
    ) -> Authorizer {
        Authorizer {
            authority: authority.to_string(),
            credentials,
            scope: format!("repository:{repository}:pull"),
            handler: None,
        }
    }

    /// The `Authorization` header for a request to `authority`, fetching a token when needed; `Err` is
    /// worded as containerd's `failed to authorize: …` cause.
    pub(super) async fn authorize(
        &mut self,
        authority: &str,
        transport: &Transport,
    ) -> Result<Option<String>, Error> {
        if authority != self.authority {
            return Ok(None);
        }
        let credentials = self.credentials.clone().unwrap_or_default();
        let scope = self.scope.clone();
        match &mut self.handler {
            None => Ok(None),
            Some(Handler::Basic) => Ok(Some(basic(&credentials))),
            Some(Handler::Bearer {
                realm,
                service,
                scopes,
                tokens,
            }) => {
                let mut all: Vec<String> = scopes.iter().cloned().chain([scope]).collect();
                all.sort();
                all.dedup();
                let key = all.join(" ");
                if let Some(token) = tokens.get(&key) {
                    return Ok(Some(format!("Bearer {token}")));
                }
                let options = TokenOptions {
                    realm,
                    service,
                    scopes: &all,
                    credentials: &credentials,
                };
                let token = fetch_token(transport, &options).await?;
                tokens.insert(key, token.clone());
                Ok(Some(format!("Bearer {token}")))
            }
        }
    }

    /// Learns from a `401` (`AddResponses`): `Ok` means the request is worth sending again. `repeated`
    /// says the request before this one was the same request, answered `401` too.
    pub(super) fn challenged(
        &mut self,
        response: &Response,
        repeated: bool,
    ) -> Result<(), Refusal> {
        for c in challenges(&response.headers) {
            match c.scheme.as_str() {
                "bearer" => return self.bearer(&c, repeated),
                "basic" => {
                    let credentials = self.credentials.clone().map_err(Refusal::Credentials)?;
                    if credentials.username.is_empty() || credentials.secret.is_empty() {
                        return Err(Refusal::Invalid(
                            "authorization failed: no basic auth credentials".into(),
                        ));
                    }
                    self.handler = Some(Handler::Basic);
                    return Ok(());
                }
                _ => {}
            }
        }
        Err(Refusal::Unsupported)
    }

    fn bearer(&mut self, c: &Challenge, repeated: bool) -> Result<(), Refusal> {
        if let Some(error) = c.params.get("error") {
            // A token was refused: fetch another once, then give up with the server's words.
            self.handler = None;
            if repeated {
                return Err(Refusal::Invalid(format!(
                    "server message: {error}: authorization failed"
                )));
            }
        }
        if self.handler.is_some() {
            return Ok(());
        }
        self.credentials.clone().map_err(Refusal::Credentials)?;
        let realm = c
            .params
            .get("realm")
            .ok_or_else(|| Refusal::Other("no realm specified for token auth challenge".into()))?;
        self.handler = Some(Handler::Bearer {
            realm: realm.clone(),
            service: c.params.get("service").cloned().unwrap_or_default(),
            scopes: c
                .params
                .get("scope")
                .map(|s| s.split(' ').map(str::to_string).collect())
                .unwrap_or_default(),
            tokens: BTreeMap::new(),
        });
        Ok(())
    }
}

/// `Basic base64(user:secret)`.
fn basic(credentials: &Credentials) -> String {
    use base64::Engine as _;
    let pair = format!("{}:{}", credentials.username, credentials.secret);
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(pair)
    )
}

/// What a token is asked for with.
struct TokenOptions<'a> {
    realm: &'a str,
    service: &'a str,
    scopes: &'a [String],
    credentials: &'a Credentials,
}

/// A token for the scopes: with a secret, an OAuth2 `POST` first (`grant_type=password`, or
/// `refresh_token` for an identity token), then `GET` with Basic credentials where the server refuses
/// the `POST`; anonymous `GET` without one.
async fn fetch_token(transport: &Transport, options: &TokenOptions<'_>) -> Result<String, Error> {
    if options.credentials.secret.is_empty() {
        return fetch_with_get(transport, options)
            .await
            .map_err(Error::Anonymous);
    }
    let refused = |status: StatusCode| {
        matches!(status.as_u16(), 400 | 401 | 404)
            || (status == StatusCode::METHOD_NOT_ALLOWED
                && !options.credentials.username.is_empty())
    };
    match fetch_with_post(transport, options).await {
        Err(TokenError::Status { status, .. }) if refused(status) => {
            fetch_with_get(transport, options).await
        }
        other => other,
    }
    .map_err(Error::OAuth)
}

/// A token could not be fetched (containerd's `failed to authorize: …` cause).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Without credentials.
    #[error("failed to fetch anonymous token: {0}")]
    Anonymous(#[source] TokenError),
    /// With the pull's credentials.
    #[error("failed to fetch oauth token: {0}")]
    OAuth(#[source] TokenError),
}

/// A token request failed.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    /// The server answered with an error status (containerd's `ErrUnexpectedStatus`).
    #[error("unexpected status from {method} request to {url}: {}", status_text(*.status))]
    Status {
        /// The method.
        method: Method,
        /// The URL.
        url: String,
        /// The status.
        status: StatusCode,
    },
    /// The request could not be made.
    #[error("{} {:?}: {source}", go_method(.method), .url)]
    Request {
        /// The method.
        method: Method,
        /// The URL.
        url: String,
        /// The cause.
        #[source]
        source: Box<transport::Error>,
    },
    /// The answer is not the JSON of a token response.
    #[error("unable to decode token response: {0}")]
    Decode(#[source] serde_json::Error),
    /// The answer has no token.
    #[error("authorization server did not include a token in the response")]
    NoToken,
}

/// The OAuth2 `POST` (`FetchTokenWithOAuth`); its answer must carry `access_token`.
async fn fetch_with_post(
    transport: &Transport,
    options: &TokenOptions<'_>,
) -> Result<String, TokenError> {
    let c = options.credentials;
    let mut form: Vec<(&str, &str)> = Vec::new();
    let scope = options.scopes.join(" ");
    if !scope.is_empty() {
        form.push(("scope", &scope));
    }
    form.push(("service", options.service));
    form.push(("client_id", "containerd-client"));
    if c.username.is_empty() {
        form.extend([
            ("grant_type", "refresh_token"),
            ("refresh_token", &c.secret),
        ]);
    } else {
        form.extend([
            ("grant_type", "password"),
            ("username", &c.username),
            ("password", &c.secret),
        ]);
    }
    let request = Request {
        method: Method::POST,
        url: options.realm.to_string(),
        headers: vec![
            (
                header::CONTENT_TYPE,
                "application/x-www-form-urlencoded; charset=utf-8".into(),
            ),
            (header::USER_AGENT, super::USER_AGENT.into()),
        ],
        body: Bytes::from(encode_form(&form)),
    };
    let body = token_exchange(transport, &request).await?;
    #[derive(Deserialize)]
    struct OAuthToken {
        #[serde(default)]
        access_token: String,
    }
    let token: OAuthToken = serde_json::from_slice(&body).map_err(TokenError::Decode)?;
    non_empty(token.access_token)
}

/// The `GET` of the token spec (`FetchToken`), with Basic credentials when there is a secret; its
/// answer carries `token` or `access_token`.
async fn fetch_with_get(
    transport: &Transport,
    options: &TokenOptions<'_>,
) -> Result<String, TokenError> {
    let mut query: Vec<(&str, &str)> = Vec::new();
    if !options.service.is_empty() {
        query.push(("service", options.service));
    }
    for scope in options.scopes {
        query.push(("scope", scope));
    }
    // Go's `url.Values.Encode` sorts by key; the order of values under a key is kept.
    query.sort_by_key(|(k, _)| *k);
    let sep = if options.realm.contains('?') {
        '&'
    } else {
        '?'
    };
    let url = if query.is_empty() {
        options.realm.to_string()
    } else {
        format!("{}{sep}{}", options.realm, encode_form(&query))
    };
    let mut headers = vec![(header::USER_AGENT, super::USER_AGENT.to_string())];
    if !options.credentials.secret.is_empty() {
        headers.push((header::AUTHORIZATION, basic(options.credentials)));
    }
    let request = Request {
        method: Method::GET,
        url,
        headers,
        body: Bytes::new(),
    };
    let body = token_exchange(transport, &request).await?;
    #[derive(Deserialize)]
    struct Token {
        #[serde(default)]
        token: String,
        #[serde(default)]
        access_token: String,
    }
    let token: Token = serde_json::from_slice(&body).map_err(TokenError::Decode)?;
    non_empty(if token.access_token.is_empty() {
        token.token
    } else {
        token.access_token
    })
}

fn non_empty(token: String) -> Result<String, TokenError> {
    if token.is_empty() {
        return Err(TokenError::NoToken);
    }
    Ok(token)
}

/// Sends a token request; a status outside 2xx and 3xx is containerd's `ErrUnexpectedStatus`.
async fn token_exchange(transport: &Transport, request: &Request) -> Result<Bytes, TokenError> {
    let response = transport
        .send(request)
        .await
        .map_err(|source| TokenError::Request {
            method: request.method.clone(),
            url: request.url.clone(),
            source: Box::new(source),
        })?;
    if !(200..400).contains(&response.status.as_u16()) {
        return Err(TokenError::Status {
            method: request.method.clone(),
            url: request.url.clone(),
            status: response.status,
        });
    }
    Ok(response.body)
}

/// A method as Go's `url.Error` names it (`Head`, `Get`, `Post`).
pub(super) fn go_method(method: &Method) -> String {
    let m = method.as_str().to_ascii_lowercase();
    let mut chars = m.chars();
    match chars.next() {
        Some(first) => first.to_ascii_uppercase().to_string() + chars.as_str(),
        None => m,
    }
}

/// `application/x-www-form-urlencoded` as Go's `url.QueryEscape` writes it.
pub(super) fn encode_form(pairs: &[(&str, &str)]) -> String {
    pairs
        .iter()
        .map(|(k, v)| format!("{}={}", query_escape(k), query_escape(v)))
        .collect::<Vec<_>>()
        .join("&")
}

fn query_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(b as char)
            }
            b' ' => out.push('+'),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// The challenges of every `WWW-Authenticate` header, in order.
pub(super) fn challenges(headers: &HeaderMap) -> Vec<Challenge> {
    headers
        .get_all(header::WWW_AUTHENTICATE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .filter_map(parse_challenge)
        .collect()
}

/// `Scheme key=value, key="quoted value", …`.
fn parse_challenge(value: &str) -> Option<Challenge> {
    let value = value.trim();
    let (scheme, rest) = value.split_once(' ').unwrap_or((value, ""));
    if scheme.is_empty() {
        return None;
    }
    let mut params = BTreeMap::new();
    let mut rest = rest.trim_start();
    while !rest.is_empty() {
        let Some((key, after)) = rest.split_once('=') else {
            break;
        };
        let key = key.trim().to_ascii_lowercase();
        let after = after.trim_start();
        let (value, tail) = match after.strip_prefix('"') {
            Some(quoted) => unquote(quoted),
            None => {
                let end = after.find(',').unwrap_or(after.len());
                (after[..end].trim().to_string(), &after[end..])
            }
        };
        params.insert(key, value);
        rest = tail.trim_start().trim_start_matches(',').trim_start();
    }
    Some(Challenge {
        scheme: scheme.to_ascii_lowercase(),
        params,
    })
}

/// A quoted string's value (after its opening quote) and what follows its closing quote.
fn unquote(s: &str) -> (String, &str) {
    let mut out = String::new();
    let mut chars = s.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '\\' => {
                if let Some((_, escaped)) = chars.next() {
                    out.push(escaped);
                }
            }
            '"' => return (out, &s[i + 1..]),
            c => out.push(c),
        }
    }
    (out, "")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn response(challenge: &str) -> Response {
        let mut headers = HeaderMap::new();
        headers.insert(header::WWW_AUTHENTICATE, challenge.parse().unwrap());
        Response {
            status: StatusCode::UNAUTHORIZED,
            headers,
            body: Bytes::new(),
        }
    }

    #[test]
    fn challenges_are_parsed_with_quoted_and_bare_values() {
        let c = parse_challenge(
            r#"Bearer realm="https://auth.test/token",service="registry.test",scope="repository:app:pull repository:lib:pull",error="insufficient_scope""#,
        )
        .unwrap();
        assert_eq!(c.scheme, "bearer");
        assert_eq!(c.params["realm"], "https://auth.test/token");
        assert_eq!(c.params["service"], "registry.test");
        assert_eq!(c.params["scope"], "repository:app:pull repository:lib:pull");
        assert_eq!(c.params["error"], "insufficient_scope");
        let c = parse_challenge(r#"Basic realm=Registry, charset="UTF-8""#).unwrap();
        assert_eq!(c.scheme, "basic");
        assert_eq!(c.params["realm"], "Registry");
        assert_eq!(c.params["charset"], "UTF-8");
    }

    #[test]
    fn basic_without_credentials_is_an_invalid_authorization() {
        let mut a = Authorizer::new("r:5000", Ok(Credentials::default()), "app");
        assert_eq!(
            a.challenged(&response(r#"Basic realm="r""#), false),
            Err(Refusal::Invalid(
                "authorization failed: no basic auth credentials".into()
            ))
        );
        let mut a = Authorizer::new("r:5000", Ok(Credentials::new("u", "p")), "app");
        assert_eq!(a.challenged(&response(r#"Basic realm="r""#), false), Ok(()));
        assert_eq!(
            a.challenged(&response(r#"Negotiate abc"#), false),
            Err(Refusal::Unsupported)
        );
    }

    #[test]
    fn a_refused_token_is_fetched_again_once_then_given_up() {
        let mut a = Authorizer::new("r:5000", Ok(Credentials::default()), "app");
        let first = response(r#"Bearer realm="https://auth/token",service="r""#);
        assert_eq!(a.challenged(&first, false), Ok(()));
        let refused = response(r#"Bearer realm="https://auth/token",error="insufficient_scope""#);
        assert_eq!(a.challenged(&refused, false), Ok(()));
        assert_eq!(
            a.challenged(&refused, true),
            Err(Refusal::Invalid(
                "server message: insufficient_scope: authorization failed".into()
            ))
        );
    }

    #[test]
    fn forms_are_escaped_as_go_escapes_queries() {
        assert_eq!(
            encode_form(&[("scope", "repository:team/app:pull"), ("service", "a b")]),
            "scope=repository%3Ateam%2Fapp%3Apull&service=a+b"
        );
        assert_eq!(go_method(&Method::HEAD), "Head");
    }

    #[test]
    fn debug_hides_the_secret() {
        let shown = format!("{:?}", Credentials::new("ci", "hunter2"));
        assert!(
            shown.contains("ci") && !shown.contains("hunter2"),
            "{shown}"
        );
    }
}
