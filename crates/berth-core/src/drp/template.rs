//! The pod's `scheduling.koordinator.sh/reservation-template`, validated, and the size it
//! asks the scheduler to reserve.

use std::collections::BTreeMap;

use berth_api::annotations::{
    AnnotationCodec, ReservationTemplate, ANNOTATION_RESERVATION_TEMPLATE,
};
use berth_api::reservation::ReservationOwner;

use crate::model::pod::PodInfo;
use crate::reservation::owner::OwnerMatcher;
use crate::resources::{ResourceNames, Resources};

/// A template the scheduler can act on.
#[derive(Debug, Clone, PartialEq)]
pub struct Template {
    /// Owners of the Reservation to create (validated as a Reservation's).
    pub owners: Vec<ReservationOwner>,
    /// `recommendedSize`, as integers (milli-CPU, whole units otherwise).
    pub recommended: BTreeMap<String, i64>,
    /// `roundup`, as integers.
    pub round_up: BTreeMap<String, i64>,
}

fn problem(field: &str, message: impl std::fmt::Display) -> String {
    format!("annotation {ANNOTATION_RESERVATION_TEMPLATE}: {field}: {message}")
}

impl Template {
    /// The pod's template: `Ok(None)` without the annotation, an error naming the annotation
    /// and the field when the scheduler cannot use it (unparsable JSON or quantity, no
    /// owners, an owner a Reservation could not have, a negative amount).
    pub fn of_pod(pod: &PodInfo) -> Result<Option<Self>, String> {
        let Some(t) = ReservationTemplate::from_annotations(pod.pod.metadata.annotations.as_ref())
            .map_err(|e| e.to_string())?
        else {
            return Ok(None);
        };
        if t.owners.is_empty() || t.owners.iter().all(|o| o.is_empty()) {
            return Err(problem("owners", "at least one owner is required"));
        }
        OwnerMatcher::new(&t.owners).map_err(|e| problem("owners", e))?;
        let recommended = t.recommended_amounts().map_err(|e| e.to_string())?;
        let round_up = t.round_up_amounts().map_err(|e| e.to_string())?;
        for (field, list) in [("recommendedSize", &recommended), ("roundup", &round_up)] {
            if let Some((name, _)) = list.iter().find(|(_, v)| **v < 0) {
                return Err(problem(
                    &format!("{field}.{name}"),
                    "must be greater than or equal to 0",
                ));
            }
        }
        Ok(Some(Self {
            owners: t.owners,
            recommended,
            round_up,
        }))
    }

    /// What to reserve for a pod requesting `requests`: per resource the larger of the
    /// request and `recommendedSize`, rounded up to a multiple of `roundup` where it names
    /// the resource (a zero amount stays zero).
    pub fn size(
        &self,
        requests: &Resources,
        names: &mut ResourceNames,
    ) -> Result<Resources, String> {
        let mut size = *requests;
        for (name, v) in &self.recommended {
            let id = names
                .intern(name)
                .map_err(|e| problem(&format!("recommendedSize.{name}"), e))?;
            size[id] = size[id].max(*v);
        }
        for (name, r) in &self.round_up {
            let Some(id) = names.get(name) else { continue };
            size[id] = round_up(size[id], *r);
        }
        Ok(size)
    }
}

/// `v` rounded up to a multiple of `step` (unchanged when either is not positive).
pub fn round_up(v: i64, step: i64) -> i64 {
    if v <= 0 || step <= 0 {
        return v;
    }
    ((v - 1) / step + 1).saturating_mul(step)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::ResourceId;
    use crate::testing::pod;

    const GI: i64 = 1 << 30;

    fn with(template: &str) -> Result<Option<Template>, String> {
        let mut names = ResourceNames::default();
        let p = pod("p")
            .annotation(ANNOTATION_RESERVATION_TEMPLATE, template)
            .build_info_with(&mut names);
        Template::of_pod(&p)
    }

    #[test]
    fn the_seed_example_sizes_a_small_pod_up_to_the_recommendation() {
        let t = with(
            r#"{"owners":[{"labelSelector":{"matchLabels":{"tenancy-id":"1"}}}],
                "recommendedSize":{"cpu":"4","memory":"8Gi"},"roundup":{"cpu":"2","memory":"2Gi"}}"#,
        )
        .unwrap()
        .unwrap();
        let mut names = ResourceNames::default();
        let mut req = Resources::ZERO;
        req[ResourceId::CPU] = 1000;
        req[ResourceId::MEMORY] = GI;
        let s = t.size(&req, &mut names).unwrap();
        assert_eq!(s[ResourceId::CPU], 4000);
        assert_eq!(s[ResourceId::MEMORY], 8 * GI);
        // A pod larger than the recommendation: its request, rounded up.
        req[ResourceId::CPU] = 4500;
        req[ResourceId::MEMORY] = 9 * GI;
        let s = t.size(&req, &mut names).unwrap();
        assert_eq!(s[ResourceId::CPU], 6000);
        assert_eq!(s[ResourceId::MEMORY], 10 * GI);
    }

    #[test]
    fn rounding_keeps_multiples_and_zero() {
        assert_eq!(round_up(0, 2000), 0);
        assert_eq!(round_up(2000, 2000), 2000);
        assert_eq!(round_up(2001, 2000), 4000);
        assert_eq!(round_up(1, 0), 1);
        assert_eq!(round_up(i64::MAX, 3), i64::MAX);
    }

    #[test]
    fn unusable_templates_are_named() {
        assert_eq!(with(r#"{"owners":[],"recommendedSize":{}}"#).unwrap_err(),
            "annotation scheduling.koordinator.sh/reservation-template: owners: at least one owner is required");
        let e = with("{not json").unwrap_err();
        assert!(
            e.starts_with("annotation scheduling.koordinator.sh/reservation-template: "),
            "{e}"
        );
        let e = with(
            r#"{"owners":[{"labelSelector":{"matchLabels":{"a":"b"}}}],"roundup":{"cpu":"-1"}}"#,
        )
        .unwrap_err();
        assert_eq!(e, "annotation scheduling.koordinator.sh/reservation-template: roundup.cpu: \"-1\": must be greater than or equal to 0 (rule: negative)");
        let e = with(r#"{"owners":[{"labelSelector":{"matchExpressions":[{"key":"a","operator":"Near"}]}}]}"#)
            .unwrap_err();
        assert!(e.contains(": owners: "), "{e}");
        assert_eq!(with("").unwrap(), None, "empty is absent");
    }
}
