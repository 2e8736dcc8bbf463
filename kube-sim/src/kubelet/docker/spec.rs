//! A pod container as the engine creates it: name, labels, image, command, environment, user and
//! security options, the network alias, and the service-account files.

use std::collections::{BTreeMap, HashMap};

use bollard::models::{
    ContainerCreateBody, EndpointSettings, HostConfig, Mount, MountType, NetworkingConfig,
};
use serde_json::Value;

use super::{
    CONTAINER_LABEL, NAMESPACE_LABEL, NODE_LABEL, POD_LABEL, SERVICE_ACCOUNT_DIR, UID_LABEL,
};
use crate::meta;

/// The container name `docker ps` shows for a pod container.
pub fn container_name(pod: &Value, container: &str) -> String {
    let uid = meta::str_at(pod, "/metadata/uid").unwrap_or("");
    format!(
        "k8s_{container}_{}_{}_{}",
        meta::name_of(pod),
        meta::namespace_of(pod),
        &uid[..uid.len().min(8)]
    )
}

/// The labels of a pod container: the configured ones, the node, and the pod and container it runs.
pub(super) fn container_labels(
    configured: &BTreeMap<String, String>,
    node: &str,
    pod: &Value,
    container_name_in_pod: &str,
) -> HashMap<String, String> {
    let mut labels: HashMap<String, String> = configured
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    labels.insert(NODE_LABEL.into(), node.to_string());
    labels.insert(NAMESPACE_LABEL.into(), meta::namespace_of(pod).to_string());
    labels.insert(POD_LABEL.into(), meta::name_of(pod).to_string());
    labels.insert(
        UID_LABEL.into(),
        meta::str_at(pod, "/metadata/uid").unwrap_or("").to_string(),
    );
    labels.insert(CONTAINER_LABEL.into(), container_name_in_pod.to_string());
    labels
}

/// The create request of a pod container running `image` on `network`, reachable there by the pod's name.
pub(super) fn create_body(
    pod: &Value,
    container: &Value,
    image: String,
    env: Vec<String>,
    labels: HashMap<String, String>,
    network: &str,
) -> ContainerCreateBody {
    let ports: Vec<String> = container["ports"]
        .as_array()
        .map(|ps| {
            ps.iter()
                .filter_map(|p| {
                    let port = p["containerPort"].as_i64()?;
                    let proto = p["protocol"].as_str().unwrap_or("TCP").to_lowercase();
                    Some(format!("{port}/{proto}"))
                })
                .collect()
        })
        .unwrap_or_default();
    let strings = |v: &Value| {
        v.as_array().map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(str::to_string))
                .collect()
        })
    };
    let hostname: String = meta::name_of(pod).chars().take(63).collect();
    let no_new_privileges = container
        .pointer("/securityContext/allowPrivilegeEscalation")
        .is_some_and(|v| v == false);
    ContainerCreateBody {
        image: Some(image),
        hostname: Some(hostname),
        entrypoint: strings(&container["command"]),
        cmd: strings(&container["args"]),
        env: Some(env),
        working_dir: container["workingDir"].as_str().map(str::to_string),
        labels: Some(labels),
        exposed_ports: (!ports.is_empty()).then_some(ports),
        user: run_as(pod, container),
        // `stdin`, `stdinOnce` and `tty` as a CRI runtime takes them, for `kubectl attach`.
        open_stdin: container["stdin"].as_bool(),
        stdin_once: container["stdinOnce"].as_bool(),
        tty: container["tty"].as_bool(),
        host_config: Some(HostConfig {
            network_mode: Some(network.to_string()),
            readonly_rootfs: container
                .pointer("/securityContext/readOnlyRootFilesystem")
                .and_then(Value::as_bool),
            security_opt: no_new_privileges.then(|| vec!["no-new-privileges:true".to_string()]),
            // The service-account files live in an anonymous volume, so they can be copied in before the
            // start even when the root filesystem is read-only.
            mounts: Some(vec![Mount {
                target: Some(format!("/{SERVICE_ACCOUNT_DIR}")),
                typ: Some(MountType::VOLUME),
                ..Mount::default()
            }]),
            extra_hosts: Some(extra_hosts(pod)),
            ..HostConfig::default()
        }),
        networking_config: Some(NetworkingConfig {
            endpoints_config: Some(HashMap::from([(
                network.to_string(),
                EndpointSettings {
                    aliases: Some(vec![meta::name_of(pod).to_string()]),
                    ..EndpointSettings::default()
                },
            )])),
        }),
        ..ContainerCreateBody::default()
    }
}

