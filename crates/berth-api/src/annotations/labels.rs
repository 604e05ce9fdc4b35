//! Flag and integer labels/annotations, read the way Koordinator reads them.

use std::collections::BTreeMap;

use super::keys::{
    ANNOTATION_POD_PRE_ALLOCATABLE_PRIORITY, LABEL_KOORDINATOR_PRIORITY, LABEL_RESERVATION_ORDER,
};
use super::AnnotationError;

/// True when `map[key]` is exactly `"true"`: Koordinator compares the string, so `"True"` or
/// `"1"` do not count (`reservation-ignored`, `pre-allocation-required`,
/// `disable-preemptible`, `is-pre-allocatable`, `reserve-pod`).
pub fn is_true(map: Option<&BTreeMap<String, String>>, key: &str) -> bool {
    map.and_then(|m| m.get(key)).is_some_and(|v| v == "true")
}

/// Parses a decimal integer label/annotation like Go's `strconv.ParseInt(v, 10, 64)`
/// (optional sign, no spaces).
pub fn parse_int_label(key: &'static str, value: &str) -> Result<i64, AnnotationError> {
    value.parse::<i64>().map_err(|_| AnnotationError::Integer {
        key,
        value: value.to_string(),
        bits: 64,
    })
}

/// `scheduling.koordinator.sh/reservation-order` on a Reservation: `Some(order)` only when it
/// takes part in ordering. Koordinator ignores `0` and unparseable values (no error surfaces),
/// and accepts negatives, which therefore win.
pub fn reservation_order(labels: Option<&BTreeMap<String, String>>) -> Option<i64> {
    let value = labels?.get(LABEL_RESERVATION_ORDER)?;
    parse_int_label(LABEL_RESERVATION_ORDER, value)
        .ok()
        .filter(|order| *order != 0)
}

/// `pod.koordinator.sh/pre-allocatable-priority` on a pod (default key): unparseable or absent
/// is 0, as in Koordinator's Cluster-mode sort.
pub fn pre_allocatable_priority(annotations: Option<&BTreeMap<String, String>>) -> i64 {
    annotations
        .and_then(|a| a.get(ANNOTATION_POD_PRE_ALLOCATABLE_PRIORITY))
        .and_then(|v| parse_int_label(ANNOTATION_POD_PRE_ALLOCATABLE_PRIORITY, v).ok())
        .unwrap_or(0)
}

/// `koordinator.sh/priority` on a Reservation: the reserve pod's priority when its template
/// sets none. `Ok(None)` when absent; an error when it is not an int32.
pub fn koordinator_priority(
    labels: Option<&BTreeMap<String, String>>,
) -> Result<Option<i32>, AnnotationError> {
    let Some(value) = labels.and_then(|l| l.get(LABEL_KOORDINATOR_PRIORITY)) else {
        return Ok(None);
    };
    value
        .parse::<i32>()
        .map(Some)
        .map_err(|_| AnnotationError::Integer {
            key: LABEL_KOORDINATOR_PRIORITY,
            value: value.clone(),
            bits: 32,
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::annotations::LABEL_RESERVATION_IGNORED;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn only_the_exact_string_true_is_true() {
        assert!(is_true(
            Some(&map(&[(LABEL_RESERVATION_IGNORED, "true")])),
            LABEL_RESERVATION_IGNORED
        ));
        for v in ["True", "1", "yes", ""] {
            assert!(!is_true(
                Some(&map(&[(LABEL_RESERVATION_IGNORED, v)])),
                LABEL_RESERVATION_IGNORED
            ));
        }
        assert!(!is_true(None, LABEL_RESERVATION_IGNORED));
    }

    #[test]
    fn reservation_order_ignores_zero_and_garbage_but_keeps_negatives() {
        let order = |v: &str| reservation_order(Some(&map(&[(LABEL_RESERVATION_ORDER, v)])));
        assert_eq!(order("123456"), Some(123_456));
        assert_eq!(order("-5"), Some(-5));
        assert_eq!(order("+7"), Some(7));
        assert_eq!(order("0"), None);
        assert_eq!(order("abc"), None);
        assert_eq!(order(" 1"), None);
        assert_eq!(reservation_order(None), None);
    }

    #[test]
    fn integer_errors_name_the_key() {
        let err = parse_int_label(LABEL_RESERVATION_ORDER, "1.5").expect_err("not an integer");
        assert_eq!(
            err.to_string(),
            r#"scheduling.koordinator.sh/reservation-order: "1.5" is not a valid 64-bit integer"#
        );
        let err = koordinator_priority(Some(&map(&[(LABEL_KOORDINATOR_PRIORITY, "3000000000")])))
            .expect_err("out of int32 range");
        assert!(err.to_string().contains("koordinator.sh/priority"), "{err}");
        assert_eq!(
            koordinator_priority(Some(&map(&[(LABEL_KOORDINATOR_PRIORITY, "100")]))).ok(),
            Some(Some(100))
        );
    }

    #[test]
    fn pre_allocatable_priority_defaults_to_zero() {
        let p = |v: &str| {
            pre_allocatable_priority(Some(&map(&[(ANNOTATION_POD_PRE_ALLOCATABLE_PRIORITY, v)])))
        };
        assert_eq!(p("20"), 20);
        assert_eq!(p("x"), 0);
        assert_eq!(pre_allocatable_priority(None), 0);
    }
}
