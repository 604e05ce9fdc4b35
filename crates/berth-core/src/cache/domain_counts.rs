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

use std::sync::Arc;

use super::affinity_counts::{CountCache, NodeTable, Tally};
use crate::collections::{FastMap, HashMap};
use crate::model::node::NodeInfo;
use crate::model::pod::PodInfo;
use crate::model::selector::Selector;

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

/// A [`DomainQuery`] as remembered.
#[derive(Debug, Clone)]
struct Question {
    namespace: String,
    selector: Option<Selector>,
    topology_key: String,
    required_keys: Vec<String>,
}

impl Question {
    fn new(q: &DomainQuery<'_>) -> Self {
        Self {
            namespace: q.namespace.to_string(),
            selector: q.selector.cloned(),
            topology_key: q.topology_key.to_string(),
            required_keys: q.required_keys.iter().map(|k| k.to_string()).collect(),
        }
    }

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
}

/// What `node` contributes to `q`: its domain and matching pods, `None` when the node is not
/// counted (a required key is missing).
fn part(q: &DomainQuery<'_>, node: &NodeInfo) -> Option<(String, i64)> {
    if !q.required_keys.iter().all(|k| node.labels.contains_key(*k)) {
        return None;
    }
    let domain = node.labels.get(q.topology_key).cloned().unwrap_or_default();
    Some((domain, count_matching(&node.pods, q.selector, q.namespace)))
}

/// The counts of one question, with how many counted nodes each domain has (a domain stays
/// present with count 0 while it has one).
#[derive(Debug, Clone, Default)]
struct Domains {
    counts: Arc<DomainCounts>,
    nodes_per_domain: HashMap<String, u32>,
}

impl Tally for Domains {
    type Part = Option<(String, i64)>;

    fn apply(&mut self, part: &Self::Part, sign: i64) {
        let Some((domain, count)) = part else {
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
                Some(v) => *v += count,
                None => {
                    counts.insert(domain.clone(), *count);
                }
            }
        } else {
            *nodes = nodes.saturating_sub(1);
            if *nodes == 0 {
                self.nodes_per_domain.remove(domain.as_str());
                counts.remove(domain.as_str());
            } else if let Some(v) = counts.get_mut(domain.as_str()) {
                *v -= count;
            }
        }
    }
}

/// The remembered questions and their answers ([`CountCache`]: bounded, brought up to date
/// from the nodes the cluster's change log noted).
#[derive(Debug, Default, Clone)]
pub struct DomainCountCache(CountCache<Question, Domains>);

impl DomainCountCache {
    /// The per-domain counts for `q` over `nodes`.
    pub fn counts(&self, q: &DomainQuery<'_>, nodes: NodeTable<'_>) -> Arc<DomainCounts> {
        self.0.with_answer(
            |m| m.answers(q),
            || Question::new(q),
            nodes,
            |n| part(q, n),
            |t| t.counts.clone(),
        )
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
