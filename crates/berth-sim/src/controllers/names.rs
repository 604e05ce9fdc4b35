//! Names the controllers give: the `pod-template-hash` of a template and the random-looking
//! suffixes of generated names, both deterministic so that runs are byte-identical.

use serde::Serialize;

/// The alphabet of `k8s.io/apimachinery/pkg/util/rand` (no vowels, no look-alikes): what
/// `generateName` suffixes and `SafeEncodeString` use.
pub const ALPHANUMS: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

/// Length of the API server's `generateName` suffix.
pub const SUFFIX_LEN: usize = 5;

/// `rand.SafeEncodeString`: each byte mapped into [`ALPHANUMS`].
pub fn safe_encode(s: &str) -> String {
    s.bytes()
        .map(|b| ALPHANUMS[usize::from(b) % ALPHANUMS.len()] as char)
        .collect()
}

/// FNV-1a, 32 bits (`hash/fnv.New32a`).
pub fn fnv32a(data: &[u8]) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for b in data {
        h ^= u32::from(*b);
        h = h.wrapping_mul(0x0100_0193);
    }
    h
}

/// The `pod-template-hash` of a template, as kube's `controller.ComputeHash` shapes it:
/// FNV-32a over the template, then the collision count's bytes, printed in decimal and
/// passed through [`safe_encode`]. kube hashes Go's `spew` dump of the struct, which a Rust
/// program cannot reproduce; this hashes the template's canonical JSON (keys sorted)
/// instead, so the value differs from a real cluster's but is just as stable.
pub fn template_hash<T: Serialize>(template: &T, collision_count: Option<i32>) -> String {
    let mut data =
        serde_json::to_vec(&serde_json::to_value(template).unwrap_or_default()).unwrap_or_default();
    if let Some(c) = collision_count {
        data.extend_from_slice(&c.to_le_bytes());
    }
    safe_encode(&fnv32a(&data).to_string())
}

/// The `n`th candidate `generateName` suffix for names made under `owner_uid`: five
/// characters of [`ALPHANUMS`] drawn from a hash of both. The caller skips candidates that
/// are taken, as a client retries an `AlreadyExists`.
pub fn suffix(owner_uid: &str, n: u64) -> String {
    let mut h = xxhash_rust::xxh64::xxh64(owner_uid.as_bytes(), n);
    let mut out = String::with_capacity(SUFFIX_LEN);
    for _ in 0..SUFFIX_LEN {
        out.push(ALPHANUMS[(h % ALPHANUMS.len() as u64) as usize] as char);
        h /= ALPHANUMS.len() as u64;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv_and_safe_encoding_match_go() {
        // hash/fnv: New32a().Sum32() of "" and of "a".
        assert_eq!(fnv32a(b""), 0x811c_9dc5);
        assert_eq!(fnv32a(b"a"), 0xe40c_292c);
        // rand.SafeEncodeString("0123") maps each byte by its value mod 27.
        assert_eq!(safe_encode("0123"), "4567");
    }

    #[test]
    fn suffixes_are_stable_and_of_the_alphabet() {
        let a = suffix("uid-1", 0);
        assert_eq!(a, suffix("uid-1", 0));
        assert_ne!(a, suffix("uid-1", 1));
        assert_eq!(a.len(), SUFFIX_LEN);
        assert!(a.bytes().all(|b| ALPHANUMS.contains(&b)));
    }
}
