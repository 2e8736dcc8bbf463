use k8s_openapi::api::core::v1::{Container, PodSpec, PodTemplateSpec};
use serde_json::json;

use super::*;
use crate::WorkerPoolSpec;

fn pool(annotations: &[(&str, &str)]) -> WorkerPool {
    let mut pool = WorkerPool::new(
        "default",
        WorkerPoolSpec {
            replicas: 2,
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(BTreeMap::from([(
                        "app.kubernetes.io/name".to_string(),
                        "worker".to_string(),
                    )])),
                    annotations: Some(
                        annotations
                            .iter()
                            .map(|(k, v)| (k.to_string(), v.to_string()))
                            .collect(),
                    ),
                    ..ObjectMeta::default()
                }),
                spec: Some(PodSpec {
                    containers: vec![Container {
                        name: "worker".to_string(),
                        image: Some("dev-env-registry:5000/demo/worker:dev".to_string()),
                        ..Container::default()
                    }],
                    ..PodSpec::default()
                }),
            },
        },
    );
    pool.metadata.namespace = Some("demo".to_string());
    pool.metadata.uid = Some("uid-1".to_string());
    pool.metadata.generation = Some(3);
    pool
}

#[test]
fn the_deployment_is_named_after_and_controlled_by_its_pool() {
    let deployment = desired(&pool(&[])).unwrap();
    assert_eq!(deployment.metadata.name.as_deref(), Some("default"));
    assert_eq!(deployment.metadata.namespace.as_deref(), Some("demo"));
    let owners = deployment.metadata.owner_references.clone().unwrap();
    assert_eq!(owners.len(), 1);
    let owner = &owners[0];
    assert_eq!(
        (
            owner.api_version.as_str(),
            owner.kind.as_str(),
            owner.name.as_str(),
            owner.uid.as_str()
        ),
        ("demo.dev-env.io/v1alpha1", "WorkerPool", "default", "uid-1")
    );
    assert_eq!(owner.controller, Some(true));
    assert_eq!(owner.block_owner_deletion, Some(true));
    assert!(is_owned_by(&deployment, &pool(&[])));
}

#[test]
fn the_deployment_carries_replicas_and_the_template_with_the_pool_label() {
    let pool = pool(&[("dev-env.io/restartedAt", "2026-11-29T15:00:00Z")]);
    let deployment = desired(&pool).unwrap();
    assert_eq!(deployment.spec.replicas, Some(2));
    assert_eq!(
        deployment.spec.selector.match_labels,
        Some(BTreeMap::from([(
            POOL_LABEL.to_string(),
            "default".to_string()
        )]))
    );
    let meta = deployment.spec.template.metadata.clone().unwrap();
    assert_eq!(
        meta.labels,
        Some(BTreeMap::from([
            ("app.kubernetes.io/name".to_string(), "worker".to_string()),
            (POOL_LABEL.to_string(), "default".to_string()),
        ]))
    );
    assert_eq!(
        meta.annotations,
        Some(BTreeMap::from([(
            "dev-env.io/restartedAt".to_string(),
            "2026-11-29T15:00:00Z".to_string()
        )]))
    );
    assert_eq!(deployment.spec.template.spec, pool.spec.template.spec);
}

#[test]
fn the_apply_body_names_its_kind_and_no_status() {
    let body = serde_json::to_value(desired(&pool(&[])).unwrap()).unwrap();
    assert_eq!(body["apiVersion"], "apps/v1");
    assert_eq!(body["kind"], "Deployment");
    assert!(body.get("status").is_none(), "{body}");
}

#[test]
fn a_pool_read_from_nowhere_cannot_own_anything() {
    let mut pool = pool(&[]);
    pool.metadata.uid = None;
    assert!(matches!(desired(&pool), Err(Error::Unstored { .. })));
}

#[test]
fn ownership_is_by_uid_and_controller_flag() {
    let pool = pool(&[]);
    let mut deployment = desired(&pool).unwrap();
    deployment.metadata.owner_references.as_mut().unwrap()[0].uid = "other".to_string();
    assert!(!is_owned_by(&deployment, &pool));
    let mut deployment = desired(&pool).unwrap();
    deployment.metadata.owner_references.as_mut().unwrap()[0].controller = Some(false);
    assert!(!is_owned_by(&deployment, &pool));
}

#[test]
fn template_metadata_set_by_others_is_reverted() {
    let want = desired(&pool(&[("keep", "1")])).unwrap();
    let mut live = want.clone();
    let meta = live.spec.template.metadata.as_mut().unwrap();
    meta.annotations.as_mut().unwrap().insert(
        "kubectl.kubernetes.io/restartedAt".to_string(),
        "2026-11-29T15:00:00Z".to_string(),
    );
    meta.labels
        .as_mut()
        .unwrap()
        .insert("extra".to_string(), "x".to_string());
    assert_eq!(
        stray_template_metadata(&want, &live),
        Some(json!({"spec": {"template": {"metadata": {
            "labels": {"extra": null},
            "annotations": {"kubectl.kubernetes.io/restartedAt": null},
        }}}}))
    );
}

#[test]
fn a_stray_annotation_is_found_when_the_pool_has_none() {
    let want = desired(&pool(&[])).unwrap();
    let mut live = want.clone();
    live.spec.template.metadata.as_mut().unwrap().annotations = Some(BTreeMap::from([(
        "dev-env.io/restartedAt".to_string(),
        "t".to_string(),
    )]));
    assert_eq!(
        stray_template_metadata(&want, &live),
        Some(json!({"spec": {"template": {"metadata": {
            "annotations": {"dev-env.io/restartedAt": null},
        }}}}))
    );
}

#[test]
fn a_deployment_as_desired_needs_no_revert() {
    let want = desired(&pool(&[("a", "1")])).unwrap();
    assert_eq!(stray_template_metadata(&want, &want), None);
    // A value changed by someone else is the apply's to restore, not this patch's.
    let mut live = want.clone();
    live.spec
        .template
        .metadata
        .as_mut()
        .unwrap()
        .annotations
        .as_mut()
        .unwrap()
        .insert("a".to_string(), "2".to_string());
    assert_eq!(stray_template_metadata(&want, &live), None);
}
