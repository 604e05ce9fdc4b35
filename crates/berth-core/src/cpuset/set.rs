//! [`CpuSet`]: a set of logical CPU ids, held as an inline bitset so that the exclusive-CPU
//! path of a scheduling cycle (Filter and Score of an `LSE`/`LSR` pod on every node) can
//! copy, intersect and subtract sets without touching the heap.
//!
//! Ids below [`INLINE_CPUS`] live in a fixed array of 64-bit words (128 bytes); real nodes
//! fit (the largest x86-64 machines today have 768 logical CPUs). A set that is given a
//! larger id, which only an unusual or hostile `node.koordinator.sh/cpu-topology` or
//! `resource-status` names (ids are any `u32`), spills to a `BTreeSet<u32>`: every
//! operation stays exact, it only allocates again. Nothing panics on any id.

use std::collections::{btree_set, BTreeSet};
use std::fmt;

/// CPU ids below this are held inline; a set holding a larger one spills to the heap.
pub const INLINE_CPUS: u32 = 1_024;

const WORDS: usize = (INLINE_CPUS / 64) as usize;

type Words = [u64; WORDS];

/// A set of logical CPU ids, iterated in ascending order.
#[derive(Clone)]
pub struct CpuSet(Repr);

#[derive(Clone)]
enum Repr {
    /// Every id is below [`INLINE_CPUS`]: bit `id % 64` of word `id / 64`.
    Inline(Words),
    /// Some id is at or above [`INLINE_CPUS`] (or was: a spilled set stays spilled).
    Spilled(BTreeSet<u32>),
}

/// The word and bit of an inline id.
fn slot(id: u32) -> (usize, u64) {
    ((id / 64) as usize, 1u64 << (id % 64))
}

impl Default for CpuSet {
    fn default() -> Self {
        Self::new()
    }
}

impl CpuSet {
    /// The empty set.
    pub const fn new() -> Self {
        Self(Repr::Inline([0; WORDS]))
    }

    /// Whether the set holds every id in a fixed array (no heap behind it).
    pub fn is_inline(&self) -> bool {
        matches!(self.0, Repr::Inline(_))
    }

    /// Number of CPUs.
    pub fn len(&self) -> usize {
        match &self.0 {
            Repr::Inline(w) => w.iter().map(|w| w.count_ones() as usize).sum(),
            Repr::Spilled(s) => s.len(),
        }
    }

    /// Whether there is no CPU.
    pub fn is_empty(&self) -> bool {
        match &self.0 {
            Repr::Inline(w) => w.iter().all(|w| *w == 0),
            Repr::Spilled(s) => s.is_empty(),
        }
    }

    /// Whether `id` is in the set.
    pub fn contains(&self, id: u32) -> bool {
        match &self.0 {
            Repr::Inline(w) => {
                id < INLINE_CPUS && {
                    let (i, bit) = slot(id);
                    w[i] & bit != 0
                }
            }
            Repr::Spilled(s) => s.contains(&id),
        }
    }

    /// Adds `id`; returns whether it was new.
    pub fn insert(&mut self, id: u32) -> bool {
        if let Repr::Inline(w) = &mut self.0 {
            if id < INLINE_CPUS {
                let (i, bit) = slot(id);
                let new = w[i] & bit == 0;
                w[i] |= bit;
                return new;
            }
            self.0 = Repr::Spilled(Iter::of_words(w).collect());
        }
        match &mut self.0 {
            Repr::Spilled(s) => s.insert(id),
            Repr::Inline(_) => false,
        }
    }

    /// Removes `id`; returns whether it was there.
    pub fn remove(&mut self, id: u32) -> bool {
        match &mut self.0 {
            Repr::Inline(w) => {
                if id >= INLINE_CPUS {
                    return false;
                }
                let (i, bit) = slot(id);
                let was = w[i] & bit != 0;
                w[i] &= !bit;
                was
            }
            Repr::Spilled(s) => s.remove(&id),
        }
    }

    /// The smallest id.
    pub fn first(&self) -> Option<u32> {
        self.iter().next()
    }

