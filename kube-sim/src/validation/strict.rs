//! Duplicate fields in a JSON request body, which strict field validation refuses and the other modes
//! report or ignore (a decoded value keeps only the last of them).

use std::fmt;

use crate::store::FieldValidation;
use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

/// What a body's repeated fields mean under a field validation mode: under `Strict` the `400 BadRequest`
/// message refusing it, under `Warn` one warning each, under `Ignore` nothing.
pub fn check_duplicates(body: &[u8], mode: FieldValidation) -> Result<Vec<String>, String> {
    if mode == FieldValidation::Ignore {
        return Ok(Vec::new());
    }
    let found: Vec<String> = duplicate_fields(body)
        .iter()
        .map(|p| format!("duplicate field \"{p}\""))
        .collect();
    if mode == FieldValidation::Strict && !found.is_empty() {
        return Err(format!("strict decoding error: {}", found.join(", ")));
    }
    Ok(found)
}

/// The paths (`spec.replicas`, `spec.containers[0].name`) of the fields a JSON or YAML body repeats within
/// one object, in the order they repeat. A body that is neither has none.
pub fn duplicate_fields(body: &[u8]) -> Vec<String> {
    let mut found = Vec::new();
    let mut de = serde_json::Deserializer::from_slice(body);
    let seed = Walk {
        path: String::new(),
        found: &mut found,
    };
    if seed.deserialize(&mut de).is_ok() {
        return found;
    }
    found.clear();
    let seed = Walk {
        path: String::new(),
        found: &mut found,
    };
    if seed
        .deserialize(serde_yaml::Deserializer::from_slice(body))
        .is_err()
    {
        return Vec::new();
    }
    found
}

/// Walks one value at `path`, recording repeated keys.
struct Walk<'a> {
    path: String,
    found: &'a mut Vec<String>,
}

impl<'de> DeserializeSeed<'de> for Walk<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Walk<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let mut i = 0;
        loop {
            let seed = Walk {
                path: format!("{}[{i}]", self.path),
                found: &mut *self.found,
            };
            if seq.next_element_seed(seed)?.is_none() {
                return Ok(());
            }
            i += 1;
        }
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut seen: Vec<String> = Vec::new();
        while let Some(key) = map.next_key::<String>()? {
            let path = if self.path.is_empty() {
                key.clone()
            } else {
                format!("{}.{key}", self.path)
            };
            if seen.contains(&key) {
                self.found.push(path);
                map.next_value::<IgnoredAny>()?;
                continue;
            }
            seen.push(key);
            map.next_value_seed(Walk {
                path,
                found: &mut *self.found,
            })?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::duplicate_fields;

    #[test]
    fn repeated_keys_are_found_with_their_paths() {
        let body = br#"{"spec": {"replicas": 1, "replicas": 2, "template": {"spec": {"containers": [{"name": "a", "name": "b"}]}}}}"#;
        assert_eq!(
            duplicate_fields(body),
            vec!["spec.replicas", "spec.template.spec.containers[0].name"]
        );
        assert!(duplicate_fields(br#"{"a": {"b": 1}, "c": {"b": 2}}"#).is_empty());
        let yaml = b"spec:\n  replicas: 1\n  replicas: 2\n  items:\n  - {a: 1, a: 2}\n";
        assert_eq!(
            duplicate_fields(yaml),
            vec!["spec.replicas", "spec.items[0].a"]
        );
    }
}
