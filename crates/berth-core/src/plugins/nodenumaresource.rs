//! NodeNUMAResource: Koordinator's plugin that gives latency-sensitive pods exclusive CPUs
//! (see [`crate::cpuset`] for the layout, the choice of CPUs and the state it keeps).
//!
//! - PreFilter: only pods labelled `koordinator.sh/qosClass: LSE` or `LSR` with a CPU
//!   request take part (an integer one: a fractional request is rejected with Koordinator's
//!   reason; limits are not required, as Koordinator's webhook admits such pods). The bind
//!   policy is the pod's `scheduling.koordinator.sh/resource-spec` (`requiredCPUBindPolicy`,
//!   else `preferredCPUBindPolicy`), else the plugin's `defaultCPUBindPolicy` (`FullPCPUs`).
//!   Every other pod skips the plugin.
//! - Filter: a node without a usable CPU topology, a node whose
//!   `node.koordinator.sh/cpu-bind-policy` conflicts with the pod's required policy, a
//!   `FullPCPUs` request that is not a multiple of the threads per core, and a node whose
//!   free CPUs cannot be chosen for the pod (counting what the node reserves, what pods and
//!   reservations hold, and NUMA alignment where the node's Topology Manager asks for it)
//!   are rejected, each with one fixed reason.
//! - Score: the fraction of the node's usable CPUs left free after the pod (least allocated,
//!   Koordinator's default scoring strategy).
//! - Reserve chooses the CPUs (an owner of a reservation holding CPUs takes those first;
//!   under `Restricted` only those) and records them; Unreserve gives them back.
//! - PreBind writes them as `scheduling.koordinator.sh/resource-status` (`cpuset` and the
//!   CPUs per NUMA node) on the pod, or on the Reservation for a reservation's stand-in.

use std::collections::BTreeMap;

use berth_api::annotations::{
    AnnotationCodec, CpuBindPolicy, NumaNodeResource, ResourceSpec, ResourceStatus,
    LABEL_NODE_CPU_BIND_POLICY, LABEL_POD_QOS,
};
use berth_api::k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use berth_api::reservation::ReservationAllocatePolicy;
use serde::Deserialize;
use smallvec::SmallVec;

use crate::cache::Cluster;
use crate::cpuset::{take_cpus, whole_cores, CpuSet, NodeCpus, ERR_NOT_ENOUGH_CPUS};
use crate::framework::config::ConfigError;
use crate::framework::events::{kind, EventsToRegister};
use crate::framework::{CycleState, Plugin, Points, Status};
use crate::model::node::{NodeIdx, NodeInfo};
use crate::model::pod::PodInfo;
use crate::resources::ResourceId;

/// The requested CPUs are not a whole number.
pub const ERR_INVALID_REQUESTED_CPUS: &str = "the requested CPUs must be integer";
/// The node publishes no CPU topology, or a malformed one.
pub const ERR_INVALID_CPU_TOPOLOGY: &str = "node(s) invalid CPU Topology";
/// `FullPCPUs` required and the CPU count is not a multiple of the threads per core.
pub const ERR_SMT_ALIGNMENT: &str = "node(s) requested cpus not multiple cpus per core";
/// The node imposes a bind policy other than the one the pod requires.
pub const ERR_CPU_BIND_POLICY_CONFLICT: &str =
    "node(s) cpu bind policy conflicts with pod's required cpu bind policy";
/// The node's Topology Manager wants one NUMA node and none has enough free CPUs.
pub const ERR_NUMA_ALIGNMENT: &str = "node(s) NUMA Topology policy not match";
/// A `Restricted` reservation holds fewer free CPUs than its owner asks for.
pub const ERR_RESERVATION_NOT_ENOUGH_CPUS: &str =
    "Reservation(s) not enough cpus available to satisfy request";
/// Not enough free CPUs (Koordinator's accumulator message).
pub const ERR_NOT_ENOUGH: &str = ERR_NOT_ENOUGH_CPUS;

/// `NodeNUMAResourceArgs`: berth reads `defaultCPUBindPolicy`; Koordinator's other fields
/// are accepted so that its configuration reads unchanged.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodeNumaResourceArgs {
    /// The policy of pods that name none (default `FullPCPUs`).
    #[serde(default, rename = "defaultCPUBindPolicy")]
    pub default_cpu_bind_policy: Option<CpuBindPolicy>,
    /// Accepted, not used (berth scores least allocated).
    #[serde(default)]
    pub scoring_strategy: Option<serde_json::Value>,
    /// Accepted, not used.
    #[serde(default, rename = "numaScoringStrategy")]
    pub numa_scoring_strategy: Option<serde_json::Value>,
}

