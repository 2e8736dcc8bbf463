//! Server-side printing: `meta.k8s.io/v1` `Table` responses with the columns kubectl shows for each type.

use serde_json::{Map, Value, json};

use crate::resource::ResourceInfo;

/// What each row carries besides its cells (`includeObject`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IncludeObject {
    /// No object.
    None,
    /// `PartialObjectMetadata` (the default).
    Metadata,
    /// The whole object.
    Object,
}

impl IncludeObject {
    /// Parses the query parameter.
    pub fn parse(v: Option<&str>) -> IncludeObject {
        match v {
            Some("None") => IncludeObject::None,
            Some("Object") => IncludeObject::Object,
            _ => IncludeObject::Metadata,
        }
    }
}

/// Whether an `Accept` header asks for a `Table`.
pub fn wants_table(accept: &str) -> bool {
    accept
        .split(',')
        .next()
        .is_some_and(|first| first.contains("as=Table"))
}

struct Column {
    name: String,
    kind: String,
    priority: i64,
}

/// The columns kubectl shows for a built-in type, `|`-separated: a name ending in `#` is an integer, in `@` a
/// date, and one ending in `*` is shown only with `-o wide` (priority 1); the rest are strings.
fn built_in_columns(group: &str, plural: &str) -> &'static str {
    match (group, plural) {
        ("", "pods") => "Name|Ready|Status|Restarts|Age|IP*|Node*",
        ("apps", "deployments") => {
            "Name|Ready|Up-to-date#|Available#|Age|Containers*|Images*|Selector*"
        }
        ("apps", "replicasets") => {
            "Name|Desired#|Current#|Ready#|Age|Containers*|Images*|Selector*"
        }
        ("", "services") => "Name|Type|Cluster-IP|External-IP|Port(s)|Age|Selector*",
        ("", "namespaces") => "Name|Status|Age",
        ("", "configmaps") => "Name|Data#|Age",
        ("", "secrets") => "Name|Type|Data#|Age",
        ("", "serviceaccounts") => "Name|Secrets#|Age",
        ("", "nodes") => "Name|Status|Roles|Age|Version",
        ("", "events") => "Last Seen|Type|Reason|Object|Message",
        ("apiextensions.k8s.io", "customresourcedefinitions") => "Name|Created At@",
        _ => "Name|Age",
    }
}

/// Reads one column of [`built_in_columns`].
fn column(spec: &str) -> Column {
    let (spec, priority) = match spec.strip_suffix('*') {
        Some(name) => (name, 1),
        None => (spec, 0),
    };
    let (name, kind) = if let Some(name) = spec.strip_suffix('#') {
        (name, "integer")
    } else if let Some(name) = spec.strip_suffix('@') {
        (name, "date")
    } else {
        (spec, "string")
    };
    Column {
        name: name.to_string(),
        kind: kind.to_string(),
        priority,
    }
}

fn columns(info: &ResourceInfo, version: &str) -> Vec<Column> {
    if info.is_custom() {
        return custom_columns(info, version);
    }
    let spec = built_in_columns(&info.group, &info.plural);
    spec.split('|').map(column).collect()
}

/// A custom resource's columns: its printer columns after the name, or the name and age when it has none.
fn custom_columns(info: &ResourceInfo, version: &str) -> Vec<Column> {
    let custom = info.printer_columns(version);
    if custom.is_empty() {
        return vec![column("Name"), column("Age")];
    }
    let mut cols = vec![column("Name")];
    cols.extend(custom.iter().map(|c| Column {
        name: c.name.clone(),
        kind: c.type_.clone(),
        priority: c.priority,
    }));
    cols
}

fn s<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}

fn n(v: &Value, pointer: &str) -> i64 {
    v.pointer(pointer).and_then(Value::as_i64).unwrap_or(0)
}

fn containers(obj: &Value) -> (String, String) {
    let list = obj
        .pointer("/spec/template/spec/containers")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let names: Vec<&str> = list.iter().map(|c| s(c, "/name")).collect();
    let images: Vec<&str> = list.iter().map(|c| s(c, "/image")).collect();
    (names.join(","), images.join(","))
}

fn selector(obj: &Value, pointer: &str) -> String {
    let sel = obj.pointer(pointer).and_then(Value::as_object);
    let parts: Vec<String> = sel
        .map(|m| {
            m.iter()
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
                .collect()
        })
        .unwrap_or_default();
    if parts.is_empty() {
        "<none>".to_string()
    } else {
        parts.join(",")
    }
}

