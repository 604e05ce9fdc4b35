//! A reservation's life, driven by the scheduler: created (queued while Pending), placed
//! (Available, or Waiting until its node has room), allocated by owners, Succeeded
//! (`allocateOnce`), Failed (expired or node lost), garbage-collected; and every change to
//! what it holds on its node.
//!
//! These are methods of the [`ReservationStore`] that also borrow the [`NodeCache`],
//! because a reservation's hold lives in its node's `NodeInfo` (`reserved`,
//! `reserved_ports`, its stand-in in `pods`, claims in `pvc_users`); nothing else (NUMA,
//! CPU sets) is theirs to touch. Outputs (status writes, events, queue operations)
//! accumulate in the store and the scheduler takes them with
//! [`ReservationStore::drain`] after every input.

use std::collections::VecDeque;
use std::sync::Arc;

use berth_api::annotations::{
    is_true, reservation_order, AnnotationCodec, NodeReservation, ReservationAllocated,
    ReservationRestrictedOptions, ANNOTATION_POD_PRE_ALLOCATABLE_PRIORITY,
    LABEL_POD_IS_PRE_ALLOCATABLE, LABEL_PRE_ALLOCATION_REQUIRED,
};
use berth_api::reservation::{
    condition, PreAllocationMode, Reservation, ReservationPhase, ReservationSpec, SchedulerProblem,
    DEFAULT_TTL,
};
use berth_api::GoDuration;
use smallvec::SmallVec;

use crate::cache::node_cache::{AffinityTotals, NodeCache, PodState};
use crate::effect::{Effect, Record};
use crate::model::node::NodeIdx;
use crate::model::pod::{time_of, PodInfo};
use crate::object::{Kind, ObjectKey};
use crate::resources::Resources;
use crate::time::Time;

use super::allocate;
use super::owner::OwnerMatcher;
use super::reserve_pod;
use super::status;
use super::store::{Owner, RIdx, ReservationInfo, ReservationStore};
use super::QueueOp;

/// Condition message when a reservation's node is deleted.
pub const MSG_NODE_DELETED: &str = "the node of the reservation was deleted";
/// The `Ready` condition message of a reservation found placed on a node that does not exist.
pub const MSG_NODE_MISSING: &str = "the node of the reservation does not exist";

/// The user-written parts of two versions of an object are the same (only the status, which
/// the scheduler writes, or bookkeeping fields differ): the update is an echo.
fn same_user_fields(a: &Reservation, b: &Reservation) -> bool {
    a.metadata.uid == b.metadata.uid
        && a.metadata.labels == b.metadata.labels
        && a.metadata.annotations == b.metadata.annotations
        && a.metadata.deletion_timestamp == b.metadata.deletion_timestamp
        && a.spec == b.spec
}

/// When a reservation created at `created` expires, from its `ttl` (`None`: unreadable, so
/// only `expires` counts) and `expires`: never with `ttl: 0`, else the earlier of the two.
fn expiry(created: Time, ttl_ms: Option<Time>, expires: Option<Time>) -> Option<Time> {
    if ttl_ms == Some(0) {
        return None;
    }
    let by_ttl = ttl_ms.map(|ms| created.saturating_add(ms));
    match (expires, by_ttl) {
        (Some(e), Some(t)) => Some(e.min(t)),
        (e, t) => e.or(t),
    }
}

/// Event reason for a reservation the scheduler cannot use (what kube-scheduler and
/// Koordinator record when an object cannot be scheduled).
pub const REASON_FAILED_SCHEDULING: &str = "FailedScheduling";

pub(crate) fn mask_requests(req: &Resources, names: u32) -> Resources {
    let mut out = Resources::ZERO;
    for (id, v) in req.non_zero() {
        if names & (1 << id.0) != 0 {
            out[id] = v;
        }
    }
    out
}

/// The orphan key of a pod whose annotation names a reservation by name only (`/` cannot
/// start a UID or a reservation name, so it collides with neither).
fn orphan_name_key(name: &str) -> Arc<str> {
    format!("/name/{name}").into()
}

/// The reservation's owner matcher; none (the owner matches no pod) is a problem.
fn owner_matcher(spec: &ReservationSpec, problems: &mut Vec<String>) -> OwnerMatcher {
    if spec.owners.is_empty() {
        problems.push(SchedulerProblem::MissingOwners.to_string());
        return OwnerMatcher::default();
    }
    match OwnerMatcher::new(&spec.owners) {
        Ok(m) => m,
        Err(e) => {
            problems.push(format!("{e}; the owner matches no pod"));
            OwnerMatcher::default()
        }
    }
}

/// Expiry, as Koordinator's controller decides it (`isReservationNeedExpiration`): `ttl: 0`
/// disables expiry altogether; otherwise `expires` is checked first and then `ttl` from
/// creation, so whichever comes first expires the reservation. Both may be set: the CRD
/// defaults `ttl` to 24h even when `expires` is given, so an object read back from an API
/// server always carries a ttl.
fn expires_at(spec: &ReservationSpec, created: Time, problems: &mut Vec<String>) -> Option<Time> {
    let ttl = spec
        .ttl
        .clone()
        .unwrap_or_else(|| GoDuration::new(DEFAULT_TTL));
    let ttl_ms = match ttl.millis() {
        Ok(v) => Some(v),
        Err(e) => {
            problems.push(format!("spec.ttl: {e}"));
            None
        }
    };
    expiry(
        created,
        ttl_ms,
        spec.expires.as_ref().map(|t| time_of(&t.0)),
    )
}

/// What the reservation keeps back from its owners (its `node.koordinator.sh/reservation`
/// annotation's amounts).
fn inner_reserved(
    obj: &Reservation,
    names: &mut crate::resources::ResourceNames,
    problems: &mut Vec<String>,
) -> Resources {
    let mut inner_reserved = Resources::ZERO;
    match NodeReservation::from_annotations(obj.metadata.annotations.as_ref()) {
        Ok(Some(nr)) => match nr.reserved_amounts() {
            Ok(amounts) => {
                for (n, v) in amounts {
                    if let Ok(id) = names.intern(&n) {
                        inner_reserved[id] = v.max(0);
                    }
                }
            }
            Err(e) => problems.push(e.to_string()),
        },
        Ok(None) => {}
        Err(e) => problems.push(e.to_string()),
    }
    inner_reserved
}

/// The resources a `Restricted` reservation restricts its owners to, as a mask within
/// `names` (every allocatable name when it restricts none of them).
fn restricted_mask(
    obj: &Reservation,
    names_of: &crate::resources::ResourceNames,
    names: u32,
    problems: &mut Vec<String>,
) -> u32 {
    if obj.spec.allocate_policy != berth_api::reservation::ReservationAllocatePolicy::Restricted {
        return names;
    }
    match ReservationRestrictedOptions::from_annotations(obj.metadata.annotations.as_ref()) {
        Ok(Some(o)) => {
            let m = o
                .resources
                .iter()
                .filter_map(|n| names_of.get(n))
                .fold(0u32, |m, id| m | (1 << id.0));
            if m & names != 0 {
                return m & names;
            }
            names
        }
        Ok(None) => names,
        Err(e) => {
            problems.push(e.to_string());
            names
        }
    }
}

