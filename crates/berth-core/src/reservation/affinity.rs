//! Which of its owner-matched reservations a pod may use: the pod's
//! `scheduling.koordinator.sh/reservation-affinity` (name, `reservationSelector`, required
//! terms, tolerations of reservation taints), `exact-match-reservation`, and the
//! reservation's own `unschedulable`, `taints` and termination.

use std::collections::BTreeMap;

use berth_api::annotations::{
    AnnotationCodec, ExactMatchReservationSpec, ReservationAffinity,
    ANNOTATION_EXACT_MATCH_RESERVATION,
};
use berth_api::k8s_openapi::api::core::v1::{NodeSelector, Taint, Toleration};

use crate::model::pod::PodInfo;
use crate::model::selector::{Labels, NodeSelectorMatcher, Selector};
use crate::resources::ResourceNames;

use super::store::ReservationInfo;

/// The taint Koordinator checks for `spec.unschedulable` reservations.
pub const UNSCHEDULABLE_TAINT_KEY: &str = "node.kubernetes.io/unschedulable";

/// A pod's compiled reservation affinity.
#[derive(Debug, Clone, Default)]
pub struct PodAffinity {
    /// Only this reservation.
    pub name: Option<String>,
    selector: Option<Selector>,
    terms: Option<NodeSelectorMatcher>,
    tolerations: Vec<Toleration>,
}

/// Why an owner-matched reservation is not usable by the pod (Koordinator's diagnosis
/// counters).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mismatch {
    /// The affinity names another reservation.
    Name,
    /// `spec.unschedulable` (not tolerated) or being deleted.
    Unschedulable,
    /// A `NoSchedule`/`NoExecute` taint the affinity does not tolerate: `{key: value}`.
    Taint(String),
    /// `reservationSelector` or the required terms do not match.
    Affinity,
    /// `exact-match-reservation` differs.
    NotExact,
}

/// What the pod says about reservations, parsed once per cycle.
#[derive(Debug, Clone, Default)]
pub struct PodReservationPrefs {
    /// The affinity, when the annotation is present (even empty): reservations are then
    /// mandatory.
    pub affinity: Option<PodAffinity>,
    /// `exact-match-reservation`.
    pub exact: Option<ExactMatchReservationSpec>,
}

impl PodReservationPrefs {
    /// Parses the pod's annotations. The error names the annotation and what is wrong, for
    /// the pod's `PodScheduled` message.
    pub fn from_pod(pod: &PodInfo) -> Result<Self, String> {
        let annotations = pod.pod.metadata.annotations.as_ref();
        let affinity = ReservationAffinity::from_annotations(annotations)
            .map_err(|e| e.to_string())?
            .map(|a| PodAffinity::new(&a))
            .transpose()?;
        let exact = ExactMatchReservationSpec::from_annotations(annotations).map_err(|e| {
            if e.to_string().contains(ANNOTATION_EXACT_MATCH_RESERVATION) {
                e.to_string()
            } else {
                format!("annotation {ANNOTATION_EXACT_MATCH_RESERVATION}: {e}")
            }
        })?;
        Ok(Self { affinity, exact })
    }
}

impl PodAffinity {
    /// Compiles the annotation's value.
    pub fn new(a: &ReservationAffinity) -> Result<Self, String> {
        let terms = match &a.required_during_scheduling_ignored_during_execution {
            Some(req) if !req.reservation_selector_terms.is_empty() => Some(
                NodeSelectorMatcher::new(&NodeSelector {
                    node_selector_terms: req.reservation_selector_terms.clone(),
                })
                .map_err(|e| {
                    format!(
                        "annotation {}: requiredDuringSchedulingIgnoredDuringExecution: {e}",
                        berth_api::annotations::ANNOTATION_RESERVATION_AFFINITY
                    )
                })?,
            ),
            _ => None,
        };
        Ok(Self {
            name: Some(a.name.clone()).filter(|n| !n.is_empty()),
            selector: (!a.reservation_selector.is_empty())
                .then(|| Selector::from_map(&a.reservation_selector)),
            terms,
            tolerations: a.tolerations.clone(),
        })
    }

    fn tolerates(&self, taint: &Taint) -> bool {
        self.tolerations.iter().any(|t| tolerates(t, taint))
    }
}

/// Kubernetes' `Toleration.ToleratesTaint`.
pub fn tolerates(t: &Toleration, taint: &Taint) -> bool {
    if let Some(effect) = t.effect.as_deref().filter(|e| !e.is_empty()) {
        if effect != taint.effect {
            return false;
        }
    }
    let key = t.key.as_deref().unwrap_or("");
    if !key.is_empty() && key != taint.key {
        return false;
    }
    match t.operator.as_deref().unwrap_or("Equal") {
        "Exists" => true,
        "Equal" | "" => {
            !key.is_empty()
                && t.value.as_deref().unwrap_or("") == taint.value.as_deref().unwrap_or("")
        }
        _ => false,
    }
}