/// Per-cycle state of a pod that gets exclusive CPUs.
#[derive(Debug, Clone)]
pub struct State {
    /// CPUs wanted.
    pub cpus: usize,
    /// `requiredCPUBindPolicy`, resolved.
    pub required: Option<CpuBindPolicy>,
    /// The policy used where nothing is required.
    pub preferred: CpuBindPolicy,
    /// What Reserve chose.
    pub allocated: Option<CpuSet>,
}

/// The NodeNUMAResource plugin.
#[derive(Debug)]
pub struct NodeNumaResource {
    default_policy: CpuBindPolicy,
}

impl NodeNumaResource {
    /// Builds the plugin from its args.
    pub fn new(args: Option<&serde_json::Value>) -> Result<Self, ConfigError> {
        let args: NodeNumaResourceArgs = super::args::decode(args)?;
        let default_policy = match args.default_cpu_bind_policy {
            None | Some(CpuBindPolicy::Default) => CpuBindPolicy::FullPcpus,
            Some(CpuBindPolicy::ConstrainedBurst) => {
                return Err(ConfigError::new(
                    "defaultCPUBindPolicy",
                    "must be FullPCPUs or SpreadByPCPUs",
                ))
            }
            Some(p) => p,
        };
        Ok(Self { default_policy })
    }

    fn resolve(&self, p: CpuBindPolicy) -> CpuBindPolicy {
        if p == CpuBindPolicy::Default {
            self.default_policy
        } else {
            p
        }
    }
}

/// Whether the pod's QoS class asks for exclusive CPUs (`LSE`, `LSR`).
pub fn wants_exclusive_cpus(pod: &PodInfo) -> bool {
    matches!(
        pod.labels.get(LABEL_POD_QOS).map(String::as_str),
        Some("LSE" | "LSR")
    )
}

/// The policy the node imposes through `node.koordinator.sh/cpu-bind-policy`.
fn node_policy(node: &NodeInfo) -> Option<CpuBindPolicy> {
    match node
        .labels
        .get(LABEL_NODE_CPU_BIND_POLICY)
        .map(String::as_str)
    {
        Some("FullPCPUsOnly") => Some(CpuBindPolicy::FullPcpus),
        Some("SpreadByPCPUs") => Some(CpuBindPolicy::SpreadByPcpus),
        _ => None,
    }
}

/// A reservation the pod may take CPUs from on a node.
struct Source {
    uid: std::sync::Arc<str>,
    restricted: bool,
}

/// The reservation of `pod` on `node` that holds CPUs: the one Reserve assumed, or (Filter)
/// the one the Reservation plugin would nominate there. Filter once tried every matched
/// reservation and passed a node on one that Reserve then did not take.
fn source(
    cx: &Cluster,
    state: &CycleState,
    pod: &PodInfo,
    node: &NodeInfo,
    reserving: bool,
) -> Option<Source> {
    let st = state.reservation.as_deref()?;
    let of = |r: &crate::reservation::ReservationInfo| Source {
        uid: r.uid.clone(),
        restricted: r.policy == ReservationAllocatePolicy::Restricted,
    };
    if reserving {
        return st
            .assumed()
            .and_then(|(name, _)| cx.reservations.by_name(name))
            .map(of);
    }
    st.nominee(cx, pod, node)
        .and_then(|i| cx.reservations.get(i))
        .filter(|r| cx.cpusets.held(&r.uid).is_some())
        .map(of)
}

