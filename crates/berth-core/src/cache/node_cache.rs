//! [`NodeCache`]: every node and pod the scheduler knows, with pods it assumed placed, and
//! the API objects plugins consult (claims, volumes, classes, budgets, namespaces).
//!
//! It knows no domain: reservations, NUMA and CPU state live in their own stores beside it
//! in [`super::Cluster`], which fans each input out to them.

use crate::collections::HashMap;
use std::sync::Arc;

use berth_api::k8s_openapi::api::core::v1::{
    Namespace, Node, PersistentVolume, PersistentVolumeClaim,
};
use berth_api::k8s_openapi::api::policy::v1::PodDisruptionBudget;
use berth_api::k8s_openapi::api::scheduling::v1::PriorityClass;
use berth_api::k8s_openapi::api::storage::v1::{
    CSIDriver, CSINode, CSIStorageCapacity, StorageClass,
};

use crate::model::node::{NodeError, NodeIdx, NodeInfo};
use crate::model::pod::PodInfo;
use crate::object::ObjectKey;
use crate::resources::ResourceNames;

use super::affinity_counts;
use super::change_log::ChangeLog;
use super::domain_counts::{DomainCountCache, DomainCounts, DomainQuery};

/// Namespace objects by name.
pub type Namespaces = HashMap<Arc<str>, Arc<Namespace>>;

/// Where a pod stands with the scheduler.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PodState {
    /// Not on a node yet.
    Pending,
    /// Placed by this scheduler, bind not yet confirmed.
    Assumed,
    /// Bound (confirmed by the API server, or found bound).
    Bound,
}

/// A pod and its place.
#[derive(Debug, Clone)]
pub struct PodEntry {
    /// The pod.
    pub info: Arc<PodInfo>,
    /// Its node, when on one that exists.
    pub node: Option<NodeIdx>,
    /// The name of the node it is bound or assumed on (kept while that node is deleted:
    /// the pod re-attaches if the name comes back).
    pub on: Option<Arc<str>>,
    /// Its state.
    pub state: PodState,
}

/// Cluster-wide counts of placed pods with pod (anti-)affinity.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct AffinityTotals {
    /// Pods with any pod affinity or anti-affinity.
    pub with_affinity: i64,
    /// Pods with required anti-affinity.
    pub with_required_anti_affinity: i64,
}

impl AffinityTotals {
    /// Counts `pod` in (`sign` 1) or out (`sign` -1).
    pub fn add(&mut self, pod: &PodInfo, sign: i64) {
        let (any, anti) = crate::model::node::affinity_flags(pod);
        self.with_affinity += sign * i64::from(any);
        self.with_required_anti_affinity += sign * i64::from(anti);
    }
}

