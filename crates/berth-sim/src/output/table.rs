//! `-o table`: the summary for people, written to the output as it is produced.
//!
//! Why two passes over the pods: the columns are as wide as their widest cell, so the widths
//! must be known before the first row is written. Measuring the rows in one pass and writing
//! them in the next keeps no row of the (possibly million) pods in memory; only the rows of
//! the much shorter sections (reservations, nodes, pods to evict) are collected.

use std::borrow::Cow;
use std::fmt::Write as _;
use std::io::{self, Write};

use berth_api::k8s_openapi::api::core::v1::Pod;
use berth_api::quantity::format_resource;
use berth_api::reservation::{condition, Reservation, ReservationPhase};
use berth_core::resources::ResourceId;
use berth_core::time::rfc3339;
use berth_core::{Kind, Object};

use crate::objects::{allocated_reservation, pod_scheduled_message};
use crate::sim::Simulation;

/// Column widths of one section, from its header and every row.
struct Columns {
    widths: Vec<usize>,
}

impl Columns {
    fn new(header: &[&str]) -> Self {
        Self {
            widths: header.iter().map(|h| h.chars().count()).collect(),
        }
    }

    /// Widens the columns to hold `row`.
    fn fit<S: AsRef<str>>(&mut self, row: &[S]) {
        for (w, cell) in self.widths.iter_mut().zip(row) {
            *w = (*w).max(cell.as_ref().chars().count());
        }
    }

    /// Writes one line: cells left-aligned and separated by three spaces, like `kubectl
    /// get`, the last one unpadded, trailing blanks trimmed. `buf` is reused across lines.
    fn line<S: AsRef<str>>(
        &self,
        out: &mut dyn Write,
        buf: &mut String,
        cells: &[S],
    ) -> io::Result<()> {
        buf.clear();
        let last = self.widths.len();
        for (i, (cell, w)) in cells.iter().zip(&self.widths).enumerate() {
            let cell = cell.as_ref();
            if i + 1 == last {
                buf.push_str(cell);
            } else {
                let _ = write!(buf, "{cell:<w$}   ");
            }
        }
        out.write_all(buf.trim_end().as_bytes())?;
        out.write_all(b"\n")
    }

    /// Writes `title`, the header and `rows` (all of which [`Columns::fit`] has seen).
    fn section<S: AsRef<str>>(
        &self,
        out: &mut dyn Write,
        title: &str,
        header: &[&str],
        rows: impl Iterator<Item = impl AsRef<[S]>>,
    ) -> io::Result<()> {
        let mut buf = String::new();
        writeln!(out, "\n{title}")?;
        self.line(out, &mut buf, header)?;
        for row in rows {
            self.line(out, &mut buf, row.as_ref())?;
        }
        Ok(())
    }
}

/// `part` as a whole percentage of `total` (rounded down), `-` when there is no total.
/// Computed in 128 bits: memory in bytes times 100 overflows 64 bits past 80 PiB.
pub(super) fn percent(part: i64, total: i64) -> String {
    if total <= 0 {
        return "-".to_string();
    }
    format!("{}%", i128::from(part) * 100 / i128::from(total))
}

/// `n thing` or `n things`.
fn plural(n: usize, thing: &str) -> String {
    if n == 1 {
        format!("1 {thing}")
    } else {
        format!("{n} {thing}s")
    }
}

/// `1/4 (25%)`: an amount of a resource against the node's allocatable.
fn share(resource: &str, part: i64, allocatable: i64) -> String {
    format!(
        "{}/{} ({})",
        format_resource(resource, part),
        format_resource(resource, allocatable),
        percent(part, allocatable)
    )
}

/// A resource list as `cpu=2,memory=4Gi`, `-` when empty.
fn resource_list(
    list: Option<
        &std::collections::BTreeMap<
            String,
            berth_api::k8s_openapi::apimachinery::pkg::api::resource::Quantity,
        >,
    >,
) -> String {
    match list {
        Some(l) if !l.is_empty() => l
            .iter()
            .map(|(k, v)| format!("{k}={}", v.0))
            .collect::<Vec<_>>()
            .join(","),
        _ => "-".to_string(),
    }
}

