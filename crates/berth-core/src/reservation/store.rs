//! [`ReservationStore`]: every reservation the scheduler knows, by name and UID, with the
//! indexes a scheduling cycle uses (active reservations by node, by owner) and what is left
//! to do after the input being handled (statuses to write, annotations, queue operations).
//!
//! The store has no outbox of effects and no clock of its own: lifecycle code is handed
//! `now` and the scheduler's effect queue, so every effect leaves through one queue in the
//! order it was decided, stamped with the time of the input that caused it.

use crate::collections::HashMap;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use berth_api::k8s_openapi::api::core::v1::Taint;
use berth_api::reservation::{
    Reservation, ReservationAllocatePolicy, ReservationCondition, ReservationPhase,
    ReservationStatus,
};
use smallvec::SmallVec;

use crate::model::node::NodeIdx;
use crate::model::pod::{HostPort, PodInfo};
use crate::model::selector::Labels;
use crate::object::ObjectKey;
use crate::resources::{ResourceId, Resources};
use crate::time::Time;

use super::owner::{IndexKey, OwnerIndex, OwnerMatcher};
use super::{QueueOp, Settings};

/// A reservation's slot in the store; stable while the reservation lives.
pub type RIdx = u32;

/// A pod that allocated from a reservation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    /// `metadata.uid`.
    pub uid: Arc<str>,
    /// Its requests, masked to the reservation's resource names.
    pub requests: Resources,
    /// Its host ports.
    pub ports: SmallVec<[HostPort; 2]>,
    /// Bound (the API server shows it on the node with the annotation); otherwise assumed by
    /// this scheduler and waiting for its bind.
    pub bound: bool,
    /// A running pod this scheduler pre-allocated to the reservation; its annotation is on
    /// its way.
    pub pre_allocated: bool,
}

