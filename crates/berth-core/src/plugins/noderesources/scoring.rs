//! The NodeResourcesFit scorers (kube-scheduler's `resourceAllocationScorer` with the
//! LeastAllocated, MostAllocated and RequestedToCapacityRatio functions), allocation-free
//! per node.

use smallvec::SmallVec;

use crate::cache::Cluster;
use crate::framework::plugin::score_each;
use crate::framework::MAX_NODE_SCORE;
use crate::model::node::{NodeIdx, NodeInfo};
use crate::model::pod::PodInfo;
use crate::resources::{ResourceId, ResourceName, ResourceNames, Resources};

use super::args::{ScoringStrategy, ScoringStrategyType, UtilizationShapePoint};

/// kube-scheduler's `config.MaxCustomPriorityScore`: shape scores are given out of 10.
const MAX_CUSTOM_PRIORITY_SCORE: i64 = 10;
/// Utilisation is a percentage.
const MAX_UTILIZATION: i64 = 100;

/// Whether `id` is a scalar resource (anything but cpu, memory and ephemeral storage):
/// kube-scheduler leaves a scalar resource out of the score when the pod does not request it.
pub(crate) fn is_scalar(id: ResourceId) -> bool {
    id != ResourceId::CPU && id != ResourceId::MEMORY && id != ResourceId::EPHEMERAL_STORAGE
}

/// One resource that counts towards a pod's score ([`Scorer::terms`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Term {
    id: ResourceId,
    weight: i64,
    /// The pod's request.
    want: i64,
    /// Whether the node's used amount is its scoring requests (cpu, memory).
    non_zero: bool,
}

impl Term {
    /// What the node would have requested with the pod on it, and its allocatable, or
    /// `None` when the node does not have the resource (it is left out).
    #[inline(always)]
    fn requested(&self, node: &NodeInfo, back: Option<&Resources>) -> Option<(i64, i64)> {
        let id = self.id;
        let alloc = node.allocatable[id];
        if alloc == 0 {
            return None;
        }
        let mut used = if self.non_zero {
            node.scoring_used()[id]
        } else {
            node.used()[id]
        };
        if let Some(b) = back {
            used = used.saturating_sub(b[id]).max(0);
        }
        Some((used.saturating_add(self.want), alloc))
    }
}

/// The weighted mean of `score(requested, allocatable)` over the resources the node has.
#[inline(always)]
fn weighted(
    terms: &[Term],
    node: &NodeInfo,
    back: Option<&Resources>,
    score: impl Fn(i64, i64) -> i64,
) -> i64 {
    let mut total = 0i64;
    let mut weights = 0i64;
    for t in terms {
        if let Some((req, alloc)) = t.requested(node, back) {
            total += score(req, alloc) * t.weight;
            weights += t.weight;
        }
    }
    if weights == 0 {
        0
    } else {
        total / weights
    }
}

/// The terms of one pod: configured resources are few, so they stay on the stack.
pub(crate) type Terms = SmallVec<[Term; 4]>;

/// A configured scorer.
#[derive(Debug, Clone)]
pub(crate) struct Scorer {
    kind: ScoringStrategyType,
    /// (resource name, weight), weights defaulted; names resolved once at build time.
    resources: Vec<(ResourceName, i64)>,
    /// Shape scaled to `0..=MAX_NODE_SCORE` scores.
    shape: Vec<UtilizationShapePoint>,
}

impl Scorer {
    pub(crate) fn new(s: &ScoringStrategy) -> Self {
        let shape = s
            .requested_to_capacity_ratio
            .as_ref()
            .map(|r| {
                r.shape
                    .iter()
                    .map(|p| UtilizationShapePoint {
                        utilization: p.utilization,
                        score: p.score * (MAX_NODE_SCORE / MAX_CUSTOM_PRIORITY_SCORE),
                    })
                    .collect()
            })
            .unwrap_or_default();
        Self {
            kind: s.type_,
            resources: s
                .resources
                .iter()
                .map(|r| {
                    let w = if r.weight == 0 { 1 } else { r.weight };
                    (ResourceName::new(r.name.clone()), w)
                })
                .collect(),
            shape,
        }
    }

    /// The resources that count for `pod`, worked out once per cycle: each configured
    /// resource the cluster knows, with its weight and the pod's request (the scoring
    /// request, with the 100m/200Mi defaults, for cpu and memory), leaving out scalar
    /// resources the pod does not request (`calculateResourceAllocatableRequest` returns
    /// (0, 0) for them).
    pub(crate) fn terms(&self, names: &ResourceNames, pod: &PodInfo) -> Terms {
        let mut out = Terms::new();
        for (name, w) in &self.resources {
            let Some(id) = name.id(names) else { continue };
            let non_zero = id == ResourceId::CPU || id == ResourceId::MEMORY;
            let want = if non_zero {
                pod.non_zero[id]
            } else {
                pod.requests[id]
            };
            if want == 0 && is_scalar(id) {
                continue;
            }
            out.push(Term {
                id,
                weight: *w,
                want,
                non_zero,
            });
        }
        out
    }

