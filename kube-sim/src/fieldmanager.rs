//! Field ownership (`metadata.managedFields`) and server-side apply.
//!
//! A field set is a set of paths; a path is a list of `fieldsV1` keys (`f:<name>`, `k:<json>` for an item
//! of a list-map, `v:<json>` for an item of a set, `i:<n>` for an index). Applies record the applied
//! configuration's paths under the manager with operation `Apply`; other writes give the writer the paths
//! whose values they changed (operation `Update`) and take those paths away from other managers.

use std::collections::BTreeSet;

use serde_json::{Map, Value};

use crate::meta;
use crate::schema::{ListType, Node, key_value};

/// One path in a field set, as a list of `fieldsV1` keys.
pub type Path = Vec<String>;

/// An apply could not be done.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum Error {
    /// Fields set by the apply are owned by other managers with different values.
    #[error("{message}")]
    Conflict {
        /// The Kubernetes message, `Apply failed with 1 conflict: …`.
        message: String,
        /// `(manager description, field path)` pairs for the Status causes.
        causes: Vec<(String, String)>,
    },
}

/// One `managedFields` entry.
#[derive(Clone, Debug, PartialEq)]
pub struct Entry {
    /// The field manager.
    pub manager: String,
    /// `Apply` or `Update`.
    pub operation: String,
    /// The `apiVersion` the manager wrote with.
    pub api_version: String,
    /// When the manager last wrote.
    pub time: String,
    /// The subresource written to, if any.
    pub subresource: Option<String>,
    /// The owned paths.
    pub fields: BTreeSet<Path>,
}

impl Entry {
    fn same_slot(&self, manager: &str, operation: &str, subresource: Option<&str>) -> bool {
        self.manager == manager
            && self.operation == operation
            && self.subresource.as_deref() == subresource
    }

    fn describe(&self) -> String {
        let mut s = format!("{:?}", self.manager);
        if let Some(sub) = &self.subresource {
            s = format!("{s} with subresource {sub:?}");
        }
        if self.operation == "Update" {
            s = format!("{s} using {}", self.api_version);
        }
        s
    }
}

/// Reads `metadata.managedFields` of an object.
pub fn read_entries(obj: &Value) -> Vec<Entry> {
    let Some(list) = obj
        .pointer("/metadata/managedFields")
        .and_then(Value::as_array)
    else {
        return Vec::new();
    };
    list.iter()
        .map(|e| Entry {
            manager: meta::str_at(e, "/manager").unwrap_or("").to_string(),
            operation: meta::str_at(e, "/operation")
                .unwrap_or("Update")
                .to_string(),
            api_version: meta::str_at(e, "/apiVersion").unwrap_or("").to_string(),
            time: meta::str_at(e, "/time").unwrap_or("").to_string(),
            subresource: meta::str_at(e, "/subresource").map(str::to_string),
            fields: e.get("fieldsV1").map(from_fields_v1).unwrap_or_default(),
        })
        .collect()
}

/// Writes entries into `metadata.managedFields` (removing the key when there are none). Each entry's
/// `fieldsV1` is kept as its JSON text, as kube-apiserver keeps `FieldsV1.Raw`: one string instead of a
/// tree of small maps, which was about half of a pod's size in memory. [`crate::wire::Wire`] writes the
/// text back as the tree it holds, so clients see no difference.
pub fn write_entries(obj: &mut Value, entries: &[Entry]) {
    let md = meta::metadata_mut(obj);
    if entries.is_empty() {
        md.remove("managedFields");
        return;
    }
    let list = entries
        .iter()
        .map(|e| {
            let mut m = Map::new();
            m.insert("manager".into(), Value::String(e.manager.clone()));
            m.insert("operation".into(), Value::String(e.operation.clone()));
            m.insert("apiVersion".into(), Value::String(e.api_version.clone()));
            m.insert("time".into(), Value::String(e.time.clone()));
            m.insert("fieldsType".into(), Value::String("FieldsV1".into()));
            m.insert("fieldsV1".into(), Value::String(fields_v1_text(&e.fields)));
            if let Some(s) = &e.subresource {
                m.insert("subresource".into(), Value::String(s.clone()));
            }
            Value::Object(m)
        })
        .collect();
    md.insert("managedFields".into(), Value::Array(list));
}

