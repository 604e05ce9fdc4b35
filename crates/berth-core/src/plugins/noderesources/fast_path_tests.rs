//! The per-cycle fast paths of NodeResourcesFit and BalancedAllocation against the per-node
//! reference: `passes` never lets through a node `filter` rejects, and `score_nodes` gives
//! exactly the scores `score` gives, for every scoring strategy. Node memory in `Pi` puts
//! capacities past where the default loop's unsigned arithmetic holds (it must hand those
//! nodes to the general one).

use std::sync::Arc;

use proptest::prelude::*;
use serde_json::json;

use super::{BalancedAllocation, Fit};
use crate::cache::Cluster;
use crate::framework::{CycleState, Plugin};
use crate::model::node::NodeIdx;
use crate::testing::{node, pod};

const EXT: &str = "example.com/gpu";

/// (cpu milli, memory Mi, gpus) amounts.
fn amounts() -> impl Strategy<Value = (u32, u32, u32)> {
    (0u32..5000, 0u32..5000, 0u32..4)
}

fn strategy() -> impl Strategy<Value = serde_json::Value> {
    prop_oneof![
        Just(json!({"type": "LeastAllocated"})),
        // Weights whose sum is not a power of two: the default loop divides.
        Just(json!({"type": "LeastAllocated", "resources": [
            {"name": "cpu", "weight": 2}, {"name": "memory", "weight": 1}
        ]})),
        Just(json!({"type": "MostAllocated", "resources": [
            {"name": "cpu", "weight": 2}, {"name": "memory", "weight": 1}, {"name": EXT, "weight": 3}
        ]})),
        Just(json!({"type": "RequestedToCapacityRatio",
        "resources": [{"name": "cpu", "weight": 1}, {"name": EXT, "weight": 2}],
        "requestedToCapacityRatio": {"shape": [
            {"utilization": 0, "score": 0}, {"utilization": 100, "score": 10}
        ]}})),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    #[test]
    fn fast_paths_agree_with_the_per_node_reference(
        nodes in prop::collection::vec((amounts(), 0i64..4, prop::collection::vec(amounts(), 0..4)), 1..6),
        want in amounts(),
        scoring in strategy(),
        ignore_gpu in any::<bool>(),
        memory_unit in prop_oneof![Just("Mi"), Just("Pi")],
        default_balance in any::<bool>(),
    ) {
        let mut cx = Cluster::default();
        for (n, ((cpu, mem, gpu), pods, existing)) in nodes.iter().enumerate() {
            let mut b = node(&format!("n{n}"))
                .alloc("cpu", &format!("{cpu}m"))
                .alloc("memory", &format!("{mem}{memory_unit}"))
                .alloc("pods", &pods.to_string());
            if *gpu > 0 {
                b = b.alloc(EXT, &gpu.to_string());
            }
            cx.apply_node(b.build()).expect("a valid node");
            for (i, (c, m, g)) in existing.iter().enumerate() {
                let mut p = pod(&format!("e{n}-{i}"))
                    .req("cpu", &format!("{c}m"))
                    .req("memory", &format!("{m}Mi"));
                if *g > 0 {
                    p = p.req(EXT, &g.to_string());
                }
                let info = p.node_name(&format!("n{n}")).build_info_with(&mut cx.cache.names);
                cx.cache.apply_pod(Arc::new(info));
            }
        }
        let (c, m, g) = want;
        let mut p = pod("p").req("cpu", &format!("{c}m")).req("memory", &format!("{m}Mi"));
        if g > 0 {
            p = p.req(EXT, &g.to_string());
        }
        let p = p.build_info_with(&mut cx.cache.names);
        let infos: Vec<_> = cx.cache.nodes().cloned().collect();
        let ignored = if ignore_gpu { json!([EXT]) } else { json!([]) };
        let fit = Fit::new(Some(&json!({"scoringStrategy": scoring, "ignoredResources": ignored})))
            .expect("valid args");
        // Default args: cpu and memory, the two-resource loop.
        let balanced = if default_balance {
            BalancedAllocation::new(None)
        } else {
            BalancedAllocation::new(Some(&json!({"resources": [
                {"name": "cpu", "weight": 1}, {"name": "memory", "weight": 1}, {"name": EXT, "weight": 1}
            ]})))
        }
        .expect("valid args");
        let state = CycleState::default();
        let idxs: Vec<NodeIdx> = infos.iter().map(|n| n.idx).collect();
        for info in &infos {
            if fit.passes(&cx, &state, &p, info) {
                prop_assert!(fit.filter(&cx, &state, &p, info).is_success(), "{}", info.name);
            }
        }
        for plugin in [&fit as &dyn Plugin, &balanced] {
            let mut fast = Vec::new();
            plugin.score_nodes(&cx, &state, &p, &idxs, &mut fast);
            let each: Vec<i64> = infos.iter().map(|n| plugin.score(&cx, &state, &p, n)).collect();
            prop_assert_eq!(fast, each, "{}", plugin.name());
        }
    }
}
