//! `dev-env.yaml`: the declared environment.
//!
//! The file is read in passes. Duplicate keys are found on the YAML events
//! (`locate`); serde_yaml turns the text into the `Raw*` structs (`raw`:
//! unknown keys and wrong types fail there, with serde_yaml's own position);
//! `Check::resolve` (`check`, `validate`) checks what types cannot say
//! (names, subnets, paths, combinations) and fills every default; last,
//! `cargo metadata` confirms the packages and binaries that builds name
//! (`workspace`). Every problem names `file:line:col`, the key, and the
//! fix; all problems of a file are reported together.
//!
//! [`Purpose::Identity`] reads only what names the environment's objects,
//! so that teardown works whatever became of the build inputs.

mod check;
mod forward;
pub(crate) mod locate;
mod raw;
mod sim;
mod validate;
mod workspace;

use std::{
    collections::BTreeMap,
    fmt,
    path::{Path, PathBuf},
};

use ipnet::{Ipv4Net, Ipv6Net};
use serde::Deserialize;

use check::Check;
use raw::{RawConfig, serde_problem};

pub use forward::PortForward;
pub use locate::Location;
use locate::Locations;
pub(crate) use sim::sim_source;
pub use validate::is_dns_label;
pub use workspace::workspace_root;
pub(crate) use workspace::{Listing, Metadata, Unreadable, metadata};

/// The file looked for at the repository root when `--config` is not given.
pub const DEFAULT_CONFIG_FILE: &str = "dev-env.yaml";
/// The CNCF distribution registry, as k3d and kind use it.
pub const DEFAULT_REGISTRY_IMAGE: &str = "docker.io/library/registry:2";
/// The k3s node image of `provider: k3s`.
pub const DEFAULT_K3S_IMAGE: &str = "docker.io/rancher/k3s:v1.34.1-k3s1";
/// The locally built kube-sim node image of `provider: sim`.
pub const DEFAULT_SIM_IMAGE: &str = "dev-env/kube-sim:dev";
/// The shared bridge's IPv4 subnet when none is declared.
pub const DEFAULT_IPV4_SUBNET: &str = "192.168.231.0/24";
/// k3s's default pod network (`--cluster-cidr`).
pub const DEFAULT_POD_SUBNET: &str = "10.42.0.0/16";
/// The k3s components a development node does without, unless
/// `cluster.disable` says otherwise.
pub const DEFAULT_K3S_DISABLE: &[&str] = &["traefik", "servicelb", "metrics-server"];
/// What k3s's `--disable` accepts.
pub const K3S_COMPONENTS: &[&str] = &[
    "coredns",
    "servicelb",
    "traefik",
    "local-storage",
    "metrics-server",
    "runtimes",
];
/// How long a pod may take to start before a wait gives up on it.
pub const DEFAULT_POD_START_GRACE: std::time::Duration = std::time::Duration::from_secs(60);
/// k3s's default service network (`--service-cidr`).
pub const DEFAULT_SERVICE_SUBNET: &str = "10.43.0.0/16";
/// The port the registry listens on inside the network.
pub const REGISTRY_CONTAINER_PORT: u16 = 5000;

/// The validated environment, with every default filled in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// Absolute path of the file this was read from.
    pub file: PathBuf,
    /// The directory of that file: relative paths start here and the state
    /// directory lives here.
    pub root: PathBuf,
    /// Prefix of every Docker object, and the value of the `dev-env.name` label.
    pub name: String,
    pub network: Network,
    pub registry: Registry,
    pub cluster: Cluster,
    /// Absolute paths of manifest files or directories, in declared order.
    pub manifests: Vec<PathBuf>,
    pub components: BTreeMap<String, Component>,
    /// Where each key sits in the file, for checks made after loading.
    locations: Locations,
}

