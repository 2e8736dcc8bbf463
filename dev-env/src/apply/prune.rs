//! Pruning: the members of the environment's ApplySet that the manifests
//! no longer declare, found and deleted after the declared ones are
//! applied.

use std::collections::BTreeSet;

use kube::{
    Client,
    api::GroupVersionKind,
    discovery::{self, Scope},
};

use super::applyset::{self, ApplySet, GroupKind, Member, Recorded, Served};
use super::{Error, Kinds};
use crate::manifest::Manifest;

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
            let (group, version) = m
                .api_version
                .split_once('/')
                .unwrap_or(("", &m.api_version));
            let gvk = GroupVersionKind::gvk(group, version, &m.kind);
            let namespace = match kinds.get(&gvk).map(|(_, caps)| &caps.scope) {
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

/// Deletes the members of `set` within `scope` that `declared` does not
/// hold, namespaces last; returns them.
pub async fn prune(
    client: &Client,
    kinds: &mut Kinds,
    set: &ApplySet,
    scope: &Recorded,
    declared: &BTreeSet<Member>,
) -> Result<Vec<Member>, Error> {
    let served = served(client, kinds, &scope.kinds).await?;
    let undeclared =
        applyset::undeclared(client, set, &served, &scope.namespaces, declared).await?;
    for member in &undeclared {
        let Some(kind) = served.iter().find(|s| s.kind == member.kind) else {
            continue;
        };
        applyset::delete(client, kind, member).await?;
    }
    Ok(undeclared)
}

/// What [`super::apply_all`] would prune now, changing nothing: the set's
/// recorded members that `manifests` do not declare.
pub async fn would_prune(
    client: &Client,
    manifests: &[Manifest],
    set: &ApplySet,
) -> Result<Vec<Member>, Error> {
    let recorded = set.recorded(client).await?;
    if recorded.kinds.is_empty() {
        return Ok(Vec::new());
    }
    let mut kinds = Kinds::default();
    for m in manifests {
        let (group, version) = m
            .api_version
            .split_once('/')
            .unwrap_or(("", &m.api_version));
        let gvk = GroupVersionKind::gvk(group, version, &m.kind);
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
    Ok(applyset::undeclared(client, set, &served, &recorded.namespaces, &declared).await?)
}