/// The claims of the reservation template's PVC volumes, in `namespace`.
fn template_claims(spec: &ReservationSpec, namespace: &str) -> SmallVec<[ObjectKey; 1]> {
    spec.template
        .as_ref()
        .and_then(|t| t.spec.as_ref())
        .map(|s| {
            s.volumes
                .iter()
                .flatten()
                .filter_map(|v| v.persistent_volume_claim.as_ref())
                .map(|c| ObjectKey::new(Kind::PersistentVolumeClaim, namespace, &c.claim_name))
                .collect()
        })
        .unwrap_or_default()
}

impl ReservationStore {
    /// Compiles the spec of `obj` into a fresh, Pending [`ReservationInfo`]. Problems become
    /// [`ReservationInfo::problem`], never errors.
    pub(crate) fn compile(
        &mut self,
        nodes: &mut NodeCache,
        obj: Arc<Reservation>,
        now: Time,
    ) -> ReservationInfo {
        let meta = &obj.metadata;
        let spec = &obj.spec;
        let name: Arc<str> = meta.name.as_deref().unwrap_or("").into();
        let uid: Arc<str> = meta.uid.as_deref().unwrap_or("").into();
        let created = meta
            .creation_timestamp
            .as_ref()
            .map_or(now, |t| time_of(&t.0));
        let mut problems: Vec<String> = Vec::new();
        let built = reserve_pod::build(&obj, &mut nodes.names, &nodes.priority_classes);
        let built = match built {
            Ok(b) => Some(b),
            Err(e) => {
                problems.push(e);
                None
            }
        };
        let owners = owner_matcher(spec, &mut problems);
        let expires_at = expires_at(spec, created, &mut problems);
        let labels = meta.labels.clone().unwrap_or_default();
        let inner_reserved = inner_reserved(&obj, &mut nodes.names, &mut problems);
        let ports = built
            .as_ref()
            .map(|b| b.item.host_ports.clone())
            .unwrap_or_default();
        let (allocatable, allocatable_list, item, placed, pinned_node) = match built {
            Some(b) => {
                let (item, placed) = (Some(Arc::new(b.item)), Some(Arc::new(b.placed)));
                (
                    b.allocatable,
                    b.allocatable_list,
                    item,
                    placed,
                    b.pinned_node,
                )
            }
            None => (Resources::ZERO, Default::default(), None, None, None),
        };
        let names = allocate::mask(&allocatable);
        let restricted = restricted_mask(&obj, &nodes.names, names, &mut problems);
        let namespace = item
            .as_ref()
            .map_or("default".to_string(), |i| i.key.namespace.to_string());
        let claims = template_claims(spec, &namespace);
        let policy = spec.pre_allocation_policy.clone().unwrap_or_default();
        let owner_keys = owners.index_keys();
        ReservationInfo {
            name,
            uid,
            created,
            phase: ReservationPhase::Pending,
            conditions: Vec::new(),
            node_name: None,
            node: None,
            problem: problems.into_iter().next(),
            labels,
            owners,
            owner_keys,
            policy: spec.allocate_policy,
            allocate_once: spec.allocate_once(),
            unschedulable: spec.unschedulable,
            terminating: meta.deletion_timestamp.is_some(),
            taints: spec.taints.clone(),
            order: reservation_order(meta.labels.as_ref()),
            pre_allocation: spec.pre_allocation,
            pre_allocation_required: is_true(meta.labels.as_ref(), LABEL_PRE_ALLOCATION_REQUIRED),
            cluster_mode: policy.mode == Some(PreAllocationMode::Cluster),
            enable_multiple: policy.enable_multiple.unwrap_or(false),
            expires_at,
            pinned_node,
            allocatable,
            allocatable_list,
            names,
            restricted,
            inner_reserved,
            ports,
            claims,
            item,
            placed,
            owner_pods: Default::default(),
            requested: Resources::ZERO,
            contrib: Resources::ZERO,
            contrib_ports: SmallVec::new(),
            attached: false,
            final_status: None,
            terminal_since: None,
            timer: None,
            gc_requested: false,
            last_status: obj.status.clone(),
            indexed: false,
            virtual_id: None,
            permit_waiting: false,
            obj,
        }
    }

    /// An observed Reservation (created or replaced).
    pub fn apply(&mut self, nodes: &mut NodeCache, obj: Arc<Reservation>, now: Time) {
        let Some(name) = obj.metadata.name.clone().filter(|n| !n.is_empty()) else {
            return;
        };
        if let Some(idx) = self.idx(&name) {
            let Some(old) = self.get(idx) else {
                return;
            };
            if same_user_fields(&old.obj, &obj) {
                // Our own status write coming back, or a bookkeeping change: the scheduler is
                // the only writer of the status, so there is nothing to learn but the version,
                // which a deletion decided on this reservation names as its precondition.
                if old.obj.metadata.resource_version != obj.metadata.resource_version {
                    if let Some(m) = self.get_mut(idx) {
                        Arc::make_mut(&mut m.obj).metadata.resource_version =
                            obj.metadata.resource_version.clone();
                    }
                }
                return;
            }
            if old.obj.metadata.uid != obj.metadata.uid {
                // Deleted and created again under the same name.
                self.delete(nodes, &name);
            } else {
                self.update(nodes, idx, obj, now);
                return;
            }
        }
        self.create(nodes, obj, now);
    }

