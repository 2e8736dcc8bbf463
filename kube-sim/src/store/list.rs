//! Lists with selectors and paging: `limit` cuts a list, and the `continue` token resumes it after the last
//! key returned, at the list's `resourceVersion` (a snapshot: objects created since are absent, objects
//! deleted since still present), as long as the history reaches back to it.

use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::{Error, Key, ListOptions, ListVersion, ObjectList, Result, State, Store, from_value};
use crate::meta;
use crate::resource::GroupResource;
use crate::selector::{self, FieldSelector, LabelSelector};

impl Store {
    /// Lists objects; `namespace: None` lists across all namespaces. A continued list, and one at an
    /// `Exact` version, is a snapshot at its version rebuilt from the history.
    pub fn list(
        &self,
        gr: &GroupResource,
        namespace: Option<&str>,
        opts: &ListOptions,
    ) -> Result<ObjectList> {
        let (labels, fields) = parse_selectors(gr, opts)?;
        let st = self.lock();
        if !st.resources.contains_key(gr) {
            return Err(Error::ResourceNotFound);
        }
        let (start, read_at) = read_point(&st, opts)?;
        let current = st.objects.get(gr);
        let snapshot;
        let objects = match read_at {
            Some(rv) if rv < st.rv => {
                st.history.check(gr, rv).map_err(|e| match &start {
                    Some(key) => Error::ExpiredContinue(encode_continue(key, None)),
                    None => e,
                })?;
                snapshot = match st.history.of(gr) {
                    Some(h) => h.snapshot(current, rv),
                    None => current.cloned().unwrap_or_default(),
                };
                Some(&snapshot)
            }
            _ => current,
        };
        let list_rv = read_at.unwrap_or(st.rv);
        let mut page = Page::default();
        for (key, obj) in objects.into_iter().flatten() {
            if namespace.is_some_and(|ns| key.0 != ns)
                || start.as_ref().is_some_and(|s| key <= s)
                || !labels.matches(obj.selectable())
                || !fields.matches(obj.selectable())
            {
                continue;
            }
            if opts.limit.is_some_and(|l| l > 0 && page.items.len() >= l) {
                page.remaining += 1;
                continue;
            }
            page.last_key = Some(key.clone());
            page.items.push((*obj.value()).clone());
        }
        let continue_token = match (page.remaining, page.last_key) {
            (1.., Some(k)) => Some(encode_continue(&k, Some(list_rv))),
            _ => None,
        };
        Ok(ObjectList {
            items: page.items,
            resource_version: list_rv,
            continue_token,
            remaining: (page.remaining > 0).then_some(page.remaining),
        })
    }

    /// Lists objects as a `k8s-openapi` type.
    pub fn list_as<K: k8s_openapi::Resource + DeserializeOwned>(
        &self,
        namespace: Option<&str>,
        opts: &ListOptions,
    ) -> Result<Vec<K>> {
        self.list(&GroupResource::of::<K>(), namespace, opts)?
            .items
            .into_iter()
            .map(from_value)
            .collect()
    }
}

pub(super) fn parse_selectors(
    gr: &GroupResource,
    opts: &ListOptions,
) -> Result<(LabelSelector, FieldSelector)> {
    let labels = LabelSelector::parse(opts.label_selector.as_deref().unwrap_or(""))
        .map_err(|e| Error::BadRequest(e.to_string()))?;
    let supported = selector::supported_fields(&gr.group, &gr.resource);
    let fields = FieldSelector::parse(opts.field_selector.as_deref().unwrap_or(""), &supported)
        .map_err(|e| Error::BadRequest(e.to_string()))?;
    Ok((labels, fields))
}

/// One page being collected.
#[derive(Default)]
struct Page {
    items: Vec<Value>,
    remaining: usize,
    last_key: Option<Key>,
}

/// Where a list starts (after the continue token's key) and the version it reads (`None`: the latest).
fn read_point(st: &State, opts: &ListOptions) -> Result<(Option<Key>, Option<u64>)> {
    if let Some(token) = &opts.continue_token {
        let (key, rv) = decode_continue(token)?;
        return Ok((Some(key), rv));
    }
    let too_large = |requested| Error::TooLargeResourceVersion {
        requested,
        current: st.rv,
    };
    match opts.version {
        ListVersion::Latest => Ok((None, None)),
        v if v.minimum() > st.rv => Err(too_large(v.minimum())),
        ListVersion::NotOlderThan(_) => Ok((None, None)),
        ListVersion::Exact(rv) => Ok((None, Some(rv))),
    }
}

/// A continue token: the last key returned and the list's version (`-1`, as upstream: the latest, for
/// the token handed out with a 410 that goes on without a consistent snapshot).
fn encode_continue(key: &Key, rv: Option<u64>) -> String {
    use base64::Engine as _;
    let rv = rv.map_or(-1, |v| v as i64);
    let raw = json!({"rv": rv, "ns": key.0, "name": key.1}).to_string();
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(raw)
}

fn decode_continue(token: &str) -> Result<(Key, Option<u64>)> {
    use base64::Engine as _;
    let bad = || Error::BadRequest("continue key is not valid".to_string());
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(token)
        .map_err(|_| bad())?;
    let v: Value = serde_json::from_slice(&raw).map_err(|_| bad())?;
    let ns = meta::str_at(&v, "/ns").ok_or_else(bad)?.to_string();
    let name = meta::str_at(&v, "/name").ok_or_else(bad)?.to_string();
    let rv = match v.get("rv").and_then(Value::as_i64).ok_or_else(bad)? {
        -1 => None,
        rv => Some(u64::try_from(rv).map_err(|_| bad())?),
    };
    Ok(((ns, name), rv))
}
