//! [`Scheduler`]: the sans-IO scheduler. Events in, effects out, time as an argument.
//!
//! The driver (simulator or cluster adapter) calls, in a loop:
//! 1. [`Scheduler::handle`] for every object change it observes;
//! 2. [`Scheduler::handle_timeout`] when [`Scheduler::poll_timeout`] is due;
//! 3. [`Scheduler::run_until_idle`] to schedule everything that can be scheduled now;
//! 4. [`Scheduler::poll_effect`] until it returns `None`, performing each effect and
//!    feeding the results back as events (a bound pod comes back as `Applied` with
//!    `spec.nodeName`).
//!
//! What a driver that is not synchronous (the cluster adapter) may rely on:
//! - **Binds are asynchronous.** After an [`Effect::Bind`] the pod stays assumed on its
//!   node, holding what it claimed (resources, reservation share, NUMA hold), while later
//!   cycles run, until the watch shows it bound there (confirmation) or
//!   [`Event::BindFailed`] arrives with its UID and node; whichever comes second is
//!   ignored. A failure runs every Reserve plugin's Unreserve and puts that pod alone in
//!   back-off (`NotFound`: nothing more, the deletion is on its way). Binds in flight:
//!   [`Scheduler::binds_in_flight`].
//! - **Every write may come back** through the watch. An update that changes nothing the
//!   scheduler reads (kube-scheduler's `isPodUpdated`) schedules nothing, and a
//!   reservation's own status coming back is only noted (its resourceVersion, which GC
//!   deletes name as a precondition).
//! - **Initial sync.** With [`Config::wait_for_sync`] naming the watched kinds, nothing is
//!   scheduled, expired or failed, and no timer is due, until each has had its
//!   [`Event::Listed`]; [`Scheduler::synced`] says when (readiness). A later
//!   [`Event::ListStarted`] .. [`Event::Listed`] (a re-list after a broken watch) deletes
//!   what the LIST did not return.
//! - **Other schedulers' pods** (a `schedulerName` that is no profile's) are never queued
//!   and never get a condition; once bound they count like any pod.

use crate::collections::HashMap;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;

use crate::cache::{Cluster, PodState};
use crate::effect::{Effect, Record};
use crate::event::{BindFailure, Event};
use crate::framework::nominator::{
    nominated_node_name, run_filter_plugins_with_nominated_pods, Nominator,
};
use crate::framework::plugin::{Nomination, PostFilterContext, PostFilterResult};
use crate::framework::{Code, CycleState, Diagnosis, FilterPlan, Profile, Status};
use crate::model::node::NodeIdx;
use crate::model::pod::{PodInfo, PodKind};
use crate::object::{Kind, Object, ObjectKey};
use crate::queue::hints::{self, ClusterEvent};
use crate::queue::SchedulingQueue;
use crate::rng::SplitMix64;
use crate::time::Time;
use berth_api::validate::Rule;

mod cycle;
mod dra;
mod drp;
mod feedback;
mod filter_nodes;
mod gang_preemption;
#[cfg(test)]
mod gang_preemption_properties;
#[cfg(test)]
mod gang_preemption_tests;
#[cfg(test)]
mod gang_reservation_properties;
#[cfg(test)]
mod gang_reservation_tests;
#[cfg(test)]
mod gang_tests;
mod intake;
mod permit;
mod preemption;
mod queries;
#[cfg(test)]
mod unreserve_tests;
mod volumes;

use feedback::{same_name, SeenPlugins};
use filter_nodes::{Filtering, Found};

/// Reason of the Warning event on a pod holding CPUs its node now reserves
/// (`node.koordinator.sh/reservation`): the pod should be evicted.
pub const EVICT_RESERVED_CPUS: &str = "CPUsReservedByNode";

/// Event reason: a node's `node.koordinator.sh/reservation` is refused (ignored).
pub const REASON_INVALID_NODE_RESERVATION: &str = "InvalidNodeReservation";
/// Event reason: a NodeResourceTopology is refused (the node is scheduled as without one).
pub const REASON_INVALID_NRT: &str = "InvalidNodeResourceTopology";
/// Event reason: the koordlet CPU annotations of a node's NRT are refused.
pub const REASON_INVALID_CPU_TOPOLOGY: &str = "InvalidCPUTopology";
/// Event reason: a Node object itself is refused (a negative allocatable).
pub const REASON_INVALID_NODE: &str = "InvalidNode";
/// Event reason: a bound pod the core cannot read (its usage cannot be counted). An unbound
/// one gets `FailedScheduling` and its condition; both count as refused.
pub const REASON_INVALID_POD: &str = "InvalidPod";

