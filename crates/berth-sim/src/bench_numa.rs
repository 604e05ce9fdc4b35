//! `berth bench` NUMA case: bursts of Guaranteed pods on single-numa-node nodes whose NRT
//! objects are republished only every `nrtUpdatePeriod`, with and without the reserve cache.
//!
//! A compact driver around the core, the simulated kubelet ([`crate::numa_agent::admit`])
//! and topology updater ([`crate::numa_agent::republish`]), the same code `berth simulate`
//! runs, so the TopologyAffinityError count is what the simulator would show; only the
//! scheduling cycles ([`Scheduler::run_until_idle`]) are timed. Rejected pods are not
//! recreated (no controller), so each one is a pod lost.
//!
//! Reported per mode: pods bound, TopologyAffinityErrors, pods still pending, pods/s over
//! the scheduling cycles, and NRT reads per pod bound: the live `GET`s the reference plugin
//! would issue for the same work (one per Filter and Score lookup without the cache, one per
//! resync attempt with it), next to the NRT objects the scheduler received from the watch.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use berth_api::k8s_openapi::api::core::v1::{Pod, PodStatus};
use berth_api::nrt::NodeResourceTopology;
use berth_core::framework::config::ProfileConfig;
use berth_core::plugins::numatopology::NumaMetrics;
use berth_core::time::{rfc3339, Time};
use berth_core::{Config, Effect, Event, Object, ObjectKey, Profile, Scheduler};
use serde_json::json;

use crate::numa_agent::{admit, republish, NumaAdmission, TOPOLOGY_AFFINITY_ERROR};

/// The shape of a run.
#[derive(Debug, Clone)]
pub struct Params {
    /// Nodes; node `i` has `2 + i % 7` NUMA zones (2-8).
    pub nodes: usize,
    /// CPUs per zone (memory: 32Gi per zone).
    pub cpus_per_zone: i64,
    /// Pods, all Guaranteed, CPUs cycling through `pod_cpus`.
    pub pods: usize,
    /// Pod sizes in whole CPUs.
    pub pod_cpus: Vec<i64>,
    /// Pods per burst.
    pub burst: usize,
    /// Time between bursts.
    pub burst_interval: Time,
    /// `nrtUpdatePeriod` of the node agents.
    pub nrt_update_period: Time,
    /// Time simulated after the last burst.
    pub settle: Time,
    /// Every `lsr_every`-th pod (0: none) is labelled `koordinator.sh/qosClass: LSR`: the
    /// scheduler picks its exclusive CPUs (NodeNUMAResource) from the node's
    /// `node.koordinator.sh/cpu-topology` (each zone one socket of 2-thread cores), and the
    /// kubelet keeps them.
    pub lsr_every: usize,
}

impl Default for Params {
    /// The case: 1,000 nodes of 2-8 zones of 16 CPUs (80,000 CPUs), 20,000
    /// Guaranteed pods of 2-6 CPUs (80,000 CPUs: the cluster ends full, where stale data
    /// hurts) in bursts of 2,000 every 30s, NRTs republished every 60s.
    fn default() -> Self {
        Self {
            nodes: 1_000,
            cpus_per_zone: 16,
            pods: 20_000,
            pod_cpus: vec![2, 3, 4, 5, 6],
            burst: 2_000,
            burst_interval: 30_000,
            nrt_update_period: 60_000,
            settle: 180_000,
            lsr_every: 0,
        }
    }
}

impl Params {
    /// These parameters with `nodes` and `pods` overridden (`berth bench --nodes/--pods`);
    /// a burst is never larger than the whole run.
    pub fn sized(self, nodes: Option<usize>, pods: Option<usize>) -> Self {
        let pods = pods.unwrap_or(self.pods);
        Self {
            nodes: nodes.unwrap_or(self.nodes),
            pods,
            burst: self.burst.min(pods.max(1)),
            ..self
        }
    }
}

