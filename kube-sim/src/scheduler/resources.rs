//! Resource quantities and what a pod asks of a node (`pkg/api/v1/resource` `PodRequests`).

use serde_json::Value;

/// A pod's or a node's CPU (millicores), memory (bytes) and pod count.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Resources {
    /// Millicores.
    pub milli_cpu: i64,
    /// Bytes.
    pub memory: i64,
    /// Pods.
    pub pods: i64,
}

impl Resources {
    /// The node's `status.allocatable`.
    pub fn allocatable(node: &Value) -> Resources {
        let a = node.pointer("/status/allocatable");
        let get = |k: &str| a.and_then(|a| a.get(k)).and_then(Value::as_str);
        Resources {
            milli_cpu: get("cpu").and_then(milli).unwrap_or(0),
            memory: get("memory").and_then(milli).unwrap_or(0) / 1000,
            pods: get("pods").and_then(milli).unwrap_or(0) / 1000,
        }
    }

    /// Adds another amount.
    pub fn add(&mut self, other: Resources) {
        self.milli_cpu += other.milli_cpu;
        self.memory += other.memory;
        self.pods += other.pods;
    }
}

/// A quantity (`500m`, `2`, `1Gi`, `128974848`, `129e6`, `123Mi`) in thousandths of its unit, rounded up;
/// `None` when it does not parse.
pub fn milli(quantity: &str) -> Option<i64> {
    let q = quantity.trim();
    let split = q
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-'))
        .unwrap_or(q.len());
    let (number, suffix) = q.split_at(split);
    let number: f64 = number.parse().ok()?;
    let scale: f64 = match suffix {
        "" => 1.0,
        "n" => 1e-9,
        "u" => 1e-6,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        "Ki" => 1024.0,
        "Mi" => 1024f64.powi(2),
        "Gi" => 1024f64.powi(3),
        "Ti" => 1024f64.powi(4),
        "Pi" => 1024f64.powi(5),
        "Ei" => 1024f64.powi(6),
        s if s.starts_with(['e', 'E']) => 10f64.powi(s[1..].parse().ok()?),
        _ => return None,
    };
    Some((number * scale * 1000.0).ceil() as i64)
}

/// One container's value of a resource under `requests` or `limits`, in thousandths.
fn container_value(c: &Value, kind: &str, resource: &str) -> Option<i64> {
    c.pointer(&format!("/resources/{kind}/{resource}"))
        .and_then(Value::as_str)
        .and_then(milli)
}

/// A container's request of a resource, defaulted from its limit as the API server defaults it.
pub fn container_request(c: &Value, resource: &str) -> Option<i64> {
    container_value(c, "requests", resource).or_else(|| container_value(c, "limits", resource))
}

/// A container's limit of a resource.
pub fn container_limit(c: &Value, resource: &str) -> Option<i64> {
    container_value(c, "limits", resource)
}

/// What a pod asks of a node: the sum over its containers, at least the largest init container's
/// (sidecars, restartable init containers, add to both), plus the pod overhead; and one pod.
pub fn pod_requests(pod: &Value) -> Resources {
    let containers = |k: &str| {
        pod.pointer(&format!("/spec/{k}"))
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    };
    let amount = |resource: &str| {
        let mut sum: i64 = containers("containers")
            .iter()
            .filter_map(|c| container_request(c, resource))
            .sum();
        let mut sidecars = 0;
        let mut init_max = 0;
        for c in containers("initContainers") {
            let request = container_request(&c, resource).unwrap_or(0);
            if c["restartPolicy"] == "Always" {
                sidecars += request;
                sum += request;
            } else {
                init_max = init_max.max(sidecars + request);
            }
        }
        let overhead = pod
            .pointer(&format!("/spec/overhead/{resource}"))
            .and_then(Value::as_str)
            .and_then(milli)
            .unwrap_or(0);
        sum.max(init_max) + overhead
    };
    Resources {
        milli_cpu: amount("cpu"),
        memory: amount("memory") / 1000,
        pods: 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn quantities_parse_in_thousandths() {
        assert_eq!(milli("500m"), Some(500));
        assert_eq!(milli("2"), Some(2000));
        assert_eq!(milli("1Ki"), Some(1_024_000));
        assert_eq!(milli("1.5"), Some(1500));
        assert_eq!(milli("129e6"), Some(129_000_000_000));
        assert_eq!(milli("8145440Ki"), Some(8_145_440 * 1024 * 1000));
        assert_eq!(milli("lots"), None);
    }

    #[test]
    fn requests_default_from_limits_and_count_init_containers() {
        let pod = json!({"spec": {
            "initContainers": [{"name": "i", "resources": {"requests": {"cpu": "3"}}}],
            "containers": [
                {"name": "a", "resources": {"limits": {"cpu": "500m", "memory": "1Mi"}}},
                {"name": "b", "resources": {"requests": {"cpu": "1"}}}]}});
        let r = pod_requests(&pod);
        assert_eq!(r.milli_cpu, 3000);
        assert_eq!(r.memory, 1024 * 1024);
        assert_eq!(r.pods, 1);
    }
}
