//! What dev-env applies is recorded as an ApplySet (KEP-3659), in the
//! format `kubectl apply --prune --applyset` reads, so either tool sees the
//! same members: a parent object labelled `applyset.kubernetes.io/id`,
//! annotated with the group-kinds and namespaces its members live in, and
//! the label `applyset.kubernetes.io/part-of` on every member.
//!
//! Members span namespaces, and kubectl accepts that only under a
//! cluster-scoped parent, so the parent is an `ApplySet` of
//! `applysets.dev-env.io`, a CRD labelled as an ApplySet parent type that
//! dev-env installs with the first parent:
//! `kubectl apply --prune --applyset=applysets.dev-env.io/<environment>`.
//!
//! Pruning deletes the members the manifests no longer declare, found by
//! that label alone, so nothing outside the set is ever touched.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use base64::Engine as _;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::{
    Api, Client,
    api::{DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams},
    discovery::{ApiResource, Scope},
    runtime::wait::{await_condition, conditions},
};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

/// The label that makes an object a member of a set.
pub const PART_OF: &str = "applyset.kubernetes.io/part-of";
/// The parent's label: the set's ID.
const ID_LABEL: &str = "applyset.kubernetes.io/id";
/// The parent's annotation naming the tool that manages the set.
const TOOLING: &str = "applyset.kubernetes.io/tooling";
/// The parent's annotation listing the members' group-kinds.
const KINDS: &str = "applyset.kubernetes.io/contains-group-kinds";
/// The parent's annotation listing the members' namespaces.
const NAMESPACES: &str = "applyset.kubernetes.io/additional-namespaces";
/// The CRD label that lets a custom resource be a parent.
const PARENT_TYPE: &str = "applyset.kubernetes.io/is-parent-type";
/// dev-env writes the set as kubectl does, so kubectl accepts it as its own
/// (kubectl refuses sets whose tooling has another name); the build
/// metadata says who wrote it.
const TOOLING_VALUE: &str = "kubectl/v1.32.0+dev-env";
/// The tool name kubectl's sets carry.
const TOOLING_NAME: &str = "kubectl";
/// The parent's group, version and kind.
const GROUP: &str = "dev-env.io";
const VERSION: &str = "v1";
const KIND: &str = "ApplySet";
/// How long a new parent CRD may take to be served.
const ESTABLISHED: Duration = Duration::from_secs(30);

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(
        "the ApplySet {name} ({KIND}.{GROUP}) is managed by {tooling:?}, not by dev-env or kubectl; \
         rename the environment, or delete that ApplySet if nothing uses it"
    )]
    Foreign { name: String, tooling: String },
    #[error(
        "the ApplySet {name} ({KIND}.{GROUP}) has the ID {found:?}, not {expected:?}; \
         delete it so dev-env can record the set again"
    )]
    WrongId {
        name: String,
        found: String,
        expected: String,
    },
    #[error("the ApplySet parent type applysets.{GROUP} was not served within {}s", ESTABLISHED.as_secs())]
    NotEstablished,
    #[error("{what}: {}", super::api_error(error))]
    Api { what: String, error: kube::Error },
}

impl Error {
    fn api(what: impl Into<String>) -> impl FnOnce(kube::Error) -> Error {
        let what = what.into();
        move |error| Error::Api { what, error }
    }
}

/// A member's group and kind, as the annotation spells it: `Kind` for the
/// core group, `Kind.group` otherwise.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct GroupKind {
    pub group: String,
    pub kind: String,
}

impl GroupKind {
    pub fn of(api_version: &str, kind: &str) -> GroupKind {
        let group = api_version.split_once('/').map_or("", |(g, _)| g);
        GroupKind {
            group: group.to_string(),
            kind: kind.to_string(),
        }
    }

    fn parse(text: &str) -> GroupKind {
        match text.split_once('.') {
            Some((kind, group)) => GroupKind {
                group: group.to_string(),
                kind: kind.to_string(),
            },
            None => GroupKind {
                group: String::new(),
                kind: text.to_string(),
            },
        }
    }
}

impl std::fmt::Display for GroupKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.group.is_empty() {
            f.write_str(&self.kind)
        } else {
            write!(f, "{}.{}", self.kind, self.group)
        }
    }
}