    fn create(&mut self, nodes: &mut NodeCache, obj: Arc<Reservation>, now: Time) {
        let mut info = self.compile(nodes, obj.clone(), now);
        let st = obj.status.clone().unwrap_or_default();
        let phase = st.phase.clone().unwrap_or_default();
        let node_name = st.node_name.clone().filter(|n| !n.is_empty());
        match (&phase, node_name) {
            (ReservationPhase::Available | ReservationPhase::Waiting, Some(node)) => {
                // Placed before (a restart): hold what the status says.
                info.phase = phase.clone();
                info.conditions = st.conditions.clone();
                info.node_name = Some(node.into());
                if !st.allocatable.is_empty() {
                    if let Ok(a) = reserve_pod::parse_allocatable(&st.allocatable, &mut nodes.names)
                    {
                        info.allocatable = a;
                        info.allocatable_list = st.allocatable.clone();
                        info.names = allocate::mask(&a);
                        info.restricted &= info.names;
                        if info.restricted == 0 {
                            info.restricted = info.names;
                        }
                    }
                }
            }
            (ReservationPhase::Succeeded | ReservationPhase::Failed, _) => {
                info.phase = phase.clone();
                info.conditions = st.conditions.clone();
                info.node_name = st.node_name.as_deref().map(Into::into);
                info.final_status = Some(st.clone());
                let ready = st.conditions.iter().find(|c| c.type_ == condition::READY);
                let since = ready
                    .and_then(|c| {
                        if phase == ReservationPhase::Failed {
                            c.last_transition_time.as_ref()
                        } else {
                            c.last_probe_time.as_ref()
                        }
                    })
                    .map(|t| time_of(&t.0));
                info.terminal_since = Some(since.unwrap_or(now));
            }
            _ => {
                info.conditions = st.conditions.clone();
            }
        }
        let idx = self.insert(info);
        let store = &mut *self;
        let r = store.get(idx).cloned();
        let Some(r) = r else { return };
        if let Some(p) = &r.problem {
            self.report_problem(&r.name, p);
        }
        if r.is_active() {
            // Placed before (a restart, or another scheduler's status): like Koordinator's
            // controller on an Add, recompute currentOwners and allocated from the pods that
            // name it, whatever the status says (it may predate owners that came or went).
            self.mark_dirty(idx);
            self.locate(nodes, idx);
            self.adopt_orphans(nodes, idx, now);
            if r.phase == ReservationPhase::Waiting {
                self.waiting.insert(r.name.clone());
                self.check_waiting = true;
            }
            self.queue_ops.push(QueueOp::MoveAll);
        } else if r.phase == ReservationPhase::Pending {
            if let Some(p) = &r.problem {
                let msg = p.clone();
                if let Some(m) = self.get_mut(idx) {
                    status::set_unschedulable(&mut m.conditions, &msg, now);
                }
                self.mark_dirty(idx);
            } else if !r.terminating {
                self.enqueue(idx);
            }
        }
        self.schedule_timer(nodes, idx, now);
    }

    /// A reservation the API server accepted but the scheduler cannot use (its template is
    /// schemaless, so a negative request or an unreadable quantity gets through): a `Warning`
    /// event names the problem, as its `Scheduled=False` condition does. It is not bad input:
    /// the reservation holds nothing and everything else keeps being scheduled.
    fn report_problem(&mut self, name: &Arc<str>, problem: &str) {
        self.to_report.push((name.clone(), problem.to_string()));
    }

    pub(crate) fn enqueue(&mut self, idx: RIdx) {
        let Some(r) = self.get(idx) else {
            return;
        };
        let Some(item) = &r.item else { return };
        let op = QueueOp::Add {
            key: item.key.clone(),
            priority: item.priority,
            created: r.created,
        };
        self.queue_ops.push(op);
    }

    fn dequeue(&mut self, idx: RIdx) {
        let Some(r) = self.get(idx) else {
            return;
        };
        if let Some(item) = &r.item {
            let k = item.key.clone();
            self.queue_ops.push(QueueOp::Delete(k));
        }
    }

    /// A user update of a known reservation (labels, owners, unschedulable, deletion...).
    fn update(&mut self, nodes: &mut NodeCache, idx: RIdx, obj: Arc<Reservation>, now: Time) {
        let Some(old) = self.get(idx).cloned() else {
            return;
        };
        let mut fresh = self.compile(nodes, obj, now);
        let placed = old.node_name.is_some() || old.phase != ReservationPhase::Pending;
        // The scheduler's own knowledge survives a spec change.
        fresh.phase = old.phase.clone();
        fresh.conditions = old.conditions.clone();
        fresh.last_status = old.last_status.clone();
        fresh.final_status = old.final_status.clone();
        fresh.terminal_since = old.terminal_since;
        fresh.permit_waiting = old.permit_waiting;
        // The object changed: a delete asked for before named the old resourceVersion and may
        // have been refused, so collection is planned again (a second delete of an object
        // already gone is harmless).
        fresh.gc_requested = false;
        if placed {
            self.detach(nodes, idx);
            self.unindex_owner(idx);
            fresh.node_name = old.node_name.clone();
            fresh.node = old.node;
            fresh.allocatable = old.allocatable;
            fresh.allocatable_list = old.allocatable_list.clone();
            fresh.names = old.names;
            if fresh.restricted & old.names == 0 {
                fresh.restricted = old.names;
            } else {
                fresh.restricted &= old.names;
            }
            if fresh.placed.is_none() {
                fresh.placed = old.placed.clone();
            }
            fresh.owner_pods = old.owner_pods.clone();
            fresh.requested = old.requested;
        }
        if old.uid != fresh.uid {
            let (o, n) = (old.uid.clone(), fresh.uid.clone());
            self.rename_uid(idx, &o, &n);
        }
        if let Some(p) = fresh
            .problem
            .as_ref()
            .filter(|p| old.problem.as_ref() != Some(*p))
        {
            self.report_problem(&fresh.name, p);
        }
        if fresh.problem.is_none() {
            let key = ObjectKey::cluster(Kind::Reservation, &fresh.name);
            nodes.refusals.accept(&key, REASON_FAILED_SCHEDULING);
        }
        let timer = old.timer;
        if let Some(slot) = self.get_mut(idx) {
            *slot = fresh;
            slot.timer = timer;
        }
        let Some(r) = self.get(idx).cloned() else {
            return;
        };
        if placed {
            if r.is_active() {
                self.attach(nodes, idx);
                if r.phase == ReservationPhase::Available {
                    self.index_owner(idx);
                }
            }
            self.queue_ops.push(QueueOp::MoveAll);
        } else if r.phase == ReservationPhase::Pending {
            if let Some(p) = r.problem.clone() {
                self.dequeue(idx);
                if let Some(m) = self.get_mut(idx) {
                    status::set_unschedulable(&mut m.conditions, &p, now);
                }
            } else if r.terminating {
                self.dequeue(idx);
            } else {
                self.enqueue(idx);
            }
        }
        self.schedule_timer(nodes, idx, now);
        self.mark_dirty(idx);
    }

    /// An observed deletion.
    pub fn delete(&mut self, nodes: &mut NodeCache, name: &str) {
        let Some(idx) = self.idx(name) else {
            return;
        };
        self.detach(nodes, idx);
        self.dequeue(idx);
        self.unindex_owner(idx);
        let Some(r) = self.remove(idx) else {
            return;
        };
        if let Some(node) = &r.node_name {
            if let Some(v) = self.awaiting_node.get_mut(node) {
                v.retain(|x| *x != idx);
            }
        }
        for key in r.owner_pods.keys() {
            if self.pod_owner.get(key) == Some(&idx) {
                self.pod_owner.remove(key);
            }
        }
        self.to_annotate.retain(|(_, i)| *i != idx);
        self.dirty.remove(&r.name);
        self.queue_ops.push(QueueOp::MoveAll);
    }

