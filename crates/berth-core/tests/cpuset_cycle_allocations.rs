//! The per-node part of an exclusive-CPU pod's cycle allocates nothing: NodeNUMAResource's
//! Filter (which CPUs the `LSR` pod would get on the node, NUMA-aligned on half the nodes)
//! and Score, on a cluster twice as large (twice the nodes filtered and scored), make
//! exactly as many heap allocations.
//!
//! A counting global allocator sees every allocation of this test binary, so the file holds
//! a single test (no other test thread allocates while it counts).

use std::sync::Arc;

use berth_api::k8s_openapi::api::core::v1::{Node, Pod};
use berth_api::nrt::NodeResourceTopology;
use berth_core::{Config, Event, Object, Profile, Scheduler};
use serde_json::json;

mod counting;

/// Two sockets (one NUMA node each) of 16 cores × 2 threads: 64 CPUs, CPU `c` and `c + 32`
/// siblings. Odd nodes ask for single-NUMA-node alignment through Koordinator's label.
fn node(i: usize) -> Arc<Node> {
    let name = format!("node-{i:05}");
    let mut labels = json!({"kubernetes.io/hostname": name});
    if i % 2 == 1 {
        labels["node.koordinator.sh/numa-topology-policy"] = json!("SingleNUMANode");
    }
    let v = json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "uid": format!("uid-{name}"), "labels": labels},
        "status": {"allocatable": {"cpu": "64", "memory": "256Gi", "pods": "110"}},
    });
    Arc::new(serde_json::from_value(v).expect("valid node"))
}

fn nrt(i: usize) -> Arc<NodeResourceTopology> {
    let detail: Vec<_> = (0..64)
        .map(|id| {
            let core = id % 32;
            json!({"id": id, "core": core, "socket": core / 16, "node": core / 16})
        })
        .collect();
    let zone = |z: usize| {
        json!({"name": format!("node-{z}"), "type": "Node", "resources": [
            {"name": "cpu", "capacity": "32", "allocatable": "32", "available": "32"},
            {"name": "memory", "capacity": "128Gi", "allocatable": "128Gi", "available": "128Gi"},
        ]})
    };
    let v = json!({
        "apiVersion": "topology.node.k8s.io/v1alpha2", "kind": "NodeResourceTopology",
        "metadata": {"name": format!("node-{i:05}"), "annotations": {
            "node.koordinator.sh/cpu-topology": json!({"detail": detail}).to_string()}},
        "zones": [zone(0), zone(1)],
    });
    Arc::new(NodeResourceTopology::from_any_version(v).expect("valid NRT"))
}

/// An `LSR` pod of 2 to 5 CPUs: by turns `FullPCPUs` required (an even count: whole
/// cores), `SpreadByPCPUs` preferred, and the default policy.
fn pod(i: usize) -> Arc<Pod> {
    let cpu = 2 + i % 4;
    let res = json!({"cpu": cpu.to_string(), "memory": "1Gi"});
    let spec = match i % 3 {
        0 if cpu.is_multiple_of(2) => Some(json!({"requiredCPUBindPolicy": "FullPCPUs"})),
        1 => Some(json!({"preferredCPUBindPolicy": "SpreadByPCPUs"})),
        _ => None,
    };
    let annotations = match spec {
        Some(s) => json!({"scheduling.koordinator.sh/resource-spec": s.to_string()}),
        None => json!({}),
    };
    let name = format!("lsr-{i:05}");
    let v = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}"),
                     "labels": {"koordinator.sh/qosClass": "LSR"}, "annotations": annotations,
                     "creationTimestamp": "2024-01-01T00:00:00Z"},
        "spec": {"containers": [{"name": "app", "image": "app",
                  "resources": {"requests": res, "limits": res}}]},
    });
    Arc::new(serde_json::from_value(v).expect("valid pod"))
}

/// `nodes` nodes with CPU topologies and `pods` pending `LSR` pods, after `warm` cycles
/// (CPUs taken on some nodes, per-thread buffers grown to their working size).
fn cluster(nodes: usize, pods: usize, warm: usize) -> Scheduler {
    let mut s = Scheduler::new(
        vec![Profile::default_profile()],
        Config {
            seed: 1,
            ..Config::default()
        },
    );
    for i in 0..nodes {
        s.handle(0, Event::Applied(Object::Node(node(i))));
        s.handle(0, Event::Applied(Object::NodeResourceTopology(nrt(i))));
    }
    for i in 0..pods {
        s.handle(0, Event::Applied(Object::Pod(pod(i))));
    }
    while s.poll_effect().is_some() {}
    for _ in 0..warm {
        assert!(s.schedule_next(0));
        counting::confirm_binds(&mut s);
    }
    s
}

#[test]
fn an_exclusive_cpu_pods_cycle_allocates_the_same_on_twice_the_nodes() {
    let mut small = cluster(50, 40, 10);
    let mut large = cluster(100, 40, 10);
    let (a_small, f_small) = counting::over_cycles(&mut small, 20, counting::confirm_binds);
    let (a_large, f_large) = counting::over_cycles(&mut large, 20, counting::confirm_binds);
    assert_eq!(f_small, 1_000, "every node filtered");
    assert_eq!(f_large, 2_000, "every node filtered");
    // Every pod was placed (Reserve chose its CPUs, PreBind wrote them).
    for s in [&small, &large] {
        assert_eq!((s.stats().scheduled, s.stats().unschedulable), (30, 0));
    }
    assert_eq!(
        a_small, a_large,
        "allocations per 20 cycles: {a_small} filtering {f_small} nodes, {a_large} filtering {f_large}"
    );
}
