#![no_main]
//! See `fuzz/harness/events.rs` for what this target checks.

#[path = "../harness/core.rs"]
mod core_harness;
#[path = "../harness/events.rs"]
mod events;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    events::core_events(data);
});
