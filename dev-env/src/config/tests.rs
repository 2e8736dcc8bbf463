use super::*;

/// A cargo workspace in a temporary directory, with a `manifests/`
/// directory: each package with the binaries named (`src/bin/<bin>.rs`), or
/// a library when it names none.
pub(crate) fn workspace(packages: &[(&str, &[&str])]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let write = |path: &str, text: &str| {
        let path = dir.path().join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    };
    let members: Vec<String> = packages.iter().map(|(p, _)| format!("{p:?}")).collect();
    write(
        "Cargo.toml",
        &format!(
            "[workspace]\nresolver = \"3\"\nmembers = [{}]\n",
            members.join(", ")
        ),
    );
    for (package, bins) in packages {
        write(
            &format!("{package}/Cargo.toml"),
            &format!("[package]\nname = \"{package}\"\nversion = \"0.1.0\"\nedition = \"2024\"\n"),
        );
        if bins.is_empty() {
            write(&format!("{package}/src/lib.rs"), "");
        }
        for bin in *bins {
            write(&format!("{package}/src/bin/{bin}.rs"), "fn main() {}\n");
        }
    }
    std::fs::create_dir(dir.path().join("manifests")).unwrap();
    dir
}

fn parse(text: &str) -> Result<Config, Error> {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("manifests")).unwrap();
    Config::parse(&dir.path().join("dev-env.yaml"), text)
}

fn parse_in(dir: &tempfile::TempDir, text: &str) -> Result<Config, Error> {
    Config::parse(&dir.path().join("dev-env.yaml"), text)
}

fn problems_in(dir: &tempfile::TempDir, text: &str) -> Vec<Problem> {
    match parse_in(dir, text) {
        Err(Error::Invalid { problems, .. }) => problems,
        other => panic!("expected problems, got {other:?}"),
    }
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
    let dir = workspace(&[("kube-sim", &["kube-sim"]), ("worker", &["worker"])]);
    let config = parse_in(&dir, text).unwrap();
    assert_eq!(
        config.network.ipv6_subnet.unwrap().to_string(),
        "fd00:1::/64"
    );
    assert_eq!(config.cluster.image, DEFAULT_SIM_IMAGE);
    assert_eq!(config.registry.host_port, 5001);
    let worker = config.component("worker").unwrap();
    assert_eq!(
        worker.build,
        Build::Cargo(CargoBinary {
            package: "worker".into(),
            bin: "worker".into(),
            profile: "dev".into(),
            target: None,
        })
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
    let dir = workspace(&[("w", &["w"])]);
    let config = parse_in(
        &dir,
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
    let dir = workspace(&[("cm", &["cm"])]);
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
            bin: "cm".into(),
            profile: "dev".into(),
            target: None,
        })
    );
    assert_eq!(dockerfile, &dir.path().join("Dockerfile"));
}

const COMPONENT: &str = "name: a\ncomponents:\n  w:\n    image: w\n    build:\n      cargo: {package: PACKAGE, bin: BIN}\n    rollout: {kind: Deployment}\n";

#[test]
fn a_package_missing_from_the_workspace_is_named_with_those_it_has() {
    let dir = workspace(&[("worker", &["worker"]), ("api", &["api"])]);
    let text = COMPONENT
        .replace("PACKAGE", "wroker")
        .replace("BIN", "worker");
    let found = problems_in(&dir, &text);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].key, "components.w.build.cargo.package");
    assert_eq!(
        found[0].location,
        Location {
            line: 6,
            column: 24
        }
    );
    assert!(
        found[0].message.contains("no package `wroker`")
            && found[0].message.contains("it has: api, worker"),
        "{:?}",
        found[0]
    );
    assert!(
        found[0].fix.contains("[workspace] members"),
        "{:?}",
        found[0]
    );
}

#[test]
fn a_binary_missing_from_its_package_is_named_with_those_it_has() {
    let dir = workspace(&[("worker", &["worker", "helper"]), ("tools", &["fmt"])]);
    let text = COMPONENT.replace("PACKAGE", "worker").replace("BIN", "wrk");
    let found = problems_in(&dir, &text);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].key, "components.w.build.cargo.bin");
    assert_eq!(
        found[0].location,
        Location {
            line: 6,
            column: 37
        }
    );
    let message = &found[0].message;
    assert!(
        message.contains("package `worker` has no binary `wrk`")
            && message.contains("helper")
            && message.contains("worker"),
        "{message}"
    );
    // A staged binary whose `bin` defaults to the package name.
    std::fs::write(dir.path().join("Dockerfile"), "FROM scratch\n").unwrap();
    let text = "name: a\ncomponents:\n  cm:\n    image: a/cm\n    build:\n      docker:\n        cargo: {package: tools}\n    rollout: {kind: Deployment}\n";
    let found = problems_in(&dir, text);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].key, "components.cm.build.docker.cargo.bin");
    assert_eq!(found[0].location, Location { line: 7, column: 9 });
    assert!(
        found[0].message.contains("defaults to the package name")
            && found[0].message.contains("its binaries: fmt"),
        "{:?}",
        found[0]
    );
}

