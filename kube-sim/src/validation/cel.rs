//! `x-kubernetes-validations` of custom resource schemas: CEL rules evaluated with `self` bound to the value
//! at the rule's schema node (and `oldSelf` to the stored value on updates, for transition rules), and the
//! compilation of every rule when a CRD is written.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock};

use serde_json::Value;

use super::{BadValue, ErrorType, FieldError};

/// The CEL environment of validation rules: the standard library with the string extensions.
static ENV: LazyLock<Arc<cel::Env>> = LazyLock::new(|| {
    let mut env = cel::Env::stdlib();
    // The extension only declares functions; it cannot clash with the standard library.
    let _ = env.add_extension(cel::extensions::strings);
    let _ = env.add_extension(cel::extensions::lists);
    Arc::new(env)
});

/// Functions of the Kubernetes CEL libraries that rules may call and the CEL crate does not have:
/// a CRD whose rule calls one is refused, so no rule goes unchecked here that a real cluster checks.
pub const UNSUPPORTED_FUNCTIONS: &[&str] = &[
    "quantity",
    "isQuantity",
    "url",
    "isURL",
    "ip",
    "isIP",
    "cidr",
    "isCIDR",
    "semver",
    "isSemver",
];

/// A rule could not be used.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The rule does not compile.
    #[error("compilation failed: {0}")]
    Compile(#[source] cel::ParseErrors),
    /// The rule failed while it ran.
    #[error("{0}")]
    Execute(#[source] cel::ExecutionError),
    /// The rule gave something other than a boolean.
    #[error("rule did not evaluate to a boolean")]
    NotBoolean,
}

/// Compiles a rule.
pub fn compile(rule: &str) -> Result<cel::Program, Error> {
    ENV.compile(rule).map_err(Error::Compile)
}

/// A decoded JSON value as a CEL value of its schema's type: `number` fields as `double` even when
/// written without a fraction, other integers as `int`.
pub fn to_cel(v: &Value, schema: Option<&Value>) -> cel::Value {
    let sub = |key: &str| schema.and_then(|s| s.get(key)).filter(|s| s.is_object());
    match v {
        Value::Null => cel::Value::Null,
        Value::Bool(b) => cel::Value::Bool(*b),
        Value::Number(n) => {
            let double =
                schema.and_then(|s| s.get("type")).and_then(Value::as_str) == Some("number");
            match n.as_i64() {
                Some(i) if !double => cel::Value::Int(i),
                _ => cel::Value::Float(n.as_f64().unwrap_or(0.0)),
            }
        }
        Value::String(s) => cel::Value::from(s.as_str()),
        Value::Array(items) => {
            let item_schema = sub("items");
            cel::Value::List(Arc::new(
                items.iter().map(|i| to_cel(i, item_schema)).collect(),
            ))
        }
        Value::Object(map) => {
            let props = sub("properties");
            let additional = sub("additionalProperties");
            let m: HashMap<String, cel::Value> = map
                .iter()
                .map(|(k, v)| {
                    let s = props.and_then(|p| p.get(k)).or(additional);
                    (k.clone(), to_cel(v, s))
                })
                .collect();
            cel::Value::from(m)
        }
    }
}

/// Runs a compiled rule on `self` (and `oldSelf`), both of the type `schema` declares.
pub fn evaluate(
    program: &cel::Program,
    this: &Value,
    old: Option<&Value>,
    schema: Option<&Value>,
) -> Result<cel::Value, Error> {
    let mut ctx = cel::Context::with_env(ENV.clone());
    add_list_library(&mut ctx);
    ctx.add_variable_from_value("self", to_cel(this, schema));
    if let Some(old) = old {
        ctx.add_variable_from_value("oldSelf", to_cel(old, schema));
    }
    program.execute(&ctx).map_err(Error::Execute)
}

/// The functions of the Kubernetes CEL list library the crate does not have: `isSorted`, `sum`, `min`
/// and `max`.
fn add_list_library(ctx: &mut cel::Context<'_, '_>) {
    use cel::extractors::This;
    fn items(v: &cel::Value) -> Result<&[cel::Value], cel::ExecutionError> {
        match v {
            cel::Value::List(l) => Ok(l.as_slice()),
            other => Err(cel::ExecutionError::function_error(
                "list",
                format!("{other:?} is not a list"),
            )),
        }
    }
    fn pick(list: &[cel::Value], want: std::cmp::Ordering) -> cel::ResolveResult {
        let mut best = list
            .first()
            .cloned()
            .ok_or_else(|| cel::ExecutionError::function_error("min/max", "the list is empty"))?;
        for v in &list[1..] {
            if v.partial_cmp(&best) == Some(want) {
                best = v.clone();
            }
        }
        Ok(best)
    }
    // The names are not in the standard library, so adding them cannot clash.
    let _ = ctx.add_function("isSorted", |This(this): This<cel::Value>| {
        let l = items(&this)?;
        Ok::<_, cel::ExecutionError>(cel::Value::Bool(
            l.windows(2)
                .all(|w| w[0].partial_cmp(&w[1]) != Some(std::cmp::Ordering::Greater)),
        ))
    });
    let _ = ctx.add_function("sum", |This(this): This<cel::Value>| {
        let l = items(&this)?;
        if l.iter().all(|v| matches!(v, cel::Value::Int(_))) {
            let total = l
                .iter()
                .map(|v| if let cel::Value::Int(i) = v { *i } else { 0 })
                .sum::<i64>();
            return Ok::<_, cel::ExecutionError>(cel::Value::Int(total));
        }
        let total = l
            .iter()
            .map(|v| match v {
                cel::Value::Int(i) => *i as f64,
                cel::Value::UInt(u) => *u as f64,
                cel::Value::Float(f) => *f,
                _ => 0.0,
            })
            .sum::<f64>();
        Ok(cel::Value::Float(total))
    });
    let _ = ctx.add_function("min", |This(this): This<cel::Value>| {
        pick(items(&this)?, std::cmp::Ordering::Less)
    });
    let _ = ctx.add_function("max", |This(this): This<cel::Value>| {
        pick(items(&this)?, std::cmp::Ordering::Greater)
    });
}

/// Whether a rule compares against the stored object (a transition rule).
fn is_transition(rule: &str) -> bool {
    let bytes = rule.as_bytes();
    rule.match_indices("oldSelf").any(|(i, _)| {
        let before = i.checked_sub(1).map(|j| bytes[j]);
        let after = bytes.get(i + "oldSelf".len());
        let word = |c: Option<&u8>| c.is_some_and(|c| c.is_ascii_alphanumeric() || *c == b'_');
        !word(before.as_ref()) && !word(after)
    })
}

/// Whether a schema declares any `x-kubernetes-validations`.
pub fn has_rules(schema: &Value) -> bool {
    match schema {
        Value::Object(m) => m.contains_key("x-kubernetes-validations") || m.values().any(has_rules),
        Value::Array(a) => a.iter().any(has_rules),
        _ => false,
    }
}

/// The errors of a custom resource under the CEL rules of its schema.
pub fn validate(obj: &Value, old: Option<&Value>, schema: &Value) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let root = visible_root(obj);
    let old_root = old.map(visible_root);
    walk(&root, old_root.as_ref(), schema, "", &mut errors);
    errors
}

