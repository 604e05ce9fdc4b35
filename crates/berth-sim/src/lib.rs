//! `berth simulate`: a simulated cluster around berth's scheduling core.
//!
//! Start at [`run`], which does what the command does: [`input::read_files`] decodes the
//! files (bad input is an [`InputError`], exit status 2), [`Simulation::run`] plays the
//! objects and the Scenario in virtual time, [`output::render`] prints the final state.
//! The input format and the output are described in `docs/scenario-format.md`; [`sim`]
//! documents the driver loop and [`agent`] the simulated kubelet.

pub mod agent;
pub mod bench;
pub mod bench_callgrind;
pub mod bench_numa;
pub mod bench_workloads;
pub mod claim_controller;
pub mod controllers;
pub mod cpu_agent;
pub mod cpu_budget;
pub mod error;
pub mod explain;
mod gangs;
pub mod input;
pub mod migration;
pub mod numa_agent;
pub mod objects;
pub mod observe;
pub mod output;
pub mod progress;
pub mod provisioner;
pub mod recorded;
pub mod report;
pub mod scenario;
mod selectors;
pub mod sim;
pub mod store;
pub(crate) mod strict;
pub mod timeline;
pub mod volume_controllers;

mod run;

pub use error::{Error, InputError};
pub use input::{Input, Item};
pub use output::Format;
pub use run::{load_config, run, simulate, Options, RunOutput};
pub use scenario::Scenario;
pub use sim::Simulation;
pub use store::Store;
