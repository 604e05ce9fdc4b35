//! The structure-aware fuzz harness of the scheduling core: the input is read as a sequence
//! of API operations (nodes, some with a CPU topology on their NRT; pods, some asking for
//! exclusive CPUs; reservations with arbitrary-looking annotations and fields; deletions,
//! finished pods, time steps, restarts, broken watches), played through
//! [`berth_core::testing::FakeDriver`] (binds refused and delivered out of order as the
//! input says) so that every object reaches the core's `handle`, and the invariants are
//! checked after every settled operation:
//!
//! - the driver saw nothing that must never happen (a double bind, a write before sync);
//! - nothing is left in flight once settled;
//! - per node, the cached requests are the sum of its pods', and requests plus what
//!   reservations hold fit the (trimmed) allocatable (leaving out pods labelled
//!   reservation-ignored, which may use what reservations hold); the pod count fits (real
//!   pods, and the slots idle reservations hold, again leaving out reservation-ignored
//!   pods); no host port is used twice;
//! - no reservation gives its owners more than it holds;
//! - no CPU is held (`resource-status`) by two running pods of a node;
//! - every pod the API server shows bound (and not finished) is on that node in the cache;
//! - a scheduler rebuilt from the API objects has the same accounting as the running one.
//!
//! Included with `#[path]` by `fuzz/fuzz_targets/core_events.rs` and by
//! `crates/berth-core/tests/fuzz_corpus.rs`. Expects `Bytes` from the sibling `core.rs`
//! harness in scope as `super::core_harness::Bytes`.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::sync::Arc;

use berth_api::annotations::ResourceStatus;
use berth_api::k8s_openapi::api::core::v1::Pod;
use berth_api::nrt::NodeResourceTopology;
use berth_core::cache::PodState;
use berth_core::reservation::testkit::{accounting, reservation, Sim};
use berth_core::resources::ResourceId;
use berth_core::testing::{node, pod, DriverConfig, Profiles};
use berth_core::{Kind, Object, ObjectKey};
use serde_json::json;

use super::core_harness::Bytes;

/// Most operations one input plays (each settles the cluster, so this bounds the time).
pub const MAX_OPS: usize = 48;

const NODE_RESERVATIONS: [&str; 6] = [
    r#"{"resources":{"cpu":"1"}}"#,
    r#"{"reservedCPUs":"0-1"}"#,
    r#"{"resources":{"cpu":"500m","memory":"1Gi"},"applyPolicy":"ReservedCPUsOnly"}"#,
    r#"{"reservedCPUs":"0-4294967295"}"#,
    r#"{"resources":{"cpu":"-2"}}"#,
    "not json",
];

/// `node.koordinator.sh/cpu-topology` on a node's NRT: regular, irregular (a core of
/// three threads beside single ones), one CPU, duplicated ids, and not JSON.
const CPU_TOPOLOGIES: [&str; 5] = [
    r#"{"detail":[{"id":0,"core":0,"socket":0,"node":0},{"id":1,"core":1,"socket":0,"node":0},{"id":2,"core":2,"socket":1,"node":1},{"id":3,"core":3,"socket":1,"node":1},{"id":4,"core":0,"socket":0,"node":0},{"id":5,"core":1,"socket":0,"node":0},{"id":6,"core":2,"socket":1,"node":1},{"id":7,"core":3,"socket":1,"node":1}]}"#,
    r#"{"detail":[{"id":0,"core":0,"socket":0,"node":0},{"id":1,"core":0,"socket":0,"node":0},{"id":2,"core":0,"socket":0,"node":0},{"id":5,"core":1,"socket":0,"node":0},{"id":9,"core":2,"socket":1,"node":1}]}"#,
    r#"{"detail":[{"id":0,"core":0,"socket":0,"node":0}]}"#,
    r#"{"detail":[{"id":0,"core":0,"socket":0,"node":0},{"id":0,"core":1,"socket":0,"node":0}]}"#,
    "{",
];

/// `scheduling.koordinator.sh/resource-spec` on an exclusive-CPU pod.
const RESOURCE_SPECS: [&str; 5] = [
    "",
    r#"{"preferredCPUBindPolicy":"SpreadByPCPUs"}"#,
    r#"{"requiredCPUBindPolicy":"FullPCPUs"}"#,
    r#"{"preferredCPUBindPolicy":"ConstrainedBurst"}"#,
    r#"{"preferredCPUBindPolicy":"Tight"}"#,
];

