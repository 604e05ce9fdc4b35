//! The simulated node agent: the kubelet's pod admission and NFD's topology updater.
//!
//! The kubelet admits every pod bound to its node: admitted pods become `Running`; a pod its
//! Topology Manager cannot align is rejected (`Failed`, `TopologyAffinityError`). The
//! topology updater republishes each node's NodeResourceTopology every `nrtUpdatePeriod`.
//! The driver ([`crate::sim::Simulation`]) asks [`NodeAgent::admit`] after each bind and
//! fires [`NodeAgent::handle_timeout`] at [`NodeAgent::next_timeout`], in virtual time.

use berth_api::k8s_openapi::api::core::v1::Pod;
use berth_api::nrt::NodeResourceTopology;
use berth_core::time::Time;

use crate::scenario::NodeAgentConfig;
use crate::store::Store;

/// The kubelet's verdict on a pod bound to its node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Admission {
    /// The pod runs: `status.phase: Running`.
    Admit,
    /// The pod is rejected: `status.phase: Failed` with this reason and message.
    Reject {
        /// `status.reason`, e.g. `TopologyAffinityError`.
        reason: String,
        /// `status.message`.
        message: String,
    },
}

/// Every node's kubelet and topology updater (they share one clock, so one value suffices).
#[derive(Debug, Clone)]
pub struct NodeAgent {
    config: NodeAgentConfig,
    /// When the topology updaters publish next; `None` when they never do.
    next_publish: Option<Time>,
}

impl NodeAgent {
    /// An agent whose first publication (if any) is one period after `start`.
    pub fn new(config: NodeAgentConfig, start: Time) -> Self {
        Self {
            config,
            next_publish: config.nrt_update_period.map(|p| start.saturating_add(p)),
        }
    }

    /// The configuration.
    pub fn config(&self) -> NodeAgentConfig {
        self.config
    }

    /// Kubelet admission of `pod`, just bound to `node` (which exists in `store`).
    pub fn admit(&self, store: &Store, pod: &Pod, node: &str) -> Admission {
        // HOOK(numa-admission): the Topology Manager's admission goes here. With the node's
        // NodeResourceTopology (`store.nrt(node)`) under policy `single-numa-node` (in
        // `topologyPolicies` or the `topologyManagerPolicy` attribute), a Guaranteed pod that
        // cannot be aligned to one NUMA zone, given the pods already admitted there
        // (`store.pods_on(node)` with phase Running), is rejected with
        // `Admission::Reject { reason: "TopologyAffinityError", .. }`.
        let _ = (store, pod, node);
        Admission::Admit
    }

    /// When [`NodeAgent::handle_timeout`] has something to do next.
    pub fn next_timeout(&self) -> Option<Time> {
        self.next_publish
    }

    /// Runs what is due at `now`; returns the NodeResourceTopology objects to write back
    /// (the driver stores them and tells the scheduler).
    pub fn handle_timeout(&mut self, now: Time, store: &Store) -> Vec<NodeResourceTopology> {
        let (Some(due), Some(period)) = (self.next_publish, self.config.nrt_update_period) else {
            return Vec::new();
        };
        if due > now {
            return Vec::new();
        }
        // Publications missed on the way (none, when the driver fires timers in order)
        // collapse into this one, as a restarted updater would do.
        let mut next = due;
        while next <= now {
            next = next.saturating_add(period);
        }
        self.next_publish = Some(next);
        self.publish(now, store)
    }

    /// The topology updater's publication at `now`.
    fn publish(&self, now: Time, store: &Store) -> Vec<NodeResourceTopology> {
        // HOOK(nrt-publish): for each node with a NodeResourceTopology, recompute `available`
        // per zone after the kubelet's own placement of the admitted pods, and write the
        // pod-set fingerprint (method `all`) of the pods running on the node to the attribute
        // `nodeTopologyPodsFingerprint` and the annotation `topology.node.k8s.io/fingerprint`.
        // Returning an object here stores it and feeds it to the scheduler.
        let _ = (now, store);
        Vec::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_a_period_the_agent_never_wakes() {
        let agent = NodeAgent::new(NodeAgentConfig::default(), 0);
        assert_eq!(agent.next_timeout(), None);
    }

    #[test]
    fn publications_follow_the_period_from_the_start() {
        let config = NodeAgentConfig {
            nrt_update_period: Some(30_000),
        };
        let mut agent = NodeAgent::new(config, 1_000);
        assert_eq!(agent.next_timeout(), Some(31_000));
        agent.handle_timeout(30_999, &Store::default());
        assert_eq!(agent.next_timeout(), Some(31_000), "not due yet");
        agent.handle_timeout(31_000, &Store::default());
        assert_eq!(agent.next_timeout(), Some(61_000));
        agent.handle_timeout(200_000, &Store::default());
        assert_eq!(agent.next_timeout(), Some(211_000), "missed ones collapse");
    }
}
