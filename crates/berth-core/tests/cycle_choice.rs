//! The node a scheduling cycle picks is always one of the highest-scoring nodes that an
//! explanation of the same pod finds. An explanation scores every plugin on every node the
//! plain way (`Plugin::score` per node, each plugin's scores added with its weight); a
//! cycle takes shortcuts: plugins score whole lists, the first plugin's scores become the
//! totals, a weight of 1 adds without multiplying, and a plugin that scores every node the
//! same (TaintToleration while no node has a PreferNoSchedule taint) is left out. None of
//! that may change which nodes tie for the top.

use berth_core::explain::{explain, Target};
use berth_core::testing::{node, pod, FakeDriver};
use berth_core::{Object, ObjectKey};
use proptest::prelude::*;
use serde_json::json;

/// A node: cpu cores, memory GiB, a taint effect (or none), and existing pods' (cpu milli,
/// memory MiB).
type NodeSpec = (u32, u32, Option<&'static str>, Vec<(u32, u32)>);

fn node_spec() -> impl Strategy<Value = NodeSpec> {
    (
        1u32..8,
        1u32..16,
        prop::option::weighted(
            0.3,
            prop_oneof![Just("PreferNoSchedule"), Just("NoSchedule")],
        ),
        prop::collection::vec((0u32..2000, 0u32..4096), 0..4),
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    #[test]
    fn a_cycle_picks_one_of_the_nodes_an_explanation_ranks_highest(
        nodes in prop::collection::vec(node_spec(), 1..7),
        want in (0u32..3000, 0u32..4096),
        tolerates in any::<bool>(),
    ) {
        let mut d = FakeDriver::synchronous();
        for (n, (cpu, mem, taint, existing)) in nodes.iter().enumerate() {
            let mut b = node(&format!("n{n}"))
                .alloc("cpu", &cpu.to_string())
                .alloc("memory", &format!("{mem}Gi"))
                .alloc("pods", "20");
            if let Some(effect) = taint {
                b = b.taint("dedicated", "x", effect);
            }
            d.apply(Object::Node(b.build()));
            for (i, (c, m)) in existing.iter().enumerate() {
                d.apply(Object::Pod(
                    pod(&format!("e{n}-{i}"))
                        .req("cpu", &format!("{c}m"))
                        .req("memory", &format!("{m}Mi"))
                        .node_name(&format!("n{n}"))
                        .build(),
                ));
            }
        }
        d.settle();
        let mut p = pod("p")
            .req("cpu", &format!("{}m", want.0))
            .req("memory", &format!("{}Mi", want.1));
        if tolerates {
            p = p.toleration(json!({"key": "dedicated", "operator": "Exists"}));
        }
        d.apply(Object::Pod(p.build()));
        // The scheduler knows the pod, and has not run a cycle for it yet.
        d.deliver_watch();
        let target = Target::Pod(ObjectKey::pod("default", "p"));
        let why = explain(d.scheduler(), &target, d.now()).expect("the pod is known");
        d.settle();
        match d.bound("p") {
            Some(chosen) => prop_assert!(
                why.best.contains(&chosen),
                "picked {chosen}, explanation's best {:?}", why.best
            ),
            None => prop_assert!(why.best.is_empty(), "unplaced, best {:?}", why.best),
        }
    }
}
