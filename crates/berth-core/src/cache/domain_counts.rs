//! Per-topology-domain counts of matching pods, kept across cycles.
//!
//! PodTopologySpread's PreFilter and PreScore need, for the incoming pod's selector and
//! namespace, how many pods each topology domain (zone, host...) holds. Recounting every
//! pod of every node each cycle made those plugins O(cluster) per pod: 265 pods/s at 5,000
//! nodes. Pods of one workload ask the same question over and over, so the answer is kept
//! per question and brought up to date from the nodes that changed since it was last asked:
//! each node's contribution is remembered with the node's [`NodeInfo::generation`], a stamp
//! renewed on every change of its pods or labels, so a cycle re-reads only the nodes whose
//! stamp moved (a handful: those that got or lost a pod) and skips the rest with one
//! comparison.
//!
//! The result is shared as an `Arc` map that a cycle state may copy on write: kube's
//! `AddPod`/`RemovePod` (a pod added to or removed from one node in a copy of the cycle
//! state, for preemption and nominated pods) become `counts[domain] += 1` on that copy.

use std::sync::{Arc, Mutex};

use super::change_log::ChangeLog;
use crate::collections::{FastMap, HashMap};
use crate::model::node::NodeInfo;
use crate::model::pod::PodInfo;
use crate::model::selector::Selector;

/// At most this many questions are remembered; the least recently asked goes first.
const MAX_QUERIES: usize = 64;

/// Domain value -> matching pods. Looked up once per node per cycle by PodTopologySpread's
/// Filter and Score, so with the fast hasher (no caller depends on its order).
pub type DomainCounts = FastMap<String, i64>;

/// One question: pods in `namespace` matching `selector`, per value of `topology_key`, over
/// the nodes that carry every label of `required_keys` (a node lacking `topology_key` then
/// counts under the empty value).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DomainQuery<'a> {
    /// The pods' namespace.
    pub namespace: &'a str,
    /// `None` (or an empty selector) counts nothing, as `countPodsMatchSelector`.
    pub selector: Option<&'a Selector>,
    /// The topology key.
    pub topology_key: &'a str,
    /// Labels a node must carry to be counted at all.
    pub required_keys: &'a [&'a str],
}

/// What one node added to a question's counts.
#[derive(Debug, Clone)]
struct Contribution {
    generation: u64,
    /// `None`: the node is not counted (a required key is missing).
    domain: Option<String>,
    count: i64,
}

#[derive(Debug, Clone)]
struct Memo {
    namespace: String,
    selector: Option<Selector>,
    topology_key: String,
    required_keys: Vec<String>,
    /// By node slot ([`crate::model::node::NodeIdx::index`]).
    per_node: Vec<Option<Contribution>>,
    counts: Arc<DomainCounts>,
    /// Counted nodes per domain: a domain stays present with count 0 while it has one.
    nodes_per_domain: HashMap<String, u32>,
    last_used: u64,
    /// How far along the cluster's [`ChangeLog`] this memo has read (`None`: never).
    cursor: Option<u64>,
}

impl Memo {
    fn answers(&self, q: &DomainQuery<'_>) -> bool {
        self.namespace == q.namespace
            && self.selector.as_ref() == q.selector
            && self.topology_key == q.topology_key
            && self.required_keys.len() == q.required_keys.len()
            && self
                .required_keys
                .iter()
                .zip(q.required_keys)
                .all(|(a, b)| a == b)
    }

    fn new(q: &DomainQuery<'_>) -> Self {
        Self {
            namespace: q.namespace.to_string(),
            selector: q.selector.cloned(),
            topology_key: q.topology_key.to_string(),
            required_keys: q.required_keys.iter().map(|k| k.to_string()).collect(),
            per_node: Vec::new(),
            counts: Arc::default(),
            nodes_per_domain: HashMap::default(),
            last_used: 0,
            cursor: None,
        }
    }

    /// What `node` contributes now.
    fn contribution(&self, node: &NodeInfo) -> Contribution {
        let counted = self
            .required_keys
            .iter()
            .all(|k| node.labels.contains_key(k));
        if !counted {
            return Contribution {
                generation: node.generation,
                domain: None,
                count: 0,
            };
        }
        let domain = node
            .labels
            .get(&self.topology_key)
            .cloned()
            .unwrap_or_default();
        Contribution {
            generation: node.generation,
            domain: Some(domain),
            count: count_matching(&node.pods, self.selector.as_ref(), &self.namespace),
        }
    }

