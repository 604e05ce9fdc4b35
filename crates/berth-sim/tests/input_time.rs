//! No input of at most 1 MB holds `berth simulate` for long before it is accepted or
//! rejected: the deepest and widest shapes the limits of `berth_api::limits` allow (nesting
//! at the depth limit, aliases just under the expansion limit, long flow sequences, huge
//! numbers and strings, wide mappings, many documents, many nodes and pods) are each read
//! (`berth simulate -`'s reader: size limit, YAML limits, decode, strict field check, typed
//! decode) in time comparable to an ordinary file of the same size.
//!
//! The bound is relative, so that the test holds in a debug build on a shared 2-core CI
//! machine: each case may take at most [`FACTOR`] times as long as reading 1 MB of ordinary
//! nodes and pods, measured in the same process just before (plus [`SLACK`] for timer and
//! scheduling noise), in CPU time of the test's thread where Linux gives it (so that other
//! processes do not count), and a case over the bound is measured once more, with its
//! baseline, before the test fails. The shapes this guards against are superlinear: 100,000 nested
//! brackets (200 KB) took 20 seconds, 5,000 times an ordinary file of that size, and an
//! alias bomb of 50 KB never finished; a linear shape stays within a few times the baseline.
//! (Release-build times of every case, on the 2-core development machine, are in
//! `fuzz/README.md`: all under a tenth of a second.)
//!
//! A second test runs the inputs that grow once read (a node label standing for thousands
//! of CPUs, a CPU topology that makes every scheduling cycle order all of a node's CPUs) to
//! the end, against running the same baseline.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use berth_core::Config;
use berth_sim::{input, Simulation};

/// The size every case is built to, just under it.
const MB: usize = 1 << 20;

/// How many times the baseline a case may take. The heaviest linear case (aliases expanded
/// to nearly a million nodes, five times the baseline's) takes about 4 times the baseline;
/// a quadratic shape at 1 MB takes hundreds of times.
const FACTOR: u32 = 25;

/// Added to every bound: timer resolution and a descheduled thread on a busy machine.
const SLACK: Duration = Duration::from_millis(500);

/// Reads `text` as `berth simulate -` does; `Ok` with the number of objects, or the message.
fn read(text: &str) -> Result<usize, String> {
    let mut stdin = text.as_bytes();
    input::read_files(&["-".to_string()], &mut stdin)
        .map(|i| i.items.len() + usize::from(i.scenario.is_some()))
        .map_err(|e| e.to_string())
}

/// Time this thread has spent on a CPU, where Linux says (`/proc/thread-self/schedstat`, in
/// nanoseconds): unlike the wall clock, it does not count the time other processes of a busy
/// machine take.
fn cpu_time() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    let nanos: u64 = stat.split_whitespace().next()?.parse().ok()?;
    (nanos > 0).then(|| Duration::from_nanos(nanos))
}

/// How long reading `text` takes: CPU time where available, else wall-clock time.
fn timed(text: &str) -> (Duration, Result<usize, String>) {
    let (wall, cpu) = (Instant::now(), cpu_time());
    let result = read(text);
    let t = match (cpu, cpu_time()) {
        (Some(before), Some(after)) => after.saturating_sub(before),
        _ => wall.elapsed(),
    };
    (t, result)
}

/// `unit(i)` repeated after `head` while the text stays under 1 MB.
fn fill(head: &str, mut unit: impl FnMut(usize) -> String, tail: &str) -> String {
    let mut text = head.to_string();
    for i in 0.. {
        let u = unit(i);
        if text.len() + u.len() + tail.len() > MB {
            break;
        }
        text.push_str(&u);
    }
    text.push_str(tail);
    text
}

/// The baseline: 1 MB of ordinary nodes and pods, one small document each (accepted).
fn nodes_and_pods() -> String {
    fill(
        "",
        |i| {
            format!(
                "apiVersion: v1\nkind: Node\nmetadata: {{name: n{i}, labels: {{zone: z{z}}}}}\nstatus: {{allocatable: {{cpu: \"8\", memory: 16Gi, pods: \"110\"}}}}\n---\napiVersion: v1\nkind: Pod\nmetadata: {{name: p{i}, labels: {{app: a{z}}}}}\nspec: {{containers: [{{name: c, resources: {{requests: {{cpu: 100m, memory: 128Mi}}}}}}]}}\n---\n",
                z = i % 7
            )
        },
        "",
    )
}

/// What reading a case must end in: the case is built to reach that point, and a case
/// refused earlier (say, for a typo in it) would measure nothing.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Want {
    Accepted,
    /// Refused with a message containing this.
    Refused(&'static str),
}
use Want::{Accepted, Refused};

