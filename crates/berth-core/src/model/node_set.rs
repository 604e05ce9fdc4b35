//! A set of nodes as one bit per node index: asked on every node filtered or scored
//! ("is this one of the pod's reservation nodes?"), where a bit test is a few instructions
//! and a hash lookup is dozens.

use super::node::NodeIdx;

/// Node indices, as bits.
#[derive(Debug, Clone, Default)]
pub struct NodeSet(Vec<u64>);

impl NodeSet {
    /// The set of `nodes`.
    pub fn of<'a>(nodes: impl IntoIterator<Item = &'a NodeIdx>) -> Self {
        let mut me = Self::default();
        for &n in nodes {
            me.insert(n);
        }
        me
    }

    /// Adds `node`.
    pub fn insert(&mut self, node: NodeIdx) {
        let i = node.index();
        if self.0.len() <= i / 64 {
            self.0.resize(i / 64 + 1, 0);
        }
        self.0[i / 64] |= 1u64 << (i % 64);
    }

    /// Whether `node` is in the set.
    #[inline]
    pub fn contains(&self, node: NodeIdx) -> bool {
        let i = node.index();
        self.0
            .get(i / 64)
            .is_some_and(|w| w & (1u64 << (i % 64)) != 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holds_exactly_what_was_inserted() {
        let set = NodeSet::of(&[NodeIdx(0), NodeIdx(63), NodeIdx(64), NodeIdx(700)]);
        for i in 0..800 {
            let want = matches!(i, 0 | 63 | 64 | 700);
            assert_eq!(set.contains(NodeIdx(i)), want, "node {i}");
        }
        assert!(!NodeSet::default().contains(NodeIdx(0)));
    }
}
