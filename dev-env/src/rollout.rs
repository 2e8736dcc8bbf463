//! Rolling a component to a pushed digest, or restarting it.
//!
//! - `Deployment`: a strategic merge patch of the named container's image
//!   (the digest-pinned in-cluster reference) and, for a restart, of a
//!   `dev-env.io/restartedAt` pod-template annotation.
//! - `WorkerPool`: its Deployment belongs to the controller, which reverts
//!   patches to it; so the WorkerPool's own `spec.template` changes, as a
//!   JSON merge patch that carries the whole containers list (merge patches
//!   replace lists) and the `resourceVersion` it was computed from (a
//!   precondition: a concurrent change is retried, never overwritten). The
//!   new `metadata.generation` is what the wait holds the controller to.

use std::time::Duration;

use k8s_openapi::{api::apps::v1::Deployment, jiff::Timestamp};
use kube::{
    Api, Client, ResourceExt,
    api::{DynamicObject, Patch, PatchParams},
    discovery::{ApiResource, Discovery},
};
use serde_json::{Value, json};

use crate::{
    config::{Component, RolloutKind},
    wait::{
        self, Step,
        workload::{self, PoolGoal, Termination, WaitOptions, Want},
    },
};

/// The pod-template annotation a restart sets.
pub const RESTARTED_AT: &str = "dev-env.io/restartedAt";
/// The field manager of rollout patches.
pub const FIELD_MANAGER: &str = "dev-env-rollout";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(
        "{kind} {namespace}/{name} does not exist; is it in the manifests, and did `cargo xtask dev up` apply them?"
    )]
    Missing {
        kind: String,
        namespace: String,
        name: String,
    },
    #[error(
        "{kind} {namespace}/{name} has no container `{container}` (it has: {found}); fix `rollout.container`"
    )]
    NoContainer {
        kind: String,
        namespace: String,
        name: String,
        container: String,
        found: String,
    },
    #[error("the cluster serves no `WorkerPool` kind; apply its CRD (`cargo xtask dev up`)")]
    NoWorkerPoolKind,
    #[error("{what}: {}", crate::apply::api_error(error))]
    Api { what: String, error: kube::Error },
    #[error("{what} kept changing under the patch; try again")]
    Contended { what: String },
    #[error(transparent)]
    Wait(#[from] workload::Error),
    #[error(
        "no Deployment owned by WorkerPool {namespace}/{name}; `kubectl describe workerpool -n {namespace} {name}` shows why its controller made none"
    )]
    NoOwnedDeployment {
        namespace: String,
        name: String,
        #[source]
        source: wait::Error,
    },
}

/// What a roll asked of the cluster, and what to wait for.
#[derive(Debug, Clone)]
pub struct Roll {
    /// False when the workload already ran the digest and no restart was
    /// asked: nothing was patched.
    pub patched: bool,
    /// The Deployment to wait on.
    pub want: Want,
    /// For a WorkerPool: what its controller must report.
    pub pool: Option<Pool>,
}

/// A WorkerPool and the generation its controller must reach.
#[derive(Debug, Clone)]
pub struct Pool {
    pub resource: ApiResource,
    pub name: String,
    pub generation: i64,
}

/// Applies `change` to the workload of `component` (a resolved component
/// of the config, so no name can be missing here).
pub async fn roll(
    client: &Client,
    component: &Component,
    change: Change<'_>,
    timeout: Duration,
) -> Result<Roll, Error> {
    let Change {
        image,
        digest,
        restart,
        wait_for_termination,
    } = change;
    let mut roll = match component.rollout.kind {
        RolloutKind::Deployment => {
            roll_deployment(client, component, image, digest, restart).await?
        }
        RolloutKind::WorkerPool => {
            roll_pool(client, component, image, digest, restart, timeout).await?
        }
    };
    if wait_for_termination || component.rollout.wait_for_termination {
        roll.want.termination = Termination::Gone;
    }
    Ok(roll)
}

