//! Timestamps and object metadata written without `jiff`'s format-string printer.
//!
//! k8s-openapi prints a `Time` through `strtime::format("%Y-%m-%dT%H:%M:%SZ")`, which parses
//! the format string every time: about 1,100 instructions a timestamp, a seventh of writing
//! `-o json`, for a simulation whose timestamps are mostly the same few seconds. [`Rfc3339`]
//! prints the same text from the civil date and time (about a tenth of that), and
//! [`SortedMeta`] is `ObjectMeta` printed with it: every field, present under the same
//! conditions and in the same (sorted) order as k8s-openapi prints them, so the bytes are
//! the same. Years outside `1000..=9999` (never from the simulator's clock) go through
//! k8s-openapi's own printing, whatever it does with them.

use berth_api::k8s_openapi::api::core::v1::{Node, NodeSpec, NodeStatus, Pod, PodSpec, PodStatus};
use berth_api::k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use berth_api::k8s_openapi::jiff::tz::Offset;
use berth_api::k8s_openapi::Resource;
use serde::ser::SerializeStruct;
use serde::{Serialize, Serializer};

/// A `Time`, printed as k8s-openapi prints it (`2024-01-01T00:00:00Z`).
pub(super) struct Rfc3339<'a>(pub(super) &'a Time);

impl Serialize for Rfc3339<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut buf = [0u8; 20];
        match format(self.0, &mut buf) {
            Some(text) => serializer.serialize_newtype_struct("Time", text),
            None => self.0.serialize(serializer),
        }
    }
}

/// `%Y-%m-%dT%H:%M:%SZ` of `t` in `buf`, for four-digit years.
fn format<'b>(t: &Time, buf: &'b mut [u8; 20]) -> Option<&'b str> {
    let dt = Offset::UTC.to_datetime(t.0);
    let year = dt.year();
    if !(1000..=9999).contains(&year) {
        return None;
    }
    let year = year as u16;
    let two = |buf: &mut [u8; 20], at: usize, n: i8| {
        buf[at] = b'0' + (n / 10) as u8;
        buf[at + 1] = b'0' + (n % 10) as u8;
    };
    buf[0] = b'0' + (year / 1000) as u8;
    buf[1] = b'0' + (year / 100 % 10) as u8;
    buf[2] = b'0' + (year / 10 % 10) as u8;
    buf[3] = b'0' + (year % 10) as u8;
    buf[4] = b'-';
    two(buf, 5, dt.month());
    buf[7] = b'-';
    two(buf, 8, dt.day());
    buf[10] = b'T';
    two(buf, 11, dt.hour());
    buf[13] = b':';
    two(buf, 14, dt.minute());
    buf[16] = b':';
    two(buf, 17, dt.second());
    buf[19] = b'Z';
    std::str::from_utf8(buf).ok()
}

/// `ObjectMeta` as k8s-openapi prints it, its own times through [`Rfc3339`] (managed
/// fields' and owner references' entries print through their own serialization).
pub(super) struct SortedMeta<'a>(pub(super) &'a ObjectMeta);

impl Serialize for SortedMeta<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let m = self.0;
        let n = |present: bool| usize::from(present);
        let len = n(m.annotations.is_some())
            + n(m.creation_timestamp.is_some())
            + n(m.deletion_grace_period_seconds.is_some())
            + n(m.deletion_timestamp.is_some())
            + n(m.finalizers.is_some())
            + n(m.generate_name.is_some())
            + n(m.generation.is_some())
            + n(m.labels.is_some())
            + n(m.managed_fields.is_some())
            + n(m.name.is_some())
            + n(m.namespace.is_some())
            + n(m.owner_references.is_some())
            + n(m.resource_version.is_some())
            + n(m.self_link.is_some())
            + n(m.uid.is_some());
        let mut s = serializer.serialize_struct("ObjectMeta", len)?;
        if let Some(v) = &m.annotations {
            s.serialize_field("annotations", v)?;
        }
        if let Some(v) = &m.creation_timestamp {
            s.serialize_field("creationTimestamp", &Rfc3339(v))?;
        }
        if let Some(v) = &m.deletion_grace_period_seconds {
            s.serialize_field("deletionGracePeriodSeconds", v)?;
        }
        if let Some(v) = &m.deletion_timestamp {
            s.serialize_field("deletionTimestamp", &Rfc3339(v))?;
        }
        if let Some(v) = &m.finalizers {
            s.serialize_field("finalizers", v)?;
        }
        if let Some(v) = &m.generate_name {
            s.serialize_field("generateName", v)?;
        }
        if let Some(v) = &m.generation {
            s.serialize_field("generation", v)?;
        }
        if let Some(v) = &m.labels {
            s.serialize_field("labels", v)?;
        }
        if let Some(v) = &m.managed_fields {
            s.serialize_field("managedFields", v)?;
        }
        if let Some(v) = &m.name {
            s.serialize_field("name", v)?;
        }
        if let Some(v) = &m.namespace {
            s.serialize_field("namespace", v)?;
        }
        if let Some(v) = &m.owner_references {
            s.serialize_field("ownerReferences", v)?;
        }
        if let Some(v) = &m.resource_version {
            s.serialize_field("resourceVersion", v)?;
        }
        if let Some(v) = &m.self_link {
            s.serialize_field("selfLink", v)?;
        }
        if let Some(v) = &m.uid {
            s.serialize_field("uid", v)?;
        }
        s.end()
    }
}