/// One reservation, compiled.
#[derive(Debug, Clone)]
pub struct ReservationInfo {
    /// `metadata.name`.
    pub name: Arc<str>,
    /// `metadata.uid`.
    pub uid: Arc<str>,
    /// The object as last seen (with the status last written).
    pub obj: Arc<Reservation>,
    /// `metadata.creationTimestamp`.
    pub created: Time,
    /// Current phase.
    pub phase: ReservationPhase,
    /// Current conditions.
    pub conditions: Vec<ReservationCondition>,
    /// `status.nodeName` once placed.
    pub node_name: Option<Arc<str>>,
    /// The node, when it is known.
    pub node: Option<NodeIdx>,
    /// Why the scheduler cannot use the reservation (bad input), if so.
    pub problem: Option<String>,
    /// Labels (for reservation affinity).
    pub labels: Labels,
    /// Compiled owners.
    pub owners: OwnerMatcher,
    pub(crate) owner_keys: Vec<IndexKey>,
    /// `spec.allocatePolicy`.
    pub policy: ReservationAllocatePolicy,
    /// `spec.allocateOnce` (default true).
    pub allocate_once: bool,
    /// `spec.unschedulable`.
    pub unschedulable: bool,
    /// `metadata.deletionTimestamp` is set.
    pub terminating: bool,
    /// `spec.taints`.
    pub taints: Vec<Taint>,
    /// `reservation-order` label (non-zero).
    pub order: Option<i64>,
    /// `spec.preAllocation`.
    pub pre_allocation: bool,
    /// `pre-allocation-required` label.
    pub pre_allocation_required: bool,
    /// `preAllocationPolicy.mode: Cluster`.
    pub cluster_mode: bool,
    /// `preAllocationPolicy.enableMultiple`.
    pub enable_multiple: bool,
    /// When it expires (`expires`, else creation + `ttl`), if ever.
    pub expires_at: Option<Time>,
    /// `template.spec.nodeName`.
    pub pinned_node: Option<String>,
    /// `status.allocatable`.
    pub allocatable: Resources,
    /// `status.allocatable` as written.
    pub allocatable_list:
        BTreeMap<String, berth_api::k8s_openapi::apimachinery::pkg::api::resource::Quantity>,
    /// Bit `i`: resource slot `i` is among the reservation's resource names.
    pub names: u32,
    /// Bit `i`: resource slot `i` is restricted (`Restricted` policy, `restricted-options`).
    pub restricted: u32,
    /// `node.koordinator.sh/reservation` on the reservation: held but not for owners.
    pub inner_reserved: Resources,
    /// The template's host ports.
    pub ports: SmallVec<[HostPort; 2]>,
    /// Claims the template mounts.
    pub claims: SmallVec<[ObjectKey; 1]>,
    /// The reserve pod to schedule.
    pub item: Option<Arc<PodInfo>>,
    /// The stand-in placed in `NodeInfo::pods`.
    pub placed: Option<Arc<PodInfo>>,
    /// Pods that allocated from it.
    pub owner_pods: BTreeMap<ObjectKey, Owner>,
    /// Sum of the owners' masked requests (not capped).
    pub requested: Resources,
    /// What it currently adds to its node's `reserved`.
    pub contrib: Resources,
    /// What it currently adds to its node's `reserved_ports`.
    pub contrib_ports: SmallVec<[HostPort; 2]>,
    /// Whether `contrib`, the stand-in and claims are applied to the node.
    pub attached: bool,
    /// The status a terminal reservation keeps.
    pub final_status: Option<ReservationStatus>,
    /// When it became Succeeded or Failed.
    pub terminal_since: Option<Time>,
    /// Its pending timer (expiry, or garbage collection when terminal).
    pub timer: Option<Time>,
    /// A Delete was emitted for it.
    pub gc_requested: bool,
    /// The status last written (or read).
    pub last_status: Option<ReservationStatus>,
    /// Filed in the owner index.
    pub indexed: bool,
    /// A virtual reservation of Dynamic Reservation Provisioning ([`crate::drp`]): the
    /// reservation id it stands for. It holds capacity like any reservation but exists in
    /// the scheduler only (no status is written, no event names it, a LIST never returns
    /// it).
    pub virtual_id: Option<Arc<str>>,
    /// Placed by its Reserve but waiting at Permit for the rest of its gang
    /// ([`crate::gang`]): it holds its room on the node, but no status is written and no
    /// owner may use it until its gang is allowed through (or it is unplaced).
    pub permit_waiting: bool,
}

impl ReservationInfo {
    /// What owners may use in total: allocatable minus what is reserved inside.
    pub fn cap(&self) -> Resources {
        let mut c = self.allocatable;
        c.sub(&self.inner_reserved);
        c.clamp_non_negative();
        c
    }

    /// What owners took from it: their requests up to its capacity, per resource (whatever
    /// order they came in, the first ones exhaust it and the rest comes from the node).
    pub fn taken(&self) -> Resources {
        self.requested.min(&self.cap())
    }

    /// What is left for owners.
    pub fn usable(&self) -> Resources {
        // `cap - taken`, clamped at 0, in one pass over the reservation's own resources:
        // asked for every matched reservation on every node an owner's cycle nominates on.
        // Elsewhere `allocatable` is 0 (`names` is its mask) and `inner_reserved` at least
        // 0, so the capacity, and what is left of it, is 0.
        let mut u = Resources::ZERO;
        for id in ResourceId::in_mask(self.names) {
            let c = self.allocatable[id]
                .saturating_sub(self.inner_reserved[id])
                .max(0);
            u[id] = c.saturating_sub(self.requested[id].min(c)).max(0);
        }
        #[cfg(debug_assertions)]
        {
            let mut every = self.cap();
            for (c, &r) in every.0.iter_mut().zip(&self.requested.0) {
                *c = c.saturating_sub(r.min(*c)).max(0);
            }
            assert_eq!(u, every, "usable() over `names` alone for {}", self.name);
        }
        u
    }

    /// Whether it is a virtual reservation (DRP), known to the scheduler only.
    pub fn is_virtual(&self) -> bool {
        self.virtual_id.is_some()
    }

