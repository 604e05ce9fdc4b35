//! The allocator as it was written first, on `BTreeSet`s and maps built per call: the
//! reference model that [`super::accumulator`] (allocation-free, on the layout's positions
//! and reused buffers) must match CPU for CPU. Test-only.
//!
//! Koordinator's `takeCPUs` (NodeNUMAResource's `cpu_accumulator.go`), with its default
//! NUMA allocate strategy `MostAllocated`, no CPU exclusive policy and no CPU sharing.
//! Every choice is deterministic: ties are broken by id, never by map order.

use std::collections::BTreeMap;

use berth_api::annotations::CpuBindPolicy;

use super::topology::CpuLayout;

/// The reference model's set of CPU ids.
pub type CpuSet = std::collections::BTreeSet<u32>;

/// Picks `n` CPUs out of `available` (CPUs of `layout` nobody holds) under `policy`
/// (`Default` reads as `FullPCPUs`). `None` when `available` has fewer than `n`.
pub fn take_cpus(
    layout: &CpuLayout,
    available: &CpuSet,
    n: usize,
    policy: CpuBindPolicy,
) -> Option<CpuSet> {
    let mut acc = Acc {
        layout,
        free: available
            .iter()
            .copied()
            .filter(|c| layout.contains(*c))
            .collect(),
        needed: n,
        result: CpuSet::new(),
    };
    if acc.needed == 0 {
        return Some(acc.result);
    }
    if acc.needed > acc.free.len() {
        return None;
    }
    let full = policy != CpuBindPolicy::SpreadByPcpus;
    let per_core = layout.cpus_per_core();
    if (full || per_core == 1) && take_whole_cores(&mut acc, per_core) {
        return Some(acc.result);
    }
    if !full && take_spread_within_one(&mut acc) {
        return Some(acc.result);
    }
    for cpu in spread(layout, &acc.free_cpus_near_result()) {
        acc.take(&[cpu]);
        if acc.needed == 0 {
            return Some(acc.result);
        }
    }
    None
}

/// Whole free cores: within one NUMA node if they fit, else one socket, else whole
/// sockets' worth from the sockets with the most, then core by core from the fewest.
/// Returns whether `acc` has what it needs.
fn take_whole_cores(acc: &mut Acc<'_>, per_core: usize) -> bool {
    let layout = acc.layout;
    if acc.needed <= layout.cpus_per_node() {
        if let Some(cpus) = acc
            .free_cores_by(|p| p.node, true)
            .into_iter()
            .find(|c| c.len() >= acc.needed)
        {
            acc.take(&cpus[..acc.needed]);
            return true;
        }
    }
    if acc.needed <= layout.cpus_per_socket() {
        if let Some(cpus) = acc
            .free_cores_by(|p| p.socket, false)
            .into_iter()
            .find(|c| c.len() >= acc.needed)
        {
            acc.take(&cpus[..acc.needed]);
            return true;
        }
    }
    // Wider than a socket, or every socket partly used: whole sockets' worth of free
    // cores from the sockets with the most, then core by core from the fewest.
    let mut sockets = acc.free_cores_by(|p| p.socket, false);
    sockets.sort_by_key(|c| std::cmp::Reverse(c.len()));
    let mut unsatisfied = Vec::new();
    for cpus in sockets {
        if acc.needed < cpus.len() {
            unsatisfied.push(cpus);
        } else {
            acc.take(&cpus);
            if acc.needed == 0 {
                return true;
            }
        }
    }
    if acc.needed >= per_core {
        unsatisfied.sort_by_key(|c| c.len());
        'sockets: for cpus in unsatisfied {
            for chunk in cpus.chunks(per_core) {
                acc.take(chunk);
                if acc.needed == 0 {
                    return true;
                }
                if acc.needed < per_core {
                    break 'sockets;
                }
            }
        }
    }
    false
}

/// `SpreadByPcpus`: CPUs spread across cores within one NUMA node if they fit (one per
/// core first), else within one socket. Returns whether `acc` has what it needs.
fn take_spread_within_one(acc: &mut Acc<'_>) -> bool {
    let layout = acc.layout;
    for one_per_core in [true, false] {
        if acc.needed <= layout.cpus_per_node() {
            let groups = acc.free_cpus_by(|p| p.node, one_per_core);
            if let Some(cpus) = groups.into_iter().find(|c| c.len() >= acc.needed) {
                let cpus = spread(layout, &cpus);
                acc.take(&cpus[..acc.needed]);
                return true;
            }
        }
    }
    for one_per_core in [true, false] {
        if acc.needed <= layout.cpus_per_socket() {
            let groups = acc.free_cpus_by(|p| p.socket, one_per_core);
            if let Some(cpus) = groups.into_iter().find(|c| c.len() >= acc.needed) {
                let cpus = spread(layout, &cpus);
                acc.take(&cpus[..acc.needed]);
                return true;
            }
        }
    }
    false
}

struct Acc<'a> {
    layout: &'a CpuLayout,
    free: CpuSet,
    needed: usize,
    result: CpuSet,
}

type Key = fn(&super::topology::CpuPlace) -> u32;

