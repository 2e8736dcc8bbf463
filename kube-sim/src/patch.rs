//! The non-apply patch formats: JSON merge patch (RFC 7386), JSON patch (RFC 6902) and strategic merge patch.

use serde_json::{Map, Value};

use crate::schema::{Node, PatchStrategy};

/// A patch could not be applied.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum Error {
    /// The patch document is not valid for its type.
    #[error("{0}")]
    Invalid(String),
    /// A JSON patch `test` operation failed.
    #[error(
        "the server rejected our request due to an error in our request: testing value {path} failed"
    )]
    TestFailed {
        /// The JSON pointer that was tested.
        path: String,
    },
}

/// Applies an RFC 7386 merge patch: maps merge, `null` deletes, everything else (lists included) replaces.
pub fn merge_patch(target: &mut Value, patch: &Value) {
    match patch {
        Value::Object(p) => {
            if !target.is_object() {
                *target = Value::Object(Map::new());
            }
            if let Value::Object(t) = target {
                for (k, v) in p {
                    if v.is_null() {
                        t.remove(k);
                    } else {
                        merge_patch(t.entry(k.clone()).or_insert(Value::Null), v);
                    }
                }
            }
        }
        other => *target = other.clone(),
    }
}

/// Applies an RFC 6902 JSON patch (`add`, `remove`, `replace`, `move`, `copy`, `test`).
pub fn json_patch(target: &mut Value, patch: &Value) -> Result<(), Error> {
    let ops = patch
        .as_array()
        .ok_or_else(|| Error::Invalid("json patch must be a list of operations".into()))?;
    for op in ops {
        let kind = op
            .get("op")
            .and_then(Value::as_str)
            .ok_or_else(|| Error::Invalid("missing op".into()))?;
        let path = op
            .get("path")
            .and_then(Value::as_str)
            .ok_or_else(|| Error::Invalid("missing path".into()))?;
        let value = || {
            op.get("value")
                .cloned()
                .ok_or_else(|| Error::Invalid(format!("missing value for {kind}")))
        };
        let from = || {
            op.get("from")
                .and_then(Value::as_str)
                .ok_or_else(|| Error::Invalid("missing from".into()))
        };
        match kind {
            "add" => add(target, path, value()?)?,
            "remove" => {
                remove(target, path)?;
            }
            "replace" => {
                remove(target, path)?;
                add(target, path, value()?)?;
            }
            "move" => {
                let v = remove(target, from()?)?;
                add(target, path, v)?;
            }
            "copy" => {
                let v = target.pointer(from()?).cloned().ok_or_else(|| {
                    Error::Invalid(format!("copy from missing path {}", from().unwrap_or("")))
                })?;
                add(target, path, v)?;
            }
            "test" => {
                if target.pointer(path) != Some(&value()?) {
                    return Err(Error::TestFailed {
                        path: path.to_string(),
                    });
                }
            }
            other => return Err(Error::Invalid(format!("unexpected op {other:?}"))),
        }
    }
    Ok(())
}

fn split_pointer(path: &str) -> Result<(String, String), Error> {
    if path.is_empty() {
        return Err(Error::Invalid("the root cannot be replaced".into()));
    }
    let (parent, last) = path
        .rsplit_once('/')
        .ok_or_else(|| Error::Invalid(format!("invalid pointer {path}")))?;
    Ok((
        parent.to_string(),
        last.replace("~1", "/").replace("~0", "~"),
    ))
}

fn add(target: &mut Value, path: &str, value: Value) -> Result<(), Error> {
    let (parent, last) = split_pointer(path)?;
    let container = target.pointer_mut(&parent).ok_or_else(|| {
        Error::Invalid(format!(
            "add operation does not apply: doc is missing path: \"{path}\""
        ))
    })?;
    match container {
        Value::Object(m) => {
            m.insert(last, value);
            Ok(())
        }
        Value::Array(a) => {
            let idx = if last == "-" {
                a.len()
            } else {
                last.parse::<usize>()
                    .map_err(|_| Error::Invalid(format!("invalid index {last}")))?
            };
            if idx > a.len() {
                return Err(Error::Invalid(format!(
                    "add operation does not apply: index out of range: {path}"
                )));
            }
            a.insert(idx, value);
            Ok(())
        }
        _ => Err(Error::Invalid(format!(
            "add operation does not apply: doc is missing path: \"{path}\""
        ))),
    }
}

