//! [`CpusetCluster`]: what the scheduler knows across cycles about exclusive CPUs, held in
//! the scheduler state's `cpusets`: each node's CPU layout (from its NodeResourceTopology's koordlet
//! annotations), the cores the node keeps for itself, and the cores every pod and
//! reservation holds.
//!
//! The cores a pod holds come from one of two places: the scheduler's own Reserve (until the
//! bind comes back), or the pod's `scheduling.koordinator.sh/resource-status` annotation
//! (what PreBind wrote, read back from every bound pod, so a restarted scheduler rebuilds
//! the same picture). A reservation's cores are held under its UID, which is also the UID
//! of its stand-in pod on the node: the annotation written on the Reservation (or the
//! scheduler's own Reserve) is read through the stand-in. What is taken on a node is always
//! computed from the pods the cache has on it, so a deleted pod or an expired reservation
//! gives its cores back with no bookkeeping of its own.

use std::collections::BTreeMap;
use std::sync::Arc;

use berth_api::annotations::{
    AnnotationCodec, AnnotationError, CpuBindPolicy, CpuTopology, KubeletCpuManagerPolicy,
    NodeReservation, ResourceStatus, ANNOTATION_NODE_RESERVATION, ANNOTATION_RESOURCE_STATUS,
};
use berth_api::nrt::NodeResourceTopology;
use berth_api::validate::{Refusal, Rule};

use super::accumulator::take_cpus;
use super::topology::{CpuLayout, CpuSet};
use crate::cache::node_cache::NodeCache;
use crate::collections::HashMap;
use crate::model::node::{NodeIdx, NodeInfo};
use crate::model::pod::PodInfo;
use crate::numa::{TmPolicy, TopologyManagerConfig};
use crate::object::ObjectKey;

/// What a node's NodeResourceTopology says about its CPUs.
#[derive(Debug, Clone)]
struct Published {
    layout: Arc<CpuLayout>,
    kubelet_reserved: CpuSet,
    /// The Topology Manager asks for NUMA alignment (`single-numa-node` or `restricted`).
    aligned: bool,
    /// `node.koordinator.sh/reservation` as koordlet copied it onto the NRT.
    reservation: Option<NodeReservation>,
}

/// A node's CPUs as Filter and Reserve see them.
#[derive(Debug, Clone)]
pub struct NodeCpus {
    /// The layout.
    pub layout: Arc<CpuLayout>,
    /// CPUs no pod may get: the kubelet's reserved CPUs and the node reservation's.
    pub excluded: CpuSet,
    /// The node reservation's CPUs alone (seed 004), concrete.
    pub node_reserved: CpuSet,
    /// Exclusive CPUs must come from one NUMA node.
    pub aligned: bool,
    /// The layout's CPUs minus `excluded`, computed once per change of the node.
    usable: CpuSet,
}

impl NodeCpus {
    /// CPUs pods may be given at all.
    pub fn usable(&self) -> &CpuSet {
        &self.usable
    }
}

/// A pod holding CPUs its node now reserves (seed 004's descheduler list).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Eviction {
    /// The pod.
    pub pod: ObjectKey,
    /// Its UID.
    pub uid: String,
    /// Its node.
    pub node: String,
    /// The CPUs it holds that the node reserves.
    pub cpus: CpuSet,
}

impl Eviction {
    /// The Warning event's message.
    pub fn message(&self) -> String {
        format!(
            "pod {} holds CPUs {} that node {} reserves (node.koordinator.sh/reservation); it should be evicted",
            self.pod,
            self.cpus,
            self.node
        )
    }
}

/// The scheduler-wide exclusive-CPU state.
#[derive(Debug, Clone, Default)]
pub struct CpusetCluster {
    published: HashMap<Arc<str>, Published>,
    nodes: HashMap<Arc<str>, NodeCpus>,
    held: HashMap<Arc<str>, CpuSet>,
    /// Evictions already reported, by pod UID, so a node update does not repeat them.
    reported: HashMap<Arc<str>, CpuSet>,
}

