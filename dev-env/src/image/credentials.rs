//! Registry credentials where `docker login` and every registry tool keep
//! them: `$DOCKER_CONFIG/config.json` (default `~/.docker/config.json`),
//! its `auths` (a base64 `auth`, or `username` and `password`, or an
//! `identitytoken`), and the credential helpers it names (`credHelpers` per
//! registry, else `credsStore`), run as `docker-credential-<helper> get`
//! with the server address on stdin.
//!
//! A secret never reaches a message: [`Credential`]'s `Debug` shows the
//! user name and where the secret came from, and errors name only the file
//! or the helper.

use std::{
    collections::BTreeMap,
    fmt,
    path::{Path, PathBuf},
};

use base64::Engine;
use serde::Deserialize;
use xshell::{Shell, cmd};

/// The user name credential helpers give for an identity token.
const TOKEN_USER: &str = "<token>";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot read the Docker client configuration {}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "the Docker client configuration {} is not valid JSON; fix it, or log in again with `docker login`",
        path.display()
    )]
    Parse {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error(
        "the `auth` of `{server}` in {} is not base64 of `user:password`; log in again with `docker login {server}`",
        path.display()
    )]
    Auth { server: String, path: PathBuf },
    #[error(
        "cannot run the credential helper `docker-credential-{helper}` for `{server}` (named by {}); is it installed and on PATH?",
        path.display()
    )]
    Helper {
        helper: String,
        server: String,
        path: PathBuf,
        #[source]
        source: xshell::Error,
    },
    #[error(
        "the credential helper `docker-credential-{helper}` failed for `{server}` ({status}): {said}; `docker login {server}` stores fresh credentials"
    )]
    HelperFailed {
        helper: String,
        server: String,
        status: String,
        said: String,
    },
    #[error(
        "the credential helper `docker-credential-{helper}` answered for `{server}` with something other than its JSON (`ServerURL`, `Username`, `Secret`)"
    )]
    HelperAnswer {
        helper: String,
        server: String,
        #[source]
        source: serde_json::Error,
    },
}

/// Credentials for one registry.
#[derive(Clone, PartialEq, Eq)]
pub struct Credential {
    pub username: String,
    /// The password, or an identity token (then `username` may be empty).
    pub secret: String,
    /// Where they came from, for messages: `auths in <file>` or the helper.
    pub source: String,
}

impl fmt::Debug for Credential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credential")
            .field("username", &self.username)
            .field("secret", &"<redacted>")
            .field("source", &self.source)
            .finish()
    }
}

/// The Docker client configuration in use: `$DOCKER_CONFIG/config.json`,
/// else `~/.docker/config.json`.
pub fn config_path() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("DOCKER_CONFIG") {
        return Some(PathBuf::from(dir).join("config.json"));
    }
    std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".docker/config.json"))
}

/// The credentials stored for registry `host` (`ghcr.io`,
/// `registry.lan:5000`), if any.
pub fn lookup(host: &str) -> Result<Option<Credential>, Error> {
    let Some(path) = config_path() else {
        return Ok(None);
    };
    lookup_in(&path, host)
}

/// [`lookup`] in the configuration file at `path`; a missing file holds no
/// credentials.
pub fn lookup_in(path: &Path, host: &str) -> Result<Option<Credential>, Error> {
    let text = match std::fs::read(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(Error::Read {
                path: path.to_path_buf(),
                source,
            });
        }
    };
    let file: ConfigFile = serde_json::from_slice(&text).map_err(|source| Error::Parse {
        path: path.to_path_buf(),
        source,
    })?;
    let helper = file.cred_helpers.get(host).or(file.creds_store.as_ref());
    if let Some(helper) = helper.filter(|h| !h.is_empty()) {
        return from_helper(path, helper, host);
    }
    let Some((server, entry)) = file.auths.iter().find(|(key, _)| server_host(key) == host) else {
        return Ok(None);
    };
    from_entry(path, server, entry).map(Some)
}

/// `config.json`, without `Debug`: it holds secrets.
#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ConfigFile {
    #[serde(default)]
    auths: BTreeMap<String, AuthEntry>,
    creds_store: Option<String>,
    #[serde(default)]
    cred_helpers: BTreeMap<String, String>,
}

#[derive(Default, Deserialize)]
struct AuthEntry {
    auth: Option<String>,
    username: Option<String>,
    password: Option<String>,
    identitytoken: Option<String>,
}

/// What a credential helper answers to `get`.
#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct HelperAnswer {
    username: String,
    secret: String,
}

/// The registry host of an `auths` key: keys may be bare hosts or URLs
/// (`https://index.docker.io/v1/`), as older clients wrote them.
fn server_host(key: &str) -> &str {
    let rest = key
        .strip_prefix("https://")
        .or_else(|| key.strip_prefix("http://"))
        .unwrap_or(key);
    let host = rest.split('/').next().unwrap_or(rest);
    match host {
        "index.docker.io" | "registry-1.docker.io" => "docker.io",
        other => other,
    }
}

