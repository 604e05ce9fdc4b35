//! [`NodeInfo`]: a node and everything the scheduler has placed or holds on it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use berth_api::k8s_openapi::api::core::v1::{Node, Taint};
use berth_api::quantity::ParsedQuantity;
use berth_api::validate::{Refusal, Rule};
use smallvec::SmallVec;

use crate::model::pod::{HostPort, PodInfo};
use crate::model::selector::Labels;
use crate::resources::{ResourceId, ResourceNames, Resources, TooManyResources, MAX_RESOURCES};

/// Pods a node takes when its status does not say (kubelet's default `maxPods`).
pub const DEFAULT_MAX_PODS: i64 = 110;

/// Index of a node in the cluster's node table. Stable while the node lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeIdx(pub u32);

impl NodeIdx {
    /// As a `usize` index.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// A node and the pods on it.
#[derive(Debug, Clone)]
pub struct NodeInfo {
    /// The node's index.
    pub idx: NodeIdx,
    /// `metadata.name`.
    pub name: Arc<str>,
    /// The API object.
    pub node: Arc<Node>,
    /// `metadata.labels`.
    pub labels: Labels,
    /// `spec.taints`.
    pub taints: Vec<Taint>,
    /// `spec.unschedulable`.
    pub unschedulable: bool,
    /// `status.allocatable` (falling back to `status.capacity`), after node reservation trim.
    pub allocatable: Resources,
    /// How many pods fit (`allocatable.pods`).
    pub allowed_pods: i64,
    /// Sum of the requests of non-terminal pods on the node, assumed ones included.
    pub requested: Resources,
    /// Sum of scoring requests (with the 100m/200Mi defaults).
    pub non_zero_requested: Resources,
    /// Resources held for reservations on this node and not yet allocated to owners: other
    /// pods cannot use them.
    pub reserved: Resources,
    /// Pods on the node (assumed and bound, not terminal).
    pub pods: Vec<Arc<PodInfo>>,
    /// Host ports in use by those pods.
    pub used_ports: SmallVec<[HostPort; 4]>,
    /// Host ports held by reservations for their owners.
    pub reserved_ports: SmallVec<[HostPort; 2]>,
    /// Pods with any (anti-)affinity term, for InterPodAffinity.
    pub pods_with_affinity: u32,
    /// Pods with required anti-affinity, for InterPodAffinity.
    pub pods_with_required_anti_affinity: u32,
    /// A stamp no other state of any node has had: renewed ([`NodeInfo::touch`]) on every
    /// change, kept by clones. Caches that derive something from a node's pods and labels
    /// (the per-domain counts of [`crate::cache::domain_counts`]) reuse it while the stamp
    /// is the same, even across a preemption simulation that restores a saved copy.
    pub generation: u64,
    /// Why `node.koordinator.sh/reservation` was refused (ignored, as if absent), if it was:
    /// the rule broken and the message naming the field.
    pub annotation_error: Option<(Rule, String)>,
    /// `status.allocatable` before the node reservation trim, so a reservation refused
    /// later (its `reservedCPUs` name CPUs the node's topology lacks) can be ignored.
    untrimmed: Resources,
    /// The sums the per-node Filter and Score arithmetic reads, kept by [`NodeInfo::touch`]
    /// (worked out eagerly: a lazy cell's check on every read cost the basic cycle more than
    /// it saved preemption's dry run).
    derived: Derived,
}

/// Sums of [`NodeInfo`]'s resource vectors (and its pods' lowest priority), worked out when
/// the node changes rather than on every node filtered and scored (saturating arithmetic per slot per node was a third
/// of NodeResourcesFit's and BalancedAllocation's cost).
#[derive(Debug, Clone, PartialEq)]
struct Derived {
    /// `allocatable - requested - reserved`.
    free: Resources,
    /// `requested + reserved`.
    used: Resources,
    /// `non_zero_requested + reserved`.
    scoring_used: Resources,
    /// The lowest priority of the node's pods (`i32::MAX` without pods): preemption's dry
    /// run on a full cluster asks every node whether it has anything to evict, and this
    /// answers without reading each pod.
    lowest_priority: i32,
}

impl Default for Derived {
    fn default() -> Self {
        Self {
            free: Resources::ZERO,
            used: Resources::ZERO,
            scoring_used: Resources::ZERO,
            lowest_priority: i32::MAX,
        }
    }
}

impl Derived {
    /// Worked out on every change other than a pod's coming or going (those redo only the
    /// pod's slots, [`NodeInfo::add_pod`] and [`NodeInfo::remove_pod`]), and only over the
    /// slots in use: past the last slot any of the node's vectors uses, every sum is 0.
    fn of(n: &NodeInfo) -> Self {
        let (alloc, req) = (&n.allocatable.0, &n.requested.0);
        let (nz, held) = (&n.non_zero_requested.0, &n.reserved.0);
        let in_use = (0..MAX_RESOURCES)
            .rev()
            .find(|&i| alloc[i] | req[i] | nz[i] | held[i] != 0)
            .map_or(0, |i| i + 1);
        let mut me = Self::default();
        for i in 0..in_use {
            me.set_slot(i, alloc[i], req[i], nz[i], held[i]);
        }
        me.lowest_priority = lowest_priority(&n.pods);
        me
    }

