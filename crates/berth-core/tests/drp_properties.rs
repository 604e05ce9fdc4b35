//! Property test of Dynamic Reservation Provisioning: under random sequences of nodes, pods
//! with reservation templates (several tenants, sizes, recommendations and round-ups), the
//! tenants' other pods, non-owners, a provisioner that answers late or never, Reservations
//! for ids that were rolled back, deletions, scheduler restarts and time passing (with both
//! time-out policies, binds refused and deliveries shuffled), after every settled step:
//! - no node is overcommitted: in the scheduler, requests plus what reservations hold fit
//!   every node's allocatable; from the API objects, the bound pods fit;
//! - no capacity is held after a roll-back: every virtual reservation stands for a
//!   handshake some pod still waits for, and what each node holds for reservations is
//!   exactly what its reservations say they hold;
//! - no reservation is adopted twice: an id, and a Reservation, is adopted at most once, and
//!   never after its handshake was rolled back (within one scheduler process).

use std::collections::{BTreeMap, BTreeSet};

use berth_api::annotations::ANNOTATION_RESERVATION_TEMPLATE;
use berth_api::parse_resource;
use berth_core::drp::objects::{
    nth_name, pod_requirement_id, provisioned_reservation, reservation_id,
};
use berth_core::reservation::testkit::Sim;
use berth_core::resources::ResourceId;
use berth_core::testing::{node, pod, DriverConfig, Profiles};
use proptest::prelude::*;
use serde_json::json;

#[derive(Debug, Clone)]
enum Op {
    AddNode {
        cpu: u32,
    },
    AddTemplatePod {
        tenant: u8,
        cpu_m: u32,
        rec_cpu: u32,
        round_m: u32,
        mem_mi: u32,
    },
    AddTenantPod {
        tenant: u8,
        cpu_m: u32,
    },
    AddOther {
        cpu_m: u32,
    },
    /// The provisioner creates the Reservation of the i-th pod asking for one.
    Provision(usize),
    /// A Reservation for an id seen earlier (possibly rolled back) appears.
    Late(usize),
    DeletePod(usize),
    DeleteNode(usize),
    Restart,
    Advance(u32),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        2 => (2u32..9).prop_map(|cpu| Op::AddNode { cpu }),
        6 => (0u8..3, 100u32..3000, 0u32..5, 0u32..3, 0u32..2048).prop_map(
            |(tenant, cpu_m, rec_cpu, round, mem_mi)| Op::AddTemplatePod {
                tenant, cpu_m, rec_cpu, round_m: round * 500, mem_mi,
            }),
        3 => (0u8..3, 100u32..2500).prop_map(|(tenant, cpu_m)| Op::AddTenantPod { tenant, cpu_m }),
        2 => (100u32..4000).prop_map(|cpu_m| Op::AddOther { cpu_m }),
        5 => any::<usize>().prop_map(Op::Provision),
        1 => any::<usize>().prop_map(Op::Late),
        2 => any::<usize>().prop_map(Op::DeletePod),
        1 => any::<usize>().prop_map(Op::DeleteNode),
        1 => Just(Op::Restart),
        3 => (1u32..400).prop_map(Op::Advance),
    ]
}

struct World {
    sim: Sim,
    seq: usize,
    /// Every requirement id seen on a pod, in order.
    ids: Vec<String>,
    /// Events already checked, and what they told: ids adopted, Reservations adopted, ids
    /// rolled back in the current process.
    seen_events: usize,
    adopted_ids: BTreeSet<String>,
    adopted_names: BTreeSet<String>,
    rolled_back: BTreeSet<String>,
}

fn profiles(bind_without: bool) -> Profiles {
    Profiles::new(move || {
        let policy = if bind_without {
            "BindWithoutReservation"
        } else {
            "Requeue"
        };
        let cfg = json!({
            "apiVersion": "kubescheduler.config.k8s.io/v1",
            "kind": "KubeSchedulerConfiguration",
            "profiles": [{"schedulerName": "default-scheduler", "pluginConfig": [{
                "name": "Reservation",
                "args": {"dynamicProvisioning": {"timeoutSeconds": 300, "timeoutPolicy": policy}}
            }]}]
        });
        let cfg: berth_core::framework::config::KubeSchedulerConfiguration =
            serde_json::from_value(cfg).expect("config");
        berth_core::Profile::from_configuration(&cfg).expect("profiles")
    })
}

impl World {
    fn new(bind_without: bool, cfg: DriverConfig) -> Self {
        let mut w = Self {
            sim: Sim::with_driver(profiles(bind_without), cfg),
            seq: 0,
            ids: Vec::new(),
            seen_events: 0,
            adopted_ids: BTreeSet::new(),
            adopted_names: BTreeSet::new(),
            rolled_back: BTreeSet::new(),
        };
        for _ in 0..2 {
            w.apply(&Op::AddNode { cpu: 8 });
        }
        w
    }

    fn name(&mut self, prefix: &str) -> String {
        self.seq += 1;
        format!("{prefix}{}", self.seq)
    }

