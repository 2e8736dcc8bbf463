//! Objects as they go on the wire. The store keeps each `managedFields` entry's `fieldsV1` as the JSON
//! text of its tree (see [`crate::fieldmanager::write_entries`]); [`Wire`] serializes an object, a list
//! or a watch event with each such text written as the JSON it holds, so clients get the tree.
//!
//! Only a string at `metadata.managedFields[*].fieldsV1` is rewritten, at any depth (list items, watch
//! event objects, table rows); every other value is written as it is.

use serde::ser::{Serialize, SerializeMap as _, SerializeSeq as _, Serializer};
use serde_json::Value;
use serde_json::value::RawValue;

/// A value serialized in its wire form.
pub struct Wire<'a>(pub &'a Value);

impl Serialize for Wire<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        Node {
            value: self.0,
            at: At::Any,
        }
        .serialize(s)
    }
}

/// Where a value sits, as far as `fieldsV1` is concerned.
#[derive(Clone, Copy, PartialEq, Eq)]
enum At {
    Any,
    /// An object's `metadata`.
    Metadata,
    /// Its `managedFields` list.
    ManagedFields,
    /// One entry of that list.
    Entry,
}

impl At {
    /// Where the member `key` of an object at `self` sits.
    fn member(self, key: &str) -> At {
        match (self, key) {
            (At::Metadata, "managedFields") => At::ManagedFields,
            (_, "metadata") => At::Metadata,
            _ => At::Any,
        }
    }
}

struct Node<'a> {
    value: &'a Value,
    at: At,
}

impl Serialize for Node<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.value {
            Value::Object(members) => {
                let mut map = s.serialize_map(Some(members.len()))?;
                for (key, value) in members {
                    match (self.at, key.as_str(), value) {
                        (At::Entry, "fieldsV1", Value::String(text)) => {
                            map.serialize_entry(key, &Raw(text))?
                        }
                        _ => map.serialize_entry(
                            key,
                            &Node {
                                value,
                                at: self.at.member(key),
                            },
                        )?,
                    }
                }
                map.end()
            }
            Value::Array(items) => {
                let at = match self.at {
                    At::ManagedFields => At::Entry,
                    _ => At::Any,
                };
                let mut seq = s.serialize_seq(Some(items.len()))?;
                for value in items {
                    seq.serialize_element(&Node { value, at })?;
                }
                seq.end()
            }
            other => other.serialize(s),
        }
    }
}

/// JSON text written as the JSON it holds; text that is not JSON is written as a string.
struct Raw<'a>(&'a str);

impl Serialize for Raw<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match RawValue::from_string(self.0.to_string()) {
            Ok(raw) => raw.serialize(s),
            Err(_) => s.serialize_str(self.0),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn wire(v: &Value) -> Value {
        serde_json::from_str(&serde_json::to_string(&Wire(v)).unwrap()).unwrap()
    }

    #[test]
    fn a_kept_fields_v1_text_goes_out_as_its_tree_at_any_depth() {
        let entry =
            |fields: Value| json!({"manager": "m", "fieldsType": "FieldsV1", "fieldsV1": fields});
        let text = r#"{"f:data":{".":{},"f:a":{}}}"#;
        let tree: Value = serde_json::from_str(text).unwrap();
        let stored = json!({"metadata": {"name": "x", "managedFields": [entry(json!(text))]}, "data": {"a": "1"}});
        let served = json!({"metadata": {"name": "x", "managedFields": [entry(tree.clone())]}, "data": {"a": "1"}});
        assert_eq!(wire(&stored), served);
        let list = json!({"kind": "List", "metadata": {}, "items": [stored.clone()]});
        assert_eq!(wire(&list)["items"][0], served);
        let event = json!({"type": "ADDED", "object": stored});
        assert_eq!(wire(&event)["object"], served);
        // A tree, as a client may send it back, goes out unchanged.
        assert_eq!(wire(&served), served);
    }

    #[test]
    fn strings_elsewhere_are_written_as_strings() {
        let text = r#"{"f:a":{}}"#;
        let v = json!({"spec": {"fieldsV1": text, "managedFields": [{"fieldsV1": text}]},
            "metadata": {"labels": {"fieldsV1": text}, "managedFields": [{"fieldsV1": "not json"}]}});
        assert_eq!(wire(&v), v);
    }
}
