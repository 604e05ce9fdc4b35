//! A standby's warm caches: what the watchers delivered, kept per kind as the API server has
//! it, so that a replica that becomes the leader hands its core a complete view at once
//! instead of re-listing everything (kube-scheduler's standby keeps its informers running for
//! the same reason).

use std::collections::{BTreeMap, BTreeSet};

use berth_core::collections::HashMap;
use berth_core::object::{Kind, Object, ObjectKey};
use berth_core::Event;

/// The objects of every watched kind.
#[derive(Debug, Default)]
pub struct Mirror {
    watched: Vec<Kind>,
    objects: HashMap<Kind, BTreeMap<ObjectKey, Object>>,
    /// Kinds in the middle of a LIST, with the keys it returned so far.
    listing: HashMap<Kind, BTreeSet<ObjectKey>>,
    /// Kinds whose first LIST is complete.
    listed: BTreeSet<Kind>,
}

impl Mirror {
    /// An empty mirror of `watched`.
    pub fn new(watched: Vec<Kind>) -> Self {
        Self {
            watched,
            ..Self::default()
        }
    }

    /// Whether every watched kind has been listed once.
    pub fn synced(&self) -> bool {
        self.watched.iter().all(|k| self.listed.contains(k))
    }

    /// Applies a watch event; a LIST's end drops what it did not return.
    pub fn apply(&mut self, event: Event) {
        match event {
            Event::Applied(o) => {
                let key = o.key();
                if let Some(keys) = self.listing.get_mut(&key.kind) {
                    keys.insert(key.clone());
                }
                self.objects.entry(key.kind).or_default().insert(key, o);
            }
            Event::Deleted(key) => {
                if let Some(m) = self.objects.get_mut(&key.kind) {
                    m.remove(&key);
                }
            }
            Event::ListStarted(kind) => {
                self.listing.insert(kind, BTreeSet::new());
            }
            Event::Listed(kind) => {
                if let Some(keys) = self.listing.remove(&kind) {
                    if let Some(m) = self.objects.get_mut(&kind) {
                        m.retain(|k, _| keys.contains(k));
                    }
                }
                self.listed.insert(kind);
            }
            _ => {}
        }
    }

    /// The events that give a fresh core this view: per listed kind, a LIST of its objects
    /// in key order (as the API server lists them).
    pub fn replay(self) -> Vec<Event> {
        let mut out = Vec::new();
        let mut objects = self.objects;
        for kind in &self.watched {
            if !self.listed.contains(kind) {
                continue; // its first LIST will come live
            }
            out.push(Event::ListStarted(*kind));
            if let Some(m) = objects.remove(kind) {
                out.extend(m.into_values().map(Event::Applied));
            }
            out.push(Event::Listed(*kind));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use berth_core::testing::{node, pod};

    #[test]
    fn a_relist_drops_what_it_did_not_return_and_replay_lists_every_kind() {
        let mut m = Mirror::new(vec![Kind::Node, Kind::Pod]);
        m.apply(Event::ListStarted(Kind::Node));
        m.apply(Event::Applied(Object::Node(node("n1").build())));
        m.apply(Event::Applied(Object::Node(node("n2").build())));
        m.apply(Event::Listed(Kind::Node));
        assert!(!m.synced());
        m.apply(Event::ListStarted(Kind::Pod));
        m.apply(Event::Applied(Object::Pod(pod("p").build())));
        m.apply(Event::Listed(Kind::Pod));
        assert!(m.synced());
        // A watch error, then a re-list that no longer has n1.
        m.apply(Event::ListStarted(Kind::Node));
        m.apply(Event::Applied(Object::Node(node("n2").build())));
        m.apply(Event::Listed(Kind::Node));
        let names: Vec<String> = m
            .replay()
            .into_iter()
            .map(|e| match e {
                Event::ListStarted(k) => format!("start {k}"),
                Event::Listed(k) => format!("done {k}"),
                Event::Applied(o) => o.key().to_string(),
                _ => "?".into(),
            })
            .collect();
        assert_eq!(
            names,
            [
                "start Node",
                "n2",
                "done Node",
                "start Pod",
                "default/p",
                "done Pod"
            ]
        );
    }
}
