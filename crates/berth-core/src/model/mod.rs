//! What the scheduler derives from API objects: pods, nodes, selectors.

pub mod node;
pub mod node_set;
pub mod pod;
pub mod selector;

pub use node::{NodeIdx, NodeInfo};
pub use node_set::NodeSet;
pub use pod::{PodInfo, PodKind};
