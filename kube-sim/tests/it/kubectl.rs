//! Conformance with kubectl: server-side apply, get, strategic and merge patches, delete, CRDs.

use kube_sim::Sim;
use serde_json::Value;

use crate::{WEB_DEPLOYMENT, WIDGET_CRD, apply, kubectl_at, kubectl_ok, manifest, start};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_applies_patches_and_deletes_a_deployment() {
    let sim = start().await;
    let (_dir, path) = manifest(WEB_DEPLOYMENT);
    let path = path.to_str().unwrap();
    let out = kubectl_ok(&sim, &["apply", "--server-side", "-f", path]).await;
    assert!(
        out.contains("deployment.apps/web serverside-applied"),
        "{out}"
    );

    let got = get_json(&sim, &["deployment", "web"]).await;
    assert_eq!(got["spec"]["replicas"], 2);
    assert_eq!(got["metadata"]["generation"], 1);
    assert_eq!(got["spec"]["strategy"]["rollingUpdate"]["maxSurge"], "25%");

    let patch =
        r#"{"spec":{"template":{"spec":{"containers":[{"name":"app","image":"nginx:1.28"}]}}}}"#;
    kubectl_ok(&sim, &["patch", "deployment", "web", "-p", patch]).await;
    let got = get_json(&sim, &["deploy", "web"]).await;
    let containers = got["spec"]["template"]["spec"]["containers"]
        .as_array()
        .unwrap();
    assert_eq!(
        containers.len(),
        2,
        "strategic merge keeps the sidecar: {containers:?}"
    );
    assert_eq!(containers[0]["image"], "nginx:1.28");
    assert_eq!(containers[1]["name"], "sidecar");
    assert_eq!(got["metadata"]["generation"], 2);

    let restart = r#"{"spec":{"template":{"metadata":{"annotations":{"kubectl.kubernetes.io/restartedAt":"2026-01-01T00:00:00Z"}}}}}"#;
    kubectl_ok(&sim, &["patch", "deployment", "web", "-p", restart]).await;
    kubectl_ok(&sim, &["patch", "deployment", "web", "-p", restart]).await;
    let got = get_json(&sim, &["deploy", "web"]).await;
    assert_eq!(
        got["metadata"]["generation"], 3,
        "the repeated restart patch is a no-op"
    );

    let out = kubectl_ok(&sim, &["delete", "deployment", "web"]).await;
    assert!(out.contains("deployment.apps \"web\" deleted"), "{out}");
    let missing = kubectl_at(sim.kubeconfig_path(), &["get", "deployment", "web"]).await;
    assert!(!missing.status.success());
    let stderr = String::from_utf8_lossy(&missing.stderr);
    assert!(
        stderr.contains("Error from server (NotFound): deployments.apps \"web\" not found"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_applies_a_crd_and_a_custom_resource_then_merge_patches_it() {
    let sim = start().await;
    apply(&sim, WIDGET_CRD).await;
    let waited = kubectl_ok(
        &sim,
        &[
            "wait",
            "--for=condition=Established",
            "crd/widgets.example.com",
            "--timeout=15s",
        ],
    )
    .await;
    assert!(waited.contains("condition met"), "{waited}");

    let cr = "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w1, namespace: default}\nspec: {size: 3, colors: [red, blue]}\n";
    let out = apply(&sim, cr).await;
    assert!(
        out.contains("widget.example.com/w1 serverside-applied"),
        "{out}"
    );

    let table = kubectl_ok(&sim, &["get", "widgets"]).await;
    let header = columns(&table);
    assert_eq!(
        header,
        ["NAME", "SIZE", "READY", "AGE"],
        "the CRD's printer columns: {table}"
    );
    assert!(
        table
            .lines()
            .nth(1)
            .is_some_and(|l| l.split_whitespace().take(2).eq(["w1", "3"])),
        "{table}"
    );
    let list = get_json(&sim, &["widgets"]).await;
    assert_eq!(list["items"][0]["spec"]["size"], 3);
    assert_eq!(list["items"][0]["metadata"]["generation"], 1);

    kubectl_ok(
        &sim,
        &[
            "patch",
            "wd",
            "w1",
            "--type",
            "merge",
            "-p",
            r#"{"spec":{"colors":["green"]}}"#,
        ],
    )
    .await;
    let got = get_json(&sim, &["widget", "w1"]).await;
    assert_eq!(
        got["spec"]["colors"],
        serde_json::json!(["green"]),
        "merge patch replaces lists whole"
    );
    assert_eq!(got["spec"]["size"], 3);
    assert_eq!(got["metadata"]["generation"], 2);

    let strategic = kubectl_at(
        sim.kubeconfig_path(),
        &["patch", "widget", "w1", "-p", r#"{"spec":{"size":4}}"#],
    )
    .await;
    assert!(!strategic.status.success());
    let stderr = String::from_utf8_lossy(&strategic.stderr);
    assert!(
        stderr.contains("application/strategic-merge-patch+json is not supported"),
        "{stderr}"
    );

    let out = kubectl_ok(&sim, &["delete", "widget", "w1"]).await;
    assert!(out.contains("widget.example.com \"w1\" deleted"), "{out}");
    let out = kubectl_ok(&sim, &["get", "widgets", "-o", "json"]).await;
    assert_eq!(
        serde_json::from_str::<Value>(&out).unwrap()["items"],
        serde_json::json!([])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_client_side_apply_merges_containers_and_rollout_restart_patches_the_template() {
    let sim = start().await;
    let (dir, path) = manifest(WEB_DEPLOYMENT);
    let path_str = path.to_str().unwrap();
    let out = kubectl_ok(&sim, &["apply", "-f", path_str]).await;
    assert!(out.contains("deployment.apps/web created"), "{out}");
    std::fs::write(&path, WEB_DEPLOYMENT.replace("nginx:1.27", "nginx:1.28")).unwrap();
    let out = kubectl_ok(&sim, &["apply", "-f", path_str]).await;
    assert!(out.contains("deployment.apps/web configured"), "{out}");
    let got = get_json(&sim, &["deploy", "web"]).await;
    let containers = got["spec"]["template"]["spec"]["containers"]
        .as_array()
        .unwrap();
    assert_eq!(containers.len(), 2);
    assert_eq!(containers[0]["image"], "nginx:1.28");
    assert_eq!(got["metadata"]["generation"], 2);

    kubectl_ok(&sim, &["rollout", "restart", "deployment/web"]).await;
    let got = get_json(&sim, &["deploy", "web"]).await;
    let restarted =
        got["spec"]["template"]["metadata"]["annotations"]["kubectl.kubernetes.io/restartedAt"]
            .as_str();
    assert!(
        restarted.is_some_and(|t| t.ends_with('Z') && t.len() == 20),
        "{got}"
    );
    assert_eq!(got["metadata"]["generation"], 3);
    drop(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_get_prints_the_server_side_table_columns() {
    let sim = start().await;
    apply(&sim, WEB_DEPLOYMENT).await;
    let out = kubectl_ok(&sim, &["get", "deployments"]).await;
    let header = columns(&out);
    assert_eq!(
        header,
        ["NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE"],
        "{out}"
    );
    assert!(
        out.lines()
            .nth(1)
            .is_some_and(|l| l.starts_with("web ") && l.contains("/2")),
        "{out}"
    );
    let wide = kubectl_ok(&sim, &["get", "deployment", "web", "-o", "wide"]).await;
    assert!(
        wide.contains("nginx:1.27,busybox:1.36") && wide.contains("app=web"),
        "{wide}"
    );
    let namespaces = kubectl_ok(&sim, &["get", "namespaces"]).await;
    assert!(
        namespaces
            .lines()
            .any(|l| l.starts_with("kube-system") && l.contains("Active")),
        "{namespaces}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_apply_refuses_a_misspelt_field_like_a_real_cluster() {
    let sim = start().await;
    let (_dir, path) = manifest(&WEB_DEPLOYMENT.replace("  replicas: 2", "  replcas: 2"));
    let out = kubectl_at(
        sim.kubeconfig_path(),
        &["apply", "--server-side", "-f", path.to_str().unwrap()],
    )
    .await;
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("unknown field \"spec.replcas\""),
        "{stderr}"
    );
}

/// Probes as kubectl sends them: a liveness probe that needs two successes is refused with the API
/// server's words (a dry run, and nothing stored); a bare readiness probe reads back with its defaults.
#[tokio::test]
async fn kubectl_sees_probes_refused_and_defaulted_as_a_real_cluster_does() {
    let sim = start().await;
    let pod = |probes: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: probed, namespace: default}}\nspec:\n  containers:\n  - name: app\n    image: app:v1\n{probes}"
        )
    };
    let (_dir, bad) = manifest(&pod(
        "    livenessProbe: {tcpSocket: {port: 8080}, successThreshold: 2}\n    readinessProbe: {periodSeconds: 1}\n",
    ));
    let out = kubectl_at(
        sim.kubeconfig_path(),
        &[
            "apply",
            "--server-side",
            "--dry-run=server",
            "-f",
            bad.to_str().unwrap(),
        ],
    )
    .await;
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    for wanted in [
        "spec.containers[0].livenessProbe.successThreshold: Invalid value: 2: must be 1",
        "spec.containers[0].readinessProbe: Required value: must specify a handler type",
    ] {
        assert!(stderr.contains(wanted), "{wanted}: {stderr}");
    }
    let (_dir, good) = manifest(&pod("    readinessProbe: {httpGet: {port: 8080}}\n"));
    kubectl_ok(
        &sim,
        &["apply", "--server-side", "-f", good.to_str().unwrap()],
    )
    .await;
    let stored = get_json(&sim, &["pod", "probed", "-n", "default"]).await;
    assert_eq!(
        stored["spec"]["containers"][0]["readinessProbe"],
        serde_json::json!({"httpGet": {"port": 8080, "path": "/", "scheme": "HTTP"},
            "timeoutSeconds": 1, "periodSeconds": 10, "successThreshold": 1, "failureThreshold": 3})
    );
}

/// The column names in the first line of kubectl's table output.
fn columns(table: &str) -> Vec<&str> {
    table
        .lines()
        .next()
        .unwrap_or("")
        .split_whitespace()
        .collect()
}

/// `kubectl get … -o json`, parsed.
async fn get_json(sim: &Sim, what: &[&str]) -> Value {
    let args = [&["get"], what, &["-o", "json"]].concat();
    serde_json::from_str(&kubectl_ok(sim, &args).await).expect("kubectl prints JSON")
}

#[tokio::test]
async fn kubectl_describe_shows_what_the_scheduler_and_the_kubelet_did() {
    let registry = crate::oci::Registry::start().await;
    registry.push("app", "v1", &[]).await;
    let sim = registry.sim(|_| {}).await;
    let image = format!("localhost:{}/app:v1", registry.port);
    let (_dir, path) = crate::manifest(&format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: solo}}\nspec:\n  containers: [{{name: app, image: \"{image}\"}}]\n",
    ));
    kubectl_ok(&sim, &["apply", "-f", path.to_str().unwrap()]).await;
    kubectl_ok(
        &sim,
        &["wait", "--for=condition=Ready", "pod/solo", "--timeout=15s"],
    )
    .await;
    let described = kubectl_ok(&sim, &["describe", "pod", "solo"]).await;
    let events = described
        .split("Events:")
        .nth(1)
        .expect("an Events section");
    let pulling = format!("Pulling image \"{image}\"");
    let pulled = format!("Successfully pulled image \"{image}\" in ");
    for (reason, from, message) in [
        (
            "Scheduled",
            "default-scheduler",
            "Successfully assigned default/solo to ",
        ),
        ("Pulling", "kubelet", pulling.as_str()),
        ("Pulled", "kubelet", pulled.as_str()),
        ("Created", "kubelet", "Created container: app"),
        ("Started", "kubelet", "Started container app"),
    ] {
        let line = events
            .lines()
            .find(|l| l.split_whitespace().nth(1) == Some(reason))
            .unwrap_or_else(|| panic!("no {reason} event in:\n{events}"));
        assert!(line.contains(from) && line.contains(message), "{line}");
    }
    let app_events = get_json(&sim, &["events", "--field-selector", "reason=Started"]).await;
    assert_eq!(
        app_events["items"][0]["involvedObject"]["fieldPath"],
        "spec.containers{app}"
    );
    // `source` selects `source.component`, as kube-apiserver's Event field set does.
    for (source, reasons) in [
        ("kubelet", vec!["Created", "Pulled", "Pulling", "Started"]),
        ("default-scheduler", vec!["Scheduled"]),
    ] {
        let selector = format!("source={source},involvedObject.name=solo");
        let listed = get_json(&sim, &["events", "--field-selector", &selector]).await;
        let mut seen: Vec<&str> = listed["items"]
            .as_array()
            .expect("a list")
            .iter()
            .filter_map(|e| e["reason"].as_str())
            .collect();
        seen.sort_unstable();
        assert_eq!(seen, reasons, "{selector}");
    }
    for (args, says) in [
        (
            vec!["exec", "solo", "--", "true"],
            "the virtual kubelet runs no containers, so kube-sim does not run commands in containers",
        ),
        (
            vec!["attach", "solo"],
            "the virtual kubelet runs no containers, so kube-sim does not attach to containers",
        ),
        (
            vec!["port-forward", "pod/solo", "0:80"],
            "the virtual kubelet runs no containers, so kube-sim does not forward or proxy",
        ),
    ] {
        let out = crate::kubectl_at(sim.kubeconfig_path(), &args).await;
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} fails");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
}

/// The `fieldsV1` of every `managedFields` entry of `obj`.
fn fields_v1(obj: &Value) -> Vec<&Value> {
    let entries = obj["metadata"]["managedFields"].as_array();
    entries
        .into_iter()
        .flatten()
        .map(|e| &e["fieldsV1"])
        .collect()
}

/// The JSON documents kubectl printed one after another.
fn documents(text: &str) -> Vec<Value> {
    let stream = serde_json::Deserializer::from_str(text).into_iter::<Value>();
    stream.map_while(Result::ok).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_gets_lists_and_watches_managed_fields_as_field_trees() {
    let sim = start().await;
    kubectl_ok(&sim, &["create", "configmap", "c", "--from-literal=a=1"]).await;
    let event = r#"{"apiVersion": "v1", "kind": "Event", "metadata": {"name": "e"},
        "involvedObject": {"kind": "ConfigMap", "name": "c", "namespace": "default"},
        "reason": "Checked", "message": "m", "type": "Normal"}"#;
    let (_dir, path) = manifest(event);
    kubectl_ok(&sim, &["create", "-f", path.to_str().unwrap()]).await;
    let show = "--show-managed-fields";
    let args = [
        "get",
        "configmap",
        "c",
        "-w",
        "-o",
        "json",
        "--output-watch-events",
        show,
        "--request-timeout=5s",
    ];
    let watch = kubectl_at(sim.kubeconfig_path(), &args);
    // Changes through the watch's life, however long kubectl takes to start it.
    let patch = async {
        for i in 0..8 {
            tokio::time::sleep(std::time::Duration::from_millis(400)).await;
            let data = format!(r#"{{"data":{{"b":"{i}"}}}}"#);
            kubectl_ok(&sim, &["patch", "configmap", "c", "-p", &data]).await;
        }
    };
    let (watched, _) = tokio::join!(watch, patch);

    let got = get_json(&sim, &["configmap", "c", show]).await;
    let trees = fields_v1(&got);
    assert_eq!(trees.len(), 2, "{got}");
    assert!(trees[0]["f:data"]["f:a"].is_object(), "{got}");
    assert_eq!(
        trees[1],
        &serde_json::json!({"f:data": {"f:b": {}}}),
        "{got}"
    );
    let listed = get_json(&sim, &["configmaps", show]).await;
    let events = get_json(&sim, &["events", show]).await;
    let watched = documents(&String::from_utf8_lossy(&watched.stdout));
    let types: Vec<&Value> = watched.iter().map(|e| &e["type"]).collect();
    assert_eq!(types.first(), Some(&&Value::from("ADDED")), "{watched:?}");
    assert!(types.contains(&&Value::from("MODIFIED")), "{watched:?}");
    let objects = [&listed["items"][0], &events["items"][0]]
        .into_iter()
        .chain(watched.iter().map(|e| &e["object"]));
    for obj in objects {
        let trees = fields_v1(obj);
        assert!(!trees.is_empty(), "{obj}");
        assert!(trees.iter().all(|t| t.is_object()), "{obj}");
    }
}

/// The `SuccessfulCreate` Events about ReplicaSets, as kubectl lists them.
async fn replica_set_creations(sim: &Sim) -> Vec<Value> {
    let selector = "--field-selector=involvedObject.kind=ReplicaSet,reason=SuccessfulCreate";
    let events = get_json(sim, &["events", selector]).await;
    events["items"].as_array().cloned().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_sees_a_replica_sets_pod_creations_combined_and_rate_limited_as_a_recorder_writes_them()
 {
    let sim = start().await;
    let create = [
        "create",
        "deployment",
        "many",
        "--image=nginx",
        "--replicas=30",
    ];
    kubectl_ok(&sim, &create).await;
    let deadline = std::time::Instant::now() + crate::DEADLINE;
    loop {
        let pods = get_json(&sim, &["pods", "-l", "app=many"]).await;
        if pods["items"].as_array().map(Vec::len) == Some(30) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "30 pods within the deadline"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    // Each creation's event follows it at once; give the last one time to be written.
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    // 9 messages of their own, then one combined event, patched until the 25 events the spam filter
    // lets through about one object: a count of 16, the last 5 creations dropped.
    let events = replica_set_creations(&sim).await;
    assert_eq!(events.len(), 10, "{events:?}");
    let single = events.iter().filter(|e| e["count"] == 1).count();
    assert_eq!(single, 9, "{events:?}");
    let combined = events
        .iter()
        .find(|e| e["count"] != 1)
        .expect("a combined event");
    let message = combined["message"].as_str().unwrap_or("");
    assert!(
        message.starts_with("(combined from similar events): Created pod: many-"),
        "{combined}"
    );
    assert_eq!(combined["count"], 16, "{combined}");
    assert_ne!(combined["firstTimestamp"], Value::Null, "{combined}");
    sim.shutdown().await;
}
