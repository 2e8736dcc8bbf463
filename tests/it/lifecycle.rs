//! `dev up` / `dev down` / `dev reset` on the real Docker engine, with the
//! kube-sim node image and a registry image built locally from Debian's
//! distribution binary.

use std::os::unix::fs::PermissionsExt;

use dev_env::report::Silent;
use dev_env::{
    config::Config,
    docker, kubeconfig,
    lifecycle::{self, UpOptions},
    network,
    plan::{Drift, Object},
    state::State,
};
use dev_env_tests::{SimProject, Stderr, runtime};
use xshell::{Shell, cmd};

/// An environment with a namespace and a ConfigMap as its manifests.
struct Env(SimProject);

impl std::ops::Deref for Env {
    type Target = SimProject;
    fn deref(&self) -> &SimProject {
        &self.0
    }
}

impl Env {
    fn new() -> Env {
        let env = Env(SimProject::new("life"));
        env.write_config_map("dev");
        env.declare(&env.subnet);
        env
    }

    fn declare(&self, subnet: &str) {
        let text = format!(
            "name: {}\nnetwork: {{ipv4Subnet: {subnet}}}\ncluster: {{provider: sim}}\nmanifests: [manifests]\n",
            self.name
        );
        self.write("dev-env.yaml", &text);
    }
}

const OPTIONS: UpOptions = dev_env_tests::UP;

fn up(config: &Config, options: UpOptions) -> Result<lifecycle::UpReport, lifecycle::Error> {
    runtime().block_on(lifecycle::up(config, options, &Stderr))
}

/// Container ID, and every host address its ports are published on.
fn inspect(name: &str) -> (String, Vec<String>) {
    runtime().block_on(async {
        let docker = docker::connect().await.unwrap();
        let c = docker::inspect_container(&docker, name)
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("{name} exists"));
        let hosts = c
            .host_config
            .and_then(|h| h.port_bindings)
            .unwrap_or_default()
            .into_values()
            .flatten()
            .flatten()
            .map(|b| b.host_ip.unwrap_or_default())
            .collect();
        (c.id.unwrap(), hosts)
    })
}

fn resource_versions(kubeconfig: &std::path::Path) -> String {
    let sh = Shell::new().unwrap();
    let path = "jsonpath={.items[*].metadata.resourceVersion}";
    cmd!(
        sh,
        "kubectl --kubeconfig {kubeconfig} get namespace/app configmap/settings -n app -o {path}"
    )
    .read()
    .expect("kubectl reaches the cluster through kubeconfig.host")
}

#[test]
fn up_converges_is_idempotent_and_keeps_images_across_down() {
    let env = Env::new();
    let config = env.config();

    let first = up(&config, OPTIONS).expect("dev up from nothing");
    assert_eq!(first.network, Some(network::Ensured::Created));
    let (_, node) = first.node.expect("a node");

    // Both kubeconfigs exist, mode 0600; the host one works with kubectl,
    // the network one names the node.
    for file in [&node.host_kubeconfig, &node.network_kubeconfig] {
        let mode = std::fs::metadata(file).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{}", file.display());
    }
    let network_file = std::fs::read_to_string(&node.network_kubeconfig).unwrap();
    assert!(
        network_file.contains(&format!("https://{}-server-0:6443", env.name)),
        "{network_file}"
    );
    assert!(
        network_file.contains("certificate-authority-data"),
        "TLS stays verified: {network_file}"
    );
    let host_file = std::fs::read_to_string(&node.host_kubeconfig).unwrap();
    assert!(
        host_file.contains(&format!("https://127.0.0.1:{}", node.api_port)),
        "{host_file}"
    );

    // Every published port is bound to 127.0.0.1.
    let (node_id, node_hosts) = inspect(&format!("{}-server-0", env.name));
    let (registry_id, registry_hosts) = inspect(&format!("{}-registry", env.name));
    assert!(!node_hosts.is_empty() && !registry_hosts.is_empty());
    for host in node_hosts.iter().chain(&registry_hosts) {
        assert_eq!(host, "127.0.0.1");
    }

    // The KEP-1755 ConfigMap tells tools where the registry is.
    let sh = Shell::new().unwrap();
    let kc = &node.host_kubeconfig;
    let hosting = {
        let path = "jsonpath={.data.localRegistryHosting\\.v1}";
        cmd!(sh, "kubectl --kubeconfig {kc} -n kube-public get configmap local-registry-hosting -o {path}")
    }
        .read()
        .unwrap();
    assert!(
        hosting.contains(&format!(
            "hostFromClusterNetwork: \"{}-registry:5000\"",
            env.name
        )),
        "{hosting}"
    );

    // A second `up` changes nothing: same containers, same resourceVersions.
    let versions = resource_versions(kc);
    let second = up(&config, OPTIONS).expect("second dev up");
    assert_eq!(second.network, Some(network::Ensured::Unchanged));
    assert!(
        second.applied.iter().all(|a| !a.changed),
        "{:?}",
        second.applied
    );
    assert_eq!(inspect(&format!("{}-server-0", env.name)).0, node_id);
    assert_eq!(inspect(&format!("{}-registry", env.name)).0, registry_id);
    assert_eq!(resource_versions(kc), versions);

    // Push something, go down and up again: the registry keeps it.
    let host = second.registry.host.clone();
    let client = dev_env::image::distribution::Client::new(&host);
    let rt = runtime();
    // A whole image: its blobs, and its manifest under a tag.
    let image = dev_env::image::oci::binary_image(
        "kept",
        b"kept across dev down".to_vec(),
        &dev_env::platform::Platform::linux(std::env::consts::ARCH),
    );
    rt.block_on(async {
        for blob in image.blobs() {
            client
                .upload_blob("keep/me", &blob.digest, blob.bytes.clone())
                .await
                .unwrap();
        }
        let (media_type, bytes) = (image.manifest.media_type, image.manifest.bytes.clone());
        client
            .put_manifest("keep/me", "dev", media_type, bytes)
            .await
            .unwrap();
    });
    let digest = image.manifest.digest.clone();
    let down = rt
        .block_on(lifecycle::down(
            &config,
            lifecycle::DownOptions::DOWN,
            &Silent,
        ))
        .unwrap();
    assert!(down.node && down.registry && !down.volume);
    assert!(
        !node.host_kubeconfig.exists(),
        "down removes kubeconfigs that name a gone server"
    );
    let again = rt
        .block_on(lifecycle::down(
            &config,
            lifecycle::DownOptions::DOWN,
            &Silent,
        ))
        .unwrap();
    assert_eq!(
        again,
        lifecycle::DownReport {
            name: config.name.clone(),
            ..lifecycle::DownReport::default()
        },
        "already down is success"
    );
    up(&config, OPTIONS).expect("dev up after down");
    let kept = rt
        .block_on(client.get_manifest("keep/me", &digest))
        .unwrap()
        .expect("the manifest, by digest");
    assert_eq!(
        dev_env::image::oci::sha256_digest(&kept.bytes),
        digest,
        "the pushed image survived"
    );

    // Reset with purge removes everything, including the data.
    let reset = rt
        .block_on(lifecycle::down(
            &config,
            lifecycle::DownOptions::RESET_PURGE,
            &Silent,
        ))
        .unwrap();
    assert!(
        reset.node && reset.registry && reset.volume && reset.network,
        "{reset:?}"
    );
}

