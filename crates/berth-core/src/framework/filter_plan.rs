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
}
