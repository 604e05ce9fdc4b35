//! [`Store`]: the simulated API server's storage. Every object of the simulated cluster, as
//! the real API server would hold it; the output is a dump of it.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use berth_api::k8s_openapi::api::core::v1::{Event as CoreEvent, Node, Pod};
use berth_api::nrt::NodeResourceTopology;
use berth_api::reservation::Reservation;
use berth_core::time::Time;
use berth_core::{Kind, Object, ObjectKey};

use crate::recorded::RecordedEvent;

/// An event as stored: the simulator's own compactly, one from the input as written.
#[derive(Debug, Clone)]
enum StoredEvent {
    Recorded(RecordedEvent),
    Given(Box<CoreEvent>),
}

impl StoredEvent {
    fn reason(&self) -> Option<&str> {
        match self {
            StoredEvent::Recorded(e) => Some(&e.reason),
            StoredEvent::Given(e) => e.reason.as_deref(),
        }
    }

    fn get(&self, namespace: &str, name: &str) -> Cow<'_, CoreEvent> {
        match self {
            StoredEvent::Recorded(e) => Cow::Owned(e.to_core(namespace, name)),
            StoredEvent::Given(e) => Cow::Borrowed(e),
        }
    }
}

/// Objects by kind/namespace/name, plus `v1` Events by namespace/name, plus an index of
/// pods by node (for the node agent and the summary).
#[derive(Debug, Clone, Default)]
pub struct Store {
    objects: BTreeMap<ObjectKey, Object>,
    events: BTreeMap<(String, String), StoredEvent>,
    pods_by_node: BTreeMap<String, BTreeSet<ObjectKey>>,
}

impl Store {
    /// An object by key.
    pub fn get(&self, key: &ObjectKey) -> Option<&Object> {
        self.objects.get(key)
    }

    /// A pod by key.
    pub fn pod(&self, key: &ObjectKey) -> Option<&Arc<Pod>> {
        match self.objects.get(key) {
            Some(Object::Pod(p)) => Some(p),
            _ => None,
        }
    }

    /// A node by name.
    pub fn node(&self, name: &str) -> Option<&Arc<Node>> {
        match self.objects.get(&ObjectKey::cluster(Kind::Node, name)) {
            Some(Object::Node(n)) => Some(n),
            _ => None,
        }
    }

    /// A reservation by name.
    pub fn reservation(&self, name: &str) -> Option<&Arc<Reservation>> {
        match self
            .objects
            .get(&ObjectKey::cluster(Kind::Reservation, name))
        {
            Some(Object::Reservation(r)) => Some(r),
            _ => None,
        }
    }

    /// The NodeResourceTopology of node `name` (the object is named after the node).
    pub fn nrt(&self, name: &str) -> Option<&Arc<NodeResourceTopology>> {
        match self
            .objects
            .get(&ObjectKey::cluster(Kind::NodeResourceTopology, name))
        {
            Some(Object::NodeResourceTopology(t)) => Some(t),
            _ => None,
        }
    }

    /// Stores an object (create or replace); returns the previous one.
    pub fn insert(&mut self, obj: Object) -> Option<Object> {
        let key = obj.key();
        if let Object::Pod(p) = &obj {
            if let Some(node) = node_of(p) {
                self.pods_by_node
                    .entry(node.to_string())
                    .or_default()
                    .insert(key.clone());
            }
        }
        let old = self.objects.insert(key.clone(), obj);
        if let Some(Object::Pod(p)) = &old {
            self.unindex(&key, p);
        }
        old
    }

    /// Removes an object.
    pub fn remove(&mut self, key: &ObjectKey) -> Option<Object> {
        let old = self.objects.remove(key);
        if let Some(Object::Pod(p)) = &old {
            self.unindex(key, p);
        }
        old
    }

    fn unindex(&mut self, key: &ObjectKey, old: &Pod) {
        let Some(node) = node_of(old) else { return };
        // The new version may sit on the same node: keep the entry if so.
        let still_there =
            matches!(self.objects.get(key), Some(Object::Pod(p)) if node_of(p) == Some(node));
        if still_there {
            return;
        }
        if let Some(set) = self.pods_by_node.get_mut(node) {
            set.remove(key);
            if set.is_empty() {
                self.pods_by_node.remove(node);
            }
        }
    }

