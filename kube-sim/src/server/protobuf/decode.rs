//! Turns a protobuf message body into the Kubernetes JSON of the same object, walking the fields
//! with the [`Schema`]: camelCase names, times as RFC 3339, `IntOrString` as a number or a string,
//! quantities as strings, bytes as base64, and unset or zero optional scalars left out.

use base64::Engine as _;
use serde_json::{Map, Number, Value};

use super::Error;
use super::schema::{Card, Field, Schema};
use super::wire::{Fields, Wire};

/// The messages whose JSON form is not an object of their fields.
#[cfg(test)]
pub(super) const SPECIAL: &[&str] = &[
    TIME,
    MICRO_TIME,
    DURATION,
    FIELDS_V1,
    QUANTITY,
    INT_OR_STRING,
    RAW_EXTENSION,
    EXTENSIONS_JSON,
    SCHEMA_OR_ARRAY,
    SCHEMA_OR_BOOL,
    SCHEMA_OR_STRINGS,
];
const TIME: &str = "apimachinery.pkg.apis.meta.v1.Time";
const MICRO_TIME: &str = "apimachinery.pkg.apis.meta.v1.MicroTime";
const DURATION: &str = "apimachinery.pkg.apis.meta.v1.Duration";
const FIELDS_V1: &str = "apimachinery.pkg.apis.meta.v1.FieldsV1";
const QUANTITY: &str = "apimachinery.pkg.api.resource.Quantity";
const INT_OR_STRING: &str = "apimachinery.pkg.util.intstr.IntOrString";
const RAW_EXTENSION: &str = "apimachinery.pkg.runtime.RawExtension";
const EXTENSIONS_JSON: &str = "apiextensions_apiserver.pkg.apis.apiextensions.v1.Json";
const SCHEMA_PROPS: &str = "apiextensions_apiserver.pkg.apis.apiextensions.v1.JsonSchemaProps";
const SCHEMA_OR_ARRAY: &str =
    "apiextensions_apiserver.pkg.apis.apiextensions.v1.JsonSchemaPropsOrArray";
const SCHEMA_OR_BOOL: &str =
    "apiextensions_apiserver.pkg.apis.apiextensions.v1.JsonSchemaPropsOrBool";
const SCHEMA_OR_STRINGS: &str =
    "apiextensions_apiserver.pkg.apis.apiextensions.v1.JsonSchemaPropsOrStringArray";

/// Optional fields that are pointers in the Kubernetes types: present on the wire only when set,
/// so a zero or `false` there is a value the client chose (`replicas: 0`), not an unset field.
const KEEPS_ZERO: &[(&str, &str)] = &[
    ("api.apps.v1.DeploymentSpec", "replicas"),
    ("api.apps.v1.DeploymentSpec", "revisionHistoryLimit"),
    ("api.apps.v1.DeploymentSpec", "progressDeadlineSeconds"),
    ("api.apps.v1.ReplicaSetSpec", "replicas"),
    ("api.core.v1.PodSpec", "terminationGracePeriodSeconds"),
    ("api.core.v1.PodSpec", "activeDeadlineSeconds"),
    ("api.core.v1.PodSpec", "automountServiceAccountToken"),
    ("api.core.v1.PodSpec", "shareProcessNamespace"),
    ("api.core.v1.PodSpec", "enableServiceLinks"),
    ("api.core.v1.PodSpec", "hostUsers"),
    ("api.core.v1.PodSpec", "setHostnameAsFQDN"),
    ("api.core.v1.ServiceAccount", "automountServiceAccountToken"),
    ("api.core.v1.ConfigMap", "immutable"),
    ("api.core.v1.Secret", "immutable"),
    ("api.core.v1.SecurityContext", "privileged"),
    ("api.core.v1.SecurityContext", "runAsUser"),
    ("api.core.v1.SecurityContext", "runAsGroup"),
    ("api.core.v1.SecurityContext", "runAsNonRoot"),
    ("api.core.v1.SecurityContext", "readOnlyRootFilesystem"),
    ("api.core.v1.SecurityContext", "allowPrivilegeEscalation"),
    ("api.core.v1.PodSecurityContext", "runAsUser"),
    ("api.core.v1.PodSecurityContext", "runAsGroup"),
    ("api.core.v1.PodSecurityContext", "runAsNonRoot"),
    ("api.core.v1.PodSecurityContext", "fsGroup"),
    ("api.core.v1.ServiceSpec", "allocateLoadBalancerNodePorts"),
    ("api.core.v1.ConfigMapVolumeSource", "optional"),
    ("api.core.v1.SecretVolumeSource", "optional"),
    ("api.core.v1.ConfigMapKeySelector", "optional"),
    ("api.core.v1.SecretKeySelector", "optional"),
    (
        "apimachinery.pkg.apis.meta.v1.ObjectMeta",
        "deletionGracePeriodSeconds",
    ),
    (
        "apimachinery.pkg.apis.meta.v1.DeleteOptions",
        "gracePeriodSeconds",
    ),
    (
        "apimachinery.pkg.apis.meta.v1.DeleteOptions",
        "orphanDependents",
    ),
];

