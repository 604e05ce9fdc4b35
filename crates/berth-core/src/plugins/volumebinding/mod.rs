//! VolumeBinding, as kube-scheduler 1.35 (`pkg/scheduler/framework/plugins/volumebinding`).
//!
//! - PreFilter: a claim the pod names must exist, not be lost nor being deleted (an
//!   ephemeral volume's claim must be the pod's); the pod's claims are sorted into bound,
//!   unbound `WaitForFirstConsumer` ("delayed") and unbound Immediate ones. An unbound
//!   Immediate claim rejects the pod everywhere: the PV controller binds those, not the
//!   scheduler.
//! - Filter (`FindPodVolumes`): a bound claim's volume must admit the node (its node
//!   affinity); each delayed claim needs a static volume of its class that fits it (size,
//!   access and volume modes, selector, node affinity) or, failing that, a class that can
//!   provision on the node (a provisioner, `allowedTopologies`, and where the CSIDriver
//!   publishes storage capacity, a CSIStorageCapacity big enough that the node reaches).
//! - Reserve assumes the decisions ([`assume`]); Unreserve takes them back.
//! - PreBind is the scheduler's ([`crate::Scheduler`]'s volume wait): it writes the
//!   volumes' claimRefs and the claims' selected node as effects, then binds the pod once
//!   the PV controller has bound every claim, or fails after `bindTimeoutSeconds`.
//! - Score only with a `shape` in the args (kube-scheduler's `StorageCapacityScoring`
//!   gate, which berth has no other way to turn on).
//!
//! Not modelled: translating in-tree volumes to CSI (`tryTranslatePVToCSI`) before the
//! node-affinity check.

pub mod assume;
pub mod claims;

use std::sync::Arc;

use berth_api::k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use berth_api::k8s_openapi::api::storage::v1::CSIStorageCapacity;
use serde::Deserialize;

use crate::cache::Cluster;
use crate::framework::config::ConfigError;
use crate::framework::events::{kind, EventsToRegister};
use crate::framework::{CycleState, Plugin, Points, Status};
use crate::model::node::{NodeIdx, NodeInfo};
use crate::model::pod::PodInfo;
use crate::model::selector::{Labels, Selector};
use crate::object::{Kind, ObjectKey};
use crate::plugins::args::decode;
use crate::plugins::noderesources::args::{validate_shape, UtilizationShapePoint};

use claims::*;

/// `ErrReasonBindConflict`.
pub const ERR_REASON_BIND_CONFLICT: &str =
    "node(s) didn't find available persistent volumes to bind";
/// `ErrReasonNodeConflict`.
pub const ERR_REASON_NODE_CONFLICT: &str = "node(s) didn't match PersistentVolume's node affinity";
/// `ErrReasonNotEnoughSpace`.
pub const ERR_REASON_NOT_ENOUGH_SPACE: &str = "node(s) did not have enough free storage";
/// `ErrReasonPVNotExist`.
pub const ERR_REASON_PV_NOT_EXIST: &str =
    "node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)";
/// PreFilter's rejection of a pod with an unbound Immediate claim.
pub const ERR_REASON_UNBOUND_IMMEDIATE: &str = "pod has unbound immediate PersistentVolumeClaims";
/// `bindTimeoutSeconds`' default.
pub const DEFAULT_BIND_TIMEOUT_SECONDS: i64 = 600;

/// `VolumeBindingArgs`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct VolumeBindingArgs {
    /// How long PreBind waits for the claims to be bound (default 600; 0: no waiting).
    #[serde(default)]
    pub bind_timeout_seconds: Option<i64>,
    /// The storage-capacity scoring shape (utilisation 0..=100 to score 0..=10).
    #[serde(default)]
    pub shape: Option<Vec<UtilizationShapePoint>>,
}

/// A static volume chosen for a claim.
#[derive(Debug, Clone)]
pub struct StaticBinding {
    /// The claim.
    pub pvc: Arc<PersistentVolumeClaim>,
    /// The volume (after Reserve: bound to the claim).
    pub pv: Arc<PersistentVolume>,
}