fn remove(target: &mut Value, path: &str) -> Result<Value, Error> {
    let (parent, last) = split_pointer(path)?;
    let missing = || {
        Error::Invalid(format!(
            "remove operation does not apply: doc is missing path: \"{path}\""
        ))
    };
    match target.pointer_mut(&parent).ok_or_else(missing)? {
        Value::Object(m) => m.remove(&last).ok_or_else(missing),
        Value::Array(a) => {
            let idx = last.parse::<usize>().map_err(|_| missing())?;
            if idx >= a.len() {
                return Err(missing());
            }
            Ok(a.remove(idx))
        }
        _ => Err(missing()),
    }
}

/// Applies a strategic merge patch to a built-in object.
///
/// Maps merge and `null` deletes; lists with a merge key merge item by item (`$patch: delete` removes an
/// item, `$patch: replace` replaces the list), primitive merge lists take the union, other lists replace.
/// `$retainKeys` keeps only the listed keys of a map; `$setElementOrder/…` and `$deleteFromPrimitiveList/…`
/// directives are honoured.
pub fn strategic_merge_patch(target: &mut Value, patch: &Value) -> Result<(), Error> {
    smp_map(target, patch, &Node::root(None, true))
}

fn smp_map(target: &mut Value, patch: &Value, node: &Node<'_>) -> Result<(), Error> {
    let Value::Object(p) = patch else {
        *target = patch.clone();
        return Ok(());
    };
    if p.get("$patch").and_then(Value::as_str) == Some("replace") {
        let mut replacement = patch.clone();
        if let Value::Object(m) = &mut replacement {
            m.remove("$patch");
        }
        *target = strip_directives(&replacement);
        return Ok(());
    }
    if p.get("$patch").and_then(Value::as_str) == Some("delete") {
        *target = Value::Object(Map::new());
        return Ok(());
    }
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let Value::Object(t) = target else {
        return Ok(());
    };
    if let Some(Value::Array(keep)) = p.get("$retainKeys") {
        let keep: Vec<&str> = keep.iter().filter_map(Value::as_str).collect();
        t.retain(|k, _| keep.contains(&k.as_str()) || p.contains_key(k));
    }
    for (k, v) in p {
        if let Some(field) = k.strip_prefix("$deleteFromPrimitiveList/") {
            if let (Some(Value::Array(items)), Value::Array(del)) = (t.get_mut(field), v) {
                items.retain(|i| !del.contains(i));
            }
            continue;
        }
        if k.starts_with('$') {
            continue;
        }
        let child = node.field(k);
        if v.is_null() {
            t.remove(k);
            continue;
        }
        match v {
            Value::Object(_) => smp_map(t.entry(k.clone()).or_insert(Value::Null), v, &child)?,
            Value::Array(items) => {
                let merged = smp_list(t.get(k), items, &child)?;
                t.insert(k.clone(), merged);
            }
            other => {
                t.insert(k.clone(), other.clone());
            }
        }
    }
    if let Some(Value::Object(_)) = Some(&*target) {
        apply_element_order(target, patch);
    }
    Ok(())
}

