//! RBAC with real clients: a token from `kubectl create token` is allowed what its roles grant and refused
//! the rest in kube-apiserver's words, RoleBindings grant only in their namespace, aggregated ClusterRoles
//! pick up labelled roles, impersonation (`--as`) answers from the same authorizer, and a token dies with
//! its service account.

use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::api::rbac::v1::ClusterRole;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use kube_sim::Sim;
use serde_json::json;

use crate::{DEADLINE, apply, kubectl_at, kubectl_ok, start};

/// A namespace `demo` with a service account `robot`, a Role granting `get`/`list` on ConfigMaps and
/// `patch` on `deployments/status`, and a RoleBinding of it to the account.
const ROBOT: &str = r#"
apiVersion: v1
kind: Namespace
metadata: {name: demo}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: robot, namespace: demo}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: config-reader, namespace: demo}
rules:
  - apiGroups: [""]
    resources: [configmaps]
    verbs: [get, list]
  - apiGroups: [apps]
    resources: [deployments/status]
    verbs: [patch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: robot-reads-config, namespace: demo}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: config-reader}
subjects:
  - {kind: ServiceAccount, name: robot, namespace: demo}
"#;

/// A kubeconfig for the simulator that authenticates with `token`.
struct TokenKubeconfig {
    _dir: tempfile::TempDir,
    path: PathBuf,
}

impl TokenKubeconfig {
    fn new(sim: &Sim, token: &str) -> TokenKubeconfig {
        use base64::Engine as _;
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = dir.path().join("kubeconfig");
        let ca = base64::engine::general_purpose::STANDARD
            .encode(sim.ca_pem().expect("the simulator serves HTTPS"));
        std::fs::write(
            &path,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {}\n    certificate-authority-data: {ca}\n\
                 users:\n- name: u\n  user:\n    token: {token}\ncontexts:\n- name: c\n  context: {{cluster: c, user: u, namespace: demo}}\ncurrent-context: c\n",
                sim.url()
            ),
        )
        .expect("the kubeconfig is written");
        TokenKubeconfig { _dir: dir, path }
    }

    fn path(&self) -> &Path {
        &self.path
    }

    async fn client(&self) -> kube::Client {
        let kc = kube::config::Kubeconfig::read_from(&self.path).unwrap();
        let config =
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await
                .unwrap();
        kube::Client::try_from(config).unwrap()
    }
}

/// `kubectl create token robot -n demo`.
async fn robot_token(sim: &Sim) -> String {
    let token = kubectl_ok(sim, &["create", "token", "robot", "-n", "demo"]).await;
    let token = token.trim().to_string();
    assert_eq!(token.split('.').count(), 3, "a JWT-shaped token: {token}");
    token
}

