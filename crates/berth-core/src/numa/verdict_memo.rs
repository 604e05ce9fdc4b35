//! Per node, the Filter verdict and Score a pod *shape* got there, kept until the node's
//! cache entry changes.
//!
//! Why: a burst schedules many pods of few shapes (the same requests) over nodes whose
//! cached data changes only when a pod is reserved there, an NRT is applied or a resync
//! flushes. Between such changes every pod of a shape gets the same answer on a node, and
//! working it out again reads the node's zone data (several cache lines per node, a miss
//! each on a large cluster) and divides per zone, for every node of every cycle. The
//! remembered answer is one word of a 64-byte line per node.
//!
//! Exactness is the cache's job ([`super::reserve_cache`]): it forgets a node's line on
//! every mutable access to the node's entry but the rejection-streak bookkeeping, which no
//! verdict or score reads, so a remembered answer never outlives the data it came from.
//! Shapes are interned ([`Shapes`]): a [`ShapeId`] stands for one exact (scoring strategy,
//! request) pair for the cache's whole life, never reused. A request that names a resource
//! beyond cpu, memory, pods and ephemeral-storage gets no shape: its Filter verdict also
//! depends on the node's allocatable, which the cache does not see change.
//!
//! Filter and Score get the cluster by shared reference, so the lines are relaxed atomics
//! (the cache stays `Sync`, and on x86-64 a relaxed load or store is a plain move). Each
//! answer is written as one whole word for the current entry, so even a racing writer
//! could only store an answer that is right, or lose one.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::collections::FastMap;

use super::score::ScoringStrategy;
use super::types::{is_always_allocatable, PodNumaRequest};
use super::verdict::FilterVerdict;

/// An interned (scoring strategy, pod request) pair ([`Shapes::intern`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ShapeId(u32);

/// Most shapes interned: a bound on the table for a workload of ever-new requests (later
/// shapes are simply not remembered).
pub const MAX_SHAPES: u32 = 4096;

/// Answers per node line: a shape's answers live in way `id % WAYS` (a shape whose way
/// another took is recomputed, never confused: the word carries the id).
const WAYS: usize = 8;

/// The interned shapes, by strategy (few: one per profile at most) then request.
#[derive(Debug, Clone, Default)]
pub struct Shapes {
    by_strategy: Vec<(ScoringStrategy, FastMap<PodNumaRequest, u32>)>,
    count: u32,
}

impl Shapes {
    /// The shape of `request` scored with `strategy`, if it was interned.
    pub fn get(&self, strategy: &ScoringStrategy, request: &PodNumaRequest) -> Option<ShapeId> {
        let (_, ids) = self.by_strategy.iter().find(|(s, _)| s == strategy)?;
        ids.get(request).map(|&id| ShapeId(id))
    }

    /// Interns the shape (a new id unless it has one); `None` when the request cannot be
    /// remembered (see the module documentation) or the table is full.
    pub fn intern(
        &mut self,
        strategy: &ScoringStrategy,
        request: &PodNumaRequest,
    ) -> Option<ShapeId> {
        if let Some(id) = self.get(strategy, request) {
            return Some(id);
        }
        if self.count >= MAX_SHAPES || !memoizable(request) {
            return None;
        }
        let i = match self.by_strategy.iter().position(|(s, _)| s == strategy) {
            Some(i) => i,
            None => {
                self.by_strategy
                    .push((strategy.clone(), FastMap::default()));
                self.by_strategy.len() - 1
            }
        };
        let id = self.count;
        self.by_strategy.get_mut(i)?.1.insert(request.clone(), id);
        self.count += 1;
        Some(ShapeId(id))
    }

    /// Shapes interned.
    pub fn len(&self) -> usize {
        self.count as usize
    }

    /// None interned?
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }
}

/// Whether every resource `request` names is one the Filter never asks the node's
/// allocatable about: then its verdict depends on the cache entry alone.
fn memoizable(request: &PodNumaRequest) -> bool {
    let mut lists = request
        .init_containers()
        .iter()
        .map(|ic| &ic.requests)
        .chain(request.containers())
        .chain([request.overhead(), request.effective()]);
    lists.all(|r| r.iter().all(|(n, _)| is_always_allocatable(n.as_str())))
}

/// One node's answers: `WAYS` words of `shape id + 1` (bits 0-31, 0 for none), Filter
/// verdict code (bits 32-39, 0 for none) and Score + 1 (bits 40-47, 0 for none).
#[derive(Debug, Default)]
#[repr(align(64))]
struct Line([AtomicU64; WAYS]);

