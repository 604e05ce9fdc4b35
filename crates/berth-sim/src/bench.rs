//! `berth bench`: scheduling throughput on generated clusters.
//!
//! Each case builds a fresh scheduler, adds the nodes and the pending pods, then schedules
//! one cycle at a time, timing each cycle; binds are confirmed back to the core as the API
//! server would (outside the timed cycle). The figures are comparable with
//! kube-scheduler's `scheduler_perf` SchedulingBasic workloads, whose shapes the fixtures
//! copy: kube-scheduler's CI floor for 5000 nodes / 10000 pods is 680 pods/s.

use std::sync::Arc;
use std::time::{Duration, Instant};

use berth_api::annotations::ANNOTATION_RESERVATION_ALLOCATED;
use berth_core::framework::config::ProfileConfig;
use berth_core::reservation::testkit::available_reservations;
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
    /// Available reservations spread over the nodes (100m / 100Mi each, reusable); every
    /// other pod is an owner of ten of them.
    pub reservations: usize,
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
    /// Pods that allocated from a reservation.
    pub allocated_from_reservations: u64,
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
    let mut s = Scheduler::new(
        vec![profile],
        Config {
            seed: 1,
            ..Config::default()
        },
    );
    let nodes = fixtures::nodes(case.nodes);
    let names: Vec<String> = nodes
        .iter()
        .filter_map(|n| n.metadata.name.clone())
        .collect();
    for n in nodes {
        s.handle(0, Event::Applied(Object::Node(n)));
    }
    let groups = (case.reservations / 10).max(1);
    for r in available_reservations(&names, case.reservations, groups) {
        s.handle(0, Event::Applied(Object::Reservation(r)));
    }
    let pods: Vec<_> = if case.reservations == 0 {
        fixtures::pods("bench", case.pods)
    } else {
        // Every other pod is an owner (`app=g<k>` matches ten reservations).
        (0..case.pods)
            .map(|i| {
                let labels = if i % 2 == 0 {
                    serde_json::json!({"app": format!("g{}", (i / 2) % groups)})
                } else {
                    serde_json::json!({})
                };
                fixtures::pod("bench", i, labels)
            })
            .collect()
    };
    for p in &pods {
        s.handle(0, Event::Applied(Object::Pod(p.clone())));
    }
    drain(&mut s);
    let mut cycles = Vec::with_capacity(case.pods);
    let filtered0 = s.counters.nodes_filtered;
    let wall = Instant::now();
    let mut allocated = 0;
    loop {
        let t = Instant::now();
        if !s.schedule_next(0) {
            break;
        }
        cycles.push(t.elapsed());
        allocated += confirm_binds(&mut s);
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
        allocated_from_reservations: allocated,
    }
}

fn drain(s: &mut Scheduler) {
    while s.poll_effect().is_some() {}
}

/// Plays the API server for bind effects; returns how many binds allocated from a
/// reservation.
fn confirm_binds(s: &mut Scheduler) -> u64 {
    let mut allocated = 0;
    while let Some(e) = s.poll_effect() {
        if let Effect::Bind {
            pod,
            node,
            annotations,
            ..
        } = e
        {
            let Some(entry) = s.cluster.pod(&pod) else {
                continue;
            };
            let mut p = (*entry.info.pod).clone();
            if !annotations.is_empty() {
                allocated += u64::from(annotations.contains_key(ANNOTATION_RESERVATION_ALLOCATED));
                p.metadata
                    .annotations
                    .get_or_insert_with(Default::default)
                    .extend(annotations);
            }
            p.spec.get_or_insert_with(Default::default).node_name = Some(node);
            s.handle(0, Event::Applied(Object::Pod(Arc::new(p))));
        }
    }
    allocated
}

/// The standard cases.
pub fn default_cases(nodes: usize, pods: usize) -> Vec<Case> {
    let case = |name: &str, fit_only| Case {
        name: format!("SchedulingBasic/{nodes}Nodes_{pods}Pods/{name}"),
        nodes,
        pods,
        fit_only,
        reservations: 0,
    };
    vec![case("default-profile", false), case("fit-only", true)]
}

/// The reservation cases: the same cluster with 0, 1,000 and 10,000 Available reservations
/// and half the pods owners.
pub fn reservation_cases(nodes: usize, pods: usize) -> Vec<Case> {
    [0usize, 1_000, 10_000]
        .into_iter()
        .map(|r| Case {
            name: format!("Reservations/{nodes}Nodes_{pods}Pods_{r}Reservations/half-owners"),
            nodes,
            pods,
            fit_only: false,
            reservations: r,
        })
        .collect()
}

/// Formats a report line.
pub fn format_report(r: &Report) -> String {
    format!(
        "{:<70} {:>6} pods ({:>5} from reservations)  {:>7.0} pods/s (cycles)  {:>7.0} pods/s (with binds)  p50 {:>7.1}us  p99 {:>7.1}us  {:>5.0} nodes filtered/cycle",
        r.case.name,
        r.scheduled,
        r.allocated_from_reservations,
        r.pods_per_sec(),
        r.pods_per_sec_wall(),
        r.p50.as_secs_f64() * 1e6,
        r.p99.as_secs_f64() * 1e6,
        r.nodes_filtered_per_cycle,
    )
}

/// The names `berth bench --suite` takes.
pub const SUITES: [&str; 4] = ["basic", "reservations", "numa", "all"];

/// `berth bench --suite` named no suite: bad input, as for `simulate` (exit status 2).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown bench suite {0:?}; want basic, reservations, numa or all")]
pub struct UnknownSuite(pub String);

/// Runs a named suite (one of [`SUITES`]) and returns one report line per case.
pub fn run_suite(suite: &str, nodes: usize, pods: usize) -> Result<Vec<String>, UnknownSuite> {
    let (basic, reservations, numa) = match suite {
        "basic" => (true, false, false),
        "reservations" => (false, true, false),
        "numa" => (false, false, true),
        "all" => (true, true, true),
        other => return Err(UnknownSuite(other.to_string())),
    };
    let mut lines = Vec::new();
    if basic {
        for case in &default_cases(nodes, pods) {
            lines.push(format_report(&run_case(case)));
        }
    }
    if reservations {
        for case in &reservation_cases(nodes, pods) {
            lines.push(format_report(&run_case(case)));
        }
    }
    if numa {
        lines.extend(crate::bench_numa::run().lines().map(str::to_string));
    }
    Ok(lines)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unknown_suite_is_an_error_before_anything_runs() {
        assert_eq!(run_suite("bogus", 1, 1), Err(UnknownSuite("bogus".into())));
    }
}
