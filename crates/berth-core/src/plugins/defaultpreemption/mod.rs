//! DefaultPreemption: when no node fits, evict lower-priority pods from one node so the pod
//! fits there next time (kube-scheduler's `DefaultPreemption` PostFilter and its
//! `preemption.Evaluator`).
//!
//! The steps, as upstream:
//! 1. **Eligibility.** `preemptionPolicy: Never` pods do not preempt; a pod already
//!    nominated to a node where lower-priority pods are terminating because of preemption
//!    waits for them instead of preempting again.
//! 2. **Potential nodes.** Only nodes whose Filter rejection was `Unschedulable` (not
//!    `UnschedulableAndUnresolvable`): removing pods cannot fix a taint or a node selector.
//! 3. **Dry run** on each potential node, from a random offset, until enough candidates
//!    are found ([`DefaultPreemptionArgs`]): remove every lower-priority pod, check the pod
//!    fits, then add the removed pods back most important first, budget-violating ones
//!    first, keeping each one that still lets the pod fit (reprieve). Whatever could not be
//!    reprieved is the node's victim set.
//! 4. **Pick** one candidate (fewest PDB violations, lowest top victim priority, ...).
//!
//! The plugin decides; the scheduler acts on the [`PostFilterResult`]: it deletes the
//! victims, records `Preempted` events and nominates the pod to the node.
//!
//! "Fits" is checked as kube-scheduler checks it (module `overlay`): PreFilter runs once per
//! attempt on the cluster; each node tried gets a clone of that state and a copy of its
//! `NodeInfo`, victims come off both through the plugins' `RemovePod`/`AddPod` PreFilter
//! extensions, and Filter (with nominated pods) reads the copy. A node where a potential
//! victim holds a share of a reservation is simulated on a copy of the cluster instead
//! (module `cluster_copy`), since giving the share back changes the reservation and its
//! node's reserved capacity for every plugin; so is every node when PreFilter does not pass
//! on the cluster. The copy is made once per attempt, and only when such a node comes up.

mod args;
mod cluster_copy;
pub(crate) mod job;
mod overlay;
mod pdb;
mod select;

use std::sync::Arc;

use crate::cache::Cluster;
use crate::framework::config::ConfigError;
use crate::framework::nominator::{nominated_node_name, Nominator};
use crate::framework::plugin::{Nomination, PostFilterContext, PostFilterResult};
use crate::framework::{Code, CycleState, Diagnosis, Plugin, Points, Profile, Status};
use crate::model::node::NodeIdx;
use crate::model::pod::PodInfo;
use crate::plugins::args::decode;
pub use crate::reservation::hold;

pub use args::DefaultPreemptionArgs;
use select::Candidate;

/// Status of a potential node without lower-priority pods.
pub const NO_VICTIMS: &str = "No preemption victims found for incoming pod";
/// Reason given for every node preemption did not try.
pub const NOT_HELPFUL: &str = "Preemption is not helpful for scheduling";
/// The pod's `preemptionPolicy` is `Never`.
pub const NOT_ELIGIBLE_POLICY: &str = "not eligible due to preemptionPolicy=Never.";
/// The pod waits for victims of its earlier preemption to terminate.
pub const NOT_ELIGIBLE_TERMINATING: &str =
    "not eligible due to a terminating pod on the nominated node.";
/// The pod's reservation on its nominated node waits for the victims of its earlier
/// preemption to leave (berth's reservation-backed preemption).
pub const NOT_ELIGIBLE_HELD: &str =
    "not eligible due to its reservation waiting for the victims on the nominated node.";

/// The DefaultPreemption plugin.
#[derive(Debug)]
pub struct DefaultPreemption {
    args: DefaultPreemptionArgs,
}

impl DefaultPreemption {
    /// Builds the plugin from `DefaultPreemptionArgs`, validated.
    pub fn new(args: Option<&serde_json::Value>) -> Result<Self, ConfigError> {
        let args: DefaultPreemptionArgs = decode(args)?;
        args.validate()?;
        Ok(Self { args })
    }

    /// The args in use.
    pub fn args(&self) -> DefaultPreemptionArgs {
        self.args.clone()
    }
}

