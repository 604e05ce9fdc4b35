//! Reservation-backed preemption against kube-scheduler's (the nomination alone), on the
//! same scenario file: `tests/scenarios/preemption/intruder.yaml` expects the preemptor to
//! get the room it freed (berth's default, checked by `scenarios.rs`); with
//! `reservationBacked: false` a higher-priority pod arriving between the eviction and the
//! preemptor's retry takes it instead.

use std::path::{Path, PathBuf};

use berth_sim::{run, Format, Options, RunOutput};

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn simulate(config: Option<&str>) -> RunOutput {
    let root = repo_root().join("tests/scenarios");
    let options = Options {
        files: vec![root
            .join("preemption/intruder.yaml")
            .to_string_lossy()
            .into_owned()],
        config: config.map(|c| root.join("configs").join(c).to_string_lossy().into_owned()),
        output: Format::Json,
        seed: 0,
    };
    run(&options, &mut std::io::empty())
}

/// `(pod, node)` of every pod in the final `-o json` list, and the reservations' names.
fn placements(out: &RunOutput) -> (Vec<(String, Option<String>)>, Vec<String>) {
    let v: serde_json::Value = serde_json::from_str(&out.stdout).expect("JSON output");
    let items = v["items"].as_array().cloned().unwrap_or_default();
    let mut pods = Vec::new();
    let mut reservations = Vec::new();
    for i in items {
        let name = i["metadata"]["name"].as_str().unwrap_or("").to_string();
        match i["kind"].as_str() {
            Some("Pod") => pods.push((name, i["spec"]["nodeName"].as_str().map(String::from))),
            Some("Reservation") => reservations.push(name),
            _ => {}
        }
    }
    (pods, reservations)
}

#[test]
fn the_preemptor_keeps_what_it_freed_only_with_the_reservation() {
    let on = simulate(None);
    assert_eq!(on.code, 0, "{}", on.stderr);
    let (pods, reservations) = placements(&on);
    assert!(
        pods.contains(&("high".into(), Some("n1".into()))),
        "{pods:?}"
    );
    assert!(pods.contains(&("boss".into(), None)), "{pods:?}");
    assert_eq!(reservations, ["preempt-default-high"]);

    let off = simulate(Some("preemption-nomination-only.yaml"));
    assert_eq!(off.code, 1, "the file's expectations fail: {}", off.stderr);
    let (pods, reservations) = placements(&off);
    assert!(
        pods.contains(&("boss".into(), Some("n1".into()))),
        "{pods:?}"
    );
    assert!(pods.contains(&("high".into(), None)), "{pods:?}");
    assert!(pods.contains(&("peer".into(), None)), "{pods:?}");
    assert!(reservations.is_empty(), "{reservations:?}");
    assert!(
        off.stderr
            .contains(r#"pod default/boss: node: expected null, found "n1""#),
        "{}",
        off.stderr
    );
}
