//! Which CPUs a pod gets: Koordinator's `takeCPUs` (NodeNUMAResource's
//! `cpu_accumulator.go`), with its default NUMA allocate strategy `MostAllocated` (fill the
//! fullest NUMA node / socket that still fits, keeping the emptier ones whole for big pods),
//! no CPU exclusive policy and no CPU sharing (`maxRefCount` 1).
//!
//! - `FullPCPUs` (and any pod on a machine without SMT): whole free physical cores from one
//!   NUMA node if one has enough, else one socket, else from the sockets with the most free
//!   cores first, then core by core from the fullest ones; threads only when whole cores
//!   run out.
//! - `SpreadByPCPUs`: one thread per physical core first (a pod never gets both threads of
//!   a core while a core has none of its threads taken), from one NUMA node, else one socket.
//! - Last resort for both: any free CPU, closest (same socket) to what was already taken.
//!
//! Every choice is deterministic: ties are broken by id, never by map order.
//!
//! Filter runs this on every node for every exclusive-CPU pod, so it builds no set or map:
//! it works on the CPUs' positions in the [`CpuLayout`] (cores, sockets and NUMA nodes by
//! rank, each core's CPUs listed once per layout), keeps counts where the choice only needs
//! counts, and lists CPUs in buffers kept per thread and reused; only the chosen
//! [`CpuSet`] is built (inline for ids below [`super::set::INLINE_CPUS`]). The first
//! version, on sets and maps, is kept as the test-only reference model it must match.

use std::cell::RefCell;
use std::cmp::Reverse;

use berth_api::annotations::CpuBindPolicy;

use super::topology::{CpuLayout, CpuSet};

/// Why no set of CPUs could be chosen (Koordinator's message, a fixed Filter reason).
pub const ERR_NOT_ENOUGH_CPUS: &str = "not enough cpus available to satisfy request";

/// Picks `n` CPUs out of `available` (CPUs of `layout` nobody holds) under `policy`
/// (`Default` reads as `FullPCPUs`). `None` when `available` has fewer than `n`.
pub fn take_cpus(
    layout: &CpuLayout,
    available: &CpuSet,
    n: usize,
    policy: CpuBindPolicy,
) -> Option<CpuSet> {
    with_scratch(|s| Acc::new(layout, available, n, s).run(policy))
}

/// Whether `cpus` holds every thread of each physical core it touches (as many as the
/// layout's threads per core); CPUs the layout lacks are not counted.
pub fn whole_cores(layout: &CpuLayout, cpus: &CpuSet) -> bool {
    with_scratch(|s| {
        let per_core = layout.cpus_per_core();
        reset(&mut s.core_free, layout.counts().0, 0);
        for c in cpus {
            if let Some(i) = layout.position(c) {
                s.core_free[layout.ranks_at(i).0] += 1;
            }
        }
        s.core_free.iter().all(|n| *n == 0 || *n == per_core)
    })
}

/// Buffers of one choice, kept per thread so that a choice allocates only while they grow
/// to the largest layout the thread has seen.
#[derive(Debug, Default)]
struct Scratch {
    /// Per CPU position: free.
    free: Vec<bool>,
    /// Per core rank: free CPUs.
    core_free: Vec<usize>,
    /// Per core rank: the position of its first free CPU (when it has one).
    core_first: Vec<u32>,
    /// Per socket rank: free CPUs.
    socket_free: Vec<usize>,
    /// Per NUMA node rank: free CPUs.
    node_free: Vec<usize>,
    /// Per socket rank: CPUs already chosen.
    colo: Vec<usize>,
    /// Per group (NUMA node or socket rank): CPUs in it.
    group_len: Vec<usize>,
    /// Per group: the socket rank of its first CPU (or first whole core).
    group_socket: Vec<u32>,
    /// Per group: where its cores start in `group_cores` (one more than the groups).
    group_start: Vec<usize>,
    /// The whole cores of every group, group after group, each by core rank.
    group_cores: Vec<u32>,
    /// Groups, or cores, in the order the choice visits them.
    order: Vec<u32>,
    /// Groups set aside.
    unsatisfied: Vec<u32>,
    /// Per core rank: seen (one thread per core).
    seen: Vec<bool>,
    /// CPU positions in the order they are taken.
    list: Vec<u32>,
    /// Per core rank: threads met so far (spread).
    passes: Vec<u32>,
    /// (pass, index, position) of the spread.
    keyed: Vec<(u32, u32, u32)>,
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
}

