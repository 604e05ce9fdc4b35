//! Resource vectors: a small fixed array indexed by interned resource names.
//!
//! Every node and pod carries several resource amounts and the Filter/Score hot path
//! compares them once per node per pod, so they live in a fixed-size array (no map look-up,
//! no allocation). CPU, memory and ephemeral storage have fixed slots; extended resources
//! (GPUs, hugepages, `kubernetes.io/batch-cpu`...) are interned on first sight into the
//! remaining slots by [`ResourceNames`].

use crate::collections::HashMap;
use std::ops::{Index, IndexMut};

/// How many distinct resource names one scheduler can track.
pub const MAX_RESOURCES: usize = 16;

/// A resource's slot in a [`Resources`] vector.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ResourceId(pub u8);

impl ResourceId {
    /// `cpu`, in milli-cores.
    pub const CPU: Self = Self(0);
    /// `memory`, in bytes.
    pub const MEMORY: Self = Self(1);
    /// `ephemeral-storage`, in bytes.
    pub const EPHEMERAL_STORAGE: Self = Self(2);

    /// The slot index.
    pub fn index(self) -> usize {
        usize::from(self.0)
    }

    /// The slots whose bit is set in `mask` (bit `i` is slot `i`), in increasing order:
    /// for the paths that visit a pod's or a reservation's few resources, not all
    /// [`MAX_RESOURCES`] slots.
    pub fn in_mask(mask: u32) -> impl Iterator<Item = ResourceId> {
        let mut rest = mask & ((1u64 << MAX_RESOURCES) - 1) as u32;
        std::iter::from_fn(move || {
            if rest == 0 {
                return None;
            }
            let i = rest.trailing_zeros();
            rest &= rest - 1;
            Some(ResourceId(i as u8))
        })
    }
}

/// Too many distinct resource names were seen.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("resource {name:?}: berth tracks at most {MAX_RESOURCES} distinct resource names")]
pub struct TooManyResources {
    /// The name that did not fit.
    pub name: String,
}

/// Interns resource names into slots.
#[derive(Debug, Clone)]
pub struct ResourceNames {
    names: Vec<String>,
    ids: HashMap<String, ResourceId>,
}

impl Default for ResourceNames {
    fn default() -> Self {
        let mut me = Self {
            names: Vec::new(),
            ids: HashMap::default(),
        };
        for n in ["cpu", "memory", "ephemeral-storage"] {
            let _ = me.intern(n);
        }
        me
    }
}

impl ResourceNames {
    /// The slot of `name`, allocating one on first sight.
    pub fn intern(&mut self, name: &str) -> Result<ResourceId, TooManyResources> {
        if let Some(id) = self.ids.get(name) {
            return Ok(*id);
        }
        if self.names.len() >= MAX_RESOURCES {
            return Err(TooManyResources {
                name: name.to_string(),
            });
        }
        let id = ResourceId(self.names.len() as u8);
        self.names.push(name.to_string());
        self.ids.insert(name.to_string(), id);
        Ok(id)
    }

    /// The slot of `name` if it was ever seen.
    pub fn get(&self, name: &str) -> Option<ResourceId> {
        // The fixed slots are answered without hashing: scorers ask per node.
        Self::fixed(name).or_else(|| self.ids.get(name).copied())
    }

    /// The slot of `name` when it is one of the pre-interned names, the same in every
    /// [`ResourceNames`]: what a plugin can resolve once when it is built.
    pub fn fixed(name: &str) -> Option<ResourceId> {
        match name {
            "cpu" => Some(ResourceId::CPU),
            "memory" => Some(ResourceId::MEMORY),
            "ephemeral-storage" => Some(ResourceId::EPHEMERAL_STORAGE),
            _ => None,
        }
    }

    /// The name in slot `id`.
    pub fn name(&self, id: ResourceId) -> &str {
        self.names
            .get(id.index())
            .map(String::as_str)
            .unwrap_or("<unknown>")
    }

    /// How many slots are in use: loops over resources stop here.
    pub fn len(&self) -> usize {
        self.names.len()
    }

    /// Always false: cpu, memory and ephemeral-storage are pre-interned.
    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    /// Every interned id in slot order.
    pub fn ids(&self) -> impl Iterator<Item = ResourceId> + '_ {
        (0..self.names.len()).map(|i| ResourceId(i as u8))
    }
}

/// A resource name a plugin is configured with, resolved once when the plugin is built.
///
/// Scorers look their resources up for every node they score; matching the name as a
/// string there was an eighth of a basic cycle. cpu, memory and ephemeral-storage have the
/// same slot in every [`ResourceNames`], so they resolve at build time; any other name is
/// interned only once some node or pod carries it, so it is still looked up (and is
/// absent, like an unseen name, until then).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceName {
    name: String,
    fixed: Option<ResourceId>,
}

impl ResourceName {
    /// Resolves `name` as far as it can without a cluster.
    pub fn new(name: String) -> Self {
        let fixed = ResourceNames::fixed(&name);
        Self { name, fixed }
    }

    /// The slot, as [`ResourceNames::get`] gives it.
    #[inline]
    pub fn id(&self, names: &ResourceNames) -> Option<ResourceId> {
        match self.fixed {
            Some(id) => Some(id),
            None => names.get(&self.name),
        }
    }

    /// The name as configured.
    pub fn as_str(&self) -> &str {
        &self.name
    }
}

/// Amounts per resource slot (milli-CPU, bytes, units).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Resources(pub [i64; MAX_RESOURCES]);

impl Default for Resources {
    fn default() -> Self {
        Self([0; MAX_RESOURCES])
    }
}

