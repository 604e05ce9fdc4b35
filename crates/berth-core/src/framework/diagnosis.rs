//! Why a pod fits no node, rendered in kube-scheduler's words.
//!
//! The per-node statuses are folded into a histogram of reasons as they come, so a cycle
//! over 5,000 nodes keeps a handful of counters, not 5,000 statuses; the text is rendered
//! once, when the cycle fails.

use crate::framework::reason_counts::ReasonCounts;
use crate::framework::status::{Code, Status};

/// kube-scheduler's `ErrNoNodesAvailable`, when the cluster has no node at all.
pub const NO_NODES_AVAILABLE: &str = "no nodes available to schedule pods";

/// kube-scheduler's `NoNodeAvailableMsg`.
pub const NO_NODE_AVAILABLE: &str = "nodes are available";

/// The result of a failed search for a node.
#[derive(Debug, Clone, Default)]
pub struct Diagnosis {
    /// Reason -> number of nodes that gave it. A cycle that rejects most nodes adds a
    /// reason per node, nearly always one of a few static strings: found by address
    /// ([`ReasonCounts`]), not hashed. The order never shows (the message sorts them).
    reasons: ReasonCounts,
    /// Message of a PreFilter rejection (then per-node reasons are empty).
    pub pre_filter_msg: Option<String>,
    /// Message of PostFilter (preemption), appended last, as the plugins worded it.
    pub post_filter_msg: Option<String>,
    /// Plugins that rejected the pod, for queueing decisions.
    pub unschedulable_plugins: Vec<&'static str>,
    /// Whether any rejection was resolvable (preemption may help somewhere).
    pub any_resolvable: bool,
    /// Whether an internal error happened.
    pub error: Option<String>,
    /// Nodes whose status was recorded.
    pub nodes_rejected: u32,
}

impl Diagnosis {
    /// Records a node's rejection.
    pub fn add(&mut self, status: &Status) {
        self.nodes_rejected += 1;
        self.reasons.add_each(status.reasons());
        if status.code() == Code::Unschedulable {
            self.any_resolvable = true;
        }
        if status.code() == Code::Error && self.error.is_none() {
            self.error = Some(status.message());
        }
        // Plugin names are static: the same plugin gives the same address, so the common
        // case (already listed) is an address comparison, not a string comparison.
        let p = status.plugin();
        if !p.is_empty()
            && !self
                .unschedulable_plugins
                .iter()
                .any(|q| (q.as_ptr() == p.as_ptr() && q.len() == p.len()) || *q == p)
        {
            self.unschedulable_plugins.push(p);
        }
    }

    /// Records `count` nodes rejected for one reason without evaluating them (nodes a
    /// PreFilter result left out).
    pub fn add_absent(&mut self, reason: String, count: u32) {
        if count == 0 {
            return;
        }
        self.nodes_rejected += count;
        self.reasons.add_owned(reason, count);
    }

    /// Forgets everything recorded.
    pub fn clear(&mut self) {
        self.reasons.clear();
        self.pre_filter_msg = None;
        self.post_filter_msg = None;
        self.unschedulable_plugins.clear();
        self.any_resolvable = false;
        self.error = None;
        self.nodes_rejected = 0;
    }

    /// Whether some node was rejected with `reason`.
    pub fn counted(&self, reason: &str) -> bool {
        self.reasons.iter().any(|(r, n)| r == reason && n > 0)
    }

    /// `0/N nodes are available: 1 node(s) had untolerated taint(s), 2 Insufficient cpu.`
    /// Reasons are "count reason" strings sorted as strings, as kube-scheduler's `FitError`
    /// sorts them.
    pub fn render(&self, num_all_nodes: usize) -> String {
        if num_all_nodes == 0 {
            return NO_NODES_AVAILABLE.to_string();
        }
        let mut msg = format!("0/{num_all_nodes} {NO_NODE_AVAILABLE}:");
        if let Some(pre) = &self.pre_filter_msg {
            msg.push_str(&format!(" {pre}."));
        } else {
            let mut parts: Vec<String> = self
                .reasons
                .iter()
                .map(|(r, n)| format!("{n} {r}"))
                .collect();
            parts.sort();
            if !parts.is_empty() {
                msg.push_str(&format!(" {}.", parts.join(", ")));
            }
        }
        // kube-scheduler appends PostFilter's message after a space, as its plugins worded
        // it (`FitError.Error`).
        if let Some(post) = &self.post_filter_msg {
            msg.push(' ');
            msg.push_str(post);
        }
        msg
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_kube_schedulers_fit_error() {
        let mut d = Diagnosis::default();
        d.add(&Status::unschedulable("Insufficient cpu"));
        d.add(&Status::unschedulable("Insufficient cpu"));
        d.add(&Status::unresolvable("node(s) had untolerated taint(s)"));
        assert_eq!(
            d.render(3),
            "0/3 nodes are available: 1 node(s) had untolerated taint(s), 2 Insufficient cpu."
        );
    }

    #[test]
    fn several_reasons_of_one_node_each_count() {
        let mut d = Diagnosis::default();
        d.add(&Status::unschedulable("Insufficient cpu").with_reason("Insufficient memory"));
        assert_eq!(
            d.render(1),
            "0/1 nodes are available: 1 Insufficient cpu, 1 Insufficient memory."
        );
    }

    #[test]
    fn pre_filter_message_replaces_the_histogram_and_post_filter_is_appended() {
        let d = Diagnosis {
            pre_filter_msg: Some("node(s) didn't satisfy plugin(s) [NodeAffinity]".into()),
            post_filter_msg: Some(
                "preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling."
                    .into(),
            ),
            ..Diagnosis::default()
        };
        assert_eq!(
            d.render(2),
            "0/2 nodes are available: node(s) didn't satisfy plugin(s) [NodeAffinity]. preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling."
        );
        assert_eq!(Diagnosis::default().render(0), NO_NODES_AVAILABLE);
    }
}
