//! The reserve pod: the stand-in through which a Reservation is scheduled like a pod
//! (Koordinator's `NewReservePod`).
//!
//! It is the template's pod with the reservation's identity: labels and annotations of the
//! template overlaid by the reservation's, Koordinator's marker annotations, the template's
//! `nodeName` moved to the `reservation-node` annotation (the Reservation plugin's Filter
//! enforces it, so no other plugin treats the pod as bound), and a priority that defaults to
//! the highest so that nothing preempts a reservation by default. Its requests are the
//! reservation's allocatable (template requests overlaid by `reservation-resize-allocatable`);
//! a pre-allocating reservation is placed without a resource check, so its stand-in requests
//! nothing.

use crate::collections::HashMap;
use std::collections::BTreeMap;
use std::sync::Arc;

use berth_api::annotations::{
    koordinator_priority, AnnotationCodec, ReservationResizeAllocatable,
    ANNOTATION_IS_PRE_ALLOCATION, ANNOTATION_RESERVATION_NAME, ANNOTATION_RESERVATION_NODE,
    ANNOTATION_RESERVE_POD,
};
use berth_api::format_resource;
use berth_api::k8s_openapi::api::core::v1::{Pod, PodSpec};
use berth_api::k8s_openapi::api::scheduling::v1::PriorityClass;
use berth_api::k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use berth_api::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use berth_api::reservation::{Reservation, SchedulerProblem};

use crate::model::pod::{PodInfo, PodKind};
use crate::object::{Kind, ObjectKey};
use crate::resources::{ResourceNames, Resources};

/// Namespace of a reserve pod whose template names none.
pub const DEFAULT_NAMESPACE: &str = "default";

/// A reservation's stand-ins and what it holds.
#[derive(Debug, Clone)]
pub struct Built {
    /// What the queue schedules.
    pub item: PodInfo,
    /// What sits in `NodeInfo::pods` once placed: the same pod with no requests and no
    /// host ports (the reservation's hold is in `NodeInfo::reserved`).
    pub placed: PodInfo,
    /// `status.allocatable` as amounts.
    pub allocatable: Resources,
    /// `status.allocatable` as the API writes it.
    pub allocatable_list: BTreeMap<String, Quantity>,
    /// `template.spec.nodeName`, which pins the reservation.
    pub pinned_node: Option<String>,
}

/// The queue key of a reservation's reserve pod (kind Reservation, the template's
/// namespace, so namespace-scoped affinity terms of other pods see it where its pods live).
pub fn key(namespace: &str, name: &str) -> ObjectKey {
    ObjectKey::new(Kind::Reservation, namespace, name)
}

/// Builds the reserve pod of `r`. Errors are messages for the reservation's condition.
pub fn build(
    r: &Reservation,
    names: &mut ResourceNames,
    priority_classes: &HashMap<String, Arc<PriorityClass>>,
) -> Result<Built, String> {
    let name = r.metadata.name.clone().unwrap_or_default();
    let template = r
        .spec
        .template
        .as_ref()
        .ok_or_else(|| SchedulerProblem::MissingTemplate.to_string())?;
    if let Some(bad) = &template.unreadable {
        // Schemaless in the CRD, so the API server stored it: the reservation is still
        // one, Pending with this message until it expires.
        return Err(format!(
            "{bad} (rule: {})",
            berth_api::validate::Rule::Malformed
        ));
    }
    let mut meta = template.metadata.clone().unwrap_or_default();
    let namespace = meta
        .namespace
        .clone()
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| DEFAULT_NAMESPACE.to_string());
    merge_meta(r, &mut meta, &name, &namespace);
    let mut spec = template.spec.clone().unwrap_or_default();
    if spec.containers.is_empty() {
        return Err(SchedulerProblem::NoContainers.to_string());
    }
    let pinned_node = spec.node_name.take().filter(|n| !n.is_empty());
    if let Some(n) = &pinned_node {
        meta.annotations
            .get_or_insert_with(Default::default)
            .insert(ANNOTATION_RESERVATION_NODE.into(), n.clone());
    }
    set_priority(r, &mut spec, priority_classes)?;
    let pod = Pod {
        metadata: meta,
        spec: Some(spec),
        status: None,
    };
    let mut item = PodInfo::new(Arc::new(pod), names).map_err(|e| format!("spec.template.{e}"))?;
    let allocatable = resized_allocatable(r, item.requests, names)?;
    let mut allocatable_list = BTreeMap::new();
    for (id, v) in allocatable.non_zero() {
        let n = names.name(id);
        allocatable_list.insert(n.to_string(), Quantity(format_resource(n, v)));
    }
    item.requests = if r.spec.pre_allocation {
        Resources::ZERO
    } else {
        allocatable
    };
    item.kind = PodKind::ReservePod {
        reservation: name.as_str().into(),
    };
    item.key = key(&namespace, &name);
    let mut placed = item.clone();
    placed.requests = Resources::ZERO;
    placed.non_zero = Resources::ZERO;
    placed.host_ports.clear();
    Ok(Built {
        item,
        placed,
        allocatable,
        allocatable_list,
        pinned_node,
    })
}

