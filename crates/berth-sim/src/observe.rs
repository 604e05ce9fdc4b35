//! `berth simulate` with what a person watching a run asks for on top of the result: the
//! per-step log (`-v`), the HTML report (`--report`) and a progress bar. Same input, output
//! and exit status as [`crate::run`]; the log and the bar go to standard error.

use std::io::{Read, Write};

use berth_core::Config;

use crate::output;
use crate::run::{load_config, Options, RunOutput};
use crate::sim::{Hooks, Simulation};

/// What to record and show besides the result.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Extras {
    /// `-v`: log what each step applied and what got scheduled, expired or failed, at which
    /// virtual time, on standard error.
    pub verbose: bool,
    /// `--report FILE`: write the HTML report there.
    pub report: Option<String>,
    /// Draw a progress bar on standard error when it is a terminal (after a second).
    pub progress: bool,
}

/// Runs `berth simulate` with `extras`. A report that cannot be written is an error (exit
/// status 1, after the result is printed).
pub fn run(options: &Options, extras: &Extras, stdin: &mut dyn Read) -> RunOutput {
    let mut stdout = Vec::new();
    let Finished { stderr, code } = run_to(options, extras, stdin, &mut stdout);
    if code == 2 {
        // Bad input, or output that could not be rendered: nothing on standard output.
        stdout.clear();
    }
    RunOutput {
        stdout: String::from_utf8(stdout)
            .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned()),
        stderr,
        code,
    }
}

/// What [`run_to`] leaves to print after standard output: standard error and the exit status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finished {
    /// Standard error: warnings, failed expectations, errors.
    pub stderr: String,
    /// As [`RunOutput::code`]; 1 also when standard output could not be written.
    pub code: i32,
}

/// [`run`], writing the output to `stdout` as it is produced instead of collecting it
/// (`berth simulate` itself: the output of a large cluster is never held whole). A reader
/// that goes away early (`| head`) is not an error.
pub fn run_to(
    options: &Options,
    extras: &Extras,
    stdin: &mut dyn Read,
    stdout: &mut dyn Write,
) -> Finished {
    let profiles = match &options.config {
        Some(path) => match load_config(path) {
            Ok(p) => p,
            Err(e) => return bad(&e),
        },
        None => Vec::new(),
    };
    let input = match crate::run::read_input(options, stdin) {
        Ok(i) => i,
        Err(e) => return bad(&e),
    };
    let config = Config {
        seed: options.seed,
        ..Config::default()
    };
    let hooks = Hooks {
        timeline: extras.verbose || extras.report.is_some(),
        progress: extras.progress,
    };
    let sim = Simulation::run_input(profiles, config, input, hooks);
    let mut stderr = String::new();
    if extras.verbose {
        if let Some(tl) = sim.timeline() {
            for line in tl.log_lines() {
                stderr.push_str(&line);
                stderr.push('\n');
            }
        }
    }
    for line in sim.log() {
        stderr.push_str(line);
        stderr.push('\n');
    }
    let failed = sim.failed_expectations();
    if failed > 0 {
        stderr.push_str(&format!(
            "{failed} expectation{} failed\n",
            if failed == 1 { "" } else { "s" }
        ));
    }
    let mut code = if failed > 0 { 1 } else { 0 };
    if let Some(file) = &extras.report {
        if let Err(e) = crate::report::write(&sim, file) {
            stderr.push_str(&format!("error: {e}\n"));
            code = 1;
        }
    }
    match output::write(&sim, options.output, stdout) {
        Ok(()) => Finished { stderr, code },
        Err(e) if e.is_broken_pipe() => Finished { stderr, code },
        Err(e @ output::OutputError::Write(_)) => {
            stderr.push_str(&format!("error: {e}\n"));
            Finished { stderr, code: 1 }
        }
        Err(e) => {
            stderr.push_str(&format!("error: {e}\n"));
            Finished { stderr, code: 2 }
        }
    }
}

