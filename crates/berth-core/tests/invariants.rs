//! Property tests of the scheduling core: under random sequences of nodes, pods and
//! deletions, no node is overcommitted, host ports never collide, and the state equals one
//! rebuilt from scratch from the same objects (what a restarted scheduler would see).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use berth_api::k8s_openapi::api::core::v1::{Node, Pod};
use berth_core::cache::PodState;
use berth_core::resources::ResourceId;
use berth_core::testing::{node, pod};
use berth_core::{Config, Effect, Event, Kind, Object, ObjectKey, Profile, Scheduler};
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    AddNode {
        cpu: u32,
        mem_gi: u32,
        pods: u32,
    },
    AddPod {
        cpu_m: u32,
        mem_mi: u32,
        port: Option<u16>,
        priority: i32,
    },
    DeletePod(usize),
    DeleteNode(usize),
    FinishPod(usize),
    Advance(u32),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        2 => (1u32..8, 1u32..16, 1u32..6).prop_map(|(cpu, mem_gi, pods)| Op::AddNode { cpu, mem_gi, pods }),
        6 => (0u32..3000, 0u32..4096, prop::option::weighted(0.2, 8080u16..8083), 0i32..3)
            .prop_map(|(cpu_m, mem_mi, port, priority)| Op::AddPod { cpu_m, mem_mi, port, priority }),
        2 => any::<usize>().prop_map(Op::DeletePod),
        1 => any::<usize>().prop_map(Op::DeleteNode),
        1 => any::<usize>().prop_map(Op::FinishPod),
        1 => (1u32..600).prop_map(Op::Advance),
    ]
}

/// The API server: current objects.
#[derive(Default)]
struct Api {
    nodes: BTreeMap<String, Arc<Node>>,
    pods: BTreeMap<String, Arc<Pod>>,
    seq: usize,
}

struct World {
    api: Api,
    s: Scheduler,
    now: i64,
}

impl World {
    fn new() -> Self {
        Self {
            api: Api::default(),
            s: Scheduler::new(
                vec![Profile::default_profile()],
                Config {
                    seed: 7,
                    ..Config::default()
                },
            ),
            now: 0,
        }
    }

    fn settle(&mut self) {
        for _ in 0..1000 {
            self.s.run_until_idle(self.now);
            let mut any = false;
            while let Some(e) = self.s.poll_effect() {
                if let Effect::Bind { pod: key, node, .. } = e {
                    any = true;
                    let name = key.name.to_string();
                    let Some(p) = self.api.pods.get(&name) else {
                        continue;
                    };
                    let mut p = (**p).clone();
                    p.spec.get_or_insert_with(Default::default).node_name = Some(node);
                    let p = Arc::new(p);
                    self.api.pods.insert(name, p.clone());
                    self.s.handle(self.now, Event::Applied(Object::Pod(p)));
                }
            }
            if !any {
                return;
            }
        }
        panic!("scheduler did not settle");
    }

    fn apply(&mut self, op: &Op) {
        match op {
            Op::AddNode { cpu, mem_gi, pods } => {
                let name = format!("n{}", self.api.seq);
                self.api.seq += 1;
                let n = node(&name)
                    .alloc("cpu", &cpu.to_string())
                    .alloc("memory", &format!("{mem_gi}Gi"))
                    .alloc("pods", &pods.to_string())
                    .build();
                self.api.nodes.insert(name, n.clone());
                self.s.handle(self.now, Event::Applied(Object::Node(n)));
            }
            Op::AddPod {
                cpu_m,
                mem_mi,
                port,
                priority,
            } => {
                let name = format!("p{}", self.api.seq);
                self.api.seq += 1;
                let mut b = pod(&name)
                    .req("cpu", &format!("{cpu_m}m"))
                    .req("memory", &format!("{mem_mi}Mi"))
                    .priority(*priority);
                if let Some(port) = port {
                    b = b.host_port(i32::from(*port), "TCP", "");
                }
                let p = b.build();
                self.api.pods.insert(name, p.clone());
                self.s.handle(self.now, Event::Applied(Object::Pod(p)));
            }
            Op::DeletePod(i) => {
                if self.api.pods.is_empty() {
                    return;
                }
                let name = self
                    .api
                    .pods
                    .keys()
                    .nth(i % self.api.pods.len())
                    .cloned()
                    .unwrap_or_default();
                self.api.pods.remove(&name);
                self.s
                    .handle(self.now, Event::Deleted(ObjectKey::pod("default", &name)));
            }
            Op::DeleteNode(i) => {
                if self.api.nodes.is_empty() {
                    return;
                }
                let name = self
                    .api
                    .nodes
                    .keys()
                    .nth(i % self.api.nodes.len())
                    .cloned()
                    .unwrap_or_default();
                self.api.nodes.remove(&name);
                self.s.handle(
                    self.now,
                    Event::Deleted(ObjectKey::cluster(Kind::Node, &name)),
                );
            }
            Op::FinishPod(i) => {
                let bound: Vec<String> = self
                    .api
                    .pods
                    .iter()
                    .filter(|(_, p)| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some())
                    .map(|(k, _)| k.clone())
                    .collect();
                if bound.is_empty() {
                    return;
                }
                let name = &bound[i % bound.len()];
                let mut p = (*self.api.pods[name]).clone();
                p.status.get_or_insert_with(Default::default).phase = Some("Succeeded".into());
                let p = Arc::new(p);
                self.api.pods.insert(name.clone(), p.clone());
                self.s.handle(self.now, Event::Applied(Object::Pod(p)));
            }
            Op::Advance(secs) => {
                self.now += i64::from(*secs) * 1000;
                self.s.handle_timeout(self.now);
            }
        }
        self.settle();
    }
}