    /// Placed and holding (Available or Waiting).
    pub fn is_active(&self) -> bool {
        self.phase.is_active()
    }

    /// Koordinator's `IsMatchable`: Available on a node, usable by new owners.
    pub fn matchable(&self) -> bool {
        self.phase == ReservationPhase::Available
            && !self.permit_waiting
            && self.node.is_some()
            && self.problem.is_none()
            && (!self.allocate_once || self.owner_pods.is_empty())
    }

    /// What it should add to its node's `reserved`: the unallocated remainder while
    /// Available, nothing otherwise (a Waiting reservation holds nothing until there is
    /// room for it).
    pub fn hold(&self) -> Resources {
        if self.phase != ReservationPhase::Available {
            return Resources::ZERO;
        }
        let mut h = self.allocatable;
        h.sub(&self.taken());
        h.clamp_non_negative();
        h
    }

    /// Its template ports that no owner took, while Available.
    pub fn hold_ports(&self) -> SmallVec<[HostPort; 2]> {
        if self.phase != ReservationPhase::Available {
            return SmallVec::new();
        }
        let mut left = self.ports.clone();
        for o in self.owner_pods.values() {
            for p in &o.ports {
                if let Some(i) = left.iter().position(|x| x == p) {
                    left.swap_remove(i);
                }
            }
        }
        left.sort();
        left
    }

    /// The cluster-scoped key (for events and deletion).
    pub fn object_key(&self) -> ObjectKey {
        ObjectKey::cluster(crate::object::Kind::Reservation, &self.name)
    }
}

/// Every reservation, its indexes and the work left for the end of the input.
#[derive(Debug, Clone, Default)]
pub struct ReservationStore {
    slots: Vec<Option<ReservationInfo>>,
    free: Vec<RIdx>,
    by_name: HashMap<Arc<str>, RIdx>,
    by_uid: HashMap<Arc<str>, RIdx>,
    /// Active reservations placed on a known node, by node slot.
    on_node: Vec<SmallVec<[RIdx; 2]>>,
    /// Nodes with at least one active reservation, sorted.
    busy_nodes: BTreeSet<NodeIdx>,
    /// Active reservations whose node is not known (yet), by node name.
    pub(crate) awaiting_node: HashMap<Arc<str>, Vec<RIdx>>,
    owners: OwnerIndex,
    /// The reservation each pod allocated from.
    pub(crate) pod_owner: HashMap<ObjectKey, RIdx>,
    /// Bound pods naming a reservation UID the store does not hold (yet).
    pub(crate) orphan_pods: HashMap<Arc<str>, Vec<ObjectKey>>,
    /// Waiting reservations.
    pub(crate) waiting: BTreeSet<Arc<str>>,
    pub(crate) timers: BTreeSet<(Time, Arc<str>)>,
    pub(crate) dirty: BTreeSet<Arc<str>>,
    /// What the scheduling queue must do, applied by the scheduler after every input.
    /// Reserve and Unreserve (which get only `&mut Cluster`) place reservations and release
    /// capacity, so the requests wait here rather than in the scheduler's hands.
    pub(crate) queue_ops: Vec<QueueOp>,
    pub(crate) check_waiting: bool,
    /// Pods whose annotation names an unknown reservation UID (reverse of `orphan_pods`).
    pub(crate) pod_orphan: HashMap<ObjectKey, Arc<str>>,
    /// Pre-allocated pods whose annotation is still to be written.
    pub(crate) to_annotate: Vec<(ObjectKey, RIdx)>,
    /// Reservations the scheduler cannot use, with the problem, to report as `Warning`
    /// events (lifecycle code has no effect queue while it handles an object).
    pub(crate) to_report: Vec<(Arc<str>, String)>,
    /// Settings from the Reservation plugin's args.
    pub settings: Settings,
    /// How many reservations are named as preemption's holds ([`super::HOLD_NAME_PREFIX`]).
    hold_named: usize,
}

