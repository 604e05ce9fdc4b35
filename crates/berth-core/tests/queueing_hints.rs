//! Property test of the queueing hints: under random sequences of node, pod and label
//! changes, no pod is stranded. Time never reaches the five-minute flush of the
//! unschedulable pool, so every retry comes from an event; once the scheduler is idle, a
//! pending pod that a fresh scheduler (same nodes and placed pods, that pod alone) would
//! place means some event that made it fit did not move it.

use std::collections::BTreeMap;
use std::sync::Arc;

use berth_api::k8s_openapi::api::core::v1::{Node, Pod};
use berth_core::queue::UNSCHEDULABLE_MAX_WAIT;
use berth_core::testing::{node, pod, NodeBuilder};
use berth_core::{Config, Effect, Event, Kind, Object, ObjectKey, Profile, Scheduler};
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

/// The API server: current objects.
#[derive(Default, Clone)]
struct Api {
    nodes: BTreeMap<String, (NodeSpec, Arc<Node>)>,
    pods: BTreeMap<String, Arc<Pod>>,
    seq: usize,
}

fn placed(p: &Pod) -> bool {
    let bound = p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some();
    let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
    bound && !matches!(phase, Some("Succeeded" | "Failed"))
}

fn pending(p: &Pod) -> bool {
    p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_none()
}

struct World {
    api: Api,
    s: Scheduler,
    now: i64,
}

/// Schedules until idle, binding as the API server would.
fn settle(s: &mut Scheduler, api: &mut Api, now: i64) {
    for _ in 0..1000 {
        s.run_until_idle(now);
        let mut any = false;
        while let Some(e) = s.poll_effect() {
            if let Effect::Bind { pod: key, node, .. } = e {
                any = true;
                let name = key.name.to_string();
                let Some(p) = api.pods.get(&name) else {
                    continue;
                };
                let mut p = (**p).clone();
                p.spec.get_or_insert_with(Default::default).node_name = Some(node);
                let p = Arc::new(p);
                api.pods.insert(name, p.clone());
                s.handle(now, Event::Applied(Object::Pod(p)));
            }
        }
        if !any {
            return;
        }
    }
    panic!("scheduler did not settle");
}

fn scheduler() -> Scheduler {
    Scheduler::new(
        vec![Profile::default_profile()],
        Config {
            seed: 3,
            ..Config::default()
        },
    )
}

impl World {
    fn new() -> Self {
        Self {
            api: Api::default(),
            s: scheduler(),
            now: 0,
        }
    }

    fn nth_node(&self, i: usize) -> Option<String> {
        let n = self.api.nodes.len();
        (n > 0)
            .then(|| self.api.nodes.keys().nth(i % n).cloned())
            .flatten()
    }

    fn put_node(&mut self, name: String, spec: NodeSpec) {
        let obj = build_node(&name, &spec);
        self.api.nodes.insert(name, (spec, obj.clone()));
        self.s.handle(self.now, Event::Applied(Object::Node(obj)));
    }

    fn put_pod(&mut self, name: String, p: Arc<Pod>) {
        self.api.pods.insert(name, p.clone());
        self.s.handle(self.now, Event::Applied(Object::Pod(p)));
    }

