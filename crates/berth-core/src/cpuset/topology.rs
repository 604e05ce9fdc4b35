//! [`CpuLayout`]: a node's logical CPUs with their core, socket and NUMA node, and the
//! counts the allocator needs (threads per core, CPUs per NUMA node and per socket).

use std::collections::{BTreeMap, BTreeSet};

use berth_api::annotations::CpuTopology;

pub use super::set::CpuSet;

/// CPU ids below this are looked up by index ([`CpuLayout::place`]); a topology naming a
/// larger id (none real has 8,192 logical CPUs) is searched instead.
const DENSE_LIMIT: u32 = 8_192;

/// No CPU at this id (in [`CpuLayout`]'s id-to-position table).
const ABSENT: u32 = u32::MAX;

/// Where one logical CPU sits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpuPlace {
    /// Physical core.
    pub core: u32,
    /// Socket.
    pub socket: u32,
    /// NUMA node.
    pub node: u32,
}

/// A node's CPU layout, as koordlet's `node.koordinator.sh/cpu-topology` describes it.
///
/// Besides the places, it keeps what the allocator ([`super::accumulator`]) needs to choose
/// CPUs without building maps on every node of every cycle: each CPU's position `i` (its
/// rank among the ids) and the positions of its core, socket and NUMA node (their ranks
/// among their ids), and each core's CPUs by position.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CpuLayout {
    /// The CPU ids, ascending: position `i` is CPU `ids[i]`.
    ids: Vec<u32>,
    /// Where CPU `ids[i]` sits.
    places: Vec<CpuPlace>,
    /// Position of CPU id `c` at index `c` (or [`ABSENT`]), for the per-CPU lookups on the
    /// Filter path (a search per CPU was most of an LSR pod's cycle); empty when an id is
    /// at or above [`DENSE_LIMIT`], and lookups then search `ids`.
    dense: Vec<u32>,
    /// Per position: the rank of its core among the core ids.
    core_of: Vec<u32>,
    /// Per position: the rank of its socket among the socket ids.
    socket_of: Vec<u32>,
    /// Per position: the rank of its NUMA node among `numa`.
    node_of: Vec<u32>,
    /// Core ids, ascending.
    core_ids: Vec<u32>,
    /// Socket ids, ascending.
    socket_ids: Vec<u32>,
    /// The positions of core `k`'s CPUs, ascending: `members[starts[k]..starts[k + 1]]`.
    members: Vec<u32>,
    starts: Vec<u32>,
    /// The NUMA nodes, ascending.
    numa: Vec<u32>,
    /// The CPUs of each NUMA node of `numa`.
    numa_cpus: Vec<CpuSet>,
    /// Every CPU.
    all: CpuSet,
    cpus_per_core: usize,
    cpus_per_node: usize,
    cpus_per_socket: usize,
}

/// The sorted distinct values of `key` over `places`, and each place's rank among them.
fn ranks(places: &[CpuPlace], key: fn(&CpuPlace) -> u32) -> (Vec<u32>, Vec<u32>) {
    let ids: Vec<u32> = places
        .iter()
        .map(key)
        .collect::<BTreeSet<u32>>()
        .into_iter()
        .collect();
    let of = places
        .iter()
        .map(|p| ids.binary_search(&key(p)).map_or(0, |r| r as u32))
        .collect();
    (ids, of)
}

impl CpuLayout {
    /// The layout of a parsed annotation; `None` when it lists no CPU (Koordinator's
    /// `CPUTopology.IsValid` is false for an empty topology).
    pub fn new(topology: &CpuTopology) -> Option<Self> {
        if topology.detail.is_empty() {
            return None;
        }
        let cpus: BTreeMap<u32, CpuPlace> = topology
            .detail
            .iter()
            .map(|c| {
                (
                    c.id,
                    CpuPlace {
                        core: c.core,
                        socket: c.socket,
                        node: c.node,
                    },
                )
            })
            .collect();
        let ids: Vec<u32> = cpus.keys().copied().collect();
        let places: Vec<CpuPlace> = cpus.values().copied().collect();
        let (core_ids, core_of) = ranks(&places, |p| p.core);
        let (socket_ids, socket_of) = ranks(&places, |p| p.socket);
        let (numa, node_of) = ranks(&places, |p| p.node);
        // Koordinator divides the total by the number of cores / nodes / sockets.
        let per = |groups: usize| (ids.len() / groups.max(1)).max(1);
        let mut dense = Vec::new();
        if ids.last().is_some_and(|max| *max < DENSE_LIMIT) {
            dense = vec![ABSENT; ids.last().map_or(0, |m| *m as usize + 1)];
            for (i, id) in ids.iter().enumerate() {
                dense[*id as usize] = i as u32;
            }
        }
        // Each core's positions, ascending: a counting sort by core.
        let mut starts = vec![0u32; core_ids.len() + 1];
        for k in &core_of {
            starts[*k as usize + 1] += 1;
        }
        for k in 0..core_ids.len() {
            starts[k + 1] += starts[k];
        }
        let mut members = vec![0u32; ids.len()];
        let mut next: Vec<u32> = starts[..core_ids.len()].to_vec();
        for (i, k) in core_of.iter().enumerate() {
            members[next[*k as usize] as usize] = i as u32;
            next[*k as usize] += 1;
        }
        let mut numa_cpus = vec![CpuSet::new(); numa.len()];
        for (i, z) in node_of.iter().enumerate() {
            numa_cpus[*z as usize].insert(ids[i]);
        }
        Some(Self {
            all: ids.iter().copied().collect(),
            cpus_per_core: per(core_ids.len()),
            cpus_per_node: per(numa.len()),
            cpus_per_socket: per(socket_ids.len()),
            ids,
            places,
            dense,
            core_of,
            socket_of,
            node_of,
            core_ids,
            socket_ids,
            members,
            starts,
            numa,
            numa_cpus,
        })
    }

