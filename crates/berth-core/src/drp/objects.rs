//! The objects of the handshake: the requirement written on the pod, and the Reservation a
//! provisioner creates from the pod's template and requirement (the virtual reservation is
//! the same object, kept in the scheduler only).

use std::collections::BTreeMap;

use berth_api::annotations::{
    AnnotationCodec, NewReservationRequirement, ReservationTemplate, LABEL_RESERVATION_ID,
};
use berth_api::k8s_openapi::api::core::v1::{
    Container, Pod, PodSpec, PodTemplateSpec, ResourceRequirements,
};
use berth_api::k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use berth_api::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use berth_api::reservation::{Reservation, ReservationOwner, ReservationSpec};
use berth_api::{format_resource, GoDuration};

use crate::resources::{ResourceNames, Resources};

/// The requirement for reservation `id` of `size`.
pub fn requirement(id: &str, size: &Resources, names: &ResourceNames) -> NewReservationRequirement {
    let resources = size
        .non_zero()
        .map(|(rid, v)| {
            let name = names.name(rid).to_string();
            let q = Quantity(format_resource(&name, v));
            (name, q)
        })
        .collect();
    NewReservationRequirement {
        labels: BTreeMap::from([(LABEL_RESERVATION_ID.to_string(), id.to_string())]),
        resources,
    }
}

/// The id a requirement names, if any.
pub fn requirement_id(r: &NewReservationRequirement) -> Option<&str> {
    r.labels
        .get(LABEL_RESERVATION_ID)
        .map(String::as_str)
        .filter(|s| !s.is_empty())
}

/// The reservation id the pod's requirement names (a pod that went through the handshake,
/// possibly with a scheduler that has restarted since).
pub fn pod_requirement_id(pod: &Pod) -> Option<String> {
    NewReservationRequirement::from_annotations(pod.metadata.annotations.as_ref())
        .ok()
        .flatten()
        .and_then(|r| requirement_id(&r).map(str::to_string))
}

/// The reservation id a Reservation carries in its labels.
pub fn reservation_id(r: &Reservation) -> Option<&str> {
    r.metadata
        .labels
        .as_ref()?
        .get(LABEL_RESERVATION_ID)
        .map(String::as_str)
        .filter(|s| !s.is_empty())
}

/// The Reservation for `pod` named `name`: the requirement's labels, the template's owners,
/// `allocateOnce: false` (the tenant's next pods allocate the remainder), a reserve-pod
/// template requesting the requirement's resources in the pod's namespace with its
/// scheduler, tolerations and node selector; `ttl` as given (`None`: the CRD default).
pub fn reservation(
    pod: &Pod,
    owners: Vec<ReservationOwner>,
    req: &NewReservationRequirement,
    name: &str,
    ttl: Option<GoDuration>,
) -> Reservation {
    let spec = pod.spec.clone().unwrap_or_default();
    let template = PodTemplateSpec {
        metadata: Some(ObjectMeta {
            namespace: pod.metadata.namespace.clone(),
            ..Default::default()
        }),
        spec: Some(PodSpec {
            scheduler_name: spec.scheduler_name,
            tolerations: spec.tolerations,
            node_selector: spec.node_selector,
            priority_class_name: spec.priority_class_name,
            containers: vec![Container {
                name: "reserved".into(),
                resources: Some(ResourceRequirements {
                    requests: Some(req.resources.clone()),
                    ..Default::default()
                }),
                ..Default::default()
            }],
            ..Default::default()
        }),
    };
    let mut r = Reservation::new(
        name,
        ReservationSpec {
            template: Some(template.into()),
            owners,
            ttl,
            allocate_once: Some(false),
            ..Default::default()
        },
    );
    r.metadata.labels = Some(req.labels.clone());
    r
}

/// What a provisioner creates for `pod`: `None` unless the pod carries both annotations and
/// is not bound yet; an error naming the annotation when one cannot be read. The
/// Reservation is named after the pod, `NAMESPACE-NAME` (Reservations are cluster-scoped;
/// when that name is taken by another id's Reservation, [`nth_name`] gives the next one)
/// and gets the CRD's default TTL. A provisioner creates one Reservation per id however
/// often it is asked: it looks for the id label ([`reservation_id`]), not the name.
pub fn provisioned_reservation(pod: &Pod) -> Option<Result<Reservation, String>> {
    let annotations = pod.metadata.annotations.as_ref()?;
    if pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.as_ref())
        .is_some()
    {
        return None;
    }
    let req = match NewReservationRequirement::from_annotations(Some(annotations)) {
        Ok(Some(r)) => r,
        Ok(None) => return None,
        Err(e) => return Some(Err(e.to_string())),
    };
    provisioned_reservation_for(pod, &req)
}