/// The name `berth bench --only-case` takes for the reserve-cache mode alone (what
/// `--instructions` counts).
pub const CACHE_CASE: &str = "NUMA/cache";

/// The name `berth bench --only-case` takes for the reserve-cache mode with one pod in four
/// `LSR` (the scheduler also picks their exclusive CPUs), which `--instructions` counts too.
pub const LSR_CASE: &str = "NUMA/cache-LSR";

/// The parameters of the `--only-case` named `name` ([`CACHE_CASE`], [`LSR_CASE`]) on top
/// of `p`, or `None` for another name.
pub fn case_params(p: &Params, name: &str) -> Option<Params> {
    match name {
        CACHE_CASE => Some(p.clone()),
        LSR_CASE => Some(with_lsr(p)),
        _ => None,
    }
}

/// `p` with one pod in four `LSR` (unless it has some already).
fn with_lsr(p: &Params) -> Params {
    Params {
        lsr_every: if p.lsr_every > 0 { p.lsr_every } else { 4 },
        ..p.clone()
    }
}

/// The function callgrind collects in for the NUMA suite (its demangled path).
pub const TOGGLE: &str = "berth_sim::bench_numa::measured_cycles";

/// The scheduling cycles run at `now`. Kept out of line so `--instructions` counts exactly
/// these (the simulated kubelet's admission and the NRT publisher are left out).
#[inline(never)]
pub fn measured_cycles(core: &mut Scheduler, now: Time) {
    core.run_until_idle(now);
}

/// `--instructions` for the NUMA suite: the reserve-cache mode runs again under callgrind
/// (`--only-case` [`CACHE_CASE`]), and again with one pod in four `LSR` ([`LSR_CASE`]),
/// counting their scheduling cycles; a line each gives instructions per cycle and per pod
/// bound (the runs are deterministic, so the counts of this process's runs apply).
pub fn instructions_lines(p: &Params) -> Vec<String> {
    [(CACHE_CASE, "cache"), (LSR_CASE, "cache, 1 in 4 LSR")]
        .into_iter()
        .map(|(case, label)| {
            let q = case_params(p, case).unwrap_or_else(|| p.clone());
            instructions_line(&q, case, label)
        })
        .collect()
}

fn instructions_line(p: &Params, case: &str, label: &str) -> String {
    let args: Vec<String> = [
        "bench",
        "--suite",
        "NUMA",
        "--nodes",
        &p.nodes.to_string(),
        "--pods",
        &p.pods.to_string(),
        "--only-case",
        case,
    ]
    .iter()
    .map(|a| a.to_string())
    .collect();
    match crate::bench_callgrind::count_in(TOGGLE, &args) {
        Some(ir) => {
            let o = run_mode(p, true);
            format!(
                "  {label}: {:>9.0} instructions/cycle  {:>9.0} instructions/pod bound ({} cycles, {} bound)",
                ir as f64 / o.cycles.max(1) as f64,
                ir as f64 / o.bound.max(1) as f64,
                o.cycles,
                o.bound
            )
        }
        None => format!("  {label}: no instruction count (valgrind missing or its run failed)"),
    }
}

/// What one mode measured.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// `true`: reserve cache (berth's default); `false`: passthrough.
    pub cache: bool,
    /// Pods the scheduler bound.
    pub bound: u64,
    /// Bound pods the kubelet rejected with TopologyAffinityError.
    pub topology_errors: u64,
    /// Pods never bound.
    pub pending: u64,
    /// Scheduling cycles run.
    pub cycles: u64,
    /// Retries answered without a cycle (nothing changed since the pod failed).
    pub replayed: u64,
    /// Why pods left the unschedulable pool: an event that may have helped, or the
    /// five-minute maximum wait.
    pub requeues: berth_core::queue::QueueStats,
    /// Time spent in scheduling cycles.
    pub cycle_time: Duration,
    /// Wall time of the whole run (driver, kubelet and publisher included).
    pub wall: Duration,
    /// The NUMA counters.
    pub metrics: NumaMetrics,
    /// Time from a pod's arrival to its bind, averaged over bound pods, virtual seconds.
    pub mean_wait_s: f64,
}