    /// The Reservations pods ask for and do not have (one per id).
    fn asking(&self) -> Vec<berth_api::reservation::Reservation> {
        let ids: BTreeSet<String> = self
            .sim
            .reservations()
            .values()
            .filter_map(|r| reservation_id(r).map(str::to_string))
            .collect();
        self.sim
            .pods()
            .values()
            .filter_map(|p| provisioned_reservation(p))
            .filter_map(Result::ok)
            .filter(|r| !ids.contains(reservation_id(r).unwrap_or("")))
            .collect()
    }

    /// Creates `r` under the first free name.
    fn create(&mut self, mut r: berth_api::reservation::Reservation) {
        let base = r.metadata.name.clone().unwrap_or_default();
        let existing = self.sim.reservations();
        if let Some(name) = (1..)
            .map(|n| nth_name(&base, n))
            .find(|n| !existing.contains_key(n))
        {
            r.metadata.name = Some(name);
        }
        self.sim.reservation(r);
    }

    fn apply(&mut self, op: &Op) {
        match *op {
            Op::AddNode { cpu } => {
                let n = self.name("n");
                self.sim.node(
                    node(&n)
                        .alloc("cpu", &cpu.to_string())
                        .alloc("memory", "16Gi")
                        .build(),
                );
            }
            Op::AddTemplatePod {
                tenant,
                cpu_m,
                rec_cpu,
                round_m,
                mem_mi,
            } => {
                let n = self.name("t");
                let template = json!({
                    "owners": [{"labelSelector": {"matchLabels": {"tenant": format!("g{tenant}")}}}],
                    "recommendedSize": {"cpu": rec_cpu.to_string(), "memory": "1Gi"},
                    "roundup": {"cpu": format!("{round_m}m")},
                });
                self.sim.pod(
                    pod(&n)
                        .label("tenant", &format!("g{tenant}"))
                        .req("cpu", &format!("{cpu_m}m"))
                        .req("memory", &format!("{mem_mi}Mi"))
                        .annotation(ANNOTATION_RESERVATION_TEMPLATE, &template.to_string())
                        .build(),
                );
            }
            Op::AddTenantPod { tenant, cpu_m } => {
                let n = self.name("o");
                self.sim.pod(
                    pod(&n)
                        .label("tenant", &format!("g{tenant}"))
                        .req("cpu", &format!("{cpu_m}m"))
                        .build(),
                );
            }
            Op::AddOther { cpu_m } => {
                let n = self.name("x");
                self.sim
                    .pod(pod(&n).req("cpu", &format!("{cpu_m}m")).build());
            }
            Op::Provision(i) => {
                let asking = self.asking();
                if !asking.is_empty() {
                    let r = asking[i % asking.len()].clone();
                    self.create(r);
                }
            }
            Op::Late(i) => {
                if self.ids.is_empty() {
                    return;
                }
                let id = self.ids[i % self.ids.len()].clone();
                if self
                    .sim
                    .reservations()
                    .values()
                    .any(|r| reservation_id(r) == Some(id.as_str()))
                {
                    return;
                }
                let mut r = berth_core::reservation::testkit::reservation(&id)
                    .req("cpu", "1")
                    .owner_label("tenant", "g0")
                    .reusable()
                    .label("scheduling.koordinator.sh/reservation-id", &id)
                    .build();
                r.metadata.labels.get_or_insert_with(Default::default);
                self.sim.reservation(r);
            }
            Op::DeletePod(i) => {
                let names: Vec<String> = self.sim.pods().keys().map(|(_, n)| n.clone()).collect();
                if !names.is_empty() {
                    let n = names[i % names.len()].clone();
                    self.sim.delete_pod(&n);
                }
            }
            Op::DeleteNode(i) => {
                let names: Vec<String> = self.sim.nodes().keys().cloned().collect();
                if names.len() > 1 {
                    let n = names[i % names.len()].clone();
                    self.sim.delete_node(&n);
                }
            }
            Op::Restart => {
                self.sim.d.restart();
                self.sim.settle();
                self.rolled_back.clear();
            }
            Op::Advance(s) => self.sim.advance(i64::from(s) * 1000),
        }
        for p in self.sim.pods().values() {
            if let Some(id) = pod_requirement_id(p) {
                if !self.ids.contains(&id) {
                    self.ids.push(id);
                }
            }
        }
    }
}

fn cpu(text: &str) -> i64 {
    parse_resource("cpu", text).unwrap_or(0)
}