    fn apply(&mut self, c: &Contribution, sign: i64) {
        let Some(domain) = &c.domain else {
            return;
        };
        let counts = Arc::make_mut(&mut self.counts);
        let nodes = match self.nodes_per_domain.get_mut(domain.as_str()) {
            Some(n) => n,
            None => self.nodes_per_domain.entry(domain.clone()).or_insert(0),
        };
        if sign > 0 {
            *nodes += 1;
            match counts.get_mut(domain.as_str()) {
                Some(v) => *v += c.count,
                None => {
                    counts.insert(domain.clone(), c.count);
                }
            }
        } else {
            *nodes = nodes.saturating_sub(1);
            let gone = *nodes == 0;
            if gone {
                self.nodes_per_domain.remove(domain.as_str());
                counts.remove(domain.as_str());
            } else if let Some(v) = counts.get_mut(domain.as_str()) {
                *v -= c.count;
            }
        }
    }

    /// Brings the counts up to date with the nodes in `slots` (slot -> node, `None` for a
    /// free slot): only the slots `log` noted since the last refresh, or every slot when
    /// the log no longer reaches back that far.
    fn refresh(&mut self, slots: &[Option<NodeInfo>], log: &ChangeLog) {
        let len = slots.len();
        if self.per_node.len() < len {
            self.per_node.resize(len, None);
        }
        match self.cursor.and_then(|c| log.since(c)) {
            Some(changed) => {
                for &idx in changed {
                    let i = idx.index();
                    self.refresh_slot(i, slots.get(i).and_then(Option::as_ref));
                }
            }
            None => {
                for (i, node) in slots.iter().enumerate() {
                    self.refresh_slot(i, node.as_ref());
                }
                for i in len..self.per_node.len() {
                    self.refresh_slot(i, None);
                }
            }
        }
        self.cursor = Some(log.end());
        debug_assert!(
            self.per_node.iter().enumerate().all(|(i, c)| {
                let node = slots.get(i).and_then(Option::as_ref);
                match (c, node) {
                    (Some(c), Some(n)) => c.generation == n.generation,
                    (None, None) => true,
                    _ => false,
                }
            }),
            "a node changed without being noted in the cluster's change log"
        );
    }

    /// Brings slot `i`'s contribution up to date with `node`.
    fn refresh_slot(&mut self, i: usize, node: Option<&NodeInfo>) {
        let Some(prev) = self.per_node.get(i) else {
            return;
        };
        let same = match (prev, node) {
            (Some(c), Some(n)) => c.generation == n.generation,
            (None, None) => true,
            _ => false,
        };
        if same {
            return;
        }
        if let Some(old) = self.per_node[i].take() {
            self.apply(&old, -1);
        }
        if let Some(n) = node {
            let c = self.contribution(n);
            self.apply(&c, 1);
            self.per_node[i] = Some(c);
        }
    }
}

/// Pods in `ns` matching `selector`, terminating ones left out (`countPodsMatchSelector`).
/// An absent or empty selector counts nothing, as upstream.
pub(crate) fn count_matching(pods: &[Arc<PodInfo>], selector: Option<&Selector>, ns: &str) -> i64 {
    let Some(sel) = selector.filter(|s| !s.is_empty()) else {
        return 0;
    };
    pods.iter()
        .filter(|p| !p.terminating && *p.key.namespace == *ns && sel.matches(&p.labels))
        .count() as i64
}

/// The remembered questions and their answers. Interior mutability: plugins read the
/// cluster by shared reference, and answering a question updates its memo.
#[derive(Debug, Default)]
pub struct DomainCountCache {
    memos: Mutex<(u64, Vec<Memo>)>,
}

impl Clone for DomainCountCache {
    fn clone(&self) -> Self {
        let inner = self.memos.lock().unwrap_or_else(|e| e.into_inner());
        Self {
            memos: Mutex::new(inner.clone()),
        }
    }
}

impl DomainCountCache {
    /// The per-domain counts for `q` over the nodes in `slots` (every node slot of the
    /// cluster, in index order, `None` for a free one), whose changes `log` notes.
    pub fn counts(
        &self,
        q: &DomainQuery<'_>,
        slots: &[Option<NodeInfo>],
        log: &ChangeLog,
    ) -> Arc<DomainCounts> {
        let mut guard = self.memos.lock().unwrap_or_else(|e| e.into_inner());
        let (clock, memos) = &mut *guard;
        *clock += 1;
        let at = match memos.iter().position(|m| m.answers(q)) {
            Some(i) => i,
            None => {
                if memos.len() >= MAX_QUERIES {
                    if let Some((oldest, _)) =
                        memos.iter().enumerate().min_by_key(|(_, m)| m.last_used)
                    {
                        memos.swap_remove(oldest);
                    }
                }
                memos.push(Memo::new(q));
                memos.len() - 1
            }
        };
        let memo = &mut memos[at];
        memo.last_used = *clock;
        memo.refresh(slots, log);
        memo.counts.clone()
    }
}