/// Removes the `time` of every managed-fields entry, for comparing objects while ignoring timestamps.
pub fn strip_times(obj: &mut Value) {
    if let Some(Value::Array(list)) = obj.pointer_mut("/metadata/managedFields") {
        for e in list {
            if let Value::Object(m) = e {
                m.remove("time");
            }
        }
    }
}

/// A path set as a trie: what `fieldsV1` spells out.
#[derive(Default)]
struct Tree<'a> {
    owned: bool,
    children: std::collections::BTreeMap<&'a str, Tree<'a>>,
}

impl<'a> Tree<'a> {
    fn of(set: &'a BTreeSet<Path>) -> Tree<'a> {
        let mut root = Tree::default();
        for path in set {
            let mut node = &mut root;
            for key in path {
                node = node.children.entry(key.as_str()).or_default();
            }
            node.owned = true;
        }
        root
    }

    /// The members of this node's `fieldsV1` object, in order: `.` when the node itself is owned and
    /// has children, then the children by key.
    fn members(&self) -> impl Iterator<Item = (&'a str, Option<&Tree<'a>>)> {
        let dot = (self.owned && !self.children.is_empty()).then_some((".", None));
        dot.into_iter()
            .chain(self.children.iter().map(|(k, c)| (*k, Some(c))))
    }
}

/// Converts a path set to the `fieldsV1` tree.
pub fn to_fields_v1(set: &BTreeSet<Path>) -> Value {
    fn render(t: &Tree<'_>) -> Value {
        let members = t.members().map(|(k, c)| {
            let v = c.map_or_else(|| Value::Object(Map::new()), render);
            (k.to_string(), v)
        });
        Value::Object(members.collect())
    }
    render(&Tree::of(set))
}

/// The `fieldsV1` tree of a path set as compact JSON text, the same text `to_fields_v1(set).to_string()`
/// gives, written without building the tree.
pub fn fields_v1_text(set: &BTreeSet<Path>) -> String {
    fn write(t: &Tree<'_>, out: &mut String) {
        out.push('{');
        for (i, (k, c)) in t.members().enumerate() {
            if i > 0 {
                out.push(',');
            }
            // Serializing a string into a string cannot fail.
            out.push_str(&serde_json::to_string(k).unwrap_or_default());
            out.push(':');
            match c {
                Some(c) => write(c, out),
                None => out.push_str("{}"),
            }
        }
        out.push('}');
    }
    let mut out = String::new();
    write(&Tree::of(set), &mut out);
    out
}

/// Parses a `fieldsV1` tree, or the JSON text of one as the store keeps it, into a path set.
pub fn from_fields_v1(v: &Value) -> BTreeSet<Path> {
    if let Value::String(text) = v {
        return serde_json::from_str::<Value>(text)
            .map(|tree| from_fields_v1(&tree))
            .unwrap_or_default();
    }
    fn walk(v: &Value, prefix: &mut Path, out: &mut BTreeSet<Path>) {
        let Some(m) = v.as_object() else { return };
        if m.is_empty() && !prefix.is_empty() {
            out.insert(prefix.clone());
            return;
        }
        for (k, c) in m {
            if k == "." {
                out.insert(prefix.clone());
                continue;
            }
            prefix.push(k.clone());
            walk(c, prefix, out);
            prefix.pop();
        }
    }
    let mut out = BTreeSet::new();
    walk(v, &mut Vec::new(), &mut out);
    out
}

fn canonical_key(item: &Value, keys: &[String]) -> String {
    let mut m = Map::new();
    for k in keys {
        let v = key_value(item, k);
        if !v.is_null() {
            m.insert(k.clone(), v);
        }
    }
    format!("k:{}", Value::Object(m))
}

const STRIPPED_METADATA: &[&str] = &[
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "managedFields",
    "selfLink",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
];

/// The paths of every field set in an object, skipping identity fields and, unless `with_status`, `status`.
pub fn paths_of(obj: &Value, node: &Node<'_>, with_status: bool) -> BTreeSet<Path> {
    let mut out = BTreeSet::new();
    let Some(m) = obj.as_object() else { return out };
    for (k, v) in m {
        if k == "apiVersion" || k == "kind" || (k == "status" && !with_status) {
            continue;
        }
        let mut prefix = vec![format!("f:{k}")];
        if k == "metadata" {
            if let Some(md) = v.as_object() {
                for (mk, mv) in md {
                    if STRIPPED_METADATA.contains(&mk.as_str()) {
                        continue;
                    }
                    prefix.push(format!("f:{mk}"));
                    collect(mv, &node.field(k).field(mk), &mut prefix, &mut out);
                    prefix.pop();
                }
            }
            continue;
        }
        collect(v, &node.field(k), &mut prefix, &mut out);
    }
    out
}

fn collect(v: &Value, node: &Node<'_>, prefix: &mut Path, out: &mut BTreeSet<Path>) {
    match v {
        Value::Object(m) if !m.is_empty() => {
            for (k, c) in m {
                prefix.push(format!("f:{k}"));
                collect(c, &node.field(k), prefix, out);
                prefix.pop();
            }
        }
        Value::Array(items) if !items.is_empty() => match node.list_type() {
            ListType::Atomic => {
                out.insert(prefix.clone());
            }
            ListType::Set => {
                for i in items {
                    prefix.push(format!("v:{i}"));
                    out.insert(prefix.clone());
                    prefix.pop();
                }
            }
            ListType::Map(keys) => {
                let item_node = node.item();
                for i in items {
                    prefix.push(canonical_key(i, &keys));
                    out.insert(prefix.clone());
                    collect(i, &item_node, prefix, out);
                    prefix.pop();
                }
            }
        },
        _ => {
            out.insert(prefix.clone());
        }
    }
}

/// The value at a path, if present.
pub fn value_at<'v>(obj: &'v Value, path: &[String]) -> Option<&'v Value> {
    let mut cur = obj;
    for key in path {
        cur = step(cur, key)?;
    }
    Some(cur)
}

