//! Why a pod (or a reservation) is pending, as a read-only what-if on the scheduler's state.
//!
//! kube-scheduler answers "why is this pod pending" with one line of counts, and only the
//! first plugin that rejected each node is counted. [`explain`] answers it per node: it runs
//! every PreFilter and every Filter plugin of the pod's profile on every node (not stopping at
//! the first rejection), Score on the nodes that passed, lists the reservations whose owners
//! match the pod and why each was not used, shows for NUMA nodes what each zone lacked, and
//! works out the smallest change of resources that would let the pod fit.
//!
//! Nothing is written: the plugins' Filter and Score read `&Cluster` and a cycle state of our
//! own, and feedback plugins are not told anything, so explaining a pod never changes what the
//! scheduler does next.
//!
//! The result is plain data ([`Explanation`], serialisable for `-o json`); the text a person
//! reads is rendered by the command line.

mod change;
pub mod dra;
mod gang;
mod numa;
mod reservations;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde::Serialize;

use crate::cache::Cluster;
use crate::cache::PodState;
use crate::framework::{Code, CycleState, Diagnosis, FilterPlan, Profile, Status};
use crate::model::node::{NodeIdx, NodeInfo};
use crate::model::pod::PodInfo;
use crate::object::{Kind, ObjectKey};
use crate::scheduler::Scheduler;
use crate::time::Time;

pub use change::{Change, Shortfall};
pub use numa::{NumaDetail, ZoneDetail, ZoneResource};
pub use reservations::{ReservationMatch, ReservationVerdict};

/// What to explain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// A pod, by namespace and name.
    Pod(ObjectKey),
    /// A reservation, by name (its stand-in reserve pod is what gets scheduled).
    Reservation(String),
}

impl Target {
    /// Parses `NAME`, `NAMESPACE/NAME`, `pod/NAME`, `pod/NAMESPACE/NAME` or
    /// `reservation/NAME` (`reservations/`, `res/` and `pods/` too). A pod without a
    /// namespace is in `default`, as `kubectl` reads it.
    pub fn parse(text: &str) -> Result<Self, ExplainError> {
        let bad = || ExplainError::BadTarget(text.to_string());
        let (kind, rest) = match text.split_once('/') {
            Some((k, rest)) if is_reservation_word(k) => (Kind::Reservation, rest),
            Some((k, rest)) if is_pod_word(k) => (Kind::Pod, rest),
            _ => (Kind::Pod, text),
        };
        if rest.is_empty() {
            return Err(bad());
        }
        match kind {
            Kind::Reservation if !rest.contains('/') => Ok(Self::Reservation(rest.to_string())),
            Kind::Reservation => Err(bad()),
            _ => {
                let (ns, name) = rest.split_once('/').unwrap_or(("default", rest));
                if ns.is_empty() || name.is_empty() || name.contains('/') {
                    return Err(bad());
                }
                Ok(Self::Pod(ObjectKey::pod(ns, name)))
            }
        }
    }
}

fn is_reservation_word(w: &str) -> bool {
    matches!(
        w.to_ascii_lowercase().as_str(),
        "reservation" | "reservations" | "res" | "reservation.scheduling.koordinator.sh"
    )
}

fn is_pod_word(w: &str) -> bool {
    matches!(w.to_ascii_lowercase().as_str(), "pod" | "pods" | "po")
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Pod(k) => write!(f, "pod {}/{}", k.namespace, k.name),
            Self::Reservation(n) => write!(f, "reservation {n}"),
        }
    }
}

/// Why there is nothing to explain.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExplainError {
    /// The target could not be read.
    #[error("{0:?}: want POD, NAMESPACE/POD or reservation/NAME")]
    BadTarget(String),
    /// No such object in the cluster.
    #[error("{0} not found")]
    NotFound(String),
    /// The core cannot read the object (its problem is reported when it is created).
    #[error("{target} cannot be scheduled: {problem}")]
    Unreadable {
        /// What was asked about.
        target: String,
        /// Why.
        problem: String,
    },
}

/// One plugin's verdict at one extension point.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Rejection {
    /// The plugin (`NodeResourcesFit`).
    pub plugin: String,
    /// `PreFilter` or `Filter`.
    pub point: &'static str,
    /// `Unschedulable` (preemption may help), `UnschedulableAndUnresolvable` or `Error`.
    pub code: &'static str,
    /// Every reason it gave, in order.
    pub reasons: Vec<String>,
    /// Said only when the pods nominated to the node (by an earlier preemption) are counted.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub with_nominated_pods: bool,
    /// What the reasons leave unsaid: the taint TaintToleration's reason no longer names
    /// since kube-scheduler 1.35 (`untolerated taint {key: value}`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