/// A claim to provision on the node.
#[derive(Debug, Clone)]
pub struct Provision {
    /// The claim (after Reserve: carrying the selected node).
    pub pvc: Arc<PersistentVolumeClaim>,
    /// The capacity object that admitted it, when capacity is tracked.
    pub capacity: Option<Arc<CSIStorageCapacity>>,
}

/// What a node needs done for the pod's unbound claims (`PodVolumes`).
#[derive(Debug, Clone, Default)]
pub struct PodVolumes {
    /// Claims to bind to existing volumes.
    pub static_bindings: Vec<StaticBinding>,
    /// Claims to provision.
    pub provisions: Vec<Provision>,
}

/// Why a node cannot take the pod's volumes, as kube-scheduler lists them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Reasons {
    node_conflict: bool,
    bind_conflict: bool,
    not_enough_space: bool,
    pv_not_exist: bool,
}

impl Reasons {
    fn status(self) -> Status {
        let all = [
            (self.node_conflict, ERR_REASON_NODE_CONFLICT),
            (self.bind_conflict, ERR_REASON_BIND_CONFLICT),
            (self.not_enough_space, ERR_REASON_NOT_ENOUGH_SPACE),
            (self.pv_not_exist, ERR_REASON_PV_NOT_EXIST),
        ];
        let mut st: Option<Status> = None;
        for (on, r) in all {
            if on {
                st = Some(match st {
                    None => Status::unresolvable(r),
                    Some(s) => s.with_reason(r),
                });
            }
        }
        st.unwrap_or_else(Status::success)
    }
}

/// Per-cycle state.
#[derive(Debug, Clone, Default)]
pub struct State {
    bound: Vec<Arc<PersistentVolumeClaim>>,
    delayed: Vec<Arc<PersistentVolumeClaim>>,
    /// Volumes of each delayed claim's class, by name.
    pvs_by_class: Vec<(String, Vec<Arc<PersistentVolume>>)>,
    /// Reserve: every claim was bound already.
    all_bound: bool,
    /// Reserve: what was assumed on the chosen node.
    assumed: Option<PodVolumes>,
}

impl State {
    /// What PreBind must write and wait for: `None` when every claim was bound at Reserve.
    pub fn pending(&self) -> Option<&PodVolumes> {
        if self.all_bound {
            return None;
        }
        self.assumed.as_ref()
    }
}

/// The VolumeBinding plugin.
#[derive(Debug)]
pub struct VolumeBinding {
    bind_timeout_seconds: i64,
    /// Scaled shape (scores 0..=100) when capacity scoring is on.
    shape: Option<Vec<UtilizationShapePoint>>,
}

impl VolumeBinding {
    /// Builds the plugin from its args.
    pub fn new(args: Option<&serde_json::Value>) -> Result<Self, ConfigError> {
        let a: VolumeBindingArgs = decode(args)?;
        let timeout = a
            .bind_timeout_seconds
            .unwrap_or(DEFAULT_BIND_TIMEOUT_SECONDS);
        if timeout < 0 {
            return Err(ConfigError::new(
                "bindTimeoutSeconds",
                format!(
                    "Invalid value: {timeout}: invalid BindTimeoutSeconds, should not be a negative value"
                ),
            ));
        }
        let shape = match a.shape {
            None => None,
            Some(s) => {
                validate_shape(&s, "shape")?;
                Some(
                    s.iter()
                        .map(|p| UtilizationShapePoint {
                            utilization: p.utilization,
                            score: p.score * 10,
                        })
                        .collect(),
                )
            }
        };
        Ok(Self {
            bind_timeout_seconds: timeout,
            shape,
        })
    }

    /// `bindTimeoutSeconds`, in milliseconds.
    pub fn bind_timeout(&self) -> crate::time::Time {
        self.bind_timeout_seconds.saturating_mul(1000)
    }
}