impl CpusetCluster {
    /// A node's CPUs, when its NRT carries a valid CPU topology.
    pub fn node(&self, name: &str) -> Option<&NodeCpus> {
        self.nodes.get(name)
    }

    /// Whether any node publishes a CPU topology.
    pub fn has_topology(&self) -> bool {
        !self.nodes.is_empty()
    }

    /// The CPUs held under `uid` (a pod, or a reservation and its stand-in).
    pub fn held(&self, uid: &str) -> Option<&CpuSet> {
        self.held.get(uid)
    }

    /// Records that `uid` holds `cpus` (Reserve).
    pub fn hold(&mut self, uid: &str, cpus: CpuSet) {
        self.held.insert(uid.into(), cpus);
    }

    /// Forgets what `uid` holds (Unreserve, deletion).
    pub fn release(&mut self, uid: &str) {
        self.held.remove(uid);
        self.reported.remove(uid);
    }

    /// Every node's and holder's CPUs, for invariant checks.
    pub fn holders(&self) -> impl Iterator<Item = (&str, &CpuSet)> + '_ {
        self.held.iter().map(|(k, v)| (&**k, v))
    }

    /// Reads the CPU annotations of an NRT. A refused one (malformed, or a node reservation
    /// naming CPUs the topology lacks) is an error naming the annotation, the field and the
    /// rule; the node then has no CPU topology until a good one comes.
    pub fn apply_nrt(&mut self, nrt: &NodeResourceTopology) -> Result<(), (Rule, String)> {
        let name: Arc<str> = nrt.node_name().into();
        let annotations = nrt.metadata.annotations.as_ref();
        let refused = |e: AnnotationError| (e.rule(), e.to_string());
        let parsed = (|| {
            let topology = CpuTopology::from_annotations(annotations).map_err(refused)?;
            let kubelet =
                KubeletCpuManagerPolicy::from_annotations(annotations).map_err(refused)?;
            let reservation = NodeReservation::from_annotations(annotations).map_err(refused)?;
            berth_api::annotations::CpuSharedPools::from_annotations(annotations)
                .map_err(refused)?;
            Ok::<_, (Rule, String)>((topology, kubelet, reservation))
        })();
        self.published.remove(&name);
        let (topology, kubelet, reservation) = parsed?;
        let Some(layout) = topology.as_ref().and_then(CpuLayout::new) else {
            return Ok(());
        };
        if let Some(r) = &reservation {
            absent_reserved_cpus(&layout, r)?;
        }
        let kubelet_reserved = kubelet
            .as_ref()
            .and_then(|k| k.reserved_cpu_ids().ok())
            .map(CpuSet::from)
            .unwrap_or_default();
        let tm = TopologyManagerConfig::from_nrt_parts(
            &nrt.spec.topology_policies,
            nrt.spec
                .attributes
                .iter()
                .map(|a| (a.name.as_str(), a.value.as_str())),
        );
        self.published.insert(
            name,
            Published {
                layout: Arc::new(layout),
                kubelet_reserved,
                aligned: matches!(tm.policy, TmPolicy::SingleNumaNode | TmPolicy::Restricted),
                reservation,
            },
        );
        Ok(())
    }

    /// The CPU layout `node`'s NRT publishes, if any.
    pub fn layout(&self, node: &str) -> Option<&Arc<CpuLayout>> {
        self.published.get(node).map(|p| &p.layout)
    }

    /// Refuses node `idx`'s `node.koordinator.sh/reservation` when its `reservedCPUs` name
    /// CPUs the node's published CPU topology lacks (an annotation ignored whole, as if absent).
    pub fn check_reserved_cpus(&self, nodes: &mut NodeCache, idx: NodeIdx) {
        let Some(info) = nodes.node(idx) else {
            return;
        };
        if info.annotation_error.is_some() {
            return;
        }
        let Some(layout) = self.layout(&info.name) else {
            return;
        };
        let Ok(Some(r)) =
            NodeReservation::from_annotations(info.node.metadata.annotations.as_ref())
        else {
            return;
        };
        if let Err((rule, message)) = absent_reserved_cpus(layout, &r) {
            if let Some(info) = nodes.node_mut(idx) {
                info.refuse_reservation(rule, message);
            }
        }
    }

    /// The NRT of `node` was deleted: no CPU topology any more.
    pub fn delete_nrt(&mut self, node: &str) {
        self.published.remove(node);
        self.nodes.remove(node);
    }

    /// A pod was recorded: a `resource-status` with a cpuset is what it holds (a bound pod
    /// found at start-up, or the bind this scheduler made coming back). A malformed one
    /// holds nothing berth can read: the error says why, for the caller to report.
    pub fn pod_applied(&mut self, info: &PodInfo) -> Result<(), String> {
        if info.terminal {
            return Ok(());
        }
        if let Some(cpus) = status_cpus(info.annotation(ANNOTATION_RESOURCE_STATUS))? {
            self.held.insert(info.uid.clone(), cpus);
        }
        Ok(())
    }

    /// A Reservation was recorded: its `resource-status` is what it holds (a malformed one:
    /// as for a pod).
    pub fn reservation_applied(&mut self, uid: &str, status: Option<&str>) -> Result<(), String> {
        if let Some(cpus) = status_cpus(status)? {
            self.held.insert(uid.into(), cpus);
        }
        Ok(())
    }
}

