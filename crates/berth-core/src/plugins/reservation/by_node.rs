//! The per-node part of the Reservation plugin's cycle state.
//!
//! It is looked up several times on every node filtered and scored (what the pod gets back
//! there, its pod slots, Filter's and Score's own questions), and it holds only the few
//! nodes with a reservation the pod may use. A node-indexed bit set in front of the map
//! answers "not here" for all the other nodes with a bit test instead of a hash.

use crate::collections::FastMap;
use crate::model::node::NodeIdx;
use crate::model::NodeSet;

/// A map by node with a membership bit per node index.
#[derive(Debug, Clone)]
pub struct ByNode<T> {
    present: NodeSet,
    map: FastMap<NodeIdx, T>,
}

impl<T> Default for ByNode<T> {
    fn default() -> Self {
        Self {
            present: NodeSet::default(),
            map: FastMap::default(),
        }
    }
}

impl<T> ByNode<T> {
    #[inline]
    fn has(&self, node: NodeIdx) -> bool {
        self.present.contains(node)
    }

    fn mark(&mut self, node: NodeIdx) {
        self.present.insert(node);
    }

    /// The entry of `node`.
    #[inline]
    pub fn get(&self, node: &NodeIdx) -> Option<&T> {
        if !self.has(*node) {
            return None;
        }
        self.map.get(node)
    }

    /// The entry of `node`, mutably.
    #[inline]
    pub fn get_mut(&mut self, node: &NodeIdx) -> Option<&mut T> {
        if !self.has(*node) {
            return None;
        }
        self.map.get_mut(node)
    }

    /// Whether `node` has an entry.
    #[inline]
    pub fn contains_key(&self, node: &NodeIdx) -> bool {
        self.has(*node) && self.map.contains_key(node)
    }

    /// Sets the entry of `node`.
    pub fn insert(&mut self, node: NodeIdx, value: T) {
        self.mark(node);
        self.map.insert(node, value);
    }

    /// Room for `additional` more entries.
    pub fn reserve(&mut self, additional: usize) {
        self.map.reserve(additional);
    }

    /// How many nodes have an entry.
    #[inline]
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether no node has an entry.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// The nodes with an entry, in no particular order.
    pub fn keys(&self) -> impl Iterator<Item = &NodeIdx> + '_ {
        self.map.keys()
    }

    /// The nodes and their entries, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (&NodeIdx, &T)> + '_ {
        self.map.iter()
    }

    /// The entries, in no particular order.
    pub fn values(&self) -> impl Iterator<Item = &T> + '_ {
        self.map.values()
    }

    /// The entries, mutably, in no particular order.
    pub fn values_mut(&mut self) -> impl Iterator<Item = &mut T> + '_ {
        self.map.values_mut()
    }
}

impl<T: Default> ByNode<T> {
    /// The entry of `node`, created empty if missing.
    pub fn entry_or_default(&mut self, node: NodeIdx) -> &mut T {
        self.mark(node);
        self.map.entry(node).or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1000))]
        /// The bit set never hides an entry and never invents one: every question gets the
        /// map's answer.
        #[test]
        fn answers_as_the_map_alone(
            ops in proptest::collection::vec((0u32..300, any::<bool>(), 0i64..5), 0..40),
            probes in proptest::collection::vec(0u32..400, 0..40),
        ) {
            let mut by = ByNode::<i64>::default();
            let mut plain = FastMap::default();
            for (n, insert, v) in ops {
                let n = NodeIdx(n);
                if insert {
                    by.insert(n, v);
                    plain.insert(n, v);
                } else {
                    *by.entry_or_default(n) += v;
                    *plain.entry(n).or_default() += v;
                }
            }
            for p in probes.into_iter().chain(plain.keys().map(|k: &NodeIdx| k.0).collect::<Vec<_>>()) {
                let p = NodeIdx(p);
                prop_assert_eq!(by.get(&p), plain.get(&p));
                prop_assert_eq!(by.contains_key(&p), plain.contains_key(&p));
                if let Some(v) = by.get_mut(&p) {
                    *v += 1;
                    *plain.get_mut(&p).unwrap() += 1;
                }
            }
            prop_assert_eq!(by.is_empty(), plain.is_empty());
            prop_assert_eq!(by.len(), plain.len());
        }
    }
}