impl ReservationStore {
    /// A reservation by slot.
    pub fn get(&self, idx: RIdx) -> Option<&ReservationInfo> {
        self.slots.get(idx as usize)?.as_ref()
    }

    pub(crate) fn get_mut(&mut self, idx: RIdx) -> Option<&mut ReservationInfo> {
        self.slots.get_mut(idx as usize)?.as_mut()
    }

    /// A reservation's slot by name.
    pub fn idx(&self, name: &str) -> Option<RIdx> {
        self.by_name.get(name).copied()
    }

    /// A reservation by name.
    pub fn by_name(&self, name: &str) -> Option<&ReservationInfo> {
        self.get(self.idx(name)?)
    }

    /// A reservation's slot by UID.
    pub fn idx_by_uid(&self, uid: &str) -> Option<RIdx> {
        self.by_uid.get(uid).copied()
    }

    /// Every reservation, in name order.
    pub fn iter(&self) -> impl Iterator<Item = &ReservationInfo> + '_ {
        let mut v: Vec<&ReservationInfo> = self.slots.iter().flatten().collect();
        v.sort_by(|a, b| a.name.cmp(&b.name));
        v.into_iter()
    }

    /// Succeeded and Failed reservations whose status names `node`. Walks every
    /// reservation: only a node deletion asks, never a scheduling cycle.
    pub(crate) fn terminal_on(&self, node: &str) -> Vec<RIdx> {
        (0..self.slots.len())
            .filter_map(|i| RIdx::try_from(i).ok())
            .filter(|&i| {
                self.get(i)
                    .is_some_and(|r| r.phase.is_terminal() && r.node_name.as_deref() == Some(node))
            })
            .collect()
    }

    /// How many reservations are known.
    pub fn len(&self) -> usize {
        self.by_name.len()
    }

    /// Whether none is known.
    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }

    /// Active reservations on a node.
    pub fn on_node(&self, node: NodeIdx) -> &[RIdx] {
        self.on_node.get(node.index()).map_or(&[], |v| v.as_slice())
    }

    /// Nodes holding at least one active reservation.
    pub fn busy_nodes(&self) -> impl Iterator<Item = NodeIdx> + '_ {
        self.busy_nodes.iter().copied()
    }

    /// The reservation a pod allocated from.
    pub fn owner_of(&self, pod: &ObjectKey) -> Option<RIdx> {
        self.pod_owner.get(pod).copied()
    }

    /// Candidate reservations that may name `pod` as an owner, into `out` (a superset;
    /// check [`OwnerMatcher::matches`]). Only indexed (Available) reservations are returned.
    pub fn owner_candidates_into(&self, pod: &PodInfo, out: &mut Vec<RIdx>) {
        self.owners.candidates(pod, out);
    }

    /// The reserve pod of a pending reservation, to schedule.
    pub fn item(&self, name: &str) -> Option<Arc<PodInfo>> {
        let r = self.by_name(name)?;
        if r.phase != ReservationPhase::Pending
            || r.problem.is_some()
            || r.terminating
            || r.node_name.is_some()
        {
            return None;
        }
        r.item.clone()
    }

    /// The earliest timer (expiry or garbage collection).
    pub fn next_timer(&self) -> Option<Time> {
        self.timers.iter().next().map(|(t, _)| *t)
    }

    /// Whether any reservation is named as a preemption hold: when none is, no pod has
    /// one, and its name need not be built and looked up.
    pub fn may_hold(&self) -> bool {
        self.hold_named > 0
    }

    pub(crate) fn insert(&mut self, info: ReservationInfo) -> RIdx {
        let idx = self.free.pop().unwrap_or(self.slots.len() as RIdx);
        self.hold_named += usize::from(info.name.starts_with(super::HOLD_NAME_PREFIX));
        self.by_name.insert(info.name.clone(), idx);
        if !info.uid.is_empty() {
            self.by_uid.insert(info.uid.clone(), idx);
        }
        if idx as usize == self.slots.len() {
            self.slots.push(Some(info));
        } else {
            self.slots[idx as usize] = Some(info);
        }
        idx
    }

    pub(crate) fn remove(&mut self, idx: RIdx) -> Option<ReservationInfo> {
        let info = self.slots.get_mut(idx as usize)?.take()?;
        self.hold_named -= usize::from(info.name.starts_with(super::HOLD_NAME_PREFIX));
        self.by_name.remove(&info.name);
        if self.by_uid.get(&info.uid) == Some(&idx) {
            self.by_uid.remove(&info.uid);
        }
        self.waiting.remove(&info.name);
        if let Some(t) = info.timer {
            self.timers.remove(&(t, info.name.clone()));
        }
        self.free.push(idx);
        Some(info)
    }

    pub(crate) fn rename_uid(&mut self, idx: RIdx, old: &Arc<str>, new: &Arc<str>) {
        if self.by_uid.get(old) == Some(&idx) {
            self.by_uid.remove(old);
        }
        if !new.is_empty() {
            self.by_uid.insert(new.clone(), idx);
        }
    }

    pub(crate) fn index_node(&mut self, idx: RIdx, node: NodeIdx) {
        let i = node.index();
        if self.on_node.len() <= i {
            self.on_node.resize_with(i + 1, SmallVec::new);
        }
        if !self.on_node[i].contains(&idx) {
            self.on_node[i].push(idx);
        }
        self.busy_nodes.insert(node);
    }

    pub(crate) fn unindex_node(&mut self, idx: RIdx, node: NodeIdx) {
        if let Some(v) = self.on_node.get_mut(node.index()) {
            v.retain(|x| *x != idx);
            if v.is_empty() {
                self.busy_nodes.remove(&node);
            }
        }
    }

    pub(crate) fn take_node(&mut self, node: NodeIdx) -> SmallVec<[RIdx; 2]> {
        self.busy_nodes.remove(&node);
        self.on_node
            .get_mut(node.index())
            .map(std::mem::take)
            .unwrap_or_default()
    }

    pub(crate) fn index_owner(&mut self, idx: RIdx) {
        let Some(r) = self.get(idx) else { return };
        // One waiting at Permit for its gang is not for owners yet.
        if r.indexed || r.permit_waiting {
            return;
        }
        let keys = r.owner_keys.clone();
        self.owners.insert(idx, &keys);
        if let Some(r) = self.get_mut(idx) {
            r.indexed = true;
        }
    }

    pub(crate) fn unindex_owner(&mut self, idx: RIdx) {
        let Some(r) = self.get(idx) else { return };
        if !r.indexed {
            return;
        }
        let keys = r.owner_keys.clone();
        self.owners.remove(idx, &keys);
        if let Some(r) = self.get_mut(idx) {
            r.indexed = false;
        }
    }

    pub(crate) fn set_timer(&mut self, idx: RIdx, at: Option<Time>) {
        let Some(r) = self.get_mut(idx) else { return };
        let old = r.timer.take();
        r.timer = at;
        let name = r.name.clone();
        if let Some(t) = old {
            self.timers.remove(&(t, name.clone()));
        }
        if let Some(t) = at {
            self.timers.insert((t, name));
        }
    }

    pub(crate) fn mark_dirty(&mut self, idx: RIdx) {
        if let Some(r) = self.get(idx) {
            let n = r.name.clone();
            self.dirty.insert(n);
        }
    }

    /// Takes the queue operations accumulated since the last call.
    pub fn take_queue_ops(&mut self) -> Vec<QueueOp> {
        std::mem::take(&mut self.queue_ops)
    }
}

