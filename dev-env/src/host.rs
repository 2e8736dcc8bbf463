//! The host as pods see it: `host.docker.internal` resolves, in every pod,
//! to where the engine routes the machine dev-env runs on
//! ([`crate::docker::engine::host_route`]). On Docker Engine on Linux that
//! is the gateway of the environment's own Docker network (its IPAM
//! gateway, which dev-env declares as the subnet's first address), where a
//! process on the host can listen for calls from the cluster: Docker's own
//! `host-gateway` names the default bridge's gateway there, which is not
//! on the path pods on this network take. Engines in a VM (Docker Desktop,
//! OrbStack, Rancher Desktop, Podman) resolve `host-gateway` to the machine
//! outside the VM, colima routes lima's 192.168.5.2 there, and rootless
//! Docker RootlessKit's 10.0.2.2.
//!
//! The node container gets the name as an extra host. kube-sim's Docker
//! kubelet passes its own `host.docker.internal` entry on to every pod
//! container; on k3s, pods resolve through CoreDNS, so the name is added to
//! the `NodeHosts` of its `coredns` ConfigMap, as k3d does for
//! `host.k3d.internal`.

use std::{net::Ipv4Addr, time::Duration};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::{
    Api, Client,
    api::{Patch, PatchParams},
};

use crate::{
    config::Config,
    docker::engine::HostAddress,
    wait::{self, Step},
};

/// The name pods call the host by.
pub const HOST_NAME: &str = "host.docker.internal";

/// The `coredns` ConfigMap's key that CoreDNS serves as a hosts file.
const NODE_HOSTS: &str = "NodeHosts";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(
        "k3s has not written its CoreDNS ConfigMap kube-system/coredns within {}s, so pods cannot resolve `{HOST_NAME}`; `cargo xtask dev logs` and `docker logs <node>` show why",
        timeout.as_secs()
    )]
    NoCoreDns { timeout: Duration },
    #[error(
        "the engine gave node {container} no `{HOST_NAME}` line in /etc/hosts for its `host-gateway`; `docker exec {container} cat /etc/hosts` shows what it has"
    )]
    NoHostLine { container: String },
    #[error("cannot read /etc/hosts in node {container}")]
    ReadHosts {
        container: String,
        #[source]
        source: bollard::errors::Error,
    },
    #[error(
        "adding `{HOST_NAME}` to kube-system/coredns: {}",
        crate::apply::api_error(error)
    )]
    Api { error: kube::Error },
}

/// The address of the host on the environment's network: the gateway of
/// its IPv4 subnet.
pub fn gateway(config: &Config) -> Ipv4Addr {
    config
        .network
        .ipv4_subnet
        .hosts()
        .next()
        .unwrap_or(config.network.ipv4_subnet.network())
}

/// The address pods of a k3s node reach the host at: the one the setup
/// names, or for Docker's `host-gateway`, the one the engine wrote into the
/// node's `/etc/hosts`.
pub async fn node_address(
    docker: &bollard::Docker,
    container: &str,
    host: &HostAddress,
) -> Result<Ipv4Addr, Error> {
    match host {
        HostAddress::Gateway(ip) | HostAddress::Fixed(ip) => Ok(*ip),
        HostAddress::HostGateway => {
            let hosts = read_file(docker, container, "/etc/hosts").await?;
            address_in_hosts(&hosts).ok_or_else(|| Error::NoHostLine {
                container: container.to_string(),
            })
        }
    }
}

/// The IPv4 address `hosts` gives `host.docker.internal`.
pub fn address_in_hosts(hosts: &str) -> Option<Ipv4Addr> {
    hosts.lines().find_map(|line| {
        let line = line.split('#').next()?;
        let mut fields = line.split_whitespace();
        let address: Ipv4Addr = fields.next()?.parse().ok()?;
        fields.any(|name| name == HOST_NAME).then_some(address)
    })
}

