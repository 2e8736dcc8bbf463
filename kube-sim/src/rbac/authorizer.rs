//! The RBAC decision (`rbac.go`, `rule.go`, `evaluation_helpers.go`): a request is allowed when a rule of
//! a role bound to its user matches it. ClusterRoleBindings count everywhere; RoleBindings only in their
//! namespace, where they may grant a Role of that namespace or a ClusterRole.

use k8s_openapi::api::rbac::v1::{
    ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef, Subject,
};
use serde::Deserialize as _;
use serde_json::Value;

use super::{Attributes, GROUP, User, service_account};
use crate::resource::GroupResource;
use crate::store::Store;

/// The outcome of [`authorize`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    /// Whether the request may go on.
    pub allowed: bool,
    /// Which binding allowed it (`RBAC: allowed by …`), or what went wrong while looking (`RBAC: …`);
    /// empty when there is nothing to say.
    pub reason: String,
}

/// What a user may do in a namespace: the rules of every role bound to it there or cluster-wide.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Rules {
    /// Rules with resources.
    pub resource_rules: Vec<PolicyRule>,
    /// Rules with non-resource URLs.
    pub non_resource_rules: Vec<PolicyRule>,
    /// What could not be read (a binding's missing role), joined; empty when nothing.
    pub evaluation_error: String,
}

/// Whether `user` may do what `attributes` ask.
pub fn authorize(store: &Store, user: &User, attributes: &Attributes) -> Decision {
    if user.is_master() {
        return Decision {
            allowed: true,
            reason: String::new(),
        };
    }
    let mut allowed_by = None;
    let errors = visit(store, user, &attributes.namespace, &mut |source, rule| {
        if rule_allows(attributes, rule) {
            allowed_by = Some(source());
            return false;
        }
        true
    });
    match allowed_by {
        Some(source) => Decision {
            allowed: true,
            reason: format!("RBAC: allowed by {source}"),
        },
        None => Decision {
            allowed: false,
            reason: if errors.is_empty() {
                String::new()
            } else {
                format!("RBAC: {}", aggregate(&errors))
            },
        },
    }
}

/// The rules `user` has in `namespace` (cluster-wide ones only when it is empty); members of
/// `system:masters` have `*` first.
pub fn rules_for(store: &Store, user: &User, namespace: &str) -> Rules {
    let mut rules = Rules::default();
    if user.is_master() {
        let all = || Some(vec!["*".to_string()]);
        rules.resource_rules.push(PolicyRule {
            verbs: vec!["*".to_string()],
            api_groups: all(),
            resources: all(),
            ..PolicyRule::default()
        });
        rules.non_resource_rules.push(PolicyRule {
            verbs: vec!["*".to_string()],
            non_resource_urls: all(),
            ..PolicyRule::default()
        });
    }
    let errors = visit(store, user, namespace, &mut |_, rule| {
        if rule.resources.as_ref().is_some_and(|r| !r.is_empty()) {
            rules.resource_rules.push(PolicyRule {
                non_resource_urls: None,
                ..rule.clone()
            });
        }
        if rule
            .non_resource_urls
            .as_ref()
            .is_some_and(|u| !u.is_empty())
        {
            rules.non_resource_rules.push(PolicyRule {
                verbs: rule.verbs.clone(),
                non_resource_urls: rule.non_resource_urls.clone(),
                ..PolicyRule::default()
            });
        }
        true
    });
    rules.evaluation_error = aggregate(&errors);
    rules
}

/// Errors joined as Go's `utilerrors.NewAggregate` prints them.
fn aggregate(errors: &[String]) -> String {
    match errors {
        [] => String::new(),
        [one] => one.clone(),
        many => format!("[{}]", many.join(", ")),
    }
}

/// Calls `visitor` with every rule that applies to `user` in `namespace` and a description of where it
/// comes from, until it returns `false`; returns the bindings' errors (roles that do not exist).
fn visit(
    store: &Store,
    user: &User,
    namespace: &str,
    visitor: &mut dyn FnMut(&dyn Fn() -> String, &PolicyRule) -> bool,
) -> Vec<String> {
    let mut errors = Vec::new();
    for obj in store.snapshot(&GroupResource::new(GROUP, "clusterrolebindings"), None) {
        let Ok(binding) = ClusterRoleBinding::deserialize(&*obj) else {
            continue;
        };
        let Some(subject) = applies(binding.subjects.as_deref(), user, "") else {
            continue;
        };
        let rules = match role_rules(store, &binding.role_ref, "") {
            Ok(rules) => rules,
            Err(e) => {
                errors.push(e);
                continue;
            }
        };
        let describe = || {
            format!(
                "ClusterRoleBinding {:?} of {} {:?} to {}",
                binding.metadata.name.as_deref().unwrap_or_default(),
                binding.role_ref.kind,
                binding.role_ref.name,
                describe_subject(subject, "")
            )
        };
        for rule in &rules {
            if !visitor(&describe, rule) {
                return errors;
            }
        }
    }
    if namespace.is_empty() {
        return errors;
    }
    for obj in store.snapshot(&GroupResource::new(GROUP, "rolebindings"), Some(namespace)) {
        let Ok(binding) = RoleBinding::deserialize(&*obj) else {
            continue;
        };
        let Some(subject) = applies(binding.subjects.as_deref(), user, namespace) else {
            continue;
        };
        let rules = match role_rules(store, &binding.role_ref, namespace) {
            Ok(rules) => rules,
            Err(e) => {
                errors.push(e);
                continue;
            }
        };
        let describe = || {
            format!(
                "RoleBinding {:?} of {} {:?} to {}",
                format!(
                    "{}/{namespace}",
                    binding.metadata.name.as_deref().unwrap_or_default()
                ),
                binding.role_ref.kind,
                binding.role_ref.name,
                describe_subject(subject, namespace)
            )
        };
        for rule in &rules {
            if !visitor(&describe, rule) {
                return errors;
            }
        }
    }
    errors
}