impl Plugin for DefaultPreemption {
    fn name(&self) -> &'static str {
        super::names::DEFAULT_PREEMPTION
    }

    fn points(&self) -> Points {
        Points::POST_FILTER
    }

    fn post_filter(
        &self,
        cx: &mut PostFilterContext<'_>,
        pod: &PodInfo,
    ) -> Option<PostFilterResult> {
        // Koordinator stops default preemption for reservations' reserve pods.
        if pod.is_reserve_pod() {
            return None;
        }
        Some(self.preempt(cx, pod))
    }
}

/// A result that only carries a message.
fn message(nomination: Nomination, text: String) -> PostFilterResult {
    PostFilterResult {
        nomination,
        message: Some(format!("preemption: {text}")),
        ..Default::default()
    }
}

impl DefaultPreemption {
    /// kube-scheduler's `Evaluator.Preempt`.
    fn preempt(&self, cx: &mut PostFilterContext<'_>, pod: &PodInfo) -> PostFilterResult {
        if let Err(reason) = eligible(cx, pod) {
            return message(Nomination::Keep, reason.to_string());
        }
        let cluster = cx.cluster;
        let num_all = cluster.cache.node_count();
        let potential = potential_nodes(cluster, cx.resolvable);
        if potential.is_empty() {
            return message(Nomination::Clear, fit_error(num_all, &[]));
        }
        let offset = cx.rng.below(potential.len() as u64) as usize;
        let fit = Fit {
            profile: cx.profile,
            nominator: cx.nominator,
            pod,
        };
        let (candidates, statuses) = self.dry_run(cluster, fit, &potential, offset);
        if candidates.is_empty() {
            if let Some(err) = statuses.iter().find(|s| s.code() == Code::Error) {
                return message(Nomination::Keep, err.message());
            }
            return message(Nomination::Clear, fit_error(num_all, &statuses));
        }
        let Some(best) = select::pick_one(&candidates) else {
            return message(
                Nomination::Keep,
                "no candidate node for preemption".to_string(),
            );
        };
        let c = &candidates[best];
        PostFilterResult {
            nomination: Nomination::Node(c.node),
            victims: c.victims.iter().map(|p| p.key.clone()).collect(),
            message: None,
            hold: self.args.reservation_backed.then(|| self.args.ttl_millis()),
            ..PostFilterResult::default()
        }
    }
}

impl DefaultPreemption {
    /// kube-scheduler's `DryRunPreemption`, one node after the other from `offset`: stops
    /// once it has enough candidates and at least one that violates no budget. Returns the
    /// candidates (non-violating first, each group in search order) and the statuses of
    /// the nodes that are not candidates.
    fn dry_run(
        &self,
        cluster: &Cluster,
        fit: Fit<'_>,
        potential: &[NodeIdx],
        offset: usize,
    ) -> (Vec<Candidate>, Vec<Status>) {
        self.dry_run_with(cluster, fit, potential, offset, Simulation::Overlay)
    }

    /// [`Self::dry_run`] with every node simulated as `how` says.
    fn dry_run_with(
        &self,
        cluster: &Cluster,
        fit: Fit<'_>,
        potential: &[NodeIdx],
        offset: usize,
        how: Simulation,
    ) -> (Vec<Candidate>, Vec<Status>) {
        let want = self.args.num_candidates(potential.len());
        let mut dry = DryRun {
            cluster,
            fit,
            how,
            budgets: None,
            base: None,
            sim: None,
            reservation_preemption: fit
                .profile
                .plugins
                .iter()
                .find_map(|p| p.reservation_settings())
                .is_some_and(|s| s.enable_preemption),
        };
        let (mut fine, mut violating) = (Vec::new(), Vec::new());
        let mut statuses = Vec::new();
        for i in 0..potential.len() {
            let idx = potential[(offset + i) % potential.len()];
            match dry.select_victims_on_node(idx) {
                Ok(c) if c.pdb_violations == 0 => fine.push(c),
                // Like upstream's bounded candidate lists, extra violating candidates are
                // dropped while the search goes on for a non-violating one.
                Ok(c) if violating.len() < want => violating.push(c),
                Ok(_) => {}
                Err(st) => statuses.push(st),
            }
            if !fine.is_empty() && fine.len() + violating.len() >= want {
                break;
            }
        }
        fine.append(&mut violating);
        (fine, statuses)
    }
}

/// kube-scheduler's `nodesWherePreemptionMightHelp`: the nodes a failed cycle rejected as
/// `Unschedulable` (`resolvable`), in the cluster's node order.
pub(crate) fn potential_nodes(cluster: &Cluster, resolvable: &[NodeIdx]) -> Vec<NodeIdx> {
    let mut resolvable = resolvable.to_vec();
    resolvable.sort_unstable();
    cluster
        .cache
        .node_order()
        .iter()
        .copied()
        .filter(|i| resolvable.binary_search(i).is_ok())
        .collect()
}

