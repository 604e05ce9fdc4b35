//! How an owner allocates on a node: from exactly one matched reservation first and the rest
//! from the node's free capacity, under the reservation's policy, and which reservation it
//! takes.
//!
//! - `Default` / `Aligned`: the pod fits when, for every resource, its request is at most
//!   the node's free capacity plus this one reservation's remainder (never two
//!   reservations: the other ones stay held).
//! - `Restricted`: additionally, for the reservation's restricted resources the whole
//!   request must fit in the reservation's remainder.
//!
//! A node whose matched reservations cannot satisfy the pod is filtered out; a pod that
//! could not use a reservation at all (it requests none of its resources, or a
//! `Default`/`Aligned` reservation has nothing left of them) may still use the node's free
//! capacity, unless it has a reservation affinity.
//!
//! The chosen reservation on a node: the smallest `reservation-order` label first, then the
//! one that ends most allocated (Koordinator's MostAllocated `ScoreReservation`), then the
//! earliest created (then the name, for determinism). Of several reusable reservations
//! (`allocateOnce: false`) without an order label, only the earliest created takes part
//! (seed 002): a pod is never spread over reservations that exist for the same purpose.

use std::borrow::Cow;

use berth_api::reservation::ReservationAllocatePolicy;

use crate::model::node::NodeInfo;
use crate::resources::{ResourceId, ResourceNames, Resources};

use super::store::ReservationInfo;

/// Which resources fall short when the pod takes from one reservation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Fit {
    /// Bit `i`: the node plus the reservation's remainder lacks resource `i`.
    pub node_short: u32,
    /// Bit `i`: a restricted resource `i` exceeds the reservation's remainder.
    pub reservation_short: u32,
}

impl Fit {
    /// Whether the pod fits with this reservation.
    pub fn fits(&self) -> bool {
        self.node_short == 0 && self.reservation_short == 0
    }
}

/// Bit mask of the resources `r` has a positive amount of.
pub fn mask(r: &Resources) -> u32 {
    r.non_zero()
        .filter(|(_, v)| *v > 0)
        .fold(0, |m, (id, _)| m | (1 << id.0))
}

/// The node's free capacity for a pod that may not use reservations (may be negative when
/// reservation-ignored pods took reserved capacity).
pub fn node_free(node: &NodeInfo) -> Resources {
    *node.free()
}

/// Checks the pod against one reservation on its node.
pub fn fit(pod_req: &Resources, free: &Resources, r: &ReservationInfo) -> Fit {
    fit_usable(mask(pod_req), pod_req, free, r, &r.usable())
}

/// [`considered`] and then [`fit`], with the reservation's [`ReservationInfo::usable`]
/// worked out once for both: `None` when it is not considered.
pub fn considered_fit(
    pod_mask: u32,
    pod_req: &Resources,
    free: &Resources,
    r: &ReservationInfo,
    has_affinity: bool,
) -> Option<Fit> {
    if !has_affinity && pod_mask & r.names == 0 {
        return None;
    }
    let usable = r.usable();
    if !considered_usable(pod_mask, r, has_affinity, &usable) {
        return None;
    }
    Some(fit_usable(pod_mask, pod_req, free, r, &usable))
}

/// [`fit`] with the pod's [`mask`] and the reservation's usable remainder given: only the
/// resources the pod asks a positive amount of can fall short.
fn fit_usable(
    pod_mask: u32,
    pod_req: &Resources,
    free: &Resources,
    r: &ReservationInfo,
    usable: &Resources,
) -> Fit {
    debug_assert_eq!(pod_mask, mask(pod_req));
    let mut out = Fit::default();
    for id in ResourceId::in_mask(pod_mask) {
        let want = pod_req[id];
        let bit = 1u32 << id.0;
        if want > free[id].saturating_add(usable[id]) {
            out.node_short |= bit;
        }
        if r.policy == ReservationAllocatePolicy::Restricted
            && r.restricted & bit != 0
            && want > usable[id]
        {
            out.reservation_short |= bit;
        }
    }
    out
}

