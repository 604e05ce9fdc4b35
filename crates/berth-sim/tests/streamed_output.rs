//! `-o json` and `-o yaml` are streamed object by object (issue 12); their bytes must be
//! those of the whole-tree rendering they replaced: `output::list` (the `v1` `List` built as
//! one `serde_json::Value`) printed with `serde_json::to_string_pretty` plus a newline, or
//! `serde_yaml_ng::to_string`. Checked on every scenario of the repository that runs.

use berth_core::Config;
use berth_sim::{input, output, Format, Simulation};

mod common;

use common::{repo_root, yaml_files};

#[test]
fn streamed_json_and_yaml_are_the_whole_tree_renderings_byte_for_byte() {
    let root = repo_root();
    let mut files = Vec::new();
    yaml_files(&root.join("tests/scenarios"), &mut files);
    yaml_files(&root.join("examples"), &mut files);
    let mut compared = 0;
    for file in files {
        let name = file.to_string_lossy().into_owned();
        // Bad input and configuration files do not run; they are not output's concern.
        let Ok(input) = input::read_files(std::slice::from_ref(&name), &mut std::io::empty())
        else {
            continue;
        };
        let sim = Simulation::run(vec![], Config::default(), &input);
        let tree = output::list(&sim).expect("the tree");
        let mut want_json = serde_json::to_string_pretty(&tree).expect("json");
        want_json.push('\n');
        let want_yaml = serde_yaml_ng::to_string(&tree).expect("yaml");
        assert_eq!(
            output::render(&sim, Format::Json).expect("streamed json"),
            want_json,
            "{name}: -o json"
        );
        assert_eq!(
            output::render(&sim, Format::Yaml).expect("streamed yaml"),
            want_yaml,
            "{name}: -o yaml"
        );
        compared += 1;
    }
    assert!(compared > 50, "only {compared} scenarios ran");
}