/// Scheduler-wide settings.
#[derive(Debug, Clone, Default)]
pub struct Config {
    /// Seed for tie-breaking between equally scored nodes.
    pub seed: u64,
    /// Kinds whose first LIST must be in ([`Event::Listed`]) before anything is scheduled,
    /// expired or failed. Empty (the simulator) means synced from the start; the cluster
    /// adapter names every kind it watches.
    pub wait_for_sync: Vec<Kind>,
}

/// Counters for benchmarks and metrics.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Counters {
    /// Scheduling cycles run.
    pub attempts: u64,
    /// Pods (and reservations) placed.
    pub scheduled: u64,
    /// Cycles that found no node.
    pub unschedulable: u64,
    /// Cycles that hit an internal error.
    pub errors: u64,
    /// Nodes run through Filter.
    pub nodes_filtered: u64,
    /// Retries answered without a cycle: nothing changed since the item's last failure,
    /// so a cycle would have failed the same way.
    pub replayed: u64,
    /// Preemption attempts: failed cycles of a pod whose profile has PostFilter plugins.
    pub preemption_attempts: u64,
    /// Pods evicted by preemption.
    pub preemption_victims: u64,
    /// Reservation-backed preemptions whose preemptor landed on its reservation.
    pub preemption_holds_completed: u64,
    /// Reservation-backed preemptions whose reservation expired unused (TTL, preemptor
    /// deleted or placed elsewhere first).
    pub preemption_holds_expired: u64,
}

