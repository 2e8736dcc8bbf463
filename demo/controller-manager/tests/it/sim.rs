//! The controller running in-process against kube-sim, with kube-sim's
//! Deployment, ReplicaSet and garbage-collector controllers. The pods are
//! bound to a node kube-sim's kubelet stand-in does not run, so where a
//! test needs Ready pods it plays the kubelet itself: [`Kubelet`] marks
//! every pod of a WorkerPool Ready as it appears.
//!
//! Every wait is watch-driven and bounded by [`DEADLINE`]; a wait that
//! runs out fails with the last state it saw.

use std::{collections::BTreeMap, fmt::Debug, time::Duration};

use controller_manager::{
    WorkerPool, WorkerPoolSpec,
    deployment::POOL_LABEL,
    leader::{self, Election},
    workerpool::{AVAILABLE, PROGRESSING},
};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::{
    api::{
        apps::v1::Deployment,
        coordination::v1::Lease,
        core::v1::{Container, Event, Namespace, Node, Pod, PodSpec, PodTemplateSpec},
    },
    apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
    apimachinery::pkg::apis::meta::v1::ObjectMeta,
};
use kube::{
    Api, Client, Resource, ResourceExt,
    api::{DeleteParams, Patch, PatchParams, PostParams},
    runtime::{
        WatchStreamExt,
        wait::{Condition, await_condition, conditions},
        watcher,
    },
};
use kube_sim::{Config, Sim};
use serde::de::DeserializeOwned;
use serde_json::json;
use tokio::{sync::oneshot, task::JoinHandle};

use crate::manifests::crd;

/// The bound of every wait.
const DEADLINE: Duration = Duration::from_secs(30);
const NAMESPACE: &str = "demo";
const POOL: &str = "default";
const RESTARTED_AT: &str = "dev-env.io/restartedAt";
/// The node the pods of the tests run on; [`Kubelet`] plays its kubelet.
const TEST_NODE: &str = "test-node";

/// A kube-sim with its controllers, the WorkerPool CRD, the `demo`
/// namespace, and the controller under test, which can be stopped and
/// started again.
struct Cluster {
    sim: Sim,
    client: Client,
    controller: Option<Candidate>,
}

/// A controller-manager in the election for the `controller-manager`
/// Lease, as a pod runs it: it reconciles only while it leads.
type Candidate = (oneshot::Sender<()>, JoinHandle<Result<(), leader::Error>>);

/// Starts a candidate named `identity`.
fn candidate(client: &Client, identity: &str) -> Candidate {
    let (stop, stopped) = oneshot::channel::<()>();
    // A short Lease, so a waiting candidate notices a release soon.
    let election = Election {
        duration: Duration::from_secs(3),
        grace: Duration::from_secs(1),
        ..Election::new(NAMESPACE, identity)
    };
    let task = tokio::spawn(leader::run_elected(client.clone(), election, async move {
        stopped.await.ok();
    }));
    (stop, task)
}

/// Stops a candidate, which releases the Lease if it holds it.
async fn stop(candidate: Candidate) {
    let (stop, task) = candidate;
    stop.send(()).ok();
    tokio::time::timeout(DEADLINE, task)
        .await
        .expect("the controller stops within the deadline")
        .unwrap()
        .expect("the election ends cleanly");
}

impl Cluster {
    /// Everything up, the controller not yet running.
    async fn start() -> Cluster {
        let _ = tracing_subscriber::fmt()
            .with_test_writer()
            .with_env_filter(
                tracing_subscriber::EnvFilter::try_from_default_env()
                    .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
            )
            .try_init();
        let sim = Sim::start(Config::ephemeral()).await.unwrap();
        let client = sim.client().await.unwrap();
        test_node(&client).await;

        let crds = Api::<CustomResourceDefinition>::all(client.clone());
        let crd = crds.create(&PostParams::default(), &crd()).await.unwrap();
        within(
            "the WorkerPool CRD to be established",
            await_condition(crds, &crd.name_any(), conditions::is_crd_established()),
        )
        .await;
        Api::<Namespace>::all(client.clone())
            .create(
                &PostParams::default(),
                &Namespace {
                    metadata: ObjectMeta {
                        name: Some(NAMESPACE.to_string()),
                        ..ObjectMeta::default()
                    },
                    ..Namespace::default()
                },
            )
            .await
            .unwrap();
        Cluster {
            sim,
            client,
            controller: None,
        }
    }

