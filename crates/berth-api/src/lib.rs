//! API types for berth.
//!
//! Kubernetes' own objects come from `k8s-openapi`; this crate adds the custom resources
//! berth reads and writes (Koordinator's `Reservation` and `PodMigrationJob`, the topology API's
//! `NodeResourceTopology`), the annotation keys and codecs shared with Koordinator and the
//! node agents, and quantity parsing into integers.

pub mod annotations;
pub mod crd;
pub mod dra;
pub mod duration;
pub mod gang;
pub mod json_keys;
pub mod limits;
pub mod migration;
pub mod nrt;
pub mod quantity;
pub mod reservation;
pub mod validate;

pub use duration::{DurationError, GoDuration};
pub use k8s_openapi;
pub use quantity::{format_resource, parse_resource, ParsedQuantity, QuantityError};
pub use reservation::{Reservation, ReservationSpec, ReservationStatus};