    fn apply(&mut self, op: &Op) {
        match op {
            Op::AddNode(spec) => {
                let name = format!("n{}", self.api.seq);
                self.api.seq += 1;
                self.put_node(name, spec.clone());
            }
            Op::UpdateNode(i, change) => {
                let Some(name) = self.nth_node(*i) else {
                    return;
                };
                let (mut spec, old) = self.api.nodes[&name].clone();
                match change {
                    NodeChange::Cpu(c) => spec.cpu = *c,
                    NodeChange::Zone(z) => spec.zone = *z,
                    NodeChange::Taint(t) => spec.tainted = *t,
                    NodeChange::Cordon(c) => spec.cordoned = *c,
                    NodeChange::Disk(d) => spec.disk = *d,
                    NodeChange::Annotation => {
                        let mut n = (*old).clone();
                        n.metadata
                            .annotations
                            .get_or_insert_with(Default::default)
                            .insert("note".into(), format!("{}", self.now));
                        let n = Arc::new(n);
                        self.api.nodes.insert(name, (spec, n.clone()));
                        self.s.handle(self.now, Event::Applied(Object::Node(n)));
                        return self.settle();
                    }
                }
                self.put_node(name, spec);
            }
            Op::DeleteNode(i) => {
                let Some(name) = self.nth_node(*i) else {
                    return;
                };
                self.api.nodes.remove(&name);
                self.s.handle(
                    self.now,
                    Event::Deleted(ObjectKey::cluster(Kind::Node, &name)),
                );
            }
            Op::AddPod {
                cpu_m,
                port,
                wants_disk,
                tolerates,
                spread,
                solo,
            } => {
                let name = format!("p{}", self.api.seq);
                self.api.seq += 1;
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
                self.put_pod(name, b.build());
            }
            Op::AddBoundPod(i, cpu_m) => {
                let Some(n) = self.nth_node(*i) else { return };
                let name = format!("p{}", self.api.seq);
                self.api.seq += 1;
                let p = pod(&name)
                    .req("cpu", &format!("{cpu_m}m"))
                    .label("app", if cpu_m % 2 == 0 { "spread" } else { "solo" })
                    .spec("schedulerName", json!("other-scheduler"))
                    .node_name(&n)
                    .build();
                self.put_pod(name, p);
            }
            Op::DeletePod(i) => {
                if self.api.pods.is_empty() {
                    return;
                }
                let n = self.api.pods.len();
                let name = self.api.pods.keys().nth(i % n).cloned().unwrap_or_default();
                self.api.pods.remove(&name);
                self.s
                    .handle(self.now, Event::Deleted(ObjectKey::pod("default", &name)));
            }
            Op::FinishPod(i) => {
                let bound: Vec<String> = self
                    .api
                    .pods
                    .iter()
                    .filter(|(_, p)| placed(p))
                    .map(|(k, _)| k.clone())
                    .collect();
                if bound.is_empty() {
                    return;
                }
                let name = bound[i % bound.len()].clone();
                let mut p = (*self.api.pods[&name]).clone();
                p.status.get_or_insert_with(Default::default).phase = Some("Succeeded".into());
                self.put_pod(name, Arc::new(p));
            }
            Op::Advance(secs) => {
                self.now += i64::from(*secs) * 1000;
                if self.s.poll_timeout().is_some_and(|t| t <= self.now) {
                    self.s.handle_timeout(self.now);
                }
            }
        }
        self.settle();
    }

    fn settle(&mut self) {
        settle(&mut self.s, &mut self.api, self.now);
    }

    /// Pending pods a fresh scheduler, given the same nodes and placed pods, places alone.
    fn stranded(&self) -> Vec<String> {
        let mut out = Vec::new();
        for (name, p) in self.api.pods.iter().filter(|(_, p)| pending(p)) {
            let mut api = Api {
                nodes: self.api.nodes.clone(),
                pods: self
                    .api
                    .pods
                    .iter()
                    .filter(|(_, q)| placed(q))
                    .map(|(k, q)| (k.clone(), q.clone()))
                    .collect(),
                seq: 0,
            };
            let mut s = scheduler();
            for (_, n) in api.nodes.values() {
                s.handle(self.now, Event::Applied(Object::Node(n.clone())));
            }
            for q in api.pods.values() {
                s.handle(self.now, Event::Applied(Object::Pod(q.clone())));
            }
            api.pods.insert(name.clone(), p.clone());
            s.handle(self.now, Event::Applied(Object::Pod(p.clone())));
            settle(&mut s, &mut api, self.now);
            if !pending(&api.pods[name]) {
                out.push(name.clone());
            }
        }
        out
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Every step takes under 10 seconds and there are at most 24: the five-minute flush
    /// never runs, so only events retry pods.
    #[test]
    fn a_pod_that_fits_after_an_event_is_never_left_waiting(ops in prop::collection::vec(op(), 1..24)) {
        let mut w = World::new();
        for op in &ops {
            w.apply(op);
        }
        prop_assert!(w.now < UNSCHEDULABLE_MAX_WAIT);
        let stranded = w.stranded();
        prop_assert!(stranded.is_empty(), "stranded: {:?}", stranded);
    }
}
