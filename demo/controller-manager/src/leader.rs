//! Leader election on a `coordination.k8s.io/v1` Lease: of all running
//! controller-managers, only the holder of the Lease reconciles. The others
//! wait until it is released or expires. The leader stops reconciling as
//! soon as it loses the Lease, and releases it when it shuts down, so the
//! next instance leads at once.

use std::time::Duration;

use kube::Client;
use kube_lease_manager::{LeaseManagerBuilder, LeaseParams};
use tracing::{info, warn};

/// How the Lease is held.
#[derive(Clone, Debug)]
pub struct Election {
    /// The namespace of the Lease.
    pub namespace: String,
    /// The Lease's name.
    pub lease: String,
    /// Who this instance is (the pod's name in a cluster).
    pub identity: String,
    /// How long the Lease holds after its last renewal.
    pub duration: Duration,
    /// How long before expiry the holder renews.
    pub grace: Duration,
}

impl Election {
    /// The Lease `controller-manager` in `namespace`, held for 15 s and
    /// renewed 5 s before it expires, as `identity`.
    pub fn new(namespace: &str, identity: &str) -> Election {
        Election {
            namespace: namespace.to_string(),
            lease: crate::FIELD_MANAGER.to_string(),
            identity: identity.to_string(),
            duration: Duration::from_secs(15),
            grace: Duration::from_secs(5),
        }
    }

    /// The election of the pod this process runs in: the namespace and name
    /// from `POD_NAMESPACE` and `POD_NAME` (set from the downward API), else
    /// the service account's namespace file and the host name.
    pub fn in_cluster() -> Election {
        let namespace = std::env::var("POD_NAMESPACE")
            .ok()
            .or_else(|| {
                std::fs::read_to_string("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
                    .ok()
            })
            .unwrap_or_else(|| "default".to_string());
        let identity = std::env::var("POD_NAME")
            .ok()
            .or_else(|| std::env::var("HOSTNAME").ok())
            .unwrap_or_else(|| format!("controller-manager-{}", std::process::id()));
        Election::new(namespace.trim(), &identity)
    }
}

/// Why the election could not run.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot take part in the election for Lease {namespace}/{lease}")]
    Lease {
        namespace: String,
        lease: String,
        #[source]
        source: kube_lease_manager::LeaseManagerError,
    },
}

/// Runs the controller while this instance holds the Lease, until
/// `shutdown` completes or the Lease is lost; then releases it.
pub async fn run_elected(
    client: Client,
    election: Election,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) -> Result<(), Error> {
    let lease_error = |source| Error::Lease {
        namespace: election.namespace.clone(),
        lease: election.lease.clone(),
        source,
    };
    let params = LeaseParams::new(
        &election.identity,
        election.duration.as_secs(),
        election.grace.as_secs(),
    );
    let manager = LeaseManagerBuilder::new(client.clone(), &election.lease)
        .with_namespace(&election.namespace)
        .with_parameters(params)
        .build()
        .await
        .map_err(lease_error)?;
    let (mut leading, task) = manager.watch().await;
    let mut shutdown = Box::pin(shutdown);
    info!(lease = %election.lease, identity = %election.identity, "waiting to lead");
    let elected = tokio::select! {
        r = leading.wait_for(|l| *l) => r.is_ok(),
        () = &mut shutdown => false,
    };
    if elected {
        info!(identity = %election.identity, "leading");
        let mut watch = leading.clone();
        let lost = async move {
            let _ = watch.wait_for(|l| !*l).await;
            warn!("lost the Lease; stopping");
        };
        crate::run(client, async move {
            tokio::select! {
                () = shutdown => {},
                () = lost => {},
            }
        })
        .await;
    }
    drop(leading);
    match task.await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(lease_error(e)),
        Err(join) => {
            warn!(error = %join, "the election task ended abnormally");
            Ok(())
        }
    }
}