const FILTER_SHIFT: u32 = 32;
const SCORE_SHIFT: u32 = 40;
const TAG_MASK: u64 = 0xffff_ffff;

/// The answers of every node, by cache slot.
#[derive(Debug, Default)]
pub struct Lines(Vec<Line>);

impl Clone for Lines {
    fn clone(&self) -> Self {
        Self(
            self.0
                .iter()
                .map(|l| {
                    Line(std::array::from_fn(|w| {
                        AtomicU64::new(l.0[w].load(Ordering::Relaxed))
                    }))
                })
                .collect(),
        )
    }
}

impl Lines {
    /// Makes room for slots below `len`.
    pub fn grow_to(&mut self, len: usize) {
        if self.0.len() < len {
            self.0.resize_with(len, Line::default);
        }
    }

    /// Forgets every answer of `slot`: its entry is about to change.
    #[inline]
    pub fn forget(&mut self, slot: usize) {
        if let Some(line) = self.0.get_mut(slot) {
            for w in &mut line.0 {
                *w.get_mut() = 0;
            }
        }
    }

    /// The word `shape` uses in `slot`'s line, and its tag.
    #[inline]
    fn word(&self, slot: usize, shape: ShapeId) -> Option<(&AtomicU64, u64)> {
        let line = self.0.get(slot)?;
        let word = line.0.get(shape.0 as usize % WAYS)?;
        Some((word, u64::from(shape.0) + 1))
    }

    /// The field at `shift` of `shape`'s word in `slot`, if set.
    #[inline]
    fn field(&self, slot: usize, shape: ShapeId, shift: u32) -> Option<u8> {
        let (word, tag) = self.word(slot, shape)?;
        let w = word.load(Ordering::Relaxed);
        if w & TAG_MASK != tag {
            return None;
        }
        let v = (w >> shift) as u8;
        (v != 0).then_some(v)
    }

    /// Sets the field at `shift` of `shape`'s word in `slot` to `value` (non-zero), keeping
    /// the word's other field if the word is `shape`'s, else starting it afresh.
    #[inline]
    fn set_field(&self, slot: usize, shape: ShapeId, shift: u32, value: u8) {
        let Some((word, tag)) = self.word(slot, shape) else {
            return;
        };
        let w = word.load(Ordering::Relaxed);
        let kept = if w & TAG_MASK == tag {
            w & !(0xff << shift)
        } else {
            tag
        };
        word.store(kept | (u64::from(value) << shift), Ordering::Relaxed);
    }

    /// The remembered Filter verdict of `shape` on `slot`.
    #[inline]
    pub fn filter(&self, slot: usize, shape: ShapeId) -> Option<FilterVerdict> {
        FilterVerdict::from_code(self.field(slot, shape, FILTER_SHIFT)?)
    }

    /// Remembers the Filter verdict of `shape` on `slot`.
    #[inline]
    pub fn put_filter(&self, slot: usize, shape: ShapeId, verdict: FilterVerdict) {
        self.set_field(slot, shape, FILTER_SHIFT, verdict.code());
    }

    /// The remembered Score of `shape` on `slot`.
    #[inline]
    pub fn score(&self, slot: usize, shape: ShapeId) -> Option<i64> {
        self.field(slot, shape, SCORE_SHIFT)
            .map(|v| i64::from(v) - 1)
    }