/// What a roll asks of a component's workload.
#[derive(Debug, Clone, Copy, Default)]
pub struct Change<'a> {
    /// The in-cluster image reference to run; `None` keeps the image.
    pub image: Option<&'a str>,
    /// `sha256:…` the new pods must run; `None` waits for the rollout only.
    pub digest: Option<&'a str>,
    /// Restart the pods even when nothing else changes.
    pub restart: bool,
    /// Hold the wait until old pods are gone, not only terminating.
    pub wait_for_termination: bool,
}

/// Runs the wait of a roll to its end.
pub async fn wait(
    client: &Client,
    rolled: &Roll,
    options: &WaitOptions,
) -> Result<workload::Done, Error> {
    wait_watched(client, rolled, options, None).await
}

/// [`wait`] on the Deployment's watch when one was started before the
/// roll (a WorkerPool's wait starts its own).
pub async fn wait_watched(
    client: &Client,
    rolled: &Roll,
    options: &WaitOptions,
    watched: Option<workload::DeploymentWatch>,
) -> Result<workload::Done, Error> {
    let deployment = async {
        match (watched, &rolled.pool) {
            (Some(watched), None) => {
                workload::deployment_watched(client, watched, &rolled.want, options).await
            }
            _ => workload::deployment(client, &rolled.want, options).await,
        }
    };
    match &rolled.pool {
        None => Ok(deployment.await?),
        Some(pool) => {
            // Until the controller has observed the generation, the
            // Deployment may still show the previous rollout, complete.
            let at = workload::PoolAt {
                resource: &pool.resource,
                namespace: &rolled.want.namespace,
                name: &pool.name,
                generation: pool.generation,
            };
            workload::worker_pool(client, at, PoolGoal::Observed, options).await?;
            let pool = workload::worker_pool(client, at, PoolGoal::Converged, options);
            let (done, ()) = tokio::try_join!(deployment, pool)?;
            Ok(done)
        }
    }
}

/// RFC 3339 with nanoseconds: two restarts in the same second still differ,
/// so the second one is not a no-op.
fn now() -> String {
    Timestamp::now().to_string()
}

async fn roll_deployment(
    client: &Client,
    component: &Component,
    image: Option<&str>,
    digest: Option<&str>,
    restart: bool,
) -> Result<Roll, Error> {
    let r = &component.rollout;
    let api: Api<Deployment> = Api::namespaced(client.clone(), &r.namespace);
    let what = format!("Deployment {}/{}", r.namespace, r.name);
    let current = api
        .get_opt(&r.name)
        .await
        .map_err(|source| Error::Api {
            what: what.clone(),
            error: source,
        })?
        .ok_or_else(|| Error::Missing {
            kind: String::from("Deployment"),
            namespace: r.namespace.clone(),
            name: r.name.clone(),
        })?;
    let containers = current
        .spec
        .template
        .spec
        .as_ref()
        .map(|s| s.containers.clone())
        .unwrap_or_default();
    let Some(container) = containers.iter().find(|c| c.name == r.container) else {
        return Err(no_container(
            "Deployment",
            component,
            containers.iter().map(|c| c.name.clone()),
        ));
    };
    let want = Want {
        namespace: r.namespace.clone(),
        deployment: r.name.clone(),
        container: r.container.clone(),
        digest: digest.map(str::to_string),
        ..Want::default()
    };
    let image_changes = image.is_some_and(|i| container.image.as_deref() != Some(i));
    if !image_changes && !restart {
        return Ok(Roll {
            patched: false,
            want,
            pool: None,
        });
    }
    let mut template = json!({});
    if let Some(image) = image {
        template["spec"] = json!({"containers": [{"name": r.container, "image": image}]});
    }
    if restart {
        template["metadata"] = json!({"annotations": {RESTARTED_AT: now()}});
    }
    let patch = json!({"spec": {"template": template}});
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.to_string()),
        ..PatchParams::default()
    };
    let patched = api
        .patch(&r.name, &params, &Patch::Strategic(&patch))
        .await
        .map_err(|source| Error::Api {
            what,
            error: source,
        })?;
    Ok(Roll {
        patched: true,
        want: Want {
            generation: patched.metadata.generation.unwrap_or(0),
            ..want
        },
        pool: None,
    })
}

