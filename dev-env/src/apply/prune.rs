//! Pruning: the members of the environment's ApplySet that the manifests
//! no longer declare, found and deleted after the declared ones are
//! applied, under three rules that keep a prune to what the user declared
//! away:
//!
//! - manifests that declare no object prune nothing unless told
//!   (`--prune-all`), as kubectl refuses `apply --prune` with no objects;
//! - a Namespace or CustomResourceDefinition whose deletion would take
//!   objects outside the prune with it (a Secret made by hand, a custom
//!   resource someone else made) is kept and named, unless told
//!   (`--prune-destructive`);
//! - a member annotated `dev-env.io/prune: disabled` is never deleted: it
//!   leaves the set instead.

use std::collections::BTreeSet;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::{
    Api, Client,
    api::{DynamicObject, GroupVersionKind, ListParams, ObjectMeta},
    discovery::{self, ApiResource, Discovery, Scope, verbs},
};

use super::applyset::{self, ApplySet, GroupKind, Member, Recorded, Served};
use super::{Error, Kinds, Prune};
use crate::manifest::Manifest;
use crate::report::{Event, Reporter};

/// The annotation that keeps a member from ever being pruned.
pub const PRUNE_ANNOTATION: &str = "dev-env.io/prune";
/// Its value that does.
pub const PRUNE_DISABLED: &str = "disabled";

/// What a prune does with the set's members that no manifest declares.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pruning {
    /// Deleted (by a dry run: to be deleted), namespaces last.
    pub deleted: Vec<Member>,
    /// Namespaces and CRDs kept because deleting them would delete
    /// objects outside the prune.
    pub held: Vec<Held>,
    /// Members annotated `dev-env.io/prune: disabled`: they leave the set
    /// and stay.
    pub released: Vec<Member>,
}

/// A Namespace or CRD a prune keeps, and what deleting it would take.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Held {
    pub member: Member,
    /// `Kind/namespace/name` of each object outside the prune that would
    /// go with it.
    pub takes: Vec<String>,
}

impl Pruning {
    /// Tells `reporter` what was pruned, kept and released.
    pub fn report(&self, reporter: &dyn Reporter) {
        if !self.deleted.is_empty() {
            reporter.report(&Event::Pruned {
                objects: self.deleted.iter().map(ToString::to_string).collect(),
            });
        }
        for held in &self.held {
            reporter.report(&Event::PruneHeld {
                object: held.member.to_string(),
                takes: held.takes.clone(),
            });
        }
        for member in &self.released {
            reporter.report(&Event::PruneReleased {
                object: member.to_string(),
            });
        }
    }
}

/// The kinds and namespaces `manifests` put members in. An object without
/// a namespace whose kind is not served yet may be namespaced: `default`
/// is looked in too.
pub fn scope_of(manifests: &[Manifest], kinds: &Kinds) -> Recorded {
    let defaulted = manifests
        .iter()
        .any(|m| m.namespace.is_none() && !kinds.contains_key(&gvk_of(m)));
    Recorded {
        kinds: manifests
            .iter()
            .map(|m| GroupKind::of(&m.api_version, &m.kind))
            .collect(),
        namespaces: members(manifests, kinds)
            .into_iter()
            .filter_map(|m| m.namespace)
            .chain(defaulted.then(|| String::from("default")))
            .collect(),
    }
}

fn gvk_of(m: &Manifest) -> GroupVersionKind {
    let (group, version) = m
        .api_version
        .split_once('/')
        .unwrap_or(("", &m.api_version));
    GroupVersionKind::gvk(group, version, &m.kind)
}

/// The members `manifests` declare, namespaced as the cluster serves each
/// kind (an object without a namespace of a namespaced kind is in
/// `default`); a kind not served yet keeps the manifest's namespace.
pub fn members(manifests: &[Manifest], kinds: &Kinds) -> BTreeSet<Member> {
    manifests
        .iter()
        .map(|m| {
            let namespace = match kinds.get(&gvk_of(m)).map(|(_, caps)| &caps.scope) {
                Some(Scope::Cluster) => None,
                Some(Scope::Namespaced) => Some(
                    m.namespace
                        .clone()
                        .unwrap_or_else(|| String::from("default")),
                ),
                None => m.namespace.clone(),
            };
            Member {
                kind: GroupKind::of(&m.api_version, &m.kind),
                namespace,
                name: m.name.clone(),
            }
        })
        .collect()
}

/// The kinds of `wanted` the cluster serves, from `kinds` when a manifest
/// already resolved them, else by discovery; kinds no longer served (a CRD
/// gone) cannot have members and are left out.
async fn served(
    client: &Client,
    kinds: &Kinds,
    wanted: &BTreeSet<GroupKind>,
) -> Result<Vec<Served>, Error> {
    let mut served = Vec::new();
    for kind in wanted {
        let known = kinds
            .iter()
            .find(|(gvk, _)| gvk.group == kind.group && gvk.kind == kind.kind);
        if let Some((_, (resource, caps))) = known {
            served.push(Served {
                kind: kind.clone(),
                resource: resource.clone(),
                scope: caps.scope.clone(),
            });
            continue;
        }
        let group = match discovery::group(client, &kind.group).await {
            Ok(group) => group,
            Err(kube::Error::Api(status)) if status.code == 404 => continue,
            Err(error) => {
                return Err(Error::ApplySet(applyset::Error::Api {
                    what: format!("discovering the API group of {kind}"),
                    error,
                }));
            }
        };
        if let Some((resource, caps)) = group.recommended_kind(&kind.kind) {
            served.push(Served {
                kind: kind.clone(),
                resource,
                scope: caps.scope,
            });
        }
    }
    Ok(served)
}