/// Runs `f` on this thread's buffers, moved out for the call (fresh ones, should they be
/// out already or the thread be ending: never a panic).
fn with_scratch<R>(f: impl FnOnce(&mut Scratch) -> R) -> R {
    let mut scratch = SCRATCH
        .try_with(|s| s.try_borrow_mut().map(|mut s| std::mem::take(&mut *s)))
        .ok()
        .and_then(Result::ok)
        .unwrap_or_default();
    let out = f(&mut scratch);
    let _ = SCRATCH.try_with(|s| {
        if let Ok(mut s) = s.try_borrow_mut() {
            *s = scratch;
        }
    });
    out
}

/// Clears `v` to `len` copies of `value`, keeping its capacity.
fn reset<T: Clone>(v: &mut Vec<T>, len: usize, value: T) {
    v.clear();
    v.resize(len, value);
}

/// Groups by NUMA node or by socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum By {
    Node,
    Socket,
}

struct Acc<'a> {
    layout: &'a CpuLayout,
    s: &'a mut Scratch,
    free_len: usize,
    needed: usize,
    result: CpuSet,
}

impl<'a> Acc<'a> {
    fn new(layout: &'a CpuLayout, available: &CpuSet, n: usize, s: &'a mut Scratch) -> Self {
        reset(&mut s.free, layout.len(), false);
        let mut free_len = 0;
        for c in available {
            if let Some(i) = layout.position(c) {
                s.free[i] = true;
                free_len += 1;
            }
        }
        reset(&mut s.colo, layout.counts().1, 0);
        Self {
            layout,
            s,
            free_len,
            needed: n,
            result: CpuSet::new(),
        }
    }

    fn run(mut self, policy: CpuBindPolicy) -> Option<CpuSet> {
        if self.needed == 0 {
            return Some(self.result);
        }
        if self.needed > self.free_len {
            return None;
        }
        let full = policy != CpuBindPolicy::SpreadByPcpus;
        let per_core = self.layout.cpus_per_core();
        if (full || per_core == 1) && self.take_whole_cores(per_core) {
            return Some(self.result);
        }
        if !full && self.take_spread_within_one() {
            return Some(self.result);
        }
        self.free_cpus_near_result();
        self.spread_list();
        for k in 0..self.s.list.len() {
            self.take(self.s.list[k] as usize);
            if self.needed == 0 {
                return Some(self.result);
            }
        }
        None
    }

    /// Takes the CPU at `position` if it is free.
    fn take(&mut self, position: usize) {
        if self.s.free.get(position).copied().unwrap_or(false) {
            self.s.free[position] = false;
            self.free_len -= 1;
            self.result.insert(self.layout.id_at(position));
            self.needed = self.needed.saturating_sub(1);
            self.s.colo[self.layout.ranks_at(position).1] += 1;
        }
    }

    /// The group rank of the CPU at `position`.
    fn group_of(&self, by: By, position: usize) -> usize {
        let (_, socket, node) = self.layout.ranks_at(position);
        match by {
            By::Node => node,
            By::Socket => socket,
        }
    }

