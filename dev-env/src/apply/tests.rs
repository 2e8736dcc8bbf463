use super::*;

#[test]
fn images_of_pushed_components_are_pinned_wherever_containers_are() {
    let pins = HashMap::from([(
        String::from("demo/worker"),
        format!("reg:5000/demo/worker@sha256:{}", "a".repeat(64)),
    )]);
    let mut pool = json!({
        "kind": "WorkerPool",
        "spec": {"template": {"spec": {
            "initContainers": [{"name": "init", "image": "other-env-registry:5000/demo/worker:dev"}],
            "containers": [
                {"name": "worker", "image": "reg:5000/demo/worker:dev"},
                {"name": "sidecar", "image": "reg:5000/demo/worker-helper:dev"},
            ]
        }}}
    });
    assert_eq!(pin_images(&mut pool, &pins), 2);
    assert_eq!(
        pool["spec"]["template"]["spec"]["containers"][0]["image"],
        pins["demo/worker"]
    );
    assert_eq!(
        pool["spec"]["template"]["spec"]["containers"][1]["image"],
        "reg:5000/demo/worker-helper:dev"
    );
    // Pinning twice changes nothing.
    assert_eq!(pin_images(&mut pool, &pins), 0);
}

#[test]
fn a_refusal_points_at_the_field_it_names_in_the_document() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("web.yaml");
    std::fs::write(
        &file,
        "apiVersion: v1\nkind: Namespace\nmetadata: {name: a}\n---\napiVersion: apps/v1\nkind: Deployment\n\
         metadata: {name: web}\nspec:\n  replicaz: 1\n  template:\n    spec:\n      containers:\n      - name: w\n        imagePullPolicyy: x\n",
    )
    .unwrap();
    let manifest = Manifest {
        file: file.clone(),
        line: 5,
        api_version: String::from("apps/v1"),
        kind: String::from("Deployment"),
        name: String::from("web"),
        namespace: None,
        object: json!({}),
    };
    let at = |message: &str| locate_problem(&manifest, message);
    let file = file.display();
    assert_eq!(
        at(r#"strict decoding error: unknown field "spec.replicaz" (400 BadRequest)"#),
        format!("{file}:9:3")
    );
    assert_eq!(
        at(".spec.template.spec.containers[0].imagePullPolicyy: field not declared in schema"),
        format!("{file}:14:9")
    );
    assert_eq!(at("namespaces \"x\" not found"), format!("{file}:5"));
    assert_eq!(at(r#"unknown field "spec.absent""#), format!("{file}:5"));
}

#[test]
fn path_of_drops_only_a_registry_host() {
    assert_eq!(path_of("reg:5000/demo/worker"), "demo/worker");
    assert_eq!(path_of("registry.example.com/demo/worker"), "demo/worker");
    assert_eq!(path_of("localhost/w"), "w");
    assert_eq!(path_of("demo/worker"), "demo/worker");
}

#[test]
fn repository_of_strips_tags_and_digests_but_not_ports() {
    assert_eq!(
        repository_of("reg:5000/demo/worker:dev"),
        "reg:5000/demo/worker"
    );
    assert_eq!(
        repository_of("reg:5000/demo/worker"),
        "reg:5000/demo/worker"
    );
    assert_eq!(
        repository_of("reg:5000/demo/worker@sha256:ab"),
        "reg:5000/demo/worker"
    );
    assert_eq!(repository_of("reg:5000/w:dev@sha256:ab"), "reg:5000/w");
}
