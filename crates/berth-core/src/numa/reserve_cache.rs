//! The NRT reserve cache ("overreserve"): the scheduler's own view of every node's NUMA
//! availability between agent updates.
//!
//! - **Reserve** records the pod's effective request as *assumed* on the node and subtracts it
//!   from **every** zone (pessimistic overallocation, clamped at 0): the kubelet picks the
//!   zone, so the scheduler cannot know which one. Nodes without an NRT are ignored.
//!   **Unreserve** drops it again.
//! - NRT updates from the watch are **not** applied to a node that has assumed pods or is
//!   dirty; they are kept as the node's *pending* NRT. A clean node (nothing assumed, not
//!   dirty), or a node seen for the first time, takes the update at once.
//! - A node becomes **dirty** when it is filtered out `filtered_out_threshold` times in a row
//!   (default 1), when a foreign pod (bound by another scheduler) lands on it, or when its
//!   Topology Manager attributes change.
//! - Every resync period, each dirty node's newest NRT fingerprint is compared with the
//!   fingerprint of the pods the scheduler believes are on the node (all pods, or only those
//!   with exclusive resources, per `resync_method` and the agent's method attribute). On a
//!   match the NRT replaces the cached one and the node is clean again; assumed pods that are
//!   not in the matched pod set, or that were reserved after that NRT was received, stay
//!   assumed (they cannot be in the agent's snapshot). On a mismatch (or no fingerprint) the
//!   node stays dirty. Attribute changes alone are applied without a fingerprint check (the
//!   assumed pods stay).
//! - A node with foreign pods is **unusable** (filter rejects, score 0) until a matching
//!   resync.
//! - Cache disabled ([`CacheMode::Passthrough`]): every NRT update is applied as it comes, all
//!   other calls are no-ops. [`CacheMode::DiscardReserved`]: NRT updates are applied as they
//!   come and a node is unusable while it has a reservation that is neither bound nor
//!   unreserved.
//!
//! Pure state: time comes in as `now_ms` arguments, pods on a node come from a callback.

use crate::collections::FastMap;

use super::fingerprint::{Fingerprint, FingerprintError, FingerprintMethod};
use super::policy::{filter, filter_kind, NodeAllocatable, NumaReject};
use super::reject_kind::RejectKind;
use super::score::{score, ScoringStrategy, MAX_NODE_SCORE};
use super::types::{NodeTopology, NumaZones, PodNumaRequest, QosClass, Resources};
use super::verdict::{FilterVerdict, StaleReason};
use super::verdict_memo::{Lines, ShapeId, Shapes};

/// Which cache implementation runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum CacheMode {
    /// No cache: NRT updates apply directly (`cacheResyncPeriodSeconds <= 0`).
    Passthrough,
    /// Reserve-and-resync cache (default).
    #[default]
    OverReserve,
    /// Nodes with in-flight reservations are unusable (`discardReservedNodes`).
    DiscardReserved,
}

/// `cache.resyncMethod`: which pods enter the scheduler-side fingerprint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum ResyncMethod {
    /// Follow the NRT's `nodeTopologyPodsFingerprintMethod` attribute (default).
    #[default]
    Autodetect,
    /// Every pod on the node.
    All,
    /// Only pods with exclusive resources.
    OnlyExclusiveResources,
}

/// `cache.resyncScope`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum ResyncScope {
    /// Resources and Topology Manager attribute changes (default).
    #[default]
    All,
    /// Resources only (attribute changes do not dirty a node).
    OnlyResources,
}

/// `cache.foreignPodsDetect`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum ForeignPodsDetect {
    /// Foreign pods are ignored.
    None,
    /// Every foreign pod dirties its node (default).
    #[default]
    All,
    /// Only foreign pods with exclusive resources.
    OnlyExclusiveResources,
}

/// Cache configuration (see [`super::args`] for the plugin-args mapping).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheConfig {
    /// Implementation.
    pub mode: CacheMode,
    /// Resync period in milliseconds.
    pub resync_period_ms: i64,
    /// Pods in the scheduler-side fingerprint.
    pub resync_method: ResyncMethod,
    /// Whether attribute changes dirty nodes.
    pub resync_scope: ResyncScope,
    /// Foreign pod handling.
    pub foreign_pods_detect: ForeignPodsDetect,
    /// Consecutive filter rejections that make a node dirty (at least 1).
    pub filtered_out_threshold: u32,
}

/// berth's default resync period.
pub const DEFAULT_RESYNC_PERIOD_MS: i64 = 5_000;

impl Default for CacheConfig {
    fn default() -> Self {
        Self {
            mode: CacheMode::OverReserve,
            resync_period_ms: DEFAULT_RESYNC_PERIOD_MS,
            resync_method: ResyncMethod::Autodetect,
            resync_scope: ResyncScope::All,
            foreign_pods_detect: ForeignPodsDetect::All,
            filtered_out_threshold: 1,
        }
    }
}

/// A pod being reserved.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PodKey {
    /// UID (reservations are keyed by it).
    pub uid: String,
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
}

/// A pod the scheduler believes is on a node (for the resync fingerprint).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PodIdent {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// Holds exclusive resources on this node
    /// ([`PodNumaRequest::has_exclusive_resources`] with the node's NRT).
    pub exclusive: bool,
}

pub use super::verdict::{ResyncCheck, UnusableReason};

/// What the filter and score plugins see for a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeNumaView<'a> {
    /// No NRT for the node: filter passes, score 0.
    NoTopology,
    /// The data cannot be trusted now: filter rejects, score 0.
    Unusable(UnusableReason),
    /// Usable data.
    Ready {
        /// The cached NRT (TM config, fingerprint, zone list as published).
        topology: &'a NodeTopology,
        /// Zones with the assumed pods subtracted.
        zones: &'a NumaZones,
    },
}

/// Filters a node for a pod through the cache view (BestEffort pods without devices pass
/// before the view is consulted; no NRT passes; unusable data rejects).
pub fn filter_node(
    view: NodeNumaView<'_>,
    pod: &PodNumaRequest,
    node: &impl NodeAllocatable,
) -> Result<(), NumaReject> {
    if pod.qos() == QosClass::BestEffort && !pod.includes_non_native() {
        return Ok(());
    }
    match view {
        NodeNumaView::NoTopology => Ok(()),
        NodeNumaView::Unusable(_) => Err(NumaReject::InvalidTopologyData),
        NodeNumaView::Ready { topology, zones } => filter(&topology.tm, zones, pod, node),
    }
}

/// [`filter_node`] without naming the container and resource (see [`RejectKind`]): the
/// plugin's per-node Filter.
pub fn filter_node_kind(
    view: NodeNumaView<'_>,
    pod: &PodNumaRequest,
    node: &impl NodeAllocatable,
) -> Result<(), RejectKind> {
    if pod.qos() == QosClass::BestEffort && !pod.includes_non_native() {
        return Ok(());
    }
    match view {
        NodeNumaView::NoTopology => Ok(()),
        NodeNumaView::Unusable(_) => Err(RejectKind::InvalidTopologyData),
        NodeNumaView::Ready { topology, zones } => filter_kind(&topology.tm, zones, pod, node),
    }
}

/// Scores a node for a pod through the cache view (non-Guaranteed 100; no or unusable data 0).
pub fn score_node(strategy: &ScoringStrategy, view: NodeNumaView<'_>, pod: &PodNumaRequest) -> i64 {
    if pod.qos() != QosClass::Guaranteed {
        return MAX_NODE_SCORE;
    }
    match view {
        NodeNumaView::NoTopology | NodeNumaView::Unusable(_) => 0,
        NodeNumaView::Ready { topology, zones } => score(strategy, &topology.tm, zones, pod),
    }
}

