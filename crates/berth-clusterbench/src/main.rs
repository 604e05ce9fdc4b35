//! `berth-clusterbench`: berth and kube-scheduler on the same real API server with the same
//! workload; pods bound per second, their ratio, CPU seconds and peak RSS.

use std::path::PathBuf;

use anyhow::Context;
use berth_clusterbench::{
    report, run_one, BerthOptions, Case, Mode, Outcome, RunConfig, Tuning, Which,
};
use clap::{Parser, ValueEnum};

/// Scheduling throughput through a real kube-apiserver: kube-scheduler, then berth, each on
/// a fresh cluster with the same workload (scheduler_perf's SchedulingBasic shapes).
#[derive(Debug, Parser)]
#[command(name = "berth-clusterbench", version, about, long_about = None)]
struct Cli {
    /// Which case: basic-500 (500 nodes / 500 init / 1,000 pods), backlog-500 (500 / 100 /
    /// 5,000), flood-500 (backlog-500 plus 10,000 unschedulable pods, against each
    /// scheduler's backlog-500 run, which it runs too; use --mode backlog), basic-5000 (5,000 / 1,000 / 5,000), reservations (basic-5000 with 1,000 Available reservations and half the pods
    /// owners; berth only, compared with berth's basic-5000 run, which it runs too), or all.
    #[arg(long, value_enum, default_value_t = CaseArg::All)]
    case: CaseArg,
    /// Which scheduler.
    #[arg(long, value_enum, default_value_t = SchedArg::Both)]
    scheduler: SchedArg,
    /// The berth binary (build it with `cargo build --release -p berth`).
    #[arg(long, value_name = "PATH", default_value = "target/release/berth")]
    berth: PathBuf,
    /// berth's --max-binds-in-flight.
    #[arg(long, value_name = "N", default_value_t = 256)]
    max_binds_in_flight: usize,
    /// Creates in flight at most (the one client's concurrency).
    #[arg(long, value_name = "N", default_value_t = 200)]
    concurrency: usize,
    /// Run every (case, scheduler) this many times, in rounds; the ratios and the table use
    /// the medians.
    #[arg(long, value_name = "N", default_value_t = 1)]
    repeat: usize,
    /// How the measured pods meet the scheduler: created while it runs (overlap, as
    /// scheduler_perf), or created first as a backlog that a freshly started scheduler
    /// drains (backlog: the scheduler is measured, not the harness's create rate).
    #[arg(long, value_enum, default_value_t = ModeArg::Backlog)]
    mode: ModeArg,
    /// Both schedulers tuned (qps/burst 5000, leader election off, as scheduler_perf) or on
    /// their defaults (no clientConnection: qps 50 / burst 100; leader election on).
    #[arg(long, value_enum, default_value_t = TuningArg::Tuned)]
    tuning: TuningArg,
    /// Where the schedulers' configurations and logs are written.
    #[arg(long, value_name = "DIR", default_value = "target/clusterbench")]
    work_dir: PathBuf,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum CaseArg {
    #[value(name = "basic-500")]
    Basic500,
    #[value(name = "basic-5000")]
    Basic5000,
    #[value(name = "backlog-500")]
    Backlog500,
    #[value(name = "flood-500")]
    Flood500,
    Reservations,
    All,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum TuningArg {
    Tuned,
    Defaults,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum ModeArg {
    Overlap,
    Backlog,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum SchedArg {
    Berth,
    #[value(name = "kube-scheduler")]
    KubeScheduler,
    Both,
}

/// The runs to make, in order: per case kube-scheduler first, then berth.
fn plan(case: CaseArg, sched: SchedArg) -> Vec<(Case, Which)> {
    let cases = match case {
        CaseArg::Basic500 => vec![Case::basic_500()],
        CaseArg::Basic5000 => vec![Case::basic_5000()],
        CaseArg::Backlog500 => vec![Case::backlog_500()],
        CaseArg::Flood500 => vec![Case::flood_500()],
        CaseArg::Reservations => vec![Case::reservations()],
        CaseArg::All => vec![Case::basic_500(), Case::basic_5000(), Case::reservations()],
    };
    let scheds: &[Which] = match sched {
        SchedArg::Berth => &[Which::Berth],
        SchedArg::KubeScheduler => &[Which::KubeScheduler],
        SchedArg::Both => &[Which::KubeScheduler, Which::Berth],
    };
    let mut runs: Vec<(Case, Which)> = Vec::new();
    for c in cases {
        if c.reservations > 0 {
            // kube-scheduler has no reservations: berth against its own run of the same
            // size without them (made here unless already planned).
            if !scheds.contains(&Which::Berth) {
                eprintln!("note: case {} runs berth only; skipped", c.name);
                continue;
            }
            let base = c.baseline();
            if !runs.iter().any(|(r, w)| *r == base && *w == Which::Berth) {
                runs.push((base, Which::Berth));
            }
            runs.push((c, Which::Berth));
        } else {
            for &w in scheds {
                // A flood case against each scheduler's own run without the flood.
                let base = c.baseline();
                if base != c && !runs.iter().any(|(r, x)| *r == base && *x == w) {
                    runs.push((base, w));
                }
                runs.push((c.clone(), w));
            }
        }
    }
    runs
}

fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("model name"))
                .map(|v| v.trim_start_matches([' ', '\t', ':']).to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let mem_gib = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("MemTotal:"))
                .and_then(|v| {
                    v.split_whitespace()
                        .next()
                        .and_then(|k| k.parse::<f64>().ok())
                })
        })
        .map_or_else(|| "?".into(), |kib| format!("{:.0}", kib / 1024.0 / 1024.0));
    let cores = std::thread::available_parallelism().map_or(0, usize::from);
    format!("{cores} cores ({cpu}), {mem_gib} GiB RAM")
}

