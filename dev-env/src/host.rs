//! The host as pods see it: `host.docker.internal` resolves, in every pod,
//! to the gateway of the environment's own Docker network (its IPAM
//! gateway, which dev-env declares as the subnet's first address), where a
//! process on the host can listen for calls from the cluster. Docker's
//! own `host-gateway` names the default bridge's gateway instead, which is
//! not on the path pods on this network take.
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
    fn the_gateway_is_the_subnets_first_address() {
        let config = crate::config::Config::parse(
            std::path::Path::new("/nonexistent/dev-env.yaml"),
            "name: a\nnetwork: {ipv4Subnet: 10.211.4.0/24}\n",
        )
        .unwrap();
        assert_eq!(gateway(&config), Ipv4Addr::new(10, 211, 4, 1));
    }
}
