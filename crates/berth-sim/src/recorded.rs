//! [`RecordedEvent`]: an event the simulator recorded for the scheduler, held as the few
//! facts that vary between such events; the `v1` Event is rebuilt from them when it is read.
//!
//! Why: every scheduled pod gets one (`Scheduled`), and a `v1` Event is a kilobyte of
//! mostly empty fields before its strings. Held whole, the events alone were a sixth of
//! issue 12's 10 KiB per pod.

use berth_api::k8s_openapi::api::core::v1::{Event as CoreEvent, EventSource, ObjectReference};
use berth_api::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use berth_core::time::Time;
use berth_core::ObjectKey;

use crate::objects::{api_version_of, derive_uid, meta_time, EVENT_COMPONENT};

/// What distinguishes one recorded event from another; its namespace and name are the
/// store's key for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordedEvent {
    /// The object it is about.
    pub involved: ObjectKey,
    /// That object's UID, when known.
    pub uid: Option<String>,
    /// `Normal` or `Warning`.
    pub type_: &'static str,
    /// Why.
    pub reason: String,
    /// What happened.
    pub message: String,
    /// When it was first recorded (also its creation time).
    pub first: Time,
    /// When it was last recorded.
    pub last: Time,
    /// How many times it was recorded.
    pub count: i32,
}

impl RecordedEvent {
    /// The `v1` Event named `name` in `namespace`, as the recorder wrote it.
    pub fn to_core(&self, namespace: &str, name: &str) -> CoreEvent {
        let kind = self.involved.kind;
        CoreEvent {
            metadata: ObjectMeta {
                name: Some(name.to_string()),
                namespace: Some(namespace.to_string()),
                uid: Some(derive_uid("Event", namespace, name)),
                creation_timestamp: Some(meta_time(self.first)),
                ..Default::default()
            },
            involved_object: ObjectReference {
                api_version: Some(api_version_of(kind).to_string()),
                kind: Some(kind.as_str().to_string()),
                namespace: (!self.involved.namespace.is_empty())
                    .then(|| self.involved.namespace.to_string()),
                name: Some(self.involved.name.to_string()),
                uid: self.uid.clone(),
                ..Default::default()
            },
            reason: Some(self.reason.clone()),
            message: Some(self.message.clone()),
            type_: Some(self.type_.to_string()),
            first_timestamp: Some(meta_time(self.first)),
            last_timestamp: Some(meta_time(self.last)),
            count: Some(self.count),
            source: Some(EventSource {
                component: Some(EVENT_COMPONENT.to_string()),
                host: None,
            }),
            reporting_component: Some(EVENT_COMPONENT.to_string()),
            ..Default::default()
        }
    }
}
