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
pub mod index;
pub mod reserved;

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};

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
    slices: BTreeMap<Arc<str>, Arc<ResourceSlice>>,
    /// The devices each node reaches, built on first use after the slices change.
    index: OnceLock<index::DeviceIndex>,
    /// DeviceClasses by name.
    pub classes: BTreeMap<Arc<str>, Arc<DeviceClass>>,
    /// ResourceClaims by namespace/name.
    pub claims: BTreeMap<ObjectKey, Arc<ResourceClaim>>,
    /// Allocations made by Reserve, by claim, until the claim shows an allocation.
    assumed: BTreeMap<ObjectKey, Assumed>,
    /// Every device taken (admin access takes none), with the claim holding it.
    taken: BTreeMap<DeviceId, ObjectKey>,
    /// Two allocations listed one device when `taken` was last built: changes then rebuild
    /// it whole (which allocation names the holder is decided by order), else they adjust
    /// it device by device.
    overlap: bool,
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
    /// Every ResourceSlice, by name.
    pub fn slices(&self) -> &BTreeMap<Arc<str>, Arc<ResourceSlice>> {
        &self.slices
    }

    /// A ResourceSlice was created or replaced.
    pub fn slice_applied(&mut self, slice: Arc<ResourceSlice>) {
        let name: Arc<str> = slice.metadata.name.as_deref().unwrap_or("").into();
        self.slices.insert(name, slice);
        self.index = OnceLock::new();
    }

    /// A ResourceSlice was deleted.
    pub fn slice_deleted(&mut self, name: &str) {
        if self.slices.remove(name).is_some() {
            self.index = OnceLock::new();
        }
    }

    /// The devices each node reaches ([`index`]).
    pub fn index(&self) -> &index::DeviceIndex {
        self.index
            .get_or_init(|| index::DeviceIndex::build(&self.slices))
    }

    /// A claim was created or updated: an allocation it now shows replaces an assumed one.
    pub fn claim_changed(&mut self, key: ObjectKey, claim: Arc<ResourceClaim>) {
        let before = self.allocations_before(&key);
        if claim.allocation().is_some() {
            self.assumed.remove(&key);
        }
        self.claims.insert(key.clone(), claim);
        self.retake(&key, before);
    }

    /// A claim was deleted: its devices are free again.
    pub fn claim_deleted(&mut self, key: &ObjectKey) {
        let before = self.allocations_before(key);
        self.claims.remove(key);
        self.assumed.remove(key);
        self.retake(key, before);
    }

    /// Reserve: `allocation` is assumed for `claim` on behalf of `pod_uid`.
    pub fn assume(&mut self, claim: ObjectKey, pod_uid: Arc<str>, allocation: AllocationResult) {
        let before = self.allocations_before(&claim);
        self.assumed.insert(
            claim.clone(),
            Assumed {
                pod_uid,
                allocation,
            },
        );
        self.retake(&claim, before);
    }

    /// Unreserve: drops what `pod_uid` assumed for `claim` (idempotent).
    pub fn forget(&mut self, claim: &ObjectKey, pod_uid: &str) {
        if self
            .assumed
            .get(claim)
            .is_some_and(|a| &*a.pod_uid == pod_uid)
        {
            let before = self.allocations_before(claim);
            self.assumed.remove(claim);
            self.retake(claim, before);
        }
    }

    /// The allocations `claim` takes devices by: the one its status shows, and the one
    /// assumed for it.
    fn allocations_of<'a>(&'a self, claim: &ObjectKey) -> [Option<&'a AllocationResult>; 2] {
        [
            self.claims.get(claim).and_then(|c| c.allocation()),
            self.assumed.get(claim).map(|a| &a.allocation),
        ]
    }

    /// What `claim` takes devices by, before a change.
    fn allocations_before(&self, claim: &ObjectKey) -> [Option<AllocationResult>; 2] {
        self.allocations_of(claim).map(|a| a.cloned())
    }

    /// `claim` changed from taking `before`: its devices in `taken` follow, device by device
    /// (per pod, not per claim of the cluster), exactly as [`Self::rebuild`] would set them
    /// (which it does when allocations overlap or one claim has two).
    fn retake(&mut self, claim: &ObjectKey, before: [Option<AllocationResult>; 2]) {
        let both_after = matches!(self.allocations_of(claim), [Some(_), Some(_)]);
        if self.overlap || both_after || before.iter().all(Option::is_some) {
            self.rebuild();
            return;
        }
        for id in before.iter().flatten().flat_map(devices_of) {
            if self.taken.get(&id) == Some(claim) {
                self.taken.remove(&id);
            }
        }
        let shown = self.claims.get(claim).and_then(|c| c.allocation());
        let assumed = self.assumed.get(claim).map(|a| &a.allocation);
        let mut overlap = false;
        for id in shown.into_iter().chain(assumed).flat_map(devices_of) {
            match self.taken.get(&id) {
                Some(k) if k != claim => overlap = true,
                Some(_) => {}
                None => {
                    self.taken.insert(id, claim.clone());
                }
            }
        }
        if overlap {
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
        self.overlap = false;
        let shown = self
            .claims
            .iter()
            .filter_map(|(k, c)| c.allocation().map(|a| (k, a)));
        let assumed = self.assumed.iter().map(|(k, a)| (k, &a.allocation));
        for (key, allocation) in shown.chain(assumed) {
            for id in devices_of(allocation) {
                match self.taken.get(&id) {
                    Some(k) if k != key => self.overlap = true,
                    Some(_) => {}
                    None => {
                        self.taken.insert(id, key.clone());
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod reserved_tests;
#[cfg(test)]
mod tests;
