//! What the scheduler derives from API objects: pods, nodes, selectors.

pub mod node;
pub mod node_set;
pub mod pod;
pub mod selector;

pub use node::{NodeIdx, NodeInfo};
pub use node_set::NodeSet;
pub use pod::{PodInfo, PodKind};

/// Pods without `spec.schedulerName` use this profile (kube-scheduler's
/// `v1.DefaultSchedulerName`).
pub const DEFAULT_SCHEDULER_NAME: &str = "default-scheduler";

/// The `PreferNoSchedule` taint effect (a soft taint, only scored).
pub const PREFER_NO_SCHEDULE: &str = "PreferNoSchedule";
