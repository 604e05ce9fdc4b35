//! How many nodes gave each rejection reason: the histogram a failed cycle renders.
//!
//! A cycle over a full cluster records a reason for almost every node, so recording one is
//! on the per-node path. The reasons are nearly always the same few `&'static str`
//! constants (`Insufficient cpu`, `cannot align container`), so a name-keyed hash map spent
//! its time hashing and comparing the same bytes on every node (a fifth of a NUMA burst
//! cycle). Here the few reasons sit in a list in first-seen order and one is found by its
//! address before its text: the reason the previous node gave is checked first, then the
//! list. Reasons compare by text, so an owned copy of a reason counts with the static one.
//! Past `LINEAR` distinct reasons (per-taint texts on a large cluster) a text-keyed index
//! takes over, so a cycle never scans a long list per node.

use std::borrow::Cow;

use crate::collections::FastMap;

/// Distinct reasons found by a scan of the list; beyond that, through the index.
const LINEAR: usize = 8;

/// Reason → count, in first-seen order.
#[derive(Debug, Clone, Default)]
pub struct ReasonCounts {
    entries: Vec<(Cow<'static, str>, u32)>,
    /// Text → position in `entries`, kept only once there are more than [`LINEAR`].
    index: FastMap<Cow<'static, str>, usize>,
    /// Position of the reason counted last (the next node most likely gives it again).
    last: usize,
    /// The static reasons of the last [`ReasonCounts::add_each`] (address, length) with
    /// their positions; the first `prev_len` are valid.
    prev: [(usize, usize, usize); 2],
    prev_len: usize,
}

/// `a == b`, answered from the addresses when both are the same string.
#[inline]
fn same_text(a: &str, b: &str) -> bool {
    a.len() == b.len() && (std::ptr::eq(a.as_ptr(), b.as_ptr()) || a == b)
}

impl ReasonCounts {
    /// Counts `n` more nodes for `reason`.
    // The `Cow` itself, not a `&str`: a new reason is kept by cloning it, which copies a
    // static reason's address where a `&str` would have to be copied into a `String`.
    #[allow(clippy::ptr_arg)]
    #[inline]
    pub fn add(&mut self, reason: &Cow<'static, str>, n: u32) {
        self.add_by(reason, n, same_text);
    }

    /// Counts one more node for each of `reasons` (one node's). A node giving the very
    /// reasons the previous one gave, as the same static strings, is counted from the
    /// positions remembered then: a stale NUMA rejection carries two reasons, so the
    /// last-reason check alone missed on every one of them. Only static strings qualify:
    /// their text can never change at an address, where a freed string's address may be
    /// reused by another text.
    pub fn add_each(&mut self, reasons: &[Cow<'static, str>]) {
        if reasons.len() == self.prev_len {
            let same = reasons.iter().zip(&self.prev).all(|(r, &(addr, len, _))| {
                matches!(r, Cow::Borrowed(s) if s.as_ptr() as usize == addr && s.len() == len)
            });
            if same {
                for &(_, _, pos) in self.prev.iter().take(self.prev_len) {
                    if let Some((_, c)) = self.entries.get_mut(pos) {
                        *c += 1;
                    }
                }
                return;
            }
        }
        self.prev_len = 0;
        let mut prev = [(0, 0, 0); 2];
        let mut remember = reasons.len() <= prev.len();
        for (k, r) in reasons.iter().enumerate() {
            self.add(r, 1);
            match (r, prev.get_mut(k)) {
                (Cow::Borrowed(s), Some(p)) => *p = (s.as_ptr() as usize, s.len(), self.last),
                _ => remember = false,
            }
        }
        if remember {
            self.prev = prev;
            self.prev_len = reasons.len();
        }
    }

    /// [`ReasonCounts::add`] for a reason built at run time.
    pub fn add_owned(&mut self, reason: String, n: u32) {
        let r = Cow::Owned(reason);
        self.add_by(&r, n, same_text);
    }

    /// [`ReasonCounts::add`] with the list's equality given (a test gives a wrong one to
    /// show the property test catches it).
    #[allow(clippy::ptr_arg)]
    fn add_by(&mut self, reason: &Cow<'static, str>, n: u32, same: impl Fn(&str, &str) -> bool) {
        let r: &str = reason;
        if let Some((k, c)) = self.entries.get_mut(self.last) {
            if same(k, r) {
                *c += n;
                return;
            }
        }
        let found = if self.entries.len() <= LINEAR {
            self.entries.iter().position(|(k, _)| same(k, r))
        } else {
            self.index.get(r).copied()
        };
        if let Some(pos) = found {
            if let Some((_, c)) = self.entries.get_mut(pos) {
                *c += n;
                self.last = pos;
                return;
            }
        }
        let pos = self.entries.len();
        self.entries.push((reason.clone(), n));
        self.last = pos;
        if self.entries.len() > LINEAR {
            if self.index.is_empty() {
                for (i, (k, _)) in self.entries.iter().enumerate() {
                    self.index.insert(k.clone(), i);
                }
            } else {
                self.index.insert(reason.clone(), pos);
            }
        }
    }

    /// The reasons with their counts, in first-seen order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, u32)> + '_ {
        self.entries.iter().map(|(k, c)| (k.as_ref(), *c))
    }

