//! `dev-env.yaml`: the declared environment.
//!
//! The file is read in two passes. serde_yaml turns it into the `Raw*`
//! structs (unknown keys and wrong types fail here, with serde_yaml's own
//! position), then [`Config::load`] checks what types cannot say (names,
//! subnets, paths, combinations) and fills every default in
//! [`Config::resolve`], the one place defaults live. Every problem names
//! `file:line:col`, the key, and the fix; all problems of a file are reported
//! together.

mod locate;

use std::{
    collections::BTreeMap,
    fmt,
    net::Ipv4Addr,
    path::{Path, PathBuf},
};

use ipnet::{Ipv4Net, Ipv6Net};
use serde::Deserialize;

pub use locate::Location;
use locate::Locations;

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
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Component {
    /// Repository path in the registry, such as `demo/worker`.
    pub image: String,
    pub build: Build,
    pub rollout: Rollout,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Build {
    /// `cargo build` of a static binary, packed into an image without a daemon.
    Cargo { package: String, bin: String },
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

/// A workspace package's binary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CargoBinary {
    pub package: String,
    pub bin: String,
}

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
        "cannot read {}: {source}; create it (see README.md) or point `--config`/`DEV_ENV_CONFIG` at yours",
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
    /// Reads, checks and resolves the file at `path`.
    pub fn load(path: &Path) -> Result<Config, Error> {
        let file = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
        let text = std::fs::read_to_string(&file).map_err(|source| Error::Read {
            path: file.clone(),
            source,
        })?;
        Config::parse(&file, &text)
    }

    /// Checks and resolves `text` as if read from `file`.
    pub fn parse(file: &Path, text: &str) -> Result<Config, Error> {
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
        let raw: RawConfig =
            serde_yaml::from_str(text).map_err(|e| invalid(vec![serde_problem(&e)]))?;
        let locations = Locations::index(text);
        let root = file.parent().map(Path::to_path_buf).unwrap_or_default();
        let mut check = Check {
            locations: &locations,
            root: &root,
            problems: Vec::new(),
        };
        let config = check.resolve(raw, file);
        if check.problems.is_empty() {
            Ok(config)
        } else {
            check
                .problems
                .sort_by_key(|p| (p.location.line, p.location.column));
            Err(invalid(check.problems))
        }
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
        format!("{}-server-0", self.name)
    }

    /// Where the harness keeps what it learns about this environment.
    pub fn state_dir(&self) -> PathBuf {
        self.root.join(".dev-env").join(&self.name)
    }
}

/// Turns a serde_yaml error into a problem with its position and a fix.
fn serde_problem(err: &serde_yaml::Error) -> Problem {
    let location = err
        .location()
        .map(|l| Location {
            line: l.line(),
            column: l.column(),
        })
        .unwrap_or(Location { line: 1, column: 1 });
    let full = err.to_string();
    // serde_yaml appends " at line L column C"; the position is printed apart.
    let message = match full.rfind(" at line ") {
        Some(i) => full[..i].to_string(),
        None => full,
    };
    // serde_yaml prefixes the path of the enclosing value: "a.b: message".
    let (path, detail) = match message.split_once(": ") {
        Some((p, d)) if !p.contains(' ') => (p.to_string(), d.to_string()),
        _ => (String::new(), message.clone()),
    };
    let quoted = between_backticks(&detail);
    let (key, fix) = if detail.starts_with("unknown field") {
        let field = quoted.unwrap_or_default();
        (
            join(&path, &field),
            String::from("remove the key or correct its spelling"),
        )
    } else if detail.starts_with("missing field") {
        let field = quoted.unwrap_or_default();
        (join(&path, &field), format!("add `{field}`"))
    } else if detail.starts_with("unknown variant") {
        (path.clone(), String::from("use one of the values listed"))
    } else if detail.starts_with("invalid type") || detail.starts_with("invalid value") {
        (
            path.clone(),
            String::from("give a value of the expected type"),
        )
    } else if detail.contains("duplicate") {
        (path.clone(), String::from("declare each key once"))
    } else {
        let key = if path.is_empty() {
            String::from("(document)")
        } else {
            path.clone()
        };
        (key, String::from("fix the YAML syntax at that position"))
    };
    let key = if key.is_empty() {
        String::from("(document)")
    } else {
        key
    };
    Problem {
        location,
        key,
        message: detail,
        fix,
    }
}

fn between_backticks(s: &str) -> Option<String> {
    let start = s.find('`')? + 1;
    let len = s[start..].find('`')?;
    Some(s[start..start + len].to_string())
}