/// Counters for metrics export.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NumaCacheMetrics {
    /// Nodes made dirty by consecutive filter rejections.
    pub dirty_filtered_out: u64,
    /// Nodes made dirty (and unusable) by foreign pods.
    pub dirty_foreign_pods: u64,
    /// Nodes made dirty by Topology Manager attribute changes.
    pub dirty_attribute_change: u64,
    /// Resync passes run.
    pub resync_runs: u64,
    /// Per-node fingerprint checks attempted.
    pub resync_attempts: u64,
    /// Fingerprint matches.
    pub fingerprint_matches: u64,
    /// Fingerprint mismatches (incl. malformed or incompatible signatures).
    pub fingerprint_mismatches: u64,
    /// Dirty nodes whose NRT carries no fingerprint.
    pub fingerprint_missing: u64,
    /// Node flushes (cached NRT replaced by a resync).
    pub flushes: u64,
    /// Cache generation (bumped whenever a cached NRT is replaced).
    pub generation: u64,
}

/// Result of one [`ReserveCache::resync`] call.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResyncOutcome {
    /// False when the period had not elapsed (nothing was done).
    pub ran: bool,
    /// Fingerprint checks attempted.
    pub attempted: usize,
    /// Matches.
    pub matched: usize,
    /// Mismatches.
    pub mismatched: usize,
    /// Dirty nodes without a fingerprint.
    pub missing_fingerprint: usize,
    /// Nodes whose cached NRT was replaced, sorted.
    pub flushed: Vec<String>,
    /// Nodes whose [`ResyncCheck`] changed in this pass (not counting flushed nodes).
    pub checks_changed: usize,
}

#[derive(Debug, Clone)]
struct Snapshot {
    topology: NodeTopology,
    received_at_ms: i64,
}

#[derive(Debug, Clone)]
struct AssumedPod {
    uid: String,
    namespace: String,
    name: String,
    request: Resources,
    reserved_at_ms: i64,
    bound: bool,
}

#[derive(Debug, Clone, Default)]
struct NodeEntry {
    base: Option<Snapshot>,
    pending: Option<Snapshot>,
    effective: Option<NumaZones>,
    assumed: Vec<AssumedPod>,
    in_flight: Vec<String>,
    check: Option<ResyncCheck>,
}

/// A node's dirty flags and rejection streak, kept beside the entries rather than in them
/// ([`Entries::track`]): the Filter feedback reads or writes them for every filtered node
/// of every cycle, and inside an entry (some 3 KB, with its NRT snapshots inline) each node's
/// were a cache miss of their own, where side by side they share lines.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Track {
    /// Whether the entry has an NRT (`base` is set): the streak counts only then.
    has_base: bool,
    filtered_out_streak: u32,
    dirty_overreserved: bool,
    dirty_foreign: bool,
    dirty_attr: bool,
}

impl Track {
    fn is_dirty(&self) -> bool {
        self.dirty_overreserved || self.dirty_foreign || self.dirty_attr
    }
}

impl NodeEntry {
    fn is_clean(&self, track: &Track) -> bool {
        !track.is_dirty() && self.assumed.is_empty()
    }

    fn recompute(&mut self) {
        self.effective = match &self.base {
            Some(b) if !self.assumed.is_empty() => {
                let mut z = b.topology.zones.clone();
                for a in &self.assumed {
                    z.subtract_from_every_zone(&a.request);
                }
                Some(z)
            }
            _ => None,
        };
    }
}

/// Where a node's entry lives in a [`ReserveCache`] (or that it has none), as
/// [`ReserveCache::slot`] answered for a node name. It stays right for that name as long as
/// [`ReserveCache::layout`] is unchanged, so a caller that can identify a node without its
/// name (the scheduler's node index) may remember it and skip the name lookup: hashing and
/// comparing the name was over a third of a NUMA scheduling cycle, mostly cache misses on
/// the key's heap bytes, five to seven times per node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct NodeSlot(u32);

impl NodeSlot {
    /// No entry for the node (no NRT, never reserved on).
    pub const NONE: NodeSlot = NodeSlot(u32::MAX);

    /// Whether the node has no entry.
    pub fn is_none(self) -> bool {
        self == Self::NONE
    }
}

/// The cache's entries by slot, and the node names' slots.
#[derive(Debug, Clone, Default)]
struct Entries {
    /// Node name to slot in `entries`: the same keys, hasher and insertion history as the
    /// name-keyed map of entries it replaced, so it iterates in the same order.
    names: FastMap<String, u32>,
    /// The entries, by slot; freed slots (in `free`) hold a default entry.
    entries: Vec<NodeEntry>,
    free: Vec<u32>,
    /// Bumped whenever a name gains or loses a slot (see [`NodeSlot`]).
    layout: u64,
    /// Filter verdicts and scores by slot ([`super::verdict_memo`]): every mutable access
    /// to an entry or its track here forgets its slot's answers first, but
    /// [`Entries::streak_mut`].
    memo: Lines,
    /// The entries' dirty flags and streaks, by slot ([`Track`]); freed slots hold a
    /// default one.
    track: Vec<Track>,
}

impl Entries {
    fn slot(&self, node: &str) -> NodeSlot {
        self.names
            .get(node)
            .map_or(NodeSlot::NONE, |&s| NodeSlot(s))
    }

    /// Names, their entries and tracks, in the names' map order.
    fn iter(&self) -> impl Iterator<Item = (&String, &NodeEntry, Track)> + '_ {
        self.names.iter().filter_map(|(n, &s)| {
            let i = s as usize;
            Some((n, self.entries.get(i)?, self.track.get(i).copied()?))
        })
    }

    /// The track of the entry at `slot` (a default one if there is none).
    #[inline]
    fn track(&self, slot: NodeSlot) -> Track {
        self.track.get(slot.0 as usize).copied().unwrap_or_default()
    }

    /// The entry at `slot` and its track, to change either (the slot's answers are
    /// forgotten, as by [`Entries::at_mut`]).
    fn with_track_mut(&mut self, slot: NodeSlot) -> Option<(&mut NodeEntry, &mut Track)> {
        let i = slot.0 as usize;
        self.memo.forget(i);
        Some((self.entries.get_mut(i)?, self.track.get_mut(i)?))
    }

    fn at(&self, slot: NodeSlot) -> Option<&NodeEntry> {
        self.entries.get(slot.0 as usize)
    }

    fn at_mut(&mut self, slot: NodeSlot) -> Option<&mut NodeEntry> {
        self.memo.forget(slot.0 as usize);
        self.entries.get_mut(slot.0 as usize)
    }

    /// The track at `slot` for the Filter's rejection-streak bookkeeping only, keeping
    /// the slot's remembered answers: the caller may change `filtered_out_streak` and
    /// `dirty_overreserved` and nothing else, as no verdict or score reads them (the view
    /// reads `dirty_foreign`, `in_flight`, `base`, `effective`; the staleness of a
    /// rejection `assumed`, `pending` and `check`). Forgetting here would forget every
    /// rejecting node's answers each cycle.
    fn streak_mut(&mut self, slot: NodeSlot) -> Option<&mut Track> {
        self.track.get_mut(slot.0 as usize)
    }

    fn get(&self, node: &str) -> Option<&NodeEntry> {
        self.at(self.slot(node))
    }

    fn get_mut(&mut self, node: &str) -> Option<&mut NodeEntry> {
        self.at_mut(self.slot(node))
    }

    /// `node`'s entry and track, created (default) if it has none.
    fn get_or_insert(&mut self, node: &str) -> (&mut NodeEntry, &mut Track) {
        let slot = match self.names.get(node) {
            Some(&s) => s,
            None => {
                let s = match self.free.pop() {
                    Some(s) => s,
                    None => {
                        self.entries.push(NodeEntry::default());
                        (self.entries.len() - 1) as u32
                    }
                };
                self.names.insert(node.to_string(), s);
                self.layout += 1;
                s
            }
        };
        let i = slot as usize;
        if i >= self.entries.len() {
            self.entries.resize_with(i + 1, NodeEntry::default);
        }
        self.memo.grow_to(self.entries.len());
        self.memo.forget(i);
        if self.track.len() < self.entries.len() {
            self.track.resize(self.entries.len(), Track::default());
        }
        (&mut self.entries[i], &mut self.track[i])
    }

    /// Removes `node`'s entry, returning it.
    fn remove(&mut self, node: &str) -> Option<NodeEntry> {
        let s = self.names.remove(node)?;
        self.layout += 1;
        self.free.push(s);
        self.memo.forget(s as usize);
        if let Some(t) = self.track.get_mut(s as usize) {
            *t = Track::default();
        }
        self.entries.get_mut(s as usize).map(std::mem::take)
    }
}

