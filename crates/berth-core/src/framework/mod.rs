//! The scheduling framework: extension points, statuses, per-cycle state, diagnosis and
//! profiles, shaped like kube-scheduler's `framework` package.

pub mod config;
pub mod cycle_state;
pub mod diagnosis;
pub mod events;
pub mod filter_plan;
pub mod nominator;
pub mod plugin;
pub mod profile;
pub mod reason_counts;
pub mod status;

pub use cycle_state::CycleState;
pub use diagnosis::Diagnosis;
pub use filter_plan::FilterPlan;
pub use plugin::{Plugin, Points, MAX_NODE_SCORE};
pub use profile::Profile;
pub use status::{Code, Status};
