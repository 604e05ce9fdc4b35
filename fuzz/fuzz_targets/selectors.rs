#![no_main]
//! See `fuzz/harness/core.rs` for what this target checks.

#[path = "../harness/core.rs"]
mod core_harness;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    core_harness::selectors(data);
});
