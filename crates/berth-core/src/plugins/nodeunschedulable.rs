//! NodeUnschedulable: cordoned nodes take only pods that tolerate
//! `node.kubernetes.io/unschedulable:NoSchedule`.

use crate::cache::Cluster;
use crate::framework::events::{kind, EventsToRegister};
use crate::framework::{CycleState, Plugin, Points, Status};
use crate::model::node::NodeInfo;
use crate::model::pod::PodInfo;

/// kube-scheduler's `ErrReasonUnschedulable`.
pub const ERR_REASON_UNSCHEDULABLE: &str = "node(s) were unschedulable";
/// The taint key kube-scheduler matches tolerations against.
pub const TAINT_NODE_UNSCHEDULABLE: &str = "node.kubernetes.io/unschedulable";

/// The NodeUnschedulable plugin.
#[derive(Debug)]
pub struct NodeUnschedulable;

impl Plugin for NodeUnschedulable {
    fn name(&self) -> &'static str {
        super::names::NODE_UNSCHEDULABLE
    }
    fn points(&self) -> Points {
        Points::FILTER | Points::FILTER_FAST
    }

    fn events_to_register(&self) -> EventsToRegister {
        // Upstream: node add and taint changes (`spec.unschedulable` included).
        EventsToRegister::node_local(&[(kind::NODE_ADD | kind::NODE_TAINT, None)])
    }

    fn passes(&self, _cx: &Cluster, _state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> bool {
        !node.unschedulable
    }

    fn filter(&self, _cx: &Cluster, _state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        if !node.unschedulable {
            return Status::success();
        }
        let tolerated = pod.spec().tolerations.iter().flatten().any(|t| {
            let key_ok = t.key.as_deref() == Some(TAINT_NODE_UNSCHEDULABLE)
                || (t.key.as_deref().unwrap_or("").is_empty()
                    && t.operator.as_deref() == Some("Exists"));
            let effect_ok = t
                .effect
                .as_deref()
                .is_none_or(|e| e.is_empty() || e == "NoSchedule");
            key_ok && effect_ok
        });
        if tolerated {
            Status::success()
        } else {
            Status::unresolvable(ERR_REASON_UNSCHEDULABLE)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{node, pod};
    use serde_json::json;

    #[test]
    fn cordoned_nodes_reject_pods_without_a_toleration() {
        let cx = Cluster::default();
        let st = CycleState::default();
        let cordoned = node("n").unschedulable().build_info();
        let open = node("m").build_info();
        let p = pod("p").build_info();
        assert_eq!(
            NodeUnschedulable.filter(&cx, &st, &p, &cordoned),
            Status::unresolvable(ERR_REASON_UNSCHEDULABLE)
        );
        assert!(NodeUnschedulable.filter(&cx, &st, &p, &open).is_success());
        let tolerant = pod("t")
            .toleration(json!({"key": TAINT_NODE_UNSCHEDULABLE, "operator": "Exists", "effect": "NoSchedule"}))
            .build_info();
        assert!(NodeUnschedulable
            .filter(&cx, &st, &tolerant, &cordoned)
            .is_success());
        let wildcard = pod("w")
            .toleration(json!({"operator": "Exists"}))
            .build_info();
        assert!(NodeUnschedulable
            .filter(&cx, &st, &wildcard, &cordoned)
            .is_success());
        let wrong_effect = pod("x")
            .toleration(json!({"key": TAINT_NODE_UNSCHEDULABLE, "operator": "Exists", "effect": "NoExecute"}))
            .build_info();
        assert!(NodeUnschedulable
            .filter(&cx, &st, &wrong_effect, &cordoned)
            .is_rejected());
    }
}
