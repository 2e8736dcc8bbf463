//! The `kube-sim` binary: `serve` and the k3s `server` contract.

use std::io::BufRead as _;
use std::os::unix::fs::PermissionsExt as _;
use std::process::{Child, Command, Stdio};

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, ListParams};

use crate::{DEADLINE, kubectl_at, terminate};

const BIN: &str = env!("CARGO_BIN_EXE_kube-sim");

/// Starts the binary and returns it with the URL it printed on stdout.
async fn spawn(mut cmd: Command) -> (Child, String) {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("kube-sim starts");
    let stdout = child.stdout.take().expect("stdout is piped");
    let line = tokio::time::timeout(
        DEADLINE,
        tokio::task::spawn_blocking(move || {
            let mut line = String::new();
            std::io::BufReader::new(stdout)
                .read_line(&mut line)
                .map(|_| line)
        }),
    )
    .await
    .expect("the URL is printed within the deadline")
    .unwrap()
    .unwrap();
    (child, line.trim().to_string())
}

async fn client_for(kubeconfig: &std::path::Path, server_name: Option<&str>) -> kube::Client {
    let kc = kube::config::Kubeconfig::read_from(kubeconfig).unwrap();
    let mut config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .unwrap();
    config.tls_server_name = server_name.map(str::to_string);
    kube::Client::try_from(config).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_prints_its_url_writes_a_private_kubeconfig_and_stops_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    let mut cmd = Command::new(BIN);
    cmd.args(["serve", "--listen", "127.0.0.1:0", "--kubeconfig-out"])
        .arg(&kubeconfig);
    let (child, url) = spawn(cmd).await;
    assert!(url.starts_with("https://127.0.0.1:"), "{url}");
    let mode = std::fs::metadata(&kubeconfig).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let text = std::fs::read_to_string(&kubeconfig).unwrap();
    assert!(
        text.contains(&format!("server: {url}")) && text.contains("certificate-authority-data: "),
        "{text}"
    );
    assert!(text.contains("token: "), "{text}");

    let out = kubectl_at(&kubeconfig, &["get", "namespaces", "-o", "name"]).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("namespace/kube-system"));
    terminate(child, DEADLINE).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn k3s_server_contract_uses_tls_sans_and_the_kubeconfig_output_variable() {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("output").join("kubeconfig.yaml");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut cmd = Command::new(BIN);
    cmd.args([
        "server",
        "--tls-san",
        "sim.example",
        "--tls-san=k3d-x-serverlb",
        "--disable=traefik",
    ])
    .args([
        "--https-listen-port",
        &port.to_string(),
        "--kubelet-arg",
        "eviction-hard=",
        "--token",
        "t",
    ])
    .env("K3S_KUBECONFIG_OUTPUT", &kubeconfig);
    let (child, _url) = spawn(cmd).await;
    let text = std::fs::read_to_string(&kubeconfig).unwrap();
    assert!(
        text.contains(&format!("server: https://127.0.0.1:{port}")),
        "{text}"
    );

    for name in ["sim.example", "k3d-x-serverlb", "localhost"] {
        let client = client_for(&kubeconfig, Some(name)).await;
        let namespaces: Api<Namespace> = Api::all(client);
        let list = tokio::time::timeout(DEADLINE, namespaces.list(&ListParams::default()))
            .await
            .unwrap();
        assert!(
            list.is_ok(),
            "the certificate is valid for {name}: {list:?}"
        );
    }
    let client = client_for(&kubeconfig, Some("not-in-the-cert.example")).await;
    let namespaces: Api<Namespace> = Api::all(client);
    let list = tokio::time::timeout(DEADLINE, namespaces.list(&ListParams::default()))
        .await
        .unwrap();
    assert!(list.is_err(), "a name outside the SANs is refused");
    terminate(child, DEADLINE).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn k3s_kubelet_max_pods_and_the_node_count_size_the_nodes() {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig.yaml");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut cmd = Command::new(BIN);
    cmd.args(["server", "--kubelet-arg=max-pods=7", "--nodes", "3"])
        .args(["--https-listen-port", &port.to_string()])
        .env("K3S_KUBECONFIG_OUTPUT", &kubeconfig);
    let (child, _url) = spawn(cmd).await;
    let out = kubectl_at(
        &kubeconfig,
        &[
            "get",
            "nodes",
            "-o",
            "jsonpath={range .items[*]}{.status.allocatable.pods}{\"\\n\"}{end}",
        ],
    )
    .await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let capacities: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect();
    assert_eq!(capacities, ["7", "7", "7"]);
    terminate(child, DEADLINE).await;
}
