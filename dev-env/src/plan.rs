//! The desired state of the Docker side, computed from the config alone:
//! what `dev up` creates, what `dev up --dry-run` prints, and what the drift
//! gate hashes. Nothing here talks to Docker.

use std::{
    collections::{BTreeMap, HashMap},
    fmt,
};

use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::{
    config::{Config, Provider, REGISTRY_CONTAINER_PORT},
    docker::{self, engine, engine::HostAddress},
    manifest::Manifest,
    state::State,
};

/// Label holding the sha256 of the object's declared spec (the drift gate).
pub const LABEL_SPEC_HASH: &str = "dev-env.spec-hash";
/// Label holding the declared spec itself, as JSON, so drift can be shown
/// field by field.
pub const LABEL_SPEC: &str = "dev-env.spec";
/// Where k3s (and kube-sim) write their kubeconfig inside the node.
pub const NODE_KUBECONFIG_OUTPUT: &str = "/output/kubeconfig.yaml";
/// Where k3s reads its registry mirrors.
pub const NODE_REGISTRIES_YAML: &str = "/etc/rancher/k3s/registries.yaml";
/// The API server port inside the node.
pub const NODE_API_PORT: u16 = 6443;
/// Where the k3s node's entrypoint is written, run by `/bin/sh`.
pub const NODE_ENTRYPOINT: &str = "/bin/dev-env-entrypoint.sh";
/// The k3s node's entrypoint: `/` made shared, Docker's embedded DNS moved
/// to an address pods can reach and named in `/etc/resolv.conf`, then k3s
/// as PID 1. See the script's own comments.
pub const NODE_ENTRYPOINT_SCRIPT: &str = include_str!("plan/k3s-entrypoint.sh");
/// The environment variable naming the address the entrypoint moves
/// Docker's embedded DNS to.
pub const NODE_DNS_ADDRESS_ENV: &str = "DEV_ENV_DNS_ADDRESS";

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NetworkSpec {
    pub name: String,
    pub ipv4_subnet: String,
    pub ipv6_subnet: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RegistrySpec {
    pub container: String,
    pub image: String,
    /// Declared host port; 0 means chosen once and kept in state.
    pub host_port: u16,
    pub volume: String,
    pub network: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeSpec {
    pub container: String,
    pub image: String,
    /// Replaces the image's entrypoint when not empty (k3s nodes).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub entrypoint: Vec<String>,
    pub command: Vec<String>,
    pub privileged: bool,
    /// `userns_mode=host`: engines with user-namespace remapping refuse
    /// privileged containers otherwise.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub userns_host: bool,
    /// A cgroup namespace of its own: k3s, as PID 1 without an init, sets
    /// up its cgroup v2 hierarchy there.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cgroupns_private: bool,
    /// tmpfs mounts, by destination.
    pub tmpfs: BTreeMap<String, String>,
    /// Mounts, by destination: one source per destination, by
    /// construction.
    pub mounts: BTreeMap<String, MountSource>,
    /// Environment, secrets excluded (`K3S_TOKEN` comes from state).
    pub env: BTreeMap<String, String>,
    /// Files written into the container before it starts.
    pub files: BTreeMap<String, String>,
    pub network: String,
    /// `/etc/hosts` entries, name to address (or Docker's
    /// `host-gateway`): `host.docker.internal`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub extra_hosts: BTreeMap<String, String>,
    /// Host devices bound into the node (`/dev/mapper` on btrfs hosts).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub devices: Vec<String>,
}

/// What is mounted at a destination of the node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum MountSource {
    /// A named volume.
    Volume(String),
    /// A path on the engine's host.
    Bind(String),
}

/// Where the cluster comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClusterPlan {
    /// A node container the harness runs.
    Node(Box<NodeSpec>),
    /// A context of the user's kubeconfig; nothing is created.
    Existing { context: String },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RegistryPlan {
    Managed(RegistrySpec),
    External { host: String },
}

/// Everything `dev up` would do, in order.
#[derive(Debug, Clone)]
pub struct Plan {
    pub name: String,
    pub network: NetworkSpec,
    pub registry: RegistryPlan,
    /// The registry port as known now: declared, or kept in state.
    pub registry_port: Option<u16>,
    pub cluster: ClusterPlan,
    pub manifests: Vec<Manifest>,
    pub config: Config,
}

/// The registry's host port as known now: declared, or the one picked
/// earlier and kept in the state.
pub fn registry_port(config: &Config, state: &State) -> Option<u16> {
    match config.registry.host_port {
        0 => state.registry_port,
        port => Some(port),
    }
}

impl Plan {
    pub fn new(
        config: &Config,
        state: &State,
        manifests: Vec<Manifest>,
        setup: &EngineSetup,
    ) -> Plan {
        let registry_port = registry_port(config, state);
        Plan {
            name: config.name.clone(),
            network: network_spec(config),
            registry: match &config.registry.external {
                Some(host) => RegistryPlan::External { host: host.clone() },
                None => RegistryPlan::Managed(registry_spec(config)),
            },
            registry_port,
            cluster: match config.cluster.provider {
                Provider::Existing => ClusterPlan::Existing {
                    context: config.cluster.context.clone().unwrap_or_default(),
                },
                Provider::K3s | Provider::Sim => {
                    ClusterPlan::Node(Box::new(node_spec(config, registry_port, setup)))
                }
            },
            manifests,
            config: config.clone(),
        }
    }
}

/// Whether the environment needs a Docker network at all: only a managed
/// registry or a node container joins one. With an existing cluster and an
/// external registry dev-env creates no Docker object.
pub fn needs_network(config: &Config) -> bool {
    config.cluster.provider != Provider::Existing || config.registry.external.is_none()
}

pub fn network_spec(config: &Config) -> NetworkSpec {
    NetworkSpec {
        name: config.network.name.clone(),
        ipv4_subnet: config.network.ipv4_subnet.to_string(),
        ipv6_subnet: config.network.ipv6_subnet.map(|n| n.to_string()),
    }
}

pub fn registry_spec(config: &Config) -> RegistrySpec {
    RegistrySpec {
        container: config.registry.name.clone(),
        image: config.registry.image.clone(),
        host_port: config.registry.host_port,
        volume: config.registry.volume.clone(),
        network: config.network.name.clone(),
    }
}

/// What the engine decides of the node ([`docker::engine`]): the socket a
/// sim node mounts, the address pods reach the host at, k3s's additions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EngineSetup {
    /// The engine's socket as the engine itself sees it.
    pub socket: String,
    pub host: HostAddress,
    pub k3s: engine::K3sNode,
}

