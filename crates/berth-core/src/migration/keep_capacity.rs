//! Capacity kept after a scale-down (seed 002, story 3: "reserve resources after a
//! scale-down for future demands"), opt-in per workload with the annotation
//! [`KEEP_AFTER_SCALE_DOWN`] on a ReplicaSet, on the Deployment that owns it, or on a
//! StatefulSet, its value a Go duration (`30m`): when the workload's controller deletes pods
//! because `replicas` shrank, each deleted pod's room becomes a Reservation ([`reservation`]):
//!
//! - pinned to the pod's node (`template.spec.nodeName`), with the pod's template (so the
//!   same requests, tolerations, affinity);
//! - owned (`spec.owners`) by the pod's controller (the ReplicaSet or StatefulSet), so the
//!   next scale-up's pods allocate it (the scheduler prefers a matching reservation), and
//!   `allocateOnce`;
//! - with the annotation's value as its `ttl`, after which it expires as any Reservation;
//! - named `<namespace>.<pod>-kept` ([`kept_name`]), labelled [`LABEL_KEPT_FOR`] `<Kind>.<name>` of the workload that
//!   asked, and annotated [`ANNOTATION_KEPT_FOR`] with its namespace and UID.
//!
//! No owner reference ties the Reservation to the workload: a Reservation is cluster-scoped
//! and the workload namespaced, and the garbage collector refuses a namespaced owner of a
//! cluster-scoped object (as for `berth reserve`'s Reservations). The Reservation ends by
//! its `ttl` or when a pod takes it.
//!
//! `berth simulate`'s workload controllers call this when they scale down; `berth migrate`
//! calls it when it sees a pod of an opted-in workload go while the workload's other active
//! pods still number its `replicas` or more ([`scaled_away`]).

use std::collections::BTreeMap;

use berth_api::k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
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
/// The annotation naming the workload fully: `{"apiVersion", "kind", "namespace", "name",
/// "uid"}` as JSON (a label value can hold neither the namespace's `/` nor always the UID).
pub const ANNOTATION_KEPT_FOR: &str = "reservation.berth.dev/kept-for";

/// An object's controller reference (the owner reference with `controller: true`).
pub fn controller_ref(meta: &ObjectMeta) -> Option<&OwnerReference> {
    meta.owner_references
        .iter()
        .flatten()
        .find(|r| r.controller == Some(true))
}

/// The Deployment controlling a ReplicaSet, as `(namespace, name, uid)` from its controller
/// reference: the workload whose opt-in a ReplicaSet's kept room follows (the Deployment
/// controller copies its annotations onto the ReplicaSet, so the Deployment's win).
pub fn controlling_deployment(meta: &ObjectMeta) -> Option<(&str, &str, &str)> {
    let owner = controller_ref(meta).filter(|r| r.kind == "Deployment")?;
    let namespace = meta.namespace.as_deref().unwrap_or("default");
    Some((namespace, owner.name.as_str(), owner.uid.as_str()))
}

/// The label (and selector term) that tells a Deployment's ReplicaSets apart.
pub const POD_TEMPLATE_HASH: &str = "pod-template-hash";

/// `deploymentutil.EqualIgnoreHash`: the templates are equal once [`POD_TEMPLATE_HASH`] is
/// taken out of the labels.
pub fn same_template_ignoring_hash(a: &PodTemplateSpec, b: &PodTemplateSpec) -> bool {
    let strip = |t: &PodTemplateSpec| {
        let mut t = t.clone();
        if let Some(labels) = t.metadata.as_mut().and_then(|m| m.labels.as_mut()) {
            labels.remove(POD_TEMPLATE_HASH);
        }
        serde_json::to_value(&t).ok()
    };
    strip(a) == strip(b)
}

/// Whether `rs` is `deployment`'s new ReplicaSet (its template is the Deployment's, as the
/// Deployment controller decides). The pods an older one loses go in a rollout and are
/// replaced by the new one's: they were not scaled away, and keep nothing.
pub fn is_new_replica_set(rs: &ReplicaSet, deployment: &Deployment) -> bool {
    let rs = rs.spec.as_ref().and_then(|s| s.template.as_ref());
    let d = deployment.spec.as_ref().map(|s| &s.template);
    matches!((rs, d), (Some(rs), Some(d)) if same_template_ignoring_hash(rs, d))
}