/// Every node and pod, plus the cluster objects plugins consult.
#[derive(Debug, Default, Clone)]
pub struct NodeCache {
    /// Interned resource names.
    pub names: ResourceNames,
    nodes: Vec<Option<NodeInfo>>,
    node_ids: HashMap<Arc<str>, NodeIdx>,
    free_slots: Vec<NodeIdx>,
    order: Vec<NodeIdx>,
    pods: HashMap<ObjectKey, PodEntry>,
    /// Bound pods whose node is not (yet) known, by node name.
    orphans: HashMap<Arc<str>, Vec<ObjectKey>>,
    /// Pods placed on nodes that carry any pod (anti-)affinity, and required anti-affinity:
    /// InterPodAffinity skips its cluster-wide scans while these are zero.
    pub affinity_totals: AffinityTotals,
    /// Claims by namespace/name.
    pub pvcs: HashMap<ObjectKey, Arc<PersistentVolumeClaim>>,
    /// How many non-terminal placed pods use each claim.
    pub pvc_users: HashMap<ObjectKey, u32>,
    /// CSINode objects by node name.
    pub csi_nodes: HashMap<Arc<str>, Arc<CSINode>>,
    /// Priority classes by name.
    pub priority_classes: HashMap<String, Arc<PriorityClass>>,
    /// Disruption budgets by namespace/name.
    pub pdbs: HashMap<ObjectKey, Arc<PodDisruptionBudget>>,
    /// Namespaces by name: their labels are what a pod affinity term's `namespaceSelector`
    /// selects on. A namespace the driver never sent (the simulator sends none) is taken
    /// to carry only `kubernetes.io/metadata.name`, the label the API server always sets.
    pub namespaces: Namespaces,
    /// Persistent volumes by name (kept for the volume plugins: a bound claim's volume).
    pub pvs: HashMap<Arc<str>, Arc<PersistentVolume>>,
    /// Storage classes by name (kept for the volume plugins: a claim's binding mode).
    pub storage_classes: HashMap<Arc<str>, Arc<StorageClass>>,
    /// CSI drivers by name (VolumeBinding: whether a provisioner publishes capacity).
    pub csi_drivers: HashMap<Arc<str>, Arc<CSIDriver>>,
    /// Storage capacity objects by namespace/name, in key order (VolumeBinding takes the
    /// first that fits).
    pub csi_capacities: std::collections::BTreeMap<ObjectKey, Arc<CSIStorageCapacity>>,
    /// VolumeBinding's assumed volumes and claims.
    pub assumed_volumes: super::assumed_volumes::Assumed,
    /// Dynamic Resource Allocation: slices, classes, claims, devices taken.
    pub dra: crate::dra::DraState,
    /// Objects refused by the capacity rule, reported once each and counted.
    pub refusals: crate::refusal::Refusals,
    /// Per-domain pod counts remembered across cycles (PodTopologySpread).
    domain_counts: DomainCountCache,
    /// Node slots handed out for change, for [`NodeCache::domain_counts`]: every place below
    /// that changes a node notes it here.
    changes: ChangeLog,
    /// How many nodes carry a PreferNoSchedule taint: while none does, TaintToleration
    /// scores every node 0 without looking at any.
    soft_tainted: usize,
    /// How many nodes list each image (ImageLocality's spread).
    pub images: super::images::ImageCounts,
}

impl NodeCache {
    /// Adds or replaces a node (the aggregate [`super::Cluster::apply_node`] checks its CPU
    /// reservation against the published layout after).
    pub fn apply_node(&mut self, node: Arc<Node>) -> Result<NodeIdx, NodeError> {
        let name: Arc<str> = node.metadata.name.as_deref().unwrap_or("").into();
        if let Some(idx) = self.node_ids.get(&name).copied() {
            self.changes.record(idx);
            if let Some(info) = self.nodes[idx.index()].as_mut() {
                let was = usize::from(info.has_prefer_no_schedule_taint());
                let old = info.node.clone();
                let set = info.set_node(node, &mut self.names);
                // The images of whatever object the node now holds (a refused update
                // keeps the old one).
                self.images.count(&old, false);
                self.images.count(&info.node, true);
                self.soft_tainted =
                    self.soft_tainted + usize::from(info.has_prefer_no_schedule_taint()) - was;
                set?;
            }
            return Ok(idx);
        }
        let idx = self
            .free_slots
            .pop()
            .unwrap_or(NodeIdx(self.nodes.len() as u32));
        let info = NodeInfo::new(idx, node, &mut self.names)?;
        self.images.count(&info.node, true);
        self.soft_tainted += usize::from(info.has_prefer_no_schedule_taint());
        self.changes.record(idx);
        if idx.index() == self.nodes.len() {
            self.nodes.push(Some(info));
        } else {
            self.nodes[idx.index()] = Some(info);
        }
        self.node_ids.insert(name.clone(), idx);
        self.order.push(idx);
        for key in self.orphans.remove(&name).unwrap_or_default() {
            if let Some(entry) = self.pods.get_mut(&key) {
                entry.node = Some(idx);
                if let Some(n) = self.nodes[idx.index()].as_mut() {
                    {
                        self.affinity_totals.add(&entry.info, 1);
                        n.add_pod(entry.info.clone());
                    }
                }
            }
        }
        Ok(idx)
    }

