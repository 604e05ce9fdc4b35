//! [`CpuBudget`]: how many CPUs the simulated agent publishes a topology for, over all the
//! nodes that declare a layout with [`LABEL_CPU_LAYOUT`].
//!
//! A node of 160 bytes may declare 4,096 CPUs, for which the agent writes (and the
//! scheduler reads) about 150 KB of `cpu-topology`, so a 1 MB scenario of such nodes would
//! grow a thousandfold: hours of simulation and gigabytes for a file that reads in a
//! second. The budget keeps the total to what a scenario about exclusive CPUs needs; a node
//! past it is warned about and simulated without a CPU topology, like one with a
//! malformed layout.

use std::collections::BTreeMap;

use crate::cpu_agent::LABEL_CPU_LAYOUT;

/// Most CPUs all declared layouts may add up to (16 nodes of the largest layout).
pub const MAX_TOTAL_CPUS: u64 = 65_536;

/// The declared CPUs of each node the agent publishes for.
#[derive(Debug, Clone, Default)]
pub struct CpuBudget {
    per_node: BTreeMap<String, u64>,
    total: u64,
}

impl CpuBudget {
    /// Counts `node`'s layout `(sockets, cores, threads)` in place of what it declared
    /// before; an error naming the label when the total would pass [`MAX_TOTAL_CPUS`] (the
    /// node then counts for nothing).
    pub fn admit(&mut self, node: &str, (s, c, t): (u32, u32, u32)) -> Result<(), String> {
        self.release(node);
        let cpus = u64::from(s) * u64::from(c) * u64::from(t);
        if self.total + cpus > MAX_TOTAL_CPUS {
            return Err(format!(
                "label {LABEL_CPU_LAYOUT}: {s}x{c}x{t} would bring the CPUs the nodes declare to {}, more than {MAX_TOTAL_CPUS}; this node is simulated without a CPU topology",
                self.total + cpus
            ));
        }
        self.total += cpus;
        self.per_node.insert(node.to_string(), cpus);
        Ok(())
    }

    /// `node` declares no layout any more (or is gone).
    pub fn release(&mut self, node: &str) {
        if let Some(cpus) = self.per_node.remove(node) {
            self.total -= cpus;
        }
    }

    /// Whether the agent publishes a CPU topology for `node`.
    pub fn admitted(&self, node: &str) -> bool {
        self.per_node.contains_key(node)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_total_is_kept_across_replacements_and_deletions() {
        let mut b = CpuBudget::default();
        for i in 0..16 {
            b.admit(&format!("n{i}"), (2, 1024, 2)).expect("within");
        }
        let err = b.admit("n16", (1, 1, 1)).expect_err("one CPU too many");
        assert!(
            err.starts_with("label sim.berth.dev/cpu-layout: 1x1x1 would bring"),
            "{err}"
        );
        assert!(!b.admitted("n16"));
        // A node declaring again replaces its own count.
        b.admit("n0", (1, 4096, 1)).expect("same size again");
        b.admit("n0", (1, 1024, 1)).expect("smaller");
        b.admit("n16", (1, 3072, 1)).expect("the freed CPUs");
        assert!(b.admit("n17", (1, 1, 1)).is_err());
        b.release("n3");
        b.admit("n17", (1, 1, 1)).expect("after a deletion");
        assert!(b.admitted("n17") && !b.admitted("n3"));
    }
}
