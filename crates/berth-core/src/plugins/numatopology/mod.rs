//! NodeResourceTopologyMatch: NUMA-aware Filter and Score on `NodeResourceTopology` data,
//! through the reserve cache (scheduler-plugins' plugin of that name, with its
//! "overreserve" cache; see `numa` for the domain rules).
//!
//! - PreFilter builds the pod's per-container request once; BestEffort pods without devices
//!   skip Filter (they always pass), as does every pod while no node has an NRT.
//! - Filter reads the node's cached view: no NRT passes, unusable data (foreign pods, an
//!   in-flight reservation) rejects, else the policy check. A rejection's reason is the
//!   fixed string scheduler-plugins returns (`cannot align container`, `cannot align init
//!   container`, `cannot align pod`), so kube-scheduler's per-reason counting reads
//!   `0/2 nodes are available: 2 cannot align container.`; which container and resource did
//!   not fit is per-node detail, given by [`explain`]. When the node's data may be stale
//!   (pods reserved since its NRT, or a newer NRT held back), a second fixed reason says so:
//!   the node is being resynced, or why its last resync failed (fingerprint mismatch, no
//!   fingerprint).
//! - Filter cannot write (`&Cluster`; preemption re-runs it on copies), so the streaks that
//!   make a node dirty are recorded after the loop, from the verdicts the scheduler hands
//!   to [`Plugin::filter_feedback`].
//! - Score uses the configured strategy; Reserve/Unreserve account the pod in the cache.

use berth_api::k8s_openapi::api::core::v1::Container;

use crate::cache::Cluster;
use crate::framework::config::ConfigError;
use crate::framework::events::{kind, EventsToRegister};
use crate::framework::{CycleState, Plugin, Points, Status};
use crate::model::node::{NodeIdx, NodeInfo};
use crate::model::pod::{PodInfo, QosClass as PodQos};
use crate::numa::{
    filter_node, filter_node_kind, FilterVerdict, NodeAllocatable, NodeNumaView,
    NodeResourceTopologyMatchArgs, NumaPluginConfig, NumaReject, PodNumaRequest, QosClass,
    ResyncCheck, ShapeId, StaleReason, UnusableReason,
};
use crate::resources::ResourceNames;
use crate::time::Time;

pub use crate::numa::{pod_numa_request, NumaCluster, NumaMetrics};

/// Second reason on a rejected node whose data may be stale (pods reserved since its NRT,
/// or a newer NRT held back until it resyncs): the rejection may go away at a resync.
pub const REASON_RESYNC_PENDING: &str = "node(s) topology data is being resynced";
/// Second reason when the last resync found the NRT's pod fingerprint different from the
/// pods the scheduler believes run on the node.
pub const REASON_FINGERPRINT_MISMATCH: &str =
    "node(s) topology data is stale: NRT pod fingerprint does not match the pods on the node";
/// Second reason when the NRT carries no pod fingerprint (the node can never resync).
pub const REASON_NO_FINGERPRINT: &str =
    "node(s) topology data is stale: NRT has no pod fingerprint to resync with";
/// A node made unusable by pods another scheduler bound there.
pub const REASON_FOREIGN_PODS: &str =
    "node(s) topology data is being resynced: pods bound by another scheduler";
/// A node made unusable by a reservation in flight (`discardReservedNodes`).
pub const REASON_RESERVATION_IN_FLIGHT: &str =
    "node(s) topology data is being resynced: a NUMA reservation is in flight";

/// Per-cycle state.
#[derive(Debug, Clone)]
pub struct State {
    request: PodNumaRequest,
    /// The request's interned shape (with this plugin's scoring strategy), under which the
    /// cache remembers each node's verdict and score; interned at the pod's Reserve, so
    /// the first pod of a shape has none.
    shape: Option<ShapeId>,
    /// Nodes Score looked up (for the API-read figures).
    score_lookups: u64,
}

/// The NodeResourceTopologyMatch plugin.
#[derive(Debug)]
pub struct NodeResourceTopologyMatch {
    config: NumaPluginConfig,
}

impl NodeResourceTopologyMatch {
    /// Builds the plugin from its args (`NodeResourceTopologyMatchArgs`, upstream names).
    /// The first invalid field is named in the error.
    pub fn new(args: Option<&serde_json::Value>) -> Result<Self, ConfigError> {
        let args: NodeResourceTopologyMatchArgs = super::args::decode(args)?;
        let config = args.validate().map_err(|e| {
            let field = e
                .errors
                .first()
                .map(|f| f.field.clone())
                .unwrap_or_default();
            ConfigError::new(field, e.to_string())
        })?;
        Ok(Self { config })
    }

    /// The validated configuration.
    pub fn config(&self) -> &NumaPluginConfig {
        &self.config
    }
}

/// The node's allocatable as the filter asks about it (does the node report a resource?).
struct Allocatable<'a> {
    names: &'a ResourceNames,
    node: &'a NodeInfo,
}

