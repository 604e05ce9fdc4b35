//! The plugin interface: one trait whose methods are the scheduling framework's extension
//! points. A plugin overrides what it implements and says so in [`Plugin::points`]; the
//! defaults do nothing, so a profile may list a plugin at a point it does not implement
//! without harm.

use std::collections::BTreeMap;

use crate::cache::Cluster;
use crate::framework::cycle_state::CycleState;
use crate::framework::diagnosis::Diagnosis;
use crate::framework::events::EventsToRegister;
use crate::framework::nominator::Nominator;
use crate::framework::profile::Profile;
use crate::framework::status::Status;
use crate::model::node::{NodeIdx, NodeInfo};
use crate::model::pod::PodInfo;
use crate::rng::SplitMix64;

/// Scores each of `nodes` with `score`, appending to `out`; a node no longer in the cluster
/// scores 0. What [`Plugin::score_nodes`] does, for overrides that work out the pod's part
/// once per cycle first.
#[inline]
pub fn score_each(
    cx: &Cluster,
    nodes: &[NodeIdx],
    out: &mut Vec<i64>,
    mut score: impl FnMut(&NodeInfo) -> i64,
) {
    // `score` called directly, not handed on as `&mut F`: the compiler then inlines it
    // into the loop whatever else the crate holds (through `map_or` it sometimes did not).
    out.extend(nodes.iter().map(|&idx| match cx.cache.node(idx) {
        Some(node) => score(node),
        None => 0,
    }));
}

/// Scores plugins return are within `0..=MAX_NODE_SCORE` after normalisation.
pub const MAX_NODE_SCORE: i64 = 100;

/// A set of extension points, as bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Points(pub u16);

impl Points {
    /// PreFilter.
    pub const PRE_FILTER: Points = Points(1);
    /// Filter.
    pub const FILTER: Points = Points(1 << 1);
    /// PostFilter.
    pub const POST_FILTER: Points = Points(1 << 2);
    /// PreScore.
    pub const PRE_SCORE: Points = Points(1 << 3);
    /// Score (and NormalizeScore).
    pub const SCORE: Points = Points(1 << 4);
    /// Reserve and Unreserve.
    pub const RESERVE: Points = Points(1 << 5);
    /// Permit.
    pub const PERMIT: Points = Points(1 << 6);
    /// PreBind.
    pub const PRE_BIND: Points = Points(1 << 7);
    /// Bind.
    pub const BIND: Points = Points(1 << 8);
    /// QueueSort.
    pub const QUEUE_SORT: Points = Points(1 << 9);
    /// PostBind.
    pub const POST_BIND: Points = Points(1 << 10);
    /// Filter feedback: the plugin learns its Filter verdicts after the filter loop
    /// ([`Plugin::filter_feedback`]). Not a kube-scheduler extension point.
    pub const FILTER_FEEDBACK: Points = Points(1 << 11);
    /// Filter has a verdict-only fast path ([`Plugin::passes`]). Not a kube-scheduler
    /// extension point.
    pub const FILTER_FAST: Points = Points(1 << 12);
    /// PreEnqueue ([`Plugin::pre_enqueue`]).
    pub const PRE_ENQUEUE: Points = Points(1 << 13);

    /// Whether every point of `other` is in `self`.
    pub const fn contains(self, other: Points) -> bool {
        self.0 & other.0 == other.0
    }
}

impl std::ops::BitOr for Points {
    type Output = Points;
    fn bitor(self, rhs: Points) -> Points {
        Points(self.0 | rhs.0)
    }
}

/// What PostFilter does with the pod's nominated node (kube-scheduler's `NominatingInfo`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Nomination {
    /// Leave it as it is (`ModeNoop`).
    #[default]
    Keep,
    /// Clear it: preemption cannot help (`ModeOverride` with no node).
    Clear,
    /// Nominate the pod to this node: its victims are being evicted.
    Node(NodeIdx),
}

