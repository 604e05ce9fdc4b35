//! The unschedulable pool as its own set, indexed by what can help its items.
//!
//! Every bind is a cluster event (`AssignedPodAdd`) and every placed reservation one too;
//! walking the whole queue on each of them made a run O(pending²). The pool keeps its items
//! apart from the active and back-off ones, ordered by arrival (the order requeues happen
//! in, which decides back-off ties), by entry time (for the five-minute flush), and by the
//! event kinds their rejecting plugins registered ([`super::hints::QueueingHints::interest`]), so an
//! event visits only the items it can concern: a bind never touches a pod only
//! NodeResourcesFit rejected, since only freed resources can help that pod.

use std::collections::{BTreeMap, BTreeSet};

use crate::object::ObjectKey;
use crate::time::Time;

use super::hints::kind;

/// Number of [`kind`] bits.
const KINDS: usize = kind::ALL.count_ones() as usize;

/// One item of the pool, as the index needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Slot {
    /// Arrival sequence number: unique per queue entry.
    pub seq: u64,
    /// When it entered the pool.
    pub since: Time,
    /// The [`kind`] bits of the events that may help it.
    pub interest: u32,
}

/// The unschedulable pool's index (the entries themselves stay in the queue's map).
#[derive(Debug, Clone)]
pub(super) struct UnschedulablePool {
    by_seq: BTreeMap<u64, ObjectKey>,
    by_since: BTreeSet<(Time, u64)>,
    by_kind: [BTreeSet<u64>; KINDS],
}

impl Default for UnschedulablePool {
    fn default() -> Self {
        Self {
            by_seq: BTreeMap::new(),
            by_since: BTreeSet::new(),
            by_kind: std::array::from_fn(|_| BTreeSet::new()),
        }
    }
}

impl UnschedulablePool {
    /// Adds an item that just became unschedulable.
    pub fn insert(&mut self, key: &ObjectKey, slot: Slot) {
        self.by_seq.insert(slot.seq, key.clone());
        self.by_since.insert((slot.since, slot.seq));
        for (bit, set) in self.by_kind.iter_mut().enumerate() {
            if slot.interest & (1 << bit) != 0 {
                set.insert(slot.seq);
            }
        }
    }

    /// Removes an item that left the pool (requeued, deleted, refreshed).
    pub fn remove(&mut self, slot: Slot) {
        self.by_seq.remove(&slot.seq);
        self.by_since.remove(&(slot.since, slot.seq));
        for (bit, set) in self.by_kind.iter_mut().enumerate() {
            if slot.interest & (1 << bit) != 0 {
                set.remove(&slot.seq);
            }
        }
    }

    /// The items an event of `kinds` may concern, in arrival order.
    pub fn concerned(&self, kinds: u32) -> Vec<(u64, ObjectKey)> {
        let bits: Vec<&BTreeSet<u64>> = self
            .by_kind
            .iter()
            .enumerate()
            .filter(|(bit, _)| kinds & (1 << bit) != 0)
            .map(|(_, set)| set)
            .collect();
        let seqs: Vec<u64> = match bits.as_slice() {
            [] => return Vec::new(),
            [one] => one.iter().copied().collect(),
            many => {
                let mut v: Vec<u64> = many.iter().flat_map(|s| s.iter().copied()).collect();
                v.sort_unstable();
                v.dedup();
                v
            }
        };
        seqs.into_iter()
            .filter_map(|s| self.by_seq.get(&s).map(|k| (s, k.clone())))
            .collect()
    }

    /// Every item, in arrival order.
    pub fn all(&self) -> Vec<(u64, ObjectKey)> {
        self.by_seq.iter().map(|(s, k)| (*s, k.clone())).collect()
    }

    /// The items that entered the pool at or before `at`, in arrival order.
    pub fn since_at_most(&self, at: Time) -> Vec<(u64, ObjectKey)> {
        let mut seqs: Vec<u64> = self
            .by_since
            .iter()
            .take_while(|(since, _)| *since <= at)
            .map(|(_, s)| *s)
            .collect();
        seqs.sort_unstable();
        seqs.into_iter()
            .filter_map(|s| self.by_seq.get(&s).map(|k| (s, k.clone())))
            .collect()
    }

    /// The earliest entry time in the pool.
    pub fn earliest(&self) -> Option<Time> {
        self.by_since.first().map(|(t, _)| *t)
    }

    /// The keys in the pool, in arrival order.
    pub fn keys(&self) -> impl Iterator<Item = &ObjectKey> + '_ {
        self.by_seq.values()
    }
}
