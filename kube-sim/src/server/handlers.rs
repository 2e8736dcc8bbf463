//! The handlers of resource endpoints, one per verb (`endpoints/handlers/{get,create,update,patch,delete}.go`):
//! each turns one request into store calls and the response Kubernetes gives.

use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;

use http::{HeaderValue, Request, Response, StatusCode, header};
use hyper::body::{Frame, Incoming};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::protobuf::object_body;
use super::{
    Body, Query, ServerState, dry_run, field_manager, field_validation, full, json_response,
    parse_json, parse_json_or_yaml, read_body, streamed, with_warnings,
};
use crate::resource::{GroupResource, ResourceInfo};
use crate::store::{
    DeleteOptions, Deleted, Endpoint, Error, ListOptions, LogOptions, Patch, PatchOptions, Store,
    WriteOptions,
};
use crate::table::IncludeObject;

/// One request to a resource endpoint whose path resolved to a served resource.
pub(super) struct Call<'a> {
    pub(super) state: &'a ServerState,
    pub(super) info: Arc<ResourceInfo>,
    pub(super) gr: GroupResource,
    pub(super) version: String,
    pub(super) namespace: Option<String>,
    pub(super) q: Query,
    /// Set when the client asked for a `Table`.
    pub(super) table: Option<IncludeObject>,
    pub(super) user_agent: String,
}

