use std::net::Ipv4Addr;
use std::path::PathBuf;

use super::*;

/// The facts of the recorded `/info` answer `name`, with the `/version`
/// components of Podman or of Docker Engine, seen from `client_os`.
fn facts(name: &str, client_os: &str) -> Facts {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src/docker/engine/fixtures");
    let text = std::fs::read_to_string(dir.join(format!("{name}.json"))).unwrap();
    let info: SystemInfo = serde_json::from_str(&text).unwrap();
    let components = if name.starts_with("podman") {
        serde_json::json!([{"Name": "Podman Engine", "Version": "5.2.5", "Details": {}}])
    } else {
        serde_json::json!([
            {"Name": "Engine", "Version": "27.3.1", "Details": {}},
            {"Name": "containerd", "Version": "1.7.23", "Details": {}},
        ])
    };
    let version: SystemVersion =
        serde_json::from_value(serde_json::json!({ "Components": components })).unwrap();
    Facts::from_answers(&info, &version, client_os)
}

const GATEWAY: Ipv4Addr = Ipv4Addr::new(10, 211, 4, 1);

fn socket(path: &str) -> Endpoint {
    Endpoint::Unix(PathBuf::from(path))
}

#[test]
fn each_engine_is_known_by_what_it_reports() {
    let kinds: Vec<(&str, Kind, bool)> = [
        ("linux-rootful", "linux"),
        ("docker-desktop-macos", "macos"),
        ("docker-desktop-wsl2", "linux"),
        ("orbstack", "macos"),
        ("colima", "macos"),
        ("rancher-desktop", "macos"),
        ("rootless-docker", "linux"),
        ("podman-rootless", "linux"),
    ]
    .into_iter()
    .map(|(name, os)| {
        let facts = facts(name, os);
        (name, facts.kind(), facts.in_vm())
    })
    .collect();
    assert_eq!(
        kinds,
        [
            ("linux-rootful", Kind::Linux, false),
            ("docker-desktop-macos", Kind::DockerDesktop, true),
            ("docker-desktop-wsl2", Kind::DockerDesktop, true),
            ("orbstack", Kind::OrbStack, true),
            ("colima", Kind::Colima, true),
            ("rancher-desktop", Kind::RancherDesktop, true),
            ("rootless-docker", Kind::Linux, false),
            ("podman-rootless", Kind::Podman, false),
        ]
    );
    assert!(facts("rootless-docker", "linux").rootless);
    assert!(facts("podman-rootless", "linux").rootless);
    assert!(!facts("linux-rootful", "linux").rootless);
    assert!(facts("podman-rootless", "macos").in_vm());
}

#[test]
fn a_node_mounts_the_socket_as_the_engine_sees_it() {
    let mount = |name: &str, os: &str, endpoint: &Endpoint, set: Option<&str>| {
        node_socket(&facts(name, os), endpoint, set)
    };
    let desktop = socket("/Users/me/.docker/run/docker.sock");
    assert_eq!(
        mount("docker-desktop-macos", "macos", &desktop, None).unwrap(),
        "/var/run/docker.sock"
    );
    let colima = socket("/Users/me/.colima/default/docker.sock");
    assert_eq!(
        mount("colima", "macos", &colima, None).unwrap(),
        "/var/run/docker.sock"
    );
    let orb = socket("/Users/me/.orbstack/run/docker.sock");
    assert_eq!(
        mount("orbstack", "macos", &orb, None).unwrap(),
        "/var/run/docker.sock"
    );
    let rootless = socket("/run/user/1000/docker.sock");
    assert_eq!(
        mount("rootless-docker", "linux", &rootless, None).unwrap(),
        "/run/user/1000/docker.sock"
    );
    let podman = socket("/run/user/1000/podman/podman.sock");
    assert_eq!(
        mount("podman-rootless", "linux", &podman, None).unwrap(),
        "/run/user/1000/podman/podman.sock"
    );
    let machine = socket("/Users/me/.local/share/containers/podman/machine/podman.sock");
    assert_eq!(
        mount("podman-rootless", "macos", &machine, None),
        Err(Refusal::PodmanSocket)
    );
    assert_eq!(
        mount(
            "podman-rootless",
            "macos",
            &machine,
            Some("/run/podman/podman.sock")
        )
        .unwrap(),
        "/run/podman/podman.sock"
    );
    let tcp = Endpoint::Tcp {
        address: "127.0.0.1:2375".into(),
        tls: None,
    };
    assert_eq!(
        mount("linux-rootful", "linux", &tcp, None).unwrap(),
        "/var/run/docker.sock"
    );
    let local = socket("/var/run/docker.sock");
    assert_eq!(
        mount("linux-rootful", "linux", &local, None).unwrap(),
        "/var/run/docker.sock"
    );
}

