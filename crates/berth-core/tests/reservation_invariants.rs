//! Property tests of reservations: under random sequences of nodes, reservations, owners,
//! non-owners, deletions and time steps, driven by [`berth_core::testing::FakeDriver`] with
//! bind refusals and shuffled delivery, after every (settled) step
//! - no node is overcommitted: requests plus what reservations hold fit its allocatable;
//! - an Available reservation's `allocated` is the sum of its owners' requests (masked to
//!   its `allocatable`, not capped), and what it gives its owners stays within it;
//! - no non-owner consumes reserved capacity: recomputed from the API objects alone, every
//!   node's pods plus the unallocated remainder of its Available reservations fit, and every
//!   pod that allocated from a reservation is one of its owners;
//! - an allocate-once reservation never has two owners;
//! - a scheduler rebuilt from the objects has the same node accounting and reservation
//!   states as the running one.

use std::collections::BTreeMap;

use berth_api::annotations::{AnnotationCodec, ReservationAllocated};
use berth_api::parse_resource;
use berth_api::reservation::ReservationPhase;
use berth_core::reservation::testkit::{accounting, reservation, Sim};
use berth_core::testing::{node, pod, DriverConfig, Profiles};
use proptest::prelude::*;
use serde_json::json;

#[derive(Debug, Clone)]
enum Op {
    AddNode {
        cpu: u32,
        mem_gi: u32,
    },
    AddReservation {
        cpu_m: u32,
        mem_mi: u32,
        group: u8,
        reusable: bool,
        policy: u8,
        ttl_s: Option<u32>,
        port: Option<u16>,
        pin: Option<usize>,
    },
    AddOwner {
        group: u8,
        cpu_m: u32,
        mem_mi: u32,
        port: Option<u16>,
    },
    AddOther {
        cpu_m: u32,
        mem_mi: u32,
        port: Option<u16>,
    },
    DeletePod(usize),
    FinishPod(usize),
    DeleteReservation(usize),
    DeleteNode(usize),
    Advance(u32),
}

fn op() -> impl Strategy<Value = Op> {
    let port = || prop::option::weighted(0.15, 7000u16..7003);
    prop_oneof![
        2 => (2u32..9, 2u32..9).prop_map(|(cpu, mem_gi)| Op::AddNode { cpu, mem_gi }),
        5 => (100u32..3000, 0u32..3072, 0u8..3, any::<bool>(), 0u8..3,
              prop::option::weighted(0.3, 1u32..120), port(), prop::option::weighted(0.2, 0usize..8))
            .prop_map(|(cpu_m, mem_mi, group, reusable, policy, ttl_s, port, pin)| Op::AddReservation {
                cpu_m, mem_mi, group, reusable, policy, ttl_s, port, pin,
            }),
        8 => (0u8..3, 0u32..2500, 0u32..2048, port())
            .prop_map(|(group, cpu_m, mem_mi, port)| Op::AddOwner { group, cpu_m, mem_mi, port }),
        3 => (0u32..3000, 0u32..3072, port())
            .prop_map(|(cpu_m, mem_mi, port)| Op::AddOther { cpu_m, mem_mi, port }),
        2 => any::<usize>().prop_map(Op::DeletePod),
        1 => any::<usize>().prop_map(Op::FinishPod),
        1 => any::<usize>().prop_map(Op::DeleteReservation),
        1 => any::<usize>().prop_map(Op::DeleteNode),
        2 => (1u32..90).prop_map(Op::Advance),
    ]
}

struct World {
    sim: Sim,
    seq: usize,
}

impl World {
    /// Starts with two nodes so that most sequences place reservations; binds are refused
    /// now and then and delivered in shuffled order, as `cfg` says.
    fn new(cfg: DriverConfig) -> Self {
        let mut w = Self {
            sim: Sim::with_driver(Profiles::default_profile(), cfg),
            seq: 0,
        };
        for _ in 0..2 {
            w.apply(&Op::AddNode { cpu: 8, mem_gi: 8 });
        }
        w
    }

    fn name(&mut self, prefix: &str) -> String {
        self.seq += 1;
        format!("{prefix}{}", self.seq)
    }

