//! Property test: the reserve cache's remembered Filter verdicts and scores
//! ([`ReserveCache::filter_verdict_at`], [`ReserveCache::score_at`]) are exactly what
//! working them out again gives ([`ReserveCache::filter_verdict_fresh`], [`score_node`]),
//! after any sequence of NRT updates and deletions, node deletions, reservations,
//! unreservations, binds, foreign pods, filter verdicts and resyncs, in every cache mode.

use proptest::prelude::*;

use super::fingerprint;
use super::policy::AnyResource;
use super::reserve_cache::{
    score_node, CacheConfig, CacheMode, NodeSlot, PodIdent, PodKey, ReserveCache,
};
use super::score::{ScoringStrategy, ScoringStrategyType};
use super::types::{
    InitContainerRequest, NodeTopology, NrtFingerprint, NumaZones, PodNumaRequest, QosClass,
    Resources, TmPolicy, TmScope, TopologyManagerConfig,
};
use super::verdict::FilterVerdict;
use super::FingerprintMethod;

const NODES: usize = 4;
const PODS: usize = 6;

fn node(i: usize) -> String {
    format!("n{}", i % NODES)
}

fn pod(k: usize) -> PodKey {
    PodKey {
        uid: format!("uid-{k}"),
        namespace: "ns".into(),
        name: format!("p{k}"),
    }
}

fn res(pairs: &[(&str, &str)]) -> Resources {
    Resources::parse(pairs.iter().copied()).expect("valid")
}

/// The pod shapes: single containers of several sizes, two containers, an init container,
/// a Burstable one.
fn requests() -> Vec<PodNumaRequest> {
    let g = QosClass::Guaranteed;
    vec![
        PodNumaRequest::single(g, res(&[("cpu", "1"), ("memory", "1Gi")])),
        PodNumaRequest::single(g, res(&[("cpu", "3"), ("memory", "2Gi")])),
        PodNumaRequest::single(g, res(&[("cpu", "1500m"), ("memory", "6Gi")])),
        PodNumaRequest::new(
            g,
            [],
            [
                res(&[("cpu", "2")]),
                res(&[("cpu", "2"), ("memory", "1Gi")]),
            ],
            Resources::new(),
        ),
        PodNumaRequest::new(
            g,
            [InitContainerRequest {
                requests: res(&[("cpu", "4")]),
                sidecar: false,
            }],
            [res(&[("cpu", "1"), ("memory", "1Gi")])],
            Resources::new(),
        ),
        PodNumaRequest::single(QosClass::Burstable, res(&[("cpu", "5"), ("memory", "1Gi")])),
    ]
}

fn strategies() -> Vec<ScoringStrategy> {
    vec![
        ScoringStrategy::new(ScoringStrategyType::LeastAllocated),
        ScoringStrategy::new(ScoringStrategyType::MostAllocated),
        ScoringStrategy::new(ScoringStrategyType::BalancedAllocation),
        ScoringStrategy::new(ScoringStrategyType::LeastNUMANodes),
    ]
}

/// An NRT of two zones with these CPUs, a Topology Manager scope, and a fingerprint of
/// the pods `listed` (`None`: no fingerprint).
fn topology(cpu0: i64, cpu1: i64, pod_scope: bool, listed: Option<&[usize]>) -> NodeTopology {
    let zones = NumaZones::new()
        .with_zone(
            0,
            &[("cpu", cpu0 * 1000), ("memory", 8 << 30)],
            &[(0, 10), (1, 21)],
        )
        .with_zone(
            1,
            &[("cpu", cpu1 * 1000), ("memory", 4 << 30)],
            &[(0, 21), (1, 10)],
        );
    let scope = if pod_scope {
        TmScope::Pod
    } else {
        TmScope::Container
    };
    let names: Vec<String> = listed
        .unwrap_or(&[])
        .iter()
        .map(|k| format!("p{k}"))
        .collect();
    NodeTopology {
        zones,
        tm: TopologyManagerConfig::new(TmPolicy::SingleNumaNode, scope),
        fingerprint: listed.map(|_| NrtFingerprint {
            signature: fingerprint::sign(names.iter().map(|n| ("ns", n.as_str()))),
            method: Some(FingerprintMethod::All),
            from_annotation: false,
        }),
    }
}