impl EngineSetup {
    /// Docker Engine on this machine, at its default socket: the setup of
    /// a plan made without asking the engine.
    pub fn local(config: &Config) -> EngineSetup {
        EngineSetup {
            socket: docker::endpoint::DEFAULT_SOCKET.to_string(),
            host: HostAddress::Gateway(crate::host::gateway(config)),
            k3s: engine::K3sNode::default(),
        }
    }

    /// The setup for the engine with `facts` at `endpoint`, with what the
    /// user should know of the host's address; refused when the provider
    /// cannot run there.
    pub fn for_engine(
        config: &Config,
        facts: &engine::Facts,
        endpoint: &docker::Endpoint,
        socket_override: Option<&str>,
    ) -> Result<(EngineSetup, Option<String>), engine::Refusal> {
        if config.cluster.provider == Provider::K3s
            && let Some(refusal) = engine::k3s_refusal(facts)
        {
            return Err(refusal);
        }
        let socket = match config.cluster.provider {
            Provider::Sim => engine::node_socket(facts, endpoint, socket_override)?,
            _ => docker::endpoint::DEFAULT_SOCKET.to_string(),
        };
        let route = engine::host_route(facts, endpoint, crate::host::gateway(config));
        let setup = EngineSetup {
            socket,
            host: route.address,
            k3s: engine::k3s_node(facts),
        };
        Ok((setup, route.caveat))
    }
}

