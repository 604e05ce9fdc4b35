//! DynamicResources (kube-scheduler 1.35.4, `plugins/dynamicresources`): a pod's
//! ResourceClaims are allocated devices on the node it is bound to.
//!
//! PreFilter resolves the pod's claims (a claim from a template is the one the pod's
//! `status.resourceClaimStatuses` names), rejects the pod while a claim is missing, being
//! deleted, in use by others beyond `reservedFor`'s limit or being allocated for another
//! pod, and prepares the allocator's plan for the claims not allocated yet. Filter keeps
//! nodes an allocated claim's node selector selects and where the allocator finds devices
//! for the rest; Reserve assumes the allocation in the cluster's DRA state (so the next
//! pod's Filter sees those devices taken), Unreserve forgets it, and the scheduler's
//! PreBind hook writes each claim's `status.allocation` and `reservedFor`
//! ([`crate::effect::Effect::UpdateClaimStatus`]). Messages are upstream's.
//!
//! A Reservation's reserve pod allocates its template's claims the same way, and Reserve
//! makes the reservation hold those devices ([`crate::dra::reserved`]); PreBind writes them
//! on the Reservation. Every pod's allocation skips devices other reservations hold and
//! takes its own reservation's first.

use std::collections::BTreeMap;
use std::sync::Arc;

use berth_api::dra::RESERVED_FOR_MAX_SIZE;
use berth_api::k8s_openapi::api::core::v1::Pod;
use berth_api::reservation::ReservationAllocatePolicy;

use crate::cache::Cluster;
use crate::dra::allocator::{self, ClaimPlan, Failure};
use crate::dra::reserved::{self, Access, DeviceAllocated, HeldClaim};
use crate::framework::events::{kind, EventsToRegister};
use crate::framework::plugin::{
    PostFilterContext, PostFilterResult, PreEnqueueContext, PreEnqueueRejection,
};
use crate::framework::{CycleState, Plugin, Points, Status};
use crate::model::node::{NodeIdx, NodeInfo};
use crate::model::pod::{PodInfo, PodKind};
use crate::model::selector::NodeSelectorMatcher;
use crate::object::{Kind, ObjectKey};

/// The plugin's name.
pub const NAME: &str = super::names::DYNAMIC_RESOURCES;

/// `cannot allocate all claims`.
pub const CANNOT_ALLOCATE: &str = "cannot allocate all claims";
/// An allocated claim's node selector excludes the node.
pub const NOT_AVAILABLE: &str = "resourceclaim not available on the node";
/// PostFilter for a pod without claims.
pub const NO_CLAIMS_TO_DEALLOCATE: &str = "no new claims to deallocate";
/// PostFilter for a pod with claims, none of which it could deallocate.
pub const STILL_NOT_SCHEDULABLE: &str = "still not schedulable";
/// PostFilter deallocated one of the pod's claims.
pub const DEALLOCATED: &str = "deallocation of ResourceClaim completed";
/// PostFilter without PreFilter's state: kube-scheduler's cycle-state read error.
pub const STATE_NOT_FOUND: &str = "not found";

/// PreFilter's findings for the pod.
#[derive(Debug, Clone, Default)]
pub struct State {
    /// Every claim of the pod, in `spec.resourceClaims` order.
    pub claims: Vec<ObjectKey>,
    /// Node selectors of the claims already allocated.
    available_on: Vec<NodeSelectorMatcher>,
    /// The claims still to allocate.
    plans: Vec<ClaimPlan>,
    /// Claims Reserve assumed an allocation for.
    assumed: Vec<ObjectKey>,
    /// For a reserve pod: the reservation, and its template claims' names (one per plan).
    reservation: Option<(Arc<str>, Vec<String>)>,
    /// For a reserve pod: Reserve made the reservation hold devices.
    held: bool,
}

/// The claims `pod` references, as keys: `Err` with upstream's message when one generated
/// from a template is not created yet. A claim whose template produced none is skipped.
pub fn pod_claims(pod: &Pod) -> Result<Vec<(String, ObjectKey)>, String> {
    let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
    let name = pod.metadata.name.as_deref().unwrap_or("");
    let mut out = Vec::new();
    let Some(spec) = &pod.spec else {
        return Ok(out);
    };
    for pc in spec.resource_claims.iter().flatten() {
        let claim = if let Some(n) = &pc.resource_claim_name {
            n.clone()
        } else if pc.resource_claim_template_name.is_some() {
            let statuses = pod
                .status
                .as_ref()
                .and_then(|s| s.resource_claim_statuses.as_ref());
            let Some(st) = statuses.and_then(|s| s.iter().find(|s| s.name == pc.name)) else {
                return Err(format!(
                    "pod \"{ns}/{name}\": ResourceClaim not created yet"
                ));
            };
            match &st.resource_claim_name {
                Some(n) => n.clone(),
                None => continue,
            }
        } else {
            return Err(format!(
                "pod \"{ns}/{name}\", spec.resourceClaim {:?}: none of the supported fields are set",
                pc.name
            ));
        };
        out.push((
            pc.name.clone(),
            ObjectKey::new(Kind::ResourceClaim, ns, &claim),
        ));
    }
    Ok(out)
}