/// What PostFilter (preemption) decided.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PostFilterResult {
    /// What happens to the pod's nominated node.
    pub nomination: Nomination,
    /// Pods to evict (with [`Nomination::Node`]), most important first.
    pub victims: Vec<crate::object::ObjectKey>,
    /// The message appended to the FitError after a space, as the plugin words it
    /// (DefaultPreemption's `preemption: 0/3 nodes are available: ... .` ends with a period,
    /// Koordinator's reservation counts do not); several plugins' messages are joined with
    /// `, ` as kube-scheduler's `RunPostFilterPlugins` joins their reasons.
    pub message: Option<String>,
    /// With [`Nomination::Node`]: hold the freed capacity for the pod with a reservation it
    /// owns, living this many milliseconds (reservation-backed preemption).
    pub hold: Option<crate::time::Time>,
    /// The plugin failed (kube-scheduler's `Error` status): PostFilter stops at it, its
    /// message alone is appended, and the nomination stays as it was.
    pub error: bool,
    /// DynamicResources: write this ResourceClaim back without its allocation
    /// ([`crate::effect::Effect::DeallocateClaim`]), whatever the later plugins decide.
    pub deallocate: Option<crate::object::ObjectKey>,
}

/// What a PostFilter plugin may read: the cycle that failed and a way to re-run the
/// profile's filters (preemption simulates removing pods and filters again).
#[derive(Debug)]
pub struct PostFilterContext<'a> {
    /// The cluster.
    pub cluster: &'a Cluster,
    /// The profile the pod is scheduled with.
    pub profile: &'a Profile,
    /// The failed cycle's state.
    pub state: &'a CycleState,
    /// Why no node fit.
    pub diagnosis: &'a Diagnosis,
    /// Nodes whose rejection was `Unschedulable` (not `UnschedulableAndUnresolvable`):
    /// removing pods may help only there. In no particular order.
    pub resolvable: &'a [NodeIdx],
    /// Pods nominated to nodes by earlier preemptions.
    pub nominator: &'a Nominator,
    /// The scheduler's seeded generator (preemption starts its search at a random node).
    pub rng: &'a mut SplitMix64,
}

/// What a PreEnqueue plugin may read.
#[derive(Debug, Clone, Copy)]
pub struct PreEnqueueContext<'a> {
    /// The cluster.
    pub cluster: &'a Cluster,
    /// Gangs: their objects and members.
    pub gangs: &'a crate::gang::Gangs,
}

/// A PreEnqueue plugin's refusal: the pod is not tried, and waits in the unschedulable
/// pool as rejected by `plugin` (so only the events that plugin registered move it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PreEnqueueRejection {
    /// The plugin named as the pod's rejector.
    pub plugin: &'static str,
    /// What the pod's `PodScheduled=False` condition and `FailedScheduling` event say (the
    /// attempt then counts as unschedulable). `None`: the pod waits without a condition or
    /// event, as kube-scheduler 1.35's PreEnqueue rejections do.
    pub message: Option<String>,
}

/// A scheduling plugin.
///
/// Filter and Score read only the cluster and the cycle state they are given, never
/// anything else, so preemption can run them against edited copies. Filter reads the node
/// under test through its `node` argument, never through the cluster: preemption's dry run
/// passes a copy of the node with victims removed while the cluster still holds them, and
/// PreFilter state that counts other pods follows through [`Plugin::add_pod`] /
/// [`Plugin::remove_pod`]. Reserve/Unreserve are
/// the only methods that mutate the cluster; Unreserve must be idempotent.
pub trait Plugin: std::fmt::Debug + Send + Sync {
    /// The name used in configuration (`NodeResourcesFit`).
    fn name(&self) -> &'static str;

    /// The extension points this plugin implements.
    fn points(&self) -> Points;

    /// The cluster events that can turn this plugin's rejection into a pass, with their
    /// queueing hints (kube-scheduler's `EnqueueExtensions.EventsToRegister`): a pod the
    /// plugin rejected leaves the unschedulable pool on such an event only. The default,
    /// for a plugin that does not say (and the Reservation plugin, whose verdicts depend on
    /// reservations, pods and nodes alike), is every event but NUMA ones.
    fn events_to_register(&self) -> EventsToRegister {
        EventsToRegister::EVERY_EVENT_BUT_NUMA
    }

    /// PreEnqueue (kube-scheduler's `PreEnqueuePlugin`): whether the pod may be tried at
    /// all (only with [`Points::PRE_ENQUEUE`]). Asked before each of the pod's cycles; a
    /// refused pod runs no cycle.
    fn pre_enqueue(
        &self,
        _cx: &PreEnqueueContext<'_>,
        _pod: &PodInfo,
    ) -> Result<(), PreEnqueueRejection> {
        Ok(())
    }

