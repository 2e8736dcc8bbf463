//! Resource types the simulator serves: the built-in table and the descriptions of custom resources.
//!
//! A [`ResourceInfo`] is everything the store and the HTTP layer need to know about one resource:
//! its names, scope, served versions, subresources, how `generation` moves, which lists are merged by key,
//! and (for custom resources) the structural schema used for pruning.

use std::cmp::Ordering;
use std::fmt;

use serde_json::Value;

/// A resource identified by API group and plural name, independent of version.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GroupResource {
    /// The API group; empty for the core group.
    pub group: String,
    /// The plural resource name, for example `deployments`.
    pub resource: String,
}

impl GroupResource {
    /// Builds a group/resource pair.
    pub fn new(group: &str, resource: &str) -> GroupResource {
        GroupResource {
            group: group.to_string(),
            resource: resource.to_string(),
        }
    }

    /// The group/resource of a `k8s-openapi` type, for example `GroupResource::of::<Pod>()`.
    pub fn of<K: k8s_openapi::Resource>() -> GroupResource {
        GroupResource::new(K::GROUP, K::URL_PATH_SEGMENT)
    }
}

/// `GroupResource::<name>()` for the built-in resources the simulator's
/// own code names.
macro_rules! built_in_resources {
    ($($(#[$doc:meta])* $name:ident => ($group:literal, $resource:literal);)*) => {
        impl GroupResource {
            $(
                $(#[$doc])*
                pub fn $name() -> GroupResource {
                    GroupResource::new($group, $resource)
                }
            )*
        }
    };
}

built_in_resources! {
    /// Core `pods`.
    pods => ("", "pods");
    /// Core `namespaces`.
    namespaces => ("", "namespaces");
    /// Core `events`.
    events => ("", "events");
    /// Core `nodes`.
    nodes => ("", "nodes");
    /// `apps` `deployments`.
    deployments => ("apps", "deployments");
    /// `apps` `replicasets`.
    replicasets => ("apps", "replicasets");
    /// `apiextensions.k8s.io` `customresourcedefinitions`.
    crds => ("apiextensions.k8s.io", "customresourcedefinitions");
}

impl fmt::Display for GroupResource {
    /// Formats like Kubernetes' qualified resource: `deployments.apps`, or `pods` for the core group.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.group.is_empty() {
            write!(f, "{}", self.resource)
        } else {
            write!(f, "{}.{}", self.resource, self.group)
        }
    }
}

/// How `metadata.generation` is maintained for a resource.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GenerationRule {
    /// No generation is kept (pods, config maps and most core types).
    None,
    /// Starts at 1 and bumps when `spec` changes (ReplicaSets, CRDs).
    Spec,
    /// Bumps when `spec` or `metadata.annotations` change (Deployments).
    SpecOrAnnotations,
    /// Bumps on any change outside `metadata` (custom resources); `status` counts only without the status subresource.
    NonMetadata,
}

/// Where a resource comes from.
#[derive(Clone, Debug, PartialEq)]
pub enum Origin {
    /// Compiled into the simulator; strategic merge patch is accepted.
    BuiltIn,
    /// Served because a CustomResourceDefinition is established.
    Custom(CustomInfo),
}

/// What a custom resource needs beyond the common fields.
#[derive(Clone, Debug, PartialEq)]
pub struct CustomInfo {
    /// The name of the defining CRD, `<plural>.<group>`.
    pub crd_name: String,
    /// The openAPIV3Schema of each served version, by version name.
    pub schemas: Vec<(String, Value)>,
    /// The `additionalPrinterColumns` of each served version, by version name.
    pub printer_columns: Vec<(String, Vec<PrinterColumn>)>,
}

/// One `additionalPrinterColumns` entry of a CRD version.
#[derive(Clone, Debug, PartialEq)]
pub struct PrinterColumn {
    /// The column header.
    pub name: String,
    /// The OpenAPI type (`string`, `integer`, `date`, ...).
    pub type_: String,
    /// The simple JSONPath the cell comes from.
    pub json_path: String,
    /// 0 for the default view, more for `-o wide`.
    pub priority: i64,
}

impl ResourceInfo {
    /// The printer columns of a version of a custom resource (empty for built-ins or when none are declared).
    pub fn printer_columns(&self, version: &str) -> &[PrinterColumn] {
        match &self.origin {
            Origin::Custom(c) => c
                .printer_columns
                .iter()
                .find(|(v, _)| v == version)
                .map(|(_, cols)| cols.as_slice())
                .unwrap_or(&[]),
            Origin::BuiltIn => &[],
        }
    }
}