fn step<'v>(cur: &'v Value, key: &str) -> Option<&'v Value> {
    if let Some(f) = key.strip_prefix("f:") {
        return cur.get(f);
    }
    cur.as_array()?.get(position(cur, key)?)
}

fn position(cur: &Value, key: &str) -> Option<usize> {
    let items = cur.as_array()?;
    if let Some(k) = key.strip_prefix("k:") {
        let want: Map<String, Value> = serde_json::from_str(k).ok()?;
        return items
            .iter()
            .position(|i| want.iter().all(|(wk, wv)| key_value(i, wk) == *wv));
    }
    if let Some(v) = key.strip_prefix("v:") {
        let want: Value = serde_json::from_str(v).ok()?;
        return items.iter().position(|i| *i == want);
    }
    key.strip_prefix("i:")?
        .parse::<usize>()
        .ok()
        .filter(|n| *n < items.len())
}

fn remove_at(cur: &mut Value, path: &[String]) {
    let Some((first, rest)) = path.split_first() else {
        return;
    };
    if let Some(f) = first.strip_prefix("f:") {
        let Value::Object(m) = cur else { return };
        if rest.is_empty() {
            m.remove(f);
        } else if let Some(c) = m.get_mut(f) {
            remove_at(c, rest);
        }
        return;
    }
    let Some(pos) = position(cur, first) else {
        return;
    };
    let Value::Array(items) = cur else { return };
    if rest.is_empty() {
        items.remove(pos);
    } else {
        remove_at(&mut items[pos], rest);
    }
}

/// Whether two objects differ at a path: list-map items compare by presence, everything else by value.
fn differs(a: &Value, b: &Value, path: &[String]) -> bool {
    let (x, y) = (value_at(a, path), value_at(b, path));
    if path.last().is_some_and(|k| k.starts_with("k:")) {
        return x.is_some() != y.is_some();
    }
    x != y
}

