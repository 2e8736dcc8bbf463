//! The shared bridge network that the registry and the node attach to, so
//! pods reach the registry by its container name.

use bollard::{
    Docker,
    models::{
        ContainerSummary, EndpointSettings, Ipam, IpamConfig, NetworkConnectRequest,
        NetworkCreateRequest, NetworkDisconnectRequest, NetworkInspect,
    },
};

use crate::{
    config::Config,
    docker::{self, LABEL_NAME, LABEL_ROLE, is_conflict, is_not_found},
    plan::{self, Drift, NetworkSpec, Object, Ownership},
};

/// The label kube-sim's Docker kubelet puts on a pod's containers.
const LABEL_POD_NAME: &str = "io.kubernetes.pod.name";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Docker(#[from] docker::Error),
    #[error(
        "network `{name}` is still used by {containers}; stop them (`docker network inspect {name}`) or run `cargo xtask dev reset` from the environment that owns them"
    )]
    InUse { name: String, containers: String },
}

/// What [`ensure`] found or did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ensured {
    Created,
    Unchanged,
    /// It exists with another configuration; nothing was changed.
    Drifted(Drift),
}

/// Makes sure the network of `spec` exists. An existing network with a
/// different configuration is reported, not changed: the caller decides
/// whether to recreate it. Two processes creating it at once both succeed.
pub async fn ensure(docker: &Docker, env: &str, spec: &NetworkSpec) -> Result<Ensured, Error> {
    if let Some(existing) = inspect(docker, &spec.name).await? {
        return Ok(match drift(&existing, spec) {
            Some(drift) => Ensured::Drifted(drift),
            None => Ensured::Unchanged,
        });
    }
    // The gateway is declared, not left to the engine: pods reach the host
    // there as `host.docker.internal` (`host::gateway`).
    let gateway = spec
        .ipv4_subnet
        .parse::<ipnet::Ipv4Net>()
        .ok()
        .and_then(|net| net.hosts().next())
        .map(|ip| ip.to_string());
    let mut config = vec![IpamConfig {
        subnet: Some(spec.ipv4_subnet.clone()),
        gateway,
        ..IpamConfig::default()
    }];
    if let Some(v6) = &spec.ipv6_subnet {
        config.push(IpamConfig {
            subnet: Some(v6.clone()),
            ..IpamConfig::default()
        });
    }
    let request = NetworkCreateRequest {
        name: spec.name.clone(),
        driver: Some(String::from("bridge")),
        enable_ipv6: Some(spec.ipv6_subnet.is_some()),
        ipam: Some(Ipam {
            driver: Some(String::from("default")),
            config: Some(config),
            options: None,
        }),
        labels: Some(plan::labels(env, "network", spec)),
        ..NetworkCreateRequest::default()
    };
    match docker.create_network(request).await {
        Ok(_) => Ok(Ensured::Created),
        // Another process created it between our inspect and create.
        Err(e) if is_conflict(&e) => match inspect(docker, &spec.name).await? {
            Some(existing) => {
                Ok(drift(&existing, spec).map_or(Ensured::Unchanged, Ensured::Drifted))
            }
            None => Err(docker::Error::api(format!("create network `{}`", spec.name), e).into()),
        },
        Err(e) => Err(docker::Error::api(format!("create network `{}`", spec.name), e).into()),
    }
}

/// Removes the network; `false` when it was already gone.
pub async fn remove(docker: &Docker, name: &str) -> Result<bool, Error> {
    match docker.remove_network(name).await {
        Ok(()) => Ok(true),
        Err(e) if is_not_found(&e) => Ok(false),
        Err(e) => {
            if let Some(existing) = inspect(docker, name).await? {
                let containers: Vec<String> = existing
                    .containers
                    .unwrap_or_default()
                    .values()
                    .filter_map(|c| c.name.clone())
                    .collect();
                if !containers.is_empty() {
                    return Err(Error::InUse {
                        name: name.to_string(),
                        containers: containers.join(", "),
                    });
                }
            }
            Err(docker::Error::api(format!("remove network `{name}`"), e).into())
        }
    }
}

