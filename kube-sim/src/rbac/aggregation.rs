//! The ClusterRole aggregation controller (`pkg/controller/clusterroleaggregation`): a ClusterRole with an
//! `aggregationRule` gets as its `rules` the rules of every other ClusterRole its selectors match, in
//! name order, each rule once. Roles that aggregate others may themselves be aggregated (`edit` into
//! `admin`), so a pass repeats until nothing changes.

use std::sync::Arc;

use serde_json::{Value, json};
use tokio::sync::watch;

use super::GROUP;
use super::authorizer::selector_matches;
use crate::meta;
use crate::resource::GroupResource;
use crate::store::{Patch, PatchOptions, SharedEvent, Store};

/// The field manager of the rules it writes.
const MANAGER: &str = "clusterrole-aggregation-controller";
/// Aggregation chains longer than this are not followed further in one round.
const MAX_PASSES: usize = 10;

fn cluster_roles() -> GroupResource {
    GroupResource::new(GROUP, "clusterroles")
}

/// The rules an aggregated ClusterRole should have, given every ClusterRole sorted by name.
fn aggregated_rules(role: &Value, all: &[Arc<Value>]) -> Option<Vec<Value>> {
    let selectors = role
        .pointer("/aggregationRule/clusterRoleSelectors")?
        .as_array()?;
    let name = meta::name_of(role);
    let mut rules: Vec<Value> = Vec::new();
    for selector in selectors {
        for other in all
            .iter()
            .filter(|o| meta::name_of(o) != name && selector_matches(selector, o))
        {
            for rule in other
                .get("rules")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                if !rules.contains(rule) {
                    rules.push(rule.clone());
                }
            }
        }
    }
    Some(rules)
}

/// One round: updates every aggregated ClusterRole whose rules differ from what it selects, until none
/// does; returns how many updates it made.
pub fn aggregate(store: &Store) -> usize {
    let gr = cluster_roles();
    let mut updates = 0;
    for _ in 0..MAX_PASSES {
        let mut all = store.snapshot(&gr, None);
        all.sort_by(|a, b| meta::name_of(a).cmp(meta::name_of(b)));
        let mut changed = false;
        for role in &all {
            let Some(rules) = aggregated_rules(role, &all) else {
                continue;
            };
            let current = role.get("rules").cloned().unwrap_or(Value::Null);
            if current == json!(rules) || (rules.is_empty() && current.is_null()) {
                continue;
            }
            let name = meta::name_of(role);
            let patch = Patch::Merge(json!({ "rules": rules }));
            let opts = PatchOptions {
                field_manager: Some(MANAGER.to_string()),
                ..PatchOptions::default()
            };
            match store.patch(&gr, None, name, None, &patch, &opts) {
                Ok(_) => {
                    updates += 1;
                    changed = true;
                }
                Err(e) => {
                    tracing::warn!(clusterrole = %name, error = %e, "aggregating rules failed")
                }
            }
        }
        if !changed {
            break;
        }
    }
    updates
}

/// Runs [`aggregate`] whenever a ClusterRole changes, until shutdown; an expired watch is replayed as
/// the controllers' are.
pub async fn run(store: Store, shutdown: watch::Receiver<bool>) {
    crate::controller::follow(&store, &cluster_roles(), shutdown, |event| {
        if !matches!(event, SharedEvent::Bookmark(_)) {
            aggregate(&store);
        }
    })
    .await;
}
