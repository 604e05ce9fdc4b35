//! What `berth simulate` prints: the final cluster as one `v1` `List` (`-o json`, `-o yaml`),
//! or a summary for people (`-o table`, the default).
//!
//! Output is a pure function of the final state, with objects sorted by kind, namespace and
//! name and map keys sorted, so equal runs print equal bytes. [`write`] streams it to the
//! output as it is produced ([`json`] for the JSON, [`list`] for the YAML, [`table`] for
//! the summary),
//! so printing a large cluster holds no second copy of it in memory.

mod json;
mod list;
mod meta;
mod sorted;
mod table;

use std::io::{self, BufWriter, Write};
use std::str::FromStr;

use serde_json::{json, Value};

use berth_core::Object;

use crate::sim::Simulation;

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

/// The final state could not be rendered or written.
#[derive(Debug, thiserror::Error)]
pub enum OutputError {
    /// JSON serialization failed (not expected).
    #[error("cannot render the cluster as JSON: {0}")]
    Json(#[from] serde_json::Error),
    /// YAML serialization failed (not expected).
    #[error("cannot render the cluster as YAML: {0}")]
    Yaml(#[from] serde_yaml_ng::Error),
    /// The output could not be written (a closed pipe, a full disk).
    #[error("writing standard output: {0}")]
    Write(#[source] io::Error),
}

impl OutputError {
    /// Whether the reader went away (`berth simulate ... | head`): not worth a message.
    pub fn is_broken_pipe(&self) -> bool {
        matches!(self, OutputError::Write(e) if e.kind() == io::ErrorKind::BrokenPipe)
    }
}

/// Renders the simulation's final state as text (what [`write`] writes).
pub fn render(sim: &Simulation, format: Format) -> Result<String, OutputError> {
    let mut out = Vec::new();
    write(sim, format, &mut out)?;
    // Every format writes UTF-8 (serde_json and serde_yaml_ng write `str`s, the table
    // `str`s); a stray byte would be a bug, shown rather than hidden.
    Ok(String::from_utf8(out)
        .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned()))
}

/// Writes the simulation's final state to `out` as it is produced, buffered. On an error
/// part of the output may have been written.
pub fn write(sim: &Simulation, format: Format, out: &mut dyn Write) -> Result<(), OutputError> {
    let mut w = BufWriter::with_capacity(
        1 << 16,
        Remembering {
            inner: out,
            error: None,
        },
    );
    let result = match format {
        Format::Table => table::write(sim, &mut w).map_err(OutputError::Write),
        Format::Json => json::write(sim.store(), &mut w)
            .and_then(|()| w.write_all(b"\n").map_err(OutputError::Write)),
        Format::Yaml => {
            serde_yaml_ng::to_writer(&mut w, &list::List(sim.store())).map_err(OutputError::from)
        }
    };
    let result = result.and_then(|()| w.flush().map_err(OutputError::Write));
    // A serializer that failed because the writer did says so in its own words; the
    // writer's error is the one to report (and to recognise a closed pipe by).
    match (result, w.get_mut().error.take()) {
        (Err(_), Some(e)) => Err(OutputError::Write(e)),
        (result, _) => result,
    }
}

/// A writer that keeps the first error of the one it wraps.
struct Remembering<'a> {
    inner: &'a mut dyn Write,
    error: Option<io::Error>,
}

impl Remembering<'_> {
    fn keep(&mut self, e: io::Error) -> io::Error {
        let kind = e.kind();
        self.error.get_or_insert(e);
        io::Error::from(kind)
    }
}

impl Write for Remembering<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.inner.write(buf).map_err(|e| self.keep(e))
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush().map_err(|e| self.keep(e))
    }
}

/// Every object of the simulated cluster as a `v1` `List` tree, sorted by kind, namespace,
/// name: what `-o json` prints, for callers that want to look into it. It holds the whole
/// cluster a second time, which [`write`] does not; kept as built before output was
/// streamed, it is also what the tests hold the streamed bytes to.
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
            Object::CsiDriver(o) => serde_json::to_value(&**o)?,
            Object::CsiStorageCapacity(o) => serde_json::to_value(&**o)?,
            Object::Deployment(o) => serde_json::to_value(&**o)?,
            Object::ReplicaSet(o) => serde_json::to_value(&**o)?,
            Object::StatefulSet(o) => serde_json::to_value(&**o)?,
            Object::PodMigrationJob(o) => serde_json::to_value(&**o)?,
            Object::ResourceSlice(o) => serde_json::to_value(&**o)?,
            Object::DeviceClass(o) => serde_json::to_value(&**o)?,
            Object::ResourceClaim(o) => serde_json::to_value(&**o)?,
            Object::ResourceClaimTemplate(o) => serde_json::to_value(&**o)?,
            Object::PodGroup(o) => serde_json::to_value(&**o)?,
            Object::Workload(o) => serde_json::to_value(&**o)?,
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
            serde_json::to_value(&*e)?,
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

