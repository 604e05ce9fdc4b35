#![no_main]
//! See `fuzz/harness/cpuset.rs` for what this target checks.

#[path = "../harness/core.rs"]
mod core_harness;
#[path = "../harness/cpuset.rs"]
mod cpuset;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    cpuset::cpuset(data);
});
