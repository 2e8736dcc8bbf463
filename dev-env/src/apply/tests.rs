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

#[test]
fn what_a_namespace_holds_in_its_own_right_counts_against_pruning_it() {
    use super::applyset::GroupKind;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
    let meta = |name: &str| ObjectMeta {
        name: Some(name.to_string()),
        ..ObjectMeta::default()
    };
    let kind = |api_version: &str, kind: &str| GroupKind::of(api_version, kind);
    let incidental = super::prune::incidental;
    // Made by hand, or by an application: counted.
    assert!(!incidental(&kind("v1", "Secret"), &meta("precious")));
    assert!(!incidental(
        &kind("coordination.k8s.io/v1", "Lease"),
        &meta("leader")
    ));
    assert!(!incidental(&kind("v1", "ServiceAccount"), &meta("robot")));
    // Owned by another object (counted through it), derived, or made for
    // every namespace: not counted.
    let owned = ObjectMeta {
        owner_references: Some(vec![OwnerReference {
            name: String::from("web-5f7d"),
            ..OwnerReference::default()
        }]),
        ..meta("web-5f7d-x2x9q")
    };
    assert!(incidental(&kind("v1", "Pod"), &owned));
    assert!(incidental(&kind("v1", "Event"), &meta("web.17f")));
    assert!(incidental(
        &kind("events.k8s.io/v1", "Event"),
        &meta("web.17f")
    ));
    assert!(incidental(&kind("v1", "Endpoints"), &meta("web")));
    assert!(incidental(
        &kind("metrics.k8s.io/v1beta1", "PodMetrics"),
        &meta("web-5f7d-x2x9q")
    ));
    assert!(incidental(&kind("v1", "ServiceAccount"), &meta("default")));
    assert!(incidental(
        &kind("v1", "ConfigMap"),
        &meta("kube-root-ca.crt")
    ));
    // dev-env's own pull secret.
    let pull_secret = ObjectMeta {
        labels: Some(
            [(
                "app.kubernetes.io/managed-by".to_string(),
                "dev-env".to_string(),
            )]
            .into(),
        ),
        ..meta("shop-registry-credentials")
    };
    assert!(incidental(&kind("v1", "Secret"), &pull_secret));
}