#[cfg(test)]
pub(crate) mod test_support {
    use super::*;
    use berth_api::reservation::ReservationAllocatePolicy;

    /// A placed, Available reservation with `allocatable` (slot, amount) pairs.
    pub(crate) fn info(
        name: &str,
        allocatable: &[(crate::resources::ResourceId, i64)],
        policy: ReservationAllocatePolicy,
    ) -> ReservationInfo {
        let mut a = Resources::ZERO;
        for (id, v) in allocatable {
            a[*id] = *v;
        }
        let names = super::super::allocate::mask(&a);
        ReservationInfo {
            name: name.into(),
            uid: format!("uid-{name}").into(),
            obj: Arc::new(Reservation::default()),
            created: 0,
            phase: ReservationPhase::Available,
            conditions: Vec::new(),
            node_name: Some("n1".into()),
            node: Some(NodeIdx(0)),
            problem: None,
            labels: Labels::new(),
            owners: OwnerMatcher::default(),
            owner_keys: Vec::new(),
            policy,
            allocate_once: false,
            unschedulable: false,
            terminating: false,
            taints: Vec::new(),
            order: None,
            pre_allocation: false,
            pre_allocation_required: false,
            cluster_mode: false,
            enable_multiple: false,
            expires_at: None,
            pinned_node: None,
            allocatable: a,
            allocatable_list: BTreeMap::new(),
            names,
            restricted: names,
            inner_reserved: Resources::ZERO,
            ports: SmallVec::new(),
            claims: SmallVec::new(),
            item: None,
            placed: None,
            owner_pods: BTreeMap::new(),
            requested: Resources::ZERO,
            contrib: Resources::ZERO,
            contrib_ports: SmallVec::new(),
            attached: false,
            final_status: None,
            terminal_since: None,
            timer: None,
            gc_requested: false,
            last_status: None,
            indexed: false,
            virtual_id: None,
            permit_waiting: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::test_support::info;
    use super::*;
    use crate::resources::ResourceId;
    use berth_api::reservation::ReservationAllocatePolicy;

    const GI: i64 = 1 << 30;

    #[test]
    fn taken_is_capped_at_capacity_and_the_overflow_is_not_held() {
        let mut r = info(
            "r",
            &[(ResourceId::CPU, 4000), (ResourceId::MEMORY, 8 * GI)],
            ReservationAllocatePolicy::Aligned,
        );
        r.requested[ResourceId::CPU] = 4000;
        r.requested[ResourceId::MEMORY] = 9 * GI;
        assert_eq!(r.taken()[ResourceId::MEMORY], 8 * GI);
        assert!(r.usable().is_zero());
        assert!(r.hold().is_zero());
        r.inner_reserved[ResourceId::CPU] = 1000;
        assert_eq!(r.cap()[ResourceId::CPU], 3000);
        assert_eq!(
            r.hold()[ResourceId::CPU],
            1000,
            "reserved inside stays held for nobody"
        );
    }

    #[test]
    fn allocate_once_with_an_owner_is_not_matchable_and_waiting_holds_nothing() {
        let mut r = info(
            "r",
            &[(ResourceId::CPU, 1000)],
            ReservationAllocatePolicy::Default,
        );
        assert!(r.matchable());
        r.allocate_once = true;
        r.owner_pods.insert(
            ObjectKey::pod("default", "p"),
            Owner {
                uid: "u".into(),
                requests: Resources::ZERO,
                ports: SmallVec::new(),
                bound: false,
                pre_allocated: false,
            },
        );
        assert!(!r.matchable());
        r.phase = ReservationPhase::Waiting;
        assert!(r.hold().is_zero() && r.is_active());
    }

    #[test]
    fn may_hold_while_a_reservation_is_named_as_a_preemption_hold() {
        let mut store = ReservationStore::default();
        let plain = store.insert(info("plain", &[], ReservationAllocatePolicy::Default));
        assert!(!store.may_hold());
        let holds: Vec<RIdx> = ["preempt-default-a", "preempt-default-b"]
            .into_iter()
            .map(|n| store.insert(info(n, &[], ReservationAllocatePolicy::Restricted)))
            .collect();
        assert!(store.may_hold());
        store.remove(holds[0]);
        assert!(store.may_hold(), "one hold is left");
        store.remove(plain);
        store.remove(holds[1]);
        assert!(!store.may_hold());
        store.remove(holds[1]);
        assert!(!store.may_hold(), "a second removal changes nothing");
    }
}
