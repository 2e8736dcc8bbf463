//! A container's environment as the kubelet builds it: the API server's address, then `envFrom`, then `env`
//! (later wins), with `fieldRef`, `configMapKeyRef` and `secretKeyRef` resolved against the store.

use std::collections::BTreeMap;

use base64::Engine as _;
use serde_json::Value;

use super::ApiAccess;
use crate::meta;
use crate::resource::GroupResource;
use crate::store::Store;

/// The container's environment as `NAME=value` strings, or the reason a reference cannot be resolved.
pub(super) fn environment(
    store: &Store,
    pod: &Value,
    container: &Value,
    api: &ApiAccess,
) -> Result<Vec<String>, String> {
    let mut vars = Vars(vec![
        ("KUBERNETES_SERVICE_HOST".into(), api.host.clone()),
        ("KUBERNETES_SERVICE_PORT".into(), api.port.to_string()),
        ("KUBERNETES_SERVICE_PORT_HTTPS".into(), api.port.to_string()),
        (
            "KUBERNETES_PORT".into(),
            format!("tcp://{}:{}", api.host, api.port),
        ),
    ]);
    if let Some(from) = container["envFrom"].as_array() {
        for e in from {
            env_from(store, pod, e, &mut vars)?;
        }
    }
    if let Some(env) = container["env"].as_array() {
        for e in env {
            env_var(store, pod, e, &mut vars)?;
        }
    }
    Ok(vars
        .0
        .into_iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect())
}

/// Variables in order; setting one again replaces it and moves it last.
struct Vars(Vec<(String, String)>);

impl Vars {
    fn set(&mut self, k: String, v: String) {
        self.0.retain(|(name, _)| *name != k);
        self.0.push((k, v));
    }
}

/// One `envFrom` entry: every key of the ConfigMap or Secret, with the entry's prefix.
fn env_from(store: &Store, pod: &Value, e: &Value, vars: &mut Vars) -> Result<(), String> {
    let ns = meta::namespace_of(pod);
    let prefix = e["prefix"].as_str().unwrap_or("");
    for (field, resource) in [("configMapRef", "configmaps"), ("secretRef", "secrets")] {
        let Some(src) = e.get(field) else { continue };
        let name = src["name"].as_str().unwrap_or("");
        match object_data(store, ns, resource, name) {
            Some(values) => {
                for (k, v) in values {
                    vars.set(format!("{prefix}{k}"), v);
                }
            }
            None if src["optional"] == true => {}
            None => return Err(format!("{resource} \"{name}\" not found")),
        }
    }
    Ok(())
}

/// One `env` entry: a value, a field of the pod, or a key of a ConfigMap or Secret.
fn env_var(store: &Store, pod: &Value, e: &Value, vars: &mut Vars) -> Result<(), String> {
    let ns = meta::namespace_of(pod);
    let name = e["name"].as_str().unwrap_or("").to_string();
    if let Some(v) = e["value"].as_str() {
        vars.set(name, v.to_string());
        return Ok(());
    }
    let Some(from) = e.get("valueFrom") else {
        vars.set(name, String::new());
        return Ok(());
    };
    if let Some(path) = from.pointer("/fieldRef/fieldPath").and_then(Value::as_str) {
        vars.set(name, field_ref(pod, path));
        return Ok(());
    }
    for (field, resource) in [
        ("configMapKeyRef", "configmaps"),
        ("secretKeyRef", "secrets"),
    ] {
        let Some(src) = from.get(field) else { continue };
        let obj = src["name"].as_str().unwrap_or("");
        let key = src["key"].as_str().unwrap_or("");
        match object_data(store, ns, resource, obj).and_then(|d| d.get(key).cloned()) {
            Some(v) => vars.set(name.clone(), v),
            None if src["optional"] == true => {}
            None => {
                return Err(format!("couldn't find key {key} in {resource} {ns}/{obj}"));
            }
        }
    }
    Ok(())
}

/// The value of a `fieldRef` path on the pod; empty for what the pod does not have.
fn field_ref(pod: &Value, path: &str) -> String {
    match path {
        "metadata.name" => meta::name_of(pod).to_string(),
        "metadata.namespace" => meta::namespace_of(pod).to_string(),
        "metadata.uid" => meta::str_at(pod, "/metadata/uid").unwrap_or("").into(),
        "spec.nodeName" => meta::str_at(pod, "/spec/nodeName").unwrap_or("").into(),
        "spec.serviceAccountName" => meta::str_at(pod, "/spec/serviceAccountName")
            .unwrap_or("default")
            .into(),
        // Docker assigns the address at the start, so a container sees the pod IP an earlier container
        // of the pod got (after a restart, or for a second container).
        "status.podIP" => meta::str_at(pod, "/status/podIP").unwrap_or("").into(),
        "status.hostIP" => meta::str_at(pod, "/status/hostIP").unwrap_or("").into(),
        other => {
            let label = other
                .strip_prefix("metadata.labels['")
                .map(|l| ("labels", l))
                .or_else(|| {
                    other
                        .strip_prefix("metadata.annotations['")
                        .map(|a| ("annotations", a))
                });
            match label {
                Some((field, key)) => pod["metadata"][field][key.trim_end_matches("']")]
                    .as_str()
                    .unwrap_or("")
                    .to_string(),
                None => String::new(),
            }
        }
    }
}

/// The data of a ConfigMap or Secret (Secret values decoded), `stringData` over `data`; `None` when the
/// object does not exist.
fn object_data(
    store: &Store,
    ns: &str,
    resource: &str,
    name: &str,
) -> Option<BTreeMap<String, String>> {
    let obj = store
        .get(&GroupResource::new("", resource), Some(ns), name)
        .ok()?;
    let mut out = BTreeMap::new();
    if let Some(d) = obj["data"].as_object() {
        for (k, v) in d {
            let text = v.as_str().unwrap_or("");
            let value = if resource == "secrets" {
                base64::engine::general_purpose::STANDARD
                    .decode(text)
                    .ok()
                    .map(|b| String::from_utf8_lossy(&b).into_owned())
                    .unwrap_or_default()
            } else {
                text.to_string()
            };
            out.insert(k.clone(), value);
        }
    }
    if let Some(d) = obj["stringData"].as_object() {
        for (k, v) in d {
            out.insert(k.clone(), v.as_str().unwrap_or("").to_string());
        }
    }
    Some(out)
}