/// The object as rules at the root see it: of `metadata`, only `name` and `generateName`.
fn visible_root(obj: &Value) -> Value {
    let mut root = obj.clone();
    if let Some(Value::Object(md)) = root.get_mut("metadata") {
        md.retain(|k, _| k == "name" || k == "generateName");
    }
    root
}

/// Evaluates the rules of a schema node and of the nodes under it.
fn walk(v: &Value, old: Option<&Value>, schema: &Value, path: &str, errors: &mut Vec<FieldError>) {
    if let Some(rules) = schema
        .get("x-kubernetes-validations")
        .and_then(Value::as_array)
    {
        for rule in rules {
            check_rule(rule, v, old, schema, path, errors);
        }
    }
    match v {
        Value::Object(map) => {
            let props = schema.get("properties").and_then(Value::as_object);
            let additional = schema.get("additionalProperties").filter(|a| a.is_object());
            for (k, child) in map {
                if path.is_empty() && matches!(k.as_str(), "metadata" | "apiVersion" | "kind") {
                    continue;
                }
                let Some(s) = props.and_then(|p| p.get(k)).or(additional) else {
                    continue;
                };
                let old_child = old.and_then(|o| o.get(k));
                let child_path = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                walk(child, old_child, s, &child_path, errors);
            }
        }
        Value::Array(items) => {
            let Some(s) = schema.get("items") else { return };
            for (i, item) in items.iter().enumerate() {
                let old_item = old.and_then(|o| correlated_item(o, item, schema));
                walk(item, old_item, s, &format!("{path}[{i}]"), errors);
            }
        }
        _ => {}
    }
}

