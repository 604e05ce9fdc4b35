//! `-o json` and `-o yaml`: the final cluster as one `v1` `List`, serialized object by object
//! straight to the writer.
//!
//! Why streamed: building the whole list as a `serde_json::Value` and then its text cost
//! more per pod than the simulated cluster itself, and issue 12 bounds a run at 10 KiB per
//! pod all told. The bytes are those of the tree [`super::list`] builds: the `List` is
//! serialized with the shape of that tree (its keys in sorted order, items sorted by kind,
//! namespace and name), and each object is turned into a `Value` on its own, just before it
//! is written, so its keys come out sorted as they did. Only one object's tree is alive at a
//! time.

use serde::ser::{Error as _, SerializeMap, SerializeSeq};
use serde::{Serialize, Serializer};
use serde_json::Value;

use berth_core::{Kind, Object};

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
        let mut seq = serializer.serialize_seq(Some(self.0.len()))?;
        for value in sorted(self.0) {
            let value = value.map_err(|e| S::Error::custom(e.to_string()))?;
            seq.serialize_element(&value)?;
        }
        seq.end()
    }
}

/// An object as a `Value` (keys sorted).
fn object_value(obj: &Object) -> Result<Value, serde_json::Error> {
    match obj {
        Object::Pod(o) => serde_json::to_value(&**o),
        Object::Node(o) => serde_json::to_value(&**o),
        Object::Reservation(o) => serde_json::to_value(&**o),
        Object::NodeResourceTopology(o) => serde_json::to_value(&**o),
        Object::PersistentVolumeClaim(o) => serde_json::to_value(&**o),
        Object::CsiNode(o) => serde_json::to_value(&**o),
        Object::PriorityClass(o) => serde_json::to_value(&**o),
        Object::PodDisruptionBudget(o) => serde_json::to_value(&**o),
        Object::Namespace(o) => serde_json::to_value(&**o),
        Object::PersistentVolume(o) => serde_json::to_value(&**o),
        Object::StorageClass(o) => serde_json::to_value(&**o),
    }
}

/// Every object and event of `store` as the `Value` the whole-tree rendering held for it,
/// sorted by kind name, namespace and name, each built only when the iterator reaches it:
/// the store keeps each kind's objects (and the events) sorted by namespace and name
/// already, so the kinds are visited in the order of their names, with `Event` in its place
/// among them.
fn sorted(store: &Store) -> impl Iterator<Item = Result<Value, serde_json::Error>> + '_ {
    let mut kinds: Vec<Option<Kind>> = Kind::ALL.into_iter().map(Some).collect();
    kinds.push(None);
    kinds.sort_by_key(|k| k.map_or("Event", Kind::as_str));
    kinds.into_iter().flat_map(move |kind| {
        let values: Box<dyn Iterator<Item = Result<Value, serde_json::Error>> + '_> = match kind {
            Some(kind) => Box::new(store.of_kind(kind).map(object_value)),
            None => Box::new(store.events().map(|e| serde_json::to_value(&*e))),
        };
        values
    })
}
