//! Hash maps and sets whose iteration order is the same in every run.
//!
//! `std`'s default hasher is randomly keyed per process, so iterating a `HashMap` visits
//! entries in a different order each run; anywhere that order leaks into a decision (which
//! pod is requeued first, which node is resynced first) the simulator's output would stop
//! being byte-identical for identical input. These aliases use a fixed-key hasher instead.
//! Nothing here hashes attacker-chosen keys at a scale where flooding matters.

use std::collections::hash_map::DefaultHasher;
use std::hash::BuildHasherDefault;

/// A deterministic `HashMap`. Build with `HashMap::default()`.
pub type HashMap<K, V> = std::collections::HashMap<K, V, BuildHasherDefault<DefaultHasher>>;
/// A deterministic `HashSet`. Build with `HashSet::default()`.
pub type HashSet<T> = std::collections::HashSet<T, BuildHasherDefault<DefaultHasher>>;

/// A deterministic `HashMap` for keys looked up on per-node paths (a `NodeIdx`, a node
/// name): [`FastHasher`] is a multiply-rotate per word (as rustc's FxHash), a few
/// instructions where SipHash took one to two hundred (two thirds of what 10,000
/// reservations added to a cycle, a seventh of a NUMA cycle). Build with
/// `FastMap::default()`.
pub type FastMap<K, V> = std::collections::HashMap<K, V, BuildHasherDefault<FastHasher>>;

/// FxHash's mixing step over the key's integers: fast, fixed (no per-process key, so
/// iteration order is the same in every run), and fine for keys that are not chosen by
/// an adversary.
#[derive(Debug, Clone, Copy, Default)]
pub struct FastHasher(u64);

impl FastHasher {
    const K: u64 = 0xf135_7aea_2e62_a9c5;

    #[inline]
    fn add(&mut self, word: u64) {
        self.0 = (self.0 ^ word).wrapping_mul(Self::K).rotate_left(26);
    }
}

impl std::hash::Hasher for FastHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let mut w = [0u8; 8];
            w.copy_from_slice(c);
            self.add(u64::from_le_bytes(w));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut w = [0u8; 8];
            w[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(w) ^ ((rest.len() as u64) << 56));
        }
    }
    #[inline]
    fn write_u8(&mut self, n: u8) {
        self.add(u64::from(n));
    }
    #[inline]
    fn write_u32(&mut self, n: u32) {
        self.add(u64::from(n));
    }
    #[inline]
    fn write_u64(&mut self, n: u64) {
        self.add(n);
    }
    #[inline]
    fn write_usize(&mut self, n: usize) {
        self.add(n as u64);
    }
    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::BuildHasher;

    #[test]
    fn idx_hashes_are_fixed_and_spread_consecutive_keys() {
        let b = BuildHasherDefault::<FastHasher>::default();
        let h: Vec<u64> = (0u32..1000).map(|i| b.hash_one(i)).collect();
        assert_eq!(h, (0u32..1000).map(|i| b.hash_one(i)).collect::<Vec<_>>());
        // hashbrown picks buckets with the low bits and tags with the top 7: both must vary.
        let low: HashSet<u64> = h.iter().map(|x| x & 1023).collect();
        let top: HashSet<u64> = h.iter().map(|x| x >> 57).collect();
        assert!(low.len() > 500, "{}", low.len());
        assert!(top.len() >= 64, "{} of 128 tags", top.len());
    }

    #[test]
    fn string_keys_differ_by_any_byte_and_by_length() {
        let b = BuildHasherDefault::<FastHasher>::default();
        let names = [
            "node-00001",
            "node-00002",
            "node-0000",
            "node-00001\0",
            "",
            "a",
            "b",
        ];
        let h: HashSet<u64> = names.iter().map(|n| b.hash_one(n)).collect();
        assert_eq!(h.len(), names.len());
        assert_eq!(
            b.hash_one("node-00001"),
            b.hash_one(String::from("node-00001"))
        );
    }

    #[test]
    fn a_fast_map_finds_what_it_holds() {
        let mut m: FastMap<u32, u32> = FastMap::default();
        for i in 0..10_000u32 {
            m.insert(i * 7, i);
        }
        for i in 0..10_000u32 {
            assert_eq!(m.get(&(i * 7)), Some(&i));
            assert_eq!(m.get(&(i * 7 + 1)), None);
        }
    }
}
