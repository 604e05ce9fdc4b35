//! `berth bench`: scheduling throughput on generated clusters.
//!
//! Each case builds a fresh scheduler, adds the nodes and the pending pods, then schedules
//! one cycle at a time, timing each cycle; binds are confirmed back to the core as the API
//! server would (outside the timed cycle). The figures are comparable with
//! kube-scheduler's `scheduler_perf` SchedulingBasic workloads, whose shapes the fixtures
//! copy: kube-scheduler's CI floor for 5000 nodes / 10000 pods is 680 pods/s.

use std::sync::Arc;
use std::time::{Duration, Instant};

use berth_core::framework::config::ProfileConfig;
use berth_core::{fixtures, Config, Effect, Event, Object, Profile, Scheduler};

/// One benchmark case.
#[derive(Debug, Clone)]
pub struct Case {
    /// Name printed in the report.
    pub name: String,
    /// Nodes generated.
    pub nodes: usize,
    /// Pods scheduled.
    pub pods: usize,
    /// Only NodeResourcesFit enabled (the floor of what a cycle costs).
    pub fit_only: bool,
}

/// What a case measured.
#[derive(Debug, Clone)]
pub struct Report {
    /// The case.
    pub case: Case,
    /// Pods bound.
    pub scheduled: u64,
    /// Cycles that found no node.
    pub unschedulable: u64,
    /// Time in scheduling cycles.
    pub cycle_time: Duration,
    /// Wall time including bind confirmations.
    pub wall: Duration,
    /// Median cycle.
    pub p50: Duration,
    /// 99th percentile cycle.
    pub p99: Duration,
    /// Nodes run through Filter per cycle, on average.
    pub nodes_filtered_per_cycle: f64,
}

impl Report {
    /// Pods per second counting only scheduling cycles.
    pub fn pods_per_sec(&self) -> f64 {
        self.scheduled as f64 / self.cycle_time.as_secs_f64().max(1e-9)
    }

    /// Pods per second counting bind confirmations too.
    pub fn pods_per_sec_wall(&self) -> f64 {
        self.scheduled as f64 / self.wall.as_secs_f64().max(1e-9)
    }
}

/// The profile with only NodeResourcesFit.
pub fn fit_only_profile() -> Profile {
    let pc: ProfileConfig = serde_json::from_value(serde_json::json!({
        "plugins": {"multiPoint": {"disabled": [{"name": "*"}], "enabled": [{"name": "NodeResourcesFit"}]}}
    }))
    .unwrap_or_default();
    match Profile::from_config(&pc) {
        Ok(p) => p,
        Err(_) => Profile::default_profile(),
    }
}

/// Runs one case.
pub fn run_case(case: &Case) -> Report {
    let profile = if case.fit_only {
        fit_only_profile()
    } else {
        Profile::default_profile()
    };
    let mut s = Scheduler::new(vec![profile], Config { seed: 1 });
    for n in fixtures::nodes(case.nodes) {
        s.handle(0, Event::Applied(Object::Node(n)));
    }
    let pods = fixtures::pods("bench", case.pods);
    for p in &pods {
        s.handle(0, Event::Applied(Object::Pod(p.clone())));
    }
    drain(&mut s);
    let mut cycles = Vec::with_capacity(case.pods);
    let filtered0 = s.counters.nodes_filtered;
    let wall = Instant::now();
    loop {
        let t = Instant::now();
        if !s.schedule_next(0) {
            break;
        }
        cycles.push(t.elapsed());
        confirm_binds(&mut s);
    }
    let wall = wall.elapsed();
    let cycle_time = cycles.iter().sum();
    cycles.sort_unstable();
    let pct = |q: f64| {
        cycles
            .get(((cycles.len() as f64 * q) as usize).min(cycles.len().saturating_sub(1)))
            .copied()
            .unwrap_or_default()
    };
    Report {
        case: case.clone(),
        scheduled: s.counters.scheduled,
        unschedulable: s.counters.unschedulable,
        cycle_time,
        wall,
        p50: pct(0.50),
        p99: pct(0.99),
        nodes_filtered_per_cycle: (s.counters.nodes_filtered - filtered0) as f64
            / cycles.len().max(1) as f64,
    }
}

fn drain(s: &mut Scheduler) {
    while s.poll_effect().is_some() {}
}

/// Plays the API server for bind effects.
fn confirm_binds(s: &mut Scheduler) {
    while let Some(e) = s.poll_effect() {
        if let Effect::Bind { pod, node, .. } = e {
            let Some(entry) = s.cluster.pod(&pod) else {
                continue;
            };
            let mut p = (*entry.info.pod).clone();
            p.spec.get_or_insert_with(Default::default).node_name = Some(node);
            s.handle(0, Event::Applied(Object::Pod(Arc::new(p))));
        }
    }
}

/// The standard cases.
pub fn default_cases(nodes: usize, pods: usize) -> Vec<Case> {
    vec![
        Case {
            name: format!("SchedulingBasic/{nodes}Nodes_{pods}Pods/default-profile"),
            nodes,
            pods,
            fit_only: false,
        },
        Case {
            name: format!("SchedulingBasic/{nodes}Nodes_{pods}Pods/fit-only"),
            nodes,
            pods,
            fit_only: true,
        },
    ]
}

/// Formats a report line.
pub fn format_report(r: &Report) -> String {
    format!(
        "{:<55} {:>6} pods  {:>9.0} pods/s (cycles)  {:>9.0} pods/s (with binds)  p50 {:>8.1}us  p99 {:>8.1}us  {:>6.0} nodes filtered/cycle",
        r.case.name,
        r.scheduled,
        r.pods_per_sec(),
        r.pods_per_sec_wall(),
        r.p50.as_secs_f64() * 1e6,
        r.p99.as_secs_f64() * 1e6,
        r.nodes_filtered_per_cycle,
    )
}

/// Runs a named suite and returns one report line per case, printed as each finishes.
pub fn run_suite(suite: &str, nodes: usize, pods: usize) -> Result<Vec<String>, String> {
    let (basic, numa) = match suite {
        "basic" => (true, false),
        "numa" => (false, true),
        "all" => (true, true),
        other => {
            return Err(format!(
                "unknown bench suite {other:?}; want basic, numa or all"
            ))
        }
    };
    let mut lines = Vec::new();
    if basic {
        for case in &default_cases(nodes, pods) {
            lines.push(format_report(&run_case(case)));
        }
    }
    if numa {
        lines.extend(crate::bench_numa::run().lines().map(str::to_string));
    }
    Ok(lines)
}
