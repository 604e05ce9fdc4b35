//! Cluster events and what plugins register for them (kube-scheduler's `ClusterEvent`,
//! `EnqueueExtensions.EventsToRegister` and `QueueingHintFn`).
//!
//! Each plugin says, through [`crate::framework::Plugin::events_to_register`], which
//! events can turn its rejection into a pass, with a hint that looks at the event and the
//! pod where the kind alone says too much. The queue asks the profiles' plugins
//! ([`crate::queue::hints::QueueingHints`]): an event moves a pod out of the unschedulable
//! pool when a plugin that rejected it registered the event and its hint says so.

use crate::cache::Cluster;
use crate::model::node::{NodeIdx, NodeInfo};
use crate::model::pod::PodInfo;
use crate::object::{Kind, ObjectKey};

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

    /// Node `idx` was replaced; `kinds` is what changed
    /// ([`crate::queue::hints::node_change`]).
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

/// A queueing hint (kube-scheduler's `QueueingHintFn`): whether `event` may make `pod`,
/// which the plugin rejected, pass. Asked only for a queued pod the cache holds.
pub type QueueingHintFn = fn(cx: &Cluster, event: &ClusterEvent, pod: &PodInfo) -> bool;

/// A necessary condition of a plugin's Filter on one node (`true`: the pod may pass there
/// now), checked when a node-scoped event reaches a pod the plugin rejected
/// ([`EventsToRegister::node_check`]).
pub type NodeCheckFn =
    fn(cx: &Cluster, event: &ClusterEvent, pod: &PodInfo, node: &NodeInfo) -> bool;

/// One registration: events of any of these [`kind`] bits may help, if the hint (when
/// there is one) says so (kube-scheduler's `ClusterEventWithHint`).
pub type EventWithHint = (u32, Option<QueueingHintFn>);

/// What a plugin registers (kube-scheduler's `EventsToRegister`).
#[derive(Debug, Clone, Copy)]
pub struct EventsToRegister {
    /// The events that can make a pod the plugin rejected pass, with their hints.
    pub events: &'static [EventWithHint],
    /// Whether the plugin's verdict on a node depends on that node alone, so that a
    /// node-scoped event can help only there.
    pub node_local: bool,
    /// A necessary condition of the plugin's Filter on a node: when a node-scoped event
    /// concerns only node-local plugins, a pod this plugin rejected is moved only if the
    /// node passes it. Used only when every profile filters with the plugin (a profile
    /// without it places pods whatever the condition says).
    pub node_check: Option<NodeCheckFn>,
}

impl EventsToRegister {
    /// What a plugin that says nothing registers: every event but NUMA ones (which only
    /// NodeResourceTopologyMatch reads).
    pub const EVERY_EVENT_BUT_NUMA: EventsToRegister = EventsToRegister {
        events: &[(kind::ALL & !kind::NODE_TOPOLOGY, None)],
        node_local: false,
        node_check: None,
    };

    /// `events` without hints, for a plugin whose verdicts may depend on other nodes.
    pub const fn on(events: &'static [EventWithHint]) -> Self {
        Self {
            events,
            node_local: false,
            node_check: None,
        }
    }

    /// `events`, for a plugin whose verdict on a node depends on that node alone.
    pub const fn node_local(events: &'static [EventWithHint]) -> Self {
        Self {
            events,
            node_local: true,
            node_check: None,
        }
    }

    /// With `check` as the node check.
    pub const fn with_node_check(mut self, check: NodeCheckFn) -> Self {
        self.node_check = Some(check);
        self
    }

    /// The [`kind`] bits of every registered event.
    pub fn kinds(&self) -> u32 {
        self.events.iter().fold(0, |acc, (k, _)| acc | k)
    }
}