/// Why a reservation is not usable: for a Failed one the reason (and message) of its
/// `Ready=False` condition, else of `Scheduled=False`; for a Pending one that could not be
/// placed, the scheduler's message.
fn reservation_why(r: &Reservation) -> String {
    let conditions = r.status.as_ref().map(|s| s.conditions.as_slice());
    let find = |type_: &str| {
        conditions
            .unwrap_or_default()
            .iter()
            .find(|c| c.type_ == type_ && c.status == condition::FALSE)
    };
    let with_message = |reason: &str, message: &str| match (reason.is_empty(), message.is_empty()) {
        (_, true) => reason.to_string(),
        (true, false) => message.to_string(),
        (false, false) => format!("{reason}: {message}"),
    };
    match r.phase() {
        ReservationPhase::Failed => find(condition::READY)
            .or_else(|| find(condition::SCHEDULED))
            .map(|c| with_message(&c.reason, &c.message))
            .filter(|w| !w.is_empty())
            .unwrap_or_else(|| "-".into()),
        ReservationPhase::Pending => find(condition::SCHEDULED)
            .map(|c| with_message("", &c.message))
            .filter(|w| !w.is_empty())
            .unwrap_or_else(|| "-".into()),
        _ => "-".into(),
    }
}

const PLACED_HEADER: [&str; 5] = ["NAMESPACE", "POD", "NODE", "RESERVATION", "PHASE"];
const PENDING_HEADER: [&str; 3] = ["NAMESPACE", "POD", "WHY"];
const OTHER_HEADER: [&str; 3] = ["NAMESPACE", "POD", "SCHEDULER"];

