//! The Filter plugins of one cycle, worked out once after PreFilter.
//!
//! kube-scheduler's `RunFilterPlugins` walks the profile's Filter list for every node and
//! skips the plugins whose PreFilter returned Skip. With a dozen Filter plugins of which a
//! basic pod needs four, that walk (a bit test, an index and a bounds check per plugin) was
//! a tenth of a basic cycle. The plan is that walk done once: the plugins that run, in
//! profile order, each with whether it has a verdict-only fast path
//! ([`crate::framework::Points::FILTER_FAST`]).

use smallvec::SmallVec;

use crate::cache::Cluster;
use crate::framework::cycle_state::CycleState;
use crate::framework::plugin::Plugin;
use crate::framework::profile::Profile;
use crate::framework::status::Status;
use crate::model::node::NodeInfo;
use crate::model::pod::PodInfo;

/// How many nodes [`FilterPlan::run_batch`] filters together: one bit each in a `u64`.
pub const BATCH: usize = 64;

/// The positions of the set bits of `mask`, lowest first.
#[inline]
pub fn ones(mut mask: u64) -> impl Iterator<Item = usize> {
    std::iter::from_fn(move || {
        if mask == 0 {
            return None;
        }
        let i = mask.trailing_zeros() as usize;
        mask &= mask - 1;
        Some(i)
    })
}

/// Clears the bit of each node of `pass` (positions in `nodes`) that `passes` says no to:
/// the loop of every [`Plugin::passes_each`].
#[inline(always)]
pub fn keep(pass: &mut u64, nodes: &[&NodeInfo], mut passes: impl FnMut(&NodeInfo) -> bool) {
    for i in ones(*pass) {
        if !nodes.get(i).is_some_and(|n| passes(n)) {
            *pass &= !(1u64 << i);
        }
    }
}

/// The mask of the first `n` positions (`n <= BATCH`).
#[inline]
pub fn first(n: usize) -> u64 {
    if n >= BATCH {
        u64::MAX
    } else {
        (1u64 << n) - 1
    }
}

