//! The registry driver on the real Docker engine, with a registry image
//! built locally from Debian's distribution binary (nothing is pulled).

use std::{collections::HashMap, path::Path, time::Duration};

use dev_env::{
    config::Config,
    docker as engine,
    image::distribution,
    plan,
    registry::{self, Action},
    report::Silent,
    state::State,
};
use dev_env_tests::{
    DISTRIBUTION_BINARY, DistributionRegistry, DockerCleanup, push_tiny, require_docker,
    unique_name,
};

fn config(dir: &Path, text: &str) -> Config {
    let path = dir.join("dev-env.yaml");
    std::fs::write(&path, text).unwrap();
    Config::load(&path).unwrap()
}

async fn container_id(docker: &bollard::Docker, name: &str) -> String {
    engine::inspect_container(docker, name)
        .await
        .unwrap()
        .and_then(|c| c.id)
        .expect("the container exists")
}

#[tokio::test]
async fn registry_container_is_created_on_loopback_reused_and_keeps_its_data() {
    require_docker();
    let docker = engine::connect().await.unwrap();
    let name = unique_name("it-reg");
    let network = format!("{name}-net");
    let image_tag = format!("{name}/registry:local");
    let dir = tempfile::tempdir().unwrap();
    let config = config(
        dir.path(),
        &format!(
            "name: {name}\nnetwork: {{name: {network}}}\nregistry: {{image: '{image_tag}'}}\n"
        ),
    );
    let _cleanup = DockerCleanup {
        containers: vec![config.registry.name.clone()],
        images: vec![image_tag.clone()],
        volumes: vec![config.registry.volume.clone()],
        networks: vec![network.clone()],
    };
    let sh = xshell::Shell::new().unwrap();
    xshell::cmd!(
        sh,
        "docker network create --label dev-env.name={name} {network}"
    )
    .quiet()
    .ignore_stdout()
    .run()
    .unwrap();
    registry::build_local_image(&docker, Path::new(DISTRIBUTION_BINARY), &image_tag)
        .await
        .unwrap();

    let extra = HashMap::from([(String::from("it.extra"), String::from("kept"))]);
    let endpoint = registry::ensure_labelled(&docker, &config, extra, &Silent)
        .await
        .unwrap();
    assert_eq!(
        endpoint.action,
        Action::Created {
            image: image_tag.clone()
        }
    );
    let port = State::load(&config.state_dir())
        .unwrap()
        .registry_port
        .expect("the picked port is kept");
    assert_eq!(endpoint.host, format!("localhost:{port}"));

    let inspected = engine::inspect_container(&docker, &config.registry.name)
        .await
        .unwrap()
        .unwrap();
    let bindings = inspected
        .host_config
        .as_ref()
        .and_then(|h| h.port_bindings.as_ref())
        .and_then(|p| p.get("5000/tcp").cloned().flatten())
        .expect("port 5000 is published");
    assert_eq!(bindings.len(), 1);
    assert_eq!(bindings[0].host_ip.as_deref(), Some("127.0.0.1"));
    assert_eq!(
        bindings[0].host_port.as_deref(),
        Some(port.to_string().as_str())
    );
    let labels = inspected.config.as_ref().unwrap().labels.clone().unwrap();
    assert_eq!(labels[engine::LABEL_NAME], name);
    assert_eq!(labels[engine::LABEL_ROLE], registry::ROLE);
    assert_eq!(labels["it.extra"], "kept");
    let endpoints = inspected
        .network_settings
        .as_ref()
        .and_then(|n| n.networks.clone())
        .unwrap();
    let aliases = endpoints[&network].aliases.clone().unwrap_or_default();
    assert!(aliases.contains(&config.registry.name), "{aliases:?}");
    let mounts = inspected.mounts.clone().unwrap();
    assert!(
        mounts.iter().any(
            |m| m.name.as_deref() == Some(config.registry.volume.as_str())
                && m.destination.as_deref() == Some(registry::DATA_DIR)
        ),
        "{mounts:?}"
    );

    let repo = format!("{name}/tiny");
    let (digest, _) = push_tiny(&endpoint.host, &repo).await;
    let first_id = container_id(&docker, &config.registry.name).await;

    let again = registry::ensure(&docker, &config, &Silent).await.unwrap();
    assert_eq!(again.action, Action::Reused);
    assert_eq!(again.host, endpoint.host);
    assert_eq!(container_id(&docker, &config.registry.name).await, first_id);

    docker
        .stop_container(&config.registry.name, None)
        .await
        .unwrap();
    let started = registry::ensure(&docker, &config, &Silent).await.unwrap();
    assert_eq!(started.action, Action::Started);
    assert_eq!(started.host, endpoint.host);

    assert!(registry::remove(&docker, &config).await.unwrap());
    let recreated = registry::ensure(&docker, &config, &Silent).await.unwrap();
    assert!(matches!(recreated.action, Action::Created { .. }));
    assert_eq!(recreated.host, endpoint.host, "the kept port is reused");
    assert_ne!(container_id(&docker, &config.registry.name).await, first_id);
    let labels = engine::inspect_container(&docker, &config.registry.name)
        .await
        .unwrap()
        .and_then(|c| c.config?.labels)
        .unwrap();
    assert_eq!(
        labels[plan::LABEL_SPEC_HASH],
        plan::spec_hash(&plan::registry_spec(&config)),
        "`ensure` labels the container for the drift gate"
    );
    let served = distribution::Client::new(&recreated.host)
        .get_manifest(&repo, &digest)
        .await
        .unwrap();
    assert!(served.is_some(), "the volume kept the pushed image");

    // A declared port that differs from the published one is not papered over.
    let other_port = dev_env_tests::free_port();
    let moved = self::config(
        dir.path(),
        &format!(
            "name: {name}\nnetwork: {{name: {network}}}\nregistry: {{image: '{image_tag}', hostPort: {other_port}}}\n"
        ),
    );
    let err = registry::ensure(&docker, &moved, &Silent)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(&other_port.to_string()) && err.contains("--recreate"),
        "{err}"
    );
}