/// The stored item a list item corresponds to: in `map` lists, the item with the same keys.
pub(super) fn correlated_item<'a>(
    old: &'a Value,
    item: &Value,
    schema: &Value,
) -> Option<&'a Value> {
    if schema.get("x-kubernetes-list-type").and_then(Value::as_str) != Some("map") {
        return None;
    }
    let keys: Vec<&str> = schema
        .get("x-kubernetes-list-map-keys")?
        .as_array()?
        .iter()
        .filter_map(Value::as_str)
        .collect();
    old.as_array()?
        .iter()
        .find(|o| keys.iter().all(|k| o.get(*k) == item.get(*k)))
}

/// Evaluates one rule on one value and records its error.
fn check_rule(
    rule: &Value,
    v: &Value,
    old: Option<&Value>,
    schema: &Value,
    path: &str,
    errors: &mut Vec<FieldError>,
) {
    let text = rule.get("rule").and_then(Value::as_str).unwrap_or("");
    let transition = is_transition(text);
    if transition && old.is_none() {
        return;
    }
    // Ratcheting: a rule that does not look at the stored value is not checked on an unchanged value.
    if !transition && old == Some(v) {
        return;
    }
    let Ok(program) = compile(text) else { return };
    let detail = match evaluate(&program, v, old, Some(schema)) {
        Ok(cel::Value::Bool(true)) => return,
        // Functions of the Kubernetes CEL libraries this crate lacks (`quantity`, `isSorted`, ...): the
        // rule is not evaluated rather than refusing what the API server may accept.
        Err(Error::Execute(cel::ExecutionError::UndeclaredReference(name)))
            if name.as_str() != "self" && name.as_str() != "oldSelf" =>
        {
            tracing::debug!(rule = text, function = %name, "CEL rule uses a function kube-sim lacks");
            return;
        }
        Ok(cel::Value::Bool(false)) => failure_message(rule, v, old, schema, text),
        Ok(_) => Error::NotBoolean.to_string(),
        Err(e) => e.to_string(),
    };
    let field = match rule.get("fieldPath").and_then(Value::as_str) {
        Some(fp) if !fp.is_empty() => join_field_path(path, fp),
        _ => path.to_string(),
    };
    let type_name = schema.get("type").and_then(Value::as_str).unwrap_or("");
    let kind = match rule.get("reason").and_then(Value::as_str) {
        Some("FieldValueForbidden") => ErrorType::Forbidden,
        Some("FieldValueRequired") => ErrorType::Required,
        Some("FieldValueDuplicate") => ErrorType::Duplicate,
        _ => ErrorType::Invalid,
    };
    errors.push(FieldError::new(
        kind,
        &field,
        BadValue::Json(Value::from(type_name)),
        &detail,
    ));
}

/// The message of a failed rule: its `messageExpression`, its `message`, or `failed rule: <rule>`.
fn failure_message(
    rule: &Value,
    v: &Value,
    old: Option<&Value>,
    schema: &Value,
    text: &str,
) -> String {
    if let Some(expr) = rule.get("messageExpression").and_then(Value::as_str)
        && let Ok(p) = compile(expr)
        && let Ok(cel::Value::String(s)) = evaluate(&p, v, old, Some(schema))
        && !s.trim().is_empty()
    {
        return s.to_string();
    }
    match rule.get("message").and_then(Value::as_str) {
        Some(m) if !m.is_empty() => m.to_string(),
        _ => format!("failed rule: {}", text.trim()),
    }
}

