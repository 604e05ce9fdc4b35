//! The dry run on one node through the PreFilter extensions (kube-scheduler's
//! `SelectVictimsOnNode`): PreFilter runs once per preemption attempt on the cluster as it
//! is; each node tried gets a clone of that cycle state and a copy of its own `NodeInfo`,
//! potential victims come off both through [`Plugin::remove_pod`](crate::framework::Plugin)
//! and go back through `add_pod`, and Filter reads the copy. Nothing else in the cluster
//! changes, so the cost of a node is its Filter runs, not a PreFilter walk over the whole
//! cluster per check, nor a copy of the cluster per attempt.
//!
//! Exact only for victims whose removal changes nothing outside their node but what the
//! extensions express: the dry run sends a node with a victim holding a reservation share
//! to [`super::cluster_copy`] ([`ReservationStore::holds_share`](crate::reservation::ReservationStore::holds_share)).

use std::sync::Arc;

use crate::cache::Cluster;
use crate::framework::nominator::run_filter_plugins_with_nominated_pods;
use crate::framework::{Code, CycleState, FilterPlan, Status};
use crate::model::node::NodeInfo;
use crate::model::pod::PodInfo;

use super::pdb;
use super::select::more_important_first;
use super::Fit;

/// The victims on `node` (most important first) and how many violate a budget, with
/// `potential` (the node's potential victims, in the node's order) removed from a copy of
/// the node and from a clone of `base`, PreFilter's state on the cluster.
pub(super) fn select_victims(
    fit: Fit<'_>,
    cx: &Cluster,
    base: &CycleState,
    node: &NodeInfo,
    budgets: &[pdb::Budget],
    mut potential: Vec<Arc<PodInfo>>,
) -> Result<(Vec<Arc<PodInfo>>, i64), Status> {
    let mut view = NodeView {
        fit,
        cx,
        state: base.clone(),
        node: node.clone(),
    };
    for p in &potential {
        view.remove(p);
    }
    let st = view.check();
    if !st.is_success() {
        return Err(st);
    }
    // Reprieve most important first, budget-violating ones first, keeping each one that
    // still lets the pod fit; the pods and their order are those the copy path uses.
    potential.sort_by(|a, b| more_important_first(a, b));
    let (violating, fine) = pdb::split_by_violation(&potential, budgets);
    let mut victims = Vec::new();
    let mut violations = 0;
    for (list, counts) in [(&violating, true), (&fine, false)] {
        for p in list {
            view.add(p);
            let st = view.check();
            if st.is_success() {
                continue;
            }
            view.remove(p);
            if st.code() == Code::Error {
                return Err(st);
            }
            victims.push(p.clone());
            if counts {
                violations += 1;
            }
        }
    }
    if !violating.is_empty() && !fine.is_empty() {
        victims.sort_by(|a, b| more_important_first(a, b));
    }
    Ok((victims, violations))
}

/// One node as the dry run changes it: the copy of the node and the cycle state that goes
/// with it.
struct NodeView<'a> {
    fit: Fit<'a>,
    cx: &'a Cluster,
    state: CycleState,
    node: NodeInfo,
}

impl NodeView<'_> {
    /// Takes `p` off the node copy, then tells every PreFilter plugin (`RemovePod`).
    fn remove(&mut self, p: &PodInfo) {
        if self.node.remove_pod(&p.key).is_none() {
            return;
        }
        let profile = self.fit.profile;
        for &i in &profile.pre_filter {
            profile.plugins[i].remove_pod(self.cx, &mut self.state, self.fit.pod, p, &self.node);
        }
    }

    /// Puts `p` back on the node copy, then tells every PreFilter plugin (`AddPod`).
    fn add(&mut self, p: &Arc<PodInfo>) {
        self.node.add_pod(p.clone());
        let profile = self.fit.profile;
        for &i in &profile.pre_filter {
            profile.plugins[i].add_pod(self.cx, &mut self.state, self.fit.pod, p, &self.node);
        }
    }

    /// Whether the pod fits the node copy: in PreFilter's node subset, and Filter with
    /// nominated pods.
    fn check(&self) -> Status {
        if let Some(st) = self.fit.outside_subset(&self.state, self.node.idx) {
            return st;
        }
        run_filter_plugins_with_nominated_pods(
            &FilterPlan::new(self.fit.profile, &self.state),
            self.cx,
            &self.state,
            self.fit.pod,
            &self.node,
            self.fit.nominator,
        )
    }
}