/// The text of `path` in a running container, by `cat` in it (k3s's image
/// has a shell and coreutils).
async fn read_file(docker: &bollard::Docker, container: &str, path: &str) -> Result<String, Error> {
    use bollard::exec::{CreateExecOptions, StartExecResults};
    use futures::StreamExt;
    let failed = |source| Error::ReadHosts {
        container: container.to_string(),
        source,
    };
    let exec = docker
        .create_exec(
            container,
            CreateExecOptions {
                cmd: Some(vec!["cat", path]),
                attach_stdout: Some(true),
                ..Default::default()
            },
        )
        .await
        .map_err(failed)?;
    let mut text = String::new();
    if let StartExecResults::Attached { mut output, .. } =
        docker.start_exec(&exec.id, None).await.map_err(failed)?
    {
        while let Some(chunk) = output.next().await {
            text.push_str(&chunk.map_err(failed)?.to_string());
        }
    }
    Ok(text)
}

/// `hosts` with a line `<address> host.docker.internal`, any earlier line
/// for that name replaced; `None` when it is there already.
pub fn with_host_line(hosts: &str, address: Ipv4Addr) -> Option<String> {
    let line = format!("{address} {HOST_NAME}");
    let mut lines: Vec<&str> = hosts
        .lines()
        .filter(|l| !l.split_whitespace().skip(1).any(|name| name == HOST_NAME))
        .collect();
    if hosts.lines().any(|l| l.trim() == line) && lines.len() + 1 == hosts.lines().count() {
        return None;
    }
    lines.push(&line);
    let mut text = lines.join("\n");
    text.push('\n');
    Some(text)
}

/// Adds `host.docker.internal` to k3s's CoreDNS hosts, waiting up to
/// `timeout` for k3s to write the ConfigMap. k3s keeps the lines it did not
/// write when it updates its own node's.
pub async fn ensure_core_dns(
    client: &Client,
    address: Ipv4Addr,
    timeout: Duration,
) -> Result<(), Error> {
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), "kube-system");
    let found = wait::poll(
        "k3s's CoreDNS ConfigMap kube-system/coredns",
        timeout,
        || async {
            match maps.get_opt("coredns").await {
                Ok(Some(map)) => Ok(Step::Done(map)),
                Ok(None) => Ok(Step::Pending(String::from("no ConfigMap yet"))),
                Err(error) => Err(Error::Api { error }),
            }
        },
    )
    .await;
    let map = match found {
        Ok(Ok(map)) => map,
        Ok(Err(e)) => return Err(e),
        Err(_) => return Err(Error::NoCoreDns { timeout }),
    };
    let hosts = map
        .data
        .as_ref()
        .and_then(|d| d.get(NODE_HOSTS))
        .cloned()
        .unwrap_or_default();
    let Some(hosts) = with_host_line(&hosts, address) else {
        return Ok(());
    };
    let patch = serde_json::json!({ "data": { NODE_HOSTS: hosts } });
    maps.patch("coredns", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(|error| Error::Api { error })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_host_line_is_added_once_and_replaces_a_stale_one() {
        let ip = Ipv4Addr::new(10, 1, 2, 1);
        assert_eq!(
            with_host_line("10.1.2.3 node\n", ip).as_deref(),
            Some("10.1.2.3 node\n10.1.2.1 host.docker.internal\n")
        );
        assert_eq!(
            with_host_line("10.1.2.3 node\n10.1.2.1 host.docker.internal\n", ip),
            None
        );
        assert_eq!(
            with_host_line("10.9.9.9 host.docker.internal\n10.1.2.3 node", ip).as_deref(),
            Some("10.1.2.3 node\n10.1.2.1 host.docker.internal\n")
        );
    }

    #[test]
    fn the_engines_host_gateway_line_is_read_back_from_the_nodes_hosts_file() {
        let hosts = "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost\n\
                     192.168.65.254\thost.docker.internal\n172.18.0.3\tdemo-node\n";
        assert_eq!(
            address_in_hosts(hosts),
            Some(Ipv4Addr::new(192, 168, 65, 254))
        );
        assert_eq!(address_in_hosts("127.0.0.1 localhost\n"), None);
        assert_eq!(
            address_in_hosts(
                "# 10.0.0.1 host.docker.internal\n10.0.0.2 other host.docker.internal\n"
            ),
            Some(Ipv4Addr::new(10, 0, 0, 2))
        );
    }

    #[test]
    fn the_gateway_is_the_subnets_first_address() {
        let config = crate::config::Config::parse(
            std::path::Path::new("/nonexistent/dev-env.yaml"),
            "name: a\nnetwork: {ipv4Subnet: 10.211.4.0/24}\n",
        )
        .unwrap();
        assert_eq!(gateway(&config), Ipv4Addr::new(10, 211, 4, 1));
    }
}
