//! Read-only queries on what the scheduler knows, for drivers (gauges, tables, reports,
//! benchmarks) and tests: they read the core through these and a [`Counters`] snapshot,
//! never its fields, so the core's state can change shape without them noticing.

use crate::cache::{PodEntry, PodState};
use crate::cpuset::NodeCpus;
use crate::model::node::NodeInfo;
use crate::numa::NumaCluster;
use crate::object::ObjectKey;
use crate::reservation::ReservationInfo;

use super::{Counters, Scheduler};

impl Scheduler {
    /// A snapshot of the counters (cycles, placements, preemptions...).
    pub fn stats(&self) -> Counters {
        self.counters.clone()
    }

    /// A live node by name.
    pub fn node(&self, name: &str) -> Option<&NodeInfo> {
        self.cluster.cache.node_by_name(name)
    }

    /// Live nodes, in the order they were added.
    pub fn nodes(&self) -> impl Iterator<Item = &NodeInfo> + '_ {
        self.cluster.cache.nodes()
    }

    /// Number of live nodes.
    pub fn node_count(&self) -> usize {
        self.cluster.cache.node_count()
    }

    /// A known pod and where it stands.
    pub fn pod(&self, key: &ObjectKey) -> Option<&PodEntry> {
        self.cluster.cache.pod(key)
    }

    /// Every known pod.
    pub fn pods(&self) -> impl Iterator<Item = &PodEntry> + '_ {
        self.cluster.cache.pods()
    }

    /// Pods placed by this scheduler whose bind is not confirmed yet (walks every pod).
    pub fn assumed_pods(&self) -> usize {
        self.cluster
            .cache
            .pods()
            .filter(|p| p.state == PodState::Assumed)
            .count()
    }

    /// Every known reservation (virtual DRP ones included).
    pub fn reservations(&self) -> impl Iterator<Item = &ReservationInfo> + '_ {
        self.cluster.reservations.iter()
    }

    /// A reservation by name.
    pub fn reservation(&self, name: &str) -> Option<&ReservationInfo> {
        self.cluster.reservations.by_name(name)
    }

    /// The reservation whose share `pod` holds, if any.
    pub fn reservation_of(&self, pod: &ObjectKey) -> Option<&ReservationInfo> {
        let r = &self.cluster.reservations;
        r.owner_of(pod).and_then(|i| r.get(i))
    }

    /// The NUMA state: the reserve cache, each node's view, refused NRTs.
    pub fn numa(&self) -> &NumaCluster {
        &self.cluster.numa
    }

    /// A node's exclusive CPUs, when its NRT carries a valid CPU topology.
    pub fn node_cpus(&self, node: &str) -> Option<&NodeCpus> {
        self.cluster.cpusets.node(node)
    }

    /// The device state: slices, classes, claims and what is allocated or held.
    pub fn dra(&self) -> &crate::dra::DraState {
        &self.cluster.cache.dra
    }
}