/// One member of the set.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Member {
    pub kind: GroupKind,
    /// `None` for cluster-scoped objects.
    pub namespace: Option<String>,
    pub name: String,
}

impl Member {
    /// When a prune deletes it: CRDs after their resources, namespaces
    /// after everything they may hold.
    fn prune_order(&self) -> u8 {
        match (self.kind.group.as_str(), self.kind.kind.as_str()) {
            ("", "Namespace") => 2,
            ("apiextensions.k8s.io", "CustomResourceDefinition") => 1,
            _ => 0,
        }
    }
}

impl std::fmt::Display for Member {
    /// `Kind/namespace/name`, as the rest of the output names objects.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{}/{ns}/{}", self.kind.kind, self.name),
            None => write!(f, "{}/{}", self.kind.kind, self.name),
        }
    }
}

/// What a parent records: the kinds and namespaces to look in.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Recorded {
    pub kinds: BTreeSet<GroupKind>,
    pub namespaces: BTreeSet<String>,
}

impl Recorded {
    /// Adds what `other` records.
    pub fn extend(&mut self, other: &Recorded) {
        self.kinds.extend(other.kinds.iter().cloned());
        self.namespaces.extend(other.namespaces.iter().cloned());
    }
}

/// The set of one environment, tracked by its cluster-scoped parent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApplySet {
    /// The parent's name: the environment's.
    pub name: String,
}

impl ApplySet {
    /// The set of the environment `name`.
    pub fn of_environment(name: &str) -> ApplySet {
        ApplySet {
            name: name.to_string(),
        }
    }

    /// `applyset-<base64url(sha256(<name>.<namespace>.<kind>.<group>))>-v1`,
    /// the namespace empty for a cluster-scoped parent.
    pub fn id(&self) -> String {
        let unencoded = format!("{}..{KIND}.{GROUP}", self.name);
        let hashed = Sha256::digest(unencoded.as_bytes());
        let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(hashed);
        format!("applyset-{b64}-v1")
    }

    /// The label selector of the members.
    pub fn selector(&self) -> String {
        format!("{PART_OF}={}", self.id())
    }

    /// The `--applyset` argument kubectl finds this set by.
    pub fn kubectl_ref(&self) -> String {
        format!("applysets.{GROUP}/{}", self.name)
    }

    fn parents(client: &Client) -> Api<DynamicObject> {
        let gvk = GroupVersionKind::gvk(GROUP, VERSION, KIND);
        Api::all_with(client.clone(), &ApiResource::from_gvk(&gvk))
    }

    /// What the parent records, after checking that it is this set's;
    /// empty when there is no parent yet (or no parent type).
    pub async fn recorded(&self, client: &Client) -> Result<Recorded, Error> {
        let what = format!("reading the ApplySet {}", self.name);
        let parent = match Self::parents(client).get_opt(&self.name).await {
            Ok(parent) => parent,
            // The parent type itself is not served yet.
            Err(kube::Error::Api(status)) if status.code == 404 => None,
            Err(error) => return Err(Error::api(what)(error)),
        };
        let Some(parent) = parent else {
            return Ok(Recorded::default());
        };
        let annotations = parent.metadata.annotations.unwrap_or_default();
        let labels = parent.metadata.labels.unwrap_or_default();
        let tooling = annotations.get(TOOLING).cloned().unwrap_or_default();
        let tool = tooling
            .rsplit_once('/')
            .map_or(tooling.as_str(), |(t, _)| t);
        if tool != TOOLING_NAME {
            return Err(Error::Foreign {
                name: self.name.clone(),
                tooling,
            });
        }
        let found = labels.get(ID_LABEL).cloned().unwrap_or_default();
        if found != self.id() {
            return Err(Error::WrongId {
                name: self.name.clone(),
                found,
                expected: self.id(),
            });
        }
        let list = |key: &str| -> Vec<String> {
            annotations
                .get(key)
                .map(|v| {
                    v.split(',')
                        .filter(|s| !s.is_empty())
                        .map(str::to_string)
                        .collect()
                })
                .unwrap_or_default()
        };
        Ok(Recorded {
            kinds: list(KINDS).iter().map(|k| GroupKind::parse(k)).collect(),
            namespaces: list(NAMESPACES).into_iter().collect(),
        })
    }