/// One score plugin on one feasible node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PluginScore {
    /// The plugin.
    pub plugin: String,
    /// What Score returned.
    pub raw: i64,
    /// After NormalizeScore (0..=100 for the in-tree plugins).
    pub normalized: i64,
    /// The profile's weight.
    pub weight: i64,
}

/// One node, for the pod.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeExplanation {
    /// The node's name.
    pub node: String,
    /// No plugin rejected it.
    pub feasible: bool,
    /// Every rejection, PreFilter ones (which apply to every node) first, then Filter in
    /// the profile's order.
    pub rejections: Vec<Rejection>,
    /// Per score plugin, on feasible nodes.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub scores: Vec<PluginScore>,
    /// Sum of normalized × weight, on feasible nodes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total_score: Option<i64>,
    /// What the pod is short of on the node, when resources are among the reasons.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub shortfall: Vec<Shortfall>,
    /// NUMA zones, for a node with topology data.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub numa: Option<NumaDetail>,
    /// Why the node's NodeResourceTopology was refused (the field path and the rule): NUMA
    /// filtering then treats the node as having none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub topology_refused: Option<String>,
    /// Where DynamicResources rejected the node: per claim and request, why no device.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub devices: Vec<dra::ClaimDevices>,
}

impl NodeExplanation {
    fn rejected_by(&self, plugin: &str) -> bool {
        self.rejections.iter().any(|r| r.plugin == plugin)
    }
}

/// Where an already placed target is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Placement {
    /// The node.
    pub node: String,
    /// For a pod: the reservation it allocated from, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reservation: Option<String>,
    /// `Bound`, `Assumed` (bind in flight), `Available`, `Succeeded`...
    pub state: String,
}

/// Everything [`explain`] found.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Explanation {
    /// `Pod` or `Reservation`.
    pub kind: &'static str,
    /// Namespace (empty for a reservation).
    pub namespace: String,
    /// Name.
    pub name: String,
    /// The profile (scheduler name) it is scheduled with.
    pub profile: String,
    /// Things worth knowing before the details (another scheduler's pod, a big cluster).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// Set when it is already placed: nothing else is computed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub placed: Option<Placement>,
    /// kube-scheduler's summary line, counting every plugin's reasons (not only the first
    /// rejection per node).
    pub summary: String,
    /// Nodes in the cluster.
    pub nodes_total: usize,
    /// Nodes no plugin rejected.
    pub nodes_feasible: usize,
    /// The feasible nodes with the highest total score (several on a tie).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub best: Vec<String>,
    /// Rejections at PreFilter (they apply to every node).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub pre_filter: Vec<Rejection>,
    /// Per node, sorted by name.
    pub nodes: Vec<NodeExplanation>,
    /// The reservations whose owners match the pod, and what became of each.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub reservations: Vec<ReservationMatch>,
    /// The smallest change that would let it fit.
    pub change: Change,
    /// For a gang member: where its gang stands.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gang: Option<crate::gang::Report>,
}

/// What [`explain`] schedules for a target: the pod (a reservation's stand-in), where it is
/// if placed, and what the explanation names (kind, namespace, name).
type Subject = (
    Arc<PodInfo>,
    Option<Placement>,
    &'static str,
    String,
    String,
);

