//! The roles and bindings a new cluster has (`bootstrappolicy/policy.go`): `cluster-admin` for
//! `system:masters`; the aggregated user-facing roles `admin`, `edit` and `view` with the
//! `system:aggregate-to-*` roles that fill them; `system:discovery`, `system:basic-user` and
//! `system:public-info-viewer` for everyone. [`ensure`] creates the missing ones, as kube-apiserver's
//! bootstrap-roles hook does at start.

use serde_json::{Value, json};

use super::GROUP;
use crate::resource::GroupResource;
use crate::store::{Store, WriteOptions};

const READ: &[&str] = &["get", "list", "watch"];
const WRITE: &[&str] = &["create", "delete", "deletecollection", "patch", "update"];
const READ_WRITE: &[&str] = &[
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

/// The label and value the aggregated roles select on.
pub const AGGREGATE_TO_ADMIN: &str = "rbac.authorization.k8s.io/aggregate-to-admin";
/// Selected by `edit`.
pub const AGGREGATE_TO_EDIT: &str = "rbac.authorization.k8s.io/aggregate-to-edit";
/// Selected by `view`.
pub const AGGREGATE_TO_VIEW: &str = "rbac.authorization.k8s.io/aggregate-to-view";

fn rule(verbs: &[&str], groups: &[&str], resources: &[&str]) -> Value {
    json!({"verbs": verbs, "apiGroups": groups, "resources": resources})
}

fn urls(verbs: &[&str], urls: &[&str]) -> Value {
    json!({"verbs": verbs, "nonResourceURLs": urls})
}

fn cluster_role(name: &str, labels: Value, body: Value) -> Value {
    let mut role = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {
            "name": name,
            "labels": {"kubernetes.io/bootstrapping": "rbac-defaults"},
            "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"},
        },
    });
    if let (Some(l), Value::Object(extra)) = (role.pointer_mut("/metadata/labels"), labels)
        && let Value::Object(l) = l
    {
        l.extend(extra);
    }
    if let (Value::Object(r), Value::Object(b)) = (&mut role, body) {
        r.extend(b);
    }
    role
}