impl State {
    /// The claims still to allocate.
    pub(crate) fn plans(&self) -> &[ClaimPlan] {
        &self.plans
    }
}

/// The DynamicResources plugin.
#[derive(Debug, Default)]
pub struct DynamicResources;

impl DynamicResources {
    /// The claim PostFilter deallocates, as kube-scheduler's: one of the pod's allocated
    /// claims that Filter found unavailable (its allocation's node selector excludes a node,
    /// and some node was rejected as `resourceclaim not available on the node`), whose
    /// `reservedFor` is empty or only this pod. Upstream picks one of them at random; berth
    /// takes the first in `spec.resourceClaims` order, and counts a claim as unavailable when
    /// its selector excludes any node (upstream: a node its Filter ran on).
    fn claim_to_deallocate(
        cx: &PostFilterContext<'_>,
        pod: &PodInfo,
        state: &State,
    ) -> Option<ObjectKey> {
        if !cx.diagnosis.counted(NOT_AVAILABLE) {
            return None;
        }
        state.claims.iter().find_map(|key| {
            let claim = cx.cluster.cache.dra.claims.get(key)?;
            let selector = claim.allocation()?.node_selector.as_ref()?;
            let m = NodeSelectorMatcher::new(selector).ok()?;
            let consumers = claim
                .status
                .as_ref()
                .map_or(&[][..], |s| &s.reserved_for[..]);
            let own = match consumers {
                [] => true,
                [only] => only.uid == *pod.uid,
                _ => false,
            };
            let excluded = || {
                cx.cluster
                    .cache
                    .nodes()
                    .any(|n| !m.matches(&n.name, &n.labels))
            };
            (own && excluded()).then(|| key.clone())
        })
    }

    fn prepare(cx: &Cluster, pod: &PodInfo) -> Result<Option<State>, Status> {
        if let PodKind::ReservePod { reservation } = &pod.kind {
            return Self::prepare_reservation(cx, pod, reservation);
        }
        let claims = pod_claims(&pod.pod).map_err(Status::unresolvable)?;
        if claims.is_empty() {
            return Ok(None);
        }
        let mut state = State::default();
        for (_, key) in claims {
            let Some(claim) = cx.cache.dra.claims.get(&key) else {
                return Err(Status::unresolvable(format!(
                    "resourceclaim.resource.k8s.io \"{}\" not found",
                    key.name
                )));
            };
            if claim.metadata.deletion_timestamp.is_some() {
                return Err(Status::unresolvable(format!(
                    "resourceclaim \"{}\" is being deleted",
                    key.name
                )));
            }
            if let Some(alloc) = claim.allocation() {
                let full = claim
                    .status
                    .as_ref()
                    .is_some_and(|s| s.reserved_for.len() >= RESERVED_FOR_MAX_SIZE);
                if full && !claim.reserved_for(&pod.uid) {
                    return Err(Status::unresolvable("resourceclaim in use"));
                }
                if let Some(sel) = &alloc.node_selector {
                    let m =
                        NodeSelectorMatcher::new(sel).map_err(|e| Status::error(e.to_string()))?;
                    state.available_on.push(m);
                }
            } else {
                if cx
                    .cache
                    .dra
                    .assumed(&key)
                    .is_some_and(|a| a.pod_uid != pod.uid)
                {
                    return Err(Status::unresolvable(format!(
                        "resource claim {}/{} is in the process of being allocated",
                        key.namespace, key.name
                    )));
                }
                let plan =
                    allocator::plan(&key, claim, &cx.cache.dra).map_err(Status::unresolvable)?;
                state.plans.push(plan);
            }
            state.claims.push(key);
        }
        Ok(Some(state))
    }