    fn apply(&mut self, op: &Op) {
        match *op {
            Op::AddNode { cpu, mem_gi } => {
                let n = self.name("n");
                self.sim.node(
                    node(&n)
                        .alloc("cpu", &cpu.to_string())
                        .alloc("memory", &format!("{mem_gi}Gi"))
                        .build(),
                );
            }
            Op::AddReservation {
                cpu_m,
                mem_mi,
                group,
                reusable,
                policy,
                ttl_s,
                port,
                pin,
            } => {
                let n = self.name("r");
                let mut b = reservation(&n)
                    .req("cpu", &format!("{cpu_m}m"))
                    .owner_label("app", &format!("g{group}"));
                if mem_mi > 0 {
                    b = b.req("memory", &format!("{mem_mi}Mi"));
                }
                if reusable {
                    b = b.reusable();
                }
                match policy {
                    1 => b = b.policy("Aligned"),
                    2 => b = b.policy("Restricted"),
                    _ => {}
                }
                if let Some(t) = ttl_s {
                    b = b.ttl(&format!("{t}s"));
                }
                if let Some(p) = port {
                    b = b.host_port(i32::from(p));
                }
                if let Some(i) = pin {
                    let nodes: Vec<String> = self.sim.nodes().keys().cloned().collect();
                    if !nodes.is_empty() {
                        b = b.template_spec("nodeName", json!(nodes[i % nodes.len()]));
                    }
                }
                self.sim.reservation(b.build());
            }
            Op::AddOwner {
                group,
                cpu_m,
                mem_mi,
                port,
            } => {
                let n = self.name("o");
                let mut p = pod(&n)
                    .label("app", &format!("g{group}"))
                    .req("cpu", &format!("{cpu_m}m"))
                    .req("memory", &format!("{mem_mi}Mi"));
                if let Some(port) = port {
                    p = p.host_port(i32::from(port), "TCP", "");
                }
                self.sim.pod(p.build());
            }
            Op::AddOther {
                cpu_m,
                mem_mi,
                port,
            } => {
                let n = self.name("x");
                let mut p = pod(&n)
                    .req("cpu", &format!("{cpu_m}m"))
                    .req("memory", &format!("{mem_mi}Mi"));
                if let Some(port) = port {
                    p = p.host_port(i32::from(port), "TCP", "");
                }
                self.sim.pod(p.build());
            }
            Op::DeletePod(i) => {
                let names: Vec<String> = self.sim.pods().keys().map(|(_, n)| n.clone()).collect();
                if !names.is_empty() {
                    let n = names[i % names.len()].clone();
                    self.sim.delete_pod(&n);
                }
            }
            Op::FinishPod(i) => {
                let names: Vec<String> = self.sim.pods().keys().map(|(_, n)| n.clone()).collect();
                if !names.is_empty() {
                    let n = names[i % names.len()].clone();
                    self.sim.finish_pod(&n);
                }
            }
            Op::DeleteReservation(i) => {
                let names: Vec<String> = self.sim.reservations().keys().cloned().collect();
                if !names.is_empty() {
                    let n = names[i % names.len()].clone();
                    self.sim.delete_reservation(&n);
                }
            }
            Op::DeleteNode(i) => {
                let names: Vec<String> = self.sim.nodes().keys().cloned().collect();
                if !names.is_empty() {
                    let n = names[i % names.len()].clone();
                    self.sim.delete_node(&n);
                }
            }
            Op::Advance(s) => self.sim.advance(i64::from(s) * 1000),
        }
    }
}

type Amounts = BTreeMap<String, i64>;

fn amounts(
    list: &BTreeMap<String, berth_api::k8s_openapi::apimachinery::pkg::api::resource::Quantity>,
) -> Amounts {
    list.iter()
        .filter(|(n, _)| *n != "pods")
        .map(|(n, q)| (n.clone(), parse_resource(n, &q.0).unwrap_or(0)))
        .collect()
}

fn pod_requests(p: &berth_api::k8s_openapi::api::core::v1::Pod) -> Amounts {
    let mut out = Amounts::new();
    for c in &p.spec.as_ref().unwrap().containers {
        for (n, q) in c
            .resources
            .as_ref()
            .and_then(|r| r.requests.as_ref())
            .into_iter()
            .flatten()
        {
            *out.entry(n.clone()).or_insert(0) += parse_resource(n, &q.0).unwrap_or(0);
        }
    }
    out
}

