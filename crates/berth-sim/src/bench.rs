//! `berth bench`: scheduling throughput on generated clusters.
//!
//! Each case builds a fresh scheduler, adds the nodes and the pending pods, then schedules
//! one cycle at a time, timing each cycle; binds are confirmed back to the core as the API
//! server would (outside the timed cycle). The figures are comparable with
//! kube-scheduler's `scheduler_perf` workloads, whose names and shapes
//! [`crate::bench_workloads`] copies: kube-scheduler's CI floor for SchedulingBasic at
//! 5000 nodes / 10000 pods is 680 pods/s.

use std::sync::Arc;
use std::time::{Duration, Instant};

use berth_api::annotations::ANNOTATION_RESERVATION_ALLOCATED;
use berth_core::framework::config::ProfileConfig;
use berth_core::reservation::testkit::available_reservations;
use berth_core::time::Time;
use berth_core::{fixtures, Config, Effect, Event, Object, Profile, Scheduler};

use crate::bench_workloads::{InitMode, Workload, WORKLOADS};

/// One benchmark case.
#[derive(Debug, Clone)]
pub struct Case {
    /// Name printed in the report.
    pub name: String,
    /// The pods' shape.
    pub workload: Workload,
    /// Nodes generated.
    pub nodes: usize,
    /// Measured pods (scheduled after the workload's init pods).
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
    /// Measured cycles.
    pub cycles: u64,
    /// Time in scheduling cycles.
    pub cycle_time: Duration,
    /// Wall time including bind confirmations.
    pub wall: Duration,
    /// Median cycle.
    pub p50: Duration,
    /// 99th percentile cycle.
    pub p99: Duration,
    /// Nodes run through Filter in the measured cycles.
    pub nodes_filtered: u64,
    /// Pods that allocated from a reservation.
    pub allocated_from_reservations: u64,
}

impl Report {
    /// Pods per second counting only scheduling cycles.
    pub fn pods_per_sec(&self) -> f64 {
        self.scheduled as f64 / self.cycle_time.as_secs_f64().max(1e-9)
    }