impl Call<'_> {
    fn store(&self) -> &Store {
        &self.state.store
    }

    fn ns(&self) -> Option<&str> {
        self.namespace.as_deref()
    }

    /// The object with the `apiVersion` of the requested version.
    fn present(&self, obj: Value) -> Value {
        super::present(&self.info, &self.version, obj)
    }

    fn write_options(&self) -> WriteOptions {
        WriteOptions {
            field_manager: Some(field_manager(&self.q, &self.user_agent)),
            dry_run: dry_run(&self.q),
            field_validation: field_validation(&self.q),
        }
    }

    fn list_response(&self, metadata: Value, items: Vec<Value>) -> Response<Body> {
        json_response(
            StatusCode::OK,
            &json!({"kind": self.info.list_kind, "apiVersion": self.info.api_version(&self.version),
                "metadata": metadata, "items": items}),
        )
    }

    /// `GET` of the collection: a list (paged with `limit` and `continue`), a table, or a watch.
    pub(super) async fn list(&self) -> Result<Response<Body>, Error> {
        let q = &self.q;
        let opts = super::list::list_options(q, q.flag("watch"))?;
        if q.flag("watch") {
            return super::watch::start_watch(
                self.state,
                &self.info,
                &self.version,
                self.ns(),
                q,
                opts,
                self.table,
            );
        }
        super::list::wait_fresh(self.store(), &opts).await;
        let list = self.store().list(&self.gr, self.ns(), &opts)?;
        let mut metadata = json!({"resourceVersion": list.resource_version.to_string()});
        if let Some(c) = &list.continue_token {
            metadata["continue"] = json!(c);
        }
        if let Some(r) = list.remaining {
            metadata["remainingItemCount"] = json!(r);
        }
        let items: Vec<Value> = list.items.into_iter().map(|o| self.present(o)).collect();
        if let Some(include) = self.table {
            return Ok(json_response(
                StatusCode::OK,
                &crate::table::render(&self.info, &self.version, &items, metadata, include),
            ));
        }
        Ok(self.list_response(metadata, items))
    }

    /// `GET` of one object (or its status), or of its table row.
    pub(super) fn get(&self, name: &str) -> Result<Response<Body>, Error> {
        let obj = self.present(self.store().get(&self.gr, self.ns(), name)?);
        if let Some(include) = self.table {
            let metadata = json!({"resourceVersion": obj.pointer("/metadata/resourceVersion")});
            return Ok(json_response(
                StatusCode::OK,
                &crate::table::render(&self.info, &self.version, &[obj], metadata, include),
            ));
        }
        Ok(json_response(StatusCode::OK, &obj))
    }

    /// `GET` of the scale subresource.
    pub(super) fn get_scale(&self, name: &str) -> Result<Response<Body>, Error> {
        let obj = self.store().get(&self.gr, self.ns(), name)?;
        Ok(json_response(StatusCode::OK, &scale_of(&obj)))
    }

    /// `GET` of a pod's log: streamed when the log source streams, else one body.
    pub(super) fn log(&self, name: &str) -> Result<Response<Body>, Error> {
        let q = &self.q;
        let options = LogOptions {
            container: q.get("container").map(str::to_string),
            follow: q.get("follow").is_some_and(|v| v == "true" || v == "1"),
            tail_lines: q.get("tailLines").and_then(|v| v.parse().ok()),
        };
        let ns = self.ns().unwrap_or("");
        if let Some(stream) = self.store().pod_log_stream(ns, name, &options)? {
            // The body must be `Sync`; a task forwards the stream until the client goes away.
            let (tx, rx) = mpsc::channel::<Result<Frame<Bytes>, Infallible>>(16);
            tokio::spawn(async move {
                let mut stream = stream;
                while let Some(chunk) = futures::StreamExt::next(&mut stream).await {
                    if tx.send(Ok(Frame::data(chunk))).await.is_err() {
                        break;
                    }
                }
            });
            return Ok(streamed(rx, "text/plain"));
        }
        let text = self.store().pod_logs(ns, name, q.get("container"))?;
        let mut r = Response::new(full(text));
        r.headers_mut()
            .insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
        Ok(r)
    }

    /// The object a `POST` or `PUT` body holds, the write's options, and the warnings about fields the body
    /// names twice; `check` sees the object before the body is checked for such fields.
    async fn read_write(
        &self,
        req: Request<Incoming>,
        check: impl FnOnce(&Value) -> Result<(), Error>,
    ) -> Result<(Value, WriteOptions, Vec<String>), Error> {
        let (body, content_type) = read_body(req).await?;
        let obj = object_body(Some(&content_type), &body)?;
        check(&obj)?;
        let opts = self.write_options();
        let warnings = crate::validation::strict::check_duplicates(&body, opts.field_validation)
            .map_err(Error::BadRequest)?;
        Ok((obj, opts, warnings))
    }

    /// `POST` to the collection.
    pub(super) async fn create(&self, req: Request<Incoming>) -> Result<Response<Body>, Error> {
        let (obj, opts, mut warnings) = self
            .read_write(req, |obj| check_kind(&self.info, &self.version, obj))
            .await?;
        let obj = super::convert::incoming(&self.info, obj);
        let mut created = self.store().create(&self.gr, self.ns(), obj, &opts)?;
        warnings.append(&mut created.warnings);
        Ok(with_warnings(
            json_response(StatusCode::CREATED, &self.present(created.object)),
            &warnings,
        ))
    }

    /// `PUT` of an object, its status or its scale.
    pub(super) async fn update(
        &self,
        req: Request<Incoming>,
        name: &str,
        sub: Option<&str>,
    ) -> Result<Response<Body>, Error> {
        let (obj, opts, mut warnings) = self.read_write(req, |_| Ok(())).await?;
        let mut written = match sub {
            None => {
                check_kind(&self.info, &self.version, &obj)?;
                check_name(&obj, name)?;
                let obj = super::convert::incoming(&self.info, obj);
                self.store()
                    .update(Endpoint::Main, &self.gr, self.ns(), obj, &opts)?
            }
            Some("status") => {
                check_name(&obj, name)?;
                self.store()
                    .update(Endpoint::Status, &self.gr, self.ns(), obj, &opts)?
            }
            Some("scale") => {
                let replicas = obj.pointer("/spec/replicas").cloned().unwrap_or(json!(0));
                let mut patch = json!({"spec": {"replicas": replicas}});
                if let Some(rv) = obj.pointer("/metadata/resourceVersion") {
                    patch["metadata"] = json!({"resourceVersion": rv});
                }
                let popts = PatchOptions {
                    field_manager: opts.field_manager.clone(),
                    dry_run: opts.dry_run,
                    ..PatchOptions::default()
                };
                let updated = self.store().patch(
                    &self.gr,
                    self.ns(),
                    name,
                    None,
                    &Patch::Merge(patch),
                    &popts,
                )?;
                return Ok(json_response(StatusCode::OK, &scale_of(&updated.object)));
            }
            Some(_) => return Err(Error::MethodNotAllowed),
        };
        warnings.append(&mut written.warnings);
        Ok(with_warnings(
            json_response(StatusCode::OK, &self.present(written.object)),
            &warnings,
        ))
    }

    /// `PATCH` of an object, its status or its scale; an apply that creates answers `201 Created`.
    pub(super) async fn patch(
        &self,
        req: Request<Incoming>,
        name: &str,
        sub: Option<&str>,
    ) -> Result<Response<Body>, Error> {
        let (body, content_type) = read_body(req).await?;
        let patch = patch_of(&self.info, &content_type, &body)?;
        let patch = super::convert::incoming_patch(&self.info, patch);
        let opts = self.patch_options(&patch)?;
        if sub == Some("scale") {
            return self.patch_scale(name, &patch, opts);
        }
        let mut warnings =
            crate::validation::strict::check_duplicates(&body, opts.field_validation)
                .map_err(Error::BadRequest)?;
        let mut patched = self
            .store()
            .patch(&self.gr, self.ns(), name, sub, &patch, &opts)?;
        warnings.append(&mut patched.warnings);
        let code = if patched.created {
            StatusCode::CREATED
        } else {
            StatusCode::OK
        };
        Ok(with_warnings(
            json_response(code, &self.present(patched.object)),
            &warnings,
        ))
    }

    /// The options of a patch: apply needs an explicit field manager, others default to the user agent's.
    fn patch_options(&self, patch: &Patch) -> Result<PatchOptions, Error> {
        let q = &self.q;
        let force = match q.get("force") {
            Some("true") => true,
            Some("false") | None => false,
            Some(other) => {
                return Err(Error::BadRequest(format!("invalid force value {other:?}")));
            }
        };
        let manager = match q.get("fieldManager").filter(|m| !m.is_empty()) {
            Some(m) => Some(m.to_string()),
            None if matches!(patch, Patch::Apply(_)) => None,
            None => Some(field_manager(q, &self.user_agent)),
        };
        Ok(PatchOptions {
            field_manager: manager,
            force,
            dry_run: dry_run(q),
            field_validation: field_validation(q),
        })
    }

    /// A patch of the scale subresource: applied to the `Scale`, whose replicas then patch the object.
    fn patch_scale(
        &self,
        name: &str,
        patch: &Patch,
        opts: PatchOptions,
    ) -> Result<Response<Body>, Error> {
        let current = self.store().get(&self.gr, self.ns(), name)?;
        let mut scale = scale_of(&current);
        match patch {
            Patch::Merge(b) | Patch::Strategic(b) => crate::patch::merge_patch(&mut scale, b),
            Patch::Json(b) => crate::patch::json_patch(&mut scale, b)
                .map_err(|e| Error::BadRequest(e.to_string()))?,
            Patch::Apply(_) => return Err(Error::MethodNotAllowed),
        }
        let replicas = scale.pointer("/spec/replicas").cloned().unwrap_or(json!(0));
        let popts = PatchOptions {
            force: false,
            ..opts
        };
        let updated = self.store().patch(
            &self.gr,
            self.ns(),
            name,
            None,
            &Patch::Merge(json!({"spec": {"replicas": replicas}})),
            &popts,
        )?;
        Ok(json_response(StatusCode::OK, &scale_of(&updated.object)))
    }

    /// `DELETE` of one object: `200` with the object while it is only marked (`202 Accepted` only for the
    /// legacy `orphanDependents: false`, as kube-apiserver keeps for old clients); once gone, the object
    /// for custom resources, pods and services, a `Success` status for the rest.
    pub(super) async fn delete(
        &self,
        req: Request<Incoming>,
        name: &str,
    ) -> Result<Response<Body>, Error> {
        let (body, content_type) = read_body(req).await?;
        let opts = delete_options(&self.q, &content_type, &body)?;
        let legacy_cascade = orphan_dependents(&self.q, &content_type, &body)? == Some(false);
        match self.store().delete(&self.gr, self.ns(), name, &opts)? {
            Deleted::Pending(obj) => {
                let status = if legacy_cascade {
                    StatusCode::ACCEPTED
                } else {
                    StatusCode::OK
                };
                Ok(json_response(status, &self.present(obj)))
            }
            Deleted::Gone(obj) => {
                let gr = &self.gr;
                if self.info.is_custom()
                    || *gr == GroupResource::pods()
                    || gr.resource == "services"
                {
                    Ok(json_response(StatusCode::OK, &self.present(obj)))
                } else {
                    Ok(json_response(
                        StatusCode::OK,
                        &success_status(&self.info, &obj),
                    ))
                }
            }
        }
    }

    /// `DELETE` of the collection: every object the selectors match, listed as they were deleted.
    pub(super) async fn delete_collection(
        &self,
        req: Request<Incoming>,
    ) -> Result<Response<Body>, Error> {
        let (body, content_type) = read_body(req).await?;
        let opts = delete_options(&self.q, &content_type, &body)?;
        let list_opts = ListOptions {
            label_selector: self.q.get("labelSelector").map(str::to_string),
            field_selector: self.q.get("fieldSelector").map(str::to_string),
            ..ListOptions::default()
        };
        let store = self.store();
        let list = store.list(&self.gr, self.ns(), &list_opts)?;
        let mut items = Vec::new();
        for obj in list.items {
            let name = crate::meta::name_of(&obj).to_string();
            let obj_ns = crate::meta::namespace_of(&obj).to_string();
            let target_ns = if self.info.namespaced {
                Some(obj_ns.as_str())
            } else {
                None
            };
            match store.delete(&self.gr, target_ns, &name, &opts) {
                Ok(Deleted::Gone(o) | Deleted::Pending(o)) => items.push(self.present(o)),
                Err(Error::NotFound { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        let rv = store.current_resource_version().to_string();
        Ok(self.list_response(json!({"resourceVersion": rv}), items))
    }
}

/// The patch a body is, by its media type.
fn patch_of(info: &ResourceInfo, content_type: &str, body: &[u8]) -> Result<Patch, Error> {
    let media = content_type.split(';').next().unwrap_or("").trim();
    Ok(match media {
        "application/apply-patch+yaml" | "application/apply-patch+cbor" => {
            Patch::Apply(parse_json_or_yaml(body)?)
        }
        "application/strategic-merge-patch+json" => Patch::Strategic(parse_json(body)?),
        "application/merge-patch+json" => Patch::Merge(parse_json(body)?),
        "application/json-patch+json" => Patch::Json(parse_json(body)?),
        _ => {
            return Err(Error::UnsupportedMediaType(format!(
                "the body of the request was in an unknown format - accepted media types include: \
                 application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml{}",
                if info.is_custom() {
                    ""
                } else {
                    ", application/strategic-merge-patch+json"
                }
            )));
        }
    })
}
fn check_kind(info: &ResourceInfo, version: &str, obj: &Value) -> Result<(), Error> {
    let kind = crate::meta::str_at(obj, "/kind").unwrap_or("");
    let api_version = crate::meta::str_at(obj, "/apiVersion").unwrap_or("");
    if (!kind.is_empty() && kind != info.kind)
        || (!api_version.is_empty() && api_version != info.api_version(version))
    {
        return Err(Error::BadRequest(format!(
            "the API version in the data ({api_version}) does not match the expected API version ({})",
            info.api_version(version)
        )));
    }
    Ok(())
}

fn check_name(obj: &Value, name: &str) -> Result<(), Error> {
    let body_name = crate::meta::name_of(obj);
    if body_name != name {
        return Err(Error::BadRequest(format!(
            "the name of the object ({body_name}) does not match the name on the URL ({name})"
        )));
    }
    Ok(())
}

fn success_status(info: &ResourceInfo, obj: &Value) -> Value {
    json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "details": {
            "name": crate::meta::name_of(obj),
            "group": info.group,
            "kind": info.plural,
            "uid": crate::meta::str_at(obj, "/metadata/uid").unwrap_or(""),
        }
    })
}

/// The deprecated `orphanDependents` of a delete, from the query or the body.
fn orphan_dependents(q: &Query, content_type: &str, body: &[u8]) -> Result<Option<bool>, Error> {
    if let Some(v) = q.get("orphanDependents") {
        return Ok(Some(v == "true"));
    }
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(None);
    }
    let v = object_body(Some(content_type), body)?;
    Ok(v.get("orphanDependents").and_then(Value::as_bool))
}

