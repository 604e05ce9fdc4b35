//! Per-reservation and per-pod matching options: restricted resources, exact match, and the
//! allocatable overlay applied at Bind.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use serde::{Deserialize, Serialize};

use super::{
    check_quantities, json_codec, resource_amounts, AnnotationError,
    ANNOTATION_EXACT_MATCH_RESERVATION, ANNOTATION_RESERVATION_RESIZE_ALLOCATABLE,
    ANNOTATION_RESERVATION_RESTRICTED_OPTIONS,
};

/// `scheduling.koordinator.sh/reservation-restricted-options` on a `Restricted` reservation:
/// only these resources (∩ allocatable names) are restricted to the reservation; an empty
/// intersection means all of them. A parse error makes Koordinator treat the reservation as
/// unmatchable.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
pub struct ReservationRestrictedOptions {
    /// Resource names.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resources: Vec<String>,
}

json_codec!(
    ReservationRestrictedOptions,
    ANNOTATION_RESERVATION_RESTRICTED_OPTIONS,
    empty_is_absent = true
);

/// `scheduling.koordinator.sh/exact-match-reservation` on a pod: for each listed resource the
/// pod's request must equal the reservation's allocatable.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ExactMatchReservationSpec {
    /// Resource names to compare.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resource_names: Vec<String>,
}

json_codec!(
    ExactMatchReservationSpec,
    ANNOTATION_EXACT_MATCH_RESERVATION,
    empty_is_absent = true
);

/// `scheduling.koordinator.sh/reservation-resize-allocatable` on a Reservation: overlays
/// `status.allocatable` when the reservation is bound.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct ReservationResizeAllocatable {
    /// Resource amounts replacing the template's requests.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub resources: BTreeMap<String, Quantity>,
}

json_codec!(
    ReservationResizeAllocatable,
    ANNOTATION_RESERVATION_RESIZE_ALLOCATABLE,
    empty_is_absent = true,
    check = |v: &ReservationResizeAllocatable| check_quantities(
        ANNOTATION_RESERVATION_RESIZE_ALLOCATABLE,
        "resources",
        &v.resources
    )
);

impl ReservationResizeAllocatable {
    /// The amounts as integers (milli-CPU, whole units otherwise).
    pub fn amounts(&self) -> Result<BTreeMap<String, i64>, AnnotationError> {
        resource_amounts(
            ANNOTATION_RESERVATION_RESIZE_ALLOCATABLE,
            "resources",
            &self.resources,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restricted_options_round_trip() {
        let text = r#"{"resources":["cpu","memory"]}"#;
        let v = ReservationRestrictedOptions::parse(text).expect("valid");
        assert_eq!(v.resources, ["cpu", "memory"]);
        assert_eq!(v.to_value(), text);
        assert!(ReservationRestrictedOptions::parse(r#"{"resources":"cpu"}"#).is_err());
    }

    #[test]
    fn exact_match_round_trips() {
        let text = r#"{"resourceNames":["cpu","memory"]}"#;
        let v = ExactMatchReservationSpec::parse(text).expect("valid");
        assert_eq!(v.resource_names, ["cpu", "memory"]);
        assert_eq!(v.to_value(), text);
    }

    #[test]
    fn resize_allocatable_round_trips_and_checks_quantities() {
        // TestBind: {"resources":{"test-resource":200}} is written with a string amount.
        let text = r#"{"resources":{"test-resource":"200"}}"#;
        let v = ReservationResizeAllocatable::parse(text).expect("valid");
        assert_eq!(v.to_value(), text);
        assert_eq!(
            v.amounts()
                .ok()
                .and_then(|a| a.get("test-resource").copied()),
            Some(200)
        );
        let err = ReservationResizeAllocatable::parse(r#"{"resources":{"cpu":"two"}}"#)
            .expect_err("bad quantity");
        let msg = err.to_string();
        assert!(
            msg.starts_with("annotation scheduling.koordinator.sh/reservation-resize-allocatable: resources.cpu: "),
            "{msg}"
        );
    }
}
