//! Reservation: Koordinator's reservation plugin, as glue over [`crate::reservation`].
//!
//! - PreFilter finds, through the owner index, the reservations the pod may use and groups
//!   them by node; a pod with reservation affinity is restricted to those nodes.
//! - Filter applies the allocate policies on nodes holding such reservations, and for a
//!   reserve pod its node pin, policy coexistence, one reusable reservation per node for the
//!   same owners (seed 002) and pre-allocation rules.
//! - PreScore/Score nominate one reservation per node and make owners strongly prefer nodes
//!   holding one.
//! - Reserve/Unreserve allocate the pod into the nominated reservation (or place a
//!   reservation), PreBind writes `scheduling.koordinator.sh/reservation-allocated`.
//!
//! The per-cycle [`State`] also tells other plugins what the pod gets back on a node
//! ([`State::restored`], [`State::restored_ports`], [`State::restored_claim_users`]) and which
//! reservation stand-ins it must not see ([`State::hides`], [`hidden`]).

pub mod args;
mod by_node;
pub mod decision;

use by_node::ByNode;
use decision::Rejection;

use crate::collections::HashMap;
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Arc;

use berth_api::annotations::{
    is_true, AnnotationCodec, ReservationAllocated, LABEL_RESERVATION_IGNORED,
};
use berth_api::reservation::{ReservationAllocatePolicy, ReservationPhase};
use smallvec::SmallVec;

use crate::cache::Cluster;
use crate::framework::config::ConfigError;
use crate::framework::filter_plan::keep;
use crate::framework::nominator::run_filter_plugins_with_nominated_pods;
use crate::framework::plugin::{PostFilterContext, PostFilterResult};
use crate::framework::FilterPlan;
use crate::framework::{CycleState, Plugin, Points, Status};
use crate::model::node::{NodeIdx, NodeInfo};
use crate::model::pod::{HostPort, PodInfo, PodKind};
use crate::object::ObjectKey;
use crate::plugins::nodeaffinity::RequiredNodeAffinity;
use crate::reservation::affinity::{Mismatch, PodReservationPrefs};
use crate::reservation::{allocate, RIdx, ReservationInfo, Settings};
use crate::resources::Resources;

/// Default score weight. A node holding a reservation the pod can use scores at least 50
/// (100 for the smallest `reservation-order`), and 50 × 40 outweighs every other default
/// score plugin together (13 × 100), so an owner lands on its reservation's node when it
/// fits there.
pub const DEFAULT_WEIGHT: i64 = 40;

/// What the pod being scheduled may take back on one node.
#[derive(Debug, Clone, Default)]
pub struct NodeState {
    matched: SmallVec<[RIdx; 2]>,
    restore: Resources,
    ports: SmallVec<[HostPort; 2]>,
    hidden: SmallVec<[Arc<str>; 2]>,
    /// Stand-ins whose pod slot the pod takes over (allocate-once reservations it matched,
    /// its own waiting preemption hold): the stand-in leaves when the pod lands.
    slots: i64,
    nominated: Option<RIdx>,
    score: i64,
}

/// Koordinator's diagnosis counters, for the PostFilter message.
#[derive(Debug, Clone, Default)]
struct Diag {
    owner_matched: u32,
    name_matched: u32,
    name_unmatched: u32,
    affinity_unmatched: u32,
    unschedulable: u32,
    not_exact: u32,
    taints: BTreeMap<String, u32>,
}

/// Per-cycle state: the reservations the pod may use, by node.
#[derive(Debug, Clone, Default)]
pub struct State {
    reserve_pod: bool,
    ignored: bool,
    has_affinity: bool,
    named: Option<String>,
    pod_mask: u32,
    /// By node, looked up several times per node filtered and scored.
    nodes: ByNode<NodeState>,
    claims: HashMap<ObjectKey, u32>,
    diag: Diag,
    assumed: Option<(Arc<str>, Arc<str>)>,
    /// PreFilter's verdict, computed before every PreFilter and returned by ours.
    pre_filter: Option<Status>,
}

impl State {
    /// What the pod's matched reservations hold on `node` and give back to it (added to the
    /// node's free capacity by NodeResourcesFit). For an owner: the largest remainder of one
    /// matched reservation per resource (the Reservation Filter checks the exact rule, one
    /// reservation at a time); for a reservation-ignored pod: everything reserved there.
    #[inline]
    pub fn restored(&self, _pod: &PodInfo, node: NodeIdx) -> Option<&Resources> {
        // Most pods match no reservation: no hashing per node for them.
        if self.nodes.is_empty() {
            return None;
        }
        self.nodes.get(&node).map(|n| &n.restore)
    }

    /// Whether [`State::restored`] is `None` on every node: score loops then leave the
    /// question out of their per-node work.
    #[inline]
    pub fn restores_nothing(&self) -> bool {
        self.nodes.is_empty()
    }

    /// How many of `nodes` (feasible nodes, in filtering order) to ask [`State::restored`]
    /// about: none past the last node with an entry. The pod's reservation nodes are
    /// filtered first, so they lead the list, and score loops treat the rest as giving
    /// nothing back without a question per node.
    pub fn restoring_prefix(&self, nodes: &[NodeIdx]) -> usize {
        let mut left = self.nodes.len();
        for (i, n) in nodes.iter().enumerate() {
            if left == 0 {
                return i;
            }
            if self.nodes.contains_key(n) {
                left -= 1;
            }
        }
        nodes.len()
    }

    /// Host ports held on `node` by reservations the pod may use: NodePorts must not count
    /// them against the pod (they are in `NodeInfo::reserved_ports`).
    pub fn restored_ports(&self, _pod: &PodInfo, node: NodeIdx) -> &[HostPort] {
        self.nodes.get(&node).map_or(&[], |n| &n.ports)
    }