/// kubectl's stderr and whether it succeeded.
async fn kubectl_as(kubeconfig: &TokenKubeconfig, args: &[&str]) -> (bool, String, String) {
    let out = kubectl_at(kubeconfig.path(), args).await;
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_created_token_is_allowed_what_its_role_grants_and_refused_the_rest() {
    let sim = start().await;
    apply(&sim, ROBOT).await;
    kubectl_ok(
        &sim,
        &[
            "create",
            "configmap",
            "settings",
            "-n",
            "demo",
            "--from-literal=a=b",
        ],
    )
    .await;
    let token = robot_token(&sim).await;
    let robot = TokenKubeconfig::new(&sim, &token);

    let who = kubectl_as(
        &robot,
        &["auth", "whoami", "-o", "jsonpath={.status.userInfo}"],
    )
    .await;
    assert!(who.0, "{who:?}");
    let info: serde_json::Value = serde_json::from_str(&who.1).unwrap();
    assert_eq!(info["username"], "system:serviceaccount:demo:robot");
    assert_eq!(
        info["groups"],
        json!([
            "system:serviceaccounts",
            "system:serviceaccounts:demo",
            "system:authenticated"
        ])
    );

    let (ok, out, err) = kubectl_as(&robot, &["get", "configmaps", "-o", "name"]).await;
    assert!(ok, "{err}");
    assert!(out.contains("configmap/settings"), "{out}");
    let (ok, _, err) = kubectl_as(&robot, &["get", "secrets"]).await;
    assert!(!ok);
    assert!(
        err.contains(r#"Error from server (Forbidden): secrets is forbidden: User "system:serviceaccount:demo:robot" cannot list resource "secrets" in API group "" in the namespace "demo""#),
        "{err}"
    );
    let (ok, _, err) = kubectl_as(&robot, &["delete", "configmap", "settings"]).await;
    assert!(!ok);
    assert!(
        err.contains(r#"configmaps "settings" is forbidden: User "system:serviceaccount:demo:robot" cannot delete resource "configmaps" in API group "" in the namespace "demo""#),
        "{err}"
    );
    let (ok, _, err) = kubectl_as(&robot, &["get", "configmaps", "-n", "default"]).await;
    assert!(!ok);
    assert!(err.contains(r#"in the namespace "default""#), "{err}");
    let (ok, _, err) = kubectl_as(&robot, &["get", "namespaces"]).await;
    assert!(!ok);
    assert!(
        err.contains(r#"cannot list resource "namespaces" in API group "" at the cluster scope"#),
        "{err}"
    );
    let (ok, _, err) = kubectl_as(&robot, &["get", "--raw", "/metrics"]).await;
    assert!(!ok);
    assert!(
        err.contains(
            r#"forbidden: User "system:serviceaccount:demo:robot" cannot get path "/metrics""#
        ),
        "{err}"
    );

    // What can-i answers for the token matches what the requests got.
    for (args, want) in [
        (&["list", "configmaps"][..], "yes"),
        (&["list", "secrets"][..], "no"),
        (&["patch", "deployments", "--subresource=status"][..], "yes"),
        (&["patch", "deployments"][..], "no"),
    ] {
        let mut all = vec!["auth", "can-i"];
        all.extend_from_slice(args);
        let (_, out, _) = kubectl_as(&robot, &all).await;
        assert_eq!(out.trim(), want, "can-i {args:?}");
    }
    let (ok, rules, err) = kubectl_as(&robot, &["auth", "can-i", "--list"]).await;
    assert!(ok, "{err}");
    assert!(
        rules
            .lines()
            .any(|l| l.starts_with("configmaps ") && l.contains("[get list]")),
        "{rules}"
    );
    assert!(!rules.contains("*.*"), "{rules}");

    // Tokens live at least ten minutes; a missing account gets none.
    let short = kubectl_at(
        sim.kubeconfig_path(),
        &["create", "token", "robot", "-n", "demo", "--duration=1m"],
    )
    .await;
    let err = String::from_utf8_lossy(&short.stderr);
    assert!(
        err.contains("may not specify a duration less than 10 minutes"),
        "{err}"
    );
    let missing = kubectl_at(
        sim.kubeconfig_path(),
        &["create", "token", "ghost", "-n", "demo"],
    )
    .await;
    let err = String::from_utf8_lossy(&missing.stderr);
    assert!(
        err.contains(r#"serviceaccounts "ghost" not found"#),
        "{err}"
    );

    // Deleting the account revokes its tokens.
    kubectl_ok(&sim, &["delete", "serviceaccount", "robot", "-n", "demo"]).await;
    let (ok, _, err) = kubectl_as(&robot, &["get", "configmaps"]).await;
    assert!(!ok);
    assert!(
        err.contains("You must be logged in to the server"),
        "a 401: {err}"
    );
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admin_impersonates_a_service_account_and_can_i_answers_from_its_bindings() {
    let sim = start().await;
    apply(&sim, ROBOT).await;
    let can_i = |args: &'static [&'static str]| {
        let mut all = vec!["auth", "can-i", "--as=system:serviceaccount:demo:robot"];
        all.extend_from_slice(args);
        all
    };
    for (args, want) in [
        (&["get", "configmaps", "-n", "demo"][..], "yes"),
        (&["get", "configmaps", "-n", "default"][..], "no"),
        (&["get", "pods", "-n", "demo"][..], "no"),
    ] {
        let out = kubectl_at(sim.kubeconfig_path(), &can_i(args)).await;
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            want,
            "{args:?}"
        );
    }
    // A RoleBinding to the ClusterRole `view` grants it in its namespace only.
    kubectl_ok(
        &sim,
        &[
            "create",
            "rolebinding",
            "robot-view",
            "-n",
            "demo",
            "--clusterrole=view",
            "--serviceaccount=demo:robot",
        ],
    )
    .await;
    for (args, want) in [
        (&["get", "pods", "-n", "demo"][..], "yes"),
        (&["watch", "deployments.apps", "-n", "demo"][..], "yes"),
        (&["get", "pods", "-n", "default"][..], "no"),
        (&["get", "secrets", "-n", "demo"][..], "no"),
        (&["create", "pods", "-n", "demo"][..], "no"),
    ] {
        let out = kubectl_at(sim.kubeconfig_path(), &can_i(args)).await;
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            want,
            "{args:?}"
        );
    }
    // Requests made as the account are refused as its own would be.
    let out = kubectl_at(
        sim.kubeconfig_path(),
        &[
            "get",
            "secrets",
            "-n",
            "demo",
            "--as=system:serviceaccount:demo:robot",
        ],
    )
    .await;
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(r#"User "system:serviceaccount:demo:robot" cannot list resource "secrets""#),
        "{err}"
    );

    // The account itself may not impersonate anyone.
    let token = robot_token(&sim).await;
    let robot = TokenKubeconfig::new(&sim, &token);
    let (ok, _, err) = kubectl_as(
        &robot,
        &[
            "get",
            "--raw",
            "/api/v1/namespaces/demo/configmaps",
            "--as=jane",
        ],
    )
    .await;
    assert!(!ok);
    assert!(
        err.contains(r#"users "jane" is forbidden: User "system:serviceaccount:demo:robot" cannot impersonate resource "users" in API group "" at the cluster scope"#),
        "{err}"
    );
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_rs_gets_upstreams_forbidden_status_for_lists_watches_and_writes() {
    let sim = start().await;
    apply(&sim, ROBOT).await;
    let token = robot_token(&sim).await;
    let client = TokenKubeconfig::new(&sim, &token).client().await;
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), "demo");
    config_maps
        .list(&ListParams::default())
        .await
        .expect("lists are granted");
    let created = config_maps
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "x"}})).unwrap(),
        )
        .await;
    let kube::Error::Api(status) = created.expect_err("create is not granted") else {
        panic!("an API error")
    };
    assert_eq!((status.code, status.reason.as_str()), (403, "Forbidden"));
    assert_eq!(
        status.message,
        r#"configmaps is forbidden: User "system:serviceaccount:demo:robot" cannot create resource "configmaps" in API group "" in the namespace "demo""#
    );

    let secrets: Api<Secret> = Api::namespaced(client.clone(), "demo");
    let kube::Error::Api(status) = secrets
        .list(&ListParams::default())
        .await
        .expect_err("no lists of secrets")
    else {
        panic!("an API error")
    };
    assert_eq!(status.code, 403);
    assert!(
        status.message.contains(r#"cannot list resource "secrets""#),
        "{}",
        status.message
    );
    // A watch is its own verb: granted `list`, the account may still not watch.
    let mut events = std::pin::pin!(watcher::watcher(
        config_maps.clone(),
        watcher::Config::default()
    ));
    let first = tokio::time::timeout(DEADLINE, futures::StreamExt::next(&mut events)).await;
    let mut seen_forbidden = false;
    if let Ok(Some(Ok(_))) = first {
        // The initial list works; the watch that follows is refused.
        for _ in 0..5 {
            match tokio::time::timeout(DEADLINE, futures::StreamExt::next(&mut events)).await {
                Ok(Some(Err(e))) => {
                    seen_forbidden = e
                        .to_string()
                        .contains(r#"cannot watch resource "configmaps""#)
                        || format!("{e:?}").contains(r#"cannot watch resource \"configmaps\""#);
                    break;
                }
                Ok(Some(Ok(_))) => continue,
                _ => break,
            }
        }
    }
    assert!(seen_forbidden, "the watch is refused with verb watch");

    // The Status body carries the group and kind in `details`.
    let (code, body) = crate::get(
        &client,
        "/apis/apps/v1/namespaces/demo/deployments/web/status",
    )
    .await;
    assert_eq!(code, 403, "{body}");
    let status = crate::json(&body);
    assert_eq!(status["reason"], "Forbidden");
    assert_eq!(
        status["details"],
        json!({"name": "web", "group": "apps", "kind": "deployments"})
    );
    assert_eq!(
        status["message"],
        r#"deployments.apps "web" is forbidden: User "system:serviceaccount:demo:robot" cannot get resource "deployments/status" in API group "apps" in the namespace "demo""#
    );
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_aggregated_cluster_role_picks_up_a_labelled_role_and_grants_it() {
    let sim = start().await;
    apply(&sim, ROBOT).await;
    let admin = sim.client().await.unwrap();
    let roles: Api<ClusterRole> = Api::all(admin.clone());
    roles
        .patch(
            "secret-readers",
            &PatchParams::apply("test"),
            &Patch::Apply(json!({
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                "metadata": {"name": "secret-readers"},
                "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {"example.com/aggregate-to-secret-readers": "true"}}]},
            })),
        )
        .await
        .unwrap();
    kubectl_ok(
        &sim,
        &[
            "create",
            "rolebinding",
            "robot-secrets",
            "-n",
            "demo",
            "--clusterrole=secret-readers",
            "--serviceaccount=demo:robot",
        ],
    )
    .await;
    let token = robot_token(&sim).await;
    let secrets: Api<Secret> =
        Api::namespaced(TokenKubeconfig::new(&sim, &token).client().await, "demo");
    assert!(
        secrets.list(&ListParams::default()).await.is_err(),
        "nothing aggregated yet"
    );

    roles
        .patch(
            "read-secrets",
            &PatchParams::apply("test"),
            &Patch::Apply(json!({
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                "metadata": {"name": "read-secrets", "labels": {"example.com/aggregate-to-secret-readers": "true"}},
                "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["list"]}],
            })),
        )
        .await
        .unwrap();
    let aggregated = tokio::time::timeout(
        DEADLINE,
        kube::runtime::wait::await_condition(
            roles.clone(),
            "secret-readers",
            |r: Option<&ClusterRole>| {
                r.and_then(|r| r.rules.as_ref())
                    .is_some_and(|rules| !rules.is_empty())
            },
        ),
    )
    .await
    .expect("aggregated within the deadline")
    .unwrap()
    .unwrap();
    let rules = aggregated.rules.unwrap();
    assert_eq!(rules.len(), 1);
    assert_eq!(
        rules[0].resources.as_deref(),
        Some(&["secrets".to_string()][..])
    );
    secrets
        .list(&ListParams::default())
        .await
        .expect("the aggregated rule grants the list");
    let other: Api<Secret> =
        Api::namespaced(TokenKubeconfig::new(&sim, &token).client().await, "default");
    assert!(
        other.list(&ListParams::default()).await.is_err(),
        "only in the binding's namespace"
    );

    // The default aggregated roles exist as on a new cluster.
    let (view, edit) = (
        roles.get("view").await.unwrap(),
        roles.get("edit").await.unwrap(),
    );
    assert!(view.aggregation_rule.is_some() && view.rules.is_some_and(|r| !r.is_empty()));
    assert!(edit.rules.unwrap().iter().any(|r| {
        r.resources
            .iter()
            .flatten()
            .any(|x| x == "serviceaccounts/token")
    }));
    for name in [
        "cluster-admin",
        "admin",
        "system:discovery",
        "system:public-info-viewer",
        "system:basic-user",
    ] {
        roles
            .get(name)
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    sim.shutdown().await;
}
