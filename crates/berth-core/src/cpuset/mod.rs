//! Exclusive CPUs the Koordinator way: which logical CPUs a latency-sensitive pod (QoS
//! `LSE`/`LSR`, integer CPU request) gets on its node, as koord-scheduler's NodeNUMAResource
//! plugin decides them and writes them in `scheduling.koordinator.sh/resource-status`.
//!
//! - [`set`]: [`CpuSet`], a set of CPU ids held inline as a bitset;
//! - [`topology`]: a node's CPU layout (koordlet's `node.koordinator.sh/cpu-topology`);
//! - [`accumulator`]: the choice of CPUs (`FullPCPUs`, `SpreadByPCPUs`);
//! - [`state`]: what nodes reserve and what pods and reservations hold, across cycles.
//!
//! The plugin over it is [`crate::plugins::nodenumaresource`].

pub mod accumulator;
#[cfg(test)]
mod reference;
pub mod set;
pub mod state;
pub mod topology;

pub use accumulator::{take_cpus, whole_cores, ERR_NOT_ENOUGH_CPUS};
pub use set::CpuSet;
pub use state::{CpusetCluster, Eviction, NodeCpus};
pub use topology::CpuLayout;