    /// Records `scope` on the parent by server-side apply, installing the
    /// parent type first when the cluster does not serve it.
    pub async fn record(&self, client: &Client, scope: &Recorded) -> Result<(), Error> {
        let kinds: Vec<String> = scope.kinds.iter().map(ToString::to_string).collect();
        let namespaces: Vec<&str> = scope.namespaces.iter().map(String::as_str).collect();
        let parent = json!({
            "apiVersion": format!("{GROUP}/{VERSION}"),
            "kind": KIND,
            "metadata": {
                "name": self.name,
                "labels": {ID_LABEL: self.id()},
                "annotations": {
                    TOOLING: TOOLING_VALUE,
                    KINDS: kinds.join(","),
                    NAMESPACES: namespaces.join(","),
                },
            },
        });
        let params = PatchParams::apply(super::FIELD_MANAGER).force();
        let what = format!("recording the ApplySet {}", self.name);
        let patch = Patch::Apply(&parent);
        match Self::parents(client)
            .patch(&self.name, &params, &patch)
            .await
        {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(error) => return Err(Error::api(what)(error)),
        }
        install_parent_type(client).await?;
        Self::parents(client)
            .patch(&self.name, &params, &patch)
            .await
            .map_err(Error::api(what))?;
        Ok(())
    }
}

/// Applies the `applysets.dev-env.io` CRD and waits until it is served.
async fn install_parent_type(client: &Client) -> Result<(), Error> {
    let name = format!("applysets.{GROUP}");
    let crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": name, "labels": {PARENT_TYPE: "true"}},
        "spec": {
            "group": GROUP,
            "scope": "Cluster",
            "names": {"plural": "applysets", "singular": "applyset", "kind": KIND, "listKind": "ApplySetList"},
            "versions": [{
                "name": VERSION, "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object",
                    "description": "The parent of an ApplySet (KEP-3659): its labels and annotations name the set's members."}},
            }],
        },
    });
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let params = PatchParams::apply(super::FIELD_MANAGER).force();
    api.patch(&name, &params, &Patch::Apply(&crd))
        .await
        .map_err(Error::api(format!(
            "installing the ApplySet parent type {name}"
        )))?;
    let established = await_condition(api, &name, conditions::is_crd_established());
    match tokio::time::timeout(ESTABLISHED, established).await {
        Ok(Ok(_)) => Ok(()),
        _ => Err(Error::NotEstablished),
    }
}

/// Adds the member label to an object about to be applied.
pub fn label(object: &mut Value, set: &ApplySet) {
    let metadata = &mut object["metadata"];
    if !metadata["labels"].is_object() {
        metadata["labels"] = json!({});
    }
    metadata["labels"][PART_OF] = Value::from(set.id());
}

/// A kind to list members of, as the cluster serves it.
pub struct Served {
    pub kind: GroupKind,
    pub resource: ApiResource,
    pub scope: Scope,
}

/// A member no manifest declares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Undeclared {
    pub member: Member,
    /// Annotated `dev-env.io/prune: disabled`: never deleted.
    pub prune_disabled: bool,
}

/// The members of `set` among `served` kinds, in `namespaces` for
/// namespaced kinds, that `declared` does not hold: what a prune deletes,
/// namespaces last.
pub async fn undeclared(
    client: &Client,
    set: &ApplySet,
    served: &[Served],
    namespaces: &BTreeSet<String>,
    declared: &BTreeSet<Member>,
) -> Result<Vec<Undeclared>, Error> {
    let params = ListParams::default().labels(&set.selector());
    let mut found = BTreeMap::new();
    for kind in served {
        let apis: Vec<(Option<&String>, Api<DynamicObject>)> = match kind.scope {
            Scope::Cluster => vec![(None, Api::all_with(client.clone(), &kind.resource))],
            Scope::Namespaced => namespaces
                .iter()
                .map(|ns| {
                    (
                        Some(ns),
                        Api::namespaced_with(client.clone(), ns, &kind.resource),
                    )
                })
                .collect(),
        };
        for (ns, api) in apis {
            let what = format!("listing the ApplySet's {} members", kind.kind);
            let list = api.list_metadata(&params).await.map_err(Error::api(what))?;
            for item in list.items {
                let disabled = item
                    .metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(super::prune::PRUNE_ANNOTATION))
                    .is_some_and(|v| v == super::prune::PRUNE_DISABLED);
                let member = Member {
                    kind: kind.kind.clone(),
                    namespace: ns.cloned(),
                    name: item.metadata.name.unwrap_or_default(),
                };
                found.insert(member, disabled);
            }
        }
    }
    let mut prune: Vec<Undeclared> = found
        .into_iter()
        .filter(|(member, _)| !declared.contains(member))
        .map(|(member, prune_disabled)| Undeclared {
            member,
            prune_disabled,
        })
        .collect();
    prune.sort_by_key(|u| u.member.prune_order());
    Ok(prune)
}

