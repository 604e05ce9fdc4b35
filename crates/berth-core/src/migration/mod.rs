//! Koordinator's PodMigrationJob controller (koord-descheduler's
//! `pkg/descheduler/controllers/migration`), as a pure state machine: the cluster as it is
//! now ([`MigrationView`]) and the time in, [`Action`]s out. No I/O, no clock, no memory
//! between calls: everything the controller knows about a job is in the job's own `spec` and
//! `status`, so a restarted controller carries on where the last one stopped, and the same
//! machine serves `berth simulate` (which performs the actions as the API server would) and a
//! cluster driver.
//!
//! It lives in berth-core rather than in berth-sim because it is a controller of berth's,
//! not a part of kube-controller-manager the simulator merely plays: the Reservation it
//! creates is scheduled by berth's own scheduler, and `berth run` is to drive the same code.
//!
//! A job, `ReservationFirst` (the default mode):
//! 1. `Pending` until the arbitrator ([`arbitration`]) lets it start (limits per node,
//!    namespace and workload, max unavailable per workload), then `Running`;
//! 2. creates a Reservation from the pod ([`template`]: its template, `allocateOnce`, the
//!    pod's controller as owner, node affinity away from the pod's node, Koordinator's
//!    `created-by` and `reservation-order` labels, named after the job's UID);
//! 3. waits until the Reservation is Available, then evicts the pod through the Eviction API
//!    ([`Action::Evict`]; a PodDisruptionBudget that refuses is retried);
//! 4. waits until the workload's replacement is bound to the Reservation and ready:
//!    `Succeeded`.
//!
//! It fails, deleting the Reservation it used, when the Reservation cannot be placed
//! (`Unschedulable`, with the scheduler's message), expires, lands on the pod's own node, is
//! taken by another pod, when the pod disappears before its eviction, when the replacement
//! is bound outside the Reservation, or when the job's `ttl` runs out. `EvictDirectly`
//! evicts without a reservation. Messages are Koordinator's.

pub mod arbitration;
mod job;
pub mod keep_capacity;
pub mod reserved_cpus;
pub mod template;
#[cfg(test)]
mod tests;

use std::sync::Arc;

use berth_api::k8s_openapi::api::core::v1::Pod;
use berth_api::migration::PodMigrationJob;
use berth_api::reservation::Reservation;

use crate::time::Time;

pub use arbitration::MigrationArgs;
pub use job::after_eviction;

/// What the controller reads of the cluster.
pub trait MigrationView {
    /// The pod `namespace/name`.
    fn pod(&self, namespace: &str, name: &str) -> Option<&Pod>;
    /// Every pod.
    fn pods(&self) -> Box<dyn Iterator<Item = &Pod> + '_>;
    /// The Reservation `name`.
    fn reservation(&self, name: &str) -> Option<&Reservation>;
}

/// What the controller asks the API server to do, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Create this Reservation (an existing one of the same name is the same one: the
    /// controller adopts it on its next pass).
    CreateReservation(Box<Reservation>),
    /// Delete the Reservation of this name (gone already is fine).
    DeleteReservation(String),
    /// Evict this pod through `pods/eviction`; report the outcome with [`after_eviction`].
    Evict {
        /// The job's name.
        job: String,
        /// The pod's namespace.
        namespace: String,
        /// The pod's name.
        name: String,
    },
    /// Replace the job (spec and status) with this one.
    UpdateJob(Box<PodMigrationJob>),
}

/// One pass over every job: in creation order (then name), each job takes the next step its
/// state allows. Jobs started in this pass count against the arbitration limits of later
/// ones.
pub fn reconcile(
    jobs: &[Arc<PodMigrationJob>],
    view: &dyn MigrationView,
    now: Time,
    args: &MigrationArgs,
) -> Vec<Action> {
    let mut ordered: Vec<&Arc<PodMigrationJob>> = jobs.iter().collect();
    ordered.sort_by(|a, b| {
        let key = |j: &PodMigrationJob| {
            (
                j.metadata.creation_timestamp.as_ref().map(|t| t.0),
                j.metadata.name.clone(),
            )
        };
        key(a).cmp(&key(b))
    });
    let mut arbiter = arbitration::Arbiter::new(args, jobs, view);
    let mut actions = Vec::new();
    for job in ordered {
        actions.extend(job::step(job, view, now, args, &mut arbiter));
    }
    actions
}

/// Whether the job evicted its pod already (its `Eviction` condition is `True`).
pub fn evicted(job: &PodMigrationJob) -> bool {
    job.condition(berth_api::migration::vocabulary::EVICTION)
        .is_some_and(|c| c.status == "True")
}

/// The Reservation a job uses, by name, if it names one.
pub fn reservation_name(job: &PodMigrationJob) -> Option<&str> {
    job.spec
        .reservation_options
        .as_ref()?
        .reservation_ref
        .as_ref()?
        .name
        .as_deref()
        .filter(|n| !n.is_empty())
}

/// What a job waits for now, in words (for `explain`), or `None` once it has ended.
pub fn waiting_for(job: &PodMigrationJob, view: &dyn MigrationView) -> Option<String> {
    job::waiting_for(job, view)
}
