//! Builds for the cluster's platform, with the `dev` profile by default, on
//! the real engine with a kube-sim node: what runs names the engine's
//! architecture, a second change rebuilds incrementally, and a target this
//! machine cannot build for fails before anything is built or created.

use dev_env::{
    deliver::{self, PushFlags},
    lifecycle,
    report::Reporter,
    state::State,
};
use dev_env_tests::{Recorder, SimProject, runtime, up};
use xshell::{Shell, cmd};

const PUSH: PushFlags = PushFlags {
    rollout: true,
    timeout: std::time::Duration::from_secs(120),
    verbose: false,
    wait_for_termination: false,
};

/// The engine's own platform, as `docker info` reports it, in Go's names.
fn engine_platform() -> String {
    let sh = Shell::new().unwrap();
    let format = "{{.OSType}}/{{.Architecture}}";
    let reported = cmd!(sh, "docker info --format {format}").read().unwrap();
    let (os, arch) = reported.split_once('/').unwrap();
    format!(
        "{os}/{}",
        dev_env::platform::Platform::linux(arch).architecture
    )
}

fn push(config: &dev_env::config::Config, reporter: &dyn Reporter) -> deliver::Outcome {
    runtime()
        .block_on(deliver::push(
            config,
            &[String::from("app")],
            PUSH,
            reporter,
        ))
        .unwrap()
        .remove(0)
}

#[test]
fn the_default_profile_builds_for_the_engines_platform_and_rebuilds_incrementally() {
    let env = SimProject::with_component("plat");
    let config = env.config();
    up(&config).expect("dev up builds and runs the component");
    let state = State::load(&config.state_dir()).unwrap();
    let pushed = &state.images["app"];
    assert_eq!(pushed.profile.as_deref(), Some("dev"));
    let platform = state.platform.clone().expect("dev up records the platform");
    assert_eq!(
        format!("{}/{}", platform.os, platform.architecture),
        engine_platform()
    );
    // `dev status --json` says which profile the running digest was built with.
    let status = runtime()
        .block_on(dev_env::status::status(&config))
        .unwrap();
    let json = serde_json::to_value(&status.components).unwrap();
    assert_eq!(json[0]["pushedProfile"], "dev", "{json}");
    assert_eq!(json[0]["pushedDigest"], pushed.digest.as_str(), "{json}");
    let host = dev_env::registry::host(&config, &state).unwrap();
    let reference = format!("{host}/{}@{}", pushed.repository, pushed.digest);
    dev_env_tests::pull(&reference);
    assert_eq!(dev_env_tests::image_platform(&reference), engine_platform());
    let sh = Shell::new().unwrap();
    let _ = cmd!(sh, "docker rmi {reference}")
        .quiet()
        .ignore_stdout()
        .ignore_stderr()
        .run();

    // A one-line change: a `dev` build, kept incremental in the image
    // builds' own target directory, rolled out.
    env.write(
        "app/src/main.rs",
        "fn main() {\n    std::thread::sleep(std::time::Duration::from_secs(86402));\n}\n",
    );
    let changed = push(&config, &dev_env::report::Silent);
    assert!(changed.error.is_none(), "{changed:?}");
    assert_ne!(changed.digest.as_deref(), Some(pushed.digest.as_str()));
    assert_eq!(changed.profile.as_deref(), Some("dev"));
    assert!(
        changed.rolled_out && !changed.pods.is_empty(),
        "{changed:?}"
    );
    let target = dev_env::platform::toolchain(&env.dir).unwrap();
    let chosen = dev_env::platform::choose(&platform, &target, None).unwrap();
    let incremental = env
        .dir
        .join("target/image-build")
        .join(&chosen.triple)
        .join("debug/incremental");
    let sessions: Vec<_> = std::fs::read_dir(&incremental)
        .unwrap_or_else(|e| panic!("{}: {e}", incremental.display()))
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("app-"))
        .collect();
    assert!(
        !sessions.is_empty(),
        "no incremental state in {}",
        incremental.display()
    );
}

#[test]
fn a_target_this_machine_cannot_build_fails_before_anything_is_built_or_created() {
    let env = SimProject::with_component("cross");
    let file = env.dir.join("dev-env.yaml");
    let text = std::fs::read_to_string(&file).unwrap().replace(
        "build: {cargo: {package: app}}",
        "build: {cargo: {package: app, target: aarch64-unknown-linux-musl}}",
    );
    std::fs::write(&file, text).unwrap();
    let config = env.config();
    let installed = dev_env::platform::toolchain(&env.dir).unwrap().installed;
    assert!(
        !installed.contains("aarch64-unknown-linux-musl"),
        "this test wants a machine without that target: {installed:?}"
    );
    let events = Recorder::default();
    let err = runtime()
        .block_on(lifecycle::up(&config, dev_env_tests::UP, &events))
        .expect_err("dev up for a target that is not installed");
    let text = dev_env::error_chain(&err);
    assert!(text.contains("component `app`: this machine"), "{text}");
    assert!(
        text.contains("rustup target add aarch64-unknown-linux-musl"),
        "{text}"
    );
    let err = runtime()
        .block_on(deliver::push(
            &config,
            &[String::from("app")],
            PUSH,
            &events,
        ))
        .expect_err("push-image for a target that is not installed");
    assert!(
        dev_env::error_chain(&err).contains("rustup target add aarch64-unknown-linux-musl"),
        "{err}"
    );
    // Nothing was built, created or said.
    assert!(events.lines.lock().unwrap().is_empty());
    assert!(!env.dir.join("target/image-build").exists());
    let sh = Shell::new().unwrap();
    let filter = format!("label=dev-env.name={}", env.name);
    let networks = cmd!(sh, "docker network ls -q --filter {filter}")
        .read()
        .unwrap();
    let containers = cmd!(sh, "docker ps -aq --filter {filter}").read().unwrap();
    assert_eq!((networks.as_str(), containers.as_str()), ("", ""));
}
