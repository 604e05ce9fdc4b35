//! InterPodAffinity: required pod affinity / anti-affinity as a filter (including the
//! anti-affinity of pods already placed), preferred terms as a score.
//!
//! Behaviour and reasons follow kube-scheduler's `interpodaffinity` plugin. A
//! `namespaceSelector` selects on the labels of the `Namespace` objects the driver feeds;
//! a namespace the core was never told about (the simulator feeds none) carries only its
//! `kubernetes.io/metadata.name` label (see the `terms` module). Reserve pods are not
//! checked against pods held by reservations (nothing to do yet). PreFilter's
//! AddPod/RemovePod extensions update the counts for preemption's dry run.

mod args;
pub(crate) mod counting;
#[cfg(test)]
mod counting_tests;
mod filtering;
mod scoring;
mod terms;
#[cfg(test)]
pub(crate) mod test_util;
mod topology;

pub use args::{InterPodAffinityArgs, DEFAULT_HARD_POD_AFFINITY_WEIGHT};

pub use filtering::{
    State, ERR_REASON_AFFINITY_RULES_NOT_MATCH, ERR_REASON_ANTI_AFFINITY_RULES_NOT_MATCH,
    ERR_REASON_EXISTING_ANTI_AFFINITY_RULES_NOT_MATCH,
};
pub use scoring::ScoreState;
pub use terms::NAMESPACE_NAME_LABEL;

use crate::cache::Cluster;
use crate::framework::config::ConfigError;
use crate::framework::events::{kind, EventsToRegister};
use crate::framework::{CycleState, Plugin, Points, Status};
use crate::model::node::{NodeIdx, NodeInfo};
use crate::model::pod::PodInfo;
use crate::plugins::args::decode;

/// The InterPodAffinity plugin.
#[derive(Debug)]
pub struct InterPodAffinity {
    args: InterPodAffinityArgs,
}

/// Whether the remembered answers are the recount's for `pod`: no reservation stand-in is
/// hidden from it (it is neither a reservation nor reservation-ignored, and none of the
/// reservations it matched hides a stand-in).
fn counts_apply(state: &CycleState) -> bool {
    state.reservation.as_ref().is_none_or(|r| r.hides_nothing())
}

impl InterPodAffinity {
    /// Builds the plugin from `InterPodAffinityArgs`.
    pub fn new(args: Option<&serde_json::Value>) -> Result<Self, ConfigError> {
        let args: InterPodAffinityArgs = decode(args)?;
        args.validate()?;
        Ok(Self { args })
    }

    /// The args in use.
    pub fn args(&self) -> &InterPodAffinityArgs {
        &self.args
    }
}

impl Plugin for InterPodAffinity {
    fn name(&self) -> &'static str {
        crate::plugins::names::INTER_POD_AFFINITY
    }

    fn points(&self) -> Points {
        Points::PRE_FILTER | Points::FILTER | Points::PRE_SCORE | Points::SCORE
    }

    fn events_to_register(&self) -> EventsToRegister {
        // Upstream: pods and node add/label; reservations stand in for pods.
        EventsToRegister::on(&[(
            kind::NODE_ADD
                | kind::NODE_LABEL
                | kind::ASSIGNED_POD_ADD
                | kind::ASSIGNED_POD_DELETE
                | kind::RESERVATION,
            None,
        )])
    }

    fn pre_filter(&self, cx: &Cluster, state: &mut CycleState, pod: &PodInfo) -> Status {
        match filtering::pre_filter(cx, state, pod) {
            Ok(Some(s)) => {
                state.inter_pod_affinity = Some(Box::new(s));
                Status::success()
            }
            Ok(None) => Status::skip(),
            Err(st) => st,
        }
    }

    fn add_pod(
        &self,
        cx: &Cluster,
        state: &mut CycleState,
        pod: &PodInfo,
        add: &PodInfo,
        node: &NodeInfo,
    ) {
        filtering::update_with_pod(cx, state, pod, add, node, 1);
    }

    fn remove_pod(
        &self,
        cx: &Cluster,
        state: &mut CycleState,
        pod: &PodInfo,
        remove: &PodInfo,
        node: &NodeInfo,
    ) {
        filtering::update_with_pod(cx, state, pod, remove, node, -1);
    }

    fn filter(&self, _cx: &Cluster, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        match state.inter_pod_affinity.as_deref() {
            Some(s) => filtering::filter(s, pod, node),
            None => Status::error("InterPodAffinity: PreFilter did not run"),
        }
    }

    fn pre_score(
        &self,
        cx: &Cluster,
        state: &mut CycleState,
        pod: &PodInfo,
        nodes: &[NodeIdx],
    ) -> Status {
        state.inter_pod_affinity_score = None;
        match scoring::pre_score(&self.args, cx, state, pod, nodes) {
            Ok(s) => {
                state.inter_pod_affinity_score = Some(Box::new(s));
                Status::success()
            }
            Err(st) => st,
        }
    }

    fn score(&self, _cx: &Cluster, state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> i64 {
        state
            .inter_pod_affinity_score
            .as_deref()
            .map_or(0, |s| s.score(node))
    }

    fn normalize_scores(&self, state: &CycleState, _pod: &PodInfo, scores: &mut [i64]) {
        if let Some(s) = state.inter_pod_affinity_score.as_deref() {
            s.normalize(scores);
        }
    }
}
