//! PreFilter's and PreScore's per-topology-pair counts from answers remembered across cycles
//! ([`crate::cache::affinity_counts`]) instead of a walk over every pod of every node.
//!
//! Each count is a sum over nodes of what one node's pods contribute, so it is kept per
//! question and re-read only for the nodes whose generation moved. A question holds
//! everything a node's part depends on besides the node's pods and labels:
//!
//! - the incoming pod's own terms ([`OwnTerms`]): the terms, the pod's namespace (a term
//!   without namespaces applies to it), the pod's values of the terms' `matchLabelKeys` /
//!   `mismatchLabelKeys`, and, when a term has a `namespaceSelector`, the labels of every
//!   namespace object the core knows (pods of any namespace may be selected);
//! - existing pods' terms that the incoming pod matches ([`Target`]): the pod's namespace
//!   and labels, and the labels of its namespace's object (an existing pod's
//!   `namespaceSelector` reads only those).
//!
//! A remembered answer counts every pod of every node, so it is the recount's answer only
//! when no reservation stand-in is hidden from the pod ([`super::counts_apply`]); otherwise callers
//! recount. The recounts stay as the oracle the property test compares with.

use std::sync::Arc;

use berth_api::k8s_openapi::api::core::v1::PodAffinityTerm;

use crate::cache::affinity_counts::{CountCache, Tally};
use crate::cache::node_cache::{Namespaces, NodeCache};
use crate::model::node::NodeInfo;
use crate::model::pod::PodInfo;
use crate::model::selector::Labels;

use super::terms::{
    has_pod_affinity, matches_all, preferred_affinity, preferred_anti_affinity, required_affinity,
    required_anti_affinity, term_matches,
};
use super::topology::TopologyCounts;

/// The cluster's remembered InterPodAffinity answers.
pub(crate) type AffinityCounts = CountCache<Question, PairTally>;

/// Which count of the incoming pod's own terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OwnKind {
    /// Pods matching every required affinity term, counted once under each term's key.
    AllAffinity,
    /// Pods matching each required anti-affinity term, counted under that term's key.
    EachAnti,
    /// Pods matching each preferred term, weighted under its key (anti-affinity negative).
    Preferred,
}

/// A question about the incoming pod's own terms (see the module doc).
#[derive(Debug, Clone)]
pub(crate) struct OwnTerms {
    kind: OwnKind,
    namespace: Arc<str>,
    /// The pod's value of every `matchLabelKeys` then `mismatchLabelKeys` key, term by term.
    owner_values: Vec<Option<String>>,
    /// The terms with their weights (1 for required terms).
    terms: Vec<(PodAffinityTerm, i64)>,
    /// The namespace objects, when a term has a `namespaceSelector`.
    namespaces: Option<Namespaces>,
}

/// A question about existing pods' terms against the incoming pod (see the module doc).
#[derive(Debug, Clone)]
pub(crate) struct Target {
    namespace: Arc<str>,
    labels: Labels,
    /// The labels of the pod's namespace object, if the core knows it.
    namespace_labels: Option<Labels>,
}

/// A remembered question.
#[derive(Debug, Clone)]
pub(crate) enum Question {
    /// The incoming pod's own terms.
    Own(OwnTerms),
    /// Existing pods' required anti-affinity terms the pod matches.
    ExistingAnti(Target),
    /// Existing pods' scoring terms the pod matches, with hardPodAffinityWeight.
    ExistingScore(Target, i64),
}

/// The pod's values of the terms' `matchLabelKeys` and `mismatchLabelKeys`.
fn owner_values<'a>(
    terms: impl Iterator<Item = &'a PodAffinityTerm> + 'a,
    labels: &'a Labels,
) -> impl Iterator<Item = Option<&'a String>> + 'a {
    terms.flat_map(move |t| {
        t.match_label_keys
            .iter()
            .flatten()
            .chain(t.mismatch_label_keys.iter().flatten())
            .map(move |k| labels.get(k))
    })
}

/// Whether two namespace tables give every namespace the same labels (all a
/// `namespaceSelector` reads).
fn same_namespaces(a: &Namespaces, b: &Namespaces) -> bool {
    a.len() == b.len()
        && a.iter().all(|(name, ns)| {
            b.get(name).is_some_and(|other| {
                Arc::ptr_eq(ns, other) || ns.metadata.labels == other.metadata.labels
            })
        })
}

/// The labels of `ns`'s object, if the core knows it.
fn namespace_labels<'a>(namespaces: &'a Namespaces, ns: &str) -> Option<&'a Labels> {
    namespaces.get(ns)?.metadata.labels.as_ref()
}