/// The reserve pod's metadata: the template's, named and placed as the reservation, with
/// the reservation's labels and annotations over the template's, and the reserve-pod
/// markers.
fn merge_meta(r: &Reservation, meta: &mut ObjectMeta, name: &str, namespace: &str) {
    meta.name = Some(name.to_string());
    meta.namespace = Some(namespace.to_string());
    meta.uid = r.metadata.uid.clone();
    meta.creation_timestamp = r.metadata.creation_timestamp.clone();
    meta.generate_name = None;
    let mut labels = meta.labels.take().unwrap_or_default();
    for (k, v) in r.metadata.labels.iter().flatten() {
        labels.insert(k.clone(), v.clone());
    }
    meta.labels = Some(labels);
    let mut annotations = meta.annotations.take().unwrap_or_default();
    for (k, v) in r.metadata.annotations.iter().flatten() {
        annotations.insert(k.clone(), v.clone());
    }
    annotations.insert(ANNOTATION_RESERVE_POD.into(), "true".into());
    annotations.insert(ANNOTATION_RESERVATION_NAME.into(), name.to_string());
    if r.spec.pre_allocation {
        annotations.insert(ANNOTATION_IS_PRE_ALLOCATION.into(), "true".into());
    }
    meta.annotations = Some(annotations);
}

/// Priority: the template's, else its priority class, else the reservation's
/// `koordinator.sh/priority` label, else the highest (Koordinator's MaxInt32). A reserve
/// pod never preempts and defaults to the default scheduler.
fn set_priority(
    r: &Reservation,
    spec: &mut PodSpec,
    priority_classes: &HashMap<String, Arc<PriorityClass>>,
) -> Result<(), String> {
    let class_priority = spec
        .priority_class_name
        .as_deref()
        .and_then(|c| priority_classes.get(c))
        .map(|pc| pc.value);
    let label_priority =
        koordinator_priority(r.metadata.labels.as_ref()).map_err(|e| e.to_string())?;
    let priority = spec
        .priority
        .or(class_priority)
        .or(label_priority)
        .unwrap_or(i32::MAX);
    spec.priority = Some(priority);
    // Reservations do not preempt (Koordinator's `enablePreemption` defaults to false); with
    // the highest priority a reserve pod would otherwise evict anything.
    spec.preemption_policy = Some("Never".into());
    if spec.scheduler_name.as_deref().is_none_or(str::is_empty) {
        spec.scheduler_name = Some(crate::model::DEFAULT_SCHEDULER_NAME.into());
    }
    Ok(())
}

/// `status.allocatable`: the template's `requests` overlaid by resize-allocatable.
fn resized_allocatable(
    r: &Reservation,
    requests: Resources,
    names: &mut ResourceNames,
) -> Result<Resources, String> {
    let mut allocatable = requests;
    let resize = ReservationResizeAllocatable::from_annotations(r.metadata.annotations.as_ref())
        .map_err(|e| e.to_string())?;
    if let Some(resize) = resize {
        let amounts = resize.amounts().map_err(|e| e.to_string())?;
        for (res, amount) in amounts {
            if res == "pods" {
                continue;
            }
            let id = names.intern(&res).map_err(|e| e.to_string())?;
            // The codec refuses negative amounts: nothing to clamp.
            allocatable[id] = amount;
        }
    }
    Ok(allocatable)
}