fn no_container(kind: &str, component: &Component, found: impl Iterator<Item = String>) -> Error {
    let r = &component.rollout;
    Error::NoContainer {
        kind: kind.to_string(),
        namespace: r.namespace.clone(),
        name: r.name.clone(),
        container: r.container.clone(),
        found: found.collect::<Vec<_>>().join(", "),
    }
}

/// Finds the API resource of the `WorkerPool` kind, whatever its group.
pub async fn worker_pool_resource(client: &Client) -> Result<ApiResource, Error> {
    let discovery = Discovery::new(client.clone())
        .run()
        .await
        .map_err(|source| Error::Api {
            what: String::from("API discovery"),
            error: source,
        })?;
    for group in discovery.groups() {
        for (resource, _) in group.recommended_resources() {
            if resource.kind == "WorkerPool" {
                return Ok(resource);
            }
        }
    }
    Err(Error::NoWorkerPoolKind)
}

async fn roll_pool(
    client: &Client,
    component: &Component,
    image: Option<&str>,
    digest: Option<&str>,
    restart: bool,
    timeout: Duration,
) -> Result<Roll, Error> {
    let r = &component.rollout;
    let resource = worker_pool_resource(client).await?;
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &r.namespace, &resource);
    let PoolPatch {
        generation,
        uid,
        patched,
    } = patch_pool(&api, component, image, restart).await?;
    let deployment = owned_deployment(client, &r.namespace, &r.name, &uid, timeout).await?;
    let want = Want {
        namespace: r.namespace.clone(),
        deployment,
        container: r.container.clone(),
        digest: digest.map(str::to_string),
        ..Want::default()
    };
    Ok(Roll {
        patched,
        want,
        pool: Some(Pool {
            resource,
            name: r.name.clone(),
            generation,
        }),
    })
}

/// What patching a WorkerPool's template left.
struct PoolPatch {
    /// The generation its controller must reach.
    generation: i64,
    uid: String,
    /// False when the template already asked for this.
    patched: bool,
}

/// Points the WorkerPool's template at `image` (and restarts it when
/// `restart`), guarded by its `resourceVersion`: a conflicting write is
/// read again, five times at most.
async fn patch_pool(
    api: &Api<DynamicObject>,
    component: &Component,
    image: Option<&str>,
    restart: bool,
) -> Result<PoolPatch, Error> {
    let r = &component.rollout;
    let what = format!("WorkerPool {}/{}", r.namespace, r.name);
    let api_err = |source| Error::Api {
        what: what.clone(),
        error: source,
    };
    let mut attempts = 0;
    loop {
        attempts += 1;
        let pool = api
            .get_opt(&r.name)
            .await
            .map_err(api_err)?
            .ok_or_else(|| Error::Missing {
                kind: String::from("WorkerPool"),
                namespace: r.namespace.clone(),
                name: r.name.clone(),
            })?;
        let mut template = pool
            .data
            .pointer("/spec/template")
            .cloned()
            .unwrap_or_else(|| json!({}));
        let changed = edit_template(
            &mut template,
            &r.container,
            image,
            restart.then(now).as_deref(),
        )
        .map_err(|found| no_container("WorkerPool", component, found.into_iter()))?;
        let uid = pool.uid().unwrap_or_default();
        if !changed {
            return Ok(PoolPatch {
                generation: pool.metadata.generation.unwrap_or(0),
                uid,
                patched: false,
            });
        }
        let patch = json!({
            "metadata": {"resourceVersion": pool.resource_version()},
            "spec": {"template": template},
        });
        let params = PatchParams {
            field_manager: Some(FIELD_MANAGER.to_string()),
            ..PatchParams::default()
        };
        match api.patch(&r.name, &params, &Patch::Merge(&patch)).await {
            Ok(updated) => {
                return Ok(PoolPatch {
                    generation: updated.metadata.generation.unwrap_or(0),
                    uid,
                    patched: true,
                });
            }
            Err(kube::Error::Api(status)) if status.code == 409 && attempts < 5 => continue,
            Err(kube::Error::Api(status)) if status.code == 409 => {
                return Err(Error::Contended { what });
            }
            Err(source) => {
                return Err(Error::Api {
                    what,
                    error: source,
                });
            }
        }
    }
}