    /// A reserve pod's plans: one per entry of the template's `spec.resourceClaims`, from
    /// the ResourceClaimTemplate it names (or the named claim's spec, read only).
    fn prepare_reservation(
        cx: &Cluster,
        pod: &PodInfo,
        reservation: &Arc<str>,
    ) -> Result<Option<State>, Status> {
        let ns = pod.pod.metadata.namespace.as_deref().unwrap_or("default");
        let entries = pod
            .pod
            .spec
            .as_ref()
            .and_then(|s| s.resource_claims.as_ref());
        let Some(entries) = entries.filter(|e| !e.is_empty()) else {
            return Ok(None);
        };
        let mut state = State::default();
        let mut names = Vec::with_capacity(entries.len());
        for pc in entries {
            let spec = if let Some(t) = &pc.resource_claim_template_name {
                let key = ObjectKey::new(Kind::ResourceClaimTemplate, ns, t);
                let Some(tpl) = cx.cache.dra.templates.get(&key) else {
                    return Err(Status::unresolvable(format!(
                        "resourceclaimtemplate.resource.k8s.io \"{t}\" not found"
                    )));
                };
                &tpl.spec.spec
            } else if let Some(n) = &pc.resource_claim_name {
                let key = ObjectKey::new(Kind::ResourceClaim, ns, n);
                let Some(claim) = cx.cache.dra.claims.get(&key) else {
                    return Err(Status::unresolvable(format!(
                        "resourceclaim.resource.k8s.io \"{n}\" not found"
                    )));
                };
                &claim.spec
            } else {
                return Err(Status::unresolvable(format!(
                    "reservation {reservation:?}, spec.resourceClaim {:?}: none of the supported fields are set",
                    pc.name
                )));
            };
            let key = ObjectKey::new(
                Kind::ResourceClaim,
                ns,
                &format!("{reservation}-{}", pc.name),
            );
            let plan =
                allocator::plan_spec(&key, spec, &cx.cache.dra).map_err(Status::unresolvable)?;
            state.plans.push(plan);
            names.push(pc.name.clone());
        }
        state.reservation = Some((reservation.clone(), names));
        Ok(Some(state))
    }

    /// The reservation whose devices the pod may take on `node`: the one the Reservation
    /// plugin nominates there (`reserving`: the one its Reserve takes).
    pub(crate) fn access<'a>(
        cx: &'a Cluster,
        cycle: &CycleState,
        pod: &PodInfo,
        node: &NodeInfo,
        reserving: bool,
    ) -> Access<'a> {
        if !cx.cache.dra.holds_any() {
            return Access::default();
        }
        let Some(rs) = cycle.reservation.as_deref() else {
            return Access::default();
        };
        let idx = if reserving {
            rs.chosen(cx, pod, node.idx)
        } else {
            rs.nominee(cx, pod, node)
        };
        let Some(r) = idx.and_then(|i| cx.reservations.get(i)) else {
            return Access::default();
        };
        Access {
            mine: Some(&r.name),
            restricted: r.policy == ReservationAllocatePolicy::Restricted,
        }
    }

    /// Reserve's allocation on `node`.
    fn allocate(
        cx: &Cluster,
        state: &State,
        node: &NodeInfo,
        access: &Access<'_>,
    ) -> Result<Vec<berth_api::dra::AllocationResult>, Status> {
        let devices = allocator::node_devices(&cx.cache.dra, &node.name, &node.labels);
        let held = Self::held(cx, &devices, access);
        allocator::allocate(
            &state.plans,
            &node.name,
            &devices,
            cx.cache.dra.taken(),
            &held,
        )
        .map_err(failure)
    }

    /// Filter's question: can the claims be allocated on `node`.
    fn fits(cx: &Cluster, state: &State, node: &NodeInfo, access: &Access<'_>) -> Status {
        let devices = allocator::node_devices(&cx.cache.dra, &node.name, &node.labels);
        let held = Self::held(cx, &devices, access);
        match allocator::fits(&state.plans, &devices, cx.cache.dra.taken(), &held) {
            Ok(()) => Status::success(),
            Err(f) => failure(f),
        }
    }

    /// How reservations hold each of `devices` for the pod (empty: none holds any).
    pub(crate) fn held(
        cx: &Cluster,
        devices: &allocator::NodeDevices<'_>,
        access: &Access<'_>,
    ) -> Vec<reserved::Held> {
        let active = |name: &str, uid: &str| {
            cx.reservations
                .idx(name)
                .and_then(|i| cx.reservations.get(i))
                .is_some_and(|r| r.is_active() && &*r.uid == uid)
        };
        reserved::classify(
            &cx.cache.dra,
            devices.iter().map(|c| c.id.clone()),
            access,
            &active,
        )
    }
}