#[test]
fn drift_stops_up_down_still_works_and_recreate_converges() {
    let env = Env::new();
    up(&env.config(), OPTIONS).expect("dev up from nothing");

    // Another subnet: `up` refuses and names the field, changing nothing.
    env.declare("10.199.3.0/24");
    let drifted = env.config();
    let err = up(&drifted, OPTIONS).expect_err("a drifted network stops dev up");
    let message = err.to_string();
    assert!(
        message.contains("ipv4Subnet") && message.contains("--recreate"),
        "{message}"
    );
    let lifecycle::Error::Drift { drifts } = err else {
        panic!("a drift error: {message}")
    };
    let objects: Vec<Object> = drifts.iter().map(|d: &Drift| d.object).collect();
    assert!(objects.contains(&Object::Network), "{objects:?}");

    // `down` works whatever the drift; then `up --recreate` converges on
    // the new subnet.
    let rt = runtime();
    rt.block_on(lifecycle::down(
        &drifted,
        lifecycle::DownOptions::DOWN,
        &Silent,
    ))
    .expect("dev down despite drift");
    up(
        &drifted,
        UpOptions {
            recreate: true,
            ..OPTIONS
        },
    )
    .expect("dev up --recreate");
    let subnet = rt.block_on(async {
        let docker = docker::connect().await.unwrap();
        let net = network::inspect(&docker, &env.name).await.unwrap().unwrap();
        net.ipam.unwrap().config.unwrap()[0].subnet.clone().unwrap()
    });
    assert_eq!(subnet, "10.199.3.0/24");
    let left = rt.block_on(async {
        lifecycle::drift(
            &docker::connect().await.unwrap(),
            &drifted,
            &dev_env::plan::EngineSetup::local(&drifted),
        )
        .await
        .unwrap()
    });
    assert!(left.is_empty(), "{left:?}");
    rt.block_on(lifecycle::down(
        &drifted,
        lifecycle::DownOptions::RESET_PURGE,
        &Silent,
    ))
    .unwrap();
}

