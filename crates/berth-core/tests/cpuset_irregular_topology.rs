//! The CPU allocator on topologies only outside input produces: a node agent (or anyone who
//! may write a NodeResourceTopology) can publish any `node.koordinator.sh/cpu-topology` the
//! annotation's checks allow, up to `MAX_CPU_LIST_CPUS` CPUs with cores of any thread count.
//! Found while writing the `cpuset` fuzz target (issue 15): ordering the free CPUs "one
//! thread of every core before a second thread of any" rescanned the whole remaining list
//! once per thread of the largest core, so a core of 32,768 threads made one Filter call on
//! that node take minutes, for every exclusive-CPU pod, even one asking for a single CPU.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use berth_api::annotations::{CpuBindPolicy, CpuInfo, CpuTopology, MAX_CPU_LIST_CPUS};
use berth_core::cpuset::{take_cpus, CpuLayout};

/// Core 0 has 32,768 threads (ids 0..32,768); cores 1 to 16,384 have two each (ids from
/// 32,768 on): 65,536 CPUs in all, the most the annotation allows, and no core "whole" as
/// the allocator counts it (65,536 CPUs / 16,385 cores = 3 threads a core), so every request
/// ends in the last resort, which orders every free CPU.
fn lopsided() -> CpuLayout {
    let big = 32_768u32;
    let mut detail: Vec<CpuInfo> = (0..big)
        .map(|id| CpuInfo {
            id,
            core: 0,
            socket: 0,
            node: 0,
        })
        .collect();
    detail.extend((0..big).map(|i| CpuInfo {
        id: big + i,
        core: 1 + i / 2,
        socket: 0,
        node: 0,
    }));
    assert_eq!(detail.len() as u64, MAX_CPU_LIST_CPUS);
    let text = CpuTopology { detail }.to_value();
    let topology = CpuTopology::parse(&text).expect("the annotation accepts it");
    CpuLayout::new(&topology).expect("not empty")
}

/// Generous: the call takes well under a second in a debug build once linear; before the
/// fix it took minutes. Only a guard against the hang, not a speed claim.
const HANG_GUARD: Duration = Duration::from_secs(30);

#[test]
fn a_core_of_thirty_thousand_threads_does_not_hold_the_allocator() {
    let layout = lopsided();
    let all = layout.all();
    // A single CPU: the smallest cores come first (core 1: CPUs 32,768 and 32,769).
    let start = Instant::now();
    let got = take_cpus(&layout, &all, 1, CpuBindPolicy::FullPcpus).expect("enough CPUs");
    assert!(start.elapsed() < HANG_GUARD, "{:?}", start.elapsed());
    assert_eq!(got, BTreeSet::from([32_768]));
    // Wider than the small cores: one thread of every core first, then second threads, and
    // core 0's many threads last.
    let start = Instant::now();
    let got = take_cpus(&layout, &all, 40_000, CpuBindPolicy::SpreadByPcpus).expect("enough");
    assert!(start.elapsed() < HANG_GUARD, "{:?}", start.elapsed());
    // 16,385 first threads (0, 32,768, 32,770...), 16,385 second ones (1, 32,769...),
    // then core 0's threads 2 to 7,231.
    let want: BTreeSet<u32> = (0..7_232).chain(32_768..65_536).collect();
    assert_eq!(got.len(), 40_000);
    assert_eq!(got, want);
}
