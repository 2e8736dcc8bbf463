//! Port forwards to a component's pods through the Kubernetes API
//! (`pods/portforward`), so they work alike against k3s, an existing
//! cluster and kube-sim. Local ports bind on 127.0.0.1 only, all before
//! anything else happens: a taken port fails at once, naming the port and
//! the component, and is never replaced by another.
//!
//! A forward follows its component: watches of the component's pods and
//! ReplicaSets keep a target (`target.rs`), and each accepted connection
//! is forwarded to the target of that moment. After a rollout new
//! connections reach a Ready pod of the new ReplicaSet; a pod that goes
//! away only ends the connections it carried.

mod target;

use std::time::Duration;

use futures::{StreamExt, stream};
use k8s_openapi::api::{
    apps::v1::{Deployment, ReplicaSet},
    core::v1::Pod,
};
use kube::{
    Api, Client,
    runtime::{WatchStreamExt, watcher},
};
use tokio::{
    net::{TcpListener, TcpStream},
    sync::{mpsc, watch},
    task::JoinSet,
};

use crate::{
    config::{Config, PortForward},
    deliver, kubeconfig,
    report::{Event, Reporter},
    status,
    wait::workload,
};

use target::View;

/// How long a new connection waits for a Ready pod before it is closed.
const TARGET_WAIT: Duration = Duration::from_secs(60);

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(
        "cannot forward 127.0.0.1:{port} for `{component}`: the port is taken; stop what listens there or forward another local port (`<localPort>:{remote}`)"
    )]
    PortTaken {
        component: String,
        port: u16,
        remote: u16,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot listen on 127.0.0.1:{port} for `{component}`")]
    Bind {
        component: String,
        port: u16,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "component `{component}` declares no ports to forward; name them (`cargo xtask forward {component} 8080`) or declare `forward:` in the environment file"
    )]
    NoPorts { component: String },
    #[error(transparent)]
    Config(#[from] crate::config::Error),
    #[error(transparent)]
    Kubeconfig(#[from] kubeconfig::Error),
    #[error(transparent)]
    Status(#[from] status::Error),
    #[error("reading {what}: {}", crate::apply::api_error(error))]
    Api { what: String, error: kube::Error },
}

/// A component's forwards, bound and ready to run.
pub struct Forwarder {
    component: String,
    namespace: String,
    selector: String,
    client: Client,
    listeners: Vec<(PortForward, TcpListener)>,
}

/// Binds `ports` (the component's declared ones when empty) on 127.0.0.1,
/// then finds the workload whose pods they reach.
pub async fn bind(
    config: &Config,
    component: &str,
    ports: &[PortForward],
) -> Result<Forwarder, Error> {
    let declared = config.component(component)?;
    let ports = if ports.is_empty() {
        &declared.forward[..]
    } else {
        ports
    };
    if ports.is_empty() {
        return Err(Error::NoPorts {
            component: component.to_string(),
        });
    }
    let mut listeners = Vec::new();
    for port in ports {
        listeners.push((*port, listen(component, *port).await?));
    }
    let r = &declared.rollout;
    let client = deliver::cluster_client(config).await?;
    let deployment = status::deployment_of(&client, r.kind, &r.namespace, &r.name).await?;
    let deploy = Api::<Deployment>::namespaced(client.clone(), &r.namespace)
        .get(&deployment)
        .await
        .map_err(|error| Error::Api {
            what: format!("Deployment {}/{deployment}", r.namespace),
            error,
        })?;
    Ok(Forwarder {
        component: component.to_string(),
        namespace: r.namespace.clone(),
        selector: workload::selector_of(&deploy),
        client,
        listeners,
    })
}

async fn listen(component: &str, port: PortForward) -> Result<TcpListener, Error> {
    TcpListener::bind(("127.0.0.1", port.local))
        .await
        .map_err(|source| match source.kind() {
            std::io::ErrorKind::AddrInUse => Error::PortTaken {
                component: component.to_string(),
                port: port.local,
                remote: port.remote,
                source,
            },
            _ => Error::Bind {
                component: component.to_string(),
                port: port.local,
                source,
            },
        })
}

impl Forwarder {
    /// The forwarded ports, local first.
    pub fn ports(&self) -> Vec<PortForward> {
        self.listeners.iter().map(|(p, _)| *p).collect()
    }

    pub fn component(&self) -> &str {
        &self.component
    }

    /// Forwards until dropped: follows the component's pods and forwards
    /// every accepted connection to the target of that moment.
    pub async fn run(self, reporter: &dyn Reporter) {
        let (target_tx, target_rx) = watch::channel(None::<String>);
        let (problem_tx, mut problem_rx) = mpsc::unbounded_channel::<(u16, String)>();
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &self.namespace);
        let accepts = self.listeners.into_iter().map(|(port, listener)| {
            reporter.report(&Event::Forwarding {
                component: self.component.clone(),
                local: port.local,
                remote: port.remote,
            });
            let connection = Connection {
                pods: pods.clone(),
                target: target_rx.clone(),
                port,
                problems: problem_tx.clone(),
            };
            accept_loop(listener, connection)
        });
        let accepts = futures::future::join_all(accepts);
        let problems = async {
            while let Some((local, message)) = problem_rx.recv().await {
                reporter.report(&Event::ForwardProblem {
                    component: self.component.clone(),
                    local,
                    message,
                });
            }
        };
        let follow = follow(
            &self.client,
            &self.namespace,
            &self.selector,
            &self.component,
            &target_tx,
            reporter,
        );
        tokio::select! {
            () = follow => {}
            _ = accepts => {}
            () = problems => {}
        }
    }
}

/// What a connection needs: where to forward and how to say it failed.
#[derive(Clone)]
struct Connection {
    pods: Api<Pod>,
    target: watch::Receiver<Option<String>>,
    port: PortForward,
    problems: mpsc::UnboundedSender<(u16, String)>,
}

/// Accepts connections for ever; each is forwarded in a task of its own,
/// which ends with the loop.
async fn accept_loop(listener: TcpListener, connection: Connection) {
    let mut tasks = JoinSet::new();
    loop {
        while tasks.try_join_next().is_some() {}
        match listener.accept().await {
            Ok((stream, _)) => {
                let connection = connection.clone();
                tasks.spawn(async move {
                    let (problems, local) = (connection.problems.clone(), connection.port.local);
                    if let Err(message) = connection.forward(stream).await {
                        let _ = problems.send((local, message));
                    }
                });
            }
            Err(e) => {
                let _ = connection.problems.send((
                    connection.port.local,
                    format!("accepting a connection: {e}"),
                ));
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

impl Connection {
    /// Forwards one accepted connection to the current target pod.
    async fn forward(mut self, mut client: TcpStream) -> Result<(), String> {
        let waited = tokio::time::timeout(TARGET_WAIT, self.target.wait_for(Option::is_some))
            .await
            .ok()
            .and_then(|r| r.ok().and_then(|pod| pod.clone()));
        let pod = match waited {
            Some(pod) => pod,
            None => {
                return Err(format!(
                    "no Ready pod within {}s; the connection is closed",
                    TARGET_WAIT.as_secs()
                ));
            }
        };
        let remote = self.port.remote;
        let mut forwarder = self
            .pods
            .portforward(&pod, &[remote])
            .await
            .map_err(|e| format!("pod {pod}: {}", crate::apply::api_error(&e)))?;
        let mut upstream = forwarder
            .take_stream(remote)
            .ok_or_else(|| format!("pod {pod}: no stream for port {remote}"))?;
        // Either side closing ends the connection; a pod that goes away
        // ends it too (the next connection goes to the new target).
        let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
        drop(upstream);
        forwarder.abort();
        Ok(())
    }
}

/// One change seen by the component's watches.
enum Change {
    Pod(Result<watcher::Event<Pod>, watcher::Error>),
    ReplicaSet(Result<watcher::Event<ReplicaSet>, watcher::Error>),
}

/// Watches the component's pods and ReplicaSets and keeps `target` on the
/// pod new connections go to, reporting each change.
async fn follow(
    client: &Client,
    namespace: &str,
    selector: &str,
    component: &str,
    target: &watch::Sender<Option<String>>,
    reporter: &dyn Reporter,
) {
    let config = watcher::Config::default().labels(selector);
    let pods = watcher(
        Api::<Pod>::namespaced(client.clone(), namespace),
        config.clone(),
    )
    .default_backoff()
    .map(Change::Pod);
    let sets = watcher(
        Api::<ReplicaSet>::namespaced(client.clone(), namespace),
        config,
    )
    .default_backoff()
    .map(Change::ReplicaSet);
    let mut changes = std::pin::pin!(stream::select(pods, sets));
    let mut view = View::default();
    let mut fresh = Fresh::default();
    while let Some(change) = changes.next().await {
        let settled = match change {
            Change::Pod(Ok(event)) => apply(&mut view.pods, &mut fresh.pods, event),
            Change::ReplicaSet(Ok(event)) => {
                apply(&mut view.replica_sets, &mut fresh.replica_sets, event)
            }
            Change::Pod(Err(e)) | Change::ReplicaSet(Err(e)) => {
                reporter.report(&Event::ForwardProblem {
                    component: component.to_string(),
                    local: 0,
                    message: format!("watching the pods: {e}; retrying"),
                });
                false
            }
        };
        if !settled || fresh.pods.is_some() || fresh.replica_sets.is_some() {
            continue;
        }
        let next = view.target(target.borrow().as_deref());
        if next != *target.borrow() {
            target.send_replace(next.clone());
            reporter.report(&Event::ForwardTarget {
                component: component.to_string(),
                pod: next,
            });
        }
    }
}

/// Lists being (re)read by a watch: replaced whole once complete.
#[derive(Default)]
struct Fresh {
    pods: Option<std::collections::BTreeMap<String, Pod>>,
    replica_sets: Option<std::collections::BTreeMap<String, ReplicaSet>>,
}

/// Applies one watch event; `true` when the view may have changed.
fn apply<K: kube::Resource>(
    known: &mut std::collections::BTreeMap<String, K>,
    fresh: &mut Option<std::collections::BTreeMap<String, K>>,
    event: watcher::Event<K>,
) -> bool {
    let name = |k: &K| k.meta().name.clone().unwrap_or_default();
    match event {
        watcher::Event::Apply(k) => {
            known.insert(name(&k), k);
        }
        watcher::Event::Delete(k) => {
            known.remove(&name(&k));
        }
        watcher::Event::Init => *fresh = Some(Default::default()),
        watcher::Event::InitApply(k) => {
            fresh
                .get_or_insert_with(Default::default)
                .insert(name(&k), k);
            return false;
        }
        watcher::Event::InitDone => *known = fresh.take().unwrap_or_default(),
    }
    true
}