/// Checks an owner-matched, allocatable reservation against the pod's preferences, in
/// Koordinator's order (name; unschedulable; taints; selector and terms; exact match).
/// `node_labels` are the labels of the reservation's node (reservation labels overlay them
/// for the selector, as Koordinator's fake node does).
pub fn check(
    prefs: &PodReservationPrefs,
    pod: &PodInfo,
    r: &ReservationInfo,
    node_labels: &Labels,
    names: &ResourceNames,
) -> Result<(), Mismatch> {
    let affinity = prefs.affinity.as_ref();
    // Terminating reservations are never used by new pods (Koordinator #3154).
    if r.terminating {
        return Err(Mismatch::Unschedulable);
    }
    if r.unschedulable {
        let taint = Taint {
            key: UNSCHEDULABLE_TAINT_KEY.into(),
            effect: "NoSchedule".into(),
            ..Default::default()
        };
        if !affinity.is_some_and(|a| a.tolerates(&taint)) {
            return Err(Mismatch::Unschedulable);
        }
    }
    if let Some(a) = affinity {
        if let Some(name) = &a.name {
            if **name != *r.name {
                return Err(Mismatch::Name);
            }
            return exact_match(prefs.exact.as_ref(), pod, r, names);
        }
        // Taints bind only pods that ask for reservations (Koordinator E2E #13).
        for t in &r.taints {
            if t.effect != "NoSchedule" && t.effect != "NoExecute" {
                continue;
            }
            if !a.tolerates(t) {
                return Err(Mismatch::Taint(format!(
                    "{{{}: {}}}",
                    t.key,
                    t.value.as_deref().unwrap_or("")
                )));
            }
        }
        if a.selector.is_some() || a.terms.is_some() {
            let mut labels: BTreeMap<String, String> = node_labels.clone();
            for (k, v) in &r.labels {
                labels.insert(k.clone(), v.clone());
            }
            if a.selector.as_ref().is_some_and(|s| !s.matches(&labels)) {
                return Err(Mismatch::Affinity);
            }
            if a.terms
                .as_ref()
                .is_some_and(|t| !t.matches(&r.name, &labels))
            {
                return Err(Mismatch::Affinity);
            }
        }
    }
    exact_match(prefs.exact.as_ref(), pod, r, names)
}

/// `exact-match-reservation`: each listed resource's request equals the reservation's
/// allocatable. Koordinator's quirk is kept: a listed resource absent from both ends the
/// check as a match.
fn exact_match(
    exact: Option<&ExactMatchReservationSpec>,
    pod: &PodInfo,
    r: &ReservationInfo,
    names: &ResourceNames,
) -> Result<(), Mismatch> {
    let Some(spec) = exact else { return Ok(()) };
    for name in &spec.resource_names {
        let (want, have) = match names.get(name) {
            Some(id) => (pod.requests[id], r.allocatable[id]),
            None => (0, 0),
        };
        if want == 0 && have == 0 {
            return Ok(());
        }
        if want != have {
            return Err(Mismatch::NotExact);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tol(v: serde_json::Value) -> Toleration {
        serde_json::from_value(v).unwrap()
    }

    fn taint(key: &str, value: &str, effect: &str) -> Taint {
        Taint {
            key: key.into(),
            value: Some(value.into()).filter(|v: &String| !v.is_empty()),
            effect: effect.into(),
            ..Default::default()
        }
    }

    #[test]
    fn tolerations_follow_kubernetes() {
        let t = taint("k", "v", "NoSchedule");
        let cases = [
            (json!({"key": "k", "operator": "Equal", "value": "v"}), true),
            (
                json!({"key": "k", "value": "v", "effect": "NoSchedule"}),
                true,
            ),
            (json!({"key": "k", "value": "w"}), false),
            (json!({"key": "k", "operator": "Exists"}), true),
            (json!({"operator": "Exists"}), true),
            (
                json!({"key": "k", "operator": "Exists", "effect": "NoExecute"}),
                false,
            ),
            (json!({"key": "other", "operator": "Exists"}), false),
        ];
        for (t_json, want) in cases {
            assert_eq!(tolerates(&tol(t_json.clone()), &t), want, "{t_json}");
        }
    }

    #[test]
    fn a_malformed_affinity_is_an_error_naming_the_annotation() {
        let p = crate::testing::pod("p")
            .annotation(
                berth_api::annotations::ANNOTATION_RESERVATION_AFFINITY,
                "{not json",
            )
            .build_info();
        let err = PodReservationPrefs::from_pod(&p).unwrap_err();
        assert!(
            err.contains("scheduling.koordinator.sh/reservation-affinity"),
            "{err}"
        );
        let p = crate::testing::pod("p")
            .annotation(
                berth_api::annotations::ANNOTATION_RESERVATION_AFFINITY,
                r#"{"requiredDuringSchedulingIgnoredDuringExecution":{"reservationSelectorTerms":[{"matchExpressions":[{"key":"a","operator":"Near"}]}]}}"#,
            )
            .build_info();
        let err = PodReservationPrefs::from_pod(&p).unwrap_err();
        assert!(err.contains("Near"), "{err}");
        let p = crate::testing::pod("p")
            .annotation(berth_api::annotations::ANNOTATION_RESERVATION_AFFINITY, "")
            .build_info();
        let prefs = PodReservationPrefs::from_pod(&p).unwrap();
        assert!(
            prefs.affinity.is_some(),
            "an empty value still requires a reservation"
        );
    }
}
