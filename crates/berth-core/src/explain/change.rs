//! The smallest change that lets a pod fit: per node, what it is short of when only
//! resources stand in the way, and the node where that shortfall is smallest.

use serde::Serialize;

use berth_api::quantity::format_resource;

use crate::cache::Cluster;
use crate::framework::CycleState;
use crate::model::node::NodeInfo;
use crate::model::pod::PodInfo;
use crate::plugins::names;

use super::NodeExplanation;

/// One resource a pod is short of on a node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Shortfall {
    /// The resource (`cpu`, `memory`, `pods`, `nvidia.com/gpu`).
    pub resource: String,
    /// Where: `node` (its free capacity) or `numa zone N` (one NUMA zone).
    pub scope: String,
    /// What the pod asks for, in the resource's unit (milli-CPU, bytes, count).
    pub requested: i64,
    /// What is free for it there.
    pub free: i64,
    /// `requested - free`.
    pub short: i64,
    /// The node's (or zone's) allocatable, to weigh shortfalls of different resources.
    pub capacity: i64,
}

impl Shortfall {
    /// `cpu short by 500m (requested 2, free 1500m)`.
    pub fn describe(&self) -> String {
        let f = |v: i64| format_resource(&self.resource, v);
        format!(
            "{} short by {} (requested {}, free {})",
            self.resource,
            f(self.short),
            f(self.requested),
            f(self.free.max(0))
        )
    }

    /// The shortfall as a fraction of what the node (or zone) has, so that 500m of CPU and
    /// 1Gi of memory can be compared.
    fn weight(&self) -> f64 {
        if self.capacity > 0 {
            self.short as f64 / self.capacity as f64
        } else {
            // Nothing of it at all: adding the resource is a bigger change than growing it.
            1.0 + self.short as f64
        }
    }
}

/// The smallest change that would let the pod fit.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase", tag = "kind")]
pub enum Change {
    /// It fits already (or is placed): nothing to change.
    NotNeeded {
        /// A node it fits on (or is on).
        node: String,
    },
    /// Free this much on this node (or add the capacity).
    Resources {
        /// The node.
        node: String,
        /// What it is short of there.
        shortfall: Vec<Shortfall>,
    },
    /// No change of resources helps: other plugins reject it everywhere.
    None {
        /// Why (the plugins that reject it on every node).
        why: String,
    },
}

/// Plugins whose rejections are about amounts: freeing or adding resources lifts them.
fn resource_plugin(plugin: &str) -> bool {
    plugin == names::NODE_RESOURCES_FIT
        || plugin == names::NODE_RESOURCE_TOPOLOGY_MATCH
        || plugin == names::RESERVATION
}

/// Whether a rejection is one that a change of resources lifts (and only that).
fn resource_reason(plugin: &str, reason: &str) -> bool {
    if plugin == names::NODE_RESOURCES_FIT {
        return reason.starts_with("Insufficient ") || reason == "Too many pods";
    }
    if plugin == names::RESERVATION {
        return reason.starts_with("Insufficient ") && reason.ends_with(" by node");
    }
    if plugin == names::NODE_RESOURCE_TOPOLOGY_MATCH {
        return reason.starts_with("cannot align");
    }
    false
}

/// What `pod` is short of on `node`: free capacity per requested resource (with what its
/// reservations give back there), the pod count, and for a NUMA rejection the zone that lacks
/// least. Empty when resources are not among the node's reasons.
pub(super) fn shortfall(
    cx: &Cluster,
    state: &CycleState,
    pod: &PodInfo,
    node: &NodeInfo,
    n: &NodeExplanation,
) -> Vec<Shortfall> {
    let mut out = Vec::new();
    let fit = n.rejected_by(names::NODE_RESOURCES_FIT) || n.rejected_by(names::RESERVATION);
    if fit {
        let free = super::free_for(state, pod, node);
        for (id, want) in pod.requests.non_zero() {
            let name = cx.cache.names.name(id);
            if want <= 0 || name == "pods" || want <= free[id] {
                continue;
            }
            out.push(Shortfall {
                resource: name.to_string(),
                scope: "node".into(),
                requested: want,
                free: free[id],
                short: want - free[id].max(0),
                capacity: node.allocatable[id],
            });
        }
        // A Reservation's reserve pod takes a pod slot like any pod (Koordinator schedules it
        // through the same Filter), so it is refused on a full node too.
        if node.pods.len() as i64 + 1 > node.allowed_pods {
            let free = node.allowed_pods - node.pods.len() as i64;
            out.push(Shortfall {
                resource: "pods".into(),
                scope: "node".into(),
                requested: 1,
                free,
                short: 1 - free.max(0),
                capacity: node.allowed_pods,
            });
        }
    }
    if n.rejected_by(names::NODE_RESOURCE_TOPOLOGY_MATCH) {
        if let Some(zone) = n.numa.as_ref().and_then(|d| d.smallest_lack()) {
            out.extend(zone);
        }
    }
    out
}

/// The node where the pod's shortfall weighs least, among nodes rejected only for
/// resources; `None` with the plugins to blame when there is no such node.
pub(super) fn smallest(nodes: &[NodeExplanation]) -> Change {
    if let Some(n) = nodes.iter().find(|n| n.feasible) {
        return Change::NotNeeded {
            node: n.node.clone(),
        };
    }
    if nodes.is_empty() {
        return Change::None {
            why: "the cluster has no nodes".into(),
        };
    }
    let mut best: Option<(f64, &NodeExplanation)> = None;
    let mut blockers: std::collections::BTreeSet<String> = Default::default();
    for n in nodes {
        let only_resources = n.rejections.iter().all(|r| {
            resource_plugin(&r.plugin) && r.reasons.iter().all(|x| resource_reason(&r.plugin, x))
        });
        if !only_resources || n.shortfall.is_empty() {
            for r in &n.rejections {
                if !(resource_plugin(&r.plugin)
                    && r.reasons.iter().all(|x| resource_reason(&r.plugin, x)))
                {
                    blockers.insert(r.plugin.clone());
                }
            }
            continue;
        }
        let w: f64 = n.shortfall.iter().map(Shortfall::weight).sum();
        // Nodes come sorted by name: the first of equal weights wins.
        if best.as_ref().is_none_or(|(bw, _)| w < *bw) {
            best = Some((w, n));
        }
    }
    match best {
        Some((_, n)) => Change::Resources {
            node: n.node.clone(),
            shortfall: n.shortfall.clone(),
        },
        None => Change::None {
            why: format!(
                "no change of resources helps: every node is rejected by {}",
                blockers.into_iter().collect::<Vec<_>>().join(", ")
            ),
        },
    }
}
