//! NUMA scenarios (`tests/scenarios/numa/*.yaml`) run through the simulator, with checks a
//! Scenario `expect` cannot write: pod phases and reasons set by the simulated kubelet, the
//! same file under two scheduler configurations, the republished NRT objects.

use std::path::PathBuf;

use berth_api::nrt::{ANNOTATION_POD_FINGERPRINT, ATTRIBUTE_POD_FINGERPRINT};
use berth_core::numa::fingerprint;
use berth_core::{Config, Kind, Object, ObjectKey};
use berth_sim::numa_agent::TOPOLOGY_AFFINITY_ERROR;
use berth_sim::{input, load_config, Simulation};

fn repo(path: &str) -> String {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    root.join(path).to_string_lossy().into_owned()
}

/// Runs a scenario file, with the default profile or a `--config` file.
fn run(file: &str, config: Option<&str>) -> Simulation {
    let profiles = match config {
        Some(c) => load_config(&repo(c)).unwrap_or_else(|e| panic!("{c}: {e}")),
        None => Vec::new(),
    };
    let input = input::read_files(&[repo(file)], &mut std::io::empty())
        .unwrap_or_else(|e| panic!("{file}: {e}"));
    Simulation::run(profiles, Config::default(), &input)
}

/// Pods the kubelet rejected with TopologyAffinityError.
fn topology_errors(sim: &Simulation) -> Vec<String> {
    sim.store()
        .of_kind(Kind::Pod)
        .filter_map(|o| match o {
            Object::Pod(p) => Some(p),
            _ => None,
        })
        .filter(|p| {
            p.status.as_ref().and_then(|s| s.reason.as_deref()) == Some(TOPOLOGY_AFFINITY_ERROR)
        })
        .map(|p| p.metadata.name.clone().unwrap_or_default())
        .collect()
}

fn annotation(sim: &Simulation, pod: &str, key: &str) -> Option<String> {
    let p = sim.store().pod(&ObjectKey::pod("default", pod))?;
    p.metadata.annotations.as_ref()?.get(key).cloned()
}

#[test]
fn a_pod_wider_than_any_zone_goes_to_the_none_node_with_cpus_from_both_zones() {
    let sim = run("tests/scenarios/numa/wide-pod.yaml", None);
    assert_eq!(sim.failed_expectations(), 0, "{:?}", sim.log());
    assert!(topology_errors(&sim).is_empty());
    let status = annotation(&sim, "wide", "scheduling.koordinator.sh/resource-status")
        .expect("exclusive CPUs are recorded");
    assert!(status.starts_with(r#"{"cpuset":"0-11""#), "{status}");
    let narrow = annotation(&sim, "narrow", "scheduling.koordinator.sh/resource-status")
        .expect("exclusive CPUs are recorded");
    assert!(narrow.starts_with(r#"{"cpuset":"0-5""#), "{narrow}");
}

#[test]
fn a_stale_burst_has_no_topology_affinity_error_with_the_cache_and_some_without() {
    let file = "tests/scenarios/numa/stale-burst.yaml";
    let cached = run(file, None);
    assert_eq!(cached.failed_expectations(), 0, "{:?}", cached.log());
    assert_eq!(topology_errors(&cached), Vec::<String>::new());
    let m = cached.core().numa_metrics();
    assert!(
        m.cache.fingerprint_matches >= 1 && m.cache.flushes >= 1,
        "{m:?}"
    );

    let passthrough = run(file, Some("tests/scenarios/configs/numa-passthrough.yaml"));
    let errors = topology_errors(&passthrough);
    assert!(
        !errors.is_empty(),
        "the stale NRT lets the kubelet reject pods"
    );
    // The rejected pods hold nothing: the node is not left over-committed.
    for name in &errors {
        let p = passthrough
            .store()
            .pod(&ObjectKey::pod("default", name))
            .expect("rejected pods stay");
        assert_eq!(
            p.status.as_ref().and_then(|s| s.phase.as_deref()),
            Some("Failed")
        );
    }
}

#[test]
fn the_agent_republishes_real_availability_and_the_fingerprint() {
    let sim = run("tests/scenarios/numa/stale-burst.yaml", None);
    let Some(Object::NodeResourceTopology(nrt)) = sim
        .store()
        .get(&ObjectKey::cluster(Kind::NodeResourceTopology, "n1"))
    else {
        panic!("the NRT is in the output");
    };
    let want = fingerprint::sign([("default", "p1"), ("default", "p2")]);
    assert_eq!(
        nrt.attribute(ATTRIBUTE_POD_FINGERPRINT),
        Some(want.as_str())
    );
    assert_eq!(
        nrt.annotation(ANNOTATION_POD_FINGERPRINT),
        Some(want.as_str())
    );
    let cpu: Vec<&str> = nrt
        .spec
        .zones
        .iter()
        .map(|z| z.resources[0].available.0.as_str())
        .collect();
    assert_eq!(cpu, ["3", "3"]);
}

#[test]
fn a_node_whose_fingerprint_never_matches_is_not_resynced_and_the_pod_says_why() {
    let file = "tests/scenarios/numa/never-matches.yaml";
    let sim = run(file, None);
    assert_eq!(sim.failed_expectations(), 0, "{:?}", sim.log());
    let m = sim.core().numa_metrics();
    assert_eq!(m.cache.flushes, 0, "{m:?}");
    assert!(m.cache.fingerprint_mismatches >= 1, "{m:?}");
    assert_eq!(m.dirty_nodes, 1);
    // The file's fingerprint is the one of the pod it claims.
    let Some(Object::NodeResourceTopology(nrt)) = sim
        .store()
        .get(&ObjectKey::cluster(Kind::NodeResourceTopology, "n1"))
    else {
        panic!("the NRT is in the output");
    };
    assert_eq!(
        nrt.annotation(ANNOTATION_POD_FINGERPRINT),
        Some(fingerprint::sign([("kube-system", "ghost")]).as_str())
    );
}
