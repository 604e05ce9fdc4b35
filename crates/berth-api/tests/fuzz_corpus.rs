//! Replays the checked-in fuzz corpus of berth-api's parsers (`fuzz/corpus/<target>/`)
//! through the same harness the fuzz targets run (`fuzz/harness/api.rs`;
//! `fuzz/harness/replay.rs` says what the replay checks). See `fuzz/README.md` to fuzz for
//! real.

#[path = "../../../fuzz/harness/api.rs"]
mod api;

#[path = "../../../fuzz/harness/replay.rs"]
mod replay;

use replay::replay;

#[test]
fn quantity() {
    replay("quantity", api::quantity);
}

#[test]
fn duration() {
    replay("duration", api::duration);
}

#[test]
fn cpu_list() {
    replay("cpu_list", api::cpu_list);
}

#[test]
fn reservation_affinity() {
    replay("reservation_affinity", api::reservation_affinity);
}

#[test]
fn reservation_allocated() {
    replay("reservation_allocated", api::reservation_allocated);
}

#[test]
fn resource_status() {
    replay("resource_status", api::resource_status);
}

#[test]
fn node_reservation() {
    replay("node_reservation", api::node_reservation);
}

#[test]
fn reservation_template() {
    replay("reservation_template", api::reservation_template);
}

#[test]
fn new_reservation_requirement() {
    replay(
        "new_reservation_requirement",
        api::new_reservation_requirement,
    );
}

#[test]
fn other_annotations() {
    replay("other_annotations", api::other_annotations);
}

#[test]
fn cpu_topology() {
    replay("cpu_topology", api::cpu_topology);
}

#[test]
fn resource_spec() {
    replay("resource_spec", api::resource_spec);
}