/// A rule's `fieldPath` (`.spec.replicas`, `.labels['a.b']`) appended to the path of its node.
fn join_field_path(path: &str, field_path: &str) -> String {
    let mut out = path.to_string();
    let mut rest = field_path;
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix("['") {
            let end = r.find("']").unwrap_or(r.len());
            out.push('.');
            out.push_str(&r[..end]);
            rest = r.get(end + 2..).unwrap_or("");
        } else if let Some(r) = rest.strip_prefix('.') {
            let end = r.find(['.', '[']).unwrap_or(r.len());
            if !out.is_empty() {
                out.push('.');
            }
            out.push_str(&r[..end]);
            rest = &r[end..];
        } else if rest.starts_with('[') {
            let end = rest.find(']').map_or(rest.len(), |e| e + 1);
            out.push_str(&rest[..end]);
            rest = &rest[end..];
        } else {
            if !out.is_empty() {
                out.push('.');
            }
            out.push_str(rest);
            rest = "";
        }
    }
    out
}

/// Why kube-sim cannot evaluate `program`, when it calls an [`UNSUPPORTED_FUNCTIONS`] function.
fn unsupported(program: &cel::Program) -> Option<String> {
    let references = program.references();
    let missing: Vec<&str> = UNSUPPORTED_FUNCTIONS
        .iter()
        .copied()
        .filter(|f| references.has_function(f))
        .collect();
    (!missing.is_empty()).then(|| {
        format!(
            "kube-sim cannot evaluate {}(): a real cluster would check this rule and kube-sim would not, \
             so the CRD is refused here; write the rule without it to test it on kube-sim",
            missing.join("(), ")
        )
    })
}

/// The errors of the rules of a CRD's schemas that do not compile.
pub fn compile_errors(schema: &Value, path: &str, errors: &mut Vec<FieldError>) {
    if let Some(rules) = schema
        .get("x-kubernetes-validations")
        .and_then(Value::as_array)
    {
        for (i, rule) in rules.iter().enumerate() {
            let text = rule.get("rule").and_then(Value::as_str).unwrap_or("");
            let rule_path = format!("{path}.x-kubernetes-validations[{i}].rule");
            if text.trim().is_empty() {
                errors.push(FieldError::required(&rule_path, ""));
                continue;
            }
            let problem = match compile(text) {
                Err(e) => Some(e.to_string().replace('\n', " ")),
                Ok(program) => unsupported(&program).or_else(|| {
                    undefined_field(text, schema)
                        .map(|m| format!("compilation failed: ERROR: <input>:{m}"))
                }),
            };
            if let Some(detail) = problem {
                errors.push(FieldError::new(
                    ErrorType::Invalid,
                    &rule_path,
                    BadValue::Raw(go_rule(rule)),
                    &detail,
                ));
            }
            if let Some(expr) = rule.get("messageExpression").and_then(Value::as_str)
                && let Err(e) = compile(expr)
            {
                errors.push(FieldError::new(
                    ErrorType::Invalid,
                    &format!("{path}.x-kubernetes-validations[{i}].messageExpression"),
                    BadValue::Json(Value::from(expr)),
                    &format!("messageExpression {e}").replace('\n', " "),
                ));
            }
        }
    }
    for (key, shown) in [("properties", true), ("additionalProperties", false)] {
        match schema.get(key) {
            Some(Value::Object(props)) if shown => {
                for (k, s) in props {
                    compile_errors(s, &format!("{path}.properties[{k}]"), errors);
                }
            }
            Some(s @ Value::Object(_)) => {
                compile_errors(s, &format!("{path}.additionalProperties"), errors)
            }
            _ => {}
        }
    }
    if let Some(items) = schema.get("items") {
        compile_errors(items, &format!("{path}.items"), errors);
    }
}

/// The first field a rule selects from `self` or `oldSelf` that its schema node does not declare, as
/// `<line>:<column>: undefined field '<name>'`. Fields under nodes that keep unknown fields or are maps, and
/// method calls, are not checked.
fn undefined_field(rule: &str, schema: &Value) -> Option<String> {
    static SELECTION: LazyLock<Option<regex::Regex>> = LazyLock::new(|| {
        regex::Regex::new(r"\b(?:self|oldSelf)((?:\s*\.\s*[A-Za-z_][A-Za-z0-9_]*)+)(\s*\()?").ok()
    });
    let re = SELECTION.as_ref()?;
    for caps in re.captures_iter(rule) {
        let chain = caps.get(1)?;
        let call = caps.get(2).is_some();
        let names: Vec<(usize, &str)> = chain
            .as_str()
            .match_indices('.')
            .map(|(i, _)| {
                let rest = chain.as_str()[i + 1..].trim_start();
                let end = rest.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'));
                (chain.start() + i, &rest[..end.unwrap_or(rest.len())])
            })
            .collect();
        let mut node = schema;
        for (n, (at, name)) in names.iter().enumerate() {
            if call && n + 1 == names.len() {
                break;
            }
            if let Some(next) = node.get("properties").and_then(|p| p.get(*name)) {
                node = next;
                continue;
            }
            let open = node
                .get("additionalProperties")
                .is_some_and(Value::is_object)
                || node
                    .get("x-kubernetes-preserve-unknown-fields")
                    .and_then(Value::as_bool)
                    == Some(true)
                || node.get("type").and_then(Value::as_str) != Some("object");
            if open {
                break;
            }
            let line = rule[..*at].matches('\n').count() + 1;
            let column = at - rule[..*at].rfind('\n').map_or(0, |i| i + 1);
            return Some(format!("{line}:{column}: undefined field '{name}'"));
        }
    }
    None
}