/// Explains `target` on the scheduler's current state at `now`, without changing it.
pub fn explain(s: &Scheduler, target: &Target, now: Time) -> Result<Explanation, ExplainError> {
    let cx = &s.cluster;
    let (pod, placed, kind, namespace, name) = match target {
        Target::Pod(key) => pod_subject(cx, target, key)?,
        Target::Reservation(name) => reservation_subject(cx, target, name)?,
    };
    let profile = s
        .profiles()
        .iter()
        .position(|p| *p.scheduler_name == *pod.scheduler_name);
    let mut notes = Vec::new();
    if profile.is_none() {
        notes.push(format!(
            "schedulerName {:?} names no profile of berth's: berth never schedules it; explained with profile {:?}",
            &*pod.scheduler_name,
            s.profiles().first().map(|p| p.scheduler_name.as_str()).unwrap_or("")
        ));
    }
    let prof_idx = profile.unwrap_or(0);
    let prof = &s.profiles()[prof_idx];
    let mut out = Explanation {
        kind,
        namespace,
        name,
        profile: prof.scheduler_name.clone(),
        notes,
        placed,
        summary: String::new(),
        nodes_total: cx.cache.node_count(),
        nodes_feasible: 0,
        best: Vec::new(),
        pre_filter: Vec::new(),
        nodes: Vec::new(),
        reservations: Vec::new(),
        change: Change::None { why: String::new() },
        gang: None,
    };
    gang::fill(s, target, &mut out);
    if let Some(p) = &out.placed {
        out.summary = if p.node.is_empty() {
            p.state.clone()
        } else {
            format!("{} on node {}", p.state, p.node)
        };
        out.change = Change::NotNeeded {
            node: p.node.clone(),
        };
        return Ok(out);
    }
    evaluate(s, prof_idx, &pod, now, &mut out);
    Ok(out)
}

/// A pod target: the pod, and where it is unless it is pending.
fn pod_subject(cx: &Cluster, target: &Target, key: &ObjectKey) -> Result<Subject, ExplainError> {
    let entry = cx
        .cache
        .pod(key)
        .ok_or_else(|| ExplainError::NotFound(target.to_string()))?;
    let placed = match entry.state {
        PodState::Pending if !entry.info.terminal => None,
        state => Some(Placement {
            node: entry
                .on
                .as_deref()
                .or(entry.info.node_name.as_deref())
                .unwrap_or("")
                .to_string(),
            reservation: cx
                .reservations
                .owner_of(key)
                .and_then(|i| cx.reservations.get(i))
                .map(|r| r.name.to_string()),
            state: if entry.info.terminal {
                "Finished".to_string()
            } else {
                match state {
                    PodState::Assumed => "Assumed (bind in flight)".to_string(),
                    _ => "Bound".to_string(),
                }
            },
        }),
    };
    Ok((
        entry.info.clone(),
        placed,
        "Pod",
        key.namespace.to_string(),
        key.name.to_string(),
    ))
}

/// A reservation target: its stand-in pod, and where it is once placed (or its phase once
/// past Pending).
fn reservation_subject(cx: &Cluster, target: &Target, name: &str) -> Result<Subject, ExplainError> {
    let r = cx
        .reservations
        .by_name(name)
        .ok_or_else(|| ExplainError::NotFound(target.to_string()))?;
    if let Some(problem) = &r.problem {
        return Err(ExplainError::Unreadable {
            target: target.to_string(),
            problem: problem.clone(),
        });
    }
    let placed = r.node_name.as_ref().map(|n| Placement {
        node: n.to_string(),
        reservation: None,
        state: r.phase.as_str().to_string(),
    });
    let placed = placed.or_else(|| {
        (r.phase.as_str() != "Pending").then(|| Placement {
            node: String::new(),
            reservation: None,
            state: r.phase.as_str().to_string(),
        })
    });
    let item = r.item.clone().ok_or_else(|| ExplainError::Unreadable {
        target: target.to_string(),
        problem: "it has no pod template the scheduler can read".into(),
    })?;
    Ok((item, placed, "Reservation", String::new(), name.to_string()))
}

fn code_name(code: Code) -> &'static str {
    match code {
        Code::Success => "Success",
        Code::Error => "Error",
        Code::Unschedulable => "Unschedulable",
        Code::UnschedulableAndUnresolvable => "UnschedulableAndUnresolvable",
        Code::Wait => "Wait",
        Code::Skip => "Skip",
    }
}

fn rejection(plugin: &str, point: &'static str, st: &Status, nominated: bool) -> Rejection {
    Rejection {
        plugin: plugin.to_string(),
        point,
        code: code_name(st.code()),
        reasons: st.reasons().iter().map(|r| r.to_string()).collect(),
        with_nominated_pods: nominated,
        detail: None,
    }
}

/// The taint `pod` does not tolerate on `node`, as [`Rejection::detail`] says it.
fn untolerated_detail(pod: &PodInfo, node: &NodeInfo) -> Option<String> {
    use crate::plugins::tainttoleration::{describe_taint, find_untolerated, is_do_not_schedule};
    let tolerations = pod.spec().tolerations.as_deref().unwrap_or(&[]);
    find_untolerated(&node.taints, tolerations, is_do_not_schedule)
        .map(|t| format!("untolerated taint {}", describe_taint(t)))
}