fn claim_key(pod: &PodInfo, name: &str) -> ObjectKey {
    ObjectKey::new(Kind::PersistentVolumeClaim, &pod.key.namespace, name)
}

/// `podHasPVCs`: whether the pod names a claim, or why it cannot be scheduled.
fn pod_has_pvcs(cx: &Cluster, pod: &PodInfo) -> Result<bool, String> {
    let mut has = false;
    for v in pod.spec().volumes.iter().flatten() {
        let Some((name, ephemeral)) = volume_claim(&pod.key.name, v) else {
            continue;
        };
        has = true;
        let Some(pvc) = cx.cache.pvcs.get(&claim_key(pod, &name)) else {
            return Err(if ephemeral {
                format!("waiting for ephemeral volume controller to create the persistentvolumeclaim {name:?}")
            } else {
                crate::plugins::volumerestrictions::pvc_not_found(&name)
            });
        };
        let phase = pvc.status.as_ref().and_then(|s| s.phase.as_deref());
        if phase == Some("Lost") {
            return Err(format!(
                "persistentvolumeclaim {name:?} bound to non-existent persistentvolume {:?}",
                claim_volume_name(pvc)
            ));
        }
        if pvc.metadata.deletion_timestamp.is_some() {
            return Err(format!("persistentvolumeclaim {name:?} is being deleted"));
        }
        if ephemeral {
            ephemeral_for_pod(&pod.pod, pvc)?;
        }
    }
    Ok(has)
}

/// Whether every claim of the pod is fully bound (`arePodVolumesBound`), as the assume
/// cache sees them.
fn pod_volumes_bound(cx: &Cluster, pod: &PodInfo) -> bool {
    pod.spec().volumes.iter().flatten().all(|v| {
        volume_claim(&pod.key.name, v).is_none_or(|(name, _)| {
            cx.cache
                .claim(&claim_key(pod, &name))
                .is_some_and(|c| fully_bound(c))
        })
    })
}

/// `GetPodVolumeClaims` into a [`State`]; `Ok(None)`: an unbound Immediate claim.
fn pod_volume_claims(cx: &Cluster, pod: &PodInfo) -> Result<Option<State>, String> {
    let mut st = State::default();
    let mut immediate = false;
    for v in pod.spec().volumes.iter().flatten() {
        let Some((name, _)) = volume_claim(&pod.key.name, v) else {
            continue;
        };
        let key = claim_key(pod, &name);
        let Some(pvc) = cx.cache.claim(&key) else {
            return Err(format!(
                "error getting PVC \"{}/{name}\": persistentvolumeclaim {name:?} not found",
                pod.key.namespace
            ));
        };
        if fully_bound(pvc) {
            st.bound.push(pvc.clone());
            continue;
        }
        let delay = is_delay_binding(pvc, |c| cx.cache.storage_classes.get(c).cloned())?;
        if delay && claim_volume_name(pvc).is_empty() {
            st.delayed.push(pvc.clone());
        } else {
            immediate = true;
        }
    }
    if immediate {
        return Ok(None);
    }
    for pvc in &st.delayed {
        let class = claim_class(pvc);
        if !st.pvs_by_class.iter().any(|(c, _)| c == class) {
            st.pvs_by_class
                .push((class.to_string(), cx.cache.volumes_of_class(class)));
        }
    }
    Ok(Some(st))
}