/// Everything the simulator knows about one resource.
#[derive(Clone, Debug, PartialEq)]
pub struct ResourceInfo {
    /// API group, empty for core.
    pub group: String,
    /// Served versions, preferred first.
    pub versions: Vec<String>,
    /// Plural name.
    pub plural: String,
    /// Singular name.
    pub singular: String,
    /// Kind.
    pub kind: String,
    /// Kind of the list type.
    pub list_kind: String,
    /// Whether objects live in namespaces.
    pub namespaced: bool,
    /// Short names for kubectl.
    pub short_names: Vec<String>,
    /// Categories for kubectl (`all`).
    pub categories: Vec<String>,
    /// Whether a `/status` subresource exists.
    pub status_subresource: bool,
    /// Whether a `/scale` subresource exists.
    pub scale_subresource: bool,
    /// Whether a `/log` subresource exists (pods).
    pub log_subresource: bool,
    /// Whether this is a review: `create` is its only verb, answered at once and never stored
    /// (`SelfSubjectAccessReview`, `SelfSubjectReview`).
    pub review: bool,
    /// Where objects of another group are kept when this resource is a second view of them
    /// (`events.k8s.io` Events are core Events).
    pub stored_as: Option<GroupResource>,
    /// How `generation` moves.
    pub generation: GenerationRule,
    /// Built-in or custom.
    pub origin: Origin,
}

impl ResourceInfo {
    /// The group/resource key of this resource.
    pub fn group_resource(&self) -> GroupResource {
        GroupResource::new(&self.group, &self.plural)
    }

    /// The group/resource its objects are stored under: its own, or the one it is a view of.
    pub fn storage(&self) -> GroupResource {
        self.stored_as
            .clone()
            .unwrap_or_else(|| self.group_resource())
    }

    /// The preferred version.
    pub fn preferred_version(&self) -> &str {
        self.versions.first().map(String::as_str).unwrap_or("v1")
    }

    /// `apiVersion` for a version of this resource.
    pub fn api_version(&self, version: &str) -> String {
        if self.group.is_empty() {
            version.to_string()
        } else {
            format!("{}/{}", self.group, version)
        }
    }

    /// Whether the version is served.
    pub fn serves(&self, version: &str) -> bool {
        self.versions.iter().any(|v| v == version)
    }

    /// Whether this resource is a custom resource.
    pub fn is_custom(&self) -> bool {
        matches!(self.origin, Origin::Custom(_))
    }

    /// The structural schema of a version of a custom resource.
    pub fn schema(&self, version: &str) -> Option<&Value> {
        match &self.origin {
            Origin::Custom(c) => c.schemas.iter().find(|(v, _)| v == version).map(|(_, s)| s),
            Origin::BuiltIn => None,
        }
    }

    /// Verbs advertised in discovery.
    pub fn verbs(&self) -> Vec<&'static str> {
        if self.review {
            return vec!["create"];
        }
        vec![
            "create",
            "delete",
            "deletecollection",
            "get",
            "list",
            "patch",
            "update",
            "watch",
        ]
    }
}

/// One row of the built-in table; the builder methods below read as the
/// row's exceptions to a namespaced resource without subresources.
struct BuiltIn {
    group: &'static str,
    version: &'static str,
    plural: &'static str,
    singular: &'static str,
    kind: &'static str,
    namespaced: bool,
    short_names: &'static [&'static str],
    all: bool,
    status: bool,
    scale: bool,
    review: bool,
    stored_as: Option<(&'static str, &'static str)>,
    generation: GenerationRule,
}

impl BuiltIn {
    /// A namespaced resource, no short names, not in `all`, no
    /// subresources, and a `generation` that never moves.
    const fn new(
        group: &'static str,
        version: &'static str,
        plural: &'static str,
        singular: &'static str,
        kind: &'static str,
    ) -> BuiltIn {
        BuiltIn {
            group,
            version,
            plural,
            singular,
            kind,
            namespaced: true,
            short_names: &[],
            all: false,
            status: false,
            scale: false,
            review: false,
            stored_as: None,
            generation: GenerationRule::None,
        }
    }

    /// A second view of the objects of another group/resource.
    const fn stored_as(self, group: &'static str, resource: &'static str) -> BuiltIn {
        BuiltIn {
            stored_as: Some((group, resource)),
            ..self
        }
    }

    /// A review: cluster-scoped, `create` only, never stored.
    const fn review(self) -> BuiltIn {
        BuiltIn {
            review: true,
            namespaced: false,
            ..self
        }
    }