fn smp_list(current: Option<&Value>, patch: &[Value], node: &Node<'_>) -> Result<Value, Error> {
    let current: Vec<Value> = current
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if patch
        .iter()
        .any(|i| i.get("$patch").and_then(Value::as_str) == Some("replace"))
    {
        let items: Vec<Value> = patch
            .iter()
            .filter(|i| i.get("$patch").and_then(Value::as_str) != Some("replace"))
            .map(strip_directives)
            .collect();
        return Ok(Value::Array(items));
    }
    match node.patch_strategy() {
        PatchStrategy::Replace => Ok(Value::Array(patch.iter().map(strip_directives).collect())),
        PatchStrategy::MergePrimitives => {
            let mut out = current;
            for v in patch {
                if !out.contains(v) {
                    out.push(v.clone());
                }
            }
            Ok(Value::Array(out))
        }
        PatchStrategy::MergeKey(key) => {
            let mut out = current;
            let item_node = node.item();
            for p in patch {
                let Some(kv) = p.get(key) else {
                    return Err(Error::Invalid(format!(
                        "map: {p} does not contain declared merge key: {key}"
                    )));
                };
                let pos = out.iter().position(|i| i.get(key) == Some(kv));
                let directive = p.get("$patch").and_then(Value::as_str);
                match (pos, directive) {
                    (Some(i), Some("delete")) => {
                        out.remove(i);
                    }
                    (None, Some("delete")) => {}
                    (Some(i), _) => smp_map(&mut out[i], p, &item_node)?,
                    (None, _) => {
                        let mut fresh = Value::Object(Map::new());
                        smp_map(&mut fresh, p, &item_node)?;
                        out.push(fresh);
                    }
                }
            }
            Ok(Value::Array(out))
        }
    }
}

fn apply_element_order(target: &mut Value, patch: &Value) {
    let (Value::Object(t), Value::Object(p)) = (target, patch) else {
        return;
    };
    for (k, order) in p {
        let Some(field) = k.strip_prefix("$setElementOrder/") else {
            continue;
        };
        let (Some(Value::Array(items)), Value::Array(order)) = (t.get_mut(field), order) else {
            continue;
        };
        let rank = |item: &Value| {
            order
                .iter()
                .position(|o| match o {
                    Value::Object(om) => om.iter().all(|(ok, ov)| item.get(ok) == Some(ov)),
                    other => other == item,
                })
                .unwrap_or(usize::MAX)
        };
        items.sort_by_key(|i| rank(i));
    }
}

fn strip_directives(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(k, _)| !k.starts_with('$'))
                .map(|(k, v)| (k.clone(), strip_directives(v)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(strip_directives).collect()),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn merge_patch_replaces_lists_whole() {
        let mut t = json!({"spec": {"items": [1, 2, 3], "a": 1, "b": 2}});
        merge_patch(&mut t, &json!({"spec": {"items": [9], "a": null}}));
        assert_eq!(t, json!({"spec": {"items": [9], "b": 2}}));
    }

    #[test]
    fn json_patch_supports_test() {
        let mut t = json!({"a": {"b": [1, 2]}});
        json_patch(&mut t, &json!([{"op": "test", "path": "/a/b/0", "value": 1}, {"op": "add", "path": "/a/b/-", "value": 3}]))
            .unwrap();
        assert_eq!(t, json!({"a": {"b": [1, 2, 3]}}));
        let err = json_patch(
            &mut t,
            &json!([{"op": "test", "path": "/a/b/0", "value": 5}]),
        )
        .unwrap_err();
        assert!(matches!(err, Error::TestFailed { .. }));
    }

    #[test]
    fn strategic_merge_merges_containers_by_name() {
        let mut t = json!({"spec": {"template": {"spec": {"containers": [
            {"name": "a", "image": "a:1", "env": [{"name": "X", "value": "1"}], "args": ["x"]},
            {"name": "b", "image": "b:1"}
        ]}}}});
        let p = json!({"spec": {"template": {"spec": {"containers": [
            {"name": "a", "image": "a:2", "env": [{"name": "Y", "value": "2"}], "args": ["y"]},
            {"name": "b", "$patch": "delete"},
            {"name": "c", "image": "c:1"}
        ]}}}});
        strategic_merge_patch(&mut t, &p).unwrap();
        assert_eq!(
            t,
            json!({"spec": {"template": {"spec": {"containers": [
                {"name": "a", "image": "a:2", "env": [{"name": "X", "value": "1"}, {"name": "Y", "value": "2"}], "args": ["y"]},
                {"name": "c", "image": "c:1"}
            ]}}}})
        );
    }
}