pub fn node_spec(config: &Config, registry_port: Option<u16>, setup: &EngineSetup) -> NodeSpec {
    let node = config.node_name();
    let mut command: Vec<String> = [
        "server",
        "--tls-san",
        &node,
        "--tls-san",
        "127.0.0.1",
        "--cluster-cidr",
        &config.cluster.pod_subnet.to_string(),
        "--service-cidr",
        &config.cluster.service_subnet.to_string(),
    ]
    .map(String::from)
    .to_vec();
    let mut env = BTreeMap::from([(
        "K3S_KUBECONFIG_OUTPUT".to_string(),
        NODE_KUBECONFIG_OUTPUT.to_string(),
    )]);
    let mut mounts = BTreeMap::new();
    let mut tmpfs = BTreeMap::new();
    match config.cluster.provider {
        // k3s needs a privileged container (cgroups, mounts, iptables) with
        // tmpfs runtime directories, as k3d runs it.
        Provider::K3s | Provider::Existing => {
            tmpfs = ["/run", "/var/run"]
                .into_iter()
                .map(|d| (d.to_string(), String::new()))
                .collect();
        }
        // kube-sim runs pods as containers on the shared network through
        // the host's engine, so it gets the engine's socket and nothing
        // privileged: engines that refuse privileged containers still run it.
        Provider::Sim => {
            command.extend(
                [
                    "--kubelet",
                    "docker",
                    "--docker-network",
                    &config.network.name,
                    "--docker-label",
                    &format!("{}={}", docker::LABEL_NAME, config.name),
                ]
                .map(String::from),
            );
            mounts.insert(
                NODE_DOCKER_SOCKET.to_string(),
                MountSource::Bind(setup.socket.clone()),
            );
            env.insert(
                "DOCKER_HOST".to_string(),
                format!("unix://{NODE_DOCKER_SOCKET}"),
            );
        }
    }
    let k3s = config.cluster.provider == Provider::K3s;
    if k3s && !config.cluster.disable.is_empty() {
        command.push(format!("--disable={}", config.cluster.disable.join(",")));
    }
    let mut files = BTreeMap::from([(
        NODE_REGISTRIES_YAML.to_string(),
        registries_yaml(config, registry_port),
    )]);
    let mut entrypoint = Vec::new();
    if k3s {
        command.extend(setup.k3s.args.iter().cloned());
        entrypoint = vec![String::from("/bin/sh"), NODE_ENTRYPOINT.to_string()];
        files.insert(
            NODE_ENTRYPOINT.to_string(),
            NODE_ENTRYPOINT_SCRIPT.to_string(),
        );
        env.insert(
            NODE_DNS_ADDRESS_ENV.to_string(),
            crate::host::gateway(config).to_string(),
        );
    }
    env.extend(proxy_env(config, |key| std::env::var(key).ok()));
    NodeSpec {
        container: node,
        image: config.cluster.image.clone(),
        entrypoint,
        command,
        privileged: k3s,
        userns_host: k3s,
        cgroupns_private: k3s,
        tmpfs,
        mounts,
        env,
        files,
        network: config.network.name.clone(),
        extra_hosts: BTreeMap::from([(
            crate::host::HOST_NAME.to_string(),
            setup.host.extra_host_value(),
        )]),
        devices: if k3s {
            setup.k3s.devices.clone()
        } else {
            Vec::new()
        },
    }
}