/// Per-node NUMA cache keyed by node name.
#[derive(Debug, Clone)]
pub struct ReserveCache {
    config: CacheConfig,
    nodes: Entries,
    metrics: NumaCacheMetrics,
    last_resync_ms: Option<i64>,
    /// The pod shapes whose answers [`Entries`] remembers.
    shapes: Shapes,
}

impl ReserveCache {
    /// An empty cache.
    pub fn new(config: CacheConfig) -> Self {
        let mut config = config;
        config.filtered_out_threshold = config.filtered_out_threshold.max(1);
        Self {
            config,
            nodes: Entries::default(),
            metrics: NumaCacheMetrics::default(),
            last_resync_ms: None,
            shapes: Shapes::default(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &CacheConfig {
        &self.config
    }

    /// Where `node`'s entry is ([`NodeSlot::NONE`] if it has none).
    pub fn slot(&self, node: &str) -> NodeSlot {
        self.nodes.slot(node)
    }

    /// Changes whenever a node name gains or loses its slot: a [`NodeSlot`] obtained for a
    /// name under one layout is that name's slot for as long as the layout is the same.
    pub fn layout(&self) -> u64 {
        self.nodes.layout
    }

    /// Counters.
    pub fn metrics(&self) -> &NumaCacheMetrics {
        &self.metrics
    }

    /// Current generation.
    pub fn generation(&self) -> u64 {
        self.metrics.generation
    }

    fn bump_generation(&mut self) {
        self.metrics.generation += 1;
    }

    /// A new or changed NRT for `node` arrived (watch add/update, initial list).
    pub fn update_nrt(&mut self, node: &str, topology: NodeTopology, now_ms: i64) {
        let snapshot = Snapshot {
            topology,
            received_at_ms: now_ms,
        };
        let track_attrs = self.config.resync_scope == ResyncScope::All;
        let (entry, track) = self.nodes.get_or_insert(node);
        let apply_now = self.config.mode != CacheMode::OverReserve
            || entry.base.is_none()
            || entry.is_clean(track);
        if apply_now {
            entry.base = Some(snapshot);
            track.has_base = true;
            entry.pending = None;
            entry.recompute();
            self.bump_generation();
            return;
        }
        let attrs_changed = entry
            .base
            .as_ref()
            .is_some_and(|b| b.topology.tm != snapshot.topology.tm);
        if track_attrs && attrs_changed && !track.dirty_attr {
            track.dirty_attr = true;
            self.metrics.dirty_attribute_change += 1;
        }
        entry.pending = Some(snapshot);
    }

    /// Nodes whose NRT the cache holds, in no particular order.
    pub fn nrt_nodes(&self) -> impl Iterator<Item = &str> + '_ {
        self.nodes
            .iter()
            .filter(|(_, e, _)| e.base.is_some())
            .map(|(n, _, _)| n.as_str())
    }

    /// The NRT of `node` was deleted: the node has no topology data any more.
    pub fn remove_nrt(&mut self, node: &str) {
        let slot = self.nodes.slot(node);
        if let Some((entry, track)) = self.nodes.with_track_mut(slot) {
            let had = entry.base.is_some();
            entry.base = None;
            entry.pending = None;
            entry.assumed.clear();
            entry.effective = None;
            *track = Track::default();
            entry.check = None;
            if entry.in_flight.is_empty() {
                self.nodes.remove(node);
            }
            if had {
                self.bump_generation();
            }
        }
    }

    /// The node was deleted.
    pub fn remove_node(&mut self, node: &str) {
        if self.nodes.remove(node).is_some_and(|e| e.base.is_some()) {
            self.bump_generation();
        }
    }

    /// Reserve: account the pod's effective request on the node (OverReserve), or mark the
    /// node as having an in-flight reservation (DiscardReserved).
    pub fn reserve(&mut self, node: &str, pod: &PodKey, request: &PodNumaRequest, now_ms: i64) {
        match self.config.mode {
            CacheMode::Passthrough => {}
            CacheMode::DiscardReserved => {
                let (entry, _) = self.nodes.get_or_insert(node);
                if !entry.in_flight.contains(&pod.uid) {
                    entry.in_flight.push(pod.uid.clone());
                }
            }
            CacheMode::OverReserve => {
                let Some(entry) = self.nodes.get_mut(node) else {
                    return;
                };
                if entry.base.is_none() {
                    return;
                }
                let assumed = AssumedPod {
                    uid: pod.uid.clone(),
                    namespace: pod.namespace.clone(),
                    name: pod.name.clone(),
                    request: request.effective().clone(),
                    reserved_at_ms: now_ms,
                    bound: false,
                };
                match entry.assumed.iter_mut().find(|a| a.uid == pod.uid) {
                    Some(slot) => *slot = assumed,
                    None => entry.assumed.push(assumed),
                }
                entry.recompute();
            }
        }
    }

    /// Unreserve: the pod will not bind to the node after all.
    pub fn unreserve(&mut self, node: &str, pod_uid: &str) {
        let Some(entry) = self.nodes.get_mut(node) else {
            return;
        };
        match self.config.mode {
            CacheMode::Passthrough => {}
            CacheMode::DiscardReserved => entry.in_flight.retain(|u| u != pod_uid),
            CacheMode::OverReserve => {
                let before = entry.assumed.len();
                entry.assumed.retain(|a| a.uid != pod_uid);
                if entry.assumed.len() != before {
                    entry.recompute();
                }
            }
        }
    }

    /// PostBind: the pod is bound. OverReserve keeps its resources assumed until a matching
    /// resync; DiscardReserved ends the in-flight reservation.
    pub fn pod_bound(&mut self, node: &str, pod_uid: &str) {
        let Some(entry) = self.nodes.get_mut(node) else {
            return;
        };
        match self.config.mode {
            CacheMode::Passthrough => {}
            CacheMode::DiscardReserved => entry.in_flight.retain(|u| u != pod_uid),
            CacheMode::OverReserve => {
                if let Some(a) = entry.assumed.iter_mut().find(|a| a.uid == pod_uid) {
                    a.bound = true;
                }
            }
        }
    }

    /// A pod bound by another scheduler was seen on `node` (add, update or delete). Per
    /// `foreign_pods_detect`, the node becomes dirty and unusable until a matching resync.
    pub fn foreign_pod(&mut self, node: &str, pod: &PodNumaRequest) {
        if self.config.mode != CacheMode::OverReserve {
            return;
        }
        let mode = self.config.foreign_pods_detect;
        let slot = self.nodes.slot(node);
        let Some((entry, track)) = self.nodes.with_track_mut(slot) else {
            return;
        };
        let Some(base) = &entry.base else {
            return;
        };
        let relevant = match mode {
            ForeignPodsDetect::None => false,
            ForeignPodsDetect::All => true,
            ForeignPodsDetect::OnlyExclusiveResources => {
                pod.has_exclusive_resources(|n| base.topology.has_resource(n))
            }
        };
        if relevant && !track.dirty_foreign {
            track.dirty_foreign = true;
            self.metrics.dirty_foreign_pods += 1;
        }
    }

    /// The filter rejected `node` (not for unusable data). After
    /// `filtered_out_threshold` rejections in a row the node is dirty.
    pub fn filtered_out(&mut self, node: &str) {
        self.filtered_out_at(self.slot(node));
    }

    /// [`ReserveCache::filtered_out`] by slot.
    pub fn filtered_out_at(&mut self, slot: NodeSlot) {
        if self.config.mode != CacheMode::OverReserve {
            return;
        }
        let threshold = self.config.filtered_out_threshold;
        let Some(track) = self.nodes.streak_mut(slot) else {
            return;
        };
        if !track.has_base {
            return;
        }
        track.filtered_out_streak = track.filtered_out_streak.saturating_add(1);
        if track.filtered_out_streak >= threshold && !track.dirty_overreserved {
            track.dirty_overreserved = true;
            self.metrics.dirty_filtered_out += 1;
        }
    }

    /// The filter accepted `node`: the rejection streak restarts.
    pub fn filter_passed(&mut self, node: &str) {
        self.filter_passed_at(self.slot(node));
    }

    /// [`ReserveCache::filter_passed`] by slot.
    pub fn filter_passed_at(&mut self, slot: NodeSlot) {
        if let Some(track) = self.nodes.streak_mut(slot) {
            track.filtered_out_streak = 0;
        }
    }

    /// Filters and tracks the outcome (streak and dirty marking) in one call.
    pub fn filter_and_track(
        &mut self,
        node: &str,
        pod: &PodNumaRequest,
        allocatable: &impl NodeAllocatable,
    ) -> Result<(), NumaReject> {
        let result = filter_node(self.view(node), pod, allocatable);
        match &result {
            Ok(()) => self.filter_passed(node),
            Err(NumaReject::InvalidTopologyData) => {}
            Err(_) => self.filtered_out(node),
        }
        result
    }

    /// What filter and score see for `node`.
    pub fn view(&self, node: &str) -> NodeNumaView<'_> {
        self.view_at(self.slot(node))
    }

    /// [`ReserveCache::view`] by slot.
    pub fn view_at(&self, slot: NodeSlot) -> NodeNumaView<'_> {
        let Some(entry) = self.nodes.at(slot) else {
            return NodeNumaView::NoTopology;
        };
        match self.config.mode {
            CacheMode::DiscardReserved if !entry.in_flight.is_empty() => {
                return NodeNumaView::Unusable(UnusableReason::ReservationInFlight);
            }
            CacheMode::OverReserve if self.nodes.track(slot).dirty_foreign => {
                return NodeNumaView::Unusable(UnusableReason::ForeignPods);
            }
            _ => {}
        }
        match &entry.base {
            None => NodeNumaView::NoTopology,
            Some(b) => NodeNumaView::Ready {
                topology: &b.topology,
                zones: entry.effective.as_ref().unwrap_or(&b.topology.zones),
            },
        }
    }