impl OwnTerms {
    fn answers(
        &self,
        kind: OwnKind,
        pod: &PodInfo,
        terms: &[(&PodAffinityTerm, i64)],
        namespaces: &Namespaces,
    ) -> bool {
        self.kind == kind
            && *self.namespace == *pod.key.namespace
            && self.terms.len() == terms.len()
            && self
                .terms
                .iter()
                .zip(terms)
                .all(|((a, wa), (b, wb))| wa == wb && a == *b)
            && self
                .owner_values
                .iter()
                .map(Option::as_ref)
                .eq(owner_values(terms.iter().map(|(t, _)| *t), &pod.labels))
            && match &self.namespaces {
                None => true,
                Some(saved) => same_namespaces(saved, namespaces),
            }
    }

    fn new(
        kind: OwnKind,
        pod: &PodInfo,
        terms: &[(&PodAffinityTerm, i64)],
        namespaces: &Namespaces,
    ) -> Self {
        let selects_namespaces = terms.iter().any(|(t, _)| t.namespace_selector.is_some());
        Self {
            kind,
            namespace: pod.key.namespace.clone(),
            owner_values: owner_values(terms.iter().map(|(t, _)| *t), &pod.labels)
                .map(|v| v.cloned())
                .collect(),
            terms: terms.iter().map(|(t, w)| ((*t).clone(), *w)).collect(),
            namespaces: selects_namespaces.then(|| namespaces.clone()),
        }
    }
}

impl Target {
    fn answers(&self, pod: &PodInfo, namespaces: &Namespaces) -> bool {
        *self.namespace == *pod.key.namespace
            && self.labels == pod.labels
            && self.namespace_labels.as_ref() == namespace_labels(namespaces, &pod.key.namespace)
    }

    fn new(pod: &PodInfo, namespaces: &Namespaces) -> Self {
        Self {
            namespace: pod.key.namespace.clone(),
            labels: pod.labels.clone(),
            namespace_labels: namespace_labels(namespaces, &pod.key.namespace).cloned(),
        }
    }
}

/// One topology pair's share of a node's part: the summed value and how many times a
/// matching term added to it (a pair is recorded while that is positive, even when the sum
/// is zero, as the recount records every pair it adds to).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PairPart {
    key: String,
    value: String,
    sum: i64,
    hits: i64,
}

/// What one node adds: at most one entry per topology key (the node has one value).
pub(crate) type NodePart = Vec<PairPart>;

/// Collects a node's part.
struct PartBuilder<'n> {
    labels: &'n Labels,
    part: NodePart,
}

impl<'n> PartBuilder<'n> {
    fn new(node: &'n NodeInfo) -> Self {
        Self {
            labels: &node.labels,
            part: NodePart::new(),
        }
    }

    /// `sum` over `hits` matches under the node's value of `key` (nothing when the node
    /// lacks the label, as [`TopologyCounts::add`]).
    fn add(&mut self, key: &str, sum: i64, hits: i64) {
        if hits == 0 {
            return;
        }
        let Some(value) = self.labels.get(key) else {
            return;
        };
        match self.part.iter_mut().find(|p| p.key == key) {
            Some(p) => {
                p.sum += sum;
                p.hits += hits;
            }
            None => self.part.push(PairPart {
                key: key.to_string(),
                value: value.clone(),
                sum,
                hits,
            }),
        }
    }
}

/// A remembered answer: the counts per pair, shared with cycle states, and the hits that
/// tell when a pair is to be forgotten.
#[derive(Debug, Clone, Default)]
pub(crate) struct PairTally {
    counts: Arc<TopologyCounts>,
    hits: TopologyCounts,
}

impl Tally for PairTally {
    type Part = NodePart;

    fn apply(&mut self, part: &NodePart, sign: i64) {
        if part.is_empty() {
            return;
        }
        let counts = Arc::make_mut(&mut self.counts);
        for p in part {
            if self.hits.update_pair(&p.key, &p.value, sign * p.hits) == 0 {
                counts.remove_pair(&p.key, &p.value);
            } else {
                counts.add_pair(&p.key, &p.value, sign * p.sum);
            }
        }
    }
}

/// Asks `question` (recognised by `is`, made by `make`), reading changed nodes with `part`.
fn ask(
    memo: &AffinityCounts,
    nodes: &NodeCache,
    is: impl Fn(&Question) -> bool,
    make: impl FnOnce() -> Question,
    part: impl FnMut(&NodeInfo) -> NodePart,
) -> Arc<TopologyCounts> {
    memo.with_answer(is, make, nodes.node_table(), part, |t| t.counts.clone())
}

/// Counts of the incoming pod's own `terms` (weights as given), as `kind` says.
fn own(
    memo: &AffinityCounts,
    nodes: &NodeCache,
    pod: &PodInfo,
    kind: OwnKind,
    terms: &[(&PodAffinityTerm, i64)],
) -> Arc<TopologyCounts> {
    let ns = &nodes.namespaces;
    ask(
        memo,
        nodes,
        |q| matches!(q, Question::Own(o) if o.answers(kind, pod, terms, ns)),
        || Question::Own(OwnTerms::new(kind, pod, terms, ns)),
        |node| own_part(ns, pod, kind, terms, node),
    )
}

