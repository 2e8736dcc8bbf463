use serde_json::{Value, json};

use super::*;
use crate::resource::GroupResource;
use crate::store::{Store, StoreConfig, WriteOptions};

fn store() -> Store {
    let store = Store::new(StoreConfig { history: 100 });
    defaults::ensure(&store);
    aggregation::aggregate(&store);
    store
}

fn create(store: &Store, resource: &str, namespace: Option<&str>, obj: Value) {
    store
        .create(
            &GroupResource::new(GROUP, resource),
            namespace,
            obj,
            &WriteOptions::manager("test"),
        )
        .unwrap();
}

fn allowed(store: &Store, user: &User, a: &Attributes) -> bool {
    authorize(store, user, a).allowed
}

#[test]
fn users_get_the_groups_kubernetes_gives_them() {
    assert_eq!(
        User::admin().groups,
        ["system:masters", "system:authenticated"]
    );
    assert_eq!(
        User::named("system:serviceaccount:team:builder").groups,
        [
            "system:serviceaccounts",
            "system:serviceaccounts:team",
            "system:authenticated"
        ]
    );
    assert_eq!(User::named("jane").groups, ["system:authenticated"]);
}

#[test]
fn a_role_grants_its_verbs_resources_and_names_in_its_namespace_only() {
    let store = store();
    store
        .create(
            &GroupResource::namespaces(),
            None,
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "demo"}}),
            &WriteOptions::manager("test"),
        )
        .unwrap();
    create(
        &store,
        "roles",
        Some("demo"),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": "r", "namespace": "demo"},
        "rules": [
            {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list"]},
            {"apiGroups": ["apps"], "resources": ["deployments/status"], "verbs": ["patch"]},
            {"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["one"], "verbs": ["*"]},
        ]}),
    );
    create(
        &store,
        "rolebindings",
        Some("demo"),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding", "metadata": {"name": "b", "namespace": "demo"},
        "roleRef": {"apiGroup": GROUP, "kind": "Role", "name": "r"},
        "subjects": [{"kind": "ServiceAccount", "name": "sa"}]}),
    );
    let sa = User::service_account("demo", "sa");
    let cm = |verb| Attributes::resource(verb, "", "configmaps").in_namespace("demo");
    assert!(allowed(&store, &sa, &cm("list")));
    assert!(!allowed(&store, &sa, &cm("watch")));
    assert!(!allowed(&store, &sa, &cm("list").in_namespace("other")));
    assert!(!allowed(
        &store,
        &User::service_account("other", "sa"),
        &cm("list")
    ));
    let mut status = Attributes::resource("patch", "apps", "deployments").in_namespace("demo");
    status.subresource = "status".to_string();
    assert!(allowed(&store, &sa, &status));
    assert!(!allowed(
        &store,
        &sa,
        &Attributes::resource("patch", "apps", "deployments").in_namespace("demo")
    ));
    let secret = |name| {
        Attributes::resource("get", "", "secrets")
            .in_namespace("demo")
            .named(name)
    };
    assert!(allowed(&store, &sa, &secret("one")));
    assert!(!allowed(&store, &sa, &secret("two")));
    let decision = authorize(&store, &sa, &cm("get"));
    assert_eq!(
        decision.reason,
        r#"RBAC: allowed by RoleBinding "b/demo" of Role "r" to ServiceAccount "sa/demo""#
    );
}

#[test]
fn denials_name_the_user_verb_resource_group_and_namespace() {
    let a = Attributes::resource("list", "", "secrets").in_namespace("demo");
    assert_eq!(
        a.forbidden_message("system:serviceaccount:demo:controller-manager"),
        r#"User "system:serviceaccount:demo:controller-manager" cannot list resource "secrets" in API group "" in the namespace "demo""#
    );
    let mut a = Attributes::resource("patch", "demo.dev-env.io", "workerpools");
    a.subresource = "status".to_string();
    assert_eq!(
        a.forbidden_message("u"),
        r#"User "u" cannot patch resource "workerpools/status" in API group "demo.dev-env.io" at the cluster scope"#
    );
    assert_eq!(
        Attributes::non_resource("get", "/metrics").forbidden_message("u"),
        r#"User "u" cannot get path "/metrics""#
    );
}

#[test]
fn everyone_authenticated_may_discover_and_review_but_not_read() {
    let store = store();
    let user = User::named("jane");
    assert!(allowed(
        &store,
        &user,
        &Attributes::non_resource("get", "/apis/apps/v1")
    ));
    assert!(!allowed(
        &store,
        &user,
        &Attributes::non_resource("get", "/metrics")
    ));
    assert!(allowed(
        &store,
        &user,
        &Attributes::resource("create", "authorization.k8s.io", "selfsubjectaccessreviews")
    ));
    assert!(!allowed(
        &store,
        &user,
        &Attributes::resource("list", "", "secrets").in_namespace("default")
    ));
    assert!(allowed(
        &store,
        &User::admin(),
        &Attributes::resource("list", "", "secrets")
    ));
}

#[test]
fn a_missing_role_is_the_reason_of_a_denial() {
    let store = store();
    create(
        &store,
        "clusterrolebindings",
        None,
        json!({"apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding", "metadata": {"name": "b"},
        "roleRef": {"apiGroup": GROUP, "kind": "ClusterRole", "name": "gone"},
        "subjects": [{"kind": "User", "name": "jane", "apiGroup": GROUP}]}),
    );
    let d = authorize(
        &store,
        &User::named("jane"),
        &Attributes::resource("get", "", "pods"),
    );
    assert!(!d.allowed);
    assert_eq!(
        d.reason,
        r#"RBAC: clusterrole.rbac.authorization.k8s.io "gone" not found"#
    );
}

#[test]
fn aggregated_roles_collect_the_rules_of_the_roles_they_select() {
    let store = store();
    let rules = |name: &str| {
        store
            .get(&GroupResource::new(GROUP, "clusterroles"), None, name)
            .unwrap()["rules"]
            .clone()
    };
    let view = rules("view");
    assert!(view.as_array().is_some_and(|r| !r.is_empty()), "{view}");
    let admin = rules("admin").to_string();
    assert!(
        admin.contains("serviceaccounts/token"),
        "edit is in admin: {admin}"
    );
    assert!(admin.contains("localsubjectaccessreviews"), "{admin}");
    create(
        &store,
        "clusterroles",
        None,
        json!({"apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole", "metadata": {"name": "widgets-view",
            "labels": {"rbac.authorization.k8s.io/aggregate-to-view": "true"}},
        "rules": [{"apiGroups": ["example.com"], "resources": ["widgets"], "verbs": ["get"]}]}),
    );
    assert!(
        aggregation::aggregate(&store) >= 3,
        "view, edit and admin change"
    );
    for role in ["view", "edit", "admin"] {
        assert!(rules(role).to_string().contains("widgets"), "{role}");
    }
}
