//! The Reservation a `ReservationFirst` job creates for its pod, as Koordinator's
//! `CreateOrUpdateReservationOptions` builds it: the job's own template if it gives one
//! (completed from the pod), else the pod's metadata and spec; `allocateOnce: true`; no
//! `nodeName`; a required node affinity term `metadata.name NotIn [<the pod's node>]` added
//! to every term (so the reservation lands elsewhere); the pod's controller as owner (the pod
//! itself if it is pending and unschedulable); the job's `ttl` when the template sets no
//! expiry; the labels `app.kubernetes.io/created-by: koord-descheduler` and
//! `scheduling.koordinator.sh/reservation-order: <now, ms>`. Named after the job's UID.

use std::collections::BTreeMap;

use berth_api::annotations::{
    ANNOTATION_RESERVATION_ALLOCATED, ANNOTATION_RESOURCE_STATUS, LABEL_RESERVATION_ORDER,
};
use berth_api::k8s_openapi::api::core::v1::{
    Affinity, NodeAffinity, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm,
    ObjectReference, Pod, PodTemplateSpec,
};
use berth_api::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use berth_api::migration::PodMigrationJob;
use berth_api::reservation::{
    Reservation, ReservationControllerReference, ReservationOwner, ReservationPodTemplate,
    ReservationSpec,
};

use crate::time::Time;

/// Koordinator's `LabelCreatedBy`.
pub const LABEL_CREATED_BY: &str = "app.kubernetes.io/created-by";
/// Koordinator's `DefaultCreator`: the Reservation is the migration controller's.
pub const CREATOR: &str = "koord-descheduler";

/// The name of the Reservation a job creates: its UID (its name when it has none).
pub fn reservation_name_for(job: &PodMigrationJob) -> String {
    job.metadata
        .uid
        .clone()
        .filter(|u| !u.is_empty())
        .or_else(|| job.metadata.name.clone())
        .unwrap_or_default()
}

/// Whether `r` is the Reservation `job` creates (its name, and Koordinator's creator label).
pub fn created_for(r: &Reservation, job: &PodMigrationJob) -> bool {
    r.metadata.name.as_deref() == Some(reservation_name_for(job).as_str())
        && r.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(LABEL_CREATED_BY))
            .is_some_and(|v| v == CREATOR)
}

/// The `{metadata, spec}` of a job's `reservationOptions.template`.
#[derive(serde::Deserialize, Default)]
struct TemplateSpec {
    #[serde(default)]
    metadata: ObjectMeta,
    #[serde(default)]
    spec: ReservationSpec,
}

/// Builds the Reservation; `Err` says why the job's template is not one.
pub fn build(job: &PodMigrationJob, pod: &Pod, now: Time) -> Result<Reservation, String> {
    let written = job
        .spec
        .reservation_options
        .as_ref()
        .and_then(|o| o.template.clone());
    let TemplateSpec { metadata, mut spec } = match written {
        Some(v) => serde_json::from_value(v).map_err(|e| e.to_string())?,
        None => TemplateSpec::default(),
    };
    let mut meta = metadata;
    if meta.name.as_deref().is_none_or(str::is_empty) {
        meta.name = Some(reservation_name_for(job));
    }
    let mut template = match spec.template.take() {
        Some(t) if t.unreadable.is_none() => t,
        _ => ReservationPodTemplate::from(pod_template(pod)),
    };
    if spec.owners.is_empty() {
        spec.owners = owners(pod);
    }
    spec.allocate_once = Some(true);
    if let Some(s) = template.pod.spec.as_mut() {
        s.node_name = None;
        if let Some(node) = pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.as_deref())
            .filter(|n| !n.is_empty())
        {
            skip_node(s.affinity.get_or_insert_with(Affinity::default), node);
        }
    }
    spec.template = Some(template);
    if spec.ttl.is_none() && spec.expires.is_none() {
        spec.ttl = job
            .spec
            .ttl
            .clone()
            .filter(|t| t.millis().is_ok_and(|m| m > 0));
    }
    let labels = meta.labels.get_or_insert_with(BTreeMap::new);
    labels.insert(LABEL_CREATED_BY.into(), CREATOR.into());
    labels.insert(LABEL_RESERVATION_ORDER.into(), now.to_string());
    let mut r = Reservation {
        metadata: meta,
        spec,
        status: None,
    };
    r.metadata.namespace = None;
    r.apply_defaults();
    Ok(r)
}

/// The pod as a template: its labels, annotations (less what the scheduler wrote on the
/// pod) and namespace, and its spec.
fn pod_template(pod: &Pod) -> PodTemplateSpec {
    let mut annotations = pod.metadata.annotations.clone().unwrap_or_default();
    annotations.remove(ANNOTATION_RESERVATION_ALLOCATED);
    annotations.remove(ANNOTATION_RESOURCE_STATUS);
    PodTemplateSpec {
        metadata: Some(ObjectMeta {
            namespace: pod.metadata.namespace.clone(),
            labels: pod.metadata.labels.clone(),
            annotations: (!annotations.is_empty()).then_some(annotations),
            ..ObjectMeta::default()
        }),
        spec: pod.spec.clone(),
    }
}

/// `GenerateReserveResourceOwners`: the pod itself when it is pending and unschedulable,
/// else its controller (in its namespace).
fn owners(pod: &Pod) -> Vec<ReservationOwner> {
    let status = pod.status.as_ref();
    let pending = status.and_then(|s| s.phase.as_deref()) == Some("Pending");
    let unschedulable = status.and_then(|s| s.conditions.as_ref()).is_some_and(|c| {
        c.iter()
            .any(|c| c.type_ == "PodScheduled" && c.status == "False")
    });
    if pending && unschedulable {
        return vec![ReservationOwner {
            object: Some(ObjectReference {
                uid: pod.metadata.uid.clone(),
                kind: Some("Pod".into()),
                name: pod.metadata.name.clone(),
                namespace: pod.metadata.namespace.clone(),
                ..ObjectReference::default()
            }),
            ..ReservationOwner::default()
        }];
    }
    super::keep_capacity::controller_ref(&pod.metadata)
        .map(|r| ReservationOwner {
            controller: Some(ReservationControllerReference {
                api_version: Some(r.api_version.clone()),
                kind: Some(r.kind.clone()),
                name: Some(r.name.clone()),
                uid: Some(r.uid.clone()),
                controller: r.controller,
                block_owner_deletion: r.block_owner_deletion,
                namespace: pod.metadata.namespace.clone(),
            }),
            ..ReservationOwner::default()
        })
        .into_iter()
        .collect()
}

/// `appendSkipNodeAffinity`: `metadata.name NotIn [node]` in every required term (one term
/// of its own when there is none).
fn skip_node(affinity: &mut Affinity, node: &str) {
    let requirement = NodeSelectorRequirement {
        key: "metadata.name".into(),
        operator: "NotIn".into(),
        values: Some(vec![node.to_string()]),
    };
    let required = affinity
        .node_affinity
        .get_or_insert_with(NodeAffinity::default)
        .required_during_scheduling_ignored_during_execution
        .get_or_insert_with(NodeSelector::default);
    for term in &mut required.node_selector_terms {
        term.match_fields
            .get_or_insert_with(Vec::new)
            .push(requirement.clone());
    }
    if required.node_selector_terms.is_empty() {
        required.node_selector_terms.push(NodeSelectorTerm {
            match_fields: Some(vec![requirement]),
            ..NodeSelectorTerm::default()
        });
    }
}