fn bad(e: &crate::Error) -> Finished {
    Finished {
        stderr: format!("error: {e}\n"),
        code: e.exit_code(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "apiVersion: v1\nkind: Node\nmetadata: {name: n1}\nstatus: {allocatable: {cpu: 2}}\n---\napiVersion: scheduling.koordinator.sh/v1alpha1\nkind: Reservation\nmetadata: {name: r1}\nspec:\n  ttl: 1m\n  template: {spec: {containers: [{name: c, resources: {requests: {cpu: 1}}}]}}\n  owners: [{object: {name: someone}}]\n---\napiVersion: sim.berth.dev/v1alpha1\nkind: Scenario\nmetadata: {name: s}\nspec:\n  steps:\n  - apply: [{apiVersion: v1, kind: Pod, metadata: {name: p}, spec: {containers: [{name: c, resources: {requests: {cpu: 1}}}]}}]\n  - apply: [{apiVersion: v1, kind: Pod, metadata: {name: q}, spec: {containers: [{name: c, resources: {requests: {cpu: 1}}}]}}]\n  - advance: 2m\n";

    #[test]
    fn verbose_logs_each_step_and_what_it_scheduled_expired_or_failed_at_its_time() {
        let options = Options {
            files: vec!["-".into()],
            ..Options::default()
        };
        let extras = Extras {
            verbose: true,
            ..Extras::default()
        };
        let out = run(&options, &extras, &mut TEXT.as_bytes());
        assert_eq!(out.code, 0, "{}", out.stderr);
        let lines: Vec<&str> = out.stderr.lines().collect();
        assert_eq!(
            lines,
            [
                "[2024-01-01T00:00:00Z] reservation r1 Available on n1",
                "[2024-01-01T00:00:00Z] spec.steps[0] (apply) of <stdin>: apply Pod default/p",
                "[2024-01-01T00:00:00Z] scheduled pod default/p on n1",
                "[2024-01-01T00:00:00Z] spec.steps[1] (apply) of <stdin>: apply Pod default/q",
                "[2024-01-01T00:00:00Z] unschedulable pod default/q: 0/1 nodes are available: 1 Insufficient cpu. no new claims to deallocate, preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod.",
                "[2024-01-01T00:00:00Z] spec.steps[2] (advance) of <stdin>: advance 2m",
                "[2024-01-01T00:01:00Z] reservation r1 expired",
                "[2024-01-01T00:01:00Z] scheduled pod default/q on n1",
            ],
            "{}",
            out.stderr
        );
        // Without -v the same run prints nothing on standard error.
        let out = run(&options, &Extras::default(), &mut TEXT.as_bytes());
        assert_eq!(out.stderr, "");
    }

    /// What the binary runs refuses an empty input too.
    #[test]
    fn an_empty_input_is_bad_input_here_too() {
        let options = Options {
            files: vec!["-".into()],
            ..Options::default()
        };
        let out = run(&options, &Extras::default(), &mut "# nothing\n".as_bytes());
        assert_eq!(out.code, 2, "{}", out.stderr);
        assert!(out.stdout.is_empty());
        assert!(
            out.stderr.contains("no objects to simulate"),
            "{}",
            out.stderr
        );
    }

    /// A pod that arrives with `spec.nodeName` (at time 0 or in a step) was not scheduled by
    /// berth, and the log does not say it was.
    #[test]
    fn verbose_does_not_claim_to_have_scheduled_a_pod_that_came_bound() {
        let text = "apiVersion: v1\nkind: Node\nmetadata: {name: n1}\nstatus: {allocatable: {cpu: 4}}\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: early}\nspec: {nodeName: n1, containers: [{name: c}]}\n---\napiVersion: sim.berth.dev/v1alpha1\nkind: Scenario\nmetadata: {name: s}\nspec:\n  steps:\n  - apply: [{apiVersion: v1, kind: Pod, metadata: {name: late}, spec: {nodeName: n1, containers: [{name: c}]}}, {apiVersion: v1, kind: Pod, metadata: {name: mine}, spec: {containers: [{name: c}]}}]\n";
        let options = Options {
            files: vec!["-".into()],
            ..Options::default()
        };
        let extras = Extras {
            verbose: true,
            ..Extras::default()
        };
        let out = run(&options, &extras, &mut text.as_bytes());
        assert_eq!(out.code, 0, "{}", out.stderr);
        let lines: Vec<&str> = out.stderr.lines().collect();
        assert_eq!(
            lines,
            [
                "[2024-01-01T00:00:00Z] pod default/early came bound to n1",
                "[2024-01-01T00:00:00Z] spec.steps[0] (apply) of <stdin>: apply Pod default/late, Pod default/mine",
                "[2024-01-01T00:00:00Z] pod default/late came bound to n1",
                "[2024-01-01T00:00:00Z] scheduled pod default/mine on n1",
            ],
            "{}",
            out.stderr
        );
    }

    #[test]
    fn the_report_is_written_and_a_bad_path_is_an_error() {
        let dir = std::env::temp_dir().join(format!("berth-report-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("r.html");
        let options = Options {
            files: vec!["-".into()],
            ..Options::default()
        };
        let extras = Extras {
            report: Some(file.to_string_lossy().into_owned()),
            ..Extras::default()
        };
        let out = run(&options, &extras, &mut TEXT.as_bytes());
        assert_eq!(out.code, 0, "{}", out.stderr);
        let page = std::fs::read_to_string(&file).unwrap();
        assert!(page.starts_with("<!DOCTYPE html>"));
        assert!(
            page.contains("\"reservations\":[\"r1\"]"),
            "the data is inline"
        );
        assert!(
            !page.contains("http://") || !page.contains("src=\"http"),
            "nothing fetched"
        );
        let extras = Extras {
            report: Some("/nonexistent/dir/r.html".into()),
            ..Extras::default()
        };
        let out = run(&options, &extras, &mut TEXT.as_bytes());
        assert_eq!(out.code, 1);
        assert!(
            out.stderr.contains("writing /nonexistent/dir/r.html"),
            "{}",
            out.stderr
        );
    }
}
