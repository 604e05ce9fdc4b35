//! NodeResourceTopologyMatch Score: prefer nodes by how the pod fits their NUMA zones.
//!
//! Behaviour of the upstream plugin (all scores in `0..=100`):
//! - Non-Guaranteed pods score 100 everywhere.
//! - `MostAllocated`, `LeastAllocated`, `BalancedAllocation` apply only to `single-numa-node`
//!   nodes (0 otherwise). Each zone is scored against the request, using the zone's
//!   **available** amounts as the capacity and `Quantity.Value()` integers (CPU rounded up to
//!   whole cores); the node score is the **lowest non-zero** zone score (0 if none fits).
//!   Pod scope scores the effective request; container scope scores every container
//!   (`initContainers ++ containers`) on its own and takes the truncated mean.
//!   - LeastAllocated per resource: `(avail - req) * 100 / avail`, 0 if `avail == 0` or
//!     `req > avail`; weighted mean over **all** requested resources (weights from the
//!     strategy, default and minimum 1).
//!   - MostAllocated per resource: `req * 100 / avail`, same guards and weighting.
//!   - BalancedAllocation: fractions `req / avail` (1 when avail is 0), any fraction above 1
//!     scores 0, else `(1 - sample variance) * 100`; weights unused.
//! - `LeastNUMANodes` applies to every policy: the fewest NUMA zones whose combined
//!   availability fits the request (zones must all list every requested resource), preferring
//!   the minimal average distance; score `100 - n * (100 / maxNUMANodes)`, plus half a step
//!   when the chosen combination has the minimal distance among all combinations of that size.
//!   Pods (pod scope) or containers requesting only resources no zone lists are ignored (100
//!   if nothing needs NUMA); no fit scores 0.
//!
//! Deviations, all in cases where the Go code is undefined or panics: an empty request scores
//! 0 (Go divides by zero); BalancedAllocation over a single resource has variance 0 (Go gets
//! NaN); LeastNUMANodes subtracts from the zones with the chosen NUMA ids (Go indexes the zone
//! list by NUMA id); results are clamped to `0..=100`.

use smallvec::SmallVec;

use super::types::{
    is_cpu, is_numa_affine, whole_amount, whole_value, NumaZones, PodNumaRequest, QosClass,
    ResourceName, Resources, TmPolicy, TmScope, TopologyManagerConfig,
};

/// Highest node score.
pub const MAX_NODE_SCORE: i64 = 100;
/// Lowest node score.
pub const MIN_NODE_SCORE: i64 = 0;
/// ACPI SLIT "unknown distance", used for missing costs.
pub const MAX_DISTANCE: i64 = 255;

/// `scoringStrategy.type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum ScoringStrategyType {
    /// Prefer the fullest fitting zone.
    MostAllocated,
    /// Prefer the emptiest fitting zone (default).
    #[default]
    LeastAllocated,
    /// Prefer zones where the request is proportionate across resources.
    BalancedAllocation,
    /// Prefer nodes where the pod needs the fewest NUMA zones.
    LeastNUMANodes,
}

impl ScoringStrategyType {
    /// Parses the configuration name.
    pub fn parse(value: &str) -> Option<Self> {
        Some(match value {
            "MostAllocated" => Self::MostAllocated,
            "LeastAllocated" => Self::LeastAllocated,
            "BalancedAllocation" => Self::BalancedAllocation,
            "LeastNUMANodes" => Self::LeastNUMANodes,
            _ => return None,
        })
    }

    /// The configuration name.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::MostAllocated => "MostAllocated",
            Self::LeastAllocated => "LeastAllocated",
            Self::BalancedAllocation => "BalancedAllocation",
            Self::LeastNUMANodes => "LeastNUMANodes",
        }
    }
}

/// A scoring strategy with its resource weights.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ScoringStrategy {
    /// The strategy.
    pub kind: ScoringStrategyType,
    /// Resource weights; unlisted resources and weights below 1 weigh 1.
    pub weights: SmallVec<[(ResourceName, i64); 4]>,
}

impl Default for ScoringStrategy {
    fn default() -> Self {
        Self::new(ScoringStrategyType::LeastAllocated)
    }
}

impl ScoringStrategy {
    /// The strategy with the default weights (`cpu: 1`, `memory: 1`).
    pub fn new(kind: ScoringStrategyType) -> Self {
        let mut weights = SmallVec::new();
        weights.push((ResourceName::new("cpu"), 1));
        weights.push((ResourceName::new("memory"), 1));
        Self { kind, weights }
    }

    /// The weight of `resource`.
    pub fn weight(&self, resource: &str) -> i64 {
        match self
            .weights
            .iter()
            .find(|(n, _)| super::types::same_name(n.as_str(), resource))
        {
            Some((_, w)) if *w >= 1 => *w,
            _ => 1,
        }
    }
}

