//! The image pipeline against the real distribution registry (Debian's
//! `docker-registry`, started by the fixture) and the real Docker engine.

use dev_env::{
    config::Config,
    image::{
        self, Pushed,
        distribution::{self, index},
        oci,
    },
    platform::Platform,
    state::State,
};
use dev_env_tests::{
    DistributionRegistry, DockerCleanup, Project, free_port, push_tiny, require_docker,
};

/// Pushes `component` of `project` the way `push-image` does: build, push,
/// verify, record in the state.
async fn push(project: &Project, component: &str) -> Result<Pushed, image::Error> {
    let config = Config::load(&project.config_path()).expect("the fixture config is valid");
    let host = config
        .registry
        .external
        .clone()
        .expect("fixtures use an external registry");
    let client = distribution::Client::new(&host);
    let components = [component.to_string()];
    let builds = dev_env_tests::builds_here(&config, &components);
    let mut results =
        image::push_components(&config, &client, &components, dev_env_tests::quiet(&builds)).await;
    results.remove(0)
}

fn state(project: &Project) -> State {
    let config = Config::load(&project.config_path()).unwrap();
    State::load(&config.state_dir()).unwrap()
}

fn state_file_exists(project: &Project) -> bool {
    let config = Config::load(&project.config_path()).unwrap();
    config.state_dir().join(dev_env::state::STATE_FILE).exists()
}

/// `GET /v2/<repo>/manifests/<digest>` from the registry.
async fn manifest_by_digest(
    host: &str,
    repo: &str,
    digest: &str,
) -> Option<distribution::Manifest> {
    distribution::Client::new(host)
        .get_manifest(repo, digest)
        .await
        .unwrap()
}

#[tokio::test]
async fn cargo_push_is_verified_recorded_and_incremental() {
    let registry = DistributionRegistry::start();
    let project = Project::new(&registry.host());
    let repo = format!("{}/hello", project.name);

    let first = push(&project, "hello").await.unwrap();
    assert_eq!(first.reference, format!("{}/{repo}:dev", registry.host()));
    assert_eq!(first.uploaded_blobs, 2, "config and layer: {first:?}");
    assert_eq!(first.skipped_blobs, 0);
    assert!(first.uploaded_bytes > 100_000, "a static binary: {first:?}");
    let served = manifest_by_digest(&registry.host(), &repo, &first.digest)
        .await
        .expect("the registry serves the manifest by digest");
    assert_eq!(oci::sha256_digest(&served.bytes), first.digest);
    assert_eq!(served.digest_header.as_deref(), Some(first.digest.as_str()));
    let recorded = &state(&project).images["hello"];
    assert_eq!(recorded.digest, first.digest);
    assert_eq!(recorded.repository, repo);

    let again = push(&project, "hello").await.unwrap();
    assert_eq!(again.digest, first.digest);
    assert_eq!(again.uploaded_bytes, 0, "{again:?}");
    assert_eq!(again.uploaded_blobs, 0);
    assert_eq!(again.skipped_blobs, 2);

    project.edit(
        "hello/src/main.rs",
        "fn main() {\n    println!(\"hello, two\");\n}\n",
    );
    let changed = push(&project, "hello").await.unwrap();
    assert_ne!(changed.digest, first.digest);
    // The one layer changed, so did the config that names its diff ID.
    assert_eq!(changed.uploaded_blobs, 2, "{changed:?}");
    assert_eq!(state(&project).images["hello"].digest, changed.digest);
    assert!(
        manifest_by_digest(&registry.host(), &repo, &first.digest)
            .await
            .is_some(),
        "the earlier image stays pullable by digest"
    );
}

/// The build of the fixture's `hello` binary.
fn hello(project: &Project) -> image::cargo::CargoBuild<'_> {
    image::cargo::CargoBuild {
        root: project.root(),
        target_dir: project.root().join(image::cargo::TARGET_DIR),
        package: "hello",
        bin: "hello",
        profile: String::from("dev"),
        tuning: &[],
        target: dev_env_tests::builds_here(
            &Config::load(&project.config_path()).unwrap(),
            &[String::from("hello")],
        )
        .target("hello")
        .unwrap()
        .clone(),
        lines: None,
        progress: None,
        cancel: None,
    }
}

