//! The Reservation plugin's decision about one reservation for one pod, as data: PreFilter
//! ([`matching`]: may the pod use it at all), Filter and nomination ([`fitting`]: does it
//! hold the pod on its node). `berth explain` asks the same two functions and only renders
//! the [`Rejection`], so what it says is what the plugin decided.

use crate::cache::Cluster;
use crate::model::node::NodeInfo;
use crate::model::pod::PodInfo;
use crate::reservation::affinity::{self, Mismatch, PodReservationPrefs};
use crate::reservation::allocate::{self, Fit};
use crate::reservation::ReservationInfo;
use crate::resources::Resources;
use berth_api::reservation::ReservationPhase;

/// Why a reservation whose owners match the pod is not one it can use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rejection {
    /// Not Available: Pending, Waiting, Succeeded, Failed (its phase says which).
    Phase,
    /// `allocateOnce` and already allocated to an owner.
    UsedUp,
    /// Placed on a node the scheduler does not know.
    NodeUnknown,
    /// The pod's reservation affinity, the reservation's taints, `unschedulable`, being
    /// deleted, exact match (Koordinator's diagnosis counters).
    Mismatch(Mismatch),
    /// The pod requests none of its resources, or nothing is left of those it requests.
    NotConsidered,
    /// It (with its node's free capacity) holds too little for the pod, or a `Restricted`
    /// resource exceeds what is left in it.
    Short(Fit),
}

/// PreFilter's question: whether the pod may use `r` at all (before any capacity). On
/// success, the reservation's node.
pub fn matching<'a>(
    cx: &'a Cluster,
    prefs: &PodReservationPrefs,
    pod: &PodInfo,
    r: &ReservationInfo,
) -> Result<&'a NodeInfo, Rejection> {
    if r.phase != ReservationPhase::Available {
        return Err(Rejection::Phase);
    }
    // Terminating reservations are never used by new pods (Koordinator #3154).
    if r.terminating {
        return Err(Rejection::Mismatch(Mismatch::Unschedulable));
    }
    if r.allocate_once && !r.owner_pods.is_empty() {
        return Err(Rejection::UsedUp);
    }
    let node = r
        .node
        .and_then(|i| cx.cache.node(i))
        .ok_or(Rejection::NodeUnknown)?;
    affinity::check(prefs, pod, r, &node.labels, &cx.cache.names).map_err(Rejection::Mismatch)?;
    Ok(node)
}

/// Filter's question: whether `r` holds the pod on its node, whose free capacity is
/// `free` (Koordinator's `filterWithReservations` for one reservation). `pod_mask` is
/// [`allocate::mask`] of the pod's requests; `has_affinity` whether it asks for
/// reservations.
#[inline]
pub fn fitting(
    pod_mask: u32,
    has_affinity: bool,
    pod: &PodInfo,
    free: &Resources,
    r: &ReservationInfo,
) -> Result<(), Rejection> {
    match allocate::considered_fit(pod_mask, &pod.requests, free, r, has_affinity) {
        None => Err(Rejection::NotConsidered),
        Some(fit) if fit.fits() => Ok(()),
        Some(fit) => Err(Rejection::Short(fit)),
    }
}