impl Acc<'_> {
    fn take(&mut self, cpus: &[u32]) {
        for c in cpus {
            if self.free.remove(c) {
                self.result.insert(*c);
                self.needed = self.needed.saturating_sub(1);
            }
        }
    }

    /// Free CPUs grouped by physical core, ascending.
    fn cores(&self) -> BTreeMap<u32, Vec<u32>> {
        let mut cores: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
        for &c in &self.free {
            if let Some(p) = self.layout.place(c) {
                cores.entry(p.core).or_default().push(c);
            }
        }
        cores
    }

    fn free_per(&self, key: Key) -> BTreeMap<u32, usize> {
        let mut out = BTreeMap::new();
        for &c in &self.free {
            if let Some(p) = self.layout.place(c) {
                *out.entry(key(&p)).or_insert(0) += 1;
            }
        }
        out
    }

    /// The CPUs of wholly free cores, grouped by NUMA node or socket (`key`), each group
    /// ordered by core; groups fullest first (fewest free CPUs), then (for NUMA nodes) by
    /// their socket's free CPUs, then by id (`freeCoresInNode` / `freeCoresInSocket`).
    fn free_cores_by(&self, key: Key, socket_tiebreak: bool) -> Vec<Vec<u32>> {
        let per_core = self.layout.cpus_per_core();
        let socket_free = self.free_per(|p| p.socket);
        let mut groups: BTreeMap<u32, (u32, Vec<u32>)> = BTreeMap::new();
        for cpus in self.cores().into_values() {
            if cpus.len() != per_core {
                continue;
            }
            let Some(p) = self.layout.place(cpus[0]) else {
                continue;
            };
            let g = groups.entry(key(&p)).or_insert((p.socket, Vec::new()));
            g.1.extend(cpus);
        }
        let mut out: Vec<(u32, u32, Vec<u32>)> =
            groups.into_iter().map(|(id, (s, c))| (id, s, c)).collect();
        out.sort_by_key(|(id, socket, cpus)| {
            let s = if socket_tiebreak {
                socket_free.get(socket).copied().unwrap_or(0)
            } else {
                0
            };
            (cpus.len(), s, *id)
        });
        out.into_iter().map(|(_, _, c)| c).collect()
    }

    /// Free CPUs grouped by NUMA node or socket, ascending; with `one_per_core` only the
    /// first free thread of each core. Groups fullest first, then by id
    /// (`freeCPUsInNode` / `freeCPUsInSocket`).
    fn free_cpus_by(&self, key: Key, one_per_core: bool) -> Vec<Vec<u32>> {
        let mut groups: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
        let mut seen_cores = std::collections::BTreeSet::new();
        for &c in &self.free {
            let Some(p) = self.layout.place(c) else {
                continue;
            };
            if one_per_core && !seen_cores.insert(p.core) {
                continue;
            }
            groups.entry(key(&p)).or_default().push(c);
        }
        let socket_free = self.free_per(|p| p.socket);
        let mut out: Vec<(usize, usize, u32, Vec<u32>)> = groups
            .into_iter()
            .map(|(id, cpus)| {
                let socket = self.layout.place(cpus[0]).map_or(0, |p| p.socket);
                let s = socket_free.get(&socket).copied().unwrap_or(0);
                (cpus.len(), s, id, cpus)
            })
            .collect();
        out.sort_by_key(|(n, s, id, _)| (*n, *s, *id));
        out.into_iter().map(|(_, _, _, c)| c).collect()
    }

    /// Every free CPU, by core: cores on sockets already holding more of the result
    /// first, then fuller sockets and NUMA nodes, then cores with fewer free threads, then
    /// by socket and core id (`freeCPUs`).
    fn free_cpus_near_result(&self) -> Vec<u32> {
        let socket_free = self.free_per(|p| p.socket);
        let node_free = self.free_per(|p| p.node);
        let mut colo: BTreeMap<u32, usize> = BTreeMap::new();
        for c in &self.result {
            if let Some(p) = self.layout.place(*c) {
                *colo.entry(p.socket).or_insert(0) += 1;
            }
        }
        let mut cores: Vec<(u32, Vec<u32>)> = self.cores().into_iter().collect();
        cores.sort_by_key(|(core, cpus)| {
            let p = self.layout.place(cpus[0]);
            let socket = p.map_or(0, |p| p.socket);
            let node = p.map_or(0, |p| p.node);
            (
                std::cmp::Reverse(colo.get(&socket).copied().unwrap_or(0)),
                socket_free.get(&socket).copied().unwrap_or(0),
                node_free.get(&node).copied().unwrap_or(0),
                cpus.len(),
                socket,
                *core,
            )
        });
        cores.into_iter().flat_map(|(_, c)| c).collect()
    }
}

