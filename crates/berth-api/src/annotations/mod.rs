//! Koordinator's labels and annotations: the keys ([`keys`], re-exported here) and a codec
//! for each JSON-valued one.
//!
//! Every codec implements [`AnnotationCodec`] (and has the same `parse`/`to_value` as inherent
//! methods, so callers need no trait import). Parsing is as strict as Koordinator's
//! `json.Unmarshal` plus the checks Koordinator would hit later (quantities, CPU lists), so a
//! value berth accepts is one koord-scheduler accepts too; each error names the key and says
//! what is wrong, fit for an event on the object.
//!
//! Start with [`ReservationAllocated`] (written on owner pods) and [`ReservationAffinity`]
//! (read from pods that must use a reservation).

mod affinity;
mod allocated;
mod cpu_list;
mod cpu_topology;
mod drp;
pub mod keys;
mod labels;
mod node_reservation;
mod operating_pod;
mod options;
mod resource_status;

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use serde::Serialize;

use crate::quantity::{parse_resource, ParsedQuantity, QuantityError};
use crate::validate::{Refusal, Rule};

pub use affinity::{ReservationAffinity, ReservationAffinitySelector};
pub use allocated::ReservationAllocated;
pub use cpu_list::{
    format_cpu_ids, format_cpu_list, parse_cpu_list, CpuListError, MAX_CPU_LIST_CPUS,
};
pub use cpu_topology::{
    CpuBindPolicy, CpuInfo, CpuSharedPool, CpuSharedPools, CpuTopology, KubeletCpuManagerPolicy,
    ResourceSpec,
};
pub use drp::{NewReservationRequirement, ReservationTemplate};
pub use keys::*;
pub use labels::{
    is_true, koordinator_priority, parse_int_label, pre_allocatable_priority, reservation_order,
};
pub use node_reservation::{NodeReservation, NodeReservationApplyPolicy};
pub use operating_pod::{ReservationCurrentOwner, ReservationOwners};
pub use options::{
    ExactMatchReservationSpec, ReservationResizeAllocatable, ReservationRestrictedOptions,
};
pub use resource_status::{NumaNodeResource, ResourceStatus};

/// A label or annotation value berth cannot use. Every variant names the key; treat the
/// object the way Koordinator treats an unparseable value (usually: ignore the annotation and
/// report it), not as a reason to stop.
#[derive(Debug, thiserror::Error)]
pub enum AnnotationError {
    /// Not the JSON this key holds (syntax, a field of the wrong type, an unknown enum value).
    #[error("annotation {key}: invalid value: {source}")]
    Json {
        /// The annotation key.
        key: &'static str,
        /// serde_json's description, with line and column.
        #[source]
        source: serde_json::Error,
    },
    /// A resource amount inside the JSON is not a Kubernetes quantity.
    #[error("annotation {key}: {field}: {source}")]
    Quantity {
        /// The annotation key.
        key: &'static str,
        /// Path of the amount inside the value, e.g. `resources.cpu`.
        field: String,
        /// The rejected quantity.
        #[source]
        source: QuantityError,
    },
    /// A Linux CPU list (`"0-3,8"`) inside the JSON is malformed.
    #[error("annotation {key}: {field}: {source}")]
    CpuList {
        /// The annotation key.
        key: &'static str,
        /// Which field held it (`reservedCPUs`, `cpuset`).
        field: &'static str,
        /// What is wrong with it.
        #[source]
        source: CpuListError,
    },
    /// A value that is well-formed JSON but inconsistent (a CPU listed twice, a core in two
    /// sockets).
    #[error("annotation {key}: {field}: {reason}")]
    Invalid {
        /// The annotation key.
        key: &'static str,
        /// The field at fault.
        field: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// A value the capacity rule refuses (negative, duplicate, inconsistent, out of range:
    /// see [`crate::validate`]).
    #[error("annotation {key}: {refusal}")]
    Refused {
        /// The annotation key.
        key: &'static str,
        /// Where and why.
        refusal: Refusal,
    },
    /// A label or annotation that must hold a decimal integer does not.
    #[error("{key}: {value:?} is not a valid {bits}-bit integer")]
    Integer {
        /// The label or annotation key.
        key: &'static str,
        /// The rejected text.
        value: String,
        /// 32 or 64.
        bits: u8,
    },
}

impl AnnotationError {
    /// The rule the value breaks: [`Rule::Malformed`] unless it was refused by the capacity
    /// rule.
    pub fn rule(&self) -> Rule {
        match self {
            Self::Refused { refusal, .. } => refusal.rule,
            _ => Rule::Malformed,
        }
    }
}

/// A JSON-valued Koordinator annotation.
pub trait AnnotationCodec: Sized {
    /// The annotation key the value lives under.
    const KEY: &'static str;
    /// Whether Koordinator treats an empty value like an absent annotation (most getters do
    /// `if s := annotations[key]; s != ""`); when false, `""` goes through [`Self::parse`].
    const EMPTY_IS_ABSENT: bool;

