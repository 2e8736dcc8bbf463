//! Role-based access control, as kube-apiserver's RBAC authorizer evaluates it
//! (`plugin/pkg/auth/authorizer/rbac`): the user of a request, what the request asks
//! ([`Attributes`]), and whether a ClusterRoleBinding or a RoleBinding grants it ([`authorize`]).
//!
//! - [`authorizer`]: the decision and the rules a user has in a namespace (for rules reviews).
//! - [`defaults`]: the ClusterRoles and ClusterRoleBindings every new cluster has.
//! - [`aggregation`]: the controller that fills ClusterRoles with an `aggregationRule`.
//!
//! Members of `system:masters` (the kubeconfig's admin) are allowed everything before RBAC is asked, as
//! kube-apiserver's privileged-group authorizer does.

pub mod aggregation;
pub mod authorizer;
pub mod defaults;

pub use authorizer::{Decision, Rules, authorize, rules_for};

/// The group whose members may do everything.
pub const MASTERS: &str = "system:masters";
/// The group of every authenticated user.
pub const AUTHENTICATED: &str = "system:authenticated";
/// The prefix of a service account's user name, `system:serviceaccount:<namespace>:<name>`.
pub const SERVICE_ACCOUNT_PREFIX: &str = "system:serviceaccount:";
/// The API group of roles and bindings.
pub const GROUP: &str = "rbac.authorization.k8s.io";

/// An authenticated user.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct User {
    /// The user name, e.g. `system:serviceaccount:default:default`.
    pub name: String,
    /// The groups, `system:authenticated` last.
    pub groups: Vec<String>,
}

impl User {
    /// A user with the groups Kubernetes gives that name: a service account gets
    /// `system:serviceaccounts` and `system:serviceaccounts:<namespace>`; everyone `system:authenticated`.
    pub fn named(name: &str) -> User {
        let mut groups = Vec::new();
        if let Some((namespace, _)) = service_account(name) {
            groups = service_account_groups(namespace);
        }
        groups.push(AUTHENTICATED.to_string());
        User {
            name: name.to_string(),
            groups,
        }
    }

    /// The admin of the kubeconfig, as k3s names it: `system:admin` in `system:masters`.
    pub fn admin() -> User {
        User {
            name: "system:admin".to_string(),
            groups: vec![MASTERS.to_string(), AUTHENTICATED.to_string()],
        }
    }

    /// The user of a service account.
    pub fn service_account(namespace: &str, name: &str) -> User {
        User::named(&format!("{SERVICE_ACCOUNT_PREFIX}{namespace}:{name}"))
    }

    /// Whether the user is in `system:masters`.
    pub fn is_master(&self) -> bool {
        self.groups.iter().any(|g| g == MASTERS)
    }
}

/// The namespace and name of a service account's user name.
pub fn service_account(user: &str) -> Option<(&str, &str)> {
    let rest = user.strip_prefix(SERVICE_ACCOUNT_PREFIX)?;
    let (namespace, name) = rest.split_once(':')?;
    (!namespace.is_empty() && !name.is_empty() && !name.contains(':')).then_some((namespace, name))
}

/// The groups of every service account of a namespace.
pub fn service_account_groups(namespace: &str) -> Vec<String> {
    vec![
        "system:serviceaccounts".to_string(),
        format!("system:serviceaccounts:{namespace}"),
    ]
}

/// What a request asks, as kube-apiserver's request info and authorizer attributes carry it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Attributes {
    /// The verb: `get`, `list`, `watch`, `create`, … for resources; the lower-case HTTP method otherwise.
    pub verb: String,
    /// Whether this is a request for a resource (else for a non-resource URL).
    pub resource_request: bool,
    /// The namespace; empty at the cluster scope.
    pub namespace: String,
    /// The API group; empty for the core group.
    pub api_group: String,
    /// The API version.
    pub api_version: String,
    /// The resource, e.g. `deployments`.
    pub resource: String,
    /// The subresource, e.g. `status`; empty when none.
    pub subresource: String,
    /// The object's name; empty for collections.
    pub name: String,
    /// The URL path, for non-resource requests.
    pub path: String,
}

impl Attributes {
    /// A resource request.
    pub fn resource(verb: &str, api_group: &str, resource: &str) -> Attributes {
        Attributes {
            verb: verb.to_string(),
            resource_request: true,
            api_group: api_group.to_string(),
            resource: resource.to_string(),
            ..Attributes::default()
        }
    }

    /// A non-resource request.
    pub fn non_resource(verb: &str, path: &str) -> Attributes {
        Attributes {
            verb: verb.to_string(),
            path: path.to_string(),
            ..Attributes::default()
        }
    }

    /// In a namespace.
    pub fn in_namespace(mut self, namespace: &str) -> Attributes {
        self.namespace = namespace.to_string();
        self
    }

    /// Of a named object.
    pub fn named(mut self, name: &str) -> Attributes {
        self.name = name.to_string();
        self
    }

    /// `resource/subresource`, or the resource alone.
    pub fn combined_resource(&self) -> String {
        if self.subresource.is_empty() {
            self.resource.clone()
        } else {
            format!("{}/{}", self.resource, self.subresource)
        }
    }

    /// Why `user` may not do this, in kube-apiserver's words (`forbiddenMessage`).
    pub fn forbidden_message(&self, user: &str) -> String {
        if !self.resource_request {
            return format!("User {user:?} cannot {} path {:?}", self.verb, self.path);
        }
        let resource = self.combined_resource();
        if self.namespace.is_empty() {
            format!(
                "User {user:?} cannot {} resource {resource:?} in API group {:?} at the cluster scope",
                self.verb, self.api_group
            )
        } else {
            format!(
                "User {user:?} cannot {} resource {resource:?} in API group {:?} in the namespace {:?}",
                self.verb, self.api_group, self.namespace
            )
        }
    }
}

#[cfg(test)]
mod tests;