/// Sets the named container's image and the restart annotation in a pod
/// template; whether anything changed, or the containers there are.
pub fn edit_template(
    template: &mut Value,
    container: &str,
    image: Option<&str>,
    restarted_at: Option<&str>,
) -> Result<bool, Vec<String>> {
    let mut changed = false;
    let containers = template
        .pointer_mut("/spec/containers")
        .and_then(Value::as_array_mut);
    let Some(containers) = containers else {
        return Err(Vec::new());
    };
    let names: Vec<String> = containers
        .iter()
        .filter_map(|c| c["name"].as_str().map(str::to_string))
        .collect();
    let Some(target) = containers.iter_mut().find(|c| c["name"] == container) else {
        return Err(names);
    };
    if let Some(image) = image
        && target["image"] != image
    {
        target["image"] = json!(image);
        changed = true;
    }
    if let Some(at) = restarted_at {
        let metadata = template
            .as_object_mut()
            .expect("a template is an object")
            .entry("metadata")
            .or_insert_with(|| json!({}));
        let annotations = metadata
            .as_object_mut()
            .map(|m| m.entry("annotations").or_insert_with(|| json!({})));
        if let Some(Value::Object(annotations)) = annotations {
            annotations.insert(RESTARTED_AT.to_string(), json!(at));
            changed = true;
        }
    }
    Ok(changed)
}

/// The Deployment the WorkerPool with `uid` controls, once it exists.
async fn owned_deployment(
    client: &Client,
    namespace: &str,
    pool: &str,
    uid: &str,
    timeout: Duration,
) -> Result<String, Error> {
    let api: Api<Deployment> = Api::namespaced(client.clone(), namespace);
    let found = wait::poll(
        &format!("the Deployment of WorkerPool {namespace}/{pool}"),
        timeout,
        || async {
            let list = api
                .list(&Default::default())
                .await
                .map_err(|source| Error::Api {
                    what: format!("Deployments in {namespace}"),
                    error: source,
                })?;
            Ok::<_, Error>(
                match list.items.iter().find(|d| {
                    d.owner_references()
                        .iter()
                        .any(|o| o.uid == uid && o.controller == Some(true))
                }) {
                    Some(d) => Step::Done(d.name_any()),
                    None => Step::Pending(String::from("the controller has not created it yet")),
                },
            )
        },
    )
    .await
    .map_err(|source| Error::NoOwnedDeployment {
        namespace: namespace.to_string(),
        name: pool.to_string(),
        source,
    })??;
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn template_edits_keep_the_whole_containers_list() {
        let mut template = json!({"spec": {"containers": [
            {"name": "worker", "image": "reg:5000/w:dev", "ports": [{"containerPort": 8080}]},
            {"name": "sidecar", "image": "s"}
        ]}});
        assert_eq!(
            edit_template(&mut template, "worker", Some("reg:5000/w:dev"), None),
            Ok(false)
        );
        assert_eq!(
            edit_template(
                &mut template,
                "worker",
                Some("reg:5000/w@sha256:ab"),
                Some("t1")
            ),
            Ok(true)
        );
        assert_eq!(template["spec"]["containers"].as_array().unwrap().len(), 2);
        assert_eq!(
            template["spec"]["containers"][0]["ports"][0]["containerPort"],
            8080
        );
        assert_eq!(
            template["spec"]["containers"][0]["image"],
            "reg:5000/w@sha256:ab"
        );
        assert_eq!(template["metadata"]["annotations"][RESTARTED_AT], "t1");
        assert_eq!(
            edit_template(&mut template, "nope", None, None),
            Err(vec![String::from("worker"), String::from("sidecar")])
        );
    }
}
