//! Plugin names, in one place (kube-scheduler's `plugins/names`).
#![allow(missing_docs)]

pub const SCHEDULING_GATES: &str = "SchedulingGates";
pub const PRIORITY_SORT: &str = "PrioritySort";
pub const NODE_UNSCHEDULABLE: &str = "NodeUnschedulable";
pub const NODE_NAME: &str = "NodeName";
pub const TAINT_TOLERATION: &str = "TaintToleration";
pub const NODE_AFFINITY: &str = "NodeAffinity";
pub const NODE_PORTS: &str = "NodePorts";
pub const NODE_RESOURCES_FIT: &str = "NodeResourcesFit";
pub const NODE_RESOURCES_BALANCED_ALLOCATION: &str = "NodeResourcesBalancedAllocation";
pub const VOLUME_RESTRICTIONS: &str = "VolumeRestrictions";
pub const NODE_VOLUME_LIMITS: &str = "NodeVolumeLimits";
pub const VOLUME_BINDING: &str = "VolumeBinding";
pub const VOLUME_ZONE: &str = "VolumeZone";
pub const POD_TOPOLOGY_SPREAD: &str = "PodTopologySpread";
pub const INTER_POD_AFFINITY: &str = "InterPodAffinity";
pub const DEFAULT_PREEMPTION: &str = "DefaultPreemption";
pub const IMAGE_LOCALITY: &str = "ImageLocality";
pub const DEFAULT_BINDER: &str = "DefaultBinder";
pub const RESERVATION: &str = "Reservation";
pub const NODE_RESOURCE_TOPOLOGY_MATCH: &str = "NodeResourceTopologyMatch";
pub const NODE_NUMA_RESOURCE: &str = "NodeNUMAResource";
pub const DYNAMIC_RESOURCES: &str = "DynamicResources";

/// Every name berth accepts in configuration.
pub const ALL: &[&str] = &[
    SCHEDULING_GATES,
    PRIORITY_SORT,
    NODE_UNSCHEDULABLE,
    NODE_NAME,
    TAINT_TOLERATION,
    NODE_AFFINITY,
    NODE_PORTS,
    NODE_RESOURCES_FIT,
    NODE_RESOURCES_BALANCED_ALLOCATION,
    VOLUME_RESTRICTIONS,
    NODE_VOLUME_LIMITS,
    VOLUME_BINDING,
    VOLUME_ZONE,
    POD_TOPOLOGY_SPREAD,
    INTER_POD_AFFINITY,
    DEFAULT_PREEMPTION,
    IMAGE_LOCALITY,
    DEFAULT_BINDER,
    RESERVATION,
    NODE_RESOURCE_TOPOLOGY_MATCH,
    NODE_NUMA_RESOURCE,
    DYNAMIC_RESOURCES,
];
