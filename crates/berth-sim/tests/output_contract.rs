//! The output half of the contract (`docs/scenario-format.md`, "Output" and "Exit status"),
//! checked on every acceptance scenario under `tests/scenarios/acceptance/`:
//!
//! - `-o json` and `-o yaml` print one `v1` `List` and nothing else, the same value in both;
//! - items are sorted by kind, then namespace, then name;
//! - every `Event` has `involvedObject` (kind, name), `reason` and `message`;
//! - a pod is either bound (`spec.nodeName`) or carries `PodScheduled=False` with a reason
//!   and a message, or was rejected by its kubelet (`Failed`);
//! - a scheduled pod that allocated from a reservation carries `reservation-allocated` with
//!   the reservation's name and uid;
//! - the same `--seed` gives byte-identical output, and so does the default seed;
//! - the `-o yaml` output reads back as input (no field the API server's schema lacks).

use std::path::{Path, PathBuf};

use serde_json::Value;

use berth_sim::{run, Format, Options};

fn acceptance_files() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/scenarios/acceptance");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map(|rd| rd.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    files.retain(|p| p.extension().is_some_and(|e| e == "yaml"));
    files.sort();
    files
}

/// The `# config:` header of a scenario file, resolved next to it.
fn config_of(path: &Path) -> Option<String> {
    let text = std::fs::read_to_string(path).ok()?;
    text.lines()
        .map(str::trim)
        .take_while(|l| l.starts_with('#') || l.is_empty())
        .find_map(|l| l.trim_start_matches('#').trim().strip_prefix("config:"))
        .map(|c| {
            path.parent()
                .unwrap_or(Path::new("."))
                .join(c.trim())
                .to_string_lossy()
                .into_owned()
        })
}

fn render(path: &Path, output: Format, seed: u64) -> (i32, String) {
    let options = Options {
        files: vec![path.to_string_lossy().into_owned()],
        config: config_of(path),
        output,
        seed,
    };
    let out = run(&options, &mut std::io::empty());
    (out.code, out.stdout)
}

fn str_at<'a>(v: &'a Value, path: &[&str]) -> &'a str {
    path.iter()
        .try_fold(v, |v, k| v.get(*k))
        .and_then(Value::as_str)
        .unwrap_or("")
}

/// What is wrong with one file's output, if anything.
fn problems(path: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let (code, json) = render(path, Format::Json, 0);
    if code == 2 {
        return out; // bad-input files print nothing; the scenario harness checks them.
    }
    let list: Value = match serde_json::from_str(&json) {
        Ok(v) => v,
        Err(e) => return vec![format!("-o json is not one JSON value: {e}")],
    };
    let (_, yaml) = render(path, Format::Yaml, 0);
    match serde_yaml_ng::from_str::<Value>(&yaml) {
        Ok(v) if v == list => {}
        Ok(_) => out.push("-o yaml and -o json differ".into()),
        Err(e) => out.push(format!("-o yaml is not one YAML document: {e}")),
    }
    // What berth prints is what an API server would hold, so it is valid input again:
    // strict field validation finds no field berth made up.
    if let Err(e) = berth_sim::input::parse_str("output.yaml", &yaml) {
        out.push(format!("-o yaml does not read back as input: {e}"));
    }
    if (list.get("apiVersion"), list.get("kind"))
        != (Some(&Value::from("v1")), Some(&Value::from("List")))
    {
        out.push("not a v1 List".into());
    }
    let items = list
        .get("items")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let keys: Vec<(String, String, String)> = items
        .iter()
        .map(|i| {
            (
                str_at(i, &["kind"]).to_string(),
                str_at(i, &["metadata", "namespace"]).to_string(),
                str_at(i, &["metadata", "name"]).to_string(),
            )
        })
        .collect();
    let mut sorted = keys.clone();
    sorted.sort();
    if keys != sorted {
        out.push("items are not sorted by kind, namespace, name".into());
    }
    let reservations: Vec<&Value> = items
        .iter()
        .filter(|i| str_at(i, &["kind"]) == "Reservation")
        .collect();
    for item in &items {
        let (kind, name) = (str_at(item, &["kind"]), str_at(item, &["metadata", "name"]));
        match kind {
            "Event" => {
                for field in [
                    &["involvedObject", "kind"][..],
                    &["involvedObject", "name"],
                    &["reason"],
                    &["message"],
                ] {
                    if str_at(item, field).is_empty() {
                        out.push(format!("event {name}: no {}", field.join(".")));
                    }
                }
            }
            "Pod" => {
                let node = str_at(item, &["spec", "nodeName"]);
                let phase = str_at(item, &["status", "phase"]);
                let scheduled = item
                    .pointer("/status/conditions")
                    .and_then(Value::as_array)
                    .and_then(|cs| {
                        cs.iter()
                            .find(|c| str_at(c, &["type"]) == "PodScheduled")
                            .cloned()
                    });
                if node.is_empty() {
                    let ok = scheduled.as_ref().is_some_and(|c| {
                        str_at(c, &["status"]) == "False"
                            && !str_at(c, &["reason"]).is_empty()
                            && !str_at(c, &["message"]).is_empty()
                    });
                    if !ok {
                        out.push(format!("pod {name}: unbound without PodScheduled=False"));
                    }
                } else if !matches!(phase, "Running" | "Failed" | "Succeeded" | "Pending") {
                    out.push(format!("pod {name}: bound with phase {phase:?}"));
                }
                let allocated = str_at(
                    item,
                    &[
                        "metadata",
                        "annotations",
                        "scheduling.koordinator.sh/reservation-allocated",
                    ],
                );
                if !allocated.is_empty() {
                    let a: Value = serde_json::from_str(allocated).unwrap_or(Value::Null);
                    let (rname, ruid) = (str_at(&a, &["name"]), str_at(&a, &["uid"]));
                    let known = reservations.iter().any(|r| {
                        str_at(r, &["metadata", "name"]) == rname
                            && str_at(r, &["metadata", "uid"]) == ruid
                    });
                    // A collected or deleted reservation may be gone; a present one must
                    // be the same object.
                    let same_name_other_uid = reservations.iter().any(|r| {
                        str_at(r, &["metadata", "name"]) == rname
                            && str_at(r, &["metadata", "uid"]) != ruid
                    });
                    // The scheduler writes both; an annotation given in the input may
                    // carry the name alone.
                    let bad_uid = !ruid.is_empty() && !known && same_name_other_uid;
                    if rname.is_empty() || bad_uid {
                        out.push(format!("pod {name}: bad reservation-allocated {allocated}"));
                    }
                }
            }
            "Reservation" => {
                let phase = str_at(item, &["status", "phase"]);
                let placed = !str_at(item, &["status", "nodeName"]).is_empty();
                if matches!(phase, "Available" | "Waiting" | "Succeeded") && !placed {
                    out.push(format!("reservation {name}: {phase} without nodeName"));
                }
            }
            _ => {}
        }
    }
    for seed in [0, 7] {
        let a = render(path, Format::Json, seed).1;
        let b = render(path, Format::Json, seed).1;
        if a != b {
            out.push(format!("--seed {seed}: two runs differ"));
        }
    }
    out
}

#[test]
fn every_acceptance_scenario_prints_a_sorted_list_that_follows_the_contract() {
    let files = acceptance_files();
    assert!(
        files.len() >= 20,
        "expected the acceptance scenarios, found {}",
        files.len()
    );
    let failures: Vec<String> = files
        .iter()
        .flat_map(|f| {
            problems(f)
                .into_iter()
                .map(move |p| format!("{}: {p}", f.display()))
        })
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