/// Chooses `n` CPUs: `preferred` (a reservation's remaining CPUs) first, then `free`
/// (unless `restricted`), within one NUMA node when `nc.aligned`.
fn choose(
    nc: &NodeCpus,
    free: &CpuSet,
    preferred: &CpuSet,
    restricted: bool,
    n: usize,
    policy: CpuBindPolicy,
    whole: bool,
) -> Result<CpuSet, &'static str> {
    let pick = |preferred: &CpuSet, free: &CpuSet| -> Result<CpuSet, &'static str> {
        let out = if preferred.len() >= n {
            take_cpus(&nc.layout, preferred, n, policy).ok_or(ERR_NOT_ENOUGH)?
        } else if restricted {
            return Err(ERR_RESERVATION_NOT_ENOUGH_CPUS);
        } else {
            let mut out = preferred.clone();
            out.union_with(
                &take_cpus(&nc.layout, free, n - preferred.len(), policy).ok_or(ERR_NOT_ENOUGH)?,
            );
            out
        };
        // A pod that requires FullPCPUs never shares a physical core.
        if whole && !whole_cores(&nc.layout, &out) {
            return Err(ERR_NOT_ENOUGH);
        }
        Ok(out)
    };
    if !nc.aligned {
        return pick(preferred, free);
    }
    let mut err = ERR_NUMA_ALIGNMENT;
    // Counted, not built: inline up to `ZONES` NUMA nodes (no machine has more).
    let mut zones: SmallVec<[(usize, u32); ZONES]> = nc
        .layout
        .numa_node_ids()
        .iter()
        .map(|z| (free.intersection_len(nc.layout.numa_node_cpus(*z)), *z))
        .collect();
    // The fullest NUMA node that fits first (MostAllocated).
    zones.sort_unstable();
    for (free_here, z) in zones {
        let zone = nc.layout.numa_node_cpus(z);
        // Too few CPUs here even with the preferred ones: `pick` would fail the same way,
        // without building the zone's sets (a restricted pick says why, so it runs).
        if !restricted && free_here + preferred.intersection_len(zone) < n {
            continue;
        }
        let p = preferred.intersection(zone);
        let f = free.intersection(zone);
        match pick(&p, &f) {
            Ok(c) => return Ok(c),
            Err(ERR_RESERVATION_NOT_ENOUGH_CPUS) => err = ERR_RESERVATION_NOT_ENOUGH_CPUS,
            Err(_) => {}
        }
    }
    Err(err)
}

/// NUMA nodes [`choose`] orders without the heap: Linux's default `NODES_SHIFT` on x86-64
/// gives 64 at most; a topology naming more is ordered on the heap.
const ZONES: usize = 64;

impl NodeNumaResource {
    /// The CPUs the pod would get on `node` (Filter and Reserve run the same choice).
    fn allocate(
        &self,
        cx: &Cluster,
        state: &CycleState,
        st: &State,
        pod: &PodInfo,
        node: &NodeInfo,
        reserving: bool,
    ) -> Result<CpuSet, Status> {
        let Some(nc) = cx.cpusets.node(&node.name) else {
            return Err(Status::unresolvable(ERR_INVALID_CPU_TOPOLOGY));
        };
        let imposed = node_policy(node);
        if let (Some(req), Some(imp)) = (st.required, imposed) {
            if req != imp {
                return Err(Status::unresolvable(ERR_CPU_BIND_POLICY_CONFLICT));
            }
        }
        let policy = imposed.or(st.required).unwrap_or(st.preferred);
        let whole = imposed.or(st.required) == Some(CpuBindPolicy::FullPcpus);
        if whole && !st.cpus.is_multiple_of(nc.layout.cpus_per_core()) {
            return Err(Status::unresolvable(ERR_SMT_ALIGNMENT));
        }
        let usable = nc.usable();
        let mut free = usable.clone();
        free.difference_with(&cx.cpusets.taken(node));
        let Some(s) = source(cx, state, pod, node, reserving) else {
            return choose(nc, &free, &CpuSet::new(), false, st.cpus, policy, whole)
                .map_err(Status::unschedulable);
        };
        let mut remaining = cx.cpusets.reservation_remaining(node, &s.uid);
        remaining.intersect_with(usable);
        choose(nc, &free, &remaining, s.restricted, st.cpus, policy, whole)
            .map_err(Status::unschedulable)
    }
}