    /// Finds the node of an active reservation and applies its hold there (or waits for the
    /// node to appear).
    fn locate(&mut self, nodes: &mut NodeCache, idx: RIdx) {
        let Some(r) = self.get(idx) else {
            return;
        };
        let Some(name) = r.node_name.clone() else {
            return;
        };
        match nodes.node_idx(&name) {
            Some(n) => {
                if let Some(m) = self.get_mut(idx) {
                    m.node = Some(n);
                }
                self.attach(nodes, idx);
                let available = self
                    .get(idx)
                    .is_some_and(|r| r.phase == ReservationPhase::Available);
                if available {
                    self.index_owner(idx);
                }
            }
            None => {
                let v = self.awaiting_node.entry(name).or_default();
                if !v.contains(&idx) {
                    v.push(idx);
                }
            }
        }
    }

    /// Applies what the reservation holds to its node (`reserved`, ports, stand-in, claims).
    fn attach(&mut self, nodes: &mut NodeCache, idx: RIdx) {
        let Some(r) = self.get(idx) else {
            return;
        };
        if r.attached || !r.is_active() {
            return;
        }
        let Some(node) = r.node else { return };
        let hold = r.hold();
        let ports = r.hold_ports();
        let placed = r.placed.clone();
        let claims = r.claims.clone();
        let Some(n) = nodes.node_mut(node) else {
            return;
        };
        n.reserved.add(&hold);
        n.reserved_ports.extend(ports.iter().cloned());
        let mut counted = AffinityTotals::default();
        if let Some(p) = placed {
            counted.add(&p, 1);
            n.add_pod(p);
        }
        n.touch();
        nodes.affinity_totals.with_affinity += counted.with_affinity;
        nodes.affinity_totals.with_required_anti_affinity += counted.with_required_anti_affinity;
        for c in &claims {
            *nodes.pvc_users.entry(c.clone()).or_insert(0) += 1;
        }
        if let Some(m) = self.get_mut(idx) {
            m.contrib = hold;
            m.contrib_ports = ports;
            m.attached = true;
        }
        self.index_node(idx, node);
    }

    /// Removes what [`ReservationStore::attach`] applied.
    fn detach(&mut self, nodes: &mut NodeCache, idx: RIdx) {
        let Some(r) = self.get(idx) else {
            return;
        };
        if !r.attached {
            return;
        }
        let node = r.node;
        let contrib = r.contrib;
        let ports = r.contrib_ports.clone();
        let placed_key = r.placed.as_ref().map(|p| p.key.clone());
        let claims = r.claims.clone();
        let mut removed = None;
        if let Some(n) = node.and_then(|n| nodes.node_mut(n)) {
            n.reserved.sub(&contrib);
            for p in &ports {
                if let Some(i) = n.reserved_ports.iter().position(|x| x == p) {
                    n.reserved_ports.swap_remove(i);
                }
            }
            if let Some(k) = &placed_key {
                removed = n.remove_pod(k);
            }
            n.touch();
        }
        if let Some(p) = &removed {
            nodes.affinity_totals.add(p, -1);
        }
        for c in &claims {
            if let Some(v) = nodes.pvc_users.get_mut(c) {
                *v = v.saturating_sub(1);
                if *v == 0 {
                    nodes.pvc_users.remove(c);
                }
            }
        }
        if let Some(m) = self.get_mut(idx) {
            m.contrib = Resources::ZERO;
            m.contrib_ports.clear();
            m.attached = false;
        }
        if let Some(n) = node {
            self.unindex_node(idx, n);
        }
    }

    /// Re-applies the hold after owners changed.
    fn refresh(&mut self, nodes: &mut NodeCache, idx: RIdx) {
        let Some(r) = self.get(idx) else {
            return;
        };
        if !r.attached {
            return;
        }
        let (old, old_ports) = (r.contrib, r.contrib_ports.clone());
        let (new, new_ports) = (r.hold(), r.hold_ports());
        if old == new && old_ports == new_ports {
            return;
        }
        let Some(node) = r.node else { return };
        if let Some(n) = nodes.node_mut(node) {
            n.reserved.sub(&old);
            n.reserved.add(&new);
            for p in &old_ports {
                if let Some(i) = n.reserved_ports.iter().position(|x| x == p) {
                    n.reserved_ports.swap_remove(i);
                }
            }
            n.reserved_ports.extend(new_ports.iter().cloned());
            n.touch();
        }
        if let Some(m) = self.get_mut(idx) {
            m.contrib = new;
            m.contrib_ports = new_ports;
        }
    }

    pub(crate) fn schedule_timer(&mut self, nodes: &mut NodeCache, idx: RIdx, now: Time) {
        let Some(r) = self.get(idx) else {
            return;
        };
        let settings = &self.settings;
        let at = if r.phase.is_terminal() {
            if settings.disable_gc || r.gc_requested {
                None
            } else {
                let aged = r
                    .terminal_since
                    .map(|t| t.saturating_add(settings.gc_duration));
                // Koordinator's collector also deletes a terminal reservation whose node is
                // gone, on its next run (`missingNode`), whatever its age.
                let node_gone = r
                    .node_name
                    .as_deref()
                    .is_some_and(|n| nodes.node_idx(n).is_none());
                let orphaned = node_gone.then(|| {
                    let next_run = now.saturating_add(settings.gc_interval);
                    // An earlier run already planned stays planned.
                    r.timer.map_or(next_run, |t| t.min(next_run))
                });
                match (aged, orphaned) {
                    (Some(a), Some(o)) => Some(a.min(o)),
                    (a, o) => a.or(o),
                }
            }
        } else {
            r.expires_at
        };
        self.set_timer(idx, at);
    }

    /// Binds bound pods that named this reservation before it was known.
    fn adopt_orphans(&mut self, nodes: &mut NodeCache, idx: RIdx, now: Time) {
        let Some(r) = self.get(idx) else {
            return;
        };
        let (uid, by_name) = (r.uid.clone(), orphan_name_key(&r.name));
        let mut keys = self.orphan_pods.remove(&uid).unwrap_or_default();
        keys.extend(self.orphan_pods.remove(&by_name).unwrap_or_default());
        for k in keys {
            self.pod_orphan.remove(&k);
            self.pod_changed(nodes, &k, now);
        }
    }