#[test]
fn two_clean_cargo_builds_give_byte_identical_manifests() {
    let project = Project::new("127.0.0.1:1");
    let build = hello(&project);
    let target_dir = project.root().join(image::cargo::TARGET_DIR);
    let first = image::cargo::build_image(&build).unwrap();
    std::fs::remove_dir_all(&target_dir).unwrap();
    let second = image::cargo::build_image(&build).unwrap();
    assert_eq!(first.manifest.bytes, second.manifest.bytes);
    assert_eq!(first.manifest.digest, second.manifest.digest);
    assert_eq!(first.layers, second.layers);

    // Paths are remapped: the same sources in another checkout give the
    // same image too.
    let elsewhere = Project::new("127.0.0.1:1");
    let third = image::cargo::build_image(&image::cargo::CargoBuild {
        root: elsewhere.root(),
        target_dir: elsewhere.root().join(image::cargo::TARGET_DIR),
        ..build
    })
    .unwrap();
    assert_ne!(elsewhere.root(), project.root());
    assert_eq!(third.manifest.digest, first.manifest.digest);
}

#[tokio::test]
async fn a_build_that_compiles_reports_its_progress_and_an_up_to_date_one_stays_silent() {
    let project = Project::new("127.0.0.1:1");
    let recorder = dev_env_tests::Recorder::default();
    let build = || hello(&project);
    let sinks = image::cargo::Sinks {
        lines: None,
        progress: Some(&recorder),
        what: "hello",
    };
    image::cargo::off_runtime(build(), image::cargo::build_binary, sinks)
        .await
        .unwrap();
    let progress = recorder.lines.lock().unwrap().clone();
    assert!(progress.len() >= 2, "{progress:?}");
    assert!(
        progress.iter().all(|l| l.starts_with("building hello: ")),
        "{progress:?}"
    );
    // Counted up to its total (one crate compiles: the crates counted).
    let last = progress.last().unwrap();
    let counts = last
        .trim_start_matches("building hello: ")
        .trim_end_matches(" crates");
    let (done, total) = counts.split_once('/').expect("a total");
    assert_eq!(done, total, "{progress:?}");

    recorder.lines.lock().unwrap().clear();
    image::cargo::off_runtime(build(), image::cargo::build_binary, sinks)
        .await
        .unwrap();
    assert_eq!(*recorder.lines.lock().unwrap(), Vec::<String>::new());
}

#[tokio::test]
async fn docker_push_uploads_only_the_changed_layer() {
    require_docker();
    let registry = DistributionRegistry::start();
    let project = Project::new(&registry.host());
    // A build argument leaves the build to the engine: one layer per COPY.
    project.edit(
        "static/Dockerfile",
        "FROM scratch\nARG NOTE=engine\nCOPY a.txt /a.txt\nCOPY b.txt /b.txt\n",
    );
    let repository = format!("{}/{}/static", registry.host(), project.name);
    let mut cleanup = DockerCleanup::default();
    cleanup.images.push(format!("{repository}:dev"));

    let first = push(&project, "static").await.unwrap();
    cleanup.images.push(first_image_id(&repository));
    assert_eq!(first.uploaded_blobs, 3, "config and two layers: {first:?}");
    let served = manifest_by_digest(
        &registry.host(),
        &format!("{}/static", project.name),
        &first.digest,
    )
    .await
    .expect("the registry serves the manifest by digest");
    assert_eq!(oci::sha256_digest(&served.bytes), first.digest);
    assert_eq!(state(&project).images["static"].digest, first.digest);

    let again = push(&project, "static").await.unwrap();
    assert_eq!(
        again.digest, first.digest,
        "the engine's cache gives the same image"
    );
    assert_eq!(again.uploaded_bytes, 0, "{again:?}");
    assert_eq!(again.skipped_blobs, 3);

    project.edit("static/b.txt", "b: second layer, edited\n");
    let changed = push(&project, "static").await.unwrap();
    cleanup.images.push(first_image_id(&repository));
    assert_ne!(changed.digest, first.digest);
    assert_eq!(
        changed.uploaded_blobs, 2,
        "layer b and the config: {changed:?}"
    );
    assert_eq!(
        changed.skipped_blobs, 1,
        "layer a is already there: {changed:?}"
    );

    // `.dockerignore` kept `ignored.txt` out of the context, so a change to
    // it changes nothing.
    project.edit("static/ignored.txt", "still left out\n");
    let ignored = push(&project, "static").await.unwrap();
    assert_eq!(ignored.digest, changed.digest);
}

