//! The devices each node reaches, indexed once per change of the ResourceSlices instead of
//! once per node per scheduling cycle, and the verdicts of CEL selectors on those devices.
//!
//! Filter asks, for every node of every cycle, which devices the node reaches (slices of the
//! newest generation of each pool whose `nodeName` is the node, whose `nodeSelector` selects
//! it, or `allNodes`, in (driver, pool, slice, device) order) and which of them a request's
//! selectors select. Both answers depend on the slices alone (and the selector's text), not
//! on the pod or the node's other state: the index computes the first when a slice changes,
//! and remembers each selector's verdict per device until then. Evaluating a selector is
//! deterministic, so a remembered verdict is the one evaluating again would give; a runtime
//! error is not remembered (the message is produced again when needed).

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, RwLock};

use berth_api::dra::{Device, ResourceSlice};

use super::DeviceId;
use crate::model::selector::{Labels, NodeSelectorMatcher};

/// A device the node reaches.
#[derive(Debug, Clone)]
pub struct Candidate {
    /// Its identity.
    pub id: DeviceId,
    /// The slice it comes from.
    pub slice: Arc<ResourceSlice>,
    /// Its index in the slice.
    pub index: usize,
}

impl Candidate {
    /// The device.
    pub fn device(&self) -> &Device {
        &self.slice.spec.devices[self.index]
    }
}

/// A verdict not known yet.
const UNKNOWN: u8 = 0;
/// The selector selects the device.
const SELECTED: u8 = 1;
/// The selector does not select the device.
const REJECTED: u8 = 2;

/// A slice whose devices reach nodes by selector, `allNodes` or per device: asked per node.
#[derive(Debug, Clone)]
struct Shared {
    /// Its devices' positions in [`DeviceIndex::devices`].
    first: u32,
    end: u32,
    /// The node it names, all nodes, or those its node selector selects (`None`: a
    /// selector that cannot be read selects none); per device when `per_device`.
    node_name: Option<Arc<str>>,
    all_nodes: bool,
    selector: Option<NodeSelectorMatcher>,
    per_device: bool,
}

/// Per device of a per-device slice: how it reaches nodes.
#[derive(Debug, Clone)]
struct DeviceReach {
    node_name: Option<String>,
    all_nodes: bool,
    selector: Option<NodeSelectorMatcher>,
}

/// The devices of the current slices, by node.
#[derive(Debug, Default)]
pub struct DeviceIndex {
    /// Every device of the newest generation of each pool, in upstream's order.
    devices: Vec<Candidate>,
    /// Per node named by slices' `nodeName`: positions of its devices, ascending.
    by_node: HashMap<Arc<str>, Vec<u32>>,
    /// Slices asked per node.
    shared: Vec<Shared>,
    /// Per device of a per-device slice (by position), how it reaches nodes.
    reach: HashMap<u32, DeviceReach>,
    /// Selector verdicts by expression text, one per device.
    verdicts: RwLock<HashMap<Arc<str>, Arc<[AtomicU8]>>>,
}

impl DeviceIndex {
    /// Indexes `slices` (by name).
    pub fn build(slices: &BTreeMap<Arc<str>, Arc<ResourceSlice>>) -> Self {
        let mut newest: BTreeMap<(&str, &str), i64> = BTreeMap::new();
        for s in slices.values() {
            let g = newest
                .entry((&s.spec.driver, &s.spec.pool.name))
                .or_insert(s.spec.pool.generation);
            *g = (*g).max(s.spec.pool.generation);
        }
        let mut current: Vec<&Arc<ResourceSlice>> = slices
            .values()
            .filter(|s| {
                newest.get(&(&*s.spec.driver, &*s.spec.pool.name)) == Some(&s.spec.pool.generation)
            })
            .collect();
        current.sort_by(|a, b| {
            (&a.spec.driver, &a.spec.pool.name, &a.metadata.name).cmp(&(
                &b.spec.driver,
                &b.spec.pool.name,
                &b.metadata.name,
            ))
        });
        let mut index = DeviceIndex::default();
        for slice in current {
            let first = index.devices.len() as u32;
            let driver: Arc<str> = slice.spec.driver.as_str().into();
            let pool: Arc<str> = slice.spec.pool.name.as_str().into();
            for (i, device) in slice.spec.devices.iter().enumerate() {
                index.devices.push(Candidate {
                    id: DeviceId {
                        driver: driver.clone(),
                        pool: pool.clone(),
                        device: device.name.as_str().into(),
                    },
                    slice: slice.clone(),
                    index: i,
                });
            }
            let end = index.devices.len() as u32;
            let s = &slice.spec;
            let per_device = s.per_device_node_selection == Some(true);
            let local_only = s.all_nodes != Some(true) && s.node_selector.is_none();
            if !per_device && local_only && s.node_name.is_some() {
                let node: Arc<str> = s.node_name.as_deref().unwrap_or("").into();
                index.by_node.entry(node).or_default().extend(first..end);
                continue;
            }
            if per_device {
                for (i, device) in s.devices.iter().enumerate() {
                    index.reach.insert(
                        first + i as u32,
                        DeviceReach {
                            node_name: device.node_name.clone(),
                            all_nodes: device.all_nodes == Some(true),
                            selector: device
                                .node_selector
                                .as_ref()
                                .and_then(|sel| NodeSelectorMatcher::new(sel).ok()),
                        },
                    );
                }
            }
            index.shared.push(Shared {
                first,
                end,
                node_name: s.node_name.as_deref().map(Arc::from),
                all_nodes: s.all_nodes == Some(true),
                selector: s
                    .node_selector
                    .as_ref()
                    .and_then(|sel| NodeSelectorMatcher::new(sel).ok()),
                per_device,
            });
        }
        index
    }

