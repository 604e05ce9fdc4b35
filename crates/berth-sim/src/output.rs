//! What `berth simulate` prints: the final cluster as one `v1` `List` (`-o json`, `-o yaml`),
//! or a summary for people (`-o table`, the default).
//!
//! Output is a pure function of the final state, with objects sorted by kind, namespace and
//! name and map keys sorted, so equal runs print equal bytes.

use std::fmt::Write as _;
use std::str::FromStr;

use serde_json::{json, Value};

use berth_api::quantity::format_resource;
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

fn percent(used: i64, total: i64) -> String {
    if total <= 0 {
        return "-".to_string();
    }
    format!("{}%", used.saturating_mul(100) / total)
}

/// The human summary: placements, unschedulable pods and why, reservations, node use.
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
    let reservations: Vec<Vec<String>> = store
        .of_kind(Kind::Reservation)
        .filter_map(|o| match o {
            Object::Reservation(r) => Some(r),
            _ => None,
        })
        .map(|r| {
            let status = r.status.as_ref();
            let owners: Vec<String> = status
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
            vec![
                r.metadata.name.clone().unwrap_or_default(),
                r.phase().as_str().to_string(),
                status
                    .and_then(|s| s.node_name.clone())
                    .unwrap_or_else(|| "-".into()),
                if owners.is_empty() {
                    "-".into()
                } else {
                    owners.join(",")
                },
            ]
        })
        .collect();
    let cluster = &sim.core().cluster;
    let nodes: Vec<Vec<String>> = store
        .of_kind(Kind::Node)
        .filter_map(|o| {
            let name = o.meta().name.clone().unwrap_or_default();
            let info = cluster.node_by_name(&name)?;
            let (cpu, cpu_all) = (
                info.requested[ResourceId::CPU],
                info.allocatable[ResourceId::CPU],
            );
            let (mem, mem_all) = (
                info.requested[ResourceId::MEMORY],
                info.allocatable[ResourceId::MEMORY],
            );
            Some(vec![
                name,
                format!(
                    "{}/{} ({})",
                    format_resource("cpu", cpu),
                    format_resource("cpu", cpu_all),
                    percent(cpu, cpu_all)
                ),
                format!(
                    "{}/{} ({})",
                    format_resource("memory", mem),
                    format_resource("memory", mem_all),
                    percent(mem, mem_all)
                ),
                format!("{}/{}", info.pods.len(), info.allowed_pods),
            ])
        })
        .collect();
    let _ = writeln!(
        out,
        "Simulated {} to {}: {} pods ({} placed, {} unschedulable), {} reservations, {} nodes.",
        rfc3339(sim.start()),
        rfc3339(sim.now()),
        placed.len() + pending.len(),
        placed.len(),
        pending.len(),
        reservations.len(),
        nodes.len()
    );
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
    if !reservations.is_empty() {
        out.push_str("\nRESERVATIONS\n");
        columns(
            &mut out,
            &["NAME", "PHASE", "NODE", "OWNERS"],
            &reservations,
        );
    }
    if !nodes.is_empty() {
        out.push_str("\nNODES\n");
        columns(
            &mut out,
            &["NAME", "CPU REQUESTED", "MEMORY REQUESTED", "PODS"],
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

    #[test]
    fn formats_parse_from_their_names() {
        assert_eq!("yaml".parse::<Format>(), Ok(Format::Yaml));
        assert!("xml".parse::<Format>().is_err());
    }
}
