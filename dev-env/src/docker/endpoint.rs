//! Which engine to talk to, found as the Docker CLI finds it: `DOCKER_HOST`,
//! then `DOCKER_CONTEXT`, then the current context of
//! `$DOCKER_CONFIG/config.json`, then the default socket; when none of
//! those was chosen and the default socket is absent, the sockets that
//! Docker Desktop, rootless Docker, colima, OrbStack, Rancher Desktop and
//! Podman create for their user.
//!
//! Resolution reads only the environment it is given and the files under
//! the Docker configuration directory: [`resolve`] is a pure function of
//! them, tested on context files written as the CLI writes them.

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

/// The engine's address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    /// A unix socket on this machine.
    Unix(PathBuf),
    /// A TCP address (`host:port`), in the clear or over TLS.
    Tcp { address: String, tls: Option<Tls> },
}

/// The client's TLS material for a TCP engine: the CA that signed the
/// engine's certificate and the client's own certificate and key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tls {
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// Where the endpoint came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// `DOCKER_HOST`.
    DockerHost,
    /// A Docker context, named by `DOCKER_CONTEXT` or by `currentContext`.
    Context { name: String, chosen_by: ChosenBy },
    /// The default socket, `/var/run/docker.sock`.
    Default,
    /// A socket an engine creates for its user (`what` names the engine).
    Known { what: &'static str },
}

/// What named the context.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChosenBy {
    Environment,
    Config,
}

/// An endpoint and where it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    pub endpoint: Endpoint,
    pub source: Source,
}

/// Where an engine may be found, in order; the first that answers is the
/// one. Only the last may be a fallback list: an explicit choice
/// (`DOCKER_HOST`, a context) is never replaced by another engine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidates {
    pub explicit: Option<Resolved>,
    pub fallbacks: Vec<Resolved>,
}

/// The default socket of a rootful engine.
pub const DEFAULT_SOCKET: &str = "/var/run/docker.sock";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(
        "`DOCKER_HOST={host}` is an ssh:// endpoint, which dev-env does not speak; forward the engine's socket (`ssh -nNT -L /tmp/docker.sock:/var/run/docker.sock {rest}`) and set `DOCKER_HOST=unix:///tmp/docker.sock`",
        rest = host.trim_start_matches("ssh://")
    )]
    Ssh { host: String },
    #[error(
        "{what} `{host}` is not an engine address dev-env can use; give `unix:///path/to/docker.sock` or `tcp://host:port`"
    )]
    Unsupported { what: String, host: String },
    #[error(
        "{what} asks for TLS without verifying the engine's certificate; set `DOCKER_TLS_VERIFY=1` with the engine's CA in `DOCKER_CERT_PATH`, or use the engine's unix socket"
    )]
    Unverified { what: String },
    #[error(
        "Docker context `{name}` ({by}) does not exist: no {}; `docker context ls` lists the contexts, `docker context use default` goes back to the default engine",
        meta.display()
    )]
    NoContext {
        name: String,
        by: &'static str,
        meta: PathBuf,
    },
    #[error("cannot read Docker context `{name}` in {}", path.display())]
    ContextFile {
        name: String,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("Docker context `{name}`: {} is not a context file: {reason}", path.display())]
    ContextFormat {
        name: String,
        path: PathBuf,
        reason: String,
    },
    #[error("cannot read {}", path.display())]
    Config {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{} is not valid JSON: {reason}", path.display())]
    ConfigFormat { path: PathBuf, reason: String },
}

/// What resolution reads: environment variables and the user's home.
pub struct Lookup<'a> {
    pub var: &'a (dyn Fn(&str) -> Option<String> + Sync),
    pub home: Option<PathBuf>,
}

impl Lookup<'_> {
    fn get(&self, key: &str) -> Option<String> {
        (self.var)(key).filter(|v| !v.is_empty())
    }

    /// `$DOCKER_CONFIG`, or `~/.docker`.
    pub fn config_dir(&self) -> Option<PathBuf> {
        self.get("DOCKER_CONFIG")
            .map(PathBuf::from)
            .or_else(|| self.home.as_ref().map(|h| h.join(".docker")))
    }
}

