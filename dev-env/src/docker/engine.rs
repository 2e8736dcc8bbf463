//! What kind of engine answers, learnt once per run from `docker info` and
//! `docker version`, and what follows from it: where a node finds the
//! engine's socket, how pods reach the host, how a k3s node must be set up
//! and what cannot work. Every decision is a pure function of [`Facts`],
//! tested on `/info` answers recorded from each engine's documented format.

use std::net::Ipv4Addr;

use bollard::{
    Docker,
    models::{SystemInfo, SystemVersion},
};

use super::{Endpoint, Error};

/// What the engine says of itself.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Facts {
    /// `OperatingSystem`: "Docker Desktop", "OrbStack", a distribution.
    pub operating_system: String,
    /// `Name`: the engine's host name ("colima", "lima-rancher-desktop").
    pub name: String,
    pub kernel: String,
    pub architecture: String,
    /// `SecurityOptions` holds `name=rootless`.
    pub rootless: bool,
    /// `CgroupVersion`: "1" or "2".
    pub cgroup_version: String,
    /// `CgroupDriver`: "systemd", "cgroupfs", "none".
    pub cgroup_driver: String,
    /// Whether the engine can limit memory, pids and CPU shares: with
    /// cgroup v2 in a rootless engine, only when systemd delegates them.
    pub delegated: bool,
    /// `Driver`: the storage driver ("overlay2", "btrfs", "overlayfs").
    pub storage_driver: String,
    /// `docker version` lists a "Podman Engine" component.
    pub podman: bool,
    /// The operating system this process runs on (`std::env::consts::OS`).
    pub client_os: String,
}

/// The engines whose behaviour differs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Docker Engine on this Linux machine (or a remote one, over TCP).
    Linux,
    /// Docker Desktop: macOS, Windows (WSL2) or Linux, in a VM.
    DockerDesktop,
    OrbStack,
    /// colima: lima's VM, the host at `host.lima.internal`.
    Colima,
    RancherDesktop,
    Podman,
}

impl Facts {
    /// The facts of an engine's `/info` and `/version` answers, on a client
    /// running on `client_os`.
    pub fn from_answers(info: &SystemInfo, version: &SystemVersion, client_os: &str) -> Facts {
        let text = |v: &Option<String>| v.clone().unwrap_or_default();
        let security = info.security_options.clone().unwrap_or_default();
        let podman = version
            .components
            .iter()
            .flatten()
            .any(|c| c.name.to_ascii_lowercase().contains("podman"));
        Facts {
            operating_system: text(&info.operating_system),
            name: text(&info.name),
            kernel: text(&info.kernel_version),
            architecture: text(&info.architecture),
            rootless: security
                .iter()
                .any(|o| o.split(',').any(|p| p == "name=rootless")),
            cgroup_version: info
                .cgroup_version
                .map(|v| v.to_string())
                .unwrap_or_default(),
            cgroup_driver: info
                .cgroup_driver
                .map(|d| d.to_string())
                .unwrap_or_default(),
            delegated: [info.memory_limit, info.pids_limit, info.cpu_shares]
                .iter()
                .all(|limit| *limit == Some(true)),
            storage_driver: text(&info.driver),
            podman,
            client_os: client_os.to_string(),
        }
    }

    /// Which engine this is.
    pub fn kind(&self) -> Kind {
        let os = self.operating_system.to_ascii_lowercase();
        if self.podman {
            Kind::Podman
        } else if os.starts_with("docker desktop") {
            Kind::DockerDesktop
        } else if os.contains("orbstack") || self.kernel.contains("orbstack") {
            Kind::OrbStack
        } else if self.name.contains("rancher-desktop") || os.contains("rancher desktop") {
            Kind::RancherDesktop
        } else if self.name == "colima" || self.name.starts_with("colima-") {
            Kind::Colima
        } else {
            Kind::Linux
        }
    }

    /// Whether the engine runs in a VM of its own, whose filesystem and
    /// network are not this machine's.
    pub fn in_vm(&self) -> bool {
        match self.kind() {
            Kind::Linux => false,
            Kind::Podman => self.client_os != "linux",
            _ => true,
        }
    }
}

/// Asks the engine for its facts.
pub async fn facts(docker: &Docker) -> Result<Facts, Error> {
    let info = docker
        .info()
        .await
        .map_err(|e| Error::api("read `docker info`", e))?;
    let version = docker
        .version()
        .await
        .map_err(|e| Error::api("read `docker version`", e))?;
    Ok(Facts::from_answers(&info, &version, std::env::consts::OS))
}

impl std::fmt::Display for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Kind::Linux => "Docker Engine",
            Kind::DockerDesktop => "Docker Desktop",
            Kind::OrbStack => "OrbStack",
            Kind::Colima => "colima",
            Kind::RancherDesktop => "Rancher Desktop",
            Kind::Podman => "Podman",
        })
    }
}

/// The variable that names the engine's socket as the engine itself sees
/// it, for engines where dev-env cannot know it (as k3d's `DOCKER_SOCK`).
pub const SOCKET_OVERRIDE: &str = "DEV_ENV_DOCKER_SOCK";