/// The TTL `meta` asks for, if it opts in with a positive duration.
pub fn ttl(meta: &ObjectMeta) -> Option<GoDuration> {
    let text = meta.annotations.as_ref()?.get(KEEP_AFTER_SCALE_DOWN)?;
    let d = GoDuration::new(text.trim());
    d.millis().ok().filter(|m| *m > 0).map(|_| d)
}

/// Whether a pod that went was scaled away rather than replaced: its controller still has
/// `replicas` or more other active pods, so it will not create one in its place.
pub fn scaled_away(others_active: usize, replicas: i32) -> bool {
    usize::try_from(replicas.max(0)).is_ok_and(|r| others_active >= r)
}

/// The kept Reservation's name for pod `namespace/pod`: `<namespace>.<pod>-kept`.
/// Reservations are cluster-scoped, so the namespace is part of the name (same-named pods of
/// two namespaces keep two Reservations); a namespace is a DNS label, without dots, so the
/// first dot tells where it ends. Past an object name's 253 characters the pod's part is cut
/// and a hash of the whole name keeps it unique.
pub fn kept_name(namespace: &str, pod: &str) -> String {
    const MAX: usize = 253;
    let full = format!("{namespace}.{pod}-kept");
    if full.len() <= MAX {
        return full;
    }
    let hash = format!("{:016x}", xxhash_rust::xxh64::xxh64(full.as_bytes(), 0));
    // Pod names are ASCII (DNS subdomains); cut on a char boundary regardless.
    let room = MAX - namespace.len() - 1 - hash.len() - "--kept".len();
    let mut cut = room.min(pod.len());
    while !pod.is_char_boundary(cut) {
        cut -= 1;
    }
    let stem = pod[..cut].trim_end_matches(['.', '-']);
    format!("{namespace}.{stem}-{hash}-kept")
}

