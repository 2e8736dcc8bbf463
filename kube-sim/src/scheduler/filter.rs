//! The filter plugins of the default profile, in their order (`pkg/scheduler/framework/plugins`):
//! NodeUnschedulable, TaintToleration, NodeAffinity (with `nodeSelector`), NodeResourcesFit. A node that
//! fails a plugin is reported with that plugin's reasons; the reasons of all nodes make the
//! `FailedScheduling` message.

use std::collections::BTreeMap;

use serde_json::Value;

use super::resources::{Resources, pod_requests};
use crate::meta;

/// Why a node cannot take a pod, in the words of the plugin that refused it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// The reasons (`Insufficient cpu`, `node(s) had untolerated taint {k: v}`).
    pub reasons: Vec<String>,
    /// Whether evicting lower-priority pods could help (only for resources).
    pub resolvable: bool,
}

/// Whether `node`, already running pods that use `used`, can take `pod`.
pub fn fits(pod: &Value, node: &Value, used: Resources) -> Result<(), Refusal> {
    let unresolvable = |reason: String| Refusal {
        reasons: vec![reason],
        resolvable: false,
    };
    if node.pointer("/spec/unschedulable") == Some(&Value::Bool(true))
        && !tolerates_unschedulable(pod)
    {
        return Err(unresolvable("node(s) were unschedulable".into()));
    }
    if let Some(taint) = untolerated_taint(pod, node) {
        let key = taint["key"].as_str().unwrap_or("");
        let value = taint["value"].as_str().unwrap_or("");
        return Err(unresolvable(format!(
            "node(s) had untolerated taint {{{key}: {value}}}"
        )));
    }
    if !matches_node_selector(pod, node) || !matches_required_affinity(pod, node) {
        return Err(unresolvable(
            "node(s) didn't match Pod's node affinity/selector".into(),
        ));
    }
    let reasons = insufficient(pod, node, used);
    if reasons.is_empty() {
        Ok(())
    } else {
        Err(Refusal {
            reasons,
            resolvable: true,
        })
    }
}

/// NodeResourcesFit: `Too many pods`, then `Insufficient cpu`, `Insufficient memory`.
fn insufficient(pod: &Value, node: &Value, used: Resources) -> Vec<String> {
    let wanted = pod_requests(pod);
    let free = Resources::allocatable(node);
    let mut reasons = Vec::new();
    if used.pods + 1 > free.pods {
        reasons.push("Too many pods".to_string());
    }
    if wanted.milli_cpu > 0 && wanted.milli_cpu > free.milli_cpu - used.milli_cpu {
        reasons.push("Insufficient cpu".to_string());
    }
    if wanted.memory > 0 && wanted.memory > free.memory - used.memory {
        reasons.push("Insufficient memory".to_string());
    }
    reasons
}

fn tolerations(pod: &Value) -> &[Value] {
    pod.pointer("/spec/tolerations")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[])
}

/// Whether a toleration matches a taint (`ToleratesTaint`): same effect (or any), and the key with
/// `Exists`, or key and value with `Equal`; an empty key with `Exists` matches every taint.
fn tolerates(toleration: &Value, taint: &Value) -> bool {
    let effect = toleration["effect"].as_str().unwrap_or("");
    if !effect.is_empty() && Some(effect) != taint["effect"].as_str() {
        return false;
    }
    let key = toleration["key"].as_str().unwrap_or("");
    if !key.is_empty() && Some(key) != taint["key"].as_str() {
        return false;
    }
    match toleration["operator"].as_str().unwrap_or("Equal") {
        "Exists" => true,
        "Equal" => {
            toleration["value"].as_str().unwrap_or("") == taint["value"].as_str().unwrap_or("")
        }
        _ => false,
    }
}

/// The first `NoSchedule` or `NoExecute` taint of the node that the pod does not tolerate.
fn untolerated_taint<'a>(pod: &Value, node: &'a Value) -> Option<&'a Value> {
    node.pointer("/spec/taints")
        .and_then(Value::as_array)?
        .iter()
        .filter(|t| matches!(t["effect"].as_str(), Some("NoSchedule" | "NoExecute")))
        .find(|t| !tolerations(pod).iter().any(|tol| tolerates(tol, t)))
}

fn tolerates_unschedulable(pod: &Value) -> bool {
    let taint =
        serde_json::json!({"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"});
    tolerations(pod).iter().any(|t| tolerates(t, &taint))
}

fn matches_node_selector(pod: &Value, node: &Value) -> bool {
    let Some(selector) = pod.pointer("/spec/nodeSelector").and_then(Value::as_object) else {
        return true;
    };
    let labels = node.pointer("/metadata/labels");
    selector
        .iter()
        .all(|(k, v)| labels.and_then(|l| l.get(k)) == Some(v))
}

/// `requiredDuringSchedulingIgnoredDuringExecution`: any term matches; a term matches when all its
/// expressions and fields do; a term with neither matches nothing.
fn matches_required_affinity(pod: &Value, node: &Value) -> bool {
    let Some(terms) = pod
        .pointer("/spec/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms")
        .and_then(Value::as_array)
    else {
        return true;
    };
    let labels: BTreeMap<&str, &str> = node
        .pointer("/metadata/labels")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.as_str(), v.as_str()?)))
                .collect()
        })
        .unwrap_or_default();
    let fields = BTreeMap::from([("metadata.name", meta::name_of(node))]);
    terms.iter().any(|term| {
        let exprs = term["matchExpressions"].as_array();
        let field_exprs = term["matchFields"].as_array();
        if exprs.is_none_or(Vec::is_empty) && field_exprs.is_none_or(Vec::is_empty) {
            return false;
        }
        exprs.into_iter().flatten().all(|e| requirement(e, &labels))
            && field_exprs
                .into_iter()
                .flatten()
                .all(|e| requirement(e, &fields))
    })
}

