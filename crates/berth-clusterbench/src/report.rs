//! The report: one line per run, then the ratios, then a Markdown table.

use std::fmt::Write;

use crate::run::Outcome;
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
    let mut s = format!(
        "{:<13} {:<14} {:>5} pods in {:>7}: {:>7.1} pods/s | per-second avg {:.1} p50 {:.1} p90 {:.1} p99 {:.1} | \
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
    s
}

/// The setup times of a run (for the detail log), and berth's API requests in the
/// measured phase.
pub fn setup_line(o: &Outcome) -> String {
    let mut s = format!(
        "{:<13} {:<14} setup: cluster {}, {} nodes {}, {} reservations {}, {} init pods {}; created the measured pods in {}; {} nodes used; log {}",
        o.case.name,
        o.which.name(),
        secs(o.setup.cluster),
        o.case.nodes,
        secs(o.setup.nodes),
        o.case.reservations,
        secs(o.setup.reservations),
        o.case.init_pods,
        secs(o.setup.init),
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

/// berth against kube-scheduler on each case both ran, and each reservation case against
/// berth's own run of the same size without reservations.
pub fn ratios(outcomes: &[Outcome]) -> Vec<String> {
    let find = |name: &str, which: Which| {
        outcomes
            .iter()
            .find(|o| o.case.name == name && o.which == which)
    };
    let mut lines = Vec::new();
    for o in outcomes.iter().filter(|o| o.which == Which::Berth) {
        if o.case.reservations == 0 {
            if let Some(k) = find(&o.case.name, Which::KubeScheduler) {
                let rate = o.measured.pods_per_sec() / k.measured.pods_per_sec().max(1e-9);
                let cpu = o.measured.cpu_ms_per_pod() / k.measured.cpu_ms_per_pod().max(1e-9);
                let rss = o.measured.after.scheduler.peak_rss_kib as f64
                    / (k.measured.after.scheduler.peak_rss_kib as f64).max(1.0);
                lines.push(format!(
                    "{}: berth / kube-scheduler = {rate:.2}x pods/s ({}), {cpu:.2}x CPU per pod ({}), {rss:.2}x peak RSS",
                    o.case.name,
                    if rate >= 2.0 { "at least 2x: met" } else { "below 2x: NOT met" },
                    if cpu < 1.0 { "less: met" } else { "not less: NOT met" },
                ));
            }
        } else {
            let base = o.case.baseline();
            if let Some(b) = find(&base.name, Which::Berth) {
                let rate = o.measured.pods_per_sec() / b.measured.pods_per_sec().max(1e-9);
                let cpu = o.measured.cpu_ms_per_pod() / b.measured.cpu_ms_per_pod().max(1e-9);
                lines.push(format!(
                    "{}: berth with {} reservations / berth on {} = {rate:.2}x pods/s, {cpu:.2}x CPU per pod",
                    o.case.name, o.case.reservations, base.name,
                ));
            }
        }
    }
    lines
}

/// Every run as a Markdown table (for the README).
pub fn markdown(outcomes: &[Outcome]) -> String {
    let mut s = String::from(
        "| case | scheduler | pods | pods/s | per-second avg / p50 / p90 / p99 | CPU (measured / total) | CPU ms per pod | peak RSS | apiserver CPU |\n\
         |---|---|---|---|---|---|---|---|---|\n",
    );
    for o in outcomes {
        let m = &o.measured;
        let t = &m.throughput;
        let _ = writeln!(
            s,
            "| {} | {} | {} | {:.0} | {:.0} / {:.0} / {:.0} / {:.0} | {:.2} s / {:.2} s | {:.2} | {:.0} MiB | {} |",
            o.case.name,
            o.which.name(),
            m.pods,
            m.pods_per_sec(),
            t.avg,
            t.p50,
            t.p90,
            t.p99,
            m.scheduler_cpu().as_secs_f64(),
            m.after.scheduler.cpu.as_secs_f64(),
            m.cpu_ms_per_pod(),
            m.after.scheduler.peak_rss_kib as f64 / 1024.0,
            opt_secs(m.apiserver_cpu()),
        );
    }
    s
}
