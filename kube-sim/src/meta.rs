//! Small helpers for object metadata: timestamps, random names and identifiers, JSON field access.

use serde_json::{Map, Value};

/// The current time as an RFC 3339 timestamp with second precision, as Kubernetes writes `metav1.Time`.
pub fn now_rfc3339() -> String {
    rfc3339_after(0)
}

/// The time `seconds` from now as an RFC 3339 timestamp with second precision.
pub fn rfc3339_after(seconds: i64) -> String {
    let now = jiff::Timestamp::now();
    let secs = now.as_second() + seconds;
    rfc3339(jiff::Timestamp::from_second(secs).unwrap_or(now))
}

/// `t` as Kubernetes writes times: RFC 3339, in seconds.
pub fn rfc3339(t: jiff::Timestamp) -> String {
    t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// Fills a buffer from the OS random source. These bytes become the admin
/// token and the signatures of service-account tokens, so a source that
/// fails stops the server: a guessable fallback would make forgeable
/// tokens.
pub fn random_bytes(buf: &mut [u8]) {
    if let Err(e) = getrandom::fill(buf) {
        panic!("the OS random source failed ({e}): kube-sim makes no tokens without it");
    }
}

/// A random version-4 UUID in its canonical text form.
pub fn new_uid() -> String {
    let mut b = [0u8; 16];
    random_bytes(&mut b);
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

/// A random hex token of `n` bytes.
pub fn random_hex(n: usize) -> String {
    let mut b = vec![0u8; n];
    random_bytes(&mut b);
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// A random suffix of `n` characters from Kubernetes' alphabet for generated names (no vowels, no confusables).
pub fn random_suffix(n: usize) -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut b = vec![0u8; n];
    random_bytes(&mut b);
    b.iter()
        .map(|x| ALPHABET[*x as usize % ALPHABET.len()] as char)
        .collect()
}

/// The string at a JSON pointer, if it is one.
pub fn str_at<'a>(v: &'a Value, pointer: &str) -> Option<&'a str> {
    v.pointer(pointer).and_then(Value::as_str)
}

/// `metadata.name`, or an empty string.
pub fn name_of(v: &Value) -> &str {
    str_at(v, "/metadata/name").unwrap_or("")
}

/// `metadata.namespace`, or an empty string.
pub fn namespace_of(v: &Value) -> &str {
    str_at(v, "/metadata/namespace").unwrap_or("")
}

/// `metadata.resourceVersion` parsed as a number, if present and numeric.
pub fn resource_version_of(v: &Value) -> Option<u64> {
    str_at(v, "/metadata/resourceVersion").and_then(|s| s.parse().ok())
}

/// The `metadata` map of an object, created if missing.
pub fn metadata_mut(v: &mut Value) -> &mut Map<String, Value> {
    if !v.is_object() {
        *v = Value::Object(Map::new());
    }
    let obj = v.as_object_mut().expect("object was just ensured");
    let md = obj
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    if !md.is_object() {
        *md = Value::Object(Map::new());
    }
    md.as_object_mut()
        .expect("metadata was just ensured to be an object")
}

/// The child map at `key`, created (or replaced if not a map) when missing.
pub fn child_map<'a>(m: &'a mut Map<String, Value>, key: &str) -> &'a mut Map<String, Value> {
    let e = m.entry(key).or_insert_with(|| Value::Object(Map::new()));
    if !e.is_object() {
        *e = Value::Object(Map::new());
    }
    e.as_object_mut()
        .expect("child was just ensured to be an object")
}

/// Whether the value is absent, null, or an empty map or list.
pub fn is_empty_value(v: Option<&Value>) -> bool {
    match v {
        None | Some(Value::Null) => true,
        Some(Value::Object(m)) => m.is_empty(),
        Some(Value::Array(a)) => a.is_empty(),
        Some(_) => false,
    }
}
