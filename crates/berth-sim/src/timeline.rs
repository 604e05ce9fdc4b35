//! What a simulation did over virtual time, recorded for `simulate -v` (a per-step log) and
//! `simulate --report` (the HTML report's charts).
//!
//! The simulation calls [`Timeline::observe`] after every settle: after the initial objects,
//! after each step's changes, and after every timer that fired while time advanced. Each
//! observation keeps the cluster's aggregates (pods and reservations by phase, per-node use,
//! reservation fill, NUMA zones as the scheduler believed them and as published) and is diffed
//! against the previous one for the log, so only one full snapshot of pod states is held.

use std::collections::BTreeMap;

use serde::Serialize;

use berth_api::reservation::ReservationPhase;
use berth_core::numa::NodeNumaView;
use berth_core::resources::ResourceId;
use berth_core::time::{rfc3339, Time};
use berth_core::{Kind, Object, Scheduler};

use crate::objects::{allocated_reservation, pod_scheduled_message};
use crate::scenario::Step;
use crate::store::Store;

/// Pods by phase at one instant (`unschedulable`: pending with a failed attempt).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct PodCounts {
    /// Not bound, not tried yet (or bound to a node that does not exist).
    pub pending: u32,
    /// Not bound after a failed scheduling attempt.
    pub unschedulable: u32,
    /// Bound and admitted.
    pub running: u32,
    /// Finished.
    pub succeeded: u32,
    /// Rejected by the kubelet, or failed.
    pub failed: u32,
}

/// Reservations by phase at one instant.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ReservationCounts {
    /// Not placed.
    pub pending: u32,
    /// Placed, holding.
    pub available: u32,
    /// Waiting (pre-allocation).
    pub waiting: u32,
    /// Consumed.
    pub succeeded: u32,
    /// Expired or lost their node.
    pub failed: u32,
}

/// One node at one instant: `[cpu used, cpu reserved, cpu allocatable, memory used, memory
/// reserved, memory allocatable]` (milli-CPU, bytes). Used: requested by pods; reserved:
/// held by reservations for their owners and not yet allocated.
pub type NodeUse = [i64; 6];

/// One reservation's fill at one instant: what its owners took against what it holds
/// (CPU in milli-CPU; memory when it holds no CPU).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Fill {
    /// Index into [`Timeline::reservations`].
    pub r: u32,
    /// Taken by owners.
    pub allocated: i64,
    /// Its allocatable.
    pub allocatable: i64,
}

/// One NUMA zone at one instant: CPU available as the scheduler believed it (`None`: the
/// node's data was unusable) and as the node published it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ZoneSample {
    /// Index into [`Timeline::numa_nodes`].
    pub n: u32,
    /// NUMA id.
    pub zone: u8,
    /// Believed available CPU (milli).
    pub believed: Option<i64>,
    /// Published available CPU (milli).
    pub published: Option<i64>,
}

/// The cluster at one instant.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Sample {
    /// Virtual time (ms since the epoch).
    pub t: Time,
    /// Pods by phase.
    pub pods: PodCounts,
    /// Reservations by phase.
    pub reservations: ReservationCounts,
    /// Per node, by index into [`Timeline::nodes`]: `(node, use)`.
    pub nodes: Vec<(u32, NodeUse)>,
    /// Active reservations' fill.
    pub fill: Vec<Fill>,
    /// NUMA zones.
    pub zones: Vec<ZoneSample>,
    /// NUMA cache flushes so far (a flush replaces a node's cached data at a resync).
    pub flushes: u64,
}

/// One line of the per-step log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LogLine {
    /// When.
    pub t: Time,
    /// What.
    pub text: String,
}

/// A NUMA resync that replaced cached data.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Resync {
    /// When.
    pub t: Time,
    /// How many node flushes happened since the previous observation.
    pub flushes: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct PodState {
    phase: String,
    node: Option<String>,
    reservation: Option<String>,
    message: Option<String>,
}

