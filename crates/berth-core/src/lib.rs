//! berth's scheduling core.
//!
//! No I/O, no clock, no threads: every input carries `now`; every output is polled. Start at
//! [`Scheduler`]: feed it [`Event`]s, drain [`Effect`]s. The [`framework`] mirrors
//! kube-scheduler's extension points, [`plugins`] holds the in-tree plugins, and the
//! domain modules ([`numa`], reservations) are usable on their own.

pub mod apply;
pub mod cache;
pub mod collections;
pub mod cpuset;
pub mod dra;
pub mod drp;
pub mod effect;
pub mod event;
pub mod explain;
#[cfg(any(test, feature = "testing"))]
pub mod fixtures;
pub mod framework;
pub mod gang;
pub mod migration;
pub mod model;
pub mod numa;
pub mod object;
pub mod plugins;
pub mod queue;
pub mod refusal;
pub mod reservation;
pub mod resources;
pub mod rng;
pub mod scheduler;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub mod time;

pub use effect::{Effect, Preemption, Record};
pub use event::{BindFailure, Event};
pub use framework::{Code, Profile, Status};
pub use object::{Kind, Object, ObjectKey};
pub use queue::QueueLengths;
#[doc(alias = "Framework")]
pub use scheduler::{Config, Scheduler};
