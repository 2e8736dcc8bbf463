//! Label selectors (equality- and set-based) and field selectors, parsed from their query-string form.

use std::borrow::Cow;

use serde_json::Value;

/// A selector could not be parsed or names an unsupported field.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum Error {
    /// The label selector is malformed.
    #[error("unable to parse requirement: {0}")]
    Label(String),
    /// The field selector is malformed.
    #[error("invalid field selector: {0}")]
    Field(String),
    /// The field selector names a field the resource does not support.
    #[error("field label not supported: {0}")]
    UnsupportedField(String),
}

#[derive(Clone, Debug, PartialEq)]
enum Requirement {
    Equals(String, String),
    NotEquals(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    NotExists(String),
}

/// A parsed label selector; the empty selector matches everything.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LabelSelector {
    requirements: Vec<Requirement>,
}

impl LabelSelector {
    /// Parses `a=b,c!=d,e in (x,y),f notin (z),g,!h`.
    pub fn parse(s: &str) -> Result<LabelSelector, Error> {
        let mut requirements = Vec::new();
        for part in split_top_level(s) {
            let part = part.trim();
            if part.is_empty() {
                continue;
            }
            requirements.push(parse_requirement(part)?);
        }
        Ok(LabelSelector { requirements })
    }

    /// Whether the object's `metadata.labels` satisfy every requirement.
    pub fn matches(&self, obj: &(impl Selectable + ?Sized)) -> bool {
        let get = |k: &str| obj.label(k);
        self.requirements.iter().all(|r| match r {
            Requirement::Equals(k, v) => get(k) == Some(v.as_str()),
            Requirement::NotEquals(k, v) => get(k) != Some(v.as_str()),
            Requirement::In(k, vs) => get(k).is_some_and(|x| vs.iter().any(|v| v == x)),
            Requirement::NotIn(k, vs) => get(k).is_none_or(|x| !vs.iter().any(|v| v == x)),
            Requirement::Exists(k) => get(k).is_some(),
            Requirement::NotExists(k) => get(k).is_none(),
        })
    }

    /// Whether this selector has no requirements.
    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }
}

fn split_top_level(s: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut depth = 0i32;
    let mut start = 0;
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&s[start..]);
    parts
}

fn valid_key(k: &str) -> bool {
    !k.is_empty()
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./".contains(c))
}

fn parse_requirement(part: &str) -> Result<Requirement, Error> {
    let err = || Error::Label(part.to_string());
    if let Some(k) = part.strip_prefix('!') {
        let k = k.trim();
        return if valid_key(k) {
            Ok(Requirement::NotExists(k.to_string()))
        } else {
            Err(err())
        };
    }
    for (op, neg) in [("!=", true), ("==", false), ("=", false)] {
        if let Some((k, v)) = part.split_once(op) {
            let (k, v) = (k.trim(), v.trim());
            if !valid_key(k) || v.contains(['=', '!', '(', ')', ' ']) {
                return Err(err());
            }
            return Ok(if neg {
                Requirement::NotEquals(k.to_string(), v.to_string())
            } else {
                Requirement::Equals(k.to_string(), v.to_string())
            });
        }
    }
    if let Some(open) = part.find('(') {
        let head = part[..open].trim();
        let body = part[open + 1..].strip_suffix(')').ok_or_else(err)?;
        let values: Vec<String> = body
            .split(',')
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty())
            .collect();
        let (k, op) = head.rsplit_once(char::is_whitespace).ok_or_else(err)?;
        let k = k.trim();
        if !valid_key(k) {
            return Err(err());
        }
        return match op {
            "in" => Ok(Requirement::In(k.to_string(), values)),
            "notin" => Ok(Requirement::NotIn(k.to_string(), values)),
            _ => Err(err()),
        };
    }
    if valid_key(part) {
        Ok(Requirement::Exists(part.to_string()))
    } else {
        Err(err())
    }
}

/// A parsed field selector of `field=value`, `field==value` and `field!=value` terms.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FieldSelector {
    terms: Vec<(String, bool, String)>,
}

impl FieldSelector {
    /// Parses a field selector and checks every field against the resource's supported set.
    pub fn parse(s: &str, supported: &[&str]) -> Result<FieldSelector, Error> {
        let mut terms = Vec::new();
        for part in s.split(',') {
            let part = part.trim();
            if part.is_empty() {
                continue;
            }
            let (field, negated, value) = if let Some((k, v)) = part.split_once("!=") {
                (k, true, v)
            } else if let Some((k, v)) = part.split_once("==") {
                (k, false, v)
            } else if let Some((k, v)) = part.split_once('=') {
                (k, false, v)
            } else {
                return Err(Error::Field(part.to_string()));
            };
            let field = field.trim();
            if !supported.contains(&field) {
                return Err(Error::UnsupportedField(field.to_string()));
            }
            terms.push((field.to_string(), negated, value.trim().to_string()));
        }
        Ok(FieldSelector { terms })
    }

