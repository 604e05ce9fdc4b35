//! Runs every `*.yaml` under the repository's `tests/scenarios/` (recursively) and every
//! `examples/*.yaml` through `berth_sim::run`, the library call behind `berth simulate`.
//!
//! A file passes when the run exits 0, unless its leading comment lines say otherwise:
//!
//! ```yaml
//! # expect-exit: 2
//! # expect-stderr: document 1: spec.containers[0].resources.requests.cpu
//! # config: ../configs/fit-only.yaml      (a --config file, relative to this file)
//! # seed: 7                               (--seed)
//! ```
//!
//! `expect-stderr` may repeat; each is a substring of standard error. Every run that exits 0
//! is repeated with `-o json` three times, and the outputs must be byte-identical.

use std::path::{Path, PathBuf};

use berth_sim::{run, Format, Options, RunOutput};

mod common;

use common::{repo_root, yaml_files};

/// What a file's header asks for.
#[derive(Debug, Default)]
struct Header {
    exit: i32,
    stderr: Vec<String>,
    config: Option<String>,
    seed: u64,
}

fn header(path: &Path, text: &str) -> Result<Header, String> {
    let mut h = Header::default();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line == "---" {
            continue;
        }
        let Some(comment) = line.strip_prefix('#') else {
            break;
        };
        let comment = comment.trim();
        if let Some(v) = comment.strip_prefix("expect-exit:") {
            h.exit = v
                .trim()
                .parse()
                .map_err(|e| format!("bad expect-exit {v:?}: {e}"))?;
        } else if let Some(v) = comment.strip_prefix("expect-stderr:") {
            h.stderr.push(v.trim().to_string());
        } else if let Some(v) = comment.strip_prefix("config:") {
            let dir = path.parent().unwrap_or(Path::new("."));
            h.config = Some(dir.join(v.trim()).to_string_lossy().into_owned());
        } else if let Some(v) = comment.strip_prefix("seed:") {
            h.seed = v
                .trim()
                .parse()
                .map_err(|e| format!("bad seed {v:?}: {e}"))?;
        }
    }
    Ok(h)
}

fn run_file(path: &Path, h: &Header, output: Format) -> RunOutput {
    let options = Options {
        files: vec![path.to_string_lossy().into_owned()],
        config: h.config.clone(),
        output,
        seed: h.seed,
    };
    run(&options, &mut std::io::empty())
}

/// Checks one file; returns what went wrong.
fn check(path: &Path) -> Option<String> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) => return Some(format!("cannot read: {e}")),
    };
    let h = match header(path, &text) {
        Ok(h) => h,
        Err(e) => return Some(e),
    };
    let out = run_file(path, &h, Format::Table);
    if out.code != h.exit {
        return Some(format!(
            "exit status {}, want {}\n--- stderr:\n{}",
            out.code, h.exit, out.stderr
        ));
    }
    for want in &h.stderr {
        if !out.stderr.contains(want.as_str()) {
            return Some(format!(
                "stderr does not contain {want:?}\n--- stderr:\n{}",
                out.stderr
            ));
        }
    }
    if out.code == 2 && !out.stdout.is_empty() {
        return Some("bad input, yet something was printed on stdout".into());
    }
    if out.code == 0 {
        // Hash maps are seeded afresh for each run, so an order leaking from one shows up
        // as a difference between runs (not always: three runs make it likely).
        let a = run_file(path, &h, Format::Json);
        for _ in 0..2 {
            let b = run_file(path, &h, Format::Json);
            if a.stdout != b.stdout {
                return Some("two runs gave different -o json output".into());
            }
        }
        if serde_json::from_str::<serde_json::Value>(&a.stdout).is_err() {
            return Some("-o json output is not JSON".into());
        }
    }
    None
}

fn check_all(files: &[PathBuf]) {
    let failures: Vec<String> = files
        .iter()
        .filter_map(|f| check(f).map(|why| format!("{}: {why}", f.display())))
        .collect();
    assert!(
        failures.is_empty(),
        "{} of {} files failed:\n\n{}",
        failures.len(),
        files.len(),
        failures.join("\n\n")
    );
}

#[test]
fn every_scenario_file_runs_as_its_header_says() {
    let mut files = Vec::new();
    yaml_files(&repo_root().join("tests/scenarios"), &mut files);
    // Files named in a `# config:` header live under `configs/` and are not scenarios.
    files.retain(|f| !f.components().any(|c| c.as_os_str() == "configs"));
    assert!(
        files.len() >= 10,
        "expected the scenario files under tests/scenarios, found {}",
        files.len()
    );
    check_all(&files);
}

#[test]
fn every_example_runs_cleanly() {
    let mut files = Vec::new();
    yaml_files(&repo_root().join("examples"), &mut files);
    assert!(!files.is_empty(), "no examples found");
    check_all(&files);
}

#[test]
fn the_header_parser_reads_every_directive() {
    let h = header(
        Path::new("/x/y/a.yaml"),
        "# about\n# expect-exit: 2\n# expect-stderr: one\n# expect-stderr: two\n# config: c.yaml\n# seed: 3\napiVersion: v1\n# expect-exit: 9\n",
    )
    .unwrap();
    assert_eq!(h.exit, 2);
    assert_eq!(h.stderr, ["one", "two"]);
    assert_eq!(h.config.as_deref(), Some("/x/y/c.yaml"));
    assert_eq!(h.seed, 3);
}

#[test]
fn a_file_passes_only_if_its_exit_status_matches() {
    let dir = std::env::temp_dir().join(format!("berth-scenarios-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("wrong.yaml");
    std::fs::write(
        &path,
        "# expect-exit: 0\napiVersion: apps/v1\nkind: DaemonSet\n",
    )
    .unwrap();
    let why = check(&path).expect("an unknown kind exits 2, not 0");
    assert!(why.contains("exit status 2, want 0"), "{why}");
}
