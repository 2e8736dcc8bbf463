//! Lists with selectors and paging: `limit` cuts a list, and the `continue` token resumes it after the last
//! key returned, at the list's `resourceVersion`.

use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::{Error, Key, ListOptions, ObjectList, Result, Store, from_value};
use crate::meta;
use crate::resource::GroupResource;
use crate::selector::{self, FieldSelector, LabelSelector};

impl Store {
    /// Lists objects; `namespace: None` lists across all namespaces.
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
        let (start, list_rv) = match &opts.continue_token {
            Some(t) => decode_continue(t)?,
            None => (None, st.rv),
        };
        let mut items = Vec::new();
        let mut remaining = 0usize;
        let mut last_key: Option<Key> = None;
        if let Some(objects) = st.objects.get(gr) {
            for (key, obj) in objects.iter() {
                if let Some(ns) = namespace
                    && key.0 != ns
                {
                    continue;
                }
                if start.as_ref().is_some_and(|s| key <= s) {
                    continue;
                }
                if !labels.matches(obj) || !fields.matches(obj) {
                    continue;
                }
                if opts.limit.is_some_and(|l| l > 0 && items.len() >= l) {
                    remaining += 1;
                    continue;
                }
                last_key = Some(key.clone());
                items.push((**obj).clone());
            }
        }
        let continue_token = if remaining > 0 {
            last_key.map(|k| encode_continue(&k, list_rv))
        } else {
            None
        };
        Ok(ObjectList {
            items,
            resource_version: list_rv,
            continue_token,
            remaining: (remaining > 0).then_some(remaining),
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

fn encode_continue(key: &Key, rv: u64) -> String {
    use base64::Engine as _;
    let raw = json!({"rv": rv, "ns": key.0, "name": key.1}).to_string();
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(raw)
}

fn decode_continue(token: &str) -> Result<(Option<Key>, u64)> {
    use base64::Engine as _;
    let bad = || Error::BadRequest("continue key is not valid".to_string());
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(token)
        .map_err(|_| bad())?;
    let v: Value = serde_json::from_slice(&raw).map_err(|_| bad())?;
    let ns = meta::str_at(&v, "/ns").ok_or_else(bad)?.to_string();
    let name = meta::str_at(&v, "/name").ok_or_else(bad)?.to_string();
    let rv = v.get("rv").and_then(Value::as_u64).ok_or_else(bad)?;
    Ok((Some((ns, name)), rv))
}