    /// The ids, ascending.
    pub fn iter(&self) -> Iter<'_> {
        match &self.0 {
            Repr::Inline(w) => Iter::of_words(w),
            Repr::Spilled(s) => Iter(IterRepr::Spilled(s.iter())),
        }
    }

    /// The ids in `self` or `other`.
    pub fn union(&self, other: &CpuSet) -> CpuSet {
        let mut out = self.clone();
        out.union_with(other);
        out
    }

    /// The ids in `self` and not in `other`.
    pub fn difference(&self, other: &CpuSet) -> CpuSet {
        let mut out = self.clone();
        out.difference_with(other);
        out
    }

    /// The ids in both `self` and `other`. Inline when either is.
    pub fn intersection(&self, other: &CpuSet) -> CpuSet {
        match (&self.0, &other.0) {
            (Repr::Inline(_), _) => {
                let mut out = self.clone();
                out.intersect_with(other);
                out
            }
            _ => {
                let mut out = other.clone();
                out.intersect_with(self);
                out
            }
        }
    }

    /// Adds every id of `other`.
    pub fn union_with(&mut self, other: &CpuSet) {
        match (&mut self.0, &other.0) {
            (Repr::Inline(a), Repr::Inline(b)) => a.iter_mut().zip(b).for_each(|(a, b)| *a |= b),
            (Repr::Spilled(a), Repr::Inline(_)) => a.extend(other.iter()),
            _ => self.extend(other.iter()),
        }
    }

    /// Removes every id of `other`.
    pub fn difference_with(&mut self, other: &CpuSet) {
        match (&mut self.0, &other.0) {
            (Repr::Inline(a), Repr::Inline(b)) => a.iter_mut().zip(b).for_each(|(a, b)| *a &= !b),
            (Repr::Inline(a), Repr::Spilled(b)) => {
                for id in b.range(..INLINE_CPUS) {
                    let (i, bit) = slot(*id);
                    a[i] &= !bit;
                }
            }
            (Repr::Spilled(a), _) => a.retain(|id| !other.contains(*id)),
        }
    }

    /// Keeps only the ids also in `other`.
    pub fn intersect_with(&mut self, other: &CpuSet) {
        match (&mut self.0, &other.0) {
            (Repr::Inline(a), Repr::Inline(b)) => a.iter_mut().zip(b).for_each(|(a, b)| *a &= b),
            (Repr::Inline(a), Repr::Spilled(_)) => {
                let mut kept = [0; WORDS];
                for id in Iter::of_words(a).filter(|id| other.contains(*id)) {
                    let (i, bit) = slot(id);
                    kept[i] |= bit;
                }
                *a = kept;
            }
            (Repr::Spilled(a), _) => a.retain(|id| other.contains(*id)),
        }
    }

    /// How many ids `self` and `other` share, without building the intersection.
    pub fn intersection_len(&self, other: &CpuSet) -> usize {
        match (&self.0, &other.0) {
            (Repr::Inline(a), Repr::Inline(b)) => a
                .iter()
                .zip(b)
                .map(|(a, b)| (a & b).count_ones() as usize)
                .sum(),
            _ => self.iter().filter(|id| other.contains(*id)).count(),
        }
    }

    /// Whether every id of `self` is in `other`.
    pub fn is_subset(&self, other: &CpuSet) -> bool {
        match (&self.0, &other.0) {
            (Repr::Inline(a), Repr::Inline(b)) => a.iter().zip(b).all(|(a, b)| a & !b == 0),
            _ => self.iter().all(|id| other.contains(id)),
        }
    }

    /// Whether `self` and `other` share no id.
    pub fn is_disjoint(&self, other: &CpuSet) -> bool {
        self.intersection_len(other) == 0
    }
}

impl PartialEq for CpuSet {
    fn eq(&self, other: &Self) -> bool {
        match (&self.0, &other.0) {
            (Repr::Inline(a), Repr::Inline(b)) => a == b,
            _ => self.iter().eq(other.iter()),
        }
    }
}

impl Eq for CpuSet {}

impl PartialEq<BTreeSet<u32>> for CpuSet {
    fn eq(&self, other: &BTreeSet<u32>) -> bool {
        self.iter().eq(other.iter().copied())
    }
}

impl fmt::Debug for CpuSet {
    /// As a `BTreeSet<u32>` prints: `{0, 1, 8}`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.iter()).finish()
    }
}

impl fmt::Display for CpuSet {
    /// The Linux CPU list (`0-3,8`), exactly as
    /// [`format_cpu_list`](berth_api::annotations::format_cpu_list) writes it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&berth_api::annotations::format_cpu_ids(self.iter()))
    }
}

impl Extend<u32> for CpuSet {
    fn extend<I: IntoIterator<Item = u32>>(&mut self, iter: I) {
        for id in iter {
            self.insert(id);
        }
    }
}

impl FromIterator<u32> for CpuSet {
    fn from_iter<I: IntoIterator<Item = u32>>(iter: I) -> Self {
        let mut out = Self::new();
        out.extend(iter);
        out
    }
}