/// The image ID `<repository>:dev` names now.
fn first_image_id(repository: &str) -> String {
    let sh = xshell::Shell::new().unwrap();
    let reference = format!("{repository}:dev");
    let format = "{{.Id}}";
    xshell::cmd!(sh, "docker image inspect --format {format} {reference}")
        .quiet()
        .read()
        .unwrap()
}

#[tokio::test]
async fn a_failed_docker_build_names_the_component_and_shows_the_log() {
    require_docker();
    let registry = DistributionRegistry::start();
    let project = Project::new(&registry.host());
    project.edit(
        "static/Dockerfile",
        "FROM scratch\nCOPY a.txt /a.txt\nCOPY missing.txt /missing.txt\n",
    );
    let mut cleanup = DockerCleanup::default();
    cleanup
        .images
        .push(format!("{}/{}/static:dev", registry.host(), project.name));
    let err = dev_env::error_chain(&push(&project, "static").await.unwrap_err());
    assert!(err.contains("component `static`"), "{err}");
    assert!(err.contains("missing.txt"), "the engine's cause: {err}");
    assert!(err.contains("COPY a.txt"), "the log's tail: {err}");
    assert!(!state_file_exists(&project), "nothing recorded");
}

#[tokio::test]
async fn a_failed_cargo_build_names_the_component_and_the_compiler_error() {
    let registry = DistributionRegistry::start();
    let project = Project::new(&registry.host());
    project.edit(
        "hello/src/main.rs",
        "fn main() {\n    let x: u8 = \"no\";\n}\n",
    );
    let err = dev_env::error_chain(&push(&project, "hello").await.unwrap_err());
    assert!(err.contains("component `hello`"), "{err}");
    assert!(err.contains("cargo build"), "{err}");
    assert!(
        err.contains("mismatched types"),
        "the compiler's words: {err}"
    );
    assert!(!state_file_exists(&project), "nothing recorded");
}

#[tokio::test]
async fn a_registry_on_the_wrong_port_or_down_fails_before_building() {
    let project = Project::new(&format!("127.0.0.1:{}", free_port()));
    let err = dev_env::error_chain(&push(&project, "hello").await.unwrap_err());
    assert!(err.contains("component `hello`"), "{err}");
    assert!(err.contains("cannot reach the registry"), "{err}");
    assert!(err.contains("cargo xtask dev up"), "the fix: {err}");
    assert!(!state_file_exists(&project), "nothing recorded");

    let mut registry = DistributionRegistry::start();
    project.write_config(&registry.host());
    registry.stop();
    let err = dev_env::error_chain(&push(&project, "hello").await.unwrap_err());
    assert!(err.contains(&registry.host()), "{err}");
    assert!(err.contains("cannot reach the registry"), "{err}");
    assert!(!state_file_exists(&project), "nothing recorded");
}

#[tokio::test]
async fn verification_rejects_a_digest_the_registry_does_not_serve() {
    let registry = DistributionRegistry::start();
    let client = distribution::Client::new(&registry.host());
    let repo = "verify/tiny";
    let (digest, stated) = push_tiny(&registry.host(), repo).await;
    assert_eq!(stated.as_deref(), Some(digest.as_str()));

    let here = Platform::linux(std::env::consts::ARCH);
    image::verify(&client, "tiny", repo, &digest, &here)
        .await
        .unwrap();
    let other = format!("sha256:{}", "0".repeat(64));
    let err = image::verify(&client, "tiny", repo, &other, &here)
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("component `tiny`"), "{err}");
    assert!(err.contains("failed verification"), "{err}");
    assert!(err.contains(&digest) && err.contains(&other), "{err}");
}

