//! Reservation-backed preemption (seed 002, story 1): the capacity preemption frees is held
//! for the preemptor by a Reservation it owns, so that no other pod, whatever its priority,
//! takes it between the eviction and the preemptor's next attempt. A nominated node only
//! keeps out pods of lower or equal priority, and only in this scheduler's memory.
//!
//! The reservation is an ordinary Koordinator `Reservation` the scheduler creates (the
//! driver writes it; it comes back through the watch and is scheduled like any other):
//! - named `preempt-<namespace>-<pod>`, so `kubectl get reservations` says whose it is;
//! - owned by the preemptor by UID (`owners[].object`), `allocateOnce`;
//! - the preemptor's requests and host ports, its tolerations and scheduler, pinned to the
//!   chosen node (`template.spec.nodeName`);
//! - `preAllocation` with the `Restricted` policy (Koordinator accepts pre-allocation with
//!   no other): it is placed while the victims still run and waits (`Waiting`) until they
//!   are gone, then holds the room (`Available`) until the preemptor takes it (`Succeeded`);
//! - a short `ttl` (the `reservationTTL` argument, 5 minutes by default).
//!
//! The scheduler expires it at once when the preemptor is deleted or placed elsewhere
//! first. It carries no `ownerReference` to the pod: a cluster-scoped object cannot be
//! owned by a namespaced one (the garbage collector only reports
//! `OwnerRefInvalidNamespace`), so the scheduler deletes it itself when the pod goes.

use berth_api::k8s_openapi::api::core::v1::ContainerPort;
use berth_api::reservation::Reservation;
use serde_json::json;

use crate::cache::node_cache::NodeCache;
use crate::model::node::NodeIdx;
use crate::model::pod::PodInfo;
use crate::object::ObjectKey;
use crate::resources::ResourceNames;

use super::{RIdx, ReservationInfo, ReservationStore, HOLD_NAME_PREFIX};
use crate::time::Time;

/// Annotation naming the preemptor (`namespace/name`) on a reservation preemption made.
pub const ANNOTATION_PREEMPTOR: &str = "scheduling.berth.dev/preemptor";

/// Annotation listing the victims (`namespace/name`, comma-separated) a hold waits for.
pub const ANNOTATION_VICTIMS: &str = "scheduling.berth.dev/victims";

/// Longest object name the API server accepts (a DNS subdomain).
const MAX_NAME: usize = 253;

/// The name of the reservation that holds what `pod`'s preemption freed:
/// `preempt-<namespace>-<name>`, shortened with a hash of the full name when that would be
/// longer than an object name may be.
pub fn name_for(pod: &ObjectKey) -> String {
    let full = format!("{HOLD_NAME_PREFIX}{}-{}", pod.namespace, pod.name);
    if full.len() <= MAX_NAME {
        return full;
    }
    let hash = fnv1a(full.as_bytes());
    let suffix = format!("-{hash:08x}");
    let mut cut = MAX_NAME - suffix.len();
    while !full.is_char_boundary(cut) {
        cut -= 1;
    }
    let head = full[..cut].trim_end_matches(['-', '.']);
    format!("{head}{suffix}")
}

/// 32-bit FNV-1a: a stable hash for shortened names (the same pod, the same name, in every
/// process and version).
fn fnv1a(bytes: &[u8]) -> u32 {
    bytes.iter().fold(0x811c_9dc5u32, |h, &b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    })
}

/// The reservation of `pod`'s preemption in the store, when there is one for this
/// incarnation of the pod (same name, owned by its UID).
pub fn of(store: &ReservationStore, pod: &ObjectKey, uid: &str) -> Option<RIdx> {
    if !store.may_hold() {
        return None;
    }
    let idx = store.idx(&name_for(pod))?;
    let r = store.get(idx)?;
    is_hold_for(r, uid).then_some(idx)
}

/// Whether `r` is the reservation preemption made for the pod with `uid`.
pub fn is_hold_for(r: &ReservationInfo, uid: &str) -> bool {
    r.obj
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(ANNOTATION_PREEMPTOR))
        && r.obj
            .spec
            .owners
            .iter()
            .any(|o| o.object.as_ref().and_then(|x| x.uid.as_deref()) == Some(uid))
}

/// The preemptor a hold is for (its key and UID), from its annotation and owner.
pub fn preemptor_of(r: &ReservationInfo) -> Option<(ObjectKey, String)> {
    let who = r
        .obj
        .metadata
        .annotations
        .as_ref()?
        .get(ANNOTATION_PREEMPTOR)?;
    let (ns, name) = who.split_once('/')?;
    let uid = r
        .obj
        .spec
        .owners
        .iter()
        .find_map(|o| o.object.as_ref()?.uid.clone())?;
    Some((ObjectKey::pod(ns, name), uid))
}

/// Whether a victim `r` (a hold) waits for is still on node `idx`: while one is, the
/// preemptor waits too; once none is and the hold still waits, something else took the
/// room and the preemptor may preempt again.
pub fn victims_present(nodes: &NodeCache, r: &ReservationInfo, idx: NodeIdx) -> bool {
    victims_on(nodes, r, idx) > 0
}