/// kube-scheduler's `PodEligibleToPreemptOthers`.
fn eligible(cx: &PostFilterContext<'_>, pod: &PodInfo) -> Result<(), &'static str> {
    if preemption_policy(cx.cluster, pod) == Some("Never") {
        return Err(NOT_ELIGIBLE_POLICY);
    }
    let nominated = cx
        .nominator
        .node_of(&pod.key)
        .map(|n| &**n)
        .or_else(|| nominated_node_name(pod));
    let Some(idx) = nominated.and_then(|n| cx.cluster.cache.node_idx(n)) else {
        return Ok(());
    };
    // A nominated node that cannot host the pod whatever is evicted: preempt elsewhere.
    if !cx.resolvable.contains(&idx) {
        return Ok(());
    }
    let waiting = cx.cluster.cache.node(idx).is_some_and(|node| {
        node.pods
            .iter()
            .any(|p| p.priority < pod.priority && terminating_by_preemption(p))
    });
    if waiting {
        return Err(NOT_ELIGIBLE_TERMINATING);
    }
    // Its hold there is placed and waiting for the victims (their deletion is under way,
    // perhaps not yet visible): preempting again would only evict them again.
    let held = hold::of(&cx.cluster.reservations, &pod.key, &pod.uid)
        .and_then(|i| cx.cluster.reservations.get(i))
        .is_some_and(|r| {
            r.phase == berth_api::reservation::ReservationPhase::Waiting
                && r.node == Some(idx)
                && !r.terminating
                && hold::victims_present(&cx.cluster.cache, r, idx)
        });
    if held {
        return Err(NOT_ELIGIBLE_HELD);
    }
    Ok(())
}

/// The pod's `preemptionPolicy`, from its spec or, as admission would have set it, from its
/// PriorityClass.
fn preemption_policy<'a>(cluster: &'a Cluster, pod: &'a PodInfo) -> Option<&'a str> {
    let spec = pod.spec();
    spec.preemption_policy.as_deref().or_else(|| {
        let class = spec.priority_class_name.as_deref()?;
        cluster
            .cache
            .priority_classes
            .get(class)?
            .preemption_policy
            .as_deref()
    })
}

/// kube-scheduler's `podTerminatingByPreemption`: being deleted, with the
/// `DisruptionTarget` condition preemption sets.
fn terminating_by_preemption(p: &PodInfo) -> bool {
    if !p.terminating {
        return false;
    }
    p.pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "DisruptionTarget"))
        .is_some_and(|c| c.status == "True" && c.reason.as_deref() == Some("PreemptionByScheduler"))
}

/// The FitError preemption reports when it found no candidate: the dry run's per-node
/// statuses, and [`NOT_HELPFUL`] for every other node (its final period included: the
/// outer FitError appends PostFilter's message as it is).
fn fit_error(num_all: usize, statuses: &[Status]) -> String {
    let mut d = Diagnosis::default();
    for st in statuses {
        d.add(st);
    }
    d.add_absent(
        NOT_HELPFUL.to_string(),
        num_all.saturating_sub(statuses.len()) as u32,
    );
    d.render(num_all)
}

/// How the dry run simulates a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Simulation {
    /// Through the PreFilter extensions where they are exact ([`overlay`]), else on a copy of
    /// the cluster.
    Overlay,
    /// Always on a copy of the cluster ([`cluster_copy`]): the oracle the overlay is tested
    /// against.
    #[cfg_attr(not(test), allow(dead_code))]
    ClusterCopy,
}

/// One preemption attempt's dry run over candidate nodes.
struct DryRun<'a> {
    cluster: &'a Cluster,
    fit: Fit<'a>,
    how: Simulation,
    /// The cluster's budgets, read on first need (nodes without lower-priority pods need
    /// none).
    budgets: Option<Vec<pdb::Budget>>,
    /// PreFilter's state on the cluster, computed on first need: `Err` when PreFilter does
    /// not pass there (every node is then simulated on the copy, which reports it).
    base: Option<Result<CycleState, Status>>,
    /// The copy of the cluster for [`cluster_copy`], made on first need.
    sim: Option<Cluster>,
    /// The Reservation plugin's `enablePreemption` in the pod's profile.
    reservation_preemption: bool,
}

