//! The scheduler's state: the [`NodeCache`] and, beside it, each domain's store.
//!
//! kube-scheduler keeps a cache plus a per-cycle snapshot because its filters run on many
//! goroutines while informers write. berth's core is single-threaded and scheduling is a
//! function of this state, so the cache is the snapshot: plugins read it by shared
//! reference during a cycle and only Reserve/Unreserve mutate it.
//!
//! [`Cluster`] owns the node cache and the domain stores side by side, so each domain's
//! logic borrows exactly what it touches (`reservations.pod_changed(&mut cache, ..)`) and
//! an input that concerns several of them is fanned out here, in one place.

use std::ops::{Deref, DerefMut};
use std::sync::Arc;

use berth_api::k8s_openapi::api::core::v1::Node;

use crate::model::node::{NodeError, NodeIdx};

pub mod affinity_counts;
pub mod assumed_volumes;
pub mod change_log;
pub mod domain_counts;
pub mod images;
pub mod node_cache;

pub use node_cache::{AffinityTotals, Namespaces, NodeCache, PodEntry, PodState};

/// The node cache and the domain stores beside it.
///
/// It dereferences to its [`NodeCache`] so plugins read nodes and pods as `cx.node(..)`;
/// inputs that concern a domain store go through its methods here.
#[derive(Debug, Default, Clone)]
pub struct Cluster {
    /// Nodes, pods and the API objects plugins consult.
    pub cache: NodeCache,
    /// Koordinator reservations, indexed by node and owner.
    pub reservations: crate::reservation::ReservationStore,
    /// NUMA topology per node through the reserve cache (NodeResourceTopologyMatch).
    pub numa: crate::numa::NumaCluster,
    /// Exclusive CPUs per node: layouts, node-reserved cores, what pods hold
    /// (NodeNUMAResource).
    pub cpusets: crate::cpuset::CpusetCluster,
    /// Per-topology-pair counts remembered across cycles (InterPodAffinity).
    affinity_counts: crate::plugins::interpodaffinity::counting::AffinityCounts,
}

impl Deref for Cluster {
    type Target = NodeCache;

    fn deref(&self) -> &NodeCache {
        &self.cache
    }
}

impl DerefMut for Cluster {
    fn deref_mut(&mut self) -> &mut NodeCache {
        &mut self.cache
    }
}

impl Cluster {
    /// Adds or replaces a node, then checks its CPU reservation against the node's
    /// published CPU layout.
    pub fn apply_node(&mut self, node: Arc<Node>) -> Result<NodeIdx, NodeError> {
        let idx = self.cache.apply_node(node)?;
        self.check_reserved_cpus(idx);
        Ok(idx)
    }

    /// Refuses the node's `node.koordinator.sh/reservation` when its `reservedCPUs` name
    /// CPUs the node's published CPU topology lacks: the annotation is then ignored whole
    /// (allocatable untrimmed, no CPU kept back), as if absent. Without a published topology
    /// there is nothing to check against.
    pub fn check_reserved_cpus(&mut self, idx: NodeIdx) {
        self.cpusets.check_reserved_cpus(&mut self.cache, idx);
    }

    /// InterPodAffinity's remembered answers (see [`affinity_counts`]).
    pub(crate) fn affinity_counts(
        &self,
    ) -> &crate::plugins::interpodaffinity::counting::AffinityCounts {
        &self.affinity_counts
    }
}
