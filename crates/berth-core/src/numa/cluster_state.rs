//! [`NumaCluster`]: the NUMA state the scheduler keeps across cycles (the reserve cache and
//! its resync timer), held beside the node cache in the scheduler's state, and the hooks the scheduler calls when
//! NRT objects and pods change.
//!
//! The cache lives in the scheduler's state rather than in the plugin because
//! Reserve/Unreserve are the plugin's only mutable access and they get the whole state;
//! the hooks borrow the [`NodeCache`] read-only, so the resync reads the pods the scheduler
//! believes run on a node and touches nothing else. One cache
//! serves every profile: the first profile that enables the plugin configures it (upstream
//! builds one per profile; berth profiles share one view of the cluster).

use std::sync::Arc;

use berth_api::nrt::NodeResourceTopology;

use crate::cache::node_cache::{NodeCache, PodEntry, PodState};
use crate::model::node::{NodeIdx, NodeInfo};
use crate::model::pod::PodInfo;
use crate::numa::args::InformerMode;
use crate::numa::{
    CacheMode, NodeNumaView, NodeSlot, NodeTopology, NumaCacheMetrics, NumaConvertError,
    NumaPluginConfig, PodIdent, PodKey, PodNumaRequest, ReserveCache, ResyncOutcome,
};
use crate::time::Time;

use super::request::{pod_numa_request, pod_numa_request_kept};

/// NUMA figures for metrics and benchmarks (the reference exports none).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NumaMetrics {
    /// The cache's own counters (dirty nodes by reason, resync attempts, matches,
    /// mismatches, flushes, generation).
    pub cache: NumaCacheMetrics,
    /// Which cache runs.
    pub mode: CacheMode,
    /// NRT objects received (created or replaced).
    pub nrt_updates: u64,
    /// Filter evaluations that looked a node's topology up.
    pub filter_lookups: u64,
    /// Score evaluations that looked a node's topology up (pods placed only).
    pub score_lookups: u64,
    /// Nodes dirty now.
    pub dirty_nodes: u64,
}

impl NumaMetrics {
    /// NRT objects the reference plugin would read from the API server for the same work:
    /// without the overreserve cache it issues a live `GET` per Filter and Score lookup;
    /// with it, one per resync attempt on a dirty node. berth itself reads the watched
    /// objects from memory, so this is the API traffic the design saves or costs.
    pub fn api_reads(&self) -> u64 {
        match self.mode {
            CacheMode::OverReserve => self.cache.resync_attempts,
            CacheMode::Passthrough | CacheMode::DiscardReserved => {
                self.filter_lookups + self.score_lookups
            }
        }
    }
}

/// The scheduler-wide NUMA state: the reserve cache, its resync timer and counters.
#[derive(Debug, Clone)]
pub struct NumaCluster {
    /// Some profile enables NodeResourceTopologyMatch.
    active: bool,
    cache: ReserveCache,
    informer_mode: InformerMode,
    /// When the resync runs next; `None` while no node is dirty.
    next_resync: Option<Time>,
    /// Logical clock ordering NRT receipts and reservations (several happen in one ms).
    stamp: i64,
    /// Nodes with an NRT, so cycles skip the plugin when there are none.
    nodes_with_nrt: usize,
    nrt_updates: u64,
    filter_lookups: u64,
    score_lookups: u64,
    /// Nodes whose NRT the capacity rule refused, with the message (for `explain`).
    refused: crate::collections::HashMap<String, String>,
    /// By node index: the cache slot of the node's name, remembered so Filter and Score
    /// find a node's entry without hashing and comparing its name (see [`NodeSlot`]).
    slots: Vec<SlotMemo>,
}

/// A node's remembered cache slot: valid while the node's name is this very `Arc` (held,
/// so its address cannot be reused by another name) and the cache's layout is `layout`.
#[derive(Debug, Clone)]
struct SlotMemo {
    name: Option<Arc<str>>,
    slot: NodeSlot,
    layout: u64,
}

impl Default for NumaCluster {
    fn default() -> Self {
        Self {
            active: false,
            cache: ReserveCache::new(NumaPluginConfig::default().cache),
            informer_mode: InformerMode::default(),
            next_resync: None,
            stamp: 0,
            nodes_with_nrt: 0,
            nrt_updates: 0,
            filter_lookups: 0,
            score_lookups: 0,
            refused: Default::default(),
            slots: Vec::new(),
        }
    }
}

impl NumaCluster {
    /// The state for a plugin configured with `config`.
    pub fn new(config: &NumaPluginConfig) -> Self {
        Self {
            active: true,
            cache: ReserveCache::new(config.cache),
            informer_mode: config.informer_mode,
            ..Self::default()
        }
    }