/// Attaches every container of the environment (registry, node, pods) to
/// its network when it is not: a network removed and recreated under a
/// running environment leaves them detached, or attached to an endpoint of
/// the network that is gone. Each gets the alias others reach it by.
/// Returns the names of the containers attached.
pub async fn attach_environment(docker: &Docker, config: &Config) -> Result<Vec<String>, Error> {
    let name = &config.network.name;
    let Some(network) = inspect(docker, name).await? else {
        return Ok(Vec::new());
    };
    let labels = vec![format!("{LABEL_NAME}={}", config.name)];
    let what = format!("the containers of `{}`", config.name);
    let containers = docker::containers_labelled(docker, labels, &what).await?;
    let mut attached = Vec::new();
    for container in containers {
        let Some(id) = container.id.clone() else {
            continue;
        };
        let endpoint = container
            .network_settings
            .as_ref()
            .and_then(|n| n.networks.as_ref())
            .and_then(|n| n.get(name));
        if endpoint.is_some_and(|e| e.network_id.is_some() && e.network_id == network.id) {
            continue;
        }
        let display = docker::container_name(&container).unwrap_or_else(|| id.clone());
        if endpoint.is_some() {
            let request = NetworkDisconnectRequest {
                container: id.clone(),
                force: Some(true),
            };
            let _ = docker.disconnect_network(name, request).await;
        }
        let request = NetworkConnectRequest {
            container: id,
            endpoint_config: Some(EndpointSettings {
                aliases: alias_of(config, &container).map(|a| vec![a]),
                ..EndpointSettings::default()
            }),
        };
        docker.connect_network(name, request).await.map_err(|e| {
            docker::Error::api(format!("attach `{display}` to network `{name}`"), e)
        })?;
        attached.push(display);
    }
    Ok(attached)
}

/// The name others reach a container of the environment by.
fn alias_of(config: &Config, container: &ContainerSummary) -> Option<String> {
    let labels = container.labels.as_ref()?;
    match labels.get(LABEL_ROLE).map(String::as_str) {
        Some(crate::registry::ROLE) => Some(config.registry.name.clone()),
        Some("node") => Some(config.node_name()),
        _ => labels.get(LABEL_POD_NAME).cloned(),
    }
}

/// The IPv4 gateway of an existing network, as its IPAM configuration says.
pub fn ipv4_gateway(network: &NetworkInspect) -> Option<String> {
    network
        .ipam
        .as_ref()?
        .config
        .as_ref()?
        .iter()
        .filter_map(|c| c.gateway.clone())
        .find(|g| !g.contains(':'))
}

pub async fn inspect(docker: &Docker, name: &str) -> Result<Option<NetworkInspect>, Error> {
    match docker.inspect_network(name, None).await {
        Ok(it) => Ok(Some(it)),
        Err(e) if is_not_found(&e) => Ok(None),
        Err(e) => Err(docker::Error::api(format!("inspect network `{name}`"), e).into()),
    }
}

/// How an existing network differs from `spec`. A network the harness
/// created carries its declared spec in a label; one created by hand is
/// compared by its IPAM configuration.
pub fn drift(existing: &NetworkInspect, spec: &NetworkSpec) -> Option<Drift> {
    let labels = existing.labels.clone().unwrap_or_default();
    match plan::drift_from_labels(&labels, Object::Network, &spec.name, spec) {
        Ownership::Matches => return None,
        Ownership::Drifted(drift) => return Some(drift),
        Ownership::NotOurs => {}
    }
    let subnets: Vec<String> = existing
        .ipam
        .as_ref()
        .and_then(|i| i.config.as_ref())
        .map(|c| c.iter().filter_map(|c| c.subnet.clone()).collect())
        .unwrap_or_default();
    let actual = NetworkSpec {
        name: spec.name.clone(),
        ipv4_subnet: subnets
            .iter()
            .find(|s| !s.contains(':'))
            .cloned()
            .unwrap_or_default(),
        ipv6_subnet: subnets.iter().find(|s| s.contains(':')).cloned(),
    };
    Drift::between(Object::Network, &spec.name, &actual, spec)
}
