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