impl From<BTreeSet<u32>> for CpuSet {
    fn from(set: BTreeSet<u32>) -> Self {
        set.into_iter().collect()
    }
}

impl<const N: usize> From<[u32; N]> for CpuSet {
    fn from(ids: [u32; N]) -> Self {
        ids.into_iter().collect()
    }
}

impl From<&CpuSet> for BTreeSet<u32> {
    fn from(set: &CpuSet) -> Self {
        set.iter().collect()
    }
}

impl<'a> IntoIterator for &'a CpuSet {
    type Item = u32;
    type IntoIter = Iter<'a>;
    fn into_iter(self) -> Iter<'a> {
        self.iter()
    }
}

impl IntoIterator for CpuSet {
    type Item = u32;
    type IntoIter = IntoIter;
    fn into_iter(self) -> IntoIter {
        match self.0 {
            Repr::Inline(words) => IntoIter(IntoIterRepr::Inline {
                current: words[0],
                words,
                index: 0,
            }),
            Repr::Spilled(s) => IntoIter(IntoIterRepr::Spilled(s.into_iter())),
        }
    }
}

/// The ids of a [`CpuSet`], ascending.
#[derive(Clone)]
pub struct Iter<'a>(IterRepr<'a>);

#[derive(Clone)]
enum IterRepr<'a> {
    Inline {
        words: &'a Words,
        index: usize,
        current: u64,
    },
    Spilled(btree_set::Iter<'a, u32>),
}

impl<'a> Iter<'a> {
    fn of_words(words: &'a Words) -> Self {
        Iter(IterRepr::Inline {
            words,
            index: 0,
            current: words[0],
        })
    }
}

/// The next set bit of `words` at or after (`index`, `current`), advancing both.
fn next_bit(words: &Words, index: &mut usize, current: &mut u64) -> Option<u32> {
    loop {
        if *current != 0 {
            let bit = current.trailing_zeros();
            *current &= *current - 1;
            return Some(*index as u32 * 64 + bit);
        }
        *index += 1;
        *current = *words.get(*index)?;
    }
}

impl Iterator for Iter<'_> {
    type Item = u32;
    fn next(&mut self) -> Option<u32> {
        match &mut self.0 {
            IterRepr::Inline {
                words,
                index,
                current,
            } => next_bit(words, index, current),
            IterRepr::Spilled(s) => s.next().copied(),
        }
    }
}

/// The ids of an owned [`CpuSet`], ascending.
pub struct IntoIter(IntoIterRepr);

enum IntoIterRepr {
    Inline {
        words: Words,
        index: usize,
        current: u64,
    },
    Spilled(btree_set::IntoIter<u32>),
}

impl Iterator for IntoIter {
    type Item = u32;
    fn next(&mut self) -> Option<u32> {
        match &mut self.0 {
            IntoIterRepr::Inline {
                words,
                index,
                current,
            } => next_bit(words, index, current),
            IntoIterRepr::Spilled(s) => s.next(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn ids_past_the_inline_words_spill_and_stay_exact() {
        let mut s = CpuSet::from([0, 63, 64, 1_023]);
        assert!(s.is_inline());
        assert_eq!(s.iter().collect::<Vec<_>>(), [0, 63, 64, 1_023]);
        assert!(s.insert(1_024));
        assert!(s.insert(u32::MAX));
        assert!(!s.is_inline());
        assert_eq!(s.len(), 6);
        assert!(s.contains(u32::MAX) && s.contains(63) && !s.contains(62));
        assert_eq!(s.to_string(), "0,63-64,1023-1024,4294967295");
        // A spilled set equals an inline one with the same ids.
        assert!(s.remove(1_024) && s.remove(u32::MAX));
        assert_eq!(s, CpuSet::from([0, 63, 64, 1_023]));
        // An inline set never holds a large id, and removing one is a no-op.
        let mut small = CpuSet::from([5]);
        assert!(!small.remove(u32::MAX) && !small.contains(1_024));
        assert_eq!(format!("{small:?}"), "{5}");
        assert_eq!(CpuSet::new().to_string(), "");
    }

    /// One operation of the model test.
    #[derive(Debug, Clone)]
    enum Op {
        Insert(u32),
        Remove(u32),
        Union(Vec<u32>),
        Difference(Vec<u32>),
        Intersection(Vec<u32>),
        UnionWith(Vec<u32>),
        DifferenceWith(Vec<u32>),
        IntersectWith(Vec<u32>),
    }

    /// Ids mostly inline, sometimes just past the words, sometimes anywhere in `u32`.
    fn id() -> impl Strategy<Value = u32> {
        prop_oneof![
            8 => 0u32..INLINE_CPUS,
            1 => INLINE_CPUS - 2..INLINE_CPUS + 2,
            1 => any::<u32>(),
        ]
    }

    fn ids() -> impl Strategy<Value = Vec<u32>> {
        prop_oneof![
            proptest::collection::vec(id(), 0..40),
            proptest::collection::vec(0u32..INLINE_CPUS, 0..200),
        ]
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            id().prop_map(Op::Insert),
            id().prop_map(Op::Remove),
            ids().prop_map(Op::Union),
            ids().prop_map(Op::Difference),
            ids().prop_map(Op::Intersection),
            ids().prop_map(Op::UnionWith),
            ids().prop_map(Op::DifferenceWith),
            ids().prop_map(Op::IntersectWith),
        ]
    }

    /// Everything the set answers, checked against the model.
    fn agrees(s: &CpuSet, m: &BTreeSet<u32>) -> Result<(), TestCaseError> {
        prop_assert_eq!(
            s.iter().collect::<Vec<_>>(),
            m.iter().copied().collect::<Vec<_>>()
        );
        prop_assert_eq!(
            s.clone().into_iter().collect::<Vec<_>>(),
            m.iter().copied().collect::<Vec<_>>()
        );
        prop_assert_eq!(s.len(), m.len());
        prop_assert_eq!(s.is_empty(), m.is_empty());
        prop_assert_eq!(s.first(), m.first().copied());
        prop_assert_eq!(s.to_string(), berth_api::annotations::format_cpu_list(m));
        prop_assert_eq!(format!("{s:?}"), format!("{m:?}"));
        prop_assert!(*s == *m);
        // Built from the model: equal whatever each one's representation.
        let built = CpuSet::from(m.clone());
        prop_assert!(*s == built);
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1_000))]