/// The Reservation keeping `pod`'s room for `workload` (`kind`, its metadata) for `ttl`;
/// `None` for a pod bound to no node or without a controller.
pub fn reservation(
    pod: &Pod,
    kind: &str,
    workload: &ObjectMeta,
    ttl: GoDuration,
) -> Option<Reservation> {
    let node = pod
        .spec
        .as_ref()?
        .node_name
        .as_deref()
        .filter(|n| !n.is_empty())?;
    let owner = controller_ref(&pod.metadata)?;
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
    let kept_for = serde_json::json!({
        "apiVersion": "apps/v1",
        "kind": kind,
        "namespace": workload.namespace.clone().or_else(|| pod.metadata.namespace.clone()),
        "name": name,
        "uid": workload.uid.clone().unwrap_or_default(),
    });
    Some(Reservation {
        metadata: ObjectMeta {
            name: Some(kept_name(
                pod.metadata.namespace.as_deref().unwrap_or("default"),
                pod.metadata.name.as_deref().unwrap_or(""),
            )),
            labels: Some(BTreeMap::from([(
                LABEL_KEPT_FOR.to_string(),
                format!("{kind}.{name}"),
            )])),
            annotations: Some(BTreeMap::from([(
                ANNOTATION_KEPT_FOR.to_string(),
                kept_for.to_string(),
            )])),
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

#[cfg(test)]
mod tests {
    use super::*;
    use berth_api::k8s_openapi::api::core::v1::PodSpec;
    use berth_api::k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

    fn pod(node: Option<&str>) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some("web-abc-x1".into()),
                namespace: Some("shop".into()),
                labels: Some(BTreeMap::from([("app".into(), "web".into())])),
                owner_references: Some(vec![OwnerReference {
                    api_version: "apps/v1".into(),
                    kind: "ReplicaSet".into(),
                    name: "web-abc".into(),
                    uid: "rs-uid".into(),
                    controller: Some(true),
                    ..OwnerReference::default()
                }]),
                ..ObjectMeta::default()
            },
            spec: Some(PodSpec {
                node_name: node.map(str::to_string),
                ..PodSpec::default()
            }),
            status: None,
        }
    }

    fn workload(annotation: Option<&str>) -> ObjectMeta {
        ObjectMeta {
            name: Some("web".into()),
            namespace: Some("shop".into()),
            uid: Some("deploy-uid".into()),
            annotations: annotation
                .map(|a| BTreeMap::from([(KEEP_AFTER_SCALE_DOWN.to_string(), a.to_string())])),
            ..ObjectMeta::default()
        }
    }

    #[test]
    fn only_a_positive_duration_opts_in() {
        assert_eq!(ttl(&workload(Some("30m"))), Some(GoDuration::new("30m")));
        assert_eq!(ttl(&workload(Some(" 5s "))), Some(GoDuration::new("5s")));
        for refused in ["0s", "-1m", "soon", ""] {
            assert_eq!(ttl(&workload(Some(refused))), None, "{refused:?}");
        }
        assert_eq!(ttl(&workload(None)), None);
    }

    #[test]
    fn a_pod_is_scaled_away_only_while_the_others_fill_the_replicas() {
        assert!(scaled_away(2, 2));
        assert!(scaled_away(4, 2));
        assert!(
            !scaled_away(4, 5),
            "an eviction: the controller replaces it"
        );
        assert!(scaled_away(0, 0));
        assert!(scaled_away(0, -1));
    }

    #[test]
    fn kept_names_differ_by_namespace_and_stay_valid_names() {
        assert_eq!(kept_name("a", "web-1"), "a.web-1-kept");
        assert_ne!(kept_name("a", "web-1"), kept_name("b", "web-1"));
        // A dotted pod name cannot pass for another namespace's pod.
        assert_ne!(kept_name("default", "b.x"), kept_name("b", "x"));
        let long = "p".repeat(253);
        let (one, two) = (kept_name("ns", &long), kept_name("ns", &long[1..]));
        assert!(one.len() <= 253 && two.len() <= 253, "{one}");
        assert_ne!(one, two);
        assert!(one.starts_with("ns.ppp") && one.ends_with("-kept"), "{one}");
    }

    #[test]
    fn the_kept_reservation_names_the_workload_without_an_owner_reference() {
        let r = reservation(
            &pod(Some("n1")),
            "Deployment",
            &workload(Some("1m")),
            GoDuration::new("1m"),
        )
        .expect("kept");
        assert_eq!(r.metadata.name.as_deref(), Some("shop.web-abc-x1-kept"));
        assert!(r.metadata.owner_references.is_none(), "{:?}", r.metadata);
        let labels = r.metadata.labels.clone().unwrap_or_default();
        assert_eq!(labels[LABEL_KEPT_FOR], "Deployment.web");
        let annotations = r.metadata.annotations.clone().unwrap_or_default();
        let kept: serde_json::Value =
            serde_json::from_str(&annotations[ANNOTATION_KEPT_FOR]).expect("json");
        assert_eq!(
            kept,
            serde_json::json!({"apiVersion": "apps/v1", "kind": "Deployment",
                "namespace": "shop", "name": "web", "uid": "deploy-uid"})
        );
        let owner = r.spec.owners[0].controller.as_ref().expect("controller");
        assert_eq!(owner.uid.as_deref(), Some("rs-uid"));
        assert_eq!(owner.namespace.as_deref(), Some("shop"));
        assert_eq!(r.spec.allocate_once, Some(true));
        assert_eq!(r.spec.ttl, Some(GoDuration::new("1m")));
    }

    #[test]
    fn an_unbound_pod_keeps_nothing() {
        let w = workload(Some("1m"));
        assert!(reservation(&pod(None), "ReplicaSet", &w, GoDuration::new("1m")).is_none());
        let mut orphan = pod(Some("n1"));
        orphan.metadata.owner_references = None;
        assert!(reservation(&orphan, "ReplicaSet", &w, GoDuration::new("1m")).is_none());
    }
}
