//! NodeResourcesFit: Filter (does the pod's request fit what the node has left) and Score
//! (LeastAllocated, MostAllocated, RequestedToCapacityRatio).
//!
//! What a node "has left" is allocatable minus the requests of its pods minus what
//! Available reservations hold there. A reservation owner gets back what its matched
//! reservations hold on the node (the Reservation plugin's PreFilter computes that once per
//! pod, only for the nodes that have such reservations).

use std::borrow::Cow;

use crate::cache::Cluster;
use crate::framework::config::ConfigError;
use crate::framework::events::{kind, EventsToRegister};
use crate::framework::filter_plan::keep;
use crate::framework::{Code, CycleState, Plugin, Points, Status};
use crate::model::node::{NodeIdx, NodeInfo};
use crate::model::pod::PodInfo;
use crate::plugins::args::decode;
use crate::resources::{ResourceId, Resources, MAX_RESOURCES};

use super::args::{FitArgs, ScoringStrategy};
use super::scoring::Scorer;

/// kube-scheduler's reason when the node is at its pod limit.
pub const TOO_MANY_PODS: &str = "Too many pods";

/// `Insufficient <resource>`: fixed strings for the common resources so the per-node path
/// does not allocate.
pub fn insufficient_reason(name: &str) -> Cow<'static, str> {
    match name {
        "cpu" => Cow::Borrowed("Insufficient cpu"),
        "memory" => Cow::Borrowed("Insufficient memory"),
        "ephemeral-storage" => Cow::Borrowed("Insufficient ephemeral-storage"),
        other => Cow::Owned(format!("Insufficient {other}")),
    }
}

/// The NodeResourcesFit plugin.
#[derive(Debug)]
pub struct Fit {
    args: FitArgs,
    scorer: Scorer,
}

impl Fit {
    /// Builds the plugin from `NodeResourcesFitArgs`.
    pub fn new(args: Option<&serde_json::Value>) -> Result<Self, ConfigError> {
        let args: FitArgs = decode::<FitArgs>(args)?.defaulted();
        args.validate()?;
        let strategy = args.scoring_strategy.clone().unwrap_or_default();
        Ok(Self {
            scorer: Scorer::new(&strategy),
            args,
        })
    }

    /// The scoring strategy in use.
    pub fn strategy(&self) -> ScoringStrategy {
        self.args.scoring_strategy.clone().unwrap_or_default()
    }

    fn ignored(&self, name: &str) -> bool {
        if !is_extended(name) {
            return false;
        }
        self.args.ignored_resources.iter().any(|r| r == name)
            || name
                .split_once('/')
                .is_some_and(|(g, _)| self.args.ignored_resource_groups.iter().any(|x| x == g))
    }
}

/// The resources a pod requests (slot, amount): a basic pod's two among the cluster's
/// slots, so the per-node check does not walk every slot.
struct Wants {
    len: usize,
    slots: [(usize, i64); MAX_RESOURCES],
}

impl Wants {
    fn of(cx: &Cluster, pod: &PodInfo) -> Self {
        let mut me = Self {
            len: 0,
            slots: [(0, 0); MAX_RESOURCES],
        };
        let n = cx.cache.names.len().min(MAX_RESOURCES);
        for (i, &want) in pod.requests.0[..n].iter().enumerate() {
            if want > 0 {
                me.slots[me.len % MAX_RESOURCES] = (i, want);
                me.len += 1;
            }
        }
        me
    }

    fn as_slice(&self) -> &[(usize, i64)] {
        &self.slots[..self.len.min(MAX_RESOURCES)]
    }

    fn iter(&self) -> impl Iterator<Item = (usize, i64)> + '_ {
        self.as_slice().iter().copied()
    }
}

/// Filter's arithmetic without its reasons ([`Plugin::passes`]): a pod slot, and every
/// request within allocatable minus requested minus reserved, plus what the pod's
/// reservations give back.
#[inline]
fn fits(state: &CycleState, pod: &PodInfo, wants: &Wants, node: &NodeInfo) -> bool {
    let reservation = state.reservation.as_ref();
    fits_in(
        wants,
        node,
        reservation.map_or(0, |r| r.restored_pods(node)),
        reservation.and_then(|r| r.restored(pod, node.idx)),
    )
}

/// [`fits_in`] for a pod wanting two resources (`(slot, amount)`) on a node that gives
/// nothing back: the pod slot and two comparisons, for the usual cpu-and-memory pod.
#[inline(always)]
fn fits_two(node: &NodeInfo, (a, wa): (usize, i64), (b, wb): (usize, i64)) -> bool {
    let free = &node.free().0;
    (node.pods.len() as i64) < node.allowed_pods
        && wa <= free[a % MAX_RESOURCES]
        && wb <= free[b % MAX_RESOURCES]
}

