//! Queueing hints: which cluster events can make a pod that failed fit, so only those pods
//! leave the unschedulable pool (kube-scheduler's `EventsToRegister` plus `QueueingHintFn`,
//! `pkg/scheduler/backend/queue`'s `isPodWorthRequeuing`).
//!
//! Each plugin names the events that can turn its rejection into a pass ([`registered`]);
//! an event moves a pod when one of the plugins that rejected it registered the event. A
//! pod no plugin rejected (no nodes at all) moves on every event, as upstream does.
//!
//! A node-scoped event (node `N` added or updated, a pod leaving `N`, `N`'s NUMA data
//! changing) can only change what node-local plugins say about `N` itself. When every
//! plugin the event concerns is node-local, the pod moves only if `N` could host it now: its
//! CPU, memory, ephemeral storage and pod slot (and, for NUMA events, the NUMA alignment)
//! fit. A pod is skipped that way only if the plugin that would reject it on `N`
//! (NodeResourcesFit, NodeResourceTopologyMatch) is already among those that rejected it:
//! the invariant is that for every node, some plugin that blocks the pod there is in its
//! list, so the event that lifts that block reaches the pod. (A pod a cordoned node
//! rejected, skipped when a node too small for it is added, would otherwise miss that
//! node growing: only NodeResourcesFit registers allocatable changes.)
//!
//! The five-minute flush of the unschedulable pool
//! ([`super::UNSCHEDULABLE_MAX_WAIT`]) stays, as upstream's `UnschedulableTimeout`, as the
//! net for anything these hints miss.

use crate::cache::Cluster;
use crate::framework::Profile;
use crate::model::node::{NodeIdx, NodeInfo};
use crate::model::pod::PodInfo;
use crate::object::{Kind, ObjectKey};
use crate::plugins::names;
use crate::resources::{ResourceId, Resources};
use crate::time::Time;

use super::SchedulingQueue;

/// Kinds of cluster events, as bits (kube-scheduler's resource and action type).
pub mod kind {
    /// A node was added.
    pub const NODE_ADD: u32 = 1 << 0;
    /// A node's allocatable (or pod capacity) changed.
    pub const NODE_ALLOCATABLE: u32 = 1 << 1;
    /// A node's labels changed.
    pub const NODE_LABEL: u32 = 1 << 2;
    /// A node's taints or `spec.unschedulable` changed (upstream's `UpdateNodeTaint`).
    pub const NODE_TAINT: u32 = 1 << 3;
    /// A node was deleted.
    pub const NODE_DELETE: u32 = 1 << 4;
    /// A pod was placed on a node by someone else (or found placed).
    pub const ASSIGNED_POD_ADD: u32 = 1 << 5;
    /// A pod left its node: deleted, finished, or its bind failed.
    pub const ASSIGNED_POD_DELETE: u32 = 1 << 6;
    /// A reservation was created, placed, changed, released or expired.
    pub const RESERVATION: u32 = 1 << 7;
    /// A node's NUMA data as Filter sees it changed (NRT applied or deleted, reserve cache
    /// flushed, in-flight reservation ended).
    pub const NODE_TOPOLOGY: u32 = 1 << 8;
    /// A PersistentVolumeClaim was created or changed.
    pub const PVC: u32 = 1 << 9;
    /// A CSINode was created, changed or deleted.
    pub const CSI_NODE: u32 = 1 << 10;
    /// A PersistentVolume was created or changed.
    pub const PV: u32 = 1 << 11;
    /// A PersistentVolume was created or its zone/region labels changed (VolumeZone's
    /// hint).
    pub const PV_TOPOLOGY: u32 = 1 << 12;
    /// A StorageClass was created or its `allowedTopologies` changed (VolumeBinding's
    /// hint; the binding mode cannot change).
    pub const STORAGE_CLASS: u32 = 1 << 13;
    /// A `WaitForFirstConsumer` StorageClass was created (VolumeZone's hint).
    pub const STORAGE_CLASS_WFFC: u32 = 1 << 14;
    /// A CSINode was created or its migrated-plugins annotation changed (VolumeBinding's
    /// hint).
    pub const CSI_NODE_MIGRATION: u32 = 1 << 15;
    /// A CSIDriver stopped publishing storage capacity.
    pub const CSI_DRIVER: u32 = 1 << 16;
    /// A CSIStorageCapacity was created or its volume limit grew.
    pub const CSI_STORAGE_CAPACITY: u32 = 1 << 17;
    /// A ResourceSlice, DeviceClass or ResourceClaim was created, changed or deleted
    /// (DynamicResources' hint).
    pub const DRA: u32 = 1 << 18;
    /// Every kind.
    pub const ALL: u32 = (1 << 19) - 1;
}