    /// Sets up what the plugin keeps in the cluster across cycles (a cache the scheduler
    /// feeds with events), once, when the scheduler is built.
    fn init(&self, _cx: &mut Cluster) {}

    /// Runs before every PreFilter (Koordinator's `PreFilterTransformer`): state other
    /// plugins' PreFilter reads (the reservations a pod may use, whose stand-ins its
    /// affinity and spread must not count). Failures are reported by this plugin's PreFilter.
    fn before_pre_filter(&self, _cx: &Cluster, _state: &mut CycleState, _pod: &PodInfo) {}

    /// Computes per-pod state once. Return `Status::skip()` to skip this plugin's Filter.
    fn pre_filter(&self, _cx: &Cluster, _state: &mut CycleState, _pod: &PodInfo) -> Status {
        Status::skip()
    }

    /// PreFilter extension (kube-scheduler's `PreFilterExtensions.AddPod`): `add` now runs
    /// on `node` (given as it is after the addition), and the state PreFilter computed for
    /// `pod` must say so. Preemption's dry run calls it when it puts a potential victim back
    /// on a copy of the node, instead of re-running PreFilter on a copy of the cluster. Only
    /// plugins whose PreFilter state depends on other pods override it; a plugin whose
    /// Filter reads such pods through `node` alone needs nothing.
    fn add_pod(
        &self,
        _cx: &Cluster,
        _state: &mut CycleState,
        _pod: &PodInfo,
        _add: &PodInfo,
        _node: &NodeInfo,
    ) {
    }

    /// PreFilter extension (kube-scheduler's `PreFilterExtensions.RemovePod`): `remove` no
    /// longer runs on `node` (given as it is after the removal). See [`Plugin::add_pod`].
    /// Called whether or not the plugin's PreFilter returned Skip (a plugin without state
    /// does nothing). What else a removal changes outside the node (a reservation share
    /// given back) is not the plugins' to express: preemption simulates such pods on a copy
    /// of the cluster.
    fn remove_pod(
        &self,
        _cx: &Cluster,
        _state: &mut CycleState,
        _pod: &PodInfo,
        _remove: &PodInfo,
        _node: &NodeInfo,
    ) {
    }

    /// Whether the pod fits `node`.
    fn filter(
        &self,
        _cx: &Cluster,
        _state: &CycleState,
        _pod: &PodInfo,
        _node: &NodeInfo,
    ) -> Status {
        Status::success()
    }