impl Plugin for NodeNumaResource {
    fn name(&self) -> &'static str {
        crate::plugins::names::NODE_NUMA_RESOURCE
    }

    fn points(&self) -> Points {
        Points::PRE_FILTER
            | Points::FILTER
            | Points::PRE_SCORE
            | Points::SCORE
            | Points::RESERVE
            | Points::PRE_BIND
    }

    fn events_to_register(&self) -> EventsToRegister {
        // Cores come back when a pod or reservation leaves, a node's CPU topology or
        // reservation changes (NRT, node annotation) or a node's bind-policy label does.
        EventsToRegister::on(&[(
            kind::NODE_ADD
                | kind::NODE_ALLOCATABLE
                | kind::NODE_LABEL
                | kind::ASSIGNED_POD_DELETE
                | kind::RESERVATION
                | kind::NODE_TOPOLOGY,
            None,
        )])
    }

    fn pre_filter(&self, _cx: &Cluster, state: &mut CycleState, pod: &PodInfo) -> Status {
        state.cpuset = None;
        if !wants_exclusive_cpus(pod) {
            return Status::skip();
        }
        let spec = match ResourceSpec::from_annotations(pod.pod.metadata.annotations.as_ref()) {
            Ok(s) => s.unwrap_or_default(),
            Err(e) => return Status::unresolvable(e.to_string()),
        };
        let required = spec.required_cpu_bind_policy.map(|p| self.resolve(p));
        let preferred = self.resolve(spec.preferred_cpu_bind_policy.unwrap_or_default());
        let policy = required.unwrap_or(preferred);
        if policy == CpuBindPolicy::ConstrainedBurst {
            return Status::skip();
        }
        let milli = pod.requests[ResourceId::CPU];
        if milli <= 0 {
            return Status::skip();
        }
        if milli % 1000 != 0 {
            return Status::unresolvable(ERR_INVALID_REQUESTED_CPUS);
        }
        state.cpuset = Some(Box::new(State {
            cpus: usize::try_from(milli / 1000).unwrap_or(usize::MAX),
            required,
            preferred,
            allocated: None,
        }));
        Status::success()
    }

    fn filter(&self, cx: &Cluster, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        let Some(st) = state.cpuset.as_deref() else {
            return Status::success();
        };
        match self.allocate(cx, state, st, pod, node, false) {
            Ok(_) => Status::success(),
            Err(s) => s,
        }
    }

    fn pre_score(
        &self,
        _cx: &Cluster,
        state: &mut CycleState,
        _pod: &PodInfo,
        _nodes: &[NodeIdx],
    ) -> Status {
        if state.cpuset.is_none() {
            return Status::skip();
        }
        Status::success()
    }

    fn score(&self, cx: &Cluster, state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> i64 {
        let (Some(st), Some(nc)) = (state.cpuset.as_deref(), cx.cpusets.node(&node.name)) else {
            return 0;
        };
        let usable = nc.usable();
        if usable.is_empty() {
            return 0;
        }
        let free = usable.len() - usable.intersection_len(&cx.cpusets.taken(node));
        let left = free.saturating_sub(st.cpus);
        (crate::framework::plugin::MAX_NODE_SCORE as usize * left / usable.len()) as i64
    }

    fn reserve(
        &self,
        cx: &mut Cluster,
        state: &mut CycleState,
        pod: &PodInfo,
        node: NodeIdx,
    ) -> Status {
        let Some(st) = state.cpuset.as_deref() else {
            return Status::success();
        };
        let Some(info) = cx.cache.node(node) else {
            return Status::success();
        };
        let cpus = match self.allocate(cx, state, st, pod, info, true) {
            Ok(c) => c,
            Err(s) => return s,
        };
        cx.cpusets.hold(&pod.uid, cpus.clone());
        if let Some(st) = state.cpuset.as_deref_mut() {
            st.allocated = Some(cpus);
        }
        Status::success()
    }

    fn unreserve(&self, cx: &mut Cluster, state: &mut CycleState, pod: &PodInfo, _node: NodeIdx) {
        if let Some(st) = state.cpuset.as_deref_mut() {
            if st.allocated.take().is_some() {
                cx.cpusets.release(&pod.uid);
            }
        }
    }

    fn pre_bind(
        &self,
        cx: &Cluster,
        state: &CycleState,
        _pod: &PodInfo,
        node: &NodeInfo,
        annotations: &mut BTreeMap<String, String>,
    ) -> Status {
        let Some(cpus) = state.cpuset.as_deref().and_then(|s| s.allocated.as_ref()) else {
            return Status::success();
        };
        let Some(nc) = cx.cpusets.node(&node.name) else {
            return Status::success();
        };
        resource_status(nc, cpus).insert_into(annotations);
        Status::success()
    }
}

/// The `resource-status` of `cpus`: the CPU list and the CPUs taken from each NUMA node.
pub fn resource_status(nc: &NodeCpus, cpus: &CpuSet) -> ResourceStatus {
    ResourceStatus {
        cpuset: cpus.to_string(),
        numa_node_resources: nc
            .layout
            .per_numa_node(cpus)
            .into_iter()
            .map(|(node, n)| NumaNodeResource {
                node: i32::try_from(node).unwrap_or(i32::MAX),
                resources: [("cpu".to_string(), Quantity(n.to_string()))].into(),
            })
            .collect(),
    }
}
