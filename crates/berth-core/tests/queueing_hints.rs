//! Property test of the queueing hints: under random sequences of node, pod and label
//! changes, driven by [`FakeDriver`] with bind refusals and shuffled delivery, no pod is
//! stranded. Time never reaches the five-minute flush of the
//! unschedulable pool, so every retry comes from an event; once the scheduler is idle, a
//! pending pod that a fresh scheduler (same nodes and placed pods, that pod alone) would
//! place means some event that made it fit did not move it.

use std::collections::BTreeMap;
use std::sync::Arc;

use berth_api::k8s_openapi::api::core::v1::{Node, Pod};
use berth_core::queue::UNSCHEDULABLE_MAX_WAIT;
use berth_core::testing::{node, pod, DriverConfig, FakeDriver, NodeBuilder, Profiles};
use berth_core::{Config, Kind, Object, ObjectKey};
use proptest::prelude::*;
use serde_json::json;

const ZONES: [&str; 2] = ["a", "b"];

#[derive(Debug, Clone)]
struct NodeSpec {
    cpu: u32,
    pods: u32,
    zone: usize,
    tainted: bool,
    cordoned: bool,
    disk: bool,
}

#[derive(Debug, Clone)]
enum Op {
    AddNode(NodeSpec),
    /// Replaces node `i % n` with a changed spec.
    UpdateNode(usize, NodeChange),
    DeleteNode(usize),
    AddPod {
        cpu_m: u32,
        port: Option<u16>,
        wants_disk: bool,
        tolerates: bool,
        /// `app=spread` pods spread over zones (maxSkew 1).
        spread: bool,
        /// `app=solo` pods never share a node with another `app=solo` pod.
        solo: bool,
    },
    /// A pod another scheduler placed on node `i % n`.
    AddBoundPod(usize, u32),
    DeletePod(usize),
    FinishPod(usize),
    Advance(u32),
}

#[derive(Debug, Clone)]
enum NodeChange {
    Cpu(u32),
    Zone(usize),
    Taint(bool),
    Cordon(bool),
    Disk(bool),
    /// Something no plugin reads.
    Annotation,
}

fn node_spec() -> impl Strategy<Value = NodeSpec> {
    (
        1u32..4,
        1u32..5,
        0usize..2,
        any::<bool>(),
        prop::bool::weighted(0.2),
        any::<bool>(),
    )
        .prop_map(|(cpu, pods, zone, tainted, cordoned, disk)| NodeSpec {
            cpu,
            pods,
            zone,
            tainted,
            cordoned,
            disk,
        })
}

fn op() -> impl Strategy<Value = Op> {
    let change = prop_oneof![
        2 => (1u32..6).prop_map(NodeChange::Cpu),
        1 => (0usize..2).prop_map(NodeChange::Zone),
        1 => any::<bool>().prop_map(NodeChange::Taint),
        1 => any::<bool>().prop_map(NodeChange::Cordon),
        1 => any::<bool>().prop_map(NodeChange::Disk),
        1 => Just(NodeChange::Annotation),
    ];
    prop_oneof![
        2 => node_spec().prop_map(Op::AddNode),
        5 => (any::<usize>(), change).prop_map(|(i, c)| Op::UpdateNode(i, c)),
        1 => any::<usize>().prop_map(Op::DeleteNode),
        5 => (
            0u32..4000,
            prop::option::weighted(0.2, 8080u16..8082),
            prop::bool::weighted(0.3),
            any::<bool>(),
            prop::bool::weighted(0.2),
            prop::bool::weighted(0.2),
        )
            .prop_map(|(cpu_m, port, wants_disk, tolerates, spread, solo)| Op::AddPod {
                cpu_m,
                port,
                wants_disk,
                tolerates,
                spread,
                solo,
            }),
        1 => (any::<usize>(), 0u32..2000).prop_map(|(i, c)| Op::AddBoundPod(i, c)),
        2 => any::<usize>().prop_map(Op::DeletePod),
        2 => any::<usize>().prop_map(Op::FinishPod),
        1 => (1u32..10).prop_map(Op::Advance),
    ]
}