fn delete_options(q: &Query, content_type: &str, body: &[u8]) -> Result<DeleteOptions, Error> {
    let mut opts = DeleteOptions {
        dry_run: dry_run(q),
        ..DeleteOptions::default()
    };
    if let Some(g) = q.get("gracePeriodSeconds") {
        opts.grace_period_seconds = Some(
            g.parse()
                .map_err(|_| Error::BadRequest(format!("invalid gracePeriodSeconds {g:?}")))?,
        );
    }
    opts.propagation_policy = q.get("propagationPolicy").map(str::to_string);
    if !body.iter().all(u8::is_ascii_whitespace) {
        let v = object_body(Some(content_type), body)?;
        if let Some(g) = v.get("gracePeriodSeconds").and_then(Value::as_i64) {
            opts.grace_period_seconds = Some(g);
        }
        if let Some(rv) = v
            .pointer("/preconditions/resourceVersion")
            .and_then(Value::as_str)
        {
            opts.resource_version = Some(rv.to_string());
        }
        if let Some(uid) = v.pointer("/preconditions/uid").and_then(Value::as_str) {
            opts.uid = Some(uid.to_string());
        }
        if let Some(policy) = v.get("propagationPolicy").and_then(Value::as_str) {
            opts.propagation_policy = Some(policy.to_string());
        }
    }
    // The legacy `orphanDependents`: `true` orphans, `false` deletes in the foreground.
    if opts.propagation_policy.is_none() {
        opts.propagation_policy = match orphan_dependents(q, content_type, body)? {
            Some(true) => Some("Orphan".to_string()),
            Some(false) => Some("Foreground".to_string()),
            None => None,
        };
    }
    if !body.iter().all(u8::is_ascii_whitespace) {
        let v = object_body(Some(content_type), body)?;
        if v.get("dryRun")
            .and_then(Value::as_array)
            .is_some_and(|a| a.iter().any(|d| d == "All"))
        {
            opts.dry_run = true;
        }
    }
    Ok(opts)
}

fn scale_of(obj: &Value) -> Value {
    let selector = obj
        .pointer("/spec/selector/matchLabels")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
                .collect::<Vec<_>>()
                .join(",")
        })
        .unwrap_or_default();
    json!({
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {
            "name": obj.pointer("/metadata/name"),
            "namespace": obj.pointer("/metadata/namespace"),
            "uid": obj.pointer("/metadata/uid"),
            "resourceVersion": obj.pointer("/metadata/resourceVersion"),
            "creationTimestamp": obj.pointer("/metadata/creationTimestamp"),
        },
        "spec": {"replicas": obj.pointer("/spec/replicas").cloned().unwrap_or(json!(0))},
        "status": {"replicas": obj.pointer("/status/replicas").cloned().unwrap_or(json!(0)), "selector": selector},
    })
}