#[derive(Debug, Clone)]
enum Op {
    /// NRT for node `i`: CPUs per zone, pod scope, fingerprint of pods `0..listed` (or
    /// none).
    Nrt(usize, i64, i64, bool, Option<usize>),
    RemoveNrt(usize),
    RemoveNode(usize),
    /// Reserve pod `k` with shape `s` on node `i`.
    Reserve(usize, usize, usize),
    Unreserve(usize, usize),
    Bound(usize, usize),
    Foreign(usize),
    FilteredOut(usize),
    FilterPassed(usize),
    /// Resync at this many seconds; the pods believed on every node are `0..n`.
    Resync(i64, usize),
    /// Query every node and shape (the answers are remembered from here on).
    Query,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (
            0..NODES,
            0..6i64,
            0..6i64,
            any::<bool>(),
            proptest::option::of(0..3usize)
        )
            .prop_map(|(i, a, b, p, f)| Op::Nrt(i, a, b, p, f)),
        (0..NODES).prop_map(Op::RemoveNrt),
        (0..NODES).prop_map(Op::RemoveNode),
        (0..NODES, 0..PODS, 0..6usize).prop_map(|(i, k, s)| Op::Reserve(i, k, s)),
        (0..NODES, 0..PODS).prop_map(|(i, k)| Op::Unreserve(i, k)),
        (0..NODES, 0..PODS).prop_map(|(i, k)| Op::Bound(i, k)),
        (0..NODES).prop_map(Op::Foreign),
        (0..NODES).prop_map(Op::FilteredOut),
        (0..NODES).prop_map(Op::FilterPassed),
        (0..100i64, 0..3usize).prop_map(|(t, n)| Op::Resync(t, n)),
        Just(Op::Query),
        Just(Op::Query),
    ]
}

fn mode() -> impl Strategy<Value = CacheMode> {
    prop_oneof![
        Just(CacheMode::OverReserve),
        Just(CacheMode::Passthrough),
        Just(CacheMode::DiscardReserved),
    ]
}

fn apply(c: &mut ReserveCache, op: &Op, reqs: &[PodNumaRequest], now: &mut i64) {
    *now += 1;
    match *op {
        Op::Nrt(i, a, b, p, f) => {
            let listed: Option<Vec<usize>> = f.map(|n| (0..n).collect());
            c.update_nrt(&node(i), topology(a, b, p, listed.as_deref()), *now);
        }
        Op::RemoveNrt(i) => c.remove_nrt(&node(i)),
        Op::RemoveNode(i) => c.remove_node(&node(i)),
        Op::Reserve(i, k, s) => c.reserve(&node(i), &pod(k), &reqs[s % reqs.len()], *now),
        Op::Unreserve(i, k) => c.unreserve(&node(i), &pod(k).uid),
        Op::Bound(i, k) => c.pod_bound(&node(i), &pod(k).uid),
        Op::Foreign(i) => c.foreign_pod(&node(i), &reqs[0]),
        Op::FilteredOut(i) => c.filtered_out(&node(i)),
        Op::FilterPassed(i) => c.filter_passed(&node(i)),
        Op::Resync(t, n) => {
            *now += t * 1000;
            c.resync(*now, |_, _| {
                (0..n)
                    .map(|k| PodIdent {
                        namespace: "ns".into(),
                        name: format!("p{k}"),
                        exclusive: true,
                    })
                    .collect()
            });
        }
        Op::Query => {}
    }
}