/// Scores one node for a pod. See the module documentation for the rules.
pub fn score(
    strategy: &ScoringStrategy,
    tm: &TopologyManagerConfig,
    zones: &NumaZones,
    pod: &PodNumaRequest,
) -> i64 {
    if pod.qos() != QosClass::Guaranteed {
        return MAX_NODE_SCORE;
    }
    let s = if strategy.kind == ScoringStrategyType::LeastNUMANodes {
        match tm.scope {
            TmScope::Pod => least_numa_pod_scope(zones, pod, tm.max_numa_nodes),
            TmScope::Container => least_numa_container_scope(zones, pod, tm.max_numa_nodes),
        }
    } else if tm.policy != TmPolicy::SingleNumaNode {
        0
    } else {
        match tm.scope {
            TmScope::Pod => node_score(strategy, zones, pod.effective()),
            TmScope::Container => {
                let mut sum = 0f64;
                let mut n = 0usize;
                let all = pod
                    .init_containers()
                    .iter()
                    .map(|ic| &ic.requests)
                    .chain(pod.containers().iter());
                for c in all {
                    sum += node_score(strategy, zones, c) as f64;
                    n += 1;
                }
                if n == 0 {
                    0
                } else {
                    (sum / n as f64) as i64
                }
            }
        }
    };
    s.clamp(MIN_NODE_SCORE, MAX_NODE_SCORE)
}

/// Lowest non-zero zone score (0 if no zone scores). The request's resources are resolved
/// against the node's zones once (their slot, weight, whether cpu), not per zone: those
/// string comparisons were most of a NUMA Score.
fn node_score(strategy: &ScoringStrategy, zones: &NumaZones, request: &Resources) -> i64 {
    let terms = ZoneTerms::new(strategy, zones, request);
    let mut min = 0i64;
    for pos in 0..zones.len() {
        let s = terms.score(strategy, zones, pos, request);
        if min == 0 || (s != 0 && s < min) {
            min = s;
        }
    }
    min
}

/// One requested resource, resolved against a node's zones.
#[derive(Debug, Clone, Copy)]
struct ZoneTerm {
    /// The resource's slot in the zones' lists, if any zone lists it.
    slot: Option<usize>,
    req: i64,
    /// `req` in whole units ([`whole_amount`]), the same in every zone.
    req_whole: i64,
    cpu: bool,
    weight: i64,
}

/// A request resolved against a node's zones, for [`zone_score`] on each zone.
struct ZoneTerms(SmallVec<[ZoneTerm; 4]>);

impl ZoneTerms {
    fn new(strategy: &ScoringStrategy, zones: &NumaZones, request: &Resources) -> Self {
        Self(
            request
                .iter()
                .map(|(name, req)| {
                    let n = name.as_str();
                    ZoneTerm {
                        slot: zones.resource_index(n),
                        req,
                        req_whole: whole_amount(is_cpu(n), req),
                        cpu: is_cpu(n),
                        weight: strategy.weight(n),
                    }
                })
                .collect(),
        )
    }

    /// [`zone_score`] of the zone at `pos`.
    fn score(
        &self,
        strategy: &ScoringStrategy,
        zones: &NumaZones,
        pos: usize,
        request: &Resources,
    ) -> i64 {
        let most = match strategy.kind {
            ScoringStrategyType::LeastAllocated => false,
            ScoringStrategyType::MostAllocated => true,
            ScoringStrategyType::BalancedAllocation => {
                return balanced_allocation(zones, pos, request)
            }
            ScoringStrategyType::LeastNUMANodes => return 0,
        };
        self.weighted_narrow(most, zones, pos)
            .unwrap_or_else(|| self.weighted_wide(most, zones, pos))
    }

    /// The weighted mean in 64-bit arithmetic, `None` if any step would overflow (then
    /// [`ZoneTerms::weighted_wide`] gives the exact answer). Real quantities and weights
    /// never come near: this is the path every zone of every node takes, with no 128-bit
    /// multiplication or division.
    #[inline]
    fn weighted_narrow(&self, most: bool, zones: &NumaZones, pos: usize) -> Option<i64> {
        let mut total: i64 = 0;
        let mut weights: i64 = 0;
        for t in &self.0 {
            let avail = t.slot.and_then(|i| zones.available_at(pos, i)).unwrap_or(0);
            let s = allocated_narrow(most, t.cpu, t.req, t.req_whole, avail)?;
            total = total.checked_add(s.checked_mul(t.weight)?)?;
            weights = weights.checked_add(t.weight)?;
        }
        Some(if weights == 0 {
            0
        } else if total >= 0 && weights > 0 && weights & (weights - 1) == 0 {
            // A power-of-two weight sum (the default `cpu: 1, memory: 1` sums to 2): a
            // shift, the same as truncating division of a non-negative total, where a
            // division per zone per node was most of a zone score.
            total >> weights.trailing_zeros()
        } else {
            // Both non-negative here unless a request was negative; `checked_div` is
            // `None` only for `i64::MIN / -1`, which the wide path answers.
            total.checked_div(weights)?
        })
    }

    /// The weighted mean with 128-bit sums, exact for any amounts and weights.
    fn weighted_wide(&self, most: bool, zones: &NumaZones, pos: usize) -> i64 {
        let mut total: i128 = 0;
        let mut weights: i128 = 0;
        for t in &self.0 {
            let avail = t.slot.and_then(|i| zones.available_at(pos, i)).unwrap_or(0);
            let s = allocated(most, t.cpu, t.req, avail);
            total += i128::from(s) * i128::from(t.weight);
            weights += i128::from(t.weight);
        }
        if weights == 0 {
            0
        } else {
            div_i128(total, weights)
        }
    }
}

/// Available amount of `name` in the zone at `pos` (0 when the zone does not list it).
fn zone_available(zones: &NumaZones, pos: usize, name: &str) -> i64 {
    zones
        .resource_index(name)
        .and_then(|idx| zones.available_at(pos, idx))
        .unwrap_or(0)
}