    /// The reservation the pod would take on `node` as it stands (what Reserve takes when
    /// PreScore nominated nothing there). Filter plugins that allocate inside a reservation
    /// check this one, not every matched one, so that a node Filter passes is one Reserve
    /// can use (Koordinator's FilterNominateReservation).
    pub fn nominee(&self, cx: &Cluster, pod: &PodInfo, node: &NodeInfo) -> Option<RIdx> {
        let ns = self.nodes.get(&node.idx)?;
        nominate(cx, self, pod, ns, node, false).map(|(i, _)| i)
    }

    /// The reservation Reserve allocates the pod from on `node` (PreScore's nomination, else
    /// the best one with the pod assumed there): DynamicResources' Reserve, which runs
    /// first, takes that reservation's devices.
    pub fn chosen(&self, cx: &Cluster, pod: &PodInfo, node: NodeIdx) -> Option<RIdx> {
        if self.ignored || self.reserve_pod {
            return None;
        }
        let ns = self.nodes.get(&node)?;
        let idx = match ns.nominated {
            Some(i) => Some(i),
            None => cx
                .cache
                .node(node)
                .and_then(|info| nominate(cx, self, pod, ns, info, true))
                .map(|(i, _)| i),
        };
        idx.filter(|i| cx.reservations.get(*i).is_some_and(|r| r.matchable()))
    }

    /// Whether the pod gets nothing back on any node: no pod slot, no resources
    /// ([`State::restored_pods`] and [`State::restored`] are 0 and `None` everywhere).
    #[inline]
    pub fn gives_back_nothing(&self) -> bool {
        !self.ignored && self.nodes.is_empty()
    }

    /// Whether the pod may get something back on `node` (otherwise [`State::restored_pods`]
    /// is 0 and [`State::restored`] `None` there): one bit test.
    #[inline]
    pub fn gives_back_on(&self, node: NodeIdx) -> bool {
        self.ignored || self.nodes.contains_key(&node)
    }

    /// Whether [`Self::hides`] is false for every pod on every node: the pod is neither a
    /// reservation nor reservation-ignored, and matched no reservation whose stand-in it must
    /// not see. Plugins that count pods then count every pod, without looking at each.
    pub fn hides_nothing(&self) -> bool {
        !self.reserve_pod && !self.ignored && self.nodes.values().all(|n| n.hidden.is_empty())
    }

    /// Whether `existing`, a pod on `node`, is a reservation's stand-in that the pod being
    /// scheduled must not see: its own matched reservations (Koordinator removes them from
    /// the cycle's NodeInfo), every reservation for a reservation-ignored pod, and every
    /// reservation when the pod is itself a reservation (a reservation's affinity and spread
    /// are not checked against existing reservations). InterPodAffinity, PodTopologySpread
    /// and VolumeRestrictions skip such pods.
    pub fn hides(&self, existing: &PodInfo, node: NodeIdx) -> bool {
        let PodKind::ReservePod { reservation } = &existing.kind else {
            return false;
        };
        if self.reserve_pod || self.ignored {
            return true;
        }
        self.nodes
            .get(&node)
            .is_some_and(|n| n.hidden.iter().any(|h| h == reservation))
    }

    /// Reservation stand-ins on `node` that do not take a pod slot from the pod: those of
    /// its matched reservations (Koordinator removes them from the owner's NodeInfo; the
    /// owner takes the slot its reservation held), every one for a reservation-ignored pod.
    #[inline]
    pub fn restored_pods(&self, node: &NodeInfo) -> i64 {
        if self.reserve_pod {
            return 0;
        }
        if self.ignored {
            return node.pods.iter().filter(|p| p.is_reserve_pod()).count() as i64;
        }
        if self.nodes.is_empty() {
            return 0;
        }
        self.nodes.get(&node.idx).map_or(0, |n| n.slots)
    }

    /// How many of `claim`'s users ([`crate::cache::Cluster::pvc_users`]) are reservations
    /// the pod may use: VolumeRestrictions subtracts them (a ReadWriteOncePod claim held by
    /// the pod's own reservation does not conflict).
    pub fn restored_claim_users(&self, claim: &ObjectKey) -> u32 {
        self.claims.get(claim).copied().unwrap_or(0)
    }

    /// The reservation the pod was allocated from in Reserve (name, UID).
    pub fn assumed(&self) -> Option<(&str, &str)> {
        self.assumed.as_ref().map(|(n, u)| (&**n, &**u))
    }

    /// Replaces the reservation the pod is allocated from (Dynamic Reservation
    /// Provisioning: the virtual reservation placed for it, the Reservation that took the
    /// virtual one's place, or none when it is bound without one), so that Unreserve and
    /// PreBind act on that one.
    pub(crate) fn set_assumed(&mut self, assumed: Option<(Arc<str>, Arc<str>)>) {
        self.assumed = assumed;
    }
}

/// [`State::hides`] for a cycle (false when the Reservation plugin did not run).
pub fn hidden(state: &CycleState, existing: &PodInfo, node: NodeIdx) -> bool {
    state
        .reservation
        .as_ref()
        .is_some_and(|s| s.hides(existing, node))
}

/// The Reservation plugin.
#[derive(Debug)]
pub struct Reservation {
    args: args::ReservationArgs,
}

impl Reservation {
    /// Builds the plugin from its args (`ReservationArgs`).
    pub fn new(args: Option<&serde_json::Value>) -> Result<Self, ConfigError> {
        Ok(Self {
            args: args::ReservationArgs::new(args)?,
        })
    }
}

fn reservation_name(pod: &PodInfo) -> Option<&str> {
    match &pod.kind {
        PodKind::ReservePod { reservation } => Some(reservation),
        PodKind::Pod => None,
    }
}