#[test]
fn pods_reach_the_host_where_each_engine_routes_it() {
    let route = |name: &str, os: &str| {
        host_route(&facts(name, os), &socket("/var/run/docker.sock"), GATEWAY)
    };
    assert_eq!(
        route("linux-rootful", "linux").address,
        HostAddress::Gateway(GATEWAY)
    );
    assert_eq!(route("linux-rootful", "linux").caveat, None);
    for (name, os) in [
        ("docker-desktop-macos", "macos"),
        ("docker-desktop-wsl2", "linux"),
        ("orbstack", "macos"),
        ("rancher-desktop", "macos"),
        ("podman-rootless", "linux"),
    ] {
        assert_eq!(route(name, os).address, HostAddress::HostGateway, "{name}");
    }
    assert_eq!(
        route("colima", "macos").address,
        HostAddress::Fixed(Ipv4Addr::new(192, 168, 5, 2))
    );
    let rootless = route("rootless-docker", "linux");
    assert_eq!(
        rootless.address,
        HostAddress::Fixed(Ipv4Addr::new(10, 0, 2, 2))
    );
    assert!(
        rootless
            .caveat
            .unwrap()
            .contains("DISABLE_HOST_LOOPBACK=false")
    );
    let tcp = Endpoint::Tcp {
        address: "build.lan:2376".into(),
        tls: None,
    };
    let remote = host_route(&facts("linux-rootful", "linux"), &tcp, GATEWAY);
    assert_eq!(remote.address, HostAddress::Gateway(GATEWAY));
    assert!(remote.caveat.unwrap().contains("over TCP"));
    assert_eq!(HostAddress::HostGateway.extra_host_value(), "host-gateway");
}

#[test]
fn k3s_is_refused_in_rootless_engines_without_cgroup_v2_and_delegation() {
    assert_eq!(k3s_refusal(&facts("linux-rootful", "linux")), None);
    assert_eq!(k3s_refusal(&facts("docker-desktop-wsl2", "linux")), None);
    assert_eq!(k3s_refusal(&facts("rootless-docker", "linux")), None);
    assert_eq!(k3s_refusal(&facts("podman-rootless", "linux")), None);
    let v1 = k3s_refusal(&facts("rootless-docker-cgroup-v1", "linux")).unwrap();
    assert_eq!(
        v1,
        Refusal::RootlessCgroupV1 {
            version: "1".into()
        }
    );
    assert!(v1.to_string().contains("cgroup v1"), "{v1}");
    let undelegated = k3s_refusal(&facts("rootless-docker-undelegated", "linux")).unwrap();
    assert!(
        undelegated.to_string().contains("Delegate=yes"),
        "{undelegated}"
    );
}

#[test]
fn k3s_nodes_get_user_namespace_kubelets_when_rootless_and_dev_mapper_on_btrfs() {
    assert_eq!(
        k3s_node(&facts("linux-rootful", "linux")),
        K3sNode::default()
    );
    assert_eq!(
        k3s_node(&facts("rootless-docker", "linux")).args,
        ["--kubelet-arg=feature-gates=KubeletInUserNamespace=true"]
    );
    assert_eq!(
        k3s_node(&facts("podman-rootless", "linux")).args,
        ["--kubelet-arg=feature-gates=KubeletInUserNamespace=true"]
    );
    assert_eq!(
        k3s_node(&facts("btrfs-rootful", "linux")).devices,
        ["/dev/mapper"]
    );
}
