//! Property tests of the core driven asynchronously by [`FakeDriver`]: random sequences of
//! nodes (names reused after deletion), pods (updated, deleted, re-created under the same
//! name, finished, some another scheduler's), reservations, partial progress (binds left
//! in flight while the next operations arrive), bind refusals, answers and watch events
//! delivered in shuffled order, time steps, scheduler restarts from a shuffled LIST and
//! re-lists after a broken watch.
//!
//! After every operation:
//! - no node is overcommitted, in the scheduler's view (requests plus what reservations
//!   hold) and in the API server's (bound pods plus the unallocated remainder of Available
//!   reservations);
//! - no reservation is overallocated, and only owners allocate from one;
//! - no pod is bound twice: the driver saw no second bind of a pod in flight or shown bound,
//!   and no pod sits on two nodes in the cache;
//! - nothing was bound, deleted or failed before an initial sync was over.
//!
//! Whenever everything has settled, no bind is left in flight and a scheduler rebuilt from
//! the API server's objects (shuffled, kinds interleaved) has the same node accounting and
//! reservations as the running one.
//!
//! With lost bind answers (written, but the scheduler hears of a time-out) the scheduler
//! may place a pod in the room of one it believes unbound until the watch says otherwise,
//! as kube-scheduler may (the kubelet's admission is the backstop): that run checks
//! everything but overcommitment.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use berth_api::annotations::{AnnotationCodec, ReservationAllocated};
use berth_api::parse_resource;
use berth_api::reservation::ReservationPhase;
use berth_core::reservation::testkit::{accounting, reservation};
use berth_core::testing::{node, pod, DriverConfig, FakeDriver, Profiles};
use berth_core::{Config, Kind, Object, ObjectKey};
use proptest::prelude::*;

/// Node names: few, so that deleted names come back.
const NODES: [&str; 3] = ["n0", "n1", "n2"];
/// Pod names: few, so that pods are deleted and created again under the same name.
const PODS: usize = 8;
const RESERVATIONS: usize = 3;

#[derive(Debug, Clone)]
enum Op {
    AddNode(usize),
    DeleteNode(usize),
    AddPod {
        slot: usize,
        cpu_m: u32,
        priority: i32,
        group: u8,
        foreign: bool,
    },
    DeletePod(usize),
    RecreatePod(usize),
    /// 0: a label (the scheduler reads it), 1: a status-only change, 2: resourceVersion only.
    TouchPod(usize, u8),
    FinishPod(usize),
    AddReservation {
        slot: usize,
        cpu_m: u32,
        group: u8,
        reusable: bool,
    },
    DeleteReservation(usize),
    Steps(u8),
    Settle,
    Advance(u32),
    Restart,
    Relist(u8),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        2 => (0..NODES.len()).prop_map(Op::AddNode),
        1 => (0..NODES.len()).prop_map(Op::DeleteNode),
        6 => (0..PODS, 100u32..2500, 0i32..3, 0u8..2, prop::bool::weighted(0.1))
            .prop_map(|(slot, cpu_m, priority, group, foreign)| Op::AddPod {
                slot, cpu_m, priority: priority * 100, group, foreign,
            }),
        2 => (0..PODS).prop_map(Op::DeletePod),
        1 => (0..PODS).prop_map(Op::RecreatePod),
        2 => (0..PODS, 0u8..3).prop_map(|(i, k)| Op::TouchPod(i, k)),
        1 => (0..PODS).prop_map(Op::FinishPod),
        2 => (0..RESERVATIONS, 200u32..2000, 0u8..2, any::<bool>())
            .prop_map(|(slot, cpu_m, group, reusable)| Op::AddReservation { slot, cpu_m, group, reusable }),
        1 => (0..RESERVATIONS).prop_map(Op::DeleteReservation),
        4 => (1u8..6).prop_map(Op::Steps),
        2 => Just(Op::Settle),
        1 => (1u32..90).prop_map(Op::Advance),
        1 => Just(Op::Restart),
        1 => (0u8..3).prop_map(Op::Relist),
    ]
}

/// Capacity by node name, the same whenever the name comes back.
fn node_cpu(i: usize) -> &'static str {
    ["4", "3", "2"][i % 3]
}

struct World {
    d: FakeDriver,
}

impl World {
    fn new(seed: u64, refuse_pct: u32, lose_answer_pct: u32) -> Self {
        let cfg = DriverConfig {
            seed,
            refuse_pct,
            lose_answer_pct,
            shuffle: true,
        };
        let config = Config {
            seed,
            ..Config::default()
        };
        let mut d = FakeDriver::new(Profiles::default_profile(), config, cfg, 1_000_000_000);
        for (i, name) in NODES.iter().take(2).enumerate() {
            d.apply(Object::Node(
                node(name)
                    .alloc("cpu", node_cpu(i))
                    .alloc("memory", "8Gi")
                    .build(),
            ));
        }
        d.settle();
        Self { d }
    }

