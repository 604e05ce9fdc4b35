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