impl NodeAllocatable for Allocatable<'_> {
    fn has(&self, resource: &str) -> bool {
        self.names
            .get(resource)
            .is_some_and(|id| self.node.allocatable[id] > 0)
    }
}

/// Whether Filter could pass `node` for `pod` now, for queueing hints: the check Filter runs,
/// on the node's current view. A request that cannot be read may fit (Filter reports it).
pub fn may_fit(cx: &Cluster, pod: &PodInfo, node: &NodeInfo) -> bool {
    if !cx.numa.has_topology() {
        return true;
    }
    let Ok(request) = crate::numa::pod_numa_request_kept(pod) else {
        return true;
    };
    let alloc = Allocatable {
        names: &cx.cache.names,
        node,
    };
    match filter_node_kind(cx.numa.view_node(node), request, &alloc) {
        Ok(()) => true,
        Err(r) => r.is_internal_error(),
    }
}

/// The Filter status of a verdict: the fixed reasons, a second one when the node's data
/// may be stale.
fn status(verdict: FilterVerdict) -> Status {
    match verdict {
        FilterVerdict::Pass => Status::success(),
        FilterVerdict::Unusable(UnusableReason::ReservationInFlight) => {
            Status::unschedulable(REASON_RESERVATION_IN_FLIGHT)
        }
        FilterVerdict::Unusable(UnusableReason::ForeignPods) => {
            Status::unschedulable(REASON_FOREIGN_PODS)
        }
        FilterVerdict::Reject { kind, .. } if kind.is_internal_error() => {
            Status::error(kind.reason())
        }
        FilterVerdict::Reject { kind, stale: None } => Status::unschedulable(kind.reason()),
        FilterVerdict::Reject {
            kind,
            stale: Some(stale),
        } => Status::unschedulable(kind.reason()).with_reason(match stale {
            StaleReason::FingerprintMismatch => REASON_FINGERPRINT_MISMATCH,
            StaleReason::NoFingerprint => REASON_NO_FINGERPRINT,
            StaleReason::ResyncPending => REASON_RESYNC_PENDING,
        }),
    }
}

/// Why the plugin's Filter rejects `node` for `pod`, in detail (the container by name and
/// index, the resource, whether the node's topology data is stale), or `None` when it passes.
/// The Filter reason is a fixed string for every node; this is the per-node explanation a
/// person asks for about one pod on one node, computed on demand, never on the filter path.
pub fn explain(cx: &Cluster, pod: &PodInfo, node: &NodeInfo) -> Option<String> {
    if !cx.numa.has_topology() {
        return None;
    }
    let request = match pod_numa_request(pod) {
        Ok(r) => r,
        Err(e) => return Some(format!("reading the pod's requests: {e}")),
    };
    if request.qos() == QosClass::BestEffort && !request.includes_non_native() {
        return None;
    }
    let view = cx.numa.view(&node.name);
    let alloc = Allocatable {
        names: &cx.cache.names,
        node,
    };
    let r = filter_node(view, &request, &alloc).err()?;
    let spec = pod.pod.spec.as_ref();
    let mut out = match &r {
        NumaReject::InitContainer { index, resource } => format!(
            "cannot align init container {:?} (index {index}): {resource} fits no single NUMA zone",
            container_name(spec.and_then(|s| s.init_containers.as_deref()), *index)
        ),
        NumaReject::Container { index, resource } => format!(
            "cannot align container {:?} (index {index}): {resource} fits no single NUMA zone",
            container_name(spec.map(|s| s.containers.as_slice()), *index)
        ),
        NumaReject::InvalidTopologyData => match view {
            NodeNumaView::Unusable(UnusableReason::ReservationInFlight) => {
                REASON_RESERVATION_IN_FLIGHT.to_string()
            }
            _ => REASON_FOREIGN_PODS.to_string(),
        },
        other => other.to_string(),
    };
    let cache = cx.numa.cache();
    if !matches!(r, NumaReject::InvalidTopologyData) && cache.is_stale(&node.name) {
        out.push_str("; ");
        out.push_str(match cache.resync_check(&node.name) {
            Some(ResyncCheck::Mismatch) => REASON_FINGERPRINT_MISMATCH,
            Some(ResyncCheck::NoFingerprint) => REASON_NO_FINGERPRINT,
            None => REASON_RESYNC_PENDING,
        });
    }
    Some(out)
}

/// The name of container `index` of `list` (empty when the pod has no such container).
fn container_name(list: Option<&[Container]>, index: usize) -> &str {
    list.and_then(|l| l.get(index))
        .map_or("", |c| c.name.as_str())
}