    /// Everything up, the controller running.
    async fn running() -> Cluster {
        let mut cluster = Cluster::start().await;
        cluster.start_controller();
        cluster
    }

    fn start_controller(&mut self) {
        assert!(self.controller.is_none(), "the controller already runs");
        self.controller = Some(candidate(&self.client, "first"));
    }

    async fn stop_controller(&mut self) {
        stop(self.controller.take().expect("the controller runs")).await;
    }

    async fn shutdown(mut self) {
        if self.controller.is_some() {
            self.stop_controller().await;
        }
        self.sim.shutdown().await;
    }

    fn pools(&self) -> Api<WorkerPool> {
        Api::namespaced(self.client.clone(), NAMESPACE)
    }

    fn deployments(&self) -> Api<Deployment> {
        Api::namespaced(self.client.clone(), NAMESPACE)
    }

    async fn create_pool(&self, replicas: i32) -> WorkerPool {
        self.pools()
            .create(&PostParams::default(), &pool(replicas))
            .await
            .unwrap()
    }

    /// Sets `spec.template.metadata.annotations[key]` on the WorkerPool the
    /// way the harness restarts workers: a JSON merge patch.
    async fn annotate_pool_template(&self, key: &str, value: &str) -> WorkerPool {
        let patch = json!({"spec": {"template": {"metadata": {"annotations": {key: value}}}}});
        self.pools()
            .patch(POOL, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap()
    }

    /// The Deployment once it exists and `accept` holds for it.
    async fn deployment_where(
        &self,
        what: &str,
        accept: impl Fn(&Deployment) -> bool + Send + 'static,
    ) -> Deployment {
        wait_for(
            self.deployments(),
            POOL,
            what,
            move |d: Option<&Deployment>| d.is_some_and(&accept),
        )
        .await
        .expect("the Deployment exists")
    }

    /// The WorkerPool once `accept` holds for it.
    async fn pool_where(
        &self,
        what: &str,
        accept: impl Fn(&WorkerPool) -> bool + Send + 'static,
    ) -> WorkerPool {
        wait_for(self.pools(), POOL, what, move |p: Option<&WorkerPool>| {
            p.is_some_and(&accept)
        })
        .await
        .expect("the WorkerPool exists")
    }
}

/// A WorkerPool `default` in `demo` like the repository's.
fn pool(replicas: i32) -> WorkerPool {
    let mut pool = WorkerPool::new(
        POOL,
        WorkerPoolSpec {
            replicas,
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(BTreeMap::from([(
                        "app.kubernetes.io/name".to_string(),
                        "worker".to_string(),
                    )])),
                    annotations: Some(BTreeMap::from([(
                        "example.com/note".to_string(),
                        "kept".to_string(),
                    )])),
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
    pool.metadata.namespace = Some(NAMESPACE.to_string());
    pool
}

/// Runs `wait` under [`DEADLINE`].
async fn within<T, E: Debug>(what: &str, wait: impl Future<Output = Result<T, E>>) -> T {
    match tokio::time::timeout(DEADLINE, wait).await {
        Ok(result) => result.unwrap_or_else(|e| panic!("waiting for {what}: {e:?}")),
        Err(_) => panic!("waiting for {what}: no result within {DEADLINE:?}"),
    }
}

/// Watches `name` until `cond` holds, and returns the object then (`None`
/// when it does not exist); on timeout, fails with the object as it is.
async fn wait_for<K>(
    api: Api<K>,
    name: &str,
    what: &str,
    cond: impl Condition<K> + Send + 'static,
) -> Option<K>
where
    K: Resource + Clone + Debug + DeserializeOwned + Send + 'static,
{
    let waited = tokio::time::timeout(DEADLINE, await_condition(api.clone(), name, cond)).await;
    match waited {
        Ok(Ok(object)) => object,
        Ok(Err(e)) => panic!("waiting for {what}: {e}"),
        Err(_) => {
            let last = api.get_opt(name).await;
            panic!("waiting for {what}: not within {DEADLINE:?}; last state: {last:#?}")
        }
    }
}

fn condition_status(pool: &WorkerPool, type_: &str) -> Option<String> {
    pool.status
        .as_ref()
        .and_then(|s| s.condition(type_))
        .map(|c| c.status.clone())
}

fn observed(pool: &WorkerPool) -> Option<i64> {
    pool.status.as_ref().and_then(|s| s.observed_generation)
}

/// Rolled out for its current generation, as the harness waits for it.
fn converged(pool: &WorkerPool) -> bool {
    observed(pool) >= pool.metadata.generation
        && condition_status(pool, AVAILABLE).as_deref() == Some("True")
        && condition_status(pool, PROGRESSING).as_deref() == Some("False")
}

fn template_annotations(deployment: &Deployment) -> BTreeMap<String, String> {
    deployment
        .spec
        .template
        .metadata
        .as_ref()
        .and_then(|m| m.annotations.clone())
        .unwrap_or_default()
}

/// Plays the kubelet for the pods of WorkerPool `default`: marks each
/// pod Running and Ready as soon as it is seen. Stops when dropped.
/// Cordons kube-sim's own node and registers one that no kubelet runs,
/// so the scheduler binds new pods there and the tests decide when they
/// become Ready (`Kubelet`).
async fn test_node(client: &Client) {
    let nodes = Api::<Node>::all(client.clone());
    let cordon = json!({"spec": {"unschedulable": true}});
    nodes
        .patch(
            kube_sim::NODE_NAME,
            &PatchParams::default(),
            &Patch::Merge(&cordon),
        )
        .await
        .unwrap();
    let node = Node {
        metadata: ObjectMeta {
            name: Some(TEST_NODE.to_string()),
            ..ObjectMeta::default()
        },
        ..Node::default()
    };
    nodes.create(&PostParams::default(), &node).await.unwrap();
    let room = json!({"cpu": "8", "memory": "16Gi", "pods": "110"});
    let status = json!({"status": {"capacity": room, "allocatable": room,
        "conditions": [{"type": "Ready", "status": "True"}]}});
    nodes
        .patch_status(TEST_NODE, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
}

struct Kubelet(JoinHandle<()>);

impl Kubelet {
    fn start(client: &Client) -> Kubelet {
        let pods = Api::<Pod>::namespaced(client.clone(), NAMESPACE);
        let config = watcher::Config::default().labels(&format!("{POOL_LABEL}={POOL}"));
        Kubelet(tokio::spawn(async move {
            let mut stream = watcher(pods.clone(), config).applied_objects().boxed();
            while let Ok(Some(pod)) = stream.try_next().await {
                let ready = pod
                    .status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
                if ready || pod.metadata.deletion_timestamp.is_some() {
                    continue;
                }
                let now = controller_manager::status::now();
                let status = json!({"status": {
                    "phase": "Running",
                    "conditions": [
                        {"type": "PodScheduled", "status": "True", "lastTransitionTime": now},
                        {"type": "Initialized", "status": "True", "lastTransitionTime": now},
                        {"type": "ContainersReady", "status": "True", "lastTransitionTime": now},
                        {"type": "Ready", "status": "True", "lastTransitionTime": now},
                    ],
                }});
                // A pod deleted in the meantime is not an error.
                let _ = pods
                    .patch_status(
                        &pod.name_any(),
                        &PatchParams::default(),
                        &Patch::Merge(&status),
                    )
                    .await;
            }
        }))
    }
}

impl Drop for Kubelet {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[tokio::test]
async fn creating_a_workerpool_yields_an_owned_deployment() {
    let cluster = Cluster::running().await;
    let pool = cluster.create_pool(2).await;

    let deployment = cluster.deployment_where("the Deployment", |_| true).await;
    let owner = deployment
        .owner_references()
        .iter()
        .find(|o| o.controller == Some(true))
        .cloned()
        .expect("a controller ownerReference");
    assert_eq!(owner.kind, "WorkerPool");
    assert_eq!(owner.api_version, "demo.dev-env.io/v1alpha1");
    assert_eq!(owner.name, POOL);
    assert_eq!(Some(owner.uid.as_str()), pool.metadata.uid.as_deref());
    assert_eq!(deployment.spec.replicas, Some(2));
    let template = &deployment.spec.template;
    let containers = &template.spec.as_ref().unwrap().containers;
    assert_eq!(containers[0].name, "worker");
    assert_eq!(
        containers[0].image.as_deref(),
        Some("dev-env-registry:5000/demo/worker:dev")
    );
    assert_eq!(
        template_annotations(&deployment).get("example.com/note"),
        Some(&"kept".to_string())
    );
    let labels = template.metadata.as_ref().unwrap().labels.clone().unwrap();
    assert_eq!(labels.get(POOL_LABEL), Some(&POOL.to_string()));
    assert_eq!(
        labels.get("app.kubernetes.io/name"),
        Some(&"worker".to_string())
    );
    let managers: Vec<_> = deployment
        .managed_fields()
        .iter()
        .filter_map(|m| m.manager.clone())
        .collect();
    assert!(
        managers
            .iter()
            .any(|m| m == controller_manager::FIELD_MANAGER),
        "{managers:?}"
    );
    cluster.shutdown().await;
}

#[tokio::test]
async fn changing_the_template_annotations_changes_the_deployment_template() {
    let cluster = Cluster::running().await;
    cluster.create_pool(1).await;
    let before = cluster.deployment_where("the Deployment", |_| true).await;
    assert!(!template_annotations(&before).contains_key(RESTARTED_AT));

    cluster
        .annotate_pool_template(RESTARTED_AT, "2026-11-29T15:00:00Z")
        .await;
    let after = cluster
        .deployment_where("the annotation on the Deployment's template", |d| {
            template_annotations(d)
                .get(RESTARTED_AT)
                .map(String::as_str)
                == Some("2026-11-29T15:00:00Z")
        })
        .await;
    assert!(after.metadata.generation > before.metadata.generation);
    assert_eq!(
        template_annotations(&after).get("example.com/note"),
        Some(&"kept".to_string()),
        "a merge patch of one annotation keeps the others"
    );

    // Removing the annotation from the WorkerPool removes it from the Deployment.
    let patch = json!({"spec": {"template": {"metadata": {"annotations": {RESTARTED_AT: null}}}}});
    cluster
        .pools()
        .patch(POOL, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    cluster
        .deployment_where("the annotation gone from the Deployment's template", |d| {
            !template_annotations(d).contains_key(RESTARTED_AT)
        })
        .await;
    cluster.shutdown().await;
}

#[tokio::test]
async fn changing_replicas_scales_the_deployment() {
    let cluster = Cluster::running().await;
    cluster.create_pool(1).await;
    cluster
        .deployment_where("one replica", |d| d.spec.replicas == Some(1))
        .await;
    let patch = json!({"spec": {"replicas": 3}});
    cluster
        .pools()
        .patch(POOL, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    let scaled = cluster
        .deployment_where("three replicas", |d| d.spec.replicas == Some(3))
        .await;
    assert!(
        !template_annotations(&scaled).contains_key(RESTARTED_AT),
        "scaling does not restart"
    );
    cluster.shutdown().await;
}

#[tokio::test]
async fn a_restart_annotation_patched_on_the_deployment_is_reverted() {
    let cluster = Cluster::running().await;
    cluster.create_pool(1).await;
    cluster.deployment_where("the Deployment", |_| true).await;

    // What `kubectl rollout restart` does.
    let patch = json!({"spec": {"template": {"metadata": {"annotations": {
        "kubectl.kubernetes.io/restartedAt": "2026-11-29T15:00:00Z"
    }}}}});
    let patched = cluster
        .deployments()
        .patch(
            POOL,
            &PatchParams {
                field_manager: Some("kubectl-rollout".to_string()),
                ..PatchParams::default()
            },
            &Patch::Strategic(&patch),
        )
        .await
        .unwrap();
    assert!(template_annotations(&patched).contains_key("kubectl.kubernetes.io/restartedAt"));

    let reverted = cluster
        .deployment_where("the restart annotation to be reverted", |d| {
            !template_annotations(d).contains_key("kubectl.kubernetes.io/restartedAt")
        })
        .await;
    assert!(reverted.metadata.generation > patched.metadata.generation);
    assert_eq!(
        template_annotations(&reverted).get("example.com/note"),
        Some(&"kept".to_string())
    );

    // The WorkerPool's events say what happened and what to do instead.
    let events = Api::<Event>::namespaced(cluster.client.clone(), NAMESPACE);
    let mut stream = watcher(events, watcher::Config::default())
        .applied_objects()
        .boxed();
    let event = within("the DriftReverted event", async {
        while let Some(event) = stream.try_next().await? {
            if event.reason.as_deref() == Some("DriftReverted") {
                return Ok(event);
            }
        }
        Err(watcher::Error::NoResourceVersion)
    })
    .await;
    assert_eq!(event.involved_object.kind.as_deref(), Some("WorkerPool"));
    assert_eq!(event.involved_object.name.as_deref(), Some(POOL));
    assert_eq!(event.type_.as_deref(), Some("Warning"));
    let message = event.message.unwrap_or_default();
    assert!(
        message.contains("annotation kubectl.kubernetes.io/restartedAt"),
        "{message}"
    );
    cluster.shutdown().await;
}

#[tokio::test]
async fn observed_generation_catches_up_only_after_reconciling() {
    let mut cluster = Cluster::start().await;
    let created = cluster.create_pool(1).await;
    assert_eq!(created.metadata.generation, Some(1));
    let read = cluster.pools().get_status(POOL).await.unwrap();
    assert_eq!(observed(&read), None, "nothing has reconciled it yet");

    cluster.start_controller();
    let reconciled = cluster
        .pool_where("observedGeneration 1", |p| observed(p) == Some(1))
        .await;
    assert_eq!(
        condition_status(&reconciled, PROGRESSING).as_deref(),
        Some("True")
    );

    cluster.stop_controller().await;
    let changed = cluster.annotate_pool_template(RESTARTED_AT, "t1").await;
    assert_eq!(changed.metadata.generation, Some(2));
    let read = cluster.pools().get_status(POOL).await.unwrap();
    assert_eq!(
        observed(&read),
        Some(1),
        "the status still describes generation 1 while nothing reconciles"
    );
    let deployment = cluster.deployments().get(POOL).await.unwrap();
    assert!(!template_annotations(&deployment).contains_key(RESTARTED_AT));

    cluster.start_controller();
    let reconciled = cluster
        .pool_where("observedGeneration 2", |p| observed(p) == Some(2))
        .await;
    let conditions = &reconciled.status.as_ref().unwrap().conditions;
    assert!(conditions.iter().all(|c| c.observed_generation == Some(2)));
    let deployment = cluster.deployments().get(POOL).await.unwrap();
    assert_eq!(
        template_annotations(&deployment).get(RESTARTED_AT),
        Some(&"t1".to_string())
    );
    cluster.shutdown().await;
}

#[tokio::test]
async fn available_and_progressing_follow_the_deployment() {
    let cluster = Cluster::running().await;
    cluster.create_pool(2).await;

    // No pod is Ready: the Deployment is unavailable and still rolling out.
    let waiting = cluster
        .pool_where("Available=False from the Deployment", |p| {
            condition_status(p, AVAILABLE).as_deref() == Some("False")
        })
        .await;
    assert_eq!(
        condition_status(&waiting, PROGRESSING).as_deref(),
        Some("True")
    );
    let available = waiting
        .status
        .as_ref()
        .unwrap()
        .condition(AVAILABLE)
        .unwrap();
    assert_eq!(available.reason, "MinimumReplicasUnavailable");

    // Pods become Ready: the rollout completes.
    let _kubelet = Kubelet::start(&cluster.client);
    let done = cluster
        .pool_where("the rollout to complete", converged)
        .await;
    let status = done.status.clone().unwrap();
    assert_eq!(
        (
            status.replicas,
            status.updated_replicas,
            status.available_replicas
        ),
        (2, 2, 2)
    );
    let deployment = cluster.deployments().get_status(POOL).await.unwrap();
    let deployment_status = deployment.status.unwrap();
    assert_eq!(deployment_status.available_replicas, Some(2));
    assert_eq!(deployment_status.updated_replicas, Some(2));

    // A restart through the WorkerPool: the first status that describes the
    // new generation says Progressing=True, never the previous rollout's
    // completion; then the new rollout completes.
    let mut statuses = watcher(
        cluster.pools(),
        watcher::Config::default().fields(&format!("metadata.name={POOL}")),
    )
    .applied_objects()
    .boxed();
    within("the WorkerPool's watch to start", statuses.try_next()).await;
    let restarted = cluster.annotate_pool_template(RESTARTED_AT, "t1").await;
    let generation = restarted.metadata.generation;
    assert_eq!(generation, Some(2));
    let first = within("a status for generation 2", async {
        while let Some(pool) = statuses.try_next().await? {
            if observed(&pool) >= generation {
                return Ok(pool);
            }
        }
        Err(watcher::Error::NoResourceVersion)
    })
    .await;
    assert_eq!(
        condition_status(&first, PROGRESSING).as_deref(),
        Some("True"),
        "{:#?}",
        first.status
    );
    let done = cluster
        .pool_where("the restart to roll out", converged)
        .await;
    assert_eq!(observed(&done), Some(2));
    let pods = Api::<Pod>::namespaced(cluster.client.clone(), NAMESPACE)
        .list(&kube::api::ListParams::default().labels(&format!("{POOL_LABEL}={POOL}")))
        .await
        .unwrap();
    let restarted: Vec<_> = pods
        .items
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter(|p| p.annotations().get(RESTARTED_AT).map(String::as_str) == Some("t1"))
        .collect();
    assert_eq!(restarted.len(), 2, "two pods run the new template");
    cluster.shutdown().await;
}

#[tokio::test]
async fn deleting_the_workerpool_garbage_collects_its_deployment() {
    let cluster = Cluster::running().await;
    cluster.create_pool(1).await;
    let deployment = cluster.deployment_where("the Deployment", |_| true).await;
    let uid = deployment.metadata.uid.clone().unwrap();

    cluster
        .pools()
        .delete(POOL, &DeleteParams::default())
        .await
        .unwrap();
    within(
        "the Deployment to be garbage-collected",
        await_condition(cluster.deployments(), POOL, conditions::is_deleted(&uid)),
    )
    .await;
    wait_for(
        cluster.deployments(),
        POOL,
        "no Deployment at all",
        |d: Option<&Deployment>| d.is_none(),
    )
    .await;
    let pool = cluster.pools().get_opt(POOL).await.unwrap();
    assert!(pool.is_none(), "the WorkerPool is gone too");
    cluster.shutdown().await;
}

#[tokio::test]
async fn only_the_lease_holder_reconciles_and_a_stopped_leader_hands_over() {
    let mut cluster = Cluster::running().await;
    let leases = Api::<Lease>::namespaced(cluster.client.clone(), NAMESPACE);
    let held_by = |who: &'static str| {
        move |l: Option<&Lease>| {
            l.and_then(|l| l.spec.as_ref()?.holder_identity.as_deref()) == Some(who)
        }
    };
    wait_for(
        leases.clone(),
        "controller-manager",
        "the first to lead",
        held_by("first"),
    )
    .await;
    let second = candidate(&cluster.client, "second");
    cluster.create_pool(1).await;
    cluster.deployment_where("the Deployment", |_| true).await;
    let lease = leases.get("controller-manager").await.unwrap();
    assert_eq!(
        lease.spec.unwrap().holder_identity.as_deref(),
        Some("first"),
        "the second candidate waits"
    );

    cluster.stop_controller().await;
    wait_for(
        leases.clone(),
        "controller-manager",
        "the second to lead",
        held_by("second"),
    )
    .await;
    cluster
        .pools()
        .patch(
            POOL,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 3}})),
        )
        .await
        .unwrap();
    cluster
        .deployment_where("the new leader to scale the Deployment", |d| {
            d.spec.replicas == Some(3)
        })
        .await;
    stop(second).await;
    let released = leases
        .get("controller-manager")
        .await
        .unwrap()
        .spec
        .unwrap();
    assert_eq!(
        released.holder_identity, None,
        "a stopped leader releases the Lease"
    );
    cluster.shutdown().await;
}

#[tokio::test]
async fn a_workerpool_a_real_cluster_refuses_is_refused_and_defaults_apply() {
    let cluster = Cluster::start().await;
    let api = kube::Api::<kube::api::DynamicObject>::namespaced_with(
        cluster.client.clone(),
        NAMESPACE,
        &kube::discovery::ApiResource::erase::<WorkerPool>(&()),
    );
    let pool = |spec: serde_json::Value| -> kube::api::DynamicObject {
        serde_json::from_value(
            json!({"apiVersion": "demo.dev-env.io/v1alpha1", "kind": "WorkerPool",
            "metadata": {"name": "bad"}, "spec": spec}),
        )
        .unwrap()
    };
    let template = json!({"spec": {"containers": [{"name": "worker", "image": "w"}]}});
    for (spec, field, says) in [
        (
            json!({"replicas": "three", "template": template}),
            "spec.replicas",
            "must be of type integer",
        ),
        (
            json!({"replicas": -1, "template": template}),
            "spec.replicas",
            "should be greater than or equal to 0",
        ),
        (json!({"replicas": 1}), "spec.template", "Required value"),
    ] {
        let err = api
            .create(&PostParams::default(), &pool(spec))
            .await
            .unwrap_err();
        let kube::Error::Api(status) = err else {
            panic!("{err}")
        };
        assert_eq!(
            (status.code, status.reason.as_str()),
            (422, "Invalid"),
            "{status:?}"
        );
        assert!(
            status.message.contains(field) && status.message.contains(says),
            "{}",
            status.message
        );
    }
    let created = api
        .create(&PostParams::default(), &pool(json!({"template": template})))
        .await
        .unwrap();
    assert_eq!(created.data["spec"]["replicas"], 1, "the schema's default");
    cluster.shutdown().await;
}