fn check(w: &mut World) -> Result<(), TestCaseError> {
    let s = w.sim.s();
    // No node overcommits, in the scheduler's accounting.
    for n in s.nodes() {
        for id in [ResourceId::CPU, ResourceId::MEMORY] {
            prop_assert!(
                n.requested[id] + n.reserved[id] <= n.allocatable[id],
                "node {} overcommitted on {:?}: requested {} + reserved {} > {}",
                n.name,
                id,
                n.requested[id],
                n.reserved[id],
                n.allocatable[id]
            );
        }
        // What the node holds for reservations is what its reservations hold.
        let mut held = berth_core::resources::Resources::ZERO;
        for r in s.reservations() {
            if r.attached && r.node == Some(n.idx) {
                held.add(&r.contrib);
            }
        }
        prop_assert_eq!(n.reserved, held, "node {} holds for nobody", n.name);
    }
    // From the API objects: bound pods fit.
    let mut used: BTreeMap<String, i64> = BTreeMap::new();
    for p in w.sim.pods().values() {
        let spec = p.spec.as_ref().unwrap();
        let Some(node) = spec.node_name.clone() else {
            continue;
        };
        let req: i64 = spec
            .containers
            .iter()
            .filter_map(|c| {
                c.resources
                    .as_ref()?
                    .requests
                    .as_ref()?
                    .get("cpu")
                    .map(|q| cpu(&q.0))
            })
            .sum();
        *used.entry(node).or_insert(0) += req;
    }
    for (node, u) in &used {
        if let Some(n) = w.sim.nodes().get(node) {
            let alloc = n
                .status
                .as_ref()
                .and_then(|s| s.allocatable.as_ref())
                .and_then(|a| a.get("cpu"))
                .map_or(0, |q| cpu(&q.0));
            prop_assert!(
                *u <= alloc,
                "node {node}: bound pods request {u}m of {alloc}m"
            );
        }
    }
    // No capacity held after a roll-back: every virtual reservation has waiting pods.
    let waiting: BTreeSet<&str> = s.drp_waiting().map(|(_, id)| id).collect();
    for r in s.reservations() {
        if let Some(id) = &r.virtual_id {
            prop_assert!(
                waiting.contains(&**id),
                "virtual reservation {} outlived its handshake",
                r.name
            );
            prop_assert!(
                !r.owner_pods.is_empty(),
                "virtual reservation {} without owners",
                r.name
            );
        }
    }
    // Adoptions: at most once per id and per Reservation, never after a roll-back.
    let events = w.sim.events();
    for e in &events[w.seen_events..] {
        let words: Vec<&str> = e.message.split_whitespace().collect();
        match e.reason.as_str() {
            "ReservationCreated" => {
                // "Reservation NAME created for reservation id ID and placed on node N"
                let (name, id) = (words[1].to_string(), words[6].to_string());
                prop_assert!(
                    !w.rolled_back.contains(&id),
                    "id {id} adopted after its roll-back"
                );
                prop_assert!(w.adopted_ids.insert(id.clone()), "id {id} adopted twice");
                prop_assert!(
                    w.adopted_names.insert(name.clone()),
                    "reservation {name} adopted twice"
                );
            }
            "ReservationCreationTimeout" if e.message.ends_with("rolled back") => {
                // "timed out after D waiting for reservation ID to be created; rolled back"
                w.rolled_back.insert(words[6].to_string());
            }
            _ => {}
        }
    }
    w.seen_events = events.len();
    Ok(())
}

fn run(ops: &[Op], bind_without: bool, cfg: DriverConfig) -> Result<(), TestCaseError> {
    let mut w = World::new(bind_without, cfg);
    for op in ops {
        w.apply(op);
        check(&mut w)?;
    }
    // Whatever happened, a provisioner that answers and time settle every handshake.
    for _ in 0..20 {
        let asking = w.asking();
        if asking.is_empty() {
            break;
        }
        for r in asking {
            w.create(r);
        }
        check(&mut w)?;
    }
    w.sim.advance(301_000);
    check(&mut w)?;
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, ..ProptestConfig::default() })]

    #[test]
    fn drp_never_overcommits_nor_leaks_nor_adopts_twice(
        ops in prop::collection::vec(op(), 1..30),
        bind_without in any::<bool>(),
        seed in any::<u64>(),
        chaos in any::<bool>(),
    ) {
        let cfg = DriverConfig {
            seed,
            refuse_pct: if chaos { 10 } else { 0 },
            // A lost answer is read back by the adapter and found bound (no failure).
            lose_answer_pct: if chaos { 10 } else { 0 },
            shuffle: chaos,
        };
        run(&ops, bind_without, cfg)?;
    }
}

/// The property above only means something if its runs adopt, time out and roll back:
/// sampled runs of the same strategy must do each of these, and see late Reservations.
#[test]
fn the_random_runs_exercise_adoption_time_outs_and_late_reservations() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    let mut runner = TestRunner::deterministic();
    let strategy = (prop::collection::vec(op(), 1..30), any::<bool>());
    let (mut created, mut timeouts, mut failures, mut requests, mut late) = (0, 0, 0, 0, 0);
    for _ in 0..100 {
        let (ops, bind_without) = strategy.new_tree(&mut runner).expect("case").current();
        let mut w = World::new(bind_without, DriverConfig::default());
        for op in &ops {
            if matches!(op, Op::Late(_)) && !w.ids.is_empty() {
                late += 1;
            }
            w.apply(op);
        }
        let m = w.sim.s().drp_metrics();
        created += m.created;
        timeouts += m.timeouts;
        failures += m.failures;
        requests += m.requests;
    }
    assert!(requests > 100, "requests {requests}");
    assert!(created > 20, "adoptions {created}");
    assert!(timeouts > 10, "time-outs {timeouts}");
    assert!(failures > 0, "failures {failures}");
    assert!(late > 5, "late reservations {late}");
}