    /// Works out slot `i` from the vectors' values there: [`Derived::of`] does this for
    /// every slot in use, [`NodeInfo::touch_slots`] for the slots a pod changed, so both
    /// give the same sums.
    #[inline]
    fn set_slot(&mut self, i: usize, alloc: i64, req: i64, nz: i64, held: i64) {
        self.free.0[i] = alloc.saturating_sub(req).saturating_sub(held);
        self.used.0[i] = req.saturating_add(held);
        self.scoring_used.0[i] = nz.saturating_add(held);
    }
}

/// The lowest priority of `pods`, `i32::MAX` for none.
fn lowest_priority(pods: &[Arc<PodInfo>]) -> i32 {
    pods.iter().map(|p| p.priority).min().unwrap_or(i32::MAX)
}

/// Bit `i`: slot `i` of the pod's requests or scoring requests is not 0. Only these slots
/// change when the pod comes or goes (adding or taking away 0 changes nothing, saturated or
/// not).
fn pod_slots(pod: &PodInfo) -> u32 {
    let mut mask = 0u32;
    for (i, (r, nz)) in pod.requests.0.iter().zip(&pod.non_zero.0).enumerate() {
        // `|` rather than `||`: no branch per slot, so the loop is a few vector steps.
        mask |= u32::from((*r | *nz) != 0) << i;
    }
    mask
}

impl NodeInfo {
    /// A node with nothing on it. `allocatable` is read from the object.
    pub fn new(
        idx: NodeIdx,
        node: Arc<Node>,
        names: &mut ResourceNames,
    ) -> Result<Self, NodeError> {
        let mut me = Self {
            idx,
            name: node.metadata.name.as_deref().unwrap_or("").into(),
            node: node.clone(),
            labels: Labels::new(),
            taints: Vec::new(),
            unschedulable: false,
            allocatable: Resources::ZERO,
            allowed_pods: DEFAULT_MAX_PODS,
            requested: Resources::ZERO,
            non_zero_requested: Resources::ZERO,
            reserved: Resources::ZERO,
            pods: Vec::new(),
            used_ports: SmallVec::new(),
            reserved_ports: SmallVec::new(),
            pods_with_affinity: 0,
            pods_with_required_anti_affinity: 0,
            generation: 0,
            annotation_error: None,
            untrimmed: Resources::ZERO,
            derived: Derived::default(),
        };
        me.set_node(node, names)?;
        Ok(me)
    }