/// What `node` adds to an [`OwnTerms`] question.
fn own_part(
    ns: &Namespaces,
    pod: &PodInfo,
    kind: OwnKind,
    terms: &[(&PodAffinityTerm, i64)],
    node: &NodeInfo,
) -> NodePart {
    let mut b = PartBuilder::new(node);
    match kind {
        OwnKind::AllAffinity => {
            let affinity = required_affinity(pod);
            let n = node
                .pods
                .iter()
                .filter(|e| matches_all(affinity, pod, e, ns))
                .count() as i64;
            for t in affinity {
                b.add(&t.topology_key, n, n);
            }
        }
        OwnKind::EachAnti | OwnKind::Preferred => {
            for (t, w) in terms {
                let n = node
                    .pods
                    .iter()
                    .filter(|e| term_matches(t, pod, e, ns))
                    .count() as i64;
                b.add(&t.topology_key, n * w, n);
            }
        }
    }
    b.part
}

/// PreFilter (2): pods matching all of the pod's required affinity terms.
pub(super) fn affinity(
    memo: &AffinityCounts,
    nodes: &NodeCache,
    pod: &PodInfo,
) -> Arc<TopologyCounts> {
    let terms: Vec<_> = required_affinity(pod).iter().map(|t| (t, 1)).collect();
    own(memo, nodes, pod, OwnKind::AllAffinity, &terms)
}

/// PreFilter (3): pods matching each of the pod's required anti-affinity terms.
pub(super) fn anti_affinity(
    memo: &AffinityCounts,
    nodes: &NodeCache,
    pod: &PodInfo,
) -> Arc<TopologyCounts> {
    let terms: Vec<_> = required_anti_affinity(pod).iter().map(|t| (t, 1)).collect();
    own(memo, nodes, pod, OwnKind::EachAnti, &terms)
}

/// PreScore: pods matching the pod's preferred terms, weighted (anti-affinity negative).
pub(super) fn preferred(
    memo: &AffinityCounts,
    nodes: &NodeCache,
    pod: &PodInfo,
) -> Arc<TopologyCounts> {
    let terms: Vec<_> = preferred_affinity(pod)
        .iter()
        .map(|w| (&w.pod_affinity_term, i64::from(w.weight)))
        .chain(
            preferred_anti_affinity(pod)
                .iter()
                .map(|w| (&w.pod_affinity_term, -i64::from(w.weight))),
        )
        .collect();
    own(memo, nodes, pod, OwnKind::Preferred, &terms)
}

/// PreFilter (1): existing pods whose required anti-affinity terms the pod matches.
pub(super) fn existing_anti_affinity(
    memo: &AffinityCounts,
    nodes: &NodeCache,
    pod: &PodInfo,
) -> Arc<TopologyCounts> {
    let ns = &nodes.namespaces;
    ask(
        memo,
        nodes,
        |q| matches!(q, Question::ExistingAnti(t) if t.answers(pod, ns)),
        || Question::ExistingAnti(Target::new(pod, ns)),
        |node| {
            let mut b = PartBuilder::new(node);
            if node.pods_with_required_anti_affinity > 0 {
                for existing in &node.pods {
                    for t in required_anti_affinity(existing) {
                        if term_matches(t, existing, pod, ns) {
                            b.add(&t.topology_key, 1, 1);
                        }
                    }
                }
            }
            b.part
        },
    )
}

/// PreScore: existing pods' required affinity (`hard_weight`), preferred affinity and
/// preferred anti-affinity (negative) terms the pod matches.
pub(super) fn existing_score(
    memo: &AffinityCounts,
    nodes: &NodeCache,
    pod: &PodInfo,
    hard_weight: i64,
) -> Arc<TopologyCounts> {
    let ns = &nodes.namespaces;
    ask(
        memo,
        nodes,
        |q| matches!(q, Question::ExistingScore(t, w) if *w == hard_weight && t.answers(pod, ns)),
        || Question::ExistingScore(Target::new(pod, ns), hard_weight),
        |node| {
            let mut b = PartBuilder::new(node);
            if node.pods_with_affinity == 0 {
                return b.part;
            }
            for existing in node.pods.iter().filter(|e| has_pod_affinity(e)) {
                if hard_weight > 0 {
                    for t in required_affinity(existing) {
                        if term_matches(t, existing, pod, ns) {
                            b.add(&t.topology_key, hard_weight, 1);
                        }
                    }
                }
                for w in preferred_affinity(existing) {
                    let t = &w.pod_affinity_term;
                    if term_matches(t, existing, pod, ns) {
                        b.add(&t.topology_key, i64::from(w.weight), 1);
                    }
                }
                for w in preferred_anti_affinity(existing) {
                    let t = &w.pod_affinity_term;
                    if term_matches(t, existing, pod, ns) {
                        b.add(&t.topology_key, -i64::from(w.weight), 1);
                    }
                }
            }
            b.part
        },
    )
}
