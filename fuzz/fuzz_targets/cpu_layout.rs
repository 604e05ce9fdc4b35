#![no_main]
//! See `fuzz/harness/sim.rs` for what this target checks.

#[path = "../harness/sim.rs"]
mod sim;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    sim::cpu_layout(data);
});