fn pod_status(pod: &Value) -> String {
    if pod.pointer("/metadata/deletionTimestamp").is_some() {
        return "Terminating".to_string();
    }
    let statuses = pod
        .pointer("/status/containerStatuses")
        .and_then(Value::as_array);
    if let Some(list) = statuses {
        for c in list {
            if let Some(reason) = c.pointer("/state/waiting/reason").and_then(Value::as_str) {
                return reason.to_string();
            }
            if let Some(reason) = c
                .pointer("/state/terminated/reason")
                .and_then(Value::as_str)
            {
                return reason.to_string();
            }
        }
    }
    let phase = s(pod, "/status/phase");
    if phase.is_empty() {
        "Unknown".to_string()
    } else {
        phase.to_string()
    }
}

fn cells(info: &ResourceInfo, version: &str, obj: &Value) -> Vec<Value> {
    let name = json!(s(obj, "/metadata/name"));
    let age_cell = json!(age(s(obj, "/metadata/creationTimestamp")));
    if info.is_custom() {
        return custom_cells(info, version, obj, name, age_cell);
    }
    match (info.group.as_str(), info.plural.as_str()) {
        ("", "pods") => pod_cells(obj, name, age_cell),
        ("apps", "deployments") => deployment_cells(obj, name, age_cell),
        ("apps", "replicasets") => replica_set_cells(obj, name, age_cell),
        ("", "services") => service_cells(obj, name, age_cell),
        ("", "namespaces") => vec![name, json!(s(obj, "/status/phase")), age_cell],
        ("", "configmaps") => {
            let count = |k: &str| {
                obj.get(k)
                    .and_then(Value::as_object)
                    .map(Map::len)
                    .unwrap_or(0)
            };
            vec![name, json!(count("data") + count("binaryData")), age_cell]
        }
        ("", "secrets") => {
            let count = obj
                .get("data")
                .and_then(Value::as_object)
                .map(Map::len)
                .unwrap_or(0);
            vec![name, json!(s(obj, "/type")), json!(count), age_cell]
        }
        ("", "serviceaccounts") => {
            let count = obj
                .get("secrets")
                .and_then(Value::as_array)
                .map(Vec::len)
                .unwrap_or(0);
            vec![name, json!(count), age_cell]
        }
        ("", "nodes") => node_cells(obj, name, age_cell),
        ("", "events") => event_cells(obj),
        ("apiextensions.k8s.io", "customresourcedefinitions") => {
            vec![name, json!(s(obj, "/metadata/creationTimestamp"))]
        }
        _ => vec![name, age_cell],
    }
}

/// A custom resource: its printer columns, or the name and age when it has none.
fn custom_cells(
    info: &ResourceInfo,
    version: &str,
    obj: &Value,
    name: Value,
    age_cell: Value,
) -> Vec<Value> {
    let custom = info.printer_columns(version);
    if custom.is_empty() {
        return vec![name, age_cell];
    }
    let mut cells = vec![name];
    cells.extend(custom.iter().map(|c| match json_path(obj, &c.json_path) {
        Some(Value::String(t)) if c.type_ == "date" => json!(age(t)),
        Some(v) => v.clone(),
        None => Value::Null,
    }));
    cells
}

/// A pod: ready containers, status, restarts, age, IP and node.
fn pod_cells(obj: &Value, name: Value, age_cell: Value) -> Vec<Value> {
    let total = obj
        .pointer("/spec/containers")
        .and_then(Value::as_array)
        .map(Vec::len)
        .unwrap_or(0);
    let statuses = obj
        .pointer("/status/containerStatuses")
        .and_then(Value::as_array);
    let ready = statuses
        .map(|l| l.iter().filter(|c| c["ready"] == true).count())
        .unwrap_or(0);
    let restarts: i64 = statuses
        .map(|l| l.iter().map(|c| n(c, "/restartCount")).sum())
        .unwrap_or(0);
    let ip = s(obj, "/status/podIP");
    let node = s(obj, "/spec/nodeName");
    vec![
        name,
        json!(format!("{ready}/{total}")),
        json!(pod_status(obj)),
        json!(restarts.to_string()),
        age_cell,
        json!(if ip.is_empty() { "<none>" } else { ip }),
        json!(if node.is_empty() { "<none>" } else { node }),
    ]
}

/// A Deployment: ready, up-to-date and available replicas, age, containers, images and selector.
fn deployment_cells(obj: &Value, name: Value, age_cell: Value) -> Vec<Value> {
    let (names, images) = containers(obj);
    vec![
        name,
        json!(format!(
            "{}/{}",
            n(obj, "/status/readyReplicas"),
            n(obj, "/spec/replicas")
        )),
        json!(n(obj, "/status/updatedReplicas")),
        json!(n(obj, "/status/availableReplicas")),
        age_cell,
        json!(names),
        json!(images),
        json!(selector(obj, "/spec/selector/matchLabels")),
    ]
}