    /// Nodes run through Filter per cycle, on average.
    pub fn nodes_filtered_per_cycle(&self) -> f64 {
        self.nodes_filtered as f64 / self.cycles.max(1) as f64
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

/// Simulated time a case may wait for back-off (preemptors waiting on their victims)
/// before it stops: a workload whose measured pods cannot all be placed ends there.
const MAX_WAIT: Time = 60 * berth_core::time::MINUTE;

/// One measured scheduling cycle. Kept out of line so `--instructions` can count exactly
/// these cycles with callgrind's `--toggle-collect` (untimed set-up cycles, such as
/// [`Workload::Unschedulable`]'s init pods, run [`Scheduler::schedule_next`] directly).
#[inline(never)]
pub fn measured_cycle(s: &mut Scheduler, now: Time) -> bool {
    s.schedule_next(now)
}

/// Runs one case.
pub fn run_case(case: &Case) -> Report {
    let mut s = prepare(case);
    run_prepared(case, &mut s)
}

/// Builds `case`'s cluster (nodes, reservations, init pods) and queues its measured pods,
/// untimed: criterion benchmarks time [`run_prepared`] alone.
pub fn prepare(case: &Case) -> Scheduler {
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
    let (init, mode) = case.workload.init(case.nodes);
    for o in case.workload.dra_objects(&names, init, case.pods) {
        s.handle(0, Event::Applied(o));
    }
    for o in case.workload.gang_objects(case.pods) {
        s.handle(0, Event::Applied(o));
    }
    for i in 0..init {
        let mut p = case.workload.init_pod(i);
        if mode == InitMode::Bound {
            if let Some(node) = names.get(i % names.len().max(1)) {
                Arc::make_mut(&mut p)
                    .spec
                    .get_or_insert_with(Default::default)
                    .node_name = Some(node.clone());
            }
        }
        s.handle(0, Event::Applied(Object::Pod(p)));
    }
    drain(&mut s);
    // Pending init pods are tried once, untimed, so they wait in the unschedulable pool.
    while s.schedule_next(0) {
        confirm_effects(&mut s, 0);
    }
    let pods: Vec<_> = if case.reservations == 0 {
        (0..case.pods)
            .map(|i| case.workload.measured_pod(i))
            .collect()
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
    s
}

/// Schedules `case`'s measured pods on the scheduler [`prepare`] built, timing each cycle.
pub fn run_prepared(case: &Case, s: &mut Scheduler) -> Report {
    let mut cycles = Vec::with_capacity(case.pods);
    let filtered0 = s.stats().nodes_filtered;
    let scheduled0 = s.stats().scheduled;
    let unschedulable0 = s.stats().unschedulable;
    let wall = Instant::now();
    let mut allocated = 0;
    let mut now: Time = 0;
    loop {
        let t = Instant::now();
        if measured_cycle(s, now) {
            cycles.push(t.elapsed());
            allocated += confirm_effects(s, now);
            continue;
        }
        // Nothing active: measured pods still pending wait for their back-off (a
        // preemptor whose victims are gone); anything else is done.
        if s.stats().scheduled - scheduled0 >= case.pods as u64 {
            break;
        }
        match s.poll_timeout() {
            Some(t) if t > now && t <= MAX_WAIT => {
                now = t;
                s.handle_timeout(now);
            }
            _ => break,
        }
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
        scheduled: s.stats().scheduled - scheduled0,
        unschedulable: s.stats().unschedulable - unschedulable0,
        cycles: cycles.len() as u64,
        cycle_time,
        wall,
        p50: pct(0.50),
        p99: pct(0.99),
        nodes_filtered: s.stats().nodes_filtered - filtered0,
        allocated_from_reservations: allocated,
    }
}

fn drain(s: &mut Scheduler) {
    while s.poll_effect().is_some() {}
}

/// Plays the API server for bind and delete effects (a preemption's victims); returns how
/// many binds allocated from a reservation.
fn confirm_effects(s: &mut Scheduler, now: Time) -> u64 {
    let mut allocated = 0;
    while let Some(e) = s.poll_effect() {
        match e {
            Effect::Bind {
                pod,
                node,
                annotations,
                ..
            } => {
                let Some(entry) = s.pod(&pod) else {
                    continue;
                };
                let mut p = (*entry.info.pod).clone();
                if !annotations.is_empty() {
                    allocated +=
                        u64::from(annotations.contains_key(ANNOTATION_RESERVATION_ALLOCATED));
                    p.metadata
                        .annotations
                        .get_or_insert_with(Default::default)
                        .extend(annotations);
                }
                p.spec.get_or_insert_with(Default::default).node_name = Some(node);
                s.handle(now, Event::Applied(Object::Pod(Arc::new(p))));
            }
            Effect::Delete { key, .. } => s.handle(now, Event::Deleted(key)),
            // DynamicResources' PreBind: the claim's status as the API server stores it.
            Effect::UpdateClaimStatus { claim, .. } => {
                s.handle(now, Event::Applied(Object::ResourceClaim(claim)));
            }
            _ => {}
        }
    }
    allocated
}

/// The SchedulingBasic cases: the default profile, and NodeResourcesFit alone (the floor
/// of what a cycle costs).
pub fn default_cases(nodes: usize, pods: usize) -> Vec<Case> {
    let case = |name: &str, fit_only| Case {
        name: format!("SchedulingBasic/{nodes}Nodes_{pods}Pods/{name}"),
        workload: Workload::SchedulingBasic,
        nodes,
        pods,
        fit_only,
        reservations: 0,
    };
    vec![case("default-profile", false), case("fit-only", true)]
}

/// The case of one of the other scheduler_perf workloads.
pub fn workload_case(workload: Workload, nodes: usize, pods: usize) -> Case {
    let (init, _) = workload.init(nodes);
    Case {
        name: format!("{}/{nodes}Nodes_{init}InitPods_{pods}Pods", workload.name()),
        workload,
        nodes,
        pods,
        fit_only: false,
        reservations: 0,
    }
}

/// The reservation cases: the same cluster with 0, 1,000 and 10,000 Available reservations
/// and half the pods owners.
pub fn reservation_cases(nodes: usize, pods: usize) -> Vec<Case> {
    [0usize, 1_000, 10_000]
        .into_iter()
        .map(|r| Case {
            name: format!("Reservations/{nodes}Nodes_{pods}Pods_{r}Reservations/half-owners"),
            workload: Workload::SchedulingBasic,
            nodes,
            pods,
            fit_only: false,
            reservations: r,
        })
        .collect()
}

/// Formats a report line; `instructions` (callgrind's count over the measured cycles, when
/// asked for) adds instructions per pod bound and per node filtered.
pub fn format_report(r: &Report, instructions: Option<u64>) -> String {
    let mut line = format!(
        "{:<70} {:>6} pods ({:>5} from reservations)  {:>7.0} pods/s (cycles)  {:>7.0} pods/s (with binds)  p50 {:>7.1}us  p99 {:>7.1}us  {:>5.0} nodes filtered/cycle",
        r.case.name,
        r.scheduled,
        r.allocated_from_reservations,
        r.pods_per_sec(),
        r.pods_per_sec_wall(),
        r.p50.as_secs_f64() * 1e6,
        r.p99.as_secs_f64() * 1e6,
        r.nodes_filtered_per_cycle(),
    );
    if let Some(ir) = instructions {
        line.push_str(&format!(
            "  {:>9.0} instructions/pod  {:>6.0} instructions/node filtered",
            ir as f64 / r.scheduled.max(1) as f64,
            ir as f64 / r.nodes_filtered.max(1) as f64,
        ));
    }
    line
}

/// The names `berth bench --suite` takes: scheduler_perf's workload names, `Reservations`
/// and `NUMA`, `all` (every one of them), and the older lowercase names (`basic` is
/// SchedulingBasic, `reservations` and `numa` as before).
pub const SUITES: [&str; 16] = [
    "SchedulingBasic",
    "TopologySpreading",
    "PreferredTopologySpreading",
    "PodAffinity",
    "PodAntiAffinity",
    "NodeAffinity",
    "Unschedulable",
    "Preemption",
    "Reservations",
    "NUMA",
    "all",
    "basic",
    "reservations",
    "numa",
    "SchedulingWithResourceClaimTemplate",
    "GangScheduling",
];

/// `berth bench --suite` named no suite: bad input, as for `simulate` (exit status 2).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown bench suite {0:?}; want one of {list}", list = SUITES.join(", "))]
pub struct UnknownSuite(pub String);

/// One runnable part of a suite.
#[derive(Debug, Clone)]
pub enum Part {
    /// An in-process case.
    Case(Case),
    /// The NUMA burst suite ([`crate::bench_numa`]).
    Numa(crate::bench_numa::Params),
}

/// The default number of nodes of the in-process cases (`--nodes`).
pub const DEFAULT_NODES: usize = 5_000;

/// The parts of a named suite (one of [`SUITES`]); `nodes` overrides the cluster size
/// ([`DEFAULT_NODES`]; the NUMA suite's own 1,000) and `pods` each workload's default number
/// of measured pods (the NUMA suite's 20,000).
pub fn suite_parts(
    suite: &str,
    nodes: Option<usize>,
    pods: Option<usize>,
) -> Result<Vec<Part>, UnknownSuite> {
    let numa = crate::bench_numa::Params::default().sized(nodes, pods);
    let nodes = nodes.unwrap_or(DEFAULT_NODES);
    let mut parts = Vec::new();
    let all = suite == "all";
    for w in WORKLOADS {
        let named = suite == w.name() || (suite == "basic" && w == Workload::SchedulingBasic);
        if !(all || named) {
            continue;
        }
        let p = pods.unwrap_or(w.default_pods());
        if w == Workload::SchedulingBasic {
            parts.extend(default_cases(nodes, p).into_iter().map(Part::Case));
        } else {
            parts.push(Part::Case(workload_case(w, nodes, p)));
        }
    }
    if all || suite == "Reservations" || suite == "reservations" {
        let p = pods.unwrap_or(Workload::SchedulingBasic.default_pods());
        parts.extend(reservation_cases(nodes, p).into_iter().map(Part::Case));
    }
    if all || suite == "NUMA" || suite == "numa" {
        parts.push(Part::Numa(numa));
    }
    if parts.is_empty() {
        return Err(UnknownSuite(suite.to_string()));
    }
    Ok(parts)
}

/// Runs one part; `instructions` counts its measured cycles' instructions under callgrind
/// first (see [`crate::bench_callgrind`]). Returns its report lines.
pub fn run_part(part: &Part, instructions: bool) -> Vec<String> {
    match part {
        Part::Case(case) => {
            let report = run_case(case);
            let ir = if instructions {
                crate::bench_callgrind::count(&case.name, case.nodes, case.pods)
            } else {
                None
            };
            vec![format_report(&report, ir)]
        }
        Part::Numa(p) => {
            let mut lines: Vec<String> = crate::bench_numa::run_with(p)
                .lines()
                .map(str::to_string)
                .collect();
            if instructions {
                lines.extend(crate::bench_numa::instructions_lines(p));
            }
            lines
        }
    }
}

/// Runs a named suite (one of [`SUITES`]) and returns one report line per case.
pub fn run_suite(
    suite: &str,
    nodes: Option<usize>,
    pods: Option<usize>,
    instructions: bool,
) -> Result<Vec<String>, UnknownSuite> {
    Ok(suite_parts(suite, nodes, pods)?
        .iter()
        .flat_map(|p| run_part(p, instructions))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unknown_suite_is_an_error_before_anything_runs() {
        assert_eq!(
            run_suite("bogus", Some(1), Some(1), false),
            Err(UnknownSuite("bogus".into()))
        );
    }

    #[test]
    fn every_suite_name_has_parts_and_all_has_every_workload() {
        for suite in SUITES {
            assert!(suite_parts(suite, Some(10), Some(1)).is_ok(), "{suite}");
        }
        let all = suite_parts("all", Some(10), Some(1)).unwrap_or_default();
        for w in WORKLOADS {
            assert!(
                all.iter()
                    .any(|p| matches!(p, Part::Case(c) if c.workload == w)),
                "{w:?}"
            );
        }
        assert!(all.iter().any(|p| matches!(p, Part::Numa(_))));
        let numa = suite_parts("NUMA", Some(30), Some(500)).unwrap_or_default();
        assert!(
            matches!(&numa[..], [Part::Numa(p)] if p.nodes == 30 && p.pods == 500 && p.burst == 500),
            "{numa:?}"
        );
    }

    /// Every workload places its measured pods on a small cluster: a shape that places
    /// nothing would measure only failures.
    #[test]
    fn every_workload_binds_its_measured_pods() {
        for w in WORKLOADS {
            let r = run_case(&workload_case(w, 40, 20));
            assert_eq!(r.scheduled, 20, "{w:?}: {r:?}");
            assert!(r.cycles >= 20, "{w:?}: {r:?}");
            assert!(r.nodes_filtered > 0, "{w:?}: {r:?}");
        }
    }

    #[test]
    fn preemption_evicts_to_place_the_measured_pods() {
        let r = run_case(&workload_case(Workload::Preemption, 40, 10));
        assert_eq!(r.scheduled, 10, "{r:?}");
        // Each high-priority pod fails once (preempting), then binds.
        assert!(r.unschedulable >= 10, "{r:?}");
    }

    #[test]
    fn the_dra_workload_gives_every_pod_its_own_device_until_none_is_left() {
        // 4 nodes, 40 devices: 20 init pods take half (untimed), 25 measured pods find 20.
        let case = workload_case(Workload::SchedulingWithResourceClaimTemplate, 4, 25);
        let mut s = prepare(&case);
        let r = run_prepared(&case, &mut s);
        assert_eq!(r.scheduled, 20, "{r:?}");
        assert_eq!(r.unschedulable, 5, "{r:?}");
        let mut devices = std::collections::BTreeSet::new();
        let mut allocated = 0;
        for c in s.dra().claims.values() {
            for d in c.allocation().iter().flat_map(|a| &a.devices.results) {
                assert!(
                    devices.insert((d.pool.clone(), d.device.clone())),
                    "{d:?} twice"
                );
                allocated += 1;
            }
        }
        assert_eq!(
            allocated, 40,
            "every device allocated once, through the claims' status"
        );
    }

    #[test]
    fn unschedulable_init_pods_stay_pending_and_untimed() {
        let r = run_case(&workload_case(Workload::Unschedulable, 40, 20));
        assert_eq!(r.scheduled, 20, "{r:?}");
        assert_eq!(r.unschedulable, 0, "{r:?}");
    }
}
