//! Reservations of devices: a Reservation whose template carries `resourceClaims` has devices
//! allocated for it as a pod would (its reserve pod goes through DynamicResources), and holds
//! them while it is active (Available or Waiting).
//!
//! No ResourceClaim object exists for a reservation (kube-controller-manager's claim
//! controller makes claims for pods only): the claim's spec comes from the template's
//! ResourceClaimTemplate (or the named claim's spec, which is read, never allocated), and the
//! allocation lives on the Reservation, in [`ANNOTATION_DEVICE_ALLOCATED`] (written in
//! PreBind, as Koordinator writes `scheduling.koordinator.sh/device-allocated` for its
//! DeviceShare reservations). A restarted scheduler rebuilds the holds from that annotation
//! on the active reservations, as it rebuilds the pods' from the claims' status.
//!
//! Who may use a held device ([`Access`]): the owners that take the reservation on that node
//! (the one the Reservation plugin nominates), and them first; to everyone else it is taken.
//! A `Restricted` reservation keeps its owners to its own devices for the drivers it holds.
//! A hold whose reservation is no longer active (Succeeded, Failed, expired, deleted) holds
//! nothing.

use std::collections::BTreeMap;
use std::sync::Arc;

use berth_api::dra::AllocationResult;
use serde::{Deserialize, Serialize};

use super::{devices_of, DeviceId, DraState};

/// The annotation on a Reservation listing the devices it holds, per template claim.
pub const ANNOTATION_DEVICE_ALLOCATED: &str = "reservation.berth.dev/device-allocated";

/// The prefix of the `status.allocatable` entries that count a reservation's devices per
/// DeviceClass (Kubernetes' name for a class's implicit extended resource).
pub const DEVICE_CLASS_RESOURCE_PREFIX: &str = "deviceclass.resource.kubernetes.io/";

/// One template claim's devices.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct HeldClaim {
    /// The name of the entry in the template's `spec.resourceClaims`.
    pub name: String,
    /// The devices, as a claim's `status.allocation` would list them.
    pub allocation: AllocationResult,
    /// The DeviceClass of each request (`req` or `req/sub`) of the allocation.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub classes: BTreeMap<String, String>,
}

/// The annotation's value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct DeviceAllocated {
    /// The template claims' devices, in `spec.resourceClaims` order.
    pub claims: Vec<HeldClaim>,
}

impl DeviceAllocated {
    /// Reads the annotation: `Ok(None)` when absent, `Err` naming it when malformed (a key
    /// named twice included: serde refuses a duplicate field).
    pub fn from_annotations(
        annotations: Option<&BTreeMap<String, String>>,
    ) -> Result<Option<Self>, String> {
        let Some(raw) = annotations.and_then(|a| a.get(ANNOTATION_DEVICE_ALLOCATED)) else {
            return Ok(None);
        };
        serde_json::from_str(raw)
            .map(Some)
            .map_err(|e| format!("annotation {ANNOTATION_DEVICE_ALLOCATED}: {e}"))
    }

    /// The annotation's value as written.
    pub fn encode(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}

/// The devices one reservation holds.
#[derive(Debug, Clone, PartialEq)]
pub struct Hold {
    /// The reservation's UID (a hold of an older incarnation holds nothing).
    pub uid: Arc<str>,
    /// The template claims' devices.
    pub claims: Vec<HeldClaim>,
    /// The Reservation shows it (else Reserve assumed it and PreBind's write is on its way).
    pub shown: bool,
}

/// What a reservation of devices means to the pod being allocated on one node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Held {
    /// Not held by any active reservation.
    Free,
    /// Held by the reservation the pod takes on this node.
    Mine,
    /// Held by another reservation: taken.
    Foreign,
}

/// The pod's view of held devices on one node.
#[derive(Debug, Clone, Copy, Default)]
pub struct Access<'a> {
    /// The reservation the pod takes on the node, if it is an owner of one there.
    pub mine: Option<&'a str>,
    /// That reservation is `Restricted`: for the drivers it holds devices of, the pod may
    /// use its devices only.
    pub restricted: bool,
}

impl DraState {
    /// Reserve of a reserve pod: the reservation `name` holds `claims` (assumed until the
    /// annotation shows it).
    pub fn hold(&mut self, name: Arc<str>, uid: Arc<str>, claims: Vec<HeldClaim>) {
        self.holds.insert(
            name,
            Hold {
                uid,
                claims,
                shown: false,
            },
        );
        self.rebuild_held();
    }

    /// Unreserve of a reserve pod, or the reservation is gone: it holds nothing.
    pub fn release(&mut self, name: &str) {
        if self.holds.remove(name).is_some() {
            self.rebuild_held();
        }
    }