/// The CPUs a `resource-status` names (`None`: no annotation, or no cpuset in it).
fn status_cpus(text: Option<&str>) -> Result<Option<CpuSet>, String> {
    let Some(text) = text else {
        return Ok(None);
    };
    let status = ResourceStatus::parse(text).map_err(|e| e.to_string())?;
    let cpus = status
        .cpu_ids()
        .map_err(|e| format!("cpuset {:?}: {e}", status.cpuset))?;
    Ok((!cpus.is_empty()).then(|| CpuSet::from(cpus)))
}

/// Refuses a node reservation whose `reservedCPUs` name a CPU `layout` lacks (the rule:
/// inconsistent), with the message of its event.
pub fn absent_reserved_cpus(layout: &CpuLayout, r: &NodeReservation) -> Result<(), (Rule, String)> {
    let Ok(ids) = r.reserved_cpu_ids() else {
        return Ok(());
    };
    match ids.iter().find(|c| !layout.contains(**c)) {
        None => Ok(()),
        Some(cpu) => {
            let refusal = Refusal::new(
                "reservedCPUs",
                Rule::Inconsistent,
                format!(
                    "CPU {cpu} is not in the node's CPU topology (CPUs {})",
                    layout.all()
                ),
            );
            Err((
                Rule::Inconsistent,
                format!("annotation {ANNOTATION_NODE_RESERVATION}: {refusal}"),
            ))
        }
    }
}

/// The concrete CPUs a node reservation keeps: `reservedCPUs` as given (CPUs the node does
/// not have are ignored: [`absent_reserved_cpus`] refuses such a reservation first), else `resources.cpu` rounded up to whole CPUs, picked as the
/// kubelet's static CPU manager picks its reserved CPUs (whole physical cores first, from
/// as few sockets as possible). Both apply policies keep the CPUs from pods.
pub fn concrete_reserved(
    layout: &CpuLayout,
    kubelet_reserved: &CpuSet,
    r: &NodeReservation,
) -> CpuSet {
    if let Ok(ids) = r.reserved_cpu_ids() {
        if !ids.is_empty() {
            return ids.into_iter().filter(|c| layout.contains(*c)).collect();
        }
    }
    let n = r.reserved_cpu_count().unwrap_or(0) as usize;
    let free = layout.all().difference(kubelet_reserved);
    take_cpus(layout, &free, n.min(free.len()), CpuBindPolicy::FullPcpus).unwrap_or_default()
}

