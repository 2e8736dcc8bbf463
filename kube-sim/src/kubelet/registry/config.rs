//! k3s' `registries.yaml` (`docs.k3s.io/installation/private-registry`): `mirrors` by registry host, and
//! `configs` (credentials and TLS) by the host a request goes to, a mirror endpoint's or the registry's
//! own, with `"*"` for every host without an entry of its own.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Deserializer};

use super::Error;
use super::auth::Credentials;
use crate::kubelet::reference::DEFAULT_DOMAIN;

/// The key of the entry that applies to every host without one of its own.
pub const WILDCARD: &str = "*";

/// A k3s-style `registries.yaml`: `mirrors` by registry host (or `"*"`), `configs` by endpoint host (or
/// `"*"`).
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
pub struct Registries {
    /// Mirrors by registry host.
    #[serde(default, deserialize_with = "entries")]
    pub mirrors: BTreeMap<String, Mirror>,
    /// Credentials and TLS settings by the `host:port` a request goes to.
    #[serde(default, deserialize_with = "entries")]
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
    /// Credentials, used when the pull brings none of its own (the kubelet's pull secrets).
    #[serde(default)]
    pub auth: Option<Auth>,
    /// How the host's certificate is checked, and the client certificate it is shown.
    #[serde(default)]
    pub tls: Option<Tls>,
}

/// Credentials for a registry, as k3s' `configs.<host>.auth` and the CRI's `AuthConfig` carry them: a
/// user name and password, `auth` (base64 of `user:password`), or an identity token. `Debug` shows the
/// user name only.
#[derive(Clone, Default, Deserialize, PartialEq)]
pub struct Auth {
    /// The user name.
    #[serde(default)]
    pub username: Option<String>,
    /// The password.
    #[serde(default)]
    pub password: Option<String>,
    /// base64 of `user:password`.
    #[serde(default)]
    pub auth: Option<String>,
    /// An identity (refresh) token, exchanged at the token server for access tokens.
    #[serde(default)]
    pub identity_token: Option<String>,
}

/// An `Auth`'s `auth` is not base64 of `user:password`.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum AuthError {
    /// Not base64.
    #[error("illegal base64 data in auth: {0}")]
    Base64(#[source] base64::DecodeError),
    /// No `:` in what it decodes to.
    #[error("invalid decoded auth: the value is not base64 of user:password")]
    NotAPair,
}

/// TLS settings of an endpoint host. Paths are read at every pull.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
pub struct Tls {
    /// A PEM file of CA certificates trusted besides the system's roots.
    #[serde(default)]
    pub ca_file: Option<PathBuf>,
    /// A PEM client certificate (chain) shown to the registry.
    #[serde(default)]
    pub cert_file: Option<PathBuf>,
    /// The client certificate's PEM private key; without it the key is read from `cert_file`.
    #[serde(default)]
    pub key_file: Option<PathBuf>,
    /// Accept any server certificate.
    #[serde(default)]
    pub insecure_skip_verify: bool,
}

/// A map whose entries may be empty (`"docker.io":` alone), as Go's YAML decoder allows.
fn entries<'de, D, T>(d: D) -> Result<BTreeMap<String, T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    let raw: Option<BTreeMap<String, Option<T>>> = Option::deserialize(d)?;
    Ok(raw
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k, v.unwrap_or_default()))
        .collect())
}

impl fmt::Debug for Auth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let hidden = |v: &Option<String>| v.as_ref().map(|_| "<hidden>");
        f.debug_struct("Auth")
            .field("username", &self.username)
            .field("password", &hidden(&self.password))
            .field("auth", &hidden(&self.auth))
            .field("identity_token", &hidden(&self.identity_token))
            .finish()
    }
}

impl Auth {
    /// Basic credentials.
    pub fn basic(username: &str, password: &str) -> Auth {
        Auth {
            username: Some(username.to_string()),
            password: Some(password.to_string()),
            ..Auth::default()
        }
    }