/// Reads `status.allocatable` of a placed reservation (as a restarted scheduler finds it).
pub fn parse_allocatable(
    list: &BTreeMap<String, Quantity>,
    names: &mut ResourceNames,
) -> Result<Resources, String> {
    let mut out = Resources::ZERO;
    for (n, q) in list {
        // Device counts ([`crate::dra::reserved`]) are held as devices, not amounts.
        if n == "pods" || n.starts_with(crate::dra::reserved::DEVICE_CLASS_RESOURCE_PREFIX) {
            continue;
        }
        let v = berth_api::validate::amount(&format!("status.allocatable[{n}]"), n, &q.0)
            .map_err(|e| e.to_string())?;
        let id = names.intern(n).map_err(|e| e.to_string())?;
        out[id] = v;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::ResourceId;
    use serde_json::json;

    fn reservation(v: serde_json::Value) -> Reservation {
        serde_json::from_value(v).unwrap()
    }

    fn base() -> serde_json::Value {
        json!({
            "apiVersion": "scheduling.koordinator.sh/v1alpha1", "kind": "Reservation",
            "metadata": {"name": "r1", "uid": "uid-r1", "labels": {"team": "a"}},
            "spec": {
                "template": {
                    "metadata": {"labels": {"app": "web", "team": "template"}},
                    "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "2", "memory": "4Gi"}}, "ports": [{"containerPort": 80, "hostPort": 8080}]}]}
                },
                "owners": [{"object": {"name": "p"}}]
            }
        })
    }

    #[test]
    fn the_reserve_pod_carries_the_reservations_identity() {
        let mut names = ResourceNames::default();
        let b = build(&reservation(base()), &mut names, &HashMap::default()).unwrap();
        let item = &b.item;
        assert_eq!(item.key, ObjectKey::new(Kind::Reservation, "default", "r1"));
        assert!(item.is_reserve_pod());
        assert_eq!(item.labels.get("team").map(String::as_str), Some("a"));
        assert_eq!(item.labels.get("app").map(String::as_str), Some("web"));
        assert_eq!(item.annotation(ANNOTATION_RESERVE_POD), Some("true"));
        assert_eq!(item.annotation(ANNOTATION_RESERVATION_NAME), Some("r1"));
        assert_eq!(item.priority, i32::MAX);
        assert_eq!(item.requests[ResourceId::CPU], 2000);
        assert_eq!(item.host_ports.len(), 1);
        assert!(b.placed.requests.is_zero() && b.placed.host_ports.is_empty());
        assert_eq!(
            b.allocatable_list.get("memory").map(|q| q.0.as_str()),
            Some("4Gi")
        );
    }

    #[test]
    fn node_name_pins_priority_label_and_resize_apply() {
        let mut v = base();
        v["spec"]["template"]["spec"]["nodeName"] = json!("n3");
        v["metadata"]["labels"]["koordinator.sh/priority"] = json!("100");
        v["metadata"]["annotations"] = json!({
            "scheduling.koordinator.sh/reservation-resize-allocatable": "{\"resources\":{\"cpu\":\"3\"}}"
        });
        let mut names = ResourceNames::default();
        let b = build(&reservation(v), &mut names, &HashMap::default()).unwrap();
        assert_eq!(b.pinned_node.as_deref(), Some("n3"));
        assert_eq!(b.item.node_name, None, "the pin is not a binding");
        assert_eq!(b.item.annotation(ANNOTATION_RESERVATION_NODE), Some("n3"));
        assert_eq!(b.item.priority, 100);
        assert_eq!(b.allocatable[ResourceId::CPU], 3000);
        assert_eq!(b.item.requests[ResourceId::CPU], 3000);
    }

    #[test]
    fn bad_templates_are_reported_not_panicked_on() {
        let mut names = ResourceNames::default();
        let mut v = base();
        v["spec"]["template"]["spec"]["containers"] = json!([]);
        let err = build(&reservation(v), &mut names, &HashMap::default()).unwrap_err();
        assert!(err.contains("no containers"), "{err}");
        let mut v = base();
        v["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"] =
            json!("lots");
        let err = build(&reservation(v), &mut names, &HashMap::default()).unwrap_err();
        assert!(
            err.starts_with("spec.template.spec.containers[0].resources.requests[cpu]"),
            "{err}"
        );
        let mut v = base();
        v["spec"]["template"] = serde_json::Value::Null;
        let err = build(&reservation(v), &mut names, &HashMap::default()).unwrap_err();
        assert_eq!(err, "the reservation misses the template spec");
    }

    #[test]
    fn pre_allocation_places_without_a_resource_check() {
        let mut v = base();
        v["spec"]["preAllocation"] = json!(true);
        let mut names = ResourceNames::default();
        let b = build(&reservation(v), &mut names, &HashMap::default()).unwrap();
        assert!(b.item.requests.is_zero());
        assert_eq!(b.allocatable[ResourceId::CPU], 2000);
        assert_eq!(
            b.item.annotation(ANNOTATION_IS_PRE_ALLOCATION),
            Some("true")
        );
    }
}