/// Takes `member` out of the set, leaving it in place: its member label
/// goes (a JSON merge patch, whoever manages the rest of it), so neither
/// dev-env nor `kubectl apply --prune` prunes it again.
pub async fn release(client: &Client, served: &Served, member: &Member) -> Result<(), Error> {
    let api: Api<DynamicObject> = match &member.namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &served.resource),
        None => Api::all_with(client.clone(), &served.resource),
    };
    let patch = json!({"metadata": {"labels": {PART_OF: null}}});
    match api
        .patch(&member.name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        Err(error) => Err(Error::Api {
            what: format!("taking {member} out of the ApplySet"),
            error,
        }),
    }
}

/// Deletes `member` with background propagation; one already gone counts.
pub async fn delete(client: &Client, served: &Served, member: &Member) -> Result<(), Error> {
    let api: Api<DynamicObject> = match &member.namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &served.resource),
        None => Api::all_with(client.clone(), &served.resource),
    };
    match api.delete(&member.name, &DeleteParams::background()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        Err(error) => Err(Error::Api {
            what: format!("pruning {member}"),
            error,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_id_is_kubectls_hash_of_the_parent() {
        // kubectl's ID for `--applyset=applysets.dev-env.io/shop`:
        // base64url(sha256("shop..ApplySet.dev-env.io")) without padding.
        let set = ApplySet::of_environment("shop");
        assert_eq!(set.kubectl_ref(), "applysets.dev-env.io/shop");
        let hashed = Sha256::digest(b"shop..ApplySet.dev-env.io");
        let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(hashed);
        assert_eq!(set.id(), format!("applyset-{b64}-v1"));
        assert_eq!(set.id().len(), "applyset-".len() + 43 + "-v1".len());
        assert!(
            set.selector()
                .starts_with("applyset.kubernetes.io/part-of=applyset-")
        );
    }

    #[test]
    fn group_kinds_read_back_as_written() {
        for text in ["ConfigMap", "Deployment.apps", "WorkerPool.demo.dev-env.io"] {
            assert_eq!(GroupKind::parse(text).to_string(), text);
        }
        assert_eq!(
            GroupKind::of("apps/v1", "Deployment").to_string(),
            "Deployment.apps"
        );
        assert_eq!(GroupKind::of("v1", "Namespace").to_string(), "Namespace");
    }

    #[test]
    fn namespaces_are_pruned_after_what_they_hold() {
        let member = |kind: &str, ns: Option<&str>| Member {
            kind: GroupKind::parse(kind),
            namespace: ns.map(str::to_string),
            name: String::from("x"),
        };
        let mut prune = [
            member("Namespace", None),
            member("CustomResourceDefinition.apiextensions.k8s.io", None),
            member("ConfigMap", Some("shop")),
            member("Deployment.apps", Some("shop")),
        ];
        prune.sort_by_key(Member::prune_order);
        let order: Vec<String> = prune.iter().map(ToString::to_string).collect();
        assert_eq!(
            order,
            [
                "ConfigMap/shop/x",
                "Deployment/shop/x",
                "CustomResourceDefinition/x",
                "Namespace/x"
            ]
        );
    }

    #[test]
    fn the_label_joins_what_is_there() {
        let set = ApplySet::of_environment("a");
        let mut object = json!({"metadata": {"name": "x", "labels": {"app": "web"}}});
        label(&mut object, &set);
        assert_eq!(object["metadata"]["labels"]["app"], "web");
        assert_eq!(object["metadata"]["labels"][PART_OF], set.id());
        let mut bare = json!({"metadata": {"name": "y"}});
        label(&mut bare, &set);
        assert_eq!(bare["metadata"]["labels"][PART_OF], set.id());
    }
}