    fn pod_key(slot: usize) -> ObjectKey {
        ObjectKey::pod("default", &format!("p{slot}"))
    }

    fn apply(&mut self, op: &Op) {
        let d = &mut self.d;
        match *op {
            Op::AddNode(i) => d.apply(Object::Node(
                node(NODES[i])
                    .alloc("cpu", node_cpu(i))
                    .alloc("memory", "8Gi")
                    .label("gen", &d.now().to_string())
                    .build(),
            )),
            Op::DeleteNode(i) => {
                d.delete(&ObjectKey::cluster(Kind::Node, NODES[i]));
            }
            Op::AddPod {
                slot,
                cpu_m,
                priority,
                group,
                foreign,
            } => {
                if d.get(&Self::pod_key(slot)).is_some() {
                    return;
                }
                let mut p = pod(&format!("p{slot}"))
                    .req("cpu", &format!("{cpu_m}m"))
                    .req("memory", "100Mi")
                    .priority(priority)
                    .label("app", &format!("g{group}"));
                if foreign {
                    p = p.spec("schedulerName", serde_json::json!("other-scheduler"));
                }
                d.apply(Object::Pod(p.build()));
            }
            Op::DeletePod(i) => {
                d.delete(&Self::pod_key(i));
            }
            Op::RecreatePod(i) => {
                let key = Self::pod_key(i);
                let Some(Object::Pod(p)) = d.get(&key).cloned() else {
                    return;
                };
                d.delete(&key);
                let mut fresh = (*p).clone();
                fresh.metadata.uid = None;
                fresh.metadata.resource_version = None;
                fresh.metadata.annotations = None;
                fresh.status = None;
                if let Some(spec) = fresh.spec.as_mut() {
                    spec.node_name = None;
                }
                d.apply(Object::Pod(Arc::new(fresh)));
            }
            Op::TouchPod(i, kind) => {
                let key = Self::pod_key(i);
                let stamp = d.now().to_string();
                match kind {
                    0 => d.modify(&key, |o| {
                        o.meta_mut()
                            .labels
                            .get_or_insert_with(Default::default)
                            .insert("touched".into(), stamp);
                    }),
                    1 => d.modify(&key, |o| {
                        if let Object::Pod(p) = o {
                            let st = Arc::make_mut(p).status.get_or_insert_with(Default::default);
                            st.message = Some(format!("probe {stamp}"));
                        }
                    }),
                    _ => d.modify(&key, |o| {
                        o.meta_mut().resource_version = Some(format!("touched-{stamp}"));
                    }),
                };
            }
            Op::FinishPod(i) => {
                let key = Self::pod_key(i);
                let bound = matches!(d.get(&key), Some(Object::Pod(p))
                    if p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some());
                if bound {
                    d.set_phase(&key, "Succeeded");
                }
            }
            Op::AddReservation {
                slot,
                cpu_m,
                group,
                reusable,
            } => {
                let name = format!("r{slot}");
                if d.reservation(&name).is_some() {
                    return;
                }
                let mut b = reservation(&name)
                    .req("cpu", &format!("{cpu_m}m"))
                    .owner_label("app", &format!("g{group}"))
                    .ttl("2m");
                if reusable {
                    b = b.reusable();
                }
                d.apply(Object::Reservation(Arc::new(b.build())));
            }
            Op::DeleteReservation(i) => {
                d.delete(&ObjectKey::cluster(Kind::Reservation, &format!("r{i}")));
            }
            Op::Steps(n) => {
                for _ in 0..n {
                    d.step();
                }
            }
            Op::Settle => d.settle(),
            Op::Advance(s) => d.advance(i64::from(s) * 1000),
            Op::Restart => d.restart(),
            Op::Relist(k) => d.relist([Kind::Pod, Kind::Node, Kind::Reservation][k as usize % 3]),
        }
    }
}

fn cpu_of(p: &berth_api::k8s_openapi::api::core::v1::Pod) -> i64 {
    p.spec
        .iter()
        .flat_map(|s| s.containers.iter())
        .filter_map(|c| c.resources.as_ref()?.requests.as_ref()?.get("cpu"))
        .map(|q| parse_resource("cpu", &q.0).unwrap_or(0))
        .sum()
}