    /// Remembers the Score of `shape` on `slot` (a score outside `0..=254` is not kept).
    #[inline]
    pub fn put_score(&self, slot: usize, shape: ShapeId, score: i64) {
        if let Some(v) = u8::try_from(score).ok().and_then(|s| s.checked_add(1)) {
            self.set_field(slot, shape, SCORE_SHIFT, v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::numa::reject_kind::RejectKind;
    use crate::numa::score::ScoringStrategyType;
    use crate::numa::types::{QosClass, Resources};
    use crate::numa::verdict::StaleReason;

    fn req(pairs: &[(&str, &str)]) -> PodNumaRequest {
        PodNumaRequest::single(
            QosClass::Guaranteed,
            Resources::parse(pairs.iter().copied()).expect("valid"),
        )
    }

    fn shape(id: u32) -> ShapeId {
        ShapeId(id)
    }

    #[test]
    fn equal_requests_share_a_shape_and_different_ones_or_strategies_do_not() {
        let mut s = Shapes::default();
        let least = ScoringStrategy::default();
        let most = ScoringStrategy::new(ScoringStrategyType::MostAllocated);
        let a = req(&[("cpu", "2"), ("memory", "1Gi")]);
        let b = req(&[("cpu", "3"), ("memory", "1Gi")]);
        assert_eq!(s.get(&least, &a), None);
        let ia = s.intern(&least, &a).expect("interned");
        assert_eq!(s.intern(&least, &a.clone()), Some(ia));
        assert_eq!(s.get(&least, &a), Some(ia));
        let ib = s.intern(&least, &b).expect("interned");
        let ia_most = s.intern(&most, &a).expect("interned");
        assert_ne!(ia, ib);
        assert_ne!(ia, ia_most);
        assert_ne!(ib, ia_most);
        assert_eq!(s.len(), 3);
    }

    #[test]
    fn requests_the_allocatable_decides_get_no_shape() {
        let mut s = Shapes::default();
        let st = ScoringStrategy::default();
        assert_eq!(
            s.intern(&st, &req(&[("cpu", "1"), ("vendor/nic", "1")])),
            None
        );
        assert_eq!(s.intern(&st, &req(&[("hugepages-1Gi", "1Gi")])), None);
        let overhead = PodNumaRequest::new(
            QosClass::Guaranteed,
            [],
            [Resources::parse([("cpu", "1")]).expect("valid")],
            Resources::parse([("vendor/x", "1")]).expect("valid"),
        );
        assert_eq!(s.intern(&st, &overhead), None);
        assert!(s.is_empty());
    }

    #[test]
    fn the_table_stops_at_its_bound() {
        let mut s = Shapes::default();
        let st = ScoringStrategy::default();
        for i in 0..MAX_SHAPES {
            let r = req(&[("cpu", &format!("{}m", i + 1))]);
            assert!(s.intern(&st, &r).is_some());
        }
        let r = req(&[("cpu", &format!("{}m", MAX_SHAPES + 1))]);
        assert_eq!(s.intern(&st, &r), None);
        // Known shapes still answer.
        assert!(s.intern(&st, &req(&[("cpu", "1m")])).is_some());
    }

    #[test]
    fn lines_keep_each_shapes_answers_apart_and_forget_them() {
        let mut l = Lines::default();
        l.grow_to(2);
        let reject = FilterVerdict::Reject {
            kind: RejectKind::Container,
            stale: Some(StaleReason::ResyncPending),
        };
        assert_eq!(l.filter(0, shape(1)), None);
        l.put_filter(0, shape(1), reject);
        l.put_score(0, shape(1), 0);
        assert_eq!(l.filter(0, shape(1)), Some(reject));
        assert_eq!(l.score(0, shape(1)), Some(0));
        // Another slot, another shape in the same way: nothing.
        assert_eq!(l.filter(1, shape(1)), None);
        assert_eq!(l.filter(0, shape(1 + WAYS as u32)), None);
        assert_eq!(l.score(0, shape(1 + WAYS as u32)), None);
        // The shape that takes the way replaces the answers, the first is then unknown.
        l.put_score(0, shape(1 + WAYS as u32), 100);
        assert_eq!(l.score(0, shape(1 + WAYS as u32)), Some(100));
        assert_eq!(l.filter(0, shape(1 + WAYS as u32)), None);
        assert_eq!(l.filter(0, shape(1)), None);
        // Score then filter keeps both.
        l.put_score(0, shape(2), 57);
        l.put_filter(0, shape(2), FilterVerdict::Pass);
        assert_eq!(l.score(0, shape(2)), Some(57));
        assert_eq!(l.filter(0, shape(2)), Some(FilterVerdict::Pass));
        let copy = l.clone();
        l.forget(0);
        assert_eq!(l.score(0, shape(2)), None);
        assert_eq!(l.filter(0, shape(2)), None);
        assert_eq!(copy.score(0, shape(2)), Some(57));
        // Out of range: nothing kept, nothing answered; scores past a byte are not kept.
        l.put_filter(9, shape(0), FilterVerdict::Pass);
        assert_eq!(l.filter(9, shape(0)), None);
        l.put_score(1, shape(0), 255);
        l.put_score(1, shape(3), -1);
        assert_eq!(l.score(1, shape(0)), None);
        assert_eq!(l.score(1, shape(3)), None);
        l.put_score(1, shape(0), 254);
        assert_eq!(l.score(1, shape(0)), Some(254));
    }
}