/// The JSON object of a message body.
pub(super) fn object(
    schema: &Schema,
    name: &str,
    body: &[u8],
) -> Result<Map<String, Value>, Error> {
    let fields = schema
        .message(name)
        .ok_or_else(|| Error::UnknownMessage(name.to_string()))?;
    let mut out = Map::new();
    for item in Fields::new(body) {
        let (tag, wire) = item?;
        // Fields the table does not know are newer than it; Kubernetes drops them too.
        let Some(field) = fields.get(&tag) else {
            continue;
        };
        match field.card {
            Card::One | Card::Required => match single(schema, field.ty, wire)? {
                Some(v)
                    if field.card == Card::Required || !is_zero(&v) || keeps_zero(name, field) =>
                {
                    out.insert(field.json.to_string(), v);
                }
                _ => {
                    out.remove(field.json);
                }
            },
            Card::Many => {
                let list = out
                    .entry(field.json)
                    .or_insert_with(|| Value::Array(Vec::new()));
                if let Value::Array(list) = list {
                    repeated(schema, field.ty, wire, list)?;
                }
            }
            Card::Map => {
                let (key, value) = map_entry(schema, field.ty, wire)?;
                let map = out
                    .entry(field.json)
                    .or_insert_with(|| Value::Object(Map::new()));
                if let Value::Object(map) = map {
                    map.insert(key, value);
                }
            }
        }
    }
    Ok(out)
}

fn keeps_zero(message: &str, field: &Field) -> bool {
    KEEPS_ZERO.contains(&(message, field.json))
}

fn is_zero(v: &Value) -> bool {
    match v {
        Value::String(s) => s.is_empty(),
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::Null => true,
        Value::Array(_) | Value::Object(_) => false,
    }
}

/// One value of a field; `None` for a message whose JSON form is unset (a zero time).
fn single(schema: &Schema, ty: &str, wire: Wire<'_>) -> Result<Option<Value>, Error> {
    let mismatch = || Error::Mismatch(ty.to_string());
    Ok(Some(match (ty, wire) {
        ("string", Wire::Bytes(b)) => Value::String(utf8(b)?),
        ("bytes", Wire::Bytes(b)) => {
            Value::String(base64::engine::general_purpose::STANDARD.encode(b))
        }
        ("bool", Wire::Varint(v)) => Value::Bool(v != 0),
        // Negative int32 values are sign-extended to ten bytes on the wire.
        ("int32", Wire::Varint(v)) => Value::from(i64::from(v as i32)),
        ("int64", Wire::Varint(v)) => Value::from(v as i64),
        ("uint32" | "uint64", Wire::Varint(v)) => Value::from(v),
        ("double", Wire::Fixed64(v)) => float(f64::from_bits(v)),
        ("float", Wire::Fixed32(v)) => float(f64::from(f32::from_bits(v))),
        (
            "string" | "bytes" | "bool" | "int32" | "int64" | "uint32" | "uint64" | "double"
            | "float",
            _,
        ) => return Err(mismatch()),
        (message, Wire::Bytes(b)) => return self::message(schema, message, b),
        _ => return Err(mismatch()),
    }))
}

fn float(f: f64) -> Value {
    Number::from_f64(f).map_or(Value::Null, Value::Number)
}

fn utf8(b: &[u8]) -> Result<String, Error> {
    Ok(std::str::from_utf8(b).map_err(Error::Utf8)?.to_string())
}

/// Appends the values of one occurrence of a repeated field: one value, or a packed run of scalars.
fn repeated(schema: &Schema, ty: &str, wire: Wire<'_>, list: &mut Vec<Value>) -> Result<(), Error> {
    let packable = matches!(ty, "bool" | "int32" | "int64" | "uint32" | "uint64");
    if let (true, Wire::Bytes(b)) = (packable, wire) {
        let mut packed = Fields::new(b);
        while !packed.is_empty() {
            let v = packed.varint()?;
            list.extend(single(schema, ty, Wire::Varint(v))?);
        }
        return Ok(());
    }
    list.push(single(schema, ty, wire)?.unwrap_or(Value::Null));
    Ok(())
}

/// One entry of a map field: key (tag 1) and value (tag 2), each defaulting to its zero value.
fn map_entry(schema: &Schema, ty: &str, wire: Wire<'_>) -> Result<(String, Value), Error> {
    let Wire::Bytes(entry) = wire else {
        return Err(Error::Mismatch(format!("map<string, {ty}>")));
    };
    let mut key = String::new();
    let mut value = None;
    for item in Fields::new(entry) {
        match item? {
            (1, Wire::Bytes(k)) => key = utf8(k)?,
            (2, w) => value = single(schema, ty, w)?,
            _ => {}
        }
    }
    let value = match value {
        Some(v) => v,
        None if matches!(ty, "string" | "bytes") => Value::String(String::new()),
        None => self::message(schema, ty, &[])?.unwrap_or(Value::Null),
    };
    Ok((key, value))
}

/// The JSON of a message body: an object of its fields, or the special form of its type.
pub(super) fn message(schema: &Schema, name: &str, body: &[u8]) -> Result<Option<Value>, Error> {
    let special = match name {
        TIME => super::special::time(body, false)?,
        MICRO_TIME => super::special::time(body, true)?,
        DURATION => super::special::duration(body)?,
        QUANTITY => super::special::quantity(body)?,
        INT_OR_STRING => super::special::int_or_string(body)?,
        FIELDS_V1 | RAW_EXTENSION | EXTENSIONS_JSON => super::special::embedded(body)?,
        SCHEMA_OR_ARRAY => super::special::schema_or_array(schema, SCHEMA_PROPS, body)?,
        SCHEMA_OR_BOOL => super::special::schema_or_bool(schema, SCHEMA_PROPS, body)?,
        SCHEMA_OR_STRINGS => super::special::schema_or_strings(schema, SCHEMA_PROPS, body)?,
        _ => return Ok(Some(Value::Object(object(schema, name, body)?))),
    };
    Ok(special)
}
