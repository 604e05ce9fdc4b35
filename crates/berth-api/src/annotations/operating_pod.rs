//! Operating pods: real pods labelled `scheduling.koordinator.sh/operating-mode=Reservation`
//! that act as reservations.

use k8s_openapi::api::core::v1::ObjectReference;
use serde::{Deserialize, Serialize};

use super::{json_codec, ANNOTATION_RESERVATION_CURRENT_OWNER, ANNOTATION_RESERVATION_OWNERS};
use crate::reservation::ReservationOwner;

/// `scheduling.koordinator.sh/reservation-owners`: the operating pod's owners, same shape and
/// semantics as `Reservation.spec.owners`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(transparent)]
pub struct ReservationOwners(pub Vec<ReservationOwner>);

json_codec!(
    ReservationOwners,
    ANNOTATION_RESERVATION_OWNERS,
    empty_is_absent = true
);

/// `scheduling.koordinator.sh/reservation-current-owner`: the pod currently allocated to the
/// operating pod. Written by an external component; read when the cache adds assigned pods.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(transparent)]
pub struct ReservationCurrentOwner(pub ObjectReference);

json_codec!(
    ReservationCurrentOwner,
    ANNOTATION_RESERVATION_CURRENT_OWNER,
    empty_is_absent = true
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owners_round_trip() {
        let text = r#"[{"object":{"name":"test-pod-0","namespace":"test"}},{"labelSelector":{"matchLabels":{"aaa":"bbb"}}}]"#;
        let owners = ReservationOwners::parse(text).expect("valid");
        assert_eq!(owners.0.len(), 2);
        assert_eq!(owners.to_value(), text);
        let err = ReservationOwners::parse(r#"{"object":{}}"#).expect_err("must be an array");
        assert!(err.to_string().contains("reservation-owners"), "{err}");
    }

    #[test]
    fn current_owner_round_trips() {
        let text = r#"{"name":"p","namespace":"default","uid":"u-1"}"#;
        let owner = ReservationCurrentOwner::parse(text).expect("valid");
        assert_eq!(owner.0.uid.as_deref(), Some("u-1"));
        assert_eq!(owner.to_value(), text);
    }
}