/// Checks what must hold after every operation; `settled`: nothing is in flight, so the
/// reservation statuses written must agree with the pods the API server holds.
fn check(w: &World, settled: bool) -> Result<(), TestCaseError> {
    let d = &w.d;
    prop_assert!(d.violations().is_empty(), "{:?}", d.violations());
    let s = d.scheduler();
    // No pod on two nodes in the cache.
    let mut seen: BTreeSet<String> = BTreeSet::new();
    for n in s.nodes() {
        for p in &n.pods {
            if p.is_reserve_pod() {
                continue;
            }
            prop_assert!(seen.insert(p.key.to_string()), "{} on two nodes", p.key);
        }
    }
    for r in s.reservations() {
        prop_assert!(r.taken().le(&r.allocatable), "{} overallocated", r.name);
    }
    // The API server's view: owners only, allocated the sum of the owners' requests.
    let mut owners_cpu: BTreeMap<String, i64> = BTreeMap::new();
    let mut node_cpu_used: BTreeMap<String, i64> = BTreeMap::new();
    let reservations: BTreeMap<String, _> = d
        .of_kind(Kind::Reservation)
        .filter_map(|o| match o {
            Object::Reservation(r) => Some((r.metadata.uid.clone().unwrap_or_default(), r.clone())),
            _ => None,
        })
        .collect();
    for o in d.of_kind(Kind::Pod) {
        let Object::Pod(p) = o else { continue };
        let Some(n) = p.spec.as_ref().and_then(|s| s.node_name.clone()) else {
            continue;
        };
        let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
        if matches!(phase, Some("Succeeded" | "Failed")) {
            continue;
        }
        *node_cpu_used.entry(n).or_default() += cpu_of(p);
        let allocated = ReservationAllocated::from_annotations(p.metadata.annotations.as_ref())
            .ok()
            .flatten();
        if let Some(a) = allocated {
            let Some(r) = reservations.get(&a.uid) else {
                continue;
            };
            // Owners by label (the generated reservations) or by UID (those preemption
            // makes for its preemptor).
            let owner = &r.spec.owners[0];
            let (want, has) = match owner.object.as_ref() {
                Some(o) => (o.uid.clone(), p.metadata.uid.clone()),
                None => (
                    owner
                        .label_selector
                        .as_ref()
                        .and_then(|s| s.match_labels.as_ref())
                        .and_then(|m| m.get("app"))
                        .cloned(),
                    p.metadata
                        .labels
                        .as_ref()
                        .and_then(|l| l.get("app"))
                        .cloned(),
                ),
            };
            prop_assert_eq!(
                has,
                want,
                "{:?} allocated from {} without being an owner",
                p.metadata.name,
                a.name
            );
            *owners_cpu.entry(a.uid.clone()).or_default() += cpu_of(p);
        }
    }
    for (uid, r) in &reservations {
        let st = r.status.clone().unwrap_or_default();
        let alloc = st
            .allocatable
            .get("cpu")
            .map_or(0, |q| parse_resource("cpu", &q.0).unwrap_or(0));
        let allocated = st
            .allocated
            .get("cpu")
            .map_or(0, |q| parse_resource("cpu", &q.0).unwrap_or(0));
        if st.phase != Some(ReservationPhase::Available) {
            continue;
        }
        // Koordinator's syncStatus: allocated is the sum of the bound owners' requests, not
        // capped at allocatable (the cap applies to what the reservation gives, checked
        // through `taken` above and the node accounting below). Between a bind and the
        // status write that follows it the two differ, so only once settled.
        if settled {
            let owned = owners_cpu.get(uid).copied().unwrap_or(0);
            prop_assert_eq!(
                allocated,
                owned,
                "{:?} allocated is not the sum of its owners' requests",
                r.metadata.name
            );
        }
        let Some(n) = st.node_name.clone() else {
            continue;
        };
        let taken = owners_cpu.get(uid).copied().unwrap_or(0).min(alloc);
        *node_cpu_used.entry(n).or_default() += alloc - taken;
    }
    // A lost bind answer included: berth-kube reads the pod back before it reports a
    // failure, so the room is never given away while the bind may have landed.
    for n in s.nodes() {
        let mut total = n.requested;
        total.add(&n.reserved);
        prop_assert!(
            total.le(&n.allocatable),
            "node {} overcommitted in the cache: {:?} > {:?}",
            n.name,
            total,
            n.allocatable
        );
    }
    for o in d.of_kind(Kind::Node) {
        let Object::Node(n) = o else { continue };
        let name = n.metadata.name.clone().unwrap_or_default();
        let cap = n
            .status
            .as_ref()
            .and_then(|s| s.allocatable.as_ref())
            .and_then(|a| a.get("cpu"))
            .map_or(0, |q| parse_resource("cpu", &q.0).unwrap_or(0));
        let used = node_cpu_used.get(&name).copied().unwrap_or(0);
        prop_assert!(
            used <= cap,
            "node {} overcommitted in the API server: {} > {}",
            name,
            used,
            cap
        );
    }
    Ok(())
}

