//! Per-domain counts for PreFilter and PreScore from the cluster's remembered counts
//! ([`crate::cache::domain_counts`]) instead of a walk over every pod of every node.
//!
//! The remembered counts cover every node that carries the required labels. That is the
//! recount's answer exactly when every such node passes each constraint's node inclusion
//! policies (the pod has no node selector nor required node affinity, or the policy ignores
//! it; taints ignored) and no reservation stand-in is hidden from the pod (it is neither a
//! reservation nor reservation-ignored, and none of the reservations it matched hides a
//! stand-in). Otherwise callers recount.

use std::sync::Arc;

use crate::cache::domain_counts::{DomainCounts, DomainQuery};
use crate::cache::Cluster;
use crate::framework::CycleState;
use crate::model::pod::PodInfo;

use super::common::{Constraint, RequiredNodeAffinity};

/// Whether [`remembered`] gives the recount's answer for `pod` (see the module doc).
pub(super) fn applies(
    state: &CycleState,
    constraints: &[Constraint],
    required: &RequiredNodeAffinity,
) -> bool {
    state.reservation.as_ref().is_none_or(|r| r.hides_nothing())
        && constraints
            .iter()
            .all(|c| !c.honor_node_taints && (!c.honor_node_affinity || required.is_empty()))
}

/// Per constraint, the matching pods per domain over the nodes carrying every key of
/// `required_keys` (a node lacking a constraint's key counts under the empty value).
pub(super) fn remembered(
    cx: &Cluster,
    pod: &PodInfo,
    constraints: &[Constraint],
    required_keys: &[&str],
) -> Vec<Arc<DomainCounts>> {
    constraints
        .iter()
        .map(|c| remembered_one(cx, pod, c, required_keys))
        .collect()
}

/// [`remembered`] for one constraint.
pub(super) fn remembered_one(
    cx: &Cluster,
    pod: &PodInfo,
    c: &Constraint,
    required_keys: &[&str],
) -> Arc<DomainCounts> {
    cx.cache.domain_counts(&DomainQuery {
        namespace: &pod.key.namespace,
        selector: c.selector.as_ref(),
        topology_key: &c.topology_key,
        required_keys,
    })
}

/// Every constraint's topology key.
pub(super) fn all_keys(constraints: &[Constraint]) -> Vec<&str> {
    constraints
        .iter()
        .map(|c| c.topology_key.as_str())
        .collect()
}