/// One `NodeSelectorRequirement` against labels (or fields).
fn requirement(expr: &Value, labels: &BTreeMap<&str, &str>) -> bool {
    let key = expr["key"].as_str().unwrap_or("");
    let values: Vec<&str> = expr["values"]
        .as_array()
        .map(|v| v.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let value = labels.get(key).copied();
    let number = |s: &str| s.parse::<i64>().ok();
    match expr["operator"].as_str().unwrap_or("") {
        "In" => value.is_some_and(|v| values.contains(&v)),
        "NotIn" => value.is_none_or(|v| !values.contains(&v)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        "Gt" => match (
            value.and_then(number),
            values.first().and_then(|v| number(v)),
        ) {
            (Some(v), Some(bound)) => v > bound,
            _ => false,
        },
        "Lt" => match (
            value.and_then(number),
            values.first().and_then(|v| number(v)),
        ) {
            (Some(v), Some(bound)) => v < bound,
            _ => false,
        },
        _ => false,
    }
}

/// The `FailedScheduling` message for refusals from every node (`FitError.Error`), with the preemption
/// verdict: reasons counted over nodes and sorted, as the scheduler prints them.
pub fn message(nodes: usize, refusals: &[Refusal]) -> String {
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for r in refusals {
        for reason in &r.reasons {
            *counts.entry(reason).or_default() += 1;
        }
    }
    let mut histogram: Vec<String> = counts.iter().map(|(r, n)| format!("{n} {r}")).collect();
    histogram.sort();
    let mut text = format!("0/{nodes} nodes are available");
    if !histogram.is_empty() {
        text.push_str(": ");
        text.push_str(&histogram.join(", "));
    }
    text.push('.');
    let unresolvable = refusals.iter().filter(|r| !r.resolvable).count();
    let resolvable = refusals.len() - unresolvable;
    let mut preemption = Vec::new();
    if resolvable > 0 {
        preemption.push(format!(
            "{resolvable} No preemption victims found for incoming pod"
        ));
    }
    if unresolvable > 0 {
        preemption.push(format!(
            "{unresolvable} Preemption is not helpful for scheduling"
        ));
    }
    preemption.sort();
    format!(
        "{text} preemption: 0/{nodes} nodes are available: {}.",
        preemption.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node() -> Value {
        json!({"metadata": {"name": "n1", "labels": {"disk": "ssd", "zone": "3"}},
            "status": {"allocatable": {"cpu": "2", "memory": "1Gi", "pods": "2"}}})
    }

    fn refused(pod: &Value, node: &Value, used: Resources) -> String {
        let r = fits(pod, node, used).unwrap_err();
        message(1, &[r])
    }

    #[test]
    fn a_selector_no_node_matches_is_unresolvable() {
        let pod = json!({"spec": {"nodeSelector": {"disk": "hdd"}}});
        assert_eq!(
            refused(&pod, &node(), Resources::default()),
            "0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector. preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling."
        );
    }

    #[test]
    fn required_affinity_terms_are_ored_and_expressions_anded() {
        let pod = |exprs: Value| {
            json!({"spec": {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
                {"nodeSelectorTerms": [{"matchExpressions": exprs}, {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["other"]}]}]}}}}})
        };
        let fit = |p: &Value| fits(p, &node(), Resources::default()).is_ok();
        assert!(fit(&pod(
            json!([{"key": "disk", "operator": "In", "values": ["ssd"]}, {"key": "zone", "operator": "Gt", "values": ["2"]}])
        )));
        assert!(!fit(&pod(
            json!([{"key": "disk", "operator": "In", "values": ["ssd"]}, {"key": "gpu", "operator": "Exists"}])
        )));
    }

    #[test]
    fn taints_need_a_toleration() {
        let mut n = node();
        n["spec"] = json!({"taints": [{"key": "dedicated", "value": "db", "effect": "NoSchedule"},
            {"key": "soft", "effect": "PreferNoSchedule"}]});
        let pod = json!({"spec": {}});
        assert!(
            refused(&pod, &n, Resources::default())
                .contains("1 node(s) had untolerated taint {dedicated: db}")
        );
        let tolerant =
            json!({"spec": {"tolerations": [{"key": "dedicated", "operator": "Exists"}]}});
        assert!(fits(&tolerant, &n, Resources::default()).is_ok());
        let wrong = json!({"spec": {"tolerations": [{"key": "dedicated", "value": "web", "effect": "NoSchedule"}]}});
        assert!(fits(&wrong, &n, Resources::default()).is_err());
    }

    #[test]
    fn resources_and_pod_count_are_checked() {
        let pod = json!({"spec": {"containers": [{"name": "a", "resources": {"requests": {"cpu": "1500m"}}}]}});
        let used = Resources {
            milli_cpu: 1000,
            memory: 0,
            pods: 2,
        };
        assert_eq!(
            refused(&pod, &node(), used),
            "0/1 nodes are available: 1 Insufficient cpu, 1 Too many pods. preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod."
        );
        assert!(fits(&pod, &node(), Resources::default()).is_ok());
    }
}