/// One zone's score for `request` with the strategy (not LeastNUMANodes).
pub fn zone_score(
    strategy: &ScoringStrategy,
    zones: &NumaZones,
    pos: usize,
    request: &Resources,
) -> i64 {
    ZoneTerms::new(strategy, zones, request).score(strategy, zones, pos, request)
}

/// LeastAllocated (`most` false) or MostAllocated of one resource in one zone: 0 when the
/// zone lacks room; cpu in whole cores.
#[inline]
fn allocated(most: bool, cpu: bool, req: i64, avail: i64) -> i64 {
    if avail == 0 || req > avail {
        return 0;
    }
    let a = i128::from(whole_amount(cpu, avail));
    let r = i128::from(whole_amount(cpu, req));
    if a <= 0 {
        return 0;
    }
    let used = if most { r } else { a - r };
    div_i128(used * i128::from(MAX_NODE_SCORE), a)
}

/// [`allocated`] in 64-bit arithmetic, `None` where a step would overflow. `req_whole` is
/// `whole_amount(cpu, req)`, worked out once per node, not per zone.
#[inline]
fn allocated_narrow(most: bool, cpu: bool, req: i64, req_whole: i64, avail: i64) -> Option<i64> {
    if avail == 0 || req > avail {
        return Some(0);
    }
    let a = whole_amount_of(cpu, avail);
    let r = req_whole;
    if a <= 0 {
        return Some(0);
    }
    let used = if most { r } else { a.checked_sub(r)? };
    // `a > 0`, so the division cannot overflow.
    Some(used.checked_mul(MAX_NODE_SCORE)? / a)
}

/// [`whole_amount`], with one division by a constant for a non-negative amount (Euclidean
/// and truncating division agree there) where the Euclidean pair took two and sign fixups.
#[inline]
fn whole_amount_of(cpu: bool, amount: i64) -> i64 {
    if cpu && amount >= 0 {
        let q = amount / 1000;
        q + i64::from(amount - q * 1000 != 0)
    } else {
        whole_amount(cpu, amount)
    }
}

/// `n / d` truncated to `i64` as `(n / d) as i64` would, dividing in 64 bits when both fit
/// (always, for real quantities): a 128-bit division is a library call (`__divti3`), an
/// eighth of a NUMA cycle when it ran per zone per node. The wide products stay exact.
#[inline]
fn div_i128(n: i128, d: i128) -> i64 {
    match (i64::try_from(n), i64::try_from(d)) {
        (Ok(n), Ok(d)) if d != 0 && !(n == i64::MIN && d == -1) => n / d,
        _ => (n / d) as i64,
    }
}

fn balanced_allocation(zones: &NumaZones, pos: usize, request: &Resources) -> i64 {
    let mut fractions: SmallVec<[f64; 8]> = SmallVec::new();
    for (name, req) in request.iter() {
        let n = name.as_str();
        let cap = whole_value(n, zone_available(zones, pos, n));
        let f = if cap == 0 {
            1.0
        } else {
            whole_value(n, req) as f64 / cap as f64
        };
        if f > 1.0 {
            return 0;
        }
        fractions.push(f);
    }
    if fractions.is_empty() {
        return 0;
    }
    let variance = sample_variance(&fractions);
    ((1.0 - variance) * MAX_NODE_SCORE as f64) as i64
}

/// gonum `stat.Variance(x, nil)`: corrected two-pass sample variance (N−1 denominator); 0 for
/// a single value (where gonum yields NaN).
fn sample_variance(x: &[f64]) -> f64 {
    if x.len() < 2 {
        return 0.0;
    }
    let n = x.len() as f64;
    let mean = x.iter().sum::<f64>() / n;
    let mut ss = 0.0;
    let mut compensation = 0.0;
    for v in x {
        let d = v - mean;
        ss += d * d;
        compensation += d;
    }
    (ss - compensation * compensation / n) / (n - 1.0)
}

/// Whether no zone lists any of the requested resources.
fn only_non_numa(zones: &NumaZones, request: &Resources) -> bool {
    !request.iter().any(|(n, _)| zones.has_resource(n.as_str()))
}

fn normalize_least_numa(count: usize, is_min_distance: bool, max_numa_nodes: u32) -> i64 {
    let step = MAX_NODE_SCORE / i64::from(max_numa_nodes.max(1));
    let score = MAX_NODE_SCORE - (count as i64).saturating_mul(step);
    if is_min_distance {
        score + step / 2
    } else {
        score
    }
}

fn least_numa_pod_scope(zones: &NumaZones, pod: &PodNumaRequest, max_numa_nodes: u32) -> i64 {
    let request = pod.effective();
    if only_non_numa(zones, request) {
        return MAX_NODE_SCORE;
    }
    let state = ZoneState::new(zones);
    match state.numa_nodes_required(pod.qos(), request) {
        Some(found) => normalize_least_numa(found.count, found.is_min_distance, max_numa_nodes),
        None => MIN_NODE_SCORE,
    }
}

