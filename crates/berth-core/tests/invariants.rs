//! Property tests of the scheduling core: under random sequences of nodes, pods and
//! deletions, driven by [`FakeDriver`] (binds refused now and then, delivered in shuffled
//! order), no node is overcommitted, host ports never collide, and the state equals one
//! rebuilt from scratch from the same objects (what a restarted scheduler would see).

use std::collections::{BTreeMap, BTreeSet};

use berth_core::cache::PodState;
use berth_core::resources::ResourceId;
use berth_core::testing::{node, pod, DriverConfig, FakeDriver, Profiles};
use berth_core::{Config, Kind, Object, ObjectKey, Scheduler};
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

struct World {
    d: FakeDriver,
    seq: usize,
}

impl World {
    /// A cluster whose binds land at once, in order.
    fn new() -> Self {
        Self::with(DriverConfig::default())
    }

    /// A cluster that misbehaves as `cfg` says.
    fn with(cfg: DriverConfig) -> Self {
        let config = Config {
            seed: 7,
            ..Config::default()
        };
        Self {
            d: FakeDriver::new(Profiles::default_profile(), config, cfg, 0),
            seq: 0,
        }
    }

    fn names(&self, kind: Kind) -> Vec<String> {
        self.d
            .of_kind(kind)
            .map(|o| o.key().name.to_string())
            .collect()
    }

    fn apply(&mut self, op: &Op) {
        match op {
            Op::AddNode { cpu, mem_gi, pods } => {
                let name = format!("n{}", self.seq);
                self.seq += 1;
                let n = node(&name)
                    .alloc("cpu", &cpu.to_string())
                    .alloc("memory", &format!("{mem_gi}Gi"))
                    .alloc("pods", &pods.to_string())
                    .build();
                self.d.apply(Object::Node(n));
            }
            Op::AddPod {
                cpu_m,
                mem_mi,
                port,
                priority,
            } => {
                let name = format!("p{}", self.seq);
                self.seq += 1;
                let mut b = pod(&name)
                    .req("cpu", &format!("{cpu_m}m"))
                    .req("memory", &format!("{mem_mi}Mi"))
                    .priority(*priority);
                if let Some(port) = port {
                    b = b.host_port(i32::from(*port), "TCP", "");
                }
                self.d.apply(Object::Pod(b.build()));
            }
            Op::DeletePod(i) => {
                let names = self.names(Kind::Pod);
                if let Some(name) = names.get(i % names.len().max(1)) {
                    self.d.delete(&ObjectKey::pod("default", name));
                }
            }
            Op::DeleteNode(i) => {
                let names = self.names(Kind::Node);
                if let Some(name) = names.get(i % names.len().max(1)) {
                    self.d.delete(&ObjectKey::cluster(Kind::Node, name));
                }
            }
            Op::FinishPod(i) => {
                let bound: Vec<ObjectKey> = self
                    .d
                    .of_kind(Kind::Pod)
                    .filter(|o| {
                        matches!(o, Object::Pod(p)
                            if p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some())
                    })
                    .map(Object::key)
                    .collect();
                if let Some(key) = bound.get(i % bound.len().max(1)) {
                    self.d.set_phase(key, "Succeeded");
                }
            }
            Op::Advance(secs) => self.d.advance(i64::from(*secs) * 1000),
        }
        self.d.settle();
    }
}

/// Per-node accounting as a comparable value.
fn accounting(s: &Scheduler) -> BTreeMap<String, (Vec<i64>, BTreeSet<String>, Vec<String>)> {
    s.nodes()
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
    let s = w.d.scheduler();
    prop_assert!(w.d.violations().is_empty(), "{:?}", w.d.violations());
    prop_assert!(s.binds_in_flight().next().is_none(), "binds left in flight");
    for n in s.nodes() {
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
    for o in w.d.of_kind(Kind::Pod) {
        let Object::Pod(p) = o else { continue };
        let name = p.metadata.name.as_deref().unwrap_or("");
        let entry = s.pod(&ObjectKey::pod("default", name));
        prop_assert!(entry.is_some(), "cache lost pod {}", name);
        if let Some(node) = p.spec.as_ref().and_then(|s| s.node_name.as_ref()) {
            prop_assert_eq!(entry.map(|e| e.state), Some(PodState::Bound));
            let terminal = p
                .status
                .as_ref()
                .and_then(|s| s.phase.as_deref())
                .is_some_and(|ph| ph == "Succeeded");
            if let Some(n) = s.node(node) {
                let on = n.pods.iter().any(|q| &*q.key.name == name);
                prop_assert_eq!(on, !terminal, "pod {} presence on {}", name, node);
            }
        }
    }
    // Rebuild from the API server's objects, listed in shuffled order.
    let fresh = w.d.rebuilt();
    prop_assert_eq!(accounting(s), accounting(&fresh));
    Ok(())
}

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    /// Binds are refused now and then, and binds, answers and watch events arrive in
    /// shuffled order; every operation is settled before the check.
    #[test]
    fn no_overcommit_no_port_collision_and_rebuild_equals_live(
        seed in any::<u64>(),
        refuse_pct in 0u32..40,
        ops in prop::collection::vec(op(), 1..40),
    ) {
        let mut w = World::with(DriverConfig { seed, refuse_pct, lose_answer_pct: 0, shuffle: true });
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
        w.d.scheduler()
            .nodes()
            .next()
            .map(|n| (n.pods.len(), n.requested[ResourceId::CPU]));
    assert_eq!(n, Some((1, 600)));
    check(&w).unwrap();
}