/// The name under which containers on a Docker network reach the host.
const HOST_NAME: &str = "host.docker.internal";

/// The `/etc/hosts` entries of a pod container (`name:address`): the pod's `hostAliases`, and the node's own
/// `host.docker.internal` entry, so pods reach the host at the address the node was given for it.
fn extra_hosts(pod: &Value) -> Vec<String> {
    static NODE_HOST: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    let node_host = NODE_HOST.get_or_init(|| {
        let hosts = std::fs::read_to_string("/etc/hosts").ok()?;
        host_address(&hosts, HOST_NAME).map(str::to_string)
    });
    let mut entries: Vec<String> = node_host
        .iter()
        .map(|address| format!("{HOST_NAME}:{address}"))
        .collect();
    for alias in pod
        .pointer("/spec/hostAliases")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let Some(ip) = alias["ip"].as_str() else {
            continue;
        };
        for name in alias["hostnames"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
        {
            entries.push(format!("{name}:{ip}"));
        }
    }
    entries
}

/// The address a hosts file gives `name`, the last line naming it winning as in the resolver.
fn host_address<'a>(hosts: &'a str, name: &str) -> Option<&'a str> {
    hosts
        .lines()
        .map(|l| l.split('#').next().unwrap_or(""))
        .filter_map(|l| {
            let mut fields = l.split_whitespace();
            let address = fields.next()?;
            fields.any(|n| n == name).then_some(address)
        })
        .next_back()
}

/// `user[:group]` from `runAsUser` and `runAsGroup`, the container's over the pod's.
fn run_as(pod: &Value, container: &Value) -> Option<String> {
    let security = |field: &str| {
        container
            .pointer(&format!("/securityContext/{field}"))
            .or_else(|| pod.pointer(&format!("/spec/securityContext/{field}")))
            .and_then(Value::as_i64)
    };
    match (security("runAsUser"), security("runAsGroup")) {
        (Some(u), Some(g)) => Some(format!("{u}:{g}")),
        (Some(u), None) => Some(u.to_string()),
        (None, _) => None,
    }
}

/// A tar of the service-account directory's files: `token`, `ca.crt` and `namespace`, readable by any user
/// the container runs as.
pub(super) fn service_account_tar(
    token: &str,
    ca_pem: &str,
    namespace: &str,
) -> std::io::Result<Vec<u8>> {
    let mut builder = tar::Builder::new(Vec::new());
    for (name, contents) in [
        ("token", token),
        ("ca.crt", ca_pem),
        ("namespace", namespace),
    ] {
        let mut header = tar::Header::new_gnu();
        header.set_mode(0o644);
        header.set_size(contents.len() as u64);
        header.set_cksum();
        builder.append_data(&mut header, name, contents.as_bytes())?;
    }
    builder.into_inner()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_nodes_host_entry_and_the_pods_host_aliases_become_extra_hosts() {
        let hosts =
            "127.0.0.1 localhost\n# 1.1.1.1 host.docker.internal\n10.2.3.1\thost.docker.internal\n";
        assert_eq!(host_address(hosts, HOST_NAME), Some("10.2.3.1"));
        assert_eq!(host_address(hosts, "other"), None);
        let pod = serde_json::json!({"spec": {"hostAliases": [{"ip": "10.0.0.9", "hostnames": ["a", "b"]}]}});
        let entries = extra_hosts(&pod);
        assert!(
            entries.ends_with(&["a:10.0.0.9".to_string(), "b:10.0.0.9".to_string()]),
            "{entries:?}"
        );
    }
}