/// Merges an applied configuration into a live object following the list types.
pub fn merge_applied(live: &mut Value, applied: &Value, node: &Node<'_>) {
    match (live, applied) {
        (Value::Object(l), Value::Object(a)) => {
            for (k, av) in a {
                let child = node.field(k);
                match l.get_mut(k) {
                    Some(lv) => merge_applied(lv, av, &child),
                    None => {
                        l.insert(k.clone(), av.clone());
                    }
                }
            }
        }
        (Value::Array(l), Value::Array(a)) => match node.list_type() {
            ListType::Atomic => *l = a.clone(),
            ListType::Set => {
                for i in a {
                    if !l.contains(i) {
                        l.push(i.clone());
                    }
                }
            }
            ListType::Map(keys) => {
                let item_node = node.item();
                for ai in a {
                    let akey = canonical_key(ai, &keys);
                    match l.iter_mut().find(|li| canonical_key(li, &keys) == akey) {
                        Some(li) => merge_applied(li, ai, &item_node),
                        None => l.push(ai.clone()),
                    }
                }
            }
        },
        (l, a) => *l = a.clone(),
    }
}

/// The inputs of one server-side apply.
pub struct Apply<'a> {
    /// The field manager.
    pub manager: &'a str,
    /// The `apiVersion` applied with.
    pub api_version: &'a str,
    /// Whether conflicts are overridden.
    pub force: bool,
    /// `Some("status")` for applies to the status subresource.
    pub subresource: Option<&'a str>,
    /// The type of the object.
    pub node: Node<'a>,
}

/// Applies a configuration to a live object (an empty object when creating) and returns the merged object
/// with updated `managedFields`, or the conflicts.
pub fn apply(live: &Value, applied: &Value, req: &Apply<'_>) -> Result<Value, Error> {
    let with_status = req.subresource == Some("status");
    let applied_paths = paths_of(applied, &req.node, with_status);
    let mut entries = read_entries(live);
    let previous: BTreeSet<Path> = entries
        .iter()
        .find(|e| e.same_slot(req.manager, "Apply", req.subresource))
        .map(|e| e.fields.clone())
        .unwrap_or_default();

    let mut merged = live.clone();
    let others_own = |p: &Path, entries: &[Entry]| {
        entries
            .iter()
            .any(|e| !e.same_slot(req.manager, "Apply", req.subresource) && e.fields.contains(p))
    };
    let mut dropped: Vec<&Path> = previous
        .iter()
        .filter(|p| !applied_paths.contains(*p) && !others_own(p, &entries))
        .collect();
    dropped.sort_by_key(|p| std::cmp::Reverse(p.len()));
    for p in dropped {
        remove_at(&mut merged, p);
    }
    merge_applied(&mut merged, &applied_body(applied, with_status), &req.node);

    let mut conflicts: Vec<(String, Path)> = Vec::new();
    for e in entries
        .iter()
        .filter(|e| !e.same_slot(req.manager, "Apply", req.subresource))
    {
        for p in applied_paths.intersection(&e.fields) {
            if differs(live, &merged, p) {
                conflicts.push((e.describe(), p.clone()));
            }
        }
    }
    if !conflicts.is_empty() && !req.force {
        return Err(conflict_error(&conflicts));
    }
    for e in entries
        .iter_mut()
        .filter(|e| !e.same_slot(req.manager, "Apply", req.subresource))
    {
        e.fields
            .retain(|p| !(applied_paths.contains(p) && differs(live, &merged, p)));
    }
    let now = meta::now_rfc3339();
    match entries
        .iter_mut()
        .find(|e| e.same_slot(req.manager, "Apply", req.subresource))
    {
        Some(e) => {
            e.fields = applied_paths;
            e.api_version = req.api_version.to_string();
            e.time = now;
        }
        None => entries.push(Entry {
            manager: req.manager.to_string(),
            operation: "Apply".to_string(),
            api_version: req.api_version.to_string(),
            time: now,
            subresource: req.subresource.map(str::to_string),
            fields: applied_paths,
        }),
    }
    entries.retain(|e| !e.fields.is_empty());
    write_entries(&mut merged, &entries);
    Ok(merged)
}