/// A Pod or a Node as k8s-openapi prints it (`apiVersion`, `kind`, `metadata`, then
/// `spec` and `status` when present), its metadata through [`SortedMeta`].
pub(super) struct WithMeta<'a, Spec, Status> {
    api_version: &'static str,
    kind: &'static str,
    meta: &'a ObjectMeta,
    spec: Option<&'a Spec>,
    status: Option<&'a Status>,
}

impl<'a> WithMeta<'a, PodSpec, PodStatus> {
    pub(super) fn pod(p: &'a Pod) -> Self {
        WithMeta {
            api_version: <Pod as Resource>::API_VERSION,
            kind: <Pod as Resource>::KIND,
            meta: &p.metadata,
            spec: p.spec.as_ref(),
            status: p.status.as_ref(),
        }
    }
}

impl<'a> WithMeta<'a, NodeSpec, NodeStatus> {
    pub(super) fn node(n: &'a Node) -> Self {
        WithMeta {
            api_version: <Node as Resource>::API_VERSION,
            kind: <Node as Resource>::KIND,
            meta: &n.metadata,
            spec: n.spec.as_ref(),
            status: n.status.as_ref(),
        }
    }
}

impl<Spec: Serialize, Status: Serialize> Serialize for WithMeta<'_, Spec, Status> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let len = 3 + usize::from(self.spec.is_some()) + usize::from(self.status.is_some());
        let mut s = serializer.serialize_struct(self.kind, len)?;
        s.serialize_field("apiVersion", self.api_version)?;
        s.serialize_field("kind", self.kind)?;
        s.serialize_field("metadata", &SortedMeta(self.meta))?;
        if let Some(v) = self.spec {
            s.serialize_field("spec", v)?;
        }
        if let Some(v) = self.status {
            s.serialize_field("status", v)?;
        }
        s.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use berth_api::k8s_openapi::apimachinery::pkg::apis::meta::v1::{
        ManagedFieldsEntry, OwnerReference,
    };
    use berth_api::k8s_openapi::jiff::Timestamp;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    fn time(seconds: i64, nanos: i32) -> Time {
        Time(Timestamp::new(seconds, nanos).expect("in range"))
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        /// Every timestamp jiff can hold prints as k8s-openapi prints it (years outside
        /// four digits through k8s-openapi itself).
        #[test]
        fn timestamps_print_as_k8s_openapi_prints_them(
            seconds in Timestamp::MIN.as_second()..=Timestamp::MAX.as_second(),
            nanos in 0i32..1_000_000_000,
        ) {
            prop_assume!(Timestamp::new(seconds, nanos).is_ok());
            let t = time(seconds, nanos);
            prop_assert_eq!(
                serde_json::to_string(&Rfc3339(&t)).expect("prints"),
                serde_json::to_string(&t).expect("prints")
            );
        }

        /// Metadata prints as k8s-openapi prints it, whichever fields are present.
        #[test]
        fn metadata_prints_as_k8s_openapi_prints_it(
            present in any::<u16>(),
            seconds in 0i64..4_000_000_000,
        ) {
            let on = |bit: u16| present & (1 << bit) != 0;
            let t = time(seconds, 0);
            let map = BTreeMap::from([("a".to_string(), "b".to_string())]);
            let meta = ObjectMeta {
                annotations: on(0).then(|| map.clone()),
                creation_timestamp: on(1).then(|| t.clone()),
                deletion_grace_period_seconds: on(2).then_some(30),
                deletion_timestamp: on(3).then(|| t.clone()),
                finalizers: on(4).then(|| vec!["f".to_string()]),
                generate_name: on(5).then(|| "g-".to_string()),
                generation: on(6).then_some(2),
                labels: on(7).then(|| map.clone()),
                managed_fields: on(8).then(|| vec![ManagedFieldsEntry {
                    manager: Some("m".into()),
                    time: Some(t.clone()),
                    ..Default::default()
                }]),
                name: on(9).then(|| "n".to_string()),
                namespace: on(10).then(|| "ns".to_string()),
                owner_references: on(11).then(|| vec![OwnerReference {
                    api_version: "v1".into(),
                    kind: "Pod".into(),
                    name: "o".into(),
                    uid: "u".into(),
                    ..Default::default()
                }]),
                resource_version: on(12).then(|| "7".to_string()),
                self_link: on(13).then(|| "/x".to_string()),
                uid: on(14).then(|| "uid".to_string()),
            };
            prop_assert_eq!(
                serde_json::to_string(&SortedMeta(&meta)).expect("prints"),
                serde_json::to_string(&meta).expect("prints")
            );
        }
    }

    /// A pod and a node print as their own serialization prints them.
    #[test]
    fn pods_and_nodes_print_as_k8s_openapi_prints_them() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "d", "creationTimestamp": "2024-01-01T00:00:05Z"},
            "spec": {"containers": [{"name": "c", "image": "i"}], "nodeName": "n"},
            "status": {"phase": "Running", "startTime": "2024-01-01T00:00:06Z"}
        }))
        .expect("a pod");
        assert_eq!(
            serde_json::to_string(&WithMeta::pod(&pod)).expect("prints"),
            serde_json::to_string(&pod).expect("prints")
        );
        let bare = Pod::default();
        assert_eq!(
            serde_json::to_string(&WithMeta::pod(&bare)).expect("prints"),
            serde_json::to_string(&bare).expect("prints")
        );
        let node: Node = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "n", "labels": {"a": "b"}},
            "spec": {"unschedulable": true},
            "status": {"allocatable": {"cpu": "4"}}
        }))
        .expect("a node");
        assert_eq!(
            serde_json::to_string(&WithMeta::node(&node)).expect("prints"),
            serde_json::to_string(&node).expect("prints")
        );
    }
}