    /// Replaces the node object, keeping the pods.
    pub fn set_node(
        &mut self,
        node: Arc<Node>,
        names: &mut ResourceNames,
    ) -> Result<(), NodeError> {
        let status = node.status.as_ref();
        let list = status
            .and_then(|s| s.allocatable.as_ref().filter(|m| !m.is_empty()))
            .or_else(|| status.and_then(|s| s.capacity.as_ref()));
        let mut alloc = Resources::ZERO;
        let mut pods = DEFAULT_MAX_PODS;
        let field = if status
            .and_then(|s| s.allocatable.as_ref())
            .is_some_and(|m| !m.is_empty())
        {
            "status.allocatable"
        } else {
            "status.capacity"
        };
        for (name, q) in list.into_iter().flatten() {
            let path = format!("{field}[{name}]");
            let parsed = ParsedQuantity::parse(&q.0).map_err(|source| NodeError::Quantity {
                field: path.clone(),
                source,
            })?;
            // Negative or uncountable capacity is refused (the API server refuses it too),
            // never clamped.
            let amount = berth_api::validate::amount(&path, name, &q.0)?;
            if name == "pods" {
                pods = parsed.value();
                continue;
            }
            let id = names.intern(name)?;
            alloc[id] = amount;
        }
        self.untrimmed = alloc;
        self.annotation_error = None;
        match trim_node_reservation(&node, names, &mut alloc) {
            Ok(()) => {}
            // A refused annotation is the node owner's problem, not a reason to drop the
            // node: it is scheduled untrimmed, as without the annotation, and the driver
            // reports the message.
            Err(refused) => {
                alloc = self.untrimmed;
                self.annotation_error = Some(refused);
            }
        }
        self.allocatable = alloc;
        self.allowed_pods = pods;
        self.labels = node.metadata.labels.clone().unwrap_or_default();
        self.taints = node
            .spec
            .as_ref()
            .and_then(|s| s.taints.clone())
            .unwrap_or_default();
        self.unschedulable = node
            .spec
            .as_ref()
            .and_then(|s| s.unschedulable)
            .unwrap_or(false);
        self.name = node.metadata.name.as_deref().unwrap_or("").into();
        self.node = node;
        self.touch();
        Ok(())
    }

    /// Ignores `node.koordinator.sh/reservation` (refused for `rule` with `message` by a
    /// check that needs more than the Node: its `reservedCPUs` against the published CPU
    /// topology): allocatable goes back to what the node reports.
    pub fn refuse_reservation(&mut self, rule: Rule, message: String) {
        self.allocatable = self.untrimmed;
        self.annotation_error = Some((rule, message));
        self.touch();
    }

    /// Accounts a pod on this node.
    pub fn add_pod(&mut self, pod: Arc<PodInfo>) {
        // Preemption's dry run adds and removes pods on node copies millions of times: only
        // the pod's slots are summed and worked out again.
        let slots = pod_slots(&pod);
        for id in ResourceId::in_mask(slots) {
            self.requested[id] = self.requested[id].saturating_add(pod.requests[id]);
            self.non_zero_requested[id] =
                self.non_zero_requested[id].saturating_add(pod.non_zero[id]);
        }
        if !pod.host_ports.is_empty() {
            self.used_ports.extend(pod.host_ports.iter().cloned());
        }
        let (any, anti) = affinity_flags(&pod);
        self.pods_with_affinity += u32::from(any);
        self.pods_with_required_anti_affinity += u32::from(anti);
        let lowest = self.derived.lowest_priority.min(pod.priority);
        self.pods.push(pod);
        self.touch_slots(slots, lowest);
    }

    /// Removes a pod by key; returns it if it was here.
    pub fn remove_pod(&mut self, key: &crate::object::ObjectKey) -> Option<Arc<PodInfo>> {
        let pos = self.pods.iter().position(|p| &p.key == key)?;
        let pod = self.pods.swap_remove(pos);
        let slots = pod_slots(&pod);
        for id in ResourceId::in_mask(slots) {
            self.requested[id] = self.requested[id].saturating_sub(pod.requests[id]);
            self.non_zero_requested[id] =
                self.non_zero_requested[id].saturating_sub(pod.non_zero[id]);
        }
        for hp in &pod.host_ports {
            if let Some(i) = self.used_ports.iter().position(|u| u == hp) {
                self.used_ports.swap_remove(i);
            }
        }
        let (any, anti) = affinity_flags(&pod);
        self.pods_with_affinity -= u32::from(any);
        self.pods_with_required_anti_affinity -= u32::from(anti);
        // Only a pod at the lowest priority can raise it by leaving.
        let lowest = if pod.priority > self.derived.lowest_priority {
            self.derived.lowest_priority
        } else {
            lowest_priority(&self.pods)
        };
        self.touch_slots(slots, lowest);
        Some(pod)
    }

    /// [`NodeInfo::touch`] after a change to `slots` of the resource vectors alone, with
    /// the pods' lowest priority given.
    fn touch_slots(&mut self, slots: u32, lowest_priority: i32) {
        self.generation = next_generation();
        for id in ResourceId::in_mask(slots) {
            let i = id.index();
            self.derived.set_slot(
                i,
                self.allocatable.0[i],
                self.requested.0[i],
                self.non_zero_requested.0[i],
                self.reserved.0[i],
            );
        }
        self.derived.lowest_priority = lowest_priority;
    }