/// The proxy settings of this process (`HTTP_PROXY`, `HTTPS_PROXY`,
/// `NO_PROXY`, either case) for the node, as k3d passes them: with the
/// names and subnets that must never go through a proxy added to
/// `NO_PROXY` (the registry, the node, pods, services). Empty when no proxy
/// is set.
pub fn proxy_env(
    config: &Config,
    lookup: impl Fn(&str) -> Option<String>,
) -> BTreeMap<String, String> {
    let mut env = BTreeMap::new();
    for key in ["HTTP_PROXY", "HTTPS_PROXY"] {
        let value = lookup(key).or_else(|| lookup(&key.to_lowercase()));
        if let Some(value) = value.filter(|v| !v.is_empty()) {
            env.insert(key.to_string(), value.clone());
            env.insert(key.to_lowercase(), value);
        }
    }
    if env.is_empty() {
        return env;
    }
    let mut no_proxy: Vec<String> = lookup("NO_PROXY")
        .or_else(|| lookup("no_proxy"))
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect();
    let registry_host = config
        .registry
        .cluster_host
        .split(':')
        .next()
        .unwrap_or_default();
    for own in [
        "localhost",
        "127.0.0.1",
        registry_host,
        &config.registry.name,
        &config.node_name(),
        &config.cluster.pod_subnet.to_string(),
        &config.cluster.service_subnet.to_string(),
        ".svc",
        ".cluster.local",
    ] {
        if !own.is_empty() && !no_proxy.iter().any(|n| n == own) {
            no_proxy.push(own.to_string());
        }
    }
    let no_proxy = no_proxy.join(",");
    env.insert("NO_PROXY".to_string(), no_proxy.clone());
    env.insert("no_proxy".to_string(), no_proxy);
    env
}

/// Where the sim node finds the engine's socket.
pub const NODE_DOCKER_SOCKET: &str = "/var/run/docker.sock";

/// k3s `registries.yaml`: the in-network registry name, and the host's
/// `localhost:<port>` name for it, both mirrored to the in-network endpoint,
/// so either spelling of an image resolves inside the cluster. `localhost`
/// is mirrored only once the host port is known.
pub fn registries_yaml(config: &Config, registry_port: Option<u16>) -> String {
    let endpoint = match &config.registry.external {
        Some(_) => format!("http://{}", config.registry.cluster_host),
        None => format!("http://{}:{REGISTRY_CONTAINER_PORT}", config.registry.name),
    };
    let mut hosts = vec![config.registry.cluster_host.clone()];
    match (&config.registry.external, registry_port) {
        (Some(external), _) if *external != config.registry.cluster_host => {
            hosts.push(external.clone())
        }
        (None, Some(port)) => hosts.push(format!("localhost:{port}")),
        _ => {}
    }
    let mut out = String::from("mirrors:\n");
    for host in hosts {
        out.push_str(&format!(
            "  \"{host}\":\n    endpoint:\n      - \"{endpoint}\"\n"
        ));
    }
    out
}

/// The labels of an object of environment `env` in `role` declared by
/// `spec`: the environment's labels plus the drift gate's.
pub fn labels<T: Serialize>(env: &str, role: &str, spec: &T) -> HashMap<String, String> {
    let mut labels = docker::labels(env, role);
    labels.insert(LABEL_SPEC_HASH.to_string(), spec_hash(spec));
    labels.insert(
        LABEL_SPEC.to_string(),
        serde_json::to_string(spec).expect("specs serialize"),
    );
    labels
}

/// One field whose declared value changed since the object was created.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    pub field: String,
    pub was: String,
    pub now: String,
}

/// The Docker objects the drift gate watches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Object {
    Network,
    Registry,
    Node,
}

impl fmt::Display for Object {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Object::Network => "network",
            Object::Registry => "registry",
            Object::Node => "node",
        })
    }
}

/// How an existing object differs from its declared spec.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Drift {
    pub object: Object,
    pub name: String,
    pub changes: Vec<Change>,
}

/// What the drift gate's labels say of an existing object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ownership {
    /// It carries no spec label: this harness did not create it.
    NotOurs,
    /// It was created from the spec declared now.
    Matches,
    /// It was created from another spec.
    Drifted(Drift),
}

impl Drift {
    /// Compares two specs field by field; `None` when they are equal.
    pub fn between<T: Serialize>(object: Object, name: &str, was: &T, now: &T) -> Option<Drift> {
        let was = serde_json::to_value(was).expect("specs serialize");
        let now = serde_json::to_value(now).expect("specs serialize");
        Drift::between_values(object, name, &was, &now)
    }