/// `FindPodVolumes` for one node.
fn find_pod_volumes(
    cx: &Cluster,
    st: &State,
    node: &NodeInfo,
) -> Result<(PodVolumes, Reasons), String> {
    let mut out = PodVolumes::default();
    let mut reasons = Reasons::default();
    for pvc in &st.bound {
        match cx.cache.volume(claim_volume_name(pvc)) {
            None => {
                reasons.pv_not_exist = true;
                break;
            }
            Some(pv) if !node_affinity_matches(pv, &node.labels) => {
                reasons.node_conflict = true;
                break;
            }
            Some(_) => {}
        }
    }
    if st.delayed.is_empty() {
        return Ok((out, reasons));
    }
    let mut to_match: Vec<&Arc<PersistentVolumeClaim>> = Vec::new();
    let mut to_provision: Vec<&Arc<PersistentVolumeClaim>> = Vec::new();
    for pvc in &st.delayed {
        match selected_node(pvc) {
            Some(n) if n != &*node.name => {
                reasons.bind_conflict = true;
                return Ok((out, reasons));
            }
            Some(_) => to_provision.push(pvc),
            None => to_match.push(pvc),
        }
    }
    if !to_match.is_empty() {
        // Smallest request first, so each claim gets the smallest volume that fits.
        to_match.sort_by_key(|p| claim_request(p).unwrap_or(0));
        let mut chosen: Vec<&str> = Vec::new();
        let mut found = true;
        for pvc in to_match {
            let class = claim_class(pvc);
            let pvs = st
                .pvs_by_class
                .iter()
                .find(|(c, _)| c == class)
                .map_or(&[][..], |(_, v)| v.as_slice());
            match find_matching_volume(pvc, pvs, Some(&node.labels), &chosen, true)? {
                None => {
                    found = false;
                    to_provision.push(pvc);
                }
                Some(pv) => {
                    let name = pvs
                        .iter()
                        .find(|p| Arc::ptr_eq(p, &pv))
                        .and_then(|p| p.metadata.name.as_deref())
                        .unwrap_or("");
                    chosen.push(name);
                    out.static_bindings.push(StaticBinding {
                        pvc: pvc.clone(),
                        pv,
                    });
                }
            }
        }
        reasons.bind_conflict = !found;
    }
    if !to_provision.is_empty() {
        let (satisfied, sufficient) = check_provisions(cx, &to_provision, node, &mut out)?;
        reasons.bind_conflict = !satisfied;
        reasons.not_enough_space = !sufficient;
    }
    Ok((out, reasons))
}

/// `checkVolumeProvisions`: (every claim can be provisioned, storage suffices).
fn check_provisions(
    cx: &Cluster,
    claims: &[&Arc<PersistentVolumeClaim>],
    node: &NodeInfo,
    out: &mut PodVolumes,
) -> Result<(bool, bool), String> {
    let mut provisions = Vec::with_capacity(claims.len());
    for pvc in claims {
        let class_name = claim_class(pvc);
        if class_name.is_empty() {
            return Err(format!(
                "no class for claim \"{}/{}\"",
                pvc.metadata.namespace.as_deref().unwrap_or(""),
                pvc.metadata.name.as_deref().unwrap_or("")
            ));
        }
        let Some(class) = cx.cache.storage_classes.get(class_name) else {
            return Err(format!("failed to find storage class {class_name:?}"));
        };
        let provisioner = class.provisioner.as_str();
        if provisioner.is_empty() || provisioner == NOT_SUPPORTED_PROVISIONER {
            return Ok((false, true));
        }
        if !topology_matches(class.allowed_topologies.as_deref(), &node.labels) {
            return Ok((false, true));
        }
        match has_enough_capacity(cx, provisioner, pvc, class_name, &node.labels) {
            None => return Ok((true, false)),
            Some(capacity) => provisions.push(Provision {
                pvc: (*pvc).clone(),
                capacity,
            }),
        }
    }
    out.provisions = provisions;
    Ok((true, true))
}

/// `hasEnoughCapacity`: `None` when the driver tracks capacity and no CSIStorageCapacity
/// the node reaches holds the claim; else the one that does (`Some(None)`: not tracked).
fn has_enough_capacity(
    cx: &Cluster,
    provisioner: &str,
    pvc: &PersistentVolumeClaim,
    class: &str,
    labels: &Labels,
) -> Option<Option<Arc<CSIStorageCapacity>>> {
    let Some(size) = claim_request(pvc) else {
        return Some(None);
    };
    let tracked = cx
        .cache
        .csi_drivers
        .get(provisioner)
        .and_then(|d| d.spec.storage_capacity)
        .unwrap_or(false);
    if !tracked {
        return Some(None);
    }
    cx.cache
        .csi_capacities
        .values()
        .find(|c| {
            c.storage_class_name == class
                && volume_limit(c).is_some_and(|l| l >= size)
                && c.node_topology.as_ref().is_some_and(|t| {
                    Selector::from_label_selector(t).is_ok_and(|s| s.matches(labels))
                })
        })
        .map(|c| Some(c.clone()))
}

