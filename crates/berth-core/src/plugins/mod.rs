//! In-tree plugins and their registry. Names are kube-scheduler's (and Koordinator's /
//! scheduler-plugins' for the plugins berth adds), so an existing
//! `KubeSchedulerConfiguration` reads the same.

use crate::framework::config::ConfigError;
use crate::framework::plugin::Plugin;

pub mod args;
pub mod defaultpreemption;
pub mod dynamicresources;
pub mod gangscheduling;
pub mod imagelocality;
pub mod interpodaffinity;
pub mod names;
pub mod nodeaffinity;
pub mod nodename;
pub mod nodenumaresource;
pub mod nodeports;
pub mod noderesources;
pub mod nodeunschedulable;
pub mod nodevolumelimits;
pub mod noop;
pub mod numatopology;
pub mod podtopologyspread;
pub mod reservation;
pub mod tainttoleration;
pub mod volumebinding;
pub mod volumerestrictions;
pub mod volumezone;

use names::*;

/// The default `multiPoint` set, in kube-scheduler's order, with score weights.
pub const DEFAULT_MULTI_POINT: &[(&str, Option<i64>)] = &[
    (SCHEDULING_GATES, None),
    (PRIORITY_SORT, None),
    (NODE_UNSCHEDULABLE, None),
    (NODE_NAME, None),
    (TAINT_TOLERATION, Some(3)),
    (NODE_AFFINITY, Some(2)),
    (NODE_PORTS, None),
    (NODE_RESOURCES_FIT, Some(1)),
    (VOLUME_RESTRICTIONS, None),
    (NODE_VOLUME_LIMITS, None),
    (VOLUME_BINDING, None),
    (VOLUME_ZONE, None),
    (POD_TOPOLOGY_SPREAD, Some(2)),
    (INTER_POD_AFFINITY, Some(2)),
    (DYNAMIC_RESOURCES, None),
    (DEFAULT_PREEMPTION, None),
    (NODE_RESOURCES_BALANCED_ALLOCATION, Some(1)),
    (IMAGE_LOCALITY, Some(1)),
    (RESERVATION, Some(reservation::DEFAULT_WEIGHT)),
    (NODE_RESOURCE_TOPOLOGY_MATCH, Some(1)),
    (NODE_NUMA_RESOURCE, Some(1)),
    (DEFAULT_BINDER, None),
];

/// Whether berth knows a plugin of this name.
pub fn is_known(name: &str) -> bool {
    ALL.contains(&name)
}

/// Builds a plugin from its args (`None`: defaults). Invalid args are a [`ConfigError`]
/// whose field is relative to the args object.
pub fn build(name: &str, args: Option<&serde_json::Value>) -> Result<Box<dyn Plugin>, ConfigError> {
    let args = args.filter(|a| !a.is_null());
    Ok(match name {
        NODE_UNSCHEDULABLE => Box::new(nodeunschedulable::NodeUnschedulable),
        NODE_NAME => Box::new(nodename::NodeName),
        NODE_AFFINITY => Box::new(nodeaffinity::NodeAffinity::new(args)?),
        TAINT_TOLERATION => Box::new(tainttoleration::TaintToleration),
        NODE_PORTS => Box::new(nodeports::NodePorts),
        NODE_RESOURCES_FIT => Box::new(noderesources::Fit::new(args)?),
        NODE_RESOURCES_BALANCED_ALLOCATION => {
            Box::new(noderesources::BalancedAllocation::new(args)?)
        }
        INTER_POD_AFFINITY => Box::new(interpodaffinity::InterPodAffinity::new(args)?),
        POD_TOPOLOGY_SPREAD => Box::new(podtopologyspread::PodTopologySpread::new(args)?),
        VOLUME_RESTRICTIONS => Box::new(volumerestrictions::VolumeRestrictions),
        NODE_VOLUME_LIMITS => Box::new(nodevolumelimits::NodeVolumeLimits),
        VOLUME_BINDING => Box::new(volumebinding::VolumeBinding::new(args)?),
        VOLUME_ZONE => Box::new(volumezone::VolumeZone),
        DEFAULT_PREEMPTION => Box::new(defaultpreemption::DefaultPreemption::new(args)?),
        RESERVATION => Box::new(reservation::Reservation::new(args)?),
        NODE_RESOURCE_TOPOLOGY_MATCH => {
            Box::new(numatopology::NodeResourceTopologyMatch::new(args)?)
        }
        NODE_NUMA_RESOURCE => Box::new(nodenumaresource::NodeNumaResource::new(args)?),
        IMAGE_LOCALITY => Box::new(imagelocality::ImageLocality),
        DYNAMIC_RESOURCES => Box::new(dynamicresources::DynamicResources),
        other if is_known(other) => Box::new(noop::NoOp::new(other)),
        other => return Err(ConfigError::new("", format!("unknown plugin {other:?}"))),
    })
}