fn least_numa_container_scope(zones: &NumaZones, pod: &PodNumaRequest, max_numa_nodes: u32) -> i64 {
    let mut state = ZoneState::new(zones);
    let mut max_count = 0usize;
    let mut all_min = true;
    let all = pod
        .init_containers()
        .iter()
        .map(|ic| &ic.requests)
        .chain(pod.containers().iter());
    for c in all {
        if only_non_numa(zones, c) {
            continue;
        }
        let Some(found) = state.numa_nodes_required(pod.qos(), c) else {
            return MIN_NODE_SCORE;
        };
        all_min &= found.is_min_distance;
        max_count = max_count.max(found.count);
        state.subtract_greedily(c, found.positions);
    }
    if max_count == 0 {
        return MAX_NODE_SCORE;
    }
    normalize_least_numa(max_count, all_min, max_numa_nodes)
}

struct Found {
    /// Bitmask of zone positions.
    positions: u64,
    count: usize,
    is_min_distance: bool,
}

/// Mutable copy of the zones' availability (inline for small nodes).
struct ZoneState<'a> {
    zones: &'a NumaZones,
    avail: SmallVec<[Option<i64>; 32]>,
}

impl<'a> ZoneState<'a> {
    fn new(zones: &'a NumaZones) -> Self {
        let nres = zones.resource_names().len();
        let mut avail = SmallVec::with_capacity(zones.flat_len());
        for pos in 0..zones.len() {
            for idx in 0..nres {
                avail.push(zones.available_at(pos, idx));
            }
        }
        Self { zones, avail }
    }

    fn get(&self, pos: usize, idx: usize) -> Option<i64> {
        self.avail
            .get(pos * self.zones.resource_names().len() + idx)
            .copied()
            .flatten()
    }

    fn avg_distance(&self, combo: &[usize]) -> f32 {
        if combo.is_empty() {
            return MAX_DISTANCE as f32;
        }
        let zs = self.zones.zones();
        let mut accu: i64 = 0;
        for &a in combo {
            for &b in combo {
                let cost = zs[a].cost_to(zs[b].id).unwrap_or(MAX_DISTANCE);
                accu = accu.saturating_add(cost);
            }
        }
        accu as f32 / (combo.len() * combo.len()) as f32
    }

    /// Every zone of the combination lists every requested resource.
    fn is_valid(&self, request: &Resources, combo: &[usize]) -> bool {
        combo.iter().all(|&pos| {
            request.iter().all(|(n, _)| {
                self.zones
                    .resource_index(n.as_str())
                    .is_some_and(|idx| self.get(pos, idx).is_some())
            })
        })
    }

    fn fits(&self, qos: QosClass, request: &Resources, combo: &[usize]) -> bool {
        request.iter().all(|(name, amount)| {
            if amount == 0 {
                return true;
            }
            if qos != QosClass::Guaranteed && is_numa_affine(name.as_str()) {
                return true;
            }
            let combined = self
                .zones
                .resource_index(name.as_str())
                .map_or(0i64, |idx| {
                    combo
                        .iter()
                        .map(|&pos| self.get(pos, idx).unwrap_or(0))
                        .fold(0i64, i64::saturating_add)
                });
            combined >= amount
        })
    }

    /// The fewest zones (by position) whose combined availability fits `request`.
    fn numa_nodes_required(&self, qos: QosClass, request: &Resources) -> Option<Found> {
        let n = self.zones.len().min(64);
        for k in 1..=n {
            let mut min_avg = MAX_DISTANCE as f32;
            for_each_combination(n, k, |combo| {
                let d = self.avg_distance(combo);
                if d < min_avg {
                    min_avg = d;
                }
                true
            });
            let mut best: Option<u64> = None;
            let mut best_distance = 256f32;
            let mut exact: Option<u64> = None;
            for_each_combination(n, k, |combo| {
                if !self.is_valid(request, combo) || !self.fits(qos, request, combo) {
                    return true;
                }
                let d = self.avg_distance(combo);
                let mask = combo.iter().fold(0u64, |m, &p| m | (1u64 << p));
                if d == min_avg {
                    exact = Some(mask);
                    return false;
                }
                if d < best_distance {
                    best_distance = d;
                    best = Some(mask);
                }
                true
            });
            if let Some(positions) = exact {
                return Some(Found {
                    positions,
                    count: k,
                    is_min_distance: true,
                });
            }
            if let Some(positions) = best {
                return Some(Found {
                    positions,
                    count: k,
                    is_min_distance: false,
                });
            }
        }
        None
    }

    /// Takes `request` from the chosen zones in ascending NUMA id order, greedily.
    fn subtract_greedily(&mut self, request: &Resources, positions: u64) {
        let nres = self.zones.resource_names().len();
        let mut order: SmallVec<[usize; 8]> = (0..self.zones.len())
            .filter(|&p| p < 64 && positions & (1u64 << p) != 0)
            .collect();
        order.sort_by_key(|&p| self.zones.zones()[p].id);
        for (name, amount) in request.iter() {
            let Some(idx) = self.zones.resource_index(name.as_str()) else {
                continue;
            };
            let mut remaining = amount;
            for &pos in &order {
                if remaining <= 0 {
                    break;
                }
                if let Some(Some(avail)) = self.avail.get_mut(pos * nres + idx) {
                    if remaining >= *avail {
                        remaining -= *avail;
                        *avail = 0;
                    } else {
                        *avail -= remaining;
                        remaining = 0;
                    }
                }
            }
        }
    }
}

