//! `pods/binding` (`POST …/pods/<name>/binding`): a scheduler's `Binding` of a pod to a node, stored by
//! [`Store::bind`](crate::store::Store::bind) and answered `201` with a `Success` Status, as
//! kube-apiserver's `BindingREST` answers.

use http::{Request, Response, StatusCode};
use hyper::body::Incoming;
use serde_json::{Value, json};

use super::protobuf::object_body;
use super::{ApiPath, Body, Query, ServerState, dry_run, json_response, posted_to, read_body};
use crate::meta;
use crate::store::{Binding, Error};
use crate::validation::FieldError;

/// Binds the pod the path names to the `Binding`'s target node.
pub async fn request(
    state: &ServerState,
    req: Request<Incoming>,
    path: &ApiPath,
) -> Result<Response<Body>, Error> {
    let (namespace, name) = posted_to(&req, path)?;
    let dry = dry_run(&Query::parse(req.uri().query()));
    let (body, content_type) = read_body(req).await?;
    let body = object_body(Some(&content_type), &body)?;
    let binding = read_binding(&body, namespace, name)?;
    if !dry {
        state.store.bind(namespace, name, &binding)?;
    }
    let status = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
        "code": StatusCode::CREATED.as_u16()});
    Ok(json_response(StatusCode::CREATED, &status))
}

/// The binding `body` asks for, checked as `BindingREST.Create` and `ValidatePodBinding` check it.
fn read_binding(body: &Value, namespace: &str, name: &str) -> Result<Binding, Error> {
    if meta::name_of(body) != name {
        return Err(Error::BadRequest(
            "name in URL does not match name in Binding object".to_string(),
        ));
    }
    if meta::str_at(body, "/metadata/namespace").is_some_and(|ns| !ns.is_empty() && ns != namespace)
    {
        return Err(Error::BadRequest(
            "the namespace of the provided object does not match the namespace sent on the request"
                .to_string(),
        ));
    }
    let kind = meta::str_at(body, "/target/kind").unwrap_or("");
    let node = meta::str_at(body, "/target/name").unwrap_or("");
    let mut causes = Vec::new();
    if !kind.is_empty() && kind != "Node" {
        let supported = ["Node".to_string(), "<empty>".to_string()];
        causes.push(FieldError::not_supported(
            "target.kind",
            &json!(kind),
            &supported,
        ));
    }
    if node.is_empty() {
        causes.push(FieldError::required("target.name", ""));
    }
    if !causes.is_empty() {
        return Err(Error::Invalid {
            group: String::new(),
            kind: "Binding".to_string(),
            name: name.to_string(),
            message: crate::validation::join(&causes),
            causes,
        });
    }
    Ok(Binding {
        node: node.to_string(),
        uid: meta::str_at(body, "/metadata/uid").map(str::to_string),
        annotations: body
            .pointer("/metadata/annotations")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default(),
    })
}
