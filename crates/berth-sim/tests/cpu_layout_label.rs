//! The simulated node agent's `sim.berth.dev/cpu-layout` label is outside input (any
//! scenario may set it on any node). Found by the `cpu_layout` fuzz target (issue 15): the
//! product of its three numbers was computed in a u64 without a check, so
//! `4294967295x4294967295x4294967295` overflowed (a panic in a debug build), and in a
//! release build `2147483648x2147483648x4` wrapped to 0 CPUs, passed the 4,096-CPU limit,
//! and sent the agent building 2³¹ sockets' NUMA zones and CPU pools.

use berth_core::Config;
use berth_sim::cpu_agent::declared;
use berth_sim::{input, Simulation};

fn node_with_layout(layout: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Node\nmetadata:\n  name: n1\n  labels: {{sim.berth.dev/cpu-layout: \"{layout}\"}}\nstatus: {{allocatable: {{cpu: \"8\", memory: 16Gi, pods: \"110\"}}}}\n"
    )
}

#[test]
fn layouts_whose_cpu_count_overflows_are_refused_with_the_label_named() {
    for layout in [
        "4294967295x4294967295x4294967295",
        "2147483648x2147483648x4",
        "65536x65536x1",
        "1x65536x65536",
    ] {
        let text = node_with_layout(layout);
        let parsed = input::parse_str("n.yaml", &text).expect("the node itself reads");
        let sim = Simulation::run(Vec::new(), Config::default(), &parsed);
        let warning = format!("warning: node n1: label sim.berth.dev/cpu-layout: \"{layout}\"");
        assert!(
            sim.log().iter().any(|l| l.starts_with(&warning)),
            "{layout}: {:?}",
            sim.log()
        );
        assert!(
            sim.store().nrt("n1").is_none(),
            "{layout}: no topology is published for a refused layout"
        );
    }
}

#[test]
fn the_largest_layout_is_still_accepted() {
    let text = node_with_layout("2x1024x2");
    let parsed = input::parse_str("n.yaml", &text).expect("reads");
    let node = match &parsed.items[0].1 {
        berth_sim::Item::Object(berth_core::Object::Node(n)) => n.clone(),
        other => panic!("not a node: {other:?}"),
    };
    assert_eq!(declared(&node), Ok(Some((2, 1024, 2))));
}

/// A 1 MB scenario of nodes declaring the largest layout would have the agent publish (and
/// the scheduler read) a thousand times that in CPU topology; past
/// `cpu_budget::MAX_TOTAL_CPUS` declared CPUs a node is warned about and left without one.
#[test]
fn the_nodes_declare_at_most_the_budgeted_cpus_in_all() {
    let per_node = 4_096;
    let fit = (berth_sim::cpu_budget::MAX_TOTAL_CPUS / per_node) as usize;
    let text: String = (0..fit + 2)
        .map(|i| node_with_layout("1x4096x1").replace("name: n1", &format!("name: n{i}")))
        .collect::<Vec<_>>()
        .join("---\n");
    let parsed = input::parse_str("n.yaml", &text).expect("reads");
    let sim = Simulation::run(Vec::new(), Config::default(), &parsed);
    for i in 0..fit {
        assert!(
            sim.store().nrt(&format!("n{i}")).is_some(),
            "n{i} published"
        );
    }
    for i in fit..fit + 2 {
        let name = format!("n{i}");
        assert!(sim.store().nrt(&name).is_none(), "{name} not published");
        let warning = format!("warning: node {name}: label sim.berth.dev/cpu-layout: 1x4096x1 would bring the CPUs the nodes declare to");
        assert!(
            sim.log().iter().any(|l| l.starts_with(&warning)),
            "{name}: {:?}",
            sim.log()
        );
    }
}