    /// Scores `node` for `pod`. What the node has requested counts scoring requests
    /// (100m/200Mi defaults) for cpu and memory, and everything reservations hold there,
    /// minus `back`, what the pod's own reservations give back to it.
    pub(crate) fn score(
        &self,
        names: &ResourceNames,
        pod: &PodInfo,
        node: &NodeInfo,
        back: Option<&Resources>,
    ) -> i64 {
        self.score_terms(&self.terms(names, pod), node, back)
    }

    /// [`Scorer::score`] with the pod's [`Scorer::terms`] already worked out.
    #[inline]
    pub(crate) fn score_terms(
        &self,
        terms: &[Term],
        node: &NodeInfo,
        back: Option<&Resources>,
    ) -> i64 {
        match self.kind {
            // One loop per function, so the strategy is not matched per resource.
            ScoringStrategyType::LeastAllocated => weighted(terms, node, back, least),
            ScoringStrategyType::MostAllocated => weighted(terms, node, back, most),
            ScoringStrategyType::RequestedToCapacityRatio => {
                let mut total = 0i64;
                let mut weights = 0i64;
                for t in terms {
                    let Some((req, alloc)) = t.requested(node, back) else {
                        continue;
                    };
                    let s = self.ratio(req, alloc);
                    // Only resources that score count towards the weights here.
                    if s <= 0 {
                        continue;
                    }
                    total += s * t.weight;
                    weights += t.weight;
                }
                if weights == 0 {
                    return 0;
                }
                (total as f64 / weights as f64).round() as i64
            }
        }
    }

    /// [`Scorer::score_terms`] for each of `nodes` (appended to `out`), with the strategy
    /// matched once rather than per node; `back(node)` is what the pod's reservations give
    /// back there.
    #[inline]
    pub(crate) fn score_nodes<'a>(
        &self,
        terms: &[Term],
        cx: &Cluster,
        nodes: &[NodeIdx],
        out: &mut Vec<i64>,
        back: impl Fn(NodeIdx) -> Option<&'a Resources>,
    ) {
        match (self.kind, terms) {
            // The default two resources as an array: the loop over them unrolls.
            (ScoringStrategyType::LeastAllocated, &[a, b]) => {
                score_each(cx, nodes, out, |n| weighted(&[a, b], n, back(n.idx), least))
            }
            (ScoringStrategyType::LeastAllocated, _) => {
                score_each(cx, nodes, out, |n| weighted(terms, n, back(n.idx), least))
            }
            (ScoringStrategyType::MostAllocated, _) => {
                score_each(cx, nodes, out, |n| weighted(terms, n, back(n.idx), most))
            }
            (ScoringStrategyType::RequestedToCapacityRatio, _) => {
                score_each(cx, nodes, out, |n| self.score_terms(terms, n, back(n.idx)))
            }
        }
    }

    /// [`Scorer::score_nodes`] when nothing is given back on any node: the default
    /// (LeastAllocated over cpu and memory) takes [`least_two`].
    #[inline]
    pub(crate) fn score_nodes_plain(
        &self,
        terms: &[Term],
        cx: &Cluster,
        nodes: &[NodeIdx],
        out: &mut Vec<i64>,
    ) {
        match (self.kind, terms) {
            (ScoringStrategyType::LeastAllocated, &[a, b]) if a.non_zero && b.non_zero => {
                least_two(a, b, cx, nodes, out)
            }
            _ => self.score_nodes(terms, cx, nodes, out, |_| None),
        }
    }

    fn ratio(&self, req: i64, alloc: i64) -> i64 {
        if alloc == 0 || req > alloc {
            return piecewise(&self.shape, MAX_UTILIZATION);
        }
        piecewise(&self.shape, req.wrapping_mul(MAX_UTILIZATION) / alloc)
    }
}

/// LeastAllocated over two scoring-request terms with nothing given back: kube-scheduler's
/// default, and most of a cycle's scoring. The terms' fields are copied into locals, so the
/// loop keeps them in registers instead of reading them per node; the weighted mean is
/// worked out as cheaply as the weights allow ([`Mean`]); and the divisions are unsigned,
/// which needs neither a sign extension nor the `i64::MIN / -1` check. That holds for
/// capacities in `1..=LIMIT` and requests in `0..=capacity`, where nothing overflows and
/// truncation is the same signed or not. Any other node (a missing resource, a request over
/// capacity, an absurd quantity) is scored by [`weighted`], so every score is exactly what
/// [`Scorer::score_terms`] gives.
fn least_two(a: Term, b: Term, cx: &Cluster, nodes: &[NodeIdx], out: &mut Vec<i64>) {
    let terms = [a, b];
    if a.want < 0 || b.want < 0 {
        // Never from a valid pod; the wrapping sums below need requests of at least 0.
        return score_each(cx, nodes, out, |n| weighted(&terms, n, None, least));
    }
    // Weights are validated into (0, 100]; the sum is positive.
    let (wa, wb) = (a.weight as u64, b.weight as u64);
    if wa == wb {
        least_two_with(terms, cx, nodes, out, |sa, sb| (sa + sb) / 2);
    } else if (wa + wb).is_power_of_two() {
        let shift = (wa + wb).trailing_zeros();
        least_two_with(terms, cx, nodes, out, move |sa, sb| {
            (sa * wa + sb * wb) >> shift
        });
    } else {
        least_two_with(terms, cx, nodes, out, move |sa, sb| {
            (sa * wa + sb * wb) / (wa + wb)
        });
    }
}

