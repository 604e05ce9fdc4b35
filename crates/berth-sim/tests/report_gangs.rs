//! `berth simulate --report`: the page's data lists each gang at the end, with its members
//! placed against the minimum and those not placed with why.

use std::path::Path;

use berth_core::Config;
use berth_sim::input::parse_str;
use berth_sim::sim::{Hooks, Simulation};

fn report_data(file: &str) -> serde_json::Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/scenarios/gangs")
        .join(file);
    let text = std::fs::read_to_string(&path).expect("scenario");
    let input = parse_str(file, &text).unwrap_or_else(|e| panic!("{e}"));
    let hooks = Hooks {
        timeline: true,
        progress: false,
    };
    let sim = Simulation::run_with(vec![], Config::default(), &input, hooks);
    berth_sim::report::data(&sim).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn the_report_shows_a_gang_that_could_not_form() {
    let data = report_data("reservations-8-on-room-for-6.yaml");
    let gangs = data["gangs"].as_array().expect("gangs");
    assert_eq!(gangs.len(), 1, "{gangs:?}");
    let g = &gangs[0];
    assert_eq!(g["gang"], "default/job-reserve");
    assert_eq!(
        (g["min"].as_u64(), g["placed"].as_u64()),
        (Some(8), Some(0))
    );
    let unplaced = g["unplaced"].as_array().expect("unplaced");
    assert_eq!(unplaced.len(), 8);
    assert!(unplaced.iter().any(|u| u["name"] == "reservation r7"
        && u["why"] == "0/2 nodes are available: 2 Insufficient cpu."));
}

#[test]
fn the_report_shows_a_placed_gang() {
    let data = report_data("podgroup-8-on-room-for-8.yaml");
    let g = &data["gangs"][0];
    assert_eq!(
        (g["placed"].as_u64(), g["waiting"].as_u64()),
        (Some(8), Some(0))
    );
    assert_eq!(g["unplaced"].as_array().map(Vec::len), Some(0));
}
