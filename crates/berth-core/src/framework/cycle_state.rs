//! Per-cycle state: what PreFilter/PreScore computed once for the pod being scheduled.
//!
//! Every plugin is in-tree, so this is a closed struct with one typed slot per plugin that
//! needs one (no `Any` map, no downcasts) and `Clone` comes by derive, as preemption needs.

use crate::model::node::NodeIdx;
use crate::plugins;

/// State of one scheduling cycle.
#[derive(Debug, Clone, Default)]
pub struct CycleState {
    /// The instant the cycle runs at: Reserve stamps what it writes with it (a reservation's
    /// `Available` condition), and Unreserve of a failed bind runs at the failure's time.
    pub now: crate::time::Time,
    /// Bit `i` set: the profile's plugin `i` skips Filter (its PreFilter returned Skip).
    pub skip_filter: u64,
    /// Bit `i` set: the profile's plugin `i` skips Score.
    pub skip_score: u64,
    /// Nodes PreFilter narrowed the search to (`PreFilterResult.NodeNames`), if any.
    pub node_subset: Option<Vec<NodeIdx>>,
    /// Plugins that narrowed [`CycleState::node_subset`], for the message about the rest.
    pub subset_plugins: Vec<&'static str>,
    /// Nodes Filter evaluates before the rotating sample, sorted (the nodes holding the
    /// pod's reservations: with 5,000 nodes only a tenth are sampled, and an owner must find
    /// its reservation's node).
    pub preferred_nodes: Vec<NodeIdx>,
    /// Set while Filter runs the rotating sample after the preferred nodes: no node it
    /// hands a plugin is one of them (the sample skips them), so a plugin's per-node "is
    /// this one of the pod's reservation nodes?" is no everywhere, and asked nowhere.
    pub outside_preferred: bool,
    /// NodeAffinity.
    pub node_affinity: Option<Box<plugins::nodeaffinity::State>>,
    /// InterPodAffinity.
    pub inter_pod_affinity: Option<Box<plugins::interpodaffinity::State>>,
    /// InterPodAffinity's PreScore state.
    pub inter_pod_affinity_score: Option<Box<plugins::interpodaffinity::ScoreState>>,
    /// PodTopologySpread.
    pub pod_topology_spread: Option<Box<plugins::podtopologyspread::State>>,
    /// PodTopologySpread's PreScore state.
    pub pod_topology_spread_score: Option<Box<plugins::podtopologyspread::ScoreState>>,
    /// ImageLocality's PreScore state.
    pub image_locality: Option<Box<plugins::imagelocality::State>>,
    /// Reservation.
    pub reservation: Option<Box<plugins::reservation::State>>,
    /// NodeResourceTopologyMatch.
    pub numa: Option<Box<plugins::numatopology::State>>,
    /// NodeNUMAResource (exclusive CPUs).
    pub cpuset: Option<Box<plugins::nodenumaresource::State>>,
    /// VolumeRestrictions.
    pub volume_restrictions: Option<Box<plugins::volumerestrictions::State>>,
    /// NodeVolumeLimits.
    pub node_volume_limits: Option<Box<plugins::nodevolumelimits::State>>,
    /// VolumeBinding's PreFilter/Reserve state.
    pub volume_binding: Option<Box<plugins::volumebinding::State>>,
    /// VolumeZone's PreFilter state.
    pub volume_zone: Option<Box<plugins::volumezone::State>>,
    /// DynamicResources' PreFilter/Reserve state.
    pub dynamic_resources: Option<Box<plugins::dynamicresources::State>>,
    /// DynamicResources' PreFilter ran (an earlier PreFilter may have rejected the pod
    /// first); its PostFilter fails without it, as kube-scheduler's does.
    pub dynamic_resources_ran: bool,
}

impl CycleState {
    /// Narrows the candidate nodes to `nodes` (intersecting with an earlier narrowing).
    pub fn restrict_nodes(&mut self, plugin: &'static str, mut nodes: Vec<NodeIdx>) {
        if !self.subset_plugins.contains(&plugin) {
            self.subset_plugins.push(plugin);
            self.subset_plugins.sort_unstable();
        }
        nodes.sort_unstable();
        nodes.dedup();
        self.node_subset = Some(match self.node_subset.take() {
            None => nodes,
            Some(prev) => prev
                .into_iter()
                .filter(|n| nodes.binary_search(n).is_ok())
                .collect(),
        });
    }
}