/// A ReplicaSet: desired, current and ready replicas, age, containers, images and selector.
fn replica_set_cells(obj: &Value, name: Value, age_cell: Value) -> Vec<Value> {
    let (names, images) = containers(obj);
    vec![
        name,
        json!(n(obj, "/spec/replicas")),
        json!(n(obj, "/status/replicas")),
        json!(n(obj, "/status/readyReplicas")),
        age_cell,
        json!(names),
        json!(images),
        json!(selector(obj, "/spec/selector/matchLabels")),
    ]
}

/// A Service: type, cluster IP, external IP, ports, age and selector.
fn service_cells(obj: &Value, name: Value, age_cell: Value) -> Vec<Value> {
    let ports: Vec<String> = obj
        .pointer("/spec/ports")
        .and_then(Value::as_array)
        .map(|l| {
            l.iter()
                .map(|p| format!("{}/{}", n(p, "/port"), s(p, "/protocol")))
                .collect()
        })
        .unwrap_or_default();
    let cluster_ip = s(obj, "/spec/clusterIP");
    vec![
        name,
        json!(s(obj, "/spec/type")),
        json!(if cluster_ip.is_empty() {
            "<none>"
        } else {
            cluster_ip
        }),
        json!("<none>"),
        json!(if ports.is_empty() {
            "<none>".to_string()
        } else {
            ports.join(",")
        }),
        age_cell,
        json!(selector(obj, "/spec/selector")),
    ]
}

/// A node: status, roles, age and kubelet version.
fn node_cells(obj: &Value, name: Value, age_cell: Value) -> Vec<Value> {
    let ready = obj
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .and_then(|l| l.iter().find(|c| c["type"] == "Ready"))
        .map(|c| {
            if c["status"] == "True" {
                "Ready"
            } else {
                "NotReady"
            }
        })
        .unwrap_or("Unknown");
    vec![
        name,
        json!(ready),
        json!("<none>"),
        age_cell,
        json!(s(obj, "/status/nodeInfo/kubeletVersion")),
    ]
}

/// An event: last seen, type, reason, object and message.
fn event_cells(obj: &Value) -> Vec<Value> {
    let last = [
        s(obj, "/lastTimestamp"),
        s(obj, "/eventTime"),
        s(obj, "/metadata/creationTimestamp"),
    ]
    .into_iter()
    .find(|t| !t.is_empty())
    .unwrap_or("");
    vec![
        json!(age(last)),
        json!(s(obj, "/type")),
        json!(s(obj, "/reason")),
        json!(format!(
            "{}/{}",
            s(obj, "/involvedObject/kind").to_lowercase(),
            s(obj, "/involvedObject/name")
        )),
        json!(s(obj, "/message")),
    ]
}

fn row_object(obj: &Value, include: IncludeObject) -> Option<Value> {
    match include {
        IncludeObject::None => None,
        IncludeObject::Object => Some(obj.clone()),
        IncludeObject::Metadata => {
            let mut md = obj.get("metadata").cloned().unwrap_or_else(|| json!({}));
            if let Value::Object(m) = &mut md {
                m.remove("managedFields");
            }
            Some(
                json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": md}),
            )
        }
    }
}

/// Renders objects as a `Table`; `list_metadata` is the list's metadata (or `{}` for one object).
pub fn render(
    info: &ResourceInfo,
    version: &str,
    objects: &[Value],
    list_metadata: Value,
    include: IncludeObject,
) -> Value {
    let defs: Vec<Value> = columns(info, version)
        .iter()
        .map(|c| {
            json!({"name": c.name, "type": c.kind, "format": if c.name == "Name" { "name" } else { "" },
                "description": c.name, "priority": c.priority})
        })
        .collect();
    let rows: Vec<Value> = objects
        .iter()
        .map(|o| {
            let mut row = json!({"cells": cells(info, version, o)});
            if let (Some(obj), Value::Object(m)) = (row_object(o, include), &mut row) {
                m.insert("object".into(), obj);
            }
            row
        })
        .collect();
    json!({"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": list_metadata, "columnDefinitions": defs, "rows": rows})
}