const AFFINITIES: [&str; 7] = [
    "",
    r#"{"reservationSelector":{"app":"g1"}}"#,
    r#"{"name":"r3"}"#,
    r#"{"requiredDuringSchedulingIgnoredDuringExecution":{"reservationSelectorTerms":[{"matchExpressions":[{"key":"app","operator":"In","values":["g0","g2"]}]}]}}"#,
    r#"{"requiredDuringSchedulingIgnoredDuringExecution":{"reservationSelectorTerms":[{"matchExpressions":[{"key":"app","operator":"Maybe"}]}]}}"#,
    r#"{"tolerations":[{"operator":"Exists"}]}"#,
    "{",
];

const TTLS: [&str; 7] = [
    "30s",
    "0",
    "1h",
    "bogus",
    "-1s",
    "1d",
    "2562047h47m16.854775807s",
];

/// A fresh object name: every object an input adds is new (deletions pick existing ones).
fn name(prefix: &str, seq: &mut usize) -> String {
    *seq += 1;
    format!("{prefix}{seq}")
}

/// Plays the input and checks the invariants after every operation. Returns whether a pod
/// ended bound (so the corpus replay can tell its files reach the scheduling cycle).
pub fn core_events(data: &[u8]) -> bool {
    let mut b = Bytes::new(data);
    let cfg = DriverConfig {
        seed: u64::from(b.byte()),
        refuse_pct: u32::from(b.byte() % 40),
        lose_answer_pct: u32::from(b.byte() % 20),
        shuffle: b.bool(),
    };
    let mut sim = Sim::with_driver(Profiles::default_profile(), cfg);
    let mut seq = 0usize;
    let mut ops = 0;
    while !b.is_empty() && ops < MAX_OPS {
        ops += 1;
        let op = b.below(12);
        match op {
            0 | 1 => {
                let n = name("n", &mut seq);
                let mut nb = node(&n)
                    .alloc("cpu", &(1 + b.below(8)).to_string())
                    .alloc("memory", &format!("{}Gi", 1 + b.below(16)))
                    .alloc("pods", &(1 + b.below(8)).to_string())
                    .label("zone", b.pick(&["a", "b"]));
                if b.below(4) == 0 {
                    nb = nb.taint(
                        "k",
                        "v",
                        b.pick(&["NoSchedule", "PreferNoSchedule", "NoExecute"]),
                    );
                }
                if b.below(8) == 0 {
                    nb = nb.unschedulable();
                }
                if b.below(4) == 0 {
                    nb = nb.annotation(
                        berth_api::annotations::ANNOTATION_NODE_RESERVATION,
                        b.pick(&NODE_RESERVATIONS),
                    );
                }
                sim.node(nb.build());
                if b.below(3) == 0 {
                    let nrt = NodeResourceTopology::from_any_version(json!({
                        "apiVersion": "topology.node.k8s.io/v1alpha2",
                        "kind": "NodeResourceTopology",
                        "metadata": {"name": n, "annotations": {
                            berth_api::annotations::ANNOTATION_NODE_CPU_TOPOLOGY:
                                b.pick(&CPU_TOPOLOGIES)}},
                        "attributes": [{"name": "topologyManagerPolicy",
                            "value": b.pick(&["none", "single-numa-node"])}],
                        "zones": [],
                    }))
                    .expect("a NodeResourceTopology");
                    sim.d.apply(Object::NodeResourceTopology(Arc::new(nrt)));
                    sim.settle();
                }
            }
            2..=4 => {
                let n = name("p", &mut seq);
                let mut pb = pod(&n)
                    .req("cpu", &format!("{}m", 100 * b.below(30)))
                    .req("memory", &format!("{}Mi", 128 * b.below(24)))
                    .priority(b.below(3) as i32)
                    .label("app", b.pick(&["g0", "g1", "g2"]));
                if b.below(5) == 0 {
                    pb = pb.host_port(7000 + b.below(3) as i32, "TCP", "");
                }
                if b.below(4) == 0 {
                    pb = pb.toleration(json!({"key": "k", "operator": "Exists"}));
                }
                if b.below(5) == 0 {
                    pb = pb.spec("nodeSelector", json!({"zone": b.pick(&["a", "b"])}));
                }
                if b.below(4) == 0 {
                    pb = pb.annotation(
                        berth_api::annotations::ANNOTATION_RESERVATION_AFFINITY,
                        b.pick(&AFFINITIES),
                    );
                }
                if b.below(8) == 0 {
                    pb = pb.annotation(
                        berth_api::annotations::ANNOTATION_EXACT_MATCH_RESERVATION,
                        b.pick(&[r#"{"resourceNames":["cpu"]}"#, "[]"]),
                    );
                }
                if b.below(10) == 0 {
                    pb = pb.label(berth_api::annotations::LABEL_RESERVATION_IGNORED, "true");
                }
                if b.below(4) == 0 {
                    // Exclusive CPUs: whole CPUs, sometimes a bind policy.
                    pb = pb
                        .req("cpu", &(1 + b.below(4)).to_string())
                        .label(
                            berth_api::annotations::LABEL_POD_QOS,
                            b.pick(&["LSE", "LSR", "LS"]),
                        )
                        .annotation(
                            berth_api::annotations::ANNOTATION_RESOURCE_SPEC,
                            b.pick(&RESOURCE_SPECS),
                        );
                }
                sim.pod(pb.build());
            }
            5 | 6 => {
                let n = name("r", &mut seq);
                let mut rb = reservation(&n)
                    .req("cpu", &format!("{}m", 100 + 100 * b.below(20)))
                    .owner_label("app", b.pick(&["g0", "g1", "g2"]));
                if b.bool() {
                    rb = rb.req("memory", &format!("{}Mi", 128 * b.below(16)));
                }
                if b.bool() {
                    rb = rb.reusable();
                }
                match b.below(3) {
                    1 => rb = rb.policy("Aligned"),
                    2 => rb = rb.policy("Restricted"),
                    _ => {}
                }
                if b.below(3) == 0 {
                    rb = rb.ttl(b.pick(&TTLS));
                }
                if b.below(6) == 0 {
                    rb = rb.host_port(7000 + b.below(3) as i32);
                }
                if b.below(6) == 0 {
                    rb = rb
                        .template_spec("nodeName", json!(format!("n{}", 1 + b.below(seq.max(1)))));
                }
                if b.below(6) == 0 {
                    rb = rb.label(
                        berth_api::annotations::LABEL_RESERVATION_ORDER,
                        b.pick(&["1", "-5", "0", "x"]),
                    );
                }
                if b.below(8) == 0 {
                    rb = rb.annotation(
                        berth_api::annotations::ANNOTATION_RESERVATION_RESTRICTED_OPTIONS,
                        b.pick(&[r#"{"resources":["cpu"]}"#, "nope"]),
                    );
                }
                sim.reservation(rb.build());
            }
            7 => {
                let names: Vec<String> = sim.pods().keys().map(|(_, n)| n.clone()).collect();
                if !names.is_empty() {
                    let n = names[b.below(names.len())].clone();
                    if b.bool() {
                        sim.delete_pod(&n);
                    } else {
                        sim.finish_pod(&n);
                    }
                }
            }
            8 => {
                let names: Vec<String> = sim.reservations().keys().cloned().collect();
                if !names.is_empty() {
                    let n = names[b.below(names.len())].clone();
                    sim.delete_reservation(&n);
                }
            }
            9 => {
                let names: Vec<String> = sim.nodes().keys().cloned().collect();
                if !names.is_empty() {
                    let n = names[b.below(names.len())].clone();
                    sim.delete_node(&n);
                }
            }
            10 => {
                let secs = [1, 10, 30, 61, 300, 3600][b.below(6)];
                sim.advance(secs * 1000);
            }
            _ => {
                match b.below(3) {
                    0 => sim.d.restart(),
                    1 => sim
                        .d
                        .relist(b.pick(&[Kind::Pod, Kind::Node, Kind::Reservation])),
                    _ => {}
                }
                sim.settle();
            }
        }
        check(&sim, ops);
    }
    sim.pods().values().any(|p| bound_node(p).is_some())
}

fn bound_node(p: &Pod) -> Option<&str> {
    p.spec.as_ref().and_then(|s| s.node_name.as_deref())
}

fn finished(p: &Pod) -> bool {
    matches!(
        p.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

/// The invariants listed in the module doc; panics with the operation number on a break.
pub fn check(sim: &Sim, op: usize) {
    let s = sim.s();
    assert!(
        sim.d.violations().is_empty(),
        "op {op}: {:?}",
        sim.d.violations()
    );
    assert!(
        s.binds_in_flight().next().is_none(),
        "op {op}: binds left in flight after settling"
    );
    for n in s.nodes() {
        let mut cpu = 0;
        let mut mem = 0;
        for p in &n.pods {
            assert!(
                !p.terminal,
                "op {op}: finished pod {} counted on {}",
                p.key, n.name
            );
            cpu += p.requests[ResourceId::CPU];
            mem += p.requests[ResourceId::MEMORY];
        }
        assert_eq!(cpu, n.requested[ResourceId::CPU], "op {op}: {} cpu", n.name);
        assert_eq!(
            mem,
            n.requested[ResourceId::MEMORY],
            "op {op}: {} memory",
            n.name
        );
        // A pod labelled reservation-ignored may use what reservations hold and have not
        // given out (Koordinator's design, meant for reservation preemption), so only the
        // other pods' requests plus what reservations hold must fit.
        let mut total = n.requested;
        for p in n.pods.iter().filter(|p| {
            berth_api::annotations::is_true(
                Some(&p.labels),
                berth_api::annotations::LABEL_RESERVATION_IGNORED,
            )
        }) {
            total.sub(&p.requests);
        }
        total.add(&n.reserved);
        assert!(
            total.le(&n.allocatable),
            "op {op}: node {} overcommitted: {:?} (reservation-ignored pods left out) + {:?} > {:?}",
            n.name,
            n.requested,
            n.reserved,
            n.allocatable
        );
        // Pod slots, counted as Fit counts them: every real pod takes one (the kubelet's
        // own bound); a reservation's stand-in holds one until an owner lands on it (the
        // owner takes that slot); reservation-ignored pods may use the slots reservations
        // hold, as they may use their resources.
        let real = n.pods.iter().filter(|p| !p.is_reserve_pod()).count() as i64;
        assert!(
            real <= n.allowed_pods,
            "op {op}: {} runs {real} pods, more than its {}",
            n.name,
            n.allowed_pods
        );
        let ignored = n
            .pods
            .iter()
            .filter(|p| !p.is_reserve_pod())
            .filter(|p| {
                berth_api::annotations::is_true(
                    Some(&p.labels),
                    berth_api::annotations::LABEL_RESERVATION_IGNORED,
                )
            })
            .count() as i64;
        let idle_stand_ins = n
            .pods
            .iter()
            .filter(|r| r.is_reserve_pod())
            .filter(|r| {
                !n.pods.iter().any(|p| {
                    s.reservation_of(&p.key)
                        .is_some_and(|res| *res.name == *r.key.name)
                })
            })
            .count() as i64;
        assert!(
            real - ignored + idle_stand_ins <= n.allowed_pods,
            "op {op}: {} has too many pods: {real} running ({ignored} reservation-ignored) \
             and {idle_stand_ins} reservations holding a slot, for {}",
            n.name,
            n.allowed_pods
        );
        let ports: Vec<_> = n.pods.iter().flat_map(|p| p.host_ports.iter()).collect();
        for (i, a) in ports.iter().enumerate() {
            for c in &ports[i + 1..] {
                assert!(
                    !a.conflicts(c),
                    "op {op}: {} host port {} used twice",
                    n.name,
                    a.port
                );
            }
        }
    }
    for r in s.reservations() {
        assert!(
            r.taken().le(&r.allocatable),
            "op {op}: reservation {} gives more than it holds",
            r.name
        );
    }
    for ((ns, name), p) in sim.pods() {
        let Some(node) = bound_node(&p) else { continue };
        let key = ObjectKey::pod(&ns, &name);
        let entry = s.pod(&key);
        assert_eq!(
            entry.map(|e| e.state),
            Some(PodState::Bound),
            "op {op}: pod {name} bound to {node} in the API"
        );
        if let Some(n) = s.node(node) {
            let on = n.pods.iter().any(|q| *q.key.name == *name);
            assert_eq!(on, !finished(&p), "op {op}: pod {name} presence on {node}");
        }
    }
    let mut held: BTreeMap<String, BTreeMap<u32, String>> = BTreeMap::new();
    for ((_, name), p) in sim.pods() {
        let Some(node) = bound_node(&p).filter(|_| !finished(&p)) else {
            continue;
        };
        let status = p
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(berth_api::annotations::ANNOTATION_RESOURCE_STATUS));
        let Some(cpus) = status
            .and_then(|t| ResourceStatus::parse(t).ok())
            .and_then(|s| s.cpu_ids().ok())
        else {
            continue;
        };
        let on = held.entry(node.to_string()).or_default();
        for c in cpus {
            if let Some(other) = on.insert(c, name.clone()) {
                panic!("op {op}: CPU {c} of {node} held by {other} and {name}");
            }
        }
    }
    let rebuilt = sim.rebuilt();
    assert_eq!(
        accounting(s),
        accounting(&rebuilt),
        "op {op}: a scheduler rebuilt from the objects differs"
    );
}