    fn between_values(
        object: Object,
        name: &str,
        was: &serde_json::Value,
        now: &serde_json::Value,
    ) -> Option<Drift> {
        let empty = serde_json::Map::new();
        let was_fields = was.as_object().unwrap_or(&empty);
        let now_fields = now.as_object().unwrap_or(&empty);
        let mut keys: Vec<&String> = was_fields.keys().chain(now_fields.keys()).collect();
        keys.sort();
        keys.dedup();
        let show = |v: Option<&serde_json::Value>| match v {
            None | Some(serde_json::Value::Null) => String::from("(unset)"),
            Some(serde_json::Value::String(s)) => s.clone(),
            Some(other) => other.to_string(),
        };
        let changes: Vec<Change> = keys
            .into_iter()
            .filter(|k| was_fields.get(*k) != now_fields.get(*k))
            .map(|k| Change {
                field: k.clone(),
                was: show(was_fields.get(k)),
                now: show(now_fields.get(k)),
            })
            .collect();
        (!changes.is_empty()).then(|| Drift {
            object,
            name: name.to_string(),
            changes,
        })
    }
}

impl fmt::Display for Drift {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} `{}` differs from dev-env.yaml:",
            self.object, self.name
        )?;
        for c in &self.changes {
            write!(f, "\n    {}: {} -> {}", c.field, c.was, c.now)?;
        }
        Ok(())
    }
}

/// Reads the drift gate's labels of an existing object.
pub fn drift_from_labels<T: Serialize>(
    labels: &HashMap<String, String>,
    object: Object,
    name: &str,
    spec: &T,
) -> Ownership {
    let Some(hash) = labels.get(LABEL_SPEC_HASH) else {
        return Ownership::NotOurs;
    };
    if *hash == spec_hash(spec) {
        return Ownership::Matches;
    }
    let was: serde_json::Value = labels
        .get(LABEL_SPEC)
        .and_then(|s| serde_json::from_str(s).ok())
        .unwrap_or_default();
    let now = serde_json::to_value(spec).expect("specs serialize");
    Ownership::Drifted(
        Drift::between_values(object, name, &was, &now).unwrap_or_else(|| Drift {
            object,
            name: name.to_string(),
            changes: vec![Change {
                field: String::from("spec"),
                was: hash.clone(),
                now: spec_hash(spec),
            }],
        }),
    )
}

/// sha256 of a spec's canonical JSON: the value of [`LABEL_SPEC_HASH`].
pub fn spec_hash<T: Serialize>(spec: &T) -> String {
    let json = serde_json::to_vec(spec).expect("specs serialize");
    hex::encode(Sha256::digest(&json))
}

impl fmt::Display for Plan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "plan for `{}` ({})",
            self.name,
            self.config.file.display()
        )?;
        self.fmt_network(f)?;
        self.fmt_registry(f)?;
        match &self.cluster {
            ClusterPlan::Node(node) => {
                self.fmt_node(f, node)?;
                self.fmt_kubeconfigs(f, node)?;
            }
            ClusterPlan::Existing { context } => writeln!(
                f,
                "cluster   existing context `{context}` from your kubeconfig: nothing is created"
            )?,
        }
        writeln!(
            f,
            "config map kube-public/local-registry-hosting (KEP-1755)"
        )?;
        self.fmt_manifests(f)?;
        self.fmt_components(f)
    }
}

impl Plan {
    /// `path` relative to the config's root, when it is under it.
    fn relative(&self, path: &std::path::Path) -> String {
        let root = &self.config.root;
        path.strip_prefix(root)
            .unwrap_or(path)
            .display()
            .to_string()
    }

    fn fmt_network(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !needs_network(&self.config) {
            return writeln!(
                f,
                "network   none: the registry and the cluster are elsewhere"
            );
        }
        let n = &self.network;
        let v6 = n
            .ipv6_subnet
            .as_ref()
            .map_or(String::new(), |s| format!(", IPv6 {s} (dual-stack)"));
        writeln!(
            f,
            "network   {}: bridge, IPv4 {}{v6}",
            n.name, n.ipv4_subnet
        )
    }

