//! Faults a rollout wait must name at once, on the real engine with a
//! kube-sim node: the node killed during the wait, and pods that never
//! start. Both use a Deployment whose pods mount a ConfigMap that does not
//! exist, so they stay in `ContainerCreating`.

use std::time::{Duration, Instant};

use dev_env::{
    config::Config,
    deliver,
    wait::{
        node::NodeProbe,
        workload::{self, WaitOptions, Want},
    },
};
use dev_env_tests::{SimProject, Stderr, runtime, up};
use k8s_openapi::api::apps::v1::Deployment;
use kube::{Api, api::PostParams};
use xshell::{Shell, cmd};

const TIMEOUT: Duration = Duration::from_secs(120);

const RELOAD: deliver::ReloadFlags = deliver::ReloadFlags {
    timeout: TIMEOUT,
    wait_for_termination: false,
    prune: dev_env::apply::Prune::DECLARED,
};

const STUCK: &str = "apiVersion: apps/v1
kind: Deployment
metadata: {name: stuck, namespace: faults}
spec:
  replicas: 2
  selector: {matchLabels: {app: stuck}}
  template:
    metadata: {labels: {app: stuck}}
    spec:
      containers:
      - {name: app, image: 'registry.invalid/never/pulled:1'}
      volumes:
      - {name: settings, configMap: {name: missing-settings}}
";

/// An environment with no component and a namespace `faults`, up.
fn environment() -> (SimProject, Config) {
    let env = SimProject::new("flt");
    env.write_sim_config();
    env.write(
        "manifests/namespace.yaml",
        "apiVersion: v1\nkind: Namespace\nmetadata: {name: faults}\n",
    );
    let config = env.config();
    up(&config).expect("dev up brings the environment up");
    (env, config)
}

/// Creates the Deployment whose pods never start.
async fn create_stuck(client: &kube::Client) {
    let deploy: Deployment = serde_yaml::from_str(STUCK).unwrap();
    Api::<Deployment>::namespaced(client.clone(), "faults")
        .create(&PostParams::default(), &deploy)
        .await
        .expect("the Deployment is created");
}

fn want() -> Want {
    Want {
        namespace: String::from("faults"),
        deployment: String::from("stuck"),
        container: String::from("app"),
        digest: None,
        ..Want::default()
    }
}

#[test]
fn a_pod_that_never_starts_fails_the_wait_after_the_grace_with_its_events() {
    let (_env, config) = environment();
    runtime().block_on(async {
        let client = deliver::cluster_client(&config).await.unwrap();
        create_stuck(&client).await;
        let grace = Duration::from_secs(3);
        let options = WaitOptions {
            timeout: TIMEOUT,
            pending_grace: grace,
            node: NodeProbe::for_config(&config).await.unwrap(),
        };
        let started = Instant::now();
        let err = workload::deployment(&client, &want(), &options)
            .await
            .expect_err("pods that never start cannot complete a rollout");
        let elapsed = started.elapsed();
        let message = err.to_string();
        eprintln!(
            "the wait failed {} ms after it started (grace {}s):\n{message}",
            elapsed.as_millis(),
            grace.as_secs()
        );
        assert!(
            matches!(err, workload::Error::PodPending { .. }),
            "{message}"
        );
        assert!(
            elapsed >= grace && elapsed < grace + Duration::from_secs(12),
            "the wait ended after {elapsed:?}, want the grace plus a few seconds"
        );
        assert!(message.contains("pod faults/stuck-"), "{message}");
        assert!(
            message.contains("waiting in ContainerCreating"),
            "{message}"
        );
        assert!(
            message.contains("Warning FailedMount")
                && message.contains("configMap \"missing-settings\" not found"),
            "the pod's events are shown: {message}"
        );
    });
}

