//! Defaulting of built-in types, following the values Kubernetes' `SetDefaults_*` functions and admission
//! plugins fill in and that clients read back.

use serde_json::{Map, Value, json};

use crate::meta::child_map;

/// Fills defaults into a built-in object of the given resource. Runs on every write, so it is idempotent.
pub fn apply(group: &str, resource: &str, obj: &mut Value) {
    let Value::Object(root) = obj else { return };
    match (group, resource) {
        ("apps", "deployments") => deployment_defaults(root),
        ("apps", "replicasets") => {
            let spec = child_map(root, "spec");
            set_default(spec, "replicas", json!(1));
            template_defaults(spec);
        }
        ("", "pods") => pod_defaults(root),
        ("", "services") => service_defaults(root),
        ("", "namespaces") => namespace_defaults(root),
        ("", "secrets") => {
            set_default(root, "type", json!("Opaque"));
        }
        ("apiextensions.k8s.io", "customresourcedefinitions") => crd_defaults(root),
        _ => {}
    }
}

/// A Deployment: replicas, history, progress deadline, the rolling-update strategy, and its template.
fn deployment_defaults(root: &mut Map<String, Value>) {
    let spec = child_map(root, "spec");
    set_default(spec, "replicas", json!(1));
    set_default(spec, "revisionHistoryLimit", json!(10));
    set_default(spec, "progressDeadlineSeconds", json!(600));
    let strategy = child_map(spec, "strategy");
    set_default(strategy, "type", json!("RollingUpdate"));
    if strategy.get("type") == Some(&json!("RollingUpdate")) {
        let ru = child_map(strategy, "rollingUpdate");
        set_default(ru, "maxSurge", json!("25%"));
        set_default(ru, "maxUnavailable", json!("25%"));
    }
    template_defaults(spec);
}