fn main() -> std::process::ExitCode {
    match run(Cli::parse()) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<()> {
    let runs = plan(cli.case, cli.scheduler);
    let config = RunConfig {
        mode: match cli.mode {
            ModeArg::Overlap => Mode::Overlap,
            ModeArg::Backlog => Mode::Backlog,
        },
        berth: BerthOptions {
            binary: cli.berth.clone(),
            max_binds_in_flight: cli.max_binds_in_flight,
            tuning: match cli.tuning {
                TuningArg::Tuned => Tuning::Tuned,
                TuningArg::Defaults => Tuning::Defaults,
            },
        },
        concurrency: cli.concurrency,
        work_dir: cli.work_dir.clone(),
    };
    if runs.iter().any(|(_, w)| *w == Which::Berth) && !config.berth.binary.is_file() {
        return Err(berth_clusterbench::Error::BerthMissing(cli.berth.clone()).into());
    }
    println!("machine: {}", machine());
    println!("mode: {}", config.mode.name());
    println!("settings: {}", config.berth.tuning.name());
    let mut outcomes: Vec<Outcome> = Vec::new();
    let rounds = cli.repeat.max(1);
    for (round, (case, which)) in (0..rounds).flat_map(|r| runs.iter().map(move |run| (r, run))) {
        if rounds > 1 {
            eprintln!("round {} of {rounds}", round + 1);
        }
        eprintln!(
            "running {} ({} nodes, {} init pods, {} pods, {} reservations, {} unschedulable) with {}...",
            case.name,
            case.nodes,
            case.init_pods,
            case.pods,
            case.reservations,
            case.unschedulable,
            which.name()
        );
        let mut config = config.clone();
        if rounds > 1 {
            config.work_dir = cli.work_dir.join(format!("round-{}", round + 1));
        }
        let outcome = run_one(case, *which, &config)
            .with_context(|| format!("case {} with {}", case.name, which.name()))?;
        eprintln!("{}", report::setup_line(&outcome));
        println!("{}", report::line(&outcome));
        outcomes.push(outcome);
    }
    println!();
    for l in report::ratios(&outcomes) {
        println!("{l}");
    }
    println!();
    print!("{}", report::markdown(&outcomes));
    Ok(())
}
