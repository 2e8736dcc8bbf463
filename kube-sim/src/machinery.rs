//! API machinery that runs beside the server: the CRD establishing controller, the namespace lifecycle
//! (deleting contents of terminating namespaces) and the `default` service account of every namespace.

use std::collections::HashMap;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::watch;

use crate::meta;
use crate::resource::{self, GroupResource};
use crate::store::{
    Endpoint, Error, ListOptions, Patch, PatchOptions, SharedEvent, Store, WriteOptions,
};

const MANAGER: &str = "kube-apiserver";

/// Serves custom resources once their CRD is established.
///
/// A new or changed CRD first gets `NamesAccepted=True` (reason `NoConflicts`), then after `delay`
/// `Established=True` (reason `InitialNamesAccepted`); only then does the resource answer requests.
/// Deleting a CRD stops serving it and removes its objects.
pub async fn run_crd_controller(store: Store, delay: Duration, shutdown: watch::Receiver<bool>) {
    let mut served: HashMap<String, (i64, GroupResource)> = HashMap::new();
    crate::controller::follow(
        &store,
        &GroupResource::crds(),
        shutdown,
        |event| match event {
            SharedEvent::Added(crd) | SharedEvent::Modified(crd) => {
                crd_changed(&store, &mut served, &crd, delay);
            }
            SharedEvent::Deleted(crd) => {
                if let Some((_, gr)) = served.remove(meta::name_of(&crd)) {
                    store.unregister_custom(&gr);
                }
            }
            SharedEvent::Bookmark(_) | SharedEvent::Error(_) => {}
        },
    )
    .await;
}

/// Serves a new CRD, or a new generation of one, once it is established.
fn crd_changed(
    store: &Store,
    served: &mut HashMap<String, (i64, GroupResource)>,
    crd: &Value,
    delay: Duration,
) {
    let name = meta::name_of(crd).to_string();
    let generation = crd
        .pointer("/metadata/generation")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    let Some(info) = resource::from_crd(crd) else {
        tracing::warn!(crd = %name, "CRD has no served versions; not serving it");
        return;
    };
    if served.get(&name).is_some_and(|(g, _)| *g == generation) {
        return;
    }
    let gr = info.group_resource();
    if let Some((_, old_gr)) = served.get(&name)
        && *old_gr != gr
    {
        store.unregister_custom(old_gr);
    }
    served.insert(name.clone(), (generation, gr));
    let already = is_established(crd);
    let store = store.clone();
    tokio::spawn(async move {
        if already {
            store.register_custom(info);
            return;
        }
        if let Err(e) = establish(&store, &name, info, delay).await {
            tracing::warn!(crd = %name, error = %e, "establishing the CRD failed");
        }
    });
}

fn is_established(crd: &Value) -> bool {
    crd.pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|cs| {
            cs.iter()
                .any(|c| c["type"] == "Established" && c["status"] == "True")
        })
}

async fn establish(
    store: &Store,
    name: &str,
    info: resource::ResourceInfo,
    delay: Duration,
) -> Result<(), Error> {
    let crds = GroupResource::crds();
    let crd = store.get(&crds, None, name)?;
    let now = meta::now_rfc3339();
    let mut accepted = crd.pointer("/spec/names").cloned().unwrap_or(json!({}));
    if let Value::Object(m) = &mut accepted {
        m.entry("singular").or_insert_with(|| json!(info.singular));
        m.entry("listKind").or_insert_with(|| json!(info.list_kind));
    }
    let storage: Vec<Value> = crd
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .map(|vs| {
            vs.iter()
                .filter(|v| v["storage"] == true)
                .map(|v| v["name"].clone())
                .collect()
        })
        .unwrap_or_default();
    let names_accepted = json!({"type": "NamesAccepted", "status": "True", "lastTransitionTime": now,
        "reason": "NoConflicts", "message": "no conflicts found"});
    let opts = opts_update(&PatchOptions::apply(MANAGER));
    let write_status = |status: Value| {
        store.patch(
            &crds,
            None,
            name,
            Some("status"),
            &Patch::Merge(status),
            &opts,
        )
    };
    let status = json!({"status": {"conditions": [names_accepted.clone()], "acceptedNames": accepted, "storedVersions": storage}});
    write_status(status)?;
    tokio::time::sleep(delay).await;
    store.get(&crds, None, name)?;
    store.register_custom(info);
    let established = json!({"type": "Established", "status": "True", "lastTransitionTime": meta::now_rfc3339(),
        "reason": "InitialNamesAccepted", "message": "the initial names have been accepted"});
    let status = json!({"status": {"conditions": [names_accepted, established]}});
    write_status(status)?;
    tracing::debug!(crd = %name, "CRD established");
    Ok(())
}