/// A change in the cluster that may make unschedulable pods fit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterEvent {
    /// What changed: one or more [`kind`] bits.
    pub kinds: u32,
    /// The node the change is confined to, for node-local plugins.
    pub node: Option<NodeIdx>,
    /// The object that changed, where a hint looks at which one (the claim of a
    /// [`kind::PVC`] event, the driver of a [`kind::CSI_DRIVER`] one).
    pub object: Option<ObjectKey>,
}

impl ClusterEvent {
    /// Node `idx` was added.
    pub fn node_added(idx: NodeIdx) -> Self {
        Self::on(kind::NODE_ADD, Some(idx))
    }

    /// Node `idx` was replaced; `kinds` is what changed ([`node_change`]).
    pub fn node_updated(idx: NodeIdx, kinds: u32) -> Self {
        Self::on(kinds, Some(idx))
    }

    /// A node was deleted.
    pub fn node_deleted() -> Self {
        Self::on(kind::NODE_DELETE, None)
    }

    /// A pod was placed on `node` (or on a node not known yet).
    pub fn assigned_pod_added(node: Option<NodeIdx>) -> Self {
        Self::on(kind::ASSIGNED_POD_ADD, node)
    }

    /// A pod left `node` (`None`: a node not known).
    pub fn assigned_pod_deleted(node: Option<NodeIdx>) -> Self {
        Self::on(kind::ASSIGNED_POD_DELETE, node)
    }

    /// A reservation changed.
    pub fn reservation() -> Self {
        Self::on(kind::RESERVATION, None)
    }

    /// Node `idx`'s NUMA data changed.
    pub fn topology(idx: NodeIdx) -> Self {
        Self::on(kind::NODE_TOPOLOGY, Some(idx))
    }

    /// A claim changed (`claim`: which one, when known).
    pub fn pvc() -> Self {
        Self::on(kind::PVC, None)
    }

    /// Claim `key` was created or changed.
    pub fn claim(key: ObjectKey) -> Self {
        Self {
            object: Some(key),
            ..Self::on(kind::PVC, None)
        }
    }

    /// A DRA object changed.
    pub fn dra() -> Self {
        Self::on(kind::DRA, None)
    }

    /// A volume-related object changed: `kinds` say how.
    pub fn storage(kinds: u32) -> Self {
        Self::on(kinds, None)
    }

    /// CSIDriver `name` stopped publishing storage capacity.
    pub fn csi_driver(name: &str) -> Self {
        Self {
            object: Some(ObjectKey::cluster(Kind::CsiDriver, name)),
            ..Self::on(kind::CSI_DRIVER, None)
        }
    }

    /// A CSINode changed.
    pub fn csi_node() -> Self {
        Self::on(kind::CSI_NODE, None)
    }

    fn on(kinds: u32, node: Option<NodeIdx>) -> Self {
        Self {
            kinds,
            node,
            object: None,
        }
    }
}