impl Outcome {
    /// Pods bound per second of scheduling cycles.
    pub fn pods_per_sec(&self) -> f64 {
        self.bound as f64 / self.cycle_time.as_secs_f64().max(1e-9)
    }

    /// NRT `GET`s the reference plugin would issue, per pod bound.
    pub fn api_reads_per_pod(&self) -> f64 {
        self.metrics.api_reads() as f64 / self.bound.max(1) as f64
    }

    /// NRT objects received from the watch, per pod bound.
    pub fn watched_per_pod(&self) -> f64 {
        self.metrics.nrt_updates as f64 / self.bound.max(1) as f64
    }
}

const START: Time = 1_704_067_200_000;

fn node_object(
    name: &str,
    zones: i64,
    cpus: i64,
) -> Arc<berth_api::k8s_openapi::api::core::v1::Node> {
    let v = json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "uid": format!("uid-{name}"), "labels": {"kubernetes.io/hostname": name}},
        "status": {"allocatable": {
            "cpu": (zones * cpus).to_string(),
            "memory": format!("{}Gi", zones * 32),
            "pods": "110"}},
    });
    Arc::new(serde_json::from_value(v).unwrap_or_default())
}

fn nrt_object(name: &str, zones: i64, cpus: i64) -> NodeResourceTopology {
    let zone = |i: i64| {
        let costs: Vec<_> = (0..zones)
            .map(|j| json!({"name": format!("node-{j}"), "value": if i == j { 10 } else { 21 }}))
            .collect();
        json!({"name": format!("node-{i}"), "type": "Node", "costs": costs, "resources": [
            {"name": "cpu", "capacity": cpus, "allocatable": cpus, "available": cpus},
            {"name": "memory", "capacity": "32Gi", "allocatable": "32Gi", "available": "32Gi"},
        ]})
    };
    let v = json!({
        "apiVersion": "topology.node.k8s.io/v1alpha2", "kind": "NodeResourceTopology",
        "metadata": {"name": name},
        "attributes": [
            {"name": "topologyManagerPolicy", "value": "single-numa-node"},
            {"name": "topologyManagerScope", "value": "container"},
        ],
        "zones": (0..zones).map(zone).collect::<Vec<_>>(),
    });
    let mut nrt = NodeResourceTopology::from_any_version(v).unwrap_or_default();
    // koordlet's CPU topology: zone i is socket i, cores of 2 threads, Linux numbering
    // (CPU c and c + total cores are siblings).
    let cores = zones * (cpus / 2);
    let detail: Vec<_> = (0..2)
        .flat_map(|t| {
            (0..cores).map(move |c| {
                let zone = c / (cpus / 2).max(1);
                json!({"id": t * cores + c, "core": c, "socket": zone, "node": zone})
            })
        })
        .collect();
    nrt.metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(
            berth_api::annotations::ANNOTATION_NODE_CPU_TOPOLOGY.to_string(),
            json!({ "detail": detail }).to_string(),
        );
    // As published by an agent that has just started: real numbers and a fingerprint.
    republish(&nrt, std::iter::empty())
}

fn pod_object(i: usize, cpu: i64, created: Time, lsr: bool) -> Arc<Pod> {
    let name = format!("numa-{i:06}");
    let res = json!({"cpu": cpu.to_string(), "memory": "1Gi"});
    let labels = if lsr {
        json!({"koordinator.sh/qosClass": "LSR"})
    } else {
        json!({})
    };
    let v = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}"),
                     "labels": labels, "creationTimestamp": rfc3339(created)},
        "spec": {"containers": [{"name": "app", "image": "dpdk",
                  "resources": {"requests": res, "limits": res}}]},
        "status": {"phase": "Pending"},
    });
    Arc::new(serde_json::from_value(v).unwrap_or_default())
}

