//! Replays the checked-in fuzz corpus (`fuzz/corpus/<target>/`) of berth-core's parsers
//! (selectors, NodeResourceTopology and its fingerprint), of the CPU allocator over
//! irregular CPU topologies and of the core's event handling through the same harnesses the
//! fuzz targets run (`fuzz/harness/core.rs`, `fuzz/harness/cpuset.rs`,
//! `fuzz/harness/events.rs`; `fuzz/harness/replay.rs` says what the replay checks). See
//! `fuzz/README.md` to fuzz for real.

#[path = "../../../fuzz/harness/core.rs"]
mod core_harness;
#[path = "../../../fuzz/harness/cpuset.rs"]
mod cpuset;
#[path = "../../../fuzz/harness/events.rs"]
mod events;

#[path = "../../../fuzz/harness/replay.rs"]
mod replay;

use replay::replay;

#[test]
fn selectors() {
    replay("selectors", core_harness::selectors);
}

#[test]
fn nrt() {
    replay("nrt", core_harness::nrt);
}

#[test]
fn core_events() {
    replay("core_events", events::core_events);
}

#[test]
fn cpuset() {
    replay("cpuset", cpuset::cpuset);
}