/// [`provisioned_reservation`] for a requirement seen earlier on the pod (a provisioner
/// that took time to act: the pod may ask for another id by now, the one it saw is the
/// one it creates).
pub fn provisioned_reservation_for(
    pod: &Pod,
    req: &NewReservationRequirement,
) -> Option<Result<Reservation, String>> {
    let annotations = pod.metadata.annotations.as_ref()?;
    if pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.as_ref())
        .is_some()
    {
        return None;
    }
    let template = match ReservationTemplate::from_annotations(Some(annotations)) {
        Ok(Some(t)) => t,
        Ok(None) => return None,
        Err(e) => return Some(Err(e.to_string())),
    };
    if requirement_id(req).is_none() {
        return Some(Err(format!(
            "annotation {}: labels: no {LABEL_RESERVATION_ID}",
            NewReservationRequirement::KEY
        )));
    }
    let name = format!(
        "{}-{}",
        pod.metadata.namespace.as_deref().unwrap_or("default"),
        pod.metadata.name.as_deref().unwrap_or("")
    );
    Some(Ok(reservation(pod, template.owners, req, &name, None)))
}

/// The `n`-th name to try for a provisioned Reservation (1: `base` itself, then `base-2`...).
pub fn nth_name(base: &str, n: u32) -> String {
    if n <= 1 {
        base.to_string()
    } else {
        format!("{base}-{n}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::ResourceId;
    use berth_api::annotations::{
        ANNOTATION_NEW_RESERVATION_REQUIREMENT, ANNOTATION_RESERVATION_TEMPLATE,
    };

    #[test]
    fn the_provisioner_builds_the_reservation_the_requirement_asks_for() {
        let mut names = ResourceNames::default();
        let mut size = Resources::ZERO;
        size[ResourceId::CPU] = 4000;
        size[ResourceId::MEMORY] = 8 << 30;
        let req = requirement("drp-1", &size, &names);
        assert_eq!(
            req.to_value(),
            r#"{"labels":{"scheduling.koordinator.sh/reservation-id":"drp-1"},"resources":{"cpu":"4","memory":"8Gi"}}"#
        );
        let _ = names.intern("cpu");
        let mut pod = Pod::default();
        pod.metadata.namespace = Some("team".into());
        pod.metadata.name = Some("p".into());
        pod.metadata.annotations = Some(BTreeMap::from([
            (
                ANNOTATION_NEW_RESERVATION_REQUIREMENT.to_string(),
                req.to_value(),
            ),
            (
                ANNOTATION_RESERVATION_TEMPLATE.to_string(),
                r#"{"owners":[{"labelSelector":{"matchLabels":{"t":"1"}}}]}"#.to_string(),
            ),
        ]));
        let r = provisioned_reservation(&pod)
            .expect("both annotations")
            .expect("readable");
        assert_eq!(r.metadata.name.as_deref(), Some("team-p"));
        assert_eq!(nth_name("team-p", 2), "team-p-2");
        assert_eq!(reservation_id(&r), Some("drp-1"));
        assert_eq!(r.spec.allocate_once, Some(false));
        assert_eq!(r.spec.owners.len(), 1);
        assert!(r.spec.ttl.is_none(), "the CRD default");
        let t = r.spec.template.as_ref().unwrap();
        assert_eq!(
            t.pod.metadata.as_ref().unwrap().namespace.as_deref(),
            Some("team")
        );
        let c = &t.pod.spec.as_ref().unwrap().containers[0];
        assert_eq!(
            c.resources
                .as_ref()
                .unwrap()
                .requests
                .as_ref()
                .unwrap()
                .get("memory"),
            Some(&Quantity("8Gi".into()))
        );
        assert_eq!(pod_requirement_id(&pod).as_deref(), Some("drp-1"));
        // Bound pods are past the handshake.
        pod.spec = Some(PodSpec {
            node_name: Some("n1".into()),
            ..Default::default()
        });
        assert!(provisioned_reservation(&pod).is_none());
    }
}