/// The resources (a mask) of which the pod asks more than `free` has, with no
/// reservation's remainder added.
pub fn short_of(pod_mask: u32, pod_req: &Resources, free: &Resources) -> u32 {
    let mut out = 0;
    for id in ResourceId::in_mask(pod_mask) {
        if pod_req[id] > free[id] {
            out |= 1u32 << id.0;
        }
    }
    out
}

/// Whether a reservation takes part for this pod at all. Without reservation affinity, a
/// reservation none of whose resources the pod requests is skipped (Koordinator), and so is a
/// `Default`/`Aligned` one with nothing left of them: using it would change nothing but make
/// the pod an owner.
pub fn considered(pod_mask: u32, r: &ReservationInfo, has_affinity: bool) -> bool {
    has_affinity || (pod_mask & r.names != 0 && considered_usable(pod_mask, r, false, &r.usable()))
}

/// [`considered`] with the reservation's usable remainder given.
fn considered_usable(
    pod_mask: u32,
    r: &ReservationInfo,
    has_affinity: bool,
    usable: &Resources,
) -> bool {
    has_affinity
        || (pod_mask & r.names != 0
            && (r.policy == ReservationAllocatePolicy::Restricted || pod_mask & mask(usable) != 0))
}

/// Koordinator's `ScoreReservation` (MostAllocated over the reservation's allocatable):
/// higher when the reservation ends fuller.
pub fn score(pod_req: &Resources, r: &ReservationInfo) -> i64 {
    let mut sum: i128 = 0;
    let mut n: i128 = 0;
    for (id, cap) in r.allocatable.non_zero() {
        if cap <= 0 {
            continue;
        }
        n += 1;
        let req = i128::from(pod_req[id]) + i128::from(r.requested[id]);
        if req <= i128::from(cap) {
            sum += 100 * req / i128::from(cap);
        }
    }
    if n == 0 {
        0
    } else {
        (sum / n) as i64
    }
}

/// A nomination candidate's rank: smaller is better.
pub type NominationKey = (bool, i64, i64, i64, std::sync::Arc<str>);

/// Orders nomination candidates: order label (smallest first; labelled before unlabelled),
/// higher score, earlier creation, name.
pub fn nomination_key(r: &ReservationInfo, score: i64) -> NominationKey {
    (
        r.order.is_none(),
        r.order.unwrap_or(0),
        -score,
        r.created,
        r.name.clone(),
    )
}

/// `Insufficient <r> by node`.
pub fn node_reason(names: &ResourceNames, id: ResourceId) -> Cow<'static, str> {
    match names.name(id) {
        "cpu" => Cow::Borrowed("Insufficient cpu by node"),
        "memory" => Cow::Borrowed("Insufficient memory by node"),
        "ephemeral-storage" => Cow::Borrowed("Insufficient ephemeral-storage by node"),
        other => Cow::Owned(format!("Insufficient {other} by node")),
    }
}

/// `Reservation(s) Insufficient <r>`, with amounts when the pod names the reservation.
pub fn reservation_reason(
    names: &ResourceNames,
    id: ResourceId,
    detailed: Option<(i64, &ReservationInfo)>,
) -> Cow<'static, str> {
    let name = names.name(id);
    match detailed {
        None => match name {
            "cpu" => Cow::Borrowed("Reservation(s) Insufficient cpu"),
            "memory" => Cow::Borrowed("Reservation(s) Insufficient memory"),
            other => Cow::Owned(format!("Reservation(s) Insufficient {other}")),
        },
        Some((want, r)) => Cow::Owned(format!(
            "Reservation(s) Insufficient {name}, requested: {want}, used: {}, capacity: {}",
            r.requested[id],
            r.cap()[id]
        )),
    }
}

