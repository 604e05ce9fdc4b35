//! The NUMA burst benchmark ([`berth_sim::bench_numa`]) one mode at a time, with the
//! process's CPU time (so other jobs on a shared machine do not skew the comparison) and
//! the heap allocations made while it ran (a counting global allocator).
//!
//! `cargo run --release -p berth-sim --example numa_bench -- [cache|passthrough|lsr] [PODS [NODES [BURST]]]`
//!
//! A smaller case of the same shape (the cluster still ends full), e.g. `cache 4000 200 400`,
//! runs in a second, short enough for `valgrind --tool=callgrind --cache-sim=yes`.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};

use berth_sim::bench_numa::{format_outcome, run_mode, Params};

struct Counting;

static ALLOCS: AtomicU64 = AtomicU64::new(0);
static BYTES: AtomicU64 = AtomicU64::new(0);

// SAFETY: forwards to the system allocator unchanged; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        BYTES.fetch_add(layout.size() as u64, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        BYTES.fetch_add(new_size as u64, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Nanoseconds this thread has been on a CPU.
fn cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mode = args.first().map_or("cache", String::as_str);
    let mut p = Params::default();
    if let Some(n) = args.get(1).and_then(|s| s.parse().ok()) {
        p.pods = n;
    }
    if let Some(n) = args.get(2).and_then(|s| s.parse().ok()) {
        p.nodes = n;
    }
    if let Some(n) = args.get(3).and_then(|s| s.parse().ok()) {
        p.burst = n;
    }
    if mode == "lsr" {
        p.lsr_every = 4;
    }
    let cpu = cpu_ns();
    let allocs = ALLOCS.load(Ordering::Relaxed);
    let bytes = BYTES.load(Ordering::Relaxed);
    let o = run_mode(&p, mode != "passthrough");
    let cpu = (cpu_ns() - cpu) as f64 / 1e9;
    let allocs = ALLOCS.load(Ordering::Relaxed) - allocs;
    let bytes = BYTES.load(Ordering::Relaxed) - bytes;
    println!("{}", format_outcome(&o));
    println!(
        "cpu {cpu:.2}s (whole run)  cycles {:.2}s wall  allocations {allocs} ({:.1}/cycle, {:.0} MB)",
        o.cycle_time.as_secs_f64(),
        allocs as f64 / o.cycles.max(1) as f64,
        bytes as f64 / 1e6
    );
}