/// A validation rule in the Go form the API server prints it.
fn go_rule(rule: &Value) -> String {
    let s = |k: &str| super::go_quote(rule.get(k).and_then(Value::as_str).unwrap_or(""));
    format!(
        "apiextensions.ValidationRule{{Rule:{}, Message:{}, MessageExpression:{}, Reason:(*apiextensions.FieldValueErrorReason)(nil), FieldPath:{}, OptionalOldSelf:(*bool)(nil)}}",
        s("rule"),
        s("message"),
        s("messageExpression"),
        s("fieldPath")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({"type": "object", "properties": {"spec": {"type": "object",
        "x-kubernetes-validations": [
            {"rule": "self.minReplicas <= self.maxReplicas", "message": "minReplicas must not exceed maxReplicas"},
            {"rule": "!has(self.mode) || self.mode.startsWith('m')", "fieldPath": ".mode"},
            {"rule": "self.tags.all(t, t.matches('^[a-z]+$')) && size(self.tags) < 3"},
            {"rule": "self.minReplicas >= oldSelf.minReplicas", "message": "may not shrink"}
        ],
        "properties": {
            "minReplicas": {"type": "integer"}, "maxReplicas": {"type": "integer"},
            "mode": {"type": "string"},
            "tags": {"type": "array", "items": {"type": "string"}}
        }}}})
    }

    fn messages(obj: Value, old: Option<Value>) -> Vec<String> {
        crate::validation::messages(&validate(&obj, old.as_ref(), &schema()))
    }

    #[test]
    fn rules_report_their_message_or_the_rule() {
        let ok = json!({"spec": {"minReplicas": 1, "maxReplicas": 2, "tags": ["a"]}});
        assert!(messages(ok.clone(), None).is_empty());
        let bad =
            json!({"spec": {"minReplicas": 3, "maxReplicas": 2, "mode": "fast", "tags": ["A"]}});
        assert_eq!(
            messages(bad, None),
            vec![
                "spec: Invalid value: \"object\": minReplicas must not exceed maxReplicas",
                "spec.mode: Invalid value: \"object\": failed rule: !has(self.mode) || self.mode.startsWith('m')",
                "spec: Invalid value: \"object\": failed rule: self.tags.all(t, t.matches('^[a-z]+$')) && size(self.tags) < 3",
            ]
        );
    }

    #[test]
    fn transition_rules_see_the_stored_object() {
        let old = json!({"spec": {"minReplicas": 2, "maxReplicas": 5, "tags": []}});
        let new = json!({"spec": {"minReplicas": 1, "maxReplicas": 5, "tags": []}});
        assert_eq!(
            messages(new, Some(old)),
            vec!["spec: Invalid value: \"object\": may not shrink"]
        );
    }

    #[test]
    fn rules_that_do_not_compile_are_named() {
        let schema = json!({"type": "object", "properties": {"spec": {"type": "object",
            "x-kubernetes-validations": [{"rule": "self.replicas >"}]}}});
        let mut errors = Vec::new();
        compile_errors(
            &schema,
            "spec.versions[0].schema.openAPIV3Schema",
            &mut errors,
        );
        assert_eq!(errors.len(), 1);
        let m = errors[0].to_string();
        assert!(
            m.starts_with("spec.versions[0].schema.openAPIV3Schema.properties[spec].x-kubernetes-validations[0].rule: Invalid value: apiextensions.ValidationRule{Rule:\"self.replicas >\""),
            "{m}"
        );
        assert!(m.contains("compilation failed"), "{m}");
    }

    #[test]
    fn number_fields_are_doubles_and_the_root_sees_the_name() {
        let schema = json!({"type": "object",
            "x-kubernetes-validations": [{"rule": "self.metadata.name.startsWith('pool-')"}],
            "properties": {"spec": {"type": "object",
                "x-kubernetes-validations": [{"rule": "self.ratio <= 0.5"}],
                "properties": {"ratio": {"type": "number"}}}}});
        let obj = json!({"apiVersion": "x/v1", "kind": "X",
            "metadata": {"name": "pool-a", "labels": {"a": "b"}}, "spec": {"ratio": 1}});
        let errors = crate::validation::messages(&validate(&obj, None, &schema));
        assert_eq!(
            errors,
            vec!["spec: Invalid value: \"object\": failed rule: self.ratio <= 0.5"]
        );
    }

    #[test]
    fn rules_selecting_undeclared_fields_do_not_compile() {
        let node = &schema()["properties"]["spec"];
        assert_eq!(
            undefined_field("self.minReplicass <= self.maxReplicas", node).as_deref(),
            Some("1:4: undefined field 'minReplicass'")
        );
        assert_eq!(
            undefined_field("self.tags.all(t, t.size() > 1)", node),
            None
        );
        assert_eq!(
            undefined_field("has(self.mode) && self.mode.startsWith('m')", node),
            None
        );
    }

    #[test]
    fn the_list_library_is_there() {
        let p = compile("self.isSorted() && self.sum() == 6 && self.min() == 1 && self.max() == 3")
            .unwrap();
        let r = evaluate(&p, &json!([1, 2, 3]), None, None).unwrap();
        assert_eq!(r, cel::Value::Bool(true));
        let r = evaluate(&p, &json!([2, 1, 3]), None, None).unwrap();
        assert_eq!(r, cel::Value::Bool(false));
    }

    #[test]
    fn the_functions_refused_are_the_ones_the_crate_lacks() {
        for (f, call) in [
            ("quantity", "quantity('1Gi')"),
            ("url", "url('https://x')"),
            ("ip", "ip('10.0.0.1')"),
            ("cidr", "cidr('10.0.0.0/8')"),
            ("semver", "semver('1.0.0')"),
        ] {
            let program = compile(&format!("{call} != null")).unwrap();
            let ran = evaluate(&program, &json!({}), None, None);
            assert!(
                matches!(
                    ran,
                    Err(Error::Execute(cel::ExecutionError::UndeclaredReference(_)))
                ),
                "{f}: {ran:?}"
            );
            assert!(UNSUPPORTED_FUNCTIONS.contains(&f));
            assert!(unsupported(&program).unwrap().contains(&format!("{f}()")));
        }
        assert_eq!(unsupported(&compile("self.size() > 1").unwrap()), None);
        let schema = json!({"type": "object", "properties": {"size": {"type": "string"}},
            "x-kubernetes-validations": [{"rule": "quantity(self.size).isGreaterThan(quantity('1Gi'))"}]});
        let mut errors = Vec::new();
        compile_errors(&schema, "spec", &mut errors);
        assert_eq!(errors.len(), 1);
        let text = errors[0].to_string();
        assert!(
            text.contains("spec.x-kubernetes-validations[0].rule") && text.contains("quantity()"),
            "{text}"
        );
    }

    #[test]
    fn rules_calling_functions_the_crate_lacks_are_not_evaluated() {
        let schema = json!({"type": "object", "properties": {"spec": {"type": "object",
            "x-kubernetes-validations": [{"rule": "quantity(self.size).isGreaterThan(quantity('1Gi'))"}],
            "properties": {"size": {"type": "string"}}}}});
        let obj = json!({"spec": {"size": "1Mi"}});
        assert!(validate(&obj, None, &schema).is_empty());
    }

    #[test]
    fn field_paths_join_the_node_path() {
        assert_eq!(join_field_path("spec", ".mode"), "spec.mode");
        assert_eq!(join_field_path("spec", ".labels['a.b']"), "spec.labels.a.b");
        assert_eq!(join_field_path("", ".spec.x"), "spec.x");
    }
}