fn state_of(state: &CycleState) -> Result<&State, Status> {
    state
        .reservation
        .as_deref()
        .ok_or_else(|| Status::error("Reservation: PreFilter did not run"))
}

/// Whether two allocate policies may share a node (the default one mixes with no other).
fn policies_conflict(a: ReservationAllocatePolicy, b: ReservationAllocatePolicy) -> bool {
    (a == ReservationAllocatePolicy::Default || b == ReservationAllocatePolicy::Default) && a != b
}

/// Whether `other`, placed on a node, is the same reusable reservation as `r` (seed 002:
/// "only one same reusable reservation can be scheduled on a same node"): both reusable, for
/// the same owners. A second one would add nothing its owners cannot already get from the
/// first, and with two an owner could end up allocated from either, fragmenting both.
fn same_reusable(r: &ReservationInfo, other: &ReservationInfo) -> bool {
    if r.allocate_once || other.allocate_once || r.name == other.name {
        return false;
    }
    if !other.is_active() || other.terminating || other.problem.is_some() {
        return false;
    }
    let (a, b) = (&r.obj.spec.owners, &other.obj.spec.owners);
    a.len() == b.len() && a.iter().all(|o| b.contains(o)) && b.iter().all(|o| a.contains(o))
}

impl Reservation {
    fn pre_filter_pod(&self, cx: &Cluster, pod: &PodInfo, st: &mut State) -> Status {
        let prefs = match PodReservationPrefs::from_pod(pod) {
            Ok(p) => p,
            Err(msg) => return Status::unresolvable(msg),
        };
        st.has_affinity = prefs.affinity.is_some();
        st.named = prefs.affinity.as_ref().and_then(|a| a.name.clone());
        st.pod_mask = allocate::mask(&pod.requests);
        if is_true(Some(&pod.labels), LABEL_RESERVATION_IGNORED) {
            Self::restore_every_reservation(cx, st);
            return Status::skip();
        }
        Self::match_reservations(cx, pod, &prefs, st);
        Self::note_own_waiting_hold(cx, pod, st);
        if st.has_affinity && st.nodes.is_empty() {
            return Status::unresolvable(crate::reservation::ERR_REASON_AFFINITY);
        }
        if st.nodes.is_empty() {
            return Status::skip();
        }
        Status::success()
    }

    /// The reservations `pod` may use, per node: the owner index's (or the named one's)
    /// candidates that match the pod's owner and affinity, each node's in creation order,
    /// with what they give back; the mismatches counted for the diagnosis.
    fn match_reservations(
        cx: &Cluster,
        pod: &PodInfo,
        prefs: &PodReservationPrefs,
        st: &mut State,
    ) {
        let store = &cx.reservations;
        // Candidates: by name when the affinity names one, else through the owner index.
        let mut candidates: Vec<RIdx> = match &st.named {
            Some(n) => store.idx(n).into_iter().collect(),
            None => {
                let mut v = Vec::new();
                store.owner_candidates_into(pod, &mut v);
                v
            }
        };
        candidates.retain(|i| store.get(*i).is_some_and(|r| r.matchable()));
        if candidates.is_empty() {
            return;
        }
        // As Koordinator's BeforePreFilter, only reservations on nodes the pod's node
        // selector and required node affinity admit take part, in the diagnosis too (an
        // owner pinned elsewhere is not told of them). A selector that does not compile
        // leaves every node in: NodeAffinity's Filter reports it.
        let required = RequiredNodeAffinity::of(pod).ok();
        // Room for a node each, made once: growing the map entry by entry moved the
        // entries several times over.
        st.nodes.reserve(candidates.len());
        for idx in candidates {
            let Some(r) = store.get(idx) else { continue };
            if !r.owners.matches(pod) {
                continue;
            }
            let on = r.node.and_then(|i| cx.cache.node(i));
            if let (Some(required), Some(node)) = (&required, on) {
                if !required.matches(node) {
                    continue;
                }
            }
            let node = match decision::matching(cx, prefs, pod, r) {
                Ok(n) => {
                    st.diag.owner_matched += 1;
                    if st.named.is_some() {
                        st.diag.name_matched += 1;
                    }
                    n.idx
                }
                Err(Rejection::Mismatch(m)) => {
                    st.diag.owner_matched += 1;
                    match m {
                        Mismatch::Name => st.diag.name_unmatched += 1,
                        Mismatch::Unschedulable => st.diag.unschedulable += 1,
                        Mismatch::Taint(t) => *st.diag.taints.entry(t).or_insert(0) += 1,
                        Mismatch::Affinity => st.diag.affinity_unmatched += 1,
                        Mismatch::NotExact => st.diag.not_exact += 1,
                    }
                    continue;
                }
                // Not matchable: left out by the candidates above already.
                Err(_) => continue,
            };
            let ns = st.nodes.entry_or_default(node);
            ns.matched.push(idx);
            // `usable` is 0 outside the reservation's resources and `restore` never
            // negative: the max over `names` is the max over every slot.
            ns.restore.max_in(&r.usable(), r.names);
            ns.ports.extend(r.contrib_ports.iter().cloned());
            ns.hidden.push(r.name.clone());
            if r.allocate_once {
                ns.slots += 1;
            }
            for c in &r.claims {
                *st.claims.entry(c.clone()).or_insert(0) += 1;
            }
        }
        for ns in st.nodes.values_mut() {
            ns.matched.sort_by(|a, b| {
                let (ra, rb) = (store.get(*a), store.get(*b));
                let ka = ra.map(|r| (r.created, r.name.clone()));
                let kb = rb.map(|r| (r.created, r.name.clone()));
                ka.cmp(&kb)
            });
        }
    }

