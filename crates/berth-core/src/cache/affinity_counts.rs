//! Answers built from every node's pods, kept across cycles and brought up to date from the
//! nodes that changed (InterPodAffinity's per-topology-pair counts).
//!
//! InterPodAffinity's PreFilter and PreScore ask, for the pod being scheduled, questions
//! whose answer is a sum over every node of what that node's pods contribute (how many pods
//! match the pod's terms, per topology pair; which existing pods' terms the pod matches).
//! Walking every pod of every node made those plugins O(cluster) per pod: 73 pods/s at
//! 5,000 nodes. Pods of one workload ask the same questions over and over, so each answer
//! is kept per question, with each node's part remembered beside the node's
//! [`NodeInfo::generation`] (a stamp renewed on every change of its pods or labels): a cycle
//! re-reads only the nodes whose stamp moved and skips the rest with one comparison.
//!
//! Even one comparison per node slot showed up (a fifth of a PodAffinity cycle's
//! instructions at 5,000 nodes, for two questions a cycle), so the cluster also keeps a log
//! of the node slots it handed out for change ([`ChangeLog`], shared with the per-domain
//! counts): a question asked again re-reads
//! only the slots logged since it was last asked, and walks every slot only when it is new
//! or the log has dropped the entries it needed.
//!
//! This module knows nothing of affinity: the plugin says what a question is (`Q`, compared
//! for equality), what one node contributes and how parts add up ([`Tally`]). Everything a
//! part depends on besides the node's pods and labels must be in the question.

use std::sync::Mutex;

use super::change_log::ChangeLog;
use crate::model::node::NodeInfo;

/// At most this many questions are remembered; the least recently asked goes first. Each
/// holds one entry per node slot, so this bounds memory to a few MiB at 5,000 nodes.
const MAX_QUERIES: usize = 64;

/// Every node slot of the cluster in index order (`None` for a free one) and the log of
/// slots that may have changed.
#[derive(Debug, Clone, Copy)]
pub struct NodeTable<'a> {
    /// The slots.
    pub slots: &'a [Option<NodeInfo>],
    /// Their changes.
    pub log: &'a ChangeLog,
}

/// An answer made of per-node parts, each added in once and taken out when its node changes.
pub trait Tally: Default + Clone {
    /// What one node contributes.
    type Part: Clone + std::fmt::Debug;
    /// Adds (`sign` 1) or takes out (`sign` -1) one node's part. Taking out a part that was
    /// added must leave the tally exactly as if it had never been added.
    fn apply(&mut self, part: &Self::Part, sign: i64);
}

/// One node's part, with the node's generation when it was read.
#[derive(Debug, Clone)]
struct Stamped<P> {
    generation: u64,
    part: P,
}

#[derive(Debug, Clone)]
struct Memo<Q, T: Tally> {
    question: Q,
    /// By node slot ([`crate::model::node::NodeIdx::index`]).
    per_node: Vec<Option<Stamped<T::Part>>>,
    tally: T,
    last_used: u64,
    /// The log position the tally is up to date with (`None`: never brought up to date).
    seen: Option<u64>,
}

impl<Q, T: Tally> Memo<Q, T> {
    /// Brings the tally up to date with `nodes`, reading the part of every node whose
    /// generation moved with `part`: only the slots logged since the last refresh, or every
    /// slot when there was none or the log dropped what was needed.
    fn refresh(&mut self, nodes: NodeTable<'_>, mut part: impl FnMut(&NodeInfo) -> T::Part) {
        let len = nodes.slots.len();
        if self.per_node.len() < len {
            self.per_node.resize(len, None);
        }
        match self.seen.and_then(|pos| nodes.log.since(pos)) {
            Some(changed) => {
                for &idx in changed {
                    let i = idx.index();
                    let node = nodes.slots.get(i).and_then(Option::as_ref);
                    self.refresh_slot(i, node, &mut part);
                }
            }
            None => {
                for i in 0..self.per_node.len() {
                    let node = nodes.slots.get(i).and_then(Option::as_ref);
                    self.refresh_slot(i, node, &mut part);
                }
            }
        }
        self.seen = Some(nodes.log.end());
        debug_assert!(
            self.per_node.iter().enumerate().all(|(i, s)| {
                match (s, nodes.slots.get(i).and_then(Option::as_ref)) {
                    (Some(s), Some(n)) => s.generation == n.generation,
                    (None, None) => true,
                    _ => false,
                }
            }),
            "a node changed without being noted in the cluster's change log"
        );
    }