    /// Parses an annotation value.
    fn parse(text: &str) -> Result<Self, AnnotationError>;

    /// The annotation value, as Go's `json.Marshal` would write it.
    fn to_value(&self) -> String;

    /// Reads the value from an object's annotations: `Ok(None)` when absent (or empty, if
    /// [`Self::EMPTY_IS_ABSENT`]).
    fn from_annotations(
        annotations: Option<&BTreeMap<String, String>>,
    ) -> Result<Option<Self>, AnnotationError> {
        let Some(text) = annotations.and_then(|a| a.get(Self::KEY)) else {
            return Ok(None);
        };
        if Self::EMPTY_IS_ABSENT && text.is_empty() {
            return Ok(None);
        }
        Self::parse(text).map(Some)
    }

    /// Writes the value into an annotation map, replacing any previous one.
    fn insert_into(&self, annotations: &mut BTreeMap<String, String>) {
        annotations.insert(Self::KEY.to_string(), self.to_value());
    }
}

/// Serializes a codec value. The codec types hold only strings, numbers, string-keyed maps
/// and k8s-openapi objects, none of which can fail to serialize.
fn to_json<T: Serialize>(value: &T) -> String {
    serde_json::to_string(value).expect("annotation values have string keys and always serialize")
}

fn from_json<T: serde::de::DeserializeOwned>(
    key: &'static str,
    text: &str,
) -> Result<T, AnnotationError> {
    if let Some(path) = crate::json_keys::first_duplicate(text) {
        return Err(AnnotationError::Refused {
            key,
            refusal: Refusal::new(path, Rule::Duplicate, "the key appears twice"),
        });
    }
    serde_json::from_str(text).map_err(|source| AnnotationError::Json { key, source })
}

/// Checks every amount of a resource list (`field` is its path, for the message): a
/// quantity, not negative, within range ([`crate::validate::amount`]).
fn check_quantities(
    key: &'static str,
    field: &str,
    resources: &BTreeMap<String, Quantity>,
) -> Result<(), AnnotationError> {
    for (name, q) in resources {
        ParsedQuantity::parse(&q.0).map_err(|source| AnnotationError::Quantity {
            key,
            field: format!("{field}.{name}"),
            source,
        })?;
    }
    crate::validate::resource_list(field, resources).map_err(|refusal| refused(key, refusal))
}

/// A refusal of the value of `key`: a malformed quantity keeps its own variant.
fn refused(key: &'static str, refusal: Refusal) -> AnnotationError {
    AnnotationError::Refused { key, refusal }
}

/// Converts a resource list from an annotation into berth's integer amounts (milli-CPU,
/// whole units otherwise; see [`crate::quantity::parse_resource`]).
pub fn resource_amounts(
    key: &'static str,
    field: &str,
    resources: &BTreeMap<String, Quantity>,
) -> Result<BTreeMap<String, i64>, AnnotationError> {
    resources
        .iter()
        .map(|(name, q)| {
            parse_resource(name, &q.0)
                .map(|amount| (name.clone(), amount))
                .map_err(|source| AnnotationError::Quantity {
                    key,
                    field: format!("{field}.{name}"),
                    source,
                })
        })
        .collect()
}

/// Implements [`AnnotationCodec`] for a serde type, with an optional extra check, and
/// mirrors `parse`/`to_value` as inherent methods.
macro_rules! json_codec {
    ($ty:ty, $key:expr, empty_is_absent = $empty:expr) => {
        json_codec!(
            $ty,
            $key,
            empty_is_absent = $empty,
            check = |_: &$ty| Ok(())
        );
    };
    ($ty:ty, $key:expr, empty_is_absent = $empty:expr, check = $check:expr) => {
        impl $crate::annotations::AnnotationCodec for $ty {
            const KEY: &'static str = $key;
            const EMPTY_IS_ABSENT: bool = $empty;

            fn parse(text: &str) -> Result<Self, $crate::annotations::AnnotationError> {
                let value: Self = $crate::annotations::from_json($key, text)?;
                let check: fn(&Self) -> Result<(), $crate::annotations::AnnotationError> = $check;
                check(&value)?;
                Ok(value)
            }

            fn to_value(&self) -> String {
                $crate::annotations::to_json(self)
            }
        }

        impl $ty {
            /// Parses the annotation value (see [`AnnotationCodec::parse`](crate::annotations::AnnotationCodec::parse)).
            pub fn parse(text: &str) -> Result<Self, $crate::annotations::AnnotationError> {
                <Self as $crate::annotations::AnnotationCodec>::parse(text)
            }

            /// The annotation value, as Go's `json.Marshal` would write it.
            pub fn to_value(&self) -> String {
                <Self as $crate::annotations::AnnotationCodec>::to_value(self)
            }
        }
    };
}
pub(crate) use json_codec;