fn join(parent: &str, key: &str) -> String {
    if parent.is_empty() {
        key.to_string()
    } else {
        format!("{parent}.{key}")
    }
}

// The file as written. Options mark what may be omitted; `Check::resolve`
// fills them.

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawConfig {
    name: String,
    network: Option<RawNetwork>,
    registry: Option<RawRegistry>,
    cluster: Option<RawCluster>,
    #[serde(default)]
    manifests: Vec<String>,
    #[serde(default)]
    components: BTreeMap<String, RawComponent>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawNetwork {
    name: Option<String>,
    ipv4_subnet: Option<String>,
    ipv6_subnet: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawRegistry {
    name: Option<String>,
    image: Option<String>,
    host_port: Option<u16>,
    volume: Option<String>,
    external: Option<String>,
    cluster_host: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawCluster {
    provider: Option<Provider>,
    image: Option<String>,
    context: Option<String>,
    pod_subnet: Option<String>,
    service_subnet: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawComponent {
    image: String,
    build: Option<RawBuild>,
    rollout: Option<RawRollout>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawBuild {
    cargo: Option<RawCargoBuild>,
    docker: Option<RawDockerBuild>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawCargoBuild {
    package: String,
    bin: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawDockerBuild {
    context: Option<String>,
    dockerfile: Option<String>,
    target: Option<String>,
    #[serde(default)]
    build_args: BTreeMap<String, String>,
    cargo: Option<RawCargoBuild>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawRollout {
    kind: RolloutKind,
    namespace: Option<String>,
    name: Option<String>,
    container: Option<String>,
}

struct Check<'a> {
    locations: &'a Locations,
    root: &'a Path,
    problems: Vec<Problem>,
}

impl Check<'_> {
    fn problem(&mut self, key: &str, message: impl Into<String>, fix: impl Into<String>) {
        self.problems.push(Problem {
            location: self.locations.value(key),
            key: key.to_string(),
            message: message.into(),
            fix: fix.into(),
        });
    }

    /// Fills defaults and records every problem found on the way.
    fn resolve(&mut self, raw: RawConfig, file: &Path) -> Config {
        let name = raw.name;
        self.dns_label("name", &name);

        let network = raw.network.unwrap_or_default();
        let network = Network {
            name: self.docker_name("network.name", network.name.unwrap_or_else(|| name.clone())),
            ipv4_subnet: self.ipv4_subnet(
                "network.ipv4Subnet",
                network.ipv4_subnet.as_deref(),
                DEFAULT_IPV4_SUBNET,
            ),
            ipv6_subnet: network
                .ipv6_subnet
                .as_deref()
                .and_then(|s| self.ipv6_subnet("network.ipv6Subnet", s)),
        };

        let raw_registry = raw.registry.unwrap_or_default();
        let reachable_registry =
            raw_registry.external.is_some() || raw_registry.cluster_host.is_some();
        let registry = self.registry(raw_registry, &name);
        let cluster = self.cluster(raw.cluster.unwrap_or_default());
        if cluster.provider == Provider::Existing && !reachable_registry {
            // Pods of a cluster elsewhere cannot pull from a container on
            // this machine's Docker network.
            self.problem(
                "cluster.provider",
                "`provider: existing` needs a registry that cluster can pull from",
                "set `registry.external` to a registry both this machine and the cluster reach, or `registry.clusterHost` to the address the cluster uses",
            );
        }
        self.disjoint(&[
            ("network.ipv4Subnet", network.ipv4_subnet),
            ("cluster.podSubnet", cluster.pod_subnet),
            ("cluster.serviceSubnet", cluster.service_subnet),
        ]);

        let manifests = raw
            .manifests
            .iter()
            .enumerate()
            .map(|(i, m)| {
                self.existing_path(
                    &format!("manifests[{i}]"),
                    self.root,
                    m,
                    "a manifest file or directory",
                )
            })
            .collect();

        let components = raw
            .components
            .into_iter()
            .map(|(component, c)| {
                let resolved = self.component(&component, c);
                (component, resolved)
            })
            .collect();

        Config {
            file: file.to_path_buf(),
            root: self.root.to_path_buf(),
            name,
            network,
            registry,
            cluster,
            manifests,
            components,
        }
    }

    fn registry(&mut self, raw: RawRegistry, name: &str) -> Registry {
        if let Some(external) = &raw.external {
            if !is_host_port(external) {
                self.problem(
                    "registry.external",
                    format!("`{external}` is not a `host:port`"),
                    "write the address the host pushes to, such as `localhost:5000`",
                );
            }
            for (key, set) in [
                ("registry.name", raw.name.is_some()),
                ("registry.image", raw.image.is_some()),
                ("registry.hostPort", raw.host_port.is_some()),
                ("registry.volume", raw.volume.is_some()),
            ] {
                if set {
                    self.problem(
                        key,
                        "has no effect with `registry.external`: no registry container is created",
                        "remove it, or remove `external` to let dev-env run the registry",
                    );
                }
            }
        }
        let registry_name = self.docker_name(
            "registry.name",
            raw.name.unwrap_or_else(|| format!("{name}-registry")),
        );
        let cluster_host = match (&raw.cluster_host, &raw.external) {
            (Some(h), _) => {
                if !is_host_port(h) {
                    self.problem(
                        "registry.clusterHost",
                        format!("`{h}` is not a `host:port`"),
                        "write the address pods pull from, such as `registry.internal:5000`",
                    );
                }
                h.clone()
            }
            (None, Some(external)) => external.clone(),
            (None, None) => format!("{registry_name}:{REGISTRY_CONTAINER_PORT}"),
        };
        Registry {
            volume: self.docker_name(
                "registry.volume",
                raw.volume
                    .unwrap_or_else(|| format!("{name}-registry-data")),
            ),
            name: registry_name,
            image: self.image_ref(
                "registry.image",
                raw.image
                    .unwrap_or_else(|| DEFAULT_REGISTRY_IMAGE.to_string()),
            ),
            host_port: raw.host_port.unwrap_or(0),
            external: raw.external,
            cluster_host,
        }
    }

    fn cluster(&mut self, raw: RawCluster) -> Cluster {
        let provider = raw.provider.unwrap_or(Provider::K3s);
        let image = match provider {
            Provider::K3s => raw.image.unwrap_or_else(|| DEFAULT_K3S_IMAGE.to_string()),
            Provider::Sim => raw.image.unwrap_or_else(|| DEFAULT_SIM_IMAGE.to_string()),
            Provider::Existing => {
                if raw.image.is_some() {
                    self.problem(
                        "cluster.image",
                        "has no effect with `provider: existing`: no node is created",
                        "remove `image`, or choose `provider: k3s` or `provider: sim`",
                    );
                }
                String::new()
            }
        };
        let image = if image.is_empty() {
            image
        } else {
            self.image_ref("cluster.image", image)
        };
        match (provider, &raw.context) {
            (Provider::Existing, None) => self.problem(
                "cluster.provider",
                "`provider: existing` needs `context`, so dev-env never acts on whatever context happens to be current",
                "add `context: <name>` from `kubectl config get-contexts`",
            ),
            (Provider::Existing, Some(c)) if c.trim().is_empty() => {
                self.problem("cluster.context", "is empty", "name a context from `kubectl config get-contexts`")
            }
            (Provider::K3s | Provider::Sim, Some(_)) => self.problem(
                "cluster.context",
                "is only used with `provider: existing`; k3s and sim clusters get their own kubeconfig",
                "remove `context`, or set `provider: existing`",
            ),
            _ => {}
        }
        Cluster {
            provider,
            image,
            context: raw.context,
            pod_subnet: self.ipv4_subnet(
                "cluster.podSubnet",
                raw.pod_subnet.as_deref(),
                DEFAULT_POD_SUBNET,
            ),
            service_subnet: self.ipv4_subnet(
                "cluster.serviceSubnet",
                raw.service_subnet.as_deref(),
                DEFAULT_SERVICE_SUBNET,
            ),
        }
    }

    fn component(&mut self, component: &str, raw: RawComponent) -> Component {
        let at = format!("components.{component}");
        if !is_dns_label(component) {
            self.problems.push(Problem {
                location: self.locations.key(&at),
                key: at.clone(),
                message: format!("component name `{component}` is not a DNS label"),
                fix: String::from("use lowercase letters, digits and `-` (at most 63, starting and ending alphanumeric)"),
            });
        }
        let image_key = format!("{at}.image");
        if !is_repository(&raw.image) {
            let fix = if raw.image.contains(':') || raw.image.contains('@') {
                "write the repository path only, such as `demo/worker`: dev-env adds the registry host and the `:dev` tag"
            } else {
                "use lowercase path components separated by `/`, such as `demo/worker`"
            };
            self.problem(
                &image_key,
                format!("`{}` is not an image repository path", raw.image),
                fix,
            );
        }
        let build = self.build(&at, raw.build);
        let rollout_key = format!("{at}.rollout");
        let rollout = match raw.rollout {
            Some(r) => Rollout {
                kind: r.kind,
                namespace: self.dns_label(
                    &format!("{rollout_key}.namespace"),
                    &r.namespace.unwrap_or_else(|| "default".into()),
                ),
                name: self.dns_subdomain(
                    &format!("{rollout_key}.name"),
                    &r.name.unwrap_or_else(|| component.to_string()),
                ),
                container: self.dns_label(
                    &format!("{rollout_key}.container"),
                    &r.container.unwrap_or_else(|| component.to_string()),
                ),
            },
            None => {
                self.missing(&at, "rollout", "add `rollout: {kind: Deployment, namespace: <ns>, name: <deployment>, container: <container>}`");
                Rollout {
                    kind: RolloutKind::Deployment,
                    namespace: String::new(),
                    name: String::new(),
                    container: String::new(),
                }
            }
        };
        Component {
            image: raw.image,
            build,
            rollout,
        }
    }

    fn build(&mut self, at: &str, raw: Option<RawBuild>) -> Build {
        let key = format!("{at}.build");
        let fallback = Build::Cargo {
            package: String::new(),
            bin: String::new(),
        };
        match raw {
            None => {
                self.missing(at, "build", "add `build: {cargo: {package: <package>, bin: <bin>}}` or `build: {docker: {context: ., dockerfile: Dockerfile}}`");
                fallback
            }
            Some(RawBuild {
                cargo: Some(_),
                docker: Some(_),
            }) => {
                self.problems.push(Problem {
                    location: self.locations.key(&key),
                    key,
                    message: String::from("declares both `cargo` and `docker`"),
                    fix: String::from("keep exactly one build backend"),
                });
                fallback
            }
            Some(RawBuild {
                cargo: None,
                docker: None,
            }) => {
                self.problems.push(Problem {
                    location: self.locations.key(&key),
                    key,
                    message: String::from("declares no build backend"),
                    fix: String::from(
                        "add `cargo: {package, bin}` or `docker: {context, dockerfile}`",
                    ),
                });
                fallback
            }
            Some(RawBuild {
                cargo: Some(c),
                docker: None,
            }) => {
                if c.package.trim().is_empty() {
                    self.problem(
                        &format!("{key}.cargo.package"),
                        "is empty",
                        "name the workspace package that builds the binary",
                    );
                }
                let bin = c.bin.unwrap_or_else(|| c.package.clone());
                Build::Cargo {
                    package: c.package,
                    bin,
                }
            }
            Some(RawBuild {
                cargo: None,
                docker: Some(d),
            }) => {
                let context_key = format!("{key}.docker.context");
                let context = self.existing_path(
                    &context_key,
                    self.root,
                    d.context.as_deref().unwrap_or("."),
                    "the build context directory",
                );
                let dockerfile_key = format!("{key}.docker.dockerfile");
                let dockerfile = self.existing_path(
                    &dockerfile_key,
                    &context,
                    d.dockerfile.as_deref().unwrap_or("Dockerfile"),
                    "a Dockerfile (relative to the build context)",
                );
                let cargo = d.cargo.map(|c| {
                    if c.package.trim().is_empty() {
                        self.problem(
                            &format!("{key}.docker.cargo.package"),
                            "is empty",
                            "name the workspace package whose binary the Dockerfile copies",
                        );
                    }
                    let bin = c.bin.unwrap_or_else(|| c.package.clone());
                    CargoBinary {
                        package: c.package,
                        bin,
                    }
                });
                Build::Docker {
                    context,
                    dockerfile,
                    target: d.target,
                    build_args: d.build_args,
                    cargo,
                }
            }
        }
    }

    fn missing(&mut self, at: &str, field: &str, fix: &str) {
        self.problems.push(Problem {
            location: self.locations.key(at),
            key: format!("{at}.{field}"),
            message: format!("missing `{field}`"),
            fix: fix.to_string(),
        });
    }

    fn existing_path(&mut self, key: &str, base: &Path, rel: &str, what: &str) -> PathBuf {
        let path: PathBuf = base
            .join(rel)
            .components()
            .filter(|c| !matches!(c, std::path::Component::CurDir))
            .collect();
        if !path.exists() {
            self.problem(
                key,
                format!("`{rel}` does not exist (looked for {})", path.display()),
                format!(
                    "point it at {what}; relative paths start at {}",
                    base.display()
                ),
            );
        }
        path
    }

    fn dns_label(&mut self, key: &str, value: &str) -> String {
        if !is_dns_label(value) {
            self.problem(
                key,
                format!("`{value}` is not a DNS label"),
                "use lowercase letters, digits and `-` (at most 63, starting and ending alphanumeric)",
            );
        }
        value.to_string()
    }

    fn dns_subdomain(&mut self, key: &str, value: &str) -> String {
        let ok = !value.is_empty() && value.len() <= 253 && value.split('.').all(is_dns_label);
        if !ok {
            self.problem(
                key,
                format!("`{value}` is not a valid Kubernetes object name"),
                "use lowercase letters, digits, `-` and `.` (at most 253)",
            );
        }
        value.to_string()
    }

    fn docker_name(&mut self, key: &str, value: String) -> String {
        let mut chars = value.chars();
        let ok = chars.next().is_some_and(|c| c.is_ascii_alphanumeric())
            && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'));
        if !ok {
            self.problem(
                key,
                format!("`{value}` is not a valid Docker object name"),
                "start with a letter or digit and use only letters, digits, `_`, `.` and `-`",
            );
        }
        value
    }

    fn image_ref(&mut self, key: &str, value: String) -> String {
        let ok = !value.is_empty() && !value.chars().any(char::is_whitespace);
        if !ok {
            self.problem(
                key,
                format!("`{value}` is not an image reference"),
                "write a reference such as `docker.io/library/registry:2`",
            );
        }
        value
    }

    fn ipv4_subnet(&mut self, key: &str, value: Option<&str>, default: &str) -> Ipv4Net {
        let fallback = Ipv4Net::new(Ipv4Addr::UNSPECIFIED, 32).expect("prefix 32 is valid");
        let text = value.unwrap_or(default);
        match text.parse::<Ipv4Net>() {
            Ok(net) if net.network() != net.addr() => {
                self.problem(
                    key,
                    format!("`{text}` has host bits set"),
                    format!("write the network address: `{}`", net.trunc()),
                );
                net.trunc()
            }
            Ok(net) => net,
            Err(_) => {
                self.problem(
                    key,
                    format!("`{text}` is not an IPv4 subnet"),
                    "write it in CIDR form, such as `192.168.231.0/24`",
                );
                fallback
            }
        }
    }

    fn ipv6_subnet(&mut self, key: &str, text: &str) -> Option<Ipv6Net> {
        match text.parse::<Ipv6Net>() {
            Ok(net) if net.network() != net.addr() => {
                self.problem(
                    key,
                    format!("`{text}` has host bits set"),
                    format!("write the network address: `{}`", net.trunc()),
                );
                Some(net.trunc())
            }
            Ok(net) => Some(net),
            Err(_) => {
                self.problem(key, format!("`{text}` is not an IPv6 subnet"), "write it in CIDR form, such as `fd00:dead:beef::/64`, or remove it for an IPv4-only network");
                None
            }
        }
    }

    fn disjoint(&mut self, nets: &[(&str, Ipv4Net)]) {
        for (i, &(a_key, a)) in nets.iter().enumerate() {
            for &(b_key, b) in &nets[i + 1..] {
                if a.contains(&b) || b.contains(&a) {
                    // Report at the key the file declares; a default is not
                    // something the user can find in it.
                    let (at, net, other_key, other) =
                        if self.locations.has(b_key) || !self.locations.has(a_key) {
                            (b_key, b, a_key, a)
                        } else {
                            (a_key, a, b_key, b)
                        };
                    let default = if self.locations.has(other_key) {
                        ""
                    } else {
                        ", the default"
                    };
                    self.problem(
                        at,
                        format!("{net} overlaps `{other_key}` ({other}{default})"),
                        "choose subnets that do not overlap: traffic to the shared range would be misrouted",
                    );
                }
            }
        }
    }
}

/// RFC 1123 label: what Kubernetes namespaces and container names accept.
pub fn is_dns_label(s: &str) -> bool {
    let bytes = s.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 63
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
        && bytes[0] != b'-'
        && bytes[bytes.len() - 1] != b'-'
}

/// An OCI repository path: lowercase components joined by `/`, each made of
/// alphanumerics separated by `.`, `_`, `__` or `-`.
fn is_repository(s: &str) -> bool {
    !s.is_empty()
        && s.split('/').all(|part| {
            let bytes = part.as_bytes();
            !bytes.is_empty()
                && bytes.iter().all(|b| {
                    b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'.' | b'_' | b'-')
                })
                && bytes[0].is_ascii_alphanumeric()
                && bytes[bytes.len() - 1].is_ascii_alphanumeric()
        })
}

fn is_host_port(s: &str) -> bool {
    match s.rsplit_once(':') {
        Some((host, port)) => {
            !host.is_empty() && !host.contains('/') && port.parse::<u16>().is_ok_and(|p| p > 0)
        }
        None => false,
    }
}

#[cfg(test)]
mod tests;