    /// The reserve pod of `name` was placed on `node` (the Reservation plugin's Reserve).
    /// Returns an error message when the reservation cannot be placed any more.
    pub fn place(
        &mut self,
        nodes: &mut NodeCache,
        name: &str,
        node: NodeIdx,
        now: Time,
    ) -> Result<(), String> {
        let Some(idx) = self.idx(name) else {
            return Err(format!("reservation {name} not found"));
        };
        let Some(r) = self.get(idx).cloned() else {
            return Err(format!("reservation {name} not found"));
        };
        if r.phase != ReservationPhase::Pending || r.problem.is_some() || r.terminating {
            return Err("reservation is not active".into());
        }
        let Some(info) = nodes.node(node) else {
            return Err("node not found".into());
        };
        let node_name = info.name.clone();
        let pre = if r.pre_allocation {
            self.pre_allocation_candidates(nodes, &r, node)
        } else {
            Vec::new()
        };
        if let Some(m) = self.get_mut(idx) {
            m.node_name = Some(node_name);
            m.node = Some(node);
            m.final_status = None;
        }
        for p in &pre {
            self.add_owner(nodes, idx, p, true, true);
            self.to_annotate.push((p.key.clone(), idx));
        }
        let Some(r) = self.get(idx) else {
            return Ok(());
        };
        // Room: the node's free capacity must hold what is left of the reservation.
        let mut left = r.allocatable;
        left.sub(&r.taken());
        let room = nodes.node(node).is_some_and(|n| {
            let free = allocate::node_free(n);
            left.non_zero().all(|(id, v)| v <= free[id])
        });
        let available = !r.pre_allocation || room;
        if let Some(m) = self.get_mut(idx) {
            if available {
                m.phase = ReservationPhase::Available;
                status::set_available(&mut m.conditions, now);
            } else {
                m.phase = ReservationPhase::Waiting;
                status::set_waiting(&mut m.conditions, now);
            }
        }
        self.attach(nodes, idx);
        if available {
            self.index_owner(idx);
        } else {
            self.waiting.insert(name.into());
        }
        // Bound pods that already named this reservation (and were waiting for it to be
        // placed) are its owners if they run on its node, as the status controller counts them.
        self.adopt_orphans(nodes, idx, now);
        self.queue_ops.push(QueueOp::MoveAll);
        self.mark_dirty(idx);
        Ok(())
    }

    /// Undoes [`Self::place`] (a later Reserve or PreBind step failed).
    pub fn unplace(&mut self, nodes: &mut NodeCache, name: &str) {
        let Some(idx) = self.idx(name) else {
            return;
        };
        // One that ended meanwhile (its node deleted, expired while its gang waited at
        // Permit) stays ended.
        if self.get(idx).is_none_or(|r| r.phase.is_terminal()) {
            return;
        }
        self.detach(nodes, idx);
        self.unindex_owner(idx);
        self.waiting.remove(name);
        let pre: Vec<ObjectKey> = self
            .to_annotate
            .iter()
            .filter(|(_, i)| *i == idx)
            .map(|(k, _)| k.clone())
            .collect();
        self.to_annotate.retain(|(_, i)| *i != idx);
        for k in pre {
            self.remove_owner(nodes, &k);
        }
        if let Some(m) = self.get_mut(idx) {
            m.phase = ReservationPhase::Pending;
            m.permit_waiting = false;
            m.node = None;
            m.node_name = None;
            m.conditions = m
                .last_status
                .as_ref()
                .map(|s| s.conditions.clone())
                .unwrap_or_default();
        }
    }

    /// The reservation `name`, just placed, waits at Permit for the rest of its gang: it
    /// keeps its room but is not written nor usable by owners until [`Self::permit_allowed`].
    pub fn permit_wait(&mut self, name: &str) {
        let Some(idx) = self.idx(name) else {
            return;
        };
        self.unindex_owner(idx);
        if let Some(m) = self.get_mut(idx) {
            m.permit_waiting = true;
        }
    }

    /// Its gang was allowed through Permit: the reservation placed for it is written and
    /// usable by owners. Returns whether it is still placed (not ended meanwhile).
    pub fn permit_allowed(&mut self, name: &str) -> bool {
        let Some(idx) = self.idx(name) else {
            return false;
        };
        let Some(m) = self.get_mut(idx) else {
            return false;
        };
        let was = std::mem::take(&mut m.permit_waiting);
        let placed = m.is_active() && m.node.is_some();
        if was && placed {
            if m.phase == ReservationPhase::Available {
                self.index_owner(idx);
            }
            self.mark_dirty(idx);
            self.queue_ops.push(QueueOp::MoveAll);
        }
        placed
    }

    /// Scheduling the reservation failed: `Scheduled=False/Unschedulable` with the message.
    pub fn unschedulable(&mut self, name: &str, message: &str, now: Time) {
        let Some(idx) = self.idx(name) else {
            return;
        };
        if let Some(m) = self.get_mut(idx) {
            status::set_unschedulable(&mut m.conditions, message, now);
        }
        self.mark_dirty(idx);
    }

    /// Running pods on `node` that a pre-allocating reservation takes over, as Koordinator
    /// picks them: owners through a label selector (or, in Cluster mode, pods labelled
    /// `is-pre-allocatable`), not allocated elsewhere, each fitting what is left of the
    /// reservation; one (the best scored) unless `enableMultiple`.
    pub fn pre_allocation_candidates(
        &self,
        nodes: &NodeCache,
        r: &ReservationInfo,
        node: NodeIdx,
    ) -> Vec<Arc<PodInfo>> {
        let Some(n) = nodes.node(node) else {
            return Vec::new();
        };
        let mut cands: Vec<(Arc<PodInfo>, i64)> = n
            .pods
            .iter()
            .filter(|p| !p.is_reserve_pod() && !p.terminal && !p.terminating)
            .filter(|p| self.owner_of(&p.key).is_none())
            .filter(|p| {
                p.annotation(berth_api::annotations::ANNOTATION_RESERVATION_ALLOCATED)
                    .is_none()
            })
            .filter(|p| {
                if r.cluster_mode {
                    is_true(Some(&p.labels), LABEL_POD_IS_PRE_ALLOCATABLE)
                } else {
                    r.owners.matches_by_selector(p)
                }
            })
            .map(|p| {
                let rank = if r.cluster_mode {
                    berth_api::annotations::pre_allocatable_priority(
                        p.pod.metadata.annotations.as_ref(),
                    )
                } else {
                    allocate::score(&p.requests, r)
                };
                (p.clone(), rank)
            })
            .collect();
        let _ = ANNOTATION_POD_PRE_ALLOCATABLE_PRIORITY;
        cands.sort_by(|(a, ra), (b, rb)| {
            rb.cmp(ra)
                .then_with(|| a.created.cmp(&b.created))
                .then_with(|| a.uid.cmp(&b.uid))
        });
        let mut left = r.cap();
        left.sub(&r.taken());
        let mut out = Vec::new();
        for (p, _) in cands {
            let masked = mask_requests(&p.requests, r.names);
            if !masked.le(&left) {
                continue;
            }
            left.sub(&masked);
            out.push(p);
            if !r.enable_multiple {
                break;
            }
        }
        out
    }

