//! The scheduler's side of Dynamic Resource Allocation: DRA objects in (the cluster's
//! [`crate::dra::DraState`] follows the API, pods waiting for devices are requeued), and
//! DynamicResources' PreBind, which writes each claim's allocation and `reservedFor` as
//! effects ahead of the pod's bind (kube-scheduler's `bindClaim`).

use std::sync::Arc;

use berth_api::dra::{ResourceClaimConsumerReference, ResourceClaimStatus};

use super::{InFlight, Scheduler};
use crate::dra::DraState;
use crate::effect::Effect;
use crate::object::{Kind, Object, ObjectKey};
use crate::queue::hints::ClusterEvent;
use crate::time::Time;

/// The keys of `kind` the DRA state holds.
pub(super) fn keys(dra: &DraState, kind: Kind) -> Vec<ObjectKey> {
    match kind {
        Kind::ResourceSlice => dra
            .slices()
            .keys()
            .map(|n| ObjectKey::cluster(kind, n))
            .collect(),
        Kind::DeviceClass => dra
            .classes
            .keys()
            .map(|n| ObjectKey::cluster(kind, n))
            .collect(),
        Kind::ResourceClaim => dra.claims.keys().cloned().collect(),
        Kind::ResourceClaimTemplate => dra.templates.keys().cloned().collect(),
        _ => Vec::new(),
    }
}

impl Scheduler {
    /// A DRA object was created or replaced.
    pub(super) fn apply_dra(&mut self, now: Time, obj: Object) {
        let dra = &mut self.cluster.cache.dra;
        match obj {
            Object::ResourceSlice(s) => dra.slice_applied(s),
            Object::DeviceClass(c) => {
                let name: Arc<str> = c.metadata.name.as_deref().unwrap_or("").into();
                dra.classes.insert(name, c);
            }
            Object::ResourceClaim(c) => {
                let key = Object::ResourceClaim(c.clone()).key();
                dra.claim_changed(key, c);
            }
            // Reservations' template claims are allocated from templates (pods' claims are
            // made from them by kube-controller-manager's claim controller).
            Object::ResourceClaimTemplate(t) => {
                let key = Object::ResourceClaimTemplate(t.clone()).key();
                dra.templates.insert(key, t);
            }
            _ => return,
        }
        self.requeue(now, ClusterEvent::dra());
    }

    /// A DRA object was deleted.
    pub(super) fn delete_dra(&mut self, now: Time, key: &ObjectKey) {
        let dra = &mut self.cluster.cache.dra;
        match key.kind {
            Kind::ResourceSlice => dra.slice_deleted(&key.name),
            Kind::DeviceClass => {
                dra.classes.remove(&*key.name);
            }
            Kind::ResourceClaim => dra.claim_deleted(key),
            Kind::ResourceClaimTemplate => {
                dra.templates.remove(key);
            }
            _ => return,
        }
        self.requeue(now, ClusterEvent::dra());
    }

    /// A Reservation was seen: the devices its `reservation.berth.dev/device-allocated`
    /// annotation lists are held ([`crate::dra::reserved`]); a malformed one holds nothing
    /// and is said in a Warning event.
    pub(super) fn reservation_devices_seen(&mut self, r: &berth_api::reservation::Reservation) {
        let name = r.metadata.name.as_deref().unwrap_or("");
        let uid = r.metadata.uid.as_deref().unwrap_or("");
        let seen =
            self.cluster
                .cache
                .dra
                .reservation_seen(name, uid, r.metadata.annotations.as_ref());
        if let Err(why) = seen {
            self.record(
                ObjectKey::cluster(Kind::Reservation, name),
                uid,
                "Warning",
                "InvalidAnnotation",
                format!("{why}; the devices it names are not held"),
            );
        }
    }

    /// DynamicResources' PreBind for `bind`: every claim of the pod gets the pod in its
    /// `reservedFor`, and the allocation Reserve assumed for it, in one status update.
    pub(super) fn dra_prebind(&mut self, bind: &InFlight) {
        let Some(state) = bind.state.dynamic_resources.as_deref() else {
            return;
        };
        let pod = &bind.pod;
        for key in &state.claims {
            let Some(claim) = self.cluster.cache.dra.claims.get(key) else {
                continue;
            };
            let assumed = self
                .cluster
                .cache
                .dra
                .assumed(key)
                .filter(|a| a.pod_uid == pod.uid)
                .map(|a| a.allocation.clone());
            if assumed.is_none() && claim.reserved_for(&pod.uid) {
                continue;
            }
            let mut updated = (**claim).clone();
            let status = updated
                .status
                .get_or_insert_with(ResourceClaimStatus::default);
            if let Some(a) = assumed {
                status.allocation = Some(a);
            }
            if !status.reserved_for.iter().any(|r| *r.uid == *pod.uid) {
                status.reserved_for.push(ResourceClaimConsumerReference {
                    api_group: None,
                    resource: "pods".into(),
                    name: pod.key.name.to_string(),
                    uid: pod.uid.to_string(),
                });
            }
            self.effects.push_back(Effect::UpdateClaimStatus {
                pod: pod.key.clone(),
                uid: pod.uid.to_string(),
                node: bind.node_name.to_string(),
                claim: Arc::new(updated),
            });
        }
    }
}