/// What a node looked like before an update, to tell which [`kind`]s the update is.
#[derive(Debug, Clone)]
pub struct NodeBefore {
    allocatable: Resources,
    allowed_pods: i64,
    unschedulable: bool,
    node: std::sync::Arc<berth_api::k8s_openapi::api::core::v1::Node>,
}

impl NodeBefore {
    /// Remembers what of `n` the plugins read.
    pub fn of(n: &NodeInfo) -> Self {
        Self {
            allocatable: n.allocatable,
            allowed_pods: n.allowed_pods,
            unschedulable: n.unschedulable,
            node: n.node.clone(),
        }
    }
}

/// The [`kind`]s of an update from `before` to `after` (upstream's
/// `nodeSchedulingPropertiesChange`); 0 when nothing a plugin reads changed (status
/// conditions, an annotation that trims nothing).
pub fn node_change(before: &NodeBefore, after: &NodeInfo) -> u32 {
    let mut kinds = 0;
    if before.allocatable != after.allocatable || before.allowed_pods != after.allowed_pods {
        kinds |= kind::NODE_ALLOCATABLE;
    }
    if before.node.metadata.labels != after.node.metadata.labels {
        kinds |= kind::NODE_LABEL;
    }
    let taints = |n: &berth_api::k8s_openapi::api::core::v1::Node| {
        n.spec
            .as_ref()
            .and_then(|s| s.taints.clone())
            .unwrap_or_default()
    };
    if before.unschedulable != after.unschedulable || taints(&before.node) != taints(&after.node) {
        kinds |= kind::NODE_TAINT;
    }
    kinds
}

/// The events that can make a pod `plugin` rejected fit, and whether the plugin's verdict
/// on a node depends on that node alone (so a node-scoped event helps only there).
///
/// From upstream's `EventsToRegister` (with queueing hints on): NodeResourcesFit registers
/// pod deletion and node add/allocatable; NodeAffinity node add/label; TaintToleration and
/// NodeUnschedulable node add/taint; NodePorts pod deletion and node add; InterPodAffinity
/// pods and node add/label; PodTopologySpread pods and node add/delete/label/taint; the
/// volume plugins claims, CSINodes, pod deletion and node add; NodeResourceTopologyMatch
/// (scheduler-plugins) pod deletion, node add/update and its NRT objects. Reservations
/// hold node capacity, ports and claims the way pods do, so the plugins that count those
/// register them too. A plugin this table does not know (and the Reservation plugin,
/// whose verdicts depend on reservations, pods and nodes alike) is woken by every event
/// but NUMA ones, which only NodeResourceTopologyMatch reads.
pub fn registered(plugin: &str) -> (u32, bool) {
    use kind::*;
    match plugin {
        names::NODE_UNSCHEDULABLE | names::TAINT_TOLERATION => (NODE_ADD | NODE_TAINT, true),
        names::NODE_NAME => (NODE_ADD, true),
        names::NODE_AFFINITY => (NODE_ADD | NODE_LABEL, true),
        names::NODE_PORTS => (NODE_ADD | ASSIGNED_POD_DELETE | RESERVATION, true),
        names::NODE_RESOURCES_FIT => (
            NODE_ADD | NODE_ALLOCATABLE | ASSIGNED_POD_DELETE | RESERVATION,
            true,
        ),
        names::NODE_VOLUME_LIMITS => (
            NODE_ADD | NODE_ALLOCATABLE | ASSIGNED_POD_DELETE | RESERVATION | PVC | CSI_NODE,
            true,
        ),
        names::VOLUME_RESTRICTIONS => (NODE_ADD | ASSIGNED_POD_DELETE | RESERVATION | PVC, false),
        // With queueing hints (GA), neither registers node taint changes.
        names::VOLUME_BINDING => (
            NODE_ADD
                | NODE_LABEL
                | PVC
                | PV
                | STORAGE_CLASS
                | CSI_NODE_MIGRATION
                | CSI_DRIVER
                | CSI_STORAGE_CAPACITY,
            false,
        ),
        names::VOLUME_ZONE => (
            NODE_ADD | NODE_LABEL | PVC | PV_TOPOLOGY | STORAGE_CLASS_WFFC,
            false,
        ),
        names::INTER_POD_AFFINITY => (
            NODE_ADD | NODE_LABEL | ASSIGNED_POD_ADD | ASSIGNED_POD_DELETE | RESERVATION,
            false,
        ),
        names::POD_TOPOLOGY_SPREAD => (
            NODE_ADD
                | NODE_LABEL
                | NODE_TAINT
                | NODE_DELETE
                | ASSIGNED_POD_ADD
                | ASSIGNED_POD_DELETE
                | RESERVATION,
            false,
        ),
        names::NODE_RESOURCE_TOPOLOGY_MATCH => (
            NODE_ADD | NODE_ALLOCATABLE | ASSIGNED_POD_DELETE | NODE_TOPOLOGY,
            true,
        ),
        // Cores come back when a pod or reservation leaves, a node's CPU topology or
        // reservation changes (NRT, node annotation) or a node's bind-policy label does.
        names::NODE_NUMA_RESOURCE => (
            NODE_ADD
                | NODE_ALLOCATABLE
                | NODE_LABEL
                | ASSIGNED_POD_DELETE
                | RESERVATION
                | NODE_TOPOLOGY,
            false,
        ),
        // Devices come from slices and classes and go back when claims are deallocated.
        names::DYNAMIC_RESOURCES => (NODE_ADD | NODE_LABEL | DRA, false),
        _ => (ALL & !NODE_TOPOLOGY, false),
    }
}

