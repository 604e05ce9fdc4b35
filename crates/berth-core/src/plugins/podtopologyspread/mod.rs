//! PodTopologySpread: `topologySpreadConstraints` with `whenUnsatisfiable: DoNotSchedule` as
//! a filter and `ScheduleAnyway` as a score, as kube-scheduler's `podtopologyspread` plugin
//! does, with `minDomains`, `nodeAffinityPolicy` (default Honor), `nodeTaintsPolicy`
//! (default Ignore) and `matchLabelKeys`.
//!
//! Pods count when they are in the incoming pod's namespace, match the constraint's
//! selector, are not terminating, and sit on a node that has every topology key and passes
//! the constraint's inclusion policies. Default constraints are described on
//! [`PodTopologySpreadArgs`]. PreFilter's AddPod/RemovePod extensions update the per-domain
//! counts for preemption's dry run.

mod args;
mod common;
mod counting;
#[cfg(test)]
mod counting_tests;
mod filtering;
mod scoring;

pub use args::{DefaultingType, PodTopologySpreadArgs};
pub use common::{LABEL_HOSTNAME, LABEL_ZONE};
pub use filtering::{State, ERR_REASON_CONSTRAINTS_NOT_MATCH, ERR_REASON_NODE_LABEL_NOT_MATCH};
pub use scoring::ScoreState;

use berth_api::k8s_openapi::api::core::v1::TopologySpreadConstraint;

use crate::cache::Cluster;
use crate::framework::config::ConfigError;
use crate::framework::events::{kind, EventsToRegister};
use crate::framework::{CycleState, Plugin, Points, Status};
use crate::model::node::{NodeIdx, NodeInfo};
use crate::model::pod::PodInfo;
use crate::plugins::args::decode;

/// The PodTopologySpread plugin.
#[derive(Debug)]
pub struct PodTopologySpread {
    /// Constraints for pods without their own (system or listed).
    defaults: Vec<TopologySpreadConstraint>,
    /// `defaultingType: System`: nodes without a zone label still spread by hostname.
    system_defaulted: bool,
}

impl PodTopologySpread {
    /// Builds the plugin from `PodTopologySpreadArgs`.
    pub fn new(args: Option<&serde_json::Value>) -> Result<Self, ConfigError> {
        let args: PodTopologySpreadArgs = decode(args)?;
        args.validate()?;
        Ok(Self {
            defaults: args.effective_defaults(),
            system_defaulted: args.defaulting_type == DefaultingType::System,
        })
    }
}

impl Plugin for PodTopologySpread {
    fn name(&self) -> &'static str {
        crate::plugins::names::POD_TOPOLOGY_SPREAD
    }

    fn points(&self) -> Points {
        Points::PRE_FILTER | Points::FILTER | Points::PRE_SCORE | Points::SCORE
    }

    fn events_to_register(&self) -> EventsToRegister {
        // Upstream: pods and node add/delete/label/taint; reservations stand in for pods.
        EventsToRegister::on(&[(
            kind::NODE_ADD
                | kind::NODE_LABEL
                | kind::NODE_TAINT
                | kind::NODE_DELETE
                | kind::ASSIGNED_POD_ADD
                | kind::ASSIGNED_POD_DELETE
                | kind::RESERVATION,
            None,
        )])
    }

    fn pre_filter(&self, cx: &Cluster, state: &mut CycleState, pod: &PodInfo) -> Status {
        match filtering::pre_filter(&self.defaults, cx, state, pod) {
            Ok(Some(s)) => {
                state.pod_topology_spread = Some(Box::new(s));
                Status::success()
            }
            Ok(None) => Status::skip(),
            Err(st) => st,
        }
    }

    fn add_pod(
        &self,
        _cx: &Cluster,
        state: &mut CycleState,
        pod: &PodInfo,
        add: &PodInfo,
        node: &NodeInfo,
    ) {
        filtering::update_with_pod(state, pod, add, node, 1);
    }

    fn remove_pod(
        &self,
        _cx: &Cluster,
        state: &mut CycleState,
        pod: &PodInfo,
        remove: &PodInfo,
        node: &NodeInfo,
    ) {
        filtering::update_with_pod(state, pod, remove, node, -1);
    }

    fn filter(&self, _cx: &Cluster, state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> Status {
        match state.pod_topology_spread.as_deref() {
            Some(s) => filtering::filter(s, node),
            None => Status::error("PodTopologySpread: PreFilter did not run"),
        }
    }

    fn pre_score(
        &self,
        cx: &Cluster,
        state: &mut CycleState,
        pod: &PodInfo,
        nodes: &[NodeIdx],
    ) -> Status {
        state.pod_topology_spread_score = None;
        match scoring::pre_score(&self.defaults, self.system_defaulted, cx, state, pod, nodes) {
            Ok(s) => {
                state.pod_topology_spread_score = Some(Box::new(s));
                Status::success()
            }
            Err(st) => st,
        }
    }

    fn score(&self, _cx: &Cluster, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> i64 {
        state
            .pod_topology_spread_score
            .as_deref()
            .map_or(0, |s| s.score(pod, node))
    }

    fn normalize_scores(&self, state: &CycleState, _pod: &PodInfo, scores: &mut [i64]) {
        if let Some(s) = state.pod_topology_spread_score.as_deref() {
            s.normalize(scores);
        }
    }
}
