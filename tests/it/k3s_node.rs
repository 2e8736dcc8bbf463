//! The k3s node's entrypoint as the plan writes it, run by this engine on
//! an environment network. k3s itself cannot run here, so the image holds
//! what rancher/k3s holds for the script (busybox's `sh`, `sed`, `grep`
//! and `mount`; iptables in both flavours) and a stand-in `/bin/k3s` that
//! reports what k3s would find: its arguments and PID, `/etc/resolv.conf`,
//! the nat rules, and a name of the network looked up through the resolver
//! k3s would hand CoreDNS. The node gets the two capabilities the script
//! uses instead of `--privileged`, which this engine refuses.

use std::path::Path;

use dev_env::{config::Config, plan};
use dev_env_tests::{DockerCleanup, random_subnet, require_docker, unique_name};
use xshell::{Shell, cmd};

/// Debian's `busybox-static`: the shell and tools of the node image.
const BUSYBOX: &str = "/bin/busybox";
const APPLETS: &[&str] = &["sh", "sed", "grep", "mount", "cat", "nslookup", "sleep"];
const IMAGE: &str = "dev-env-test/k3s-entrypoint:local";

/// Stands in for k3s: says what k3s would start with.
const FAKE_K3S: &str = r#"#!/bin/sh
echo "k3s pid $$ args $*"
echo "--- resolv.conf"
cat /etc/resolv.conf
echo "--- nat"
iptables-nft-save -t nat 2>/dev/null
iptables-legacy-save -t nat 2>/dev/null
echo "--- lookup"
nslookup "$PEER"
"#;

fn k3s_config(dir: &Path, name: &str, subnet: &str) -> Config {
    let path = dir.join("dev-env.yaml");
    let text = format!("name: {name}\nnetwork: {{ipv4Subnet: {subnet}}}\n");
    std::fs::write(&path, text).unwrap();
    Config::load(&path).unwrap()
}

/// Copies `file` into `rootfs` at its own path, following symlinks.
fn stage(rootfs: &Path, file: &Path) {
    let dest = rootfs.join(file.strip_prefix("/").unwrap());
    std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
    std::fs::copy(file, &dest).unwrap_or_else(|e| panic!("copy {}: {e}", file.display()));
}

/// `xtables-{nft,legacy}-multi`, their libraries and extensions, under the
/// names the script calls.
fn stage_iptables(sh: &Shell, rootfs: &Path) {
    for flavour in ["nft", "legacy"] {
        let binary = format!("/usr/sbin/xtables-{flavour}-multi");
        assert!(
            Path::new(&binary).exists(),
            "{binary} is missing: install Debian's iptables"
        );
        stage(rootfs, Path::new(&binary));
        let ldd = cmd!(sh, "ldd {binary}").read().unwrap();
        for library in ldd.split_whitespace().filter(|w| w.starts_with('/')) {
            stage(rootfs, Path::new(library));
        }
        for tool in ["", "-save", "-restore"] {
            let link = rootfs.join(format!("usr/sbin/iptables-{flavour}{tool}"));
            std::os::unix::fs::symlink(format!("xtables-{flavour}-multi"), link).unwrap();
        }
    }
    let extensions = format!("/usr/lib/{}-linux-gnu/xtables", std::env::consts::ARCH);
    for entry in std::fs::read_dir(&extensions).expect("iptables' extensions") {
        stage(rootfs, &entry.unwrap().path());
    }
}

/// Builds [`IMAGE`] from this machine's files: nothing is pulled.
fn build_image(sh: &Shell) {
    assert!(
        Path::new(BUSYBOX).exists(),
        "{BUSYBOX} is missing: install Debian's busybox-static"
    );
    let dir = tempfile::tempdir().unwrap();
    let rootfs = dir.path().join("rootfs");
    stage(&rootfs, Path::new(BUSYBOX));
    for applet in APPLETS {
        std::os::unix::fs::symlink("busybox", rootfs.join("bin").join(applet)).unwrap();
    }
    stage_iptables(sh, &rootfs);
    std::fs::write(rootfs.join("bin/k3s"), FAKE_K3S).unwrap();
    let dockerfile = "FROM scratch\nCOPY rootfs/ /\nENV PATH=/usr/sbin:/bin\n";
    std::fs::write(dir.path().join("Dockerfile"), dockerfile).unwrap();
    let context = dir.path();
    cmd!(sh, "chmod 0755 {rootfs}/bin/k3s").run().unwrap();
    cmd!(sh, "docker build -q -t {IMAGE} {context}")
        .quiet()
        .ignore_stderr()
        .run()
        .unwrap();
}

