//! What `dev up` checks against the engine and the host before it changes
//! anything: the declared subnets must not overlap another Docker network,
//! and a declared registry port must be free (or already this environment's
//! registry's). Configuration checks need only the file; these need the
//! machine as it is now.

use std::{collections::HashMap, net::TcpListener};

use bollard::{
    Docker,
    models::{ContainerInspectResponse, Network},
    query_parameters::ListContainersOptionsBuilder,
};
use ipnet::IpNet;

use crate::{
    config::Config,
    docker::{self, LABEL_NAME, inspect_container},
};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Docker(#[from] docker::Error),
    #[error(
        "{at}: `{key}`: {subnet} overlaps Docker network `{network}` ({other}, {owner}); nothing was changed; choose a subnet no other network uses (`docker network ls` lists them, `docker network inspect {network}` shows its subnet)"
    )]
    SubnetOverlap {
        /// `file:line:col` of the key.
        at: String,
        key: &'static str,
        subnet: IpNet,
        network: String,
        other: IpNet,
        /// Whose the other network is, in words.
        owner: String,
    },
    #[error(
        "{at}: `registry.hostPort`: port {port} on 127.0.0.1 is already in use{holder}; nothing was changed; choose another port, or 0 to let dev-env pick a free one"
    )]
    PortInUse {
        /// `file:line:col` of the key.
        at: String,
        port: u16,
        /// ` by container `x``, when a container publishes it.
        holder: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{}", errors.iter().map(|e| crate::error_chain(e)).collect::<Vec<_>>().join("\n"))]
    Several { errors: Vec<Error> },
}

/// Runs every check; all conflicts found are reported together.
pub async fn check(docker: &Docker, config: &Config) -> Result<(), Error> {
    let mut errors = Vec::new();
    if crate::plan::needs_network(config) {
        let networks = docker
            .list_networks(None)
            .await
            .map_err(|e| docker::Error::api("list networks", e))?;
        errors.extend(overlaps(config, &networks));
    }
    if let Some(err) = port_conflict(docker, config).await? {
        errors.push(err);
    }
    match errors.len() {
        0 => Ok(()),
        1 => Err(errors.remove(0)),
        _ => Err(Error::Several { errors }),
    }
}

/// The declared subnets against every network but the environment's own
/// (same name and `dev-env.name` label).
fn overlaps(config: &Config, networks: &[Network]) -> Vec<Error> {
    let mut declared = vec![("network.ipv4Subnet", IpNet::V4(config.network.ipv4_subnet))];
    if let Some(v6) = config.network.ipv6_subnet {
        declared.push(("network.ipv6Subnet", IpNet::V6(v6)));
    }
    let mut errors = Vec::new();
    for network in networks {
        let name = network.name.clone().unwrap_or_default();
        let env = network.labels.as_ref().and_then(|l| l.get(LABEL_NAME));
        if name == config.network.name && env == Some(&config.name) {
            continue;
        }
        let subnets = network
            .ipam
            .as_ref()
            .and_then(|i| i.config.as_ref())
            .into_iter()
            .flatten()
            .filter_map(|c| c.subnet.as_deref()?.parse::<IpNet>().ok());
        for other in subnets {
            for &(key, subnet) in &declared {
                if overlap(subnet, other) {
                    errors.push(Error::SubnetOverlap {
                        at: config.locate(key),
                        key,
                        subnet,
                        network: name.clone(),
                        other,
                        owner: match env {
                            Some(env) => format!("of dev-env environment `{env}`"),
                            None => String::from("not made by dev-env"),
                        },
                    });
                }
            }
        }
    }
    errors
}

fn overlap(a: IpNet, b: IpNet) -> bool {
    a.contains(&b.network()) || b.contains(&a.network())
}

/// A declared registry port someone else holds.
async fn port_conflict(docker: &Docker, config: &Config) -> Result<Option<Error>, Error> {
    let port = config.registry.host_port;
    if port == 0 || config.registry.external.is_some() {
        return Ok(None);
    }
    if let Some(registry) = inspect_container(docker, &config.registry.name).await?
        && is_ours(&registry, config, port)
    {
        return Ok(None);
    }
    let Err(source) = TcpListener::bind(("127.0.0.1", port)) else {
        return Ok(None);
    };
    Ok(Some(Error::PortInUse {
        at: config.locate("registry.hostPort"),
        port,
        holder: holder(docker, port).await?,
        source,
    }))
}