    /// The shape of `request` scored with `strategy`, if interned
    /// ([`ReserveCache::intern_shape`]): the key under which [`ReserveCache::filter_verdict_at`]
    /// and [`ReserveCache::score_at`] remember their answers.
    pub fn shape(&self, strategy: &ScoringStrategy, request: &PodNumaRequest) -> Option<ShapeId> {
        self.shapes.get(strategy, request)
    }

    /// Interns the shape of `request` scored with `strategy` (see
    /// [`super::verdict_memo`]); `None` when its answers cannot be remembered.
    pub fn intern_shape(
        &mut self,
        strategy: &ScoringStrategy,
        request: &PodNumaRequest,
    ) -> Option<ShapeId> {
        self.shapes.intern(strategy, request)
    }

    /// The Filter's whole answer for `pod` on the node at `slot`: the view through
    /// [`filter_node_kind`], and for a rejection whether the node's data may be stale.
    pub fn filter_verdict_fresh(
        &self,
        slot: NodeSlot,
        pod: &PodNumaRequest,
        node: &impl NodeAllocatable,
    ) -> FilterVerdict {
        let view = self.view_at(slot);
        match filter_node_kind(view, pod, node) {
            Ok(()) => FilterVerdict::Pass,
            Err(RejectKind::InvalidTopologyData) => FilterVerdict::Unusable(match view {
                NodeNumaView::Unusable(reason) => reason,
                _ => UnusableReason::ForeignPods,
            }),
            Err(kind) => FilterVerdict::Reject {
                kind,
                stale: (!kind.is_internal_error() && self.is_stale_at(slot))
                    .then(|| StaleReason::from_check(self.resync_check_at(slot))),
            },
        }
    }

    /// [`ReserveCache::filter_verdict_fresh`], remembered per node for `shape` until the
    /// node's entry changes. `shape` must be the shape of `pod`
    /// ([`ReserveCache::shape`]); without one the verdict is worked out every time.
    #[inline]
    pub fn filter_verdict_at(
        &self,
        slot: NodeSlot,
        shape: Option<ShapeId>,
        pod: &PodNumaRequest,
        node: &impl NodeAllocatable,
    ) -> FilterVerdict {
        let Some(shape) = shape.filter(|_| !slot.is_none()) else {
            return self.filter_verdict_fresh(slot, pod, node);
        };
        let at = slot.0 as usize;
        if let Some(v) = self.nodes.memo.filter(at, shape) {
            debug_assert_eq!(v, self.filter_verdict_fresh(slot, pod, node));
            return v;
        }
        let v = self.filter_verdict_fresh(slot, pod, node);
        self.nodes.memo.put_filter(at, shape, v);
        v
    }

    /// [`score_node`] on the node at `slot`, remembered per node for `shape` until the
    /// node's entry changes. `shape` must be the shape of (`strategy`, `pod`)
    /// ([`ReserveCache::shape`]); without one the score is worked out every time.
    #[inline]
    pub fn score_at(
        &self,
        strategy: &ScoringStrategy,
        slot: NodeSlot,
        shape: Option<ShapeId>,
        pod: &PodNumaRequest,
    ) -> i64 {
        let Some(shape) = shape.filter(|_| !slot.is_none()) else {
            return score_node(strategy, self.view_at(slot), pod);
        };
        let at = slot.0 as usize;
        if let Some(s) = self.nodes.memo.score(at, shape) {
            debug_assert_eq!(s, score_node(strategy, self.view_at(slot), pod));
            return s;
        }
        let s = score_node(strategy, self.view_at(slot), pod);
        self.nodes.memo.put_score(at, shape, s);
        s
    }

    /// Whether [`ReserveCache::view_at`] is [`NodeNumaView::Unusable`] for `slot`, from the
    /// two flags that decide it: the Filter feedback asks for every rejected node, and
    /// the whole view also reads the snapshot and the effective zones, a cache line or two
    /// further into the entry.
    pub fn is_unusable_at(&self, slot: NodeSlot) -> bool {
        match self.config.mode {
            CacheMode::DiscardReserved => {
                self.nodes.at(slot).is_some_and(|e| !e.in_flight.is_empty())
            }
            CacheMode::OverReserve => self.nodes.track(slot).dirty_foreign,
            CacheMode::Passthrough => false,
        }
    }

    /// The zones filter and score use for `node` (assumed pods subtracted), if usable.
    pub fn zones(&self, node: &str) -> Option<&NumaZones> {
        match self.view(node) {
            NodeNumaView::Ready { zones, .. } => Some(zones),
            _ => None,
        }
    }

    /// The cached NRT of `node` (as last applied, without assumed pods).
    pub fn topology(&self, node: &str) -> Option<&NodeTopology> {
        self.nodes.get(node)?.base.as_ref().map(|b| &b.topology)
    }

    /// Whether `node` is dirty for any reason.
    pub fn is_dirty(&self, node: &str) -> bool {
        self.is_dirty_at(self.slot(node))
    }

    /// [`ReserveCache::is_dirty`] by slot.
    pub fn is_dirty_at(&self, slot: NodeSlot) -> bool {
        self.nodes.track(slot).is_dirty()
    }

    /// The last resync check of `node` that did not flush it, while it stays unflushed.
    pub fn resync_check(&self, node: &str) -> Option<ResyncCheck> {
        self.resync_check_at(self.slot(node))
    }

