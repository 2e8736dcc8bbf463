//! The store's errors, one-to-one with Kubernetes `Status` bodies.

use serde_json::{Value, json};

use crate::resource::GroupResource;
use crate::validation::FieldError;

/// An API error, convertible to a Kubernetes `Status`.
#[derive(Debug, thiserror::Error, Clone, PartialEq)]
pub enum Error {
    /// The URL names no known resource (also for custom resources whose CRD is not established yet).
    #[error("the server could not find the requested resource")]
    ResourceNotFound,
    /// The object does not exist.
    #[error("{resource} \"{name}\" not found")]
    NotFound {
        /// The resource.
        resource: GroupResource,
        /// The object name.
        name: String,
    },
    /// An object with that name exists already.
    #[error("{resource} \"{name}\" already exists")]
    AlreadyExists {
        /// The resource.
        resource: GroupResource,
        /// The object name.
        name: String,
    },
    /// A precondition (usually `resourceVersion`) failed.
    #[error("Operation cannot be fulfilled on {resource} \"{name}\": {reason}")]
    Conflict {
        /// The resource.
        resource: GroupResource,
        /// The object name.
        name: String,
        /// Why, for example `the object has been modified; please apply your changes to the latest version and try again`.
        reason: String,
    },
    /// Server-side apply found fields owned by other managers.
    #[error("{message}")]
    ApplyConflict {
        /// The full message.
        message: String,
        /// `(message, field)` pairs.
        causes: Vec<(String, String)>,
    },
    /// The object failed validation.
    #[error("{} \"{name}\" is invalid: {message}", qualified(kind, group))]
    Invalid {
        /// The group.
        group: String,
        /// The kind.
        kind: String,
        /// The object name.
        name: String,
        /// The field errors, joined.
        message: String,
        /// The field errors, one `details.causes` entry each; empty when only `message` is known.
        causes: Vec<FieldError>,
    },
    /// The request is malformed.
    #[error("{0}")]
    BadRequest(String),
    /// The request body is larger than the server reads.
    #[error("Request entity too large: {0}")]
    RequestEntityTooLarge(String),
    /// The patch type is not accepted for this resource.
    #[error("{0}")]
    UnsupportedMediaType(String),
    /// No media type the client accepts can be written.
    #[error("{0}")]
    NotAcceptable(String),
    /// The operation is refused, for example creating in a terminating namespace.
    #[error("{resource} \"{name}\" is forbidden: {reason}")]
    Forbidden {
        /// The resource.
        resource: GroupResource,
        /// The object name.
        name: String,
        /// Why.
        reason: String,
    },
    /// The authorizer refused the request, as kube-apiserver's `NewForbidden` words it: `message` says who
    /// cannot do what (`User "…" cannot list resource "secrets" in API group "" in the namespace "demo"`).
    #[error("{}", denied(resource, name, message))]
    Denied {
        /// The resource asked for; empty for a non-resource URL.
        resource: GroupResource,
        /// The object's name; empty for a collection.
        name: String,
        /// Who cannot do what, and the authorizer's reason when it gave one.
        message: String,
    },
    /// A watch asked for history that is gone.
    #[error("{0}")]
    Expired(String),
    /// A `continue` token older than the history: 410 `Expired`, with a token in the `Status`'s
    /// `metadata.continue` that goes on with the rest of the list at the latest version.
    #[error("{INCONSISTENT_CONTINUE}")]
    ExpiredContinue(String),
    /// A read asked for a `resourceVersion` the store has not reached yet (`storage.NewTooLargeResourceVersionError`).
    #[error("Timeout: Too large resource version: {requested}, current: {current}")]
    TooLargeResourceVersion {
        /// The version asked for.
        requested: u64,
        /// The store's version.
        current: u64,
    },
    /// The verb is not supported on this path.
    #[error("the server does not allow this method on the requested resource")]
    MethodNotAllowed,
    /// The request was not authenticated.
    #[error("Unauthorized")]
    Unauthorized,
    /// Kubernetes serves this, kube-sim does not; the message says what and why.
    #[error("{0}")]
    NotImplemented(String),
}

impl Error {
    /// The HTTP status code.
    pub fn code(&self) -> u16 {
        match self {
            Error::ResourceNotFound | Error::NotFound { .. } => 404,
            Error::AlreadyExists { .. } | Error::Conflict { .. } | Error::ApplyConflict { .. } => {
                409
            }
            Error::Invalid { .. } => 422,
            Error::BadRequest(_) => 400,
            Error::RequestEntityTooLarge(_) => 413,
            Error::UnsupportedMediaType(_) => 415,
            Error::NotAcceptable(_) => 406,
            Error::Forbidden { .. } | Error::Denied { .. } => 403,
            Error::Expired(_) | Error::ExpiredContinue(_) => 410,
            Error::TooLargeResourceVersion { .. } => 504,
            Error::MethodNotAllowed => 405,
            Error::Unauthorized => 401,
            Error::NotImplemented(_) => 501,
        }
    }

