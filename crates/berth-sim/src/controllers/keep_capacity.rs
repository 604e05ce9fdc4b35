//! Capacity kept after a scale-down, as the simulated workload controllers play it: the
//! Reservations are built by berth-core's [`berth_core::migration::keep_capacity`] (shared
//! with `berth migrate`, which does the same in a cluster), and this module says who opted
//! a ReplicaSet in. A pod deleted because `replicas` shrank leaves a Reservation holding its
//! room; pods deleted for any other reason (an eviction, a step's delete) keep nothing: they
//! are replaced, not scaled away.

use berth_api::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use berth_api::GoDuration;
use berth_core::migration::keep_capacity;

pub use berth_core::migration::keep_capacity::{
    reservation, ttl, ANNOTATION_KEPT_FOR, KEEP_AFTER_SCALE_DOWN, LABEL_KEPT_FOR,
};

/// Who opted `rs` in: the Deployment that controls it, else the ReplicaSet itself (the
/// Deployment first, as `berth migrate` reads it: kube-controller-manager's Deployment
/// controller copies the Deployment's annotations onto its ReplicaSets). Nobody for an
/// old ReplicaSet of its Deployment: its pods go in a rollout, replaced by the new one's.
pub fn opt_in(
    store: &crate::store::Store,
    rs: &berth_api::k8s_openapi::api::apps::v1::ReplicaSet,
) -> Option<(&'static str, ObjectMeta, GoDuration)> {
    match controlling_deployment(store, rs) {
        Some(d) if !keep_capacity::is_new_replica_set(rs, d) => None,
        Some(d) => ttl(&d.metadata)
            .map(|t| ("Deployment", d.metadata.clone(), t))
            .or_else(|| ttl(&rs.metadata).map(|t| ("ReplicaSet", rs.metadata.clone(), t))),
        None => ttl(&rs.metadata).map(|t| ("ReplicaSet", rs.metadata.clone(), t)),
    }
}

fn controlling_deployment<'a>(
    store: &'a crate::store::Store,
    rs: &berth_api::k8s_openapi::api::apps::v1::ReplicaSet,
) -> Option<&'a berth_api::k8s_openapi::api::apps::v1::Deployment> {
    let (namespace, name, uid) = keep_capacity::controlling_deployment(&rs.metadata)?;
    let key = berth_core::ObjectKey::new(berth_core::Kind::Deployment, namespace, name);
    match store.get(&key) {
        Some(berth_core::Object::Deployment(d)) if d.metadata.uid.as_deref() == Some(uid) => {
            Some(d)
        }
        _ => None,
    }
}
