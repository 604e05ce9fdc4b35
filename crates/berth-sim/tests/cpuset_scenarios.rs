//! Exclusive-CPU scenarios (`tests/scenarios/cpuset/*.yaml`) through the simulator, with the
//! checks a Scenario `expect` cannot write: the cpusets NodeNUMAResource wrote on pods and
//! reservations, the Warning events, and that no CPU is held twice on any node.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use berth_api::annotations::{parse_cpu_list, ResourceStatus, ANNOTATION_RESOURCE_STATUS};
use berth_core::{Config, Kind, Object, ObjectKey};
use berth_sim::{input, Simulation};

fn run(file: &str) -> Simulation {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(file)
        .to_string_lossy()
        .into_owned();
    let input =
        input::read_files(&[path], &mut std::io::empty()).unwrap_or_else(|e| panic!("{file}: {e}"));
    let sim = Simulation::run(Vec::new(), Config::default(), &input);
    assert_eq!(sim.failed_expectations(), 0, "{file}: {:?}", sim.log());
    sim
}

fn cpus_of(annotations: Option<&BTreeMap<String, String>>) -> Option<String> {
    let text = annotations?.get(ANNOTATION_RESOURCE_STATUS)?;
    Some(ResourceStatus::parse(text).ok()?.cpuset)
}

fn pod_cpus(sim: &Simulation, name: &str) -> Option<String> {
    let p = sim.store().pod(&ObjectKey::pod("default", name))?;
    cpus_of(p.metadata.annotations.as_ref())
}

fn reservation_cpus(sim: &Simulation, name: &str) -> Option<String> {
    let r = sim.store().reservation(name)?;
    cpus_of(r.metadata.annotations.as_ref())
}

fn set(list: &str) -> BTreeSet<u32> {
    parse_cpu_list(list).expect("valid list")
}

/// No CPU is held by two running pods of the same node.
fn assert_no_cpu_held_twice(sim: &Simulation) {
    let mut by_node: BTreeMap<String, BTreeMap<u32, String>> = BTreeMap::new();
    for o in sim.store().of_kind(Kind::Pod) {
        let Object::Pod(p) = o else { continue };
        let Some(node) = p.spec.as_ref().and_then(|s| s.node_name.clone()) else {
            continue;
        };
        let name = p.metadata.name.clone().unwrap_or_default();
        let Some(cpus) = cpus_of(p.metadata.annotations.as_ref()) else {
            continue;
        };
        let held = by_node.entry(node.clone()).or_default();
        for c in set(&cpus) {
            if let Some(other) = held.insert(c, name.clone()) {
                panic!("CPU {c} of {node} held by {other} and {name}");
            }
        }
    }
}

#[test]
fn full_pcpus_takes_whole_cores_and_spread_by_pcpus_one_thread_per_core() {
    let sim = run("tests/scenarios/cpuset/full-vs-spread.yaml");
    assert_eq!(pod_cpus(&sim, "full").as_deref(), Some("0-1,8-9"));
    assert_eq!(pod_cpus(&sim, "spread").as_deref(), Some("4-7"));
    assert_eq!(
        pod_cpus(&sim, "shared"),
        None,
        "an ordinary pod gets no cpuset"
    );
    assert_no_cpu_held_twice(&sim);
}

#[test]
fn a_pod_needing_whole_cores_is_refused_when_only_threads_are_free() {
    let sim = run("tests/scenarios/cpuset/whole-cores.yaml");
    assert_eq!(pod_cpus(&sim, "a").as_deref(), Some("0"));
    assert_eq!(pod_cpus(&sim, "b").as_deref(), Some("1"));
    assert_eq!(pod_cpus(&sim, "four").as_deref(), Some("2-3,6-7"));
    assert_no_cpu_held_twice(&sim);
}

#[test]
fn a_malformed_cpu_topology_is_a_warning_on_the_node() {
    let sim = run("tests/scenarios/cpuset/malformed-topology.yaml");
    let warnings: Vec<_> = sim
        .store()
        .events()
        .filter(|e| e.reason.as_deref() == Some("InvalidCPUTopology"))
        .collect();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    let e = &warnings[0];
    assert_eq!(e.type_.as_deref(), Some("Warning"));
    assert_eq!(e.involved_object.kind.as_deref(), Some("Node"));
    assert_eq!(e.involved_object.name.as_deref(), Some("bad"));
    assert_eq!(
        e.message.as_deref(),
        Some(
            "annotation node.koordinator.sh/cpu-topology: detail[1].id: CPU 0 is listed twice (first at detail[0]) (rule: duplicate)"
        )
    );
    assert_eq!(pod_cpus(&sim, "lsr").as_deref(), Some("0,4"));
}