    /// Re-reads slot `i` (now holding `node`) if its generation moved.
    fn refresh_slot(
        &mut self,
        i: usize,
        node: Option<&NodeInfo>,
        part: &mut impl FnMut(&NodeInfo) -> T::Part,
    ) {
        let Some(entry) = self.per_node.get_mut(i) else {
            return;
        };
        let same = match (&*entry, node) {
            (Some(s), Some(n)) => s.generation == n.generation,
            (None, None) => true,
            _ => false,
        };
        if same {
            return;
        }
        if let Some(old) = entry.take() {
            self.tally.apply(&old.part, -1);
        }
        if let Some(n) = node {
            let p = part(n);
            self.tally.apply(&p, 1);
            *entry = Some(Stamped {
                generation: n.generation,
                part: p,
            });
        }
    }
}

/// The remembered questions and their answers. Interior mutability: plugins read the
/// cluster by shared reference, and answering a question updates its memo.
#[derive(Debug)]
pub struct CountCache<Q, T: Tally> {
    /// The clock (bumped on every question, for least-recently-used eviction) and the memos.
    memos: Mutex<(u64, Vec<Memo<Q, T>>)>,
    /// Tests only: remembered answers are no longer brought up to date (a stale memo, to
    /// show the property test catches one).
    #[cfg(test)]
    frozen: std::sync::atomic::AtomicBool,
}

impl<Q, T: Tally> Default for CountCache<Q, T> {
    fn default() -> Self {
        Self {
            memos: Mutex::new((0, Vec::new())),
            #[cfg(test)]
            frozen: Default::default(),
        }
    }
}

impl<Q: Clone, T: Tally> Clone for CountCache<Q, T> {
    fn clone(&self) -> Self {
        let inner = self.memos.lock().unwrap_or_else(|e| e.into_inner());
        Self {
            memos: Mutex::new(inner.clone()),
            #[cfg(test)]
            frozen: Default::default(),
        }
    }
}

impl<Q, T: Tally> CountCache<Q, T> {
    /// Reads (`read`) the answer to the question `is` recognises, first brought up to date
    /// with `nodes`: `part` reads what one node contributes. A question not remembered is
    /// made by `make` and answered from every node.
    pub fn with_answer<R>(
        &self,
        is: impl Fn(&Q) -> bool,
        make: impl FnOnce() -> Q,
        nodes: NodeTable<'_>,
        part: impl FnMut(&NodeInfo) -> T::Part,
        read: impl FnOnce(&T) -> R,
    ) -> R {
        let mut guard = self.memos.lock().unwrap_or_else(|e| e.into_inner());
        let (clock, memos) = &mut *guard;
        *clock += 1;
        let at = match memos.iter().position(|m| is(&m.question)) {
            Some(i) => i,
            None => {
                if memos.len() >= MAX_QUERIES {
                    if let Some((oldest, _)) =
                        memos.iter().enumerate().min_by_key(|(_, m)| m.last_used)
                    {
                        memos.swap_remove(oldest);
                    }
                }
                memos.push(Memo {
                    question: make(),
                    per_node: Vec::new(),
                    tally: T::default(),
                    last_used: 0,
                    seen: None,
                });
                memos.len() - 1
            }
        };
        let memo = &mut memos[at];
        memo.last_used = *clock;
        #[cfg(test)]
        if self.frozen.load(std::sync::atomic::Ordering::Relaxed) && memo.seen.is_some() {
            return read(&memo.tally);
        }
        memo.refresh(nodes, part);
        read(&memo.tally)
    }