/// Calls `f` with every k-combination of `0..n` in lexicographic order until it returns false.
fn for_each_combination(n: usize, k: usize, mut f: impl FnMut(&[usize]) -> bool) {
    if k == 0 || k > n {
        return;
    }
    let mut idx: SmallVec<[usize; 8]> = (0..k).collect();
    loop {
        if !f(&idx) {
            return;
        }
        // Advance the rightmost index that can still grow; done when none can.
        let Some(j) = (0..k).rev().find(|&j| idx[j] != n - k + j) else {
            return;
        };
        idx[j] += 1;
        for l in j + 1..k {
            idx[l] = idx[j] + l - j;
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4096))]

        /// The 64-bit fast path divides exactly as the 128-bit division it replaces, on
        /// quantities and on the products and sums that do not fit in 64 bits.
        #[test]
        fn div_i128_is_the_wide_division(
            n in prop_oneof![any::<i64>().prop_map(i128::from), any::<i128>()],
            d in prop_oneof![(1i64..).prop_map(i128::from), any::<i64>().prop_map(i128::from), any::<i128>()],
        ) {
            prop_assume!(d != 0 && !(n == i128::MIN && d == -1));
            prop_assert_eq!(super::div_i128(n, d), (n / d) as i64);
        }

        /// The 64-bit zone score is the 128-bit one wherever it answers, and it answers for
        /// every real quantity (no fallback on the per-zone path).
        #[test]
        fn narrow_allocated_is_the_wide_one(
            most in any::<bool>(),
            cpu in any::<bool>(),
            req in prop_oneof![0i64..1 << 40, any::<i64>()],
            avail in prop_oneof![0i64..1 << 40, any::<i64>()],
        ) {
            let narrow =
                super::allocated_narrow(most, cpu, req, super::whole_amount(cpu, req), avail);
            if let Some(v) = narrow {
                prop_assert_eq!(v, super::allocated(most, cpu, req, avail));
            }
            if (0..1 << 40).contains(&req) && (0..1 << 40).contains(&avail) {
                prop_assert!(narrow.is_some());
            }
        }

        /// The one-division whole amount is the Euclidean one.
        #[test]
        fn whole_amount_of_is_whole_amount(cpu in any::<bool>(), amount in any::<i64>()) {
            prop_assert_eq!(super::whole_amount_of(cpu, amount), super::whole_amount(cpu, amount));
        }

        /// A zone's weighted mean is the same on both paths, for any weights and amounts.
        #[test]
        fn narrow_weighted_mean_is_the_wide_one(
            most in any::<bool>(),
            terms in proptest::collection::vec(
                (
                    prop_oneof![1i64..1000, any::<i64>()],
                    prop_oneof![0i64..1 << 40, any::<i64>()],
                    any::<bool>(),
                ),
                0..4,
            ),
            avail in proptest::collection::vec(prop_oneof![0i64..1 << 40, any::<i64>()], 4),
        ) {
            use super::{NumaZones, ResourceName, ZoneTerm, ZoneTerms};
            let names = ["cpu", "memory", "vendor/a", "vendor/b"];
            let mut zones = NumaZones::new();
            zones.push_zone(
                0,
                names.iter().zip(&avail).map(|(n, a)| (ResourceName::new(n), *a)),
                [],
            );
            let t = ZoneTerms(
                terms
                    .iter()
                    .enumerate()
                    .map(|(i, &(weight, req, cpu))| ZoneTerm {
                        slot: Some(i),
                        req,
                        req_whole: super::whole_amount(cpu, req),
                        cpu,
                        weight,
                    })
                    .collect(),
            );
            let wide = t.weighted_wide(most, &zones, 0);
            if let Some(v) = t.weighted_narrow(most, &zones, 0) {
                prop_assert_eq!(v, wide);
            }
        }
    }

    /// The check can fail: a 64-bit path that wrapped instead of falling back would differ
    /// from the wide one on a product that does not fit.
    #[test]
    fn a_wrapping_narrow_path_would_be_caught() {
        let (req, avail) = (0, i64::MAX);
        let wrapped = (avail - req).wrapping_mul(MAX_NODE_SCORE) / avail;
        assert_ne!(wrapped, allocated(false, false, req, avail));
        assert_eq!(allocated_narrow(false, false, req, req, avail), None);
    }

    use super::*;
    use crate::numa::types::InitContainerRequest;

    const MI: i64 = 1 << 20;

    fn res(pairs: &[(&str, &str)]) -> Resources {
        Resources::parse(pairs.iter().copied()).expect("valid")
    }

    fn guaranteed(containers: &[&[(&str, &str)]]) -> PodNumaRequest {
        PodNumaRequest::new(
            QosClass::Guaranteed,
            [],
            containers.iter().map(|c| res(c)),
            Resources::new(),
        )
    }

    fn snn_container() -> TopologyManagerConfig {
        TopologyManagerConfig::new(TmPolicy::SingleNumaNode, TmScope::Container)
    }

    fn two_equal_zones(cpu: i64, mem_mi: i64) -> NumaZones {
        NumaZones::new()
            .with_zone(0, &[("cpu", cpu * 1000), ("memory", mem_mi * MI)], &[])
            .with_zone(1, &[("cpu", cpu * 1000), ("memory", mem_mi * MI)], &[])
    }

    fn strat(kind: ScoringStrategyType) -> ScoringStrategy {
        ScoringStrategy::new(kind)
    }

    /// Upstream score_test.go: pod cpu=2 memory=20Mi; Node1 2×{4, 500Mi}, Node2 2×{2, 50Mi},
    /// Node3 2×{6, 60Mi}; SingleNUMANodeContainerLevel.
    #[test]
    fn upstream_score_vectors() {
        let pod = guaranteed(&[&[("cpu", "2"), ("memory", "20Mi")]]);
        let tm = snn_container();
        let n1 = two_equal_zones(4, 500);
        let n2 = two_equal_zones(2, 50);
        let n3 = two_equal_zones(6, 60);
        let scores = |kind| {
            let s = strat(kind);
            [
                score(&s, &tm, &n1, &pod),
                score(&s, &tm, &n2, &pod),
                score(&s, &tm, &n3, &pod),
            ]
        };
        let most = scores(ScoringStrategyType::MostAllocated);
        assert_eq!(most[1], 70);
        assert!(most[1] > most[0] && most[1] > most[2], "{most:?}");
        let least = scores(ScoringStrategyType::LeastAllocated);
        assert_eq!(least[0], 73);
        assert!(least[0] > least[1] && least[0] > least[2], "{least:?}");
        let balanced = scores(ScoringStrategyType::BalancedAllocation);
        assert_eq!(balanced[2], 100);
        assert!(
            balanced[2] > balanced[0] && balanced[2] > balanced[1],
            "{balanced:?}"
        );
    }

    #[test]
    fn upstream_single_node_vectors() {
        let pod = guaranteed(&[&[("cpu", "2"), ("memory", "20Mi")]]);
        let tm = snn_container();
        let n1 = two_equal_zones(4, 500);
        assert_eq!(
            score(&strat(ScoringStrategyType::MostAllocated), &tm, &n1, &pod),
            27
        );
        assert_eq!(
            score(&strat(ScoringStrategyType::LeastAllocated), &tm, &n1, &pod),
            73
        );
        // Fractions 0.5 and 0.04 → sample variance 0.1058 → 89.
        assert_eq!(
            score(
                &strat(ScoringStrategyType::BalancedAllocation),
                &tm,
                &n1,
                &pod
            ),
            89
        );
    }

    #[test]
    fn least_allocated_per_resource_rules() {
        let z = NumaZones::new().with_zone(0, &[("cpu", 4000), ("memory", 100 * MI)], &[]);
        let s = strat(ScoringStrategyType::LeastAllocated);
        // CPU is rounded up to whole cores: 1500m → 2 of 4 → 50; memory 25/100 → 75.
        assert_eq!(zone_score(&s, &z, 0, &res(&[("cpu", "1500m")])), 50);
        assert_eq!(zone_score(&s, &z, 0, &res(&[("memory", "25Mi")])), 75);
        // Request above availability, or a resource the zone lacks: 0 for that resource.
        assert_eq!(zone_score(&s, &z, 0, &res(&[("cpu", "5")])), 0);
        assert_eq!(
            zone_score(&s, &z, 0, &res(&[("cpu", "2"), ("vendor/x", "1")])),
            25
        );
        // Weights: cpu 3, memory (default) 1: (50*3 + 75*1) / 4 = 56.
        let mut w = s.clone();
        w.weights[0].1 = 3;
        assert_eq!(
            zone_score(&w, &z, 0, &res(&[("cpu", "2"), ("memory", "25Mi")])),
            56
        );
        // Weight below 1 is treated as 1.
        w.weights[0].1 = 0;
        assert_eq!(
            zone_score(&w, &z, 0, &res(&[("cpu", "2"), ("memory", "25Mi")])),
            62
        );
        assert_eq!(zone_score(&s, &z, 0, &Resources::new()), 0);
    }

    #[test]
    fn most_allocated_per_resource_rules() {
        let z = NumaZones::new().with_zone(0, &[("cpu", 4000), ("memory", 0)], &[]);
        let s = strat(ScoringStrategyType::MostAllocated);
        assert_eq!(zone_score(&s, &z, 0, &res(&[("cpu", "3")])), 75);
        assert_eq!(zone_score(&s, &z, 0, &res(&[("cpu", "500m")])), 25);
        assert_eq!(
            zone_score(&s, &z, 0, &res(&[("cpu", "3"), ("memory", "1")])),
            37
        );
        assert_eq!(zone_score(&s, &z, 0, &res(&[("cpu", "5")])), 0);
    }

    #[test]
    fn balanced_allocation_rules() {
        let z = NumaZones::new().with_zone(
            0,
            &[("cpu", 4000), ("memory", 100 * MI), ("vendor/x", 0)],
            &[],
        );
        let s = strat(ScoringStrategyType::BalancedAllocation);
        // Equal fractions → 100.
        assert_eq!(
            zone_score(&s, &z, 0, &res(&[("cpu", "2"), ("memory", "50Mi")])),
            100
        );
        // Any fraction above 1 → 0.
        assert_eq!(
            zone_score(&s, &z, 0, &res(&[("cpu", "5"), ("memory", "50Mi")])),
            0
        );
        // Zero availability counts as fraction 1: cpu 0.5 vs 1.0 → var 0.125 → 87.
        assert_eq!(
            zone_score(&s, &z, 0, &res(&[("cpu", "2"), ("vendor/x", "1")])),
            87
        );
        // Three resources: 0.25, 0.5, 1.0 → var 0.145833 → 85.
        assert_eq!(
            zone_score(
                &s,
                &z,
                0,
                &res(&[("cpu", "1"), ("memory", "50Mi"), ("vendor/x", "1")])
            ),
            85
        );
        // A single resource has no spread.
        assert_eq!(zone_score(&s, &z, 0, &res(&[("cpu", "1")])), 100);
    }

    #[test]
    fn node_score_is_the_lowest_non_zero_zone_score() {
        // node-0 cannot fit (score 0), node-1 scores 50, node-2 scores 75 → 50.
        let z = NumaZones::new()
            .with_zone(0, &[("cpu", 1000)], &[])
            .with_zone(1, &[("cpu", 4000)], &[])
            .with_zone(2, &[("cpu", 8000)], &[]);
        let s = ScoringStrategy {
            kind: ScoringStrategyType::LeastAllocated,
            weights: SmallVec::new(),
        };
        let pod = guaranteed(&[&[("cpu", "2")]]);
        assert_eq!(score(&s, &snn_container(), &z, &pod), 50);
        // Nothing fits → 0.
        let pod = guaranteed(&[&[("cpu", "9")]]);
        assert_eq!(score(&s, &snn_container(), &z, &pod), 0);
    }

    #[test]
    fn container_scope_takes_the_truncated_mean_pod_scope_the_effective_request() {
        let z = NumaZones::new()
            .with_zone(0, &[("cpu", 4000)], &[])
            .with_zone(1, &[("cpu", 4000)], &[]);
        let s = ScoringStrategy {
            kind: ScoringStrategyType::LeastAllocated,
            weights: SmallVec::new(),
        };
        let pod = PodNumaRequest::new(
            QosClass::Guaranteed,
            [InitContainerRequest {
                requests: res(&[("cpu", "3")]),
                sidecar: false,
            }],
            [res(&[("cpu", "1")]), res(&[("cpu", "2")])],
            Resources::new(),
        );
        // Per container: 25, 75, 50 → mean 50.
        assert_eq!(score(&s, &snn_container(), &z, &pod), 50);
        // Pod scope: effective cpu = max(1+2, 3) = 3 → 25.
        let pod_tm = TopologyManagerConfig::new(TmPolicy::SingleNumaNode, TmScope::Pod);
        assert_eq!(score(&s, &pod_tm, &z, &pod), 25);
        // Truncation: 25 and 50 → 37.
        let pod = guaranteed(&[&[("cpu", "3")], &[("cpu", "2")]]);
        assert_eq!(score(&s, &snn_container(), &z, &pod), 37);
    }

    #[test]
    fn qos_and_policy_gates() {
        let z = two_equal_zones(4, 500);
        let s = strat(ScoringStrategyType::LeastAllocated);
        let burstable = PodNumaRequest::single(QosClass::Burstable, res(&[("cpu", "1")]));
        assert_eq!(score(&s, &snn_container(), &z, &burstable), 100);
        let be = PodNumaRequest::single(QosClass::BestEffort, Resources::new());
        assert_eq!(score(&s, &snn_container(), &z, &be), 100);
        let pod = guaranteed(&[&[("cpu", "2"), ("memory", "20Mi")]]);
        for policy in [TmPolicy::None, TmPolicy::BestEffort, TmPolicy::Restricted] {
            let tm = TopologyManagerConfig::new(policy, TmScope::Container);
            assert_eq!(score(&s, &tm, &z, &pod), 0, "{policy:?}");
            // LeastNUMANodes applies to every policy.
            let lnn = strat(ScoringStrategyType::LeastNUMANodes);
            assert_eq!(score(&lnn, &tm, &z, &pod), 94, "{policy:?}");
        }
    }

    fn kep454_zones() -> NumaZones {
        // 4 zones; distances: 0-1 and 2-3 are close (12), everything else far (20).
        let cost = |a: u8| -> Vec<(u8, i64)> {
            (0u8..4)
                .map(|b| {
                    let d = if a == b {
                        10
                    } else if a / 2 == b / 2 {
                        12
                    } else {
                        20
                    };
                    (b, d)
                })
                .collect()
        };
        let mut z = NumaZones::new();
        for id in 0..4u8 {
            z.push_zone(
                id,
                [
                    (ResourceName::new("cpu"), 4000),
                    (ResourceName::new("memory"), 4096 * MI),
                ],
                cost(id),
            );
        }
        z
    }

    #[test]
    fn least_numa_nodes_kep_454_examples() {
        let z = kep454_zones();
        let s = strat(ScoringStrategyType::LeastNUMANodes);
        let tm = TopologyManagerConfig::new(TmPolicy::SingleNumaNode, TmScope::Pod);
        // Fits one zone → 100 - 12 + 6 = 94.
        assert_eq!(
            score(
                &s,
                &tm,
                &z,
                &guaranteed(&[&[("cpu", "2"), ("memory", "1Gi")]])
            ),
            94
        );
        // Needs two zones; {0,1} is the closest pair → 100 - 24 + 6 = 82.
        assert_eq!(
            score(
                &s,
                &tm,
                &z,
                &guaranteed(&[&[("cpu", "6"), ("memory", "1Gi")]])
            ),
            82
        );
        // Needs three zones; every triple has the same average distance → minimal:
        // 100 - 36 + 6 = 70.
        assert_eq!(score(&s, &tm, &z, &guaranteed(&[&[("cpu", "10")]])), 70);
        // Does not fit at all → 0.
        assert_eq!(score(&s, &tm, &z, &guaranteed(&[&[("cpu", "17")]])), 0);
    }

    #[test]
    fn least_numa_nodes_prefers_close_zones_and_flags_non_minimal() {
        // Zones 0 and 1 are close but 1 is nearly full; 0 and 2 are far apart.
        let mut z = NumaZones::new();
        z.push_zone(
            0,
            [(ResourceName::new("cpu"), 4000)],
            [(0, 10), (1, 11), (2, 30)],
        );
        z.push_zone(
            1,
            [(ResourceName::new("cpu"), 0)],
            [(0, 11), (1, 10), (2, 30)],
        );
        z.push_zone(
            2,
            [(ResourceName::new("cpu"), 4000)],
            [(0, 30), (1, 30), (2, 10)],
        );
        let s = strat(ScoringStrategyType::LeastNUMANodes);
        let tm = TopologyManagerConfig::new(TmPolicy::SingleNumaNode, TmScope::Pod);
        // 6 CPUs need {0,2}, which is not the minimal-distance pair {0,1} → no bonus: 76.
        assert_eq!(score(&s, &tm, &z, &guaranteed(&[&[("cpu", "6")]])), 76);
        // Fits one zone; every zone's self-distance is 10, so zone 0 is minimal → 94.
        assert_eq!(score(&s, &tm, &z, &guaranteed(&[&[("cpu", "3")]])), 94);
    }

    #[test]
    fn least_numa_nodes_container_scope_accumulates() {
        let z = kep454_zones();
        let s = strat(ScoringStrategyType::LeastNUMANodes);
        let tm = TopologyManagerConfig::new(TmPolicy::None, TmScope::Container);
        // Two containers of 3 CPUs: each fits one zone; the second goes to another zone
        // after the first is subtracted → max count 1 → 94.
        assert_eq!(
            score(
                &s,
                &tm,
                &z,
                &guaranteed(&[&[("cpu", "3")], &[("cpu", "3")]])
            ),
            94
        );
        // 3 then 6: the 6 needs two zones → 82 (all minimal).
        assert_eq!(
            score(
                &s,
                &tm,
                &z,
                &guaranteed(&[&[("cpu", "3")], &[("cpu", "6")]])
            ),
            82
        );
        // Containers asking only for resources no zone lists are skipped; all skipped → 100.
        assert_eq!(
            score(&s, &tm, &z, &guaranteed(&[&[("vendor/x", "1")]])),
            100
        );
        // A container that cannot fit → 0 for the pod.
        assert_eq!(
            score(
                &s,
                &tm,
                &z,
                &guaranteed(&[&[("cpu", "17")], &[("cpu", "1")]])
            ),
            0
        );
        // A requested resource some zone lacks makes combinations with that zone invalid.
        let partial = NumaZones::new()
            .with_zone(0, &[("cpu", 4000)], &[(0, 10), (1, 20)])
            .with_zone(1, &[("cpu", 4000), ("vendor/x", 1)], &[(0, 20), (1, 10)]);
        assert_eq!(
            score(
                &s,
                &tm,
                &partial,
                &guaranteed(&[&[("cpu", "1"), ("vendor/x", "1")]])
            ),
            94
        );
        assert_eq!(
            score(
                &s,
                &tm,
                &partial,
                &guaranteed(&[&[("cpu", "5"), ("vendor/x", "1")]])
            ),
            0
        );
    }

    #[test]
    fn least_numa_nodes_uses_max_numa_nodes_step() {
        let z = kep454_zones();
        let s = strat(ScoringStrategyType::LeastNUMANodes);
        let mut tm = TopologyManagerConfig::new(TmPolicy::SingleNumaNode, TmScope::Pod);
        tm.max_numa_nodes = 4;
        // step 25: one zone, minimal → 100 - 25 + 12 = 87.
        assert_eq!(score(&s, &tm, &z, &guaranteed(&[&[("cpu", "1")]])), 87);
        assert_eq!(normalize_least_numa(2, false, 8), 76);
        assert_eq!(normalize_least_numa(1, true, 8), 94);
    }

    #[test]
    fn combinations_are_lexicographic() {
        let mut seen = Vec::new();
        for_each_combination(4, 2, |c| {
            seen.push(c.to_vec());
            true
        });
        assert_eq!(
            seen,
            vec![
                vec![0, 1],
                vec![0, 2],
                vec![0, 3],
                vec![1, 2],
                vec![1, 3],
                vec![2, 3]
            ]
        );
        let mut n = 0;
        for_each_combination(5, 5, |_| {
            n += 1;
            true
        });
        assert_eq!(n, 1);
        for_each_combination(3, 4, |_| panic!("k > n yields nothing"));
    }

    #[test]
    fn sample_variance_matches_gonum() {
        assert!((sample_variance(&[0.5, 0.04]) - 0.1058).abs() < 1e-12);
        assert_eq!(sample_variance(&[0.3]), 0.0);
        assert_eq!(
            ScoringStrategyType::parse("LeastNUMANodes"),
            Some(ScoringStrategyType::LeastNUMANodes)
        );
        assert_eq!(ScoringStrategyType::parse("leastallocated"), None);
    }
}