fn build_node(name: &str, s: &NodeSpec) -> Arc<Node> {
    let mut b: NodeBuilder = node(name)
        .alloc("cpu", &s.cpu.to_string())
        .alloc("memory", "16Gi")
        .alloc("pods", &s.pods.to_string())
        .label("kubernetes.io/hostname", name)
        .label("topology.kubernetes.io/zone", ZONES[s.zone]);
    if s.disk {
        b = b.label("disk", "ssd");
    }
    if s.tainted {
        b = b.taint("dedicated", "x", "NoSchedule");
    }
    if s.cordoned {
        b = b.unschedulable();
    }
    b.build()
}

fn placed(p: &Pod) -> bool {
    let bound = p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some();
    let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
    bound && !matches!(phase, Some("Succeeded" | "Failed"))
}

fn pending(p: &Pod) -> bool {
    p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_none()
}

/// The fake cluster, and the spec each node was built from (to change one field).
struct World {
    d: FakeDriver,
    specs: BTreeMap<String, NodeSpec>,
    seq: usize,
}

fn config() -> Config {
    Config {
        seed: 3,
        ..Config::default()
    }
}

impl World {
    fn new(cfg: DriverConfig) -> Self {
        Self {
            d: FakeDriver::new(Profiles::default_profile(), config(), cfg, 0),
            specs: BTreeMap::new(),
            seq: 0,
        }
    }

    fn nth_node(&self, i: usize) -> Option<String> {
        let n = self.specs.len();
        (n > 0)
            .then(|| self.specs.keys().nth(i % n).cloned())
            .flatten()
    }

    fn pods(&self) -> Vec<Arc<Pod>> {
        self.d
            .of_kind(Kind::Pod)
            .filter_map(|o| match o {
                Object::Pod(p) => Some(p.clone()),
                _ => None,
            })
            .collect()
    }

    fn put_node(&mut self, name: String, spec: NodeSpec) {
        let obj = build_node(&name, &spec);
        self.specs.insert(name, spec);
        self.d.apply(Object::Node(obj));
    }

