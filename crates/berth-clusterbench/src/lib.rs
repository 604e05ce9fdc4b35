//! Dev-only: scheduling throughput through a real API server, berth against kube-scheduler.
//!
//! Each run starts a fresh etcd + kube-apiserver ([`berth_testcluster`], with the API
//! server's in-flight limits and priority and fairness off), creates scheduler_perf's
//! SchedulingBasic shapes through one unthrottled client (nodes 4 CPU / 32Gi / 110 pods;
//! pods 100m / 500Mi), starts the scheduler (after the nodes, before any pod, as
//! scheduler_perf does), creates and awaits the init pods, then creates the measured pods as
//! fast as the client can and times their bindings from a watch. Both schedulers run with
//! `clientConnection` qps/burst 5000 and leader election off.
//!
//! The binary `berth-clusterbench` runs the cases and prints the rates, their ratio, and
//! each scheduler's CPU time and peak RSS (from `/proc`).

pub mod case;
pub mod error;
pub mod measure;
pub mod metrics;
pub mod objects;
pub mod procstat;
pub mod report;
pub mod run;
pub mod scheduler;
pub mod workload;

pub use case::Case;
pub use error::Error;
pub use run::{run_one, Mode, Outcome, RunConfig};
pub use scheduler::{BerthOptions, Tuning, Which};
pub use workload::{Measured, Workload};
