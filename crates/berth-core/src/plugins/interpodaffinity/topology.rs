//! Counts keyed by topology pair (`topologyKey`, value), kube-scheduler's
//! `topologyToMatchedTermCount` and `scoreMap`.
//!
//! Nested by key then value so Filter and Score look pairs up by `&str` without building a
//! key. Filter and Score look pairs up for every node they visit, so the maps hash with
//! [`FastMap`]'s word-at-a-time hasher: SipHash took over 500 instructions per lookup, more
//! than the rest of a cycle's InterPodAffinity work once PreFilter's counts were remembered.
//! Nothing iterates these maps into an outcome (sums and "any positive" do not depend on
//! the order), so the hasher cannot change a result.

use crate::collections::FastMap as HashMap;

use crate::model::selector::Labels;

/// Topology key -> topology value -> count (or summed weight).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct TopologyCounts(HashMap<String, HashMap<String, i64>>);

impl TopologyCounts {
    /// Adds `delta` to the pair (`key`, the node's value of `key`), if the node has the label.
    /// The pair is recorded even when the sum comes to zero, as kube-scheduler's score map is.
    pub(crate) fn add(&mut self, node_labels: &Labels, key: &str, delta: i64) {
        let Some(value) = node_labels.get(key) else {
            return;
        };
        let values = match self.0.get_mut(key) {
            Some(v) => v,
            None => self.0.entry(key.to_string()).or_default(),
        };
        match values.get_mut(value.as_str()) {
            Some(c) => *c += delta,
            None => {
                values.insert(value.clone(), delta);
            }
        }
    }

    /// Adds `delta` to the pair as [`TopologyCounts::add`] does, but forgets a pair whose
    /// count comes to zero (and a key left without pairs): PreFilter's counts hold only
    /// positive pairs, and a pod removed then added back by preemption's dry run must leave
    /// them exactly as PreFilter would have computed them (Filter reads `is_empty`).
    pub(crate) fn update(&mut self, node_labels: &Labels, key: &str, delta: i64) {
        let Some(value) = node_labels.get(key) else {
            return;
        };
        let Some(values) = self.0.get_mut(key) else {
            if delta != 0 {
                self.add(node_labels, key, delta);
            }
            return;
        };
        let count = match values.get_mut(value.as_str()) {
            Some(c) => {
                *c += delta;
                *c
            }
            None if delta != 0 => {
                values.insert(value.clone(), delta);
                delta
            }
            None => return,
        };
        if count == 0 {
            values.remove(value.as_str());
            if values.is_empty() {
                self.0.remove(key);
            }
        }
    }

    /// Adds `delta` to the pair (`key`, `value`), forgetting the pair (and a key left without
    /// pairs) when it comes to zero, and returns the new count. The remembered answers of
    /// [`super::counting`] keep their hit counts this way.
    pub(crate) fn update_pair(&mut self, key: &str, value: &str, delta: i64) -> i64 {
        let values = match self.0.get_mut(key) {
            Some(v) => v,
            None if delta == 0 => return 0,
            None => self.0.entry(key.to_string()).or_default(),
        };
        let count = match values.get_mut(value) {
            Some(c) => {
                *c += delta;
                *c
            }
            None if delta != 0 => {
                values.insert(value.to_string(), delta);
                delta
            }
            None => 0,
        };
        if count == 0 {
            values.remove(value);
            if values.is_empty() {
                self.0.remove(key);
            }
        }
        count
    }

    /// Adds `delta` to the pair (`key`, `value`), keeping it when the sum comes to zero (as
    /// [`TopologyCounts::add`] does).
    pub(crate) fn add_pair(&mut self, key: &str, value: &str, delta: i64) {
        let values = match self.0.get_mut(key) {
            Some(v) => v,
            None => self.0.entry(key.to_string()).or_default(),
        };
        match values.get_mut(value) {
            Some(c) => *c += delta,
            None => {
                values.insert(value.to_string(), delta);
            }
        }
    }

    /// Forgets the pair (`key`, `value`), and the key when it is left without pairs.
    pub(crate) fn remove_pair(&mut self, key: &str, value: &str) {
        if let Some(values) = self.0.get_mut(key) {
            values.remove(value);
            if values.is_empty() {
                self.0.remove(key);
            }
        }
    }

    /// The count of a pair (0 when absent).
    pub(crate) fn get(&self, key: &str, value: &str) -> i64 {
        self.0
            .get(key)
            .and_then(|v| v.get(value))
            .copied()
            .unwrap_or(0)
    }

    /// The count for the node's value of `key` (0 when the node lacks the label).
    pub(crate) fn on_node(&self, node_labels: &Labels, key: &str) -> i64 {
        node_labels.get(key).map_or(0, |v| self.get(key, v))
    }

    /// Whether any pair the node is in has a positive count.
    pub(crate) fn any_positive_on(&self, node_labels: &Labels) -> bool {
        self.0.iter().any(|(key, values)| {
            node_labels
                .get(key)
                .and_then(|v| values.get(v.as_str()))
                .is_some_and(|c| *c > 0)
        })
    }

    /// The sum over every key of the node's pair (the InterPodAffinity raw score).
    pub(crate) fn sum_on(&self, node_labels: &Labels) -> i64 {
        self.0
            .iter()
            .filter_map(|(key, values)| values.get(node_labels.get(key)?.as_str()))
            .sum()
    }

    /// Every pair with its count (for tests).
    #[cfg(test)]
    pub(crate) fn pairs(&self) -> impl Iterator<Item = (&str, &str, i64)> + '_ {
        self.0.iter().flat_map(|(key, values)| {
            values
                .iter()
                .map(move |(value, c)| (key.as_str(), value.as_str(), *c))
        })
    }

    /// Whether no pair was recorded.
    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}