/// Every case: a name, its text, and what reading it ends in.
fn cases() -> Vec<(&'static str, String, Want)> {
    let depth = berth_api::limits::MAX_DEPTH;
    let mut cases = Vec::new();

    // Nesting past the limit: refused at the 65th bracket, whatever follows.
    cases.push((
        "a million open brackets",
        "[".repeat(MB),
        Refused("nested deeper than 64 levels"),
    ));
    cases.push((
        "a million open braces, keys between",
        "{a: ".repeat(MB / 4),
        Refused("nested deeper than 64 levels"),
    ));
    // Flow nesting at the limit (where the scanner is quadratic in depth), the innermost
    // sequence as wide as the size allows, repeated inside one document.
    cases.push((
        "flow nesting at the depth limit, widest innermost",
        {
            let open = "[".repeat(depth - 1);
            let close = "]".repeat(depth - 1);
            let inner = (MB - 2 * depth) / 2;
            format!("[{open}{}{close}]", vec!["1"; inner].join(","))
        },
        Refused("expected a Kubernetes object"),
    ));
    cases.push((
        "flow nesting at the depth limit, repeated",
        {
            let one = format!("{}1{}", "[".repeat(depth - 1), "]".repeat(depth - 1));
            fill("[", |_| format!("{one},"), "1]")
        },
        Refused("expected a Kubernetes object"),
    ));
    // Block nesting at the limit, repeated: a Node whose labels hold deep mappings.
    cases.push((
        "block nesting at the depth limit, repeated",
        fill(
            "apiVersion: v1\nkind: Node\nmetadata:\n  name: n\n  labels:\n",
            |i| {
                (0..depth - 2)
                    .map(|d| format!("{}k{i}:\n", " ".repeat(4 + 2 * d)))
                    .collect::<String>()
            },
            "",
        ),
        Refused("metadata.labels.k0: invalid type: map, expected a string"),
    ));
    // Aliases: expanding to just under the limit (accepted), and a bomb (refused).
    cases.push((
        "aliases expanding to nearly a million nodes",
        {
            let labels = (0..96)
                .map(|i| format!("k{i}: v"))
                .collect::<Vec<_>>()
                .join(", ");
            let mut text = format!("apiVersion: v1\nkind: List\nitems:\n- &n {{apiVersion: v1, kind: Node, metadata: {{name: n0, labels: &l {{{labels}}}}}}}\n");
            for i in 1..2_400 {
                let _ = writeln!(text, "- {{<<: *n, metadata: {{name: n{i}, labels: *l}}}}");
            }
            text
        },
        Accepted,
    ));
    cases.push((
        "an alias bomb",
        {
            let mut text = String::from("a: &a [1,1,1,1,1,1,1,1,1,1]\n");
            for level in 1..30 {
                let _ = writeln!(
                    text,
                    "l{level}: &l{level} [{}]",
                    vec![
                        format!(
                            "*{}",
                            if level == 1 {
                                "a".to_string()
                            } else {
                                format!("l{}", level - 1)
                            }
                        );
                        10
                    ]
                    .join(",")
                );
            }
            fill(&text, |i| format!("x{i}: *l29\n"), "")
        },
        Refused("aliases expand to more than"),
    ));
    // Long flow collections and many documents.
    cases.push((
        "one flow sequence of half a million scalars",
        fill("[", |_| "1,".to_string(), "1]"),
        Refused("expected a Kubernetes object"),
    ));
    cases.push((
        "one flow mapping of about ninety thousand labels",
        fill(
            "{apiVersion: v1, kind: Node, metadata: {name: n, labels: {",
            |i| format!("k{i}: v, "),
            "z: v}}}",
        ),
        Accepted,
    ));
    cases.push((
        "a quarter million empty documents",
        fill("", |_| "---\n".to_string(), ""),
        Accepted,
    ));
    cases.push((
        "a List of pods filling a megabyte, flow style",
        fill(
            "{apiVersion: v1, kind: List, items: [",
            |i| format!("{{apiVersion: v1, kind: Pod, metadata: {{name: p{i}}}, spec: {{containers: [{{name: c}}]}}}},"),
            "]}",
        ),
        Accepted,
    ));
    // Huge numbers and strings where the parsers read them.
    for (name, value, want) in [
        (
            "a quantity of a million digits",
            "9".repeat(MB - 200),
            Accepted,
        ),
        (
            "a quantity with a million-digit fraction",
            format!("1.{}", "1".repeat(MB - 200)),
            Accepted,
        ),
        (
            "a quantity with a huge exponent",
            format!("1e{}", "9".repeat(MB - 200)),
            Refused("quantities must match"),
        ),
    ] {
        let text = format!("apiVersion: v1\nkind: Node\nmetadata: {{name: n}}\nstatus: {{allocatable: {{cpu: \"{value}\"}}}}\n");
        cases.push((name, text, want));
        let text = format!("apiVersion: v1\nkind: Node\nmetadata: {{name: n}}\nstatus: {{allocatable: {{cpu: {value}}}}}\n");
        cases.push((name, text, want));
    }
    cases.push((
        "a ttl of a third of a million parts (1ns each)",
        fill(
            "apiVersion: scheduling.koordinator.sh/v1alpha1\nkind: Reservation\nmetadata: {name: r}\nspec:\n  template: {spec: {containers: [{name: c}]}}\n  owners: [{object: {name: p}}]\n  ttl: \"",
            |_| "1ns".to_string(),
            "\"\n",
        ),
        Accepted,
    ));
    cases.push((
        "an annotation of a megabyte",
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  annotations: {{scheduling.koordinator.sh/reservation-affinity: '{}'}}\nspec: {{containers: [{{name: c}}]}}\n",
            "[".repeat(MB - 200)
        ),
        Accepted,
    ));
    cases.push((
        "a node selector of about twenty thousand requirements",
        fill(
            "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers: [{name: c}]\n  affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: [{matchExpressions: [",
            |i| format!("{{key: k{i}, operator: In, values: [a, b]}},"),
            "{key: z, operator: Exists}]}]}}}\n",
        ),
        Accepted,
    ));
    cases.push((
        "a scenario of about thirty thousand steps",
        fill(
            "apiVersion: sim.berth.dev/v1alpha1\nkind: Scenario\nmetadata: {name: s}\nspec:\n  steps:\n",
            |i| {
                if i % 2 == 0 {
                    "  - advance: 1s\n".to_string()
                } else {
                    format!("  - delete: [{{kind: Pod, name: p{i}}}]\n")
                }
            },
            "",
        ),
        Accepted,
    ));
    cases
}