    /// Whether some profile enables the plugin (otherwise NRT objects are only stored).
    pub fn is_active(&self) -> bool {
        self.active
    }

    /// The reserve cache.
    pub fn cache(&self) -> &ReserveCache {
        &self.cache
    }

    /// Whether any node has an NRT (without one, every node passes and scores 0).
    pub fn has_topology(&self) -> bool {
        self.nodes_with_nrt > 0
    }

    /// What Filter and Score see for `node`.
    pub fn view(&self, node: &str) -> NodeNumaView<'_> {
        self.cache.view(node)
    }

    /// The remembered slot of `node`, if it is still right.
    fn remembered(&self, node: &NodeInfo) -> Option<NodeSlot> {
        let m = self.slots.get(node.idx.index())?;
        let same = m.layout == self.cache.layout()
            && m.name.as_ref().is_some_and(|n| Arc::ptr_eq(n, &node.name));
        same.then_some(m.slot)
    }

    /// The cache slot of `node`: remembered, or looked up by name.
    pub fn slot(&self, node: &NodeInfo) -> NodeSlot {
        self.remembered(node)
            .unwrap_or_else(|| self.cache.slot(&node.name))
    }

    /// Remembers the slot of the node at `idx` named `name` (its `NodeInfo::name`) for
    /// later cycles: [`NumaCluster::slot`] then needs no name lookup while the node and the
    /// cache layout stay the same.
    pub fn remember(&mut self, idx: NodeIdx, name: &Arc<str>) -> NodeSlot {
        let slot = self.cache.slot(name);
        let i = idx.index();
        if i >= self.slots.len() {
            self.slots.resize(
                i + 1,
                SlotMemo {
                    name: None,
                    slot: NodeSlot::NONE,
                    layout: 0,
                },
            );
        }
        self.slots[i] = SlotMemo {
            name: Some(name.clone()),
            slot,
            layout: self.cache.layout(),
        };
        slot
    }

    /// Test hook: trusts every remembered slot under the current layout, right or not (a
    /// deliberately stale memo, to show the property test catches one).
    #[cfg(test)]
    pub(crate) fn trust_stale_memos(&mut self) {
        let layout = self.cache.layout();
        for m in &mut self.slots {
            m.layout = layout;
        }
    }

    /// [`NumaCluster::view`] of the node, through its remembered slot when there is one.
    pub fn view_node(&self, node: &NodeInfo) -> NodeNumaView<'_> {
        self.cache.view_at(self.slot(node))
    }

    /// When [`resync`] has work next.
    pub fn next_resync(&self) -> Option<Time> {
        self.next_resync
    }

    /// Counters.
    pub fn metrics(&self) -> NumaMetrics {
        NumaMetrics {
            cache: self.cache.metrics().clone(),
            mode: self.cache.config().mode,
            nrt_updates: self.nrt_updates,
            filter_lookups: self.filter_lookups,
            score_lookups: self.score_lookups,
            dirty_nodes: self.cache.dirty_nodes().len() as u64,
        }
    }

    fn next_stamp(&mut self) -> i64 {
        self.stamp += 1;
        self.stamp
    }

    /// Starts the resync timer if a node is dirty and it is not running. Resyncs run on a
    /// free-running period (multiples of it), like the reference's ticker.
    fn arm(&mut self, now: Time) {
        let period = self.cache.config().resync_period_ms;
        if !self.active
            || self.cache.config().mode != CacheMode::OverReserve
            || period <= 0
            || self.next_resync.is_some()
        {
            return;
        }
        self.next_resync = Some((now.div_euclid(period) + 1) * period);
    }

    fn arm_if_dirty(&mut self, node: &str, now: Time) {
        if self.cache.is_dirty(node) {
            self.arm(now);
        }
    }

    /// An NRT object was created or replaced. Returns whether Filter and Score see new
    /// data (false when the cache holds the update back until the node resyncs, so pods
    /// need not be retried). An object the scheduler cannot read (a zone quantity that does
    /// not parse) leaves the node's previous data in place.
    pub fn apply_nrt(
        &mut self,
        nrt: &NodeResourceTopology,
        now: Time,
    ) -> Result<bool, NumaConvertError> {
        let topology = NodeTopology::from_nrt(nrt)?;
        let node = nrt.node_name();
        let had = self.cache.topology(node).is_some();
        let generation = self.cache.generation();
        let stamp = self.next_stamp();
        self.cache.update_nrt(node, topology, stamp);
        if !had && self.cache.topology(node).is_some() {
            self.nodes_with_nrt += 1;
        }
        self.nrt_updates += 1;
        self.arm_if_dirty(node, now);
        Ok(self.cache.generation() != generation)
    }

    /// Whether `node` has NRT data the plugins read.
    pub fn node_has_topology(&self, node: &str) -> bool {
        self.cache.topology(node).is_some()
    }

    /// `node`'s NRT was refused (`message` says where and why): it is treated as absent.
    pub fn refuse_nrt(&mut self, node: &str, message: String) {
        self.refused.insert(node.to_string(), message);
    }

    /// `node`'s NRT is readable again, or gone.
    pub fn accept_nrt(&mut self, node: &str) {
        self.refused.remove(node);
    }

    /// Why `node`'s NRT was refused, while it is.
    pub fn refused_nrt(&self, node: &str) -> Option<&str> {
        self.refused.get(node).map(String::as_str)
    }

    /// Nodes with an NRT, in no particular order (a re-LIST deletes those it misses).
    pub fn nrt_nodes(&self) -> impl Iterator<Item = &str> + '_ {
        self.cache.nrt_nodes()
    }

    /// The NRT of `node` was deleted.
    pub fn delete_nrt(&mut self, node: &str) {
        if self.cache.topology(node).is_some() {
            self.nodes_with_nrt -= 1;
        }
        self.cache.remove_nrt(node);
    }

    /// `node` was deleted.
    pub fn delete_node(&mut self, node: &str) {
        if self.cache.topology(node).is_some() {
            self.nodes_with_nrt -= 1;
        }
        self.cache.remove_node(node);
    }

    /// Reserve: accounts `request` pessimistically on every zone of `node`.
    pub fn reserve(&mut self, node: &str, pod: &PodInfo, request: &PodNumaRequest) {
        let key = PodKey {
            uid: pod.uid.to_string(),
            namespace: pod.key.namespace.to_string(),
            name: pod.key.name.to_string(),
        };
        let stamp = self.next_stamp();
        self.cache.reserve(node, &key, request, stamp);
    }

    /// Interns the pod shape of `request` scored with `strategy`, so later pods of the
    /// shape have their per-node verdicts and scores remembered (see
    /// [`crate::numa::verdict_memo`]).
    pub fn intern_shape(
        &mut self,
        strategy: &crate::numa::ScoringStrategy,
        request: &PodNumaRequest,
    ) -> Option<crate::numa::ShapeId> {
        self.cache.intern_shape(strategy, request)
    }

    /// Unreserve, or the pod left the node (deleted, finished, rejected by the kubelet):
    /// nothing is held for it any more.
    pub fn unreserve(&mut self, node: &str, pod_uid: &str) {
        self.cache.unreserve(node, pod_uid);
    }

    /// Filter's verdict on `node`, for dirty tracking. `passed: false` with unusable data
    /// (foreign pods, in-flight reservation) is not a rejection the streak counts.
    pub fn record_filter(&mut self, node: &str, passed: bool, now: Time) {
        self.filter_lookups += 1;
        if passed {
            self.cache.filter_passed(node);
            return;
        }
        if matches!(self.cache.view(node), NodeNumaView::Unusable(_)) {
            return;
        }
        self.cache.filtered_out(node);
        self.arm_if_dirty(node, now);
    }

    /// [`NumaCluster::record_filter`] for the node at `idx` of `nodes`, through its
    /// remembered slot (remembering it if it was not).
    pub fn record_filter_node(&mut self, nodes: &NodeCache, idx: NodeIdx, passed: bool, now: Time) {
        let Some(node) = nodes.node(idx) else {
            return;
        };
        let slot = match self.remembered(node) {
            Some(s) => s,
            None => {
                let name = node.name.clone();
                self.remember(idx, &name)
            }
        };
        self.record_filter_at(slot, passed, now);
    }

    fn record_filter_at(&mut self, slot: NodeSlot, passed: bool, now: Time) {
        self.filter_lookups += 1;
        if passed {
            self.cache.filter_passed_at(slot);
            return;
        }
        if self.cache.is_unusable_at(slot) {
            return;
        }
        self.cache.filtered_out_at(slot);
        if self.cache.is_dirty_at(slot) {
            self.arm(now);
        }
    }

    /// Score looked `n` nodes up for a pod that was then placed.
    pub fn record_score_lookups(&mut self, n: u64) {
        self.score_lookups += n;
    }

    fn foreign_pod(&mut self, node: &str, pod: &PodInfo, now: Time) {
        // A pod whose spec no longer parses cannot be judged: count it (the safe side).
        let request = pod_numa_request(pod).unwrap_or_else(|_| {
            PodNumaRequest::single(crate::numa::QosClass::Guaranteed, Default::default())
        });
        self.cache.foreign_pod(node, &request);
        self.arm_if_dirty(node, now);
    }
}