    /// [`ReserveCache::resync_check`] by slot.
    pub fn resync_check_at(&self, slot: NodeSlot) -> Option<ResyncCheck> {
        self.nodes.at(slot)?.check
    }

    /// Whether what filter and score see for `node` may differ from what the node has:
    /// pods are assumed on it (pessimistically subtracted from every zone) or a newer NRT
    /// is held back until the node resyncs. A rejection there may go away at a resync.
    pub fn is_stale(&self, node: &str) -> bool {
        self.is_stale_at(self.slot(node))
    }

    /// [`ReserveCache::is_stale`] by slot.
    pub fn is_stale_at(&self, slot: NodeSlot) -> bool {
        self.nodes
            .at(slot)
            .is_some_and(|e| !e.assumed.is_empty() || e.pending.is_some())
    }

    /// Number of pods assumed on `node`.
    pub fn assumed_count(&self, node: &str) -> usize {
        self.nodes.get(node).map_or(0, |e| e.assumed.len())
    }

    /// Dirty nodes, sorted.
    pub fn dirty_nodes(&self) -> Vec<&str> {
        let mut v: Vec<&str> = self
            .nodes
            .iter()
            .filter(|(_, _, t)| t.is_dirty())
            .map(|(n, _, _)| n.as_str())
            .collect();
        v.sort_unstable();
        v
    }

    /// Whether a resync is due at `now_ms`.
    pub fn resync_due(&self, now_ms: i64) -> bool {
        self.config.mode == CacheMode::OverReserve
            && self
                .last_resync_ms
                .is_none_or(|last| now_ms.saturating_sub(last) >= self.config.resync_period_ms)
    }

    /// Runs a resync pass if the period has elapsed. `pods_on_node(node, nrt)` returns the
    /// pods the scheduler believes are on the node (mirroring the agents: bound, not Pending;
    /// see the reference), with their exclusivity computed against that NRT.
    pub fn resync(
        &mut self,
        now_ms: i64,
        mut pods_on_node: impl FnMut(&str, &NodeTopology) -> Vec<PodIdent>,
    ) -> ResyncOutcome {
        let mut out = ResyncOutcome::default();
        if !self.resync_due(now_ms) {
            return out;
        }
        out.ran = true;
        self.last_resync_ms = Some(now_ms);
        self.metrics.resync_runs += 1;

        let mut maybe_overreserved: Vec<String> = Vec::new();
        let mut config_changed: Vec<String> = Vec::new();
        for (name, _, t) in self.nodes.iter() {
            if t.dirty_overreserved || t.dirty_foreign {
                maybe_overreserved.push(name.clone());
            } else if t.dirty_attr {
                config_changed.push(name.clone());
            }
        }
        maybe_overreserved.sort_unstable();
        config_changed.sort_unstable();

        for node in maybe_overreserved {
            let slot = self.nodes.slot(&node);
            let Some(entry) = self.nodes.at(slot) else {
                continue;
            };
            let Some(candidate) = entry.pending.as_ref().or(entry.base.as_ref()) else {
                continue;
            };
            self.metrics.resync_attempts += 1;
            out.attempted += 1;
            let Some(fp) = &candidate.topology.fingerprint else {
                self.metrics.fingerprint_missing += 1;
                out.missing_fingerprint += 1;
                // A pure attribute change can still be applied below.
                let attr = self.nodes.track(slot).dirty_attr;
                out.checks_changed += self.set_check(&node, ResyncCheck::NoFingerprint);
                if attr {
                    config_changed.push(node);
                }
                continue;
            };
            let only_exclusive = !fp.from_annotation
                && match self.config.resync_method {
                    ResyncMethod::All => false,
                    ResyncMethod::OnlyExclusiveResources => true,
                    ResyncMethod::Autodetect => {
                        fp.method == Some(FingerprintMethod::WithExclusiveResources)
                    }
                };
            let pods = pods_on_node(&node, &candidate.topology);
            let mut computed = Fingerprint::with_capacity(pods.len());
            for p in pods.iter().filter(|p| !only_exclusive || p.exclusive) {
                computed.add(&p.namespace, &p.name);
            }
            match computed.check(&fp.signature) {
                Ok(()) => {
                    self.metrics.fingerprint_matches += 1;
                    out.matched += 1;
                    self.flush(&node, &pods, true);
                    out.flushed.push(node);
                }
                Err(FingerprintError::SignatureMismatch { .. })
                | Err(FingerprintError::Malformed)
                | Err(FingerprintError::IncompatibleVersion) => {
                    self.metrics.fingerprint_mismatches += 1;
                    out.mismatched += 1;
                    out.checks_changed += self.set_check(&node, ResyncCheck::Mismatch);
                    if self.nodes.track(self.nodes.slot(&node)).dirty_attr {
                        config_changed.push(node);
                    }
                }
            }
        }

        for node in config_changed {
            let slot = self.nodes.slot(&node);
            let has_pending = self
                .nodes
                .at(slot)
                .is_some_and(|e| e.pending.is_some() && self.nodes.track(slot).dirty_attr);
            if has_pending {
                self.flush(&node, &[], false);
                out.flushed.push(node);
            }
        }

        out.flushed.sort_unstable();
        out.flushed.dedup();
        if !out.flushed.is_empty() {
            self.metrics.flushes += out.flushed.len() as u64;
            self.bump_generation();
        }
        out
    }

    /// Replaces the cached NRT with the newest one. With `fingerprint_matched`, every dirty
    /// flag is cleared and assumed pods accounted in that NRT (present in `pods` and reserved
    /// before it was received) are dropped; otherwise (attribute change) only the attribute
    /// flag is cleared and every assumed pod stays (nothing proves the NRT accounts them;
    /// upstream drops them all).
    fn flush(&mut self, node: &str, pods: &[PodIdent], fingerprint_matched: bool) {
        let slot = self.nodes.slot(node);
        let Some((entry, track)) = self.nodes.with_track_mut(slot) else {
            return;
        };
        if let Some(p) = entry.pending.take() {
            entry.base = Some(p);
            track.has_base = true;
        }
        let Some(received) = entry.base.as_ref().map(|b| b.received_at_ms) else {
            return;
        };
        if fingerprint_matched {
            entry.assumed.retain(|a| {
                let listed = pods
                    .iter()
                    .any(|p| p.namespace == a.namespace && p.name == a.name);
                !(listed && a.reserved_at_ms < received)
            });
            track.dirty_overreserved = false;
            track.dirty_foreign = false;
            track.filtered_out_streak = 0;
            entry.check = None;
        }
        track.dirty_attr = false;
        entry.recompute();
    }

    /// Records `check` for `node`; 1 if it changed.
    fn set_check(&mut self, node: &str, check: ResyncCheck) -> usize {
        match self.nodes.get_mut(node) {
            Some(e) if e.check != Some(check) => {
                e.check = Some(check);
                1
            }
            _ => 0,
        }
    }

