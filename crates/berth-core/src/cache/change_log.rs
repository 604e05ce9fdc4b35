//! Which node slots changed, in order, for caches derived from the nodes.
//!
//! The per-domain counts ([`super::domain_counts`]) and InterPodAffinity's remembered
//! answers ([`super::affinity_counts`]) re-read a node only when its
//! [`crate::model::node::NodeInfo::generation`] moved. Finding those nodes by comparing
//! every node's stamp was itself O(cluster) per cycle: at 5,000 nodes, an eighth of a
//! TopologySpreading cycle and a fifth of a PodAffinity one. The cluster now notes each slot it hands out for change, and a
//! cache remembers how far along the log it has read; a cache that fell behind what the
//! log still holds (or never read it) walks every slot once, as before. The log only says
//! where to look: the generation comparison still decides, so a slot noted twice, or noted
//! and then left unchanged, costs one comparison.

use crate::model::node::NodeIdx;

/// At most this many entries are kept (64 KiB); the older half goes when it is reached (a
/// reader last up to date before the entries kept walks every slot once).
pub(crate) const MAX_LOG: usize = 1 << 14;

/// The node slots that may have changed, in order of change: every path of the cluster that
/// hands out a node mutably, adds, replaces or deletes one, or places or removes a pod notes
/// its slot. A slot may be noted without a change, never changed unnoted.
#[derive(Debug, Clone, Default)]
pub struct ChangeLog {
    /// The position of `slots[0]` since the log began.
    start: u64,
    slots: Vec<NodeIdx>,
}

impl ChangeLog {
    /// Notes that the node in slot `idx` may change. The log takes its whole bound at once:
    /// a cycle that notes a slot then never reallocates, so how many allocations a cycle
    /// makes does not depend on how long the log happens to be
    /// (`tests/cycle_allocations.rs`).
    pub fn record(&mut self, idx: NodeIdx) {
        if self.slots.len() >= MAX_LOG {
            let dropped = MAX_LOG / 2;
            self.slots.drain(..dropped);
            self.start += dropped as u64;
        } else if self.slots.len() == self.slots.capacity() {
            self.slots.reserve_exact(MAX_LOG - self.slots.len());
        }
        self.slots.push(idx);
    }

    /// The position after the last entry: what a reader that is up to date has read.
    pub fn end(&self) -> u64 {
        self.start + self.slots.len() as u64
    }

    /// The slots noted from position `pos` on, or `None` when some of them were dropped
    /// (the reader must look at every slot).
    pub fn since(&self, pos: u64) -> Option<&[NodeIdx]> {
        let from = usize::try_from(pos.checked_sub(self.start)?).ok()?;
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
        log.record(NodeIdx(3));
        let cursor = log.end();
        log.record(NodeIdx(5));
        log.record(NodeIdx(3));
        assert_eq!(log.since(cursor), Some(&[NodeIdx(5), NodeIdx(3)][..]));
        assert_eq!(log.since(log.end()), Some(&[][..]));
    }

    #[test]
    fn a_reader_behind_a_trim_must_walk_everything() {
        let mut log = ChangeLog::default();
        log.record(NodeIdx(0));
        let behind = log.end();
        for _ in 0..MAX_LOG {
            log.record(NodeIdx(1));
        }
        // The older half was dropped, `behind`'s entries with it.
        assert_eq!(log.since(behind), None);
        assert_eq!(log.since(0), None);
        let kept = log.end() - (MAX_LOG / 2) as u64;
        assert_eq!(log.since(kept).map(<[_]>::len), Some(MAX_LOG / 2));
        let now = log.end();
        log.record(NodeIdx(2));
        assert_eq!(log.since(now), Some(&[NodeIdx(2)][..]));
    }
}
