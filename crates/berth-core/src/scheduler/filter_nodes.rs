//! The Filter loop over the sampled nodes (kube-scheduler's `findNodesThatPassFilters`).
//!
//! Nodes are filtered in batches of up to [`BATCH`], never more than are still needed:
//! kube-scheduler stops at `numFeasibleNodesToFind`, and so does this loop, at the same
//! node, so the nodes filtered, the rotation's next start and the diagnosis are the same
//! as one node at a time. A batch lets each Filter plugin answer for all its nodes in one
//! call ([`FilterPlan::run_batch`]) instead of one dynamic call per plugin per node.

use crate::cache::Cluster;
use crate::framework::filter_plan::{by_position, ones, BATCH};
use crate::framework::nominator::{run_filter_plugins_with_nominated_pods, Nominator};
use crate::framework::{Code, CycleState, Diagnosis, FilterPlan, Status};
use crate::model::node::{NodeIdx, NodeInfo};
use crate::model::pod::PodInfo;
use crate::model::NodeSet;

/// Where the Filter loop writes its verdicts.
pub(super) struct Found<'a> {
    /// Nodes that passed, in the order filtered.
    pub feasible: &'a mut Vec<NodeIdx>,
    /// Nodes rejected as `Unschedulable` (preemption may help there).
    pub resolvable: &'a mut Vec<NodeIdx>,
    /// Why nodes were rejected.
    pub diag: &'a mut Diagnosis,
    /// Each node's verdict (the rejecting plugin, `""` when it passed), when the profile
    /// has Filter feedback plugins.
    pub log: Option<&'a mut Vec<(NodeIdx, &'static str)>>,
    /// Nodes filtered, counted.
    pub nodes_filtered: &'a mut u64,
}

impl Found<'_> {
    /// Records one node's verdict: `None` when it passed.
    pub fn record(&mut self, idx: NodeIdx, rejection: Option<&Status>) {
        match rejection {
            None => {
                if let Some(log) = self.log.as_deref_mut() {
                    log.push((idx, ""));
                }
                self.feasible.push(idx);
            }
            Some(st) => {
                if let Some(log) = self.log.as_deref_mut() {
                    log.push((idx, st.plugin()));
                }
                if st.code() == Code::Unschedulable {
                    self.resolvable.push(idx);
                }
                self.diag.add(st);
            }
        }
    }
}

/// The cycle's inputs to the Filter loop, but for the cycle state: that changes between
/// the preferred nodes and the sample ([`CycleState::outside_preferred`]), so each
/// [`Filtering::rotation`] is handed it.
pub(super) struct Filtering<'a, 'p> {
    pub plan: &'a FilterPlan<'p>,
    pub cx: &'a Cluster,
    pub pod: &'a PodInfo,
    pub nominator: &'a Nominator,
    /// The nodes with pods nominated to them ([`Nominator::nodes_in`]), `None` when no pod
    /// is nominated anywhere.
    pub nominated_nodes: Option<&'a NodeSet>,
}

impl Filtering<'_, '_> {
    /// Filters one node with the pods nominated to it on it; `None` when it passes.
    fn one(&self, state: &CycleState, node: &NodeInfo) -> Option<Status> {
        let st = run_filter_plugins_with_nominated_pods(
            self.plan,
            self.cx,
            state,
            self.pod,
            node,
            self.nominator,
        );
        (!st.is_success()).then_some(st)
    }

    /// Filters the nodes of `rotation` (the pod's preferred nodes, then the rotating
    /// sample) in order, leaving out those in `skip` and those no longer in the cluster,
    /// until `found` holds `to_find` feasible nodes or the rotation ends. Returns how many
    /// positions of the rotation it used, skipped ones included. `rejected` is a reusable
    /// buffer.
    pub fn rotation(
        &self,
        state: &CycleState,
        rotation: impl Iterator<Item = NodeIdx>,
        skip: &[NodeIdx],
        to_find: usize,
        found: &mut Found<'_>,
        rejected: &mut Vec<(usize, Status)>,
    ) -> usize {
        let mut rotation = rotation.fuse();
        let mut used = 0;
        // The nodes to leave out as a bit set: a bit test per node, not a search.
        let skip = NodeSet::of(skip);
        // One allocation per cycle, not per node.
        let mut nodes: Vec<&NodeInfo> = Vec::with_capacity(BATCH.min(to_find));
        while found.feasible.len() < to_find {
            // Never more than are still needed: if all pass, the last one is where
            // one-at-a-time filtering would have stopped.
            let want = (to_find - found.feasible.len()).min(BATCH);
            nodes.clear();
            while nodes.len() < want {
                let Some(idx) = rotation.next() else { break };
                used += 1;
                if skip.contains(idx) {
                    continue;
                }
                if let Some(node) = self.cx.cache.node(idx) {
                    nodes.push(node);
                }
            }
            if nodes.is_empty() {
                break;
            }
            *found.nodes_filtered += nodes.len() as u64;
            rejected.clear();
            let pass = self.batch(state, &nodes, rejected);
            if rejected.is_empty() && found.log.is_none() {
                found.feasible.extend(nodes.iter().map(|n| n.idx));
                continue;
            }
            // Each node not passed was rejected exactly once: record in filtering order,
            // finding each node's rejection through the index of positions.
            let at = by_position(rejected);
            for (i, node) in nodes.iter().enumerate() {
                if pass & (1u64 << i) != 0 {
                    found.record(node.idx, None);
                } else if let Some((pos, st)) =
                    at.get(i).and_then(|&k| rejected.get(usize::from(k)))
                {
                    debug_assert_eq!(*pos, i, "one rejection per node not passed");
                    found.record(node.idx, Some(st));
                }
            }
        }
        used
    }

    /// One batch: the plan's batch run, with the nodes that have pods nominated to them
    /// filtered again one at a time (each needs its own copy with those pods on it); their
    /// batch verdicts are dropped.
    fn batch(
        &self,
        state: &CycleState,
        nodes: &[&NodeInfo],
        rejected: &mut Vec<(usize, Status)>,
    ) -> u64 {
        let mut pass = self
            .plan
            .run_batch(self.cx, state, self.pod, nodes, rejected);
        let Some(nominated) = self.nominated_nodes else {
            return pass;
        };
        let mut again = 0u64;
        for (i, node) in nodes.iter().enumerate() {
            if nominated.contains(node.idx) {
                again |= 1u64 << i;
            }
        }
        if again == 0 {
            return pass;
        }
        rejected.retain(|(i, _)| again & (1u64 << i) == 0);
        for i in ones(again) {
            let Some(node) = nodes.get(i) else { continue };
            match self.one(state, node) {
                None => pass |= 1u64 << i,
                Some(st) => {
                    pass &= !(1u64 << i);
                    rejected.push((i, st));
                }
            }
        }
        pass
    }
}
