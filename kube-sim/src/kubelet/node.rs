//! The nodes a kubelet registers: their names, addresses and pod networks, and the Node objects.
//!
//! A Node reports the architecture of its runtime's [`Platform`] in its `kubernetes.io/arch` and
//! `beta.kubernetes.io/arch` labels and in `status.nodeInfo.architecture`, in Go's names, as a kubelet
//! reports the `runtime.GOARCH` it was built for.

use serde_json::json;

use super::{Config, Error, MANAGER};
use crate::meta;
use crate::platform::Platform;
use crate::resource::GroupResource;
use crate::store::{self, Endpoint, Store, WriteOptions};

/// One node's identity.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeIdentity {
    /// The node name.
    pub name: String,
    /// Its address (`hostIP`).
    pub ip: String,
    /// The first three octets of its pods' addresses.
    pub pod_network: String,
}

impl Config {
    /// The nodes: the first named [`Config::node_name`] at [`Config::node_ip`] with [`Config::pod_network`],
    /// node `i` named `<node_name>-i`, the next address and the next `/24`.
    pub fn node_identities(&self) -> Vec<NodeIdentity> {
        (0..self.nodes.max(1))
            .map(|i| NodeIdentity {
                name: if i == 0 {
                    self.node_name.clone()
                } else {
                    format!("{}-{i}", self.node_name)
                },
                ip: shift_last_octet(&self.node_ip, i),
                pod_network: shift_last_octet(&self.pod_network, i),
            })
            .collect()
    }
}

/// An address (or a prefix of one) with its last number increased by `by`; unchanged if it has none.
fn shift_last_octet(address: &str, by: u32) -> String {
    match address.rsplit_once('.') {
        Some((head, last)) => match last.parse::<u32>() {
            Ok(n) => format!("{head}.{}", (n + by) % 256),
            Err(_) => address.to_string(),
        },
        None => address.to_string(),
    }
}

/// Creates (or refreshes) the Node object of a node on `platform`, with `max_pods` pods of capacity.
pub(super) fn register(
    store: &Store,
    node: &NodeIdentity,
    platform: &Platform,
    max_pods: u32,
) -> Result<(), Error> {
    let nodes = GroupResource::nodes();
    let name = &node.name;
    let (os, arch) = (&platform.os, &platform.architecture);
    let cidr = format!("{}.0/24", node.pod_network);
    let object = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {
            "kubernetes.io/hostname": name, "kubernetes.io/os": os, "kubernetes.io/arch": arch,
            "beta.kubernetes.io/os": os, "beta.kubernetes.io/arch": arch,
            "node-role.kubernetes.io/control-plane": "true", "node-role.kubernetes.io/master": "true",
            "node.kubernetes.io/instance-type": "k3s"}},
        "spec": {"podCIDR": cidr, "podCIDRs": [cidr]}});
    let mut current = match store.get(&nodes, None, name) {
        Ok(n) => n,
        Err(store::Error::NotFound { .. }) => {
            store
                .create(&nodes, None, object, &WriteOptions::manager(MANAGER))?
                .object
        }
        Err(e) => return Err(e.into()),
    };
    let now = meta::now_rfc3339();
    let resources = json!({"cpu": "2", "memory": "8145440Ki", "pods": max_pods.to_string(), "ephemeral-storage": "102400000Ki"});
    current["status"] = json!({
        "conditions": [
            {"type": "MemoryPressure", "status": "False", "reason": "KubeletHasSufficientMemory", "message": "kubelet has sufficient memory available", "lastHeartbeatTime": now, "lastTransitionTime": now},
            {"type": "DiskPressure", "status": "False", "reason": "KubeletHasNoDiskPressure", "message": "kubelet has no disk pressure", "lastHeartbeatTime": now, "lastTransitionTime": now},
            {"type": "PIDPressure", "status": "False", "reason": "KubeletHasSufficientPID", "message": "kubelet has sufficient PID available", "lastHeartbeatTime": now, "lastTransitionTime": now},
            {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "kubelet is posting ready status", "lastHeartbeatTime": now, "lastTransitionTime": now},
        ],
        "addresses": [{"type": "InternalIP", "address": node.ip}, {"type": "Hostname", "address": name}],
        "capacity": resources, "allocatable": resources,
        "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
        "nodeInfo": {"architecture": arch, "operatingSystem": os, "osImage": "kube-sim",
            "kernelVersion": "", "containerRuntimeVersion": "containerd://1.7.23-k3s2",
            "kubeletVersion": "v1.32.0+k3s1", "kubeProxyVersion": "v1.32.0+k3s1",
            "machineID": "", "systemUUID": "", "bootID": ""},
    });
    store.update(
        Endpoint::Status,
        &nodes,
        None,
        current,
        &WriteOptions::manager(MANAGER),
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn further_nodes_take_the_next_address_and_network() {
        let mut config = super::Config::fast("kube-sim");
        config.nodes = 3;
        let nodes = config.node_identities();
        let names: Vec<&str> = nodes.iter().map(|n| n.name.as_str()).collect();
        assert_eq!(names, ["kube-sim", "kube-sim-1", "kube-sim-2"]);
        assert_eq!(nodes[2].ip, "172.18.0.4");
        assert_eq!(nodes[2].pod_network, "10.42.2");
    }
}
