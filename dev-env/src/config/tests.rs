use super::*;

fn parse(text: &str) -> Result<Config, Error> {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("manifests")).unwrap();
    Config::parse(&dir.path().join("dev-env.yaml"), text)
}

fn problems(text: &str) -> Vec<Problem> {
    match parse(text) {
        Err(Error::Invalid { problems, .. }) => problems,
        other => panic!("expected problems, got {other:?}"),
    }
}

#[test]
fn defaults_are_derived_from_the_name() {
    let config = parse("name: shop\n").unwrap();
    assert_eq!(config.network.name, "shop");
    assert_eq!(config.network.ipv4_subnet.to_string(), DEFAULT_IPV4_SUBNET);
    assert_eq!(config.network.ipv6_subnet, None);
    assert_eq!(config.registry.name, "shop-registry");
    assert_eq!(config.registry.volume, "shop-registry-data");
    assert_eq!(config.registry.image, DEFAULT_REGISTRY_IMAGE);
    assert_eq!(config.registry.host_port, 0);
    assert_eq!(config.registry.cluster_host, "shop-registry:5000");
    assert_eq!(config.cluster.provider, Provider::K3s);
    assert_eq!(config.cluster.image, DEFAULT_K3S_IMAGE);
    assert_eq!(config.node_name(), "shop-server-0");
    assert!(config.state_dir().ends_with(".dev-env/shop"));
}

#[test]
fn a_full_file_resolves() {
    let text = r#"
name: demo
network: {name: demo-net, ipv4Subnet: 172.29.0.0/24, ipv6Subnet: "fd00:1::/64"}
registry: {hostPort: 5001}
cluster: {provider: sim}
manifests: [manifests]
components:
  worker:
    image: demo/worker
    build: {cargo: {package: worker}}
    rollout: {kind: WorkerPool, namespace: demo, name: default, container: worker}
"#;
    let config = parse(text).unwrap();
    assert_eq!(
        config.network.ipv6_subnet.unwrap().to_string(),
        "fd00:1::/64"
    );
    assert_eq!(config.cluster.image, DEFAULT_SIM_IMAGE);
    assert_eq!(config.registry.host_port, 5001);
    let worker = config.component("worker").unwrap();
    assert_eq!(
        worker.build,
        Build::Cargo {
            package: "worker".into(),
            bin: "worker".into()
        }
    );
    assert_eq!(worker.rollout.kind, RolloutKind::WorkerPool);
    assert!(config.manifests[0].ends_with("manifests"));
}

#[test]
fn external_registry_is_pulled_from_as_written() {
    let config = parse("name: a\nregistry: {external: 'localhost:5000'}\n").unwrap();
    assert_eq!(config.registry.cluster_host, "localhost:5000");
    let config = parse(
        "name: a\nregistry: {external: 'localhost:5000', clusterHost: 'reg.internal:5000'}\n",
    )
    .unwrap();
    assert_eq!(config.registry.cluster_host, "reg.internal:5000");
}

#[test]
fn all_problems_are_reported_in_file_order() {
    let text = "name: Bad_Name\nnetwork:\n  ipv4Subnet: 10.42.0.0/24\n";
    let found = problems(text);
    let keys: Vec<_> = found.iter().map(|p| p.key.as_str()).collect();
    assert_eq!(keys, ["name", "network.ipv4Subnet"]);
    assert!(found[1].message.contains("the default"), "{:?}", found[1]);
    assert_eq!(found[0].location, Location { line: 1, column: 7 });
}

#[test]
fn unknown_component_lists_the_known_ones() {
    let config = parse(
        "name: a\ncomponents:\n  w:\n    image: w\n    build: {cargo: {package: w}}\n    rollout: {kind: Deployment}\n",
    )
    .unwrap();
    let err = config.component("x").unwrap_err().to_string();
    assert!(err.contains("unknown component `x`"), "{err}");
    assert!(err.contains("declares: w"), "{err}");
}

#[test]
fn host_bits_suggest_the_network_address() {
    let found = problems("name: a\nnetwork: {ipv4Subnet: 172.29.0.1/24}\n");
    assert_eq!(found[0].key, "network.ipv4Subnet");
    assert!(found[0].fix.contains("172.29.0.0/24"), "{:?}", found[0]);
}

#[test]
fn a_docker_build_can_stage_a_cargo_binary() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("Dockerfile"), "FROM scratch\n").unwrap();
    let text = "name: a\ncomponents:\n  cm:\n    image: a/cm\n    build: {docker: {cargo: {package: cm}}}\n    rollout: {kind: Deployment}\n";
    let config = Config::parse(&dir.path().join("dev-env.yaml"), text).unwrap();
    let Build::Docker {
        cargo, dockerfile, ..
    } = &config.components["cm"].build
    else {
        panic!("a docker build")
    };
    assert_eq!(
        cargo,
        &Some(CargoBinary {
            package: "cm".into(),
            bin: "cm".into()
        })
    );
    assert_eq!(dockerfile, &dir.path().join("Dockerfile"));
}