impl Plugin for NodeResourceTopologyMatch {
    fn name(&self) -> &'static str {
        crate::plugins::names::NODE_RESOURCE_TOPOLOGY_MATCH
    }

    fn points(&self) -> Points {
        Points::PRE_FILTER
            | Points::FILTER
            | Points::FILTER_FEEDBACK
            | Points::PRE_SCORE
            | Points::SCORE
            | Points::RESERVE
    }

    fn events_to_register(&self) -> EventsToRegister {
        // scheduler-plugins': pod deletion, node add/update and its NRT objects. A NUMA event
        // on a node helps only a pod the node's NUMA zones can align.
        EventsToRegister::node_local(&[(
            kind::NODE_ADD
                | kind::NODE_ALLOCATABLE
                | kind::ASSIGNED_POD_DELETE
                | kind::NODE_TOPOLOGY,
            None,
        )])
        .with_node_check(numa_node_check)
    }

    fn init(&self, cx: &mut Cluster) {
        if !cx.numa.is_active() {
            cx.numa = NumaCluster::new(&self.config);
        }
    }

    fn pre_filter(&self, cx: &Cluster, state: &mut CycleState, pod: &PodInfo) -> Status {
        if !cx.numa.has_topology() {
            return Status::skip();
        }
        let request = match pod_numa_request(pod) {
            Ok(r) => r,
            Err(e) => return Status::error(format!("reading the pod's requests: {e}")),
        };
        let best_effort = request.qos() == QosClass::BestEffort && !request.includes_non_native();
        let shape = cx.numa.cache().shape(&self.config.scoring, &request);
        state.numa = Some(Box::new(State {
            request,
            shape,
            score_lookups: 0,
        }));
        if best_effort {
            return Status::skip();
        }
        Status::success()
    }

    fn filter(&self, cx: &Cluster, state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> Status {
        let Some(s) = state.numa.as_deref() else {
            return Status::error("NodeResourceTopologyMatch: no PreFilter state");
        };
        let alloc = Allocatable {
            names: &cx.cache.names,
            node,
        };
        let slot = cx.numa.slot(node);
        status(
            cx.numa
                .cache()
                .filter_verdict_at(slot, s.shape, &s.request, &alloc),
        )
    }

    fn filter_feedback(
        &self,
        cx: &mut Cluster,
        _pod: &PodInfo,
        verdicts: &[(NodeIdx, bool)],
        now: Time,
    ) {
        for &(idx, passed) in verdicts {
            cx.numa.record_filter_node(&cx.cache, idx, passed, now);
        }
    }

    fn pre_score(
        &self,
        cx: &Cluster,
        state: &mut CycleState,
        pod: &PodInfo,
        nodes: &[NodeIdx],
    ) -> Status {
        // Non-Guaranteed pods score 100 everywhere and no NRT means 0 everywhere: neither
        // changes the ranking.
        if pod.qos != PodQos::Guaranteed || !cx.numa.has_topology() {
            return Status::skip();
        }
        match state.numa.as_mut() {
            Some(s) => s.score_lookups = nodes.len() as u64,
            None => match pod_numa_request(pod) {
                Ok(request) => {
                    let shape = cx.numa.cache().shape(&self.config.scoring, &request);
                    state.numa = Some(Box::new(State {
                        request,
                        shape,
                        score_lookups: nodes.len() as u64,
                    }))
                }
                Err(e) => return Status::error(format!("reading the pod's requests: {e}")),
            },
        }
        Status::success()
    }

    fn score(&self, cx: &Cluster, state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> i64 {
        match state.numa.as_deref() {
            Some(s) => cx.numa.cache().score_at(
                &self.config.scoring,
                cx.numa.slot(node),
                s.shape,
                &s.request,
            ),
            None => 0,
        }
    }

    fn reserve(
        &self,
        cx: &mut Cluster,
        state: &mut CycleState,
        pod: &PodInfo,
        node: NodeIdx,
    ) -> Status {
        // A reservation's stand-in never runs on the node: the agent will not count it and
        // its owners are accounted when they bind.
        if pod.is_reserve_pod() || !cx.numa.has_topology() {
            return Status::success();
        }
        let Some(name) = cx.cache.node(node).map(|n| n.name.clone()) else {
            return Status::success();
        };
        if let Some(s) = state.numa.as_ref() {
            cx.numa.record_score_lookups(s.score_lookups);
            cx.numa.reserve(&name, pod, &s.request);
            cx.numa.intern_shape(&self.config.scoring, &s.request);
            return Status::success();
        }
        match pod_numa_request(pod) {
            Ok(r) => {
                cx.numa.reserve(&name, pod, &r);
                Status::success()
            }
            Err(e) => Status::error(format!("reading the pod's requests: {e}")),
        }
    }

    fn unreserve(&self, cx: &mut Cluster, _state: &mut CycleState, pod: &PodInfo, node: NodeIdx) {
        if let Some(name) = cx.cache.node(node).map(|n| n.name.clone()) {
            cx.numa.unreserve(&name, &pod.uid);
        }
    }
}

/// NodeResourceTopologyMatch's node check for the queue: after a NUMA event on `node`, the
/// pod may align there ([`may_fit`]); other events say nothing new about alignment.
fn numa_node_check(
    cx: &Cluster,
    event: &crate::framework::events::ClusterEvent,
    pod: &PodInfo,
    node: &NodeInfo,
) -> bool {
    event.kinds & kind::NODE_TOPOLOGY == 0 || may_fit(cx, pod, node)
}

#[cfg(test)]
mod slot_tests;
#[cfg(test)]
mod tests;