/// `volumeLimit`: `maximumVolumeSize`, else `capacity`, bytes.
pub fn volume_limit(c: &CSIStorageCapacity) -> Option<i64> {
    c.maximum_volume_size
        .as_ref()
        .or(c.capacity.as_ref())
        .and_then(quantity_value)
}

impl VolumeBinding {
    /// The storage-capacity score of a node (`volumeCapacityScorer`).
    fn capacity_score(&self, shape: &[UtilizationShapePoint], v: &PodVolumes) -> i64 {
        // (class, requested, capacity), in first-seen order.
        let mut classes: Vec<(&str, i64, i64)> = Vec::new();
        if !v.static_bindings.is_empty() {
            for b in &v.static_bindings {
                let class = pv_class(&b.pv);
                let req = claim_request(&b.pvc).unwrap_or(0);
                let cap = pv_capacity(&b.pv);
                match classes.iter_mut().find(|(c, _, _)| *c == class) {
                    Some(e) => {
                        e.1 += req;
                        e.2 += cap;
                    }
                    None => classes.push((class, req, cap)),
                }
            }
        } else {
            for p in &v.provisions {
                let Some(c) = &p.capacity else { continue };
                let class = claim_class(&p.pvc);
                let cap = c.capacity.as_ref().and_then(quantity_value).unwrap_or(0);
                let req = claim_request(&p.pvc).unwrap_or(0);
                match classes.iter_mut().find(|(k, _, _)| *k == class) {
                    Some(e) => {
                        e.1 += req;
                        e.2 = cap;
                    }
                    None => classes.push((class, req, cap)),
                }
            }
        }
        if classes.is_empty() {
            return 0;
        }
        let f = |requested: i64, capacity: i64| {
            use crate::plugins::noderesources::scoring::piecewise;
            if capacity == 0 || requested > capacity {
                return piecewise(shape, 100);
            }
            piecewise(shape, requested.saturating_mul(100) / capacity)
        };
        let sum: i64 = classes.iter().map(|(_, r, c)| f(*r, *c)).sum();
        (sum as f64 / classes.len() as f64).round() as i64
    }
}