/// The [`kind`] bits of every event that can help an item `plugins` rejected: the union of
/// what they [`registered`], or every kind but NUMA ones when no plugin rejected it. An
/// event outside this set never requeues the item ([`worth_requeuing`] answers false), so
/// the queue indexes its unschedulable pool by these bits.
pub fn interest(plugins: &[&'static str]) -> u32 {
    if plugins.is_empty() {
        return kind::ALL & !kind::NODE_TOPOLOGY;
    }
    plugins.iter().fold(0, |acc, p| acc | registered(p).0)
}

/// Which necessary conditions [`worth_requeuing`] may check: only those a Filter of every
/// profile enforces (a profile without NodeResourcesFit places pods whatever their size).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Checks {
    /// Every profile filters with NodeResourcesFit.
    pub resources: bool,
    /// Every profile filters with NodeResourceTopologyMatch.
    pub numa: bool,
}

impl Checks {
    /// The checks `profiles` allow.
    pub fn for_profiles(profiles: &[Profile]) -> Self {
        let all = |name: &str| {
            !profiles.is_empty()
                && profiles
                    .iter()
                    .all(|p| p.filter.iter().any(|&i| p.plugins[i].name() == name))
        };
        Self {
            resources: all(names::NODE_RESOURCES_FIT),
            numa: all(names::NODE_RESOURCE_TOPOLOGY_MATCH),
        }
    }
}

