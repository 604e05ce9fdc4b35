//! The NodeResourcesFit scorers, allocation-free per node.

use crate::framework::MAX_NODE_SCORE;
use crate::resources::{ResourceId, ResourceNames, Resources};

use super::args::{ScoringStrategy, ScoringStrategyType, UtilizationShapePoint};

/// A configured scorer.
#[derive(Debug, Clone)]
pub(crate) struct Scorer {
    kind: ScoringStrategyType,
    /// (resource name, weight).
    resources: Vec<(String, i64)>,
    /// Shape scaled to 0..=100 scores.
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
                        score: p.score * (MAX_NODE_SCORE / 10),
                    })
                    .collect()
            })
            .unwrap_or_default();
        Self {
            kind: s.type_,
            resources: s
                .resources
                .iter()
                .map(|r| (r.name.clone(), if r.weight == 0 { 1 } else { r.weight }))
                .collect(),
            shape,
        }
    }

    /// Scores a node given what is already requested there (without the pod).
    /// `pod_non_zero` is used for cpu and memory, `pod_requests` for the rest.
    pub(crate) fn score(
        &self,
        names: &ResourceNames,
        pod_non_zero: &Resources,
        pod_requests: &Resources,
        requested: &Resources,
        allocatable: &Resources,
    ) -> i64 {
        let mut total = 0i64;
        let mut weights = 0i64;
        for (name, w) in &self.resources {
            let Some(id) = names.get(name) else { continue };
            let alloc = allocatable[id];
            let pod = if id == ResourceId::CPU || id == ResourceId::MEMORY {
                pod_non_zero[id]
            } else {
                pod_requests[id]
            };
            let req = requested[id].saturating_add(pod);
            if alloc == 0 {
                // kube-scheduler skips resources the node does not have.
                continue;
            }
            let s = match self.kind {
                ScoringStrategyType::LeastAllocated => least(req, alloc),
                ScoringStrategyType::MostAllocated => most(req, alloc),
                ScoringStrategyType::RequestedToCapacityRatio => self.ratio(req, alloc),
            };
            total += s * w;
            weights += w;
        }
        if weights == 0 {
            return 0;
        }
        total / weights
    }

    fn ratio(&self, req: i64, alloc: i64) -> i64 {
        let util = if req > alloc {
            MAX_NODE_SCORE
        } else {
            req * MAX_NODE_SCORE / alloc
        };
        piecewise(&self.shape, util)
    }
}

/// `(capacity - requested) * 100 / capacity`, 0 when over capacity.
pub(crate) fn least(requested: i64, capacity: i64) -> i64 {
    if capacity == 0 || requested > capacity {
        return 0;
    }
    (capacity - requested) * MAX_NODE_SCORE / capacity
}

/// `requested * 100 / capacity`, capped at 100.
pub(crate) fn most(requested: i64, capacity: i64) -> i64 {
    if capacity == 0 {
        return 0;
    }
    requested.min(capacity) * MAX_NODE_SCORE / capacity
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