    /// Counts free CPUs per core, socket and NUMA node, and each core's first free CPU.
    fn count_free(&mut self) {
        let (cores, sockets, nodes) = self.layout.counts();
        let s = &mut *self.s;
        reset(&mut s.core_free, cores, 0);
        reset(&mut s.core_first, cores, 0);
        reset(&mut s.socket_free, sockets, 0);
        reset(&mut s.node_free, nodes, 0);
        for (i, _) in s.free.iter().enumerate().filter(|(_, f)| **f) {
            let (core, socket, node) = self.layout.ranks_at(i);
            if s.core_free[core] == 0 {
                s.core_first[core] = i as u32;
            }
            s.core_free[core] += 1;
            s.socket_free[socket] += 1;
            s.node_free[node] += 1;
        }
    }

    /// Whole free cores: within one NUMA node if they fit, else one socket, else whole
    /// sockets' worth from the sockets with the most, then core by core from the fewest.
    /// Returns whether the choice has what it needs.
    fn take_whole_cores(&mut self, per_core: usize) -> bool {
        for (by, limit) in [
            (By::Node, self.layout.cpus_per_node()),
            (By::Socket, self.layout.cpus_per_socket()),
        ] {
            if self.needed <= limit {
                self.free_cores_by(by, by == By::Node, per_core);
                let s = &*self.s;
                if let Some(g) = s
                    .order
                    .iter()
                    .copied()
                    .find(|g| s.group_len[*g as usize] >= self.needed)
                {
                    self.take_group(g as usize, self.needed);
                    return true;
                }
            }
        }
        // Wider than a socket, or every socket partly used: whole sockets' worth of free
        // cores from the sockets with the most, then core by core from the fewest.
        self.free_cores_by(By::Socket, false, per_core);
        {
            let Scratch {
                order, group_len, ..
            } = &mut *self.s;
            order.sort_unstable_by_key(|g| (Reverse(group_len[*g as usize]), *g));
        }
        self.s.unsatisfied.clear();
        for k in 0..self.s.order.len() {
            let g = self.s.order[k] as usize;
            let len = self.s.group_len[g];
            if self.needed < len {
                self.s.unsatisfied.push(g as u32);
            } else {
                self.take_group(g, len);
                if self.needed == 0 {
                    return true;
                }
            }
        }
        if self.needed >= per_core {
            {
                let Scratch {
                    unsatisfied,
                    group_len,
                    ..
                } = &mut *self.s;
                unsatisfied.sort_unstable_by_key(|g| (group_len[*g as usize], *g));
            }
            for k in 0..self.s.unsatisfied.len() {
                let g = self.s.unsatisfied[k] as usize;
                for c in self.s.group_start[g]..self.s.group_start[g + 1] {
                    self.take_core(self.s.group_cores[c] as usize);
                    if self.needed == 0 {
                        return true;
                    }
                    if self.needed < per_core {
                        return false;
                    }
                }
            }
        }
        false
    }

    /// Takes every free CPU of the core of rank `core`.
    fn take_core(&mut self, core: usize) {
        for &i in self.layout.core_members(core) {
            self.take(i as usize);
        }
    }

    /// Takes the first `count` CPUs of group `g`'s whole cores, core by core.
    fn take_group(&mut self, g: usize, count: usize) {
        let mut left = count;
        for c in self.s.group_start[g]..self.s.group_start[g + 1] {
            let core = self.s.group_cores[c] as usize;
            for &i in self.layout.core_members(core) {
                if left == 0 {
                    return;
                }
                if self.s.free[i as usize] {
                    self.take(i as usize);
                    left -= 1;
                }
            }
        }
    }

