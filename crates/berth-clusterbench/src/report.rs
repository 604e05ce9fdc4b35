//! The report: one line per run, then the ratios, then a Markdown table.

use std::fmt::Write;

use crate::case::Case;
use crate::run::{Mode, Outcome};
use crate::scheduler::Which;

fn secs(d: std::time::Duration) -> String {
    format!("{:.2}s", d.as_secs_f64())
}

fn opt_secs(d: Option<std::time::Duration>) -> String {
    d.map_or_else(|| "?".into(), secs)
}

/// One line for a run.
pub fn line(o: &Outcome) -> String {
    let m = &o.measured;
    let t = &m.throughput;
    let when = match o.mode {
        Mode::Overlap => format!(
            "last bind {} after the last create",
            secs(m.elapsed.saturating_sub(m.created_in))
        ),
        Mode::Backlog => format!("first bind {} after the start", secs(m.first_bind)),
    };
    let mut s = format!(
        "{:<13} {:<14} {:>5} pods in {:>7} ({when}): {:>7.1} pods/s | per-second avg {:.1} p50 {:.1} p90 {:.1} p99 {:.1} | \
         CPU {} ({} total) = {:.2} ms/pod | peak RSS {:.0} MiB | apiserver CPU {}, etcd {}, harness {}",
        o.case.name,
        o.which.name(),
        m.pods,
        secs(m.elapsed),
        m.pods_per_sec(),
        t.avg,
        t.p50,
        t.p90,
        t.p99,
        secs(m.scheduler_cpu()),
        secs(m.after.scheduler.cpu),
        m.cpu_ms_per_pod(),
        m.after.scheduler.peak_rss_kib as f64 / 1024.0,
        opt_secs(m.apiserver_cpu()),
        opt_secs(m.etcd_cpu()),
        secs(m.harness_cpu()),
    );
    if o.case.reservations > 0 {
        let _ = write!(s, " | {} from reservations", m.from_reservations);
    }
    if let Some(load) = o.load {
        let _ = write!(s, " | load {load:.1}");
    }
    s
}

/// The setup times of a run (for the detail log), and berth's API requests in the
/// measured phase.
pub fn setup_line(o: &Outcome) -> String {
    let mut s = format!(
        "{:<13} {:<14} setup: cluster {}, {} nodes {}, {} reservations {}, {} init pods {}, {} unschedulable pods {}; created the measured pods in {}; {} nodes used; log {}",
        o.case.name,
        o.which.name(),
        secs(o.setup.cluster),
        o.case.nodes,
        secs(o.setup.nodes),
        o.case.reservations,
        secs(o.setup.reservations),
        o.case.init_pods,
        secs(o.setup.init),
        o.case.unschedulable,
        secs(o.setup.unschedulable),
        secs(o.measured.created_in),
        o.measured.nodes_used,
        o.log.display(),
    );
    if !o.api_requests.is_empty() {
        let per_pod: Vec<String> = o
            .api_requests
            .iter()
            .map(|(name, n)| {
                let name = name
                    .trim_start_matches("berth_api_requests_total")
                    .trim_start_matches("berth_");
                format!("{name} {n:.0}")
            })
            .collect();
        let _ = write!(
            s,
            "\n{:<13} {:<14} API requests in the measured phase: {}",
            o.case.name,
            o.which.name(),
            per_pod.join(", ")
        );
    }
    s
}

/// The runs of one (case, scheduler), summarised by medians (several with `--repeat`).
#[derive(Debug, Clone)]
pub struct Summary<'a> {
    /// The runs, in order.
    pub runs: Vec<&'a Outcome>,
    /// Median pods per second.
    pub pods_per_sec: f64,
    /// Median scheduler CPU milliseconds per pod.
    pub cpu_ms_per_pod: f64,
    /// Median scheduler CPU seconds in the measured phase.
    pub cpu_secs: f64,
    /// Median scheduler CPU seconds since it started.
    pub cpu_total_secs: f64,
    /// Highest peak RSS, MiB.
    pub peak_rss_mib: f64,
    /// Median of the per-second averages, p50, p90, p99.
    pub per_second: [f64; 4],
    /// Median kube-apiserver CPU seconds in the measured phase.
    pub apiserver_secs: Option<f64>,
}

fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// One summary per (case, scheduler), in the order they first ran.
pub fn summaries(outcomes: &[Outcome]) -> Vec<Summary<'_>> {
    let mut keys: Vec<(&str, Which)> = Vec::new();
    for o in outcomes {
        if !keys.contains(&(o.case.name.as_str(), o.which)) {
            keys.push((o.case.name.as_str(), o.which));
        }
    }
    keys.into_iter()
        .map(|(name, which)| {
            let runs: Vec<&Outcome> = outcomes
                .iter()
                .filter(|o| o.case.name == name && o.which == which)
                .collect();
            let med = |f: &dyn Fn(&Outcome) -> f64| median(runs.iter().map(|o| f(o)).collect());
            let apiserver: Vec<f64> = runs
                .iter()
                .filter_map(|o| o.measured.apiserver_cpu().map(|d| d.as_secs_f64()))
                .collect();
            Summary {
                pods_per_sec: med(&|o| o.measured.pods_per_sec()),
                cpu_ms_per_pod: med(&|o| o.measured.cpu_ms_per_pod()),
                cpu_secs: med(&|o| o.measured.scheduler_cpu().as_secs_f64()),
                cpu_total_secs: med(&|o| o.measured.after.scheduler.cpu.as_secs_f64()),
                peak_rss_mib: runs
                    .iter()
                    .map(|o| o.measured.after.scheduler.peak_rss_kib as f64 / 1024.0)
                    .fold(0.0, f64::max),
                per_second: [
                    med(&|o| o.measured.throughput.avg),
                    med(&|o| o.measured.throughput.p50),
                    med(&|o| o.measured.throughput.p90),
                    med(&|o| o.measured.throughput.p99),
                ],
                apiserver_secs: (!apiserver.is_empty()).then(|| median(apiserver)),
                runs,
            }
        })
        .collect()
}