/// The configuration as it is merged: without `status` (unless applied to the status subresource) and
/// without the system metadata a client cannot set.
fn applied_body(applied: &Value, with_status: bool) -> Value {
    let mut body = applied.clone();
    if let Value::Object(m) = &mut body {
        if !with_status {
            m.remove("status");
        }
        if let Some(Value::Object(md)) = m.get_mut("metadata") {
            for k in STRIPPED_METADATA {
                if *k != "name" && *k != "namespace" {
                    md.remove(*k);
                }
            }
        }
    }
    body
}

fn conflict_error(conflicts: &[(String, Path)]) -> Error {
    let causes: Vec<(String, String)> = conflicts
        .iter()
        .map(|(m, p)| (m.clone(), path_string(p)))
        .collect();
    let message = if causes.len() == 1 {
        format!(
            "Apply failed with 1 conflict: conflict with {}: {}",
            causes[0].0, causes[0].1
        )
    } else {
        let mut managers: Vec<&String> = causes.iter().map(|(m, _)| m).collect();
        managers.sort();
        managers.dedup();
        let mut lines = Vec::new();
        for m in managers {
            lines.push(format!("conflicts with {m}:"));
            for (_, p) in causes.iter().filter(|(cm, _)| cm == m) {
                lines.push(format!("- {p}"));
            }
        }
        format!(
            "Apply failed with {} conflicts: {}",
            causes.len(),
            lines.join("\n")
        )
    };
    Error::Conflict {
        message,
        causes: causes
            .into_iter()
            .map(|(m, p)| (format!("conflict with {m}"), p))
            .collect(),
    }
}

/// Renders a path like structured-merge-diff: `.spec.containers[name="app"].image`.
pub fn path_string(path: &[String]) -> String {
    let mut s = String::new();
    for key in path {
        if let Some(f) = key.strip_prefix("f:") {
            s.push('.');
            s.push_str(f);
        } else if let Some(k) = key.strip_prefix("k:") {
            let parts: Vec<String> = serde_json::from_str::<Map<String, Value>>(k)
                .map(|m| m.iter().map(|(mk, mv)| format!("{mk}={mv}")).collect())
                .unwrap_or_default();
            s.push_str(&format!("[{}]", parts.join(",")));
        } else if let Some(v) = key.strip_prefix("v:") {
            s.push_str(&format!("[={v}]"));
        } else if let Some(i) = key.strip_prefix("i:") {
            s.push_str(&format!("[{i}]"));
        }
    }
    s
}

