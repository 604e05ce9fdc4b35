//! Dynamic Reservation Provisioning (Koordinator proposal #1770; not in Koordinator's code,
//! implemented by berth as the proposal describes).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use serde::{Deserialize, Serialize};

use super::{
    check_quantities, json_codec, resource_amounts, AnnotationError,
    ANNOTATION_NEW_RESERVATION_REQUIREMENT, ANNOTATION_RESERVATION_TEMPLATE,
};
use crate::reservation::ReservationOwner;

/// `scheduling.koordinator.sh/reservation-template` on a pod: when no Reservation fits it,
/// the scheduler reserves `max(pod requests, recommendedSize)` in a virtual reservation and
/// asks a provisioner to create the real one.
///
/// The proposal's Go fields have no `omitempty`, so all three are always written.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ReservationTemplate {
    /// Owners of the Reservation to create.
    #[serde(default)]
    pub owners: Vec<ReservationOwner>,
    /// Desired (not mandatory) size; the pod's requests are used when this does not fit.
    #[serde(default)]
    pub recommended_size: BTreeMap<String, Quantity>,
    /// Granularity to round the reserved amounts up to.
    #[serde(default, rename = "roundup")]
    pub round_up: BTreeMap<String, Quantity>,
}

json_codec!(
    ReservationTemplate,
    ANNOTATION_RESERVATION_TEMPLATE,
    empty_is_absent = true,
    check = |v: &ReservationTemplate| {
        check_quantities(
            ANNOTATION_RESERVATION_TEMPLATE,
            "recommendedSize",
            &v.recommended_size,
        )?;
        check_quantities(ANNOTATION_RESERVATION_TEMPLATE, "roundup", &v.round_up)
    }
);

impl ReservationTemplate {
    /// `recommendedSize` as integers (milli-CPU, whole units otherwise).
    pub fn recommended_amounts(&self) -> Result<BTreeMap<String, i64>, AnnotationError> {
        resource_amounts(
            ANNOTATION_RESERVATION_TEMPLATE,
            "recommendedSize",
            &self.recommended_size,
        )
    }

    /// `roundup` as integers (milli-CPU, whole units otherwise).
    pub fn round_up_amounts(&self) -> Result<BTreeMap<String, i64>, AnnotationError> {
        resource_amounts(ANNOTATION_RESERVATION_TEMPLATE, "roundup", &self.round_up)
    }
}

/// `scheduling.koordinator.sh/new-reservation-requirement`, written on the pod at PreBind:
/// the provisioner creates a Reservation with these labels (including
/// `scheduling.koordinator.sh/reservation-id`) and at least these resources.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct NewReservationRequirement {
    /// Labels for the Reservation to create.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// Minimum reserved resources.
    #[serde(default)]
    pub resources: BTreeMap<String, Quantity>,
}

json_codec!(
    NewReservationRequirement,
    ANNOTATION_NEW_RESERVATION_REQUIREMENT,
    empty_is_absent = true,
    check = |v: &NewReservationRequirement| check_quantities(
        ANNOTATION_NEW_RESERVATION_REQUIREMENT,
        "resources",
        &v.resources
    )
);

impl NewReservationRequirement {
    /// `resources` as integers (milli-CPU, whole units otherwise).
    pub fn amounts(&self) -> Result<BTreeMap<String, i64>, AnnotationError> {
        resource_amounts(
            ANNOTATION_NEW_RESERVATION_REQUIREMENT,
            "resources",
            &self.resources,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::annotations::LABEL_RESERVATION_ID;

    #[test]
    fn the_proposal_template_example_parses() {
        let text = r#"{
            "owners": [{"labelSelector": {"matchLabels": {"tenancy-id": "1612285282502324"}}}],
            "recommendedSize": {"cpu": "4", "memory": "8Gi"},
            "roundup": {"cpu": "2", "memory": "2Gi"}
        }"#;
        let t = ReservationTemplate::parse(text).expect("valid");
        assert_eq!(t.owners.len(), 1);
        assert_eq!(
            t.recommended_amounts()
                .ok()
                .and_then(|a| a.get("cpu").copied()),
            Some(4000)
        );
        assert_eq!(
            t.round_up_amounts()
                .ok()
                .and_then(|a| a.get("memory").copied()),
            Some(2 << 30)
        );
        let back: serde_json::Value = serde_json::from_str(&t.to_value()).expect("json");
        assert_eq!(
            back,
            serde_json::from_str::<serde_json::Value>(text).expect("json")
        );
    }

    #[test]
    fn the_proposal_requirement_example_round_trips() {
        let text = r#"{"labels":{"scheduling.koordinator.sh/reservation-id":"aaa-bbb-ccc-dddd"},"resources":{"cpu":"4","memory":"4Gi"}}"#;
        let r = NewReservationRequirement::parse(text).expect("valid");
        assert_eq!(
            r.labels.get(LABEL_RESERVATION_ID).map(String::as_str),
            Some("aaa-bbb-ccc-dddd")
        );
        assert_eq!(r.to_value(), text);
        assert_eq!(
            r.amounts().ok().and_then(|a| a.get("memory").copied()),
            Some(4 << 30)
        );
    }

    #[test]
    fn bad_amounts_are_reported_with_the_key() {
        let err = ReservationTemplate::parse(
            r#"{"owners":[],"recommendedSize":{"cpu":"lots"},"roundup":{}}"#,
        )
        .expect_err("bad quantity");
        assert!(
            err.to_string().starts_with(
                "annotation scheduling.koordinator.sh/reservation-template: recommendedSize.cpu: "
            ),
            "{err}"
        );
    }
}