/// Everything recorded.
#[derive(Debug, Clone, Default)]
pub struct Timeline {
    /// Node names, indexed by [`Sample::nodes`].
    pub nodes: Vec<String>,
    /// Reservation names, indexed by [`Fill::r`].
    pub reservations: Vec<String>,
    /// NUMA node names, indexed by [`ZoneSample::n`].
    pub numa_nodes: Vec<String>,
    /// Observations in time order.
    pub samples: Vec<Sample>,
    /// The per-step log.
    pub log: Vec<LogLine>,
    /// NUMA resyncs that flushed nodes.
    pub resyncs: Vec<Resync>,
    node_ix: BTreeMap<String, u32>,
    res_ix: BTreeMap<String, u32>,
    numa_ix: BTreeMap<String, u32>,
    pods: BTreeMap<String, PodState>,
    res_phase: BTreeMap<String, (String, Option<String>)>,
    /// Observations with the same time and aggregates as the last one are folded into it.
    last_flushes: u64,
    /// Pods created with `spec.nodeName` set and not observed since: berth did not schedule
    /// them, so the log must not say it did.
    came_bound: std::collections::BTreeSet<String>,
}

fn intern(names: &mut Vec<String>, ix: &mut BTreeMap<String, u32>, name: &str) -> u32 {
    if let Some(&i) = ix.get(name) {
        return i;
    }
    let i = names.len() as u32;
    names.push(name.to_string());
    ix.insert(name.to_string(), i);
    i
}

impl Timeline {
    /// `key` (a pod's `namespace/name`) is being created already bound to a node.
    pub fn pod_came_bound(&mut self, key: String) {
        self.came_bound.insert(key);
    }

    /// A step starts: logs what it applies, deletes and advances.
    pub fn step_started(&mut self, now: Time, name: &str, step: &Step) {
        let mut parts = Vec::new();
        if !step.apply.is_empty() {
            let objs: Vec<String> = step
                .apply
                .iter()
                .map(|i| match i {
                    crate::input::Item::Object(o) => {
                        let k = o.key();
                        format!("{} {}", k.kind.as_str(), k)
                    }
                    crate::input::Item::Event(e) => {
                        format!("Event {}", e.metadata.name.as_deref().unwrap_or(""))
                    }
                })
                .collect();
            parts.push(format!("apply {}", few(&objs)));
        }
        if !step.delete.is_empty() {
            let objs: Vec<String> = step
                .delete
                .iter()
                .map(|k| format!("{} {k}", k.kind.as_str()))
                .collect();
            parts.push(format!("delete {}", few(&objs)));
        }
        if let Some(d) = step.advance {
            parts.push(format!("advance {}", human_duration(d)));
        }
        if step.expect.is_some() {
            parts.push("expect".into());
        }
        self.log.push(LogLine {
            t: now,
            text: format!("{name}: {}", parts.join("; ")),
        });
    }

    /// Records the cluster now and logs what changed since the last observation.
    pub fn observe(&mut self, now: Time, store: &Store, core: &Scheduler) {
        let mut sample = Sample {
            t: now,
            ..Sample::default()
        };
        let pod_lines = self.observe_pods(now, store, &mut sample);
        self.observe_reservations(now, core, &mut sample);
        // What reservations did first: an expiry is why a pod fits at the same instant.
        self.log.extend(pod_lines);
        self.observe_nodes(core, &mut sample);
        self.observe_numa(now, core, &mut sample);
        // Two observations at one instant: the later one stands.
        if self.samples.last().is_some_and(|s| s.t == now) {
            self.samples.pop();
        }
        self.samples.push(sample);
    }

