use crate::explain::{run, ExplainFormat};
use crate::{Format, Options};

fn scenario(name: &str) -> String {
    let path = format!(
        "{}/../../tests/scenarios/migration/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read_to_string(path).expect("the scenario file")
}

fn explain(target: &str, text: &str) -> crate::RunOutput {
    let options = Options {
        files: vec!["-".into()],
        config: None,
        output: Format::Table,
        seed: 0,
    };
    run(target, &options, ExplainFormat::Text, &mut text.as_bytes())
}

#[test]
fn explain_says_what_a_job_waits_for() {
    let full = scenario("pdb-waits.yaml");
    let waiting = full
        .split("    - advance: 30s")
        .next()
        .expect("the first step");
    let out = explain("pmj/move-web", waiting);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(
        out.stdout
            .starts_with("PodMigrationJob move-web: Running (FailedEvict)"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout
            .contains("Waiting for: the eviction to be allowed"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains("disruption budget web"),
        "{}",
        out.stdout
    );

    let out = explain(
        "podmigrationjob/move-web",
        &scenario("unplaceable-fails.yaml"),
    );
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(
        out.stdout.contains("Failed (Unschedulable)"),
        "{}",
        out.stdout
    );
    assert!(out.stdout.contains("Ended"), "{}", out.stdout);

    let out = explain("pmj/nope", waiting);
    assert_eq!(out.code, 2);
    assert!(
        out.stderr.contains("podmigrationjob \"nope\" not found"),
        "{}",
        out.stderr
    );
}
