//! Job-level preemption for gangs (Koordinator's coscheduling `preemptionEvaluator`, in
//! outline): when a gang member fails and the gang still needs several members, victims
//! are planned for all of them at once, so that either every member the gang needs gets a
//! node or nothing is evicted.
//!
//! The plan, on one copy of the cluster:
//! 1. **Remove** every potential victim from every potential node: lower priority than the
//!    member that failed, not a reservation's stand-in, not inside an active reservation
//!    unless the Reservation plugin allows preempting there, and never a member of the
//!    gang itself.
//! 2. **Place** the pending members one after the other (the one that failed first, and a
//!    member nominated earlier on its nominated node first): each on the cheapest node
//!    where it fits (PreFilter and Filter with nominated pods, the members already planned
//!    assumed on their nodes); a member that fits nowhere is skipped. Too few placed, or
//!    the failed member not placed: the plan fails and nothing is evicted.
//! 3. **Reprieve** on each node that got a member: victims go back most important first
//!    (budget-violating ones first, as DefaultPreemption does), each kept when every
//!    member planned there still fits. What could not be kept is evicted.
//!
//! How many members are needed is the caller's: every pending one for a Strict gang (as
//! Koordinator requires), the gang's `minMember` for a NonStrict one. Koordinator weighs
//! nodes by the ranks of their potential victims' priorities per job; berth prefers the
//! node whose potential victims matter least (the lowest highest priority, then the
//! fewest), then the cluster's node order.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::cache::Cluster;
use crate::framework::nominator::{run_filter_plugins_with_nominated_pods, Nominator};
use crate::framework::{FilterPlan, Profile};
use crate::model::node::NodeIdx;
use crate::model::pod::PodInfo;
use crate::object::ObjectKey;

use super::cluster_copy::{check, Removed};
use super::select::more_important_first;
use super::{in_reservation, pdb, Fit};

/// A gang's preemption to plan.
pub(crate) struct Job<'a> {
    /// The profile the members are scheduled with.
    pub profile: &'a Profile,
    /// Nominated pods (the gang's own members are left out of it while planning).
    pub nominator: &'a Nominator,
    /// The members not placed yet, the one whose cycle failed first.
    pub pending: &'a [Arc<PodInfo>],
    /// How many of them the gang needs placed.
    pub needed: usize,
    /// Nodes where evicting pods may help (the failed member's resolvable nodes).
    pub potential: &'a [NodeIdx],
    /// Whether a pod is a member of the gang (never a victim).
    pub is_member: &'a dyn Fn(&ObjectKey) -> bool,
}

/// A plan that places every member the gang needs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct JobPlan {
    /// Each member placed, in planning order, with its node.
    pub placements: Vec<(ObjectKey, NodeIdx)>,
    /// The victims on each node that got a member, most important first.
    pub victims: BTreeMap<NodeIdx, Vec<ObjectKey>>,
}

/// Why no plan places the members the gang needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct JobRefusal {
    /// How many members the plan could place.
    pub placed: usize,
    /// The first member that fits nowhere, even with every potential victim evicted.
    pub unplaced: Option<ObjectKey>,
}

/// Plans job-level preemption (module documentation).
pub(crate) fn plan(cluster: &Cluster, job: &Job<'_>) -> Result<JobPlan, JobRefusal> {
    let Some(trigger) = job.pending.first() else {
        return Err(JobRefusal {
            placed: 0,
            unplaced: None,
        });
    };
    // A member nominated by an earlier plan goes back to its node first, so that planning
    // again (its victims' deletion not visible yet) plans the same.
    let nominated: Vec<Option<NodeIdx>> = job
        .pending
        .iter()
        .map(|m| {
            let name = job.nominator.node_of(&m.key)?;
            cluster.cache.node_idx(name)
        })
        .collect();
    let mut nominator = job.nominator.clone();
    for m in job.pending {
        nominator.delete(&m.key);
    }
    let mut sim = cluster.clone();
    let inside_allowed = job
        .profile
        .plugins
        .iter()
        .find_map(|p| p.reservation_settings())
        .is_some_and(|s| s.enable_preemption);
    let mut removed: BTreeMap<NodeIdx, Vec<Removed>> = BTreeMap::new();
    for &idx in job.potential {
        let Some(node) = cluster.cache.node(idx) else {
            continue;
        };
        let taken: Vec<Removed> = node
            .pods
            .iter()
            .filter(|p| p.priority < trigger.priority && !p.is_reserve_pod())
            .filter(|p| inside_allowed || !in_reservation(cluster, p))
            .filter(|p| !(job.is_member)(&p.key))
            .map(|p| Removed::take(&mut sim, p.clone()))
            .collect();
        removed.insert(idx, taken);
    }
    let order = cheapest_first(job.potential, &removed);
    let placements = place(&mut sim, job, &nominator, &order, &nominated)?;
    let budgets = pdb::budgets(cluster);
    let mut victims = BTreeMap::new();
    for (idx, members) in by_node(&placements, job.pending) {
        let Some(taken) = removed.remove(&idx) else {
            continue;
        };
        let checks = Checks {
            profile: job.profile,
            nominator: &nominator,
        };
        let kept = reprieve(&mut sim, idx, &members, &budgets, taken, checks);
        if !kept.is_empty() {
            victims.insert(idx, kept);
        }
    }
    Ok(JobPlan {
        placements,
        victims,
    })
}

/// What members are checked with while victims are reprieved.
#[derive(Clone, Copy)]
struct Checks<'a> {
    profile: &'a Profile,
    nominator: &'a Nominator,
}