#[test]
fn cargo_and_sim_builds_outside_any_workspace_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let text = COMPONENT
        .replace("PACKAGE", "worker")
        .replace("BIN", "worker");
    let found = problems_in(&dir, &text);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].key, "components.w.build.cargo.package");
    assert!(
        found[0].message.contains("in no cargo workspace"),
        "{:?}",
        found[0]
    );
    let found = problems_in(&dir, "name: a\ncluster:\n  provider: sim\n");
    assert_eq!(found[0].key, "cluster.provider");
    assert_eq!(
        found[0].location,
        Location {
            line: 3,
            column: 13
        }
    );
    assert!(found[0].message.contains("kube-sim"), "{:?}", found[0]);
    // The same files inside a workspace that has them load.
    let dir = workspace(&[("kube-sim", &["kube-sim"]), ("worker", &["worker"])]);
    let text = COMPONENT
        .replace("PACKAGE", "worker")
        .replace("BIN", "worker");
    parse_in(&dir, &text).unwrap();
    parse_in(&dir, "name: a\ncluster:\n  provider: sim\n").unwrap();
}

#[test]
fn a_workspace_without_kube_sim_is_refused_for_the_sim_provider() {
    let dir = workspace(&[("worker", &["worker"])]);
    // `kube-sim/` is there, but no member of the workspace.
    std::fs::create_dir(dir.path().join("kube-sim")).unwrap();
    std::fs::write(
        dir.path().join("kube-sim/Cargo.toml"),
        "[package]\nname = \"kube-sim\"\nversion = \"0.1.0\"\n",
    )
    .unwrap();
    let found = problems_in(&dir, "name: a\ncluster: {provider: sim}\n");
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].key, "cluster.provider");
    assert!(
        found[0].message.contains("has none; it has: worker"),
        "{:?}",
        found[0]
    );
}

#[test]
fn a_name_that_makes_the_node_hostname_too_long_is_refused() {
    // `<name>-server-0` holds 9 more characters than the name.
    let longest = "a".repeat(54);
    let config = parse(&format!("name: {longest}\n")).unwrap();
    assert_eq!(config.node_name().len(), 63);
    let too_long = "a".repeat(55);
    let found = problems(&format!("name: {too_long}\n"));
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].key, "name");
    assert_eq!(found[0].location, Location { line: 1, column: 7 });
    assert!(found[0].message.contains("64 characters"), "{:?}", found[0]);
    assert!(found[0].fix.contains("at most 54"), "{:?}", found[0]);
    // No node, no hostname.
    parse(&format!(
        "name: {too_long}\nregistry: {{external: 'localhost:5000'}}\ncluster: {{provider: existing, context: c}}\n"
    ))
    .unwrap();
}

#[test]
fn a_duplicate_key_points_at_its_second_occurrence() {
    let text = "name: a\nnetwork:\n  name: x\n  ipv4Subnet: 10.1.0.0/24\n  name: y\n";
    let found = problems(text);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].key, "network.name");
    assert_eq!(found[0].location, Location { line: 5, column: 3 });
    assert!(found[0].fix.contains("declare each key once"), "{found:?}");
    // A component declared twice, in flow style.
    let text = "name: a\ncomponents: {w: {image: w}, v: {image: v}, w: {image: x}}\n";
    let found = problems(text);
    assert_eq!(found[0].key, "components.w");
    assert_eq!(
        found[0].location,
        Location {
            line: 2,
            column: 44
        }
    );
    // Top level.
    let found = problems("name: a\nmanifests: []\nname: b\n");
    assert_eq!(
        (found[0].key.as_str(), found[0].location),
        ("name", Location { line: 3, column: 1 })
    );
}