    /// Debug helper: whether the assumed pod `uid` on `node` was reported bound.
    pub fn is_assumed_bound(&self, node: &str, uid: &str) -> Option<bool> {
        self.nodes
            .get(node)?
            .assumed
            .iter()
            .find(|a| a.uid == uid)
            .map(|a| a.bound)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::numa::fingerprint;
    use crate::numa::policy::AnyResource;
    use crate::numa::score::ScoringStrategyType;
    use crate::numa::types::{NrtFingerprint, TmPolicy, TmScope, TopologyManagerConfig};

    const NODE: &str = "worker-0";

    fn zones(cpu0: i64, cpu1: i64) -> NumaZones {
        NumaZones::new()
            .with_zone(
                0,
                &[("cpu", cpu0 * 1000), ("memory", 8 << 30), ("vendor/nic", 1)],
                &[],
            )
            .with_zone(1, &[("cpu", cpu1 * 1000), ("memory", 8 << 30)], &[])
    }

    fn topo(cpu0: i64, cpu1: i64, pods: &[(&str, &str)]) -> NodeTopology {
        NodeTopology {
            zones: zones(cpu0, cpu1),
            tm: TopologyManagerConfig::new(TmPolicy::SingleNumaNode, TmScope::Container),
            fingerprint: Some(NrtFingerprint {
                signature: fingerprint::sign(pods.iter().copied()),
                method: Some(FingerprintMethod::All),
                from_annotation: false,
            }),
        }
    }

    fn gpod(cpu: &str) -> PodNumaRequest {
        PodNumaRequest::single(
            QosClass::Guaranteed,
            Resources::parse([("cpu", cpu), ("memory", "1Gi")]).expect("valid"),
        )
    }

    fn key(name: &str) -> PodKey {
        PodKey {
            uid: format!("uid-{name}"),
            namespace: "ns".into(),
            name: name.into(),
        }
    }

    fn ident(name: &str) -> PodIdent {
        PodIdent {
            namespace: "ns".into(),
            name: name.into(),
            exclusive: true,
        }
    }

    fn cache() -> ReserveCache {
        let mut c = ReserveCache::new(CacheConfig::default());
        c.update_nrt(NODE, topo(4, 4, &[]), 0);
        c
    }

    fn cpu(c: &ReserveCache, id: u8) -> Option<i64> {
        c.zones(NODE).and_then(|z| z.available(id, "cpu"))
    }

    fn fits(c: &ReserveCache, cpu: &str) -> bool {
        filter_node(c.view(NODE), &gpod(cpu), &AnyResource).is_ok()
    }

    #[test]
    fn reserve_subtracts_from_every_zone_and_makes_the_node_look_full() {
        let mut c = cache();
        assert!(fits(&c, "4"));
        c.reserve(NODE, &key("a"), &gpod("3"), 10);
        // 3 CPUs taken from both zones (pessimistic), memory too.
        assert_eq!(cpu(&c, 0), Some(1000));
        assert_eq!(cpu(&c, 1), Some(1000));
        assert_eq!(
            c.zones(NODE).and_then(|z| z.available(0, "memory")),
            Some(7 << 30)
        );
        // The cached NRT itself is untouched.
        assert_eq!(
            c.topology(NODE).and_then(|t| t.zones.available(0, "cpu")),
            Some(4000)
        );
        assert!(!fits(&c, "2"));
        // Clamped at zero, never negative.
        c.reserve(NODE, &key("b"), &gpod("3"), 11);
        assert_eq!(cpu(&c, 0), Some(0));
        assert_eq!(c.assumed_count(NODE), 2);
        // Re-reserving the same pod overwrites, not duplicates.
        c.reserve(NODE, &key("b"), &gpod("3"), 12);
        assert_eq!(c.assumed_count(NODE), 2);
    }

    #[test]
    fn unreserve_restores() {
        let mut c = cache();
        c.reserve(NODE, &key("a"), &gpod("3"), 10);
        c.reserve(NODE, &key("b"), &gpod("1"), 10);
        c.unreserve(NODE, "uid-a");
        assert_eq!(cpu(&c, 0), Some(3000));
        c.unreserve(NODE, "uid-b");
        assert_eq!(cpu(&c, 0), Some(4000));
        assert!(fits(&c, "4"));
        c.unreserve(NODE, "uid-unknown");
        c.unreserve("other-node", "uid-a");
    }

    #[test]
    fn nodes_without_nrt_are_ignored_by_reserve_and_pass_the_filter() {
        let mut c = cache();
        c.reserve("no-nrt", &key("a"), &gpod("3"), 1);
        assert_eq!(c.assumed_count("no-nrt"), 0);
        assert_eq!(c.view("no-nrt"), NodeNumaView::NoTopology);
        assert!(filter_node(c.view("no-nrt"), &gpod("64"), &AnyResource).is_ok());
        let s = ScoringStrategy::new(ScoringStrategyType::LeastAllocated);
        assert_eq!(score_node(&s, c.view("no-nrt"), &gpod("1")), 0);
    }

    #[test]
    fn nrt_updates_wait_while_pods_are_assumed() {
        let mut c = cache();
        c.reserve(NODE, &key("a"), &gpod("3"), 10);
        c.update_nrt(NODE, topo(1, 4, &[("ns", "a")]), 20);
        // Not applied: the view still is the old NRT minus the assumed pod.
        assert_eq!(cpu(&c, 0), Some(1000));
        assert_eq!(cpu(&c, 1), Some(1000));
        // A clean node takes updates at once.
        c.update_nrt("fresh", topo(2, 2, &[]), 20);
        c.update_nrt("fresh", topo(3, 3, &[]), 21);
        assert_eq!(
            c.zones("fresh").and_then(|z| z.available(0, "cpu")),
            Some(3000)
        );
    }

    #[test]
    fn fingerprint_match_flushes() {
        let mut c = cache();
        c.reserve(NODE, &key("a"), &gpod("3"), 10);
        c.pod_bound(NODE, "uid-a");
        assert_eq!(c.is_assumed_bound(NODE, "uid-a"), Some(true));
        assert!(!fits(&c, "2"));
        c.filtered_out(NODE);
        assert!(c.is_dirty(NODE));
        // The agent's NRT now shows pod a on node-0 (1 CPU left there).
        c.update_nrt(NODE, topo(1, 4, &[("ns", "a")]), 20);
        let gen = c.generation();
        let out = c.resync(1000, |node, _| {
            assert_eq!(node, NODE);
            vec![ident("a")]
        });
        assert_eq!(
            (out.ran, out.attempted, out.matched, out.mismatched),
            (true, 1, 1, 0)
        );
        assert_eq!(out.flushed, vec![NODE.to_string()]);
        assert!(!c.is_dirty(NODE));
        assert_eq!(c.assumed_count(NODE), 0);
        assert_eq!(cpu(&c, 0), Some(1000));
        assert_eq!(cpu(&c, 1), Some(4000));
        assert!(fits(&c, "4"));
        assert_eq!(c.generation(), gen + 1);
        let m = c.metrics();
        assert_eq!(
            (
                m.dirty_filtered_out,
                m.resync_attempts,
                m.fingerprint_matches,
                m.flushes
            ),
            (1, 1, 1, 1)
        );
    }

    #[test]
    fn fingerprint_mismatch_keeps_the_node_dirty() {
        let mut c = cache();
        c.reserve(NODE, &key("a"), &gpod("3"), 10);
        c.filtered_out(NODE);
        // The agent has not seen pod a yet.
        c.update_nrt(NODE, topo(4, 4, &[]), 20);
        let out = c.resync(1000, |_, _| vec![ident("a")]);
        assert_eq!((out.matched, out.mismatched), (0, 1));
        assert!(out.flushed.is_empty());
        assert!(c.is_dirty(NODE));
        assert_eq!(c.assumed_count(NODE), 1);
        assert_eq!(cpu(&c, 0), Some(1000));
        assert_eq!(c.metrics().fingerprint_mismatches, 1);
        assert_eq!(c.resync_check(NODE), Some(ResyncCheck::Mismatch));
        assert_eq!(out.checks_changed, 1);
        assert!(c.is_stale(NODE));
        // Next period: the agent caught up → match → clean.
        c.update_nrt(NODE, topo(1, 4, &[("ns", "a")]), 3000);
        assert!(
            !c.resync(1500, |_, _| vec![ident("a")]).ran,
            "period not elapsed"
        );
        let out = c.resync(6000, |_, _| vec![ident("a")]);
        assert_eq!(out.matched, 1);
        assert!(!c.is_dirty(NODE));
        assert_eq!(c.resync_check(NODE), None, "a flush clears the check");
        assert!(!c.is_stale(NODE));
    }

    #[test]
    fn missing_or_malformed_fingerprints_keep_the_node_dirty() {
        let mut c = cache();
        c.reserve(NODE, &key("a"), &gpod("3"), 10);
        c.filtered_out(NODE);
        let mut t = topo(1, 4, &[]);
        t.fingerprint = None;
        c.update_nrt(NODE, t.clone(), 20);
        let out = c.resync(0, |_, _| vec![ident("a")]);
        assert_eq!((out.missing_fingerprint, out.matched), (1, 0));
        assert!(c.is_dirty(NODE));
        assert_eq!(c.resync_check(NODE), Some(ResyncCheck::NoFingerprint));
        t.fingerprint = Some(NrtFingerprint {
            signature: "pfp0v002e477a4e3b2fc0ec6".into(),
            method: None,
            from_annotation: false,
        });
        c.update_nrt(NODE, t, 30);
        let out = c.resync(10_000, |_, _| vec![ident("a")]);
        assert_eq!(out.mismatched, 1);
        assert!(c.is_dirty(NODE));
    }

    /// [`ReserveCache::is_unusable_at`] says what [`ReserveCache::view_at`] says.
    fn agree(c: &ReserveCache, node: &str) {
        let slot = c.slot(node);
        assert_eq!(
            c.is_unusable_at(slot),
            matches!(c.view_at(slot), NodeNumaView::Unusable(_)),
            "{node}"
        );
    }

    #[test]
    fn foreign_pod_blocks_until_resync() {
        let mut c = cache();
        let foreign = gpod("2");
        agree(&c, NODE);
        c.foreign_pod(NODE, &foreign);
        agree(&c, NODE);
        assert_eq!(
            c.view(NODE),
            NodeNumaView::Unusable(UnusableReason::ForeignPods)
        );
        assert_eq!(
            filter_node(c.view(NODE), &gpod("1"), &AnyResource),
            Err(NumaReject::InvalidTopologyData)
        );
        let s = ScoringStrategy::new(ScoringStrategyType::LeastAllocated);
        assert_eq!(score_node(&s, c.view(NODE), &gpod("1")), 0);
        // Burstable pods still score 100 and BestEffort pods still pass.
        let be = PodNumaRequest::single(QosClass::BestEffort, Resources::new());
        assert!(filter_node(c.view(NODE), &be, &AnyResource).is_ok());
        // Filter rejections for unusable data do not count as "filtered out".
        assert_eq!(
            c.filter_and_track(NODE, &gpod("1"), &AnyResource),
            Err(NumaReject::InvalidTopologyData)
        );
        assert_eq!(c.metrics().dirty_filtered_out, 0);
        // A mismatching resync keeps it blocked.
        c.update_nrt(NODE, topo(4, 4, &[]), 10);
        let out = c.resync(100, |_, _| vec![ident("other")]);
        assert_eq!(out.mismatched, 1);
        assert!(matches!(c.view(NODE), NodeNumaView::Unusable(_)));
        // The agent reports the foreign pod; the scheduler lists it too → unblocked.
        c.update_nrt(NODE, topo(2, 4, &[("ns", "other")]), 200);
        let out = c.resync(10_000, |_, _| vec![ident("other")]);
        assert_eq!(out.matched, 1);
        assert!(matches!(c.view(NODE), NodeNumaView::Ready { .. }));
        agree(&c, NODE);
        assert_eq!(cpu(&c, 0), Some(2000));
        assert_eq!(c.metrics().dirty_foreign_pods, 1);
    }

    #[test]
    fn foreign_pod_detection_modes() {
        let burstable = PodNumaRequest::single(
            QosClass::Burstable,
            Resources::parse([("cpu", "1")]).expect("valid"),
        );
        let with_nic = PodNumaRequest::single(
            QosClass::Burstable,
            Resources::parse([("cpu", "1"), ("vendor/nic", "1")]).expect("valid"),
        );
        for (mode, burstable_blocks, nic_blocks) in [
            (ForeignPodsDetect::None, false, false),
            (ForeignPodsDetect::All, true, true),
            (ForeignPodsDetect::OnlyExclusiveResources, false, true),
        ] {
            let cfg = CacheConfig {
                foreign_pods_detect: mode,
                ..CacheConfig::default()
            };
            let mut c = ReserveCache::new(cfg);
            c.update_nrt(NODE, topo(4, 4, &[]), 0);
            c.foreign_pod(NODE, &burstable);
            agree(&c, NODE);
            assert_eq!(
                matches!(c.view(NODE), NodeNumaView::Unusable(_)),
                burstable_blocks,
                "{mode:?}"
            );
            let mut c = ReserveCache::new(cfg);
            c.update_nrt(NODE, topo(4, 4, &[]), 0);
            c.foreign_pod(NODE, &with_nic);
            agree(&c, NODE);
            assert_eq!(
                matches!(c.view(NODE), NodeNumaView::Unusable(_)),
                nic_blocks,
                "{mode:?}"
            );
        }
        // Nodes without NRT are never blocked.
        let mut c = ReserveCache::new(CacheConfig::default());
        c.foreign_pod("nope", &burstable);
        assert_eq!(c.view("nope"), NodeNumaView::NoTopology);
    }

    #[test]
    fn filtered_out_threshold_counts_rejections_in_a_row() {
        let cfg = CacheConfig {
            filtered_out_threshold: 3,
            ..CacheConfig::default()
        };
        let mut c = ReserveCache::new(cfg);
        c.update_nrt(NODE, topo(1, 1, &[]), 0);
        let big = gpod("2");
        assert!(c.filter_and_track(NODE, &big, &AnyResource).is_err());
        assert!(c.filter_and_track(NODE, &big, &AnyResource).is_err());
        assert!(c.filter_and_track(NODE, &gpod("1"), &AnyResource).is_ok());
        assert!(c.filter_and_track(NODE, &big, &AnyResource).is_err());
        assert!(c.filter_and_track(NODE, &big, &AnyResource).is_err());
        assert!(!c.is_dirty(NODE), "the streak was broken");
        assert!(c.filter_and_track(NODE, &big, &AnyResource).is_err());
        assert!(c.is_dirty(NODE));
        assert_eq!(c.dirty_nodes(), vec![NODE]);
        // Default threshold: one rejection is enough.
        let mut c = cache();
        c.filtered_out(NODE);
        assert!(c.is_dirty(NODE));
    }

    #[test]
    fn pods_reserved_after_the_snapshot_are_not_flushed_away() {
        let mut c = cache();
        // a reserved and bound; the agent's NRT (received at 20) accounts it.
        c.reserve(NODE, &key("a"), &gpod("1"), 10);
        c.update_nrt(NODE, topo(3, 4, &[("ns", "a")]), 20);
        // b reserved after that NRT was received, not yet bound (not in the pod list).
        c.reserve(NODE, &key("b"), &gpod("2"), 30);
        // c reserved after the NRT too, and already listed (e.g. a recreated pod with the same
        // name as one the agent saw): still kept.
        c.reserve(NODE, &key("c"), &gpod("1"), 40);
        c.filtered_out(NODE);
        let out = c.resync(1000, |_, _| vec![ident("a")]);
        // Pod set {a} vs NRT {a}: match, flush; b and c stay assumed.
        assert_eq!(out.matched, 1);
        assert_eq!(c.assumed_count(NODE), 2);
        // New base 3/4 minus b (2) and c (1) in every zone.
        assert_eq!(cpu(&c, 0), Some(0));
        assert_eq!(cpu(&c, 1), Some(1000));
    }

    #[test]
    fn exclusive_resources_method() {
        let mut c = cache();
        c.reserve(NODE, &key("a"), &gpod("1"), 10);
        c.filtered_out(NODE);
        let mut t = topo(3, 4, &[("ns", "a")]);
        if let Some(fp) = t.fingerprint.as_mut() {
            fp.method = Some(FingerprintMethod::WithExclusiveResources);
        }
        c.update_nrt(NODE, t, 20);
        let shared = PodIdent {
            namespace: "kube-system".into(),
            name: "proxy".into(),
            exclusive: false,
        };
        // Autodetect + agent method with-exclusive-resources: the shared pod is left out.
        let out = c.resync(1000, |_, _| vec![ident("a"), shared.clone()]);
        assert_eq!(out.matched, 1);
        assert_eq!(c.assumed_count(NODE), 0);

        // Forced "All": the shared pod is included → mismatch.
        let cfg = CacheConfig {
            resync_method: ResyncMethod::All,
            ..CacheConfig::default()
        };
        let mut c = ReserveCache::new(cfg);
        c.update_nrt(NODE, topo(4, 4, &[]), 0);
        c.reserve(NODE, &key("a"), &gpod("1"), 10);
        c.filtered_out(NODE);
        let mut t = topo(3, 4, &[("ns", "a")]);
        if let Some(fp) = t.fingerprint.as_mut() {
            fp.method = Some(FingerprintMethod::WithExclusiveResources);
        }
        c.update_nrt(NODE, t, 20);
        let out = c.resync(1000, |_, _| vec![ident("a"), shared.clone()]);
        assert_eq!(out.mismatched, 1);
    }

    #[test]
    fn annotation_fingerprints_always_use_all_pods() {
        let cfg = CacheConfig {
            resync_method: ResyncMethod::OnlyExclusiveResources,
            ..CacheConfig::default()
        };
        let mut c = ReserveCache::new(cfg);
        c.update_nrt(NODE, topo(4, 4, &[]), 0);
        c.reserve(NODE, &key("a"), &gpod("1"), 10);
        c.filtered_out(NODE);
        let mut t = topo(3, 4, &[]);
        t.fingerprint = Some(NrtFingerprint {
            signature: fingerprint::sign([("ns", "a"), ("kube-system", "proxy")]),
            method: None,
            from_annotation: true,
        });
        c.update_nrt(NODE, t, 20);
        let shared = PodIdent {
            namespace: "kube-system".into(),
            name: "proxy".into(),
            exclusive: false,
        };
        let out = c.resync(1000, |_, _| vec![ident("a"), shared.clone()]);
        assert_eq!(out.matched, 1);
    }

    #[test]
    fn attribute_change_flushes_without_fingerprint() {
        let mut c = cache();
        c.reserve(NODE, &key("a"), &gpod("1"), 10);
        let mut t = topo(3, 4, &[("ns", "zzz")]);
        t.tm = TopologyManagerConfig::new(TmPolicy::None, TmScope::Container);
        c.update_nrt(NODE, t, 20);
        assert!(c.is_dirty(NODE));
        assert_eq!(c.metrics().dirty_attribute_change, 1);
        // The pod closure is not needed for a pure attribute change.
        let out = c.resync(1000, |_, _| {
            panic!("no fingerprint check for attribute changes")
        });
        assert_eq!(out.flushed, vec![NODE.to_string()]);
        assert!(!c.is_dirty(NODE));
        assert_eq!(c.topology(NODE).map(|t| t.tm.policy), Some(TmPolicy::None));
        // Without a fingerprint match nothing proves the NRT accounts pod a: still assumed,
        // now subtracted from the new NRT.
        assert_eq!(c.assumed_count(NODE), 1);
        assert_eq!(cpu(&c, 0), Some(2000));
        // With resyncScope OnlyResources attribute changes are not tracked.
        let mut c = ReserveCache::new(CacheConfig {
            resync_scope: ResyncScope::OnlyResources,
            ..CacheConfig::default()
        });
        c.update_nrt(NODE, topo(4, 4, &[]), 0);
        c.reserve(NODE, &key("a"), &gpod("1"), 10);
        let mut t = topo(3, 4, &[]);
        t.tm = TopologyManagerConfig::new(TmPolicy::None, TmScope::Container);
        c.update_nrt(NODE, t, 20);
        assert!(!c.is_dirty(NODE));
    }

    #[test]
    fn attribute_change_with_foreign_pods_keeps_the_node_blocked() {
        let mut c = cache();
        c.reserve(NODE, &key("a"), &gpod("1"), 10);
        c.foreign_pod(NODE, &gpod("1"));
        let mut t = topo(3, 4, &[("ns", "zzz")]);
        t.tm = TopologyManagerConfig::new(TmPolicy::None, TmScope::Pod);
        c.update_nrt(NODE, t, 20);
        let out = c.resync(1000, |_, _| vec![ident("a")]);
        assert_eq!(out.mismatched, 1);
        assert_eq!(out.flushed, vec![NODE.to_string()]);
        assert_eq!(c.topology(NODE).map(|t| t.tm.scope), Some(TmScope::Pod));
        assert!(matches!(
            c.view(NODE),
            NodeNumaView::Unusable(UnusableReason::ForeignPods)
        ));
    }

    #[test]
    fn passthrough_applies_every_update_and_ignores_the_rest() {
        let mut c = ReserveCache::new(CacheConfig {
            mode: CacheMode::Passthrough,
            ..CacheConfig::default()
        });
        c.update_nrt(NODE, topo(4, 4, &[]), 0);
        c.reserve(NODE, &key("a"), &gpod("3"), 1);
        assert_eq!(cpu(&c, 0), Some(4000));
        c.filtered_out(NODE);
        c.foreign_pod(NODE, &gpod("1"));
        agree(&c, NODE);
        agree(&c, "no-such-node");
        assert!(!c.is_dirty(NODE));
        assert!(matches!(c.view(NODE), NodeNumaView::Ready { .. }));
        c.update_nrt(NODE, topo(1, 4, &[]), 2);
        assert_eq!(cpu(&c, 0), Some(1000));
        assert!(!c.resync(10_000, |_, _| Vec::new()).ran);
    }

    #[test]
    fn discard_reserved_blocks_nodes_with_in_flight_reservations() {
        let mut c = ReserveCache::new(CacheConfig {
            mode: CacheMode::DiscardReserved,
            ..CacheConfig::default()
        });
        c.update_nrt(NODE, topo(4, 4, &[]), 0);
        c.reserve(NODE, &key("a"), &gpod("1"), 1);
        agree(&c, NODE);
        assert_eq!(
            c.view(NODE),
            NodeNumaView::Unusable(UnusableReason::ReservationInFlight)
        );
        c.pod_bound(NODE, "uid-a");
        agree(&c, NODE);
        assert!(matches!(c.view(NODE), NodeNumaView::Ready { .. }));
        assert_eq!(cpu(&c, 0), Some(4000), "no accounting in this mode");
        c.reserve(NODE, &key("b"), &gpod("1"), 2);
        c.unreserve(NODE, "uid-b");
        assert!(matches!(c.view(NODE), NodeNumaView::Ready { .. }));
        // Updates apply directly.
        c.update_nrt(NODE, topo(2, 4, &[]), 3);
        assert_eq!(cpu(&c, 0), Some(2000));
    }

    #[test]
    fn removing_nrts_and_nodes() {
        let mut c = cache();
        c.reserve(NODE, &key("a"), &gpod("1"), 1);
        c.remove_nrt(NODE);
        assert_eq!(c.view(NODE), NodeNumaView::NoTopology);
        assert_eq!(c.assumed_count(NODE), 0);
        c.update_nrt(NODE, topo(4, 4, &[]), 2);
        assert_eq!(cpu(&c, 0), Some(4000));
        c.remove_node(NODE);
        assert_eq!(c.view(NODE), NodeNumaView::NoTopology);
    }

    #[test]
    fn resync_period_and_generation() {
        let mut c = cache();
        let g0 = c.generation();
        assert!(c.resync_due(0));
        assert!(c.resync(0, |_, _| Vec::new()).ran);
        assert!(!c.resync_due(4_999));
        assert!(c.resync_due(5_000));
        assert_eq!(c.generation(), g0, "no flush, no new generation");
        assert_eq!(c.metrics().resync_runs, 1);
        assert_eq!(c.metrics().generation, c.generation());
    }
}