/// A node container of `spec`'s entrypoint, command, environment and
/// files, with `caps` instead of privileges and `PEER` to look up.
fn create_node(sh: &Shell, spec: &plan::NodeSpec, caps: &[&str], peer: &str) {
    let name = &spec.container;
    let network = &spec.network;
    let (program, script) = (&spec.entrypoint[0], &spec.entrypoint[1..]);
    let command = &spec.command;
    let env: Vec<String> = spec
        .env
        .iter()
        .flat_map(|(k, v)| [String::from("-e"), format!("{k}={v}")])
        .chain([String::from("-e"), format!("PEER={peer}")])
        .collect();
    let caps: Vec<String> = caps.iter().map(|c| format!("--cap-add={c}")).collect();
    cmd!(
        sh,
        "docker create --name {name} --network {network} {caps...} {env...} --entrypoint {program} {IMAGE} {script...} {command...}"
    )
    .quiet()
    .ignore_stdout()
    .run()
    .unwrap();
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), &spec.files[plan::NODE_ENTRYPOINT]).unwrap();
    let source = file.path();
    let into = format!("{name}:{}", plan::NODE_ENTRYPOINT);
    cmd!(sh, "docker cp {source} {into}").quiet().run().unwrap();
}

/// Runs the node until its entrypoint and the stand-in end: their output,
/// and whether it exited 0.
fn run_node(sh: &Shell, name: &str) -> (String, bool) {
    let out = cmd!(sh, "docker start -a {name}")
        .quiet()
        .ignore_status()
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (text, out.status.success())
}

struct Node {
    sh: Shell,
    spec: plan::NodeSpec,
    peer: String,
    _cleanup: DockerCleanup,
    _dir: tempfile::TempDir,
}

/// The test image, and a k3s node spec on a network of its own with a
/// peer container to look up, all removed when the `Node` is dropped.
fn node_and_peer(prefix: &str) -> Node {
    require_docker();
    let sh = Shell::new().unwrap();
    build_image(&sh);
    let mut cleanup = DockerCleanup::default();
    let name = unique_name(prefix);
    let dir = tempfile::tempdir().unwrap();
    let config = k3s_config(dir.path(), &name, &random_subnet());
    let spec = plan::node_spec(&config, None, &plan::EngineSetup::local(&config));
    let network = &spec.network;
    let subnet = config.network.ipv4_subnet.to_string();
    cmd!(sh, "docker network create --subnet {subnet} {network}")
        .quiet()
        .ignore_stdout()
        .run()
        .unwrap();
    cleanup.networks.push(network.clone());
    let peer = format!("{name}-peer");
    cleanup.containers.push(peer.clone());
    cleanup.containers.push(spec.container.clone());
    cmd!(
        sh,
        "docker run -d --name {peer} --network {network} {IMAGE} sleep 300"
    )
    .quiet()
    .ignore_stdout()
    .run()
    .unwrap();
    Node {
        sh,
        spec,
        peer,
        _cleanup: cleanup,
        _dir: dir,
    }
}

fn ip_of(sh: &Shell, container: &str) -> String {
    let format = "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}";
    cmd!(sh, "docker inspect --format {format} {container}")
        .read()
        .unwrap()
}

#[test]
fn the_entrypoint_moves_dockers_dns_where_pods_reach_it_then_runs_k3s_as_pid_1() {
    let node = node_and_peer("it-k3s-dns");
    let (sh, spec) = (&node.sh, &node.spec);
    let gateway = &spec.env[plan::NODE_DNS_ADDRESS_ENV];
    create_node(sh, spec, &["NET_ADMIN", "SYS_ADMIN"], &node.peer);
    let peer_ip = ip_of(sh, &node.peer);
    // Docker makes its DNS rules again on every start: a restarted node
    // gets them moved again.
    for start in ["first", "restart"] {
        let (out, ok) = run_node(sh, &spec.container);
        assert!(ok, "{start}: {out}");
        let args = spec.command.join(" ");
        let present = [
            format!("k3s pid 1 args {args}"),
            format!("nameserver {gateway}\n"),
            // Pods' queries come in from the CNI bridge: PREROUTING.
            format!("-A PREROUTING -d {gateway}/32 -j DOCKER_OUTPUT"),
            format!("Server:\t\t{gateway}"),
            format!("Address: {peer_ip}"),
        ];
        for expected in &present {
            assert!(out.contains(expected), "{start}: no `{expected}` in {out}");
        }
        for stale in ["nameserver 127.0.0.11", "-A DOCKER_OUTPUT -d 127.0.0.11/32"] {
            assert!(!out.contains(stale), "{start}: `{stale}` left in {out}");
        }
    }
}

#[test]
fn the_entrypoint_stops_the_node_with_its_reason_when_root_cannot_be_shared() {
    let node = node_and_peer("it-k3s-mnt");
    let sh = &node.sh;
    // Without CAP_SYS_ADMIN `mount --make-rshared /` is refused.
    create_node(sh, &node.spec, &["NET_ADMIN"], &node.peer);
    let (out, ok) = run_node(sh, &node.spec.container);
    assert!(!ok, "{out}");
    assert!(
        out.contains("dev-env entrypoint: cannot make / a shared mount"),
        "{out}"
    );
    assert!(!out.contains("k3s pid"), "k3s started anyway: {out}");
}
