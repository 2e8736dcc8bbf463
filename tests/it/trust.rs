//! What keeps an environment trustworthy under faults, concurrency and bad
//! input, on the real engine with a kube-sim node: ownership on teardown,
//! one writer at a time, registry content checked, manifests validated
//! before anything is applied, a lost network repaired, interrupted runs
//! converged from.

use std::time::{Duration, Instant};

use dev_env::{
    config::Config,
    lifecycle::{self, DownOptions},
    lock, ownership,
    state::State,
    status,
};
use dev_env_tests::{Recorder, SimProject, Stderr, runtime, up};
use xshell::{Shell, cmd};

fn down(config: &Config, options: DownOptions) -> Result<lifecycle::DownReport, lifecycle::Error> {
    runtime().block_on(lifecycle::down(config, options, &Stderr))
}

fn sh() -> Shell {
    Shell::new().unwrap()
}

fn exists(kind: &str, name: &str) -> bool {
    let sh = sh();
    cmd!(sh, "docker {kind} inspect {name}")
        .quiet()
        .ignore_stdout()
        .ignore_stderr()
        .run()
        .is_ok()
}

fn kubectl(env: &SimProject, args: &[&str]) -> String {
    let sh = sh();
    let kc = env
        .dir
        .join(".dev-env")
        .join(&env.name)
        .join("kubeconfig.host");
    cmd!(sh, "kubectl --kubeconfig {kc} {args...}")
        .read()
        .unwrap()
}

#[test]
fn teardown_refuses_another_environments_objects_and_reports_only_what_it_removed() {
    let owner = SimProject::with_config_map("own");
    up(&owner.config()).expect("the owner's dev up");

    // A config that names the owner's network, registry and volume.
    let intruder = SimProject::new("intr");
    intruder.write(
        "dev-env.yaml",
        &format!(
            "name: {}\nnetwork: {{name: {o}, ipv4Subnet: {}}}\n\
             registry: {{name: {o}-registry, volume: {o}-registry-data}}\ncluster: {{provider: sim}}\nmanifests: []\n",
            intruder.name,
            owner.subnet,
            o = owner.name
        ),
    );
    let config = intruder.config();
    for options in [DownOptions::RESET_PURGE, DownOptions::DOWN] {
        let err = down(&config, options).expect_err("teardown refuses foreign objects");
        let message = err.to_string();
        assert!(
            matches!(err, lifecycle::Error::Ownership(ownership::Error::Foreign { ref foreign, .. }) if foreign.len() == 3),
            "{message}"
        );
        assert!(
            message.contains(&format!("belongs to dev-env environment `{}`", owner.name))
                && message.contains("nothing was changed"),
            "{message}"
        );
    }
    let err = up(&config).expect_err("dev up refuses them too");
    assert!(matches!(err, lifecycle::Error::Ownership(_)), "{err}");
    for (kind, name) in [
        ("network", owner.name.clone()),
        ("container", format!("{}-registry", owner.name)),
        ("volume", format!("{}-registry-data", owner.name)),
        ("container", format!("{}-server-0", owner.name)),
    ] {
        assert!(
            exists(kind, &name),
            "the owner's {kind} {name} is still there"
        );
    }
    assert!(
        status_ok(&owner.config()),
        "the owner's environment is intact"
    );

    // An object without any label is refused the same way, saying so.
    let stranger = SimProject::new("strg");
    let volume = format!("{}-registry-data", stranger.name);
    let sh = sh();
    cmd!(sh, "docker volume create {volume}")
        .quiet()
        .ignore_stdout()
        .run()
        .unwrap();
    stranger.write(
        "dev-env.yaml",
        &format!(
            "name: {}\nnetwork: {{ipv4Subnet: {}}}\ncluster: {{provider: sim}}\nmanifests: []\n",
            stranger.name, stranger.subnet
        ),
    );
    let err = down(&stranger.config(), DownOptions::RESET_PURGE)
        .expect_err("an unlabelled volume is not ours");
    assert!(
        err.to_string().contains("was not created by dev-env"),
        "{err}"
    );
    assert!(exists("volume", &volume));
    cmd!(sh, "docker volume rm {volume}")
        .quiet()
        .ignore_stdout()
        .run()
        .unwrap();

    // `--purge` of an environment that never existed removes nothing and
    // says so.
    let report = down(&stranger.config(), DownOptions::RESET_PURGE).unwrap();
    assert!(
        !(report.node || report.registry || report.volume || report.network),
        "{report:?}"
    );
    assert_eq!(
        report.to_string(),
        format!("`{}` is already down: nothing to remove", stranger.name)
    );

    let report = down(&owner.config(), DownOptions::RESET_PURGE).unwrap();
    assert!(
        report.node && report.registry && report.volume && report.network,
        "{report:?}"
    );
}

