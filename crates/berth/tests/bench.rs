//! `berth bench` as a user runs it: the NUMA suite honours `--nodes`/`--pods` and counts
//! its scheduling cycles' instructions with `--instructions` (under valgrind when it is
//! installed; the line says so when it is not).

use std::process::Command;

fn valgrind_installed() -> bool {
    Command::new("valgrind")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

#[test]
fn the_numa_suite_takes_its_size_and_counts_instructions() {
    let out = Command::new(env!("CARGO_BIN_EXE_berth"))
        .args(["bench", "--suite", "NUMA", "--nodes", "8", "--pods", "24"])
        .arg("--instructions")
        .output()
        .expect("berth runs");
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.starts_with("NUMA/8Nodes_2-8Zones_24GuaranteedPods/bursts-of-24-"),
        "{text}"
    );
    assert!(text.contains("bound     24"), "{text}");
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with("cache:"))
        .unwrap_or_else(|| panic!("no instruction line: {text}"));
    if valgrind_installed() {
        let per_cycle: f64 = line
            .split_whitespace()
            .nth(1)
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{line}"));
        assert!(per_cycle > 1_000.0, "{line}");
        assert!(
            line.contains("instructions/pod bound (") && line.contains("24 bound)"),
            "{line}"
        );
    } else {
        assert!(line.contains("no instruction count"), "{line}");
    }
}