#[test]
fn node_reserved_cores_are_never_handed_out_and_holders_are_listed_for_eviction() {
    let sim = run("tests/scenarios/cpuset/node-reserved.yaml");
    assert_eq!(pod_cpus(&sim, "list-a").as_deref(), Some("4-7"));
    assert_eq!(
        pod_cpus(&sim, "qty-a").as_deref(),
        Some("1,5"),
        "a quantity of 2 reserves core 0 (CPUs 0 and 4)"
    );
    assert_eq!(pod_cpus(&sim, "both-a").as_deref(), Some("4-5"));
    let evictions: Vec<_> = sim
        .store()
        .events()
        .filter(|e| e.reason.as_deref() == Some("CPUsReservedByNode"))
        .collect();
    assert_eq!(evictions.len(), 1, "{evictions:?}");
    assert_eq!(evictions[0].involved_object.name.as_deref(), Some("holder"));
    assert_eq!(evictions[0].type_.as_deref(), Some("Warning"));
    assert!(
        evictions[0]
            .message
            .as_deref()
            .is_some_and(|m| m.contains("holds CPUs 0-1 that node evict reserves")),
        "{evictions:?}"
    );
    let table = berth_sim::output::table(&sim);
    assert!(
        table.contains("TO EVICT") && table.contains("holder"),
        "{table}"
    );
    assert_no_cpu_held_twice(&sim);
}

#[test]
fn reservations_hold_concrete_cores_and_owners_take_them_first() {
    let sim = run("tests/scenarios/cpuset/reservation-cores.yaml");
    for r in ["r1", "r2", "r3", "r4", "r5"] {
        assert_eq!(reservation_cpus(&sim, r).as_deref(), Some("0-1,8-9"), "{r}");
    }
    // Same request: exactly the reserved cpuset (reference E2E 51).
    assert_eq!(pod_cpus(&sim, "o1").as_deref(), Some("0-1,8-9"));
    // Larger: a superset of it (E2E 52).
    let o2 = set(&pod_cpus(&sim, "o2").expect("o2"));
    assert_eq!(o2.len(), 6);
    assert!(set("0-1,8-9").is_subset(&o2), "{o2:?}");
    // Reusable, two owners of 2: subsets, disjoint (E2E 53).
    let a = set(&pod_cpus(&sim, "o3a").expect("o3a"));
    let b = set(&pod_cpus(&sim, "o3b").expect("o3b"));
    assert!(a.is_subset(&set("0-1,8-9")) && b.is_subset(&set("0-1,8-9")));
    assert!(a.is_disjoint(&b) && a.len() == 2 && b.len() == 2);
    // Two owners of 3: the second takes the last reserved CPU and two of the node's.
    let a = set(&pod_cpus(&sim, "o4a").expect("o4a"));
    let b = set(&pod_cpus(&sim, "o4b").expect("o4b"));
    assert!(a.is_subset(&set("0-1,8-9")) && a.is_disjoint(&b));
    assert_eq!(b.intersection(&set("0-1,8-9")).count(), 1, "{b:?}");
    assert_eq!(b.len(), 3);
    assert_eq!(pod_cpus(&sim, "o5b"), None, "Restricted: no node CPUs");
    assert_no_cpu_held_twice(&sim);
}

#[test]
fn a_restart_rebuilds_held_cores_from_resource_status() {
    let sim = run("tests/scenarios/cpuset/restart.yaml");
    assert_eq!(pod_cpus(&sim, "new").as_deref(), Some("3,7"));
    assert_eq!(pod_cpus(&sim, "owner").as_deref(), Some("2,6"));
    assert_eq!(pod_cpus(&sim, "late"), None);
    assert_no_cpu_held_twice(&sim);
}

#[test]
fn a_single_numa_node_policy_takes_every_cpu_from_one_numa_node() {
    let sim = run("tests/scenarios/cpuset/numa-aligned.yaml");
    assert_eq!(pod_cpus(&sim, "b").as_deref(), Some("2-3,6-7"));
    assert_eq!(pod_cpus(&sim, "c").as_deref(), Some("1,5"));
    assert_eq!(
        pod_cpus(&sim, "d").as_deref(),
        Some("0,4"),
        "a's CPUs came back"
    );
    assert_eq!(pod_cpus(&sim, "e"), None);
    assert_no_cpu_held_twice(&sim);
}

#[test]
fn pod_level_requests_are_the_cpus_taken_from_one_numa_node() {
    let sim = run("tests/scenarios/cpuset/pod-level-resources.yaml");
    assert_eq!(pod_cpus(&sim, "a").as_deref(), Some("0,4"));
    assert_eq!(pod_cpus(&sim, "b").as_deref(), Some("2-3,6-7"));
    assert_eq!(pod_cpus(&sim, "c"), None);
    assert_no_cpu_held_twice(&sim);
}

#[test]
fn the_agent_publishes_cpu_topology_for_a_node_declaring_its_layout() {
    let sim = run("tests/scenarios/cpuset/agent-layout.yaml");
    let nrt = sim.store().nrt("big").expect("the agent wrote big's NRT");
    assert!(nrt.annotation("node.koordinator.sh/cpu-topology").is_some());
    assert_eq!(
        nrt.annotation("node.koordinator.sh/reservation"),
        Some(r#"{"reservedCPUs":"0,8"}"#)
    );
    assert!(sim.store().nrt("small").is_none(), "no layout, no NRT");
    assert_eq!(pod_cpus(&sim, "p").as_deref(), Some("1-2,9-10"));
}
