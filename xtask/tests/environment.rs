//! The real binary against the real engine: what a user sees when a run is
//! interrupted, when its output is cut short, and when the environment
//! needs no Docker object at all.

use std::{
    path::{Path, PathBuf},
    process::{Command, Output, Stdio},
    time::Duration,
};

use dev_env_tests::{DistributionRegistry, SimProject};
use xshell::{Shell, cmd};

fn xtask(config: &Path, args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_xtask"));
    command
        .arg("--config")
        .arg(config)
        .args(args)
        .env_remove("DEV_ENV_CONFIG");
    command
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn repo_config() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .join("dev-env.yaml")
}

#[test]
fn output_to_a_closed_pipe_ends_quietly() {
    dev_env_tests::require_docker();
    // The reader is gone before the first line is written: every write
    // fails with a broken pipe.
    let mut child = xtask(&repo_config(), &["dev", "up", "--dry-run"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn interrupted_runs_leave_an_environment_the_next_up_converges_from() {
    let env = SimProject::with_config_map("sigint");
    let config = env.dir.join("dev-env.yaml");
    let run = |args: &[&str]| xtask(&config, args).output().unwrap();
    // Warm: the node and registry images exist, so interrupts land in the
    // steps that create and start things.
    let out = run(&["dev", "up"]);
    assert!(out.status.success(), "{}", text(&out));
    let out = run(&["dev", "reset", "--purge"]);
    assert!(out.status.success(), "{}", text(&out));

    let sh = Shell::new().unwrap();
    for delay_ms in [150, 400, 800, 1500, 2500, 4000] {
        let child = xtask(&config, &["dev", "up"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(delay_ms));
        let pid = child.id().to_string();
        let _ = cmd!(sh, "kill -INT {pid}").quiet().ignore_stderr().run();
        let _ = child.wait_with_output();

        let out = run(&["dev", "up"]);
        assert!(
            out.status.success(),
            "dev up after an interrupt at {delay_ms} ms: {}",
            text(&out)
        );
        let out = run(&["dev", "status"]);
        assert!(
            out.status.success(),
            "status after an interrupt at {delay_ms} ms: {}",
            text(&out)
        );
        let out = run(&["dev", "reset", "--purge"]);
        assert!(out.status.success(), "{}", text(&out));
    }
}

#[test]
fn an_existing_cluster_and_an_external_registry_need_no_docker_object() {
    dev_env_tests::require_docker();
    let registry = DistributionRegistry::start();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let sim = rt
        .block_on(kube_sim::Sim::start(kube_sim::Config::ephemeral()))
        .expect("kube-sim serves");
    let dir = tempfile::tempdir().unwrap();
    let name = dev_env_tests::unique_name("none");
    let config = dir.path().join("dev-env.yaml");
    std::fs::write(
        &config,
        format!(
            "name: {name}\nregistry: {{external: '{}'}}\ncluster: {{provider: existing, context: default}}\nmanifests: [manifests]\n",
            registry.host()
        ),
    )
    .unwrap();
    std::fs::create_dir(dir.path().join("manifests")).unwrap();
    std::fs::write(
        dir.path().join("manifests/cm.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, namespace: default}\ndata: {a: b}\n",
    )
    .unwrap();
    let run = |args: &[&str]| {
        xtask(&config, args)
            .env("KUBECONFIG", sim.kubeconfig_path())
            .output()
            .unwrap()
    };
    let out = run(&["dev", "up"]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(!text(&out).contains("network"), "{}", text(&out));
    let sh = Shell::new().unwrap();
    let label = format!("label=dev-env.name={name}");
    for kind in ["container", "volume", "network"] {
        let listed = cmd!(sh, "docker {kind} ls -q --filter {label}")
            .read()
            .unwrap();
        assert!(listed.trim().is_empty(), "{kind}s of {name}: {listed}");
    }
    let out = run(&["dev", "status"]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(!text(&out).contains("network"), "{}", text(&out));
    // Without `registry.pullSecret` no credentials reach the cluster.
    let kubeconfig = sim.kubeconfig_path();
    let made = cmd!(
        sh,
        "kubectl --kubeconfig {kubeconfig} get secrets -A -l app.kubernetes.io/managed-by=dev-env -o name"
    )
    .read()
    .unwrap();
    assert_eq!(made, "");
    let out = run(&["dev", "reset", "--purge"]);
    assert!(out.status.success(), "{}", text(&out));
    rt.block_on(sim.shutdown());
}

/// What a person reads must never show Rust's debug formatting.
fn assert_no_debug_text(command: &str, text: &str) {
    for debug in ["Some(", "{ ", "None"] {
        assert!(
            !text.contains(debug),
            "`{command}` shows `{debug}`:\n{text}"
        );
    }
}

#[test]
fn every_command_keeps_its_output_contract() {
    let env = SimProject::with_component("out");
    let config = env.dir.join("dev-env.yaml");
    let run = |args: &[&str]| {
        let out = xtask(&config, args).output().unwrap();
        assert!(out.status.success(), "{args:?}: {}", text(&out));
        (
            String::from_utf8_lossy(&out.stdout).to_string(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        )
    };
    let json = |args: &[&str]| -> serde_json::Value {
        let (stdout, _) = run(args);
        serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{args:?}: {e}:\n{stdout}"))
    };

    let (stdout, stderr) = run(&["dev", "up", "--json"]);
    let up: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(up["pushed"], serde_json::json!(["app"]), "{up}");
    // The first build of `app` compiles: its progress is reported, counted
    // up to its total.
    let progress: Vec<serde_json::Value> = stderr
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|e| e["event"] == "buildProgress" && e["what"] == "app")
        .collect();
    assert!(progress.len() >= 2, "{stderr}");
    let last = progress.last().unwrap();
    assert!(
        last["done"].as_u64() >= Some(1) && last["done"] == last["total"],
        "{last}"
    );
    // Converged: `-q` prints nothing at all.
    let (stdout, stderr) = run(&["-q", "dev", "up"]);
    assert_eq!((stdout.as_str(), stderr.as_str()), ("", ""));
    // A build that compiles under `-q`: no progress either.
    let main = env.dir.join("app/src/main.rs");
    let source = std::fs::read_to_string(&main).unwrap();
    std::fs::write(&main, source.replace("86400", "86401")).unwrap();
    let (stdout, stderr) = run(&["-q", "push-image", "app"]);
    assert_eq!((stdout.as_str(), stderr.as_str()), ("", ""));

    for args in [
        &["dev", "up"][..],
        &["dev", "status"],
        &["push-image", "app"],
        &["reload", "app"],
    ] {
        let (stdout, stderr) = run(args);
        assert_no_debug_text(&args.join(" "), &format!("{stdout}{stderr}"));
    }
    let push = json(&["push-image", "app", "--json"]);
    assert!(push["components"][0]["digest"].is_string(), "{push}");
    let reload = json(&["reload", "app", "--json"]);
    assert!(reload["components"][0]["error"].is_null(), "{reload}");
    let status = json(&["dev", "status", "--json"]);
    assert_eq!(status["ok"], serde_json::json!(true), "{status}");
    watch_speaks_json_and_stops_on_ctrl_c(&config);

    let down = json(&["dev", "down", "--json"]);
    assert_eq!(
        (down["node"].clone(), down["registry"].clone()),
        (true.into(), true.into())
    );
    let (stdout, stderr) = run(&["dev", "reset", "--purge"]);
    assert_no_debug_text("dev reset --purge", &format!("{stdout}{stderr}"));
    // Nothing left: status says so with its own exit code.
    let out = xtask(&config, &["dev", "status"]).output().unwrap();
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
}

/// `watch --json`: one JSON object per event on stdout, up to the
/// component's `ready`; Ctrl-C then ends it with status 0 within 2 s.
fn watch_speaks_json_and_stops_on_ctrl_c(config: &Path) {
    use std::io::BufRead;
    let mut child = xtask(config, &["watch", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut events = Vec::new();
    for line in stdout.lines() {
        let line = line.unwrap();
        let event: serde_json::Value =
            serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"));
        let ready = event["event"] == "ready" && event["component"] == "app";
        events.push(event);
        if ready {
            break;
        }
    }
    assert!(
        events.iter().any(|e| e["event"] == "watching"),
        "{events:?}"
    );
    let started = std::time::Instant::now();
    let pid = child.id().to_string();
    let sh = Shell::new().unwrap();
    cmd!(sh, "kill -INT {pid}").run().unwrap();
    let out = child.wait_with_output().unwrap();
    let took = started.elapsed();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(took < Duration::from_secs(2), "watch stopped in {took:?}");
}

/// A cluster that pulls only with a pull secret: kube-sim trusts the
/// registry's CA through its `registries.yaml`, as k3s would, and has no
/// credentials of its own. `registry.pullSecret` gives it those `docker
/// login` stored; without them `dev up` changes nothing.
#[test]
fn an_existing_cluster_pulls_from_a_private_registry_through_the_pull_secret() {
    use dev_env_tests::secure_registry::{
        CredentialHelper, PASSWORD, SecureRegistry, USER, auths, docker_config,
    };
    dev_env_tests::require_docker();
    let registry = SecureRegistry::start();
    let host = registry.host();
    let files = tempfile::tempdir().unwrap();
    let registries = files.path().join("registries.yaml");
    std::fs::write(
        &registries,
        format!(
            "configs:\n  \"{host}\":\n    tls:\n      ca_file: {}\n",
            registry.ca().display()
        ),
    )
    .unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let sim = rt
        .block_on(kube_sim::Sim::start(kube_sim::Config {
            registries: Some(registries),
            ..kube_sim::Config::ephemeral()
        }))
        .expect("kube-sim serves");
    let project = dev_env_tests::Project::new(&host);
    let name = project.name.clone();
    let mut cleanup = dev_env_tests::DockerCleanup::default();
    cleanup.images.push(format!("{host}/{name}/static:dev"));
    std::fs::copy(registry.ca(), project.root().join("registry-ca.pem")).unwrap();
    std::fs::write(
        project.config_path(),
        format!(
            "name: {name}\nregistry: {{external: '{host}', caFile: registry-ca.pem, pullSecret: true}}\n\
             cluster: {{provider: existing, context: default}}\nmanifests: [manifests]\n\
             components:\n  hello:\n    image: {name}/hello\n    build: {{cargo: {{package: hello, bin: hello}}}}\n    \
             rollout: {{kind: Deployment, namespace: it, name: hello, container: hello}}\n  \
             static:\n    image: {name}/static\n    build: {{docker: {{context: static, dockerfile: Dockerfile}}}}\n    \
             rollout: {{kind: Deployment, namespace: it, name: static, container: static}}\n"
        ),
    )
    .unwrap();
    let deployment = |app: &str, replicas: u32| {
        format!(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: {app}, namespace: it}}\nspec:\n  replicas: {replicas}\n  \
             selector: {{matchLabels: {{app: {app}}}}}\n  template:\n    metadata: {{labels: {{app: {app}}}}}\n    \
             spec: {{terminationGracePeriodSeconds: 1, containers: [{{name: {app}, image: '{host}/{name}/{app}:dev'}}]}}\n"
        )
    };
    project.edit(
        "manifests/apps.yaml",
        &format!(
            "apiVersion: v1\nkind: Namespace\nmetadata: {{name: it}}\n---\n{}---\n{}",
            deployment("hello", 2),
            deployment("static", 1)
        ),
    );
    let config = project.config_path();
    let kubeconfig = sim.kubeconfig_path().to_path_buf();
    let run = |docker: &Path, args: &[&str]| {
        xtask(&config, args)
            .env("KUBECONFIG", &kubeconfig)
            .env("DOCKER_CONFIG", docker)
            .output()
            .unwrap()
    };
    let sh = Shell::new().unwrap();
    let kubectl = |args: &str| {
        let args: Vec<&str> = args.split(' ').collect();
        cmd!(sh, "kubectl --kubeconfig {kubeconfig} {args...}")
            .ignore_status()
            .read()
            .unwrap()
    };

    // No credentials stored: refused before anything changes.
    let none = tempfile::tempdir().unwrap();
    let out = run(none.path(), &["dev", "up"]);
    assert!(!out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains(&format!("docker login {host}")),
        "{}",
        text(&out)
    );
    assert_eq!(kubectl("get namespace it -o name"), "", "nothing applied");

    let stored = docker_config(auths(&host, USER, PASSWORD));
    let out = run(stored.path(), &["dev", "up"]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(!text(&out).contains(PASSWORD), "{}", text(&out));
    let secret = format!("{name}-registry-credentials");
    assert_eq!(
        kubectl(&format!("-n it get secret {secret} -o jsonpath={{.type}}")),
        "kubernetes.io/dockerconfigjson"
    );
    assert_eq!(
        kubectl("-n it get serviceaccount default -o jsonpath={.imagePullSecrets[*].name}"),
        secret
    );
    let pod_secrets = kubectl(
        "-n it get pods -l app=hello -o jsonpath={.items[*].spec.imagePullSecrets[*].name}",
    );
    assert_eq!(pod_secrets, format!("{secret} {secret}"));

    // A change rolls out; the new pods pull with the same secret.
    let before = dev_env_tests::serving_image_ids(&kubeconfig, "it", "app=hello");
    assert_eq!(before.len(), 2, "{before:?}");
    project.edit(
        "hello/src/main.rs",
        "fn main() {\n    println!(\"hello, two\");\n}\n",
    );
    let static_before = dev_env_tests::serving_image_ids(&kubeconfig, "it", "app=static");
    project.edit(
        "static/b.txt",
        "b: pushed by the engine with the stored credentials\n",
    );
    let out = run(stored.path(), &["push-image", "hello", "static"]);
    assert!(out.status.success(), "{}", text(&out));
    let after = dev_env_tests::serving_image_ids(&kubeconfig, "it", "app=hello");
    assert_eq!(after.len(), 2, "{after:?}");
    assert!(
        after.iter().all(|id| !before.contains(id)),
        "{before:?} -> {after:?}"
    );
    let static_after = dev_env_tests::serving_image_ids(&kubeconfig, "it", "app=static");
    assert_eq!(static_after.len(), 1, "{static_after:?}");
    assert_ne!(static_after, static_before);

    // `push-image --no-rollout` with a credential helper's credentials; a
    // push of nothing new uploads nothing; a wrong password is refused
    // with the registry and how to log in, never shown.
    let helper = CredentialHelper::install(&host);
    let helped = docker_config(serde_json::json!({"credHelpers": {&host: &helper.name}}));
    project.edit("static/b.txt", "b: pushed with the helper's credentials\n");
    project.edit(
        "hello/src/main.rs",
        "fn main() {\n    println!(\"hello, three\");\n}\n",
    );
    let push = |docker: &Path| {
        run(
            docker,
            &["push-image", "--no-rollout", "--json", "hello", "static"],
        )
    };
    let out = push(helped.path());
    assert!(out.status.success(), "{}", text(&out));
    let out = push(helped.path());
    assert!(out.status.success(), "{}", text(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    for component in report["components"].as_array().unwrap() {
        assert_eq!(component["uploadedBytes"], 0, "{component}");
    }
    let wrong = docker_config(auths(&host, USER, "wrong-pw"));
    for component in ["hello", "static"] {
        project.edit("static/b.txt", &format!("b: refused for {component}\n"));
        let out = run(wrong.path(), &["push-image", "--no-rollout", component]);
        assert!(!out.status.success(), "{}", text(&out));
        assert!(
            text(&out).contains(&format!("docker login {host}")),
            "{}",
            text(&out)
        );
        assert!(!text(&out).contains("wrong-pw"), "{}", text(&out));
    }

    // Applying again changes neither the secret nor the account.
    let versions = || {
        kubectl(&format!(
            "-n it get serviceaccount/default secret/{secret} -o jsonpath={{.items[*].metadata.resourceVersion}}"
        ))
    };
    let applied = versions();
    let out = run(stored.path(), &["dev", "up"]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(versions(), applied);
    rt.block_on(sim.shutdown());
}