/// The weighted mean of two scores, `(sa * wa + sb * wb) / (wa + wb)` truncated: with equal
/// weights `(sa + sb) / 2` (the same number), with a power-of-two sum a shift.
trait Mean: Fn(u64, u64) -> u64 + Copy {}
impl<F: Fn(u64, u64) -> u64 + Copy> Mean for F {}

/// [`least_two`]'s loop, for one way of taking the mean.
#[inline(always)]
fn least_two_with(
    terms: [Term; 2],
    cx: &Cluster,
    nodes: &[NodeIdx],
    out: &mut Vec<i64>,
    mean: impl Mean,
) {
    /// The largest capacity whose `* MAX_NODE_SCORE` fits an `i64`.
    const LIMIT: u64 = (i64::MAX / MAX_NODE_SCORE) as u64;
    let [a, b] = terms;
    let (ia, ib, qa, qb) = (a.id, b.id, a.want, b.want);
    score_each(cx, nodes, out, move |n| {
        let (ca, cb) = (n.allocatable[ia], n.allocatable[ib]);
        let used = n.scoring_used();
        // Requests are at least 0, so a sum that overflows wraps negative, and the range
        // check below sends the node to the general path, which saturates.
        let (ra, rb) = (used[ia].wrapping_add(qa), used[ib].wrapping_add(qb));
        // One unsigned comparison each: a negative value wraps above the bound.
        let in_range = (ca as u64).wrapping_sub(1) < LIMIT
            && (cb as u64).wrapping_sub(1) < LIMIT
            && (ra as u64) <= ca as u64
            && (rb as u64) <= cb as u64;
        if !in_range {
            return weighted(&terms, n, None, least);
        }
        let (ca, cb) = (ca as u64, cb as u64);
        let sa = (ca - ra as u64) * MAX_NODE_SCORE as u64 / ca;
        let sb = (cb - rb as u64) * MAX_NODE_SCORE as u64 / cb;
        mean(sa, sb) as i64
    });
}

/// `(capacity - requested) * 100 / capacity`, 0 when over capacity.
///
/// The product wraps past `i64` (a capacity over about 92 PB, in bytes), as Go's `int64`
/// does in kube-scheduler's same expression: the score is then kube's, and a debug build
/// does not panic on a node object with an absurd quantity.
#[inline(always)]
pub(crate) fn least(requested: i64, capacity: i64) -> i64 {
    if capacity == 0 || requested > capacity {
        return 0;
    }
    capacity
        .wrapping_sub(requested)
        .wrapping_mul(MAX_NODE_SCORE)
        / capacity
}

/// `requested * 100 / capacity`, with requested capped at capacity (wrapping as
/// [`least`]).
#[inline(always)]
pub(crate) fn most(requested: i64, capacity: i64) -> i64 {
    if capacity == 0 {
        return 0;
    }
    requested.min(capacity).wrapping_mul(MAX_NODE_SCORE) / capacity
}

/// kube-scheduler's `helper.BuildBrokenLinearFunction`.
pub(crate) fn piecewise(shape: &[UtilizationShapePoint], p: i64) -> i64 {
    for i in 0..shape.len() {
        if p <= shape[i].utilization {
            if i == 0 {
                return shape[0].score;
            }
            let (a, b) = (shape[i - 1], shape[i]);
            return a.score
                + (b.score - a.score) * (p - a.utilization) / (b.utilization - a.utilization);
        }
    }
    shape.last().map_or(0, |s| s.score)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pt(utilization: i64, score: i64) -> UtilizationShapePoint {
        UtilizationShapePoint { utilization, score }
    }

    #[test]
    fn broken_linear_function_matches_kubes_helper() {
        // helper_test.go's shape: (10, 1), (30, 5), (70, 2).
        let shape = [pt(10, 1), pt(30, 5), pt(70, 2)];
        let cases = [
            (0, 1),
            (10, 1),
            (15, 2),
            (20, 3),
            (25, 4),
            (30, 5),
            (50, 4),
            (70, 2),
            (80, 2),
        ];
        for (p, want) in cases {
            assert_eq!(piecewise(&shape, p), want, "p={p}");
        }
        assert_eq!(piecewise(&[], 50), 0);
    }

    #[test]
    fn least_and_most_requested_scores_clamp_at_capacity() {
        assert_eq!(least(0, 4000), 100);
        assert_eq!(least(3000, 4000), 25);
        assert_eq!(least(5000, 4000), 0);
        assert_eq!(least(1, 0), 0);
        assert_eq!(most(3000, 4000), 75);
        assert_eq!(most(5000, 4000), 100);
        assert_eq!(most(1, 0), 0);
    }
}