/// The node a cache entry holds the pod on, if it holds it anywhere.
fn placed_on(nodes: &NodeCache, entry: &PodEntry) -> Option<std::sync::Arc<str>> {
    if entry.state == PodState::Pending || entry.info.terminal {
        return None;
    }
    match entry.node.and_then(|i| nodes.node(i)) {
        Some(n) => Some(n.name.clone()),
        None => entry.info.node_name.clone(),
    }
}

impl NumaCluster {
    /// A pod was recorded (after [`NodeCache::apply_pod`]); `prev` is the entry it replaced and
    /// `foreign` says the pod names a scheduler that is none of ours.
    ///
    /// - A bind the scheduler asked for came back: the cache learns it (DiscardReserved ends
    ///   the in-flight reservation; OverReserve keeps the pod assumed until a resync).
    /// - The pod left its node or finished (Failed with TopologyAffinityError, Succeeded): its
    ///   assumed resources go, or a later matching fingerprint, which no longer lists it, would
    ///   keep it assumed forever.
    /// - A foreign pod landed on, or left, a node: that node is dirty and unusable until it
    ///   resyncs. A pod this scheduler assumed is never foreign on the node it chose.
    pub fn pod_applied(
        &mut self,
        nodes: &NodeCache,
        prev: Option<&PodEntry>,
        info: &PodInfo,
        foreign: bool,
        now: Time,
    ) {
        if !self.active {
            return;
        }
        let before = prev.and_then(|p| placed_on(nodes, p));
        let now_entry = nodes.pod(&info.key);
        let after = now_entry.and_then(|e| placed_on(nodes, e));
        if before.is_some() && before == after {
            let confirmed = prev.is_some_and(|p| p.state == PodState::Assumed)
                && now_entry.is_some_and(|e| e.state == PodState::Bound);
            if let (true, Some(node)) = (confirmed, after) {
                self.cache.pod_bound(&node, &info.uid);
            }
            return;
        }
        if let Some(node) = before {
            self.unreserve(&node, &info.uid);
            if foreign {
                self.foreign_pod(&node, info, now);
            }
        }
        if let (Some(node), true) = (after, foreign) {
            self.foreign_pod(&node, info, now);
        }
    }

