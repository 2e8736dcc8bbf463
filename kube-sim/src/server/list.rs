//! The options of a list request (`ValidateListOptions`) and the wait for a version the store has not
//! reached yet (the watch cache's `waitUntilFreshAndBlock`).

use std::time::Duration;

use serde_json::json;

use super::Query;
use crate::store::{Error, ListOptions, ListVersion, Store};
use crate::validation::FieldError;

/// How long a read waits for the store to reach the version it asks for (the cacher's `blockTimeout`).
const FRESH_WAIT: Duration = Duration::from_secs(3);

/// The list options of a collection `GET`; the version options are checked as kube-apiserver does
/// (a 422 `Invalid` on `ListOptions`) unless the request is a watch.
pub(super) fn list_options(q: &Query, watch: bool) -> Result<ListOptions, Error> {
    let mut opts = ListOptions {
        label_selector: q.get("labelSelector").map(str::to_string),
        field_selector: q.get("fieldSelector").map(str::to_string),
        limit: q.get("limit").and_then(|l| l.parse().ok()),
        continue_token: q
            .get("continue")
            .filter(|c| !c.is_empty())
            .map(str::to_string),
        version: ListVersion::Latest,
    };
    if !watch {
        opts.version = list_version(q)?;
    }
    Ok(opts)
}

/// `resourceVersion` with `resourceVersionMatch`.
fn list_version(q: &Query) -> Result<ListVersion, Error> {
    let rv = q.get("resourceVersion").unwrap_or("");
    let matching = q.get("resourceVersionMatch").unwrap_or("");
    let field = "resourceVersionMatch";
    let mut errors = Vec::new();
    if !matching.is_empty() {
        if rv.is_empty() {
            errors.push(FieldError::forbidden(
                field,
                "resourceVersionMatch is forbidden unless resourceVersion is provided",
            ));
        }
        if q.get("continue").is_some_and(|c| !c.is_empty()) {
            errors.push(FieldError::forbidden(
                field,
                "resourceVersionMatch is forbidden when continue is provided",
            ));
        }
        if matching != "Exact" && matching != "NotOlderThan" {
            let supported = ["Exact", "NotOlderThan", ""].map(String::from);
            errors.push(FieldError::not_supported(
                field,
                &json!(matching),
                &supported,
            ));
        }
        if matching == "Exact" && rv == "0" {
            errors.push(FieldError::forbidden(
                field,
                "resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\"",
            ));
        }
    }
    if !errors.is_empty() {
        return Err(Error::Invalid {
            group: "meta.k8s.io".to_string(),
            kind: "ListOptions".to_string(),
            name: String::new(),
            message: crate::validation::join(&errors),
            causes: errors,
        });
    }
    if rv.is_empty() {
        return Ok(ListVersion::Latest);
    }
    let parsed: u64 = rv
        .parse()
        .map_err(|_| Error::BadRequest(format!("invalid resource version: {rv}")))?;
    Ok(match (matching, parsed) {
        ("Exact", v) => ListVersion::Exact(v),
        (_, 0) => ListVersion::Latest,
        (_, v) => ListVersion::NotOlderThan(v),
    })
}

/// Waits (3 s at most) until the store has reached the version `opts` must read; the list then answers
/// 504 `Timeout` when it still has not.
pub(super) async fn wait_fresh(store: &Store, opts: &ListOptions) {
    let minimum = opts.version.minimum();
    if opts.continue_token.is_some() || store.current_resource_version() >= minimum {
        return;
    }
    let mut changes = store.subscribe_changes();
    let _ = tokio::time::timeout(FRESH_WAIT, changes.wait_for(|rv| *rv >= minimum)).await;
}