    /// The user name and secret a registry is asked with, as containerd's `ParseAuth` reads them: the
    /// user name and password when there is a user name, else the identity token with no user name, else
    /// `auth` decoded; nothing at all is anonymous.
    pub fn credentials(&self) -> Result<Credentials, AuthError> {
        use base64::Engine as _;
        fn some(v: &Option<String>) -> Option<&str> {
            v.as_deref().filter(|s| !s.is_empty())
        }
        if let Some(user) = some(&self.username) {
            return Ok(Credentials::new(
                user,
                self.password.as_deref().unwrap_or(""),
            ));
        }
        if let Some(token) = some(&self.identity_token) {
            return Ok(Credentials::new("", token));
        }
        let Some(encoded) = some(&self.auth) else {
            return Ok(Credentials::default());
        };
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(encoded)
            .map_err(AuthError::Base64)?;
        let text = String::from_utf8_lossy(&decoded);
        match text.split_once(':') {
            Some((user, pass)) => Ok(Credentials::new(user, pass.trim_matches('\0'))),
            None => Err(AuthError::NotAPair),
        }
    }
}

impl Registries {
    /// Parses `registries.yaml` text; an empty document means no mirrors and no configs.
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

    /// The settings of the host a request goes to (`host:port`), or those of `"*"`.
    pub fn host_config(&self, authority: &str) -> Option<&HostConfig> {
        self.configs
            .get(authority)
            .or_else(|| self.configs.get(WILDCARD))
    }

    /// The base URLs (ending in `/v2`, or the path written) to try for a registry host, in order: the
    /// host's mirror endpoints (or those of the `"*"` mirror), then the registry itself (`https://<host>`,
    /// plain HTTP for `localhost` and loopback addresses, `registry-1.docker.io` for `docker.io`).
    pub fn endpoints(&self, host: &str) -> Vec<String> {
        let mirror = self
            .mirrors
            .get(host)
            .or_else(|| self.mirrors.get(WILDCARD));
        let mut out: Vec<String> = mirror
            .map(|m| m.endpoint.iter().map(|e| with_v2(e)).collect())
            .unwrap_or_default();
        let default = default_endpoint(host);
        if !out.contains(&default) {
            out.push(default);
        }
        out
    }

    /// The credentials a pull from `host` without credentials of its own uses at an endpoint host: the
    /// `auth` of the endpoint's config, the first found over the registry's endpoints and then `extra`
    /// (an engine's name for the registry), exact entries before `"*"`.
    pub fn auth_for_registry(&self, host: &str, extra: &str) -> Option<&Auth> {
        let mut hosts: Vec<String> = self
            .endpoints(host)
            .iter()
            .filter_map(|e| split_url(e).map(|(_, authority, _)| authority.to_string()))
            .collect();
        hosts.push(extra.to_string());
        hosts
            .iter()
            .find_map(|h| self.configs.get(h.as_str())?.auth.as_ref())
            .or_else(|| self.configs.get(WILDCARD)?.auth.as_ref())
    }
}

/// The registry's own endpoint.
fn default_endpoint(host: &str) -> String {
    if host == DEFAULT_DOMAIN {
        "https://registry-1.docker.io/v2".to_string()
    } else if is_loopback(host) {
        format!("http://{host}/v2")
    } else {
        format!("https://{host}/v2")
    }
}

