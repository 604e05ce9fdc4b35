//! Fuzz harnesses for `berth simulate`'s readers: the scenario loader (any multi-document
//! YAML, through the limits, the strict field check and the typed decode) and the
//! `KubeSchedulerConfiguration` loader.
//!
//! Included with `#[path]` by the targets in `fuzz/fuzz_targets/` and by
//! `crates/berth-sim/tests/fuzz_corpus.rs` (corpus replay under `cargo test`).

#![allow(dead_code)]

use berth_core::Config;
use berth_sim::input;
use berth_sim::output::{self, Format};
use berth_sim::Simulation;

/// The scenario loader: never a panic; what it accepts runs, and the final state it prints
/// with `-o yaml` (and `-o json`) reads back as input (the README's promise). Returns
/// whether the input was accepted.
pub fn scenario(data: &[u8]) -> bool {
    let Ok(text) = std::str::from_utf8(data) else {
        return false;
    };
    let Ok(parsed) = input::parse_str("fuzz.yaml", text) else {
        return false;
    };
    let sim = Simulation::run(Vec::new(), Config::default(), &parsed);
    let yaml = output::render(&sim, Format::Yaml)
        .unwrap_or_else(|e| panic!("-o yaml fails: {e}\ninput:\n{text}"));
    if let Err(e) = input::parse_str("out.yaml", &yaml) {
        panic!("-o yaml does not read back: {e}\ninput:\n{text}\noutput:\n{yaml}");
    }
    let json = output::render(&sim, Format::Json)
        .unwrap_or_else(|e| panic!("-o json fails: {e}\ninput:\n{text}"));
    if let Err(e) = input::parse_str("out.json", &json) {
        panic!("-o json does not read back: {e}\ninput:\n{text}\noutput:\n{json}");
    }
    let _ = output::render(&sim, Format::Table);
    true
}

/// The `--config` loader: never a panic, whatever the text. Returns whether it was read.
pub fn scheduler_config(data: &[u8]) -> bool {
    let Ok(text) = std::str::from_utf8(data) else {
        return false;
    };
    input::parse_config("config.yaml", text).is_ok()
}

/// The simulated node agent's CPU layout label (`sim.berth.dev/cpu-layout`, the input's
/// first line) and the `node.koordinator.sh/reservation` beside it (the rest, if any): a
/// malformed label is refused with a message naming it; an accepted one publishes the
/// annotations koordlet would, which the scheduler reads back: as many CPUs as declared,
/// one shared pool per socket, the pools and the node's reserved CPUs disjoint and
/// together every CPU. Returns whether the label was accepted.
pub fn cpu_layout(data: &[u8]) -> bool {
    use berth_api::annotations::{
        AnnotationCodec, CpuSharedPools, CpuTopology, NodeReservation, ANNOTATION_NODE_RESERVATION,
    };
    use berth_core::cpuset::{CpuSet, CpusetCluster};
    use berth_sim::cpu_agent::{declared, publish, LABEL_CPU_LAYOUT};

    let Ok(text) = std::str::from_utf8(data) else {
        return false;
    };
    let (label, reservation) = text.split_once('\n').unwrap_or((text, ""));
    let mut annotations = serde_json::Map::new();
    if !reservation.is_empty() {
        annotations.insert(ANNOTATION_NODE_RESERVATION.into(), reservation.into());
    }
    let node = serde_json::from_value(serde_json::json!({"metadata": {
        "name": "n1", "labels": {LABEL_CPU_LAYOUT: label}, "annotations": annotations}}))
    .unwrap_or_else(|e| panic!("a node with {text:?}: {e}"));
    let (sockets, cores, threads) = match declared(&node) {
        Ok(Some(layout)) => layout,
        Ok(None) => panic!("{label:?}: the label is set, yet not seen"),
        Err(e) => {
            assert!(e.starts_with("label sim.berth.dev/cpu-layout: "), "{e}");
            return false;
        }
    };
    let total = sockets as usize * cores as usize * threads as usize;
    let nrt = publish(&node, (sockets, cores, threads), None);
    let annotations = nrt.metadata.annotations.as_ref();
    let topology = CpuTopology::from_annotations(annotations);
    let Ok(Some(topology)) = topology else {
        panic!("{label:?}: the published topology does not read: {topology:?}");
    };
    assert_eq!(topology.detail.len(), total, "{label:?}");
    let all: CpuSet = topology.detail.iter().map(|c| c.id).collect();
    let pools = CpuSharedPools::from_annotations(annotations);
    let Ok(Some(pools)) = pools else {
        panic!("{label:?}: the published pools do not read: {pools:?}");
    };
    assert_eq!(pools.0.len(), sockets as usize, "{label:?}");
    let reserved: CpuSet = match NodeReservation::from_annotations(annotations) {
        Ok(Some(r)) => r
            .reserved_cpu_ids()
            .map(CpuSet::from)
            .unwrap_or_else(|e| panic!("{text:?}: published reservation: {e}")),
        Ok(None) => CpuSet::new(),
        Err(e) => panic!("{text:?}: published reservation: {e}"),
    };
    let mut covered = reserved.clone();
    for pool in &pools.0 {
        let cpus = berth_api::annotations::parse_cpu_list(&pool.cpuset)
            .map(CpuSet::from)
            .unwrap_or_else(|e| panic!("{text:?}: pool {}: {e}", pool.cpuset));
        assert!(
            cpus.is_disjoint(&covered),
            "{text:?}: {} twice",
            pool.cpuset
        );
        covered.union_with(&cpus);
    }
    assert_eq!(
        covered, all,
        "{text:?}: pools and reserved CPUs are not the node's"
    );
    assert_eq!(CpusetCluster::default().apply_nrt(&nrt), Ok(()), "{text:?}");
    true
}
