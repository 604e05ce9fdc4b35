//! The per-node part of a NUMA scheduling cycle allocates nothing: a cycle in which
//! NodeResourceTopologyMatch rejects every node (data stale: pods assumed on each, so each
//! rejection carries the "being resynced" reason too), on a cluster twice as large, makes
//! as many heap allocations, but for the O(log nodes) growth of whole-cluster lists.
//!
//! A counting global allocator sees every allocation of this test binary, so the file holds
//! a single test (no other test thread allocates while it counts).

use std::sync::Arc;

use berth_api::k8s_openapi::api::core::v1::{Node, Pod};
use berth_api::nrt::NodeResourceTopology;
use berth_core::{Config, Event, Object, Profile, Scheduler};
use serde_json::json;

mod counting;

fn node(name: &str) -> Arc<Node> {
    let v = json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "uid": format!("uid-{name}"), "labels": {"kubernetes.io/hostname": name}},
        "status": {"allocatable": {"cpu": "8", "memory": "64Gi", "pods": "110"}},
    });
    Arc::new(serde_json::from_value(v).expect("valid node"))
}

/// Two zones of 4 CPUs and 32Gi.
fn nrt(name: &str) -> Arc<NodeResourceTopology> {
    let zone = |i: usize| {
        json!({"name": format!("node-{i}"), "type": "Node", "resources": [
            {"name": "cpu", "capacity": "4", "allocatable": "4", "available": "4"},
            {"name": "memory", "capacity": "32Gi", "allocatable": "32Gi", "available": "32Gi"},
        ]})
    };
    let v = json!({
        "apiVersion": "topology.node.k8s.io/v1alpha2", "kind": "NodeResourceTopology",
        "metadata": {"name": name},
        "attributes": [
            {"name": "topologyManagerPolicy", "value": "single-numa-node"},
            {"name": "topologyManagerScope", "value": "container"},
        ],
        "zones": [zone(0), zone(1)],
    });
    Arc::new(NodeResourceTopology::from_any_version(v).expect("valid NRT"))
}

/// A Guaranteed pod of `cpu` CPUs.
fn pod(name: &str, cpu: &str) -> Arc<Pod> {
    let res = json!({"cpu": cpu, "memory": "1Gi"});
    let v = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}"),
                     "creationTimestamp": "2024-01-01T00:00:00Z"},
        "spec": {"containers": [{"name": "app", "image": "app",
                  "resources": {"requests": res, "limits": res}}]},
    });
    Arc::new(serde_json::from_value(v).expect("valid pod"))
}

/// `nodes` NUMA nodes, each with a 1-CPU pod assumed in the reserve cache, and `pending`
/// pods of 5 CPUs (no zone has 5) queued; `warm` of them already failed once.
fn cluster(nodes: usize, pending: usize, warm: usize) -> Scheduler {
    let mut s = Scheduler::new(
        vec![Profile::default_profile()],
        Config {
            seed: 1,
            ..Config::default()
        },
    );
    for i in 0..nodes {
        let name = format!("node-{i:05}");
        s.handle(0, Event::Applied(Object::Node(node(&name))));
        s.handle(0, Event::Applied(Object::NodeResourceTopology(nrt(&name))));
    }
    for i in 0..nodes {
        s.handle(
            0,
            Event::Applied(Object::Pod(pod(&format!("small-{i:05}"), "1"))),
        );
        assert!(s.schedule_next(0));
        counting::confirm_binds(&mut s);
    }
    for i in 0..pending {
        s.handle(
            0,
            Event::Applied(Object::Pod(pod(&format!("big-{i:05}"), "5"))),
        );
    }
    while s.poll_effect().is_some() {}
    for _ in 0..warm {
        assert!(s.schedule_next(0));
        while s.poll_effect().is_some() {}
    }
    s
}

/// Heap allocations of `cycles` failed cycles, and the nodes they filtered.
fn allocations(s: &mut Scheduler, cycles: usize) -> (u64, u64) {
    counting::over_cycles(s, cycles, |s| while s.poll_effect().is_some() {})
}

#[test]
fn a_numa_cycle_rejecting_every_stale_node_allocates_nothing_per_node() {
    let mut small = cluster(50, 30, 10);
    let mut large = cluster(100, 30, 10);
    let (a_small, f_small) = allocations(&mut small, 10);
    let (a_large, f_large) = allocations(&mut large, 10);
    assert_eq!(f_small, 500, "every node filtered");
    assert_eq!(f_large, 1000, "every node filtered");
    let m = small.numa_metrics();
    assert_eq!(m.cache.flushes, 0, "the nodes stay stale: {m:?}");
    // A failed cycle also runs PostFilter (preemption), which lists the candidate nodes
    // in a fresh vector: a doubling or two more on twice the nodes. One allocation per
    // node (each stale rejection spilling its two reasons to the heap, as it did) would
    // add 500 here.
    assert!(
        a_large <= a_small + 3 * 10,
        "allocations per 10 failed cycles: {a_small} filtering {f_small} nodes, {a_large} filtering {f_large}"
    );
}