fn status_ok(config: &Config) -> bool {
    let status = runtime().block_on(status::status(config)).unwrap();
    if !status.ok {
        eprintln!("{status:#?}");
    }
    status.ok
}

#[test]
fn runs_on_one_environment_take_turns_and_keep_each_others_state() {
    let env = SimProject::with_config_map("lock");
    let config = env.config();

    // Held elsewhere: `dev up` says whom it waits for, then proceeds once
    // the lock is free.
    let held = runtime()
        .block_on(lock::acquire(
            &config.state_dir(),
            &config.name,
            Duration::from_secs(5),
            &|_| panic!("nothing holds it yet"),
        ))
        .unwrap();
    let said = Recorder::default();
    let waiter = {
        let (config, said) = (config.clone(), said.clone());
        std::thread::spawn(move || {
            let started = Instant::now();
            let result = runtime().block_on(lifecycle::up(&config, dev_env_tests::UP, &said));
            (result.map(drop), started.elapsed())
        })
    };
    std::thread::sleep(Duration::from_secs(2));
    assert!(!waiter.is_finished(), "dev up waits for the lock");
    assert!(
        !exists("network", &env.name),
        "nothing is created before the lock is taken"
    );
    let expected = format!(
        "waiting for another dev-env run on {} (pid {})",
        env.name,
        std::process::id()
    );
    assert_eq!(said.lines.lock().unwrap().first(), Some(&expected));
    drop(held);
    let (result, took) = waiter.join().unwrap();
    result.expect("dev up once the lock is free");
    assert!(took >= Duration::from_secs(2));

    // Two at once, in two processes' worth of lock files: both succeed, one
    // after the other, with no engine error.
    let both: Vec<_> = (0..2)
        .map(|_| {
            let config = config.clone();
            std::thread::spawn(move || up(&config).map(drop))
        })
        .collect();
    for run in both {
        run.join().unwrap().expect("concurrent dev up");
    }

    // A digest recorded while `up` runs is not lost: `up` writes state by
    // read-modify-write under the lock, and this write waits its turn.
    let recorder = {
        let config = config.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(200));
            runtime().block_on(async {
                let _lock = lock::acquire(
                    &config.state_dir(),
                    &config.name,
                    Duration::from_secs(120),
                    &|_| {},
                )
                .await
                .unwrap();
                State::update(&config.state_dir(), |s| {
                    s.images.insert(
                        String::from("recorded"),
                        dev_env::state::PushedImage {
                            digest: format!("sha256:{}", "1".repeat(64)),
                            repository: String::from("x/recorded"),
                            profile: None,
                        },
                    );
                })
                .unwrap();
            })
        })
    };
    up(&config).expect("dev up alongside a recording");
    recorder.join().unwrap();
    let state = State::load(&config.state_dir()).unwrap();
    assert!(state.images.contains_key("recorded"), "{state:?}");
    assert!(state.registry_port.is_some() && state.api_port.is_some());
    down(&config, DownOptions::RESET_PURGE).unwrap();
}

#[test]
fn a_bad_manifest_fails_up_with_its_place_and_nothing_is_applied() {
    let env = SimProject::with_config_map("bad");
    let config = env.config();
    up(&config).expect("dev up");
    let versions = || {
        kubectl(
            &env,
            &[
                "get",
                "-n",
                "app",
                "configmap/settings",
                "-o",
                "jsonpath={.metadata.resourceVersion} {.data.mode}",
            ],
        )
    };
    let before = versions();

    // A typo in a Deployment, in a namespace the same set creates, after a
    // change to the ConfigMap: the typo is found and nothing changes.
    env.write_config_map("changed");
    env.write(
        "manifests/web.yaml",
        "apiVersion: v1\nkind: Namespace\nmetadata: {name: fresh}\n---\n\
         apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web, namespace: fresh}\nspec:\n  replicaz: 1\n  \
         selector: {matchLabels: {app: web}}\n  template:\n    metadata: {labels: {app: web}}\n    \
         spec: {containers: [{name: web, image: example/web}]}\n",
    );
    let err = up(&config).expect_err("a typo fails dev up");
    let message = err.to_string();
    let file = env.dir.join("manifests/web.yaml");
    assert!(
        message.contains(&format!("{}:9:3: Deployment/fresh/web", file.display()))
            && message.contains("spec.replicaz")
            && message.contains("nothing was applied"),
        "{message}"
    );
    assert_eq!(versions(), before, "the ConfigMap was not changed");
    let namespaces = kubectl(&env, &["get", "namespaces", "-o", "name"]);
    assert!(!namespaces.contains("fresh"), "{namespaces}");

    // An unknown kind is refused the same way, before anything.
    env.write(
        "manifests/web.yaml",
        "apiVersion: example.com/v1\nkind: Frobnicator\nmetadata: {name: f, namespace: app}\n",
    );
    let message = up(&config).expect_err("an unknown kind fails").to_string();
    assert!(
        message.contains("example.com/v1 Frobnicator") && message.contains("nothing was applied"),
        "{message}"
    );
    assert_eq!(versions(), before);

    std::fs::remove_file(file).unwrap();
    up(&config).expect("dev up once the manifests are fixed");
    assert!(versions().ends_with(" changed"));
    down(&config, DownOptions::RESET_PURGE).unwrap();
}