/// berth against kube-scheduler on each case both ran, and each reservation case against
/// berth's own run of the same size without reservations (medians of the runs).
pub fn ratios(outcomes: &[Outcome]) -> Vec<String> {
    let all = summaries(outcomes);
    let find = |name: &str, which: Which| {
        all.iter()
            .find(|s| s.runs[0].case.name == name && s.runs[0].which == which)
    };
    let mut lines = Vec::new();
    for b in all.iter().filter(|s| s.runs[0].which == Which::Berth) {
        let case = &b.runs[0].case;
        if case.unschedulable > 0 {
            lines.extend(flood_ratios(&all, case));
        }
        if case.reservations == 0 {
            if let Some(k) = find(&case.name, Which::KubeScheduler) {
                let rate = b.pods_per_sec / k.pods_per_sec.max(1e-9);
                let cpu = b.cpu_ms_per_pod / k.cpu_ms_per_pod.max(1e-9);
                let rss = b.peak_rss_mib / k.peak_rss_mib.max(1e-9);
                lines.push(format!(
                    "{}: berth / kube-scheduler = {rate:.2}x pods/s ({}), {cpu:.2}x CPU per pod ({}), {rss:.2}x peak RSS",
                    case.name,
                    if rate >= 2.0 { "at least 2x: met" } else { "below 2x: NOT met" },
                    if cpu < 1.0 { "less: met" } else { "not less: NOT met" },
                ));
            }
        } else {
            let base = case.baseline();
            if let Some(k) = find(&base.name, Which::Berth) {
                let rate = b.pods_per_sec / k.pods_per_sec.max(1e-9);
                let cpu = b.cpu_ms_per_pod / k.cpu_ms_per_pod.max(1e-9);
                lines.push(format!(
                    "{}: berth with {} reservations / berth on {} = {rate:.2}x pods/s, {cpu:.2}x CPU per pod",
                    case.name, case.reservations, base.name,
                ));
            }
        }
    }
    lines
}

/// Each scheduler on a flood case against its own run without the flood: the slowdown the
/// unschedulable pods' retries (their events) cost the binds.
fn flood_ratios(all: &[Summary<'_>], case: &Case) -> Vec<String> {
    let base = case.baseline();
    let find = |name: &str, which: Which| {
        all.iter()
            .find(|s| s.runs[0].case.name == name && s.runs[0].which == which)
    };
    [Which::KubeScheduler, Which::Berth]
        .into_iter()
        .filter_map(|w| {
            let (f, b) = (find(&case.name, w)?, find(&base.name, w)?);
            let rate = f.pods_per_sec / b.pods_per_sec.max(1e-9);
            let slowdown = (1.0 - rate) * 100.0;
            Some(format!(
                "{}: {} with {} unschedulable pods / on {} = {rate:.2}x pods/s (slowdown {slowdown:.1}%: {})",
                case.name,
                w.name(),
                case.unschedulable,
                base.name,
                if slowdown <= 10.0 { "at most 10%: met" } else { "over 10%: NOT met" },
            ))
        })
        .collect()
}

/// Every (case, scheduler) as a Markdown table row, medians over the runs (for the README).
pub fn markdown(outcomes: &[Outcome]) -> String {
    let mut s = String::from(
        "| case | scheduler | pods | pods/s | per-second avg / p50 / p90 / p99 | CPU s (measured / total) | CPU ms per pod | peak RSS | apiserver CPU s |\n\
         |---|---|---|---|---|---|---|---|---|\n",
    );
    for sum in summaries(outcomes) {
        let o = sum.runs[0];
        let runs = if sum.runs.len() > 1 {
            let each: Vec<String> = sum
                .runs
                .iter()
                .map(|r| format!("{:.0}", r.measured.pods_per_sec()))
                .collect();
            format!(" (runs: {})", each.join(", "))
        } else {
            String::new()
        };
        let [avg, p50, p90, p99] = sum.per_second;
        let _ = writeln!(
            s,
            "| {} | {} | {} | {:.0}{runs} | {avg:.0} / {p50:.0} / {p90:.0} / {p99:.0} | {:.2} / {:.2} | {:.2} | {:.0} MiB | {} |",
            o.case.name,
            o.which.name(),
            o.measured.pods,
            sum.pods_per_sec,
            sum.cpu_secs,
            sum.cpu_total_secs,
            sum.cpu_ms_per_pod,
            sum.peak_rss_mib,
            sum.apiserver_secs.map_or_else(|| "?".into(), |v| format!("{v:.1}")),
        );
    }
    s
}