/// What the file is read for, and so how much of it must hold.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Purpose {
    /// Everything: names, subnets, paths, builds and the cargo workspace.
    /// For the commands that create, build or apply.
    #[default]
    Full,
    /// Only what names the environment's objects (name, network, registry
    /// container and volume, cluster provider and context): `dev down` and
    /// `dev reset` work when manifests, Dockerfiles or packages are gone.
    /// Components and manifests are resolved as written, unchecked.
    Identity,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Network {
    pub name: String,
    pub ipv4_subnet: Ipv4Net,
    /// Set for a dual-stack network.
    pub ipv6_subnet: Option<Ipv6Net>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Registry {
    /// Container name, and the registry's host name on the network.
    pub name: String,
    pub image: String,
    /// Host port on 127.0.0.1; 0 means pick a free one once and keep it.
    pub host_port: u16,
    /// Named volume on `/var/lib/registry`.
    pub volume: String,
    /// `host:port` of an existing registry to use instead of creating one.
    pub external: Option<String>,
    /// The `host:port` pods pull from.
    pub cluster_host: String,
    /// A PEM CA certificate that signed the external registry's
    /// certificate, trusted besides the system's roots.
    pub ca_file: Option<std::path::PathBuf>,
    /// Plain HTTP to the external registry, whatever its host.
    pub insecure: bool,
    /// Give the cluster the credentials `docker login` stored for the
    /// external registry: a `kubernetes.io/dockerconfigjson` Secret in every
    /// namespace a component runs in, named in that namespace's `default`
    /// ServiceAccount's `imagePullSecrets`.
    pub pull_secret: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Provider {
    /// A k3s node container (the product default).
    K3s,
    /// A kube-sim node container: an offline control plane.
    Sim,
    /// A cluster from the user's kubeconfig; no node is created.
    Existing,
}

impl fmt::Display for Provider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Provider::K3s => "k3s",
            Provider::Sim => "sim",
            Provider::Existing => "existing",
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cluster {
    pub provider: Provider,
    /// The node image; empty for `provider: existing`.
    pub image: String,
    /// The kubeconfig context; set only for `provider: existing`.
    pub context: Option<String>,
    pub pod_subnet: Ipv4Net,
    pub service_subnet: Ipv4Net,
    /// k3s components the node does not start (`--disable`); empty for
    /// other providers.
    pub disable: Vec<String>,
    /// How long a new pod may stay `Pending` or `ContainerCreating` before
    /// a rollout wait fails with its events.
    pub pod_start_grace: std::time::Duration,
    /// `provider: sim`: the directory whose `kube-sim/` holds the package
    /// the node image is built from, wherever cargo has it (a workspace
    /// member, a path or git dependency); set by a [`Purpose::Full`] load.
    pub sim_source: Option<PathBuf>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Component {
    /// Repository path in the registry, such as `demo/worker`.
    pub image: String,
    pub build: Build,
    pub rollout: Rollout,
    /// Ports forwarded from 127.0.0.1 to the component's pods.
    pub forward: Vec<PortForward>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Build {
    /// `cargo build` of a static binary, packed into an image without a daemon.
    Cargo(CargoBinary),
    /// A Dockerfile build through the engine.
    Docker {
        /// Absolute path of the build context.
        context: PathBuf,
        /// Absolute path of the Dockerfile.
        dockerfile: PathBuf,
        target: Option<String>,
        build_args: BTreeMap<String, String>,
        /// A static binary built first and added to the context root under
        /// its name, for Dockerfiles that copy a prebuilt binary.
        cargo: Option<CargoBinary>,
    },
}

/// A workspace package's binary, and how it is built.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CargoBinary {
    pub package: String,
    pub bin: String,
    /// The cargo profile (`build.cargo.profile`): `dev` unless declared,
    /// as `cargo run` builds, incremental.
    pub profile: String,
    /// The Rust target triple (`build.cargo.target`); `None`: the one the
    /// cluster's platform calls for.
    pub target: Option<String>,
}

/// The profile a cargo build uses unless `build.cargo.profile` says.
pub const DEFAULT_PROFILE: &str = "dev";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub enum RolloutKind {
    Deployment,
    WorkerPool,
}

impl fmt::Display for RolloutKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RolloutKind::Deployment => "Deployment",
            RolloutKind::WorkerPool => "WorkerPool",
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rollout {
    pub kind: RolloutKind,
    pub namespace: String,
    pub name: String,
    /// The container whose image is the component's.
    pub container: String,
    /// Rollout waits hold until old pods are gone, not only terminating
    /// (`rollout.waitForTermination`).
    pub wait_for_termination: bool,
}

/// One thing wrong with the file, where it is, and how to fix it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub location: Location,
    /// Dotted path of the offending key (`components.worker.build`).
    pub key: String,
    pub message: String,
    pub fix: String,
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(
        "cannot read {}; create it (see README.md) or point `--config`/`DEV_ENV_CONFIG` at yours",
        path.display()
    )]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}", render_problems(path, problems))]
    Invalid {
        path: PathBuf,
        problems: Vec<Problem>,
    },
    #[error(
        "unknown component `{name}`; {} declares: {}",
        path.display(),
        if known.is_empty() { String::from("none (add one under `components:`)") } else { known.join(", ") }
    )]
    UnknownComponent {
        path: PathBuf,
        name: String,
        known: Vec<String>,
    },
}