/// How many of the victims `r` (a hold) waits for are still on node `idx`.
pub fn victims_on(nodes: &NodeCache, r: &ReservationInfo, idx: NodeIdx) -> usize {
    let Some(list) = r
        .obj
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANNOTATION_VICTIMS))
    else {
        return 0;
    };
    list.split(',')
        .filter_map(|v| v.split_once('/'))
        .filter(|(ns, name)| {
            nodes
                .pod(&ObjectKey::pod(ns, name))
                .is_some_and(|e| e.node == Some(idx))
        })
        .count()
}

/// The Reservation that holds `node` for `pod` for `ttl` milliseconds, waiting for
/// `victims` to leave. `None` when the pod cannot be described as one (it never is for a
/// pod the core could read).
pub fn reservation(
    names: &ResourceNames,
    pod: &PodInfo,
    node: &str,
    ttl: Time,
    victims: &[ObjectKey],
) -> Option<Reservation> {
    let victims: Vec<String> = victims
        .iter()
        .map(|v| format!("{}/{}", v.namespace, v.name))
        .collect();
    let mut requests = serde_json::Map::new();
    for (id, v) in pod.requests.non_zero() {
        let n = names.name(id);
        requests.insert(n.to_string(), json!(berth_api::format_resource(n, v)));
    }
    let ports: Vec<ContainerPort> = pod
        .host_ports
        .iter()
        .map(|p| ContainerPort {
            container_port: p.port,
            host_port: Some(p.port),
            host_ip: (&*p.ip != "0.0.0.0").then(|| p.ip.to_string()),
            protocol: Some(p.protocol.to_string()),
            ..Default::default()
        })
        .collect();
    let spec = pod.spec();
    let mut template = json!({
        "metadata": {"namespace": &*pod.key.namespace},
        "spec": {
            "nodeName": node,
            "schedulerName": &*pod.scheduler_name,
            "containers": [{"name": "preemptor", "resources": {"requests": requests}}],
        }
    });
    if !ports.is_empty() {
        template["spec"]["containers"][0]["ports"] = serde_json::to_value(&ports).ok()?;
    }
    if let Some(t) = spec.tolerations.as_ref().filter(|t| !t.is_empty()) {
        template["spec"]["tolerations"] = serde_json::to_value(t).ok()?;
    }
    let v = json!({
        "apiVersion": "scheduling.koordinator.sh/v1alpha1",
        "kind": "Reservation",
        "metadata": {
            "name": name_for(&pod.key),
            "annotations": {
                ANNOTATION_PREEMPTOR: format!("{}/{}", pod.key.namespace, pod.key.name),
                ANNOTATION_VICTIMS: victims.join(","),
            },
        },
        "spec": {
            "template": template,
            "owners": [{"object": {
                "apiVersion": "v1", "kind": "Pod",
                "namespace": &*pod.key.namespace, "name": &*pod.key.name, "uid": &*pod.uid,
            }}],
            "ttl": berth_api::GoDuration::from_millis(ttl).as_str(),
            "allocateOnce": true,
            "preAllocation": true,
            "allocatePolicy": "Restricted",
        }
    });
    serde_json::from_value(v).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::pod;

    #[test]
    fn the_name_says_whose_it_is_and_fits_the_api() {
        assert_eq!(
            name_for(&ObjectKey::pod("team-a", "web-0")),
            "preempt-team-a-web-0"
        );
        let long = "a".repeat(253);
        let n = name_for(&ObjectKey::pod("ns", &long));
        assert_eq!(n.len(), 253);
        assert!(n.starts_with("preempt-ns-aaa"));
        assert_ne!(n, name_for(&ObjectKey::pod("ns2", &long)), "hashed apart");
    }

    #[test]
    fn the_reservation_carries_the_preemptors_requests_ports_and_owner() {
        let mut cx = NodeCache::default();
        let p = pod("web")
            .req("cpu", "1500m")
            .req("memory", "1Gi")
            .host_port(8080, "TCP", "")
            .build_info_with(&mut cx.names);
        let victims = [ObjectKey::pod("default", "a"), ObjectKey::pod("b", "c")];
        let r = reservation(&cx.names, &p, "n1", 5 * 60 * 1000, &victims).expect("a reservation");
        let a = r.metadata.annotations.clone().unwrap_or_default();
        assert_eq!(
            a.get(ANNOTATION_VICTIMS).map(String::as_str),
            Some("default/a,b/c")
        );
        assert_eq!(
            a.get(ANNOTATION_PREEMPTOR).map(String::as_str),
            Some("default/web")
        );
        assert_eq!(r.metadata.name.as_deref(), Some("preempt-default-web"));
        let v = serde_json::to_value(&r).unwrap();
        let spec = &v["spec"];
        assert_eq!(spec["ttl"], "5m0s");
        assert_eq!(spec["allocateOnce"], true);
        assert_eq!(spec["preAllocation"], true);
        assert_eq!(spec["allocatePolicy"], "Restricted");
        assert_eq!(spec["owners"][0]["object"]["uid"], "uid-web");
        let t = &spec["template"]["spec"];
        assert_eq!(t["nodeName"], "n1");
        assert_eq!(t["containers"][0]["resources"]["requests"]["cpu"], "1500m");
        assert_eq!(t["containers"][0]["resources"]["requests"]["memory"], "1Gi");
        assert_eq!(t["containers"][0]["ports"][0]["hostPort"], 8080);
    }
}