    /// Whether nothing is counted.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Forgets every count (keeps the capacity).
    pub fn clear(&mut self) {
        self.entries.clear();
        self.index.clear();
        self.last = 0;
        self.prev_len = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    /// More distinct texts than [`LINEAR`], so both the list and the index are exercised.
    const STATIC: [&str; 12] = [
        "Insufficient cpu",
        "Insufficient memory",
        "cannot align container",
        "cannot align pod",
        "node(s) had untolerated taint {a: 1}",
        "node(s) had untolerated taint {b: 2}",
        "node(s) didn't match Pod's node affinity/selector",
        "node(s) were unschedulable",
        "Too many pods",
        "node(s) topology data is being resynced",
        "abc",
        "abd",
    ];

    #[derive(Debug, Clone)]
    enum Op {
        /// Reason `i` as the shared static string.
        Static(usize),
        /// Reason `i` as an owned copy (same text, another address).
        Owned(usize),
        /// `count` nodes left out for reason `i` (an owned copy).
        Absent(usize, u32),
        /// One node's reasons through `add_each`: `(i, owned)` each.
        Each(Vec<(usize, bool)>),
        Clear,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            6 => (0..STATIC.len()).prop_map(Op::Static),
            3 => (0..STATIC.len()).prop_map(Op::Owned),
            1 => (0..STATIC.len(), 0u32..5).prop_map(|(i, n)| Op::Absent(i, n)),
            // Few reasons, so a node often repeats the previous one's (the fast path).
            6 => proptest::collection::vec((0..4usize, proptest::bool::weighted(0.2)), 0..4)
                .prop_map(Op::Each),
            1 => Just(Op::Clear),
        ]
    }