/// Settles and checks the rebuild: nothing in flight, and a scheduler built from the
/// objects agrees with the running one.
fn check_settled(w: &mut World) -> Result<(), TestCaseError> {
    w.d.settle();
    check(w, true)?;
    prop_assert!(w.d.quiescent());
    let in_flight: Vec<String> =
        w.d.scheduler()
            .binds_in_flight()
            .map(|(k, n)| format!("{k}->{n}"))
            .collect();
    prop_assert!(
        in_flight.is_empty(),
        "binds left in flight: {:?}",
        in_flight
    );
    let rebuilt = w.d.rebuilt();
    prop_assert_eq!(
        accounting(w.d.scheduler()),
        accounting(&rebuilt),
        "rebuilt state differs"
    );
    prop_assert!(w.d.violations().is_empty(), "{:?}", w.d.violations());
    Ok(())
}

fn run(seed: u64, refuse_pct: u32, lose_pct: u32, ops: &[Op]) -> Result<(), TestCaseError> {
    let mut w = World::new(seed, refuse_pct, lose_pct);
    for op in ops {
        w.apply(op);
        if matches!(op, Op::Settle) {
            check_settled(&mut w)?;
        } else {
            check(&w, false)?;
        }
    }
    check_settled(&mut w)
}

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    #[test]
    fn async_binds_never_overcommit_double_bind_or_diverge_from_a_rebuild(
        seed in any::<u64>(),
        refuse_pct in 0u32..40,
        ops in prop::collection::vec(op(), 1..48),
    ) {
        run(seed, refuse_pct, 0, &ops)?;
    }

    #[test]
    fn lost_bind_answers_never_double_bind_or_diverge_from_a_rebuild(
        seed in any::<u64>(),
        refuse_pct in 0u32..20,
        lose_pct in 10u32..50,
        ops in prop::collection::vec(op(), 1..48),
    ) {
        run(seed, refuse_pct, lose_pct, &ops)?;
    }
}

/// The generator reaches what the properties are about: over a fixed sample of seeds the
/// driver refuses binds, loses answers, reports conflicts and gones, restarts and re-lists.
#[test]
fn the_driver_exercises_every_failure_class() {
    // Cycles of twelve operations; `c` numbers the cycle, so that one cycle's operations
    // are about the same pod.
    let ops: Vec<Op> = (0..72usize)
        .map(|i| (i / 12, i % 12))
        .map(|(c, k)| match k {
            0 => Op::AddPod {
                slot: c % PODS,
                cpu_m: 600,
                priority: 0,
                group: 0,
                foreign: false,
            },
            1 | 2 => Op::Steps(1),
            // Often while its bind is still on its way: the bind finds the pod gone.
            3 => Op::DeletePod(c % PODS),
            4 => Op::RecreatePod((c + 3) % PODS),
            5 => Op::AddPod {
                slot: (c + 1) % PODS,
                cpu_m: 400,
                priority: 100,
                group: 1,
                foreign: false,
            },
            6 => Op::Steps(2),
            7 => Op::Restart,
            8 => Op::Relist(0),
            9 => Op::AddReservation {
                slot: c % RESERVATIONS,
                cpu_m: 500,
                group: 0,
                reusable: true,
            },
            10 if c % 2 == 0 => Op::DeleteNode(c % 3),
            10 => Op::AddNode(c % 3),
            _ => Op::Settle,
        })
        .collect();
    let mut total = berth_core::testing::DriverStats::default();
    for seed in 0..20 {
        let mut w = World::new(seed, 30, 30);
        for op in &ops {
            w.apply(op);
        }
        w.d.settle();
        let st = w.d.stats();
        total.refused += st.refused;
        total.lost_answers += st.lost_answers;
        total.conflicts += st.conflicts;
        total.not_found += st.not_found;
        total.restarts += st.restarts;
        total.relists += st.relists;
        total.bound += st.bound;
        total.binds += st.binds;
        assert!(w.d.violations().is_empty(), "{:?}", w.d.violations());
    }
    // A 409: the pod is recreated between the cycle that placed it and its bind (a lost
    // answer no longer leads there: the adapter reads the pod back).
    let mut w = World::new(0, 0, 0);
    w.apply(&Op::AddPod {
        slot: 0,
        cpu_m: 100,
        priority: 0,
        group: 0,
        foreign: false,
    });
    w.d.deliver_watch();
    let now = w.d.now();
    w.d.scheduler_mut().run_until_idle(now);
    w.apply(&Op::RecreatePod(0));
    w.d.settle();
    assert!(w.d.violations().is_empty(), "{:?}", w.d.violations());
    total.conflicts += w.d.stats().conflicts;
    assert!(
        total.bound > 0 && total.refused > 0 && total.lost_answers > 0,
        "{total:?}"
    );
    assert!(total.conflicts > 0 && total.not_found > 0, "{total:?}");
    assert!(total.restarts > 0 && total.relists > 0, "{total:?}");
}