    /// The wholly free cores (as many free CPUs as threads per core), grouped by NUMA node
    /// or socket (the group of each core's first free CPU), each group by core; in `order`,
    /// the groups fullest first (fewest free CPUs), then (`socket_tiebreak`) by their
    /// first core's socket's free CPUs, then by id (`freeCoresInNode` / `freeCoresInSocket`).
    fn free_cores_by(&mut self, by: By, socket_tiebreak: bool, per_core: usize) {
        self.count_free();
        let (cores, sockets, nodes) = self.layout.counts();
        let groups = if by == By::Node { nodes } else { sockets };
        reset(&mut self.s.group_len, groups, 0);
        reset(&mut self.s.group_socket, groups, 0);
        reset(&mut self.s.group_start, groups + 1, 0);
        for core in 0..cores {
            if self.s.core_free[core] != per_core {
                continue;
            }
            let first = self.s.core_first[core] as usize;
            let g = self.group_of(by, first);
            if self.s.group_len[g] == 0 {
                self.s.group_socket[g] = self.layout.ranks_at(first).1 as u32;
            }
            self.s.group_len[g] += per_core;
            self.s.group_start[g + 1] += 1;
        }
        for g in 0..groups {
            self.s.group_start[g + 1] += self.s.group_start[g];
        }
        // Each group's cores, ascending: a counting sort (`order` holds the next slot).
        let whole = self.s.group_start[groups];
        reset(&mut self.s.group_cores, whole, 0);
        reset(&mut self.s.order, groups, 0);
        for g in 0..groups {
            self.s.order[g] = self.s.group_start[g] as u32;
        }
        for core in 0..cores {
            if self.s.core_free[core] == per_core {
                let g = self.group_of(by, self.s.core_first[core] as usize);
                let slot = &mut self.s.order[g];
                self.s.group_cores[*slot as usize] = core as u32;
                *slot += 1;
            }
        }
        self.sort_groups(groups, socket_tiebreak);
    }

    /// Puts in `order` the groups with something free, fewest first, then (with
    /// `socket_tiebreak`) by their first CPU's socket's free CPUs, then by id.
    fn sort_groups(&mut self, groups: usize, socket_tiebreak: bool) {
        let Scratch {
            order,
            group_len,
            group_socket,
            socket_free,
            ..
        } = &mut *self.s;
        order.clear();
        order.extend((0..groups as u32).filter(|g| group_len[*g as usize] > 0));
        order.sort_unstable_by_key(|g| {
            let g = *g as usize;
            let tiebreak = if socket_tiebreak {
                socket_free[group_socket[g] as usize]
            } else {
                0
            };
            (group_len[g], tiebreak, g)
        });
    }

    /// `SpreadByPcpus`: CPUs spread across cores within one NUMA node if they fit (one per
    /// core first), else within one socket. Returns whether the choice has what it needs.
    fn take_spread_within_one(&mut self) -> bool {
        for (by, limit) in [
            (By::Node, self.layout.cpus_per_node()),
            (By::Socket, self.layout.cpus_per_socket()),
        ] {
            for one_per_core in [true, false] {
                if self.needed > limit {
                    continue;
                }
                if let Some(g) = self.free_cpus_by(by, one_per_core) {
                    self.list_group(by, one_per_core, g);
                    self.spread_list();
                    for k in 0..self.needed.min(self.s.list.len()) {
                        self.take(self.s.list[k] as usize);
                    }
                    return true;
                }
            }
        }
        false
    }

    /// Free CPUs grouped by NUMA node or socket (with `one_per_core` only the first free
    /// thread of each core); the first group with enough of them, groups fullest first,
    /// then by the free CPUs of their first CPU's socket, then by id (`freeCPUsInNode` /
    /// `freeCPUsInSocket`).
    fn free_cpus_by(&mut self, by: By, one_per_core: bool) -> Option<usize> {
        self.count_free();
        let (cores, sockets, nodes) = self.layout.counts();
        let groups = if by == By::Node { nodes } else { sockets };
        reset(&mut self.s.group_len, groups, 0);
        reset(&mut self.s.group_socket, groups, 0);
        reset(&mut self.s.seen, cores, false);
        for i in 0..self.s.free.len() {
            if !self.s.free[i] {
                continue;
            }
            let (core, socket, _) = self.layout.ranks_at(i);
            if one_per_core && std::mem::replace(&mut self.s.seen[core], true) {
                continue;
            }
            let g = self.group_of(by, i);
            if self.s.group_len[g] == 0 {
                self.s.group_socket[g] = socket as u32;
            }
            self.s.group_len[g] += 1;
        }
        self.sort_groups(groups, true);
        let Scratch {
            order, group_len, ..
        } = &*self.s;
        order
            .iter()
            .map(|g| *g as usize)
            .find(|g| group_len[*g] >= self.needed)
    }

