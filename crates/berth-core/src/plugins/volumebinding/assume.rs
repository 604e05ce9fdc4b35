//! VolumeBinding's view through its assume cache ([`Assumed`], kept in the node cache):
//! a volume or claim as the scheduler has decided on it, else the API object.

use std::sync::Arc;

use berth_api::k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};

pub use crate::cache::assumed_volumes::Assumed;
use crate::cache::node_cache::NodeCache;
use crate::object::ObjectKey;

impl NodeCache {
    /// A volume as VolumeBinding sees it: the assumed version, else the API object.
    pub fn volume(&self, name: &str) -> Option<&Arc<PersistentVolume>> {
        self.assumed_volumes
            .pvs
            .get(name)
            .or_else(|| self.pvs.get(name))
    }

    /// A claim as VolumeBinding sees it: the assumed version, else the API object.
    pub fn claim(&self, key: &ObjectKey) -> Option<&Arc<PersistentVolumeClaim>> {
        self.assumed_volumes
            .pvcs
            .get(key)
            .or_else(|| self.pvcs.get(key))
    }

    /// Every volume of class `class` as VolumeBinding sees them (`ListPVs`), by name.
    pub fn volumes_of_class(&self, class: &str) -> Vec<Arc<PersistentVolume>> {
        let mut out: Vec<Arc<PersistentVolume>> = self
            .pvs
            .keys()
            .filter_map(|n| self.volume(n))
            .filter(|pv| super::claims::pv_class(pv) == class)
            .cloned()
            .collect();
        out.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        out
    }
}