/// Every node (and a slot no node has) and shape: the remembered answers, asked twice, are
/// the fresh ones.
fn check(c: &ReserveCache, reqs: &[PodNumaRequest], strategies: &[ScoringStrategy]) {
    let slots = (0..NODES).map(|i| c.slot(&node(i))).chain([NodeSlot::NONE]);
    for slot in slots {
        for st in strategies {
            for r in reqs {
                let shape = c.shape(st, r);
                let fresh = c.filter_verdict_fresh(slot, r, &AnyResource);
                let score = score_node(st, c.view_at(slot), r);
                for _ in 0..2 {
                    assert_eq!(c.filter_verdict_at(slot, shape, r, &AnyResource), fresh);
                    assert_eq!(c.score_at(st, slot, shape, r), score);
                }
            }
        }
    }
}

/// Shapes per case: no more than a node line holds (8), so an answer remembered at one
/// query is still there at the next, and a stale one would be returned.
const REQUESTS: usize = 4;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1500))]

    #[test]
    fn remembered_verdicts_and_scores_are_the_fresh_ones(
        mode in mode(),
        first in 0..6usize,
        (a, b) in (0..4usize, 0..4usize),
        ops in proptest::collection::vec(op(), 1..40),
    ) {
        let all = requests();
        let reqs: Vec<PodNumaRequest> =
            (0..REQUESTS).map(|i| all[(first + i) % all.len()].clone()).collect();
        let strategies = [strategies()[a].clone(), strategies()[b].clone()];
        let mut c = ReserveCache::new(CacheConfig {
            mode,
            resync_period_ms: 1000,
            ..CacheConfig::default()
        });
        for st in &strategies {
            for r in &reqs {
                prop_assert!(c.intern_shape(st, r).is_some());
            }
        }
        let mut now = 0;
        for op in &ops {
            apply(&mut c, op, &reqs, &mut now);
            if matches!(op, Op::Query) {
                check(&c, &reqs, &strategies);
            }
        }
        check(&c, &reqs, &strategies);
        // A copy answers the same, and keeps answering right once it changes on its own.
        let mut copy = c.clone();
        check(&copy, &reqs, &strategies);
        apply(&mut copy, &Op::Reserve(0, 0, 1), &reqs, &mut now);
        check(&copy, &reqs, &strategies);
        check(&c, &reqs, &strategies);
    }
}

/// The memo is really consulted: a remembered answer is returned even where the cache's
/// own data would give another, which only a change through the cache may undo. Without
/// the forgetting on change, the property above fails.
#[test]
fn a_reservation_forgets_the_nodes_answers() {
    let reqs = requests();
    let st = ScoringStrategy::default();
    let mut c = ReserveCache::new(CacheConfig::default());
    c.update_nrt("n0", topology(4, 4, false, Some(&[])), 0);
    c.update_nrt("n1", topology(4, 4, false, Some(&[])), 0);
    let shape = c.intern_shape(&st, &reqs[1]);
    assert!(shape.is_some());
    let slot = c.slot("n0");
    let other = c.slot("n1");
    assert_eq!(
        c.filter_verdict_at(slot, shape, &reqs[1], &AnyResource),
        FilterVerdict::Pass
    );
    let before = c.score_at(&st, slot, shape, &reqs[1]);
    let other_before = c.score_at(&st, other, shape, &reqs[1]);
    // 3 CPUs of 4 taken from both zones: 3 more no longer fit on n0.
    c.reserve("n0", &pod(0), &reqs[1], 1);
    assert!(matches!(
        c.filter_verdict_at(slot, shape, &reqs[1], &AnyResource),
        FilterVerdict::Reject { .. }
    ));
    assert_ne!(c.score_at(&st, slot, shape, &reqs[1]), before);
    // n1 kept its answers, and they are still right.
    assert_eq!(
        c.filter_verdict_at(other, shape, &reqs[1], &AnyResource),
        FilterVerdict::Pass
    );
    assert_eq!(c.score_at(&st, other, shape, &reqs[1]), other_before);
}
