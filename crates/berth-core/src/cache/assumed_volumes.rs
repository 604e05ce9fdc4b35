//! VolumeBinding's assume cache (kube-scheduler's `PVAssumeCache` / `PVCAssumeCache`): the
//! versions of volumes and claims the scheduler has decided on but not yet seen come back
//! from the API server. A volume assumed bound to a claim is taken for every later cycle,
//! so two pods of one burst never get the same static volume; a claim assumed to carry
//! the selected node is seen so by other pods sharing it.
//!
//! An assumed version lasts until the API object changes (the scheduler's own write, or
//! anyone else's, coming back: upstream drops it once a newer resourceVersion arrives) or
//! until Unreserve restores the API object.

use std::sync::Arc;

use berth_api::k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};

use crate::collections::HashMap;
use crate::object::ObjectKey;

/// Assumed volumes and claims.
#[derive(Debug, Default, Clone)]
pub struct Assumed {
    pub(crate) pvs: HashMap<Arc<str>, Arc<PersistentVolume>>,
    pub(crate) pvcs: HashMap<ObjectKey, Arc<PersistentVolumeClaim>>,
}

impl Assumed {
    /// Takes `pv` as the volume's version until the API object changes.
    pub fn assume_pv(&mut self, pv: Arc<PersistentVolume>) {
        let name: Arc<str> = pv.metadata.name.as_deref().unwrap_or("").into();
        self.pvs.insert(name, pv);
    }

    /// Takes `pvc` as the claim's version until the API object changes.
    pub fn assume_pvc(&mut self, key: ObjectKey, pvc: Arc<PersistentVolumeClaim>) {
        self.pvcs.insert(key, pvc);
    }

    /// Back to the API object (`Restore`).
    pub fn restore_pv(&mut self, name: &str) {
        self.pvs.remove(name);
    }

    /// Back to the API object (`Restore`).
    pub fn restore_pvc(&mut self, key: &ObjectKey) {
        self.pvcs.remove(key);
    }

    /// The API's version of a volume replaced `old` (`None`: created, or deleted when
    /// `new` is `None`): an assumption older than it is dropped.
    pub fn pv_changed(
        &mut self,
        name: &str,
        old: Option<&PersistentVolume>,
        new: Option<&PersistentVolume>,
    ) {
        if changed(old.map(|o| (&o.metadata, o)), new.map(|n| (&n.metadata, n))) {
            self.pvs.remove(name);
        }
    }

    /// The API's version of a claim replaced `old`; see [`Assumed::pv_changed`].
    pub fn pvc_changed(
        &mut self,
        key: &ObjectKey,
        old: Option<&PersistentVolumeClaim>,
        new: Option<&PersistentVolumeClaim>,
    ) {
        if changed(old.map(|o| (&o.metadata, o)), new.map(|n| (&n.metadata, n))) {
            self.pvcs.remove(key);
        }
    }

    /// Whether nothing is assumed.
    pub fn is_empty(&self) -> bool {
        self.pvs.is_empty() && self.pvcs.is_empty()
    }
}

type Meta = berth_api::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// A newer API object: another resourceVersion when both carry one (a re-LIST of the same
/// version changes nothing), else different content.
fn changed<T: PartialEq>(old: Option<(&Meta, &T)>, new: Option<(&Meta, &T)>) -> bool {
    match (old, new) {
        (Some((om, o)), Some((nm, n))) => match (&om.resource_version, &nm.resource_version) {
            (Some(a), Some(b)) => a != b,
            _ => o != n,
        },
        _ => true,
    }
}
