//! Dynamic Resource Allocation's state, with its own owner: the ResourceSlices, DeviceClasses
//! and ResourceClaims the scheduler watches, the allocations it made that the API server
//! does not show yet (assumed, as kube-scheduler's in-flight allocations), and the set of
//! devices taken, which is rebuilt from those two whenever either changes (so a restart
//! rebuilds it from the claims' `status.allocation` alone).
//!
//! The allocator ([`allocator`]) reads this state and never writes it; the DynamicResources
//! plugin's Reserve/Unreserve and the scheduler's claim events are the only writers.

pub mod allocator;
pub mod cel;
pub mod reserved;

use std::collections::BTreeMap;
use std::sync::Arc;

use berth_api::dra::{
    AllocationResult, DeviceClass, ResourceClaim, ResourceClaimTemplate, ResourceSlice,
};

use crate::object::ObjectKey;

/// A device: driver, pool, device name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DeviceId {
    /// The driver.
    pub driver: Arc<str>,
    /// The pool.
    pub pool: Arc<str>,
    /// The device.
    pub device: Arc<str>,
}

impl std::fmt::Display for DeviceId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}/{}", self.driver, self.pool, self.device)
    }
}

/// An allocation made in Reserve and not yet seen in the claim's status.
#[derive(Debug, Clone, PartialEq)]
pub struct Assumed {
    /// The pod it was made for.
    pub pod_uid: Arc<str>,
    /// The allocation.
    pub allocation: AllocationResult,
}

/// The DRA objects and who holds which device.
#[derive(Debug, Clone, Default)]
pub struct DraState {
    /// ResourceSlices by name.
    pub slices: BTreeMap<Arc<str>, Arc<ResourceSlice>>,
    /// DeviceClasses by name.
    pub classes: BTreeMap<Arc<str>, Arc<DeviceClass>>,
    /// ResourceClaims by namespace/name.
    pub claims: BTreeMap<ObjectKey, Arc<ResourceClaim>>,
    /// Allocations made by Reserve, by claim, until the claim shows an allocation.
    assumed: BTreeMap<ObjectKey, Assumed>,
    /// Every device taken (admin access takes none), with the claim holding it.
    taken: BTreeMap<DeviceId, ObjectKey>,
    /// ResourceClaimTemplates by namespace/name: a reservation's template claims are
    /// allocated from them ([`reserved`]).
    pub templates: BTreeMap<ObjectKey, Arc<ResourceClaimTemplate>>,
    /// Devices reservations hold, by reservation name ([`reserved`]).
    holds: BTreeMap<Arc<str>, reserved::Hold>,
    /// Every device some reservation holds, with those reservations (an ended one may
    /// still list a device a newer one holds).
    held: BTreeMap<DeviceId, Vec<Arc<str>>>,
}

/// The devices an allocation takes (admin-access results take none).
pub fn devices_of(allocation: &AllocationResult) -> impl Iterator<Item = DeviceId> + '_ {
    allocation
        .devices
        .results
        .iter()
        .filter(|r| r.admin_access != Some(true))
        .map(|r| DeviceId {
            driver: r.driver.as_str().into(),
            pool: r.pool.as_str().into(),
            device: r.device.as_str().into(),
        })
}

impl DraState {
    /// A claim was created or updated: an allocation it now shows replaces an assumed one.
    pub fn claim_changed(&mut self, key: ObjectKey, claim: Arc<ResourceClaim>) {
        if claim.allocation().is_some() {
            self.assumed.remove(&key);
        }
        self.claims.insert(key, claim);
        self.rebuild();
    }

    /// A claim was deleted: its devices are free again.
    pub fn claim_deleted(&mut self, key: &ObjectKey) {
        self.claims.remove(key);
        self.assumed.remove(key);
        self.rebuild();
    }

    /// Reserve: `allocation` is assumed for `claim` on behalf of `pod_uid`.
    pub fn assume(&mut self, claim: ObjectKey, pod_uid: Arc<str>, allocation: AllocationResult) {
        self.assumed.insert(
            claim,
            Assumed {
                pod_uid,
                allocation,
            },
        );
        self.rebuild();
    }

    /// Unreserve: drops what `pod_uid` assumed for `claim` (idempotent).
    pub fn forget(&mut self, claim: &ObjectKey, pod_uid: &str) {
        if self
            .assumed
            .get(claim)
            .is_some_and(|a| &*a.pod_uid == pod_uid)
        {
            self.assumed.remove(claim);
            self.rebuild();
        }
    }

    /// The allocation assumed for `claim`, if any.
    pub fn assumed(&self, claim: &ObjectKey) -> Option<&Assumed> {
        self.assumed.get(claim)
    }

    /// Who holds `device`, if anyone.
    pub fn holder(&self, device: &DeviceId) -> Option<&ObjectKey> {
        self.taken.get(device)
    }

    /// Every device taken, with its holder.
    pub fn taken(&self) -> &BTreeMap<DeviceId, ObjectKey> {
        &self.taken
    }

    fn rebuild(&mut self) {
        self.taken.clear();
        let shown = self
            .claims
            .iter()
            .filter_map(|(k, c)| c.allocation().map(|a| (k, a)));
        let assumed = self.assumed.iter().map(|(k, a)| (k, &a.allocation));
        for (key, allocation) in shown.chain(assumed) {
            for id in devices_of(allocation) {
                self.taken.entry(id).or_insert_with(|| key.clone());
            }
        }
    }
}

#[cfg(test)]
mod reserved_tests;
#[cfg(test)]
mod tests;