/// Whether the host (with an optional port) is `localhost` or a loopback address.
pub fn is_loopback(host: &str) -> bool {
    let name = host_name(host);
    name == "localhost"
        || name
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// The host of a `host[:port]` authority, without brackets around an IPv6 address.
pub(super) fn host_name(authority: &str) -> &str {
    let name = match authority.rsplit_once(':') {
        Some((h, p)) if p.chars().all(|c| c.is_ascii_digit()) && !h.is_empty() => {
            if h.contains(':') && !h.ends_with(']') {
                authority
            } else {
                h
            }
        }
        _ => authority,
    };
    name.trim_start_matches('[').trim_end_matches(']')
}

/// The port of a `host:port` authority, if written.
pub(super) fn port(authority: &str) -> Option<&str> {
    let (h, p) = authority.rsplit_once(':')?;
    (!p.is_empty()
        && p.chars().all(|c| c.is_ascii_digit())
        && (!h.contains(':') || h.ends_with(']')))
    .then_some(p)
}

/// An endpoint URL as a base ending in `/v2`: an empty path gets `/v2`, any other path is kept.
pub(super) fn with_v2(endpoint: &str) -> String {
    let e = endpoint.trim_end_matches('/');
    match split_url(e) {
        Some((_, _, path)) if path != "/" && !path.is_empty() => e.to_string(),
        _ => format!("{e}/v2"),
    }
}

/// `(scheme, authority, path-and-query)` of an absolute URL.
pub(super) fn split_url(url: &str) -> Option<(&str, &str, &str)> {
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
        assert_eq!(Registries::from_yaml("").unwrap(), Registries::default());
    }

    #[test]
    fn endpoint_paths_are_kept() {
        assert_eq!(with_v2("http://m:5000"), "http://m:5000/v2");
        assert_eq!(with_v2("http://m:5000/v2"), "http://m:5000/v2");
        assert_eq!(with_v2("http://m/some/path"), "http://m/some/path");
    }

    #[test]
    fn configs_carry_auth_and_tls_and_fall_back_to_the_wildcard() {
        let r = Registries::from_yaml(
            r#"
mirrors:
  "registry.test:5000":
    endpoint: ["https://127.0.0.1:41234"]
configs:
  "127.0.0.1:41234":
    auth: {username: u, password: p}
    tls:
      ca_file: /etc/ca.pem
      cert_file: /etc/client.pem
      key_file: /etc/client-key.pem
  "docker.io":
  "*":
    tls: {insecure_skip_verify: true}
"#,
        )
        .unwrap();
        let own = r.host_config("127.0.0.1:41234").unwrap();
        assert_eq!(own.auth, Some(Auth::basic("u", "p")));
        let tls = own.tls.as_ref().unwrap();
        assert_eq!(tls.ca_file.as_deref(), Some(Path::new("/etc/ca.pem")));
        assert_eq!(
            tls.key_file.as_deref(),
            Some(Path::new("/etc/client-key.pem"))
        );
        assert!(!tls.insecure_skip_verify);
        assert_eq!(r.host_config("docker.io"), Some(&HostConfig::default()));
        assert!(
            r.host_config("elsewhere:5000")
                .unwrap()
                .tls
                .as_ref()
                .unwrap()
                .insecure_skip_verify
        );
        assert_eq!(
            r.auth_for_registry("registry.test:5000", "localhost:1"),
            Some(&Auth::basic("u", "p"))
        );
        assert_eq!(r.auth_for_registry("other:5000", "localhost:1"), None);
    }

    #[test]
    fn credentials_are_read_as_containerd_reads_an_auth_config() {
        let yaml = |auth: &str| -> Auth { serde_yaml::from_str(auth).unwrap() };
        assert_eq!(
            yaml("{username: u, password: p}").credentials().unwrap(),
            Credentials::new("u", "p")
        );
        // base64 of `ci:s3:cret`: the password may hold colons.
        assert_eq!(
            yaml("{auth: Y2k6czM6Y3JldA==}").credentials().unwrap(),
            Credentials::new("ci", "s3:cret")
        );
        assert_eq!(
            yaml("{identity_token: refresh}").credentials().unwrap(),
            Credentials::new("", "refresh")
        );
        assert_eq!(yaml("{}").credentials().unwrap(), Credentials::default());
        assert!(yaml("{auth: bm9jb2xvbg==}").credentials().is_err());
    }

    #[test]
    fn debug_never_shows_a_secret() {
        let auth = Auth {
            username: Some("deploy".into()),
            password: Some("hunter2".into()),
            auth: Some("ZGVwbG95Omh1bnRlcjI=".into()),
            identity_token: Some("refresh-token".into()),
        };
        let shown = format!("{auth:?} {:?}", auth.credentials().unwrap());
        assert!(shown.contains("deploy"), "{shown}");
        for secret in ["hunter2", "ZGVwbG95Omh1bnRlcjI=", "refresh-token"] {
            assert!(!shown.contains(secret), "{shown}");
        }
    }

    #[test]
    fn hosts_and_ports_of_authorities() {
        assert!(is_loopback("localhost:5000"));
        assert!(is_loopback("127.0.0.2:5000"));
        assert!(is_loopback("[::1]:5000"));
        assert!(!is_loopback("registry.test:5000"));
        assert_eq!(host_name("[::1]:5000"), "::1");
        assert_eq!(host_name("registry.test"), "registry.test");
        assert_eq!(port("registry.test:5000"), Some("5000"));
        assert_eq!(port("registry.test"), None);
        assert_eq!(port("[::1]"), None);
    }
}