    /// A pod with the reservation-ignored label: Koordinator restores every reservation on
    /// every node for it.
    fn restore_every_reservation(cx: &Cluster, st: &mut State) {
        let store = &cx.reservations;
        st.ignored = true;
        for node in store.busy_nodes() {
            let Some(n) = cx.cache.node(node) else {
                continue;
            };
            st.nodes.insert(
                node,
                NodeState {
                    restore: n.reserved,
                    ports: n.reserved_ports.iter().cloned().collect(),
                    ..Default::default()
                },
            );
            for &i in store.on_node(node) {
                if let Some(r) = store.get(i) {
                    for c in &r.claims {
                        *st.claims.entry(c.clone()).or_insert(0) += 1;
                    }
                }
            }
        }
    }

    /// The pod's own preemption hold, still waiting for its victims: its stand-in keeps the
    /// pod slot the pod is to take, so it does not count against the pod there (the hold
    /// gives back nothing else until it is Available and matched).
    fn note_own_waiting_hold(cx: &Cluster, pod: &PodInfo, st: &mut State) {
        let store = &cx.reservations;
        if let Some(r) = crate::reservation::hold::of(store, &pod.key, &pod.uid)
            .and_then(|i| store.get(i))
            .filter(|r| r.phase == ReservationPhase::Waiting)
        {
            if let Some(node) = r.node {
                let ns = st.nodes.entry_or_default(node);
                if !ns.hidden.contains(&r.name) {
                    ns.hidden.push(r.name.clone());
                    ns.slots += 1;
                }
            }
        }
    }

    fn filter_reserve_pod(&self, cx: &Cluster, pod: &PodInfo, node: &NodeInfo) -> Status {
        let Some(name) = reservation_name(pod) else {
            return Status::success();
        };
        let store = &cx.reservations;
        let Some(r) = store.by_name(name) else {
            return Status::error("reservation not found");
        };
        if r.pinned_node.as_deref().is_some_and(|p| *p != *node.name) {
            return Status::unresolvable(crate::reservation::ERR_REASON_NODE_NOT_MATCH);
        }
        // A preemption hold takes the pod slot of a victim: it is placed only where one is
        // free once its victims still on the node are gone (never on top of a pod that came
        // meanwhile; the preemptor then preempts again or lands elsewhere).
        if crate::reservation::hold::preemptor_of(r).is_some() {
            let leaving = crate::reservation::hold::victims_on(&cx.cache, r, node.idx);
            if node.pods.len() as i64 - leaving as i64 + 1 > node.allowed_pods {
                return Status::unschedulable("Too many pods");
            }
        }
        for &i in store.on_node(node.idx) {
            let Some(other) = store.get(i) else { continue };
            if other.phase == ReservationPhase::Available
                && policies_conflict(r.policy, other.policy)
            {
                return Status::unresolvable(crate::reservation::ERR_REASON_POLICY_CONFLICT);
            }
            if same_reusable(r, other) {
                return Status::unresolvable(crate::reservation::ERR_REASON_REUSABLE_EXISTS);
            }
        }
        if r.pre_allocation {
            if r.policy != ReservationAllocatePolicy::Restricted {
                return Status::unresolvable(
                    crate::reservation::ERR_REASON_PRE_ALLOCATION_UNSUPPORTED,
                );
            }
            if r.cluster_mode && !store.settings.enable_cluster_mode {
                return Status::unresolvable(crate::reservation::ERR_REASON_CLUSTER_MODE_DISABLED);
            }
            if r.pre_allocation_required
                && cx
                    .reservations
                    .pre_allocation_candidates(&cx.cache, r, node.idx)
                    .is_empty()
            {
                return Status::unresolvable(
                    crate::reservation::ERR_REASON_PRE_ALLOCATION_REQUIRED,
                );
            }
        }
        Status::success()
    }

    /// Koordinator's `filterWithReservations`: some matched reservation must hold the pod
    /// under its policy. `only` restricts the check to one reservation (nomination).
    fn fits_with(
        &self,
        cx: &Cluster,
        st: &State,
        pod: &PodInfo,
        node: &NodeInfo,
        ns: &NodeState,
    ) -> Status {
        let store = &cx.reservations;
        let free = allocate::node_free(node);
        let mut node_short = 0u32;
        let mut reasons: Vec<Cow<'static, str>> = Vec::new();
        let mut considered = 0;
        for &idx in &ns.matched {
            let Some(r) = store.get(idx) else { continue };
            let fit = match decision::fitting(st.pod_mask, st.has_affinity, pod, &free, r) {
                Ok(()) => return Status::success(),
                Err(Rejection::Short(fit)) => fit,
                Err(_) => continue,
            };
            considered += 1;
            node_short |= fit.node_short;
            let detailed = st.named.as_deref() == Some(&*r.name);
            for id in allocate::bits(fit.reservation_short) {
                reasons.push(allocate::reservation_reason(
                    &cx.cache.names,
                    id,
                    detailed.then_some((pod.requests[id], r)),
                ));
            }
        }
        if considered == 0 && !st.has_affinity {
            // Nothing here the pod could use: the node's free capacity decides
            // (NodeResourcesFit).
            return Status::success();
        }
        if !st.has_affinity {
            // Koordinator v1.8 tells a pod without reservation affinity only of the node:
            // what even a reservation's remainder could not cover, else what the node's
            // own free room lacks. Room enough there and still no reservation holding the
            // pod (a Restricted one too small): the node is filtered out all the same, as
            // seed 002 has it, with the reservations' reasons (docs/differences.md).
            let short = if node_short != 0 {
                node_short
            } else {
                allocate::short_of(st.pod_mask, &pod.requests, &free)
            };
            if short != 0 {
                reasons.clear();
                node_short = short;
            }
        }
        let mut all: Vec<Cow<'static, str>> = allocate::bits(node_short)
            .map(|id| allocate::node_reason(&cx.cache.names, id))
            .collect();
        all.sort();
        all.extend(reasons);
        if all.is_empty() {
            all.push(Cow::Borrowed(
                crate::reservation::ERR_REASON_NO_RESERVATIONS_MEET,
            ));
        }
        let mut it = all.into_iter();
        let mut status = Status::unschedulable(it.next().unwrap_or_default());
        for r in it {
            status = status.with_reason(r);
        }
        status
    }
}

