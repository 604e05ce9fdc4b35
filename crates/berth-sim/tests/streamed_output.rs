//! `-o json` and `-o yaml` are streamed object by object (issue 12); their bytes must be
//! those of the whole-tree rendering they replaced: `output::list` (the `v1` `List` built as
//! one `serde_json::Value`) printed with `serde_json::to_string_pretty` plus a newline, or
//! `serde_yaml_ng::to_string`. Checked on every scenario of the repository that runs.

use std::path::{Path, PathBuf};

use berth_core::Config;
use berth_sim::{input, output, Format, Simulation};

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn yaml_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut paths: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    paths.sort();
    for p in paths {
        if p.is_dir() {
            yaml_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "yaml" || e == "yml") {
            out.push(p);
        }
    }
}

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