#[test]
fn up_repairs_a_killed_node_and_a_deleted_registry() {
    let env = Env::new();
    let config = env.config();
    up(&config, OPTIONS).expect("dev up from nothing");
    let sh = Shell::new().unwrap();
    let (node, registry) = (
        format!("{}-server-0", env.name),
        format!("{}-registry", env.name),
    );
    cmd!(sh, "docker kill {node}")
        .quiet()
        .ignore_stdout()
        .run()
        .unwrap();
    cmd!(sh, "docker rm -f {registry}")
        .quiet()
        .ignore_stdout()
        .run()
        .unwrap();

    let report = up(&config, OPTIONS).expect("dev up repairs");
    let outcome = report.node.as_ref().map(|(o, _)| o.clone());
    // The engine may have restarted the node on its own (restart policy);
    // either way it runs again without being recreated.
    assert!(
        matches!(
            outcome,
            Some(dev_env::cluster::Ensured::Started | dev_env::cluster::Ensured::Unchanged)
        ),
        "{outcome:?}"
    );
    let state = State::load(&config.state_dir()).unwrap();
    assert_eq!(
        report.registry.host,
        format!("localhost:{}", state.registry_port.unwrap()),
        "the port is kept"
    );
    let namespace = runtime().block_on(async {
        let path = config.state_dir().join(kubeconfig::HOST_FILE);
        let client = kubeconfig::client(&path, None).await.unwrap();
        let ns: kube::Api<k8s_openapi::api::core::v1::Namespace> = kube::Api::all(client);
        ns.get_opt("app").await.unwrap()
    });
    assert!(
        namespace.is_some(),
        "manifests are re-applied after a restart"
    );
    runtime()
        .block_on(lifecycle::down(
            &config,
            lifecycle::DownOptions::RESET_PURGE,
            &Silent,
        ))
        .unwrap();
}

/// `dev up` of a sim environment whose node image is `image`, with its
/// events recorded; the report's node image and the lines.
fn up_with_node_image(image: &str) -> (Option<lifecycle::NodeImage>, String) {
    let env = SimProject::with_config_map("pub");
    env.write(
        "dev-env.yaml",
        &format!(
            "name: {}\nnetwork: {{ipv4Subnet: {}}}\ncluster: {{provider: sim, image: '{image}'}}\nmanifests: [manifests]\n",
            env.name, env.subnet
        ),
    );
    let recorder = dev_env_tests::Recorder::default();
    let report = runtime()
        .block_on(lifecycle::up(&env.config(), OPTIONS, &recorder))
        .unwrap_or_else(|e| panic!("{}", dev_env::error_chain(&e)));
    let lines = recorder.lines.lock().unwrap().join("\n");
    (report.node_image, lines)
}

fn docker(args: &[&str]) {
    let sh = Shell::new().unwrap();
    cmd!(sh, "docker {args...}")
        .quiet()
        .ignore_stdout()
        .run()
        .unwrap();
}

fn sim_source_label(image: &str) -> String {
    let sh = Shell::new().unwrap();
    let format = format!(
        "{{{{index .Config.Labels \"{}\"}}}}",
        lifecycle::SIM_SOURCE_LABEL
    );
    cmd!(sh, "docker image inspect --format {format} {image}")
        .quiet()
        .read()
        .unwrap()
}

#[test]
fn a_published_node_image_is_pulled_when_built_from_these_sources_and_built_here_otherwise() {
    // The node image of these sources, as a publisher would have built it.
    let local = dev_env::config::DEFAULT_SIM_IMAGE;
    let (built, _) = up_with_node_image(local);
    assert!(built.is_some(), "{built:?}");
    let source = lifecycle::sim_source_hash(&dev_env_tests::repo_root()).unwrap();
    assert_eq!(sim_source_label(local), source);

    let publisher = dev_env_tests::DistributionRegistry::start();
    let published = format!("{}/kube-sim:published", publisher.host());
    docker(&["tag", local, &published]);
    docker(&["push", &published]);
    docker(&["rmi", &published]);
    // One of other sources: the same image under another label.
    let stale = format!("{}/kube-sim:stale", publisher.host());
    let context = tempfile::tempdir().unwrap();
    std::fs::write(
        context.path().join("Dockerfile"),
        format!("FROM {local}\nLABEL {}=0123\n", lifecycle::SIM_SOURCE_LABEL),
    )
    .unwrap();
    docker(&[
        "build",
        "-q",
        "-t",
        &stale,
        &context.path().to_string_lossy(),
    ]);
    docker(&["push", &stale]);
    docker(&["rmi", &stale]);
    let gone = format!("127.0.0.1:{}/kube-sim:gone", dev_env_tests::free_port());

    let (pulled, lines) = up_with_node_image(&published);
    assert_eq!(pulled, Some(lifecycle::NodeImage::Pulled), "{lines}");
    assert!(!lines.contains("building"), "{lines}");
    assert_eq!(sim_source_label(&published), source);

    let (rebuilt, lines) = up_with_node_image(&stale);
    assert_eq!(rebuilt, Some(lifecycle::NodeImage::Built), "{lines}");
    assert!(lines.contains("it was built from other sources"), "{lines}");
    assert_eq!(sim_source_label(&stale), source, "the build replaced it");

    let (offline, lines) = up_with_node_image(&gone);
    assert_eq!(offline, Some(lifecycle::NodeImage::Built), "{lines}");
    assert!(lines.contains("the engine cannot pull it"), "{lines}");
    assert_eq!(sim_source_label(&gone), source);

    let sh = Shell::new().unwrap();
    for image in [&published, &stale, &gone] {
        let _ = cmd!(sh, "docker rmi {image}")
            .quiet()
            .ignore_stdout()
            .ignore_stderr()
            .run();
    }
}