/// Per-NUMA-node CPU counts of `cpus`, for `resource-status`.
pub fn numa_split(layout: &CpuLayout, cpus: &CpuSet) -> BTreeMap<u32, usize> {
    layout.per_numa_node(cpus)
}

impl CpusetCluster {
    /// The CPUs taken on `node`: by every pod on it, reservation stand-ins included.
    pub fn taken(&self, node: &NodeInfo) -> CpuSet {
        let mut out = CpuSet::new();
        for p in &node.pods {
            if let Some(c) = self.held(&p.uid) {
                out.union_with(c);
            }
        }
        out
    }

    /// The CPUs of reservation `uid` on `node` that none of the node's real pods hold: what
    /// its owners may still take.
    pub fn reservation_remaining(&self, node: &NodeInfo, uid: &str) -> CpuSet {
        let Some(reserved) = self.held(uid) else {
            return CpuSet::new();
        };
        let mut left = reserved.clone();
        for p in node.pods.iter().filter(|p| !p.is_reserve_pod()) {
            if let Some(c) = self.held(&p.uid) {
                left.difference_with(c);
            }
        }
        left
    }

    /// Recomputes what `node` excludes from its NRT and its Node object (call after either
    /// changed). Returns the pods now holding CPUs the node reserves, not reported before.
    pub fn refresh(&mut self, nodes: &NodeCache, node: &str) -> Vec<Eviction> {
        let Some(p) = self.published.get(node).cloned() else {
            self.nodes.remove(node);
            return Vec::new();
        };
        // The Node's own annotation wins (koordlet copies it onto the NRT, possibly later); a
        // refused one is ignored whole, the copy included.
        let info = nodes.node_by_name(node);
        let reservation = match info {
            Some(n) if n.annotation_error.is_some() => None,
            _ => info
                .and_then(|n| {
                    NodeReservation::from_annotations(n.node.metadata.annotations.as_ref())
                        .ok()
                        .flatten()
                })
                .or(p.reservation.clone()),
        };
        let node_reserved = reservation
            .map(|r| concrete_reserved(&p.layout, &p.kubelet_reserved, &r))
            .unwrap_or_default();
        // The node's `node.koordinator.sh/numa-topology-policy` label wins over the NRT's
        // Topology Manager policy, as in Koordinator.
        let label = nodes.node_by_name(node).and_then(|n| {
            n.labels
                .get(berth_api::annotations::LABEL_NODE_NUMA_TOPOLOGY_POLICY)
                .cloned()
        });
        let aligned = match label.as_deref() {
            Some("SingleNUMANode" | "Restricted") => true,
            Some("BestEffort" | "None") => false,
            _ => p.aligned,
        };
        let mut excluded = p.kubelet_reserved.clone();
        excluded.union_with(&node_reserved);
        let name: Arc<str> = node.into();
        let usable = p.layout.all().difference(&excluded);
        self.nodes.insert(
            name.clone(),
            NodeCpus {
                layout: p.layout.clone(),
                usable,
                excluded,
                node_reserved: node_reserved.clone(),
                aligned,
            },
        );
        let Some(info) = nodes.node_by_name(node) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for pod in info
            .pods
            .iter()
            .filter(|p| !p.is_reserve_pod() && !p.terminal)
        {
            let Some(held) = self.held(&pod.uid) else {
                continue;
            };
            let clash = held.intersection(&node_reserved);
            if clash.is_empty() || self.reported.get(&pod.uid) == Some(&clash) {
                continue;
            }
            out.push(Eviction {
                pod: pod.key.clone(),
                uid: pod.uid.to_string(),
                node: node.to_string(),
                cpus: clash,
            });
        }
        for e in &out {
            self.reported.insert(e.uid.as_str().into(), e.cpus.clone());
        }
        out
    }
}