fn opts_update(opts: &PatchOptions) -> PatchOptions {
    PatchOptions {
        field_manager: opts.field_manager.clone(),
        ..PatchOptions::default()
    }
}

/// The ConfigMap in every namespace that carries the API server's CA, as the root CA publisher keeps it.
pub const ROOT_CA_CONFIG_MAP: &str = "kube-root-ca.crt";

/// Finishes namespace deletion and gives every namespace a `default` service account and the
/// [`ROOT_CA_CONFIG_MAP`] with `ca_pem` (restored when it is deleted or changed).
pub async fn run_namespace_controller(
    store: Store,
    ca_pem: String,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut changes = store.subscribe_changes();
    loop {
        changes.borrow_and_update();
        store.finalize_namespaces();
        publish_namespace_defaults(&store, &ca_pem);
        tokio::select! {
            r = changes.changed() => if r.is_err() { return },
            _ = shutdown.wait_for(|s| *s) => return,
        }
    }
}

/// Gives every namespace that is not terminating its `default` service account and its
/// [`ROOT_CA_CONFIG_MAP`]; [`crate::Sim::start`] runs it once before serving, so they are there from the
/// first request.
pub fn publish_namespace_defaults(store: &Store, ca_pem: &str) {
    let Ok(list) = store.list(&GroupResource::namespaces(), None, &ListOptions::default()) else {
        return;
    };
    for ns in list
        .items
        .iter()
        .filter(|n| n.pointer("/metadata/deletionTimestamp").is_none())
    {
        let name = meta::name_of(ns);
        ensure_default_service_account(store, name);
        ensure_root_ca(store, name, ca_pem);
    }
}

fn ensure_default_service_account(store: &Store, namespace: &str) {
    let service_accounts = GroupResource::new("", "serviceaccounts");
    if store
        .get(&service_accounts, Some(namespace), "default")
        .is_err()
    {
        let sa =
            json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}});
        let _ = store.create(
            &service_accounts,
            Some(namespace),
            sa,
            &WriteOptions::manager("kube-controller-manager"),
        );
    }
}

fn ensure_root_ca(store: &Store, namespace: &str, ca_pem: &str) {
    let config_maps = GroupResource::new("", "configmaps");
    let data = json!({"ca.crt": ca_pem});
    let opts = WriteOptions::manager("kube-controller-manager");
    match store.get(&config_maps, Some(namespace), ROOT_CA_CONFIG_MAP) {
        Ok(current) if current.get("data") == Some(&data) => {}
        Ok(mut current) => {
            current["data"] = data;
            let _ = store.update(
                Endpoint::Main,
                &config_maps,
                Some(namespace),
                current,
                &opts,
            );
        }
        Err(_) => {
            let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": ROOT_CA_CONFIG_MAP, "annotations": {"kubernetes.io/description":
                    "Contains a CA bundle that can be used to verify the kube-apiserver when using internal endpoints such as the internal service IP or kubernetes.default.svc. No other usage is guaranteed across distributions of Kubernetes clusters."}},
                "data": data});
            let _ = store.create(&config_maps, Some(namespace), cm, &opts);
        }
    }
}
