//! `scheduling.koordinator.sh/reservation-allocated`.

use serde::{Deserialize, Serialize};

use super::{json_codec, ANNOTATION_RESERVATION_ALLOCATED};

/// Which reservation a pod allocated from. Written on the pod at PreBind; after a restart it
/// is the only record of the binding, so the cache and the status controller rebuild owners
/// and `status.allocated` from it.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct ReservationAllocated {
    /// Reservation name (`omitempty`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// Reservation UID (`omitempty`); matching uses this, not the name.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub uid: String,
}

// Koordinator unmarshals even "" (and fails), so an empty value is an error, not absence.
json_codec!(
    ReservationAllocated,
    ANNOTATION_RESERVATION_ALLOCATED,
    empty_is_absent = false
);

impl ReservationAllocated {
    /// The value for reservation `name` with `uid`.
    pub fn new(name: impl Into<String>, uid: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            uid: uid.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::annotations::AnnotationCodec;
    use std::collections::BTreeMap;

    #[test]
    fn writes_koordinators_exact_bytes() {
        // TestPreBind in koordinator's reservation plugin.
        let v = ReservationAllocated::new("assumed-reservation", "1234567890");
        assert_eq!(
            v.to_value(),
            r#"{"name":"assumed-reservation","uid":"1234567890"}"#
        );
        assert_eq!(ReservationAllocated::parse(&v.to_value()).ok(), Some(v));
    }

    #[test]
    fn empty_fields_are_omitted_and_tolerated() {
        assert_eq!(
            ReservationAllocated::new("", "u").to_value(),
            r#"{"uid":"u"}"#
        );
        assert_eq!(
            ReservationAllocated::parse("{}").ok(),
            Some(ReservationAllocated::default())
        );
    }

    #[test]
    fn errors_name_the_key() {
        let err = ReservationAllocated::parse(r#"{"name": 1}"#).expect_err("name must be a string");
        assert!(
            err.to_string().starts_with(
                "annotation scheduling.koordinator.sh/reservation-allocated: invalid value: "
            ),
            "{err}"
        );
        let mut annotations = BTreeMap::new();
        annotations.insert(ANNOTATION_RESERVATION_ALLOCATED.to_string(), String::new());
        assert!(ReservationAllocated::from_annotations(Some(&annotations)).is_err());
        assert!(ReservationAllocated::from_annotations(None).is_ok_and(|v| v.is_none()));
    }
}
