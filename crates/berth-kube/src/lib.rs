//! `berth run`: berth's scheduling core driven against a real API server through kube-rs.
//!
//! The shape is kube-runtime's controllers: [`watch`] turns one watcher per kind into core
//! [`berth_core::Event`]s, [`driver`] owns the [`berth_core::Scheduler`] and runs it whenever
//! something changed or a timer is due, and [`effects`] turns the core's
//! [`berth_core::Effect`]s into API calls whose outcomes (failed binds) come back as events.
//! Data flows one way: API server -> watchers -> core -> effects -> API server; the core never
//! sees the network or the clock, it is handed `now` with every input.
//!
//! [`run`] is the whole thing; [`metrics`] and [`http`] serve `/metrics`, `/healthz`,
//! `/livez` and `/readyz`.

pub mod client;
pub mod driver;
pub mod effects;
pub mod error;
pub mod events;
pub mod http;
pub mod inbox;
pub mod kinds;
pub mod leader;
pub mod metrics;
pub mod migrate;
pub mod mirror;
pub mod reserve;
pub mod retry;
pub mod settings;
pub mod transport;
pub mod watch;

pub use driver::{run, Handle, RunOptions, Snapshot};
pub use error::Error;
pub use settings::Settings;
