//! The node follows the platform it runs pods on, and pulls follow the node: the virtual kubelet's node has
//! the architecture kube-sim was built for, the Docker kubelet's the engine's (`docker info`), both read
//! through kubectl; an image index resolves to its entry for that architecture, and an index without one
//! fails the pull with containerd's words.
//!
//! The images are assembled here, one `FROM scratch` layer holding `/app` per platform, and pushed to a real
//! registry by hand. The entry for the engine's architecture holds the Docker tests' app (built for
//! x86_64, as all the Docker kubelet tests are). An image for another architecture holds bytes that no
//! machine runs: the kernel refuses them with `exec format error`, as it refuses a foreign binary when no
//! emulator is registered, and unlike a foreign binary, whatever emulators the machine has.

use std::time::Duration;

use kube_sim::platform::{Platform, go_arch};
use kube_sim::store::ListOptions;
use kube_sim::{GroupResource, Sim};
use serde_json::{Value, json};

use crate::docker_kubelet::{
    DEADLINE, Fixture, build_app, container_status, create_pod, docker_ok, ready, waiting_reason,
};
use crate::images::{run_pods, status, waiting};
use crate::oci::{MIRROR_NAME, Registry};
use crate::rollout::{applied, until, watch};
use crate::{json as parse, kubectl_ok};

/// What a machine of no architecture runs: not an executable of any format.
const FOREIGN_APP: &[u8] = &[0; 64];

/// The image label that names the platform an entry was pushed for.
const PLATFORM_LABEL: &str = "kube-sim-it.platform";

/// The Node's `kubernetes.io/arch` and `beta.kubernetes.io/arch` labels and `status.nodeInfo.architecture`,
/// read through kubectl.
async fn node_architecture(sim: &Sim) -> [String; 3] {
    let out = kubectl_ok(
        sim,
        &[
            "get",
            "node",
            kube_sim::NODE_NAME,
            "-o",
            concat!(
                "jsonpath={.metadata.labels.kubernetes\\.io/arch}",
                " {.metadata.labels.beta\\.kubernetes\\.io/arch}",
                " {.status.nodeInfo.architecture}",
            ),
        ],
    )
    .await;
    let fields: Vec<String> = out.split_whitespace().map(str::to_string).collect();
    fields
        .try_into()
        .unwrap_or_else(|f| panic!("three architectures: {f:?}"))
}

/// The engine's architecture as `docker info` names it, and in Go's names.
async fn engine_architecture() -> (String, String) {
    let machine = docker_ok(&["info", "--format", "{{.Architecture}}"])
        .await
        .trim()
        .to_string();
    assert!(!machine.is_empty(), "docker info names an architecture");
    let arch = go_arch(&machine).0.to_string();
    (machine, arch)
}

/// An architecture a node of `arch` does not run, even through containerd's fall-backs.
fn other_than(arch: &str) -> &'static str {
    if arch == "amd64" { "arm64" } else { "amd64" }
}

fn linux(arch: &str) -> Value {
    json!({"os": "linux", "architecture": arch})
}

/// The kubelet's message for an index without the node's platform, as containerd's CRI words it.
fn no_match(image: &str) -> String {
    format!(
        "rpc error: code = NotFound desc = failed to pull and unpack image \"{image}\": \
         no match for platform in manifest: not found"
    )
}

/// The Events about a pod.
fn events(sim: &Sim, pod: &str) -> Vec<Value> {
    let opts = ListOptions {
        field_selector: Some(format!("involvedObject.name={pod}")),
        ..ListOptions::default()
    };
    let list = sim
        .store()
        .list(&GroupResource::events(), Some("default"), &opts);
    list.expect("the events are listed").items
}

