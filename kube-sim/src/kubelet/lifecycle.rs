//! Admission checks before containers start (`pkg/kubelet/lifecycle`): volumes and environment references
//! that name a ConfigMap or Secret that does not exist keep the pod from starting.

use serde_json::Value;

use crate::meta;
use crate::resource::GroupResource;
use crate::store::Store;

/// The first non-optional configMap or secret volume whose source is missing.
pub(super) fn missing_volume_source(store: &Store, pod: &Value) -> Option<String> {
    let ns = meta::namespace_of(pod);
    let volumes = pod.pointer("/spec/volumes").and_then(Value::as_array)?;
    for v in volumes {
        for (field, resource, name_field) in [
            ("configMap", "configmaps", "name"),
            ("secret", "secrets", "secretName"),
        ] {
            let Some(src) = v.get(field) else { continue };
            if src["optional"] == true {
                continue;
            }
            let name = src[name_field].as_str().unwrap_or("");
            if store
                .get(&GroupResource::new("", resource), Some(ns), name)
                .is_err()
            {
                return Some(format!("{field} \"{name}\" not found"));
            }
        }
    }
    None
}

/// The message of `CreateContainerConfigError` for a missing configMap, secret or key, if any.
pub(super) fn missing_config_reference(
    store: &Store,
    pod: &Value,
    container: &Value,
) -> Option<String> {
    let ns = meta::namespace_of(pod);
    let get = |resource: &str, name: &str| {
        store
            .get(&GroupResource::new("", resource), Some(ns), name)
            .ok()
    };
    if let Some(env_from) = container["envFrom"].as_array() {
        for e in env_from {
            for (field, resource, kind) in [
                ("configMapRef", "configmaps", "configmap"),
                ("secretRef", "secrets", "secret"),
            ] {
                let Some(src) = e.get(field) else { continue };
                let name = src["name"].as_str().unwrap_or("");
                if src["optional"] != true && get(resource, name).is_none() {
                    return Some(format!("{kind} \"{name}\" not found"));
                }
            }
        }
    }
    if let Some(env) = container["env"].as_array() {
        for e in env {
            for (field, resource, kind, title) in [
                ("configMapKeyRef", "configmaps", "configmap", "ConfigMap"),
                ("secretKeyRef", "secrets", "secret", "Secret"),
            ] {
                let Some(src) = e.pointer(&format!("/valueFrom/{field}")) else {
                    continue;
                };
                if src["optional"] == true {
                    continue;
                }
                let name = src["name"].as_str().unwrap_or("");
                let key = src["key"].as_str().unwrap_or("");
                match get(resource, name) {
                    None => return Some(format!("{kind} \"{name}\" not found")),
                    Some(obj) => {
                        let has = obj.pointer(&format!("/data/{key}")).is_some()
                            || obj.pointer(&format!("/binaryData/{key}")).is_some()
                            || obj.pointer(&format!("/stringData/{key}")).is_some();
                        if !has {
                            return Some(format!("couldn't find key {key} in {title} {ns}/{name}"));
                        }
                    }
                }
            }
        }
    }
    None
}