    const fn cluster_scoped(self) -> BuiltIn {
        BuiltIn {
            namespaced: false,
            ..self
        }
    }

    const fn short(self, short_names: &'static [&'static str]) -> BuiltIn {
        BuiltIn {
            short_names,
            ..self
        }
    }

    const fn in_all(self) -> BuiltIn {
        BuiltIn { all: true, ..self }
    }

    const fn with_status(self) -> BuiltIn {
        BuiltIn {
            status: true,
            ..self
        }
    }

    const fn with_scale(self) -> BuiltIn {
        BuiltIn {
            scale: true,
            ..self
        }
    }

    const fn generation(self, generation: GenerationRule) -> BuiltIn {
        BuiltIn { generation, ..self }
    }
}

const BUILT_INS: &[BuiltIn] = &[
    BuiltIn::new("", "v1", "namespaces", "namespace", "Namespace")
        .cluster_scoped()
        .short(&["ns"])
        .with_status(),
    BuiltIn::new("", "v1", "nodes", "node", "Node")
        .cluster_scoped()
        .short(&["no"])
        .with_status(),
    BuiltIn::new("", "v1", "configmaps", "configmap", "ConfigMap").short(&["cm"]),
    BuiltIn::new("", "v1", "secrets", "secret", "Secret"),
    BuiltIn::new("", "v1", "services", "service", "Service")
        .short(&["svc"])
        .in_all()
        .with_status(),
    BuiltIn::new(
        "",
        "v1",
        "serviceaccounts",
        "serviceaccount",
        "ServiceAccount",
    )
    .short(&["sa"]),
    BuiltIn::new("", "v1", "events", "event", "Event").short(&["ev"]),
    BuiltIn::new("events.k8s.io", "v1", "events", "event", "Event")
        .short(&["ev"])
        .stored_as("", "events"),
    BuiltIn::new("", "v1", "pods", "pod", "Pod")
        .short(&["po"])
        .in_all()
        .with_status(),
    BuiltIn::new("apps", "v1", "deployments", "deployment", "Deployment")
        .short(&["deploy"])
        .in_all()
        .with_status()
        .with_scale()
        .generation(GenerationRule::SpecOrAnnotations),
    BuiltIn::new("apps", "v1", "replicasets", "replicaset", "ReplicaSet")
        .short(&["rs"])
        .in_all()
        .with_status()
        .with_scale()
        .generation(GenerationRule::Spec),
    BuiltIn::new("rbac.authorization.k8s.io", "v1", "roles", "role", "Role"),
    BuiltIn::new(
        "rbac.authorization.k8s.io",
        "v1",
        "rolebindings",
        "rolebinding",
        "RoleBinding",
    ),
    BuiltIn::new(
        "rbac.authorization.k8s.io",
        "v1",
        "clusterroles",
        "clusterrole",
        "ClusterRole",
    )
    .cluster_scoped(),
    BuiltIn::new(
        "rbac.authorization.k8s.io",
        "v1",
        "clusterrolebindings",
        "clusterrolebinding",
        "ClusterRoleBinding",
    )
    .cluster_scoped(),
    BuiltIn::new("coordination.k8s.io", "v1", "leases", "lease", "Lease"),
    BuiltIn::new(
        "authorization.k8s.io",
        "v1",
        "selfsubjectaccessreviews",
        "selfsubjectaccessreview",
        "SelfSubjectAccessReview",
    )
    .review(),
    BuiltIn::new(
        "authorization.k8s.io",
        "v1",
        "selfsubjectrulesreviews",
        "selfsubjectrulesreview",
        "SelfSubjectRulesReview",
    )
    .review(),
    BuiltIn::new(
        "authentication.k8s.io",
        "v1",
        "selfsubjectreviews",
        "selfsubjectreview",
        "SelfSubjectReview",
    )
    .review(),
    BuiltIn::new(
        "apiextensions.k8s.io",
        "v1",
        "customresourcedefinitions",
        "customresourcedefinition",
        "CustomResourceDefinition",
    )
    .cluster_scoped()
    .short(&["crd", "crds"])
    .with_status()
    .generation(GenerationRule::Spec),
];