    /// Filter's verdict without its reasons, asked first on every node when the plugin has
    /// [`Points::FILTER_FAST`]: `true` only where [`Plugin::filter`] succeeds. Most nodes
    /// pass, and a `Status` built and dropped per plugin per node was a fifth of a basic
    /// cycle; so the framework calls `filter` only where this says no, for the reasons.
    /// Saying no where unsure is allowed (filter then decides); saying yes where filter
    /// would reject is a bug (debug builds check it on every call).
    fn passes(&self, cx: &Cluster, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> bool {
        self.filter(cx, state, pod, node).is_success()
    }

    /// [`Plugin::passes`] over a batch of nodes (at most [`crate::framework::filter_plan::BATCH`]):
    /// clears bit `i` of `pass` where `nodes[i]` does not pass; only set bits are asked. One
    /// dynamic call per plugin per batch instead of one per node: this default is compiled
    /// for each plugin, so its `passes` is called directly and inlined. An override must
    /// clear exactly what `passes` would.
    fn passes_each(
        &self,
        cx: &Cluster,
        state: &CycleState,
        pod: &PodInfo,
        nodes: &[&NodeInfo],
        pass: &mut u64,
    ) {
        crate::framework::filter_plan::keep(pass, nodes, |n| self.passes(cx, state, pod, n));
    }

    /// Learns the verdicts of this plugin's Filter in the cycle that just ran: `(node,
    /// passed)` in the order Filter ran (only with [`Points::FILTER_FEEDBACK`]). Filter itself
    /// cannot write (it reads `&Cluster`, and preemption re-runs it on copies whose verdicts
    /// must not count); a plugin that tracks rejections over time records them here.
    fn filter_feedback(
        &self,
        _cx: &mut Cluster,
        _pod: &PodInfo,
        _verdicts: &[(NodeIdx, bool)],
        _now: crate::time::Time,
    ) {
    }

    /// Runs when no node fits (preemption). `None`: nothing to say.
    fn post_filter(
        &self,
        _cx: &mut PostFilterContext<'_>,
        _pod: &PodInfo,
    ) -> Option<PostFilterResult> {
        None
    }

    /// Computes per-pod scoring state over the feasible nodes. `Status::skip()` skips Score.
    fn pre_score(
        &self,
        _cx: &Cluster,
        _state: &mut CycleState,
        _pod: &PodInfo,
        _nodes: &[NodeIdx],
    ) -> Status {
        Status::skip()
    }

    /// Scores a feasible node (higher is better); normalised afterwards.
    fn score(&self, _cx: &Cluster, _state: &CycleState, _pod: &PodInfo, _node: &NodeInfo) -> i64 {
        0
    }

    /// Scores each of `nodes` (the feasible ones, in order), appending to `out`, which the
    /// caller cleared; a node no longer in the cluster scores 0. One dynamic call per
    /// plugin per cycle instead of one per node: this default is compiled for each plugin,
    /// so its [`Plugin::score`] is called directly (and inlined where small). An override
    /// must give exactly the scores [`Plugin::score`] gives.
    fn score_nodes(
        &self,
        cx: &Cluster,
        state: &CycleState,
        pod: &PodInfo,
        nodes: &[NodeIdx],
        out: &mut Vec<i64>,
    ) {
        score_each(cx, nodes, out, |node| self.score(cx, state, pod, node));
    }

    /// Whether every node scores the same for `pod` this cycle, normalised: adding the same
    /// amount to every node's total cannot change which node a cycle picks (nor its ties),
    /// so the cycle then neither scores nor adds this plugin. Explanations, which show each
    /// plugin's scores, still score it. Answer `true` only when sure.
    fn scores_uniformly(&self, _cx: &Cluster, _state: &CycleState, _pod: &PodInfo) -> bool {
        false
    }

    /// Maps raw scores of all feasible nodes into `0..=MAX_NODE_SCORE`. The default keeps
    /// them as they are.
    fn normalize_scores(&self, _state: &CycleState, _pod: &PodInfo, _scores: &mut [i64]) {}

    /// Claims what the pod takes on `node` in the plugin's own ledgers.
    fn reserve(
        &self,
        _cx: &mut Cluster,
        _state: &mut CycleState,
        _pod: &PodInfo,
        _node: NodeIdx,
    ) -> Status {
        Status::success()
    }

    /// Gives back what [`Plugin::reserve`] claimed. Idempotent.
    fn unreserve(
        &self,
        _cx: &mut Cluster,
        _state: &mut CycleState,
        _pod: &PodInfo,
        _node: NodeIdx,
    ) {
    }

    /// The reservation lifecycle settings this plugin's args carry (the Reservation plugin
    /// only); the scheduler applies the first profile's.
    fn reservation_settings(&self) -> Option<crate::reservation::Settings> {
        None
    }

    /// VolumeBinding's `bindTimeoutSeconds` in milliseconds (that plugin only): how long a
    /// pod whose claims the scheduler bound waits for the PV controller before binding.
    fn volume_bind_timeout(&self) -> Option<crate::time::Time> {
        None
    }

    /// Adds what must be written onto the pod before binding (annotations).
    fn pre_bind(
        &self,
        _cx: &Cluster,
        _state: &CycleState,
        _pod: &PodInfo,
        _node: &NodeInfo,
        _annotations: &mut BTreeMap<String, String>,
    ) -> Status {
        Status::success()
    }
}

/// Normalises scores to `0..=MAX_NODE_SCORE` by the maximum (kube-scheduler's
/// `DefaultNormalizeScore`), optionally reversed.
pub fn default_normalize(scores: &mut [i64], reverse: bool) {
    // All 0 (TaintToleration on a cluster without PreferNoSchedule taints) is told by an
    // OR over the scores, a few vector steps, before the max is looked for.
    let max = if scores.iter().fold(0, |any, &s| any | s) == 0 {
        0
    } else {
        scores.iter().copied().max().unwrap_or(0)
    };
    if max == 0 {
        if reverse {
            scores.iter_mut().for_each(|s| *s = MAX_NODE_SCORE);
        }
        return;
    }
    for s in scores.iter_mut() {
        let mut v = MAX_NODE_SCORE * *s / max;
        if reverse {
            v = MAX_NODE_SCORE - v;
        }
        *s = v;
    }
}