fn profile(cache: bool) -> Profile {
    if cache {
        return Profile::default_profile();
    }
    let pc: Result<ProfileConfig, _> = serde_json::from_value(json!({
        "pluginConfig": [{"name": "NodeResourceTopologyMatch", "args": {"cacheResyncPeriodSeconds": 0}}]
    }));
    pc.ok()
        .and_then(|pc| Profile::from_config(&pc).ok())
        .unwrap_or_else(Profile::default_profile)
}

/// The simulated cluster around the core.
struct Driver {
    core: Scheduler,
    nrts: BTreeMap<String, Arc<NodeResourceTopology>>,
    running: BTreeMap<String, Vec<Pod>>,
    pods: BTreeMap<ObjectKey, (Arc<Pod>, Time)>,
    bound: u64,
    errors: u64,
    wait_ms: i128,
    cycles: u64,
    cycle_time: Duration,
}

impl Driver {
    fn apply(&mut self, now: Time, obj: Object) {
        self.core.handle(now, Event::Applied(obj));
    }

    /// Schedules, performs binds (and the kubelet's admission) and fires due timers until
    /// nothing more happens at `now`.
    fn settle(&mut self, now: Time) {
        loop {
            let mut acted = false;
            if self.core.poll_timeout().is_some_and(|t| t <= now) {
                self.core.handle_timeout(now);
                acted = true;
            }
            let before = self.core.stats().attempts;
            let t = Instant::now();
            measured_cycles(&mut self.core, now);
            self.cycle_time += t.elapsed();
            let ran = self.core.stats().attempts - before;
            self.cycles += ran;
            acted |= ran > 0;
            while let Some(e) = self.core.poll_effect() {
                if let Effect::Bind {
                    pod,
                    node,
                    annotations,
                    ..
                } = e
                {
                    acted = true;
                    self.bind(now, pod, node, annotations);
                }
            }
            if !acted {
                return;
            }
        }
    }

    fn bind(
        &mut self,
        now: Time,
        key: ObjectKey,
        node: String,
        annotations: BTreeMap<String, String>,
    ) {
        let Some((pod, arrived)) = self.pods.get(&key).cloned() else {
            return;
        };
        let mut p = (*pod).clone();
        if !annotations.is_empty() {
            p.metadata
                .annotations
                .get_or_insert_with(Default::default)
                .extend(annotations);
        }
        p.spec.get_or_insert_with(Default::default).node_name = Some(node.clone());
        self.apply(now, Object::Pod(Arc::new(p.clone())));
        self.bound += 1;
        self.wait_ms += i128::from(now - arrived);
        let running = self.running.entry(node.clone()).or_default();
        let verdict = match self.nrts.get(&node) {
            Some(nrt) => admit(nrt, running.iter(), &p),
            None => NumaAdmission::Admit {
                resource_status: None,
            },
        };
        let status = p.status.get_or_insert_with(PodStatus::default);
        match verdict {
            NumaAdmission::Admit { resource_status } => {
                status.phase = Some("Running".into());
                if let Some(rs) = resource_status {
                    p.metadata
                        .annotations
                        .get_or_insert_with(Default::default)
                        .insert(
                            berth_api::annotations::ANNOTATION_RESOURCE_STATUS.to_string(),
                            rs,
                        );
                }
                running.push(p.clone());
            }
            NumaAdmission::Reject { message } => {
                self.errors += 1;
                status.phase = Some("Failed".into());
                status.reason = Some(TOPOLOGY_AFFINITY_ERROR.into());
                status.message = Some(message);
            }
        }
        self.pods.remove(&key);
        self.apply(now, Object::Pod(Arc::new(p)));
    }