fn from_entry(path: &Path, server: &str, entry: &AuthEntry) -> Result<Credential, Error> {
    let source = format!("`auths` in {}", path.display());
    if let Some(token) = entry.identitytoken.as_ref().filter(|t| !t.is_empty()) {
        return Ok(Credential {
            username: entry.username.clone().unwrap_or_default(),
            secret: token.clone(),
            source,
        });
    }
    if let Some(auth) = entry.auth.as_ref().filter(|a| !a.is_empty()) {
        let bad = || Error::Auth {
            server: server_host(server).to_string(),
            path: path.to_path_buf(),
        };
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(auth.trim())
            .map_err(|_| bad())?;
        let decoded = String::from_utf8(decoded).map_err(|_| bad())?;
        let (username, secret) = decoded.split_once(':').ok_or_else(bad)?;
        return Ok(Credential {
            username: username.to_string(),
            secret: secret.to_string(),
            source,
        });
    }
    Ok(Credential {
        username: entry.username.clone().unwrap_or_default(),
        secret: entry.password.clone().unwrap_or_default(),
        source,
    })
}

/// Runs `docker-credential-<helper> get` with `host` on stdin. A helper
/// that has nothing for the host says so on its output and exits non-zero:
/// no credentials, not an error.
fn from_helper(path: &Path, helper: &str, host: &str) -> Result<Option<Credential>, Error> {
    let failed = |source| Error::Helper {
        helper: helper.to_string(),
        server: host.to_string(),
        path: path.to_path_buf(),
        source,
    };
    let sh = Shell::new().map_err(failed)?;
    let program = format!("docker-credential-{helper}");
    let output = cmd!(sh, "{program} get")
        .quiet()
        .ignore_status()
        .stdin(host)
        .output()
        .map_err(failed)?;
    if !output.status.success() {
        let said = String::from_utf8_lossy(&output.stdout);
        if said.to_ascii_lowercase().contains("credentials not found") {
            return Ok(None);
        }
        let stderr = String::from_utf8_lossy(&output.stderr);
        return Err(Error::HelperFailed {
            helper: helper.to_string(),
            server: host.to_string(),
            status: output.status.to_string(),
            said: format!("{} {}", said.trim(), stderr.trim())
                .trim()
                .to_string(),
        });
    }
    let answer: HelperAnswer =
        serde_json::from_slice(&output.stdout).map_err(|source| Error::HelperAnswer {
            helper: helper.to_string(),
            server: host.to_string(),
            source,
        })?;
    let username = match answer.username.as_str() {
        TOKEN_USER => String::new(),
        _ => answer.username,
    };
    Ok(Some(Credential {
        username,
        secret: answer.secret,
        source: format!("the credential helper `{program}`"),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(text: &str) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("config.json"), text).unwrap();
        dir
    }

    #[test]
    fn auths_give_base64_user_password_or_plain_fields() {
        let encoded = base64::engine::general_purpose::STANDARD.encode("ci:s3cret");
        let dir = config(&format!(
            r#"{{"auths": {{
                "reg.lan:5000": {{"auth": "{encoded}"}},
                "https://index.docker.io/v1/": {{"username": "me", "password": "pw"}},
                "ghcr.io": {{"identitytoken": "tok"}}
            }}}}"#
        ));
        let path = dir.path().join("config.json");
        let found = lookup_in(&path, "reg.lan:5000").unwrap().unwrap();
        assert_eq!(
            (found.username.as_str(), found.secret.as_str()),
            ("ci", "s3cret")
        );
        let hub = lookup_in(&path, "docker.io").unwrap().unwrap();
        assert_eq!((hub.username.as_str(), hub.secret.as_str()), ("me", "pw"));
        let token = lookup_in(&path, "ghcr.io").unwrap().unwrap();
        assert_eq!(token.secret, "tok");
        assert_eq!(lookup_in(&path, "elsewhere:5000").unwrap(), None);
    }

    #[test]
    fn a_missing_file_holds_nothing_and_a_broken_one_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.json");
        assert_eq!(lookup_in(&path, "reg.lan").unwrap(), None);
        std::fs::write(&path, "{").unwrap();
        let err = lookup_in(&path, "reg.lan").unwrap_err().to_string();
        assert!(err.contains(&path.display().to_string()), "{err}");
        let dir = config(r#"{"auths": {"reg.lan": {"auth": "not base64!"}}}"#);
        let err = lookup_in(&dir.path().join("config.json"), "reg.lan")
            .unwrap_err()
            .to_string();
        assert!(err.contains("docker login reg.lan"), "{err}");
    }

    #[test]
    fn debug_never_shows_the_secret() {
        let credential = Credential {
            username: String::from("ci"),
            secret: String::from("hunter2"),
            source: String::from("test"),
        };
        let shown = format!("{credential:?}");
        assert!(
            !shown.contains("hunter2") && shown.contains("ci"),
            "{shown}"
        );
    }

    #[test]
    fn a_missing_helper_is_an_error_that_names_it() {
        let dir = config(r#"{"credHelpers": {"reg.lan": "dev-env-test-absent"}}"#);
        let err = lookup_in(&dir.path().join("config.json"), "reg.lan").unwrap_err();
        let text = crate::error_chain(&err);
        assert!(
            text.contains("docker-credential-dev-env-test-absent") && text.contains("reg.lan"),
            "{text}"
        );
    }
}