impl std::fmt::Debug for Resources {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut m = f.debug_map();
        for (i, v) in self.0.iter().enumerate() {
            if *v != 0 {
                m.entry(&i, v);
            }
        }
        m.finish()
    }
}

/// Slots come from [`ResourceNames`], which never hands out one past [`MAX_RESOURCES`]; the
/// index is taken modulo the length (a mask) so the per-node paths carry no bounds check.
impl Index<ResourceId> for Resources {
    type Output = i64;
    #[inline]
    fn index(&self, id: ResourceId) -> &i64 {
        debug_assert!(
            id.index() < MAX_RESOURCES,
            "resource slot {id:?} out of range"
        );
        &self.0[id.index() % MAX_RESOURCES]
    }
}

impl IndexMut<ResourceId> for Resources {
    #[inline]
    fn index_mut(&mut self, id: ResourceId) -> &mut i64 {
        debug_assert!(
            id.index() < MAX_RESOURCES,
            "resource slot {id:?} out of range"
        );
        &mut self.0[id.index() % MAX_RESOURCES]
    }
}

impl Resources {
    /// The all-zero vector.
    pub const ZERO: Self = Self([0; MAX_RESOURCES]);

    /// `self += other`, saturating.
    pub fn add(&mut self, other: &Self) {
        for (a, b) in self.0.iter_mut().zip(other.0.iter()) {
            *a = a.saturating_add(*b);
        }
    }

    /// `self -= other`, saturating.
    pub fn sub(&mut self, other: &Self) {
        for (a, b) in self.0.iter_mut().zip(other.0.iter()) {
            *a = a.saturating_sub(*b);
        }
    }

    /// Per-slot minimum.
    pub fn min(&self, other: &Self) -> Self {
        let mut out = *self;
        for (a, b) in out.0.iter_mut().zip(other.0.iter()) {
            *a = (*a).min(*b);
        }
        out
    }

    /// Per-slot maximum.
    pub fn max(&self, other: &Self) -> Self {
        let mut out = *self;
        for (a, b) in out.0.iter_mut().zip(other.0.iter()) {
            *a = (*a).max(*b);
        }
        out
    }

    /// `self = max(self, other)` over the slots of `mask` alone: the other slots of
    /// `other` must be 0 and those of `self` at least 0, where both ways agree.
    pub fn max_in(&mut self, other: &Self, mask: u32) {
        debug_assert!(
            (0..MAX_RESOURCES).all(|i| mask & (1 << i) != 0 || (other.0[i] == 0 && self.0[i] >= 0)),
            "max_in outside its mask: {self:?} {other:?} {mask:#b}"
        );
        for id in ResourceId::in_mask(mask) {
            self[id] = self[id].max(other[id]);
        }
    }

    /// Clamps every slot at zero from below.
    pub fn clamp_non_negative(&mut self) {
        for a in self.0.iter_mut() {
            *a = (*a).max(0);
        }
    }

    /// True when every slot is zero.
    pub fn is_zero(&self) -> bool {
        self.0.iter().all(|v| *v == 0)
    }

    /// True when every slot of `self` is `<=` the same slot of `other`.
    pub fn le(&self, other: &Self) -> bool {
        self.0.iter().zip(other.0.iter()).all(|(a, b)| a <= b)
    }

    /// Slots with a non-zero amount.
    pub fn non_zero(&self) -> impl Iterator<Item = (ResourceId, i64)> + '_ {
        self.0
            .iter()
            .enumerate()
            .filter(|(_, v)| **v != 0)
            .map(|(i, v)| (ResourceId(i as u8), *v))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_resolved_name_gives_the_slot_get_gives() {
        let mut names = ResourceNames::default();
        let gpu = ResourceName::new("nvidia.com/gpu".into());
        assert_eq!(
            gpu.id(&names),
            None,
            "unseen until a node or pod carries it"
        );
        let id = names.intern("nvidia.com/gpu").ok();
        assert!(id.is_some());
        for n in [
            "cpu",
            "memory",
            "ephemeral-storage",
            "nvidia.com/gpu",
            "other",
        ] {
            let r = ResourceName::new(n.into());
            assert_eq!(r.id(&names), names.get(n), "{n}");
            assert_eq!(
                r.id(&ResourceNames::default()),
                ResourceNames::default().get(n),
                "{n}"
            );
        }
    }

    #[test]
    fn fixed_slots_come_first_and_extended_resources_are_interned_once() {
        let mut names = ResourceNames::default();
        assert_eq!(names.intern("cpu"), Ok(ResourceId::CPU));
        assert_eq!(names.intern("memory"), Ok(ResourceId::MEMORY));
        let gpu = names.intern("nvidia.com/gpu").unwrap();
        assert_eq!(gpu, ResourceId(3));
        assert_eq!(names.intern("nvidia.com/gpu"), Ok(gpu));
        assert_eq!(names.name(gpu), "nvidia.com/gpu");
    }

    #[test]
    fn running_out_of_slots_is_an_error_not_a_panic() {
        let mut names = ResourceNames::default();
        for i in 3..MAX_RESOURCES {
            names.intern(&format!("example.com/r{i}")).unwrap();
        }
        assert!(names.intern("example.com/one-too-many").is_err());
    }

    #[test]
    fn arithmetic_saturates() {
        let mut a = Resources::ZERO;
        a[ResourceId::CPU] = i64::MAX;
        let mut b = Resources::ZERO;
        b[ResourceId::CPU] = 5;
        a.add(&b);
        assert_eq!(a[ResourceId::CPU], i64::MAX);
        assert!(b.le(&a));
        assert!(!a.le(&b));
    }
}