/// The built-in resources, in discovery order.
pub fn built_ins() -> Vec<ResourceInfo> {
    BUILT_INS
        .iter()
        .map(|b| ResourceInfo {
            group: b.group.to_string(),
            versions: vec![b.version.to_string()],
            plural: b.plural.to_string(),
            singular: b.singular.to_string(),
            kind: b.kind.to_string(),
            list_kind: format!("{}List", b.kind),
            namespaced: b.namespaced,
            short_names: b.short_names.iter().map(|s| s.to_string()).collect(),
            categories: if b.all {
                vec!["all".to_string()]
            } else {
                vec![]
            },
            status_subresource: b.status,
            scale_subresource: b.scale,
            log_subresource: b.plural == "pods",
            review: b.review,
            stored_as: b.stored_as.map(|(g, r)| GroupResource::new(g, r)),
            generation: b.generation,
            origin: Origin::BuiltIn,
        })
        .collect()
}

/// Builds the description of a custom resource from a CRD object, or `None` if the CRD is malformed.
pub fn from_crd(crd: &Value) -> Option<ResourceInfo> {
    let spec = crd.get("spec")?;
    let group = spec.get("group")?.as_str()?.to_string();
    let names = spec.get("names")?;
    let plural = names.get("plural")?.as_str()?.to_string();
    let kind = names.get("kind")?.as_str()?.to_string();
    let singular = names
        .get("singular")
        .and_then(Value::as_str)
        .map(str::to_string)
        .unwrap_or_else(|| kind.to_lowercase());
    let list_kind = names
        .get("listKind")
        .and_then(Value::as_str)
        .map(str::to_string)
        .unwrap_or_else(|| format!("{kind}List"));
    let namespaced = spec.get("scope").and_then(Value::as_str) != Some("Cluster");
    let mut versions = Vec::new();
    let mut schemas = Vec::new();
    let mut printer_columns = Vec::new();
    let mut status = false;
    let mut scale = false;
    for v in spec.get("versions")?.as_array()? {
        if v.get("served").and_then(Value::as_bool) != Some(true) {
            continue;
        }
        let name = v.get("name")?.as_str()?.to_string();
        if let Some(sub) = v.get("subresources") {
            status |= sub.get("status").is_some();
            scale |= sub.get("scale").is_some();
        }
        let schema = v
            .pointer("/schema/openAPIV3Schema")
            .cloned()
            .unwrap_or(Value::Null);
        schemas.push((name.clone(), schema));
        let columns = printer_columns_of(v);
        printer_columns.push((name.clone(), columns));
        versions.push(name);
    }
    if versions.is_empty() {
        return None;
    }
    versions.sort_by(|a, b| compare_versions(a, b));
    Some(ResourceInfo {
        group,
        versions,
        plural: plural.clone(),
        singular,
        kind,
        list_kind,
        namespaced,
        short_names: strings(names.get("shortNames")),
        categories: strings(names.get("categories")),
        status_subresource: status,
        scale_subresource: scale,
        log_subresource: false,
        review: false,
        stored_as: None,
        generation: GenerationRule::NonMetadata,
        origin: Origin::Custom(CustomInfo {
            crd_name: crd
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
            schemas,
            printer_columns,
        }),
    })
}

/// The `additionalPrinterColumns` of one CRD version.
fn printer_columns_of(version: &Value) -> Vec<PrinterColumn> {
    version
        .get("additionalPrinterColumns")
        .and_then(Value::as_array)
        .map(|cols| {
            cols.iter()
                .filter_map(|c| {
                    Some(PrinterColumn {
                        name: c.get("name")?.as_str()?.to_string(),
                        type_: c
                            .get("type")
                            .and_then(Value::as_str)
                            .unwrap_or("string")
                            .to_string(),
                        json_path: c.get("jsonPath")?.as_str()?.to_string(),
                        priority: c.get("priority").and_then(Value::as_i64).unwrap_or(0),
                    })
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The strings of a JSON array; empty when absent.
pub(crate) fn strings(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// Orders versions by Kubernetes priority: GA before beta before alpha, higher numbers first,
/// then non-Kubernetes-looking names alphabetically.
pub fn compare_versions(a: &str, b: &str) -> Ordering {
    fn parse(v: &str) -> Option<(u64, u8, u64)> {
        let rest = v.strip_prefix('v')?;
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        let major: u64 = digits.parse().ok()?;
        let tail = &rest[digits.len()..];
        if tail.is_empty() {
            return Some((major, 2, 0));
        }
        let (level, minor) = if let Some(m) = tail.strip_prefix("beta") {
            (1, m)
        } else if let Some(m) = tail.strip_prefix("alpha") {
            (0, m)
        } else {
            return None;
        };
        Some((major, level, minor.parse().ok()?))
    }
    match (parse(a), parse(b)) {
        (Some((ma, la, na)), Some((mb, lb, nb))) => lb.cmp(&la).then(mb.cmp(&ma)).then(nb.cmp(&na)),
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (None, None) => a.cmp(b),
    }
}