fn aggregated(name: &str, selects: &str, labels: Value) -> Value {
    cluster_role(
        name,
        labels,
        json!({"aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {selects: "true"}}]}}),
    )
}

/// The default ClusterRoles.
pub fn cluster_roles() -> Vec<Value> {
    let rules = |r: Vec<Value>| json!({ "rules": r });
    vec![
        cluster_role(
            "cluster-admin",
            json!({}),
            rules(vec![rule(&["*"], &["*"], &["*"]), urls(&["*"], &["*"])]),
        ),
        aggregated("admin", AGGREGATE_TO_ADMIN, json!({})),
        aggregated(
            "edit",
            AGGREGATE_TO_EDIT,
            json!({AGGREGATE_TO_ADMIN: "true"}),
        ),
        aggregated(
            "view",
            AGGREGATE_TO_VIEW,
            json!({AGGREGATE_TO_EDIT: "true"}),
        ),
        cluster_role(
            "system:aggregate-to-admin",
            json!({AGGREGATE_TO_ADMIN: "true"}),
            rules(vec![
                rule(
                    &["create"],
                    &["authorization.k8s.io"],
                    &["localsubjectaccessreviews"],
                ),
                rule(READ_WRITE, &[GROUP], &["rolebindings", "roles"]),
            ]),
        ),
        cluster_role(
            "system:aggregate-to-edit",
            json!({AGGREGATE_TO_EDIT: "true"}),
            rules(aggregate_to_edit()),
        ),
        cluster_role(
            "system:aggregate-to-view",
            json!({AGGREGATE_TO_VIEW: "true"}),
            rules(aggregate_to_view()),
        ),
        cluster_role(
            "system:discovery",
            json!({}),
            rules(vec![urls(
                &["get"],
                &[
                    "/api",
                    "/api/*",
                    "/apis",
                    "/apis/*",
                    "/healthz",
                    "/livez",
                    "/openapi",
                    "/openapi/*",
                    "/readyz",
                    "/version",
                    "/version/",
                ],
            )]),
        ),
        cluster_role(
            "system:public-info-viewer",
            json!({}),
            rules(vec![urls(
                &["get"],
                &["/healthz", "/livez", "/readyz", "/version", "/version/"],
            )]),
        ),
        cluster_role(
            "system:basic-user",
            json!({}),
            rules(vec![
                rule(
                    &["create"],
                    &["authorization.k8s.io"],
                    &["selfsubjectaccessreviews", "selfsubjectrulesreviews"],
                ),
                rule(
                    &["create"],
                    &["authentication.k8s.io"],
                    &["selfsubjectreviews"],
                ),
            ]),
        ),
    ]
}

fn aggregate_to_edit() -> Vec<Value> {
    vec![
        rule(
            READ,
            &[""],
            &[
                "pods/attach",
                "pods/exec",
                "pods/portforward",
                "pods/proxy",
                "secrets",
                "services/proxy",
            ],
        ),
        rule(&["impersonate"], &[""], &["serviceaccounts"]),
        rule(
            WRITE,
            &[""],
            &[
                "pods",
                "pods/attach",
                "pods/exec",
                "pods/portforward",
                "pods/proxy",
            ],
        ),
        rule(&["create"], &[""], &["pods/eviction"]),
        rule(
            WRITE,
            &[""],
            &[
                "configmaps",
                "events",
                "persistentvolumeclaims",
                "replicationcontrollers",
                "replicationcontrollers/scale",
                "secrets",
                "serviceaccounts",
                "services",
                "services/proxy",
            ],
        ),
        rule(&["create"], &[""], &["serviceaccounts/token"]),
        rule(
            WRITE,
            &["apps"],
            &[
                "daemonsets",
                "deployments",
                "deployments/rollback",
                "deployments/scale",
                "replicasets",
                "replicasets/scale",
                "statefulsets",
                "statefulsets/scale",
            ],
        ),
        rule(WRITE, &["autoscaling"], &["horizontalpodautoscalers"]),
        rule(WRITE, &["batch"], &["cronjobs", "jobs"]),
        rule(
            WRITE,
            &["extensions"],
            &[
                "daemonsets",
                "deployments",
                "deployments/rollback",
                "deployments/scale",
                "ingresses",
                "networkpolicies",
                "replicasets",
                "replicasets/scale",
                "replicationcontrollers/scale",
            ],
        ),
        rule(WRITE, &["policy"], &["poddisruptionbudgets"]),
        rule(
            WRITE,
            &["networking.k8s.io"],
            &["ingresses", "networkpolicies"],
        ),
        rule(READ_WRITE, &["coordination.k8s.io"], &["leases"]),
    ]
}

fn aggregate_to_view() -> Vec<Value> {
    vec![
        rule(
            READ,
            &[""],
            &[
                "configmaps",
                "endpoints",
                "persistentvolumeclaims",
                "persistentvolumeclaims/status",
                "pods",
                "replicationcontrollers",
                "replicationcontrollers/scale",
                "serviceaccounts",
                "services",
                "services/status",
            ],
        ),
        rule(
            READ,
            &[""],
            &[
                "bindings",
                "events",
                "limitranges",
                "namespaces/status",
                "pods/log",
                "pods/status",
                "replicationcontrollers/status",
                "resourcequotas",
                "resourcequotas/status",
            ],
        ),
        rule(READ, &[""], &["namespaces"]),
        rule(READ, &["discovery.k8s.io"], &["endpointslices"]),
        rule(
            READ,
            &["apps"],
            &[
                "controllerrevisions",
                "daemonsets",
                "daemonsets/status",
                "deployments",
                "deployments/scale",
                "deployments/status",
                "replicasets",
                "replicasets/scale",
                "replicasets/status",
                "statefulsets",
                "statefulsets/scale",
                "statefulsets/status",
            ],
        ),
        rule(
            READ,
            &["autoscaling"],
            &[
                "horizontalpodautoscalers",
                "horizontalpodautoscalers/status",
            ],
        ),
        rule(
            READ,
            &["batch"],
            &["cronjobs", "cronjobs/status", "jobs", "jobs/status"],
        ),
        rule(
            READ,
            &["extensions"],
            &[
                "daemonsets",
                "daemonsets/status",
                "deployments",
                "deployments/scale",
                "deployments/status",
                "ingresses",
                "ingresses/status",
                "networkpolicies",
                "replicasets",
                "replicasets/scale",
                "replicasets/status",
                "replicationcontrollers/scale",
            ],
        ),
        rule(
            READ,
            &["policy"],
            &["poddisruptionbudgets", "poddisruptionbudgets/status"],
        ),
        rule(
            READ,
            &["networking.k8s.io"],
            &["ingresses", "ingresses/status", "networkpolicies"],
        ),
    ]
}

/// The default ClusterRoleBindings: `(name, groups)`, each binding the ClusterRole of its name.
const BINDINGS: &[(&str, &[&str])] = &[
    ("cluster-admin", &["system:masters"]),
    ("system:basic-user", &["system:authenticated"]),
    ("system:discovery", &["system:authenticated"]),
    (
        "system:public-info-viewer",
        &["system:authenticated", "system:unauthenticated"],
    ),
];

/// The default ClusterRoleBindings.
pub fn cluster_role_bindings() -> Vec<Value> {
    BINDINGS
        .iter()
        .map(|(name, groups)| {
            let subjects: Vec<Value> = groups
                .iter()
                .map(|g| json!({"apiGroup": GROUP, "kind": "Group", "name": g}))
                .collect();
            json!({
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": {
                    "name": name,
                    "labels": {"kubernetes.io/bootstrapping": "rbac-defaults"},
                    "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"},
                },
                "roleRef": {"apiGroup": GROUP, "kind": "ClusterRole", "name": name},
                "subjects": subjects,
            })
        })
        .collect()
}

/// Creates the default ClusterRoles and ClusterRoleBindings that do not exist.
pub fn ensure(store: &Store) {
    let opts = WriteOptions::manager("kube-apiserver");
    for (resource, objects) in [
        ("clusterroles", cluster_roles()),
        ("clusterrolebindings", cluster_role_bindings()),
    ] {
        let gr = GroupResource::new(GROUP, resource);
        for obj in objects {
            let name = crate::meta::name_of(&obj).to_string();
            if store.get(&gr, None, &name).is_err()
                && let Err(e) = store.create(&gr, None, obj, &opts)
            {
                tracing::warn!(%name, error = %e, "creating a default {resource} failed");
            }
        }
    }
}
