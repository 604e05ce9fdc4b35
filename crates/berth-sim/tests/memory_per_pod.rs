//! Issue 12's memory bound for `berth simulate`: at most 10 KiB per pod, all told (the input
//! text, the decoded objects, the simulated cluster and the scheduler, the output), so that a
//! million pods on 50,000 nodes run in under 10 GiB.
//!
//! Counted, not timed: a global allocator in this test binary tracks the bytes live on the
//! heap and their peak, while the command's own code path (read, simulate, stream the output)
//! runs on a cluster with the million-pod run's shape (20 pods a node, node-default and
//! pod-default as `berth bench` shapes them). This file holds a single test, so no other
//! test's allocations are counted.

use std::alloc::{GlobalAlloc, Layout, System};
use std::io::{self, Write};
use std::sync::atomic::{AtomicUsize, Ordering};

use berth_sim::observe::{run_to, Extras};
use berth_sim::{Format, Options};

struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is passed on to the system allocator unchanged; the counters only
// observe sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let live = LIVE.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
        PEAK.fetch_max(live, Ordering::Relaxed);
        // SAFETY: the caller upholds `alloc`'s contract.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: the caller upholds `dealloc`'s contract.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if new_size >= layout.size() {
            let grown = new_size - layout.size();
            let live = LIVE.fetch_add(grown, Ordering::Relaxed) + grown;
            PEAK.fetch_max(live, Ordering::Relaxed);
        } else {
            LIVE.fetch_sub(layout.size() - new_size, Ordering::Relaxed);
        }
        // SAFETY: the caller upholds `realloc`'s contract.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

const NODES: usize = 250;
const PODS: usize = 5_000;
const BUDGET_PER_POD: usize = 10 * 1024;

/// The input: `NODES` nodes and `PODS` pods, as `examples/gen_cluster.rs` writes them.
fn cluster() -> String {
    let mut text = String::new();
    for i in 0..NODES {
        text.push_str(&format!(
            "apiVersion: v1\nkind: Node\nmetadata: {{name: node-{i}, labels: {{topology.kubernetes.io/zone: zone-{}}}}}\nstatus: {{allocatable: {{cpu: \"4\", memory: 32Gi, pods: \"110\"}}}}\n---\n",
            i % 10
        ));
    }
    for i in 0..PODS {
        text.push_str(&format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: pod-{i}}}\nspec: {{containers: [{{name: c, image: registry.k8s.io/pause:3.10, resources: {{requests: {{cpu: 100m, memory: 500Mi}}}}}}]}}\n---\n"
        ));
    }
    text
}

/// Standard output, counted and dropped: what a pipe to another process would take.
#[derive(Default)]
struct Sink {
    bytes: usize,
    lines: usize,
}

impl Write for Sink {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.bytes += buf.len();
        self.lines += buf.iter().filter(|b| **b == b'\n').count();
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Peak heap bytes above what was live before, per pod, for one run printing `format`.
fn peak_per_pod(format: Format) -> (usize, Sink) {
    let text = cluster();
    let options = Options {
        files: vec!["-".into()],
        output: format,
        ..Options::default()
    };
    let mut stdout = Sink::default();
    let before = LIVE.load(Ordering::Relaxed);
    PEAK.store(before, Ordering::Relaxed);
    // The command's own copy of the text (it reads standard input whole) is counted.
    let mut stdin = text.as_bytes();
    let out = run_to(&options, &Extras::default(), &mut stdin, &mut stdout);
    let peak = PEAK.load(Ordering::Relaxed);
    assert_eq!(out.code, 0, "{}", out.stderr);
    ((peak - before) / PODS, stdout)
}

#[test]
fn a_run_holds_at_most_10_kib_per_pod_in_every_output_format() {
    for format in [Format::Json, Format::Yaml, Format::Table] {
        let (per_pod, stdout) = peak_per_pod(format);
        eprintln!("{format:?}: peak {per_pod} bytes per pod");
        // The output was all written: every pod's name is there, and no run stopped short.
        match format {
            Format::Table => assert!(
                stdout.lines > PODS + NODES,
                "{format:?}: {} lines",
                stdout.lines
            ),
            _ => assert!(
                stdout.bytes > PODS * 1024,
                "{format:?}: {} bytes",
                stdout.bytes
            ),
        }
        assert!(
            per_pod <= BUDGET_PER_POD,
            "{format:?}: peak {per_pod} bytes per pod, over the {BUDGET_PER_POD} budget"
        );
    }
}
