//! The repository's manifests agree with the controller's types.

use std::path::PathBuf;

use controller_manager::WorkerPool;
use k8s_openapi::{
    api::apps::v1::Deployment,
    apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
};
use kube::{CustomResourceExt, Resource};

pub fn manifest(file: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../manifests")
        .join(file);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The WorkerPool CRD as the repository declares it.
pub fn crd() -> CustomResourceDefinition {
    serde_yaml::from_str(&manifest("10-workerpool-crd.yaml")).unwrap()
}

#[test]
fn the_crd_declares_the_resource_the_controller_reads() {
    let crd = crd();
    let derived = WorkerPool::crd();
    assert_eq!(crd.metadata.name, derived.metadata.name);
    assert_eq!(crd.spec.group, derived.spec.group);
    assert_eq!(crd.spec.scope, "Namespaced");
    assert_eq!(crd.spec.names.kind, derived.spec.names.kind);
    assert_eq!(crd.spec.names.plural, derived.spec.names.plural);
    assert_eq!(crd.spec.versions.len(), 1);
    let version = &crd.spec.versions[0];
    assert_eq!(version.name, WorkerPool::version(&()));
    assert!(version.served && version.storage);
    assert!(
        version
            .subresources
            .as_ref()
            .and_then(|s| s.status.as_ref())
            .is_some(),
        "the status subresource is declared"
    );
}

#[test]
fn the_crd_keeps_the_pod_template_whole() {
    let crd = crd();
    let schema = crd.spec.versions[0]
        .schema
        .as_ref()
        .and_then(|s| s.open_api_v3_schema.as_ref())
        .unwrap();
    let template = &schema.properties.as_ref().unwrap()["spec"]
        .properties
        .as_ref()
        .unwrap()["template"];
    assert_eq!(template.x_kubernetes_preserve_unknown_fields, Some(true));
}

#[test]
fn the_default_workerpool_reads_as_a_workerpool() {
    let pool: WorkerPool = serde_yaml::from_str(&manifest("40-workerpool-default.yaml")).unwrap();
    assert_eq!(pool.metadata.name.as_deref(), Some("default"));
    assert_eq!(pool.metadata.namespace.as_deref(), Some("demo"));
    assert_eq!(pool.spec.replicas, 2);
    let containers = &pool.spec.template.spec.as_ref().unwrap().containers;
    assert_eq!(containers.len(), 1);
    assert_eq!(containers[0].name, "worker");
    assert_eq!(
        containers[0].image.as_deref(),
        Some("dev-env-registry:5000/demo/worker:dev")
    );
    let probe = containers[0].readiness_probe.as_ref().unwrap();
    assert_eq!(
        probe.http_get.as_ref().unwrap().path.as_deref(),
        Some("/healthz")
    );
}

#[test]
fn the_controller_manager_runs_the_image_the_component_pushes() {
    let deployment: Deployment =
        serde_yaml::from_str(&manifest("30-controller-manager.yaml")).unwrap();
    assert_eq!(
        deployment.metadata.name.as_deref(),
        Some("controller-manager")
    );
    assert_eq!(deployment.metadata.namespace.as_deref(), Some("demo"));
    let pod = deployment.spec.template.spec.as_ref().unwrap();
    assert_eq!(
        pod.service_account_name.as_deref(),
        Some("controller-manager")
    );
    assert_eq!(pod.containers[0].name, "manager");
    assert_eq!(
        pod.containers[0].image.as_deref(),
        Some("dev-env-registry:5000/demo/controller-manager:dev")
    );
}

/// Every component of `dev-env.yaml` rolls out an object these manifests
/// declare, whose named container runs the component's image.
#[test]
fn the_components_roll_out_objects_the_manifests_declare() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let config: serde_json::Value =
        serde_yaml::from_str(&std::fs::read_to_string(root.join("dev-env.yaml")).unwrap()).unwrap();
    let pool: WorkerPool = serde_yaml::from_str(&manifest("40-workerpool-default.yaml")).unwrap();
    let deployment: Deployment =
        serde_yaml::from_str(&manifest("30-controller-manager.yaml")).unwrap();
    let components = config["components"].as_object().unwrap();
    for name in ["worker", "controller-manager"] {
        let component = &components[name];
        let rollout = &component["rollout"];
        let (kind, namespace, object, container) = (
            rollout["kind"].as_str().unwrap(),
            rollout["namespace"].as_str().unwrap(),
            rollout["name"].as_str().unwrap(),
            rollout["container"].as_str().unwrap(),
        );
        let (meta, pod) = match kind {
            "WorkerPool" => (&pool.metadata, pool.spec.template.spec.as_ref()),
            "Deployment" => (&deployment.metadata, deployment.spec.template.spec.as_ref()),
            other => panic!("{name}: unexpected rollout kind {other}"),
        };
        assert_eq!(meta.name.as_deref(), Some(object), "{name}");
        assert_eq!(meta.namespace.as_deref(), Some(namespace), "{name}");
        let image = pod
            .unwrap()
            .containers
            .iter()
            .find(|c| c.name == container)
            .unwrap_or_else(|| panic!("{name}: no container {container}"))
            .image
            .clone()
            .unwrap();
        let expected = format!(
            "dev-env-registry:5000/{}:dev",
            component["image"].as_str().unwrap()
        );
        assert_eq!(image, expected, "{name}");
    }
}