/// A pod's row: in PLACEMENTS when it has a node, in OTHER SCHEDULERS when no profile of
/// berth's schedules it (berth never tries it: it is not unschedulable), else in
/// UNSCHEDULABLE.
enum PodRow<'a> {
    Placed([Cow<'a, str>; 5]),
    Pending([Cow<'a, str>; 3]),
    Other([Cow<'a, str>; 3]),
}

/// The scheduler a pod asks for (`default-scheduler` when it names none).
fn scheduler_name(p: &Pod) -> &str {
    p.spec
        .as_ref()
        .and_then(|s| s.scheduler_name.as_deref())
        .filter(|n| !n.is_empty())
        .unwrap_or(berth_core::framework::profile::DEFAULT_SCHEDULER_NAME)
}

/// A bound pod's phase; a Failed one with its reason, as the kubelet gave it
/// (`Failed (TopologyAffinityError)`).
fn phase_cell(p: &Pod) -> Cow<'_, str> {
    let status = p.status.as_ref();
    let phase = status.and_then(|s| s.phase.as_deref()).unwrap_or_default();
    match status.and_then(|s| s.reason.as_deref()) {
        Some(reason) if phase == "Failed" && !reason.is_empty() => {
            Cow::Owned(format!("{phase} ({reason})"))
        }
        _ => Cow::Borrowed(phase),
    }
}

fn pod_row<'a>(p: &'a Pod, profiles: &[&str]) -> PodRow<'a> {
    let ns: Cow<'_, str> = Cow::Borrowed(p.metadata.namespace.as_deref().unwrap_or_default());
    let name: Cow<'_, str> = Cow::Borrowed(p.metadata.name.as_deref().unwrap_or_default());
    match p.spec.as_ref().and_then(|s| s.node_name.as_deref()) {
        Some(node) if !node.is_empty() => PodRow::Placed([
            ns,
            name,
            Cow::Borrowed(node),
            allocated_reservation(p).map_or(Cow::Borrowed("-"), Cow::Owned),
            phase_cell(p),
        ]),
        _ if !profiles.contains(&scheduler_name(p)) => {
            PodRow::Other([ns, name, Cow::Borrowed(scheduler_name(p))])
        }
        _ => PodRow::Pending([
            ns,
            name,
            pod_scheduled_message(p).map_or(Cow::Borrowed("(not tried yet)"), Cow::Owned),
        ]),
    }
}

/// The pods, in store order (namespace, name).
fn pods(sim: &Simulation) -> impl Iterator<Item = &Pod> + '_ {
    sim.store().of_kind(Kind::Pod).filter_map(|o| match o {
        Object::Pod(p) => Some(&**p),
        _ => None,
    })
}

/// The RESERVATIONS rows.
fn reservation_rows(sim: &Simulation) -> Vec<Vec<String>> {
    let core = sim.core();
    sim.store()
        .of_kind(Kind::Reservation)
        .filter_map(|o| match o {
            Object::Reservation(r) => Some(r),
            _ => None,
        })
        .map(|r| {
            let name = r.metadata.name.clone().unwrap_or_default();
            let status = r.status.as_ref();
            let mut owners: Vec<String> = status
                .map(|s| s.current_owners.as_slice())
                .unwrap_or_default()
                .iter()
                .map(|o| {
                    format!(
                        "{}/{}",
                        o.namespace.as_deref().unwrap_or(""),
                        o.name.as_deref().unwrap_or("")
                    )
                })
                .collect();
            owners.sort();
            let phase = r.phase();
            let expires = match core.reservation(&name) {
                _ if phase == ReservationPhase::Succeeded => "-".to_string(),
                Some(info) => info.expires_at.map_or_else(|| "never".to_string(), rfc3339),
                None => "-".to_string(),
            };
            vec![
                name,
                phase.as_str().to_string(),
                status
                    .and_then(|s| s.node_name.clone())
                    .filter(|n| !n.is_empty())
                    .unwrap_or_else(|| "-".into()),
                resource_list(status.map(|s| &s.allocatable)),
                resource_list(status.map(|s| &s.allocated)),
                expires,
                if owners.is_empty() {
                    "-".into()
                } else {
                    owners.join(",")
                },
                reservation_why(r),
            ]
        })
        .collect()
}

/// The NODES rows: per node what pods use, what reservations hold, what is free.
fn node_rows(sim: &Simulation) -> Vec<Vec<String>> {
    let core = sim.core();
    sim.store()
        .of_kind(Kind::Node)
        .filter_map(|o| {
            let name = o.meta().name.clone().unwrap_or_default();
            let info = core.node(&name)?;
            let mut row = vec![name];
            for (resource, id) in [("cpu", ResourceId::CPU), ("memory", ResourceId::MEMORY)] {
                let allocatable = info.allocatable[id];
                let used = info.requested[id];
                let held = info.reserved[id];
                let free = allocatable.saturating_sub(used).saturating_sub(held).max(0);
                row.push(share(resource, used, allocatable));
                row.push(share(resource, held, allocatable));
                row.push(share(resource, free, allocatable));
            }
            // Reservations' stand-ins sit among the node's pods; only real pods count.
            let pods = info.pods.iter().filter(|p| !p.is_reserve_pod()).count();
            row.push(format!("{pods}/{}", info.allowed_pods));
            Some(row)
        })
        .collect()
}

/// Seed 004's eviction list: pods holding CPUs their node now reserves.
fn evict_rows(sim: &Simulation) -> Vec<Vec<String>> {
    let mut evict: Vec<Vec<String>> = sim
        .store()
        .events_with_reason(berth_core::scheduler::EVICT_RESERVED_CPUS)
        .map(|e| {
            vec![
                e.involved_object.namespace.clone().unwrap_or_default(),
                e.involved_object.name.clone().unwrap_or_default(),
                e.message.clone().unwrap_or_default(),
            ]
        })
        .collect();
    evict.sort();
    evict.dedup();
    evict
}

/// Objects the scheduler refused under the capacity rule (treated as absent): one row per
/// Warning event of those reasons, `KIND NAME WHY`, sorted.
fn refused_rows(sim: &Simulation) -> Vec<Vec<String>> {
    use berth_core::scheduler::{
        REASON_INVALID_CPU_TOPOLOGY, REASON_INVALID_NODE, REASON_INVALID_NODE_RESERVATION,
        REASON_INVALID_NRT,
    };
    let mut rows = Vec::new();
    for reason in [
        REASON_INVALID_NODE,
        REASON_INVALID_NODE_RESERVATION,
        REASON_INVALID_NRT,
        REASON_INVALID_CPU_TOPOLOGY,
    ] {
        for e in sim.store().events_with_reason(reason) {
            let o = &e.involved_object;
            rows.push(vec![
                o.kind.clone().unwrap_or_default(),
                o.name.clone().unwrap_or_default(),
                e.message.clone().unwrap_or_default(),
            ]);
        }
    }
    rows.sort();
    rows
}

/// Writes a section of collected rows, if there are any.
fn collected(
    out: &mut dyn Write,
    title: &str,
    header: &[&str],
    rows: &[Vec<String>],
) -> io::Result<()> {
    if rows.is_empty() {
        return Ok(());
    }
    let mut columns = Columns::new(header);
    for row in rows {
        columns.fit(row);
    }
    columns.section(out, title, header, rows.iter())
}

/// Writes the human summary: placements, unschedulable pods and why, reservations (what
/// they hold, what their owners took, when they expire, why they failed), and per node what
/// pods use, what reservations hold for their owners, and what is free.
pub fn write(sim: &Simulation, out: &mut dyn Write) -> io::Result<()> {
    let profiles: Vec<&str> = sim
        .core()
        .profiles()
        .iter()
        .map(|p| p.scheduler_name.as_str())
        .collect();
    let mut placed = Columns::new(&PLACED_HEADER);
    let mut pending = Columns::new(&PENDING_HEADER);
    let mut other = Columns::new(&OTHER_HEADER);
    let (mut n_placed, mut n_pending, mut n_other) = (0, 0, 0);
    for p in pods(sim) {
        match pod_row(p, &profiles) {
            PodRow::Placed(row) => {
                n_placed += 1;
                placed.fit(&row);
            }
            PodRow::Pending(row) => {
                n_pending += 1;
                pending.fit(&row);
            }
            PodRow::Other(row) => {
                n_other += 1;
                other.fit(&row);
            }
        }
    }
    let reservations = reservation_rows(sim);
    let refused = refused_rows(sim);
    let nodes = node_rows(sim);
    let evict = evict_rows(sim);
    // Pods of other schedulers are counted only when there are some, so that the line of
    // a run without any reads as it always has.
    let others = if n_other > 0 {
        format!(", {n_other} left to other schedulers")
    } else {
        String::new()
    };
    let counts = format!(
        "{} ({} placed, {} unschedulable{others}), {}, {}.",
        plural(n_placed + n_pending + n_other, "pod"),
        n_placed,
        n_pending,
        plural(reservations.len(), "reservation"),
        plural(nodes.len(), "node")
    );
    if sim.now() > sim.start() {
        writeln!(
            out,
            "Simulated {} to {}: {counts}",
            rfc3339(sim.start()),
            rfc3339(sim.now())
        )?;
    } else {
        writeln!(out, "{counts}")?;
    }
    write_pods(
        sim,
        &profiles,
        [placed, pending, other],
        [n_placed, n_pending, n_other],
        out,
    )?;
    write_collected(out, &evict, &reservations, &refused, &nodes)
}

/// The PLACEMENTS, UNSCHEDULABLE and OTHER SCHEDULERS sections, in columns fitted to
/// their rows (`n`: how many rows each has).
fn write_pods(
    sim: &Simulation,
    profiles: &[&str],
    [placed, pending, other]: [Columns; 3],
    [n_placed, n_pending, n_other]: [usize; 3],
    out: &mut dyn Write,
) -> io::Result<()> {
    if n_placed > 0 {
        let rows = pods(sim).filter_map(|p| match pod_row(p, profiles) {
            PodRow::Placed(row) => Some(row),
            _ => None,
        });
        placed.section(out, "PLACEMENTS", &PLACED_HEADER, rows)?;
    }
    if n_pending > 0 {
        let rows = pods(sim).filter_map(|p| match pod_row(p, profiles) {
            PodRow::Pending(row) => Some(row),
            _ => None,
        });
        pending.section(out, "UNSCHEDULABLE", &PENDING_HEADER, rows)?;
    }
    if n_other > 0 {
        let rows = pods(sim).filter_map(|p| match pod_row(p, profiles) {
            PodRow::Other(row) => Some(row),
            _ => None,
        });
        other.section(
            out,
            "OTHER SCHEDULERS (not berth's to schedule)",
            &OTHER_HEADER,
            rows,
        )?;
    }
    Ok(())
}

/// The sections whose rows are collected first: TO EVICT, RESERVATIONS, REFUSED, NODES.
fn write_collected(
    out: &mut dyn Write,
    evict: &[Vec<String>],
    reservations: &[Vec<String>],
    refused: &[Vec<String>],
    nodes: &[Vec<String>],
) -> io::Result<()> {
    collected(
        out,
        "TO EVICT (holding CPUs their node reserves)",
        &PENDING_HEADER,
        evict,
    )?;
    collected(
        out,
        "RESERVATIONS",
        &[
            "NAME",
            "PHASE",
            "NODE",
            "ALLOCATABLE",
            "ALLOCATED",
            "EXPIRES",
            "OWNERS",
            "WHY",
        ],
        reservations,
    )?;
    collected(
        out,
        "REFUSED (ignored as if absent)",
        &["KIND", "NAME", "WHY"],
        refused,
    )?;
    collected(
        out,
        "NODES (USED: requested by pods; RESERVED: held by reservations for owners, not yet allocated)",
        &[
            "NAME",
            "CPU USED",
            "CPU RESERVED",
            "CPU FREE",
            "MEMORY USED",
            "MEMORY RESERVED",
            "MEMORY FREE",
            "PODS",
        ],
        nodes,
    )
}