/// The potential nodes, those whose potential victims matter least first (none at all
/// first), then in the given order.
fn cheapest_first(
    potential: &[NodeIdx],
    removed: &BTreeMap<NodeIdx, Vec<Removed>>,
) -> Vec<NodeIdx> {
    let cost = |idx: &NodeIdx| {
        let pods = removed.get(idx).map_or(&[][..], Vec::as_slice);
        let top = pods.iter().map(|r| r.pod.priority).max();
        (top.is_some(), top.unwrap_or(i32::MIN), pods.len())
    };
    let mut order = potential.to_vec();
    order.sort_by_key(cost);
    order
}

/// Step 2: each pending member on its nominated node if it fits there, else on the first
/// node of `order` where it fits, assumed there on `sim`, until the gang has the members
/// it needs.
fn place(
    sim: &mut Cluster,
    job: &Job<'_>,
    nominator: &Nominator,
    order: &[NodeIdx],
    nominated: &[Option<NodeIdx>],
) -> Result<Vec<(ObjectKey, NodeIdx)>, JobRefusal> {
    let mut placements = Vec::new();
    let mut unplaced = None;
    for (member, nominated) in job.pending.iter().zip(nominated) {
        if placements.len() >= job.needed {
            break;
        }
        let fit = Fit {
            profile: job.profile,
            nominator,
            pod: member,
        };
        let found = nominated
            .filter(|idx| order.contains(idx))
            .and_then(|idx| first_fit(fit, sim, &[idx]))
            .or_else(|| first_fit(fit, sim, order));
        match found {
            Some(idx) if sim.cache.assume(&member.key, idx) => {
                placements.push((member.key.clone(), idx));
            }
            _ => {
                unplaced.get_or_insert_with(|| member.key.clone());
            }
        }
    }
    // The member whose cycle failed comes first: without it, the plan is not its.
    let trigger_placed = placements
        .first()
        .zip(job.pending.first())
        .is_some_and(|((k, _), t)| *k == t.key);
    if placements.len() < job.needed || !trigger_placed {
        return Err(JobRefusal {
            placed: placements.len(),
            unplaced,
        });
    }
    Ok(placements)
}

/// The first node of `order` where the pod fits on `sim`: PreFilter once, then Filter with
/// nominated pods node by node.
fn first_fit(fit: Fit<'_>, sim: &Cluster, order: &[NodeIdx]) -> Option<NodeIdx> {
    let state = fit.pre_filter(sim).ok()?;
    let plan = FilterPlan::new(fit.profile, &state);
    order.iter().copied().find(|&idx| {
        fit.outside_subset(&state, idx).is_none()
            && sim.cache.node(idx).is_some_and(|node| {
                run_filter_plugins_with_nominated_pods(
                    &plan,
                    sim,
                    &state,
                    fit.pod,
                    node,
                    fit.nominator,
                )
                .is_success()
            })
    })
}

/// The planned members grouped by node, each group in planning order.
fn by_node(
    placements: &[(ObjectKey, NodeIdx)],
    pending: &[Arc<PodInfo>],
) -> BTreeMap<NodeIdx, Vec<Arc<PodInfo>>> {
    let mut out: BTreeMap<NodeIdx, Vec<Arc<PodInfo>>> = BTreeMap::new();
    for (key, idx) in placements {
        if let Some(p) = pending.iter().find(|p| p.key == *key) {
            out.entry(*idx).or_default().push(p.clone());
        }
    }
    out
}

/// Step 3 on node `idx`: puts the potential victims back most important first
/// (budget-violating ones first), keeping each with which every member planned there
/// still fits. Returns the victims, most important first.
fn reprieve(
    sim: &mut Cluster,
    idx: NodeIdx,
    members: &[Arc<PodInfo>],
    budgets: &[pdb::Budget],
    mut taken: Vec<Removed>,
    checks: Checks<'_>,
) -> Vec<ObjectKey> {
    taken.sort_by(|a, b| more_important_first(&a.pod, &b.pod));
    let order: Vec<Arc<PodInfo>> = taken.iter().map(|r| r.pod.clone()).collect();
    let (violating, fine) = pdb::split_by_violation(&order, budgets);
    let mut victims: Vec<Arc<PodInfo>> = Vec::new();
    for p in violating.iter().chain(fine.iter()) {
        let Some(pos) = taken.iter().position(|r| r.pod.key == p.key) else {
            continue;
        };
        taken.remove(pos).put_back(sim, idx);
        if members_fit(sim, idx, members, checks) {
            continue;
        }
        taken.push(Removed::take(sim, p.clone()));
        victims.push(p.clone());
    }
    victims.sort_by(|a, b| more_important_first(a, b));
    victims.iter().map(|p| p.key.clone()).collect()
}

/// Whether every member planned on `idx` fits there together: they are taken off and
/// placed again one by one, each checked first. `sim` is left with all of them assumed on
/// `idx`, as before.
fn members_fit(
    sim: &mut Cluster,
    idx: NodeIdx,
    members: &[Arc<PodInfo>],
    checks: Checks<'_>,
) -> bool {
    for m in members {
        sim.cache.forget(&m.key);
    }
    let mut all = true;
    for m in members {
        let fit = Fit {
            profile: checks.profile,
            nominator: checks.nominator,
            pod: m,
        };
        if all && !check(fit, sim, idx).is_success() {
            all = false;
        }
        sim.cache.assume(&m.key, idx);
    }
    all
}
