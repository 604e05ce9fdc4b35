//! [`CpuLayout`]: a node's logical CPUs with their core, socket and NUMA node, and the
//! counts the allocator needs (threads per core, CPUs per NUMA node and per socket).

use std::collections::{BTreeMap, BTreeSet};

use berth_api::annotations::CpuTopology;

/// A set of logical CPU ids.
pub type CpuSet = BTreeSet<u32>;

/// CPU ids below this are looked up by index ([`CpuLayout::place`]); a topology naming a
/// larger id (none real has 8,192 logical CPUs) is searched instead.
const DENSE_LIMIT: u32 = 8_192;

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
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CpuLayout {
    cpus: BTreeMap<u32, CpuPlace>,
    /// `cpus` indexed by id, for the allocator's per-CPU lookups on the Filter path (a
    /// search of `cpus` per CPU was most of an LSR pod's cycle); empty when an id is at or
    /// above [`DENSE_LIMIT`], and lookups then search `cpus`.
    dense: Vec<Option<CpuPlace>>,
    /// The NUMA nodes, ascending.
    numa: Vec<u32>,
    cpus_per_core: usize,
    cpus_per_node: usize,
    cpus_per_socket: usize,
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
        let count = |key: fn(&CpuPlace) -> u32| {
            let mut per: BTreeMap<u32, usize> = BTreeMap::new();
            for p in cpus.values() {
                *per.entry(key(p)).or_insert(0) += 1;
            }
            // Koordinator divides the total by the number of cores / nodes / sockets.
            cpus.len() / per.len().max(1)
        };
        let cpus_per_core = count(|p| p.core).max(1);
        let cpus_per_node = count(|p| p.node).max(1);
        let cpus_per_socket = count(|p| p.socket).max(1);
        let mut dense = Vec::new();
        if cpus
            .keys()
            .next_back()
            .is_some_and(|max| *max < DENSE_LIMIT)
        {
            dense = vec![None; cpus.keys().next_back().map_or(0, |m| *m as usize + 1)];
            for (id, p) in &cpus {
                dense[*id as usize] = Some(*p);
            }
        }
        let numa: BTreeSet<u32> = cpus.values().map(|p| p.node).collect();
        Some(Self {
            cpus,
            dense,
            numa: numa.into_iter().collect(),
            cpus_per_core,
            cpus_per_node,
            cpus_per_socket,
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
        self.cpus.keys().copied().collect()
    }

    /// Where `cpu` sits, if the node has it.
    pub fn place(&self, cpu: u32) -> Option<CpuPlace> {
        if self.dense.is_empty() {
            return self.cpus.get(&cpu).copied();
        }
        self.dense.get(cpu as usize).copied().flatten()
    }

    /// Whether the node has `cpu`.
    pub fn contains(&self, cpu: u32) -> bool {
        self.place(cpu).is_some()
    }

    /// Number of logical CPUs.
    pub fn len(&self) -> usize {
        self.cpus.len()
    }

    /// Whether there is no CPU.
    pub fn is_empty(&self) -> bool {
        self.cpus.is_empty()
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

    /// The CPUs of `set` on NUMA node `node`.
    pub fn on_numa_node(&self, set: &CpuSet, node: u32) -> CpuSet {
        set.iter()
            .copied()
            .filter(|c| self.place(*c).is_some_and(|p| p.node == node))
            .collect()
    }

    /// How many CPUs of `set` each NUMA node holds.
    pub fn per_numa_node(&self, set: &CpuSet) -> BTreeMap<u32, usize> {
        let mut out = BTreeMap::new();
        for c in set {
            if let Some(p) = self.place(*c) {
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
