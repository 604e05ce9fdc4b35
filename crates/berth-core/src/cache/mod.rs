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

use std::sync::Arc;

use berth_api::k8s_openapi::api::core::v1::Node;

use crate::model::node::{NodeError, NodeIdx};
use crate::model::pod::PodInfo;
use crate::object::ObjectKey;
use crate::time::Time;

pub mod affinity_counts;
pub mod assumed_volumes;
pub mod change_log;
pub mod domain_counts;
pub mod images;
pub mod node_cache;

pub use node_cache::{AffinityTotals, Namespaces, NodeCache, PodEntry, PodState};

/// What [`Cluster::node_applied`] did.
#[derive(Debug)]
pub struct NodeApplied {
    /// The node's slot.
    pub idx: NodeIdx,
    /// Pods holding exclusive CPUs the node now reserves (to be told to leave).
    pub evictions: Vec<crate::cpuset::Eviction>,
    /// The CPUs the node keeps from exclusive-CPU pods changed.
    pub cpus_changed: bool,
}

/// The node cache and the domain stores beside it.
///
/// Plugins and callers name the node cache explicitly (`cx.cache.node(..)`), so a
/// signature says what it reads; inputs that concern a domain store go through the
/// methods here.
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

    /// A node was added or replaced: the node cache takes it (its CPU reservation checked
    /// against its CPU layout), reservations waiting for it attach, and the exclusive CPUs
    /// it keeps from pods are worked out again.
    pub fn node_applied(&mut self, node: Arc<Node>) -> Result<NodeApplied, NodeError> {
        let name = node.metadata.name.clone().unwrap_or_default();
        let idx = self.apply_node(node)?;
        self.reservations.node_applied(&mut self.cache, idx);
        let cpus_before = self.cpusets.node(&name).map(|c| c.excluded.clone());
        let evictions = self.cpusets.refresh(&self.cache, &name);
        let cpus_after = self.cpusets.node(&name).map(|c| c.excluded.clone());
        Ok(NodeApplied {
            idx,
            evictions,
            cpus_changed: cpus_before != cpus_after,
        })
    }

    /// A node was deleted: the node cache and the NUMA cache forget it, and its
    /// reservations fail.
    pub fn node_deleted(&mut self, name: &str, now: Time) {
        let idx = self.cache.node_idx(name);
        self.cache.delete_node(name);
        self.numa.delete_node(name);
        self.reservations
            .node_deleted(&mut self.cache, idx, name, now);
    }

    /// A pod was added or replaced: the node cache takes it, then the exclusive CPUs it
    /// holds (its `resource-status`, which may be unreadable: the error) and the NUMA cache
    /// follow. `foreign`: another scheduler's pod. Returns the entry it replaced. The
    /// reservation store hears of it through [`Cluster::pod_settled`], once the scheduler's
    /// own bookkeeping of the pod is done.
    pub fn pod_applied(
        &mut self,
        info: Arc<PodInfo>,
        foreign: bool,
        now: Time,
    ) -> (Option<PodEntry>, Result<(), String>) {
        let prev = self.cache.apply_pod(info.clone());
        let cpus = self.cpusets.pod_applied(&info);
        self.numa
            .pod_applied(&self.cache, prev.as_ref(), &info, foreign, now);
        (prev, cpus)
    }

    /// The reservation store's part of a pod input (applied, refused as unreadable or
    /// deleted): the reservation it owns a share of follows what the cache now holds.
    pub fn pod_settled(&mut self, key: &ObjectKey, now: Time) {
        self.reservations.pod_changed(&mut self.cache, key, now);
    }

    /// A pod was deleted: the node cache drops it, its exclusive CPUs and NUMA hold are
    /// given back (`foreign` says whether it was another scheduler's) and the reservation
    /// it owned a share of gets the share back. Returns the cache's entry (`None`: not
    /// known).
    pub fn pod_deleted(
        &mut self,
        key: &ObjectKey,
        foreign: impl FnOnce(&PodInfo) -> bool,
        now: Time,
    ) -> Option<PodEntry> {
        let removed = self.cache.remove_pod(key);
        if let Some(e) = &removed {
            self.cpusets.release(&e.info.uid);
            let foreign = foreign(&e.info);
            self.numa.pod_deleted(&self.cache, e, foreign, now);
        }
        self.reservations.pod_removed(&mut self.cache, key);
        removed
    }

    /// A Reservation was deleted: its exclusive CPUs, its share of nodes and the devices
    /// it held are given back.
    pub fn reservation_deleted(&mut self, name: &str) {
        if let Some(uid) = self.reservations.by_name(name).map(|r| r.uid.clone()) {
            self.cpusets.release(&uid);
        }
        self.reservations.delete(&mut self.cache, name);
        self.cache.dra.release(name);
    }

    /// A NodeResourceTopology was deleted: the node has no NUMA data nor CPU layout.
    pub fn nrt_deleted(&mut self, node: &str) {
        self.numa.delete_nrt(node);
        self.cpusets.delete_nrt(node);
    }

    /// InterPodAffinity's remembered answers (see [`affinity_counts`]).
    pub(crate) fn affinity_counts(
        &self,
    ) -> &crate::plugins::interpodaffinity::counting::AffinityCounts {
        &self.affinity_counts
    }
}