    /// Every indexed device, by position.
    pub fn devices(&self) -> &[Candidate] {
        &self.devices
    }

    /// The positions of the devices `node` reaches, ascending (upstream's order). Borrowed
    /// when only node-local slices reach it (the common case: no allocation).
    pub fn reached(&self, node: &str, labels: &Labels) -> Cow<'_, [u32]> {
        let local = self.by_node.get(node).map_or(&[][..], |v| v.as_slice());
        if self.shared.is_empty() {
            return Cow::Borrowed(local);
        }
        let mut out: Vec<u32> = local.to_vec();
        for s in &self.shared {
            if s.per_device {
                out.extend((s.first..s.end).filter(|p| {
                    self.reach.get(p).is_some_and(|r| {
                        r.node_name.as_deref() == Some(node)
                            || r.all_nodes
                            || r.selector.as_ref().is_some_and(|m| m.matches(node, labels))
                    })
                }));
            } else if s.node_name.as_deref() == Some(node)
                || s.all_nodes
                || s.selector.as_ref().is_some_and(|m| m.matches(node, labels))
            {
                out.extend(s.first..s.end);
            }
        }
        out.sort_unstable();
        Cow::Owned(out)
    }

    /// The remembered verdicts of the selector `expression`, one per device (created on
    /// first use).
    pub fn verdicts(&self, expression: &Arc<str>) -> Verdicts {
        if let Some(v) = self
            .verdicts
            .read()
            .ok()
            .and_then(|m| m.get(&**expression).cloned())
        {
            return Verdicts(v);
        }
        let fresh: Arc<[AtomicU8]> = (0..self.devices.len())
            .map(|_| AtomicU8::new(UNKNOWN))
            .collect();
        match self.verdicts.write() {
            Ok(mut m) => Verdicts(m.entry(expression.clone()).or_insert(fresh).clone()),
            Err(_) => Verdicts(fresh),
        }
    }
}

/// One selector's verdicts per device position.
#[derive(Debug, Clone)]
pub struct Verdicts(Arc<[AtomicU8]>);

impl Verdicts {
    /// The verdict on the device at `pos`, if known.
    pub fn get(&self, pos: u32) -> Option<bool> {
        match self.0.get(pos as usize)?.load(Ordering::Relaxed) {
            SELECTED => Some(true),
            REJECTED => Some(false),
            _ => None,
        }
    }

    /// Remembers the verdict on the device at `pos`.
    pub fn set(&self, pos: u32, selected: bool) {
        if let Some(v) = self.0.get(pos as usize) {
            v.store(
                if selected { SELECTED } else { REJECTED },
                Ordering::Relaxed,
            );
        }
    }
}

impl Clone for DeviceIndex {
    /// A clone starts with no remembered verdicts.
    fn clone(&self) -> Self {
        DeviceIndex {
            devices: self.devices.clone(),
            by_node: self.by_node.clone(),
            shared: self.shared.clone(),
            reach: self.reach.clone(),
            verdicts: RwLock::default(),
        }
    }
}