/// The path of the engine's socket on the engine's own machine: what a
/// node container bind-mounts to reach it. The engine resolves a bind
/// source in its VM, not on this machine, so a VM's engine is mounted at
/// its VM's default socket (Docker Desktop maps that path to itself).
pub fn node_socket(
    facts: &Facts,
    endpoint: &Endpoint,
    overridden: Option<&str>,
) -> Result<String, Refusal> {
    if let Some(path) = overridden.filter(|p| !p.is_empty()) {
        return Ok(path.to_string());
    }
    let local = match endpoint {
        Endpoint::Unix(path) if !facts.in_vm() => Some(path.display().to_string()),
        _ => None,
    };
    match (facts.kind(), local) {
        (_, Some(path)) => Ok(path),
        (Kind::Podman, None) => Err(Refusal::PodmanSocket),
        _ => Ok(super::endpoint::DEFAULT_SOCKET.to_string()),
    }
}

/// How pods reach the host that runs dev-env.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostAddress {
    /// The environment network's gateway: the host itself on rootful
    /// Linux.
    Gateway(Ipv4Addr),
    /// Docker's `host-gateway`, which the engine resolves to the host (its
    /// `host-gateway-ip`): Docker Desktop, OrbStack, Rancher Desktop and
    /// Podman point it at the machine outside their VM.
    HostGateway,
    /// A fixed address the engine's network routes to the host.
    Fixed(Ipv4Addr),
}

/// Where pods find the host, and what the user should know about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostRoute {
    pub address: HostAddress,
    pub caveat: Option<String>,
}

/// lima's address of the host (`host.lima.internal`), which colima's VM
/// routes to the Mac.
pub const LIMA_HOST: Ipv4Addr = Ipv4Addr::new(192, 168, 5, 2);
/// RootlessKit's address of the host, reachable when its host loopback is
/// enabled.
pub const ROOTLESSKIT_HOST: Ipv4Addr = Ipv4Addr::new(10, 0, 2, 2);

/// How pods reach the host, for an engine at `endpoint` whose environment
/// network has `gateway`.
pub fn host_route(facts: &Facts, endpoint: &Endpoint, gateway: Ipv4Addr) -> HostRoute {
    let route = |address, caveat: Option<&str>| HostRoute {
        address,
        caveat: caveat.map(str::to_string),
    };
    match facts.kind() {
        Kind::DockerDesktop | Kind::OrbStack | Kind::RancherDesktop | Kind::Podman => {
            route(HostAddress::HostGateway, None)
        }
        Kind::Colima => route(HostAddress::Fixed(LIMA_HOST), None),
        Kind::Linux if facts.rootless => route(
            HostAddress::Fixed(ROOTLESSKIT_HOST),
            Some(
                "rootless Docker: pods reach the host at 10.0.2.2 only with RootlessKit's host loopback on (`DOCKERD_ROOTLESS_ROOTLESSKIT_DISABLE_HOST_LOOPBACK=false` in the engine's environment)",
            ),
        ),
        Kind::Linux if matches!(endpoint, Endpoint::Tcp { .. }) => route(
            HostAddress::Gateway(gateway),
            Some(
                "the engine is reached over TCP: `host.docker.internal` is the engine's machine, which is this one only when the engine runs here",
            ),
        ),
        Kind::Linux => route(HostAddress::Gateway(gateway), None),
    }
}

impl HostAddress {
    /// The value of a container's extra host (`name:<this>`).
    pub fn extra_host_value(&self) -> String {
        match self {
            HostAddress::Gateway(ip) | HostAddress::Fixed(ip) => ip.to_string(),
            HostAddress::HostGateway => String::from("host-gateway"),
        }
    }
}

/// What cannot work on this engine, with the fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error(
        "k3s in a rootless engine needs cgroup v2 (the engine reports cgroup v{version}); boot with `systemd.unified_cgroup_hierarchy=1`, or use `cluster.provider: sim`"
    )]
    RootlessCgroupV1 { version: String },
    #[error(
        "k3s in a rootless engine needs systemd to delegate the cpu, memory and pids controllers, and this engine cannot set those limits; add `Delegate=yes` to `user@.service` (see Docker's rootless guide, \"Limiting resources\"), or use `cluster.provider: sim`"
    )]
    RootlessNotDelegated,
    #[error(
        "the node mounts the engine's socket as the engine sees it, and a Podman machine's socket path cannot be known from here; set `{SOCKET_OVERRIDE}` to it (`podman machine ssh -- ls /run/podman/podman.sock`)"
    )]
    PodmanSocket,
}

/// Why a k3s node cannot run on this engine, if it cannot.
pub fn k3s_refusal(facts: &Facts) -> Option<Refusal> {
    if !facts.rootless {
        return None;
    }
    if facts.cgroup_version != "2" {
        return Some(Refusal::RootlessCgroupV1 {
            version: facts.cgroup_version.clone(),
        });
    }
    (!facts.delegated).then_some(Refusal::RootlessNotDelegated)
}

/// What a k3s node needs on this engine beyond the defaults.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct K3sNode {
    /// Extra `k3s server` arguments.
    pub args: Vec<String>,
    /// Host devices to bind into the node.
    pub devices: Vec<String>,
}

/// The k3s node's settings for this engine: the kubelet's user-namespace
/// mode in rootless engines (as kind and k3d's Podman guide set it), and
/// `/dev/mapper` where the storage sits on btrfs or device-mapper (as kind
/// mounts it).
pub fn k3s_node(facts: &Facts) -> K3sNode {
    let mut node = K3sNode::default();
    if facts.rootless {
        node.args.push(String::from(
            "--kubelet-arg=feature-gates=KubeletInUserNamespace=true",
        ));
    }
    if matches!(facts.storage_driver.as_str(), "btrfs" | "devicemapper") {
        node.devices.push(String::from("/dev/mapper"));
    }
    node
}

#[cfg(test)]
mod tests;
