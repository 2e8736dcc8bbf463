//! The end of `dev up`: it returns when `dev status` would say ok. Every
//! component's workload (a WorkerPool through its `observedGeneration` and
//! the Deployment it owns) runs its pinned digest on Ready pods, and every
//! other Deployment among the manifests has completed, under the same
//! deadline and fail-fast rules as `push-image`.

use crate::{
    config::{Config, RolloutKind},
    manifest::Manifest,
    rollout,
    state::State,
    wait::workload::{self, WaitOptions, Want},
};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{}", failures.iter().map(|f| crate::error_chain(f)).collect::<Vec<_>>().join("\n"))]
    NotConverged { failures: Vec<Failure> },
}

/// One workload that did not converge.
#[derive(Debug, thiserror::Error)]
pub enum Failure {
    #[error("component `{component}`")]
    Component {
        component: String,
        #[source]
        source: rollout::Error,
    },
    #[error(transparent)]
    Deployment { source: workload::Error },
}

/// Waits, all at once, for every component and every other Deployment
/// `manifests` declare.
pub async fn wait(
    client: &kube::Client,
    config: &Config,
    manifests: &[Manifest],
    state: &State,
    options: &WaitOptions,
) -> Result<(), Error> {
    let timeout = options.timeout;
    let components = config
        .components
        .iter()
        .map(|(name, component)| async move {
            let digest = state.images.get(name).map(|p| p.digest.as_str());
            let result = async {
                let change = rollout::Change {
                    digest,
                    ..rollout::Change::default()
                };
                let rolled = rollout::roll(client, component, change, timeout).await?;
                rollout::wait(client, &rolled, options).await
            }
            .await;
            result.err().map(|source| Failure::Component {
                component: name.clone(),
                source,
            })
        });
    let others = other_deployments(config, manifests).map(|want| async move {
        workload::deployment(client, &want, options)
            .await
            .err()
            .map(|source| Failure::Deployment { source })
    });
    let (components, others) = futures::future::join(
        futures::future::join_all(components),
        futures::future::join_all(others),
    )
    .await;
    let failures: Vec<Failure> = components.into_iter().chain(others).flatten().collect();
    if failures.is_empty() {
        Ok(())
    } else {
        Err(Error::NotConverged { failures })
    }
}

/// The Deployments among `manifests` that no component rolls: they must
/// complete, whatever image they run.
fn other_deployments<'a>(
    config: &'a Config,
    manifests: &'a [Manifest],
) -> impl Iterator<Item = Want> + 'a {
    manifests
        .iter()
        .filter(|m| m.kind == "Deployment" && m.api_version == "apps/v1")
        .filter_map(move |m| {
            let namespace = m.namespace.clone().unwrap_or_else(|| "default".into());
            let rolled_by_component = config.components.values().any(|c| {
                c.rollout.kind == RolloutKind::Deployment
                    && c.rollout.name == m.name
                    && c.rollout.namespace == namespace
            });
            (!rolled_by_component).then(|| Want {
                namespace,
                deployment: m.name.clone(),
                container: String::new(),
                digest: None,
                ..Want::default()
            })
        })
}