    fn publish(&mut self, now: Time) {
        let names: Vec<String> = self.nrts.keys().cloned().collect();
        for name in names {
            let running = self.running.get(&name).map_or(&[][..], Vec::as_slice);
            let Some(old) = self.nrts.get(&name) else {
                continue;
            };
            let nrt = Arc::new(republish(old, running.iter()));
            self.nrts.insert(name, nrt.clone());
            self.apply(now, Object::NodeResourceTopology(nrt));
        }
    }
}

/// Runs one mode.
pub fn run_mode(p: &Params, cache: bool) -> Outcome {
    let wall = Instant::now();
    let mut d = Driver {
        core: Scheduler::new(
            vec![profile(cache)],
            Config {
                seed: 1,
                ..Config::default()
            },
        ),
        nrts: BTreeMap::new(),
        running: BTreeMap::new(),
        pods: BTreeMap::new(),
        bound: 0,
        errors: 0,
        wait_ms: 0,
        cycles: 0,
        cycle_time: Duration::ZERO,
    };
    for i in 0..p.nodes {
        let name = format!("node-{i:05}");
        let zones = 2 + (i % 7) as i64;
        d.apply(
            START,
            Object::Node(node_object(&name, zones, p.cpus_per_zone)),
        );
        let nrt = Arc::new(nrt_object(&name, zones, p.cpus_per_zone));
        d.nrts.insert(name, nrt.clone());
        d.apply(START, Object::NodeResourceTopology(nrt));
    }
    d.settle(START);
    let bursts = p.pods.div_ceil(p.burst.max(1));
    let last_burst = START + (bursts.saturating_sub(1) as Time) * p.burst_interval;
    let end = last_burst + p.settle;
    let mut next_burst = Some(START);
    let mut sent = 0usize;
    let mut next_publish = START + p.nrt_update_period;
    let mut now = START;
    loop {
        if next_burst == Some(now) {
            let n = p.burst.min(p.pods - sent);
            for k in 0..n {
                let i = sent + k;
                // Sizes cycle with a stride so neighbours differ.
                let cpu = p.pod_cpus[(i * 7 + i / p.pod_cpus.len()) % p.pod_cpus.len()];
                let lsr = p.lsr_every > 0 && i.is_multiple_of(p.lsr_every);
                let pod = pod_object(i, cpu, now + k as Time, lsr);
                let key = ObjectKey::pod("default", &format!("numa-{i:06}"));
                d.pods.insert(key, (pod.clone(), now));
                d.apply(now, Object::Pod(pod));
            }
            sent += n;
            next_burst = (sent < p.pods).then_some(now + p.burst_interval);
        }
        if next_publish == now {
            d.publish(now);
            next_publish += p.nrt_update_period;
        }
        d.settle(now);
        let next = [
            next_burst,
            Some(next_publish),
            d.core.poll_timeout().map(|t| t.max(now + 1)),
        ]
        .into_iter()
        .flatten()
        .min();
        match next {
            Some(t) if t <= end => now = t,
            _ => break,
        }
    }
    Outcome {
        cache,
        bound: d.bound,
        topology_errors: d.errors,
        pending: d.pods.len() as u64,
        cycles: d.cycles,
        replayed: d.core.stats().replayed,
        requeues: d.core.queue_stats(),
        cycle_time: d.cycle_time,
        wall: wall.elapsed(),
        metrics: d.core.numa_metrics(),
        mean_wait_s: d.wait_ms as f64 / 1000.0 / d.bound.max(1) as f64,
    }
}