    /// Gives the node a fresh [`NodeInfo::generation`] and works out its sums again: call
    /// after changing it.
    pub fn touch(&mut self) {
        self.generation = next_generation();
        self.derived = Derived::of(self);
    }

    /// The sums, checked against their fields in debug builds: a change without
    /// [`NodeInfo::touch`] is caught by every test that filters or scores the node.
    #[inline]
    fn derived(&self) -> &Derived {
        debug_assert_eq!(
            self.derived,
            Derived::of(self),
            "node {} changed without touch()",
            self.name
        );
        &self.derived
    }

    /// What is left for a pod that may not use reserved capacity: `allocatable - requested
    /// - reserved`, per slot, saturating.
    #[inline]
    pub fn free(&self) -> &Resources {
        &self.derived().free
    }

    /// What the node's pods and reservations take: `requested + reserved`, saturating.
    #[inline]
    pub fn used(&self) -> &Resources {
        &self.derived().used
    }

    /// The lowest priority among the node's pods, `i32::MAX` when it has none.
    #[inline]
    pub fn lowest_priority(&self) -> i32 {
        self.derived().lowest_priority
    }

    /// [`NodeInfo::used`] with scoring requests (the 100m/200Mi defaults):
    /// `non_zero_requested + reserved`, saturating.
    #[inline]
    pub fn scoring_used(&self) -> &Resources {
        &self.derived().scoring_used
    }

