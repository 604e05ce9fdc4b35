//! README.md shows what berth prints; these tests keep it true.

use std::path::{Path, PathBuf};

use berth_sim::{run, Format, Options};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The backticked text following `marker` in README.md.
fn readme_code_after(marker: &str) -> String {
    let text = std::fs::read_to_string(repo().join("README.md")).expect("README.md");
    let rest = &text[text
        .find(marker)
        .unwrap_or_else(|| panic!("{marker:?} in README"))..];
    let start = rest.find('`').expect("an opening backtick") + 1;
    let len = rest[start..].find('`').expect("a closing backtick");
    rest[start..start + len].to_string()
}

#[test]
fn the_example_unschedulable_message_is_what_berth_prints() {
    let want = readme_code_after("with kube-scheduler's message, e.g.");
    let file = repo().join("tests/scenarios/basic/readme-example-message.yaml");
    let options = Options {
        files: vec![file.to_string_lossy().into_owned()],
        output: Format::Json,
        ..Options::default()
    };
    let out = run(&options, &mut std::io::empty());
    assert_eq!(out.code, 0, "{}", out.stderr);
    let list: serde_json::Value = serde_json::from_str(&out.stdout).expect("a List");
    let pod = list["items"]
        .as_array()
        .and_then(|items| {
            items
                .iter()
                .find(|i| i["kind"] == "Pod" && i["metadata"]["name"] == "p")
        })
        .expect("pod p");
    let message = pod["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == "PodScheduled"))
        .and_then(|c| c["message"].as_str())
        .expect("a PodScheduled message");
    assert_eq!(message, want);
}