    pub(crate) fn add_owner(
        &mut self,
        nodes: &mut NodeCache,
        idx: RIdx,
        pod: &PodInfo,
        bound: bool,
        pre_allocated: bool,
    ) {
        if let Some(prev) = self.pod_owner.get(&pod.key).copied() {
            if prev == idx {
                return;
            }
            self.remove_owner(nodes, &pod.key);
        }
        let Some(r) = self.get_mut(idx) else {
            return;
        };
        let requests = mask_requests(&pod.requests, r.names);
        r.requested.add(&requests);
        r.owner_pods.insert(
            pod.key.clone(),
            Owner {
                uid: pod.uid.clone(),
                requests,
                ports: pod.host_ports.clone(),
                bound,
                pre_allocated,
            },
        );
        self.pod_owner.insert(pod.key.clone(), idx);
        self.refresh(nodes, idx);
        self.mark_dirty(idx);
    }

    fn remove_owner(&mut self, nodes: &mut NodeCache, key: &ObjectKey) {
        let Some(idx) = self.pod_owner.remove(key) else {
            return;
        };
        let Some(r) = self.get_mut(idx) else {
            return;
        };
        if r.phase.is_terminal() {
            // A Succeeded or Failed reservation keeps its final status; nothing is held.
            return;
        }
        if let Some(o) = r.owner_pods.remove(key) {
            r.requested.sub(&o.requests);
            r.requested.clamp_non_negative();
        }
        self.refresh(nodes, idx);
        self.mark_dirty(idx);
        self.check_waiting = true;
    }

    /// The owner pod was placed on a reservation's node in this cycle (Reserve).
    pub fn assume_owner(&mut self, nodes: &mut NodeCache, idx: RIdx, pod: &PodInfo) {
        self.add_owner(nodes, idx, pod, false, false);
    }

    /// Undoes [`Self::assume_owner`] (Unreserve, or a failed bind).
    pub fn forget_owner(&mut self, nodes: &mut NodeCache, key: &ObjectKey) {
        let Some(idx) = self.owner_of(key) else {
            return;
        };
        let bound = self
            .get(idx)
            .and_then(|r| r.owner_pods.get(key))
            .is_some_and(|o| o.bound);
        if !bound {
            self.remove_owner(nodes, key);
        }
    }

    /// Preemption's dry run removes `key` from a copy of the cluster: its share of an active
    /// reservation goes back to that reservation (and to no other pod), as its deletion would
    /// give it back. Returns what [`Self::restore_owner`] puts back; `None` when it owned nothing.
    pub fn take_owner(&mut self, nodes: &mut NodeCache, key: &ObjectKey) -> Option<(RIdx, Owner)> {
        let idx = self.owner_of(key)?;
        let r = self.get_mut(idx)?;
        if r.phase.is_terminal() {
            return None;
        }
        let o = r.owner_pods.remove(key)?;
        r.requested.sub(&o.requests);
        r.requested.clamp_non_negative();
        self.pod_owner.remove(key);
        self.refresh(nodes, idx);
        Some((idx, o))
    }

    /// Whether [`Self::take_owner`] would take anything back for `key`: the pod holds a share of a
    /// reservation that is not terminal. Preemption's dry run simulates such a pod's removal on
    /// a copy of the cluster, where the share really goes back.
    pub fn holds_share(&self, key: &ObjectKey) -> bool {
        self.owner_of(key)
            .and_then(|i| self.get(i))
            .is_some_and(|r| !r.phase.is_terminal() && r.owner_pods.contains_key(key))
    }

    /// Undoes [`Self::take_owner`] exactly (the dry run puts back the pods it did not evict).
    pub fn restore_owner(&mut self, nodes: &mut NodeCache, key: &ObjectKey, taken: (RIdx, Owner)) {
        let (idx, o) = taken;
        let Some(r) = self.get_mut(idx) else {
            return;
        };
        r.requested.add(&o.requests);
        r.owner_pods.insert(key.clone(), o);
        self.pod_owner.insert(key.clone(), idx);
        self.refresh(nodes, idx);
    }

    fn succeed(&mut self, nodes: &mut NodeCache, idx: RIdx, now: Time) {
        let Some(r) = self.get_mut(idx) else {
            return;
        };
        if r.phase != ReservationPhase::Available && r.phase != ReservationPhase::Waiting {
            return;
        }
        r.phase = ReservationPhase::Succeeded;
        status::set_succeeded(&mut r.conditions, now);
        r.terminal_since = Some(now);
        self.detach(nodes, idx);
        self.unindex_owner(idx);
        self.finalize(nodes, idx, now);
        self.queue_ops.push(QueueOp::MoveAll);
    }

    /// Freezes the status of a terminal reservation and stops tracking its owners (a restarted
    /// scheduler reads the frozen status and tracks nothing either).
    fn finalize(&mut self, nodes: &mut NodeCache, idx: RIdx, now: Time) {
        let names = &nodes.names;
        let mut owners = Vec::new();
        if let Some(r) = self.get_mut(idx) {
            r.final_status = None;
            let mut s = status::compute(r, names);
            crate::dra::reserved::count_allocated(&nodes.dra, &r.name, &mut s.allocated);
            r.final_status = Some(s);
            owners.extend(std::mem::take(&mut r.owner_pods).into_keys());
            r.requested = Resources::ZERO;
            let n = r.name.clone();
            self.waiting.remove(&n);
        }
        for k in owners {
            if self.pod_owner.get(&k) == Some(&idx) {
                self.pod_owner.remove(&k);
            }
        }
        self.to_annotate.retain(|(_, i)| *i != idx);
        self.schedule_timer(nodes, idx, now);
        self.mark_dirty(idx);
    }

    /// Fails a reservation (expiry or node loss): `Failed`, `Ready=False/Expired`, its hold
    /// released at once and pending pods retried.
    pub fn fail(&mut self, nodes: &mut NodeCache, idx: RIdx, message: &str, now: Time) {
        let Some(r) = self.get(idx) else {
            return;
        };
        if r.phase.is_terminal() {
            return;
        }
        if r.virtual_id.is_some() {
            // A virtual reservation has no status to freeze and nothing to collect: it goes.
            let name = r.name.clone();
            return self.delete(nodes, &name);
        }
        let pending = r.phase == ReservationPhase::Pending;
        self.detach(nodes, idx);
        self.unindex_owner(idx);
        if pending {
            self.dequeue(idx);
        }
        if let Some(m) = self.get_mut(idx) {
            m.phase = ReservationPhase::Failed;
            status::set_expired(&mut m.conditions, message, now);
            m.terminal_since = Some(now);
        }
        self.finalize(nodes, idx, now);
        self.queue_ops.push(QueueOp::MoveAll);
    }