    /// Every object, by kind (in [`Kind`] order), namespace, name.
    pub fn objects(&self) -> impl Iterator<Item = &Object> + '_ {
        self.objects.values()
    }

    /// Objects of one kind, by namespace and name.
    pub fn of_kind(&self, kind: Kind) -> impl Iterator<Item = &Object> + '_ {
        self.objects
            .range(ObjectKey::new(kind, "", "")..)
            .take_while(move |(k, _)| k.kind == kind)
            .map(|(_, o)| o)
    }

    /// Pods (any phase) whose `spec.nodeName` is `node`, by namespace and name.
    pub fn pods_on(&self, node: &str) -> impl Iterator<Item = &Arc<Pod>> + '_ {
        self.pods_by_node
            .get(node)
            .into_iter()
            .flatten()
            .filter_map(|k| self.pod(k))
    }

    /// `v1` Events, by namespace and name. Events the simulator recorded are built as they
    /// are read (see [`RecordedEvent`]).
    pub fn events(&self) -> impl Iterator<Item = Cow<'_, CoreEvent>> + '_ {
        self.events.iter().map(|((ns, name), e)| e.get(ns, name))
    }

    /// [`Store::events`] with `reason`, without building the others.
    pub fn events_with_reason<'a>(
        &'a self,
        reason: &'a str,
    ) -> impl Iterator<Item = Cow<'a, CoreEvent>> + 'a {
        self.events
            .iter()
            .filter(move |(_, e)| e.reason() == Some(reason))
            .map(|((ns, name), e)| e.get(ns, name))
    }

    /// Counts one more occurrence of the event `namespace`/`name` at `now` (`count` and
    /// `lastTimestamp`); false when there is no such event.
    pub fn repeat_event(&mut self, namespace: &str, name: &str, now: Time) -> bool {
        let Some(e) = self
            .events
            .get_mut(&(namespace.to_string(), name.to_string()))
        else {
            return false;
        };
        match e {
            StoredEvent::Recorded(e) => {
                e.count = e.count.saturating_add(1);
                e.last = now;
            }
            StoredEvent::Given(e) => {
                e.count = Some(e.count.unwrap_or(1).saturating_add(1));
                e.last_timestamp = Some(crate::objects::meta_time(now));
            }
        }
        true
    }

    /// Stores an event (create or replace).
    pub fn insert_event(&mut self, event: CoreEvent) {
        let key = (
            event.metadata.namespace.clone().unwrap_or_default(),
            event.metadata.name.clone().unwrap_or_default(),
        );
        self.events.insert(key, StoredEvent::Given(Box::new(event)));
    }

    /// Stores an event the simulator recorded, named `name` in `namespace` (create or
    /// replace).
    pub fn record_event(&mut self, namespace: String, name: String, event: RecordedEvent) {
        self.events
            .insert((namespace, name), StoredEvent::Recorded(event));
    }

    /// How many objects and events are stored.
    pub fn len(&self) -> usize {
        self.objects.len() + self.events.len()
    }

    /// Whether nothing is stored.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

fn node_of(p: &Pod) -> Option<&str> {
    p.spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .filter(|n| !n.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use berth_core::testing::{node, pod};

    fn bound(name: &str, node: &str) -> Object {
        let p = pod(name).build();
        let mut p = (*p).clone();
        p.spec.get_or_insert_with(Default::default).node_name = Some(node.to_string());
        Object::Pod(Arc::new(p))
    }

    #[test]
    fn pods_by_node_follows_replacement_and_removal() {
        let mut s = Store::default();
        s.insert(Object::Node(node("n1").build()));
        s.insert(bound("a", "n1"));
        s.insert(bound("b", "n1"));
        assert_eq!(s.pods_on("n1").count(), 2);
        s.insert(bound("a", "n2"));
        assert_eq!(s.pods_on("n1").count(), 1);
        assert_eq!(s.pods_on("n2").count(), 1);
        s.insert(bound("b", "n1"));
        assert_eq!(
            s.pods_on("n1").count(),
            1,
            "replacing in place keeps the entry"
        );
        s.remove(&ObjectKey::pod("default", "b"));
        assert_eq!(s.pods_on("n1").count(), 0);
    }

    #[test]
    fn of_kind_yields_only_that_kind() {
        let mut s = Store::default();
        s.insert(Object::Node(node("n1").build()));
        s.insert(Object::Node(node("n2").build()));
        s.insert(bound("a", "n1"));
        assert_eq!(s.of_kind(Kind::Node).count(), 2);
        assert_eq!(s.of_kind(Kind::Pod).count(), 1);
        assert_eq!(s.of_kind(Kind::Reservation).count(), 0);
    }
}