/// Koordinator's "for node reason" counts: on each node whose matched reservations the
/// node's rejection does not explain by a reservation reason (`Reservation(s) ...`), every
/// other reason of that rejection, counted once per such reservation. The nodes are the
/// pod's few reservation nodes, filtered again here (PostFilter runs only after a failed
/// cycle, so the cycle itself keeps no per-node statuses); the reasons come out sorted,
/// where Koordinator's follow Go's map order.
fn for_node_reasons(
    cx: &PostFilterContext<'_>,
    st: &State,
    pod: &PodInfo,
) -> BTreeMap<String, i64> {
    let mut out = BTreeMap::new();
    let plan = FilterPlan::new(cx.profile, cx.state);
    for (idx, ns) in st.nodes.iter() {
        let Some(node) = cx.cluster.cache.node(*idx) else {
            continue;
        };
        let status = run_filter_plugins_with_nominated_pods(
            &plan,
            cx.cluster,
            cx.state,
            pod,
            node,
            cx.nominator,
        );
        if status.is_success() {
            continue;
        }
        let mut remain = ns.matched.len() as i64;
        let mut counts: BTreeMap<String, i64> = BTreeMap::new();
        for reason in status.reasons() {
            if reason.starts_with(RESERVATION_REASON_PREFIX) {
                remain -= 1;
            } else {
                *counts.entry(reason.to_string()).or_default() += 1;
            }
        }
        if remain > 0 {
            for (reason, n) in counts {
                *out.entry(reason).or_default() += remain * n;
            }
        }
    }
    out
}

/// How every reservation-level reason begins (Koordinator's `ErrReasonPrefix`).
const RESERVATION_REASON_PREFIX: &str = "Reservation(s) ";

/// NodeResourcesFit gave the pod back the pod slot of every allocate-once reservation it
/// matched on the node (and of its own waiting preemption hold), but the pod takes only the
/// slot of the reservation it is nominated to: landing outside an allocate-once one, it needs
/// a slot of its own, or the reservation's owner would find the node full.
fn pod_slot(cx: &Cluster, st: &State, pod: &PodInfo, node: &NodeInfo, ns: &NodeState) -> Status {
    let store = &cx.reservations;
    let once = ns
        .matched
        .iter()
        .filter(|&&i| store.get(i).is_some_and(|r| r.allocate_once))
        .count() as i64;
    if once == 0 {
        return Status::success();
    }
    let hold = ns.slots - once;
    let takes_one = nominate(cx, st, pod, ns, node, false)
        .and_then(|(i, _)| store.get(i))
        .is_some_and(|r| r.allocate_once);
    let given = hold + i64::from(takes_one);
    if node.pods.len() as i64 - given + 1 > node.allowed_pods {
        return Status::unschedulable("Too many pods");
    }
    Status::success()
}

/// Picks the reservation the pod takes on `node`. `assumed`: the pod is already
/// counted on the node (Reserve runs after the scheduler assumed it).
fn nominate(
    cx: &Cluster,
    st: &State,
    pod: &PodInfo,
    ns: &NodeState,
    node: &NodeInfo,
    assumed: bool,
) -> Option<(RIdx, i64)> {
    let store = &cx.reservations;
    let mut free = allocate::node_free(node);
    if assumed {
        free.add(&pod.requests);
    }
    let usable = ns.matched.iter().filter_map(|&idx| {
        let r = store.get(idx)?;
        // An allocate-once reservation with an owner is used up (until the controller
        // marks it Succeeded it is still in `matched`).
        let used_up = r.allocate_once && !r.owner_pods.is_empty();
        let usable =
            !used_up && decision::fitting(st.pod_mask, st.has_affinity, pod, &free, r).is_ok();
        usable.then_some((idx, r))
    });
    // Seed 002: of several reusable reservations the pod could use here, only the
    // earliest created is used (so a pod never ends up spread over several of them);
    // `matched` is sorted by creation, so the first reusable one is it.
    let mut earliest_reusable: Option<RIdx> = None;
    let mut best: Option<(allocate::NominationKey, RIdx, i64)> = None;
    for (idx, r) in usable {
        if !r.allocate_once && r.order.is_none() {
            match earliest_reusable {
                Some(_) => continue,
                None => earliest_reusable = Some(idx),
            }
        }
        let score = allocate::score(&pod.requests, r);
        let key = allocate::nomination_key(r, score);
        if best.as_ref().is_none_or(|(k, _, _)| key < *k) {
            best = Some((key, idx, score));
        }
    }
    best.map(|(_, idx, score)| (idx, score))
}

