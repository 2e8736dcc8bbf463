//! The messages whose JSON form is not an object of their fields: times, durations, quantities,
//! `IntOrString`, embedded raw JSON, and the JSON-schema unions of custom resource definitions.

use serde_json::Value;

use super::Error;
use super::decode::{message, object};
use super::schema::Schema;
use super::wire::{Fields, Wire};

/// The fields of a message body, in wire order.
fn fields(body: &[u8]) -> Result<Vec<(u32, Wire<'_>)>, Error> {
    Fields::new(body).collect()
}

fn varint(body: &[u8], tag: u32) -> Result<Option<u64>, Error> {
    Ok(fields(body)?.into_iter().rev().find_map(|(t, w)| match w {
        Wire::Varint(v) if t == tag => Some(v),
        _ => None,
    }))
}

fn bytes(body: &[u8], tag: u32) -> Result<Option<&[u8]>, Error> {
    Ok(fields(body)?.into_iter().rev().find_map(|(t, w)| match w {
        Wire::Bytes(b) if t == tag => Some(b),
        _ => None,
    }))
}

fn string(body: &[u8], tag: u32) -> Result<Option<String>, Error> {
    bytes(body, tag)?
        .map(|b| {
            std::str::from_utf8(b)
                .map(str::to_string)
                .map_err(Error::Utf8)
        })
        .transpose()
}

/// `metav1.Time` (whole seconds) or `metav1.MicroTime` (microseconds) as RFC 3339 in UTC; the zero
/// time is unset.
pub(super) fn time(body: &[u8], micro: bool) -> Result<Option<Value>, Error> {
    let seconds = varint(body, 1)?.unwrap_or(0) as i64;
    let nanos = varint(body, 2)?.unwrap_or(0) as i32;
    if seconds == 0 && nanos == 0 {
        return Ok(None);
    }
    let nanos = if micro { nanos - nanos % 1000 } else { 0 };
    let ts = jiff::Timestamp::new(seconds, nanos).map_err(Error::Time)?;
    let format = if micro {
        "%Y-%m-%dT%H:%M:%S%.6fZ"
    } else {
        "%Y-%m-%dT%H:%M:%SZ"
    };
    Ok(Some(Value::String(ts.strftime(format).to_string())))
}

/// `metav1.Duration` as Go writes a duration (`1h2m3.5s`).
pub(super) fn duration(body: &[u8]) -> Result<Option<Value>, Error> {
    let nanos = varint(body, 1)?.unwrap_or(0) as i64;
    Ok(Some(Value::String(go_duration(nanos))))
}

/// A duration in nanoseconds as Go's `time.Duration.String` writes it.
pub(super) fn go_duration(nanos: i64) -> String {
    if nanos == 0 {
        return "0s".to_string();
    }
    let sign = if nanos < 0 { "-" } else { "" };
    let n = nanos.unsigned_abs();
    let fraction = |value: u64, unit: u64, suffix: &str| {
        let whole = value / unit;
        let rest = value % unit;
        if rest == 0 {
            return format!("{whole}{suffix}");
        }
        let digits = format!("{rest:0width$}", width = unit.ilog10() as usize);
        format!("{whole}.{}{suffix}", digits.trim_end_matches('0'))
    };
    let body = match n {
        0..1_000 => format!("{n}ns"),
        1_000..1_000_000 => fraction(n, 1_000, "µs"),
        1_000_000..1_000_000_000 => fraction(n, 1_000_000, "ms"),
        _ => {
            let secs = n / 1_000_000_000;
            let (h, m) = (secs / 3600, secs / 60 % 60);
            let s = fraction(n % 60_000_000_000, 1_000_000_000, "s");
            match (h, m) {
                (0, 0) => s,
                (0, m) => format!("{m}m{s}"),
                (h, m) => format!("{h}h{m}m{s}"),
            }
        }
    };
    format!("{sign}{body}")
}

/// `resource.Quantity`: its canonical string (tag 1); the zero quantity is `"0"`.
pub(super) fn quantity(body: &[u8]) -> Result<Option<Value>, Error> {
    let s = string(body, 1)?.filter(|s| !s.is_empty());
    Ok(Some(Value::String(s.unwrap_or_else(|| "0".to_string()))))
}

/// `intstr.IntOrString`: type (tag 1; 1 is a string), intVal (tag 2), strVal (tag 3).
pub(super) fn int_or_string(body: &[u8]) -> Result<Option<Value>, Error> {
    if varint(body, 1)? == Some(1) {
        return Ok(Some(Value::String(string(body, 3)?.unwrap_or_default())));
    }
    let int = varint(body, 2)?.unwrap_or(0) as i32;
    Ok(Some(Value::from(int)))
}

/// Raw bytes in tag 1 that are a JSON document (`RawExtension`, `FieldsV1`, `JSON`), or an
/// embedded protobuf object; empty is unset.
pub(super) fn embedded(body: &[u8]) -> Result<Option<Value>, Error> {
    let raw = bytes(body, 1)?.unwrap_or_default();
    if raw.is_empty() {
        return Ok(None);
    }
    if raw.starts_with(super::MAGIC) {
        return super::decode(raw).map(Some);
    }
    serde_json::from_slice(raw)
        .map(Some)
        .map_err(Error::EmbeddedJson)
}

/// `JSONSchemaPropsOrArray`: the schema (tag 1), or the list of schemas (tag 2) when there is one.
pub(super) fn schema_or_array(
    schema: &Schema,
    props: &str,
    body: &[u8],
) -> Result<Option<Value>, Error> {
    let mut list = Vec::new();
    let mut single = None;
    for (tag, wire) in fields(body)? {
        match (tag, wire) {
            (1, Wire::Bytes(b)) => single = message(schema, props, b)?,
            (2, Wire::Bytes(b)) => list.push(Value::Object(object(schema, props, b)?)),
            _ => {}
        }
    }
    Ok(if list.is_empty() {
        single
    } else {
        Some(Value::Array(list))
    })
}

/// `JSONSchemaPropsOrBool`: the schema (tag 2) when there is one, else the boolean (tag 1).
pub(super) fn schema_or_bool(
    schema: &Schema,
    props: &str,
    body: &[u8],
) -> Result<Option<Value>, Error> {
    if let Some(b) = bytes(body, 2)? {
        return message(schema, props, b);
    }
    Ok(Some(Value::Bool(varint(body, 1)?.unwrap_or(0) != 0)))
}

/// `JSONSchemaPropsOrStringArray`: the list of strings (tag 2) when there is one, else the schema.
pub(super) fn schema_or_strings(
    schema: &Schema,
    props: &str,
    body: &[u8],
) -> Result<Option<Value>, Error> {
    let mut strings = Vec::new();
    let mut single = None;
    for (tag, wire) in fields(body)? {
        match (tag, wire) {
            (1, Wire::Bytes(b)) => single = message(schema, props, b)?,
            (2, Wire::Bytes(b)) => strings.push(Value::String(
                std::str::from_utf8(b).map_err(Error::Utf8)?.to_string(),
            )),
            _ => {}
        }
    }
    Ok(if strings.is_empty() {
        single
    } else {
        Some(Value::Array(strings))
    })
}