    /// The Kubernetes `reason`.
    pub fn reason(&self) -> &'static str {
        match self {
            Error::ResourceNotFound | Error::NotFound { .. } => "NotFound",
            Error::AlreadyExists { .. } => "AlreadyExists",
            Error::Conflict { .. } | Error::ApplyConflict { .. } => "Conflict",
            Error::Invalid { .. } => "Invalid",
            Error::BadRequest(_) => "BadRequest",
            Error::RequestEntityTooLarge(_) => "RequestEntityTooLarge",
            Error::UnsupportedMediaType(_) => "UnsupportedMediaType",
            Error::NotAcceptable(_) => "NotAcceptable",
            Error::Forbidden { .. } | Error::Denied { .. } => "Forbidden",
            Error::Expired(_) | Error::ExpiredContinue(_) => "Expired",
            Error::TooLargeResourceVersion { .. } => "Timeout",
            Error::MethodNotAllowed => "MethodNotAllowed",
            Error::Unauthorized => "Unauthorized",
            Error::NotImplemented(_) => "NotImplemented",
        }
    }

    /// The `Status` body, as the Kubernetes API server writes it.
    pub fn status(&self) -> Value {
        let details = match self {
            Error::NotFound { resource, name }
            | Error::AlreadyExists { resource, name }
            | Error::Conflict { resource, name, .. }
            | Error::Forbidden { resource, name, .. } => {
                Some(json!({"name": name, "group": resource.group, "kind": resource.resource}))
            }
            Error::ApplyConflict { causes, .. } => {
                Some(json!({"causes": causes.iter().map(|(m, f)| json!({
                "reason": "FieldManagerConflict", "message": m, "field": f})).collect::<Vec<_>>()}))
            }
            Error::Invalid {
                group,
                kind,
                name,
                message,
                causes,
                ..
            } => {
                let causes: Vec<Value> = if causes.is_empty() {
                    vec![json!({"reason": "FieldValueInvalid", "message": message})]
                } else {
                    causes
                        .iter()
                        .map(|c| json!({"reason": c.kind.reason(), "message": c.body(), "field": c.field}))
                        .collect()
                };
                Some(json!({"name": name, "group": group, "kind": kind, "causes": causes}))
            }
            Error::Denied { resource, name, .. } => {
                let mut d = serde_json::Map::new();
                for (key, value) in [
                    ("name", name),
                    ("group", &resource.group),
                    ("kind", &resource.resource),
                ] {
                    if !value.is_empty() {
                        d.insert(key.into(), json!(value));
                    }
                }
                Some(Value::Object(d))
            }
            Error::ResourceNotFound => Some(json!({})),
            Error::TooLargeResourceVersion { .. } => Some(json!({"retryAfterSeconds": 1,
                "causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}]})),
            _ => None,
        };
        let metadata = match self {
            Error::ExpiredContinue(token) => json!({"continue": token}),
            _ => json!({}),
        };
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": metadata,
            "status": "Failure",
            "message": self.to_string(),
            "reason": self.reason(),
            "code": self.code(),
        });
        if let (Some(d), Value::Object(m)) = (details, &mut status) {
            m.insert("details".into(), d);
        }
        status
    }

    /// The `422 Invalid` of an object of a resource that failed validation.
    pub fn invalid(
        info: &crate::resource::ResourceInfo,
        name: &str,
        causes: Vec<FieldError>,
    ) -> Error {
        Error::Invalid {
            group: info.group.clone(),
            kind: info.kind.clone(),
            name: name.to_string(),
            message: crate::validation::join(&causes),
            causes,
        }
    }

    pub(super) fn stale(resource: &GroupResource, name: &str) -> Error {
        Error::Conflict {
            resource: resource.clone(),
            name: name.to_string(),
            reason: "the object has been modified; please apply your changes to the latest version and try again"
                .to_string(),
        }
    }
}

/// The message of a 410 for a `continue` token older than the history (`etcd3/store.go`).
const INCONSISTENT_CONTINUE: &str = "The provided continue parameter is too old to display a consistent list result. \
You can start a new list without the continue parameter, or use the continue token in this response to retrieve the \
remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were \
created, modified, or deleted between the time the first chunk was returned and now may show up in the list.";

/// `Kind.group`, or `Kind` for the core group.
fn qualified(kind: &str, group: &str) -> String {
    if group.is_empty() {
        kind.to_string()
    } else {
        format!("{kind}.{group}")
    }
}

/// `NewForbidden`'s message: `forbidden: …` without a resource, `<resource> is forbidden: …` for a
/// collection, `<resource> "<name>" is forbidden: …` for an object.
fn denied(resource: &GroupResource, name: &str, message: &str) -> String {
    if resource.group.is_empty() && resource.resource.is_empty() {
        format!("forbidden: {message}")
    } else if name.is_empty() {
        format!("{resource} is forbidden: {message}")
    } else {
        format!("{resource} \"{name}\" is forbidden: {message}")
    }
}

/// A store operation result.
pub type Result<T, E = Error> = std::result::Result<T, E>;
