//! The demo operator in-cluster: the repository's manifests and both
//! components, built and run as pods under kube-sim's Docker kubelet, where
//! RBAC is enforced as on k3s. The controller-manager works with the
//! repository's ClusterRole; without `patch` on `workerpools/status` its
//! reconciles fail with the Forbidden error naming that resource; the
//! worker's own token reads no Secrets.

use std::time::{Duration, Instant};

use dev_env::{config::Config, lifecycle, report::Silent};
use dev_env_tests::{SimProject, repo_root, runtime, up};
use xshell::{Shell, cmd};

/// The manifests of the repository, copied into the project.
const MANIFESTS: &[&str] = &[
    "00-namespace.yaml",
    "10-workerpool-crd.yaml",
    "20-controller-manager-rbac.yaml",
    "30-controller-manager.yaml",
    "40-workerpool-default.yaml",
];

/// The repository's environment under another name and subnet: its
/// manifests copied into `target/it/<name>/manifests`, and a configuration
/// at the repository root (`dev-env.<name>.yaml`, removed on drop), so its
/// components build from the repository's packages into the repository's
/// release target directory, as `cargo xtask dev up` builds them.
struct Operator(SimProject);

impl Operator {
    fn new() -> Operator {
        let env = SimProject::new("opr");
        for file in MANIFESTS {
            let text = std::fs::read_to_string(repo_root().join("manifests").join(file))
                .expect("a manifest of the repository");
            env.write(&format!("manifests/{file}"), &text);
        }
        let manifests = env.dir.join("manifests");
        std::fs::write(
            Operator::config_path(&env.name),
            format!(
                "name: {}\nnetwork: {{ipv4Subnet: {}}}\ncluster: {{provider: sim}}\nmanifests: [{}]\n\
                 components:\n  worker:\n    image: demo/worker\n    build: {{cargo: {{package: worker, bin: worker}}}}\n    \
                 rollout: {{kind: WorkerPool, namespace: demo, name: default, container: worker}}\n  \
                 controller-manager:\n    image: demo/controller-manager\n    build:\n      docker:\n        \
                 context: demo/controller-manager\n        dockerfile: Dockerfile\n        \
                 cargo: {{package: controller-manager, bin: controller-manager}}\n    \
                 rollout: {{kind: Deployment, namespace: demo, name: controller-manager, container: manager}}\n",
                env.name,
                env.subnet,
                manifests.display()
            ),
        )
        .expect("the configuration is written");
        Operator(env)
    }

    fn config_path(name: &str) -> std::path::PathBuf {
        repo_root().join(format!("dev-env.{name}.yaml"))
    }

    fn config(&self) -> Config {
        Config::load(&Operator::config_path(&self.0.name)).expect("a valid configuration")
    }

    fn kubectl(&self, args: &[&str]) -> Result<String, String> {
        let sh = Shell::new().unwrap();
        let kc = self
            .config()
            .state_dir()
            .join(dev_env::kubeconfig::HOST_FILE);
        cmd!(sh, "kubectl --kubeconfig {kc} {args...}")
            .quiet()
            .ignore_status()
            .output()
            .map_err(|e| e.to_string())
            .and_then(|out| {
                let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
                let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
                if out.status.success() {
                    Ok(stdout)
                } else {
                    Err(stderr)
                }
            })
    }

    fn kubectl_ok(&self, args: &[&str]) -> String {
        self.kubectl(args)
            .unwrap_or_else(|e| panic!("kubectl {args:?}: {e}"))
    }

    /// The WorkerPool's `metadata.generation` and `status.observedGeneration`.
    fn generations(&self) -> (i64, i64) {
        let out = self.kubectl_ok(&[
            "-n",
            "demo",
            "get",
            "workerpool",
            "default",
            "-o",
            "jsonpath={.metadata.generation} {.status.observedGeneration}",
        ]);
        let mut parts = out.split_whitespace().map(|p| p.parse().unwrap_or(0));
        (parts.next().unwrap_or(0), parts.next().unwrap_or(0))
    }