    /// A Reservation was seen: the devices its annotation lists are held (replacing an
    /// assumed hold). One placed without the annotation keeps what Reserve assumed for the
    /// same UID; a new incarnation drops an old one's. A malformed annotation holds nothing
    /// and is returned as the message.
    pub fn reservation_seen(
        &mut self,
        name: &str,
        uid: &str,
        annotations: Option<&BTreeMap<String, String>>,
    ) -> Result<(), String> {
        let parsed = DeviceAllocated::from_annotations(annotations);
        let stale = self.holds.get(name).is_some_and(|h| &*h.uid != uid);
        match parsed {
            Ok(Some(d)) => {
                self.holds.insert(
                    name.into(),
                    Hold {
                        uid: uid.into(),
                        claims: d.claims,
                        shown: true,
                    },
                );
            }
            Ok(None) if stale => {
                self.holds.remove(name);
            }
            Ok(None) => return Ok(()),
            Err(e) => {
                self.holds.remove(name);
                self.rebuild_held();
                return Err(e);
            }
        }
        self.rebuild_held();
        Ok(())
    }

    /// Every reservation hold, by reservation name.
    pub fn holds(&self) -> &BTreeMap<Arc<str>, Hold> {
        &self.holds
    }

    /// The reservations holding `device`, active or not (one that ended may still list a
    /// device a newer one holds).
    pub fn held_by(&self, device: &DeviceId) -> &[Arc<str>] {
        self.held.get(device).map_or(&[], |v| v.as_slice())
    }

    /// Whether any reservation holds devices (most clusters: none, and the allocator skips
    /// the question).
    pub fn holds_any(&self) -> bool {
        !self.held.is_empty()
    }

    /// The drivers of the devices `reservation` holds.
    pub fn held_drivers(&self, reservation: &str) -> Vec<Arc<str>> {
        let mut out: Vec<Arc<str>> = Vec::new();
        let claims = self.holds.get(reservation).map_or(&[][..], |h| &h.claims);
        for id in claims.iter().flat_map(|c| devices_of(&c.allocation)) {
            if !out.contains(&id.driver) {
                out.push(id.driver);
            }
        }
        out
    }

    fn rebuild_held(&mut self) {
        self.held.clear();
        for (name, hold) in &self.holds {
            for c in &hold.claims {
                for id in devices_of(&c.allocation) {
                    self.held.entry(id).or_default().push(name.clone());
                }
            }
        }
    }
}

/// How each candidate device stands for the pod: `active(name, uid)` says whether a holding
/// reservation is active. Empty when no reservation holds devices.
pub fn classify(
    state: &DraState,
    ids: impl Iterator<Item = DeviceId>,
    access: &Access<'_>,
    active: &dyn Fn(&str, &str) -> bool,
) -> Vec<Held> {
    if !state.holds_any() {
        return Vec::new();
    }
    let restricted_drivers = match (access.mine, access.restricted) {
        (Some(r), true) => state.held_drivers(r),
        _ => Vec::new(),
    };
    ids.map(|id| {
        let holder = state
            .held_by(&id)
            .iter()
            .find(|r| state.holds.get(*r).is_some_and(|h| active(r, &h.uid)));
        match holder {
            Some(r) if Some(&**r) == access.mine => Held::Mine,
            Some(_) => Held::Foreign,
            None if restricted_drivers.contains(&id.driver) => Held::Foreign,
            None => Held::Free,
        }
    })
    .collect()
}

/// Adds to a Reservation's `status.allocated` the devices it holds that its owners' claims
/// took, counted per DeviceClass as `status.allocatable` counts them.
pub fn count_allocated(
    state: &DraState,
    reservation: &str,
    allocated: &mut BTreeMap<
        String,
        berth_api::k8s_openapi::apimachinery::pkg::api::resource::Quantity,
    >,
) {
    let Some(hold) = state.holds.get(reservation) else {
        return;
    };
    let mut counts: BTreeMap<String, i64> = BTreeMap::new();
    for c in &hold.claims {
        for r in c.allocation.devices.results.iter() {
            if r.admin_access == Some(true) {
                continue;
            }
            let id = DeviceId {
                driver: r.driver.as_str().into(),
                pool: r.pool.as_str().into(),
                device: r.device.as_str().into(),
            };
            if let (Some(class), Some(_)) = (c.classes.get(&r.request), state.holder(&id)) {
                *counts.entry(class.clone()).or_insert(0) += 1;
            }
        }
    }
    allocated.extend(allocatable_entries(&counts));
}

/// The `status.allocatable` entries of a hold: its devices counted per DeviceClass.
pub fn allocatable_entries(
    counts: &BTreeMap<String, i64>,
) -> BTreeMap<String, berth_api::k8s_openapi::apimachinery::pkg::api::resource::Quantity> {
    counts
        .iter()
        .map(|(class, n)| {
            (
                format!("{DEVICE_CLASS_RESOURCE_PREFIX}{class}"),
                berth_api::k8s_openapi::apimachinery::pkg::api::resource::Quantity(n.to_string()),
            )
        })
        .collect()
}