impl Plugin for VolumeBinding {
    fn name(&self) -> &'static str {
        super::names::VOLUME_BINDING
    }

    fn points(&self) -> Points {
        Points::PRE_FILTER | Points::FILTER | Points::RESERVE | Points::PRE_SCORE | Points::SCORE
    }

    fn events_to_register(&self) -> EventsToRegister {
        // With queueing hints (GA), node taint changes are not registered. A claim event
        // concerns only pods that use the claim; a CSIDriver one only pods with an inline
        // volume of that driver (`isSchedulableAfterCSIDriverChange`).
        EventsToRegister::on(&[
            (
                kind::NODE_ADD
                    | kind::NODE_LABEL
                    | kind::PV
                    | kind::STORAGE_CLASS
                    | kind::CSI_NODE_MIGRATION
                    | kind::CSI_STORAGE_CAPACITY,
                None,
            ),
            (kind::PVC, Some(claims::uses_changed_claim)),
            (kind::CSI_DRIVER, Some(claims::uses_changed_driver)),
        ])
    }

    fn pre_filter(&self, cx: &Cluster, state: &mut CycleState, pod: &PodInfo) -> Status {
        match pod_has_pvcs(cx, pod) {
            Err(e) => return Status::unresolvable(e),
            Ok(false) => return Status::skip(),
            Ok(true) => {}
        }
        match pod_volume_claims(cx, pod) {
            Err(e) => Status::error(e),
            Ok(None) => Status::unresolvable(ERR_REASON_UNBOUND_IMMEDIATE),
            Ok(Some(st)) => {
                state.volume_binding = Some(Box::new(st));
                Status::success()
            }
        }
    }

    fn filter(&self, cx: &Cluster, state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> Status {
        let Some(st) = state.volume_binding.as_deref() else {
            return Status::error("VolumeBinding: PreFilter did not run");
        };
        match find_pod_volumes(cx, st, node) {
            Err(e) => Status::error(e),
            Ok((_, reasons)) => reasons.status(),
        }
    }

    fn pre_score(
        &self,
        _cx: &Cluster,
        state: &mut CycleState,
        _pod: &PodInfo,
        _nodes: &[NodeIdx],
    ) -> Status {
        if self.shape.is_none() || state.volume_binding.is_none() {
            return Status::skip();
        }
        Status::success()
    }

    fn score(&self, cx: &Cluster, state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> i64 {
        let (Some(shape), Some(st)) = (self.shape.as_deref(), state.volume_binding.as_deref())
        else {
            return 0;
        };
        match find_pod_volumes(cx, st, node) {
            Ok((v, _)) => self.capacity_score(shape, &v),
            Err(_) => 0,
        }
    }

    fn reserve(
        &self,
        cx: &mut Cluster,
        state: &mut CycleState,
        pod: &PodInfo,
        node: NodeIdx,
    ) -> Status {
        let Some(st) = state.volume_binding.as_deref_mut() else {
            return Status::success();
        };
        // A reservation's stand-in mounts nothing: its claims are the owners' to bind.
        if pod_volumes_bound(cx, pod) || pod.is_reserve_pod() {
            st.all_bound = true;
            return Status::success();
        }
        let Some(info) = cx.cache.node(node) else {
            return Status::error(format!("no pod volume found for node {node:?}"));
        };
        let node_name = info.name.to_string();
        let found = match find_pod_volumes(cx, st, info) {
            Ok((v, r)) if r == Reasons::default() => v,
            Ok(_) => return Status::error(format!("no pod volume found for node {node_name:?}")),
            Err(e) => return Status::error(e),
        };
        let mut assumed = PodVolumes::default();
        for b in found.static_bindings {
            let (pv, dirty) = bind_volume_to_claim(&b.pv, &b.pvc);
            if dirty {
                cx.cache.assumed_volumes.assume_pv(pv.clone());
            }
            assumed
                .static_bindings
                .push(StaticBinding { pvc: b.pvc, pv });
        }
        for p in found.provisions {
            let mut pvc = p.pvc.clone();
            Arc::make_mut(&mut pvc)
                .metadata
                .annotations
                .get_or_insert_with(Default::default)
                .insert(ANN_SELECTED_NODE.into(), node_name.clone());
            cx.cache.assumed_volumes.assume_pvc(
                claim_key(pod, pvc.metadata.name.as_deref().unwrap_or("")),
                pvc.clone(),
            );
            assumed.provisions.push(Provision {
                pvc,
                capacity: None,
            });
        }
        st.all_bound = false;
        st.assumed = Some(assumed);
        Status::success()
    }

    fn unreserve(&self, cx: &mut Cluster, state: &mut CycleState, pod: &PodInfo, _node: NodeIdx) {
        let Some(v) = state
            .volume_binding
            .as_deref_mut()
            .and_then(|s| s.assumed.take())
        else {
            return;
        };
        for b in &v.static_bindings {
            cx.cache
                .assumed_volumes
                .restore_pv(b.pv.metadata.name.as_deref().unwrap_or(""));
        }
        for p in &v.provisions {
            cx.cache.assumed_volumes.restore_pvc(&claim_key(
                pod,
                p.pvc.metadata.name.as_deref().unwrap_or(""),
            ));
        }
    }

    fn volume_bind_timeout(&self) -> Option<crate::time::Time> {
        Some(self.bind_timeout())
    }
}

#[cfg(test)]
mod tests;
