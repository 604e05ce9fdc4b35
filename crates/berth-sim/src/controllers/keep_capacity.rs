//! Capacity kept after a scale-down (seed 002, story 3: "reserve resources after a
//! scale-down for future demands"), opt-in per workload with the annotation
//! [`KEEP_AFTER_SCALE_DOWN`] on a ReplicaSet, on the Deployment that owns it, or on a
//! StatefulSet, its value a Go duration (`30m`): when the controller deletes pods because
//! `replicas` shrank, each deleted pod's room becomes a Reservation:
//!
//! - pinned to the pod's node (`template.spec.nodeName`), with the pod's template (so the
//!   same requests, tolerations, affinity);
//! - owned by the pod's controller (the ReplicaSet or StatefulSet), so the next scale-up's
//!   pods allocate it (the scheduler prefers a matching reservation), and `allocateOnce`;
//! - with the annotation's value as its `ttl`, after which it expires as any Reservation;
//! - named `<pod>-kept`, labelled [`LABEL_KEPT_FOR`] `<Kind>.<name>` of the workload that
//!   asked, with an owner reference to it.
//!
//! A value that is not a positive duration keeps nothing. Pods deleted for any other reason
//! (an eviction, a step's delete) keep nothing either: they are replaced, not scaled away.

use std::collections::BTreeMap;

use berth_api::k8s_openapi::api::core::v1::{Pod, PodTemplateSpec};
use berth_api::k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use berth_api::reservation::{
    Reservation, ReservationControllerReference, ReservationOwner, ReservationPodTemplate,
    ReservationSpec,
};
use berth_api::GoDuration;

/// The opt-in annotation; its value is the kept Reservations' TTL.
pub const KEEP_AFTER_SCALE_DOWN: &str = "reservation.berth.dev/keep-after-scale-down";
/// The label naming the workload a kept Reservation is for (`ReplicaSet.web-6984cddc8c`).
pub const LABEL_KEPT_FOR: &str = "reservation.berth.dev/kept-for";

/// The TTL `meta` asks for, if it opts in with a positive duration.
pub fn ttl(meta: &ObjectMeta) -> Option<GoDuration> {
    let text = meta.annotations.as_ref()?.get(KEEP_AFTER_SCALE_DOWN)?;
    let d = GoDuration::new(text.trim());
    d.millis().ok().filter(|m| *m > 0).map(|_| d)
}

/// The Reservation keeping `pod`'s room for `workload` (`kind`, its metadata) for `ttl`.
pub fn reservation(
    pod: &Pod,
    kind: &str,
    workload: &ObjectMeta,
    ttl: GoDuration,
) -> Option<Reservation> {
    let node = super::node_of(pod)?;
    let owner = pod
        .metadata
        .owner_references
        .iter()
        .flatten()
        .find(|r| r.controller == Some(true))?;
    let mut spec = pod.spec.clone().unwrap_or_default();
    spec.node_name = Some(node.to_string());
    let template = PodTemplateSpec {
        metadata: Some(ObjectMeta {
            namespace: pod.metadata.namespace.clone(),
            labels: pod.metadata.labels.clone(),
            ..ObjectMeta::default()
        }),
        spec: Some(spec),
    };
    let name = workload.name.clone().unwrap_or_default();
    Some(Reservation {
        metadata: ObjectMeta {
            name: Some(format!(
                "{}-kept",
                pod.metadata.name.as_deref().unwrap_or("")
            )),
            labels: Some(BTreeMap::from([(
                LABEL_KEPT_FOR.to_string(),
                format!("{kind}.{name}"),
            )])),
            owner_references: Some(vec![OwnerReference {
                api_version: "apps/v1".into(),
                kind: kind.into(),
                name,
                uid: workload.uid.clone().unwrap_or_default(),
                ..OwnerReference::default()
            }]),
            ..ObjectMeta::default()
        },
        spec: ReservationSpec {
            template: Some(ReservationPodTemplate::from(template)),
            owners: vec![ReservationOwner {
                controller: Some(ReservationControllerReference {
                    api_version: Some(owner.api_version.clone()),
                    kind: Some(owner.kind.clone()),
                    name: Some(owner.name.clone()),
                    uid: Some(owner.uid.clone()),
                    controller: Some(true),
                    block_owner_deletion: None,
                    namespace: pod.metadata.namespace.clone(),
                }),
                ..ReservationOwner::default()
            }],
            ttl: Some(ttl),
            allocate_once: Some(true),
            ..ReservationSpec::default()
        },
        status: None,
    })
}

/// Who opted `rs` in: the ReplicaSet itself, or the Deployment that controls it.
pub fn opt_in(
    store: &crate::store::Store,
    rs: &berth_api::k8s_openapi::api::apps::v1::ReplicaSet,
) -> Option<(&'static str, ObjectMeta, GoDuration)> {
    if let Some(t) = ttl(&rs.metadata) {
        return Some(("ReplicaSet", rs.metadata.clone(), t));
    }
    let owner = rs
        .metadata
        .owner_references
        .iter()
        .flatten()
        .find(|r| r.controller == Some(true) && r.kind == "Deployment")?;
    let namespace = rs.metadata.namespace.as_deref().unwrap_or("default");
    let key = berth_core::ObjectKey::new(berth_core::Kind::Deployment, namespace, &owner.name);
    match store.get(&key) {
        Some(berth_core::Object::Deployment(d))
            if d.metadata.uid.as_deref() == Some(&owner.uid) =>
        {
            ttl(&d.metadata).map(|t| ("Deployment", d.metadata.clone(), t))
        }
        _ => None,
    }
}
