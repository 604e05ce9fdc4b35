//! One (case, scheduler) run from start to finish: a fresh cluster, the nodes, the scheduler
//! process, the reservations, the init pods, the measurement.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use berth_testcluster::{Options, TestCluster};

use crate::case::Case;
use crate::error::{io_err, Error};
use crate::metrics;
use crate::scheduler::{BerthOptions, SchedulerProcess, Which};
use crate::workload::{Measured, Workload};

/// The API server flags for throughput: no max-in-flight limits and no priority and
/// fairness (both schedulers and the harness would otherwise queue behind them).
pub const APISERVER_ARGS: &[&str] = &[
    "--max-requests-inflight=0",
    "--max-mutating-requests-inflight=0",
    "--enable-priority-and-fairness=false",
];

/// The test cluster's options for a benchmark.
pub fn cluster_options() -> Options {
    APISERVER_ARGS
        .iter()
        .fold(Options::new(), |o, a| o.apiserver_arg(*a))
}

/// How the measured pods meet the scheduler.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Created while the scheduler runs, as scheduler_perf does: the clock starts at the
    /// first create. On a small machine the harness's create rate can be the limit.
    Overlap,
    /// Created while no scheduler runs; the clock starts when the scheduler is started on
    /// the backlog (its start-up and LISTs are timed too).
    Backlog,
}

impl Mode {
    /// The name printed in reports.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Overlap => "overlap",
            Mode::Backlog => "backlog",
        }
    }
}

/// How every run is made.
#[derive(Debug, Clone)]
pub struct RunConfig {
    /// How the measured pods meet the scheduler.
    pub mode: Mode,
    /// How to start berth.
    pub berth: BerthOptions,
    /// Creates in flight at most.
    pub concurrency: usize,
    /// Where the schedulers' configurations and logs go (one directory per run).
    pub work_dir: PathBuf,
}

/// How long the preparation took.
#[derive(Debug, Clone, Copy, Default)]
pub struct Setup {
    /// Starting etcd and kube-apiserver.
    pub cluster: Duration,
    /// Creating the nodes.
    pub nodes: Duration,
    /// Creating the reservations until all were Available.
    pub reservations: Duration,
    /// Creating the init pods until all were bound.
    pub init: Duration,
    /// Creating the unschedulable pods until all were found unschedulable.
    pub unschedulable: Duration,
}

/// One run's result.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The case.
    pub case: Case,
    /// The scheduler.
    pub which: Which,
    /// How the measured pods met the scheduler.
    pub mode: Mode,
    /// The preparation.
    pub setup: Setup,
    /// The measurement.
    pub measured: Measured,
    /// The scheduler's log.
    pub log: PathBuf,
    /// berth's API requests and bind failures during the measured phase, from its
    /// `/metrics` (empty for kube-scheduler, which serves none here).
    pub api_requests: Vec<(String, f64)>,
    /// The 1-minute load average when the measured phase ended (the machine may be shared).
    pub load: Option<f64>,
}

/// The 1-minute load average, from `/proc/loadavg`.
pub fn load_average() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// The counter families read from berth's `/metrics`.
const COUNTERS: &[&str] = &["berth_api_requests_total", "berth_bind_failures_total"];

fn scrape_counters(log: &std::path::Path) -> Vec<(String, f64)> {
    metrics::metrics_addr(log)
        .and_then(metrics::scrape)
        .map(|text| metrics::counters(&text, COUNTERS))
        .unwrap_or_default()
}

/// Runs `case` with `which` on a fresh cluster. Blocking.
pub fn run_one(case: &Case, which: Which, config: &RunConfig) -> Result<Outcome, Error> {
    if which == Which::Berth && !config.berth.binary.is_file() {
        return Err(Error::BerthMissing(config.berth.binary.clone()));
    }
    let started = Instant::now();
    let cluster = TestCluster::start_with(cluster_options())?;
    let mut setup = Setup {
        cluster: started.elapsed(),
        ..Setup::default()
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(io_err("building the Tokio runtime"))?;
    let dir = config
        .work_dir
        .join(format!("{}-{}", case.name, which.name()));
    let mut load = None;
    runtime.block_on(async {
        let workload = Workload::new(cluster.client(), case.clone(), config.concurrency);
        setup.nodes = workload.create_nodes().await?;
        // As scheduler_perf: the scheduler starts once the nodes exist, before any pod.
        let process = SchedulerProcess::start(which, &cluster, &dir, &config.berth)?;
        // The scheduler of the moment (a backlog run restarts it); shared by the liveness
        // check and the restart.
        let slot = std::sync::Mutex::new(Some(process));
        let lock = || slot.lock().unwrap_or_else(|p| p.into_inner());
        let mut alive = || match lock().as_mut() {
            Some(p) => p.check_alive(),
            None => Ok(()),
        };
        setup.reservations = workload.create_reservations(&mut alive).await?;
        setup.init = workload.run_init(&mut alive).await?;
        setup.unschedulable = workload.create_unschedulable(&mut alive).await?;
        let (measured, api_requests) = match config.mode {
            Mode::Overlap => {
                let (pid, log) = {
                    let guard = lock();
                    let p = guard.as_ref().ok_or(Error::Check("no scheduler".into()))?;
                    (p.pid(), p.log().to_path_buf())
                };
                let before = scrape_counters(&log);
                let measured = workload.run_measured(pid, &mut alive).await?;
                let after = scrape_counters(&log);
                (measured, metrics::delta(&before, &after))
            }
            Mode::Backlog => {
                if let Some(p) = lock().take() {
                    p.stop(Duration::from_secs(10));
                }
                let mut start = || {
                    let p = SchedulerProcess::start(which, &cluster, &dir, &config.berth)?;
                    let pid = p.pid();
                    *lock() = Some(p);
                    Ok(pid)
                };
                let measured = workload.run_backlog(&mut start, &mut alive).await?;
                let log = lock().as_ref().map(|p| p.log().to_path_buf());
                // Every request of the new process was made for the backlog.
                let after = log.as_deref().map(scrape_counters).unwrap_or_default();
                (measured, after)
            }
        };
        load = load_average();
        let log = lock()
            .as_ref()
            .map(|p| p.log().to_path_buf())
            .unwrap_or_default();
        if let Some(p) = lock().take() {
            p.stop(Duration::from_secs(10));
        }
        Ok(Outcome {
            case: case.clone(),
            which,
            mode: config.mode,
            setup,
            measured,
            log,
            api_requests,
            load,
        })
    })
}
