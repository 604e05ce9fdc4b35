//! `-o json` and `-o yaml`: the final cluster as one `v1` `List`, serialized object by object
//! straight to the writer.
//!
//! Why streamed: building the whole list as a `serde_json::Value` and then its text cost
//! more per pod than the simulated cluster itself, and issue 12 bounds a run at 10 KiB per
//! pod all told. The bytes are those of the tree [`super::list`] builds: the `List` is
//! serialized with the shape of that tree (its keys in sorted order, items sorted by kind,
//! namespace and name), and each object is turned into a `Value` on its own, just before it
//! is written, so its keys come out sorted as they did; an object whose own serialization
//! already gives its keys in that order (most: see [`super::sorted`]) is written without
//! the tree. At most one object's tree is alive at a time.

use berth_core::{Kind, Object};
use serde::ser::{Error as _, SerializeMap, SerializeSeq};
use serde::{Serialize, Serializer};

use super::sorted::in_value_order;

use crate::store::Store;

/// The `List` of every object and event of `store`, serializable without building it.
pub struct List<'a>(pub &'a Store);

impl Serialize for List<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        // The keys in the order a `serde_json::Map` (a sorted map) holds them.
        let mut map = serializer.serialize_map(Some(4))?;
        map.serialize_entry("apiVersion", "v1")?;
        map.serialize_entry("items", &Items(self.0))?;
        map.serialize_entry("kind", "List")?;
        map.serialize_entry("metadata", &serde_json::Map::new())?;
        map.end()
    }
}

/// The items, in output order.
struct Items<'a>(&'a Store);

impl Serialize for Items<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let store = self.0;
        let mut seq = serializer.serialize_seq(Some(store.len()))?;
        for kind in kinds() {
            match kind {
                Some(kind) => {
                    for obj in store.of_kind(kind) {
                        object_element(&mut seq, obj)?;
                    }
                }
                None => {
                    for e in store.events() {
                        element(&mut seq, &*e)?;
                    }
                }
            }
        }
        seq.end()
    }
}

/// Serializes `value` as its `Value` prints: straight, when [`in_value_order`] says that
/// gives the same text, else through the `Value`.
fn element<Q: SerializeSeq, T: Serialize + ?Sized>(seq: &mut Q, value: &T) -> Result<(), Q::Error> {
    if in_value_order(value) {
        seq.serialize_element(value)
    } else {
        let value = serde_json::to_value(value).map_err(|e| Q::Error::custom(e.to_string()))?;
        seq.serialize_element(&value)
    }
}

fn object_element<Q: SerializeSeq>(seq: &mut Q, obj: &Object) -> Result<(), Q::Error> {
    match obj {
        Object::Pod(o) => element(seq, &**o),
        Object::Node(o) => element(seq, &**o),
        Object::Reservation(o) => element(seq, &**o),
        Object::NodeResourceTopology(o) => element(seq, &**o),
        Object::PersistentVolumeClaim(o) => element(seq, &**o),
        Object::CsiNode(o) => element(seq, &**o),
        Object::PriorityClass(o) => element(seq, &**o),
        Object::PodDisruptionBudget(o) => element(seq, &**o),
        Object::Namespace(o) => element(seq, &**o),
        Object::PersistentVolume(o) => element(seq, &**o),
        Object::StorageClass(o) => element(seq, &**o),
    }
}

/// The kinds in the order of their names, with `Event` (`None`) in its place among them:
/// the store keeps each kind's objects (and the events) sorted by namespace and name
/// already, so visiting the kinds in this order gives every item sorted by kind name,
/// namespace and name, each serialized only when reached.
fn kinds() -> Vec<Option<Kind>> {
    let mut kinds: Vec<Option<Kind>> = Kind::ALL.into_iter().map(Some).collect();
    kinds.push(None);
    kinds.sort_by_key(|k| k.map_or("Event", Kind::as_str));
    kinds
}