    /// A regular layout, for tests and benches: `sockets` × `nodes_per_socket` NUMA nodes
    /// of `cores` cores × `threads` threads each, numbered the way Linux numbers an Intel
    /// machine (every core's first thread, then every second thread: CPU `c` and
    /// `c + total cores` are siblings).
    pub fn regular(sockets: u32, nodes_per_socket: u32, cores: u32, threads: u32) -> Self {
        let total_cores = sockets * nodes_per_socket * cores;
        let mut detail = Vec::new();
        for t in 0..threads {
            for core in 0..total_cores {
                let node = core / cores;
                detail.push(berth_api::annotations::CpuInfo {
                    id: t * total_cores + core,
                    core,
                    socket: node / nodes_per_socket,
                    node,
                });
            }
        }
        Self::new(&CpuTopology { detail }).unwrap_or_default()
    }

    /// Every logical CPU.
    pub fn all(&self) -> CpuSet {
        self.all.clone()
    }

    /// The position of CPU `cpu` (its rank among the ids), if the node has it.
    pub(crate) fn position(&self, cpu: u32) -> Option<usize> {
        if self.dense.is_empty() {
            return self.ids.binary_search(&cpu).ok();
        }
        match self.dense.get(cpu as usize) {
            Some(&i) if i != ABSENT => Some(i as usize),
            _ => None,
        }
    }

    /// Where `cpu` sits, if the node has it.
    pub fn place(&self, cpu: u32) -> Option<CpuPlace> {
        self.position(cpu).map(|i| self.places[i])
    }

    /// Whether the node has `cpu`.
    pub fn contains(&self, cpu: u32) -> bool {
        self.position(cpu).is_some()
    }

    /// Number of logical CPUs.
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    /// Whether there is no CPU.
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// The id of the CPU at `position`.
    pub(crate) fn id_at(&self, position: usize) -> u32 {
        self.ids[position]
    }

    /// The rank of the core, socket and NUMA node of the CPU at `position`.
    pub(crate) fn ranks_at(&self, position: usize) -> (usize, usize, usize) {
        (
            self.core_of[position] as usize,
            self.socket_of[position] as usize,
            self.node_of[position] as usize,
        )
    }

    /// Number of distinct cores, sockets and NUMA nodes.
    pub(crate) fn counts(&self) -> (usize, usize, usize) {
        (self.core_ids.len(), self.socket_ids.len(), self.numa.len())
    }

    /// The positions of the CPUs of the core of rank `core`, ascending.
    pub(crate) fn core_members(&self, core: usize) -> &[u32] {
        let (a, b) = (self.starts[core] as usize, self.starts[core + 1] as usize);
        &self.members[a..b]
    }

    /// Hardware threads per physical core.
    pub fn cpus_per_core(&self) -> usize {
        self.cpus_per_core
    }

    /// Logical CPUs per NUMA node.
    pub fn cpus_per_node(&self) -> usize {
        self.cpus_per_node
    }

    /// Logical CPUs per socket.
    pub fn cpus_per_socket(&self) -> usize {
        self.cpus_per_socket
    }

    /// The NUMA nodes, ascending.
    pub fn numa_nodes(&self) -> BTreeSet<u32> {
        self.numa.iter().copied().collect()
    }

    /// The NUMA nodes, ascending, without building a set.
    pub fn numa_node_ids(&self) -> &[u32] {
        &self.numa
    }

    /// The CPUs of NUMA node `node` (empty for a node the layout lacks).
    pub fn numa_node_cpus(&self, node: u32) -> &CpuSet {
        static NONE: CpuSet = CpuSet::new();
        match self.numa.binary_search(&node) {
            Ok(z) => &self.numa_cpus[z],
            Err(_) => &NONE,
        }
    }

    /// The CPUs of `set` on NUMA node `node`.
    pub fn on_numa_node(&self, set: &CpuSet, node: u32) -> CpuSet {
        set.intersection(self.numa_node_cpus(node))
    }

    /// How many CPUs of `set` each NUMA node holds.
    pub fn per_numa_node(&self, set: &CpuSet) -> BTreeMap<u32, usize> {
        let mut out = BTreeMap::new();
        for c in set {
            if let Some(p) = self.place(c) {
                *out.entry(p.node).or_insert(0) += 1;
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_regular_layout_counts_threads_nodes_and_sockets() {
        let l = CpuLayout::regular(2, 1, 4, 2);
        assert_eq!(l.len(), 16);
        assert_eq!(
            (l.cpus_per_core(), l.cpus_per_node(), l.cpus_per_socket()),
            (2, 8, 8)
        );
        // CPU 0 and CPU 8 are the two threads of core 0; core 4 is on socket 1.
        assert_eq!(l.place(8).map(|p| p.core), Some(0));
        assert_eq!(l.place(4).map(|p| (p.socket, p.node)), Some((1, 1)));
        assert_eq!(l.numa_nodes().len(), 2);
        assert!(CpuLayout::new(&CpuTopology::default()).is_none());
    }
}