/// Engines with the containerd image store push an image index. It is read
/// with the index types accepted (a registry answers 404 to a read that
/// accepts none), its entry for the cluster's platform is the image
/// checked, and the index's digest stays the pushed one: the digest pods
/// pulling by it report.
#[tokio::test]
async fn an_index_of_two_platforms_is_read_for_the_clusters_platform() {
    let registry = DistributionRegistry::start();
    let client = distribution::Client::new(&registry.host());
    let repo = "index/app";
    let platforms = [Platform::linux("x86_64"), Platform::linux("aarch64")];
    let mut entries = Vec::new();
    for platform in &platforms {
        let app = format!("the app for {platform}").into_bytes();
        let built = oci::binary_image("app", app, platform);
        for blob in built.blobs() {
            let bytes = blob.bytes.clone();
            client.upload_blob(repo, &blob.digest, bytes).await.unwrap();
        }
        let manifest = &built.manifest;
        let (digest, bytes) = (&manifest.digest, manifest.bytes.clone());
        client
            .put_manifest(repo, digest, manifest.media_type, bytes)
            .await
            .unwrap();
        entries.push(serde_json::json!({
            "mediaType": manifest.media_type, "digest": digest,
            "size": manifest.bytes.len(), "platform": platform,
        }));
    }
    let index = serde_json::json!({
        "schemaVersion": 2, "mediaType": index::OCI_INDEX, "manifests": entries,
    });
    let index = serde_json::to_vec(&index).unwrap();
    let index_digest = oci::sha256_digest(&index);
    client
        .put_manifest(repo, image::DEV_TAG, index::OCI_INDEX, index.into())
        .await
        .unwrap();

    for (platform, entry) in platforms.iter().zip(&entries) {
        let read = image::verify(&client, "app", repo, &index_digest, platform)
            .await
            .unwrap();
        assert_eq!(oci::sha256_digest(&read.served.bytes), index_digest);
        assert_eq!(oci::sha256_digest(&read.manifest.bytes), entry["digest"]);
        let exists = client.manifest_exists(repo, &index_digest, Some(platform));
        assert!(exists.await.unwrap(), "the pushed digest is the index's");
    }
    let riscv = Platform::linux("riscv64");
    let err = image::verify(&client, "app", repo, &index_digest, &riscv)
        .await
        .unwrap_err();
    let err = dev_env::error_chain(&err);
    assert!(
        err.contains("without an image for linux/riscv64")
            && err.contains("(it has linux/amd64, linux/arm64/v8)"),
        "{err}"
    );
}

/// kube talks TLS through rustls with the ring provider; the registry
/// client speaks plain HTTP and brings no second provider, so both work in
/// one process (two providers make rustls refuse to pick one, and panic).
#[tokio::test]
async fn a_kube_client_and_a_registry_client_work_in_one_process() {
    let registry = DistributionRegistry::start();
    let kube_config = kube::Config::new(
        format!("https://127.0.0.1:{}", free_port())
            .parse()
            .unwrap(),
    );
    let kube_client = kube::Client::try_from(kube_config).expect("a kube client builds");
    let registry_client = distribution::Client::new(&registry.host());
    registry_client.ping().await.unwrap();
    // A TLS request to nowhere fails as a connection error, not a panic.
    assert!(kube_client.apiserver_version().await.is_err());
    registry_client.ping().await.unwrap();
}

#[tokio::test]
async fn the_engine_pulls_and_runs_a_cargo_built_image_by_digest() {
    require_docker();
    let registry = DistributionRegistry::start();
    let project = Project::new(&registry.host());
    let pushed = push(&project, "hello").await.unwrap();
    let pinned = format!("{}/{}@{}", registry.host(), pushed.image, pushed.digest);
    let (output, _cleanup) = pull_and_run(&pinned);
    assert_eq!(output, "hello, one");
    // The image says what it runs on: this engine's platform.
    let platform = dev_env_tests::image_platform(&pinned);
    let here = dev_env::platform::Platform::linux(std::env::consts::ARCH);
    assert_eq!(platform, format!("linux/{}", here.architecture));
}

#[tokio::test]
async fn a_docker_build_is_given_the_clusters_platform() {
    require_docker();
    let registry = DistributionRegistry::start();
    let project = Project::new(&registry.host());
    let config = Config::load(&project.config_path()).unwrap();
    let client = distribution::Client::new(&registry.host());
    // A variable leaves the build to the engine (dev-env expands none),
    // which is given the platform of a cluster of arm64 nodes, whatever
    // this machine is. (Its classic builder commits steps other than COPY
    // for its own platform, so the Dockerfile has no other step.)
    project.edit(
        "static/Dockerfile",
        "FROM scratch\nCOPY a.txt /a${UNSET}.txt\n",
    );
    let arm64 = dev_env::platform::Platform::linux("arm64");
    let components = [String::from("static")];
    let builds = image::builds::plan(&config, &components, &arm64).unwrap();
    let pushed =
        image::push_components(&config, &client, &components, dev_env_tests::quiet(&builds))
            .await
            .remove(0)
            .unwrap();
    let repository = format!("{}/{}", registry.host(), pushed.image);
    let pinned = format!("{repository}@{}", pushed.digest);
    let mut cleanup = DockerCleanup::default();
    cleanup
        .images
        .extend([pinned.clone(), format!("{repository}:dev")]);
    dev_env_tests::pull(&pinned);
    assert_eq!(dev_env_tests::image_platform(&pinned), "linux/arm64");
}