    /// Reconciles a pod with the reservation it allocated from, after the cluster applied it:
    /// a bound pod carrying `reservation-allocated` is an owner (of a reusable reservation, or
    /// the one owner that makes an allocate-once reservation `Succeeded`); a terminal,
    /// unassigned or re-annotated pod gives its share back.
    pub fn pod_changed(&mut self, nodes: &mut NodeCache, key: &ObjectKey, now: Time) {
        let Some(entry) = nodes.pod(key) else {
            return self.pod_removed(nodes, key);
        };
        let info = entry.info.clone();
        let state = entry.state;
        if info.terminal {
            return self.pod_removed(nodes, key);
        }
        let current = self.owner_of(key);
        match state {
            PodState::Pending => {
                if current.is_some() {
                    self.remove_owner(nodes, key);
                }
                self.unorphan(key);
            }
            PodState::Assumed => {}
            PodState::Bound => self.bound_pod_changed(nodes, key, &info, current, now),
        }
    }

    /// [`Self::pod_changed`] for a bound pod: its `reservation-allocated` annotation names
    /// the reservation it owns a share of (`current`: the one it owned so far).
    fn bound_pod_changed(
        &mut self,
        nodes: &mut NodeCache,
        key: &ObjectKey,
        info: &PodInfo,
        current: Option<RIdx>,
        now: Time,
    ) {
        let allocated =
            ReservationAllocated::from_annotations(info.pod.metadata.annotations.as_ref())
                .ok()
                .flatten()
                .filter(|a| !a.uid.is_empty() || !a.name.is_empty());
        let Some(a) = allocated else {
            // Not (or no longer) annotated: only a pre-allocation in flight keeps it.
            let keep = current
                .and_then(|i| self.get(i))
                .and_then(|r| r.owner_pods.get(key))
                .is_some_and(|o| o.pre_allocated);
            if !keep && current.is_some() {
                self.remove_owner(nodes, key);
            }
            self.unorphan(key);
            return;
        };
        // The scheduler always writes the UID; an annotation written by hand with only
        // the name (the UID of a reservation created from a file is not known to its
        // author) identifies it by name, reservation names being unique. An unknown
        // name waits under a name key, as an unknown UID does.
        let uid: Arc<str> = if a.uid.is_empty() {
            match self.by_name(&a.name) {
                Some(r) => r.uid.clone(),
                None => orphan_name_key(&a.name),
            }
        } else {
            a.uid.as_str().into()
        };
        let target = self.idx_by_uid(&uid);
        self.unorphan(key);
        let Some(t) = target else {
            if current.is_some() {
                self.remove_owner(nodes, key);
            }
            self.orphan(key, uid);
            return;
        };
        if current.is_some_and(|c| c != t) {
            self.remove_owner(nodes, key);
        }
        let Some(r) = self.get(t) else {
            return;
        };
        if !r.is_active() {
            // Pending: its node is unknown, so the pod waits as an orphan; terminal
            // reservations keep their final status.
            if r.phase == ReservationPhase::Pending {
                self.orphan(key, uid);
            }
            return;
        }
        let same_node = r.node_name.as_deref() == info.node_name.as_deref();
        if !same_node {
            return;
        }
        let existing = r.owner_pods.get(key).cloned();
        match existing {
            Some(o) if o.bound && !o.pre_allocated => {}
            Some(_) => {
                if let Some(m) = self.get_mut(t) {
                    if let Some(o) = m.owner_pods.get_mut(key) {
                        o.bound = true;
                        o.pre_allocated = false;
                    }
                }
                self.mark_dirty(t);
            }
            None => self.add_owner(nodes, t, info, true, false),
        }
        let once = self
            .get(t)
            .is_some_and(|r| r.allocate_once && r.owner_pods.values().any(|o| o.bound));
        if once {
            self.succeed(nodes, t, now);
        }
    }

    /// `key` owns a share of the reservation `uid`, not known (or not placed) yet: it
    /// waits as an orphan until the reservation is.
    fn orphan(&mut self, key: &ObjectKey, uid: Arc<str>) {
        self.orphan_pods
            .entry(uid.clone())
            .or_default()
            .push(key.clone());
        self.pod_orphan.insert(key.clone(), uid);
    }

    fn unorphan(&mut self, key: &ObjectKey) {
        if let Some(uid) = self.pod_orphan.remove(key) {
            if let Some(v) = self.orphan_pods.get_mut(&uid) {
                v.retain(|k| k != key);
                if v.is_empty() {
                    self.orphan_pods.remove(&uid);
                }
            }
        }
    }

    /// A pod was deleted (or became terminal): its share of a reusable reservation comes back.
    pub fn pod_removed(&mut self, nodes: &mut NodeCache, key: &ObjectKey) {
        self.remove_owner(nodes, key);
        self.unorphan(key);
        self.check_waiting = true;
    }

    /// A node was added or updated: reservations waiting for it attach.
    pub fn node_applied(&mut self, nodes: &mut NodeCache, node: NodeIdx) {
        let Some(name) = nodes.node(node).map(|n| n.name.clone()) else {
            return;
        };
        if let Some(list) = self.awaiting_node.remove(&name) {
            for idx in list {
                self.locate(nodes, idx);
            }
        }
        self.check_waiting = true;
    }

    /// A node was deleted: its Available and Waiting reservations fail.
    pub fn node_deleted(
        &mut self,
        nodes: &mut NodeCache,
        node: Option<NodeIdx>,
        name: &str,
        now: Time,
    ) {
        let mut list: Vec<RIdx> = match node {
            Some(n) => self.take_node(n).into_vec(),
            None => Vec::new(),
        };
        list.extend(self.awaiting_node.remove(name).unwrap_or_default());
        list.sort_unstable();
        list.dedup();
        for idx in list {
            if let Some(m) = self.get_mut(idx) {
                // The NodeInfo is gone with the node; only claims remain to give back.
                if m.attached {
                    m.contrib = Resources::ZERO;
                    m.contrib_ports.clear();
                }
                m.node = None;
            }
            let claims = self
                .get(idx)
                .filter(|r| r.attached)
                .map(|r| r.claims.clone())
                .unwrap_or_default();
            for c in &claims {
                if let Some(v) = nodes.pvc_users.get_mut(c) {
                    *v = v.saturating_sub(1);
                    if *v == 0 {
                        nodes.pvc_users.remove(c);
                    }
                }
            }
            if let Some(m) = self.get_mut(idx) {
                m.attached = false;
            }
            self.fail(nodes, idx, MSG_NODE_DELETED, now);
        }
        // Succeeded and Failed reservations that were on the node are collected on the
        // collector's next run (`fail` above planned that for the ones it just failed).
        for idx in self.terminal_on(name) {
            self.schedule_timer(nodes, idx, now);
        }
    }

