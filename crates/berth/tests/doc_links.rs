//! README.md and docs/ point only inside the repository: every relative link (`[text](path)`,
//! `![alt](path)`, `[ref]: path`) names a file or directory that exists under the repository
//! root, and none reaches for the reference material kept beside a developer's checkout.

use std::path::{Component, Path, PathBuf};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("the repository root")
}

/// README.md and every Markdown file under docs/.
fn documents() -> Vec<PathBuf> {
    let root = repo();
    let mut files = vec![root.join("README.md")];
    let mut dirs = vec![root.join("docs")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("docs/ is readable") {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "md") {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

/// The text outside fenced code blocks and inline code spans (where brackets are code).
fn prose(text: &str) -> String {
    let mut out = String::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        let mut in_code = false;
        for c in line.chars() {
            if c == '`' {
                in_code = !in_code;
            } else if !in_code {
                out.push(c);
            }
        }
        out.push('\n');
    }
    out
}

/// Link targets: `](target)` and reference definitions `[label]: target`.
fn targets(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("](") {
        let after = &rest[at + 2..];
        if let Some(end) = after.find(')') {
            let target = after[..end].split_whitespace().next().unwrap_or("");
            found.push(target.to_string());
        }
        rest = after;
    }
    for line in text.lines() {
        let line = line.trim_start();
        if let Some(close) = line.strip_prefix('[').and_then(|l| l.find("]: ")) {
            let target = line[close + 4..].split_whitespace().next().unwrap_or("");
            found.push(target.to_string());
        }
    }
    found
}

fn is_external(target: &str) -> bool {
    target.starts_with("http://") || target.starts_with("https://") || target.starts_with("mailto:")
}

/// `path` with `.` and `..` resolved lexically (the file may not exist).
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

#[test]
fn every_relative_link_resolves_inside_the_repository() {
    let root = repo();
    let mut broken = Vec::new();
    let mut checked = 0;
    for file in documents() {
        let text = std::fs::read_to_string(&file).expect("readable");
        let dir = file.parent().expect("a directory");
        for target in targets(&prose(&text)) {
            if target.is_empty() || target.starts_with('#') || is_external(&target) {
                continue;
            }
            checked += 1;
            let path = target.split('#').next().unwrap_or("");
            let resolved = normalize(&dir.join(path));
            let name = file.strip_prefix(&root).unwrap_or(&file).display();
            if !resolved.starts_with(&root) {
                broken.push(format!("{name}: {target} points outside the repository"));
            } else if !resolved.exists() {
                broken.push(format!("{name}: {target} does not exist"));
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
    assert!(
        checked >= 20,
        "only {checked} relative links found: is the parser right?"
    );
}

/// The simulate contract beside a developer's checkout is not part of the repository: the
/// documentation must describe the format itself, not send readers there.
#[test]
fn no_document_points_at_material_outside_the_repository() {
    let root = repo();
    let mut files = documents();
    for dir in [
        "crates/berth-sim/src",
        "crates/berth-sim/tests",
        "crates/berth/src",
    ] {
        for entry in std::fs::read_dir(root.join(dir)).expect("readable") {
            let path = entry.expect("an entry").path();
            if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    let mut found = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).expect("readable");
        // Spelled in pieces so that this file does not itself mention what it looks for.
        for needle in [concat!("..", "/shared"), concat!("spec/", "scenario.md")] {
            if text.contains(needle) {
                let name = file.strip_prefix(&root).unwrap_or(&file).display();
                found.push(format!("{name} mentions {needle}"));
            }
        }
    }
    assert!(found.is_empty(), "{}", found.join("\n"));
}

/// The link checker itself: a broken, an escaping and a good link are told apart.
#[test]
fn the_link_parser_finds_inline_image_and_reference_links_outside_code() {
    let text = "see [a](docs/a.md#x) and ![b](img.png \"t\")\n`[c](code)`\n```\n[d](fenced)\n```\n[e]: ../out.md\n";
    assert_eq!(
        targets(&prose(text)),
        ["docs/a.md#x", "img.png", "../out.md"]
    );
    assert_eq!(normalize(Path::new("/r/docs/../../x")), PathBuf::from("/x"));
}

/// Every metric docs/metrics.md describes and docs/alerts.yaml alerts on is one `berth run`
/// exports (names as Prometheus sees them, with `_total`, `_bucket`, ... suffixes), and every
/// metric it exports is described.
#[test]
fn the_metrics_documented_and_alerted_on_are_the_ones_exported() {
    // A family with labels is exported once it has a sample: give every one a sample.
    let m = berth_kube::metrics::Metrics::new();
    let second = std::time::Duration::from_secs(1);
    m.attempts("berth", "scheduled", 1, second);
    m.pending("active", 1);
    m.scheduled_after(second);
    m.reservations("Pending", 1);
    m.numa("flushes", 1);
    m.binds_in_flight(1, 1);
    m.event_dropped("queue_full");
    m.fenced();
    m.bind_failed("conflict");
    m.request("bind", 201);
    m.watch_event(berth_core::Kind::Pod);
    m.watch_error(berth_core::Kind::Pod, 410);
    m.unreadable(
        berth_core::Kind::Reservation,
        berth_api::validate::Rule::Negative,
    );
    m.drp(&berth_core::drp::Metrics::default(), 1);
    m.preemption(1, 1, 1, 1);
    let exported = m.encode();
    let families: std::collections::BTreeSet<&str> = exported
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert!(families.len() > 10, "{exported}");
    let known = |name: &str| {
        families.contains(name)
            || ["_total", "_bucket", "_count", "_sum"]
                .iter()
                .any(|suffix| {
                    name.strip_suffix(suffix)
                        .is_some_and(|base| families.contains(base))
                })
    };
    let names = |text: &str| -> Vec<String> {
        text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .filter(|w| w.starts_with("scheduler_") || w.starts_with("berth_"))
            .map(String::from)
            .collect()
    };
    let root = repo();
    let doc = std::fs::read_to_string(root.join("docs/metrics.md")).expect("docs/metrics.md");
    let alerts = std::fs::read_to_string(root.join("docs/alerts.yaml")).expect("docs/alerts.yaml");
    let rules: serde_yaml_ng::Value =
        serde_yaml_ng::from_str(&alerts).expect("alerts.yaml is YAML");
    let groups = rules["groups"].as_sequence().expect("groups");
    let mut alert_names = Vec::new();
    for g in groups {
        for r in g["rules"].as_sequence().expect("rules") {
            let name = r["alert"].as_str().expect("an alert name");
            assert!(r["expr"].as_str().is_some(), "{name} has an expr");
            alert_names.push(name.to_string());
        }
    }
    let mut unknown: Vec<String> = names(&doc)
        .into_iter()
        .chain(names(&alerts))
        .filter(|n| !known(n))
        .collect();
    unknown.sort();
    unknown.dedup();
    assert!(unknown.is_empty(), "not exported: {unknown:?}");
    for family in &families {
        assert!(
            doc.contains(family),
            "docs/metrics.md does not describe {family}"
        );
    }
    for alert in &alert_names {
        assert!(
            doc.contains(alert.as_str()),
            "docs/metrics.md does not explain {alert}"
        );
    }
}
