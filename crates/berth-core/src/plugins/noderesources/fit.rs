//! NodeResourcesFit: Filter (does the pod's request fit what the node has left) and Score
//! (LeastAllocated, MostAllocated, RequestedToCapacityRatio).
//!
//! What a node "has left" is allocatable minus the requests of its pods minus what
//! Available reservations hold there. A reservation owner gets back what its matched
//! reservations hold on the node (the Reservation plugin's PreFilter computes that once per
//! pod, only for the nodes that have such reservations).

use std::borrow::Cow;

use crate::cache::Cluster;
use crate::framework::config::ConfigError;
use crate::framework::{Code, CycleState, Plugin, Points, Status};
use crate::model::node::NodeInfo;
use crate::model::pod::PodInfo;
use crate::plugins::args::decode;
use crate::resources::{ResourceId, Resources};

use super::args::{FitArgs, ScoringStrategy};
use super::scoring::Scorer;

/// kube-scheduler's reason when the node is at its pod limit.
pub const TOO_MANY_PODS: &str = "Too many pods";

/// `Insufficient <resource>`: fixed strings for the common resources so the per-node path
/// does not allocate.
pub fn insufficient_reason(name: &str) -> Cow<'static, str> {
    match name {
        "cpu" => Cow::Borrowed("Insufficient cpu"),
        "memory" => Cow::Borrowed("Insufficient memory"),
        "ephemeral-storage" => Cow::Borrowed("Insufficient ephemeral-storage"),
        other => Cow::Owned(format!("Insufficient {other}")),
    }
}

/// The NodeResourcesFit plugin.
#[derive(Debug)]
pub struct Fit {
    args: FitArgs,
    scorer: Scorer,
}

impl Fit {
    /// Builds the plugin from `NodeResourcesFitArgs`.
    pub fn new(args: Option<&serde_json::Value>) -> Result<Self, ConfigError> {
        let args: FitArgs = decode(args)?;
        args.validate()?;
        let strategy = args.scoring_strategy.clone().unwrap_or_default();
        Ok(Self {
            scorer: Scorer::new(&strategy),
            args,
        })
    }

    /// The scoring strategy in use.
    pub fn strategy(&self) -> ScoringStrategy {
        self.args.scoring_strategy.clone().unwrap_or_default()
    }

    fn ignored(&self, name: &str) -> bool {
        if !is_extended(name) {
            return false;
        }
        self.args.ignored_resources.iter().any(|r| r == name)
            || name
                .split_once('/')
                .is_some_and(|(g, _)| self.args.ignored_resource_groups.iter().any(|x| x == g))
    }
}

/// Extended resources are the ones with a domain prefix that are not `kubernetes.io/` native
/// ones, and not hugepages.
fn is_extended(name: &str) -> bool {
    name.contains('/') && !name.starts_with("kubernetes.io/") && !name.starts_with("requests.")
}

/// What the pod may use on the node: free capacity plus what its reservations give back.
pub(crate) fn available_for(state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Resources {
    let mut free = node.allocatable;
    free.sub(&node.requested);
    free.sub(&node.reserved);
    if let Some(r) = state.reservation.as_ref() {
        if let Some(back) = r.restored(pod, node.idx) {
            free.add(back);
        }
    }
    free
}

impl Plugin for Fit {
    fn name(&self) -> &'static str {
        super::super::names::NODE_RESOURCES_FIT
    }

    fn points(&self) -> Points {
        Points::PRE_FILTER | Points::FILTER | Points::PRE_SCORE | Points::SCORE
    }

    fn pre_filter(&self, _cx: &Cluster, _state: &mut CycleState, _pod: &PodInfo) -> Status {
        // The request is computed once when the pod is seen (PodInfo::requests).
        Status::success()
    }

    fn filter(&self, cx: &Cluster, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        let mut status = Status::success();
        let mut unresolvable = false;
        let reject = |status: &mut Status, reason: Cow<'static, str>| {
            *status = if status.is_success() {
                Status::unschedulable(reason)
            } else {
                std::mem::take(status).with_reason(reason)
            };
        };
        if !pod.is_reserve_pod() && node.pods.len() as i64 + 1 > node.allowed_pods {
            reject(&mut status, Cow::Borrowed(TOO_MANY_PODS));
        }
        if !pod.requests.is_zero() {
            let free = available_for(state, pod, node);
            for (id, want) in pod.requests.non_zero() {
                if want <= 0 || want <= free[id] {
                    continue;
                }
                let name = cx.names.name(id);
                if self.ignored(name) {
                    continue;
                }
                unresolvable |= want > node.allocatable[id];
                reject(&mut status, insufficient_reason(name));
            }
        }
        if unresolvable {
            status.set_code(Code::UnschedulableAndUnresolvable);
        }
        status
    }

    fn pre_score(
        &self,
        _cx: &Cluster,
        _state: &mut CycleState,
        _pod: &PodInfo,
        _nodes: &[crate::model::node::NodeIdx],
    ) -> Status {
        Status::success()
    }

    fn score(&self, cx: &Cluster, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> i64 {
        // Scoring counts reserved capacity as used for everyone, and gives an owner back what
        // its reservations hold, as Filter does.
        let mut requested = node.requested;
        requested[ResourceId::CPU] = node.non_zero_requested[ResourceId::CPU];
        requested[ResourceId::MEMORY] = node.non_zero_requested[ResourceId::MEMORY];
        requested.add(&node.reserved);
        if let Some(r) = state.reservation.as_ref() {
            if let Some(back) = r.restored(pod, node.idx) {
                requested.sub(back);
                requested.clamp_non_negative();
            }
        }
        self.scorer.score(
            &cx.names,
            &pod.non_zero,
            &pod.requests,
            &requested,
            &node.allocatable,
        )
    }
}
