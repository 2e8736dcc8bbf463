use super::*;

fn config(text: &str) -> Config {
    // `provider: sim` needs the `kube-sim` package.
    let dir = crate::config::tests::workspace(&[("kube-sim", &["kube-sim"])]);
    Config::parse(&dir.path().join("dev-env.yaml"), text).unwrap()
}

/// The node of `config` on Docker Engine on this machine.
fn local_node(config: &Config, registry_port: Option<u16>) -> NodeSpec {
    node_spec(config, registry_port, &EngineSetup::local(config))
}

#[test]
fn node_spec_has_one_source_per_destination_and_the_k3s_contract() {
    let sim = local_node(&config("name: shop\ncluster: {provider: sim}\n"), None);
    assert!(!sim.privileged && sim.tmpfs.is_empty());
    assert!(sim.command.windows(2).any(|w| w == ["--kubelet", "docker"]));
    assert!(
        sim.command
            .windows(2)
            .any(|w| w == ["--docker-label", "dev-env.name=shop"])
    );
    assert_eq!(sim.mounts.len(), 1);
    assert!(matches!(
        &sim.mounts[NODE_DOCKER_SOCKET],
        MountSource::Bind(_)
    ));
    let spec = local_node(&config("name: shop\n"), None);
    assert!(spec.mounts.is_empty());
    assert_eq!(spec.container, "shop-server-0");
    assert_eq!(
        &spec.command[..5],
        [
            "server",
            "--tls-san",
            "shop-server-0",
            "--tls-san",
            "127.0.0.1"
        ]
    );
    assert!(spec.privileged);
    assert_eq!(spec.tmpfs.keys().collect::<Vec<_>>(), ["/run", "/var/run"]);
    assert_eq!(spec.env["K3S_KUBECONFIG_OUTPUT"], NODE_KUBECONFIG_OUTPUT);
    assert!(spec.files[NODE_REGISTRIES_YAML].contains("\"shop-registry:5000\""));
}

#[test]
fn k3s_nodes_get_what_a_real_daemon_needs_and_sim_nodes_do_not() {
    let k3s = local_node(&config("name: demo\n"), Some(5001));
    assert!(k3s.privileged && k3s.userns_host && k3s.cgroupns_private);
    assert!(
        k3s.command
            .contains(&String::from("--disable=traefik,servicelb,metrics-server")),
        "{:?}",
        k3s.command
    );
    let kept = local_node(
        &config("name: demo\ncluster: {disable: [traefik]}\n"),
        Some(5001),
    );
    assert!(kept.command.contains(&String::from("--disable=traefik")));
    let none = local_node(&config("name: demo\ncluster: {disable: []}\n"), Some(5001));
    assert!(!none.command.iter().any(|a| a.starts_with("--disable")));
    let sim = local_node(
        &config("name: demo\ncluster: {provider: sim}\n"),
        Some(5001),
    );
    assert!(!sim.privileged && !sim.userns_host && !sim.cgroupns_private);
    assert!(!sim.command.iter().any(|a| a.starts_with("--disable")));
    // Defaults that are off stay out of the spec, so nodes made before
    // these settings existed do not count as drifted.
    let json = serde_json::to_value(&sim).unwrap();
    assert!(json.get("usernsHost").is_none() && json.get("cgroupnsPrivate").is_none());
    assert!(json.get("entrypoint").is_none(), "{json}");
    assert!(!sim.files.contains_key(NODE_ENTRYPOINT));
    assert!(!sim.env.contains_key(NODE_DNS_ADDRESS_ENV));
}

#[test]
fn k3s_nodes_start_through_the_entrypoint_that_fixes_dns_and_mount_propagation() {
    let demo = config(
        "name: demo
network: {ipv4Subnet: 10.77.0.0/24}
",
    );
    let k3s = local_node(&demo, Some(5001));
    assert_eq!(k3s.entrypoint, ["/bin/sh", NODE_ENTRYPOINT]);
    assert_eq!(k3s.files[NODE_ENTRYPOINT], NODE_ENTRYPOINT_SCRIPT);
    // The address Docker's DNS moves to is the network's gateway, as k3d
    // and kind move it.
    assert_eq!(k3s.env[NODE_DNS_ADDRESS_ENV], "10.77.0.1");
    // k3s keeps its arguments: the script passes them on and runs k3s in
    // its own process, PID 1.
    assert_eq!(k3s.command[0], "server");
    assert!(NODE_ENTRYPOINT_SCRIPT.contains("exec /bin/k3s \"$@\""));
    assert!(NODE_ENTRYPOINT_SCRIPT.contains("mount --make-rshared /"));
}