/// The Filter plugins a cycle runs, in order.
pub struct FilterPlan<'a> {
    steps: SmallVec<[(&'a dyn Plugin, bool); 16]>,
}

impl<'a> FilterPlan<'a> {
    /// The profile's Filter plugins that `state`'s PreFilter did not skip.
    pub fn new(profile: &'a Profile, state: &CycleState) -> Self {
        let steps = profile
            .filter
            .iter()
            .filter(|&&i| state.skip_filter & (1 << i) == 0)
            .filter_map(|&i| {
                let fast = profile.fast_filter & (1 << i) != 0;
                profile.plugins.get(i).map(|p| (p.as_ref(), fast))
            })
            .collect();
        Self { steps }
    }

    /// Runs the plan on `node` (kube's `RunFilterPlugins`): the first rejection wins and
    /// names its plugin. A plugin with a fast path is asked [`Plugin::passes`] first, and
    /// its `filter` runs only where that says no.
    pub fn run(&self, cx: &Cluster, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        for &(p, fast) in &self.steps {
            if fast && p.passes(cx, state, pod, node) {
                debug_assert!(
                    p.filter(cx, state, pod, node).is_success(),
                    "{}: passes() let through a node filter() rejects",
                    p.name()
                );
                continue;
            }
            let st = p.filter(cx, state, pod, node);
            if !st.is_success() {
                return st.with_plugin(p.name());
            }
        }
        Status::success()
    }

    /// Every plugin's verdict on `node`, not stopping at the first rejection (`berth
    /// explain`: every reason, each plugin's own). When pods the pod must yield to are
    /// nominated to the node (`with`: the node with them counted), each plugin is asked
    /// with them first and, only if that passed, without them, as
    /// [`crate::framework::nominator::run_filter_plugins_with_nominated_pods`] asks the
    /// whole plan. `rejected` gets each rejection: the plugin, its status, and whether the
    /// nominated pods were counted.
    pub fn run_every(
        &self,
        cx: &Cluster,
        state: &CycleState,
        pod: &PodInfo,
        node: &NodeInfo,
        with: Option<&NodeInfo>,
        mut rejected: impl FnMut(&dyn Plugin, Status, bool),
    ) {
        for &(p, _) in &self.steps {
            if let Some(w) = with {
                let st = p.filter(cx, state, pod, w);
                if !st.is_success() {
                    rejected(p, st, true);
                    continue;
                }
            }
            let st = p.filter(cx, state, pod, node);
            if !st.is_success() {
                rejected(p, st, false);
            }
        }
    }

    /// [`FilterPlan::run`] on up to [`BATCH`] nodes at once, plugin by plugin: each plugin
    /// is asked about the nodes every earlier plugin let through, so every node meets the
    /// same plugins in the same order as one at a time, and the first rejection still
    /// wins. Fast-path plugins answer the whole batch in one call
    /// ([`Plugin::passes_each`]); `filter` runs only where they say no. Returns the mask of
    /// the nodes that pass; pushes each rejected node's position and status onto
    /// `rejected`, in plugin order (the Filter loop finds them in node order through an
    /// index of positions, [`by_position`], so statuses are never sorted or moved).
    pub fn run_batch(
        &self,
        cx: &Cluster,
        state: &CycleState,
        pod: &PodInfo,
        nodes: &[&NodeInfo],
        rejected: &mut Vec<(usize, Status)>,
    ) -> u64 {
        let mut pass = first(nodes.len());
        for &(p, fast) in &self.steps {
            if pass == 0 {
                break;
            }
            // The nodes this plugin must give a full Filter verdict on.
            let ask = if fast {
                let before = pass;
                p.passes_each(cx, state, pod, nodes, &mut pass);
                #[cfg(debug_assertions)]
                for i in ones(pass & before) {
                    assert!(
                        p.filter(cx, state, pod, nodes[i]).is_success(),
                        "{}: passes_each() let through a node filter() rejects",
                        p.name()
                    );
                }
                before & !pass
            } else {
                pass
            };
            for i in ones(ask) {
                let Some(node) = nodes.get(i) else { continue };
                let st = p.filter(cx, state, pod, node);
                if st.is_success() {
                    pass |= 1u64 << i;
                } else {
                    pass &= !(1u64 << i);
                    rejected.push((i, st.with_plugin(p.name())));
                }
            }
        }
        pass
    }
}

/// Where each batch position's rejection is in `rejected` (as [`FilterPlan::run_batch`]
/// fills it), `u8::MAX` for positions not rejected: rejections come in plugin order, and
/// this lets the Filter loop read them in node order without sorting the statuses (80
/// bytes each; sorting them was a fourteenth of a NUMA cycle on a full cluster).
pub fn by_position(rejected: &[(usize, Status)]) -> [u8; BATCH] {
    let mut at = [u8::MAX; BATCH];
    for (k, (i, _)) in rejected.iter().enumerate() {
        if let (Some(slot), Ok(k)) = (at.get_mut(*i), u8::try_from(k)) {
            *slot = k;
        }
    }
    at
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{node, pod};

    #[test]
    fn skipped_plugins_are_left_out_and_order_is_kept() {
        let profile = Profile::default_profile();
        let mut state = CycleState::default();
        let all = FilterPlan::new(&profile, &state);
        let names: Vec<_> = all.steps.iter().map(|(p, _)| p.name()).collect();
        let want: Vec<_> = profile
            .filter
            .iter()
            .map(|&i| profile.plugins[i].name())
            .collect();
        assert_eq!(names, want);
        let first = profile.filter[0];
        state.skip_filter |= 1 << first;
        let plan = FilterPlan::new(&profile, &state);
        assert_eq!(plan.steps.len(), all.steps.len() - 1);
        assert!(plan
            .steps
            .iter()
            .all(|(p, _)| p.name() != profile.plugins[first].name()));
    }

    #[test]
    fn a_rejection_names_its_plugin_fast_path_or_not() {
        let profile = Profile::default_profile();
        // Only NodeResourcesFit runs: the others need their PreFilter's state.
        let mut state = CycleState::default();
        for &i in &profile.filter {
            if profile.plugins[i].name() != crate::plugins::names::NODE_RESOURCES_FIT {
                state.skip_filter |= 1 << i;
            }
        }
        let plan = FilterPlan::new(&profile, &state);
        assert_eq!(plan.steps.len(), 1);
        let cx = Cluster::default();
        let small = node("small").alloc("cpu", "1").build_info();
        let big = pod("big").req("cpu", "2").build_info();
        // NodeResourcesFit has a fast path: it says no, and filter gives the reason.
        let st = plan.run(&cx, &state, &big, &small);
        assert_eq!(st.plugin(), crate::plugins::names::NODE_RESOURCES_FIT);
        assert_eq!(st.message(), "Insufficient cpu");
        let fits = pod("fits").req("cpu", "1").build_info();
        assert!(plan.run(&cx, &state, &fits, &small).is_success());
    }

    /// A batch gives every node the verdict, and the rejecting plugin and reasons, that
    /// one-at-a-time filtering gives it, with passing and rejected nodes interleaved and
    /// plugins with and without a fast path.
    #[test]
    fn a_batch_gives_each_node_its_one_at_a_time_verdict() {
        let profile = Profile::default_profile();
        let mut state = CycleState::default();
        // Only plugins that need no PreFilter state.
        let keep = [
            crate::plugins::names::NODE_RESOURCES_FIT,
            crate::plugins::names::TAINT_TOLERATION,
            crate::plugins::names::NODE_UNSCHEDULABLE,
            crate::plugins::names::NODE_NAME,
        ];
        for &i in &profile.filter {
            if !keep.contains(&profile.plugins[i].name()) {
                state.skip_filter |= 1 << i;
            }
        }
        let plan = FilterPlan::new(&profile, &state);
        let cx = Cluster::default();
        let nodes: Vec<NodeInfo> = (0..70)
            .map(|i| {
                let mut b = node(&format!("n{i}")).alloc("cpu", if i % 3 == 0 { "1" } else { "4" });
                if i % 5 == 0 {
                    b = b.taint("dedicated", "x", "NoSchedule");
                }
                if i % 7 == 0 {
                    b = b.unschedulable();
                }
                b.build_info()
            })
            .collect();
        let p = pod("p").req("cpu", "2").build_info();
        for chunk in [&nodes[..64], &nodes[64..]] {
            let refs: Vec<&NodeInfo> = chunk.iter().collect();
            let mut rejected = Vec::new();
            let pass = plan.run_batch(&cx, &state, &p, &refs, &mut rejected);
            let mut passed = 0;
            for (i, n) in chunk.iter().enumerate() {
                let one = plan.run(&cx, &state, &p, n);
                assert_eq!(pass & (1u64 << i) != 0, one.is_success(), "{}", n.name);
                passed += usize::from(one.is_success());
                if !one.is_success() {
                    let (_, st) = rejected
                        .iter()
                        .find(|(at, _)| *at == i)
                        .expect("a rejected node has its status");
                    assert_eq!(st.plugin(), one.plugin(), "{}", n.name);
                    assert_eq!(st.reasons(), one.reasons(), "{}", n.name);
                }
            }
            assert!(
                passed > 0 && !rejected.is_empty(),
                "both kinds in each batch"
            );
            assert_eq!(
                rejected.len() + passed,
                chunk.len(),
                "one status per rejection"
            );
            // The index finds each rejected position's own status, and no other position.
            let at = by_position(&rejected);
            for (i, &k) in at.iter().enumerate() {
                match rejected.get(usize::from(k)) {
                    Some((pos, _)) => assert_eq!(*pos, i, "index of position {i}"),
                    None => assert!(
                        pass & (1u64 << i) != 0 || i >= chunk.len(),
                        "rejected position {i} missing from the index"
                    ),
                }
            }
        }
    }
}