    /// Pods: counts by state into `sample`; the log lines of what changed, returned to
    /// follow the reservations' lines.
    fn observe_pods(&mut self, now: Time, store: &Store, sample: &mut Sample) -> Vec<LogLine> {
        let mut seen = BTreeMap::new();
        for obj in store.of_kind(Kind::Pod) {
            let Object::Pod(p) = obj else { continue };
            let key = obj.key().to_string();
            let node = p
                .spec
                .as_ref()
                .and_then(|s| s.node_name.clone())
                .filter(|n| !n.is_empty());
            let phase = p
                .status
                .as_ref()
                .and_then(|s| s.phase.clone())
                .unwrap_or_else(|| "Pending".into());
            let message = pod_scheduled_message(p);
            match phase.as_str() {
                "Running" => sample.pods.running += 1,
                "Succeeded" => sample.pods.succeeded += 1,
                "Failed" => sample.pods.failed += 1,
                _ if node.is_none() && message.is_some() => sample.pods.unschedulable += 1,
                _ => sample.pods.pending += 1,
            }
            let state = PodState {
                phase,
                node,
                reservation: allocated_reservation(p),
                message: if p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_none() {
                    message
                } else {
                    None
                },
            };
            seen.insert(key, state);
        }
        let mut pod_lines = Vec::new();
        for (key, st) in &seen {
            let before = self.pods.get(key);
            if st.node.is_some() && before.is_none_or(|b| b.node != st.node) {
                let node = st.node.as_deref().unwrap_or("");
                let text = match (self.came_bound.remove(key), &st.reservation) {
                    (true, Some(r)) => format!("pod {key} came bound to {node} (reservation {r})"),
                    (true, None) => format!("pod {key} came bound to {node}"),
                    (false, Some(r)) => format!("scheduled pod {key} on {node} (reservation {r})"),
                    (false, None) => format!("scheduled pod {key} on {node}"),
                };
                pod_lines.push(LogLine { t: now, text });
            }
            if st.phase == "Failed" && before.is_none_or(|b| b.phase != "Failed") {
                pod_lines.push(LogLine {
                    t: now,
                    text: format!("pod {key} failed"),
                });
            }
            if let Some(m) = &st.message {
                if before.is_none_or(|b| b.message.as_ref() != Some(m)) {
                    pod_lines.push(LogLine {
                        t: now,
                        text: format!("unschedulable pod {key}: {m}"),
                    });
                }
            }
        }
        for key in self.pods.keys() {
            if !seen.contains_key(key) {
                pod_lines.push(LogLine {
                    t: now,
                    text: format!("pod {key} deleted"),
                });
            }
        }
        self.pods = seen;
        pod_lines
    }

    /// Reservations: counts by phase and fill into `sample`, phase changes into the log.
    fn observe_reservations(&mut self, now: Time, cx: &Scheduler, sample: &mut Sample) {
        let mut res_seen = BTreeMap::new();
        for r in cx.reservations() {
            let phase = r.phase.as_str().to_string();
            match &r.phase {
                ReservationPhase::Pending => sample.reservations.pending += 1,
                ReservationPhase::Available => sample.reservations.available += 1,
                ReservationPhase::Waiting => sample.reservations.waiting += 1,
                ReservationPhase::Succeeded => sample.reservations.succeeded += 1,
                ReservationPhase::Failed => sample.reservations.failed += 1,
                ReservationPhase::Other(_) => sample.reservations.pending += 1,
            }
            let node = r.node_name.as_ref().map(|n| n.to_string());
            let name = r.name.to_string();
            let before = self.res_phase.get(&name);
            if before.is_none_or(|(p, _)| *p != phase) {
                let text = match (&r.phase, &node) {
                    (ReservationPhase::Available, Some(n)) => {
                        format!("reservation {name} Available on {n}")
                    }
                    (ReservationPhase::Failed, _) => {
                        let why = r
                            .conditions
                            .iter()
                            .find(|c| c.type_ == "Ready" && c.status == "False")
                            .map(|c| c.reason.clone())
                            .unwrap_or_default();
                        if why == "Expired" {
                            format!("reservation {name} expired")
                        } else {
                            format!("reservation {name} failed ({why})")
                        }
                    }
                    (p, _) => format!("reservation {name} {}", p.as_str()),
                };
                self.log.push(LogLine { t: now, text });
            }
            if r.phase.is_active() {
                let ix = intern(&mut self.reservations, &mut self.res_ix, &name);
                let (alloc, cap) = if r.allocatable[ResourceId::CPU] > 0 {
                    (r.taken()[ResourceId::CPU], r.allocatable[ResourceId::CPU])
                } else {
                    (
                        r.taken()[ResourceId::MEMORY],
                        r.allocatable[ResourceId::MEMORY],
                    )
                };
                sample.fill.push(Fill {
                    r: ix,
                    allocated: alloc,
                    allocatable: cap,
                });
            }
            res_seen.insert(name, (phase, node));
        }
        for name in self.res_phase.keys() {
            if !res_seen.contains_key(name) {
                self.log.push(LogLine {
                    t: now,
                    text: format!("reservation {name} deleted"),
                });
            }
        }
        self.res_phase = res_seen;
    }

