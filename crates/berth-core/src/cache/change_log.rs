//! Which node slots changed, in order, for caches derived from the nodes.
//!
//! The per-domain counts ([`super::domain_counts`]) re-read a node only when its
//! [`crate::model::node::NodeInfo::generation`] moved. Finding those nodes by comparing
//! every node's stamp was itself O(cluster) per cycle: at 5,000 nodes, an eighth of a
//! TopologySpreading cycle. The cluster now notes each slot it hands out for change, and a
//! cache remembers how far along the log it has read; a cache that fell behind what the
//! log still holds (or never read it) walks every slot once, as before. The log only says
//! where to look: the generation comparison still decides, so a slot noted twice, or noted
//! and then left unchanged, costs one comparison.

use crate::model::node::NodeIdx;

/// Kept entries beyond this many per node slot are dropped (readers behind walk all).
const ENTRIES_PER_SLOT: usize = 4;
/// ...but never fewer than this many.
const MIN_ENTRIES: usize = 4096;

/// An append-only record of changed node slots, trimmed from the front as a whole.
#[derive(Debug, Clone, Default)]
pub struct ChangeLog {
    /// How many entries were dropped before `slots[0]`.
    base: u64,
    slots: Vec<NodeIdx>,
}

impl ChangeLog {
    /// Notes that `idx` may have changed. `node_slots` (the cluster's slot count) bounds
    /// the log: once it holds [`ENTRIES_PER_SLOT`] entries per slot, it starts over.
    pub fn record(&mut self, idx: NodeIdx, node_slots: usize) {
        if self.slots.len() >= MIN_ENTRIES.max(node_slots.saturating_mul(ENTRIES_PER_SLOT)) {
            self.base += self.slots.len() as u64;
            self.slots.clear();
        }
        self.slots.push(idx);
    }

    /// The position after the last entry: what a reader that is up to date has read.
    pub fn end(&self) -> u64 {
        self.base + self.slots.len() as u64
    }

    /// The slots noted since position `cursor`, or `None` when some of them were dropped
    /// (the reader must look at every slot).
    pub fn since(&self, cursor: u64) -> Option<&[NodeIdx]> {
        let from = usize::try_from(cursor.checked_sub(self.base)?).ok()?;
        self.slots.get(from..)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reader_sees_what_was_noted_since_its_cursor() {
        let mut log = ChangeLog::default();
        assert_eq!(log.since(0), Some(&[][..]));
        log.record(NodeIdx(3), 10);
        let cursor = log.end();
        log.record(NodeIdx(5), 10);
        log.record(NodeIdx(3), 10);
        assert_eq!(log.since(cursor), Some(&[NodeIdx(5), NodeIdx(3)][..]));
        assert_eq!(log.since(log.end()), Some(&[][..]));
    }

    #[test]
    fn a_reader_behind_a_trim_must_walk_everything() {
        let mut log = ChangeLog::default();
        log.record(NodeIdx(0), 1);
        let behind = log.end();
        for _ in 0..MIN_ENTRIES {
            log.record(NodeIdx(1), 1);
        }
        // The log started over: entries after `behind` were dropped.
        assert_eq!(log.since(behind), None);
        assert_eq!(log.since(0), None);
        let now = log.end();
        log.record(NodeIdx(2), 1);
        assert_eq!(log.since(now), Some(&[NodeIdx(2)][..]));
    }
}
