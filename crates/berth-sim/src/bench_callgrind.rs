//! `berth bench --instructions`: exact instruction counts of the measured cycles, from
//! valgrind's callgrind.
//!
//! Wall-clock figures swing by tens of percent on shared machines; instruction counts do
//! not, so they are what a regression is judged by (see the method in
//! `reference/perf-profile.md`). The case runs again in a child process, the same binary
//! under `valgrind --tool=callgrind`, collecting only inside
//! `bench::measured_cycle` ([`TOGGLE`]; set-up and bind confirmation are left out). Without
//! valgrind on `PATH` the figure is simply absent.

use std::path::Path;
use std::process::{Command, Stdio};

/// The function callgrind collects in (its demangled path).
pub const TOGGLE: &str = "berth_sim::bench::measured_cycle";

/// Instructions executed in the measured cycles of the case named `case` at `nodes` and
/// `pods`, or `None` when valgrind is missing or the child failed (the report then leaves
/// the figure out rather than guess).
pub fn count(case: &str, nodes: usize, pods: usize) -> Option<u64> {
    count_in(TOGGLE, &child_args(case, nodes, pods))
}

/// Instructions executed inside the function `toggle` (its demangled path) by this binary
/// run with `args`, or `None` as for [`count`].
pub fn count_in(toggle: &str, args: &[String]) -> Option<u64> {
    let exe = std::env::current_exe().ok()?;
    let dir = std::env::temp_dir();
    let out = dir.join(format!("berth-bench-callgrind-{}.out", std::process::id()));
    let status = Command::new("valgrind")
        .arg("--tool=callgrind")
        .arg("--collect-atstart=no")
        .arg(format!("--toggle-collect={toggle}"))
        .arg(format!("--callgrind-out-file={}", out.display()))
        .arg(&exe)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .ok()?;
    let total = if status.success() {
        read_total(&out)
    } else {
        None
    };
    let _ = std::fs::remove_file(&out);
    total
}

/// The `berth bench` arguments that run exactly the case named `case` (`--only-case` picks
/// it out of `--suite all` by name) at the same size.
pub fn child_args(case: &str, nodes: usize, pods: usize) -> Vec<String> {
    vec![
        "bench".into(),
        "--suite".into(),
        "all".into(),
        "--nodes".into(),
        nodes.to_string(),
        "--pods".into(),
        pods.to_string(),
        "--only-case".into(),
        case.to_string(),
    ]
}

fn read_total(path: &Path) -> Option<u64> {
    parse_total(&std::fs::read_to_string(path).ok()?)
}

/// The event total of a callgrind output file (`summary:`, else `totals:`).
pub fn parse_total(text: &str) -> Option<u64> {
    let field = |prefix: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(prefix))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
    };
    field("summary:").or_else(|| field("totals:"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_total_comes_from_summary_or_totals() {
        assert_eq!(parse_total("events: Ir\nsummary: 1234\n"), Some(1234));
        assert_eq!(parse_total("events: Ir\nfn=x\n1 2\ntotals: 99\n"), Some(99));
        assert_eq!(parse_total("events: Ir\n"), None);
        assert_eq!(parse_total("summary: lots\n"), None);
    }

    #[test]
    fn the_child_runs_the_named_case_at_the_same_size() {
        let args = child_args("PodAffinity/50Nodes", 50, 7);
        let pos = |flag: &str| args.iter().position(|a| a == flag).map(|i| &args[i + 1]);
        assert_eq!(pos("--nodes").map(String::as_str), Some("50"));
        assert_eq!(pos("--pods").map(String::as_str), Some("7"));
        assert_eq!(
            pos("--only-case").map(String::as_str),
            Some("PodAffinity/50Nodes")
        );
    }
}
