//! Koordinator's reservations, as a domain module the Reservation plugin and the scheduler
//! loop drive.
//!
//! A `Reservation` is scheduled like a pod through a stand-in "reserve pod"
//! ([`reserve_pod`]). Once placed it holds its unallocated remainder on its node
//! (`NodeInfo::reserved` / `reserved_ports`), so pods that are not its owners cannot use it,
//! and its stand-in sits in `NodeInfo::pods` with no requests so that inter-pod affinity,
//! spread and volume plugins see it as Koordinator's do. Owners ([`owner`]) allocate from one
//! matched reservation ([`allocate`]) and the reservation follows its owners
//! ([`status`]) through its lifecycle ([`lifecycle`]): Pending, Available (or Waiting while a
//! pre-allocating reservation waits for room), Succeeded, Failed, garbage collection.
//!
//! Everything lives in [`ReservationStore`], a field of [`crate::cache::Cluster`], indexed by
//! node and by owner so that a scheduling cycle never walks every reservation.

pub mod affinity;
pub mod allocate;
pub mod hold;
pub mod lifecycle;
pub mod owner;
pub mod provisioned;
pub mod reserve_pod;
pub mod status;
pub mod store;
#[cfg(any(test, feature = "testing"))]
pub mod testkit;
#[cfg(test)]
mod tests;

pub use store::{Owner, RIdx, ReservationInfo, ReservationStore};

use crate::time::Time;

/// How the reservations preemption makes to hold what it freed are named
/// (`preempt-<namespace>-<pod>`): the store counts the reservations so named, so an owner's
/// cycle asks for its pod's hold only when there may be one.
pub const HOLD_NAME_PREFIX: &str = "preempt-";

/// Koordinator's default `gcDurationSeconds`: terminal reservations are deleted a day after
/// they ended.
pub const DEFAULT_GC_DURATION: Time = 24 * 60 * 60 * 1000;
/// Koordinator's default `gcIntervalSeconds`: how often the garbage collector looks, which
/// bounds how long a terminal reservation whose node is gone survives.
pub const DEFAULT_GC_INTERVAL: Time = 60 * 1000;

/// Reservation settings from the Reservation plugin's args (`ReservationArgs`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// How long Succeeded and Failed reservations are kept before deletion.
    pub gc_duration: Time,
    /// How often the garbage collector runs (`gcIntervalSeconds`): a Succeeded or Failed
    /// reservation whose node no longer exists is deleted on the next run.
    pub gc_interval: Time,
    /// `disableGarbageCollection`.
    pub disable_gc: bool,
    /// `preAllocationConfig.enableClusterMode`: `Cluster`-mode pre-allocation is allowed.
    pub enable_cluster_mode: bool,
    /// `dynamicProvisioning` (berth's): Dynamic Reservation Provisioning's time-out.
    pub drp: crate::drp::Settings,
    /// `enablePreemption`: a pod allocated from an active reservation may be preempted,
    /// its share going back to that reservation (so only the reservation's owners gain
    /// from it). Off, such pods are never victims, as in Koordinator without the argument.
    pub enable_preemption: bool,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            gc_duration: DEFAULT_GC_DURATION,
            gc_interval: DEFAULT_GC_INTERVAL,
            disable_gc: false,
            enable_cluster_mode: false,
            drp: crate::drp::Settings::default(),
            enable_preemption: false,
        }
    }
}

/// What the scheduling queue must do after a reservation change; the scheduler applies
/// these after every input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QueueOp {
    /// Queue a pending reservation's reserve pod.
    Add {
        /// The queue key (kind Reservation).
        key: crate::object::ObjectKey,
        /// The reserve pod's priority.
        priority: i32,
        /// The reservation's creation time.
        created: Time,
    },
    /// Drop a reservation from the queue.
    Delete(crate::object::ObjectKey),
    /// Capacity was released or a reservation became usable: retry unschedulable pods.
    MoveAll,
}

/// Koordinator's reason when a pod with reservation affinity finds no reservation.
pub const ERR_REASON_AFFINITY: &str = "node(s) no reservations match reservation affinity";
/// Koordinator's reason when matched reservations cannot hold the pod.
pub const ERR_REASON_NO_RESERVATIONS_MEET: &str =
    "node(s) no reservation(s) to meet the requirements";
/// Koordinator's reason for a reserve pod pinned elsewhere.
pub const ERR_REASON_NODE_NOT_MATCH: &str =
    "node(s) didn't match the nodeName specified by reservation";
/// Why a reusable reservation is not placed on a node that already holds a reusable
/// reservation for the same owners (seed 002: only one such reservation per node).
pub const ERR_REASON_REUSABLE_EXISTS: &str =
    "node(s) already have a reusable reservation for the same owners";
/// Koordinator's reason for mixing the default allocate policy with the others.
pub const ERR_REASON_POLICY_CONFLICT: &str = "node(s) reservation allocate policy conflict";
/// Koordinator's reason for a pre-allocating reservation without `Restricted`.
pub const ERR_REASON_PRE_ALLOCATION_UNSUPPORTED: &str =
    "node(s) reservation pre allocation is unsupported with current attributes";
/// Koordinator's reason for Cluster-mode pre-allocation when it is disabled.
pub const ERR_REASON_CLUSTER_MODE_DISABLED: &str =
    "reservation requires cluster mode pre-allocation which is disabled";
/// Koordinator's reason when `pre-allocation-required` finds no candidate pod.
pub const ERR_REASON_PRE_ALLOCATION_REQUIRED: &str =
    "node(s) no pod match reservation with pre allocation required";