/// Fails, changing nothing, when `manifests` declare no object while the
/// set has members and `prune` does not confirm pruning them all.
pub async fn refuse_everything(
    client: &Client,
    manifests: &[Manifest],
    set: &ApplySet,
    prune: Prune,
) -> Result<(), Error> {
    if !manifests.is_empty() || !prune.enabled || prune.all {
        return Ok(());
    }
    let recorded = set.recorded(client).await?;
    let served = served(client, &Kinds::default(), &recorded.kinds).await?;
    let members =
        applyset::undeclared(client, set, &served, &recorded.namespaces, &BTreeSet::new()).await?;
    if members.is_empty() {
        return Ok(());
    }
    Err(Error::PruneEverything {
        count: members.len(),
        set: set.kubectl_ref(),
    })
}

/// Deletes the members of `set` within `scope` that `declared` does not
/// hold, namespaces last, under the rules above; says what it did.
pub async fn prune(
    client: &Client,
    kinds: &mut Kinds,
    set: &ApplySet,
    scope: &Recorded,
    declared: &BTreeSet<Member>,
    prune: Prune,
) -> Result<Pruning, Error> {
    let served = served(client, kinds, &scope.kinds).await?;
    let pruning = plan(client, set, &served, &scope.namespaces, declared, prune).await?;
    let kind_of = |member: &Member| served.iter().find(|s| s.kind == member.kind);
    for member in &pruning.released {
        if let Some(kind) = kind_of(member) {
            applyset::release(client, kind, member).await?;
        }
    }
    for member in &pruning.deleted {
        if let Some(kind) = kind_of(member) {
            applyset::delete(client, kind, member).await?;
        }
    }
    Ok(pruning)
}

/// What [`prune`] would do, changing nothing.
async fn plan(
    client: &Client,
    set: &ApplySet,
    served: &[Served],
    namespaces: &BTreeSet<String>,
    declared: &BTreeSet<Member>,
    prune: Prune,
) -> Result<Pruning, Error> {
    let undeclared = applyset::undeclared(client, set, served, namespaces, declared).await?;
    let (released, deleting): (Vec<_>, Vec<_>) =
        undeclared.into_iter().partition(|u| u.prune_disabled);
    let deleting: Vec<Member> = deleting.into_iter().map(|u| u.member).collect();
    let mut pruning = Pruning {
        released: released.into_iter().map(|u| u.member).collect(),
        ..Pruning::default()
    };
    let gone: BTreeSet<&Member> = deleting.iter().collect();
    let mut contents = Contents {
        client,
        discovery: None,
    };
    for member in &deleting {
        let takes = match prune.destructive {
            true => Vec::new(),
            false => contents.beyond(member, &gone).await?,
        };
        if takes.is_empty() {
            pruning.deleted.push(member.clone());
        } else {
            pruning.held.push(Held {
                member: member.clone(),
                takes,
            });
        }
    }
    Ok(pruning)
}

/// What [`super::apply_all`] would prune now, changing nothing: the set's
/// recorded members that `manifests` do not declare, under `prune`'s
/// rules; the refusal when the manifests declare nothing.
pub async fn would_prune(
    client: &Client,
    manifests: &[Manifest],
    set: &ApplySet,
    prune: Prune,
) -> Result<Pruning, Error> {
    refuse_everything(client, manifests, set, prune).await?;
    let recorded = set.recorded(client).await?;
    if recorded.kinds.is_empty() {
        return Ok(Pruning::default());
    }
    let mut kinds = Kinds::default();
    for m in manifests {
        let gvk = gvk_of(m);
        if kinds.contains_key(&gvk) {
            continue;
        }
        // A kind that a CRD of the same set will define is not served yet.
        if let Ok(found) = discovery::pinned_kind(client, &gvk).await {
            kinds.insert(gvk, found);
        }
    }
    let declared = members(manifests, &kinds);
    let served = served(client, &kinds, &recorded.kinds).await?;
    plan(client, set, &served, &recorded.namespaces, &declared, prune).await
}

/// What deleting a Namespace or a CRD deletes with it.
struct Contents<'c> {
    client: &'c Client,
    /// Every kind the cluster serves, discovered once, when a namespace
    /// is first looked into.
    discovery: Option<Discovery>,
}