/// Where to look for the engine, as the Docker CLI would, then the
/// per-user sockets when nothing was chosen.
pub fn resolve(lookup: &Lookup<'_>) -> Result<Candidates, Error> {
    if let Some(host) = lookup.get("DOCKER_HOST") {
        let endpoint = from_docker_host(lookup, &host)?;
        return Ok(explicit(endpoint, Source::DockerHost));
    }
    let named = match lookup.get("DOCKER_CONTEXT") {
        Some(name) => Some((name, ChosenBy::Environment)),
        None => current_context(lookup)?.map(|name| (name, ChosenBy::Config)),
    };
    if let Some((name, chosen_by)) = named.filter(|(name, _)| name != "default") {
        let endpoint = context_endpoint(lookup, &name, chosen_by)?;
        return Ok(explicit(endpoint, Source::Context { name, chosen_by }));
    }
    let mut fallbacks = vec![Resolved {
        endpoint: Endpoint::Unix(PathBuf::from(DEFAULT_SOCKET)),
        source: Source::Default,
    }];
    fallbacks.extend(known_sockets(lookup));
    Ok(Candidates {
        explicit: None,
        fallbacks,
    })
}

fn explicit(endpoint: Endpoint, source: Source) -> Candidates {
    Candidates {
        explicit: Some(Resolved { endpoint, source }),
        fallbacks: Vec::new(),
    }
}

/// `DOCKER_HOST`, with `DOCKER_TLS_VERIFY` and `DOCKER_CERT_PATH` for TCP.
fn from_docker_host(lookup: &Lookup<'_>, host: &str) -> Result<Endpoint, Error> {
    let what = format!("DOCKER_HOST={host}");
    let verify = lookup.get("DOCKER_TLS_VERIFY").is_some_and(|v| v != "0");
    if !verify && lookup.get("DOCKER_TLS").is_some_and(|v| v != "0") {
        return Err(Error::Unverified { what });
    }
    let cert_dir = lookup
        .get("DOCKER_CERT_PATH")
        .map(PathBuf::from)
        .or_else(|| lookup.config_dir());
    let tls = verify.then(|| cert_dir.map(|dir| tls_in(&dir))).flatten();
    parse_host("`DOCKER_HOST`", host, tls)
}

/// An engine address: `unix://`, `tcp://`, `http://` or `https://`.
fn parse_host(what: &str, host: &str, tls: Option<Tls>) -> Result<Endpoint, Error> {
    if let Some(path) = host.strip_prefix("unix://") {
        return Ok(Endpoint::Unix(PathBuf::from(path)));
    }
    if host.starts_with("ssh://") {
        return Err(Error::Ssh {
            host: host.to_string(),
        });
    }
    let address = ["tcp://", "http://", "https://"]
        .iter()
        .find_map(|scheme| host.strip_prefix(scheme))
        .map(|rest| rest.trim_end_matches('/'))
        .filter(|rest| !rest.is_empty() && !rest.contains('/'));
    match address {
        Some(address) => {
            let address = if address.contains(':') {
                address.to_string()
            } else {
                // The CLI's default ports: 2376 with TLS, 2375 without.
                format!("{address}:{}", if tls.is_some() { 2376 } else { 2375 })
            };
            Ok(Endpoint::Tcp { address, tls })
        }
        None => Err(Error::Unsupported {
            what: what.to_string(),
            host: host.to_string(),
        }),
    }
}

fn tls_in(dir: &Path) -> Tls {
    Tls {
        ca: dir.join("ca.pem"),
        cert: dir.join("cert.pem"),
        key: dir.join("key.pem"),
    }
}

/// `currentContext` of `config.json`, when the file names one.
fn current_context(lookup: &Lookup<'_>) -> Result<Option<String>, Error> {
    let Some(dir) = lookup.config_dir() else {
        return Ok(None);
    };
    let path = dir.join("config.json");
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(Error::Config { path, source }),
    };
    let value: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| Error::ConfigFormat {
            path: path.clone(),
            reason: e.to_string(),
        })?;
    Ok(value
        .get("currentContext")
        .and_then(|c| c.as_str())
        .filter(|c| !c.is_empty())
        .map(str::to_string))
}