#[test]
fn every_input_of_at_most_a_megabyte_is_read_in_time_comparable_to_an_ordinary_one() {
    let baseline_text = nodes_and_pods();
    assert!(baseline_text.len() <= MB);
    let baseline = || {
        let (t, result) = timed(&baseline_text);
        assert!(result.is_ok(), "the baseline is accepted: {result:?}");
        t
    };
    let mut base = baseline();
    let mut report = format!("baseline (1 MB of nodes and pods): {base:?}\n");
    for (name, text, want) in cases() {
        assert!(text.len() <= MB, "{name}: {} bytes", text.len());
        let (mut t, result) = timed(&text);
        match (&result, want) {
            (Ok(_), Accepted) => {}
            (Err(e), Refused(part)) if e.contains(part) => {}
            (got, want) => panic!(
                "{name}: want {want:?}, got {:?}",
                got.as_ref()
                    .map_err(|e| e.chars().take(300).collect::<String>())
            ),
        }
        if t > base * FACTOR + SLACK {
            // Once more, with a fresh baseline, before calling it slow.
            base = baseline();
            t = timed(&text).0;
        }
        let _ = writeln!(report, "{name}: {t:?} ({} bytes)", text.len());
        assert!(
            t <= base * FACTOR + SLACK,
            "{name}: {t:?}, more than {FACTOR} times reading 1 MB of nodes and pods ({base:?})\n{report}"
        );
    }
    // `cargo test -- --nocapture` shows the times.
    println!("{report}");
}

/// Reads and runs `text` as `berth simulate` does; the finished simulation, or the message.
fn run(text: &str) -> Result<Simulation, String> {
    let input =
        input::read_files(&["-".to_string()], &mut text.as_bytes()).map_err(|e| e.to_string())?;
    Ok(Simulation::run(Vec::new(), Config::default(), &input))
}

/// How long reading and running `text` takes (CPU time where available).
fn timed_run(text: &str) -> (Duration, Result<Simulation, String>) {
    let (wall, cpu) = (Instant::now(), cpu_time());
    let result = run(text);
    let t = match (cpu, cpu_time()) {
        (Some(before), Some(after)) => after.saturating_sub(before),
        _ => wall.elapsed(),
    };
    (t, result)
}

/// What a finished run must show: the case reached the part it is about.
type Outcome = fn(&Simulation) -> Result<(), String>;