    /// Lists in `list` the CPUs of group `g` as [`Self::free_cpus_by`] counted them.
    fn list_group(&mut self, by: By, one_per_core: bool, g: usize) {
        reset(&mut self.s.seen, self.layout.counts().0, false);
        self.s.list.clear();
        for i in 0..self.s.free.len() {
            if !self.s.free[i] {
                continue;
            }
            let core = self.layout.ranks_at(i).0;
            if one_per_core && std::mem::replace(&mut self.s.seen[core], true) {
                continue;
            }
            if self.group_of(by, i) == g {
                self.s.list.push(i as u32);
            }
        }
    }

    /// Lists in `list` every free CPU, by core: cores on sockets already holding more of
    /// the result first, then fuller sockets and NUMA nodes, then cores with fewer free
    /// threads, then by socket and core id (`freeCPUs`).
    fn free_cpus_near_result(&mut self) {
        self.count_free();
        let cores = self.layout.counts().0;
        let layout = self.layout;
        let Scratch {
            order,
            core_free,
            core_first,
            socket_free,
            node_free,
            colo,
            list,
            free,
            ..
        } = &mut *self.s;
        order.clear();
        order.extend((0..cores as u32).filter(|k| core_free[*k as usize] > 0));
        order.sort_unstable_by_key(|k| {
            let k = *k as usize;
            let (_, socket, node) = layout.ranks_at(core_first[k] as usize);
            (
                Reverse(colo[socket]),
                socket_free[socket],
                node_free[node],
                core_free[k],
                socket,
                k,
            )
        });
        list.clear();
        for k in order.iter() {
            let members = layout.core_members(*k as usize);
            list.extend(members.iter().filter(|i| free[**i as usize]));
        }
    }

