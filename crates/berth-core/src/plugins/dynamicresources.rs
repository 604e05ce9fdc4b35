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

use std::sync::Arc;

use berth_api::dra::RESERVED_FOR_MAX_SIZE;
use berth_api::k8s_openapi::api::core::v1::Pod;

use crate::cache::Cluster;
use crate::dra::allocator::{self, ClaimPlan, Failure};
use crate::framework::{CycleState, Plugin, Points, Status};
use crate::model::node::{NodeIdx, NodeInfo};
use crate::model::pod::PodInfo;
use crate::model::selector::NodeSelectorMatcher;
use crate::object::{Kind, ObjectKey};

/// The plugin's name.
pub const NAME: &str = super::names::DYNAMIC_RESOURCES;

/// `cannot allocate all claims`.
pub const CANNOT_ALLOCATE: &str = "cannot allocate all claims";
/// An allocated claim's node selector excludes the node.
pub const NOT_AVAILABLE: &str = "resourceclaim not available on the node";

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

/// The DynamicResources plugin.
#[derive(Debug, Default)]
pub struct DynamicResources;

impl DynamicResources {
    fn prepare(cx: &Cluster, pod: &PodInfo) -> Result<Option<State>, Status> {
        let claims = pod_claims(&pod.pod).map_err(Status::unresolvable)?;
        if claims.is_empty() {
            return Ok(None);
        }
        let mut state = State::default();
        for (_, key) in claims {
            let Some(claim) = cx.dra.claims.get(&key) else {
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
                if cx.dra.assumed(&key).is_some_and(|a| a.pod_uid != pod.uid) {
                    return Err(Status::unresolvable(format!(
                        "resource claim {}/{} is in the process of being allocated",
                        key.namespace, key.name
                    )));
                }
                let plan = allocator::plan(&key, claim, &cx.dra).map_err(Status::unresolvable)?;
                state.plans.push(plan);
            }
            state.claims.push(key);
        }
        Ok(Some(state))
    }

    fn allocate(
        cx: &Cluster,
        state: &State,
        node: &NodeInfo,
    ) -> Result<Vec<berth_api::dra::AllocationResult>, Status> {
        let cands = allocator::candidates(&cx.dra, &node.name, &node.labels);
        allocator::allocate(&state.plans, &node.name, &cands, cx.dra.taken()).map_err(|f| match f {
            Failure::NoFit => Status::unresolvable(CANNOT_ALLOCATE),
            Failure::TimedOut => Status::unresolvable("timed out trying to allocate devices"),
            Failure::Error(e) => Status::error(e),
        })
    }
}

impl Plugin for DynamicResources {
    fn name(&self) -> &'static str {
        NAME
    }

    fn points(&self) -> Points {
        Points::PRE_FILTER | Points::FILTER | Points::RESERVE
    }

    fn pre_filter(&self, cx: &Cluster, state: &mut CycleState, pod: &PodInfo) -> Status {
        state.dynamic_resources = None;
        match Self::prepare(cx, pod) {
            Ok(None) => Status::skip(),
            Ok(Some(s)) => {
                state.dynamic_resources = Some(Box::new(s));
                Status::success()
            }
            Err(st) => st,
        }
    }

    fn filter(&self, cx: &Cluster, state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> Status {
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
        match Self::allocate(cx, s, node) {
            Ok(_) => Status::success(),
            Err(st) => st,
        }
    }

    fn reserve(
        &self,
        cx: &mut Cluster,
        state: &mut CycleState,
        pod: &PodInfo,
        node: NodeIdx,
    ) -> Status {
        let Some(s) = state.dynamic_resources.as_deref_mut() else {
            return Status::success();
        };
        if s.plans.is_empty() {
            return Status::success();
        }
        let Some(info) = cx.node(node) else {
            return Status::error("claim allocation not found for node");
        };
        let results = match Self::allocate(cx, s, info) {
            Ok(r) => r,
            Err(_) => return Status::error("claim allocation not found for node"),
        };
        let uid: Arc<str> = pod.uid.clone();
        for (plan, allocation) in s.plans.iter().zip(results) {
            cx.dra.assume(plan.key.clone(), uid.clone(), allocation);
            s.assumed.push(plan.key.clone());
        }
        Status::success()
    }

    fn unreserve(&self, cx: &mut Cluster, state: &mut CycleState, pod: &PodInfo, _node: NodeIdx) {
        let Some(s) = state.dynamic_resources.as_deref_mut() else {
            return;
        };
        for key in s.assumed.drain(..) {
            cx.dra.forget(&key, &pod.uid);
        }
    }
}