impl Plugin for Reservation {
    fn name(&self) -> &'static str {
        crate::plugins::names::RESERVATION
    }

    fn points(&self) -> Points {
        Points::PRE_FILTER
            | Points::FILTER
            | Points::FILTER_FAST
            | Points::POST_FILTER
            | Points::PRE_SCORE
            | Points::SCORE
            | Points::RESERVE
            | Points::PRE_BIND
    }

    fn reservation_settings(&self) -> Option<Settings> {
        Some(self.args.settings())
    }

    fn before_pre_filter(&self, cx: &Cluster, state: &mut CycleState, pod: &PodInfo) {
        let mut st = State::default();
        let status = if pod.is_reserve_pod() {
            st.reserve_pod = true;
            Status::success()
        } else {
            self.pre_filter_pod(cx, pod, &mut st)
        };
        st.pre_filter = Some(status);
        if !st.reserve_pod && !st.ignored {
            let mut nodes: Vec<NodeIdx> = st.nodes.keys().copied().collect();
            nodes.sort_unstable();
            state.preferred_nodes = nodes;
        }
        state.reservation = Some(Box::new(st));
    }

    fn pre_filter(&self, cx: &Cluster, state: &mut CycleState, pod: &PodInfo) -> Status {
        if state
            .reservation
            .as_ref()
            .is_none_or(|s| s.pre_filter.is_none())
        {
            self.before_pre_filter(cx, state, pod);
        }
        let Some(st) = state.reservation.as_deref_mut() else {
            return Status::error("Reservation: no cycle state");
        };
        let status = st.pre_filter.take().unwrap_or_default();
        if st.has_affinity && status.is_success() {
            let nodes: Vec<NodeIdx> = st.nodes.keys().copied().collect();
            state.restrict_nodes(crate::plugins::names::RESERVATION, nodes);
        }
        status
    }

    /// Filter's two ways to let a node through without looking at it: the pod ignores
    /// reservations, or the node holds none of its matched reservations and it requires
    /// none (most nodes, for most pods).
    fn passes(&self, _cx: &Cluster, state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> bool {
        state.reservation.as_deref().is_some_and(|st| {
            !st.reserve_pod
                && (st.ignored
                    || (!st.has_affinity
                        && (st.nodes.is_empty() || !st.nodes.contains_key(&node.idx))))
        })
    }

    /// [`Plugin::passes`] with the pod's part decided once per batch: only an owner
    /// without reservation affinity asks per node, with a bit test.
    fn passes_each(
        &self,
        _cx: &Cluster,
        state: &CycleState,
        _pod: &PodInfo,
        nodes: &[&NodeInfo],
        pass: &mut u64,
    ) {
        match state.reservation.as_deref() {
            Some(st) if !st.reserve_pod && st.ignored => {}
            Some(st) if !st.reserve_pod && !st.has_affinity => {
                if state.outside_preferred {
                    // None of these nodes is one of the pod's reservation nodes.
                    debug_assert!(nodes.iter().all(|n| !st.nodes.contains_key(&n.idx)));
                    return;
                }
                if st.nodes.is_empty() {
                    return;
                }
                keep(pass, nodes, |n| !st.nodes.contains_key(&n.idx));
            }
            _ => *pass = 0,
        }
    }

    fn filter(&self, cx: &Cluster, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        let st = match state_of(state) {
            Ok(s) => s,
            Err(e) => return e,
        };
        if st.reserve_pod {
            return self.filter_reserve_pod(cx, pod, node);
        }
        if st.ignored {
            return Status::success();
        }
        match st.nodes.get(&node.idx) {
            None if st.has_affinity => {
                Status::unresolvable(crate::reservation::ERR_REASON_AFFINITY)
            }
            None => Status::success(),
            Some(ns) => {
                let fits = self.fits_with(cx, st, pod, node, ns);
                if !fits.is_success() {
                    return fits;
                }
                pod_slot(cx, st, pod, node, ns)
            }
        }
    }

    fn post_filter(
        &self,
        cx: &mut PostFilterContext<'_>,
        pod: &PodInfo,
    ) -> Option<PostFilterResult> {
        let st = cx.state.reservation.as_deref()?;
        if st.reserve_pod || st.ignored {
            return None;
        }
        let d = &st.diag;
        if d.owner_matched == 0 && !st.has_affinity {
            return None;
        }
        let mut reasons = Vec::new();
        let mut push = |n: u32, text: &str| {
            if n > 0 {
                reasons.push(format!("{n} {text}"));
            }
        };
        push(
            d.name_matched,
            "Reservation(s) exactly matches the requested reservation name",
        );
        push(
            d.name_unmatched,
            "Reservation(s) didn't match the requested reservation name",
        );
        push(
            d.affinity_unmatched,
            "Reservation(s) didn't match affinity rules",
        );
        push(d.unschedulable, "Reservation(s) is unschedulable");
        push(d.not_exact, "Reservation(s) is not exact matched");
        for (taint, n) in &d.taints {
            reasons.push(format!("{n} Reservation(s) had untolerated taint {taint}"));
        }
        for (reason, n) in for_node_reasons(cx, st, pod) {
            reasons.push(format!("{n} Reservation(s) for node reason that {reason}"));
        }
        reasons.push(format!(
            "{} Reservation(s) matched owner total",
            d.owner_matched
        ));
        Some(PostFilterResult {
            message: Some(reasons.join(", ")),
            ..Default::default()
        })
    }

    fn pre_score(
        &self,
        cx: &Cluster,
        state: &mut CycleState,
        pod: &PodInfo,
        nodes: &[NodeIdx],
    ) -> Status {
        let Some(st) = state.reservation.as_deref_mut() else {
            return Status::skip();
        };
        if st.reserve_pod || st.ignored || st.nodes.is_empty() {
            return Status::skip();
        }
        let mut any = false;
        let mut preferred: Option<(i64, NodeIdx)> = None;
        // The pod's few reservation nodes are filtered first, so they lead `nodes`: the
        // walk ends once it has met all of them, not at the end of the sample.
        let mut left = st.nodes.len();
        for &n in nodes {
            if left == 0 {
                break;
            }
            let Some(ns) = st.nodes.get(&n) else { continue };
            left -= 1;
            let Some(info) = cx.cache.node(n) else {
                continue;
            };
            let nominated = nominate(cx, st, pod, ns, info, false);
            let order = nominated
                .and_then(|(i, _)| cx.reservations.get(i))
                .and_then(|r| r.order);
            if let Some(o) = order {
                if preferred.is_none_or(|(p, pn)| (o, n) < (p, pn)) {
                    preferred = Some((o, n));
                }
            }
            if let Some(ns) = st.nodes.get_mut(&n) {
                ns.nominated = nominated.map(|(i, _)| i);
                ns.score = nominated.map_or(0, |(_, s)| 50 + s.clamp(0, 100) / 2);
                any |= nominated.is_some();
            }
        }
        if let Some((_, n)) = preferred {
            if let Some(ns) = st.nodes.get_mut(&n) {
                ns.score = crate::framework::plugin::MAX_NODE_SCORE;
            }
        }
        if any {
            Status::success()
        } else {
            Status::skip()
        }
    }

    fn score(&self, _cx: &Cluster, state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> i64 {
        state
            .reservation
            .as_deref()
            .and_then(|st| st.nodes.get(&node.idx))
            .map_or(0, |ns| ns.score)
    }

    /// [`Plugin::score`] by node index alone: the score is PreScore's, so the node itself
    /// (in the cluster for the whole cycle) need not be looked up.
    fn score_nodes(
        &self,
        _cx: &Cluster,
        state: &CycleState,
        _pod: &PodInfo,
        nodes: &[NodeIdx],
        out: &mut Vec<i64>,
    ) {
        let Some(st) = state.reservation.as_deref() else {
            out.resize(out.len() + nodes.len(), 0);
            return;
        };
        // As in PreScore, the nodes holding the pod's reservations lead `nodes`: once all
        // are met, the rest score 0 without a look.
        let end = out.len() + nodes.len();
        let mut left = st.nodes.len();
        for n in nodes {
            if left == 0 {
                break;
            }
            out.push(st.nodes.get(n).map_or(0, |ns| {
                left -= 1;
                ns.score
            }));
        }
        out.resize(end, 0);
    }

    fn reserve(
        &self,
        cx: &mut Cluster,
        state: &mut CycleState,
        pod: &PodInfo,
        node: NodeIdx,
    ) -> Status {
        if let Some(name) = reservation_name(pod) {
            return match cx.reservations.place(&mut cx.cache, name, node, state.now) {
                Ok(()) => Status::success(),
                Err(e) => Status::error(e),
            };
        }
        let Some(st) = state.reservation.as_deref_mut() else {
            return Status::success();
        };
        if st.ignored {
            return Status::success();
        }
        let Some(idx) = st.chosen(cx, pod, node) else {
            if st.has_affinity {
                return Status::unschedulable(crate::reservation::ERR_REASON_AFFINITY);
            }
            return Status::success();
        };
        cx.reservations.assume_owner(&mut cx.cache, idx, pod);
        st.assumed = cx
            .reservations
            .get(idx)
            .map(|r| (r.name.clone(), r.uid.clone()));
        Status::success()
    }

    fn unreserve(&self, cx: &mut Cluster, state: &mut CycleState, pod: &PodInfo, _node: NodeIdx) {
        if let Some(name) = reservation_name(pod) {
            cx.reservations.unplace(&mut cx.cache, name);
            return;
        }
        if let Some(st) = state.reservation.as_deref_mut() {
            if st.assumed.take().is_some() {
                cx.reservations.forget_owner(&mut cx.cache, &pod.key);
            }
        }
    }

    fn pre_bind(
        &self,
        _cx: &Cluster,
        state: &CycleState,
        _pod: &PodInfo,
        _node: &NodeInfo,
        annotations: &mut BTreeMap<String, String>,
    ) -> Status {
        if let Some((name, uid)) = state.reservation.as_deref().and_then(State::assumed) {
            ReservationAllocated::new(name, uid).insert_into(annotations);
        }
        Status::success()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reservation::testkit::{reservation, Sim};
    use crate::resources::{ResourceId, ResourceNames};
    use crate::testing::{node, pod};

    fn cycle(s: &Sim, p: &PodInfo) -> CycleState {
        let pl = Reservation::new(None).unwrap();
        let mut state = CycleState::default();
        pl.before_pre_filter(&s.s().cluster, &mut state, p);
        state
    }

    #[test]
    fn restoring_prefix_ends_after_the_last_node_with_an_entry() {
        let mut st = State::default();
        st.nodes.insert(NodeIdx(7), NodeState::default());
        st.nodes.insert(NodeIdx(3), NodeState::default());
        let n = |v: &[u32]| v.iter().map(|&i| NodeIdx(i)).collect::<Vec<_>>();
        assert_eq!(st.restoring_prefix(&n(&[3, 7, 1, 2])), 2);
        assert_eq!(st.restoring_prefix(&n(&[3, 1, 7, 2])), 3);
        assert_eq!(
            st.restoring_prefix(&n(&[3, 1, 2])),
            3,
            "an entry not among the nodes: every node is asked"
        );
        assert_eq!(State::default().restoring_prefix(&n(&[1, 2])), 0);
    }

    #[test]
    fn owners_get_back_and_do_not_see_their_reservations_only() {
        let mut s = Sim::default();
        s.node(node("n1").alloc("cpu", "8").build());
        s.reservation(
            reservation("r")
                .req("cpu", "2")
                .host_port(9000)
                .owner_label("app", "web")
                .build(),
        );
        let cx = &s.s().cluster;
        let idx = cx.cache.node_idx("n1").unwrap();
        let stand_in = cx
            .cache
            .node(idx)
            .unwrap()
            .pods
            .iter()
            .find(|p| p.is_reserve_pod())
            .cloned()
            .expect("the reservation's stand-in is on its node");
        let mut names = ResourceNames::default();
        let owner = pod("o")
            .label("app", "web")
            .req("cpu", "1")
            .build_info_with(&mut names);
        let state = cycle(&s, &owner);
        let st = state.reservation.as_deref().unwrap();
        assert_eq!(st.restored(&owner, idx).unwrap()[ResourceId::CPU], 2000);
        assert_eq!(st.restored_ports(&owner, idx).len(), 1);
        assert!(st.hides(&stand_in, idx));
        assert!(hidden(&state, &stand_in, idx));
        assert_eq!(state.preferred_nodes, vec![idx]);
        let other = pod("x").req("cpu", "1").build_info_with(&mut names);
        let state = cycle(&s, &other);
        let st = state.reservation.as_deref().unwrap();
        assert!(st.restored(&other, idx).is_none());
        assert!(
            !st.hides(&stand_in, idx),
            "a non-owner sees the reservation as a pod"
        );
        let item = s
            .s()
            .cluster
            .reservations
            .by_name("r")
            .unwrap()
            .item
            .clone()
            .unwrap();
        let state = cycle(&s, &item);
        assert!(
            hidden(&state, &stand_in, idx),
            "a reservation is not checked against other reservations"
        );
        assert!(!hidden(&CycleState::default(), &stand_in, idx));
    }

    #[test]
    fn post_filter_counts_like_koordinator() {
        let mut s = Sim::default();
        s.node(node("n1").alloc("cpu", "8").build());
        s.reservation(
            reservation("r")
                .req("cpu", "2")
                .owner_label("app", "web")
                .spec("unschedulable", serde_json::json!(true))
                .build(),
        );
        s.pod(pod("p").label("app", "web").req("cpu", "7").build());
        let msg = s.message("p").unwrap();
        assert!(
            msg.contains("1 Reservation(s) is unschedulable, 1 Reservation(s) matched owner total"),
            "{msg}"
        );
        s.pod(
            pod("q")
                .label("app", "web")
                .annotation(
                    berth_api::annotations::ANNOTATION_RESERVATION_AFFINITY,
                    r#"{"name":"nope"}"#,
                )
                .build(),
        );
        let msg = s.message("q").unwrap();
        assert!(
            msg.starts_with(
                "0/1 nodes are available: node(s) no reservations match reservation affinity. "
            ),
            "{msg}"
        );
        // Each PostFilter plugin's text as it words it, joined with ", " (kube-scheduler's
        // `RunPostFilterPlugins`): preemption's ends with its FitError's period,
        // Koordinator's counts with none.
        assert!(
            msg.ends_with(
                " preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling., 0 Reservation(s) matched owner total"
            ),
            "{msg}"
        );
    }

    #[test]
    fn an_owner_without_affinity_is_told_of_the_node_as_koordinator_v1_8_words_it() {
        // Found by crates/berth-kube/tests/differential_koord.rs. n1: 2 CPUs, a 1-CPU
        // reservation. An owner asking for 3 is short even with the remainder: NodeResourcesFit
        // rejects the node, and PostFilter counts that reason once for the reservation.
        let mut s = Sim::default();
        s.node(node("n1").alloc("cpu", "2").build());
        let on_n1 = |name: &str, cpu: &str, app: &str| {
            reservation(name)
                .req("cpu", cpu)
                .owner_label("app", app)
                .reusable()
                .template_spec("nodeName", serde_json::json!("n1"))
        };
        s.reservation(on_n1("r", "1", "web").build());
        s.pod(pod("big").label("app", "web").req("cpu", "3").build());
        let msg = s.message("big").unwrap();
        assert!(
            msg.contains("1 Reservation(s) for node reason that Insufficient cpu, 1 Reservation(s) matched owner total"),
            "{msg}"
        );
        // n2: 4 CPUs, a 2-CPU Restricted reservation, 1 CPU taken by another pod. An owner
        // asking for 3 fits reservation + node (2 + 1) but not the reservation alone, nor
        // the node's own free room (1): the node's reason, not the reservation's.
        let mut s = Sim::default();
        s.node(node("n2").alloc("cpu", "4").build());
        s.reservation(
            reservation("tight")
                .req("cpu", "2")
                .owner_label("app", "db")
                .policy("Restricted")
                .template_spec("nodeName", serde_json::json!("n2"))
                .build(),
        );
        s.pod(pod("other").req("cpu", "1").build());
        s.pod(pod("db").label("app", "db").req("cpu", "3").build());
        let msg = s.message("db").unwrap();
        assert!(msg.contains("1 Insufficient cpu by node"), "{msg}");
        assert!(!msg.contains("1 Reservation(s) Insufficient cpu"), "{msg}");
    }

    #[test]
    fn reservations_on_nodes_the_pod_cannot_go_to_are_not_counted() {
        // Koordinator's BeforePreFilter skips nodes the pod's required node affinity
        // rejects (found by crates/berth-kube/tests/differential_koord.rs): an owner pinned
        // to another node is not told of its reservation.
        let mut s = Sim::default();
        s.node(
            node("n1")
                .alloc("cpu", "2")
                .label("kubernetes.io/hostname", "n1")
                .build(),
        );
        s.node(
            node("n2")
                .alloc("cpu", "2")
                .label("kubernetes.io/hostname", "n2")
                .build(),
        );
        s.reservation(
            reservation("r")
                .req("cpu", "1")
                .owner_label("app", "web")
                .template_spec("nodeName", serde_json::json!("n1"))
                .build(),
        );
        let pinned = |name: &str, host: &str| {
            pod(name)
                .label("app", "web")
                .req("cpu", "3")
                .spec(
                    "nodeSelector",
                    serde_json::json!({"kubernetes.io/hostname": host}),
                )
                .build()
        };
        s.pod(pinned("elsewhere", "n2"));
        let msg = s.message("elsewhere").unwrap();
        assert!(!msg.contains("Reservation(s)"), "{msg}");
        s.pod(pinned("there", "n1"));
        let msg = s.message("there").unwrap();
        assert!(
            msg.contains("1 Reservation(s) matched owner total"),
            "{msg}"
        );
    }
}
