//! The `WorkerPool` resource (`workerpools.demo.dev-env.io/v1alpha1`).
//!
//! The schema the API server enforces is the CRD in
//! `manifests/10-workerpool-crd.yaml`; these types read and write it.

use k8s_openapi::{api::core::v1::PodTemplateSpec, apimachinery::pkg::apis::meta::v1::Condition};
use kube::CustomResource;
use serde::{Deserialize, Serialize};

/// The condition that follows the Deployment's `Available` condition.
pub const AVAILABLE: &str = "Available";
/// The condition that is `False` only once the Deployment has rolled out
/// the WorkerPool's current template completely.
pub const PROGRESSING: &str = "Progressing";

/// A set of identical workers, run as a Deployment of the same name.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[kube(
    group = "demo.dev-env.io",
    version = "v1alpha1",
    kind = "WorkerPool",
    plural = "workerpools",
    shortname = "wp",
    namespaced,
    status = "WorkerPoolStatus",
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct WorkerPoolSpec {
    /// How many workers run.
    #[serde(default = "default_replicas")]
    pub replicas: i32,
    /// The workers' pod template, passed to the Deployment as it is, its
    /// annotations included: changing them rolls the workers.
    pub template: PodTemplateSpec,
}

fn default_replicas() -> i32 {
    1
}

/// What the controller last saw of the WorkerPool's Deployment.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkerPoolStatus {
    /// The `metadata.generation` of the WorkerPool this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(default)]
    pub replicas: i32,
    #[serde(default)]
    pub updated_replicas: i32,
    #[serde(default)]
    pub ready_replicas: i32,
    #[serde(default)]
    pub available_replicas: i32,
    /// `Available` and `Progressing`.
    #[serde(default)]
    pub conditions: Vec<Condition>,
}

impl WorkerPoolStatus {
    /// The condition of type `type_`, if there is one.
    pub fn condition(&self, type_: &str) -> Option<&Condition> {
        self.conditions.iter().find(|c| c.type_ == type_)
    }
}