/// Reorders `cpus` so that each pass takes one thread of every core before a second
/// thread of any (`spreadCPUs`): the k-th CPU of a core (in `cpus` order) goes out in pass
/// k, and each pass keeps `cpus` order. Computed as one sort on (pass, position) rather than
/// by rescanning the remaining CPUs once per pass as Koordinator does, which is quadratic in
/// the threads of the largest core: a published topology may give one core tens of
/// thousands of threads.
fn spread(layout: &CpuLayout, cpus: &[u32]) -> Vec<u32> {
    if cpus.len() <= layout.cpus_per_core() {
        return cpus.to_vec();
    }
    let mut passes: BTreeMap<u32, usize> = BTreeMap::new();
    let mut keyed: Vec<(usize, usize, u32)> = cpus
        .iter()
        .enumerate()
        .map(|(position, &c)| {
            let core = layout.place(c).map_or(c, |p| p.core);
            let pass = passes.entry(core).or_insert(0);
            *pass += 1;
            (*pass, position, c)
        })
        .collect();
    keyed.sort_unstable();
    keyed.into_iter().map(|(_, _, c)| c).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use berth_api::annotations::format_cpu_list;

    fn take(layout: &CpuLayout, free: &CpuSet, n: usize, policy: CpuBindPolicy) -> String {
        take_cpus(layout, free, n, policy)
            .map(|s| format_cpu_list(&s))
            .unwrap_or_else(|| "none".into())
    }

    #[test]
    fn full_pcpus_takes_whole_cores_and_spread_one_thread_per_core() {
        // 2 sockets × 4 cores × 2 threads: core c has CPUs c and c + 8.
        let l = CpuLayout::regular(2, 1, 4, 2);
        let all: CpuSet = (&l.all()).into();
        assert_eq!(take(&l, &all, 4, CpuBindPolicy::FullPcpus), "0-1,8-9");
        assert_eq!(take(&l, &all, 4, CpuBindPolicy::SpreadByPcpus), "0-3");
        assert_eq!(take(&l, &all, 4, CpuBindPolicy::Default), "0-1,8-9");
        // Wider than a socket: one whole socket plus a core of the other.
        assert_eq!(take(&l, &all, 10, CpuBindPolicy::FullPcpus), "0-4,8-12");
        assert_eq!(take(&l, &all, 17, CpuBindPolicy::FullPcpus), "none");
    }

    #[test]
    fn the_fullest_numa_node_that_fits_is_filled_first() {
        let l = CpuLayout::regular(2, 1, 4, 2);
        // Socket 0 has two whole cores left (2,3 and 10,11), socket 1 all four.
        let free: CpuSet = [2, 3, 10, 11, 4, 5, 6, 7, 12, 13, 14, 15].into();
        assert_eq!(take(&l, &free, 2, CpuBindPolicy::FullPcpus), "2,10");
        assert_eq!(take(&l, &free, 6, CpuBindPolicy::FullPcpus), "4-6,12-14");
    }

    #[test]
    fn full_pcpus_falls_back_to_threads_when_whole_cores_run_out() {
        let l = CpuLayout::regular(1, 1, 4, 2);
        // Only one thread of each core is free: no whole core at all.
        let free: CpuSet = [0, 1, 2, 3].into();
        assert_eq!(take(&l, &free, 2, CpuBindPolicy::FullPcpus), "0-1");
    }

    /// Koordinator's pass-by-pass form of [`spread`], the oracle for the sorted one.
    fn spread_by_passes(layout: &CpuLayout, cpus: &[u32]) -> Vec<u32> {
        if cpus.len() <= layout.cpus_per_core() {
            return cpus.to_vec();
        }
        let mut out = Vec::with_capacity(cpus.len());
        let mut rest = cpus.to_vec();
        while !rest.is_empty() {
            let mut seen = std::collections::BTreeSet::new();
            let mut next = Vec::new();
            for c in rest {
                let core = layout.place(c).map_or(c, |p| p.core);
                if seen.insert(core) {
                    out.push(c);
                } else {
                    next.push(c);
                }
            }
            rest = next;
        }
        out
    }

    proptest::proptest! {
        #![proptest_config(proptest::test_runner::Config::with_cases(2_000))]

        /// The sorted spread orders any list of CPUs (some the layout lacks, on irregular
        /// cores) exactly as the pass-by-pass one.
        #[test]
        fn spread_orders_as_pass_by_pass(
            cores in proptest::collection::vec(0u32..6, 1..24),
            cpus in proptest::collection::vec(0u32..30, 0..40),
        ) {
            let detail = cores
                .iter()
                .enumerate()
                .map(|(id, &core)| berth_api::annotations::CpuInfo {
                    id: id as u32,
                    core,
                    socket: 0,
                    node: 0,
                })
                .collect();
            let layout = CpuLayout::new(&berth_api::annotations::CpuTopology { detail })
                .expect("not empty");
            proptest::prop_assert_eq!(spread(&layout, &cpus), spread_by_passes(&layout, &cpus));
        }
    }

    #[test]
    fn never_takes_a_cpu_outside_the_available_set() {
        let l = CpuLayout::regular(2, 2, 3, 2);
        let free: CpuSet = (0..24).filter(|c| c % 3 != 0).collect();
        for n in 0..=free.len() {
            for policy in [CpuBindPolicy::FullPcpus, CpuBindPolicy::SpreadByPcpus] {
                let got = take_cpus(&l, &free, n, policy).expect("enough");
                assert_eq!(got.len(), n);
                assert!(got.is_subset(&free));
            }
        }
    }
}