/// Whether `container` is this environment's registry publishing `port`.
fn is_ours(container: &ContainerInspectResponse, config: &Config, port: u16) -> bool {
    let labels = container.config.as_ref().and_then(|c| c.labels.as_ref());
    let env = labels.and_then(|l| l.get(LABEL_NAME));
    let bindings = container
        .host_config
        .as_ref()
        .and_then(|h| h.port_bindings.as_ref());
    env == Some(&config.name) && publishes(bindings, port)
}

fn publishes(
    bindings: Option<&HashMap<String, Option<Vec<bollard::models::PortBinding>>>>,
    port: u16,
) -> bool {
    let wanted = port.to_string();
    bindings
        .into_iter()
        .flat_map(HashMap::values)
        .flatten()
        .flatten()
        .any(|b| b.host_port.as_deref() == Some(wanted.as_str()))
}

/// ` by container `x``, when a running container publishes `port`.
async fn holder(docker: &Docker, port: u16) -> Result<String, Error> {
    let options = ListContainersOptionsBuilder::default().build();
    let containers = docker
        .list_containers(Some(options))
        .await
        .map_err(|e| docker::Error::api("list containers", e))?;
    let name = containers.iter().find_map(|c| {
        let publishes = c
            .ports
            .iter()
            .flatten()
            .any(|p| p.public_port == Some(port));
        let name = c.names.as_ref()?.first()?;
        publishes.then(|| name.trim_start_matches('/').to_string())
    });
    Ok(name.map_or_else(String::new, |n| format!(" by container `{n}`")))
}

#[cfg(test)]
mod tests {
    use bollard::models::{Ipam, IpamConfig};

    use super::*;

    fn network(name: &str, env: Option<&str>, subnet: &str) -> Network {
        Network {
            name: Some(name.to_string()),
            labels: env.map(|e| HashMap::from([(LABEL_NAME.to_string(), e.to_string())])),
            ipam: Some(Ipam {
                config: Some(vec![IpamConfig {
                    subnet: Some(subnet.to_string()),
                    ..IpamConfig::default()
                }]),
                ..Ipam::default()
            }),
            ..Network::default()
        }
    }

    #[test]
    fn only_other_networks_overlapping_a_declared_subnet_are_reported() {
        let dir = tempfile::tempdir().unwrap();
        let text =
            "name: shop\nnetwork:\n  ipv4Subnet: 10.210.0.0/16\n  ipv6Subnet: 'fd00:1::/64'\n";
        let config = Config::parse(&dir.path().join("dev-env.yaml"), text).unwrap();
        let networks = [
            // The environment's own network.
            network("shop", Some("shop"), "10.210.0.0/16"),
            // Disjoint.
            network("bridge", None, "172.17.0.0/16"),
            // Inside the declared range, made by someone else.
            network("theirs", None, "10.210.3.0/24"),
            // Same name, another environment's label.
            network("shop", Some("other"), "fd00:1::/80"),
        ];
        let errors: Vec<String> = overlaps(&config, &networks)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(errors.len(), 2, "{errors:#?}");
        assert!(
            errors[0].contains(":3:15: `network.ipv4Subnet`")
                && errors[0].contains("`theirs` (10.210.3.0/24, not made by dev-env)"),
            "{}",
            errors[0]
        );
        assert!(
            errors[1].contains(":4:15: `network.ipv6Subnet`")
                && errors[1].contains("`shop` (fd00:1::/80, of dev-env environment `other`)"),
            "{}",
            errors[1]
        );
    }

    #[test]
    fn no_network_is_checked_for_a_cluster_and_registry_elsewhere() {
        let dir = tempfile::tempdir().unwrap();
        let parse = |text: &str| Config::parse(&dir.path().join("dev-env.yaml"), text).unwrap();
        let elsewhere = parse(
            "name: a\nregistry: {external: 'localhost:5000'}\ncluster: {provider: existing, context: c}\n",
        );
        assert!(!crate::plan::needs_network(&elsewhere));
        assert!(crate::plan::needs_network(&parse("name: a\n")));
    }
}