fn render_problems(path: &Path, problems: &[Problem]) -> String {
    let mut out = String::new();
    if problems.len() > 1 {
        out.push_str(&format!(
            "{} has {} problems:\n",
            path.display(),
            problems.len()
        ));
    }
    for (i, p) in problems.iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        out.push_str(&format!(
            "{}:{}:{}: `{}`: {}; {}",
            path.display(),
            p.location.line,
            p.location.column,
            p.key,
            p.message,
            p.fix
        ));
    }
    out
}

impl Config {
    /// Reads, checks and resolves the file at `path` for every command.
    pub fn load(path: &Path) -> Result<Config, Error> {
        Config::load_for(path, Purpose::Full)
    }

    /// Reads the file at `path` for teardown: only what names the
    /// environment's objects is checked (see [`Purpose::Identity`]).
    pub fn load_identity(path: &Path) -> Result<Config, Error> {
        Config::load_for(path, Purpose::Identity)
    }

    /// Reads, checks and resolves the file at `path` for `purpose`.
    pub fn load_for(path: &Path, purpose: Purpose) -> Result<Config, Error> {
        let file = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
        let text = std::fs::read_to_string(&file).map_err(|source| Error::Read {
            path: file.clone(),
            source,
        })?;
        Config::parse_for(&file, &text, purpose)
    }

    /// Checks and resolves `text` as if read from `file`, fully.
    pub fn parse(file: &Path, text: &str) -> Result<Config, Error> {
        Config::parse_for(file, text, Purpose::Full)
    }

    /// Checks and resolves `text` as if read from `file`, for `purpose`.
    pub fn parse_for(file: &Path, text: &str, purpose: Purpose) -> Result<Config, Error> {
        let invalid = |problems| Error::Invalid {
            path: file.to_path_buf(),
            problems,
        };
        if text
            .lines()
            .all(|l| l.trim().is_empty() || l.trim_start().starts_with('#'))
        {
            return Err(invalid(vec![Problem {
                location: Location { line: 1, column: 1 },
                key: String::from("name"),
                message: String::from("the file is empty"),
                fix: String::from(
                    "declare at least `name:` and `components:` (README.md shows a complete file)",
                ),
            }]));
        }
        let locations = Locations::index(text);
        if let Some((key, location)) = locations.duplicate() {
            return Err(invalid(vec![raw::duplicate_problem(key, location)]));
        }
        let raw: RawConfig =
            serde_yaml::from_str(text).map_err(|e| invalid(vec![serde_problem(&e)]))?;
        let root = file.parent().map(Path::to_path_buf).unwrap_or_default();
        let mut check = Check {
            locations: &locations,
            root: &root,
            purpose,
            problems: Vec::new(),
        };
        let mut config = check.resolve(raw, file);
        if purpose == Purpose::Full {
            config.cluster.sim_source = check.workspace(&config);
        }
        if !check.problems.is_empty() {
            check
                .problems
                .sort_by_key(|p| (p.location.line, p.location.column));
            return Err(invalid(check.problems));
        }
        config.locations = locations;
        Ok(config)
    }

    /// `file:line:col` of the value at `key` (a dotted path such as
    /// `network.ipv4Subnet`), or of the nearest key the file spells out: for
    /// checks that run after loading and must still point into the file.
    pub fn locate(&self, key: &str) -> String {
        let at = self.locations.value(key);
        format!("{}:{}:{}", self.file.display(), at.line, at.column)
    }

    /// The declared component `name`, or an error listing the known ones.
    pub fn component(&self, name: &str) -> Result<&Component, Error> {
        self.components
            .get(name)
            .ok_or_else(|| Error::UnknownComponent {
                path: self.file.clone(),
                name: name.to_string(),
                known: self.components.keys().cloned().collect(),
            })
    }

    /// Container name of the single server node.
    pub fn node_name(&self) -> String {
        node_name(&self.name)
    }

    /// Where the harness keeps what it learns about this environment.
    pub fn state_dir(&self) -> PathBuf {
        self.root.join(".dev-env").join(&self.name)
    }
}

/// Container name and hostname of environment `name`'s server node.
fn node_name(name: &str) -> String {
    format!("{name}-server-0")
}

#[cfg(test)]
pub(crate) mod tests;
