//! The dry run on a copy of the whole cluster: what every node was simulated on before the
//! PreFilter extensions ([`super::overlay`]), kept for the nodes the overlay cannot express
//! and as the oracle the overlay is tested against.
//!
//! Potential victims are removed from the copy as the API server would remove them (with
//! their reservation shares given back: a non-owner preemptor must not see reserved
//! capacity as freed), and "fits" re-runs the profile's PreFilter from scratch on the copy
//! and Filter with nominated pods. The copy is made once per preemption attempt; every node
//! is restored exactly after its dry run, so one copy serves all nodes.

use std::sync::Arc;

use crate::cache::{Cluster, PodState};
use crate::framework::nominator::run_filter_plugins_with_nominated_pods;
use crate::framework::{Code, FilterPlan, Status};
use crate::model::node::NodeIdx;
use crate::model::pod::PodInfo;
use crate::reservation::{Owner, RIdx};

use super::pdb;
use super::select::more_important_first;
use super::Fit;

/// The victims on `idx` (most important first) and how many violate a budget, simulated on
/// `sim`, a copy of the cluster, with `potential` (the node's potential victims) removed.
/// `sim` is left as it was.
pub(super) fn select_victims(
    fit: Fit<'_>,
    sim: &mut Cluster,
    idx: NodeIdx,
    budgets: &[pdb::Budget],
    potential: Vec<Arc<PodInfo>>,
) -> Result<(Vec<Arc<PodInfo>>, i64), Status> {
    let Some(saved) = sim.cache.node(idx).cloned() else {
        return Err(Status::error("node vanished during preemption"));
    };
    let mut removed: Vec<Removed> = Vec::with_capacity(potential.len());
    for p in potential {
        removed.push(Removed::take(sim, p));
    }
    let outcome = reprieve(fit, sim, idx, budgets, &mut removed);
    // Put back what is still removed, then restore the node bit for bit (pod order).
    for r in removed {
        r.put_back(sim, idx);
    }
    if let Some(n) = sim.cache.node_mut(idx) {
        *n = saved;
    }
    outcome
}

/// A pod the dry run took off the copy of the cluster, with what it needs to be put back
/// exactly (kube-scheduler's `RemovePod` / `AddPod` on the copy).
pub(super) struct Removed {
    pub(super) pod: Arc<PodInfo>,
    /// Assumed (bind in flight) rather than bound.
    assumed: bool,
    /// Its share of a reservation, returned to that reservation while it is off.
    share: Option<(RIdx, Owner)>,
}

impl Removed {
    /// Takes `p` off `sim`: off its node, and its reservation share back to the reservation
    /// (a non-owner preemptor must not see reserved capacity as freed).
    pub(super) fn take(sim: &mut Cluster, p: Arc<PodInfo>) -> Self {
        let assumed = sim
            .cache
            .pod(&p.key)
            .is_some_and(|e| e.state == PodState::Assumed);
        let share = sim.reservations.take_owner(&mut sim.cache, &p.key);
        sim.cache.remove_pod(&p.key);
        Self {
            pod: p,
            assumed,
            share,
        }
    }

    /// Re-places the pod as it was (bound, or assumed on `idx`), with its share.
    pub(super) fn put_back(self, sim: &mut Cluster, idx: NodeIdx) {
        sim.cache.apply_pod(self.pod.clone());
        if self.assumed {
            sim.cache.assume(&self.pod.key, idx);
        }
        if let Some(share) = self.share {
            sim.reservations
                .restore_owner(&mut sim.cache, &self.pod.key, share);
        }
    }
}

/// With every potential victim (`removed`) taken off node `idx` of `sim`: checks the pod
/// fits, then puts victims back most important first, budget-violating ones first, keeping
/// each that still lets the pod fit. Returns the victims (most important first) and how
/// many violate a budget; `removed` is left holding the pods still off the node.
fn reprieve(
    fit: Fit<'_>,
    sim: &mut Cluster,
    idx: NodeIdx,
    budgets: &[pdb::Budget],
    removed: &mut Vec<Removed>,
) -> Result<(Vec<Arc<PodInfo>>, i64), Status> {
    let st = check(fit, sim, idx);
    if !st.is_success() {
        return Err(st);
    }
    removed.sort_by(|a, b| more_important_first(&a.pod, &b.pod));
    let order: Vec<Arc<PodInfo>> = removed.iter().map(|r| r.pod.clone()).collect();
    let (violating, fine) = pdb::split_by_violation(&order, budgets);
    let mut victims = Vec::new();
    let mut violations = 0;
    for (list, counts) in [(&violating, true), (&fine, false)] {
        for p in list {
            let Some(pos) = removed.iter().position(|r| r.pod.key == p.key) else {
                continue;
            };
            let r = removed.remove(pos);
            r.put_back(sim, idx);
            let st = check(fit, sim, idx);
            if st.is_success() {
                continue;
            }
            removed.push(Removed::take(sim, p.clone()));
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

/// Whether the pod fits node `idx` of `sim`: the profile's PreFilter (on `sim`, from
/// scratch) and Filter with nominated pods.
pub(super) fn check(fit: Fit<'_>, sim: &Cluster, idx: NodeIdx) -> Status {
    let state = match fit.pre_filter(sim) {
        Ok(s) => s,
        Err(st) => return st,
    };
    if let Some(st) = fit.outside_subset(&state, idx) {
        return st;
    }
    let Some(node) = sim.cache.node(idx) else {
        return Status::error("node vanished during preemption");
    };
    run_filter_plugins_with_nominated_pods(
        &FilterPlan::new(fit.profile, &state),
        sim,
        &state,
        fit.pod,
        node,
        fit.nominator,
    )
}