    /// Removes a node. Its pods stay known (as the API server keeps them) and re-attach if
    /// a node of that name comes back.
    pub fn delete_node(&mut self, name: &str) -> Option<NodeInfo> {
        let idx = self.node_ids.remove(name)?;
        let info = self.nodes[idx.index()].take()?;
        self.images.count(&info.node, false);
        self.soft_tainted -= usize::from(info.has_prefer_no_schedule_taint());
        self.changes.record(idx);
        self.order.retain(|i| *i != idx);
        self.free_slots.push(idx);
        for p in &info.pods {
            self.affinity_totals.add(p, -1);
            if let Some(entry) = self.pods.get_mut(&p.key) {
                entry.node = None;
                self.orphans
                    .entry(info.name.clone())
                    .or_default()
                    .push(p.key.clone());
            }
        }
        Some(info)
    }

    /// Whether some node carries a PreferNoSchedule taint.
    pub fn any_prefer_no_schedule_taint(&self) -> bool {
        self.soft_tainted > 0
    }

    /// A node by index.
    pub fn node(&self, idx: NodeIdx) -> Option<&NodeInfo> {
        self.nodes.get(idx.index())?.as_ref()
    }

    /// A node by index, mutably.
    pub fn node_mut(&mut self, idx: NodeIdx) -> Option<&mut NodeInfo> {
        self.changes.record(idx);
        self.nodes.get_mut(idx.index())?.as_mut()
    }

    /// A node's index by name.
    pub fn node_idx(&self, name: &str) -> Option<NodeIdx> {
        self.node_ids.get(name).copied()
    }

    /// A node by name.
    pub fn node_by_name(&self, name: &str) -> Option<&NodeInfo> {
        self.node(self.node_idx(name)?)
    }

    /// Live nodes in the order they were added.
    pub fn node_order(&self) -> &[NodeIdx] {
        &self.order
    }