/// The human summary (what `-o table` writes).
pub fn table(sim: &Simulation) -> String {
    let mut out = Vec::new();
    // Writing to a `Vec` does not fail.
    let _ = table::write(sim, &mut out);
    String::from_utf8(out).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

#[cfg(test)]
mod tests {
    use super::table::percent;
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
    fn an_empty_cluster_prints_as_its_tree() {
        let s = sim("");
        let mut want = serde_json::to_string_pretty(&list(&s).unwrap()).unwrap();
        want.push('\n');
        assert_eq!(render(&s, Format::Json).unwrap(), want);
        assert!(want.contains("\"items\": [],"), "{want}");
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
    fn pods_of_other_schedulers_are_not_unschedulable_and_failed_pods_say_why() {
        let text = "apiVersion: v1\nkind: Node\nmetadata: {name: n1}\nstatus: {allocatable: {cpu: 2, memory: 2Gi}}\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: theirs}\nspec: {schedulerName: other, containers: [{name: c}]}\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: big}\nspec: {containers: [{name: c, resources: {requests: {cpu: 5}}}]}\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: rejected}\nspec: {nodeName: n1, containers: [{name: c}]}\nstatus: {phase: Failed, reason: TopologyAffinityError}\n";
        let t = table(&sim(text));
        assert!(
            t.starts_with("3 pods (1 placed, 1 unschedulable, 1 left to other schedulers), 0 reservations, 1 node.\n"),
            "{t}"
        );
        let unschedulable = t
            .split("\nUNSCHEDULABLE\n")
            .nth(1)
            .and_then(|rest| rest.split("\n\n").next())
            .unwrap_or_else(|| panic!("{t}"));
        assert!(!unschedulable.contains("theirs"), "{t}");
        assert!(!t.contains("(not tried yet)"), "{t}");
        assert!(
            t.contains("\nOTHER SCHEDULERS (not berth's to schedule)\n"),
            "{t}"
        );
        assert!(unschedulable.contains("big"), "{t}");
        let theirs = t.lines().find(|l| l.contains("theirs")).unwrap_or_default();
        assert!(theirs.trim_end().ends_with("other"), "{t}");
        let rejected = t
            .lines()
            .find(|l| l.contains("rejected"))
            .unwrap_or_default();
        assert!(
            rejected
                .trim_end()
                .ends_with("Failed (TopologyAffinityError)"),
            "{t}"
        );
        // Without such pods the counts read as before.
        assert!(table(&sim(TEXT))
            .starts_with("2 pods (1 placed, 1 unschedulable), 0 reservations, 1 node.\n"));
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

    /// A reader that goes away after `left` bytes, as `| head` does.
    struct ClosedPipe {
        left: usize,
    }

    impl Write for ClosedPipe {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            if self.left == 0 {
                return Err(io::ErrorKind::BrokenPipe.into());
            }
            let n = buf.len().min(self.left);
            self.left -= n;
            Ok(n)
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_closed_output_is_a_write_error_in_every_format_not_a_serializer_one() {
        let s = sim(TEXT);
        for f in [Format::Json, Format::Yaml, Format::Table] {
            let err = write(&s, f, &mut ClosedPipe { left: 10 }).expect_err("the pipe closed");
            assert!(err.is_broken_pipe(), "{f:?}: {err}");
        }
        let mut full = Vec::new();
        write(&s, Format::Json, &mut full).expect("a Vec takes everything");
        assert_eq!(full, render(&s, Format::Json).unwrap().into_bytes());
    }

    #[test]
    fn formats_parse_from_their_names() {
        assert_eq!("yaml".parse::<Format>(), Ok(Format::Yaml));
        assert!("xml".parse::<Format>().is_err());
    }
}