/// PreFilter, Filter on every node, Score on the feasible ones, then reservations, NUMA and
/// the smallest change.
fn evaluate(s: &Scheduler, prof_idx: usize, pod: &Arc<PodInfo>, now: Time, out: &mut Explanation) {
    let prof = &s.profiles()[prof_idx];
    let cx = &s.cluster;
    let mut state = CycleState {
        now,
        ..CycleState::default()
    };
    pre_filter(prof, cx, &mut state, pod, out);
    let plan = FilterPlan::new(prof, &state);
    let mut diag = Diagnosis::default();
    let mut feasible: Vec<NodeIdx> = Vec::new();
    let mut by_idx: BTreeMap<NodeIdx, usize> = BTreeMap::new();
    for &idx in cx.cache.node_order() {
        let Some(node) = cx.cache.node(idx) else {
            continue;
        };
        let rejections = filter(s, &plan, &state, pod, node, &out.pre_filter);
        if rejections.is_empty() {
            feasible.push(idx);
        } else {
            diag.add(&node_status(&rejections));
        }
        let devices = if rejections
            .iter()
            .any(|r| r.plugin == crate::plugins::names::DYNAMIC_RESOURCES)
        {
            dra::detail(cx, &state, pod, node)
        } else {
            Vec::new()
        };
        by_idx.insert(idx, out.nodes.len());
        out.nodes.push(NodeExplanation {
            node: node.name.to_string(),
            feasible: false,
            rejections,
            scores: Vec::new(),
            total_score: None,
            shortfall: Vec::new(),
            numa: numa::detail(cx, pod, node),
            topology_refused: cx.numa.refused_nrt(&node.name).map(str::to_string),
            devices,
        });
    }
    for &idx in &feasible {
        if let Some(&j) = by_idx.get(&idx) {
            out.nodes[j].feasible = true;
        }
    }
    out.nodes_feasible = feasible.len();
    out.summary = if feasible.is_empty() {
        diag.render(cx.cache.node_count())
    } else {
        format!(
            "{}/{} nodes are available",
            feasible.len(),
            cx.cache.node_count()
        )
    };
    if cx.cache.node_count() > 100 {
        let profile_pct = prof.percentage_of_nodes_to_score;
        let sampled = Scheduler::num_feasible_nodes_to_find(profile_pct, cx.cache.node_count());
        out.notes.push(format!(
            "every node is evaluated here; a scheduling cycle stops after {sampled} feasible nodes (percentageOfNodesToScore), starting where the previous cycle stopped"
        ));
    }
    score(s, prof_idx, pod, &mut state, &feasible, &by_idx, out);
    if !pod.is_reserve_pod() {
        out.reservations = reservations::matches(cx, pod, &out.nodes, &by_idx, &out.best);
    }
    for (&idx, &j) in &by_idx {
        if out.nodes[j].feasible {
            continue;
        }
        if let Some(node) = cx.cache.node(idx) {
            out.nodes[j].shortfall = change::shortfall(cx, &state, pod, node, &out.nodes[j]);
        }
    }
    out.nodes.sort_by(|a, b| a.node.cmp(&b.node));
    out.change = change::smallest(&out.nodes);
}

/// Every PreFilter runs, even after one rejected: the point is every reason. A plugin whose
/// PreFilter did not succeed has no state for its Filter, which is skipped.
fn pre_filter(
    prof: &Profile,
    cx: &Cluster,
    state: &mut CycleState,
    pod: &PodInfo,
    out: &mut Explanation,
) {
    for &i in &prof.pre_filter {
        prof.plugins[i].before_pre_filter(cx, state, pod);
    }
    let mut skip = 0u64;
    for &i in &prof.pre_filter {
        let p = &prof.plugins[i];
        let st = p.pre_filter(cx, state, pod);
        if st.is_skip() {
            skip |= 1 << i;
        } else if !st.is_success() {
            skip |= 1 << i;
            out.pre_filter
                .push(rejection(p.name(), "PreFilter", &st, false));
        }
    }
    state.skip_filter = skip;
}

