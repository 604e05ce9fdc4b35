//! NodeName: a pod with `spec.nodeName` fits only that node.
//!
//! The simulator binds pods that arrive with `spec.nodeName` directly, so in practice this
//! filter matters for reserve pods pinned by `template.spec.nodeName` and for preemption.

use crate::cache::Cluster;
use crate::framework::events::{kind, EventsToRegister};
use crate::framework::{CycleState, Plugin, Points, Status};
use crate::model::node::NodeInfo;
use crate::model::pod::PodInfo;

/// kube-scheduler's `ErrReason`.
pub const ERR_REASON: &str = "node(s) didn't match the requested node name";

/// The NodeName plugin.
#[derive(Debug)]
pub struct NodeName;

impl Plugin for NodeName {
    fn name(&self) -> &'static str {
        super::names::NODE_NAME
    }
    fn points(&self) -> Points {
        Points::FILTER | Points::FILTER_FAST
    }

    fn events_to_register(&self) -> EventsToRegister {
        // Upstream: node add.
        EventsToRegister::node_local(&[(kind::NODE_ADD, None)])
    }

    fn passes(&self, _cx: &Cluster, _state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> bool {
        pod.node_name.as_ref().is_none_or(|n| **n == *node.name)
    }

    /// Most pods name no node, and then every node passes: the batch is not walked.
    fn passes_each(
        &self,
        cx: &Cluster,
        state: &CycleState,
        pod: &PodInfo,
        nodes: &[&NodeInfo],
        pass: &mut u64,
    ) {
        if pod.node_name.is_some() {
            crate::framework::filter_plan::keep(pass, nodes, |n| self.passes(cx, state, pod, n));
        }
    }

    fn filter(&self, _cx: &Cluster, _state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        match &pod.node_name {
            Some(n) if **n != *node.name => Status::unresolvable(ERR_REASON),
            _ => Status::success(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{node, pod};

    #[test]
    fn only_the_named_node_fits() {
        let cx = Cluster::default();
        let st = CycleState::default();
        let n1 = node("n1").build_info();
        let n2 = node("n2").build_info();
        let p = pod("p").node_name("n1").build_info();
        assert!(NodeName.filter(&cx, &st, &p, &n1).is_success());
        let s = NodeName.filter(&cx, &st, &p, &n2);
        assert_eq!(s, Status::unresolvable(ERR_REASON));
        assert!(NodeName
            .filter(&cx, &st, &pod("q").build_info(), &n2)
            .is_success());
    }
}