/// [`fits`] with what the pod gets back on the node given: `slots_back` pod slots and
/// `back` resources.
#[inline(always)]
fn fits_in(wants: &Wants, node: &NodeInfo, slots_back: i64, back: Option<&Resources>) -> bool {
    if node.pods.len() as i64 - slots_back + 1 > node.allowed_pods {
        return false;
    }
    let free = &node.free().0;
    match back {
        None => wants
            .iter()
            .all(|(i, want)| want <= free[i % MAX_RESOURCES]),
        Some(back) => wants.iter().all(|(i, want)| {
            let i = i % MAX_RESOURCES;
            want <= free[i].saturating_add(back.0[i])
        }),
    }
}

/// Extended resources (`v1helper.IsExtendedResourceName`): a domain-prefixed name that is
/// not native (no `kubernetes.io/` anywhere in it, so `subdomain.kubernetes.io/x` is native
/// too) and not a quota `requests.` name. Only these can be ignored by the args.
fn is_extended(name: &str) -> bool {
    name.contains('/') && !name.contains("kubernetes.io/") && !name.starts_with("requests.")
}

impl Plugin for Fit {
    fn name(&self) -> &'static str {
        super::super::names::NODE_RESOURCES_FIT
    }

    fn points(&self) -> Points {
        Points::PRE_FILTER
            | Points::FILTER
            | Points::FILTER_FAST
            | Points::PRE_SCORE
            | Points::SCORE
    }

    fn events_to_register(&self) -> EventsToRegister {
        // Upstream: pod deletion and node add/allocatable; reservations hold capacity the way
        // pods do. A node-scoped event helps only a pod the node is big enough for.
        EventsToRegister::node_local(&[(
            kind::NODE_ADD | kind::NODE_ALLOCATABLE | kind::ASSIGNED_POD_DELETE | kind::RESERVATION,
            None,
        )])
        .with_node_check(fits_node)
    }

    /// Every request fits in what is left, and there is a pod slot: Filter's arithmetic
    /// without its reasons. A request that does not fit says no even when Filter would let
    /// it through (an ignored or `pods` resource): Filter decides those.
    fn passes(&self, cx: &Cluster, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> bool {
        fits(state, pod, &Wants::of(cx, pod), node)
    }

    /// [`Plugin::passes`] with the pod's requests listed once per batch.
    fn passes_each(
        &self,
        cx: &Cluster,
        state: &CycleState,
        pod: &PodInfo,
        nodes: &[&NodeInfo],
        pass: &mut u64,
    ) {
        let wants = Wants::of(cx, pod);
        // Most pods get nothing back from reservations, and owners only on a few nodes:
        // no lookups per node for them.
        let reservation = state
            .reservation
            .as_ref()
            .filter(|r| !r.gives_back_nothing());
        // Past the preferred nodes, none of the batch is one of the pod's reservation nodes.
        debug_assert!(
            !state.outside_preferred
                || reservation.is_none_or(|r| nodes.iter().all(|n| !r.gives_back_on(n.idx)))
        );
        let reservation = reservation.filter(|_| !state.outside_preferred);
        match (reservation, wants.as_slice()) {
            // The usual pod (cpu and memory) on nodes that give nothing back: two
            // comparisons and the pod slot per node, the loop over resources unrolled.
            (None, &[a, b]) => keep(pass, nodes, |n| fits_two(n, a, b)),
            (None, _) => keep(pass, nodes, |n| fits_in(&wants, n, 0, None)),
            // An owner: the same two comparisons on nodes without its reservations.
            (Some(r), &[a, b]) => keep(pass, nodes, |n| {
                if r.gives_back_on(n.idx) {
                    fits(state, pod, &wants, n)
                } else {
                    fits_two(n, a, b)
                }
            }),
            (Some(r), _) => keep(pass, nodes, |n| {
                if r.gives_back_on(n.idx) {
                    fits(state, pod, &wants, n)
                } else {
                    fits_in(&wants, n, 0, None)
                }
            }),
        }
    }

    fn pre_filter(&self, _cx: &Cluster, _state: &mut CycleState, _pod: &PodInfo) -> Status {
        // The request is computed once when the pod is seen (PodInfo::requests).
        Status::success()
    }

    fn filter(&self, cx: &Cluster, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        let mut status = Status::success();
        let mut unresolvable = false;
        let reject = |status: &mut Status, reason: Cow<'static, str>| {
            *status = if status.is_success() {
                Status::unschedulable(reason)
            } else {
                std::mem::take(status).with_reason(reason)
            };
        };
        // A Reservation's reserve pod takes a pod slot like any pod (Koordinator schedules it
        // through the same Filter), so it is refused on a full node too; an owner gets back
        // the slots its reservations' stand-ins hold for it.
        let slots_back = state
            .reservation
            .as_ref()
            .map_or(0, |r| r.restored_pods(node));
        if node.pods.len() as i64 - slots_back + 1 > node.allowed_pods {
            reject(&mut status, Cow::Borrowed(TOO_MANY_PODS));
        }
        // Per slot, without copying vectors: free = allocatable - requested - reserved
        // (+ what the pod's reservations give back).
        let back = state
            .reservation
            .as_ref()
            .and_then(|r| r.restored(pod, node.idx));
        for i in 0..cx.cache.names.len() {
            let id = ResourceId(i as u8);
            let want = pod.requests[id];
            if want <= 0 {
                continue;
            }
            let mut free = node.allocatable[id]
                .saturating_sub(node.requested[id])
                .saturating_sub(node.reserved[id]);
            if let Some(b) = back {
                free = free.saturating_add(b[id]);
            }
            if want <= free {
                continue;
            }
            let name = cx.cache.names.name(id);
            // `pods` is the pod-count limit, checked above, never a request to fit.
            if name == "pods" || self.ignored(name) {
                continue;
            }
            // No preemption frees more than the node has: kube-scheduler (1.32+) makes
            // such a rejection UnschedulableAndUnresolvable.
            unresolvable |= want > node.allocatable[id];
            reject(&mut status, insufficient_reason(name));
        }
        if unresolvable {
            status.set_code(Code::UnschedulableAndUnresolvable);
        }
        status
    }

    fn pre_score(
        &self,
        _cx: &Cluster,
        _state: &mut CycleState,
        _pod: &PodInfo,
        _nodes: &[crate::model::node::NodeIdx],
    ) -> Status {
        Status::success()
    }

    fn score(&self, cx: &Cluster, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> i64 {
        // Scoring counts reserved capacity as used for everyone, and gives an owner back what
        // its reservations hold, as Filter does.
        let back = state
            .reservation
            .as_ref()
            .and_then(|r| r.restored(pod, node.idx));
        self.scorer.score(&cx.cache.names, pod, node, back)
    }

    /// [`Plugin::score`] over every feasible node, with the pod's terms worked out once.
    fn score_nodes(
        &self,
        cx: &Cluster,
        state: &CycleState,
        pod: &PodInfo,
        nodes: &[NodeIdx],
        out: &mut Vec<i64>,
    ) {
        let terms = self.scorer.terms(&cx.cache.names, pod);
        // Two loops, so that the common one (no reservation gives anything back) asks
        // nothing per node.
        match super::gives_back(state) {
            None => self.scorer.score_nodes_plain(&terms, cx, nodes, out),
            Some(r) => {
                // Only the leading nodes can give anything back.
                let (asked, rest) = nodes.split_at(r.restoring_prefix(nodes));
                self.scorer
                    .score_nodes(&terms, cx, asked, out, |idx| r.restored(pod, idx));
                self.scorer.score_nodes_plain(&terms, cx, rest, out);
            }
        }
    }
}

