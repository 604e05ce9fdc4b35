//! Helpers about API objects that every part of the simulator shares (the API-server
//! part, the recorder, the controllers, the output): what the simulator fills in on create
//! (UIDs, times, metadata), how it names kinds, and what it reads back off pods. They sit
//! below everything else so that no lower module reaches up into [`crate::sim`].

use berth_api::annotations::keys::ANNOTATION_RESERVATION_ALLOCATED;
use berth_api::k8s_openapi::api::core::v1::{Event as CoreEvent, Pod};
use berth_api::k8s_openapi::apimachinery::pkg::apis::meta::v1::Time as MetaTime;
use berth_api::k8s_openapi::jiff::Timestamp;
use berth_core::time::Time;
use berth_core::{Kind, Object};
use serde_json::Value;

/// `source.component` of the events the simulator records for the scheduler.
pub const EVENT_COMPONENT: &str = "berth-scheduler";

/// A deterministic UID for an object without one: a UUID-shaped (version 8) hash of kind,
/// namespace and name.
pub fn derive_uid(kind: &str, namespace: &str, name: &str) -> String {
    let key = format!("{kind}/{namespace}/{name}");
    let a = xxhash_rust::xxh64::xxh64(key.as_bytes(), 0);
    let b = xxhash_rust::xxh64::xxh64(key.as_bytes(), 0x9e37_79b9_7f4a_7c15);
    // Version 8 (custom) and the RFC 9562 variant, so tools that parse UUIDs accept it.
    let a = (a & !0xf000) | 0x8000;
    let b = (b & !(0xc000_u64 << 48)) | (0x8000_u64 << 48);
    let hex = format!("{a:016x}{b:016x}");
    format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

/// `metav1.Time` for a virtual instant.
pub fn meta_time(t: Time) -> MetaTime {
    MetaTime(Timestamp::from_millisecond(t).unwrap_or(Timestamp::UNIX_EPOCH))
}

/// The name in a pod's `reservation-allocated` annotation, if it has a readable one.
pub fn allocated_reservation(p: &Pod) -> Option<String> {
    let text = p
        .metadata
        .annotations
        .as_ref()?
        .get(ANNOTATION_RESERVATION_ALLOCATED)?;
    let v: serde_json::Value = serde_json::from_str(text).ok()?;
    v.get("name")?.as_str().map(str::to_string)
}

/// The message of a pod's `PodScheduled` condition.
pub fn pod_scheduled_message(p: &Pod) -> Option<String> {
    p.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "PodScheduled")?
        .message
        .clone()
}

/// The `apiVersion` of a kind, for `involvedObject`.
pub fn api_version_of(kind: Kind) -> &'static str {
    match kind {
        Kind::Reservation | Kind::PodMigrationJob => "scheduling.koordinator.sh/v1alpha1",
        Kind::NodeResourceTopology => "topology.node.k8s.io/v1alpha2",
        Kind::CsiNode | Kind::StorageClass | Kind::CsiDriver | Kind::CsiStorageCapacity => {
            "storage.k8s.io/v1"
        }
        Kind::PriorityClass => "scheduling.k8s.io/v1",
        Kind::Workload => berth_api::gang::WORKLOAD_API_VERSION,
        Kind::PodGroup => berth_api::gang::SIGS_API_VERSION,
        Kind::PodDisruptionBudget => "policy/v1",
        Kind::Deployment | Kind::ReplicaSet | Kind::StatefulSet => "apps/v1",
        Kind::ResourceSlice
        | Kind::DeviceClass
        | Kind::ResourceClaim
        | Kind::ResourceClaimTemplate => berth_api::dra::API_VERSION,
        Kind::Node
        | Kind::Pod
        | Kind::PersistentVolumeClaim
        | Kind::Namespace
        | Kind::PersistentVolume => "v1",
    }
}

/// One object read from the input.
#[derive(Debug, Clone)]
pub enum Item {
    /// An object the scheduler watches.
    Object(Object),
    /// A `v1` Event (accepted so that a run's `-o yaml` output can be read back in).
    Event(Box<CoreEvent>),
}

impl Item {
    /// The object's kind as written in `kind`.
    pub fn kind_name(&self) -> &'static str {
        match self {
            Item::Object(o) => o.kind().as_str(),
            Item::Event(_) => "Event",
        }
    }
}

/// The JSON type of `v`, for messages (`invalid type: boolean, expected ...`).
pub(crate) fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "sequence",
        Value::Object(_) => "map",
    }
}