#[test]
fn teardown_needs_only_the_names() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("dev-env.yaml");
    // No manifests directory, no Dockerfile, no cargo workspace, a component
    // without a rollout: nothing teardown reads.
    let text = "name: shop\nnetwork: {ipv4Subnet: 10.211.0.0/24}\nregistry: {hostPort: 5099}\nmanifests: [manifests]\ncomponents:\n  web:\n    image: shop/web\n    build: {docker: {context: web}}\n  api:\n    image: shop/api\n    build: {cargo: {package: api}}\n    rollout: {kind: Deployment}\n";
    std::fs::write(&file, text).unwrap();
    let Err(Error::Invalid { problems, .. }) = Config::load(&file) else {
        panic!("the full load refuses missing inputs")
    };
    let keys: Vec<&str> = problems.iter().map(|p| p.key.as_str()).collect();
    assert_eq!(
        keys,
        [
            "manifests[0]",
            "components.web.rollout",
            "components.web.build.docker.dockerfile",
            "components.web.build.docker.context",
            "components.api.build.cargo.package",
        ]
    );
    let config = Config::load_identity(&file).unwrap();
    assert_eq!(config.name, "shop");
    assert_eq!(config.network.ipv4_subnet.to_string(), "10.211.0.0/24");
    assert_eq!(config.registry.name, "shop-registry");
    assert_eq!(config.registry.volume, "shop-registry-data");
    assert_eq!(config.registry.host_port, 5099);
    assert_eq!(config.state_dir(), dir.path().join(".dev-env/shop"));
    // What identifies the objects is still checked, and so is the syntax.
    for (text, key) in [
        ("name: Shop\n", "name"),
        ("name: shop\nnetwrk: {}\n", "netwrk"),
        ("name: shop\nregistry: {volume: 'a b'}\n", "registry.volume"),
        ("name: 'shop\n", "(document)"),
    ] {
        std::fs::write(&file, text).unwrap();
        match Config::load_identity(&file) {
            Err(Error::Invalid { problems, .. }) => assert_eq!(problems[0].key, key, "{text}"),
            other => panic!("{text}: expected a problem at `{key}`, got {other:?}"),
        }
    }
}

#[test]
fn locate_renders_file_line_and_column_after_loading() {
    let config = parse("name: a\nnetwork:\n  ipv4Subnet: 10.9.0.0/24\n").unwrap();
    assert_eq!(
        config.locate("network.ipv4Subnet"),
        format!("{}:3:15", config.file.display())
    );
    // A key the file does not spell out falls back to its parent.
    assert_eq!(
        config.locate("network.ipv6Subnet"),
        format!("{}:2:1", config.file.display())
    );
}

#[test]
fn k3s_components_and_the_pod_start_grace_are_checked() {
    let config = parse("name: a\n").unwrap();
    assert_eq!(
        config.cluster.disable,
        ["traefik", "servicelb", "metrics-server"]
    );
    assert_eq!(config.cluster.pod_start_grace, DEFAULT_POD_START_GRACE);
    let config = parse("name: a\ncluster: {disable: [traefik], podStartGrace: 2m}\n").unwrap();
    assert_eq!(config.cluster.disable, ["traefik"]);
    assert_eq!(
        config.cluster.pod_start_grace,
        std::time::Duration::from_secs(120)
    );

    let found = problems("name: a\ncluster: {disable: [traefik, nginx], podStartGrace: soon}\n");
    let keys: Vec<&str> = found.iter().map(|p| p.key.as_str()).collect();
    assert_eq!(keys, ["cluster.disable[1]", "cluster.podStartGrace"]);
    assert!(found[0].fix.contains("metrics-server"), "{:?}", found[0]);
    assert_eq!((found[0].location.line, found[0].location.column), (2, 30));
    let found = problems("name: a\ncluster: {podStartGrace: 0s}\n");
    assert!(found[0].message.contains("zero"), "{found:?}");
}

#[test]
fn a_component_can_ask_its_rollouts_to_wait_for_old_pods_to_go() {
    let dir = workspace(&[]);
    std::fs::write(dir.path().join("Dockerfile"), "FROM scratch\n").unwrap();
    let config = parse_in(
        &dir,
        "name: a\ncomponents:\n  w:\n    image: w\n    build: {docker: {context: ., dockerfile: Dockerfile}}\n    rollout: {kind: Deployment, waitForTermination: true}\n  v:\n    image: v\n    build: {docker: {context: ., dockerfile: Dockerfile}}\n    rollout: {kind: Deployment}\n",
    )
    .unwrap();
    assert!(config.components["w"].rollout.wait_for_termination);
    assert!(!config.components["v"].rollout.wait_for_termination);
}

