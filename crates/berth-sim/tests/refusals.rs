//! The capacity rule (issue 25) through `berth simulate`: the scenarios of the issue's three
//! inputs (`node-reservation/negative.yaml`, `numa/refused-nrt.yaml`,
//! `reservation/unreadable-template-expires.yaml`) report each refused object with exactly
//! one Warning event naming the field path and the rule, list it in the table (REFUSED, or
//! the reservation's WHY), and `explain` says why.

use std::path::PathBuf;

use berth_core::explain::{explain, ExplainError, Target};
use berth_core::{Config, ObjectKey};
use berth_sim::{input, output, Format, Simulation};

fn run(file: &str) -> Simulation {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/scenarios")
        .join(file)
        .to_string_lossy()
        .into_owned();
    let input =
        input::read_files(&[path], &mut std::io::empty()).unwrap_or_else(|e| panic!("{file}: {e}"));
    let sim = Simulation::run(Vec::new(), Config::default(), &input);
    assert_eq!(sim.failed_expectations(), 0, "{file}: {:?}", sim.log());
    sim
}

/// `(kind, name, message)` of every Warning event with `reason`.
fn warnings(sim: &Simulation, reason: &str) -> Vec<(String, String, String)> {
    let mut out: Vec<_> = sim
        .store()
        .events_with_reason(reason)
        .filter(|e| e.type_.as_deref() == Some("Warning"))
        .map(|e| {
            (
                e.involved_object.kind.clone().unwrap_or_default(),
                e.involved_object.name.clone().unwrap_or_default(),
                e.message.clone().unwrap_or_default(),
            )
        })
        .collect();
    out.sort();
    out
}

fn table(sim: &Simulation) -> String {
    let mut out = Vec::new();
    output::write(sim, Format::Table, &mut out).expect("writes");
    String::from_utf8(out).expect("utf-8")
}

#[test]
fn a_negative_node_reservation_is_ignored_and_reported_once() {
    let sim = run("node-reservation/negative.yaml");
    assert_eq!(
        warnings(&sim, "InvalidNodeReservation"),
        vec![(
            "Node".to_string(),
            "node-2".to_string(),
            r#"annotation node.koordinator.sh/reservation: resources.cpu: "-3": must be greater than or equal to 0 (rule: negative)"#
                .to_string()
        )]
    );
    let t = table(&sim);
    assert!(t.contains("REFUSED (ignored as if absent)"), "{t}");
    assert!(t.contains("4/4 (100%)"), "never 5 of 4, never 6/7: {t}");
}

#[test]
fn each_nrt_defect_is_refused_whole_with_its_path_and_rule() {
    let sim = run("numa/refused-nrt.yaml");
    let w = warnings(&sim, "InvalidNodeResourceTopology");
    let expect = [
        ("dup-cpu", "zones[1].resources[2].name", "(rule: duplicate)"),
        ("dup-zone", "zones[1].name", "(rule: duplicate)"),
        (
            "negative",
            "zones[0].resources[0].available",
            "(rule: negative)",
        ),
    ];
    assert_eq!(w.len(), expect.len(), "{w:?}");
    for ((kind, name, message), (node, path, rule)) in w.iter().zip(expect) {
        assert_eq!(
            (kind.as_str(), name.as_str()),
            ("NodeResourceTopology", node)
        );
        assert!(message.starts_with(path), "{message}");
        assert!(message.contains(rule), "{message}");
        assert_eq!(
            sim.core().numa().refused_nrt(node),
            Some(message.as_str()),
            "explain's reason for {node}"
        );
    }
    // The unplaced pod's explanation names every refused NRT.
    let e = explain(
        sim.core(),
        &Target::Pod(ObjectKey::pod("default", "third")),
        sim.now(),
    )
    .expect("explains");
    for n in &e.nodes {
        let why = n.topology_refused.as_deref().unwrap_or("");
        assert!(why.contains("(rule: "), "{}: {why:?}", n.node);
    }
}

#[test]
fn an_unreadable_reservation_is_pending_explained_and_expires_on_time() {
    let sim = run("reservation/unreadable-template-expires.yaml");
    let w: Vec<_> = warnings(&sim, "FailedScheduling")
        .into_iter()
        .filter(|(kind, _, _)| kind == "Reservation")
        .collect();
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(
        w[0].2.starts_with("spec.template.spec.containers: "),
        "{}",
        w[0].2
    );
    match explain(sim.core(), &Target::Reservation("broken".into()), sim.now()) {
        Err(ExplainError::Unreadable { problem, .. }) => {
            assert!(
                problem.contains("spec.template.spec.containers"),
                "{problem}"
            )
        }
        other => panic!("explain says why: {other:?}"),
    }
    let t = table(&sim);
    assert!(t.contains("broken   Failed"), "{t}");
}