/// A pod: its spec, service account, priority, service links, and the not-ready and unreachable tolerations.
fn pod_defaults(root: &mut Map<String, Value>) {
    let spec = child_map(root, "spec");
    pod_spec_defaults(spec);
    set_default(spec, "enableServiceLinks", json!(true));
    set_default(spec, "serviceAccountName", json!("default"));
    set_default(spec, "serviceAccount", json!("default"));
    set_default(spec, "priority", json!(0));
    set_default(spec, "preemptionPolicy", json!("PreemptLowerPriority"));
    for key in ["containers", "initContainers"] {
        if let Some(Value::Array(cs)) = spec.get_mut(key) {
            cs.iter_mut().for_each(requests_from_limits);
        }
    }
    let tolerations = spec.entry("tolerations").or_insert_with(|| json!([]));
    if let Value::Array(list) = tolerations {
        for key in [
            "node.kubernetes.io/not-ready",
            "node.kubernetes.io/unreachable",
        ] {
            if !list.iter().any(|t| t.get("key") == Some(&json!(key))) {
                list.push(json!({"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}));
            }
        }
    }
}

/// A Service: type, session affinity, traffic policy, port protocols and target ports, and an empty load-balancer status.
fn service_defaults(root: &mut Map<String, Value>) {
    let spec = child_map(root, "spec");
    set_default(spec, "type", json!("ClusterIP"));
    set_default(spec, "sessionAffinity", json!("None"));
    set_default(spec, "internalTrafficPolicy", json!("Cluster"));
    if let Some(Value::Array(ports)) = spec.get_mut("ports") {
        for p in ports.iter_mut().filter_map(Value::as_object_mut) {
            set_default(p, "protocol", json!("TCP"));
            if let Some(port) = p.get("port").cloned() {
                set_default(p, "targetPort", port);
            }
        }
    }
    let status = child_map(root, "status");
    child_map(status, "loadBalancer");
}

/// A namespace: the `kubernetes` finalizer, phase `Active`, and the `kubernetes.io/metadata.name` label.
fn namespace_defaults(root: &mut Map<String, Value>) {
    let spec = child_map(root, "spec");
    set_default(spec, "finalizers", json!(["kubernetes"]));
    let status = child_map(root, "status");
    set_default(status, "phase", json!("Active"));
    let name = root.get("metadata").and_then(|m| m.get("name")).cloned();
    if let Some(name) = name {
        let md = child_map(root, "metadata");
        let labels = child_map(md, "labels");
        labels.insert("kubernetes.io/metadata.name".into(), name);
    }
}

/// A CRD: conversion strategy `None`, and the singular and list kind from its kind.
fn crd_defaults(root: &mut Map<String, Value>) {
    let spec = child_map(root, "spec");
    let conversion = child_map(spec, "conversion");
    set_default(conversion, "strategy", json!("None"));
    let names = spec.get("names").cloned();
    if let Some(Value::Object(mut names)) = names {
        if let Some(kind) = names
            .get("kind")
            .and_then(Value::as_str)
            .map(str::to_string)
        {
            set_default(&mut names, "singular", json!(kind.to_lowercase()));
            set_default(&mut names, "listKind", json!(format!("{kind}List")));
        }
        spec.insert("names".into(), Value::Object(names));
    }
}

/// The status a pod gets when it is created: `Pending`, and its QoS class.
pub fn initial_pod_status(pod: &Value) -> Value {
    json!({"phase": "Pending", "qosClass": qos_class(pod)})
}

/// The resources the QoS class is computed over.
const QOS_RESOURCES: [&str; 2] = ["cpu", "memory"];

/// The pod's QoS class (`GetPodQOS`): `BestEffort` when no container requests or limits CPU or memory,
/// `Guaranteed` when every container limits both and the requests (defaulted from the limits) equal the
/// limits, `Burstable` otherwise.
pub fn qos_class(pod: &Value) -> &'static str {
    let nonzero = |c: &Value, kind: &str, r: &str| {
        c.pointer(&format!("/resources/{kind}/{r}"))
            .and_then(Value::as_str)
            .and_then(crate::scheduler::resources::milli)
            .filter(|q| *q != 0)
    };
    let mut requests = [0i64; 2];
    let mut limits = [0i64; 2];
    let (mut any, mut guaranteed) = (false, true);
    let containers = ["containers", "initContainers"]
        .iter()
        .filter_map(|k| pod.pointer(&format!("/spec/{k}")).and_then(Value::as_array))
        .flatten();
    for c in containers {
        for (i, r) in QOS_RESOURCES.iter().enumerate() {
            let limit = nonzero(c, "limits", r);
            let request = nonzero(c, "requests", r).or(limit);
            any |= request.is_some() || limit.is_some();
            guaranteed &= limit.is_some();
            requests[i] += request.unwrap_or(0);
            limits[i] += limit.unwrap_or(0);
        }
    }
    if !any {
        "BestEffort"
    } else if guaranteed && requests == limits {
        "Guaranteed"
    } else {
        "Burstable"
    }
}

/// A container's `resources.requests` defaulted from its `resources.limits`, resource by resource.
fn requests_from_limits(c: &mut Value) {
    let Some(limits) = c
        .pointer("/resources/limits")
        .and_then(Value::as_object)
        .cloned()
    else {
        return;
    };
    if let Value::Object(container) = c {
        let requests = child_map(child_map(container, "resources"), "requests");
        for (k, v) in limits {
            requests.entry(k).or_insert(v);
        }
    }
}

fn set_default(m: &mut Map<String, Value>, key: &str, value: Value) {
    if matches!(m.get(key), None | Some(Value::Null)) {
        m.insert(key.to_string(), value);
    }
}

/// [`set_default`] for a Go field that defaulting also fills when it holds its zero value (`0`, `""`),
/// as a `SetDefaults_*` function that tests `== 0` does.
fn set_over_zero(m: &mut Map<String, Value>, key: &str, value: Value) {
    if matches!(m.get(key), Some(v) if *v == json!(0) || *v == json!("")) {
        m.remove(key);
    }
    set_default(m, key, value);
}

fn template_defaults(spec: &mut Map<String, Value>) {
    let template = child_map(spec, "template");
    let tspec = child_map(template, "spec");
    pod_spec_defaults(tspec);
}

fn pod_spec_defaults(spec: &mut Map<String, Value>) {
    set_default(spec, "restartPolicy", json!("Always"));
    set_default(spec, "terminationGracePeriodSeconds", json!(30));
    set_default(spec, "dnsPolicy", json!("ClusterFirst"));
    set_default(spec, "schedulerName", json!("default-scheduler"));
    set_default(spec, "securityContext", json!({}));
    for list in ["containers", "initContainers"] {
        if let Some(Value::Array(cs)) = spec.get_mut(list) {
            for c in cs.iter_mut().filter_map(Value::as_object_mut) {
                container_defaults(c);
            }
        }
    }
}

fn container_defaults(c: &mut Map<String, Value>) {
    set_default(c, "terminationMessagePath", json!("/dev/termination-log"));
    set_default(c, "terminationMessagePolicy", json!("File"));
    set_default(c, "resources", json!({}));
    let image = c
        .get("image")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    set_default(c, "imagePullPolicy", json!(default_pull_policy(&image)));
    if let Some(Value::Array(ports)) = c.get_mut("ports") {
        for p in ports.iter_mut().filter_map(Value::as_object_mut) {
            set_default(p, "protocol", json!("TCP"));
        }
    }
    for probe in ["livenessProbe", "readinessProbe", "startupProbe"] {
        if let Some(Value::Object(probe)) = c.get_mut(probe) {
            probe_defaults(probe);
        }
    }
    if let Some(Value::Object(lifecycle)) = c.get_mut("lifecycle") {
        for hook in ["postStart", "preStop"] {
            if let Some(Value::Object(handler)) = lifecycle.get_mut(hook) {
                http_get_defaults(handler);
            }
        }
    }
}

/// A probe's timing (`SetDefaults_Probe`: a 1 s timeout, every 10 s, one success, three failures) and
/// its `httpGet`.
fn probe_defaults(probe: &mut Map<String, Value>) {
    set_over_zero(probe, "timeoutSeconds", json!(1));
    set_over_zero(probe, "periodSeconds", json!(10));
    set_over_zero(probe, "successThreshold", json!(1));
    set_over_zero(probe, "failureThreshold", json!(3));
    http_get_defaults(probe);
}

/// The `httpGet` of a probe or hook (`SetDefaults_HTTPGetAction`): path `/`, scheme `HTTP`.
fn http_get_defaults(handler: &mut Map<String, Value>) {
    if let Some(Value::Object(http)) = handler.get_mut("httpGet") {
        set_over_zero(http, "path", json!("/"));
        set_over_zero(http, "scheme", json!("HTTP"));
    }
}

/// `Always` for `:latest` or untagged images, `IfNotPresent` otherwise (digests count as tagged).
pub fn default_pull_policy(image: &str) -> &'static str {
    if image.contains('@') {
        return "IfNotPresent";
    }
    let last = image.rsplit('/').next().unwrap_or(image);
    match last.split_once(':') {
        Some((_, "latest")) | None => "Always",
        Some(_) => "IfNotPresent",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probes_and_hooks_get_the_api_servers_defaults() {
        let mut p = json!({"spec": {"containers": [{"name": "a", "image": "i",
            "readinessProbe": {"httpGet": {"port": 8080}},
            "livenessProbe": {"tcpSocket": {"port": 8080}, "periodSeconds": 0, "failureThreshold": 5},
            "lifecycle": {"preStop": {"httpGet": {"port": 80, "path": "/stop", "scheme": ""}}}}]}});
        apply("", "pods", &mut p);
        let c = &p["spec"]["containers"][0];
        assert_eq!(
            c["readinessProbe"],
            json!({"httpGet": {"port": 8080, "path": "/", "scheme": "HTTP"},
                "timeoutSeconds": 1, "periodSeconds": 10, "successThreshold": 1, "failureThreshold": 3})
        );
        assert_eq!(
            c["livenessProbe"],
            json!({"tcpSocket": {"port": 8080},
                "timeoutSeconds": 1, "periodSeconds": 10, "successThreshold": 1, "failureThreshold": 5})
        );
        assert_eq!(
            c["lifecycle"]["preStop"]["httpGet"],
            json!({"port": 80, "path": "/stop", "scheme": "HTTP"})
        );
        assert!(c.get("startupProbe").is_none());
    }

    #[test]
    fn qos_classes_follow_requests_and_limits() {
        let pod = |resources: Value| {
            let mut p = json!({"spec": {"containers": [{"name": "a", "image": "i", "resources": resources}]}});
            apply("", "pods", &mut p);
            p
        };
        let both = json!({"cpu": "500m", "memory": "64Mi"});
        assert_eq!(qos_class(&pod(json!({}))), "BestEffort");
        assert_eq!(qos_class(&pod(json!({"limits": both}))), "Guaranteed");
        assert_eq!(
            qos_class(&pod(json!({"limits": both, "requests": {"cpu": "100m"}}))),
            "Burstable"
        );
        assert_eq!(
            qos_class(&pod(json!({"limits": {"cpu": "1"}}))),
            "Burstable"
        );
        let defaulted = pod(json!({"limits": both}));
        assert_eq!(
            defaulted.pointer("/spec/containers/0/resources/requests/memory"),
            Some(&json!("64Mi"))
        );
    }

    #[test]
    fn deployment_defaults_match_kubernetes() {
        let mut d = json!({"spec": {"template": {"spec": {"containers": [{"name": "a", "image": "nginx"}]}}}});
        apply("apps", "deployments", &mut d);
        assert_eq!(
            d.pointer("/spec/strategy/rollingUpdate/maxSurge"),
            Some(&json!("25%"))
        );
        assert_eq!(
            d.pointer("/spec/progressDeadlineSeconds"),
            Some(&json!(600))
        );
        assert_eq!(d.pointer("/spec/revisionHistoryLimit"), Some(&json!(10)));
        assert_eq!(
            d.pointer("/spec/template/spec/containers/0/imagePullPolicy"),
            Some(&json!("Always"))
        );
        let again = d.clone();
        apply("apps", "deployments", &mut d);
        assert_eq!(d, again);
        assert_eq!(default_pull_policy("localhost:5000/x"), "Always");
        assert_eq!(default_pull_policy("localhost:5000/x:v1"), "IfNotPresent");
    }
}