/// Checks the invariants from the API objects alone (the oracle) and against the scheduler.
fn check(w: &World) -> Result<(), TestCaseError> {
    let sim = &w.sim;
    // Reservations by UID, as the API holds them.
    let by_uid: BTreeMap<String, _> = sim
        .reservations()
        .values()
        .map(|r| (r.metadata.uid.clone().unwrap_or_default(), r.clone()))
        .collect();
    // Per node: pod requests, and per reservation the requests of its bound owners.
    let mut node_used: BTreeMap<String, Amounts> = BTreeMap::new();
    let mut owners_of: BTreeMap<String, Vec<Amounts>> = BTreeMap::new();
    for p in sim.pods().values() {
        let spec = p.spec.as_ref().unwrap();
        let Some(node) = spec.node_name.clone() else {
            continue;
        };
        if p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Succeeded") {
            continue;
        }
        let req = pod_requests(p);
        let used = node_used.entry(node.clone()).or_default();
        for (n, v) in &req {
            *used.entry(n.clone()).or_insert(0) += v;
        }
        let a = ReservationAllocated::from_annotations(p.metadata.annotations.as_ref())
            .ok()
            .flatten();
        if let Some(a) = a {
            let r = by_uid.get(&a.uid);
            let Some(r) = r else { continue };
            // Only owners allocate.
            let labels = p.metadata.labels.clone().unwrap_or_default();
            let owner_app = r.spec.owners[0]
                .label_selector
                .as_ref()
                .and_then(|s| s.match_labels.as_ref())
                .and_then(|m| m.get("app"))
                .cloned();
            prop_assert_eq!(
                labels.get("app").cloned(),
                owner_app,
                "pod {:?} allocated from {} without being an owner",
                p.metadata.name,
                a.name
            );
            owners_of.entry(a.uid.clone()).or_default().push(req);
        }
    }
    for r in sim.reservations().values() {
        let uid = r.metadata.uid.clone().unwrap_or_default();
        let st = r.status.clone().unwrap_or_default();
        let allocatable = amounts(&st.allocatable);
        if st.phase == Some(ReservationPhase::Available) {
            // Koordinator's syncStatus: the bound owners' requests masked to the names of
            // allocatable, not capped (what the reservation gives is capped: see the node
            // check below and `taken` in the scheduler's view).
            let mut want = Amounts::new();
            for req in owners_of.get(&uid).into_iter().flatten() {
                for (n, v) in req {
                    if allocatable.contains_key(n) && *v != 0 {
                        *want.entry(n.clone()).or_insert(0) += v;
                    }
                }
            }
            prop_assert_eq!(
                amounts(&st.allocated),
                want,
                "{:?}: allocated is not the sum of its owners' requests",
                r.metadata.name
            );
        }
        if r.spec.allocate_once() {
            let live = owners_of.get(&uid).map_or(0, Vec::len);
            prop_assert!(
                live <= 1,
                "allocate-once {:?} has {} owners",
                r.metadata.name,
                live
            );
            prop_assert!(st.current_owners.len() <= 1);
        }
        if st.phase != Some(ReservationPhase::Available) {
            continue;
        }
        let Some(node) = st.node_name.clone() else {
            continue;
        };
        if !sim.nodes().contains_key(&node) {
            continue;
        }
        // The remainder this reservation holds on its node.
        let mut taken = Amounts::new();
        for req in owners_of.get(&uid).into_iter().flatten() {
            for (n, v) in req {
                if allocatable.contains_key(n) {
                    *taken.entry(n.clone()).or_insert(0) += v;
                }
            }
        }
        let used = node_used.entry(node).or_default();
        for (n, a) in &allocatable {
            let t = taken.get(n).copied().unwrap_or(0).min(*a);
            *used.entry(n.clone()).or_insert(0) += a - t;
        }
    }
    for (name, n) in &sim.nodes() {
        let alloc = amounts(n.status.as_ref().unwrap().allocatable.as_ref().unwrap());
        for (res, v) in node_used.get(name).into_iter().flatten() {
            prop_assert!(
                *v <= alloc.get(res).copied().unwrap_or(0),
                "node {} overcommitted in {}: {} > {:?}",
                name,
                res,
                v,
                alloc.get(res)
            );
        }
    }
    // The scheduler's own view agrees: requested + reserved fit.
    for n in sim.s().nodes() {
        let mut total = n.requested;
        total.add(&n.reserved);
        prop_assert!(
            total.le(&n.allocatable),
            "node {} accounting overcommitted: {:?} > {:?}",
            n.name,
            total,
            n.allocatable
        );
    }
    for r in sim.s().reservations() {
        prop_assert!(r.taken().le(&r.allocatable));
    }
    let rebuilt = sim.rebuilt();
    prop_assert_eq!(
        accounting(sim.s()),
        accounting(&rebuilt),
        "rebuilt state differs"
    );
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(1000),
        ..ProptestConfig::default()
    })]

    #[test]
    fn reservations_never_overcommit_leak_or_diverge_from_a_rebuild(
        seed in any::<u64>(),
        refuse_pct in 0u32..40,
        ops in prop::collection::vec(op(), 1..40),
    ) {
        let mut w = World::new(DriverConfig { seed, refuse_pct, lose_answer_pct: 0, shuffle: true });
        for op in &ops {
            w.apply(op);
            check(&w)?;
        }
        prop_assert!(w.sim.d.violations().is_empty(), "{:?}", w.sim.d.violations());
    }
}
