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
//! the tree, and so are Events ([`SortedEvent`]). At most one object's tree is alive at a
//! time.

use berth_api::k8s_openapi::api::core::v1::Event as CoreEvent;
use berth_core::{Kind, Object};
use serde::ser::{Error as _, SerializeMap, SerializeSeq};
use serde::{Serialize, Serializer};

use super::meta::{Rfc3339, SortedMeta};
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
        let mut seq = serializer.serialize_seq(Some(self.0.len()))?;
        for_each_item(self.0, |item| match item {
            Item::Object(obj) => object_element(&mut seq, obj),
            Item::Event(e) => seq.serialize_element(&SortedEvent(e)),
        })?;
        seq.end()
    }
}

/// An item of the `List`.
pub(super) enum Item<'a> {
    Object(&'a Object),
    Event(&'a CoreEvent),
}

/// Hands `f` every item of the `List` of `store`, in output order, until it fails.
pub(super) fn for_each_item<E>(
    store: &Store,
    mut f: impl FnMut(Item<'_>) -> Result<(), E>,
) -> Result<(), E> {
    for kind in kinds() {
        match kind {
            Some(kind) => {
                for obj in store.of_kind(kind) {
                    f(Item::Object(obj))?;
                }
            }
            None => {
                for e in store.events() {
                    f(Item::Event(&e))?;
                }
            }
        }
    }
    Ok(())
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

/// Serializes `value` as its `Value` prints, as a map entry (see [`element`]).
fn entry<M: SerializeMap, T: Serialize + ?Sized>(
    map: &mut M,
    key: &str,
    value: &T,
) -> Result<(), M::Error> {
    if in_value_order(value) {
        map.serialize_entry(key, value)
    } else {
        let value = serde_json::to_value(value).map_err(|e| M::Error::custom(e.to_string()))?;
        map.serialize_entry(key, &value)
    }
}

/// A `v1` Event as its `Value` prints, without the `Value`: its own serialization writes
/// `apiVersion` and `kind` first, out of the sorted order; this writes the same fields,
/// present under the same conditions, in sorted order (every field of an Event is
/// present when it is `Some`, `involvedObject` and `metadata` always), each field's value
/// as its `Value` prints: metadata with managed fields or owner references checked (see
/// [`entry`]); other metadata (strings, integers, times, string maps); the times (a string each),
/// object references, series and source (strings, integers and times in fields of sorted
/// names) without the check, which would format every time once more.
pub(super) struct SortedEvent<'a>(pub(super) &'a CoreEvent);

impl Serialize for SortedEvent<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let e = self.0;
        let n = |present: bool| usize::from(present);
        let len = 4
            + n(e.action.is_some())
            + n(e.count.is_some())
            + n(e.event_time.is_some())
            + n(e.first_timestamp.is_some())
            + n(e.last_timestamp.is_some())
            + n(e.message.is_some())
            + n(e.reason.is_some())
            + n(e.related.is_some())
            + n(e.reporting_component.is_some())
            + n(e.reporting_instance.is_some())
            + n(e.series.is_some())
            + n(e.source.is_some())
            + n(e.type_.is_some());
        let mut map = serializer.serialize_map(Some(len))?;
        if let Some(v) = &e.action {
            map.serialize_entry("action", v)?;
        }
        map.serialize_entry("apiVersion", "v1")?;
        if let Some(v) = &e.count {
            map.serialize_entry("count", v)?;
        }
        if let Some(v) = &e.event_time {
            map.serialize_entry("eventTime", v)?;
        }
        if let Some(v) = &e.first_timestamp {
            map.serialize_entry("firstTimestamp", &Rfc3339(v))?;
        }
        map.serialize_entry("involvedObject", &e.involved_object)?;
        map.serialize_entry("kind", "Event")?;
        if let Some(v) = &e.last_timestamp {
            map.serialize_entry("lastTimestamp", &Rfc3339(v))?;
        }
        if let Some(v) = &e.message {
            map.serialize_entry("message", v)?;
        }
        // Metadata of strings, integers, times and string maps (a recorded event's) prints
        // as its `Value` by construction; managed fields and owner references are checked.
        if e.metadata.managed_fields.is_none() && e.metadata.owner_references.is_none() {
            map.serialize_entry("metadata", &SortedMeta(&e.metadata))?;
        } else {
            entry(&mut map, "metadata", &e.metadata)?;
        }
        if let Some(v) = &e.reason {
            map.serialize_entry("reason", v)?;
        }
        if let Some(v) = &e.related {
            map.serialize_entry("related", v)?;
        }
        if let Some(v) = &e.reporting_component {
            map.serialize_entry("reportingComponent", v)?;
        }
        if let Some(v) = &e.reporting_instance {
            map.serialize_entry("reportingInstance", v)?;
        }
        if let Some(v) = &e.series {
            map.serialize_entry("series", v)?;
        }
        if let Some(v) = &e.source {
            map.serialize_entry("source", v)?;
        }
        if let Some(v) = &e.type_ {
            map.serialize_entry("type", v)?;
        }
        map.end()
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
        Object::CsiDriver(o) => element(seq, &**o),
        Object::CsiStorageCapacity(o) => element(seq, &**o),
        Object::Deployment(o) => element(seq, &**o),
        Object::ReplicaSet(o) => element(seq, &**o),
        Object::StatefulSet(o) => element(seq, &**o),
        Object::PodMigrationJob(o) => element(seq, &**o),
        Object::ResourceSlice(o) => element(seq, &**o),
        Object::DeviceClass(o) => element(seq, &**o),
        Object::ResourceClaim(o) => element(seq, &**o),
        Object::ResourceClaimTemplate(o) => element(seq, &**o),
        Object::PodGroup(o) => element(seq, &**o),
        Object::Workload(o) => element(seq, &**o),
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

#[cfg(test)]
mod tests {
    use super::*;
    use berth_api::k8s_openapi::api::core::v1::{EventSeries, EventSource, ObjectReference};
    use berth_api::k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, Time};
    use berth_api::k8s_openapi::jiff::Timestamp;
    use proptest::prelude::*;

    /// Strings that print differently in YAML (quoted, or not), and plain ones.
    fn text() -> impl Strategy<Value = String> {
        prop_oneof![
            prop::sample::select(
                &["", "yes", "1", "a: b", "- x", "x\ny", "é", "null", "web-0"][..]
            )
            .prop_map(str::to_string),
            "[a-z0-9 .:#'\"-]{0,12}",
        ]
    }

    fn time() -> impl Strategy<Value = Timestamp> {
        (0i64..4_000_000_000, 0i32..1_000_000_000)
            .prop_map(|(s, ns)| Timestamp::new(s, ns).unwrap_or(Timestamp::UNIX_EPOCH))
    }

    fn reference() -> impl Strategy<Value = ObjectReference> {
        (
            prop::option::of(text()),
            prop::option::of(text()),
            prop::option::of(text()),
            prop::option::of(text()),
            prop::option::of(text()),
            (prop::option::of(text()), prop::option::of(text())),
        )
            .prop_map(
                |(api_version, kind, name, namespace, uid, (field_path, resource_version))| {
                    ObjectReference {
                        api_version,
                        field_path,
                        kind,
                        name,
                        namespace,
                        resource_version,
                        uid,
                    }
                },
            )
    }

    fn event() -> impl Strategy<Value = CoreEvent> {
        let map = || prop::option::of(prop::collection::btree_map(text(), text(), 0..3));
        let meta = (
            (
                prop::option::of(text()),
                prop::option::of(text()),
                prop::option::of(time()),
                map(),
                map(),
                prop::option::of(any::<i64>()),
                prop::option::of(time()),
            ),
            (
                prop::option::of(prop::collection::vec(text(), 0..3)),
                prop::option::of(text()),
                prop::option::of(any::<i64>()),
                prop::option::of(text()),
                prop::option::of(text()),
                prop::option::of(text()),
            ),
        )
            .prop_map(
                |(
                    (name, namespace, created, labels, annotations, grace, deleted),
                    (finalizers, generate_name, generation, resource_version, self_link, uid),
                )| ObjectMeta {
                    annotations,
                    creation_timestamp: created.map(Time),
                    deletion_grace_period_seconds: grace,
                    deletion_timestamp: deleted.map(Time),
                    finalizers,
                    generate_name,
                    generation,
                    labels,
                    managed_fields: None,
                    name,
                    namespace,
                    owner_references: None,
                    resource_version,
                    self_link,
                    uid,
                },
            );
        (
            (
                prop::option::of(text()),
                prop::option::of(any::<i32>()),
                prop::option::of(time()),
                prop::option::of(time()),
                reference(),
                prop::option::of(time()),
                prop::option::of(text()),
                meta,
            ),
            (
                prop::option::of(text()),
                prop::option::of(reference()),
                prop::option::of(text()),
                prop::option::of(text()),
                prop::option::of((prop::option::of(any::<i32>()), prop::option::of(time()))),
                prop::option::of((prop::option::of(text()), prop::option::of(text()))),
                prop::option::of(text()),
            ),
        )
            .prop_map(
                |(
                    (action, count, event_time, first, involved_object, last, message, metadata),
                    (
                        reason,
                        related,
                        reporting_component,
                        reporting_instance,
                        series,
                        source,
                        type_,
                    ),
                )| CoreEvent {
                    action,
                    count,
                    event_time: event_time.map(MicroTime),
                    first_timestamp: first.map(Time),
                    involved_object,
                    last_timestamp: last.map(Time),
                    message,
                    metadata,
                    reason,
                    related,
                    reporting_component,
                    reporting_instance,
                    series: series.map(|(count, t)| EventSeries {
                        count,
                        last_observed_time: t.map(MicroTime),
                    }),
                    source: source.map(|(component, host)| EventSource { component, host }),
                    type_,
                },
            )
    }

    /// An Event written in sorted order directly prints, in JSON and in YAML, what its
    /// `Value` prints, over random Events (every field present or not).
    #[test]
    fn a_sorted_event_prints_as_its_value() {
        let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
            cases: 2000,
            ..ProptestConfig::default()
        });
        runner
            .run(&event(), |e| {
                let value = serde_json::to_value(&e).unwrap();
                prop_assert_eq!(
                    serde_json::to_string_pretty(&SortedEvent(&e)).unwrap(),
                    serde_json::to_string_pretty(&value).unwrap()
                );
                prop_assert_eq!(
                    serde_yaml_ng::to_string(&SortedEvent(&e)).unwrap(),
                    serde_yaml_ng::to_string(&value).unwrap()
                );
                Ok(())
            })
            .unwrap();
    }
}