/// Starts a wait on the stuck Deployment, runs `docker <action> <node>`
/// two seconds in, and returns how the wait ended, how long after the
/// action returned, and how long after it started.
async fn wait_through(
    config: &Config,
    action: &'static str,
) -> (workload::Error, Duration, Duration) {
    let client = deliver::cluster_client(config).await.unwrap();
    create_stuck(&client).await;
    let options = WaitOptions {
        timeout: TIMEOUT,
        // Far past the test: only the node may end this wait.
        pending_grace: Duration::from_secs(600),
        node: NodeProbe::for_config(config).await.unwrap(),
    };
    let node = config.node_name();
    let actor = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs(2));
        let sh = Shell::new().unwrap();
        cmd!(sh, "docker {action} {node}")
            .quiet()
            .ignore_stdout()
            .run()
            .expect("docker acts on the node");
        Instant::now()
    });
    let started = Instant::now();
    let err = workload::deployment(&client, &want(), &options)
        .await
        .expect_err("a wait on a stopped node cannot complete");
    let returned = Instant::now();
    let acted = actor.join().expect("the thread acting on the node");
    let (after_action, total) = (
        returned.saturating_duration_since(acted),
        returned.duration_since(started),
    );
    eprintln!(
        "the wait ended {} ms after `docker {action}` returned ({} ms after it started): {err}",
        after_action.as_millis(),
        total.as_millis()
    );
    (err, after_action, total)
}

#[test]
fn a_node_killed_during_a_wait_ends_it_at_once_and_later_commands_say_why() {
    let (_env, config) = environment();
    let node = config.node_name();
    let expected =
        format!("the node {node} is not running (exited 137); `cargo xtask dev up` restarts it");
    runtime().block_on(async {
        let (err, _, total) = wait_through(&config, "kill").await;
        assert!(total < Duration::from_secs(20), "the wait took {total:?}");
        assert_eq!(err.to_string(), expected);

        // Later commands say the same, not `client error (Connect)`.
        let later = match deliver::cluster_client(&config).await {
            Ok(_) => panic!("a client for a dead node"),
            Err(e) => e.to_string(),
        };
        assert_eq!(later, expected);
        let reloaded = deliver::reload(&config, &[], RELOAD, &Stderr)
            .await
            .expect_err("reload needs the API");
        assert_eq!(reloaded.to_string(), expected);
    });
}

#[test]
fn a_paused_node_ends_a_hanging_wait_within_the_probe_interval() {
    let (_env, config) = environment();
    let node = config.node_name();
    runtime().block_on(async {
        // A frozen node keeps its connections open: the watches hang
        // without an error, and only the periodic probe can tell.
        let (err, after_pause, _) = wait_through(&config, "pause").await;
        assert_eq!(
            err.to_string(),
            format!("the node {node} is paused; `docker unpause {node}` resumes it")
        );
        assert!(
            after_pause < Duration::from_secs(5),
            "the wait ended {after_pause:?} after the pause"
        );
    });
    let sh = Shell::new().unwrap();
    cmd!(sh, "docker unpause {node}")
        .quiet()
        .ignore_stdout()
        .run()
        .expect("the node resumes, so the cleanup can stop it");
}

#[test]
fn a_hung_api_does_not_hide_a_node_that_is_gone() {
    dev_env_tests::require_docker();
    runtime().block_on(async {
        // An API that accepts connections and never answers, as a frozen
        // node does: the watches hang without an error.
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
            .await
            .unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let hold = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((stream, _)) = listener.accept().await {
                held.push(stream);
            }
        });
        let client =
            kube::Client::try_from(kube::Config::new(url.parse().unwrap())).expect("a client");
        let container = dev_env_tests::unique_name("flt-gone");
        let options = WaitOptions {
            timeout: TIMEOUT,
            pending_grace: Duration::from_secs(600),
            node: Some(NodeProbe {
                docker: dev_env::docker::connect().await.expect("the engine"),
                container: container.clone(),
            }),
        };
        let started = Instant::now();
        let err = workload::deployment(&client, &want(), &options)
            .await
            .expect_err("a wait on a node that does not exist cannot complete");
        let elapsed = started.elapsed();
        hold.abort();
        eprintln!("the hung wait ended after {} ms", elapsed.as_millis());
        assert_eq!(
            err.to_string(),
            format!("the node {container} does not exist; `cargo xtask dev up` creates it")
        );
        assert!(elapsed < Duration::from_secs(10), "it took {elapsed:?}");
    });
}
