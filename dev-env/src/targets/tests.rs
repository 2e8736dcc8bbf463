use super::*;

/// An environment with a WorkerPool component `worker` and a Deployment
/// component `manager`, read from a file in a temporary workspace.
fn environment(provider: &str, pool_name: &str, container: &str) -> (tempfile::TempDir, Config) {
    let dir =
        crate::config::tests::workspace(&[("worker", &["worker"]), ("manager", &["manager"])]);
    let file = dir.path().join("dev-env.yaml");
    let (context, registry) = if provider == "existing" {
        (
            "\n  context: team",
            "registry: {external: registry.example.com:5000}\n",
        )
    } else {
        ("", "")
    };
    let text = format!(
        "name: demo\ncluster:\n  provider: {provider}{context}\nmanifests: [manifests]\ncomponents:\n  worker:\n    image: demo/worker\n    build: {{cargo: {{package: worker}}}}\n    rollout: {{kind: WorkerPool, namespace: demo, name: {pool_name}, container: {container}}}\n  manager:\n    image: demo/manager\n    build: {{cargo: {{package: manager}}}}\n    rollout: {{kind: Deployment, namespace: demo, name: manager, container: manager}}\n{registry}"
    );
    std::fs::write(&file, &text).unwrap();
    let config = Config::parse(&file, &text).unwrap();
    (dir, config)
}

fn manifests(dir: &Path) -> Vec<Manifest> {
    let file = dir.join("manifests/app.yaml");
    let text = "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: manager, namespace: demo}\nspec:\n  template:\n    spec:\n      containers: [{name: manager, image: demo/manager}]\n---\napiVersion: demo.dev-env.io/v1alpha1\nkind: WorkerPool\nmetadata: {name: default, namespace: demo}\nspec:\n  template:\n    spec:\n      containers: [{name: worker, image: demo/worker}, {name: sidecar, image: s}]\n";
    std::fs::write(&file, text).unwrap();
    crate::manifest::parse(&file, text).unwrap()
}

#[test]
fn targets_the_manifests_declare_pass() {
    let (dir, config) = environment("k3s", "default", "worker");
    let outside = check(&config, &manifests(dir.path())).unwrap();
    assert!(outside.is_empty(), "{outside:?}");
}

#[test]
fn a_typo_in_a_target_names_the_component_the_key_and_the_close_name() {
    let (dir, config) = environment("k3s", "defualt", "worker");
    let err = check(&config, &manifests(dir.path())).unwrap_err();
    let text = err.to_string();
    let at = config.locate("components.worker.rollout.name");
    assert!(
        text.starts_with(&format!(
            "{at}: component `worker` rolls out WorkerPool demo/defualt, which the manifests do not declare (read `manifests`: 2 object(s)); did you mean WorkerPool/demo/default (manifests/app.yaml:9)?"
        )),
        "{text}"
    );
    assert!(at.contains("dev-env.yaml:9:"), "{at}");
    assert_eq!(text.lines().count(), 1, "only the worker is wrong: {text}");
}

#[test]
fn no_close_name_says_how_to_fix_it_and_every_problem_is_listed() {
    let (dir, config) = environment("k3s", "elsewhere", "runner");
    let manifests = manifests(dir.path());
    let Error::Mismatch { problems } = check(&config, &manifests).unwrap_err() else {
        panic!("a mismatch")
    };
    assert_eq!(problems.len(), 1);
    assert!(
        problems[0].to_string().ends_with(
            "; fix `rollout` in the environment file or add the WorkerPool to the manifests"
        ),
        "{}",
        problems[0]
    );
    // A declared target without the container names what it has.
    let (dir, config) = environment("k3s", "default", "runner");
    let manifests = self::manifests(dir.path());
    let text = check(&config, &manifests).unwrap_err().to_string();
    assert!(
        text.ends_with(
            ": component `worker` rolls out container `runner` of WorkerPool demo/default, which has none by that name (manifests/app.yaml:9 declares: worker, sidecar); fix `rollout.container`"
        ),
        "{text}"
    );
    assert!(
        text.starts_with(&config.locate("components.worker.rollout.container")),
        "{text}"
    );
}

#[test]
fn empty_manifests_declare_no_target() {
    let (_dir, config) = environment("k3s", "default", "worker");
    let Error::Mismatch { problems } = check(&config, &[]).unwrap_err() else {
        panic!("a mismatch")
    };
    let text: Vec<String> = problems.iter().map(ToString::to_string).collect();
    assert_eq!(problems.len(), 2, "{text:?}");
    for line in &text {
        assert!(line.contains("(read `manifests`: 0 object(s))"), "{line}");
    }
}

#[test]
fn on_an_existing_cluster_an_undeclared_target_is_left_for_the_cluster() {
    let (dir, config) = environment("existing", "shared", "worker");
    let outside = check(&config, &manifests(dir.path())).unwrap();
    let names: Vec<&str> = outside.iter().map(|o| o.component.as_str()).collect();
    assert_eq!(names, ["worker"]);
    // A declared target with the wrong container is still an error there.
    let (dir, config) = environment("existing", "default", "runner");
    assert!(check(&config, &manifests(dir.path())).is_err());
}

#[test]
fn only_the_named_components_are_checked() {
    let (dir, config) = environment("k3s", "defualt", "worker");
    let manifests = manifests(dir.path());
    let manager = [String::from("manager")];
    assert!(check_components(&config, &manager, &manifests).is_ok());
    let worker = [String::from("worker")];
    assert!(check_components(&config, &worker, &manifests).is_err());
}