#[tokio::test]
async fn the_engine_pulls_and_runs_an_image_whose_layer_spans_several_gzip_members() {
    require_docker();
    let registry = DistributionRegistry::start();
    let project = Project::new(&registry.host());
    // The fixture's binary, with 20 MB after its end (ignored by the
    // loader): a layer of three members.
    let config = Config::load(&project.config_path()).unwrap();
    let build = hello(&project);
    let path = image::cargo::build_binary(&build).unwrap();
    let mut binary = std::fs::read(path).unwrap();
    let mut state = 0x2545_f491_u32;
    binary.extend((0..20 << 20).map(|_| {
        state ^= state << 13;
        state ^= state >> 17;
        state ^= state << 5;
        state as u8
    }));
    let here = dev_env::platform::Platform::linux(std::env::consts::ARCH);
    let big = oci::binary_image("hello", binary, &here);
    assert!(
        big.layers[0].bytes.len() > 8 << 20,
        "{}",
        big.layers[0].bytes.len()
    );
    let client = distribution::Client::new(&registry.host());
    let repo = format!("{}/big", config.name);
    for blob in big.blobs() {
        client
            .upload_blob(&repo, &blob.digest, blob.bytes.clone())
            .await
            .unwrap();
    }
    let manifest = &big.manifest;
    client
        .put_manifest(&repo, "dev", manifest.media_type, manifest.bytes.clone())
        .await
        .unwrap();
    let pinned = format!("{}/{repo}@{}", registry.host(), manifest.digest);
    let (output, _cleanup) = pull_and_run(&pinned);
    assert_eq!(output, "hello, one");
}

/// Pulls `pinned` into the engine and runs it once: what it printed, and
/// the guard that removes the image and the container.
fn pull_and_run(pinned: &str) -> (String, DockerCleanup) {
    let container = dev_env_tests::unique_name("it-run");
    let mut cleanup = DockerCleanup::default();
    cleanup.containers.push(container.clone());
    cleanup.images.push(pinned.to_string());
    dev_env_tests::pull(pinned);
    let sh = xshell::Shell::new().unwrap();
    let output = xshell::cmd!(sh, "docker run --rm --name {container} {pinned}")
        .quiet()
        .read()
        .unwrap();
    (output, cleanup)
}

#[tokio::test]
async fn a_dockerfile_dev_env_carries_out_itself_is_built_without_the_engine() {
    require_docker();
    let registry = DistributionRegistry::start();
    let project = Project::new(&registry.host());
    let repository = format!("{}/{}/static", registry.host(), project.name);
    let first = push(&project, "static").await.unwrap();
    assert_eq!(first.uploaded_blobs, 2, "a config and one layer: {first:?}");
    let sh = xshell::Shell::new().unwrap();
    let tagged = format!("{repository}:dev");
    assert!(
        xshell::cmd!(sh, "docker image inspect {tagged}")
            .quiet()
            .ignore_stdout()
            .ignore_stderr()
            .run()
            .is_err(),
        "the engine built nothing"
    );
    let again = push(&project, "static").await.unwrap();
    assert_eq!(
        (again.digest.as_str(), again.uploaded_bytes),
        (first.digest.as_str(), 0)
    );
    // The engine takes what was assembled: the files are where the
    // Dockerfile copies them.
    let pinned = format!("{repository}@{}", first.digest);
    let container = dev_env_tests::unique_name("it-static");
    let mut cleanup = DockerCleanup::default();
    cleanup.containers.push(container.clone());
    cleanup.images.push(pinned.clone());
    dev_env_tests::pull(&pinned);
    xshell::cmd!(sh, "docker create --name {container} {pinned} /none")
        .quiet()
        .ignore_stdout()
        .run()
        .unwrap();
    let out = tempfile::tempdir().unwrap();
    let into = out.path().display().to_string();
    let source = format!("{container}:/b.txt");
    xshell::cmd!(sh, "docker cp {source} {into}")
        .quiet()
        .run()
        .unwrap();
    let copied = std::fs::read_to_string(out.path().join("b.txt")).unwrap();
    let written = std::fs::read_to_string(project.root().join("static/b.txt")).unwrap();
    assert_eq!(copied, written);
}