    /// Nodes: requested, reserved and allocatable CPU and memory into `sample`.
    fn observe_nodes(&mut self, cx: &Scheduler, sample: &mut Sample) {
        for n in cx.nodes() {
            let ix = intern(&mut self.nodes, &mut self.node_ix, &n.name);
            let (c, m) = (ResourceId::CPU, ResourceId::MEMORY);
            sample.nodes.push((
                ix,
                [
                    n.requested[c],
                    n.reserved[c],
                    n.allocatable[c],
                    n.requested[m],
                    n.reserved[m],
                    n.allocatable[m],
                ],
            ));
        }
    }

    /// NUMA: believed and published CPUs per zone into `sample`, resyncs into the log.
    fn observe_numa(&mut self, now: Time, cx: &Scheduler, sample: &mut Sample) {
        let cache = cx.numa().cache();
        let mut numa_nodes: Vec<&str> = cache.nrt_nodes().collect();
        numa_nodes.sort_unstable();
        for name in numa_nodes {
            let Some(topology) = cache.topology(name) else {
                continue;
            };
            let ix = intern(&mut self.numa_nodes, &mut self.numa_ix, name);
            let believed = match cx.numa().view(name) {
                NodeNumaView::Ready { zones, .. } => Some(zones),
                _ => None,
            };
            for z in topology.zones.zones() {
                sample.zones.push(ZoneSample {
                    n: ix,
                    zone: z.id,
                    believed: believed.and_then(|b| b.available(z.id, "cpu")),
                    published: topology.zones.available(z.id, "cpu"),
                });
            }
        }
        let flushes = cx.numa().metrics().cache.flushes;
        sample.flushes = flushes;
        if flushes > self.last_flushes {
            self.resyncs.push(Resync {
                t: now,
                flushes: flushes - self.last_flushes,
            });
            self.log.push(LogLine {
                t: now,
                text: format!(
                    "NUMA resync: {} node(s) flushed to their published topology",
                    flushes - self.last_flushes
                ),
            });
        }
        self.last_flushes = flushes;
    }

    /// The log as lines `[2024-01-01T00:00:10Z] ...`, for standard error.
    pub fn log_lines(&self) -> Vec<String> {
        self.log
            .iter()
            .map(|l| format!("[{}] {}", rfc3339(l.t), l.text))
            .collect()
    }
}

/// Up to five names, then how many more: a step applying a thousand pods stays one line.
fn few(names: &[String]) -> String {
    const SHOWN: usize = 5;
    if names.len() <= SHOWN {
        return names.join(", ");
    }
    format!(
        "{} and {} more",
        names[..SHOWN].join(", "),
        names.len() - SHOWN
    )
}

/// `90s` as `1m30s`.
fn human_duration(ms: Time) -> String {
    let mut s = ms / 1000;
    let rest = ms % 1000;
    let h = s / 3600;
    s %= 3600;
    let m = s / 60;
    s %= 60;
    let mut out = String::new();
    if h > 0 {
        out.push_str(&format!("{h}h"));
    }
    if m > 0 {
        out.push_str(&format!("{m}m"));
    }
    if s > 0 || rest > 0 || out.is_empty() {
        if rest > 0 {
            out.push_str(&format!("{s}.{rest:03}s"));
        } else {
            out.push_str(&format!("{s}s"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_written() {
        assert_eq!(human_duration(90_000), "1m30s");
        assert_eq!(human_duration(3_600_000), "1h");
        assert_eq!(human_duration(1_500), "1.500s");
        assert_eq!(human_duration(0), "0s");
    }
}