    /// Runs `ops` on a [`ReasonCounts`] (with `same` as its equality) and on a plain
    /// text-keyed map, comparing the histograms after every step.
    ///
    /// `same_is_text`: `same` is the real equality, so `add_each` (which always uses it)
    /// is run; otherwise `Each` goes through `add_by` with `same`.
    fn check(
        ops: &[Op],
        same: impl Fn(&str, &str) -> bool + Copy,
        same_is_text: bool,
    ) -> Result<(), TestCaseError> {
        let mut counts = ReasonCounts::default();
        let mut plain: HashMap<String, u32> = HashMap::new();
        let mut order: Vec<String> = Vec::new();
        for op in ops {
            match *op {
                Op::Static(i) => {
                    counts.add_by(&Cow::Borrowed(STATIC[i]), 1, same);
                    *plain.entry(STATIC[i].to_string()).or_insert(0) += 1;
                }
                Op::Owned(i) => {
                    counts.add_by(&Cow::Owned(STATIC[i].to_string()), 1, same);
                    *plain.entry(STATIC[i].to_string()).or_insert(0) += 1;
                }
                Op::Absent(i, n) => {
                    counts.add_by(&Cow::Owned(STATIC[i].to_string()), n, same);
                    *plain.entry(STATIC[i].to_string()).or_insert(0) += n;
                }
                Op::Each(ref rs) => {
                    if same_is_text {
                        let reasons: Vec<Cow<'static, str>> = rs
                            .iter()
                            .map(|&(i, owned)| {
                                if owned {
                                    Cow::Owned(STATIC[i].to_string())
                                } else {
                                    Cow::Borrowed(STATIC[i])
                                }
                            })
                            .collect();
                        counts.add_each(&reasons);
                    } else {
                        for &(i, _) in rs {
                            counts.add_by(&Cow::Borrowed(STATIC[i]), 1, same);
                        }
                    }
                    for &(i, _) in rs {
                        *plain.entry(STATIC[i].to_string()).or_insert(0) += 1;
                    }
                }
                Op::Clear => {
                    counts.clear();
                    plain.clear();
                    order.clear();
                }
            }
            let touched: Vec<usize> = match op {
                Op::Static(i) | Op::Owned(i) | Op::Absent(i, _) => vec![*i],
                Op::Each(rs) => rs.iter().map(|&(i, _)| i).collect(),
                Op::Clear => Vec::new(),
            };
            for i in touched {
                if !order.iter().any(|o| o == STATIC[i]) {
                    order.push(STATIC[i].to_string());
                }
            }
            let got: Vec<(String, u32)> = counts.iter().map(|(k, c)| (k.to_string(), c)).collect();
            let want: Vec<(String, u32)> = order
                .iter()
                .map(|k| (k.clone(), plain.get(k).copied().unwrap_or(0)))
                .collect();
            prop_assert_eq!(got, want);
            prop_assert_eq!(counts.is_empty(), plain.is_empty());
        }
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        #[test]
        fn counts_equal_a_text_keyed_map(ops in proptest::collection::vec(op(), 1..80)) {
            check(&ops, same_text, true)?;
        }
    }

    /// The check can fail: with reasons compared by address only, an owned copy of a
    /// reason is counted apart from the static one and the comparison says so.
    #[test]
    fn address_only_equality_is_caught() {
        let ops = [Op::Static(0), Op::Owned(0)];
        assert!(check(&ops, |a, b| std::ptr::eq(a, b), false).is_err());
        assert!(check(&ops, same_text, true).is_ok());
    }

    /// A node's reasons repeated (the fast path), as owned copies, in another order, twice
    /// the same, and none, count as the plain map counts them.
    #[test]
    fn repeated_reasons_count_once_per_node() {
        let ops = [
            Op::Each(vec![(0, false), (1, false)]),
            Op::Each(vec![(0, false), (1, false)]),
            Op::Each(vec![(0, true), (1, false)]),
            Op::Each(vec![(1, false), (0, false)]),
            Op::Each(vec![(0, false), (0, false)]),
            Op::Each(vec![(0, false), (0, false)]),
            Op::Each(vec![]),
            Op::Clear,
            Op::Each(vec![(2, false)]),
            Op::Each(vec![(2, false)]),
        ];
        assert!(check(&ops, same_text, true).is_ok());
        let mut c = ReasonCounts::default();
        let r = [Cow::Borrowed(STATIC[0]), Cow::Borrowed(STATIC[1])];
        c.add_each(&r);
        c.add_each(&r);
        c.add_each(&r[..1]);
        assert_eq!(
            c.iter().collect::<Vec<_>>(),
            [(STATIC[0], 3), (STATIC[1], 2)]
        );
    }

    /// Past the list's length the index finds reasons, owned copies included.
    #[test]
    fn the_index_takes_over_past_the_list() {
        let mut ops: Vec<Op> = (0..STATIC.len()).map(Op::Static).collect();
        ops.extend((0..STATIC.len()).map(Op::Owned));
        ops.extend((0..STATIC.len()).rev().map(Op::Static));
        assert!(check(&ops, same_text, true).is_ok());
    }
}