#[test]
fn forwards_parse_and_bad_or_shared_local_ports_point_at_their_item() {
    let dir = workspace(&[]);
    std::fs::write(dir.path().join("Dockerfile"), "FROM scratch\n").unwrap();
    let component = |name: &str, forward: &str| {
        format!(
            "  {name}:\n    image: {name}\n    build: {{docker: {{context: ., dockerfile: Dockerfile}}}}\n    rollout: {{kind: Deployment}}\n    forward: {forward}\n"
        )
    };
    let text = format!(
        "name: a\ncomponents:\n{}",
        component("w", "[8080, \"19090:9090\"]")
    );
    let config = parse_in(&dir, &text).unwrap();
    assert_eq!(
        config.components["w"].forward,
        vec![
            PortForward {
                local: 8080,
                remote: 8080
            },
            PortForward {
                local: 19090,
                remote: 9090
            }
        ]
    );

    let text = format!(
        "name: a\ncomponents:\n{}{}",
        component("v", "[\"8080\"]"),
        component("w", "[\"x:80\", \"8080:81\"]")
    );
    let found = problems_in(&dir, &text);
    assert_eq!(found.len(), 2, "{found:?}");
    assert_eq!(found[0].key, "components.w.forward[0]");
    assert!(found[0].message.contains("`x`"), "{found:?}");
    assert_eq!((found[0].location.line, found[0].location.column), (12, 15));
    assert_eq!(found[1].key, "components.w.forward[1]");
    assert!(found[1].message.contains("already forwarded for `v`"));
}

#[test]
fn a_registry_ca_file_is_relative_to_the_file_and_must_exist() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("manifests")).unwrap();
    std::fs::write(dir.path().join("ca.pem"), "pem").unwrap();
    let config = parse_in(
        &dir,
        "name: a\nregistry: {external: 'reg.lan:5000', caFile: ca.pem}\n",
    )
    .unwrap();
    assert_eq!(config.registry.ca_file, Some(dir.path().join("ca.pem")));
    assert!(!config.registry.insecure);
    let found = problems_in(
        &dir,
        "name: a\nregistry:\n  external: 'reg.lan:5000'\n  caFile: missing.pem\n",
    );
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].key, "registry.caFile");
    assert_eq!(
        found[0].location,
        Location {
            line: 4,
            column: 11
        }
    );
    assert!(
        found[0].fix.contains("relative paths start at"),
        "{found:?}"
    );
}

#[test]
fn registry_tls_settings_apply_only_to_an_external_registry() {
    let found = problems("name: a\nregistry: {insecure: true}\n");
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].key, "registry.insecure");
    assert!(found[0].fix.contains("registry.external"), "{found:?}");
    let config = parse("name: a\nregistry: {external: 'reg.lan:5000', insecure: true}\n").unwrap();
    assert!(config.registry.insecure);
}

#[test]
fn a_pull_secret_is_only_for_an_external_registry() {
    let found = problems("name: a\nregistry: {pullSecret: true}\n");
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].key, "registry.pullSecret");
    assert!(
        found[0].message.contains("needs no credentials"),
        "{found:?}"
    );
    let config =
        parse("name: a\nregistry: {external: 'reg.lan:5000', pullSecret: true}\n").unwrap();
    assert!(config.registry.pull_secret);
    let config = parse("name: a\nregistry: {external: 'reg.lan:5000'}\n").unwrap();
    assert!(!config.registry.pull_secret);
}

#[test]
fn paths_that_leave_the_files_directory_are_named_without_dot_dot() {
    use super::validate::lexically_normal;
    assert_eq!(
        lexically_normal(Path::new("/ws/target/bench/op/../../../demo/./cm")),
        PathBuf::from("/ws/demo/cm")
    );
    assert_eq!(lexically_normal(Path::new("/../x")), PathBuf::from("/../x"));
    assert_eq!(
        lexically_normal(Path::new("a/../../b")),
        PathBuf::from("../b")
    );
    // A file in a subdirectory naming the workspace's manifests above it.
    let dir = workspace(&[]);
    std::fs::create_dir(dir.path().join("env")).unwrap();
    let file = dir.path().join("env/dev-env.yaml");
    let config = Config::parse(
        &file,
        "name: a\ncluster: {provider: k3s}\nmanifests: [../manifests]\n",
    )
    .unwrap();
    assert_eq!(config.manifests, [dir.path().join("manifests")]);
}
