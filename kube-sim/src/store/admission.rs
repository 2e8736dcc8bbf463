//! Mutating admission on create, as kube-apiserver's `ServiceAccount` plugin does for pods: the pod
//! runs as its namespace's `default` service account unless it names one, and, unless the pod or its
//! service account opts out with `automountServiceAccountToken: false`, gets a projected
//! `kube-api-access-<suffix>` volume (the token, `kube-root-ca.crt`'s `ca.crt` and the namespace)
//! mounted read-only at [`SERVICE_ACCOUNT_PATH`] in every container and init container that does not
//! mount something there already. A pod that names no `imagePullSecrets` gets its service account's.

use serde_json::{Value, json};

use super::State;
use super::version::Version;
use crate::meta;
use crate::resource::GroupResource;

/// Where service-account credentials are mounted.
pub const SERVICE_ACCOUNT_PATH: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// Applies the service-account admission to a pod being created in `namespace`.
pub(super) fn admit_pod(st: &State, namespace: &str, pod: &mut Value) {
    let Some(spec) = pod.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    let account = spec
        .get("serviceAccountName")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .or_else(|| spec.get("serviceAccount").and_then(Value::as_str))
        .filter(|s| !s.is_empty())
        .unwrap_or("default")
        .to_string();
    spec.insert("serviceAccountName".into(), json!(account));
    spec.insert("serviceAccount".into(), json!(account));
    let service_account = st
        .objects
        .get(&GroupResource::new("", "serviceaccounts"))
        .and_then(|m| m.get(&(namespace.to_string(), account.clone())))
        .map(Version::value);
    copy_image_pull_secrets(spec, service_account.as_deref());
    if !automounts(
        service_account.as_deref(),
        spec.get("automountServiceAccountToken"),
    ) {
        return;
    }
    let volume = format!("kube-api-access-{}", meta::random_suffix(5));
    let mut mounted = false;
    for list in ["initContainers", "containers"] {
        let Some(containers) = spec.get_mut(list).and_then(Value::as_array_mut) else {
            continue;
        };
        for container in containers {
            mounted |= add_mount(container, &volume);
        }
    }
    if mounted {
        let volumes = spec.entry("volumes").or_insert_with(|| json!([]));
        if let Value::Array(volumes) = volumes {
            volumes.push(projected_volume(&volume));
        }
    }
}

/// Whether the token is mounted: the pod's own setting wins, then the service account's, then yes.
fn automounts(service_account: Option<&Value>, pod_setting: Option<&Value>) -> bool {
    if let Some(Value::Bool(b)) = pod_setting {
        return *b;
    }
    service_account
        .and_then(|sa| sa.get("automountServiceAccountToken"))
        .and_then(Value::as_bool)
        .unwrap_or(true)
}

/// A pod without `imagePullSecrets` gets the names its service account lists (only the names, as the
/// plugin copies `LocalObjectReference`s); a pod with some keeps its own.
fn copy_image_pull_secrets(
    spec: &mut serde_json::Map<String, Value>,
    service_account: Option<&Value>,
) {
    let own = spec
        .get("imagePullSecrets")
        .and_then(Value::as_array)
        .is_some_and(|l| !l.is_empty());
    let Some(listed) = service_account
        .and_then(|sa| sa.get("imagePullSecrets"))
        .and_then(Value::as_array)
        .filter(|l| !own && !l.is_empty())
    else {
        return;
    };
    let names: Vec<Value> = listed
        .iter()
        .map(|r| json!({"name": r.get("name").cloned().unwrap_or(json!(""))}))
        .collect();
    spec.insert("imagePullSecrets".into(), Value::Array(names));
}

/// Mounts `volume` in `container` unless something is mounted at [`SERVICE_ACCOUNT_PATH`] already.
fn add_mount(container: &mut Value, volume: &str) -> bool {
    let Some(c) = container.as_object_mut() else {
        return false;
    };
    let mounts = c.entry("volumeMounts").or_insert_with(|| json!([]));
    let Value::Array(mounts) = mounts else {
        return false;
    };
    let taken = mounts
        .iter()
        .any(|m| m.get("mountPath").and_then(Value::as_str) == Some(SERVICE_ACCOUNT_PATH));
    if taken {
        return false;
    }
    mounts.push(json!({"name": volume, "readOnly": true, "mountPath": SERVICE_ACCOUNT_PATH}));
    true
}

/// The projected volume the plugin adds, with the defaults it writes out.
fn projected_volume(name: &str) -> Value {
    json!({
        "name": name,
        "projected": {
            "defaultMode": 420,
            "sources": [
                {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                {"downwardAPI": {"items": [{"path": "namespace",
                    "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}},
            ],
        },
    })
}