/// Per-node accounting as a comparable value.
fn accounting(s: &Scheduler) -> BTreeMap<String, (Vec<i64>, BTreeSet<String>, Vec<String>)> {
    s.cluster
        .nodes()
        .map(|n| {
            let pods: BTreeSet<String> = n.pods.iter().map(|p| p.key.to_string()).collect();
            let mut ports: Vec<String> = n
                .used_ports
                .iter()
                .map(|p| format!("{}/{}/{}", p.ip, p.protocol, p.port))
                .collect();
            ports.sort();
            (n.name.to_string(), (n.requested.0.to_vec(), pods, ports))
        })
        .collect()
}

fn check(w: &World) -> Result<(), TestCaseError> {
    for n in w.s.cluster.nodes() {
        // Oracle: recompute from the pods the cache says are on the node.
        let mut cpu = 0;
        let mut mem = 0;
        for p in &n.pods {
            prop_assert!(
                !p.terminal,
                "terminal pod {} still counted on {}",
                p.key,
                n.name
            );
            cpu += p.requests[ResourceId::CPU];
            mem += p.requests[ResourceId::MEMORY];
        }
        prop_assert_eq!(cpu, n.requested[ResourceId::CPU]);
        prop_assert_eq!(mem, n.requested[ResourceId::MEMORY]);
        prop_assert!(
            cpu <= n.allocatable[ResourceId::CPU],
            "{} overcommitted cpu: {} > {}",
            n.name,
            cpu,
            n.allocatable[ResourceId::CPU]
        );
        prop_assert!(
            mem <= n.allocatable[ResourceId::MEMORY],
            "{} overcommitted memory",
            n.name
        );
        prop_assert!(
            n.pods.len() as i64 <= n.allowed_pods,
            "{} has too many pods",
            n.name
        );
        let ports: Vec<_> = n.pods.iter().flat_map(|p| p.host_ports.iter()).collect();
        for (i, a) in ports.iter().enumerate() {
            for b in &ports[i + 1..] {
                prop_assert!(
                    !a.conflicts(b),
                    "{} host port {} used twice",
                    n.name,
                    a.port
                );
            }
        }
    }
    // Every pod the API server shows bound is on that node in the cache, and vice versa.
    for (name, p) in &w.api.pods {
        let entry = w.s.cluster.pod(&ObjectKey::pod("default", name));
        prop_assert!(entry.is_some(), "cache lost pod {}", name);
        if let Some(node) = p.spec.as_ref().and_then(|s| s.node_name.as_ref()) {
            prop_assert_eq!(entry.map(|e| e.state), Some(PodState::Bound));
            let terminal = p
                .status
                .as_ref()
                .and_then(|s| s.phase.as_deref())
                .is_some_and(|ph| ph == "Succeeded");
            if let Some(n) = w.s.cluster.node_by_name(node) {
                let on = n.pods.iter().any(|q| &*q.key.name == name);
                prop_assert_eq!(on, !terminal, "pod {} presence on {}", name, node);
            }
        }
    }
    // Rebuild from the API server's objects: nodes first, then pods.
    let mut fresh = Scheduler::new(
        vec![Profile::default_profile()],
        Config {
            seed: 7,
            ..Config::default()
        },
    );
    for n in w.api.nodes.values() {
        fresh.handle(w.now, Event::Applied(Object::Node(n.clone())));
    }
    for p in w.api.pods.values() {
        if p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some() {
            fresh.handle(w.now, Event::Applied(Object::Pod(p.clone())));
        }
    }
    prop_assert_eq!(accounting(&w.s), accounting(&fresh));
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn no_overcommit_no_port_collision_and_rebuild_equals_live(ops in prop::collection::vec(op(), 1..40)) {
        let mut w = World::new();
        for op in &ops {
            w.apply(op);
            check(&w)?;
        }
    }
}

#[test]
fn pending_pods_wait_and_do_not_count() {
    let mut w = World::new();
    w.apply(&Op::AddNode {
        cpu: 1,
        mem_gi: 1,
        pods: 1,
    });
    w.apply(&Op::AddPod {
        cpu_m: 600,
        mem_mi: 10,
        port: None,
        priority: 0,
    });
    w.apply(&Op::AddPod {
        cpu_m: 600,
        mem_mi: 10,
        port: None,
        priority: 0,
    });
    let n =
        w.s.cluster
            .nodes()
            .next()
            .map(|n| (n.pods.len(), n.requested[ResourceId::CPU]));
    assert_eq!(n, Some((1, 600)));
    check(&w).unwrap();
}