    /// Tests only: stops bringing remembered answers up to date.
    #[cfg(test)]
    pub fn freeze_for_test(&self) {
        self.frozen
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// How many questions are remembered (for tests of the bound).
    pub fn len(&self) -> usize {
        self.memos.lock().unwrap_or_else(|e| e.into_inner()).1.len()
    }

    /// Whether no question is remembered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::cache::Cluster;
    use crate::testing::{node, pod};

    /// Pods per node, summed.
    #[derive(Debug, Clone, Default, PartialEq)]
    struct Pods(i64);

    impl Tally for Pods {
        type Part = i64;
        fn apply(&mut self, part: &i64, sign: i64) {
            self.0 += sign * part;
        }
    }

    fn ask(cx: &Cluster, cache: &CountCache<u32, Pods>, q: u32, reads: &mut usize) -> i64 {
        cache.with_answer(
            |m| *m == q,
            || q,
            cx.cache.node_table(),
            |n| {
                *reads += 1;
                n.pods.len() as i64
            },
            |t| t.0,
        )
    }

    #[test]
    fn only_changed_nodes_are_read_again() {
        let mut cx = Cluster::default();
        for i in 0..4 {
            cx.apply_node(node(&format!("n{i}")).build())
                .expect("valid");
        }
        let cache = CountCache::<u32, Pods>::default();
        let mut reads = 0;
        assert_eq!(ask(&cx, &cache, 1, &mut reads), 0);
        assert_eq!(reads, 4);
        let p = pod("p")
            .node_name("n2")
            .build_info_with(&mut cx.cache.names);
        cx.cache.apply_pod(Arc::new(p));
        assert_eq!(ask(&cx, &cache, 1, &mut reads), 1);
        assert_eq!(reads, 5, "only n2 is read again");
        cx.cache.delete_node("n2");
        assert_eq!(
            ask(&cx, &cache, 1, &mut reads),
            0,
            "a deleted node's part goes"
        );
    }

    #[test]
    fn a_question_asked_before_the_log_dropped_its_entries_reads_every_node() {
        let mut cx = Cluster::default();
        for i in 0..3 {
            cx.apply_node(node(&format!("n{i}")).build())
                .expect("valid");
        }
        let cache = CountCache::<u32, Pods>::default();
        let mut reads = 0;
        ask(&cx, &cache, 1, &mut reads);
        assert_eq!(reads, 3);
        let idx = cx.cache.node_idx("n1").expect("n1");
        for _ in 0..crate::cache::change_log::MAX_LOG {
            cx.cache.node_mut(idx);
        }
        let p = pod("p")
            .node_name("n1")
            .build_info_with(&mut cx.cache.names);
        cx.cache.apply_pod(Arc::new(p));
        assert_eq!(ask(&cx, &cache, 1, &mut reads), 1);
        assert_eq!(reads, 4, "every slot compared, only n1 read");
        let p = pod("q")
            .node_name("n2")
            .build_info_with(&mut cx.cache.names);
        cx.cache.apply_pod(Arc::new(p));
        assert_eq!(ask(&cx, &cache, 1, &mut reads), 2);
        assert_eq!(reads, 5, "back on the log");
    }

    #[test]
    fn the_least_recently_asked_question_goes_first() {
        let mut cx = Cluster::default();
        cx.apply_node(node("n0").build()).expect("valid");
        let cache = CountCache::<u32, Pods>::default();
        let mut reads = 0;
        for q in 0..(MAX_QUERIES as u32 + 10) {
            ask(&cx, &cache, q, &mut reads);
        }
        assert_eq!(cache.len(), MAX_QUERIES);
    }
}