/// Inputs that grow once read (a label standing for thousands of CPUs, a topology that
/// makes each scheduling cycle sort every CPU), run to the end: what they grow into is
/// bounded too, so running one takes at most [`FACTOR`] times running the baseline.
fn run_cases() -> Vec<(&'static str, String, Outcome)> {
    let mut cases: Vec<(&'static str, String, Outcome)> = Vec::new();
    // 160 bytes declaring 4,096 CPUs: past `cpu_budget::MAX_TOTAL_CPUS` the agent publishes
    // nothing more (before the budget, about half an hour in a debug build).
    cases.push((
        "nodes declaring the largest CPU layout, filling a megabyte",
        fill(
            "",
            |i| format!("apiVersion: v1\nkind: Node\nmetadata: {{name: n{i}, labels: {{sim.berth.dev/cpu-layout: 1x4096x1}}}}\nstatus: {{allocatable: {{cpu: \"4096\", memory: 16Gi, pods: \"110\"}}}}\n---\n"),
            "",
        ),
        |sim| {
            let past = "would bring the CPUs the nodes declare to";
            let warned = sim.log().iter().filter(|l| l.contains(past)).count();
            let published = sim.store().of_kind(berth_core::Kind::NodeResourceTopology).count();
            (warned > 5_000 && published == 16)
                .then_some(())
                .ok_or(format!("{warned} nodes warned about, {published} published"))
        },
    ));
    // A published topology as lopsided as 1 MB allows (one core holding half the CPUs, the
    // others two threads each), and exclusive-CPU pods of one CPU each: each Filter on the
    // node orders all its free CPUs (quadratic in the big core's threads before issue 15).
    cases.push((
        "a lopsided CPU topology and exclusive-CPU pods",
        lopsided_topology(),
        |sim| {
            let bound = sim.store().pods_on("n").count();
            (bound == LOPSIDED_PODS)
                .then_some(())
                .ok_or(format!("{bound} of {LOPSIDED_PODS} pods bound"))
        },
    ));
    cases
}

/// The exclusive-CPU pods of [`lopsided_topology`].
const LOPSIDED_PODS: usize = 100;

/// One node whose NRT's `cpu-topology` fills most of a megabyte, then LSE pods of 1 CPU.
fn lopsided_topology() -> String {
    let cpus = 23_000u32;
    let detail: Vec<String> = (0..cpus)
        .map(|id| {
            let core = if id < cpus / 2 {
                0
            } else {
                1 + (id - cpus / 2) / 2
            };
            format!(r#"{{"id":{id},"core":{core},"socket":0,"node":0}}"#)
        })
        .collect();
    let mut text = format!(
        "apiVersion: v1\nkind: Node\nmetadata: {{name: n}}\nstatus: {{allocatable: {{cpu: \"{cpus}\", memory: 64Gi, pods: \"110\"}}}}\n---\napiVersion: topology.node.k8s.io/v1alpha2\nkind: NodeResourceTopology\nmetadata:\n  name: n\n  annotations: {{node.koordinator.sh/cpu-topology: '{{\"detail\":[{}]}}'}}\nattributes: [{{name: topologyManagerPolicy, value: none}}]\nzones: [{{name: node-0, type: Node, resources: [{{name: cpu, capacity: {cpus}, allocatable: {cpus}, available: {cpus}}}]}}]\n",
        detail.join(",")
    );
    for i in 0..LOPSIDED_PODS {
        let _ = write!(text, "---\napiVersion: v1\nkind: Pod\nmetadata: {{name: p{i}, labels: {{koordinator.sh/qosClass: LSE}}}}\nspec: {{containers: [{{name: c, resources: {{requests: {{cpu: \"1\"}}, limits: {{cpu: \"1\"}}}}}}]}}\n");
    }
    text
}

#[test]
fn inputs_that_grow_once_read_run_in_time_comparable_to_an_ordinary_one() {
    let baseline_text = nodes_and_pods();
    let baseline = || {
        let (t, result) = timed_run(&baseline_text);
        assert!(result.is_ok(), "the baseline runs");
        t
    };
    let mut base = baseline();
    let mut report = format!("baseline run (1 MB of nodes and pods): {base:?}\n");
    for (name, text, outcome) in run_cases() {
        assert!(text.len() <= MB, "{name}: {} bytes", text.len());
        let (mut t, result) = timed_run(&text);
        let sim = result.unwrap_or_else(|e| panic!("{name}: refused: {e}"));
        if let Err(e) = outcome(&sim) {
            panic!(
                "{name}: {e}; log: {:?}",
                sim.log().iter().take(5).collect::<Vec<_>>()
            );
        }
        if t > base * FACTOR + SLACK {
            base = baseline();
            t = timed_run(&text).0;
        }
        let _ = writeln!(report, "{name}: {t:?} ({} bytes)", text.len());
        assert!(
            t <= base * FACTOR + SLACK,
            "{name}: {t:?}, more than {FACTOR} times running 1 MB of nodes and pods ({base:?})\n{report}"
        );
    }
    println!("{report}");
}