    /// Whether a taint of the node has the PreferNoSchedule effect (TaintToleration scores
    /// only those).
    pub fn has_prefer_no_schedule_taint(&self) -> bool {
        self.taints
            .iter()
            .any(|t| t.effect == super::PREFER_NO_SCHEDULE)
    }
}

/// A process-wide unique generation stamp. Stamps are only compared for equality, so their
/// values (which depend on what else ran in the process) never reach any output.
fn next_generation() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// Koordinator's node reservation (`node.koordinator.sh/reservation`, seed 004): resources
/// kept for processes outside Kubernetes. With apply policy `Default` (or none) they are
/// trimmed from allocatable before any plugin sees the node, as koord-scheduler's node
/// transformer does; `kubernetes.io/batch-cpu` and `batch-memory` keep their values, and
/// `ReservedCPUsOnly` trims nothing (kubelet already did).
fn trim_node_reservation(
    node: &Node,
    names: &mut ResourceNames,
    alloc: &mut Resources,
) -> Result<(), (Rule, String)> {
    use berth_api::annotations::NodeReservation;
    let annotations = node.metadata.annotations.as_ref();
    let Some(text) =
        annotations.and_then(|a| a.get(berth_api::annotations::ANNOTATION_NODE_RESERVATION))
    else {
        return Ok(());
    };
    if text.trim().is_empty() {
        return Ok(());
    }
    let refused = |e: berth_api::annotations::AnnotationError| (e.rule(), e.to_string());
    let r = NodeReservation::parse(text).map_err(refused)?;
    if !r.trims_allocatable() {
        return Ok(());
    }
    for (name, amount) in r.reserved_amounts().map_err(refused)? {
        if name == "kubernetes.io/batch-cpu"
            || name == "kubernetes.io/batch-memory"
            || name == "pods"
        {
            continue;
        }
        let Some(id) = names.get(&name) else { continue };
        // Reserving more than the node has leaves nothing (which lowers capacity, never
        // raises it); amounts are never negative here, the codec refuses those.
        alloc[id] = alloc[id].saturating_sub(amount).max(0);
    }
    Ok(())
}

/// Whether a pod has any pod (anti-)affinity, and required anti-affinity.
pub(crate) fn affinity_flags(pod: &PodInfo) -> (bool, bool) {
    let Some(aff) = pod.spec().affinity.as_ref() else {
        return (false, false);
    };
    let any = aff.pod_affinity.is_some() || aff.pod_anti_affinity.is_some();
    let anti = aff
        .pod_anti_affinity
        .as_ref()
        .and_then(|a| {
            a.required_during_scheduling_ignored_during_execution
                .as_ref()
        })
        .is_some_and(|v| !v.is_empty());
    (any, anti)
}

/// A node object the scheduler cannot use.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NodeError {
    /// A quantity does not parse.
    #[error("{field}: {source}")]
    Quantity {
        /// The field path.
        field: String,
        /// The parse error.
        #[source]
        source: berth_api::QuantityError,
    },
    /// Too many extended resources.
    #[error(transparent)]
    TooManyResources(#[from] TooManyResources),
    /// A negative or uncountable amount (the capacity rule, [`berth_api::validate`]).
    #[error(transparent)]
    Refused(#[from] Refusal),
}

impl NodeError {
    /// The rule of the capacity rule the node breaks ([`Rule::Malformed`] for a quantity
    /// that does not parse, [`Rule::OutOfRange`] for too many resource names).
    pub fn rule(&self) -> Rule {
        match self {
            Self::Quantity { .. } => Rule::Malformed,
            Self::TooManyResources(_) => Rule::OutOfRange,
            Self::Refused(r) => r.rule,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::ResourceId;
    use crate::testing::node;

    fn info(annotation: &str) -> NodeInfo {
        node("n")
            .alloc("cpu", "32")
            .alloc("memory", "64Gi")
            .alloc("kubernetes.io/batch-cpu", "10000")
            .annotation("node.koordinator.sh/reservation", annotation)
            .build_info()
    }

    #[test]
    fn node_reservation_trims_allocatable_by_default() {
        let n =
            info(r#"{"resources":{"cpu":"2","memory":"4Gi","kubernetes.io/batch-cpu":"1000"}}"#);
        assert_eq!(n.allocatable[ResourceId::CPU], 30_000);
        assert_eq!(n.allocatable[ResourceId::MEMORY], 60 << 30);
        assert_eq!(
            n.allocatable[ResourceId(3)],
            10_000,
            "batch-cpu keeps its value"
        );
        assert_eq!(n.annotation_error, None);
    }

    #[test]
    fn reserved_cpus_count_instead_of_the_cpu_amount() {
        let n = info(r#"{"resources":{"cpu":"2"},"reservedCPUs":"0-3"}"#);
        assert_eq!(n.allocatable[ResourceId::CPU], 28_000);
    }

    #[test]
    fn reserved_cpus_only_leaves_allocatable_alone() {
        let n = info(r#"{"reservedCPUs":"0-3","applyPolicy":"ReservedCPUsOnly"}"#);
        assert_eq!(n.allocatable[ResourceId::CPU], 32_000);
    }

    #[test]
    fn a_malformed_annotation_is_reported_and_the_node_stays_usable() {
        let n = info("{not json");
        assert_eq!(n.allocatable[ResourceId::CPU], 32_000);
        let (rule, msg) = n
            .annotation_error
            .unwrap_or((Rule::Negative, String::new()));
        assert_eq!(rule, Rule::Malformed);
        assert!(msg.contains("node.koordinator.sh/reservation"), "{msg}");
    }

    #[test]
    fn a_negative_reservation_is_ignored_whole_never_added() {
        let n = info(r#"{"resources":{"cpu":"-3","memory":"1Gi"}}"#);
        assert_eq!(n.allocatable[ResourceId::CPU], 32_000, "not 35");
        assert_eq!(
            n.allocatable[ResourceId::MEMORY],
            64 << 30,
            "memory untrimmed too"
        );
        let (rule, msg) = n.annotation_error.clone().expect("refused");
        assert_eq!(rule, Rule::Negative);
        assert!(msg.contains("resources.cpu"), "{msg}");
        let mut n = info(r#"{"reservedCPUs":"0-3"}"#);
        assert_eq!(n.allocatable[ResourceId::CPU], 28_000);
        n.refuse_reservation(Rule::Inconsistent, "absent".into());
        assert_eq!(n.allocatable[ResourceId::CPU], 32_000);
    }

    #[test]
    fn negative_allocatable_refuses_the_node() {
        let mut names = ResourceNames::default();
        let err = NodeInfo::new(NodeIdx(0), node("n").alloc("cpu", "-4").build(), &mut names)
            .expect_err("negative");
        assert!(err.to_string().contains("status.allocatable[cpu]"), "{err}");
        assert!(err.to_string().contains("negative"), "{err}");
    }

    #[test]
    fn trimming_never_goes_below_zero() {
        let n = info(r#"{"resources":{"cpu":"64"}}"#);
        assert_eq!(n.allocatable[ResourceId::CPU], 0);
    }
}