/// The status of a search that found nothing, in upstream's words.
fn failure(f: Failure) -> Status {
    match f {
        Failure::NoFit => Status::unresolvable(CANNOT_ALLOCATE),
        Failure::TimedOut => Status::unresolvable("timed out trying to allocate devices"),
        Failure::Error(e) => Status::error(e),
    }
}

impl Plugin for DynamicResources {
    fn name(&self) -> &'static str {
        NAME
    }

    fn points(&self) -> Points {
        Points::PRE_ENQUEUE
            | Points::PRE_FILTER
            | Points::FILTER
            | Points::POST_FILTER
            | Points::RESERVE
            | Points::PRE_BIND
    }

    /// A pod whose claims do not all exist yet (a named claim not created, a template's
    /// claim not yet made by the claim controller) is not tried. As in kube-scheduler 1.35
    /// it waits without a `PodScheduled` condition or event, and is tried again when a
    /// ResourceClaim arrives.
    fn pre_enqueue(
        &self,
        cx: &PreEnqueueContext<'_>,
        pod: &PodInfo,
    ) -> Result<(), PreEnqueueRejection> {
        if pod.is_reserve_pod() {
            return Ok(());
        }
        let has_claims = pod
            .pod
            .spec
            .as_ref()
            .and_then(|s| s.resource_claims.as_ref())
            .is_some_and(|c| !c.is_empty());
        if !has_claims {
            return Ok(());
        }
        let missing = match pod_claims(&pod.pod) {
            Err(_) => true,
            Ok(claims) => claims
                .iter()
                .any(|(_, key)| !cx.cluster.cache.dra.claims.contains_key(key)),
        };
        if missing {
            return Err(PreEnqueueRejection {
                plugin: NAME,
                message: None,
            });
        }
        Ok(())
    }

    fn events_to_register(&self) -> EventsToRegister {
        // Devices come from slices and classes and go back when claims are deallocated.
        EventsToRegister::on(&[(kind::NODE_ADD | kind::NODE_LABEL | kind::DRA, None)])
    }

    fn pre_filter(&self, cx: &Cluster, state: &mut CycleState, pod: &PodInfo) -> Status {
        state.dynamic_resources = None;
        state.dynamic_resources_ran = true;
        match Self::prepare(cx, pod) {
            Ok(None) => Status::skip(),
            Ok(Some(s)) => {
                state.dynamic_resources = Some(Box::new(s));
                Status::success()
            }
            Err(st) => st,
        }
    }

    fn filter(&self, cx: &Cluster, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        let Some(s) = state.dynamic_resources.as_deref() else {
            return Status::success();
        };
        if s.available_on
            .iter()
            .any(|m| !m.matches(&node.name, &node.labels))
        {
            return Status::unresolvable(NOT_AVAILABLE);
        }
        if s.plans.is_empty() {
            return Status::success();
        }
        let access = Self::access(cx, state, pod, node, false);
        Self::fits(cx, s, node, &access)
    }

    /// kube-scheduler 1.35.4's PostFilter, whose words start every unschedulable pod's
    /// PostFilter message in its default profile: `no new claims to deallocate` for a pod
    /// without claims, `still not schedulable` for one with claims. Without PreFilter's state
    /// (an earlier PreFilter rejected the pod) it fails with the state's `not found`, which
    /// ends PostFilter before preemption. A claim allocated for nodes the pod cannot use and
    /// used by no other consumer is deallocated (`deallocation of ResourceClaim completed`;
    /// see [`Self::claim_to_deallocate`]), so the next attempt may allocate it elsewhere. A Reservation's
    /// reserve pod gets none of it: its conditions read as koord-scheduler v1.8's, whose
    /// default profile has no DynamicResources.
    fn post_filter(
        &self,
        cx: &mut PostFilterContext<'_>,
        pod: &PodInfo,
    ) -> Option<PostFilterResult> {
        if pod.is_reserve_pod() {
            return None;
        }
        if !cx.state.dynamic_resources_ran {
            return Some(PostFilterResult {
                message: Some(STATE_NOT_FOUND.into()),
                error: true,
                ..PostFilterResult::default()
            });
        }
        let state = cx.state.dynamic_resources.as_deref();
        let claims = state.is_some_and(|s| !s.claims.is_empty() || !s.plans.is_empty());
        if let Some(key) = state.and_then(|s| Self::claim_to_deallocate(cx, pod, s)) {
            return Some(PostFilterResult {
                message: Some(DEALLOCATED.into()),
                deallocate: Some(key),
                ..PostFilterResult::default()
            });
        }
        let message = if claims {
            STILL_NOT_SCHEDULABLE
        } else {
            NO_CLAIMS_TO_DEALLOCATE
        };
        Some(PostFilterResult {
            message: Some(message.into()),
            ..PostFilterResult::default()
        })
    }

    fn reserve(
        &self,
        cx: &mut Cluster,
        state: &mut CycleState,
        pod: &PodInfo,
        node: NodeIdx,
    ) -> Status {
        let Some(s) = state.dynamic_resources.as_deref() else {
            return Status::success();
        };
        if s.plans.is_empty() {
            return Status::success();
        }
        let Some(info) = cx.cache.node(node) else {
            return Status::error("claim allocation not found for node");
        };
        let access = Self::access(cx, state, pod, info, true);
        let results = match Self::allocate(cx, s, info, &access) {
            Ok(r) => r,
            Err(_) => return Status::error("claim allocation not found for node"),
        };
        let Some(s) = state.dynamic_resources.as_deref_mut() else {
            return Status::success();
        };
        if let Some((name, claims)) = &s.reservation {
            hold(cx, name, &pod.uid, claims, &s.plans, results);
            s.held = true;
            return Status::success();
        }
        let uid: Arc<str> = pod.uid.clone();
        for (plan, allocation) in s.plans.iter().zip(results) {
            cx.cache
                .dra
                .assume(plan.key.clone(), uid.clone(), allocation);
            s.assumed.push(plan.key.clone());
        }
        Status::success()
    }

    fn unreserve(&self, cx: &mut Cluster, state: &mut CycleState, pod: &PodInfo, _node: NodeIdx) {
        let Some(s) = state.dynamic_resources.as_deref_mut() else {
            return;
        };
        if let Some((name, _)) = &s.reservation {
            if std::mem::take(&mut s.held) {
                release(cx, name);
            }
        }
        for key in s.assumed.drain(..) {
            cx.cache.dra.forget(&key, &pod.uid);
        }
    }

    fn pre_bind(
        &self,
        cx: &Cluster,
        state: &CycleState,
        _pod: &PodInfo,
        _node: &NodeInfo,
        annotations: &mut BTreeMap<String, String>,
    ) -> Status {
        let Some(s) = state.dynamic_resources.as_deref() else {
            return Status::success();
        };
        let Some((name, _)) = s.reservation.as_ref().filter(|_| s.held) else {
            return Status::success();
        };
        if let Some(h) = cx.cache.dra.holds().get(name) {
            let value = DeviceAllocated {
                claims: h.claims.clone(),
            };
            annotations.insert(reserved::ANNOTATION_DEVICE_ALLOCATED.into(), value.encode());
        }
        Status::success()
    }
}