/// What "the pod fits" is checked with.
#[derive(Clone, Copy)]
struct Fit<'a> {
    profile: &'a Profile,
    nominator: &'a Nominator,
    pod: &'a PodInfo,
}

impl DryRun<'_> {
    /// kube-scheduler's `SelectVictimsOnNode`: the fewest pods to evict from `idx` so the
    /// pod fits, or why there are none.
    fn select_victims_on_node(&mut self, idx: NodeIdx) -> Result<Candidate, Status> {
        let cluster = self.cluster;
        let Some(node) = cluster.cache.node(idx) else {
            return Err(Status::error("node vanished during preemption"));
        };
        let priority = self.fit.pod.priority;
        // Nothing of lower priority here: no pod needs reading to know there is no victim.
        if node.lowest_priority() >= priority {
            return Err(Status::unresolvable(NO_VICTIMS));
        }
        let inside_allowed = self.reservation_preemption;
        let potential: Vec<Arc<PodInfo>> = node
            .pods
            .iter()
            // Reservation stand-ins hold capacity for their owners; evicting one is not
            // preemption's to decide (Koordinator never picks them either). Pods allocated
            // from an active reservation are victims only with the Reservation plugin's
            // `enablePreemption`.
            .filter(|p| p.priority < priority && !p.is_reserve_pod())
            .filter(|p| inside_allowed || !in_reservation(cluster, p))
            .cloned()
            .collect();
        if potential.is_empty() {
            return Err(Status::unresolvable(NO_VICTIMS));
        }
        let fit = self.fit;
        let budgets = self.budgets.get_or_insert_with(|| pdb::budgets(cluster));
        let overlay = self.how == Simulation::Overlay
            && !potential
                .iter()
                .any(|p| cluster.reservations.holds_share(&p.key));
        let base = match overlay {
            true => self
                .base
                .get_or_insert_with(|| fit.pre_filter(cluster))
                .as_ref()
                .ok(),
            false => None,
        };
        let outcome = match base {
            Some(base) => overlay::select_victims(fit, cluster, base, node, budgets, potential),
            None => {
                let sim = self.sim.get_or_insert_with(|| cluster.clone());
                cluster_copy::select_victims(fit, sim, idx, budgets, potential)
            }
        };
        let (victims, pdb_violations) = outcome?;
        if victims.is_empty() {
            return Err(Status::error(format!(
                "expected at least one victim pod on node {:?}",
                node.name
            )));
        }
        Ok(Candidate {
            node: idx,
            victims,
            pdb_violations,
        })
    }
}

/// Whether `p` allocated from a reservation that still holds capacity (Available or
/// Waiting): what it uses is the reservation's, and evicting it gives it back to the
/// reservation's owners only.
fn in_reservation(cluster: &Cluster, p: &PodInfo) -> bool {
    let store = &cluster.reservations;
    store
        .owner_of(&p.key)
        .and_then(|i| store.get(i))
        .is_some_and(|r| r.is_active())
}

impl Fit<'_> {
    /// The profile's PreFilter on `cx`, after the `before_pre_filter` hooks, as a cycle runs
    /// them: the cycle state, or the first failure (naming its plugin).
    fn pre_filter(&self, cx: &Cluster) -> Result<CycleState, Status> {
        let profile = self.profile;
        let mut state = CycleState::default();
        for &i in &profile.pre_filter {
            profile.plugins[i].before_pre_filter(cx, &mut state, self.pod);
        }
        for &i in &profile.pre_filter {
            let p = &profile.plugins[i];
            let st = p.pre_filter(cx, &mut state, self.pod);
            if st.is_skip() {
                state.skip_filter |= 1 << i;
                continue;
            }
            if !st.is_success() {
                return Err(st.with_plugin(p.name()));
            }
        }
        Ok(state)
    }

    /// The rejection of a node outside the subset PreFilter narrowed the search to.
    fn outside_subset(&self, state: &CycleState, idx: NodeIdx) -> Option<Status> {
        let subset = state.node_subset.as_ref()?;
        if subset.contains(&idx) {
            return None;
        }
        Some(Status::unresolvable(format!(
            "node(s) didn't satisfy plugin(s) [{}]",
            state.subset_plugins.join(" ")
        )))
    }
}

#[cfg(test)]
mod overlay_tests;
#[cfg(test)]
mod tests;