/// The directory name of a context's files: the hex SHA-256 of its name.
pub fn context_id(name: &str) -> String {
    hex::encode(Sha256::digest(name.as_bytes()))
}

/// The engine endpoint of context `name`:
/// `contexts/meta/<id>/meta.json`'s `Endpoints.docker`, with the TLS
/// material of `contexts/tls/<id>/docker/` when it has any.
fn context_endpoint(
    lookup: &Lookup<'_>,
    name: &str,
    chosen_by: ChosenBy,
) -> Result<Endpoint, Error> {
    let by = match chosen_by {
        ChosenBy::Environment => "named by DOCKER_CONTEXT",
        ChosenBy::Config => "the current context of config.json",
    };
    let dir = lookup.config_dir().unwrap_or_default();
    let id = context_id(name);
    let meta = dir.join("contexts/meta").join(&id).join("meta.json");
    let text = match std::fs::read_to_string(&meta) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(Error::NoContext {
                name: name.to_string(),
                by,
                meta,
            });
        }
        Err(source) => {
            return Err(Error::ContextFile {
                name: name.to_string(),
                path: meta,
                source,
            });
        }
    };
    let format = |reason: String| Error::ContextFormat {
        name: name.to_string(),
        path: meta.clone(),
        reason,
    };
    let value: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| format(e.to_string()))?;
    let docker = value
        .pointer("/Endpoints/docker")
        .ok_or_else(|| format(String::from("it has no `Endpoints.docker`")))?;
    let host = docker
        .get("Host")
        .and_then(|h| h.as_str())
        .ok_or_else(|| format(String::from("`Endpoints.docker.Host` is missing")))?;
    let tls_dir = dir.join("contexts/tls").join(&id).join("docker");
    let has_tls = tls_dir.join("ca.pem").is_file();
    let skip_verify = docker.get("SkipTLSVerify").and_then(|s| s.as_bool()) == Some(true);
    let what = format!("Docker context `{name}`");
    if skip_verify && !host.starts_with("unix://") {
        return Err(Error::Unverified { what });
    }
    parse_host(&what, host, has_tls.then(|| tls_in(&tls_dir)))
}

/// The sockets engines create for their user, where nothing was chosen:
/// rootless Docker, Docker Desktop (macOS, Linux), colima, OrbStack,
/// Rancher Desktop and Podman, in that order.
fn known_sockets(lookup: &Lookup<'_>) -> Vec<Resolved> {
    let mut found = Vec::new();
    let runtime = lookup.get("XDG_RUNTIME_DIR").map(PathBuf::from);
    let mut add = |path: PathBuf, what: &'static str| {
        found.push(Resolved {
            endpoint: Endpoint::Unix(path),
            source: Source::Known { what },
        });
    };
    if let Some(runtime) = &runtime {
        add(runtime.join("docker.sock"), "rootless Docker");
    }
    if let Some(home) = &lookup.home {
        add(home.join(".docker/run/docker.sock"), "Docker Desktop");
        add(home.join(".docker/desktop/docker.sock"), "Docker Desktop");
        add(home.join(".colima/default/docker.sock"), "colima");
        add(home.join(".orbstack/run/docker.sock"), "OrbStack");
        add(home.join(".rd/docker.sock"), "Rancher Desktop");
    }
    if let Some(runtime) = &runtime {
        add(runtime.join("podman/podman.sock"), "Podman");
    }
    found
}

impl std::fmt::Display for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Endpoint::Unix(path) => write!(f, "unix://{}", path.display()),
            Endpoint::Tcp { address, tls: None } => write!(f, "tcp://{address}"),
            Endpoint::Tcp { address, .. } => write!(f, "tcp://{address} (TLS)"),
        }
    }
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::DockerHost => f.write_str("DOCKER_HOST"),
            Source::Context {
                name,
                chosen_by: ChosenBy::Environment,
            } => write!(f, "context `{name}` (DOCKER_CONTEXT)"),
            Source::Context { name, .. } => write!(f, "context `{name}`"),
            Source::Default => f.write_str("the default socket"),
            Source::Known { what } => write!(f, "{what}'s socket"),
        }
    }
}

#[cfg(test)]
mod tests;