    fn fmt_registry(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let cluster_host = &self.config.registry.cluster_host;
        let r = match &self.registry {
            RegistryPlan::Managed(r) => r,
            RegistryPlan::External { host } => {
                return writeln!(
                    f,
                    "registry  external {host}: nothing is created; pods pull from {cluster_host}"
                );
            }
        };
        let port = self.registry_port.map_or_else(
            || String::from("<free port, kept in state>"),
            |p| p.to_string(),
        );
        writeln!(f, "registry  {}: image {}", r.container, r.image)?;
        writeln!(
            f,
            "          publish 127.0.0.1:{port} -> {REGISTRY_CONTAINER_PORT}/tcp"
        )?;
        writeln!(
            f,
            "          volume {} on /var/lib/registry (kept by `dev down`)",
            r.volume
        )?;
        writeln!(f, "          network {} as {cluster_host}", r.network)
    }

    fn fmt_node(&self, f: &mut fmt::Formatter<'_>, node: &NodeSpec) -> fmt::Result {
        writeln!(
            f,
            "node      {}: image {} (provider {})",
            node.container, node.image, self.config.cluster.provider
        )?;
        if !node.entrypoint.is_empty() {
            writeln!(f, "          entrypoint {}", node.entrypoint.join(" "))?;
        }
        writeln!(f, "          command {}", node.command.join(" "))?;
        let privileged = if node.privileged { "privileged, " } else { "" };
        let tmpfs: Vec<_> = node.tmpfs.keys().map(String::as_str).collect();
        let tmpfs = if tmpfs.is_empty() {
            String::new()
        } else {
            format!("tmpfs {}, ", tmpfs.join(" "))
        };
        writeln!(f, "          {privileged}{tmpfs}network {}", node.network)?;
        for (target, source) in &node.mounts {
            match source {
                MountSource::Volume(v) => writeln!(f, "          volume {v} on {target}")?,
                MountSource::Bind(p) => writeln!(f, "          bind {p} on {target}")?,
            }
        }
        writeln!(
            f,
            "          publish 127.0.0.1:<free port> -> {NODE_API_PORT}/tcp"
        )?;
        for (k, v) in &node.env {
            writeln!(f, "          env {k}={v}")?;
        }
        writeln!(f, "          env K3S_TOKEN=<random, kept in state>")?;
        for path in node.files.keys() {
            writeln!(f, "          file {path}")?;
        }
        for line in node.files[NODE_REGISTRIES_YAML].lines() {
            writeln!(f, "            {line}")?;
        }
        Ok(())
    }

    fn fmt_kubeconfigs(&self, f: &mut fmt::Formatter<'_>, node: &NodeSpec) -> fmt::Result {
        let dir = self.relative(&self.config.state_dir());
        writeln!(
            f,
            "kubeconfig {dir}/kubeconfig.host (https://127.0.0.1:<port>, for the host)"
        )?;
        writeln!(
            f,
            "           {dir}/kubeconfig (https://{}:{NODE_API_PORT}, for containers on the network)",
            node.container
        )
    }

    fn fmt_manifests(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.manifests.is_empty() {
            return writeln!(f, "manifests none declared");
        }
        writeln!(
            f,
            "manifests server-side apply, field manager `dev-env`, in this order:"
        )?;
        for (i, m) in self.manifests.iter().enumerate() {
            writeln!(
                f,
                "  {:>2}. {} ({}:{})",
                i + 1,
                m.display_name(),
                self.relative(&m.file),
                m.line
            )?;
        }
        Ok(())
    }

    fn fmt_components(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.config.components.is_empty() {
            return Ok(());
        }
        writeln!(f, "components")?;
        for (name, c) in &self.config.components {
            let r = &c.rollout;
            writeln!(
                f,
                "  {name}: {}/{}, rolls {} {}/{} container {}",
                self.config.registry.cluster_host,
                c.image,
                r.kind,
                r.namespace,
                r.name,
                r.container
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
