//! The pod-template hash of Deployments (`ComputeHash` in `pkg/controller/controller_utils.go`): FNV-32a
//! over the template and the collision count, written as a decimal number and then encoded with the
//! alphabet of generated names (`SafeEncodeString`).
//!
//! Kubernetes hashes a Go-specific dump of the template; this module hashes its canonical JSON (sorted
//! keys) instead, so the values differ from a real cluster's while keeping every property that matters:
//! stable for equal templates, different for changed ones, and changed by the collision count.

use serde_json::Value;

/// The alphabet of `SafeEncodeString`: no vowels, no confusable characters.
const ALPHANUMS: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

/// The `pod-template-hash` of a pod template.
pub fn compute_hash(template: &Value, collision_count: Option<i64>) -> String {
    let mut hasher = Fnv32a::new();
    let mut canonical = String::new();
    write_canonical(template, &mut canonical);
    hasher.write(canonical.as_bytes());
    if let Some(count) = collision_count {
        // Kubernetes writes the count as a little-endian uint32 into an 8-byte buffer.
        let mut buf = [0u8; 8];
        buf[..4].copy_from_slice(&(count as u32).to_le_bytes());
        hasher.write(&buf);
    }
    safe_encode(&hasher.sum().to_string())
}

/// `SafeEncodeString`: every byte mapped onto the alphabet.
pub fn safe_encode(s: &str) -> String {
    s.bytes()
        .map(|b| ALPHANUMS[b as usize % ALPHANUMS.len()] as char)
        .collect()
}

/// The 32-bit FNV-1a hash.
struct Fnv32a(u32);

impl Fnv32a {
    fn new() -> Fnv32a {
        Fnv32a(0x811c_9dc5)
    }

    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 ^= u32::from(*b);
            self.0 = self.0.wrapping_mul(0x0100_0193);
        }
    }

    fn sum(&self) -> u32 {
        self.0
    }
}

fn write_canonical(v: &Value, out: &mut String) {
    match v {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            out.push('{');
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(k.clone()).to_string());
                out.push(':');
                write_canonical(&m[k], out);
            }
            out.push('}');
        }
        Value::Array(a) => {
            out.push('[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(x, out);
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn fnv32a_matches_the_reference_vectors() {
        let mut h = Fnv32a::new();
        h.write(b"");
        assert_eq!(h.sum(), 0x811c_9dc5);
        let mut h = Fnv32a::new();
        h.write(b"a");
        assert_eq!(h.sum(), 0xe40c_292c);
        let mut h = Fnv32a::new();
        h.write(b"foobar");
        assert_eq!(h.sum(), 0xbf9c_f968);
    }

    #[test]
    fn hash_is_stable_and_sensitive_to_template_and_collisions() {
        let a = json!({"metadata": {"labels": {"app": "web", "tier": "x"}}, "spec": {"containers": [{"name": "a", "image": "nginx"}]}});
        let b = json!({"spec": {"containers": [{"image": "nginx", "name": "a"}]}, "metadata": {"labels": {"tier": "x", "app": "web"}}});
        assert_eq!(compute_hash(&a, None), compute_hash(&b, None));
        let c = json!({"metadata": {"labels": {"app": "web", "tier": "x"}}, "spec": {"containers": [{"name": "a", "image": "nginx:2"}]}});
        assert_ne!(compute_hash(&a, None), compute_hash(&c, None));
        assert_ne!(compute_hash(&a, None), compute_hash(&a, Some(1)));
        let h = compute_hash(&a, None);
        assert!(h.bytes().all(|b| ALPHANUMS.contains(&b)), "{h}");
        assert!((1..=10).contains(&h.len()), "{h}");
    }

    #[test]
    fn safe_encode_maps_digits_like_kubernetes() {
        // '0' is byte 48, 48 % 27 = 21 -> '4'; '1' is 49 -> 22 -> '5'.
        assert_eq!(safe_encode("01"), "45");
    }
}