/// kube-scheduler's `isPodWorthRequeuing`: whether `event` may make the item `key`, which
/// `plugins` rejected, fit.
pub fn worth_requeuing(
    cx: &Cluster,
    checks: Checks,
    event: &ClusterEvent,
    key: &ObjectKey,
    plugins: &[&'static str],
) -> bool {
    if plugins.is_empty() {
        return event.kinds & !kind::NODE_TOPOLOGY != 0;
    }
    let mut interested = false;
    let mut local = true;
    for p in plugins {
        let (kinds, node_local) = registered(p);
        if kinds & event.kinds != 0 && concerns(cx, event, key, p) {
            interested = true;
            local &= node_local;
        }
    }
    if !interested {
        return false;
    }
    match event.node {
        Some(idx) if local => may_fit(cx, checks, event, key, plugins, idx),
        _ => true,
    }
}

/// The volume plugins' hints that look at which object changed: a claim concerns
/// VolumeBinding and VolumeZone only for pods that use it; a CSIDriver change concerns
/// VolumeBinding only for pods with an inline volume of that driver (as upstream's
/// `isSchedulableAfterCSIDriverChange` checks). Anything not known concerns the pod.
fn concerns(cx: &Cluster, event: &ClusterEvent, key: &ObjectKey, plugin: &str) -> bool {
    let Some(obj) = &event.object else {
        return true;
    };
    let volume_plugin = plugin == names::VOLUME_BINDING || plugin == names::VOLUME_ZONE;
    if !volume_plugin || key.kind != Kind::Pod {
        return true;
    }
    let Some(entry) = cx.pod(key) else {
        return true;
    };
    let pod = &entry.info;
    let volumes = pod.spec().volumes.iter().flatten();
    match obj.kind {
        Kind::PersistentVolumeClaim => {
            obj.namespace == key.namespace
                && volumes.into_iter().any(|v| {
                    crate::plugins::volumebinding::claims::volume_claim(&key.name, v).is_some_and(
                        |(name, eph)| {
                            (!eph || plugin == names::VOLUME_BINDING) && *name == *obj.name
                        },
                    )
                })
        }
        Kind::CsiDriver => volumes
            .into_iter()
            .any(|v| v.csi.as_ref().is_some_and(|c| *c.driver == *obj.name)),
        _ => true,
    }
}

/// Whether the pod `key` may fit node `idx` now, judged by the checks of the plugins in
/// `plugins` only (see the module doc). Anything it cannot judge (a reservation's stand-in,
/// a node holding reservations, whose owners get capacity back) may fit.
fn may_fit(
    cx: &Cluster,
    mut checks: Checks,
    event: &ClusterEvent,
    key: &ObjectKey,
    plugins: &[&'static str],
    idx: NodeIdx,
) -> bool {
    checks.resources &= plugins.contains(&names::NODE_RESOURCES_FIT);
    checks.numa &= plugins.contains(&names::NODE_RESOURCE_TOPOLOGY_MATCH);
    if key.kind != Kind::Pod || !(checks.resources || checks.numa) {
        return true;
    }
    let (Some(entry), Some(node)) = (cx.pod(key), cx.node(idx)) else {
        return true;
    };
    if !cx.reservations.on_node(idx).is_empty() {
        return true;
    }
    let pod = &entry.info;
    if checks.resources && !fits_resources(pod, node) {
        return false;
    }
    if checks.numa
        && event.kinds & kind::NODE_TOPOLOGY != 0
        && !crate::plugins::numatopology::may_fit(cx, pod, node)
    {
        return false;
    }
    true
}

/// NodeResourcesFit's check for the resources no configuration can ignore (CPU, memory,
/// ephemeral storage) and the pod slot, without reservations (an owner may get some back,
/// so `reserved` is not subtracted).
fn fits_resources(pod: &PodInfo, node: &NodeInfo) -> bool {
    if node.pods.len() as i64 + 1 > node.allowed_pods {
        return false;
    }
    [
        ResourceId::CPU,
        ResourceId::MEMORY,
        ResourceId::EPHEMERAL_STORAGE,
    ]
    .into_iter()
    .all(|id| {
        let want = pod.requests[id];
        want <= 0 || want <= node.allocatable[id].saturating_sub(node.requested[id])
    })
}

/// Moves to back-off or active the unschedulable items `event` may help.
pub fn requeue(
    queue: &mut SchedulingQueue,
    cx: &Cluster,
    profiles: &[Profile],
    now: Time,
    event: &ClusterEvent,
) {
    if event.kinds == 0 {
        return;
    }
    let checks = Checks::for_profiles(profiles);
    queue.move_concerned(now, event.kinds, |key, plugins| {
        worth_requeuing(cx, checks, event, key, plugins)
    });
}

#[cfg(test)]
mod tests;