/// The scheduler.
#[derive(Debug)]
pub struct Scheduler {
    /// Everything the scheduler knows (drivers read it through the queries of
    /// [`Scheduler::node`], [`Scheduler::pod`], [`Scheduler::reservations`]...).
    pub(crate) cluster: Cluster,
    profiles: Vec<Profile>,
    queue: SchedulingQueue,
    effects: VecDeque<Effect>,
    rng: SplitMix64,
    next_start: usize,
    /// Last PodScheduled message sent per pod, so retries do not repeat it.
    last_message: HashMap<ObjectKey, String>,
    /// Counters (drivers take a snapshot with [`Scheduler::stats`]).
    pub(crate) counters: Counters,
    // Reusable per-cycle buffers.
    feasible: Vec<NodeIdx>,
    scores: Vec<i64>,
    totals: Vec<i64>,
    diagnosis: Diagnosis,
    /// Pods nominated to nodes by preemption.
    nominator: Nominator,
    /// Nodes of the current cycle rejected as `Unschedulable` (where preemption may help).
    resolvable: Vec<NodeIdx>,
    /// Per profile, positions in its Filter list of plugins that want their verdicts
    /// ([`crate::framework::Points::FILTER_FEEDBACK`]).
    feedback: Vec<Vec<usize>>,
    /// This cycle's Filter outcome per node, when the profile has feedback plugins: the
    /// plugin that rejected it, `""` when it passed.
    filter_log: Vec<(NodeIdx, &'static str)>,
    /// The cycle's `skip_filter` bits, for the feedback.
    filter_log_skip: u64,
    /// The Filter loop's rejections of one batch.
    rejected: Vec<(usize, Status)>,
    feedback_buf: Vec<(NodeIdx, bool)>,
    /// Bumped by every input and every cycle that changed anything: a pod that failed at
    /// the current epoch would fail again the same way ([`SchedulingQueue::replayable`]).
    epoch: u64,
    /// Kinds of [`Config::wait_for_sync`] whose first LIST is not complete yet.
    unsynced: BTreeSet<Kind>,
    /// Kinds being (re-)listed, with the keys the LIST returned so far.
    relisting: BTreeMap<Kind, BTreeSet<ObjectKey>>,
    /// Binds asked for and not yet confirmed by the watch nor failed, by pod.
    in_flight: BTreeMap<ObjectKey, InFlight>,
    /// The input being handled changed nothing any cycle reads (a pending pod's update
    /// that `isPodUpdated` ignores): the epoch stays, so retries can still be replayed.
    quiet: bool,
    /// Dynamic Reservation Provisioning: pods waiting for their Reservation.
    drp: drp::DrpState,
    /// Reservations made by reservation-backed preemption and not settled yet: their name,
    /// and the preemptor with its UID and the node held (for the completed / expired
    /// counters, and so that preempting again for the same node asks for nothing new).
    holds: BTreeMap<String, (ObjectKey, Arc<str>, Arc<str>)>,
    /// VolumeBinding's PreBind: pods waiting for their claims to be bound.
    volumes: volumes::VolumeWaits,
    /// Gangs: their objects and members.
    gangs: crate::gang::Gangs,
    /// Gang members waiting at Permit.
    permits: permit::Permits,
    /// Gangs whose job-level preemption is under way: the victims (key and UID) evicted
    /// for them, until all are gone.
    gang_victims: BTreeMap<crate::gang::GangId, Vec<(ObjectKey, Arc<str>)>>,
}

/// Whether `pod` names a scheduler none of `profiles` is.
fn is_foreign(profiles: &[Profile], pod: &PodInfo) -> bool {
    !profiles
        .iter()
        .any(|p| *p.scheduler_name == *pod.scheduler_name)
}

/// A bind in flight: what kube-scheduler's binding goroutine holds, so that a failure can
/// run Unreserve with the state of the decision.
#[derive(Debug)]
struct InFlight {
    /// The profile that placed the pod.
    profile: usize,
    /// The cycle state of the decision.
    state: CycleState,
    /// The pod as it was placed (its UID identifies the incarnation).
    pod: Arc<PodInfo>,
    /// The node it was assumed on.
    node: NodeIdx,
    /// That node's name (slots are reused after a node is deleted).
    node_name: Arc<str>,
    /// Scheduling attempts so far, so a failed bind backs off as long as a failed cycle.
    attempts: u32,
}

/// What `schedule_pod` found for an item. Moved once per cycle; boxing the large
/// variants would allocate in every cycle instead.
#[derive(Debug)]
#[allow(clippy::large_enum_variant)]
enum Outcome {
    /// The node chosen, with the cycle's state for Reserve and the binding cycle.
    Placed(NodeIdx, CycleState),
    /// No node fits (kube-scheduler's `FitError`): PostFilter may make room.
    Unfit(CycleState, Diagnosis),
    /// Nothing to run PostFilter on: no nodes at all, or a plugin's error.
    Failed(Diagnosis),
}

/// How far `find_nodes_that_fit_pod` got.
#[derive(Debug)]
enum Fit {
    /// The nodes in the feasible list fit.
    Feasible,
    /// The pod's nominated node fits (no other node was filtered).
    Nominated(NodeIdx),
    /// No node fits.
    Unfit,
    /// A plugin failed with an error.
    Error,
}

/// What PreFilter decided.
#[derive(Debug)]
enum PreFiltered {
    /// Every plugin passed or skipped.
    Passed,
    /// A plugin rejected the pod with this code: no node is filtered.
    Rejected(Code),
    /// A plugin failed with an error.
    Error,
}

impl Scheduler {
    /// A scheduler with the given profiles (the first is the default for pods whose
    /// `schedulerName` matches none).
    pub fn new(profiles: Vec<Profile>, config: Config) -> Self {
        let profiles = if profiles.is_empty() {
            vec![Profile::default_profile()]
        } else {
            profiles
        };
        // The Reservation plugin's args configure the reservation lifecycle (GC duration...).
        let mut cluster = Cluster::default();
        cluster.reservations.settings = profiles
            .iter()
            .flat_map(|p| p.plugins.iter())
            .find_map(|p| p.reservation_settings())
            .unwrap_or_default();
        // Plugins that keep cluster-wide state (the NUMA reserve cache) set it up.
        for p in profiles.iter().flat_map(|p| p.plugins.iter()) {
            p.init(&mut cluster);
        }
        let feedback = profiles
            .iter()
            .map(|prof| {
                (0..prof.filter.len())
                    .filter(|&j| {
                        prof.plugins[prof.filter[j]]
                            .points()
                            .contains(crate::framework::Points::FILTER_FEEDBACK)
                    })
                    .collect()
            })
            .collect();
        let queue = SchedulingQueue::new(hints::QueueingHints::for_profiles(&profiles));
        Self {
            cluster,
            profiles,
            queue,
            effects: VecDeque::new(),
            rng: SplitMix64::new(config.seed),
            next_start: 0,
            last_message: HashMap::default(),
            counters: Counters::default(),
            feasible: Vec::new(),
            scores: Vec::new(),
            totals: Vec::new(),
            diagnosis: Diagnosis::default(),
            nominator: Nominator::default(),
            resolvable: Vec::new(),
            feedback,
            filter_log: Vec::new(),
            filter_log_skip: 0,
            rejected: Vec::new(),
            feedback_buf: Vec::new(),
            epoch: 0,
            unsynced: config.wait_for_sync.iter().copied().collect(),
            relisting: BTreeMap::new(),
            in_flight: BTreeMap::new(),
            quiet: false,
            drp: drp::DrpState::default(),
            holds: BTreeMap::new(),
            volumes: volumes::VolumeWaits::default(),
            gangs: crate::gang::Gangs::default(),
            permits: permit::Permits::default(),
            gang_victims: BTreeMap::new(),
        }
    }