    /// Reorders `list` so that each pass takes one thread of every core before a second
    /// thread of any (`spreadCPUs`): the k-th CPU of a core (in `list` order) goes out in
    /// pass k, and each pass keeps `list` order. One sort on (pass, index) rather than a
    /// rescan of the remaining CPUs per pass as Koordinator does, which is quadratic in the
    /// threads of the largest core: a published topology may give one core tens of
    /// thousands of threads.
    fn spread_list(&mut self) {
        let s = &mut *self.s;
        if s.list.len() <= self.layout.cpus_per_core() {
            return;
        }
        reset(&mut s.passes, self.layout.counts().0, 0);
        s.keyed.clear();
        for (index, &i) in s.list.iter().enumerate() {
            let pass = &mut s.passes[self.layout.ranks_at(i as usize).0];
            *pass += 1;
            s.keyed.push((*pass, index as u32, i));
        }
        s.keyed.sort_unstable();
        s.list.clear();
        s.list.extend(s.keyed.iter().map(|(_, _, i)| *i));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpuset::reference;
    use berth_api::annotations::{CpuInfo, CpuTopology};
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    fn take(layout: &CpuLayout, free: &CpuSet, n: usize, policy: CpuBindPolicy) -> String {
        take_cpus(layout, free, n, policy)
            .map(|s| s.to_string())
            .unwrap_or_else(|| "none".into())
    }

    #[test]
    fn full_pcpus_takes_whole_cores_and_spread_one_thread_per_core() {
        // 2 sockets × 4 cores × 2 threads: core c has CPUs c and c + 8.
        let l = CpuLayout::regular(2, 1, 4, 2);
        let all = l.all();
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

    #[test]
    fn whole_cores_counts_every_thread_of_each_touched_core() {
        let l = CpuLayout::regular(1, 1, 4, 2);
        assert!(whole_cores(&l, &CpuSet::from([0, 4, 1, 5])));
        assert!(!whole_cores(&l, &CpuSet::from([0, 4, 1])));
        assert!(whole_cores(&l, &CpuSet::new()));
        // CPUs the layout lacks are not counted.
        assert!(whole_cores(&l, &CpuSet::from([0, 4, 4_000_000])));
    }

    /// A layout from generated CPUs: (id, core, socket, node), irregular as outside input
    /// may be (cores of any thread count, cores across sockets, sparse and huge ids).
    fn layout_of(cpus: &[(u32, u32, u32, u32)]) -> Option<CpuLayout> {
        let detail = cpus
            .iter()
            .map(|&(id, core, socket, node)| CpuInfo {
                id,
                core,
                socket,
                node,
            })
            .collect();
        CpuLayout::new(&CpuTopology { detail })
    }

    /// Regular machines most of the time (SMT 1-4, NUMA nodes per socket 1-2), otherwise
    /// CPUs placed at random, some with ids past the inline words or anywhere in `u32`.
    fn cpus() -> impl Strategy<Value = Vec<(u32, u32, u32, u32)>> {
        let regular = (1u32..3, 1u32..3, 1u32..6, 1u32..4).prop_map(|(s, n, c, t)| {
            let l = CpuLayout::regular(s, n, c, t);
            (0..l.len() as u32 * 2)
                .filter_map(|id| l.place(id).map(|p| (id, p.core, p.socket, p.node)))
                .collect()
        });
        let id = prop_oneof![8 => 0u32..64, 1 => 1_000u32..1_100, 1 => any::<u32>()];
        let irregular = proptest::collection::vec((id, 0u32..12, 0u32..3, 0u32..4), 1..48);
        prop_oneof![1 => regular, 1 => irregular]
    }

    const POLICIES: [CpuBindPolicy; 3] = [
        CpuBindPolicy::Default,
        CpuBindPolicy::FullPcpus,
        CpuBindPolicy::SpreadByPcpus,
    ];

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1_000))]

        /// On any layout and any free CPUs (some the layout lacks), for every request size
        /// and policy, the choice is CPU for CPU the reference model's.
        #[test]
        fn picks_exactly_what_the_reference_model_picks(
            cpus in cpus(),
            keep in proptest::collection::vec(0u8..4, 0..100),
            extra in proptest::collection::vec(any::<u32>(), 0..3),
        ) {
            let Some(layout) = layout_of(&cpus) else {
                return Ok(());
            };
            let mut free: BTreeSet<u32> = layout
                .all()
                .iter()
                .zip(keep.iter().chain(std::iter::repeat(&1)))
                .filter(|(_, k)| **k != 0)
                .map(|(c, _)| c)
                .collect();
            free.extend(extra);
            let available = CpuSet::from(free.clone());
            for n in 0..=layout.len() + 1 {
                for policy in POLICIES {
                    let want = reference::take_cpus(&layout, &free, n, policy);
                    let got = take_cpus(&layout, &available, n, policy);
                    prop_assert_eq!(
                        got.as_ref().map(BTreeSet::from), want.clone(),
                        "{} of {:?} ({:?}) on {:?}", n, free, policy, cpus
                    );
                    if let Some(w) = &want {
                        prop_assert_eq!(
                            whole_cores(&layout, &CpuSet::from(w.clone())),
                            reference_whole_cores(&layout, w)
                        );
                    }
                }
            }
        }
    }

    /// The plugin's first `whole_cores`, on maps.
    fn reference_whole_cores(layout: &CpuLayout, cpus: &BTreeSet<u32>) -> bool {
        let mut per_core: std::collections::BTreeMap<u32, usize> = Default::default();
        for c in cpus {
            if let Some(p) = layout.place(*c) {
                *per_core.entry(p.core).or_insert(0) += 1;
            }
        }
        per_core.values().all(|n| *n == layout.cpus_per_core())
    }
}