/// Iterates the set bits of a mask as resource ids.
pub fn bits(mask: u32) -> impl Iterator<Item = ResourceId> {
    (0..32u8)
        .filter(move |i| mask & (1 << i) != 0)
        .map(ResourceId)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reservation::store::test_support::info;
    use berth_api::reservation::ReservationAllocatePolicy::{Aligned, Default, Restricted};

    const GI: i64 = 1 << 30;

    fn res(cpu: i64, mem: i64) -> Resources {
        let mut r = Resources::ZERO;
        r[ResourceId::CPU] = cpu;
        r[ResourceId::MEMORY] = mem;
        r
    }

    #[test]
    fn policies_follow_koordinators_filter_cases() {
        // Test_filterWithReservations: node 32C, 30C requested with a 6C reservation counted,
        // i.e. 2C free outside the reservation.
        let free = res(2000, 8 * GI);
        let aligned = info("a", &[(ResourceId::CPU, 6000)], Aligned);
        assert!(fit(&res(8000, 8 * GI), &free, &aligned).fits());
        assert_eq!(
            fit(&res(8000, 8 * GI), &res(0, 8 * GI), &aligned).node_short,
            1 << ResourceId::CPU.0,
            "32C requested: nothing left besides the reservation"
        );
        let restricted = info("r", &[(ResourceId::CPU, 6000)], Restricted);
        let f = fit(&res(8000, 8 * GI), &free, &restricted);
        assert_eq!(f.reservation_short, 1 << ResourceId::CPU.0);
        assert_eq!(f.node_short, 0);
        assert!(fit(&res(6000, 8 * GI), &free, &restricted).fits());
        let mut inner = info("r", &[(ResourceId::CPU, 6000)], Restricted);
        inner.inner_reserved[ResourceId::CPU] = 2000;
        assert!(
            !fit(&res(6000, 8 * GI), &free, &inner).fits(),
            "capacity is 4C"
        );
    }

    #[test]
    fn only_reservations_that_can_give_something_are_considered_without_affinity() {
        let cpu_only = mask(&res(1000, 0));
        let mem_only = mask(&res(0, GI));
        let mut r = info("r", &[(ResourceId::CPU, 2000)], Default);
        assert!(considered(cpu_only, &r, false));
        assert!(!considered(mem_only, &r, false), "no shared resource name");
        assert!(considered(mem_only, &r, true), "affinity pods may use any");
        r.requested[ResourceId::CPU] = 2000;
        assert!(!considered(cpu_only, &r, false), "nothing left to give");
        r.policy = Restricted;
        assert!(
            considered(cpu_only, &r, false),
            "Restricted still binds the pod"
        );
    }

    #[test]
    fn score_is_koordinators_most_allocated() {
        // TestScore: pod 2C/4Gi; R 4C8Gi -> 50; R 2C4Gi -> 100; R 2C4Gi with 2C/3Gi
        // allocated -> 0 (both overflow).
        let pod = res(2000, 4 * GI);
        let big = info(
            "big",
            &[(ResourceId::CPU, 4000), (ResourceId::MEMORY, 8 * GI)],
            Default,
        );
        assert_eq!(score(&pod, &big), 50);
        let mut small = info(
            "s",
            &[(ResourceId::CPU, 2000), (ResourceId::MEMORY, 4 * GI)],
            Default,
        );
        assert_eq!(score(&pod, &small), 100);
        small.requested = res(2000, 3 * GI);
        assert_eq!(score(&pod, &small), 0);
        assert_eq!(score(&Resources::ZERO, &big), 0);
    }

    #[test]
    fn nomination_prefers_order_then_score_then_age() {
        let mut a = info("a", &[(ResourceId::CPU, 1000)], Default);
        let mut b = info("b", &[(ResourceId::CPU, 1000)], Default);
        a.created = 5;
        b.created = 1;
        assert!(
            nomination_key(&b, 50) < nomination_key(&a, 50),
            "earlier first"
        );
        assert!(
            nomination_key(&a, 90) < nomination_key(&b, 50),
            "fuller first"
        );
        a.order = Some(100);
        assert!(
            nomination_key(&a, 0) < nomination_key(&b, 100),
            "ordered first"
        );
        b.order = Some(-1);
        assert!(
            nomination_key(&b, 0) < nomination_key(&a, 0),
            "negative orders win"
        );
    }
}