/// The rules of the role a binding in `namespace` (empty for a ClusterRoleBinding) refers to.
fn role_rules(
    store: &Store,
    role_ref: &RoleRef,
    namespace: &str,
) -> Result<Vec<PolicyRule>, String> {
    let (resource, singular, ns) = match role_ref.kind.as_str() {
        "Role" => ("roles", "role", Some(namespace)),
        "ClusterRole" => ("clusterroles", "clusterrole", None),
        other => return Err(format!("unsupported role reference kind: {other:?}")),
    };
    let obj = store
        .get(&GroupResource::new(GROUP, resource), ns, &role_ref.name)
        .map_err(|_| format!("{singular}.{GROUP} {:?} not found", role_ref.name))?;
    let rules = if ns.is_some() {
        Role::deserialize(&obj).map(|r| r.rules)
    } else {
        ClusterRole::deserialize(&obj).map(|r| r.rules)
    };
    Ok(rules.ok().flatten().unwrap_or_default())
}

/// The first subject that names `user` (`appliesTo`); a service account subject without a namespace
/// means one of the binding's namespace.
fn applies<'s>(
    subjects: Option<&'s [Subject]>,
    user: &User,
    namespace: &str,
) -> Option<&'s Subject> {
    subjects?.iter().find(|s| match s.kind.as_str() {
        "User" => s.name == user.name,
        "Group" => user.groups.contains(&s.name),
        "ServiceAccount" => {
            let sa_namespace = s
                .namespace
                .as_deref()
                .filter(|n| !n.is_empty())
                .unwrap_or(namespace);
            !sa_namespace.is_empty() && service_account(&user.name) == Some((sa_namespace, &s.name))
        }
        _ => false,
    })
}

fn describe_subject(s: &Subject, binding_namespace: &str) -> String {
    match s.kind.as_str() {
        "ServiceAccount" => {
            let ns = s
                .namespace
                .as_deref()
                .filter(|n| !n.is_empty())
                .unwrap_or(binding_namespace);
            format!("{} {:?}", s.kind, format!("{}/{ns}", s.name))
        }
        _ => format!("{} {:?}", s.kind, s.name),
    }
}

/// Whether one rule allows the request (`RuleAllows`).
pub fn rule_allows(a: &Attributes, rule: &PolicyRule) -> bool {
    if !matches(&rule.verbs, &a.verb) {
        return false;
    }
    if !a.resource_request {
        return rule
            .non_resource_urls
            .iter()
            .flatten()
            .any(|url| url_matches(url, &a.path));
    }
    let groups = rule.api_groups.as_deref().unwrap_or_default();
    let names = rule.resource_names.as_deref().unwrap_or_default();
    matches(groups, &a.api_group)
        && resource_matches(
            rule.resources.as_deref().unwrap_or_default(),
            &a.combined_resource(),
            &a.subresource,
        )
        && (names.is_empty() || names.contains(&a.name))
}

/// `*` or the value itself.
fn matches(allowed: &[String], value: &str) -> bool {
    allowed.iter().any(|v| v == "*" || v == value)
}

/// `*`, the resource (with its subresource), or `*/<subresource>`.
fn resource_matches(resources: &[String], combined: &str, subresource: &str) -> bool {
    resources.iter().any(|r| {
        r == "*"
            || r == combined
            || (!subresource.is_empty() && r.strip_prefix("*/") == Some(subresource))
    })
}

/// `*`, the path, or a prefix ending in `*`.
fn url_matches(rule: &str, path: &str) -> bool {
    rule == "*"
        || rule == path
        || rule
            .strip_suffix('*')
            .is_some_and(|prefix| path.starts_with(prefix))
}

/// Whether an object's labels satisfy a `LabelSelector` object.
pub(super) fn selector_matches(selector: &Value, obj: &Value) -> bool {
    crate::validation::builtin::selector_matches(
        selector,
        obj.pointer("/metadata/labels").and_then(Value::as_object),
    )
}
