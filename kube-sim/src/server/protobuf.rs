//! Request and response media types, and Kubernetes' protobuf encoding of request bodies.
//!
//! A protobuf body is the magic `k8s\0` followed by a `runtime.Unknown` envelope (decoded with
//! k8s-pb) whose `typeMeta` names the kind and whose `raw` is the typed message. The message is
//! walked with the generated [`schema`] table into the same JSON a JSON client sends for the object,
//! so the store sees no difference. Responses are JSON; a client that accepts only protobuf gets
//! `406 NotAcceptable`.

use prost::Message as _;
use serde_json::{Map, Value};

use crate::store;

mod decode;
#[cfg(test)]
mod generate;
mod schema;
mod special;
#[cfg(test)]
mod tests;
mod wire;

/// The prefix of every Kubernetes protobuf body.
pub const MAGIC: &[u8] = b"k8s\0";

/// Kubernetes' protobuf media type.
pub const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";

/// The media types an object body (create, update, delete options) may have.
const OBJECT_MEDIA_TYPES: &[&str] = &["application/json", "application/yaml", PROTOBUF];

/// Why a protobuf body could not be read.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The body does not start with `k8s\0`.
    #[error("the protobuf body does not start with the Kubernetes magic prefix")]
    NoMagic,
    /// The `runtime.Unknown` envelope does not decode.
    #[error("the protobuf envelope does not decode")]
    Envelope(#[source] prost::DecodeError),
    /// The envelope's content is compressed or otherwise encoded.
    #[error("the protobuf envelope has an unsupported content encoding {0:?}")]
    ContentEncoding(String),
    /// The envelope names a kind the server has no protobuf schema for.
    #[error("no protobuf schema for kind {kind:?} in {api_version:?}")]
    UnknownKind {
        /// The envelope's `apiVersion`.
        api_version: String,
        /// The envelope's `kind`.
        kind: String,
    },
    /// A field refers to a message the schema lacks.
    #[error("no protobuf schema for message {0}")]
    UnknownMessage(String),
    /// The body ends inside a field.
    #[error("the protobuf message is truncated")]
    Truncated,
    /// A varint runs past ten bytes.
    #[error("the protobuf message has a malformed varint")]
    BadVarint,
    /// A field key whose tag is out of range.
    #[error("the protobuf message has an invalid field key {0}")]
    BadTag(u64),
    /// A field with a wire type protobuf 3 does not write (groups) or that does not exist.
    #[error("field {tag} has the unsupported wire type {wire}")]
    WireType {
        /// The field tag.
        tag: u32,
        /// The wire type.
        wire: u64,
    },
    /// A field's wire type does not fit its declared type.
    #[error("a field of type {0} has the wrong wire type")]
    Mismatch(String),
    /// A string field is not UTF-8.
    #[error("a string field is not valid UTF-8")]
    Utf8(#[source] std::str::Utf8Error),
    /// An embedded JSON document does not parse.
    #[error("an embedded JSON document does not parse")]
    EmbeddedJson(#[source] serde_json::Error),
    /// A time is out of range.
    #[error("a time is out of range")]
    Time(#[source] jiff::Error),
}

/// The JSON object of a protobuf body: its fields, with `apiVersion` and `kind` from the envelope.
pub fn decode(body: &[u8]) -> Result<Value, Error> {
    let raw = body.strip_prefix(MAGIC).ok_or(Error::NoMagic)?;
    let unknown =
        k8s_pb::apimachinery::pkg::runtime::Unknown::decode(raw).map_err(Error::Envelope)?;
    if let Some(encoding) = unknown.content_encoding.filter(|e| !e.is_empty()) {
        return Err(Error::ContentEncoding(encoding));
    }
    let type_meta = unknown.type_meta.unwrap_or_default();
    let api_version = type_meta.api_version.unwrap_or_default();
    let kind = type_meta.kind.unwrap_or_default();
    let schema = schema::Schema::get();
    let message = schema
        .kind(&api_version, &kind)
        .ok_or_else(|| Error::UnknownKind {
            api_version: api_version.clone(),
            kind: kind.clone(),
        })?;
    let fields = decode::object(schema, message, &unknown.raw.unwrap_or_default())?;
    let mut out = Map::new();
    out.insert("apiVersion".into(), Value::String(api_version));
    out.insert("kind".into(), Value::String(kind));
    out.extend(fields);
    Ok(Value::Object(out))
}

/// The media type of a `Content-Type` or `Accept` entry, without parameters, lowercased.
fn media_type(value: &str) -> String {
    value
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase()
}

/// The object a create, update or delete body holds, by its `Content-Type` (JSON when unset):
/// JSON, YAML or protobuf; any other media type is `415 UnsupportedMediaType`.
pub fn object_body(content_type: Option<&str>, body: &[u8]) -> Result<Value, store::Error> {
    let media = content_type.map_or_else(String::new, media_type);
    match media.as_str() {
        // Like kube-apiserver, a body without a media type is read as the first one served.
        "application/json" | "" => serde_json::from_slice(body).map_err(|e| {
            store::Error::BadRequest(format!("the request body is not valid JSON: {e}"))
        }),
        "application/yaml" => serde_yaml::from_slice(body)
            .map_err(|e| store::Error::BadRequest(format!("error decoding YAML: {e}"))),
        PROTOBUF => decode(body).map_err(|e| {
            store::Error::BadRequest(format!(
                "the request body is not valid protobuf: {}",
                chain(&e)
            ))
        }),
        _ => Err(unsupported(&media)),
    }
}

/// The `415` for a body whose media type no object endpoint reads.
fn unsupported(media: &str) -> store::Error {
    store::Error::UnsupportedMediaType(format!(
        "the body of the request was in an unknown format {media:?} - accepted media types \
         include: {}",
        OBJECT_MEDIA_TYPES.join(", ")
    ))
}

/// An error with its sources, for a `Status` message.
fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// Checks that a response the server writes (JSON, or plain text for logs when `text` is set) is
/// one the client's `Accept` allows; an empty `Accept` allows anything. A client asking for YAML
/// gets JSON, which YAML parsers read.
pub fn check_accept(accept: &str, text: bool) -> Result<(), store::Error> {
    if accept.trim().is_empty() {
        return Ok(());
    }
    let acceptable = accept.split(',').map(media_type).any(|m| {
        matches!(
            m.as_str(),
            "*/*" | "application/*" | "application/json" | "application/yaml"
        ) || (text && matches!(m.as_str(), "text/*" | "text/plain"))
    });
    if acceptable {
        return Ok(());
    }
    Err(store::Error::NotAcceptable(format!(
        "only the following media types are accepted: application/json{}",
        if text { ", text/plain" } else { "" }
    )))
}
