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

mod drp;
mod feedback;
mod filter_nodes;
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
    /// Everything the scheduler knows.
    pub cluster: Cluster,
    profiles: Vec<Profile>,
    queue: SchedulingQueue,
    effects: VecDeque<Effect>,
    rng: SplitMix64,
    next_start: usize,
    /// Last PodScheduled message sent per pod, so retries do not repeat it.
    last_message: HashMap<ObjectKey, String>,
    /// Counters.
    pub counters: Counters,
    // Reusable per-cycle buffers.
    feasible: Vec<NodeIdx>,
    scores: Vec<i64>,
    totals: Vec<i64>,
    diagnosis: Diagnosis,
    /// Pods nominated to nodes by preemption.
    nominator: Nominator,
    /// Nodes of the current cycle rejected as `Unschedulable` (where preemption may help).
    resolvable: Vec<NodeIdx>,
    /// What PostFilter decided in the current (failed) cycle, acted on in `fail`.
    post_filter_result: Option<PostFilterResult>,
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

/// The outcome of one scheduling cycle.
#[derive(Debug)]
enum Outcome {
    Placed(NodeIdx, CycleState),
    Failed(Diagnosis),
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
        Self {
            cluster,
            profiles,
            queue: SchedulingQueue::default(),
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
            post_filter_result: None,
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
        }
    }

    /// Whether the first LIST of every kind [`Config::wait_for_sync`] names is in: until
    /// then nothing is scheduled, expired or failed (the cluster adapter's readiness).
    pub fn synced(&self) -> bool {
        self.unsynced.is_empty()
    }

    /// NUMA figures: the reserve cache's counters (dirty nodes by reason, resync attempts,
    /// matches, mismatches, flushes, generation) and NRT lookups.
    pub fn numa_metrics(&self) -> crate::plugins::numatopology::NumaMetrics {
        self.cluster.numa.metrics()
    }

    /// Whether `pod` names a scheduler none of the profiles is (the NUMA cache treats the
    /// nodes such pods land on as foreign-touched).
    fn is_foreign(&self, pod: &PodInfo) -> bool {
        !self
            .profiles
            .iter()
            .any(|p| *p.scheduler_name == *pod.scheduler_name)
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
        match (t, self.volume_next_timeout()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Runs everything due at `now`. Does nothing before the initial sync (a reservation
    /// must not expire, nor a node's NUMA data be flushed, on a half-listed cluster).
    pub fn handle_timeout(&mut self, now: Time) {
        if !self.synced() {
            return;
        }
        let due = |t: Option<Time>| t.is_some_and(|t| t <= now);
        if due(self.cluster.reservations.next_timer())
            || due(self.cluster.numa.next_resync())
            || due(self.drp_next_timeout())
            || due(self.volume_next_timeout())
        {
            self.epoch += 1;
        }
        self.queue.flush(now);
        self.drp_timeouts(now);
        self.volume_timeouts(now);
        crate::reservation::lifecycle::on_timeout(&mut self.cluster, now, &mut self.effects);
        self.count_expired_holds();
        self.sync_reservations(now);
        // NUMA reserve cache resync: flushed nodes may fit pods now.
        for node in crate::plugins::numatopology::resync(&mut self.cluster, now) {
            if let Some(idx) = self.cluster.node_idx(&node) {
                self.requeue(now, ClusterEvent::topology(idx));
            }
        }
    }

    /// Moves the unschedulable items `event` may help out of the pool (queueing hints).
    fn requeue(&mut self, now: Time, event: ClusterEvent) {
        hints::requeue(&mut self.queue, &self.cluster, &self.profiles, now, &event);
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

    /// Applies an observed change.
    pub fn handle(&mut self, now: Time, event: Event) {
        let epoch = self.epoch;
        self.epoch += 1;
        self.quiet = false;
        match event {
            Event::Applied(obj) => {
                if let Some(seen) = self.relisting.get_mut(&obj.kind()) {
                    seen.insert(obj.key());
                }
                self.apply(now, obj);
            }
            Event::Deleted(key) => self.delete(now, key),
            Event::ListStarted(kind) => {
                self.relisting.insert(kind, BTreeSet::new());
            }
            Event::Listed(kind) => self.listed(now, kind),
            Event::BindFailed {
                pod,
                uid,
                node,
                class,
                message,
            } => self.bind_failed(now, pod, &uid, &node, class, message),
        }
        if self.quiet {
            self.epoch = epoch;
        }
        self.check_volume_waits(now);
        self.sync_reservations(now);
    }

    /// An object was created or replaced.
    fn apply(&mut self, now: Time, obj: Object) {
        match obj {
            Object::Node(node) => self.apply_node(now, node),
            Object::Pod(pod) => {
                let meta = &pod.metadata;
                let key = ObjectKey::pod(
                    meta.namespace.as_deref().unwrap_or("default"),
                    meta.name.as_deref().unwrap_or(""),
                );
                self.apply_pod(now, pod);
                crate::reservation::lifecycle::pod_changed(&mut self.cluster, &key, now);
                self.settle_hold(now, &key);
            }
            obj @ (Object::PersistentVolumeClaim(_)
            | Object::PersistentVolume(_)
            | Object::StorageClass(_)
            | Object::CsiNode(_)
            | Object::CsiDriver(_)
            | Object::CsiStorageCapacity(_)) => self.apply_storage(now, obj),
            Object::PriorityClass(pc) => {
                let name = pc.metadata.name.clone().unwrap_or_default();
                self.cluster.priority_classes.insert(name, pc);
            }
            Object::PodDisruptionBudget(pdb) => {
                let key = Object::PodDisruptionBudget(pdb.clone()).key();
                self.cluster.pdbs.insert(key, pdb);
            }
            Object::Namespace(ns) => {
                let name: Arc<str> = ns.metadata.name.as_deref().unwrap_or("").into();
                self.cluster.namespaces.insert(name, ns);
            }
            Object::NodeResourceTopology(nrt) => self.apply_nrt(now, &nrt),
            // Workloads: kube-controller-manager's business, not the scheduler's.
            Object::Deployment(_) | Object::ReplicaSet(_) | Object::StatefulSet(_) => {}
            Object::Reservation(r) => {
                let status = r
                    .metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(berth_api::annotations::ANNOTATION_RESOURCE_STATUS));
                let uid = r.metadata.uid.as_deref().unwrap_or("");
                let name = r.metadata.name.clone().unwrap_or_default();
                let read = self
                    .cluster
                    .cpusets
                    .reservation_applied(uid, status.map(String::as_str));
                let was = self.cluster.reservations.by_name(&name).map(|old| {
                    let before =
                        old.obj.metadata.annotations.as_ref().and_then(|a| {
                            a.get(berth_api::annotations::ANNOTATION_RESOURCE_STATUS)
                        });
                    before == status
                });
                if let (Err(why), false) = (read, was.unwrap_or(false)) {
                    let key = ObjectKey::cluster(crate::object::Kind::Reservation, &name);
                    let uid = uid.to_string();
                    self.invalid_resource_status(key, &uid, &why);
                }
                if !self.drp_on_reservation(now, &r) {
                    crate::reservation::lifecycle::apply(&mut self.cluster, r, now);
                }
                self.check_hold_owner(now, &name);
            }
        }
    }

    /// An NRT was observed. One the capacity rule refuses (a duplicate zone or resource,
    /// a negative amount, available above allocatable above capacity...) is treated as
    /// absent: NUMA filtering and exclusive CPUs fall back as for a node without an NRT, a
    /// Warning event names the field and the rule, and `explain` says why.
    fn apply_nrt(&mut self, now: Time, nrt: &berth_api::nrt::NodeResourceTopology) {
        let node = nrt.node_name().to_string();
        let key = ObjectKey::cluster(Kind::NodeResourceTopology, &node);
        let uid = nrt.metadata.uid.as_deref().unwrap_or("").to_string();
        if let Err(refusal) = berth_api::validate::nrt(nrt) {
            let message = format!(
                "{refusal}; NodeResourceTopology {node} is ignored: node {node} is scheduled as if it published none"
            );
            let had = self.cluster.numa.node_has_topology(&node)
                || self.cluster.cpusets.node(&node).is_some();
            self.cluster.numa.delete_nrt(&node);
            self.cluster.numa.refuse_nrt(&node, message.clone());
            self.cluster.cpusets.delete_nrt(&node);
            self.reread_node_reservation(now, &node);
            self.refresh_cpus(&node);
            self.refuse(key, &uid, REASON_INVALID_NRT, refusal.rule, message);
            if let (true, Some(idx)) = (had, self.cluster.node_idx(&node)) {
                self.requeue(now, ClusterEvent::topology(idx));
            }
            return;
        }
        self.cluster.refusals.accept(&key, REASON_INVALID_NRT);
        self.cluster.numa.accept_nrt(&node);
        let cpus_changed = self.apply_cpu_topology(now, nrt);
        match self.cluster.numa.apply_nrt(nrt, now) {
            Ok(changed) => {
                if let (true, Some(idx)) = (changed || cpus_changed, self.cluster.node_idx(&node)) {
                    self.requeue(now, ClusterEvent::topology(idx));
                }
            }
            Err(e) => self.refuse(
                key,
                &uid,
                REASON_INVALID_NRT,
                Rule::Malformed,
                e.to_string(),
            ),
        }
    }

    /// Reads the koordlet CPU annotations of an NRT (a refused one is a Warning on the
    /// node, which then has no CPU topology) and recomputes the node's excluded CPUs.
    /// Returns whether exclusive-CPU pods may see the node differently.
    fn apply_cpu_topology(
        &mut self,
        now: Time,
        nrt: &berth_api::nrt::NodeResourceTopology,
    ) -> bool {
        let name = nrt.node_name().to_string();
        let before = self.cluster.cpusets.node(&name).is_some();
        let key = ObjectKey::cluster(Kind::Node, &name);
        match self.cluster.cpusets.apply_nrt(nrt) {
            Ok(()) => self
                .cluster
                .refusals
                .accept(&key, REASON_INVALID_CPU_TOPOLOGY),
            Err((rule, message)) => {
                let uid = self
                    .cluster
                    .node_by_name(&name)
                    .and_then(|n| n.node.metadata.uid.clone())
                    .unwrap_or_default();
                self.refuse(key, &uid, REASON_INVALID_CPU_TOPOLOGY, rule, message);
            }
        }
        self.reread_node_reservation(now, &name);
        self.refresh_cpus(&name);
        before || self.cluster.cpusets.node(&name).is_some()
    }

    /// The CPU topology `node` publishes changed: a node reservation naming CPUs by id
    /// (`reservedCPUs`) is checked against it again ([`Cluster::check_reserved_cpus`]).
    fn reread_node_reservation(&mut self, now: Time, node: &str) {
        use berth_api::annotations::{AnnotationCodec, NodeReservation};
        let Some(obj) = self.cluster.node_by_name(node).map(|n| n.node.clone()) else {
            return;
        };
        let names_cpus = NodeReservation::from_annotations(obj.metadata.annotations.as_ref())
            .ok()
            .flatten()
            .is_some_and(|r| !r.reserved_cpus.is_empty());
        if names_cpus {
            self.apply_node(now, obj);
        }
    }

    /// Reports `key` refused by the capacity rule for `reason`: a Warning event the first
    /// time (and when the message changes), never on every update of the same object.
    fn refuse(
        &mut self,
        key: ObjectKey,
        uid: &str,
        reason: &'static str,
        rule: Rule,
        message: String,
    ) {
        if self.cluster.refusals.refuse(&key, reason, rule, &message) {
            self.record(key, uid, "Warning", reason, message);
        }
    }

    /// Refusals reported since the last call, by kind and rule (for
    /// `berth_unreadable_objects_total{kind,reason}`).
    pub fn take_refusals(&mut self) -> Vec<(Kind, Rule)> {
        self.cluster.refusals.take_new()
    }

    /// Recomputes what `node` keeps from exclusive-CPU pods and reports each pod that holds
    /// CPUs the node now reserves (seed 004's eviction list: a Warning on the pod).
    fn refresh_cpus(&mut self, node: &str) {
        for e in crate::cpuset::state::refresh(&mut self.cluster, node) {
            let message = e.message();
            self.record(e.pod, &e.uid, "Warning", EVICT_RESERVED_CPUS, message);
        }
    }

    fn apply_node(&mut self, now: Time, node: Arc<berth_api::k8s_openapi::api::core::v1::Node>) {
        let name = node.metadata.name.clone().unwrap_or_default();
        let before = self.cluster.node_by_name(&name).map(hints::NodeBefore::of);
        let uid = node.metadata.uid.clone().unwrap_or_default();
        match self.cluster.apply_node(node) {
            Ok(idx) => {
                let key = ObjectKey::cluster(Kind::Node, &name);
                self.cluster.refusals.accept(&key, REASON_INVALID_NODE);
                let bad = self
                    .cluster
                    .node(idx)
                    .and_then(|n| n.annotation_error.clone());
                match bad {
                    Some((rule, message)) => {
                        let uid = self
                            .cluster
                            .node(idx)
                            .and_then(|n| n.node.metadata.uid.clone())
                            .unwrap_or_default();
                        self.refuse(key, &uid, REASON_INVALID_NODE_RESERVATION, rule, message);
                    }
                    None => self
                        .cluster
                        .refusals
                        .accept(&key, REASON_INVALID_NODE_RESERVATION),
                }
                crate::reservation::lifecycle::node_applied(&mut self.cluster, idx);
                let cpus_before = self.cluster.cpusets.node(&name).map(|c| c.excluded.clone());
                self.refresh_cpus(&name);
                let cpus_after = self.cluster.cpusets.node(&name).map(|c| c.excluded.clone());
                let event = match (&before, self.cluster.node(idx)) {
                    (Some(b), Some(n)) => ClusterEvent::node_updated(idx, hints::node_change(b, n)),
                    _ => ClusterEvent::node_added(idx),
                };
                self.requeue(now, event);
                // The node reserves other CPUs (its annotation changed, allocatable maybe
                // not): pods NodeNUMAResource rejected may fit now.
                if cpus_before != cpus_after {
                    self.requeue(now, ClusterEvent::topology(idx));
                }
            }
            Err(e) => {
                let rule = e.rule();
                let key = ObjectKey::cluster(Kind::Node, &name);
                self.refuse(key, &uid, REASON_INVALID_NODE, rule, e.to_string());
            }
        }
    }

    /// An object was deleted (observed, or missing from a re-LIST).
    fn delete(&mut self, now: Time, key: ObjectKey) {
        self.cluster.refusals.forget(&key);
        if key.kind == Kind::NodeResourceTopology {
            self.cluster.numa.accept_nrt(&key.name);
        }
        if let Some(seen) = self.relisting.get_mut(&key.kind) {
            seen.remove(&key);
        }
        match key.kind {
            Kind::Node => {
                self.drp_node_deleted(now, &key.name);
                let idx = self.cluster.node_idx(&key.name);
                self.cluster.delete_node(&key.name);
                self.cluster.numa.delete_node(&key.name);
                crate::reservation::lifecycle::node_deleted(&mut self.cluster, idx, &key.name, now);
                self.requeue(now, ClusterEvent::node_deleted());
            }
            Kind::Pod => {
                // A pod deleted while its bind is in flight gives back what it claimed now;
                // the bind's failure, when it comes, is stale.
                if let Some(b) = self.in_flight.remove(&key) {
                    self.unassume(now, b);
                }
                self.drp_pod_deleted(now, &key);
                self.volume_pod_deleted(now, &key);
                self.queue.delete(&key);
                self.drop_nomination(now, &key, None);
                self.last_message.remove(&key);
                if let Some(uid) = self.cluster.pod(&key).map(|e| e.info.uid.clone()) {
                    self.expire_hold(now, &key, &uid, "the preemptor was deleted", true);
                }
                if let Some(e) = self.cluster.remove_pod(&key) {
                    self.cluster.cpusets.release(&e.info.uid);
                    let foreign = self.is_foreign(&e.info);
                    crate::plugins::numatopology::pod_deleted(&mut self.cluster, &e, foreign, now);
                    if e.state != PodState::Pending && !e.info.terminal {
                        self.requeue(now, ClusterEvent::assigned_pod_deleted(e.node));
                    }
                }
                crate::reservation::lifecycle::pod_removed(&mut self.cluster, &key);
            }
            Kind::PersistentVolumeClaim
            | Kind::PersistentVolume
            | Kind::StorageClass
            | Kind::CsiNode
            | Kind::CsiDriver
            | Kind::CsiStorageCapacity => self.delete_storage(now, &key),
            Kind::PriorityClass => {
                self.cluster.priority_classes.remove(&*key.name);
            }
            Kind::PodDisruptionBudget => {
                self.cluster.pdbs.remove(&key);
            }
            Kind::Namespace => {
                self.cluster.namespaces.remove(&*key.name);
            }
            Kind::Deployment | Kind::ReplicaSet | Kind::StatefulSet => {}
            Kind::Reservation => {
                if let Some(uid) = self
                    .cluster
                    .reservations
                    .by_name(&key.name)
                    .map(|r| r.uid.clone())
                {
                    self.cluster.cpusets.release(&uid);
                }
                crate::reservation::lifecycle::delete(&mut self.cluster, &key.name);
            }
            Kind::NodeResourceTopology => {
                self.cluster.numa.delete_nrt(&key.name);
                self.cluster.cpusets.delete_nrt(&key.name);
                if let Some(idx) = self.cluster.node_idx(&key.name) {
                    self.requeue(now, ClusterEvent::topology(idx));
                }
            }
        }
    }

    /// The (re-)LIST of `kind` is complete. After a re-list (a watch that broke and was
    /// started again), objects the core knows that the LIST did not return were deleted
    /// while nobody watched: they go through the ordinary delete path, so that the queue,
    /// reservations and the NUMA cache follow.
    fn listed(&mut self, now: Time, kind: Kind) {
        if let Some(seen) = self.relisting.remove(&kind) {
            for key in self.known(kind) {
                if !seen.contains(&key) {
                    self.delete(now, key);
                }
            }
        }
        self.unsynced.remove(&kind);
        // A preemptor placed or deleted while the core could not judge its hold (before the
        // first sync, or during a re-list) settles its hold now, as a core rebuilt from the
        // same objects would. Whichever kind's LIST ends last completes the sync.
        if self.synced() {
            let holds: Vec<String> = self
                .cluster
                .reservations
                .iter()
                .filter(|r| crate::plugins::defaultpreemption::hold::preemptor_of(r).is_some())
                .map(|r| r.name.to_string())
                .collect();
            for name in holds {
                self.check_hold_owner(now, &name);
            }
        }
    }

    /// The keys of every object of `kind` the core holds, sorted.
    fn known(&self, kind: Kind) -> Vec<ObjectKey> {
        let cx = &self.cluster;
        let cluster = |name: &str| ObjectKey::cluster(kind, name);
        let mut keys: Vec<ObjectKey> = match kind {
            Kind::Pod => cx.pods().map(|e| e.info.key.clone()).collect(),
            Kind::Node => cx.nodes().map(|n| cluster(&n.name)).collect(),
            Kind::Reservation => cx
                .reservations
                .iter()
                .filter(|r| !r.is_virtual())
                .map(|r| r.object_key())
                .collect(),
            Kind::NodeResourceTopology => cx.numa.nrt_nodes().map(cluster).collect(),
            Kind::PersistentVolumeClaim => cx.pvcs.keys().cloned().collect(),
            Kind::PodDisruptionBudget => cx.pdbs.keys().cloned().collect(),
            Kind::CsiNode => cx.csi_nodes.keys().map(|n| cluster(n)).collect(),
            Kind::PriorityClass => cx.priority_classes.keys().map(|n| cluster(n)).collect(),
            Kind::Namespace => cx.namespaces.keys().map(|n| cluster(n)).collect(),
            Kind::PersistentVolume => cx.pvs.keys().map(|n| cluster(n)).collect(),
            Kind::StorageClass => cx.storage_classes.keys().map(|n| cluster(n)).collect(),
            Kind::CsiDriver => cx.csi_drivers.keys().map(|n| cluster(n)).collect(),
            Kind::CsiStorageCapacity => cx.csi_capacities.keys().cloned().collect(),
            Kind::Deployment | Kind::ReplicaSet | Kind::StatefulSet => Vec::new(),
        };
        keys.sort();
        keys
    }

    /// A bind the core asked for failed (kube-scheduler's `handleBindingCycleError`): every
    /// Reserve plugin's Unreserve runs with the cycle state of the decision, the assumed pod
    /// leaves its node (pods waiting for that room are retried), and that pod alone goes to
    /// back-off with a `SchedulerError` condition; a pod that is gone (`NotFound`) waits for
    /// its deletion instead. A failure for a bind that is no longer in flight (confirmed by
    /// the watch, or meant for an older incarnation of the pod or another node) is stale and
    /// ignored.
    fn bind_failed(
        &mut self,
        now: Time,
        pod: ObjectKey,
        uid: &str,
        node: &str,
        class: BindFailure,
        message: String,
    ) {
        if self.volume_bind_failed(now, &pod, uid, node, &message) {
            return;
        }
        let current = self
            .in_flight
            .get(&pod)
            .is_some_and(|b| &*b.pod.uid == uid && &*b.node_name == node);
        if !current {
            return;
        }
        let Some(b) = self.in_flight.remove(&pod) else {
            return;
        };
        let attempts = b.attempts;
        self.unassume(now, b);
        if class == BindFailure::NotFound {
            return;
        }
        // A 409 (the pod already bound, or another incarnation) is answered again until the
        // watch catches up, so retrying at once cannot help: that pod waits out its back-off
        // in full. Popped early with nothing else to do, it was bound and refused again at
        // the same instant forever, the watch event that would end it never delivered (the
        // core_events fuzz timeouts). A transient failure stays eligible for an early pop.
        let wait_out = class == BindFailure::Conflict;
        if !self.back_off_after_binding_error(now, &pod, uid, attempts, wait_out, &message) {
            return;
        }
        self.record(
            pod,
            uid,
            "Warning",
            "FailedScheduling",
            format!("Binding rejected: {message}"),
        );
    }

    /// A binding cycle failed for a pod berth still schedules (`handleBindingCycleError`):
    /// it backs off and carries a `SchedulerError` condition with `message`. Returns false,
    /// doing nothing, when the pod is gone, bound, terminating, terminal, another
    /// incarnation or another scheduler's.
    fn back_off_after_binding_error(
        &mut self,
        now: Time,
        pod: &ObjectKey,
        uid: &str,
        attempts: u32,
        wait_out: bool,
        message: &str,
    ) -> bool {
        let Some(info) = self
            .cluster
            .pod(pod)
            .filter(|e| e.state == PodState::Pending && &*e.info.uid == uid)
            .map(|e| e.info.clone())
        else {
            return false;
        };
        if info.terminating || info.terminal || self.is_foreign(&info) {
            return false;
        }
        self.counters.errors += 1;
        self.queue.add_backoff(
            pod.clone(),
            info.priority,
            info.created,
            attempts,
            now,
            wait_out,
        );
        self.last_message.insert(pod.clone(), message.to_string());
        self.effects.push_back(Effect::PodCondition {
            pod: pod.clone(),
            status: "False",
            reason: "SchedulerError".into(),
            message: message.to_string(),
        });
        true
    }

    /// Undoes the assumption of a bind that will not be confirmed: every Reserve plugin's
    /// Unreserve in reverse order, with the cycle state of the decision, then the pod leaves
    /// its node in the cache and pods waiting for that room are retried.
    fn unassume(&mut self, now: Time, mut b: InFlight) {
        // A node deleted meanwhile took the holds on it along; one re-created under the same
        // name has a new slot, and the old slot may hold another node by now.
        let node = self.cluster.node_idx(&b.node_name).unwrap_or(b.node);
        b.state.now = now;
        self.run_unreserve(b.profile, &mut b.state, &b.pod, node);
        let assumed = self
            .cluster
            .pod(&b.pod.key)
            .filter(|e| e.state == PodState::Assumed && e.info.uid == b.pod.uid)
            .map(|e| e.node);
        if let Some(on) = assumed {
            self.cluster.forget(&b.pod.key);
            self.requeue(now, ClusterEvent::assigned_pod_deleted(on));
        }
        crate::reservation::lifecycle::forget_owner(&mut self.cluster, &b.pod.key);
    }

    /// Settles the bind in flight for the pod `info` is a new version of, if there is one:
    /// the watch showing it on the node it was assumed on confirms it (whether the bind's
    /// answer came first or not: a later failure for it is stale); showing it elsewhere,
    /// finished, or as another incarnation voids the assumption. An update that leaves it
    /// unbound keeps the bind in flight.
    fn settle_bind(&mut self, now: Time, info: &PodInfo) {
        let Some(b) = self.in_flight.get(&info.key) else {
            return;
        };
        let same = b.pod.uid == info.uid && !info.terminal;
        match info.node_name.as_deref() {
            Some(n) if same && n == &*b.node_name => {
                self.in_flight.remove(&info.key);
            }
            None if same => {}
            _ => {
                if let Some(b) = self.in_flight.remove(&info.key) {
                    self.unassume(now, b);
                }
            }
        }
    }

    fn apply_pod(&mut self, now: Time, pod: Arc<berth_api::k8s_openapi::api::core::v1::Pod>) {
        let info = match PodInfo::new(pod.clone(), &mut self.cluster.names) {
            Ok(i) => Arc::new(i),
            Err(e) => return self.reject_invalid_pod(&pod, e.to_string()),
        };
        let key = info.key.clone();
        if info.node_name.is_none() && !info.terminal && !self.is_foreign(&info) {
            // A reservation template the scheduler cannot use makes the pod unschedulable
            // as written, like an unreadable request; everything else goes on.
            if let Err(message) = crate::drp::template::Template::of_pod(&info) {
                if self
                    .cluster
                    .pod(&key)
                    .is_some_and(|e| e.state == PodState::Pending)
                {
                    self.cluster.remove_pod(&key);
                }
                return self.reject_invalid_pod(&pod, message);
            }
        }
        self.drp_claim(&info);
        self.drp_settle(now, &info);
        self.volume_settle(now, &info);
        self.settle_bind(now, &info);
        let assigned = info.node_name.is_some();
        let prev = self.cluster.apply_pod(info.clone());
        if let Err(why) = self.cluster.cpusets.pod_applied(&info) {
            // Reported once per text, not on every update of the pod.
            let status = |p: &PodInfo| {
                p.annotation(berth_api::annotations::ANNOTATION_RESOURCE_STATUS)
                    .map(str::to_string)
            };
            if prev.as_ref().map(|p| status(&p.info)) != Some(status(&info)) {
                self.invalid_resource_status(key.clone(), &info.uid.clone(), &why);
            }
        }
        let foreign = self.is_foreign(&info);
        crate::plugins::numatopology::pod_applied(
            &mut self.cluster,
            prev.as_ref(),
            &info,
            foreign,
            now,
        );
        if assigned || info.terminal {
            self.queue.delete(&key);
            let landed = (!info.terminal)
                .then(|| self.cluster.pod(&key).and_then(|e| e.node))
                .flatten();
            self.drop_nomination(now, &key, landed);
            self.last_message.remove(&key);
            // A pod landing (bound by someone else) or leaving its node changes what fits.
            let held = prev
                .as_ref()
                .filter(|p| p.state != PodState::Pending && !p.info.terminal);
            let holds = (!info.terminal)
                .then(|| self.cluster.pod(&key).map(|e| e.node))
                .flatten();
            match (held, holds) {
                (Some(p), Some(node)) if p.node == node => {
                    // A bind confirmed: with `discardReservedNodes` the node's NUMA data is
                    // usable again.
                    let discard = self.cluster.numa.cache().config().mode
                        == crate::numa::CacheMode::DiscardReserved;
                    if let (true, PodState::Assumed, Some(idx)) = (discard, p.state, node) {
                        self.requeue(now, ClusterEvent::topology(idx));
                    }
                    // An in-place resize that shrank what the pod holds frees room, as a
                    // pod leaving would (kube-scheduler's `UpdatePodScaleDown`).
                    if !p.info.requests.le(&info.requests) {
                        self.requeue(now, ClusterEvent::assigned_pod_deleted(node));
                    }
                }
                (held, holds) => {
                    if let Some(p) = held {
                        self.requeue(now, ClusterEvent::assigned_pod_deleted(p.node));
                    }
                    if let Some(node) = holds {
                        self.requeue(now, ClusterEvent::assigned_pod_added(node));
                    }
                }
            }
            return;
        }
        if self
            .cluster
            .pod(&key)
            .is_some_and(|e| e.state == PodState::Assumed)
        {
            return;
        }
        // A bound incarnation replaced by a pending one without a deletion in between (a
        // re-LIST after a broken watch) left its node.
        if let Some(p) = prev
            .as_ref()
            .filter(|p| p.state != PodState::Pending && !p.info.terminal)
        {
            self.requeue(now, ClusterEvent::assigned_pod_deleted(p.node));
        }
        if info.terminating || foreign {
            // Being deleted, or another scheduler's: nothing to schedule (a foreign pod still
            // counts on its node once that scheduler binds it).
            self.queue.delete(&key);
            self.drop_nomination(now, &key, None);
            return;
        }
        let prev_info = prev
            .as_ref()
            .filter(|p| p.info.uid == info.uid && p.state == PodState::Pending)
            .map(|p| &*p.info);
        let nominated = self.nominator.node_of(&key).cloned();
        self.nominator.update(prev_info, &info);
        if nominated.is_some() && self.nominator.node_of(&key) != nominated.as_ref() {
            self.wake_nominated_room(now, nominated.as_deref());
        }
        // kube-scheduler's `isPodUpdated`: an update that changes nothing the scheduler reads
        // (the echo of its own condition patch, a status or resourceVersion change) leaves a
        // queued pod where it is, in the unschedulable pool included.
        let updated = prev_info.is_none_or(|p| pod_updated(&p.pod, &info.pod));
        if updated || !self.queue.contains(&key) {
            self.queue.add(key, info.priority, info.created, now);
        } else if self.nominator.node_of(&key) == nominated.as_ref() {
            self.quiet = true;
        }
    }

    /// A pod the core cannot read (an unparsable quantity that slipped past the API server,
    /// more extended resources than the core tracks) is never queued; it gets a
    /// PodScheduled=False condition and a warning naming the problem, and everything else
    /// keeps being scheduled.
    fn reject_invalid_pod(
        &mut self,
        pod: &berth_api::k8s_openapi::api::core::v1::Pod,
        message: String,
    ) {
        let meta = &pod.metadata;
        let key = ObjectKey::pod(
            meta.namespace.as_deref().unwrap_or("default"),
            meta.name.as_deref().unwrap_or(""),
        );
        self.queue.delete(&key);
        if pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.as_ref())
            .is_some()
        {
            // Already bound: nothing to schedule, and its usage cannot be counted.
            self.record(
                key,
                meta.uid.as_deref().unwrap_or(""),
                "Warning",
                "InvalidPod",
                message,
            );
            return;
        }
        let message = format!("pod cannot be scheduled: {message}");
        if self.last_message.get(&key) == Some(&message) {
            return;
        }
        self.last_message.insert(key.clone(), message.clone());
        self.effects.push_back(Effect::PodCondition {
            pod: key.clone(),
            status: "False",
            reason: "Unschedulable".into(),
            message: message.clone(),
        });
        self.record(
            key,
            meta.uid.as_deref().unwrap_or(""),
            "Warning",
            "FailedScheduling",
            message,
        );
    }

    /// Schedules until the active queue is empty (popping backing-off pods early when it
    /// is, as `SchedulerPopFromBackoffQ` does). Returns how many cycles ran: none before the
    /// initial sync (a half-listed cluster would place pods on room that is taken, and fail
    /// reservations whose node is not listed yet).
    pub fn run_until_idle(&mut self, now: Time) -> usize {
        self.run_at_most(now, usize::MAX)
    }

    /// [`Scheduler::run_until_idle`], stopping after `max_cycles` cycles: test drivers
    /// bound it so that a livelock (cycles that keep requeueing each other at one instant)
    /// is reported with the sequence that caused it instead of hanging the test.
    pub fn run_at_most(&mut self, now: Time, max_cycles: usize) -> usize {
        if !self.synced() {
            return 0;
        }
        let mut cycles = 0;
        crate::reservation::lifecycle::expire_on_missing_nodes(&mut self.cluster, now);
        self.sync_reservations(now);
        self.queue.flush(now);
        while cycles < max_cycles {
            match self.queue.pop() {
                Some(key) => {
                    self.schedule_one(now, key);
                    self.sync_reservations(now);
                    cycles += 1;
                }
                None => {
                    if !self.queue.pop_backoff_early() {
                        break;
                    }
                }
            }
        }
        cycles
    }

    /// Runs one scheduling cycle for the next active item, if there is one. Returns whether
    /// a cycle ran. Benchmarks time this; drivers use [`Scheduler::run_until_idle`].
    pub fn schedule_next(&mut self, now: Time) -> bool {
        if !self.synced() {
            return false;
        }
        match self.queue.pop() {
            Some(key) => {
                self.schedule_one(now, key);
                self.sync_reservations(now);
                true
            }
            None => false,
        }
    }

    fn profile_for(&self, pod: &PodInfo) -> usize {
        self.profiles
            .iter()
            .position(|p| *p.scheduler_name == *pod.scheduler_name)
            .unwrap_or(0)
    }

    fn schedule_one(&mut self, now: Time, key: ObjectKey) {
        let Some(pod) = self.item(&key) else {
            self.queue.done(&key);
            return;
        };
        if let Some(step) = self.queue.replayable(&key, self.epoch) {
            // Nothing changed since this pod failed: the cycle would fail the same way, with
            // the same message (so no new condition or event) and the same random draws.
            self.rng.advance(step);
            self.queue.failed_again(&key, now);
            self.counters.replayed += 1;
            return;
        }
        self.counters.attempts += 1;
        let epoch = self.epoch;
        let rng_at = self.rng.position();
        let nominated = self.nominator.node_of(&key).cloned();
        let profile = self.profile_for(&pod);
        let (outcome, plan) = self.find_node_for(profile, &pod, now);
        let fed = self.filter_feedback(profile, &pod, now);
        let mut changed = true;
        match outcome {
            Outcome::Placed(node, state) => {
                if let Err(status) = self.reserve_and_bind(profile, state, &pod, node, now, plan) {
                    self.counters.errors += 1;
                    let mut d = Diagnosis::default();
                    d.error = Some(status.message());
                    self.fail(now, &pod, d);
                }
            }
            Outcome::Failed(diag) => {
                let preempting = self
                    .post_filter_result
                    .as_ref()
                    .is_some_and(|r| matches!(r.nomination, Nomination::Node(_)));
                changed = diag.error.is_some() || preempting || fed;
                self.fail(now, &pod, diag);
            }
        }
        let unchanged = !changed
            && key.kind == Kind::Pod
            && self.epoch == epoch
            && self.nominator.node_of(&key) == nominated.as_ref();
        if unchanged {
            let step = self.rng.position().wrapping_sub(rng_at);
            self.queue.remember_failure(&key, epoch, step);
        } else {
            self.epoch += 1;
        }
    }

    /// Hands each feedback plugin its Filter verdicts of the cycle that just ran. A node
    /// another plugin rejected counts as passed by this one only if this one ran first.
    /// Returns whether any plugin was handed verdicts (its state changed).
    fn filter_feedback(&mut self, profile: usize, pod: &PodInfo, now: Time) -> bool {
        if self.filter_log.is_empty() {
            return false;
        }
        let mut fed = false;
        let prof = &self.profiles[profile];
        for &j in &self.feedback[profile] {
            let i = prof.filter[j];
            if self.filter_log_skip & (1 << i) != 0 {
                continue;
            }
            let p = &prof.plugins[i];
            let name = p.name();
            // What a rejection by another plugin says about this one, per rejecting plugin:
            // worked out at its first node, not at every node (a name lookup along the
            // Filter list per node was most of the feedback on a full cluster).
            let mut seen = SeenPlugins::default();
            self.feedback_buf.clear();
            for &(idx, by) in &self.filter_log {
                let passed = if by.is_empty() {
                    true
                } else if same_name(by, name) {
                    false
                } else {
                    let later = seen.get(by).unwrap_or_else(|| {
                        let later = prof
                            .filter
                            .iter()
                            .position(|&k| prof.plugins[k].name() == by)
                            .is_some_and(|pos| pos > j);
                        seen.put(by, later);
                        later
                    });
                    if !later {
                        continue;
                    }
                    true
                };
                self.feedback_buf.push((idx, passed));
            }
            p.filter_feedback(&mut self.cluster, pod, &self.feedback_buf, now);
            fed = true;
        }
        self.filter_log.clear();
        fed
    }

    fn item(&self, key: &ObjectKey) -> Option<Arc<PodInfo>> {
        match key.kind {
            Kind::Pod => self
                .cluster
                .pod(key)
                .filter(|e| e.state == PodState::Pending)
                .map(|e| e.info.clone()),
            Kind::Reservation => self.cluster.reservations.item(&key.name),
            _ => None,
        }
    }

    /// kube-scheduler's `numFeasibleNodesToFind`.
    pub fn num_feasible_nodes_to_find(percentage: Option<u32>, num_all: usize) -> usize {
        const MIN_FEASIBLE: usize = 100;
        const MIN_PERCENTAGE: i64 = 5;
        if num_all < MIN_FEASIBLE {
            return num_all;
        }
        let mut pct = i64::from(percentage.unwrap_or(0));
        if pct == 0 {
            pct = (50 - num_all as i64 / 125).max(MIN_PERCENTAGE);
        }
        if pct >= 100 {
            return num_all;
        }
        ((num_all as i64 * pct / 100) as usize).max(MIN_FEASIBLE)
    }

    fn find_node(&mut self, profile: usize, pod: &PodInfo, now: Time) -> Outcome {
        let prof = &self.profiles[profile];
        let cx = &self.cluster;
        let mut state = CycleState {
            now,
            ..CycleState::default()
        };
        let mut diag = std::mem::take(&mut self.diagnosis);
        diag.clear();
        self.resolvable.clear();
        self.post_filter_result = None;
        let num_all = cx.node_count();
        if num_all == 0 {
            return Outcome::Failed(diag);
        }
        for &i in &prof.pre_filter {
            prof.plugins[i].before_pre_filter(cx, &mut state, pod);
        }
        // PreFilter.
        let mut rejected_by = None;
        for &i in &prof.pre_filter {
            let p = &prof.plugins[i];
            let st = p.pre_filter(cx, &mut state, pod);
            if st.is_skip() {
                state.skip_filter |= 1 << i;
                continue;
            }
            if !st.is_success() {
                if st.code() == Code::Error {
                    diag.error = Some(format!(
                        "running PreFilter plugin {:?}: {}",
                        p.name(),
                        st.message()
                    ));
                    return Outcome::Failed(diag);
                }
                diag.pre_filter_msg = Some(st.message());
                diag.unschedulable_plugins.push(p.name());
                rejected_by = Some(st.code());
                break;
            }
        }
        if let Some(code) = rejected_by {
            // Every node has PreFilter's status; PostFilter still runs, as in kube-scheduler.
            if code == Code::Unschedulable {
                self.resolvable.extend_from_slice(self.cluster.node_order());
            }
            self.run_post_filter(profile, &state, pod, &mut diag);
            return Outcome::Failed(diag);
        }
        // Filter, from a rotating start, until enough feasible nodes are found.
        let has_score = !prof.score.is_empty();
        let subset = state.node_subset.take();
        // A pod nominated by an earlier preemption tries that node first and takes it if it
        // fits (kube-scheduler's evaluateNominatedNode); its rejection is not recorded, the
        // full pass below records it.
        if let Some(idx) = self
            .nominator
            .node_of(&pod.key)
            .and_then(|n| cx.node_idx(n))
        {
            let allowed = subset.as_ref().is_none_or(|s| s.contains(&idx));
            if let Some(node) = cx.node(idx).filter(|_| allowed) {
                self.counters.nodes_filtered += 1;
                let st = run_filter_plugins_with_nominated_pods(
                    &FilterPlan::new(prof, &state),
                    cx,
                    &state,
                    pod,
                    node,
                    &self.nominator,
                );
                if st.is_success() {
                    self.diagnosis = diag;
                    state.node_subset = subset;
                    return Outcome::Placed(idx, state);
                }
            }
        }
        self.filter_log.clear();
        self.filter_log_skip = state.skip_filter;
        let candidates: &[NodeIdx] = subset.as_deref().unwrap_or(cx.node_order());
        let n = candidates.len();
        let to_find = if has_score {
            Self::num_feasible_nodes_to_find(prof.percentage_of_nodes_to_score, n)
        } else {
            1
        };
        let mut feasible = std::mem::take(&mut self.feasible);
        feasible.clear();
        let start = if subset.is_some() || n == 0 {
            0
        } else {
            self.next_start % n
        };
        let plan = FilterPlan::new(prof, &state);
        // Preferred nodes (those holding the pod's reservations) first, then the rotating
        // sample (which skips them); only the sample advances the rotation.
        let preferred = std::mem::take(&mut state.preferred_nodes);
        let nominated = (!self.nominator.is_empty()).then(|| self.nominator.nodes_in(cx));
        let mut found = Found {
            feasible: &mut feasible,
            resolvable: &mut self.resolvable,
            diag: &mut diag,
            // Kept only when a feedback plugin is to be handed it: one whose PreFilter
            // skipped it this cycle learns nothing (`filter_feedback`), and most pods are
            // not NUMA pods.
            log: self.feedback[profile]
                .iter()
                .any(|&j| state.skip_filter & (1 << prof.filter[j]) == 0)
                .then_some(&mut self.filter_log),
            nodes_filtered: &mut self.counters.nodes_filtered,
        };
        let filtering = Filtering {
            plan: &plan,
            cx,
            pod,
            nominator: &self.nominator,
            nominated_nodes: nominated.as_ref(),
        };
        // The preferred nodes go through the same batched loop as the sample: in order,
        // stopping once enough are feasible.
        if !preferred.is_empty() {
            filtering.rotation(
                &state,
                preferred
                    .iter()
                    .copied()
                    .filter(|i| subset.as_ref().is_none_or(|s| s.contains(i))),
                &[],
                to_find,
                &mut found,
                &mut self.rejected,
            );
            state.outside_preferred = true;
        }
        // The rotation as two slices: no modulo per node.
        let (before, after) = candidates.split_at(start.min(n));
        let processed = filtering.rotation(
            &state,
            after.iter().chain(before).copied(),
            &preferred,
            to_find,
            &mut found,
            &mut self.rejected,
        );
        // Later Filter runs (preemption's) see any node again.
        state.outside_preferred = false;
        drop(plan);
        if subset.is_none() && n > 0 {
            self.next_start = (start + processed) % n;
        }
        if feasible.is_empty() {
            if let Some(s) = &subset {
                // Nodes a PreFilter result left out count as rejected by those plugins.
                let reason = format!(
                    "node(s) didn't satisfy plugin(s) [{}]",
                    state.subset_plugins.join(" ")
                );
                diag.add_absent(reason, num_all.saturating_sub(s.len()) as u32);
                // A change to those nodes can help only through those plugins' events.
                if s.len() < num_all {
                    for p in &state.subset_plugins {
                        if !diag.unschedulable_plugins.contains(p) {
                            diag.unschedulable_plugins.push(p);
                        }
                    }
                }
            }
            self.feasible = feasible;
            self.run_post_filter(profile, &state, pod, &mut diag);
            return Outcome::Failed(diag);
        }
        self.diagnosis = diag;
        state.node_subset = subset;
        if feasible.len() == 1 {
            let only = feasible[0];
            self.feasible = feasible;
            return Outcome::Placed(only, state);
        }
        // PreScore and Score.
        let m = feasible.len();
        for &i in &prof.pre_score {
            let st = prof.plugins[i].pre_score(cx, &mut state, pod, &feasible);
            if st.is_skip() {
                state.skip_score |= 1 << i;
            } else if !st.is_success() {
                // kube-scheduler fails the cycle when PreScore errors.
                self.feasible = feasible;
                let mut diag = Diagnosis::default();
                diag.error = Some(format!(
                    "running PreScore plugin {:?}: {}",
                    prof.plugins[i].name(),
                    st.message()
                ));
                return Outcome::Failed(diag);
            }
        }
        score_totals(
            prof,
            cx,
            &state,
            pod,
            &feasible,
            &mut self.totals,
            &mut self.scores,
        );
        // Highest total; ties broken uniformly at random (reservoir sampling).
        let mut best = 0;
        let mut ties = 0u64;
        for j in 0..m {
            if j == 0 || self.totals[j] > self.totals[best] {
                best = j;
                ties = 1;
            } else if self.totals[j] == self.totals[best] {
                ties += 1;
                if self.rng.below(ties) == 0 {
                    best = j;
                }
            }
        }
        let chosen = feasible[best];
        self.feasible = feasible;
        Outcome::Placed(chosen, state)
    }

    fn reserve_and_bind(
        &mut self,
        profile: usize,
        mut state: CycleState,
        pod: &Arc<PodInfo>,
        node: NodeIdx,
        now: Time,
        plan: Option<drp::Plan>,
    ) -> Result<(), Status> {
        let state = &mut state;
        let is_pod = !pod.is_reserve_pod();
        if is_pod && !self.cluster.assume(&pod.key, node) {
            return Err(Status::error("pod or node vanished before assume"));
        }
        let prof = &self.profiles[profile];
        let failed = prof.reserve.iter().find_map(|&i| {
            let st = prof.plugins[i].reserve(&mut self.cluster, state, pod, node);
            (!st.is_success()).then_some(st)
        });
        if let Some(st) = failed {
            self.unreserve_and_forget(profile, state, pod, node);
            return Err(st);
        }
        if let Some(plan) = &plan {
            // Dynamic Reservation Provisioning: the virtual reservation, after every
            // Reserve plugin (the pod is allocated from it as from a real one).
            if let Err(e) = self.drp_reserve(state, pod, node, plan, now) {
                self.unreserve_and_forget(profile, state, pod, node);
                return Err(Status::error(e));
            }
        }
        let prof = &self.profiles[profile];
        let mut annotations = BTreeMap::new();
        let failed = self.cluster.node(node).and_then(|info| {
            prof.pre_bind.iter().find_map(|&i| {
                let st =
                    prof.plugins[i].pre_bind(&self.cluster, state, pod, info, &mut annotations);
                (!st.is_success()).then_some(st)
            })
        });
        if let Some(st) = failed {
            self.unreserve_and_forget(profile, state, pod, node);
            return Err(st);
        }
        let node_name = self
            .cluster
            .node(node)
            .map(|n| n.name.to_string())
            .unwrap_or_default();
        self.counters.scheduled += 1;
        let attempts = self.queue.attempts(&pod.key);
        self.queue.done(&pod.key);
        self.drop_nomination(now, &pod.key, Some(node));
        self.last_message.remove(&pod.key);
        let waits_for = if is_pod {
            self.drp_virtual_id(state)
        } else {
            None
        };
        if let Some(id) = waits_for {
            // Allocated from a virtual reservation: the bind waits for the Reservation.
            self.requeue(now, ClusterEvent::assigned_pod_added(Some(node)));
            let bind = InFlight {
                profile,
                state: std::mem::take(state),
                pod: pod.clone(),
                node,
                node_name: node_name.into(),
                attempts,
            };
            self.drp_wait(now, id, bind, annotations, plan.as_ref());
        } else if is_pod {
            // Upstream's AssignedPodAdd: the pod counts for affinity and spreading from now.
            self.requeue(now, ClusterEvent::assigned_pod_added(Some(node)));
            // VolumeBinding's PreBind: claims to bind first, the bind waits for them.
            let bind = InFlight {
                profile,
                state: std::mem::take(state),
                pod: pod.clone(),
                node,
                node_name: node_name.as_str().into(),
                attempts,
            };
            let Some((bind, annotations)) = self.volume_prebind(now, bind, annotations) else {
                return Ok(());
            };
            *state = bind.state;
            self.effects.push_back(Effect::Bind {
                pod: pod.key.clone(),
                uid: pod.uid.to_string(),
                node: node_name.clone(),
                annotations,
            });
            self.record(
                pod.key.clone(),
                &pod.uid,
                "Normal",
                "Scheduled",
                format!("Successfully assigned {} to {}", pod.key, node_name),
            );
            // The binding cycle: the pod keeps its claims until the watch confirms the bind
            // or the bind fails, however many cycles run meanwhile.
            self.in_flight.insert(
                pod.key.clone(),
                InFlight {
                    profile,
                    state: std::mem::take(state),
                    pod: pod.clone(),
                    node,
                    node_name: node_name.into(),
                    attempts,
                },
            );
        } else if let PodKind::ReservePod { reservation } = &pod.kind {
            // PreBindReservation: what plugins wrote for the stand-in goes on the
            // Reservation (NodeNUMAResource's reserved CPUs).
            if !annotations.is_empty() {
                self.effects.push_back(Effect::AnnotateReservation {
                    name: reservation.to_string(),
                    uid: pod.uid.to_string(),
                    annotations,
                });
            }
            crate::reservation::lifecycle::record(
                &self.cluster,
                reservation,
                "Normal",
                "Scheduled",
                format!("Successfully assigned {reservation} to {node_name}"),
                &mut self.effects,
            );
        }
        Ok(())
    }

    /// The unwind of a scheduling cycle that failed after Reserve began (kube-scheduler's
    /// `RunReservePluginsUnreserve` then `ForgetPod`): every Reserve plugin's Unreserve, in
    /// reverse order, whichever plugin failed (Unreserve is idempotent, so one whose
    /// Reserve never ran gives back nothing), then the assumed pod leaves its node. Every
    /// failure path of [`Scheduler::reserve_and_bind`] goes through here.
    fn unreserve_and_forget(
        &mut self,
        profile: usize,
        state: &mut CycleState,
        pod: &PodInfo,
        node: NodeIdx,
    ) {
        self.run_unreserve(profile, state, pod, node);
        if !pod.is_reserve_pod() {
            self.cluster.forget(&pod.key);
        }
    }

    /// kube-scheduler's `RunReservePluginsUnreserve`: every Reserve plugin's Unreserve, in
    /// reverse order.
    fn run_unreserve(
        &mut self,
        profile: usize,
        state: &mut CycleState,
        pod: &PodInfo,
        node: NodeIdx,
    ) {
        let prof = &self.profiles[profile];
        for &j in prof.reserve.iter().rev() {
            prof.plugins[j].unreserve(&mut self.cluster, state, pod, node);
        }
    }

    fn fail(&mut self, now: Time, pod: &PodInfo, diag: Diagnosis) {
        let post_filter = self.post_filter_result.take();
        if let Some(r) = &post_filter {
            self.preempt(now, pod, r);
        }
        let nominate = self.nominate(now, pod, post_filter.as_ref().map(|r| r.nomination));
        // Its hold asked for: until it holds (Available), the nomination guards the room.
        let hold = crate::plugins::defaultpreemption::hold::name_for(&pod.key);
        if self
            .holds
            .get(&hold)
            .is_some_and(|(_, uid, _)| *uid == pod.uid)
        {
            self.nominator.await_hold(&pod.key);
        }
        let (message, unschedulable) = match &diag.error {
            Some(err) => (err.clone(), false),
            None => (diag.render(self.cluster.node_count()), true),
        };
        if unschedulable {
            self.counters.unschedulable += 1;
        }
        self.queue
            .failed(&pod.key, unschedulable, &diag.unschedulable_plugins, now);
        self.diagnosis = diag;
        if self.last_message.get(&pod.key) == Some(&message) {
            self.effects.extend(nominate);
            return;
        }
        self.last_message.insert(pod.key.clone(), message.clone());
        if !pod.is_reserve_pod() {
            self.effects.push_back(Effect::PodCondition {
                pod: pod.key.clone(),
                status: "False",
                reason: if unschedulable {
                    "Unschedulable".into()
                } else {
                    "SchedulerError".into()
                },
                message: message.clone(),
            });
            self.record(
                pod.key.clone(),
                &pod.uid,
                "Warning",
                "FailedScheduling",
                message,
            );
        } else if let PodKind::ReservePod { reservation } = &pod.kind {
            // A reservation that cannot be placed stays Pending with Scheduled=False.
            crate::reservation::lifecycle::unschedulable(
                &mut self.cluster,
                reservation,
                &message,
                now,
            );
            crate::reservation::lifecycle::record(
                &self.cluster,
                reservation,
                "Warning",
                "FailedScheduling",
                message,
                &mut self.effects,
            );
        }
        self.effects.extend(nominate);
    }

    /// Applies what reservation changes ask of the queue and emits their effects (status
    /// writes, events, deletions), after every input.
    fn sync_reservations(&mut self, now: Time) {
        // Before the initial sync the view is partial (a reservation listed before its
        // owners would be written back without them): statuses, events and queue work wait,
        // and the first input after the last LIST drains them.
        if !self.synced() {
            return;
        }
        let before = self.effects.len();
        let ops = crate::reservation::lifecycle::drain(&mut self.cluster, now, &mut self.effects);
        if !ops.is_empty() || self.effects.len() != before {
            self.epoch += 1;
        }
        for op in ops {
            match op {
                crate::reservation::QueueOp::Add {
                    key,
                    priority,
                    created,
                } => {
                    // A reservation whose template names another scheduler is that
                    // scheduler's to place (Koordinator's `isResponsibleForReservation`).
                    let foreign = self
                        .cluster
                        .reservations
                        .item(&key.name)
                        .is_some_and(|i| self.is_foreign(&i));
                    // One carrying the requirement id of a pending pod is that pod's (DRP,
                    // after a restart): it is adopted in the pod's cycle.
                    if !foreign && !self.drp_held_back(&key.name) {
                        self.queue.add(key, priority, created, now)
                    }
                }
                crate::reservation::QueueOp::Delete(key) => self.queue.delete(&key),
                crate::reservation::QueueOp::MoveAll => {
                    self.requeue(now, ClusterEvent::reservation())
                }
            }
        }
    }

    /// Runs the profile's PostFilter plugins after a failed search (kube-scheduler's
    /// `RunPostFilterPlugins`): the first that nominates a node wins; otherwise their
    /// messages are joined and the last decision about the nomination stands.
    fn run_post_filter(
        &mut self,
        profile: usize,
        state: &CycleState,
        pod: &PodInfo,
        diag: &mut Diagnosis,
    ) {
        let prof = &self.profiles[profile];
        if prof.post_filter.is_empty() {
            return;
        }
        if !pod.is_reserve_pod() {
            self.counters.preemption_attempts += 1;
        }
        let mut cx = PostFilterContext {
            cluster: &self.cluster,
            profile: prof,
            state,
            diagnosis: diag,
            resolvable: &self.resolvable,
            nominator: &self.nominator,
            rng: &mut self.rng,
        };
        let mut result: Option<PostFilterResult> = None;
        let mut messages = Vec::new();
        for &i in &prof.post_filter {
            let Some(mut r) = prof.plugins[i].post_filter(&mut cx, pod) else {
                continue;
            };
            if matches!(r.nomination, Nomination::Node(_)) {
                messages.clear();
                messages.extend(r.message.take());
                result = Some(r);
                break;
            }
            messages.extend(r.message.take());
            if r.nomination != Nomination::Keep {
                result = Some(r);
            }
        }
        if !messages.is_empty() {
            diag.post_filter_msg = Some(messages.join(", "));
        }
        self.post_filter_result = result;
    }

    /// Carries out a preemption PostFilter decided (kube-scheduler's `prepareCandidate`):
    /// deletes the victims (those not already being deleted) with a `Preempted` event each,
    /// and clears the nomination of lower-priority pods nominated to the same node, which
    /// may no longer fit there, sending them back to the queue.
    fn preempt(&mut self, now: Time, preemptor: &PodInfo, result: &PostFilterResult) {
        let Nomination::Node(idx) = result.nomination else {
            return;
        };
        let Some(node) = self.cluster.node(idx).map(|n| n.name.clone()) else {
            return;
        };
        // The hold first: in the API server it exists before any victim is gone.
        let held = match result.hold {
            Some(ttl) if !preemptor.is_reserve_pod() => {
                self.hold(preemptor, &node, ttl, &result.victims)
            }
            _ => None,
        };
        let mut evicted = Vec::new();
        for victim in &result.victims {
            let Some(info) = self.cluster.pod(victim).map(|e| e.info.clone()) else {
                continue;
            };
            if info.terminating {
                continue;
            }
            self.counters.preemption_victims += 1;
            self.effects.push_back(Effect::Delete {
                key: victim.clone(),
                uid: info.uid.to_string(),
                resource_version: None,
                preemption: Some(crate::effect::Preemption {
                    preemptor: preemptor.key.clone(),
                    scheduler: preemptor.scheduler_name.to_string(),
                    hold: held.clone(),
                }),
            });
            self.record(
                victim.clone(),
                &info.uid,
                "Normal",
                "Preempted",
                format!(
                    "Preempted by pod {} ({}) on node {}",
                    preemptor.key, preemptor.uid, node
                ),
            );
            evicted.push(victim.to_string());
        }
        if !evicted.is_empty() {
            let held = held
                .map(|n| format!("; the room is held by reservation {n}"))
                .unwrap_or_default();
            self.record(
                preemptor.key.clone(),
                &preemptor.uid,
                "Normal",
                "Preempted",
                format!(
                    "Preempted {} pod(s) on node {node} for {}: {}{held}",
                    evicted.len(),
                    preemptor.key,
                    evicted.join(", ")
                ),
            );
        }
        let lower: Vec<Arc<PodInfo>> = self
            .nominator
            .pods_on(&node)
            .iter()
            .filter(|p| p.priority < preemptor.priority)
            .cloned()
            .collect();
        for p in lower {
            // Its hold there, if any, gives way too (one still on its way to the API server
            // is deleted after it, in the same order).
            let name = crate::plugins::defaultpreemption::hold::name_for(&p.key);
            if self.pending_hold(&name) {
                self.holds.remove(&name);
                self.counters.preemption_holds_expired += 1;
                self.effects.push_back(Effect::Delete {
                    key: ObjectKey::cluster(Kind::Reservation, &name),
                    uid: String::new(),
                    resource_version: None,
                    preemption: None,
                });
            }
            self.expire_hold(
                now,
                &p.key,
                &p.uid,
                "preempted by a higher-priority pod",
                true,
            );
            self.nominator.delete(&p.key);
            if nominated_node_name(&p).is_some() {
                self.effects.push_back(Effect::NominatePod {
                    pod: p.key.clone(),
                    node: None,
                });
            }
            self.queue.add(p.key.clone(), p.priority, p.created, now);
        }
    }

    /// Records the nomination PostFilter decided for `pod` and returns the effect that
    /// writes it to `status.nominatedNodeName` when the API object does not say so already.
    fn nominate(
        &mut self,
        now: Time,
        pod: &PodInfo,
        nomination: Option<Nomination>,
    ) -> Option<Effect> {
        let before = self.nominator.node_of(&pod.key).cloned();
        let effect = self.renominate(pod, nomination, before.clone());
        let after = self.nominator.node_of(&pod.key).cloned();
        if before.is_some() && before != after {
            self.wake_nominated_room(now, before.as_deref());
        }
        effect
    }

    /// [`Scheduler::nominate`] without the wake-up.
    fn renominate(
        &mut self,
        pod: &PodInfo,
        nomination: Option<Nomination>,
        before: Option<Arc<str>>,
    ) -> Option<Effect> {
        let after: Option<Arc<str>> = match nomination {
            None | Some(Nomination::Keep) => return None,
            Some(Nomination::Clear) => {
                self.nominator.delete(&pod.key);
                None
            }
            Some(Nomination::Node(idx)) => {
                let name = self.cluster.node(idx)?.name.clone();
                let info = self.cluster.pod(&pod.key)?.info.clone();
                self.nominator.add(info, name.clone());
                Some(name)
            }
        };
        let written = nominated_node_name(pod);
        if written == after.as_deref() || before == after {
            return None;
        }
        Some(Effect::NominatePod {
            pod: pod.key.clone(),
            node: after.map(|n| n.to_string()),
        })
    }

    /// Reservation-backed preemption: asks for the reservation that holds `node` for
    /// `preemptor` ([`crate::plugins::defaultpreemption::hold`]), replacing an earlier one
    /// of the same name. Returns its name.
    fn hold(
        &mut self,
        preemptor: &PodInfo,
        node: &str,
        ttl: Time,
        victims: &[ObjectKey],
    ) -> Option<String> {
        use crate::plugins::defaultpreemption::hold;
        let name = hold::name_for(&preemptor.key);
        let existing = self.cluster.reservations.by_name(&name);
        // Preempting again for the same node (the victims' deletion is not visible yet, or
        // they terminate slowly): the hold asked for, or in place, stays.
        let live = existing.is_none_or(|r| !r.phase.is_terminal() && !r.terminating);
        let same = self
            .holds
            .get(&name)
            .is_some_and(|(_, uid, n)| *uid == preemptor.uid && &**n == node);
        if same && live {
            return Some(name);
        }
        let r = hold::reservation(&self.cluster, preemptor, node, ttl, victims)?;
        if let Some(old) = existing {
            if !old.gc_requested {
                self.effects.push_back(Effect::Delete {
                    key: old.object_key(),
                    uid: old.uid.to_string(),
                    resource_version: None,
                    preemption: None,
                });
            }
        }
        self.effects
            .push_back(Effect::CreateReservation(Box::new(r)));
        self.holds.insert(
            name.clone(),
            (preemptor.key.clone(), preemptor.uid.clone(), node.into()),
        );
        Some(name)
    }

    /// A hold that comes back (or is found after a restart) when its preemptor is gone or
    /// already placed has nothing left to hold.
    fn check_hold_owner(&mut self, now: Time, name: &str) {
        use crate::plugins::defaultpreemption::hold;
        if !self.synced() || self.relisting.contains_key(&Kind::Pod) {
            return;
        }
        let Some(r) = self.cluster.reservations.by_name(name) else {
            return;
        };
        if r.phase.is_terminal() || r.terminating {
            return;
        }
        let Some((key, uid)) = hold::preemptor_of(r) else {
            return;
        };
        let idx = self.cluster.reservations.idx(name);
        let owns = idx.is_some() && self.cluster.reservations.owner_of(&key) == idx;
        match self.cluster.pod(&key) {
            Some(e) if *e.info.uid == *uid => match e.state {
                PodState::Bound => self.settle_hold(now, &key),
                // Placed (its bind in flight) before the hold came: not on it.
                PodState::Assumed if !owns => self.expire_hold(
                    now,
                    &key,
                    &uid,
                    "the preemptor was placed without it",
                    false,
                ),
                _ => {}
            },
            _ => self.expire_hold(now, &key, &uid, "the preemptor was deleted", true),
        }
    }

    /// Whether the hold `name` was asked for and has not come back through the watch yet
    /// (a `CreateReservation` in flight: the store does not know it, or knows an earlier one
    /// that this one replaces).
    fn pending_hold(&self, name: &str) -> bool {
        let Some((_, uid, _)) = self.holds.get(name) else {
            return false;
        };
        self.cluster.reservations.by_name(name).is_none_or(|r| {
            !crate::plugins::defaultpreemption::hold::is_hold_for(r, uid) || r.phase.is_terminal()
        })
    }

    /// After a pod changed: if it is a preemptor that was placed, its hold is done with.
    /// Placed on its reservation, the reservation is `Succeeded` (completed); placed
    /// anywhere else first, the reservation expires at once (its room is not needed).
    fn settle_hold(&mut self, now: Time, key: &ObjectKey) {
        let Some((uid, bound)) = self.cluster.pod(key).map(|e| {
            (
                e.info.uid.clone(),
                e.state == PodState::Bound && !e.info.terminal,
            )
        }) else {
            return;
        };
        if !bound {
            return;
        }
        let Some(idx) = crate::plugins::defaultpreemption::hold::of(&self.cluster, key, &uid)
        else {
            return;
        };
        let Some(r) = self.cluster.reservations.get(idx) else {
            return;
        };
        if r.phase == berth_api::reservation::ReservationPhase::Succeeded {
            if self.holds.remove(&*r.name).is_some() {
                self.counters.preemption_holds_completed += 1;
            }
            return;
        }
        self.expire_hold(now, key, &uid, "the preemptor was placed without it", false);
    }

    /// Expires the hold of the preemptor `key` (incarnation `uid`) if it is still active or
    /// pending; with `delete`, the reservation is deleted too (what the garbage collector
    /// would do for an object owned by the pod).
    fn expire_hold(&mut self, now: Time, key: &ObjectKey, uid: &str, why: &str, delete: bool) {
        use crate::plugins::defaultpreemption::hold;
        let Some(idx) = hold::of(&self.cluster, key, uid) else {
            return;
        };
        let Some(r) = self.cluster.reservations.get(idx) else {
            return;
        };
        let (name, object, ruid, terminal) = (
            r.name.clone(),
            r.object_key(),
            r.uid.clone(),
            r.phase.is_terminal(),
        );
        if !terminal && self.holds.remove(&*name).is_some() {
            self.counters.preemption_holds_expired += 1;
        }
        if delete {
            // Gone with its pod: forgotten now (its hold released, no status to write), and
            // deleted in the API server; the watch's deletion then finds nothing to do.
            crate::reservation::lifecycle::delete(&mut self.cluster, &name);
            self.effects.push_back(Effect::Delete {
                key: object,
                uid: ruid.to_string(),
                resource_version: None,
                preemption: None,
            });
        } else if !terminal {
            crate::reservation::lifecycle::fail(&mut self.cluster, idx, why, now);
        }
    }

    /// Counts the holds whose reservation failed (TTL) since the last look.
    fn count_expired_holds(&mut self) {
        let store = &self.cluster.reservations;
        let failed: Vec<String> = self
            .holds
            .keys()
            .filter(|n| {
                store
                    .by_name(n)
                    .is_none_or(|r| r.phase == berth_api::reservation::ReservationPhase::Failed)
            })
            .cloned()
            .collect();
        for n in failed {
            self.holds.remove(&n);
            self.counters.preemption_holds_expired += 1;
        }
    }

    /// Forgets `key`'s nomination. Unless the pod `landed` on that very node, the room the
    /// nomination held there is free again, and the pods it turned away are retried.
    fn drop_nomination(&mut self, now: Time, key: &ObjectKey, landed: Option<NodeIdx>) {
        let Some(node) = self.nominator.delete(key) else {
            return;
        };
        let idx = self.cluster.node_idx(&node);
        if idx.is_none() || idx != landed {
            self.wake_nominated_room(now, Some(&node));
        }
    }

    /// A nomination to `node` went away (the pod was deleted, placed elsewhere, or
    /// nominated elsewhere, or its nomination was cleared): pods of lower or equal priority
    /// that Filter turned away there because of it may fit now. The queue sees it as a pod
    /// leaving that node (kube-scheduler moves them the same way).
    fn wake_nominated_room(&mut self, now: Time, node: Option<&str>) {
        let Some(idx) = node.and_then(|n| self.cluster.node_idx(n)) else {
            return;
        };
        self.requeue(now, ClusterEvent::assigned_pod_deleted(Some(idx)));
    }

    /// A `resource-status` berth cannot read: the CPUs it meant to name are not known, so
    /// they are not counted as held; said once, as a Warning on the object.
    fn invalid_resource_status(&mut self, involved: ObjectKey, uid: &str, why: &str) {
        self.record(
            involved,
            uid,
            "Warning",
            "InvalidAnnotation",
            format!(
                "annotation {}: {why}; the CPUs it names are not counted as held",
                berth_api::annotations::ANNOTATION_RESOURCE_STATUS
            ),
        );
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

/// kube-scheduler's `isPodUpdated`: whether a new version of a pod may have made it
/// schedulable, i.e. differs in anything but `resourceVersion`, `generation`,
/// `managedFields`, `finalizers` and the status (`resourceClaimStatuses` aside).
fn pod_updated(
    old: &berth_api::k8s_openapi::api::core::v1::Pod,
    new: &berth_api::k8s_openapi::api::core::v1::Pod,
) -> bool {
    use berth_api::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    let strip = |m: &ObjectMeta| ObjectMeta {
        resource_version: None,
        generation: None,
        managed_fields: None,
        finalizers: None,
        ..m.clone()
    };
    let claims = |p: &berth_api::k8s_openapi::api::core::v1::Pod| {
        p.status
            .as_ref()
            .and_then(|s| s.resource_claim_statuses.clone())
    };
    old.spec != new.spec
        || claims(old) != claims(new)
        || strip(&old.metadata) != strip(&new.metadata)
}

/// Score: each plugin's normalised scores, weighted, summed per node into `totals`.
/// The first plugin's scores become the totals (no zeroed list to add them to), a weight
/// of 1 adds without multiplying, and a plugin that scores every node the same
/// ([`Plugin::scores_uniformly`]) is left out, since it cannot change the choice.
#[allow(clippy::too_many_arguments)]
fn score_totals(
    prof: &Profile,
    cx: &Cluster,
    state: &CycleState,
    pod: &PodInfo,
    feasible: &[NodeIdx],
    totals: &mut Vec<i64>,
    scores: &mut Vec<i64>,
) {
    let m = feasible.len();
    totals.clear();
    let mut first = true;
    for &(i, weight) in &prof.score {
        let p = &prof.plugins[i];
        if state.skip_score & (1 << i) != 0 || p.scores_uniformly(cx, state, pod) {
            continue;
        }
        scores.clear();
        p.score_nodes(cx, state, pod, feasible, scores);
        p.normalize_scores(state, pod, scores);
        // A node a plugin gave no score counts 0 from it, as when adding.
        scores.resize(m, 0);
        if first {
            first = false;
            std::mem::swap(totals, scores);
            if weight != 1 {
                totals.iter_mut().for_each(|t| *t *= weight);
            }
        } else if weight == 1 {
            for (t, s) in totals.iter_mut().zip(scores.iter()) {
                *t += s;
            }
        } else {
            for (t, s) in totals.iter_mut().zip(scores.iter()) {
                *t += s * weight;
            }
        }
    }
    if first {
        totals.resize(m, 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{node, pod, FakeDriver};

    fn requested_cpu(d: &FakeDriver, node: &str) -> Option<i64> {
        d.scheduler()
            .cluster
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
        // DefaultPreemption's verdict follows, as kube-scheduler appends it: 3 CPUs exceed
        // both nodes' allocatable, so no eviction could help.
        assert_eq!(
            d.condition("huge").map(|c| c.1).as_deref(),
            Some("0/2 nodes are available: 2 Insufficient cpu. preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling.")
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