    fn manager_logs(&self) -> String {
        self.kubectl(&[
            "-n",
            "demo",
            "logs",
            "-l",
            "app.kubernetes.io/name=controller-manager",
            "--tail=-1",
        ])
        .unwrap_or_else(|e| e)
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        let path = Operator::config_path(&self.0.name);
        if let Ok(config) = Config::load(&path) {
            let _ = runtime().block_on(lifecycle::down(
                &config,
                lifecycle::DownOptions::RESET_PURGE,
                &Silent,
            ));
            let _ = std::fs::remove_dir_all(config.state_dir());
        }
        let _ = std::fs::remove_file(path);
    }
}

/// The token mounted into the first container of the pods labelled `selector`.
fn mounted_token(env: &Operator, selector: &str) -> String {
    let id = env.kubectl_ok(&[
        "-n",
        "demo",
        "get",
        "pods",
        "-l",
        selector,
        "-o",
        "jsonpath={.items[0].status.containerStatuses[0].containerID}",
    ]);
    let id = id.trim().trim_start_matches("docker://").to_string();
    let sh = Shell::new().unwrap();
    let source = format!("{id}:/var/run/secrets/kubernetes.io/serviceaccount/token");
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("token");
    cmd!(sh, "docker cp {source} {dest}").quiet().run().unwrap();
    std::fs::read_to_string(dest).unwrap()
}

#[test]
fn the_controller_manager_runs_in_cluster_under_its_rbac_and_fails_without_patch_on_status() {
    let env = Operator::new();
    let config = env.config();
    // `dev up` waits until the WorkerPool reports its generation converged,
    // which only the controller-manager, in its pod, with its ClusterRole,
    // writes.
    up(&config).expect("dev up converges with the repository's RBAC");
    let (generation, observed) = env.generations();
    assert!(observed >= generation, "{generation} {observed}");
    let logs = env.manager_logs();
    assert!(!logs.contains("forbidden"), "{logs}");

    // The worker's token is the `default` service account's: no Secrets.
    let token = mounted_token(&env, "app.kubernetes.io/name=worker");
    let denied = env
        .kubectl(&["--token", token.trim(), "-n", "demo", "get", "secrets"])
        .expect_err("the worker's token reads no Secrets");
    assert!(
        denied.contains(r#"User "system:serviceaccount:demo:default" cannot list resource "secrets" in API group "" in the namespace "demo""#),
        "{denied}"
    );

    // Without `patch` on `workerpools/status`, the next status write is refused.
    let rbac =
        std::fs::read_to_string(repo_root().join("manifests/20-controller-manager-rbac.yaml"))
            .unwrap();
    let without_patch = rbac.replace(
        "resources: [workerpools/status]\n    verbs: [get, patch, update]",
        "resources: [workerpools/status]\n    verbs: [get, update]",
    );
    assert_ne!(
        rbac, without_patch,
        "the manifest grants patch on workerpools/status"
    );
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rbac.yaml");
    std::fs::write(&path, without_patch).unwrap();
    let path = path.to_str().unwrap();
    env.kubectl_ok(&["apply", "--server-side", "--force-conflicts", "-f", path]);
    env.kubectl_ok(&[
        "-n",
        "demo",
        "patch",
        "workerpool",
        "default",
        "--type",
        "merge",
        "-p",
        r#"{"spec":{"replicas":1}}"#,
    ]);
    let wanted = r#"workerpools.demo.dev-env.io "default" is forbidden: User "system:serviceaccount:demo:controller-manager" cannot patch resource "workerpools/status" in API group "demo.dev-env.io" in the namespace "demo""#;
    let deadline = Instant::now() + Duration::from_secs(60);
    let logs = loop {
        let logs = env.manager_logs();
        if logs.contains(wanted) || Instant::now() > deadline {
            break logs;
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    assert!(logs.contains(wanted), "{logs}");
    let (generation, observed) = env.generations();
    assert!(
        observed < generation,
        "the status stays behind: {generation} {observed}"
    );
}