    /// Whether the object satisfies every term; missing fields compare as the empty string.
    pub fn matches(&self, obj: &(impl Selectable + ?Sized)) -> bool {
        self.terms.iter().all(|(field, negated, value)| {
            let actual = match obj.field(field).as_deref() {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Null) | None => String::new(),
                Some(other) => other.to_string(),
            };
            (actual == *value) != *negated
        })
    }

    /// The value required for `metadata.name`, if the selector pins one.
    pub fn pinned_name(&self) -> Option<&str> {
        self.terms
            .iter()
            .find(|(f, neg, _)| f == "metadata.name" && !neg)
            .map(|(_, _, v)| v.as_str())
    }
}

/// What label and field selectors read of an object: an object itself, or what a store keeps of one to
/// select it by.
pub trait Selectable {
    /// The value of the label `key`.
    fn label(&self, key: &str) -> Option<&str>;
    /// The value at the dotted field path `path` (`spec.nodeName`): borrowed from an object, parsed
    /// from what a store keeps of one.
    fn field(&self, path: &str) -> Option<Cow<'_, Value>>;
}

impl Selectable for Value {
    fn label(&self, key: &str) -> Option<&str> {
        self.pointer("/metadata/labels")?.get(key)?.as_str()
    }

    fn field(&self, path: &str) -> Option<Cow<'_, Value>> {
        if path == "source" && self.get("kind").and_then(Value::as_str) == Some("Event") {
            return event_source(self).map(Cow::Borrowed);
        }
        path.split('.')
            .try_fold(self, |v, key| v.get(key))
            .map(Cow::Borrowed)
    }
}

/// An Event's `source` field, as kube-apiserver selects it: `source.component`, or when that is empty
/// the reporting component (`reportingController` in `events.k8s.io`).
fn event_source(event: &Value) -> Option<&Value> {
    let component = event.pointer("/source/component");
    match component.and_then(Value::as_str) {
        Some(c) if !c.is_empty() => component,
        _ => event.get("reportingComponent"),
    }
}

impl<T: Selectable + ?Sized> Selectable for std::sync::Arc<T> {
    fn label(&self, key: &str) -> Option<&str> {
        (**self).label(key)
    }

    fn field(&self, path: &str) -> Option<Cow<'_, Value>> {
        (**self).field(path)
    }
}

/// The fields a resource supports in field selectors, following the Kubernetes registries.
pub fn supported_fields(group: &str, resource: &str) -> Vec<&'static str> {
    let mut fields = vec!["metadata.name", "metadata.namespace"];
    match (group, resource) {
        ("", "pods") => fields.extend([
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "spec.hostNetwork",
            "status.phase",
            "status.podIP",
            "status.nominatedNodeName",
        ]),
        ("", "events") => fields.extend([
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
        ]),
        ("", "secrets") => fields.push("type"),
        ("", "namespaces") => fields.push("status.phase"),
        ("", "nodes") => fields.push("spec.unschedulable"),
        ("apps", "replicasets") => fields.push("status.replicas"),
        _ => {}
    }
    fields
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn label_selectors_cover_equality_and_sets() {
        let obj = json!({"metadata": {"labels": {"app": "web", "tier": "front"}}});
        let yes = [
            "app=web",
            "app==web",
            "app!=db",
            "app in (web,db)",
            "x notin (a)",
            "tier",
            "!x",
            "app=web,tier",
        ];
        for s in yes {
            assert!(
                LabelSelector::parse(s).unwrap().matches(&obj),
                "{s} should match"
            );
        }
        let no = [
            "app=db",
            "app!=web",
            "app in (db)",
            "app notin (web)",
            "x",
            "!app",
        ];
        for s in no {
            assert!(
                !LabelSelector::parse(s).unwrap().matches(&obj),
                "{s} should not match"
            );
        }
        assert!(LabelSelector::parse("a in b").is_err());
    }

    #[test]
    fn field_selectors_check_supported_fields() {
        let obj =
            json!({"metadata": {"name": "p", "namespace": "n"}, "status": {"phase": "Running"}});
        let fields = supported_fields("", "pods");
        assert!(
            FieldSelector::parse("metadata.name=p,status.phase!=Pending", &fields)
                .unwrap()
                .matches(&obj)
        );
        assert!(
            !FieldSelector::parse("spec.nodeName=a", &fields)
                .unwrap()
                .matches(&obj)
        );
        assert_eq!(
            FieldSelector::parse("spec.foo=a", &fields),
            Err(Error::UnsupportedField("spec.foo".to_string()))
        );
    }
}