    /// Fails the Available and Waiting reservations whose `status.nodeName` names a node that
    /// does not exist, as Koordinator's status controller does on its next sync (a restarted
    /// scheduler finding a reservation on a node that is gone). Called once the objects of an
    /// input batch are all known, so that a Reservation written before its Node in the same
    /// batch still finds it.
    pub fn expire_on_missing_nodes(&mut self, nodes: &mut NodeCache, now: Time) {
        if self.awaiting_node.is_empty() {
            return;
        }
        let mut waiting: Vec<(Arc<str>, Vec<RIdx>)> = self.awaiting_node.drain().collect();
        waiting.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        for (_, list) in waiting {
            for idx in list {
                let active = self.get(idx).is_some_and(|r| r.is_active());
                if active {
                    self.fail(nodes, idx, MSG_NODE_MISSING, now);
                }
            }
        }
    }

    /// Runs the timers due at `now`: expiry, then garbage collection.
    pub fn on_timeout(&mut self, nodes: &mut NodeCache, now: Time, effects: &mut VecDeque<Effect>) {
        while let Some((t, name)) = self.timers.iter().next().cloned() {
            if t > now {
                break;
            }
            self.timers.remove(&(t, name.clone()));
            let Some(idx) = self.idx(&name) else {
                continue;
            };
            if let Some(m) = self.get_mut(idx) {
                m.timer = None;
            }
            let Some(r) = self.get(idx) else {
                continue;
            };
            if r.phase.is_terminal() {
                if !r.gc_requested {
                    let key = r.object_key();
                    let uid = r.uid.to_string();
                    let resource_version = r.obj.metadata.resource_version.clone();
                    if let Some(m) = self.get_mut(idx) {
                        m.gc_requested = true;
                    }
                    effects.push_back(Effect::Delete {
                        key,
                        uid,
                        resource_version,
                        preemption: None,
                    });
                }
            } else if r.expires_at.is_some_and(|e| e <= now) {
                self.fail(nodes, idx, "", now);
            }
        }
    }

    fn check_waiting(&mut self, nodes: &mut NodeCache, now: Time) {
        let names: Vec<Arc<str>> = self.waiting.iter().cloned().collect();
        for name in names {
            let Some(idx) = self.idx(&name) else {
                self.waiting.remove(&name);
                continue;
            };
            let Some(r) = self.get(idx) else {
                continue;
            };
            let Some(node) = r.node else { continue };
            let mut left = r.allocatable;
            left.sub(&r.taken());
            let room = nodes.node(node).is_some_and(|n| {
                let free = allocate::node_free(n);
                left.non_zero().all(|(id, v)| v <= free[id])
            });
            if !room {
                continue;
            }
            if let Some(m) = self.get_mut(idx) {
                m.phase = ReservationPhase::Available;
                status::set_available(&mut m.conditions, now);
            }
            self.waiting.remove(&name);
            // Attached with nothing held while waiting: hold the remainder now.
            self.refresh(nodes, idx);
            self.index_owner(idx);
            self.mark_dirty(idx);
            self.queue_ops.push(QueueOp::MoveAll);
        }
    }

    /// Takes what the scheduler must do after an input: queue operations and effects (events,
    /// annotations of pre-allocated pods, deletions, and the status of every reservation whose
    /// status changed).
    pub fn drain(
        &mut self,
        nodes: &mut NodeCache,
        now: Time,
        effects: &mut VecDeque<Effect>,
    ) -> Vec<QueueOp> {
        if std::mem::take(&mut self.check_waiting) && !self.waiting.is_empty() {
            self.check_waiting(nodes, now);
        }
        for (name, problem) in std::mem::take(&mut self.to_report) {
            // A reservation deleted within the same input has nothing left to report on.
            let key = ObjectKey::cluster(Kind::Reservation, &name);
            let rule = crate::refusal::rule_of(&problem);
            if self.idx(&name).is_some()
                && nodes
                    .refusals
                    .refuse(&key, REASON_FAILED_SCHEDULING, rule, &problem)
            {
                self.record(&name, "Warning", REASON_FAILED_SCHEDULING, problem, effects);
            }
        }
        for (key, idx) in std::mem::take(&mut self.to_annotate) {
            let Some(r) = self.get(idx) else {
                continue;
            };
            let mut annotations = std::collections::BTreeMap::new();
            ReservationAllocated::new(r.name.to_string(), r.uid.to_string())
                .insert_into(&mut annotations);
            effects.push_back(Effect::AnnotatePod {
                pod: key,
                annotations,
            });
        }
        let dirty = std::mem::take(&mut self.dirty);
        for name in dirty {
            let Some(idx) = self.idx(&name) else {
                continue;
            };
            let Some(r) = self.get(idx) else {
                continue;
            };
            if r.virtual_id.is_some() {
                // Lives in the scheduler only: there is no object to write.
                continue;
            }
            if r.permit_waiting {
                // Placed for a gang still forming: written once the gang is allowed
                // ([`Self::permit_allowed`] marks it again), or never if it is unplaced.
                continue;
            }
            let mut s = status::compute(r, &nodes.names);
            crate::dra::reserved::count_allocated(&nodes.dra, &r.name, &mut s.allocated);
            if r.last_status.as_ref() == Some(&s) {
                continue;
            }
            let uid = r.uid.to_string();
            if let Some(m) = self.get_mut(idx) {
                m.last_status = Some(s.clone());
                Arc::make_mut(&mut m.obj).status = Some(s.clone());
            }
            effects.push_back(Effect::ReservationStatus {
                name: name.to_string(),
                uid,
                status: s,
            });
        }
        self.take_queue_ops()
    }

    /// A `v1` Event about a reservation.
    pub fn record(
        &self,
        name: &str,
        type_: &'static str,
        reason: &str,
        message: String,
        effects: &mut VecDeque<Effect>,
    ) {
        let uid = self
            .by_name(name)
            .map(|r| r.uid.to_string())
            .unwrap_or_default();
        effects.push_back(Effect::Record(Record {
            involved: ObjectKey::cluster(Kind::Reservation, name),
            uid,
            type_,
            reason: reason.to_string(),
            message,
        }));
    }
}

#[cfg(test)]
mod tests {
    use super::expiry;

    #[test]
    fn expiry_is_the_earlier_of_ttl_and_expires_and_ttl_zero_disables_it() {
        let cases = [
            ("ttl only", Some(60_000), None, Some(1_060_000)),
            (
                "expires first",
                Some(60_000),
                Some(1_010_000),
                Some(1_010_000),
            ),
            ("ttl first", Some(60_000), Some(9_000_000), Some(1_060_000)),
            ("ttl 0 wins over expires", Some(0), Some(1_010_000), None),
            (
                "unreadable ttl leaves expires",
                None,
                Some(1_010_000),
                Some(1_010_000),
            ),
            ("nothing", None, None, None),
        ];
        for (name, ttl, expires, want) in cases {
            assert_eq!(expiry(1_000_000, ttl, expires), want, "{name}");
        }
    }
}