/// One report line.
pub fn format_outcome(o: &Outcome) -> String {
    let m = &o.metrics;
    format!(
        "{:<12} bound {:>6}  TopologyAffinityError {:>5}  pending {:>5}  {:>8.0} pods/s (cycles, {} cycles)  \
         wait {:>5.1}s  NRT reads/pod {:>7.2} (reference GETs)  {:>5.2} (watched)  \
         resyncs {} matched {} mismatched {} flushes {}  \
         requeued {} by events, {} by the 5m wait, {} retries replayed  wall {:.1}s",
        if o.cache { "cache" } else { "passthrough" },
        o.bound,
        o.topology_errors,
        o.pending,
        o.pods_per_sec(),
        o.cycles,
        o.mean_wait_s,
        o.api_reads_per_pod(),
        o.watched_per_pod(),
        m.cache.resync_attempts,
        m.cache.fingerprint_matches,
        m.cache.fingerprint_mismatches,
        m.cache.flushes,
        o.requeues.moved_by_event,
        o.requeues.moved_by_max_wait,
        o.replayed,
        o.wall.as_secs_f64(),
    )
}

/// Runs both modes with `p` and formats the report.
pub fn run_with(p: &Params) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "NUMA/{}Nodes_2-8Zones_{}GuaranteedPods{}/bursts-of-{}-every-{}s/nrtUpdatePeriod-{}s",
        p.nodes,
        p.pods,
        if p.lsr_every > 0 {
            format!("_1in{}LSR", p.lsr_every)
        } else {
            String::new()
        },
        p.burst,
        p.burst_interval / 1000,
        p.nrt_update_period / 1000
    );
    for cache in [true, false] {
        let _ = writeln!(out, "  {}", format_outcome(&run_mode(p, cache)));
    }
    if p.lsr_every == 0 {
        // The same burst with one pod in four LSR: the scheduler also picks their CPUs.
        let o = run_mode(&with_lsr(p), true);
        let _ = writeln!(
            out,
            "  1 in 4 LSR (cpusets)  {}  {:.1} us/cycle (vs {:.1} without LSR)",
            format_outcome(&o),
            o.cycle_time.as_secs_f64() * 1e6 / o.cycles.max(1) as f64,
            {
                let plain = run_mode(p, true);
                plain.cycle_time.as_secs_f64() * 1e6 / plain.cycles.max(1) as f64
            }
        );
    }
    out
}

/// The benchmark (see [`Params::default`]).
pub fn run() -> String {
    run_with(&Params::default())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small() -> Params {
        Params {
            nodes: 20,
            pods: 400,
            burst: 100,
            ..Params::default()
        }
    }

    #[test]
    fn the_cache_avoids_the_topology_errors_the_stale_data_causes() {
        let p = small();
        let cached = run_mode(&p, true);
        let passthrough = run_mode(&p, false);
        assert_eq!(cached.topology_errors, 0, "{}", format_outcome(&cached));
        assert!(
            passthrough.topology_errors > 0,
            "{}",
            format_outcome(&passthrough)
        );
        assert_eq!(cached.bound + cached.pending, p.pods as u64);
        assert!(cached.metrics.cache.flushes > 0);
        assert_eq!(passthrough.metrics.cache.resync_attempts, 0);
        assert!(passthrough.api_reads_per_pod() > cached.api_reads_per_pod());
    }

    /// The full case, in release: `cargo test --release -p berth-sim bench_numa -- --ignored
    /// --nocapture`.
    #[test]
    fn lsr_pods_are_placed_with_cpusets_and_no_topology_error() {
        let p = Params {
            lsr_every: 4,
            ..small()
        };
        let o = run_mode(&p, true);
        assert_eq!(o.topology_errors, 0, "{}", format_outcome(&o));
        assert_eq!(o.bound + o.pending, p.pods as u64);
        assert!(o.bound > 300, "{}", format_outcome(&o));
    }

    #[test]
    #[ignore]
    fn full_case() {
        println!("{}", run());
    }

    #[test]
    fn the_report_names_both_modes() {
        let r = run_with(&Params {
            nodes: 4,
            pods: 20,
            burst: 10,
            settle: 60_000,
            ..Params::default()
        });
        assert!(
            r.contains("  cache ") && r.contains("  passthrough ") && r.contains("LSR (cpusets)"),
            "{r}"
        );
    }
}