/// NodeResourcesFit's node check for the queue: the resources no configuration can ignore
/// (CPU, memory, ephemeral storage) and the pod slot fit `node`, without reservations (an
/// owner may get some back, so `reserved` is not subtracted).
fn fits_node(
    _cx: &Cluster,
    _event: &crate::framework::events::ClusterEvent,
    pod: &PodInfo,
    node: &NodeInfo,
) -> bool {
    if node.pods.len() as i64 + 1 > node.allowed_pods {
        return false;
    }
    [
        ResourceId::CPU,
        ResourceId::MEMORY,
        ResourceId::EPHEMERAL_STORAGE,
    ]
    .into_iter()
    .all(|id| {
        let want = pod.requests[id];
        want <= 0 || want <= node.allocatable[id].saturating_sub(node.requested[id])
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::testing::{node, pod, NodeBuilder, PodBuilder};
    use serde_json::{json, Value};

    const EXT_A: &str = "example.com/aaa";
    const EXT_B: &str = "example.com/bbb";
    const KUBE_IO_A: &str = "kubernetes.io/something";
    const KUBE_IO_B: &str = "subdomain.kubernetes.io/something";
    const HUGEPAGE_A: &str = "hugepages-2Mi";

    /// A pod whose containers request the given `(cpu milli, memory bytes, extra)` each.
    fn containers(reqs: &[(i64, i64, Value)]) -> PodBuilder {
        let mut b = pod("p").spec("containers", json!([]));
        for (cpu, mem, extra) in reqs {
            let mut r = json!({"cpu": format!("{cpu}m"), "memory": mem.to_string()});
            if let Some(o) = extra.as_object() {
                for (k, v) in o {
                    r[k] = v.clone();
                }
            }
            b = b.container(r);
        }
        b
    }

    fn with_init(b: PodBuilder, reqs: &[(i64, i64, Value)]) -> PodBuilder {
        reqs.iter().fold(b, |b, (cpu, mem, extra)| {
            let mut r = json!({"cpu": format!("{cpu}m"), "memory": mem.to_string()});
            if let Some(o) = extra.as_object() {
                for (k, v) in o {
                    r[k] = v.clone();
                }
            }
            b.init_container(r)
        })
    }

    fn none() -> Value {
        json!({})
    }

    /// kube's fit_test node: cpu 10m, memory 20, pods 32, example.com/aaa 5,
    /// ephemeral-storage 20, hugepages-2Mi 5.
    fn fit_test_node() -> NodeBuilder {
        node("n")
            .alloc("cpu", "10m")
            .alloc("memory", "20")
            .alloc("pods", "32")
            .alloc(EXT_A, "5")
            .alloc("ephemeral-storage", "20")
            .alloc(HUGEPAGE_A, "5")
    }

    fn node_with(cx: &mut Cluster, b: NodeBuilder, existing: &[PodBuilder]) -> NodeInfo {
        let mut n = b.build_info_with(&mut cx.cache.names);
        for (i, p) in existing.iter().enumerate() {
            let p = p
                .clone()
                .meta("name", json!(format!("existing{i}")))
                .node_name("n");
            n.add_pod(Arc::new(p.build_info_with(&mut cx.cache.names)));
        }
        n
    }

    fn fit(args: Value) -> Fit {
        Fit::new(Some(&args)).unwrap()
    }

    struct Case {
        name: &'static str,
        pod: PodBuilder,
        existing: Vec<PodBuilder>,
        args: Value,
        want: Option<(Code, Vec<&'static str>)>,
    }

    fn fits(name: &'static str, pod: PodBuilder, existing: PodBuilder) -> Case {
        Case {
            name,
            pod,
            existing: vec![existing],
            args: json!({}),
            want: None,
        }
    }

    impl Case {
        fn rejects(mut self, code: Code, reasons: &[&'static str]) -> Self {
            self.want = Some((code, reasons.to_vec()));
            self
        }
        fn args(mut self, args: Value) -> Self {
            self.args = args;
            self
        }
    }

    #[test]
    fn filter_checks_requests_against_what_is_left_like_kube() {
        use Code::{Unschedulable as U, UnschedulableAndUnresolvable as UU};
        let r = |cpu: i64, mem: i64| containers(&[(cpu, mem, none())]);
        let ext = |name: &str, n: i64| json!({ name: n.to_string() });
        let cases = vec![
            fits("no resources requested always fits", pod("p"), r(10, 20)),
            fits("too many resources fails", r(1, 1), r(10, 20))
                .rejects(U, &["Insufficient cpu", "Insufficient memory"]),
            fits(
                "too many resources fails due to init container cpu",
                with_init(r(1, 1), &[(3, 1, none())]),
                r(8, 19),
            )
            .rejects(U, &["Insufficient cpu"]),
            fits(
                "too many resources fails due to highest init container cpu",
                with_init(r(1, 1), &[(3, 1, none()), (2, 1, none())]),
                r(8, 19),
            )
            .rejects(U, &["Insufficient cpu"]),
            fits(
                "too many resources fails due to init container memory",
                with_init(r(1, 1), &[(1, 3, none())]),
                r(9, 19),
            )
            .rejects(U, &["Insufficient memory"]),
            fits(
                "too many resources fails due to highest init container memory",
                with_init(r(1, 1), &[(1, 3, none()), (1, 2, none())]),
                r(9, 19),
            )
            .rejects(U, &["Insufficient memory"]),
            fits(
                "init container fits because it's the max, not sum, of containers and init containers",
                with_init(r(1, 1), &[(1, 1, none())]),
                r(9, 19),
            ),
            fits(
                "multiple init containers fit because it's the max, not sum",
                with_init(r(1, 1), &[(1, 1, none()), (1, 1, none())]),
                r(9, 19),
            ),
            fits("both resources fit", r(1, 1), r(5, 5)),
            fits("one resource memory fits", r(2, 1), r(9, 5)).rejects(U, &["Insufficient cpu"]),
            fits("one resource cpu fits", r(1, 2), r(5, 19)).rejects(U, &["Insufficient memory"]),
            fits("equal edge case", r(5, 1), r(5, 19)),
            fits("equal edge case for init container", with_init(r(4, 1), &[(5, 1, none())]), r(5, 19)),
            fits("extended resource fits", containers(&[(0, 0, ext(EXT_A, 1))]), pod("e")),
            fits(
                "extended resource fits for init container",
                with_init(pod("p"), &[(0, 0, ext(EXT_A, 1))]),
                pod("e"),
            ),
            fits(
                "extended resource capacity enforced: more than the node has is unresolvable",
                containers(&[(1, 1, ext(EXT_A, 10))]),
                pod("e"),
            )
            .rejects(UU, &["Insufficient example.com/aaa"]),
            fits(
                "extended resource capacity enforced for init container",
                with_init(pod("p"), &[(1, 1, ext(EXT_A, 10))]),
                pod("e"),
            )
            .rejects(UU, &["Insufficient example.com/aaa"]),
            fits(
                "extended resource allocatable enforced",
                containers(&[(1, 1, ext(EXT_A, 1))]),
                containers(&[(0, 0, ext(EXT_A, 5))]),
            )
            .rejects(U, &["Insufficient example.com/aaa"]),
            fits(
                "extended resource allocatable enforced for init container",
                with_init(pod("p"), &[(1, 1, ext(EXT_A, 1))]),
                containers(&[(0, 0, ext(EXT_A, 5))]),
            )
            .rejects(U, &["Insufficient example.com/aaa"]),
            fits(
                "extended resource allocatable enforced for multiple containers",
                containers(&[(1, 1, ext(EXT_A, 3)), (1, 1, ext(EXT_A, 3))]),
                containers(&[(0, 0, ext(EXT_A, 2))]),
            )
            .rejects(UU, &["Insufficient example.com/aaa"]),
            fits(
                "extended resource allocatable admits multiple init containers",
                with_init(pod("p"), &[(1, 1, ext(EXT_A, 3)), (1, 1, ext(EXT_A, 3))]),
                containers(&[(0, 0, ext(EXT_A, 2))]),
            ),
            fits(
                "extended resource allocatable enforced for multiple init containers",
                with_init(pod("p"), &[(1, 1, ext(EXT_A, 6)), (1, 1, ext(EXT_A, 3))]),
                containers(&[(0, 0, ext(EXT_A, 2))]),
            )
            .rejects(UU, &["Insufficient example.com/aaa"]),
            fits(
                "extended resource allocatable enforced for unknown resource",
                containers(&[(1, 1, ext(EXT_B, 1))]),
                pod("e"),
            )
            .rejects(UU, &["Insufficient example.com/bbb"]),
            fits(
                "extended resource allocatable enforced for unknown resource for init container",
                with_init(pod("p"), &[(1, 1, ext(EXT_B, 1))]),
                pod("e"),
            )
            .rejects(UU, &["Insufficient example.com/bbb"]),
            fits(
                "kubernetes.io resource capacity enforced",
                containers(&[(1, 1, ext(KUBE_IO_A, 10))]),
                pod("e"),
            )
            .rejects(UU, &["Insufficient kubernetes.io/something"]),
            fits(
                "kubernetes.io resource capacity enforced for init container",
                with_init(pod("p"), &[(1, 1, ext(KUBE_IO_A, 10))]),
                pod("e"),
            )
            .rejects(UU, &["Insufficient kubernetes.io/something"]),
            fits(
                "hugepages resource capacity enforced",
                containers(&[(1, 1, ext(HUGEPAGE_A, 10))]),
                pod("e"),
            )
            .rejects(UU, &["Insufficient hugepages-2Mi"]),
            fits(
                "hugepages resource allocatable enforced for multiple containers",
                containers(&[(1, 1, ext(HUGEPAGE_A, 3)), (1, 1, ext(HUGEPAGE_A, 3))]),
                containers(&[(0, 0, ext(HUGEPAGE_A, 2))]),
            )
            .rejects(UU, &["Insufficient hugepages-2Mi"]),
            fits(
                "skip checking ignored extended resource",
                containers(&[(1, 1, ext(EXT_B, 1))]),
                pod("e"),
            )
            .args(json!({"ignoredResources": [EXT_B]})),
            fits(
                "skip checking ignored extended resource via resource groups",
                containers(&[(1, 1, ext(EXT_B, 1))]),
                pod("e"),
            )
            .args(json!({"ignoredResourceGroups": ["example.com"]})),
            fits(
                "resource groups do not ignore kubernetes.io resources",
                containers(&[(1, 1, ext(KUBE_IO_A, 1))]),
                pod("e"),
            )
            .args(json!({"ignoredResourceGroups": ["kubernetes.io"], "ignoredResources": [KUBE_IO_A]}))
            .rejects(UU, &["Insufficient kubernetes.io/something"]),
            fits(
                "resource names under a kubernetes.io subdomain are native and never ignored",
                containers(&[(1, 1, ext(KUBE_IO_B, 1))]),
                pod("e"),
            )
            .args(json!({"ignoredResources": [KUBE_IO_B], "ignoredResourceGroups": ["subdomain.kubernetes.io"]}))
            .rejects(UU, &["Insufficient subdomain.kubernetes.io/something"]),
            fits(
                "resources + pod overhead fits",
                r(1, 1).spec("overhead", json!({"cpu": "3m", "memory": "13"})),
                r(5, 5),
            ),
            fits(
                "requests + overhead does not fit for memory",
                r(1, 1).spec("overhead", json!({"cpu": "1m", "memory": "15"})),
                r(5, 5),
            )
            .rejects(U, &["Insufficient memory"]),
            fits(
                "ephemeral storage is checked",
                containers(&[(0, 0, json!({"ephemeral-storage": "25"}))]),
                containers(&[(0, 0, json!({"ephemeral-storage": "2"}))]),
            )
            .rejects(UU, &["Insufficient ephemeral-storage"]),
            fits(
                "ephemeral storage within what is left fits",
                containers(&[(0, 0, json!({"ephemeral-storage": "10"}))]),
                containers(&[(0, 0, json!({"ephemeral-storage": "2"}))]),
            ),
        ];
        for c in cases {
            let mut cx = Cluster::default();
            let pl = fit(c.args.clone());
            let n = node_with(&mut cx, fit_test_node(), &c.existing);
            let p = c.pod.build_info_with(&mut cx.cache.names);
            let mut st = CycleState::default();
            assert!(pl.pre_filter(&cx, &mut st, &p).is_success(), "{}", c.name);
            let got = pl.filter(&cx, &st, &p, &n);
            match &c.want {
                None => assert!(got.is_success(), "{}: {got:?}", c.name),
                Some((code, reasons)) => {
                    assert_eq!(got.code(), *code, "{}: {got:?}", c.name);
                    assert_eq!(got.reasons(), reasons.as_slice(), "{}", c.name);
                }
            }
        }
    }

    #[test]
    fn too_many_pods_is_reported_first_and_stays_resolvable() {
        let mut cx = Cluster::default();
        let b = node("n")
            .alloc("cpu", "10m")
            .alloc("memory", "20")
            .alloc("pods", "1");
        let n = node_with(&mut cx, b, &[containers(&[(10, 20, none())])]);
        let pl = fit(json!({}));
        let st = CycleState::default();
        let empty = pod("p").build_info_with(&mut cx.cache.names);
        assert_eq!(
            pl.filter(&cx, &st, &empty, &n),
            Status::unschedulable(TOO_MANY_PODS)
        );
        let p = containers(&[(1, 1, none())]).build_info_with(&mut cx.cache.names);
        let got = pl.filter(&cx, &st, &p, &n);
        assert_eq!(got.code(), Code::Unschedulable);
        assert_eq!(
            got.reasons(),
            ["Too many pods", "Insufficient cpu", "Insufficient memory"]
        );
        // Unresolvable wins as soon as one request exceeds what the node has at all.
        let big = containers(&[(11, 1, none())]).build_info_with(&mut cx.cache.names);
        let got = pl.filter(&cx, &st, &big, &n);
        assert_eq!(got.code(), Code::UnschedulableAndUnresolvable);
        assert_eq!(
            got.reasons(),
            ["Too many pods", "Insufficient cpu", "Insufficient memory"]
        );
    }

    #[test]
    fn capacity_held_by_reservations_is_not_free() {
        let mut cx = Cluster::default();
        let mut n = node_with(
            &mut cx,
            node("n").alloc("cpu", "4").alloc("memory", "4Gi"),
            &[],
        );
        n.reserved[ResourceId::CPU] = 3000;
        n.touch();
        let pl = fit(json!({}));
        let p = pod("p")
            .req("cpu", "2")
            .build_info_with(&mut cx.cache.names);
        assert_eq!(
            pl.filter(&cx, &CycleState::default(), &p, &n),
            Status::unschedulable("Insufficient cpu")
        );
        let q = pod("q")
            .req("cpu", "1")
            .build_info_with(&mut cx.cache.names);
        assert!(pl.filter(&cx, &CycleState::default(), &q, &n).is_success());
    }

    #[test]
    fn insufficient_reasons_for_common_resources_do_not_allocate() {
        assert!(matches!(
            insufficient_reason("cpu"),
            Cow::Borrowed("Insufficient cpu")
        ));
        assert!(matches!(insufficient_reason("memory"), Cow::Borrowed(_)));
        assert_eq!(
            insufficient_reason("nvidia.com/gpu"),
            "Insufficient nvidia.com/gpu"
        );
    }

    fn score_nodes(
        args: Value,
        pod: PodBuilder,
        nodes: &[(NodeBuilder, Vec<PodBuilder>)],
    ) -> Vec<i64> {
        let mut cx = Cluster::default();
        let infos: Vec<NodeInfo> = nodes
            .iter()
            .map(|(b, existing)| node_with(&mut cx, b.clone(), existing))
            .collect();
        let p = pod.build_info_with(&mut cx.cache.names);
        let pl = fit(args);
        let mut st = CycleState::default();
        assert!(pl.pre_score(&cx, &mut st, &p, &[]).is_success());
        infos.iter().map(|n| pl.score(&cx, &st, &p, n)).collect()
    }

    fn sized(name: &str, cpu: &str, mem: &str) -> NodeBuilder {
        node(name).alloc("cpu", cpu).alloc("memory", mem)
    }

    fn cpu_mem(cpu: &str, mem: &str) -> PodBuilder {
        pod("p").req("cpu", cpu).req("memory", mem)
    }

    /// cpu 1000m + 2000m, memory 2000Mi + 3000Mi.
    fn two_containers() -> PodBuilder {
        pod("p")
            .spec("containers", json!([]))
            .container(json!({"cpu": "1000m", "memory": "2000Mi"}))
            .container(json!({"cpu": "2000m", "memory": "3000Mi"}))
    }

    fn strategy(kind: &str, resources: Value, extra: Value) -> Value {
        let mut s = json!({"type": kind, "resources": resources});
        if let Some(o) = extra.as_object() {
            for (k, v) in o {
                s[k] = v.clone();
            }
        }
        json!({"scoringStrategy": s})
    }

    fn cpu_mem_weights(cpu: i64, mem: i64) -> Value {
        json!([{"name": "cpu", "weight": cpu}, {"name": "memory", "weight": mem}])
    }

    #[test]
    fn least_allocated_scores_free_fraction_weighted() {
        let least = |res: Value| strategy("LeastAllocated", res, json!({}));
        let gpu_res = json!([{"name": "cpu", "weight": 1}, {"name": "memory", "weight": 1}, {"name": "example.com/gpu", "weight": 3}]);
        let cases: Vec<(
            &str,
            Value,
            PodBuilder,
            Vec<(NodeBuilder, Vec<PodBuilder>)>,
            Vec<i64>,
        )> = vec![
            (
                "differently sized nodes: (25 + 50) / 2 and (50 + 50) / 2",
                json!({}),
                two_containers(),
                vec![
                    (sized("a", "4", "10000Mi"), vec![]),
                    (sized("b", "6", "10000Mi"), vec![]),
                ],
                vec![37, 50],
            ),
            (
                "a pod requesting nothing is scored with 100m and 200Mi",
                json!({}),
                pod("p"),
                vec![(sized("a", "1", "2000Mi"), vec![])],
                vec![90],
            ),
            (
                "existing pods count with their non-zero requests",
                json!({}),
                cpu_mem("400m", "800Mi"),
                vec![(sized("a", "1", "2000Mi"), vec![pod("e")])],
                vec![50],
            ),
            (
                "a request above capacity scores 0 for that resource",
                json!({}),
                pod("p").req("cpu", "5"),
                vec![(sized("a", "4", "10000Mi"), vec![])],
                vec![49],
            ),
            (
                "weights: (25 * 2 + 50) / 3",
                least(cpu_mem_weights(2, 1)),
                two_containers(),
                vec![(sized("a", "4", "10000Mi"), vec![])],
                vec![33],
            ),
            (
                "a requested extended resource is scored with its weight",
                least(gpu_res.clone()),
                two_containers().req("example.com/gpu", "1"),
                vec![(
                    sized("a", "4", "10000Mi").alloc("example.com/gpu", "4"),
                    vec![],
                )],
                vec![60],
            ),
            (
                "an extended resource the pod does not request is left out",
                least(gpu_res),
                two_containers(),
                vec![(
                    sized("a", "4", "10000Mi").alloc("example.com/gpu", "4"),
                    vec![],
                )],
                vec![37],
            ),
            (
                "a resource the node does not have is left out",
                least(
                    json!([{"name": "cpu", "weight": 1}, {"name": "ephemeral-storage", "weight": 5}]),
                ),
                pod("p").req("cpu", "1").req("ephemeral-storage", "1Gi"),
                vec![(sized("a", "4", "10000Mi"), vec![])],
                vec![75],
            ),
            (
                "empty resources default to cpu and memory",
                least(json!([])),
                two_containers(),
                vec![(sized("a", "4", "10000Mi"), vec![])],
                vec![37],
            ),
        ];
        for (name, args, p, nodes, want) in cases {
            assert_eq!(score_nodes(args, p, &nodes), want, "{name}");
        }
    }

    #[test]
    fn most_allocated_scores_used_fraction_capped_at_capacity() {
        let most = |res: Value| strategy("MostAllocated", res, json!({}));
        let cases: Vec<(
            &str,
            Value,
            PodBuilder,
            Vec<(NodeBuilder, Vec<PodBuilder>)>,
            Vec<i64>,
        )> = vec![
            (
                "differently sized nodes: (75 + 50) / 2 and (50 + 50) / 2",
                most(cpu_mem_weights(1, 1)),
                two_containers(),
                vec![
                    (sized("a", "4", "10000Mi"), vec![]),
                    (sized("b", "6", "10000Mi"), vec![]),
                ],
                vec![62, 50],
            ),
            (
                "existing pods add to the fraction",
                most(cpu_mem_weights(1, 1)),
                cpu_mem("1", "2000Mi"),
                vec![(sized("a", "4", "10000Mi"), vec![cpu_mem("2", "3000Mi")])],
                vec![62],
            ),
            (
                "a request above capacity scores 100 for that resource",
                most(cpu_mem_weights(1, 1)),
                cpu_mem("5", "5000Mi"),
                vec![(sized("a", "4", "10000Mi"), vec![])],
                vec![75],
            ),
            (
                "weights: (75 * 1 + 50 * 3) / 4",
                most(cpu_mem_weights(1, 3)),
                two_containers(),
                vec![(sized("a", "4", "10000Mi"), vec![])],
                vec![56],
            ),
        ];
        for (name, args, p, nodes, want) in cases {
            assert_eq!(score_nodes(args, p, &nodes), want, "{name}");
        }
    }

    #[test]
    fn requested_to_capacity_ratio_follows_the_shape_and_rounds() {
        let ratio = |shape: Value, res: Value| {
            strategy(
                "RequestedToCapacityRatio",
                res,
                json!({"requestedToCapacityRatio": {"shape": shape}}),
            )
        };
        let bin_pack = json!([{"utilization": 0, "score": 0}, {"utilization": 100, "score": 10}]);
        let spread = json!([{"utilization": 0, "score": 10}, {"utilization": 100, "score": 0}]);
        let cases: Vec<(
            &str,
            Value,
            PodBuilder,
            Vec<(NodeBuilder, Vec<PodBuilder>)>,
            Vec<i64>,
        )> = vec![
            (
                "bin packing: round((75 + 50) / 2)",
                ratio(bin_pack.clone(), cpu_mem_weights(1, 1)),
                two_containers(),
                vec![
                    (sized("a", "4", "10000Mi"), vec![]),
                    (sized("b", "6", "10000Mi"), vec![]),
                ],
                vec![63, 50],
            ),
            (
                "spreading: round((25 + 50) / 2)",
                ratio(spread, cpu_mem_weights(1, 1)),
                two_containers(),
                vec![(sized("a", "4", "10000Mi"), vec![])],
                vec![38],
            ),
            (
                "resources scoring 0 do not count towards the weights",
                ratio(bin_pack.clone(), cpu_mem_weights(1, 1)),
                pod("p").req("cpu", "4"),
                vec![(sized("a", "4", "100000Mi"), vec![])],
                vec![100],
            ),
            (
                "over capacity scores as full utilisation",
                ratio(bin_pack.clone(), cpu_mem_weights(1, 1)),
                cpu_mem("8", "10000Mi"),
                vec![(sized("a", "4", "10000Mi"), vec![])],
                vec![100],
            ),
            (
                "weighted extended resource",
                ratio(
                    bin_pack,
                    json!([{"name": "cpu", "weight": 1}, {"name": "memory", "weight": 1}, {"name": "example.com/gpu", "weight": 2}]),
                ),
                two_containers().req("example.com/gpu", "1"),
                vec![(
                    sized("a", "4", "10000Mi").alloc("example.com/gpu", "4"),
                    vec![],
                )],
                vec![44],
            ),
        ];
        for (name, args, p, nodes, want) in cases {
            assert_eq!(score_nodes(args, p, &nodes), want, "{name}");
        }
    }

    #[test]
    fn scoring_counts_reserved_capacity_as_used() {
        let mut cx = Cluster::default();
        let mut n = node_with(&mut cx, sized("a", "4", "10000Mi"), &[]);
        n.reserved[ResourceId::CPU] = 1000;
        n.touch();
        let p = cpu_mem("2", "5000Mi").build_info_with(&mut cx.cache.names);
        // cpu (4000 - 3000) / 4000 = 25, memory 50.
        assert_eq!(
            fit(json!({})).score(&cx, &CycleState::default(), &p, &n),
            37
        );
    }

    #[test]
    fn args_are_defaulted_and_validated_like_kube() {
        let bad: Vec<(Value, &str, &str)> = vec![
            (
                json!({"scoringStrategy": {"type": "LeastAllocated", "resources": [{"name": "cpu", "weight": 101}]}}),
                "scoringStrategy.resources[0].weight",
                "Invalid value: 101: resource weight of cpu not in valid range (0, 100]",
            ),
            (
                json!({"scoringStrategy": {"type": "RequestedToCapacityRatio"}}),
                "scoringStrategy.requestedToCapacityRatio",
                "Required value: must be specified when type is RequestedToCapacityRatio",
            ),
            (
                json!({"scoringStrategy": {"type": "MostAllocated", "requestedToCapacityRatio": {"shape": [{"utilization": 1, "score": 1}]}}}),
                "scoringStrategy.requestedToCapacityRatio",
                "Forbidden: must be nil when type is not RequestedToCapacityRatio",
            ),
            (
                json!({"scoringStrategy": {"type": "RequestedToCapacityRatio", "requestedToCapacityRatio": {"shape": []}}}),
                "scoringStrategy.requestedToCapacityRatio.shape",
                "Required value: at least one point must be specified",
            ),
            (
                json!({"scoringStrategy": {"type": "RequestedToCapacityRatio", "requestedToCapacityRatio": {"shape": [
                    {"utilization": 50, "score": 1}, {"utilization": 10, "score": 20}]}}}),
                "scoringStrategy.requestedToCapacityRatio.shape[1].utilization",
                "Invalid value: 10: values must be sorted in increasing order",
            ),
            (
                json!({"scoringStrategy": {"type": "RequestedToCapacityRatio", "requestedToCapacityRatio": {"shape": [
                    {"utilization": 10, "score": 11}]}}}),
                "scoringStrategy.requestedToCapacityRatio.shape[0].score",
                "Invalid value: 11: not in valid range [0, 10]",
            ),
            (
                json!({"scoringStrategy": {"type": "RequestedToCapacityRatio", "requestedToCapacityRatio": {"shape": [
                    {"utilization": 110, "score": 1}]}}}),
                "scoringStrategy.requestedToCapacityRatio.shape[0].utilization",
                "Invalid value: 110: not in valid range [0, 100]",
            ),
            (
                json!({"ignoredResourceGroups": ["example.com/aaa"]}),
                "ignoredResourceGroups[0]",
                "Invalid value: \"example.com/aaa\": resource group name can't contain '/'",
            ),
        ];
        for (args, field, message) in bad {
            let e = Fit::new(Some(&args)).unwrap_err();
            assert_eq!(
                (e.field.as_str(), e.message.as_str()),
                (field, message),
                "{args}"
            );
        }
        assert!(Fit::new(Some(&json!({"scoringStrategy": {"type": "Bogus"}}))).is_err());
        let s = fit(
            json!({"scoringStrategy": {"type": "MostAllocated", "resources": [{"name": "cpu"}]}}),
        )
        .strategy();
        assert_eq!(s.resources[0].weight, 1);
        assert_eq!(fit(json!({})).strategy().resources.len(), 2);
    }
}