#[test]
fn up_reattaches_every_container_to_a_network_removed_under_it() {
    let env = SimProject::with_config_map("net");
    let config = env.config();
    up(&config).expect("dev up");
    let sh = sh();
    let network = env.name.clone();
    let members = || -> String {
        let format = "{{range .Containers}}{{.Name}} {{end}}";
        cmd!(sh, "docker network inspect -f {format} {network}")
            .read()
            .unwrap_or_default()
    };
    for container in members().split_whitespace() {
        cmd!(sh, "docker network disconnect -f {network} {container}")
            .quiet()
            .run()
            .unwrap();
    }
    cmd!(sh, "docker network rm {network}")
        .quiet()
        .ignore_stdout()
        .run()
        .unwrap();
    assert!(!status_ok(&config), "status sees the network gone");

    let report = up(&config).expect("dev up repairs the network");
    assert_eq!(report.network, Some(dev_env::network::Ensured::Created));
    let now = members();
    for container in [
        format!("{}-registry", env.name),
        format!("{}-server-0", env.name),
    ] {
        assert!(now.contains(&container), "{container} is attached: {now}");
    }
    // The node reaches the registry by its name again: the registry
    // answers from inside the node's network namespace.
    assert!(status_ok(&config));
    down(&config, DownOptions::RESET_PURGE).unwrap();
}

#[test]
fn a_node_created_but_never_started_is_made_again() {
    let env = SimProject::with_config_map("half");
    let config = env.config();
    // What an interrupted run leaves: a labelled node container that was
    // created, with nothing copied in, and never started.
    let sh = sh();
    let node = config.node_name();
    let image = &config.cluster.image;
    let label = format!("dev-env.name={}", env.name);
    let (subnet, network) = (&env.subnet, &env.name);
    cmd!(
        sh,
        "docker network create --label {label} --subnet {subnet} {network}"
    )
    .quiet()
    .ignore_stdout()
    .run()
    .unwrap();
    // The image exists once any sim environment was built; build it now
    // through a first `up` if needed.
    if !exists("image", image) {
        up(&config).expect("a first dev up builds the node image");
        down(&config, DownOptions::DOWN).unwrap();
    }
    cmd!(
        sh,
        "docker create --name {node} --label {label} --label dev-env.role=node --label dev-env.spec-hash=interrupted {image} server"
    )
    .quiet()
    .ignore_stdout()
    .run()
    .unwrap();
    let report = up(&config).expect("dev up converges from a half-made node");
    let (outcome, _) = report.node.expect("a node");
    assert_eq!(outcome, dev_env::cluster::Ensured::Created);
    assert!(status_ok(&config));
    down(&config, DownOptions::RESET_PURGE).unwrap();
}

#[test]
fn up_pushes_again_what_the_registry_lost_and_status_notices() {
    let env = SimProject::with_component("lost");
    let config = env.config();
    let first = up(&config).expect("dev up pushes the component");
    assert_eq!(first.pushed, ["app"]);
    assert!(status_ok(&config));

    // The registry loses the manifest (a garbage collection, a lost
    // volume): status says so and names the fix.
    let state = State::load(&config.state_dir()).unwrap();
    let pushed = state.images["app"].clone();
    let host = first.registry.host.clone();
    let sh = sh();
    let url = format!(
        "http://{}/v2/{}/manifests/{}",
        host.replace("localhost", "127.0.0.1"),
        pushed.repository,
        pushed.digest
    );
    cmd!(sh, "curl -sf -X DELETE {url}").quiet().run().unwrap();
    let status = runtime().block_on(status::status(&config)).unwrap();
    let app = &status.components[0];
    assert_eq!(app.in_registry, Some(false), "{status:#?}");
    assert!(
        !status.ok && app.message.contains("no longer has"),
        "{}",
        app.message
    );

    // `dev up` pushes it again, and the environment converges.
    let second = up(&config).expect("dev up re-pushes");
    assert_eq!(second.pushed, ["app"]);
    let state = State::load(&config.state_dir()).unwrap();
    let client = dev_env::image::distribution::Client::new(&host);
    let present = runtime()
        .block_on(client.manifest_exists(
            &pushed.repository,
            &state.images["app"].digest,
            state.platform.as_ref(),
        ))
        .unwrap();
    assert!(present);
    assert!(status_ok(&config));
    down(&config, DownOptions::RESET_PURGE).unwrap();
}