    /// A pod was deleted (after [`NodeCache::remove_pod`] returned `entry`).
    pub fn pod_deleted(&mut self, nodes: &NodeCache, entry: &PodEntry, foreign: bool, now: Time) {
        if !self.active {
            return;
        }
        if let Some(node) = placed_on(nodes, entry) {
            self.unreserve(&node, &entry.info.uid);
            if foreign {
                self.foreign_pod(&node, &entry.info, now);
            }
        }
    }

    /// Runs the resync if it is due. Returns the nodes whose data Filter sees changed (the
    /// flushed ones), sorted. A node whose check merely failed changes nothing: pods rejected
    /// there are not retried for it (their message catches up at their next retry).
    pub fn resync(&mut self, nodes: &NodeCache, now: Time) -> Vec<String> {
        match self.next_resync {
            Some(due) if due <= now => {}
            _ => return Vec::new(),
        }
        let mode = self.informer_mode;
        let out: ResyncOutcome = self.cache.resync(now, |node, topology| {
            pods_on_node(nodes, node, topology, mode)
        });
        self.next_resync = None;
        if !self.cache.dirty_nodes().is_empty() {
            self.arm(now);
        }
        out.flushed
    }
}

/// The pods the scheduler believes the node agent sees on `node`: bound (a bind not yet
/// confirmed is unknown to the kubelet), not terminal (the agents drop them), not a
/// reservation's stand-in; with the `Shared` informer only Running ones, as upstream.
fn pods_on_node(
    nodes: &NodeCache,
    node: &str,
    topology: &NodeTopology,
    mode: InformerMode,
) -> Vec<PodIdent> {
    let Some(info) = nodes.node_by_name(node) else {
        return Vec::new();
    };
    info.pods
        .iter()
        .filter(|p| !p.is_reserve_pod() && !p.terminal)
        .filter(|p| {
            nodes
                .pod(&p.key)
                .is_some_and(|e| e.state == PodState::Bound)
        })
        .filter(|p| {
            mode == InformerMode::Dedicated
                || p.pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
        })
        .map(|p| PodIdent {
            namespace: p.key.namespace.to_string(),
            name: p.key.name.to_string(),
            exclusive: pod_numa_request_kept(p)
                .map(|r| r.has_exclusive_resources(|n| topology.has_resource(n)))
                .unwrap_or(true),
        })
        .collect()
}
