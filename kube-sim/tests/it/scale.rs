//! A thousand pods across twenty Deployments: every rollout completes, and lists and a kube-rs watcher
//! agree on every pod.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{ListParams, PostParams};
use kube::runtime::watcher;

use crate::oci::{MIRROR_NAME, Registry};
use crate::rollout::deployment;

/// How long the whole scenario may take; it bounds the waits, it is not a performance assertion.
const SCALE_DEADLINE: Duration = Duration::from_secs(300);

const DEPLOYMENTS: usize = 20;
const REPLICAS: usize = 50;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_pods_across_twenty_deployments_list_and_watch_consistently() {
    let registry = Registry::start().await;
    registry.push("bulk", "v1", &[]).await;
    // 110 pods per node, as a real kubelet's `max-pods` default: ten nodes hold the thousand.
    let sim = registry
        .sim(|c| c.kubelet.nodes = (DEPLOYMENTS * REPLICAS).div_ceil(110) as u32)
        .await;
    let client = sim.client().await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let deployments: Api<Deployment> = Api::namespaced(client, "default");

    // A watcher's view: pod name -> resourceVersion.
    let seen: Arc<Mutex<BTreeMap<String, String>>> = Arc::default();
    let view = seen.clone();
    let watch_pods = pods.clone();
    let follower = tokio::spawn(async move {
        let mut stream = watcher(watch_pods, watcher::Config::default()).boxed();
        let mut init = BTreeMap::new();
        while let Some(event) = stream.next().await {
            let Ok(event) = event else { continue };
            let mut view = view.lock().unwrap();
            match event {
                watcher::Event::Init => init.clear(),
                watcher::Event::InitApply(p) => {
                    init.insert(
                        p.metadata.name.unwrap_or_default(),
                        p.metadata.resource_version.unwrap_or_default(),
                    );
                }
                watcher::Event::InitDone => *view = std::mem::take(&mut init),
                watcher::Event::Apply(p) => {
                    view.insert(
                        p.metadata.name.unwrap_or_default(),
                        p.metadata.resource_version.unwrap_or_default(),
                    );
                }
                watcher::Event::Delete(p) => {
                    view.remove(&p.metadata.name.unwrap_or_default());
                }
            }
        }
    });

    for i in 0..DEPLOYMENTS {
        deployments
            .create(
                &PostParams::default(),
                &deployment(
                    &format!("bulk-{i}"),
                    REPLICAS as u32,
                    &format!("{MIRROR_NAME}/bulk:v1"),
                ),
            )
            .await
            .unwrap();
    }

    let settled = tokio::time::timeout(SCALE_DEADLINE, async {
        loop {
            let all = deployments.list(&ListParams::default()).await.unwrap();
            let done = all.items.iter().all(|d| {
                let s = d.status.clone().unwrap_or_default();
                s.observed_generation == d.metadata.generation
                    && s.updated_replicas == Some(REPLICAS as i32)
                    && s.available_replicas == Some(REPLICAS as i32)
                    && s.replicas == Some(REPLICAS as i32)
            });
            if done {
                return;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    })
    .await;
    assert!(settled.is_ok(), "the twenty rollouts did not complete");

    let listed = pods.list(&ListParams::default()).await.unwrap();
    assert_eq!(listed.items.len(), DEPLOYMENTS * REPLICAS);
    assert!(listed.items.iter().all(|p| {
        p.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
    }));
    let mut per_node: BTreeMap<String, usize> = BTreeMap::new();
    for p in &listed.items {
        let node = p.spec.as_ref().and_then(|s| s.node_name.clone());
        *per_node
            .entry(node.expect("every pod is bound"))
            .or_default() += 1;
    }
    assert!(
        per_node.values().all(|n| *n <= 110),
        "no node runs more than its 110 pods: {per_node:?}"
    );
    for i in 0..DEPLOYMENTS {
        let mine = pods
            .list(&ListParams::default().labels(&format!("app=bulk-{i}")))
            .await
            .unwrap();
        assert_eq!(mine.items.len(), REPLICAS, "bulk-{i}");
    }
    let paged = {
        let mut n = 0;
        let mut page = pods.list(&ListParams::default().limit(128)).await.unwrap();
        loop {
            n += page.items.len();
            match page.metadata.continue_.clone().filter(|t| !t.is_empty()) {
                Some(token) => {
                    page = pods
                        .list(&ListParams::default().limit(128).continue_token(&token))
                        .await
                        .unwrap();
                }
                None => break n,
            }
        }
    };
    assert_eq!(paged, DEPLOYMENTS * REPLICAS);

    // Nothing changes any more, so the watcher's view must converge on the list exactly.
    let expected: BTreeMap<String, String> = pods
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|p| {
            (
                p.metadata.name.unwrap_or_default(),
                p.metadata.resource_version.unwrap_or_default(),
            )
        })
        .collect();
    let converged = tokio::time::timeout(crate::DEADLINE, async {
        loop {
            if *seen.lock().unwrap() == expected {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    let diff = {
        let view = seen.lock().unwrap();
        let missing = expected.keys().filter(|k| !view.contains_key(*k)).count();
        let extra = view.keys().filter(|k| !expected.contains_key(*k)).count();
        (view.len(), missing, extra)
    };
    assert!(
        converged.is_ok(),
        "the watcher's view (len, missing, extra) = {diff:?} differs from the list"
    );
    follower.abort();
}
