//! What `berth simulate` prints: the final cluster as one `v1` `List` (`-o json`, `-o yaml`),
//! or a summary for people (`-o table`, the default).
//!
//! Output is a pure function of the final state, with objects sorted by kind, namespace and
//! name and map keys sorted, so equal runs print equal bytes.

use std::fmt::Write as _;
use std::str::FromStr;

use serde_json::{json, Value};

use berth_api::quantity::format_resource;
use berth_api::reservation::{condition, Reservation, ReservationPhase};
use berth_core::resources::ResourceId;
use berth_core::time::rfc3339;
use berth_core::{Kind, Object};

use crate::sim::{allocated_reservation, pod_scheduled_message, Simulation};

/// `-o`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Format {
    /// A human summary.
    #[default]
    Table,
    /// The final state as a `v1` `List`, pretty JSON.
    Json,
    /// The final state as a `v1` `List`, YAML.
    Yaml,
}

impl FromStr for Format {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "table" => Ok(Self::Table),
            "json" => Ok(Self::Json),
            "yaml" => Ok(Self::Yaml),
            other => Err(format!(
                "unknown output format {other:?}; want table, json or yaml"
            )),
        }
    }
}

/// The final state could not be rendered (a serializer failure; not expected).
#[derive(Debug, thiserror::Error)]
pub enum OutputError {
    /// JSON serialization failed.
    #[error("cannot render the cluster as JSON: {0}")]
    Json(#[from] serde_json::Error),
    /// YAML serialization failed.
    #[error("cannot render the cluster as YAML: {0}")]
    Yaml(#[from] serde_yaml_ng::Error),
}

/// Renders the simulation's final state.
pub fn render(sim: &Simulation, format: Format) -> Result<String, OutputError> {
    match format {
        Format::Table => Ok(table(sim)),
        Format::Json => {
            let mut s = serde_json::to_string_pretty(&list(sim)?)?;
            s.push('\n');
            Ok(s)
        }
        Format::Yaml => Ok(serde_yaml_ng::to_string(&list(sim)?)?),
    }
}

/// Every object of the simulated cluster as a `v1` `List`, sorted by kind, namespace, name.
pub fn list(sim: &Simulation) -> Result<Value, serde_json::Error> {
    let store = sim.store();
    let mut items: Vec<(&str, String, String, Value)> = Vec::with_capacity(store.len());
    for obj in store.objects() {
        let key = obj.key();
        let value = match obj {
            Object::Pod(o) => serde_json::to_value(&**o)?,
            Object::Node(o) => serde_json::to_value(&**o)?,
            Object::Reservation(o) => serde_json::to_value(&**o)?,
            Object::NodeResourceTopology(o) => serde_json::to_value(&**o)?,
            Object::PersistentVolumeClaim(o) => serde_json::to_value(&**o)?,
            Object::CsiNode(o) => serde_json::to_value(&**o)?,
            Object::PriorityClass(o) => serde_json::to_value(&**o)?,
            Object::PodDisruptionBudget(o) => serde_json::to_value(&**o)?,
            Object::Namespace(o) => serde_json::to_value(&**o)?,
            Object::PersistentVolume(o) => serde_json::to_value(&**o)?,
            Object::StorageClass(o) => serde_json::to_value(&**o)?,
        };
        items.push((
            key.kind.as_str(),
            key.namespace.to_string(),
            key.name.to_string(),
            value,
        ));
    }
    for e in store.events() {
        items.push((
            "Event",
            e.metadata.namespace.clone().unwrap_or_default(),
            e.metadata.name.clone().unwrap_or_default(),
            serde_json::to_value(e)?,
        ));
    }
    items.sort_by(|a, b| (a.0, &a.1, &a.2).cmp(&(b.0, &b.1, &b.2)));
    let items: Vec<Value> = items.into_iter().map(|(.., v)| v).collect();
    Ok(json!({
        "apiVersion": "v1",
        "kind": "List",
        "items": items,
        "metadata": {},
    }))
}

/// Left-aligned columns separated by three spaces, like `kubectl get`.
fn columns(out: &mut String, header: &[&str], rows: &[Vec<String>]) {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut line = |cells: &mut dyn Iterator<Item = &str>| {
        let mut s = String::new();
        for (i, (cell, w)) in cells.zip(&widths).enumerate() {
            if i + 1 == header.len() {
                s.push_str(cell);
            } else {
                let _ = write!(s, "{cell:<w$}   ");
            }
        }
        out.push_str(s.trim_end());
        out.push('\n');
    };
    line(&mut header.iter().copied());
    for row in rows {
        line(&mut row.iter().map(String::as_str));
    }
}

/// `part` as a whole percentage of `total` (rounded down), `-` when there is no total.
/// Computed in 128 bits: memory in bytes times 100 overflows 64 bits past 80 PiB.
fn percent(part: i64, total: i64) -> String {
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

/// The human summary: placements, unschedulable pods and why, reservations (what they hold,
/// what their owners took, when they expire, why they failed), and per node what pods use,
/// what reservations hold for their owners, and what is free.
pub fn table(sim: &Simulation) -> String {
    let store = sim.store();
    let mut out = String::new();
    let mut placed = Vec::new();
    let mut pending = Vec::new();
    for obj in store.of_kind(Kind::Pod) {
        let Object::Pod(p) = obj else { continue };
        let ns = p.metadata.namespace.clone().unwrap_or_default();
        let name = p.metadata.name.clone().unwrap_or_default();
        let phase = p
            .status
            .as_ref()
            .and_then(|s| s.phase.clone())
            .unwrap_or_default();
        match p.spec.as_ref().and_then(|s| s.node_name.clone()) {
            Some(node) if !node.is_empty() => placed.push(vec![
                ns,
                name,
                node,
                allocated_reservation(p).unwrap_or_else(|| "-".into()),
                phase,
            ]),
            _ => pending.push(vec![
                ns,
                name,
                pod_scheduled_message(p).unwrap_or_else(|| "(not tried yet)".into()),
            ]),
        }
    }
    let cluster = &sim.core().cluster;
    let reservations: Vec<Vec<String>> = store
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
            let expires = match cluster.reservations.by_name(&name) {
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
        .collect();
    let nodes: Vec<Vec<String>> = store
        .of_kind(Kind::Node)
        .filter_map(|o| {
            let name = o.meta().name.clone().unwrap_or_default();
            let info = cluster.node_by_name(&name)?;
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
        .collect();
    // Seed 004's eviction list: pods holding CPUs their node now reserves.
    let mut evict: Vec<Vec<String>> = store
        .events()
        .filter(|e| e.reason.as_deref() == Some(berth_core::scheduler::EVICT_RESERVED_CPUS))
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
    let counts = format!(
        "{} ({} placed, {} unschedulable), {}, {}.",
        plural(placed.len() + pending.len(), "pod"),
        placed.len(),
        pending.len(),
        plural(reservations.len(), "reservation"),
        plural(nodes.len(), "node")
    );
    if sim.now() > sim.start() {
        let _ = writeln!(
            out,
            "Simulated {} to {}: {counts}",
            rfc3339(sim.start()),
            rfc3339(sim.now())
        );
    } else {
        let _ = writeln!(out, "{counts}");
    }
    if !placed.is_empty() {
        out.push_str("\nPLACEMENTS\n");
        columns(
            &mut out,
            &["NAMESPACE", "POD", "NODE", "RESERVATION", "PHASE"],
            &placed,
        );
    }
    if !pending.is_empty() {
        out.push_str("\nUNSCHEDULABLE\n");
        columns(&mut out, &["NAMESPACE", "POD", "WHY"], &pending);
    }
    if !evict.is_empty() {
        out.push_str("\nTO EVICT (holding CPUs their node reserves)\n");
        columns(&mut out, &["NAMESPACE", "POD", "WHY"], &evict);
    }
    if !reservations.is_empty() {
        out.push_str("\nRESERVATIONS\n");
        columns(
            &mut out,
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
            &reservations,
        );
    }
    if !nodes.is_empty() {
        out.push_str("\nNODES (USED: requested by pods; RESERVED: held by reservations for owners, not yet allocated)\n");
        columns(
            &mut out,
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
            &nodes,
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::input::parse_str;
    use berth_core::Config;

    fn sim(text: &str) -> Simulation {
        let input = parse_str("t.yaml", text).unwrap();
        Simulation::run(vec![], Config::default(), &input)
    }

    const TEXT: &str = "apiVersion: v1\nkind: Pod\nmetadata: {name: b}\nspec: {containers: [{name: c, resources: {requests: {cpu: 1}}}]}\n---\napiVersion: v1\nkind: Node\nmetadata: {name: n1}\nstatus: {allocatable: {cpu: 2, memory: 2Gi}}\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: a, namespace: z}\nspec: {containers: [{name: c, resources: {requests: {cpu: 5}}}]}\n";

    #[test]
    fn the_list_is_sorted_by_kind_namespace_and_name() {
        let v = list(&sim(TEXT)).unwrap();
        let got: Vec<(String, String)> = v["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| {
                (
                    i["kind"].as_str().unwrap().to_string(),
                    i["metadata"]["name"].as_str().unwrap().to_string(),
                )
            })
            .collect();
        let kinds: Vec<&str> = got.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(kinds, ["Event", "Event", "Node", "Pod", "Pod"]);
        assert_eq!(got[3].1, "b", "namespace default sorts before z");
        assert_eq!(got[4].1, "a");
        assert_eq!(v["apiVersion"], "v1");
        assert_eq!(v["kind"], "List");
    }

    #[test]
    fn json_and_yaml_are_byte_identical_across_runs() {
        for f in [Format::Json, Format::Yaml, Format::Table] {
            let a = render(&sim(TEXT), f).unwrap();
            let b = render(&sim(TEXT), f).unwrap();
            assert_eq!(a, b);
        }
    }

    #[test]
    fn the_table_shows_placements_failures_and_use() {
        let t = table(&sim(TEXT));
        assert!(t.contains("PLACEMENTS"), "{t}");
        assert!(t.contains("default     b     n1"), "{t}");
        assert!(
            t.contains("0/1 nodes are available: 1 Insufficient cpu."),
            "{t}"
        );
        assert!(t.contains("1/2 (50%)"), "{t}");
    }

    /// The cells of the table row that starts with `first`, split on runs of 3+ spaces.
    fn row(table: &str, first: &str) -> Vec<String> {
        let line = table
            .lines()
            .find(|l| l.split("   ").next() == Some(first))
            .unwrap_or_else(|| panic!("no row {first} in\n{table}"));
        line.split("   ")
            .map(str::trim)
            .filter(|c| !c.is_empty())
            .map(str::to_string)
            .collect()
    }

    const RESERVED_NODE: &str = "apiVersion: v1\nkind: Node\nmetadata: {name: n1}\nstatus: {allocatable: {cpu: 4, memory: 8Gi, pods: 10}}\n---\napiVersion: scheduling.koordinator.sh/v1alpha1\nkind: Reservation\nmetadata: {name: r1}\nspec:\n  allocateOnce: false\n  template: {spec: {containers: [{name: c, resources: {requests: {cpu: 4, memory: 2Gi}}}]}}\n  owners: [{labelSelector: {matchLabels: {app: web}}}]\n---\n";

    #[test]
    fn a_node_held_by_reservations_shows_it_as_reserved_not_free() {
        let t = table(&sim(RESERVED_NODE));
        assert_eq!(
            row(&t, "n1"),
            [
                "n1",
                "0/4 (0%)",
                "4/4 (100%)",
                "0/4 (0%)",
                "0/8Gi (0%)",
                "2Gi/8Gi (25%)",
                "6Gi/8Gi (75%)",
                "0/10"
            ],
            "{t}"
        );
        // Owners take from the hold: it becomes use, and only the rest stays reserved.
        let owner = |name: &str| {
            format!("apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, labels: {{app: web}}}}\nspec: {{containers: [{{name: c, resources: {{requests: {{cpu: 1, memory: 1Gi}}}}}}]}}\n---\n")
        };
        let t = table(&sim(&format!(
            "{RESERVED_NODE}{}{}",
            owner("web-b"),
            owner("web-a")
        )));
        assert_eq!(
            row(&t, "n1"),
            [
                "n1",
                "2/4 (50%)",
                "2/4 (50%)",
                "0/4 (0%)",
                "2Gi/8Gi (25%)",
                "0/8Gi (0%)",
                "6Gi/8Gi (75%)",
                "2/10"
            ],
            "{t}"
        );
        assert_eq!(
            row(&t, "r1"),
            [
                "r1",
                "Available",
                "n1",
                "cpu=4,memory=2Gi",
                "cpu=2,memory=2Gi",
                "2024-01-02T00:00:00Z",
                "default/web-a,default/web-b",
                "-"
            ],
            "owners sorted: {t}"
        );
    }

    #[test]
    fn a_failed_reservation_says_why_and_a_ttl_of_zero_never_expires() {
        let text = format!("{RESERVED_NODE}apiVersion: scheduling.koordinator.sh/v1alpha1\nkind: Reservation\nmetadata: {{name: r2}}\nspec:\n  ttl: \"0\"\n  template: {{spec: {{containers: [{{name: c, resources: {{requests: {{cpu: 1}}}}}}]}}}}\n  owners: [{{object: {{name: p}}}}]\n---\napiVersion: sim.berth.dev/v1alpha1\nkind: Scenario\nmetadata: {{name: s}}\nspec:\n  steps:\n  - delete: [{{kind: Node, name: n1}}]\n  - advance: 1s\n");
        let t = table(&sim(&text));
        let r1 = row(&t, "r1");
        assert_eq!(&r1[..2], ["r1", "Failed"], "{t}");
        assert!(r1[7].starts_with("Expired: "), "{t}");
        let r2 = row(&t, "r2");
        assert_eq!(r2[5], "never", "{t}");
    }

    #[test]
    fn counts_are_pluralised_and_the_time_line_needs_time_to_pass() {
        let one = "apiVersion: v1\nkind: Node\nmetadata: {name: n1}\nstatus: {allocatable: {cpu: 2}}\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: c}]}\n---\n";
        let t = table(&sim(one));
        assert_eq!(
            t.lines().next(),
            Some("1 pod (1 placed, 0 unschedulable), 0 reservations, 1 node."),
            "{t}"
        );
        let t = table(&sim(&format!("{one}apiVersion: sim.berth.dev/v1alpha1\nkind: Scenario\nmetadata: {{name: s}}\nspec:\n  steps:\n  - advance: 90s\n")));
        assert_eq!(
            t.lines().next(),
            Some("Simulated 2024-01-01T00:00:00Z to 2024-01-01T00:01:30Z: 1 pod (1 placed, 0 unschedulable), 0 reservations, 1 node."),
            "{t}"
        );
    }

    #[test]
    fn percentages_hold_at_any_size() {
        let pib: i64 = 1 << 50;
        assert_eq!(percent(90 * pib, 100 * pib), "90%");
        assert_eq!(percent(i64::MAX, i64::MAX), "100%");
        assert_eq!(percent(1, 3), "33%");
        assert_eq!(percent(5, 0), "-");
        let t = table(&sim("apiVersion: v1\nkind: Node\nmetadata: {name: big}\nstatus: {allocatable: {cpu: 4, memory: 100Pi}}\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: c, resources: {requests: {memory: 90Pi}}}]}\n"));
        let big = row(&t, "big");
        assert_eq!(big[4], "90Pi/100Pi (90%)", "{t}");
        assert_eq!(big[6], "10Pi/100Pi (10%)", "{t}");
    }

    #[test]
    fn formats_parse_from_their_names() {
        assert_eq!("yaml".parse::<Format>(), Ok(Format::Yaml));
        assert!("xml".parse::<Format>().is_err());
    }
}