impl Contents<'_> {
    /// The objects that deleting `member` would delete and that `gone`
    /// (what the prune deletes anyway) does not hold; empty for kinds
    /// whose deletion takes nothing else.
    async fn beyond(
        &mut self,
        member: &Member,
        gone: &BTreeSet<&Member>,
    ) -> Result<Vec<String>, Error> {
        let found = match (member.kind.group.as_str(), member.kind.kind.as_str()) {
            ("", "Namespace") => self.in_namespace(&member.name).await?,
            ("apiextensions.k8s.io", "CustomResourceDefinition") => {
                self.custom_resources(&member.name).await?
            }
            _ => return Ok(Vec::new()),
        };
        Ok(found
            .into_iter()
            .filter(|m| !gone.contains(m))
            .map(|m| m.to_string())
            .collect())
    }

    /// The objects in namespace `name` that are there in their own right:
    /// not made by a controller for another object, not made by the
    /// cluster for every namespace, not made by dev-env.
    async fn in_namespace(&mut self, name: &str) -> Result<Vec<Member>, Error> {
        let discovery = match self.discovery.take() {
            Some(discovery) => discovery,
            None => Discovery::new(self.client.clone())
                .run()
                .await
                .map_err(listing("discovering the kinds the cluster serves"))?,
        };
        let mut found = Vec::new();
        for group in discovery.groups() {
            for (resource, caps) in group.recommended_resources() {
                if caps.scope != Scope::Namespaced || !caps.supports_operation(verbs::LIST) {
                    continue;
                }
                let kind = GroupKind {
                    group: resource.group.clone(),
                    kind: resource.kind.clone(),
                };
                let api: Api<DynamicObject> =
                    Api::namespaced_with(self.client.clone(), name, &resource);
                let what = format!("listing the {} in namespace {name}", resource.plural);
                let list = api
                    .list_metadata(&ListParams::default())
                    .await
                    .map_err(listing(what))?;
                found.extend(
                    list.items
                        .into_iter()
                        .filter(|item| !incidental(&kind, &item.metadata))
                        .map(|item| Member {
                            kind: kind.clone(),
                            namespace: Some(name.to_string()),
                            name: item.metadata.name.unwrap_or_default(),
                        }),
                );
            }
        }
        self.discovery = Some(discovery);
        Ok(found)
    }

    /// Every object of the custom resource the CRD `name` defines.
    async fn custom_resources(&self, name: &str) -> Result<Vec<Member>, Error> {
        let crds: Api<CustomResourceDefinition> = Api::all(self.client.clone());
        let Some(crd) = crds
            .get_opt(name)
            .await
            .map_err(listing(format!("reading CustomResourceDefinition {name}")))?
        else {
            return Ok(Vec::new());
        };
        let spec = &crd.spec;
        let Some(version) = spec
            .versions
            .iter()
            .find(|v| v.storage)
            .or_else(|| spec.versions.first())
        else {
            return Ok(Vec::new());
        };
        let gvk = GroupVersionKind::gvk(&spec.group, &version.name, &spec.names.kind);
        let resource = ApiResource::from_gvk_with_plural(&gvk, &spec.names.plural);
        let api: Api<DynamicObject> = Api::all_with(self.client.clone(), &resource);
        let list = api
            .list_metadata(&ListParams::default())
            .await
            .map_err(listing(format!("listing the {}", spec.names.plural)))?;
        let kind = GroupKind {
            group: spec.group.clone(),
            kind: spec.names.kind.clone(),
        };
        Ok(list
            .items
            .into_iter()
            .map(|item| Member {
                kind: kind.clone(),
                namespace: item.metadata.namespace,
                name: item.metadata.name.unwrap_or_default(),
            })
            .collect())
    }
}

fn listing(what: impl Into<String>) -> impl FnOnce(kube::Error) -> Error {
    let what = what.into();
    move |error| Error::ApplySet(applyset::Error::Api { what, error })
}

/// Whether an object in a namespace goes with what made it rather than
/// counting on its own: objects with an owner (a ReplicaSet's pods; their
/// owner is counted), Events, the endpoints the cluster derives from
/// Services, the metrics server's view of pods, what every namespace gets
/// (the `default` ServiceAccount, the `kube-root-ca.crt` ConfigMap), and
/// what dev-env made there (the pull secret of `registry.pullSecret`).
pub(crate) fn incidental(kind: &GroupKind, meta: &ObjectMeta) -> bool {
    let name = meta.name.as_deref().unwrap_or_default();
    let owned = meta
        .owner_references
        .as_ref()
        .is_some_and(|o| !o.is_empty());
    let made_by_dev_env = meta
        .labels
        .as_ref()
        .and_then(|l| l.get("app.kubernetes.io/managed-by"))
        .is_some_and(|v| v == super::FIELD_MANAGER);
    let derived = matches!(
        (kind.group.as_str(), kind.kind.as_str()),
        ("", "Event")
            | ("events.k8s.io", "Event")
            | ("", "Endpoints")
            | ("discovery.k8s.io", "EndpointSlice")
            | ("metrics.k8s.io", _)
    );
    let per_namespace = matches!(
        (kind.group.as_str(), kind.kind.as_str(), name),
        ("", "ServiceAccount", "default") | ("", "ConfigMap", "kube-root-ca.crt")
    );
    owned || made_by_dev_env || derived || per_namespace
}