    /// Live nodes.
    pub fn nodes(&self) -> impl Iterator<Item = &NodeInfo> + '_ {
        self.order.iter().filter_map(|i| self.node(*i))
    }

    /// Pods matching `q` per topology domain, over every live node (see
    /// [`domain_counts`]): brought up to date from the nodes changed since the same question
    /// was last asked.
    pub fn domain_counts(&self, q: &DomainQuery<'_>) -> Arc<DomainCounts> {
        self.domain_counts.counts(q, self.node_table())
    }

    /// Every node slot and the log of their changes: what remembered answers are brought up
    /// to date from.
    pub(crate) fn node_table(&self) -> affinity_counts::NodeTable<'_> {
        affinity_counts::NodeTable {
            slots: &self.nodes,
            log: &self.changes,
        }
    }

    /// Number of live nodes.
    pub fn node_count(&self) -> usize {
        self.order.len()
    }

    /// A pod by key.
    pub fn pod(&self, key: &ObjectKey) -> Option<&PodEntry> {
        self.pods.get(key)
    }

    /// Every known pod.
    pub fn pods(&self) -> impl Iterator<Item = &PodEntry> + '_ {
        self.pods.values()
    }

    /// Records a pod as the API server shows it. A pod with `spec.nodeName` is placed on
    /// that node (confirming an assumption if there was one); a terminal pod holds nothing.
    /// Returns the previous entry.
    pub fn apply_pod(&mut self, info: Arc<PodInfo>) -> Option<PodEntry> {
        let key = info.key.clone();
        let old = self.remove_pod(&key);
        let holds = !info.terminal;
        let (node, on, state) = match info.node_name.clone() {
            Some(name) if holds => {
                let idx = self.place(&key, &info, &name);
                self.count_pvcs(&info, 1);
                (idx, Some(name), PodState::Bound)
            }
            Some(name) => (None, Some(name), PodState::Bound),
            None => match &old {
                // An update to a pod we assumed but whose bind has not come back yet keeps it
                // assumed on its node (the same incarnation only), or waiting for a node of
                // that name if it was deleted meanwhile (the bind may still land).
                Some(PodEntry {
                    on: Some(name),
                    state: PodState::Assumed,
                    info: before,
                    ..
                }) if holds && before.uid == info.uid => {
                    let name = name.clone();
                    let idx = self.place(&key, &info, &name);
                    self.count_pvcs(&info, 1);
                    (idx, Some(name), PodState::Assumed)
                }
                _ => (None, None, PodState::Pending),
            },
        };
        self.pods.insert(
            key,
            PodEntry {
                info,
                node,
                on,
                state,
            },
        );
        old
    }

    /// Puts `info` on the node named `name`, or among the pods waiting for it when no such
    /// node exists. Returns the node.
    fn place(&mut self, key: &ObjectKey, info: &Arc<PodInfo>, name: &Arc<str>) -> Option<NodeIdx> {
        let idx = self.node_idx(name);
        if let Some(i) = idx {
            self.changes.record(i);
        }
        match idx.and_then(|i| self.nodes[i.index()].as_mut()) {
            Some(n) => {
                self.affinity_totals.add(info, 1);
                n.add_pod(info.clone())
            }
            None => self
                .orphans
                .entry(name.clone())
                .or_default()
                .push(key.clone()),
        }
        idx
    }

    /// Forgets a pod entirely (deleted).
    pub fn remove_pod(&mut self, key: &ObjectKey) -> Option<PodEntry> {
        let entry = self.pods.remove(key)?;
        if entry.state != PodState::Pending && !entry.info.terminal {
            if let Some(i) = entry.node {
                self.changes.record(i);
            }
            match entry.node.and_then(|i| self.nodes[i.index()].as_mut()) {
                Some(n) => {
                    if let Some(p) = n.remove_pod(key) {
                        self.affinity_totals.add(&p, -1);
                    }
                }
                None => self.unorphan(key, entry.on.as_deref()),
            }
            self.count_pvcs(&entry.info, -1);
        }
        Some(entry)
    }

    /// Drops `key` from the pods waiting for their node to (re)appear (every list is
    /// searched when `node` is not known).
    fn unorphan(&mut self, key: &ObjectKey, node: Option<&str>) {
        match node {
            Some(name) => {
                if let Some(v) = self.orphans.get_mut(name) {
                    v.retain(|k| k != key);
                    if v.is_empty() {
                        self.orphans.remove(name);
                    }
                }
            }
            None => {
                self.orphans.retain(|_, v| {
                    v.retain(|k| k != key);
                    !v.is_empty()
                });
            }
        }
    }

    /// Places a pending pod on `node` before its bind is confirmed.
    pub fn assume(&mut self, key: &ObjectKey, node: NodeIdx) -> bool {
        let Some(entry) = self.pods.get_mut(key) else {
            return false;
        };
        self.changes.record(node);
        let Some(n) = self.nodes.get_mut(node.index()).and_then(Option::as_mut) else {
            return false;
        };
        self.affinity_totals.add(&entry.info, 1);
        n.add_pod(entry.info.clone());
        entry.node = Some(node);
        entry.on = Some(n.name.clone());
        entry.state = PodState::Assumed;
        let info = entry.info.clone();
        self.count_pvcs(&info, 1);
        true
    }

    /// Undoes [`NodeCache::assume`].
    pub fn forget(&mut self, key: &ObjectKey) {
        let Some(entry) = self.pods.get_mut(key) else {
            return;
        };
        if entry.state != PodState::Assumed {
            return;
        }
        if let Some(i) = entry.node {
            self.changes.record(i);
        }
        let on_node = entry
            .node
            .and_then(|i| self.nodes.get_mut(i.index()).and_then(Option::as_mut));
        let orphaned = on_node.is_none();
        if let Some(n) = on_node {
            if let Some(p) = n.remove_pod(key) {
                self.affinity_totals.add(&p, -1);
            }
        }
        entry.node = None;
        entry.state = PodState::Pending;
        let on = entry.on.take();
        let info = entry.info.clone();
        if orphaned {
            // Its node was deleted meanwhile: it must not land there if the name comes back.
            self.unorphan(key, on.as_deref());
        }
        self.count_pvcs(&info, -1);
    }

    fn count_pvcs(&mut self, info: &PodInfo, delta: i32) {
        let ns = &info.key.namespace;
        for v in info.spec().volumes.iter().flatten() {
            let Some(claim) = v.persistent_volume_claim.as_ref() else {
                continue;
            };
            let key = ObjectKey::new(
                crate::object::Kind::PersistentVolumeClaim,
                ns,
                &claim.claim_name,
            );
            let c = self.pvc_users.entry(key.clone()).or_insert(0);
            *c = c.saturating_add_signed(delta);
            if *c == 0 {
                self.pvc_users.remove(&key);
            }
        }
    }
}
