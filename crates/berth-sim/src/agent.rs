//! The simulated node agent: the kubelet's pod admission and NFD's topology updater.
//!
//! The kubelet admits every pod bound to its node: admitted pods become `Running`; a pod its
//! Topology Manager cannot align is rejected (`Failed`, `TopologyAffinityError`). The
//! topology updater republishes each node's NodeResourceTopology every `nrtUpdatePeriod`.
//! The driver (the simulation) asks [`NodeAgent::admit`] after each bind and
//! fires [`NodeAgent::handle_timeout`] at [`NodeAgent::next_timeout`], in virtual time.

use std::collections::BTreeMap;

use berth_api::annotations::ANNOTATION_RESOURCE_STATUS;
use berth_api::k8s_openapi::api::core::v1::Pod;
use berth_api::nrt::NodeResourceTopology;
use berth_core::time::Time;
use berth_core::{Kind, Object};

use crate::numa_agent::{self, NumaAdmission, TOPOLOGY_AFFINITY_ERROR};
use crate::scenario::NodeAgentConfig;
use crate::store::Store;

/// The kubelet's verdict on a pod bound to its node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Admission {
    /// The pod runs: `status.phase: Running`, with these annotations written on it (what
    /// the kubelet gave it, e.g. `scheduling.koordinator.sh/resource-status`).
    Admit {
        /// Annotations to merge into the pod.
        annotations: BTreeMap<String, String>,
    },
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
        // The Topology Manager (see `numa_agent`): only nodes with an NRT have NUMA zones.
        let Some(nrt) = store.nrt(node) else {
            return Admission::Admit {
                annotations: BTreeMap::new(),
            };
        };
        let same = |p: &Pod| {
            p.metadata.namespace == pod.metadata.namespace && p.metadata.name == pod.metadata.name
        };
        let running = store
            .pods_on(node)
            .filter(|p| is_running(p) && !same(p))
            .map(|p| &**p);
        match numa_agent::admit(nrt, running, pod) {
            NumaAdmission::Admit { resource_status } => Admission::Admit {
                annotations: resource_status
                    .map(|v| (ANNOTATION_RESOURCE_STATUS.to_string(), v))
                    .into_iter()
                    .collect(),
            },
            NumaAdmission::Reject { message } => Admission::Reject {
                reason: TOPOLOGY_AFFINITY_ERROR.to_string(),
                message,
            },
        }
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
        // Every node that exists and has an NRT republishes it (see `numa_agent::republish`).
        let _ = now;
        store
            .of_kind(Kind::NodeResourceTopology)
            .filter_map(|o| match o {
                Object::NodeResourceTopology(t) => Some(t),
                _ => None,
            })
            .filter(|t| store.node(t.node_name()).is_some())
            .map(|t| {
                let running = store
                    .pods_on(t.node_name())
                    .filter(|p| is_running(p))
                    .map(|p| &**p);
                numa_agent::republish(t, running)
            })
            .collect()
    }
}

/// Admitted and not finished: what the kubelet (and so the topology updater) counts.
fn is_running(p: &Pod) -> bool {
    p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
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