#[test]
fn proxies_pass_through_with_the_environments_own_names_exempt() {
    let config = config("name: demo\n");
    assert!(proxy_env(&config, |_| None).is_empty());
    let env = proxy_env(&config, |key| match key {
        "https_proxy" => Some(String::from("http://proxy:3128")),
        "NO_PROXY" => Some(String::from("corp.example, localhost")),
        _ => None,
    });
    assert_eq!(env["HTTPS_PROXY"], "http://proxy:3128");
    assert_eq!(env["https_proxy"], "http://proxy:3128");
    assert!(!env.contains_key("HTTP_PROXY"));
    let no_proxy: Vec<&str> = env["NO_PROXY"].split(',').collect();
    for name in [
        "corp.example",
        "localhost",
        "127.0.0.1",
        "demo-registry",
        "demo-server-0",
        "10.42.0.0/16",
        "10.43.0.0/16",
    ] {
        assert!(no_proxy.contains(&name), "{name} missing from {no_proxy:?}");
    }
    assert_eq!(no_proxy.iter().filter(|n| **n == "localhost").count(), 1);
    assert_eq!(env["no_proxy"], env["NO_PROXY"]);
}

#[test]
fn registries_yaml_mirrors_the_host_name_once_the_port_is_known() {
    let yaml = registries_yaml(&config("name: shop\n"), Some(5001));
    assert_eq!(
        yaml,
        "mirrors:\n  \"shop-registry:5000\":\n    endpoint:\n      - \"http://shop-registry:5000\"\n  \"localhost:5001\":\n    endpoint:\n      - \"http://shop-registry:5000\"\n"
    );
}

#[test]
fn drift_names_each_changed_field() {
    let a = network_spec(&config("name: a\n"));
    let b = network_spec(&config(
        "name: a\nnetwork: {ipv4Subnet: 172.29.0.0/24, ipv6Subnet: 'fd00:1::/64'}\n",
    ));
    let labels = labels("a", "network", &a);
    assert_eq!(labels[docker::LABEL_NAME], "a");
    assert_eq!(
        drift_from_labels(&labels, Object::Network, "a", &a),
        Ownership::Matches
    );
    let Ownership::Drifted(drift) = drift_from_labels(&labels, Object::Network, "a", &b) else {
        panic!("a drift")
    };
    assert_eq!(
        drift.to_string(),
        "network `a` differs from dev-env.yaml:\n    ipv4Subnet: 192.168.231.0/24 -> 172.29.0.0/24\n    ipv6Subnet: (unset) -> fd00:1::/64"
    );
    assert_eq!(
        drift_from_labels(&HashMap::new(), Object::Network, "a", &a),
        Ownership::NotOurs
    );
}

#[test]
fn spec_hash_changes_with_the_spec() {
    let a = network_spec(&config("name: a\n"));
    let b = network_spec(&config("name: a\nnetwork: {ipv4Subnet: 172.29.0.0/24}\n"));
    assert_eq!(spec_hash(&a), spec_hash(&a.clone()));
    assert_ne!(spec_hash(&a), spec_hash(&b));
    assert_eq!(spec_hash(&a).len(), 64);
}

#[test]
fn the_engine_decides_the_sim_nodes_socket_the_host_address_and_k3s_additions() {
    let sim = config("name: demo\ncluster: {provider: sim}\n");
    let desktop = EngineSetup {
        socket: String::from("/var/run/docker.sock"),
        host: HostAddress::HostGateway,
        k3s: engine::K3sNode::default(),
    };
    let node = node_spec(&sim, Some(5001), &desktop);
    assert_eq!(
        node.mounts.get(NODE_DOCKER_SOCKET),
        Some(&MountSource::Bind(String::from("/var/run/docker.sock")))
    );
    assert_eq!(
        node.extra_hosts
            .get(crate::host::HOST_NAME)
            .map(String::as_str),
        Some("host-gateway")
    );
    let rootless = EngineSetup {
        socket: String::from("/run/user/1000/docker.sock"),
        host: HostAddress::Fixed(std::net::Ipv4Addr::new(10, 0, 2, 2)),
        k3s: engine::K3sNode {
            args: vec![String::from(
                "--kubelet-arg=feature-gates=KubeletInUserNamespace=true",
            )],
            devices: vec![String::from("/dev/mapper")],
        },
    };
    let node = node_spec(&sim, Some(5001), &rootless);
    assert_eq!(
        node.mounts.get(NODE_DOCKER_SOCKET),
        Some(&MountSource::Bind(String::from(
            "/run/user/1000/docker.sock"
        )))
    );
    assert!(node.devices.is_empty(), "a sim node needs no device");
    let k3s = node_spec(&config("name: demo\n"), Some(5001), &rootless);
    assert!(
        k3s.command
            .iter()
            .any(|a| a.contains("KubeletInUserNamespace=true"))
    );
    assert_eq!(k3s.devices, ["/dev/mapper"]);
    assert_eq!(
        k3s.extra_hosts
            .get(crate::host::HOST_NAME)
            .map(String::as_str),
        Some("10.0.2.2")
    );
}

#[test]
fn a_node_on_docker_engine_here_hashes_as_before_the_engine_was_asked() {
    // The drift label of nodes made before: no `devices` key, the gateway
    // as the host's address. Changing it would call every node drifted.
    let demo = config("name: demo\n");
    let json = serde_json::to_value(local_node(&demo, Some(5001))).unwrap();
    assert!(json.get("devices").is_none(), "{json}");
    assert_eq!(
        json["extraHosts"]["host.docker.internal"],
        crate::host::gateway(&demo).to_string()
    );
}
