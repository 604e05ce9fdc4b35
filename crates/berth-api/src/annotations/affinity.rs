//! `scheduling.koordinator.sh/reservation-affinity`.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{NodeSelectorTerm, Toleration};
use serde::{Deserialize, Serialize};

use super::{
    from_json, to_json, AnnotationCodec, AnnotationError, ANNOTATION_RESERVATION_AFFINITY,
};

/// A pod's constraints on which reservations it may allocate from.
///
/// The annotation's presence alone makes reservations mandatory for the pod: an empty value
/// parses to the default (no constraint besides "must use a reservation"), and
/// [`AnnotationCodec::from_annotations`] returns `Some` for it.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ReservationAffinity {
    /// Only the reservation with this name; with it set, unschedulable/taint/selector checks
    /// are skipped (only exact-match still applies).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// Terms over reservation labels (overlaid on its node's labels), ORed, with
    /// `NodeSelectorTerm` semantics; `matchFields metadata.name` is the reservation name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub required_during_scheduling_ignored_during_execution: Option<ReservationAffinitySelector>,
    /// Every pair must be among the reservation's labels.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub reservation_selector: BTreeMap<String, String>,
    /// Tolerations for reservation taints and for `spec.unschedulable`
    /// (`node.kubernetes.io/unschedulable:NoSchedule`). The pod's own tolerations do not count.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tolerations: Vec<Toleration>,
}

/// The OR of reservation selector terms.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ReservationAffinitySelector {
    /// Terms, ORed; reuses the node-affinity term type.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reservation_selector_terms: Vec<NodeSelectorTerm>,
}

impl AnnotationCodec for ReservationAffinity {
    const KEY: &'static str = ANNOTATION_RESERVATION_AFFINITY;
    const EMPTY_IS_ABSENT: bool = false;

    fn parse(text: &str) -> Result<Self, AnnotationError> {
        if text.is_empty() {
            return Ok(Self::default());
        }
        from_json(Self::KEY, text)
    }

    fn to_value(&self) -> String {
        to_json(self)
    }
}

impl ReservationAffinity {
    /// Parses the annotation value; `""` is the default affinity (see the type doc).
    pub fn parse(text: &str) -> Result<Self, AnnotationError> {
        <Self as AnnotationCodec>::parse(text)
    }

    /// The annotation value, as Go's `json.Marshal` would write it.
    pub fn to_value(&self) -> String {
        <Self as AnnotationCodec>::to_value(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::NodeSelectorRequirement;

    #[test]
    fn reads_the_documented_shape() {
        let text = r#"{
            "name": "reservation8C16G",
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "reservationSelectorTerms": [
                    {"matchExpressions": [{"key": "reservation-a", "operator": "In", "values": ["true"]}]}
                ]
            },
            "reservationSelector": {"foo": "bar"},
            "tolerations": [{"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"}]
        }"#;
        let a = ReservationAffinity::parse(text).expect("valid");
        assert_eq!(a.name, "reservation8C16G");
        let terms = &a
            .required_during_scheduling_ignored_during_execution
            .as_ref()
            .expect("present")
            .reservation_selector_terms;
        assert_eq!(
            terms[0].match_expressions.as_deref(),
            Some(
                &[NodeSelectorRequirement {
                    key: "reservation-a".into(),
                    operator: "In".into(),
                    values: Some(vec!["true".into()]),
                }][..]
            )
        );
        assert_eq!(
            a.reservation_selector.get("foo").map(String::as_str),
            Some("bar")
        );
        assert_eq!(a.tolerations[0].effect.as_deref(), Some("NoSchedule"));
        // Round trip: same JSON value back.
        let back: serde_json::Value = serde_json::from_str(&a.to_value()).expect("json");
        let orig: serde_json::Value = serde_json::from_str(text).expect("json");
        assert_eq!(back, orig);
    }

    #[test]
    fn an_empty_value_still_means_must_use_a_reservation() {
        let mut annotations = BTreeMap::new();
        annotations.insert(ANNOTATION_RESERVATION_AFFINITY.to_string(), String::new());
        let got = ReservationAffinity::from_annotations(Some(&annotations)).expect("valid");
        assert_eq!(got, Some(ReservationAffinity::default()));
        assert_eq!(ReservationAffinity::default().to_value(), "{}");
        assert!(
            ReservationAffinity::from_annotations(Some(&BTreeMap::new()))
                .is_ok_and(|v| v.is_none())
        );
    }

    #[test]
    fn selector_only_round_trips_byte_for_byte() {
        let text = r#"{"reservationSelector":{"foo":"bar"}}"#;
        assert_eq!(
            ReservationAffinity::parse(text).expect("valid").to_value(),
            text
        );
    }

    #[test]
    fn a_wrong_shape_is_reported_with_the_key() {
        let err = ReservationAffinity::parse(r#"{"reservationSelector": ["foo"]}"#)
            .expect_err("map expected");
        let msg = err.to_string();
        assert!(
            msg.contains("scheduling.koordinator.sh/reservation-affinity"),
            "{msg}"
        );
        assert!(msg.contains("expected a map"), "{msg}");
    }
}