/// Reserve of a reserve pod: the reservation holds `results` (one per template claim), and
/// its `status.allocatable` counts them per DeviceClass.
fn hold(
    cx: &mut Cluster,
    name: &Arc<str>,
    uid: &Arc<str>,
    claims: &[String],
    plans: &[ClaimPlan],
    results: Vec<berth_api::dra::AllocationResult>,
) {
    let mut counts: BTreeMap<String, i64> = BTreeMap::new();
    let mut held = Vec::with_capacity(claims.len());
    for ((plan, allocation), name) in plans.iter().zip(results).zip(claims) {
        let mut classes = BTreeMap::new();
        for r in allocation.devices.results.iter() {
            let class = plan
                .requests
                .iter()
                .flat_map(|q| &q.alternatives)
                .find(|a| a.name == r.request)
                .map(|a| a.class.clone());
            if let Some(class) = class {
                if r.admin_access != Some(true) {
                    *counts.entry(class.clone()).or_insert(0) += 1;
                }
                classes.insert(r.request.clone(), class);
            }
        }
        held.push(HeldClaim {
            name: name.clone(),
            allocation,
            classes,
        });
    }
    cx.cache.dra.hold(name.clone(), uid.clone(), held);
    if let Some(r) = cx
        .reservations
        .idx(name)
        .and_then(|i| cx.reservations.get_mut(i))
    {
        r.allocatable_list
            .retain(|k, _| !k.starts_with(reserved::DEVICE_CLASS_RESOURCE_PREFIX));
        r.allocatable_list
            .extend(reserved::allocatable_entries(&counts));
    }
}

/// Unreserve of a reserve pod: the reservation holds nothing.
fn release(cx: &mut Cluster, name: &str) {
    cx.cache.dra.release(name);
    if let Some(r) = cx
        .reservations
        .idx(name)
        .and_then(|i| cx.reservations.get_mut(i))
    {
        r.allocatable_list
            .retain(|k, _| !k.starts_with(reserved::DEVICE_CLASS_RESOURCE_PREFIX));
    }
}