#[tokio::test]
async fn a_container_of_another_owner_is_left_alone() {
    require_docker();
    let docker = engine::connect().await.unwrap();
    let name = unique_name("it-foreign");
    let image_tag = format!("{name}/registry:local");
    let dir = tempfile::tempdir().unwrap();
    let config = config(
        dir.path(),
        &format!("name: {name}\nregistry: {{image: '{image_tag}'}}\n"),
    );
    let mut cleanup = DockerCleanup::default();
    cleanup.containers.push(config.registry.name.clone());
    cleanup.images.push(image_tag.clone());
    registry::build_local_image(&docker, Path::new(DISTRIBUTION_BINARY), &image_tag)
        .await
        .unwrap();
    let sh = xshell::Shell::new().unwrap();
    let container = &config.registry.name;
    xshell::cmd!(sh, "docker create --name {container} {image_tag}")
        .quiet()
        .ignore_stdout()
        .run()
        .unwrap();
    let err = registry::ensure(&docker, &config, &Silent)
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("does not belong to environment"), "{err}");
    assert!(err.contains(container.as_str()), "{err}");
    let untouched = engine::inspect_container(&docker, container)
        .await
        .unwrap()
        .unwrap();
    assert!(!engine::is_running(&untouched), "it was not started");
}

#[tokio::test]
async fn an_external_registry_is_used_as_it_is_and_nothing_is_created() {
    require_docker();
    let docker = engine::connect().await.unwrap();
    let external = DistributionRegistry::start();
    let name = unique_name("it-ext");
    let dir = tempfile::tempdir().unwrap();
    let config = config(
        dir.path(),
        &format!(
            "name: {name}\nregistry: {{external: '{}'}}\n",
            external.host()
        ),
    );
    let endpoint = registry::ensure(&docker, &config, &Silent).await.unwrap();
    assert_eq!(endpoint.action, Action::External);
    assert_eq!(endpoint.host, external.host());
    assert!(
        engine::inspect_container(&docker, &config.registry.name)
            .await
            .unwrap()
            .is_none(),
        "no container was created"
    );
    assert!(!registry::remove(&docker, &config).await.unwrap());
    assert!(!config.state_dir().join(dev_env::state::STATE_FILE).exists());
}

#[tokio::test]
async fn an_unpullable_registry_image_falls_back_to_one_built_from_the_binary() {
    require_docker();
    let docker = engine::connect().await.unwrap();
    let name = unique_name("it-fallback");
    let wanted = format!("{name}-missing/registry:none");
    let local = format!("{name}/registry:local");
    let mut cleanup = DockerCleanup::default();
    cleanup.images.push(local.clone());
    let used = registry::resolve_image(&docker, &wanted, &local, &Silent)
        .await
        .unwrap();
    assert_eq!(used, local);
    let built = engine::inspect_image(&docker, &local)
        .await
        .unwrap()
        .expect("the local image was built");
    let config = built.config.unwrap();
    assert_eq!(
        config.entrypoint.unwrap(),
        [DISTRIBUTION_BINARY.to_string()]
    );
    // The second time the built image is reused, not rebuilt.
    let again = registry::resolve_image(&docker, &wanted, &local, &Silent)
        .await
        .unwrap();
    assert_eq!(again, local);
    let reused = engine::inspect_image(&docker, &local)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(reused.id, built.id);
}

#[tokio::test]
async fn readiness_gives_up_at_its_deadline_with_the_last_error() {
    let endpoint = registry::Endpoint {
        host: format!("127.0.0.1:{}", dev_env_tests::free_port()),
        action: Action::External,
    };
    let err = registry::wait_ready_within(&endpoint, "unused", Duration::from_millis(300))
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains(&endpoint.host), "{err}");
    assert!(
        err.contains("cannot reach the registry"),
        "the last error: {err}"
    );
    assert!(err.contains("registry.external"), "the hint: {err}");
}