/// Records an `Update` by `manager`: it gains the paths whose values changed, others lose them, and
/// removed paths disappear from every entry.
pub fn track_update(
    old: Option<&Value>,
    new: &mut Value,
    manager: &str,
    api_version: &str,
    subresource: Option<&str>,
    node: &Node<'_>,
) {
    let with_status = subresource == Some("status");
    let empty = Value::Object(Map::new());
    let old_obj = old.unwrap_or(&empty);
    let old_paths = paths_of(old_obj, node, with_status);
    let new_paths = paths_of(new, node, with_status);
    let changed: BTreeSet<Path> = new_paths
        .iter()
        .filter(|p| differs(old_obj, new, p))
        .cloned()
        .collect();
    let removed: BTreeSet<&Path> = old_paths.difference(&new_paths).collect();
    let mut entries = old.map(read_entries).unwrap_or_default();
    if changed.is_empty() && removed.is_empty() {
        write_entries(new, &entries);
        return;
    }
    for e in entries.iter_mut() {
        let mine = e.same_slot(manager, "Update", subresource);
        e.fields
            .retain(|p| !removed.contains(p) && (mine || !changed.contains(p)));
    }
    let now = meta::now_rfc3339();
    match entries
        .iter_mut()
        .find(|e| e.same_slot(manager, "Update", subresource))
    {
        Some(e) => {
            e.fields.extend(changed);
            e.time = now;
            e.api_version = api_version.to_string();
        }
        None if !changed.is_empty() => entries.push(Entry {
            manager: manager.to_string(),
            operation: "Update".to_string(),
            api_version: api_version.to_string(),
            time: now,
            subresource: subresource.map(str::to_string),
            fields: changed,
        }),
        None => {}
    }
    entries.retain(|e| !e.fields.is_empty());
    write_entries(new, &entries);
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node() -> Node<'static> {
        Node::root(None, true)
    }

    #[test]
    fn fields_v1_round_trips() {
        let obj = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "x", "labels": {"a": "b"}},
            "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}}});
        let paths = paths_of(&obj, &node(), false);
        let v1 = to_fields_v1(&paths);
        assert_eq!(
            v1,
            json!({"f:metadata": {"f:labels": {"f:a": {}}}, "f:spec": {"f:template": {"f:spec": {"f:containers": {
                "k:{\"name\":\"c\"}": {".": {}, "f:image": {}, "f:name": {}}}}}}})
        );
        assert_eq!(from_fields_v1(&v1), paths);
        let text = fields_v1_text(&paths);
        assert_eq!(text, v1.to_string());
        assert_eq!(from_fields_v1(&Value::String(text)), paths);
    }

    #[test]
    fn the_text_of_an_owned_node_with_children_lists_the_dot_first() {
        let paths: BTreeSet<Path> = [
            vec!["f:spec".to_string()],
            vec!["f:spec".to_string(), "k:{\"name\":\"c\"}".to_string()],
            vec!["f:spec".to_string(), "f:a".to_string()],
        ]
        .into_iter()
        .collect();
        let text = fields_v1_text(&paths);
        assert_eq!(
            text,
            r#"{"f:spec":{".":{},"f:a":{},"k:{\"name\":\"c\"}":{}}}"#
        );
        assert_eq!(text, to_fields_v1(&paths).to_string());
        assert_eq!(fields_v1_text(&BTreeSet::new()), "{}");
    }

    #[test]
    fn apply_conflicts_name_the_manager_and_path() {
        let live = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "x"}, "spec": {"replicas": 1}});
        let first = Apply {
            manager: "a",
            api_version: "apps/v1",
            force: false,
            subresource: None,
            node: node(),
        };
        let live = apply(&live, &live.clone(), &first).unwrap();
        let second = Apply {
            manager: "b",
            api_version: "apps/v1",
            force: false,
            subresource: None,
            node: node(),
        };
        let body = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "x"}, "spec": {"replicas": 2}});
        let err = apply(&live, &body, &second).unwrap_err();
        let Error::Conflict { message, .. } = err;
        assert_eq!(
            message,
            "Apply failed with 1 conflict: conflict with \"a\": .spec.replicas"
        );
        let forced = Apply {
            force: true,
            ..second
        };
        let merged = apply(&live, &body, &forced).unwrap();
        assert_eq!(merged.pointer("/spec/replicas"), Some(&json!(2)));
        let entries = read_entries(&merged);
        assert_eq!(entries.len(), 1, "a lost its only field: {entries:?}");
        assert_eq!(entries[0].manager, "b");
    }

    #[test]
    fn apply_keeps_fields_of_other_managers_and_drops_its_own_removed_fields() {
        let mut live = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}});
        let req = Apply {
            manager: "a",
            api_version: "v1",
            force: false,
            subresource: None,
            node: node(),
        };
        live = apply(
            &live,
            &json!({"metadata": {"name": "x"}, "data": {"k1": "1", "k2": "2"}}),
            &req,
        )
        .unwrap();
        let before = live.clone();
        live.pointer_mut("/data")
            .unwrap()
            .as_object_mut()
            .unwrap()
            .insert("k3".into(), json!("3"));
        track_update(Some(&before), &mut live, "other", "v1", None, &node());
        let merged = apply(
            &live,
            &json!({"metadata": {"name": "x"}, "data": {"k1": "1"}}),
            &req,
        )
        .unwrap();
        assert_eq!(merged["data"], json!({"k1": "1", "k3": "3"}));
    }
}
