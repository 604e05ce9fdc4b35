#![no_main]
//! See `fuzz/harness/api.rs` for what this target checks.

#[path = "../harness/api.rs"]
mod api;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    api::cpu_topology(data);
});