    /// Whether the first LIST of every kind [`Config::wait_for_sync`] names is in: until
    /// then nothing is scheduled, expired or failed (the cluster adapter's readiness).
    pub fn synced(&self) -> bool {
        self.unsynced.is_empty()
    }

    /// NUMA figures: the reserve cache's counters (dirty nodes by reason, resync attempts,
    /// matches, mismatches, flushes, generation) and NRT lookups.
    pub fn numa_metrics(&self) -> crate::numa::NumaMetrics {
        self.cluster.numa.metrics()
    }

    /// Whether `pod` names a scheduler none of the profiles is (the NUMA cache treats the
    /// nodes such pods land on as foreign-touched).
    fn is_foreign(&self, pod: &PodInfo) -> bool {
        is_foreign(&self.profiles, pod)
    }

    /// Pods nominated to nodes by preemption, waiting for their victims to leave.
    pub fn nominator(&self) -> &Nominator {
        &self.nominator
    }

    /// The profiles.
    pub fn profiles(&self) -> &[Profile] {
        &self.profiles
    }

    /// Takes the next effect to perform.
    pub fn poll_effect(&mut self) -> Option<Effect> {
        self.effects.pop_front()
    }

    /// The earliest time at which [`Scheduler::handle_timeout`] has something to do. `None`
    /// until the initial sync is over: no timer runs on a partial view of the cluster.
    pub fn poll_timeout(&self) -> Option<Time> {
        if !self.synced() {
            return None;
        }
        let t = match (
            self.queue.next_timeout(),
            self.cluster.reservations.next_timer(),
        ) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let t = match (t, self.cluster.numa.next_resync()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let t = match (t, self.drp_next_timeout()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let t = match (t, self.volume_next_timeout()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        match (t, self.permit_next_timeout()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Moves the unschedulable items `event` may help out of the pool (queueing hints).
    fn requeue(&mut self, now: Time, event: ClusterEvent) {
        self.queue.move_on_event(&self.cluster, now, &event);
    }

    /// Why queued items left the unschedulable pool (events or the maximum wait).
    pub fn queue_stats(&self) -> crate::queue::QueueStats {
        self.queue.stats()
    }

    /// Items waiting in each part of the queue (walks the queue: sample it).
    pub fn queue_lengths(&self) -> crate::queue::QueueLengths {
        self.queue.lengths()
    }

    /// Number of items waiting in the queue (including in-flight ones).
    pub fn pending(&self) -> usize {
        self.queue.len()
    }

    /// Binds asked for ([`Effect::Bind`]) and neither confirmed by the watch nor failed:
    /// pod and node, in pod order. Their pods keep what they claimed until then.
    pub fn binds_in_flight(&self) -> impl Iterator<Item = (&ObjectKey, &str)> + '_ {
        self.in_flight.iter().map(|(k, b)| (k, &*b.node_name))
    }

    fn record(
        &mut self,
        involved: ObjectKey,
        uid: &str,
        type_: &'static str,
        reason: &str,
        message: String,
    ) {
        self.effects.push_back(Effect::Record(Record {
            involved,
            uid: uid.to_string(),
            type_,
            reason: reason.to_string(),
            message,
        }));
    }
}

#[cfg(test)]
mod tests {
    use super::intake::pod_updated;
    use super::*;
    use crate::testing::{node, pod, FakeDriver};

    fn requested_cpu(d: &FakeDriver, node: &str) -> Option<i64> {
        d.scheduler()
            .cluster
            .cache
            .node_by_name(node)
            .map(|n| n.requested[crate::resources::ResourceId::CPU])
    }

    #[test]
    fn schedules_pods_onto_nodes_with_room_and_reports_the_rest() {
        let mut d = FakeDriver::synchronous();
        d.apply(Object::Node(
            node("n1").alloc("cpu", "2").alloc("memory", "4Gi").build(),
        ));
        d.apply(Object::Node(
            node("n2").alloc("cpu", "1").alloc("memory", "4Gi").build(),
        ));
        d.apply(Object::Pod(pod("big").req("cpu", "2").build()));
        d.apply(Object::Pod(pod("small").req("cpu", "1").build()));
        d.apply(Object::Pod(pod("huge").req("cpu", "3").build()));
        d.settle();
        assert_eq!(d.bound("big").as_deref(), Some("n1"));
        assert_eq!(d.bound("small").as_deref(), Some("n2"));
        assert_eq!(d.bound("huge"), None);
        // DynamicResources' and DefaultPreemption's PostFilter words follow, as kube-scheduler
        // 1.35 appends them: 3 CPUs exceed
        // both nodes' allocatable, so no eviction could help.
        assert_eq!(
            d.condition("huge").map(|c| c.1).as_deref(),
            Some("0/2 nodes are available: 2 Insufficient cpu. no new claims to deallocate, preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling.")
        );
        assert_eq!(requested_cpu(&d, "n1"), Some(2000));
    }

    #[test]
    fn a_deleted_pod_frees_room_for_an_unschedulable_one() {
        let mut d = FakeDriver::synchronous();
        d.apply(Object::Node(node("n1").alloc("cpu", "1").build()));
        d.apply(Object::Pod(pod("a").req("cpu", "1").build()));
        d.settle();
        d.apply(Object::Pod(pod("b").req("cpu", "1").build()));
        d.settle();
        assert_eq!(d.bound("b"), None);
        d.delete(&ObjectKey::pod("default", "a"));
        d.settle();
        assert_eq!(d.bound("b").as_deref(), Some("n1"));
    }

    #[test]
    fn an_unreadable_pod_gets_a_condition_and_the_rest_is_scheduled() {
        let mut d = FakeDriver::synchronous();
        d.apply(Object::Node(node("n1").alloc("cpu", "2").build()));
        d.apply(Object::Pod(pod("bad").req("cpu", "-1").build()));
        d.apply(Object::Pod(pod("good").req("cpu", "1").build()));
        d.settle();
        assert_eq!(d.bound("good").as_deref(), Some("n1"));
        assert_eq!(
            d.condition("bad").map(|c| c.1).as_deref(),
            Some("pod cannot be scheduled: spec.containers[0].resources.requests[cpu]: must be greater than or equal to 0")
        );
    }

    #[test]
    fn an_empty_cluster_says_so() {
        let mut d = FakeDriver::synchronous();
        d.apply(Object::Pod(pod("p").build()));
        d.settle();
        assert_eq!(
            d.condition("p").map(|c| c.1).as_deref(),
            Some("no nodes available to schedule pods")
        );
    }

    #[test]
    fn is_pod_updated_ignores_what_the_scheduler_does_not_read() {
        let base = pod("p").req("cpu", "1").build();
        let mut status_only = (*base).clone();
        status_only.metadata.resource_version = Some("7".into());
        status_only.metadata.generation = Some(3);
        status_only.metadata.finalizers = Some(vec!["f".into()]);
        status_only.status = Some(berth_api::k8s_openapi::api::core::v1::PodStatus {
            phase: Some("Pending".into()),
            nominated_node_name: Some("n1".into()),
            ..Default::default()
        });
        assert!(!pod_updated(&base, &status_only));
        let labelled = pod("p").req("cpu", "1").label("a", "b").build();
        assert!(pod_updated(&base, &labelled));
        let bigger = pod("p").req("cpu", "2").build();
        assert!(pod_updated(&base, &bigger));
    }

    #[test]
    fn adaptive_percentage_of_nodes_to_score_matches_kube_scheduler() {
        let f = Scheduler::num_feasible_nodes_to_find;
        assert_eq!(f(None, 50), 50);
        assert_eq!(f(None, 500), 230);
        assert_eq!(f(None, 1000), 420);
        assert_eq!(f(None, 5000), 500);
        assert_eq!(f(None, 6000), 300);
        assert_eq!(f(Some(100), 5000), 5000);
        assert_eq!(f(Some(1), 5000), 100);
    }
}