/// Evaluates the simple JSONPath of printer columns: `.a.b`, `[n]`, `[*]` (first item) and
/// `[?(@.key=="value")]` (first match).
pub fn json_path<'v>(obj: &'v Value, path: &str) -> Option<&'v Value> {
    let path = path.trim().trim_start_matches('{').trim_end_matches('}');
    let mut cur = obj;
    let mut rest = path;
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix('.') {
            let end = r.find(['.', '[']).unwrap_or(r.len());
            let field = &r[..end];
            if !field.is_empty() {
                cur = cur.get(field)?;
            }
            rest = &r[end..];
        } else if let Some(r) = rest.strip_prefix('[') {
            let end = r.find(']')?;
            let inner = &r[..end];
            let items = cur.as_array()?;
            cur = if inner == "*" {
                items.first()?
            } else if let Some(filter) =
                inner.strip_prefix("?(@.").and_then(|f| f.strip_suffix(')'))
            {
                let (key, value) = filter.split_once("==")?;
                let value = value.trim().trim_matches(|c| c == '"' || c == '\'');
                items.iter().find(|i| {
                    json_path(i, &format!(".{}", key.trim())).and_then(Value::as_str) == Some(value)
                })?
            } else {
                items.get(inner.parse::<usize>().ok()?)?
            };
            rest = &r[end + 1..];
        } else {
            let end = rest.find(['.', '[']).unwrap_or(rest.len());
            cur = cur.get(&rest[..end])?;
            rest = &rest[end..];
        }
    }
    Some(cur)
}

/// A duration since an RFC 3339 timestamp, printed like Kubernetes' `HumanDuration`.
pub fn age(timestamp: &str) -> String {
    let Ok(then) = timestamp.parse::<jiff::Timestamp>() else {
        return "<unknown>".to_string();
    };
    let secs = jiff::Timestamp::now().as_second() - then.as_second();
    human_duration(secs)
}

/// Kubernetes' `duration.HumanDuration` on whole seconds.
pub fn human_duration(secs: i64) -> String {
    if secs < -1 {
        return "<invalid>".to_string();
    }
    if secs < 0 {
        return "0s".to_string();
    }
    if secs < 120 {
        return format!("{secs}s");
    }
    let minutes = secs / 60;
    if minutes < 10 {
        let s = secs % 60;
        return if s == 0 {
            format!("{minutes}m")
        } else {
            format!("{minutes}m{s}s")
        };
    }
    if minutes < 180 {
        return format!("{minutes}m");
    }
    let hours = secs / 3600;
    if hours < 8 {
        let m = minutes % 60;
        return if m == 0 {
            format!("{hours}h")
        } else {
            format!("{hours}h{m}m")
        };
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    if hours < 24 * 8 {
        let h = hours % 24;
        return if h == 0 {
            format!("{}d", hours / 24)
        } else {
            format!("{}d{h}h", hours / 24)
        };
    }
    if hours < 24 * 365 * 2 {
        return format!("{}d", hours / 24);
    }
    if hours < 24 * 365 * 8 {
        let dy = (hours / 24) % 365;
        return if dy == 0 {
            format!("{}y", hours / 24 / 365)
        } else {
            format!("{}y{dy}d", hours / 24 / 365)
        };
    }
    format!("{}y", hours / 24 / 365)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human_duration_matches_kubernetes() {
        assert_eq!(human_duration(5), "5s");
        assert_eq!(human_duration(119), "119s");
        assert_eq!(human_duration(150), "2m30s");
        assert_eq!(human_duration(600), "10m");
        assert_eq!(human_duration(3 * 3600 + 120), "3h2m");
        assert_eq!(human_duration(30 * 3600), "30h");
        assert_eq!(human_duration(3 * 86400 + 3600), "3d1h");
        assert_eq!(human_duration(100 * 86400), "100d");
    }

    #[test]
    fn printer_column_paths_resolve() {
        let obj = json!({"spec": {"replicas": 3, "items": [{"n": "a"}]},
            "status": {"conditions": [{"type": "Other", "status": "False"}, {"type": "Ready", "status": "True"}]}});
        assert_eq!(json_path(&obj, ".spec.replicas"), Some(&json!(3)));
        assert_eq!(json_path(&obj, ".spec.items[0].n"), Some(&json!("a")));
        assert_eq!(
            json_path(&obj, ".status.conditions[?(@.type==\"Ready\")].status"),
            Some(&json!("True"))
        );
        assert_eq!(json_path(&obj, ".status.missing"), None);
    }

    #[test]
    fn accept_headers_select_tables() {
        assert!(wants_table(
            "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"
        ));
        assert!(!wants_table("application/json"));
        assert!(!wants_table(
            "application/json, application/json;as=Table;v=v1;g=meta.k8s.io"
        ));
    }
}