/// Every rejection of `node`: PreFilter's (`pre_filter`, for every node), the node subset
/// PreFilter left out, then every Filter plugin's through the framework's runner
/// ([`FilterPlan::run_every`], with the nominated pods counted as a cycle counts them).
fn filter(
    s: &Scheduler,
    plan: &FilterPlan<'_>,
    state: &CycleState,
    pod: &PodInfo,
    node: &NodeInfo,
    pre_filter: &[Rejection],
) -> Vec<Rejection> {
    let cx = &s.cluster;
    let mut rejections = pre_filter.to_vec();
    if let Some(sub) = &state.node_subset {
        if !sub.contains(&node.idx) {
            rejections.push(Rejection {
                plugin: state.subset_plugins.join(" "),
                point: "PreFilter",
                code: code_name(Code::UnschedulableAndUnresolvable),
                reasons: vec![format!(
                    "node(s) didn't satisfy plugin(s) [{}]",
                    state.subset_plugins.join(" ")
                )],
                with_nominated_pods: false,
                detail: None,
            });
        }
    }
    let with = s.nominator().with_nominated(cx, pod, node);
    plan.run_every(cx, state, pod, node, with.as_ref(), |p, st, nominated| {
        let mut r = rejection(p.name(), "Filter", &st, nominated);
        if p.name() == crate::plugins::names::TAINT_TOLERATION {
            r.detail = untolerated_detail(pod, node);
        }
        rejections.push(r);
    });
    rejections
}

/// One status per rejected node carrying every distinct reason, so the summary counts each
/// node once per reason, as kube-scheduler's FitError does.
fn node_status(rejections: &[Rejection]) -> Status {
    let mut reasons: Vec<String> = Vec::new();
    let mut code = Code::Unschedulable;
    for r in rejections {
        if r.code == "UnschedulableAndUnresolvable" {
            code = Code::UnschedulableAndUnresolvable;
        }
        for reason in &r.reasons {
            if !reasons.contains(reason) {
                reasons.push(reason.clone());
            }
        }
    }
    let mut it = reasons.into_iter();
    let mut st = Status::new(code, it.next().unwrap_or_default());
    for r in it {
        st = st.with_reason(r);
    }
    st
}

/// PreScore and Score on the feasible nodes, normalised over all of them as a cycle does.
fn score(
    s: &Scheduler,
    prof_idx: usize,
    pod: &PodInfo,
    state: &mut CycleState,
    feasible: &[NodeIdx],
    by_idx: &BTreeMap<NodeIdx, usize>,
    out: &mut Explanation,
) {
    if feasible.is_empty() {
        return;
    }
    let prof = &s.profiles()[prof_idx];
    let cx = &s.cluster;
    let mut skip_score = 0u64;
    for &i in &prof.pre_score {
        let st = prof.plugins[i].pre_score(cx, state, pod, feasible);
        if st.is_skip() {
            skip_score |= 1 << i;
        } else if !st.is_success() {
            out.notes.push(format!(
                "PreScore plugin {} failed: {}",
                prof.plugins[i].name(),
                st.message()
            ));
            skip_score |= 1 << i;
        }
    }
    let mut totals = vec![0i64; feasible.len()];
    for &(i, weight) in &prof.score {
        if skip_score & (1 << i) != 0 {
            continue;
        }
        let p = &prof.plugins[i];
        let raw: Vec<i64> = feasible
            .iter()
            .map(|&idx| cx.cache.node(idx).map_or(0, |n| p.score(cx, state, pod, n)))
            .collect();
        let mut normalized = raw.clone();
        p.normalize_scores(state, pod, &mut normalized);
        for (k, &idx) in feasible.iter().enumerate() {
            totals[k] += normalized[k] * weight;
            if let Some(&j) = by_idx.get(&idx) {
                out.nodes[j].scores.push(PluginScore {
                    plugin: p.name().to_string(),
                    raw: raw[k],
                    normalized: normalized[k],
                    weight,
                });
            }
        }
    }
    let top = totals.iter().copied().max().unwrap_or(0);
    let mut best = BTreeSet::new();
    for (k, &idx) in feasible.iter().enumerate() {
        if let Some(&j) = by_idx.get(&idx) {
            out.nodes[j].total_score = Some(totals[k]);
            if totals[k] == top {
                best.insert(out.nodes[j].node.clone());
            }
        }
    }
    out.best = best.into_iter().collect();
}

/// The node's free capacity for the pod per resource it requests: allocatable − requested −
/// reserved, plus what the pod's own reservations give back there.
pub(crate) fn free_for(
    state: &CycleState,
    pod: &PodInfo,
    node: &NodeInfo,
) -> crate::resources::Resources {
    let mut free = *node.free();
    if let Some(back) = state
        .reservation
        .as_ref()
        .and_then(|r| r.restored(pod, node.idx))
    {
        free.add(back);
    }
    free
}