        /// The bitset agrees with a `BTreeSet<u32>` on every operation, for ids inline,
        /// at the edge of the words and anywhere in `u32`.
        #[test]
        fn cpuset_agrees_with_a_btreeset(
            start in ids(),
            ops in proptest::collection::vec(op(), 0..24),
            probes in proptest::collection::vec(id(), 0..8),
        ) {
            let mut s: CpuSet = start.iter().copied().collect();
            let mut m: BTreeSet<u32> = start.iter().copied().collect();
            agrees(&s, &m)?;
            for op in ops {
                match op {
                    Op::Insert(id) => prop_assert_eq!(s.insert(id), m.insert(id)),
                    Op::Remove(id) => prop_assert_eq!(s.remove(id), m.remove(&id)),
                    Op::Union(o) => {
                        let (os, om): (CpuSet, BTreeSet<u32>) =
                            (o.iter().copied().collect(), o.iter().copied().collect());
                        prop_assert_eq!(s.is_subset(&os), m.is_subset(&om));
                        prop_assert_eq!(s.is_disjoint(&os), m.is_disjoint(&om));
                        prop_assert_eq!(s.intersection_len(&os), m.intersection(&om).count());
                        s = s.union(&os);
                        m = m.union(&om).copied().collect();
                    }
                    Op::Difference(o) => {
                        let (os, om): (CpuSet, BTreeSet<u32>) =
                            (o.iter().copied().collect(), o.iter().copied().collect());
                        agrees(&os.difference(&s), &om.difference(&m).copied().collect())?;
                        s = s.difference(&os);
                        m = m.difference(&om).copied().collect();
                    }
                    Op::Intersection(o) => {
                        let (os, om): (CpuSet, BTreeSet<u32>) =
                            (o.iter().copied().collect(), o.iter().copied().collect());
                        agrees(&os.intersection(&s), &om.intersection(&m).copied().collect())?;
                        s = s.intersection(&os);
                        m = m.intersection(&om).copied().collect();
                    }
                    Op::UnionWith(o) => {
                        s.union_with(&o.iter().copied().collect());
                        m.extend(o);
                    }
                    Op::DifferenceWith(o) => {
                        s.difference_with(&o.iter().copied().collect());
                        for id in o {
                            m.remove(&id);
                        }
                    }
                    Op::IntersectWith(o) => {
                        let om: BTreeSet<u32> = o.iter().copied().collect();
                        s.intersect_with(&o.iter().copied().collect());
                        m.retain(|id| om.contains(id));
                    }
                }
                agrees(&s, &m)?;
            }
            for p in probes {
                prop_assert_eq!(s.contains(p), m.contains(&p));
            }
        }
    }
}
