//! Replays the checked-in fuzz corpus (`fuzz/corpus/<target>/`) of `berth simulate`'s
//! readers (scenario files, scheduler configurations) through the same harness the fuzz
//! targets run (`fuzz/harness/sim.rs`; `fuzz/harness/replay.rs` says what the replay
//! checks). See `fuzz/README.md` to fuzz for real.

#[path = "../../../fuzz/harness/sim.rs"]
mod sim;

#[path = "../../../fuzz/harness/replay.rs"]
mod replay;

use replay::replay;

#[test]
fn scenario() {
    replay("scenario", sim::scenario);
}

#[test]
fn scheduler_config() {
    replay("scheduler_config", sim::scheduler_config);
}

#[test]
fn cpu_layout() {
    replay("cpu_layout", sim::cpu_layout);
}