    fn apply(&mut self, op: &Op) {
        match op {
            Op::AddNode(spec) => {
                let name = format!("n{}", self.seq);
                self.seq += 1;
                self.put_node(name, spec.clone());
            }
            Op::UpdateNode(i, change) => {
                let Some(name) = self.nth_node(*i) else {
                    return;
                };
                let mut spec = self.specs[&name].clone();
                match change {
                    NodeChange::Cpu(c) => spec.cpu = *c,
                    NodeChange::Zone(z) => spec.zone = *z,
                    NodeChange::Taint(t) => spec.tainted = *t,
                    NodeChange::Cordon(c) => spec.cordoned = *c,
                    NodeChange::Disk(d) => spec.disk = *d,
                    NodeChange::Annotation => {
                        let note = format!("{}", self.d.now());
                        self.d.modify(&ObjectKey::cluster(Kind::Node, &name), |o| {
                            o.meta_mut()
                                .annotations
                                .get_or_insert_with(Default::default)
                                .insert("note".into(), note);
                        });
                        return self.d.settle();
                    }
                }
                self.put_node(name, spec);
            }
            Op::DeleteNode(i) => {
                let Some(name) = self.nth_node(*i) else {
                    return;
                };
                self.specs.remove(&name);
                self.d.delete(&ObjectKey::cluster(Kind::Node, &name));
            }
            Op::AddPod {
                cpu_m,
                port,
                wants_disk,
                tolerates,
                spread,
                solo,
            } => {
                let name = format!("p{}", self.seq);
                self.seq += 1;
                let mut b = pod(&name)
                    .req("cpu", &format!("{cpu_m}m"))
                    .req("memory", "1Gi");
                if let Some(port) = port {
                    b = b.host_port(i32::from(*port), "TCP", "");
                }
                if *wants_disk {
                    b = b.spec("nodeSelector", json!({"disk": "ssd"}));
                }
                if *tolerates {
                    b = b.toleration(json!({"key": "dedicated", "operator": "Exists"}));
                }
                if *spread {
                    b = b.label("app", "spread").spec(
                        "topologySpreadConstraints",
                        json!([{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
                                "whenUnsatisfiable": "DoNotSchedule",
                                "labelSelector": {"matchLabels": {"app": "spread"}}}]),
                    );
                } else if *solo {
                    b = b.label("app", "solo").spec(
                        "affinity",
                        json!({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                            {"topologyKey": "kubernetes.io/hostname",
                             "labelSelector": {"matchLabels": {"app": "solo"}}}]}}),
                    );
                }
                self.d.apply(Object::Pod(b.build()));
            }
            Op::AddBoundPod(i, cpu_m) => {
                let Some(n) = self.nth_node(*i) else { return };
                let name = format!("p{}", self.seq);
                self.seq += 1;
                let p = pod(&name)
                    .req("cpu", &format!("{cpu_m}m"))
                    .label("app", if cpu_m % 2 == 0 { "spread" } else { "solo" })
                    .spec("schedulerName", json!("other-scheduler"))
                    .node_name(&n)
                    .build();
                self.d.apply(Object::Pod(p));
            }
            Op::DeletePod(i) => {
                let pods = self.pods();
                if let Some(p) = pods.get(i % pods.len().max(1)) {
                    let key = Object::Pod(p.clone()).key();
                    self.d.delete(&key);
                }
            }
            Op::FinishPod(i) => {
                let bound: Vec<ObjectKey> = self
                    .pods()
                    .into_iter()
                    .filter(|p| placed(p))
                    .map(|p| Object::Pod(p).key())
                    .collect();
                if let Some(key) = bound.get(i % bound.len().max(1)) {
                    self.d.set_phase(key, "Succeeded");
                }
            }
            Op::Advance(secs) => self.d.advance(i64::from(*secs) * 1000),
        }
        self.d.settle();
    }

    /// Pending pods a fresh scheduler, given the same nodes and placed pods, places alone.
    fn stranded(&self) -> Vec<String> {
        let mut out = Vec::new();
        let pods = self.pods();
        for p in pods.iter().filter(|p| pending(p)) {
            let mut fresh = FakeDriver::new(
                Profiles::default_profile(),
                config(),
                DriverConfig::default(),
                self.d.now(),
            );
            for n in self.d.of_kind(Kind::Node) {
                fresh.apply(n.clone());
            }
            for q in pods.iter().filter(|q| placed(q)) {
                fresh.apply(Object::Pod(q.clone()));
            }
            fresh.apply(Object::Pod(p.clone()));
            fresh.settle();
            let name = p.metadata.name.clone().unwrap_or_default();
            if fresh.bound(&name).is_some() {
                out.push(name);
            }
        }
        out
    }
}

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]

    /// Every step takes under 10 seconds and there are at most 24: the five-minute flush
    /// never runs, so only events retry pods. Binds are refused now and then (the room
    /// they held must wake the pods waiting for it), and binds, answers and watch events
    /// arrive in shuffled order.
    #[test]
    fn a_pod_that_fits_after_an_event_is_never_left_waiting(
        seed in any::<u64>(),
        refuse_pct in 0u32..40,
        ops in prop::collection::vec(op(), 1..24),
    ) {
        let mut w = World::new(DriverConfig { seed, refuse_pct, lose_answer_pct: 0, shuffle: true });
        for op in &ops {
            w.apply(op);
        }
        prop_assert!(w.d.now() < UNSCHEDULABLE_MAX_WAIT);
        let stranded = w.stranded();
        prop_assert!(stranded.is_empty(), "stranded: {:?}", stranded);
    }
}