/// Whether one of the Events has this reason and a message starting so.
fn said(events: &[Value], reason: &str, message: &str) -> bool {
    events.iter().any(|e| {
        e["reason"] == reason
            && e["message"]
                .as_str()
                .is_some_and(|m| m.starts_with(message))
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_virtual_node_and_the_version_report_the_platform_kube_sim_was_built_for() {
    let sim = crate::start().await;
    let built = Platform::of_build();
    let arch = built.architecture.clone();
    assert_eq!(node_architecture(&sim).await, [arch.as_str(); 3]);
    if cfg!(target_arch = "x86_64") {
        assert_eq!(arch, "amd64");
    }
    if cfg!(target_arch = "aarch64") {
        assert_eq!(arch, "arm64");
    }
    let version = parse(&kubectl_ok(&sim, &["version", "-o", "json"]).await);
    assert_eq!(version["serverVersion"]["platform"], built.os_arch());
    if cfg!(all(target_os = "linux", target_arch = "x86_64")) {
        assert_eq!(version["serverVersion"]["platform"], "linux/amd64");
    }
    sim.shutdown().await;
}

/// The virtual runtime pulls the index entry for its node, never the first; the other entry, a crashing
/// image, is what a pod pinned to its digest runs. An index without the node's platform fails the pull.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_virtual_kubelet_pulls_the_index_entry_for_its_node_and_fails_without_one() {
    let registry = Registry::start().await;
    let own = Platform::linux_of_build().architecture;
    let other = other_than(&own);
    let crash = [("dev-env.sim/crash", "true")];
    let other_entry = registry
        .push_platform_image("multi", None, &linux(other), b"other", &crash)
        .await;
    let own_entry = registry
        .push_platform_image("multi", None, &linux(&own), b"own", &[])
        .await;
    let index = registry
        .push_index("multi", "v1", &[other_entry.clone(), own_entry])
        .await;
    let foreign_entry = registry
        .push_platform_image("foreign", None, &linux(other), b"other", &[])
        .await;
    registry.push_index("foreign", "v1", &[foreign_entry]).await;
    let sim = registry.sim(|_| {}).await;
    let pinned = format!(
        "{MIRROR_NAME}/multi@{}",
        other_entry["digest"].as_str().unwrap()
    );
    let foreign = format!("{MIRROR_NAME}/foreign:v1");
    let seen = run_pods(
        &sim,
        &[
            ("multi", format!("{MIRROR_NAME}/multi:v1")),
            ("pinned", pinned.clone()),
            ("foreign", foreign.clone()),
        ],
        |p| match p["metadata"]["name"].as_str() {
            Some("multi") => ready(p),
            Some("pinned") => waiting(p) == Some("CrashLoopBackOff"),
            _ => waiting(p) == Some("ImagePullBackOff"),
        },
    )
    .await;
    let multi = seen[0].last().unwrap();
    assert_eq!(
        status(multi)["imageID"],
        format!("{MIRROR_NAME}/multi@{index}")
    );
    // A single-platform image of another architecture is pulled as it is (it crashes here by its label).
    assert_eq!(status(seen[1].last().unwrap())["imageID"], pinned);
    let err = seen[2]
        .iter()
        .find(|p| waiting(p) == Some("ErrImagePull"))
        .expect("ErrImagePull shows before the back-off");
    assert_eq!(
        status(err)["state"]["waiting"]["message"],
        no_match(&foreign)
    );
    // Had it pulled the crashing entry, it would have crashed within this, as the pinned pod did.
    tokio::time::sleep(sim.config().kubelet.crash_after * 3).await;
    let pod = sim
        .store()
        .get(&GroupResource::pods(), Some("default"), "multi")
        .expect("the pod is there");
    assert_eq!(status(&pod)["restartCount"], 0, "{pod:#}");
    assert!(ready(&pod), "{pod:#}");
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_docker_node_reports_the_engines_architecture() {
    let fx = Fixture::start().await;
    let sim = fx.sim().await;
    let (machine, arch) = engine_architecture().await;
    assert_eq!(
        node_architecture(&sim).await,
        [arch.as_str(); 3],
        "docker info says {machine}"
    );
    sim.shutdown().await;
}

/// Creates a pod of one container `app` running `image`, with `extra` fields for the container.
async fn create(sim: &Sim, name: &str, image: &str, extra: Value) {
    let mut container = json!({"name": "app", "image": image});
    if let (Some(c), Some(e)) = (container.as_object_mut(), extra.as_object()) {
        c.extend(e.clone());
    }
    create_pod(
        sim,
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
            "spec": {"containers": [container]}}),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_index_without_the_engines_architecture_fails_the_pull_as_containerd_does() {
    let fx = Fixture::start().await;
    let (_, arch) = engine_architecture().await;
    let entry = fx
        .registry
        .push_platform_image(
            "demo/foreign",
            None,
            &linux(other_than(&arch)),
            FOREIGN_APP,
            &[],
        )
        .await;
    fx.registry.push_index("demo/foreign", "v1", &[entry]).await;
    let sim = fx.sim().await;
    let mut pods = watch(&sim.store().clone(), &GroupResource::pods(), None);
    let image = fx.image("demo/foreign");
    create(&sim, "foreign", &image, json!({})).await;
    let mut pull_error = None;
    until(&mut pods, DEADLINE, "ImagePullBackOff", |e| {
        let p = applied(e)?;
        if waiting_reason(p) == Some("ErrImagePull") {
            pull_error = container_status(p)
                .pointer("/state/waiting/message")
                .cloned();
        }
        (waiting_reason(p) == Some("ImagePullBackOff") && pull_error.is_some()).then_some(())
    })
    .await;
    let message = no_match(&image);
    assert_eq!(pull_error, Some(json!(message)));
    let events = events(&sim, "foreign");
    assert!(
        said(
            &events,
            "Failed",
            &format!("Failed to pull image \"{image}\": {message}")
        ),
        "{events:#?}"
    );
    assert!(
        said(&events, "Failed", "Error: ErrImagePull"),
        "{events:#?}"
    );
    assert!(fx.containers().await.is_empty(), "no container was created");
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_index_with_the_engines_architecture_runs_that_entry() {
    let fx = Fixture::start().await;
    let (_, arch) = engine_architecture().await;
    let other = other_than(&arch);
    let app = std::fs::read(build_app().await).expect("the test app is read");
    let repo = "demo/multi";
    let registry = &fx.registry;
    let other_entry = registry
        .push_platform_image(
            repo,
            None,
            &linux(other),
            FOREIGN_APP,
            &[(PLATFORM_LABEL, other)],
        )
        .await;
    let own_entry = registry
        .push_platform_image(repo, None, &linux(&arch), &app, &[(PLATFORM_LABEL, &arch)])
        .await;
    let index = registry
        .push_index(repo, "v1", &[other_entry, own_entry])
        .await;
    let sim = fx.sim().await;
    let mut pods = watch(&sim.store().clone(), &GroupResource::pods(), None);
    let probe =
        json!({"readinessProbe": {"exec": {"command": ["/app", "check"]}, "periodSeconds": 1}});
    create(&sim, "multi", &fx.image(repo), probe).await;
    let pod = until(&mut pods, DEADLINE, "the pod to become Ready", |e| {
        applied(e).filter(|p| ready(p)).cloned()
    })
    .await;
    let s = container_status(&pod);
    assert_eq!(
        s["imageID"],
        format!("kube-sim-it-registry:5000/{repo}@{index}")
    );
    assert_eq!(s["restartCount"], 0);
    let id = s["containerID"]
        .as_str()
        .unwrap()
        .trim_start_matches("docker://");
    let image_id = docker_ok(&[
        "inspect",
        "--type",
        "container",
        "--format",
        "{{.Image}}",
        id,
    ])
    .await;
    let pulled = docker_ok(&[
        "image",
        "inspect",
        "--format",
        &format!("{{{{.Architecture}}}} {{{{index .Config.Labels \"{PLATFORM_LABEL}\"}}}}"),
        image_id.trim(),
    ])
    .await;
    assert_eq!(
        pulled.trim(),
        format!("{arch} {arch}"),
        "the engine ran its own entry"
    );
    sim.shutdown().await;
}

/// A single-platform image for another architecture is pulled, and its container fails as the runtime
/// fails it: with runc 1.1 and later it starts and exits 1 saying `exec format error` (then
/// `CrashLoopBackOff`); runtimes that fail the start show `RunContainerError` with their message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_image_for_another_architecture_is_pulled_and_fails_to_run_with_exec_format_error() {
    let fx = Fixture::start().await;
    let (_, arch) = engine_architecture().await;
    let repo = "demo/foreign-single";
    let foreign = linux(other_than(&arch));
    fx.registry
        .push_platform_image(repo, Some("v1"), &foreign, FOREIGN_APP, &[])
        .await;
    let mut config = fx.config();
    // A back-off long enough to read the exited container's logs before its restart.
    config.kubelet.backoff_base = Duration::from_secs(5);
    let sim = crate::start_with(config).await;
    let mut pods = watch(&sim.store().clone(), &GroupResource::pods(), None);
    create(&sim, "foreign", &fx.image(repo), json!({})).await;
    let pod = until(&mut pods, DEADLINE, "the container to fail", |e| {
        let p = applied(e)?;
        let failed = matches!(
            waiting_reason(p),
            Some("CrashLoopBackOff" | "RunContainerError")
        );
        (failed && container_status(p)["lastState"]["terminated"].is_object()).then(|| p.clone())
    })
    .await;
    let s = container_status(&pod);
    let events = events(&sim, "foreign");
    assert!(
        said(&events, "Pulled", "Successfully pulled image"),
        "{events:#?}"
    );
    let terminated = &s["lastState"]["terminated"];
    if waiting_reason(&pod) == Some("RunContainerError") {
        let message = s["state"]["waiting"]["message"].as_str().unwrap();
        assert!(message.contains("exec format error"), "{message}");
        assert_eq!(terminated["reason"], "StartError");
        assert!(
            said(
                &events,
                "Failed",
                "Error: failed to create containerd task: "
            ),
            "{events:#?}"
        );
    } else {
        assert_eq!(terminated["exitCode"], 1, "{s:#}");
        assert_eq!(terminated["reason"], "Error");
        assert!(
            said(
                &events,
                "BackOff",
                "Back-off restarting failed container app"
            ),
            "{events:#?}"
        );
        let logs = kubectl_ok(&sim, &["logs", "foreign"]).await;
        assert!(logs.contains("exec /app: exec format error"), "{logs}");
    }
    sim.shutdown().await;
    fx.until_no_containers("after shutdown").await;
}

/// A container the engine creates but cannot start shows `RunContainerError` with containerd's words around
/// the engine's, is recorded as exited at its start (`StartError`, 128), and is restarted with back-off.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_container_the_engine_cannot_start_shows_run_container_error_then_crash_loop_back_off() {
    let fx = Fixture::start().await;
    let sim = fx.sim().await;
    let mut pods = watch(&sim.store().clone(), &GroupResource::pods(), None);
    let missing = json!({"command": ["/no-such-file"]});
    create(&sim, "unstartable", &fx.image("demo/app"), missing).await;
    let mut start_error = None;
    let looping = until(
        &mut pods,
        DEADLINE,
        "CrashLoopBackOff after RunContainerError",
        |e| {
            let p = applied(e)?;
            if waiting_reason(p) == Some("RunContainerError") {
                start_error = Some(p.clone());
            }
            (waiting_reason(p) == Some("CrashLoopBackOff") && start_error.is_some())
                .then(|| p.clone())
        },
    )
    .await;
    let failed = start_error.unwrap();
    let s = container_status(&failed);
    let message = s["state"]["waiting"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("failed to create containerd task: ")
            && message.contains("/no-such-file")
            && message.contains("no such file or directory"),
        "{message}"
    );
    assert_eq!(s["lastState"]["terminated"]["reason"], "StartError");
    assert_eq!(s["lastState"]["terminated"]["exitCode"], 128);
    assert_eq!(s["lastState"]["terminated"]["message"], message);
    assert!(
        s["containerID"]
            .as_str()
            .is_some_and(|id| id.starts_with("docker://")),
        "{s:#}"
    );
    assert_eq!(looping["status"]["phase"], "Running");
    let events = events(&sim, "unstartable");
    assert!(
        said(&events, "Failed", &format!("Error: {message}")),
        "{events:#?}"
    );
    assert!(
        said(
            &events,
            "BackOff",
            "Back-off restarting failed container app"
        ),
        "{events:#?}"
    );
    assert!(!said(&events, "Started", ""), "{events:#?}");
    sim.shutdown().await;
    fx.until_no_containers("after shutdown").await;
}
