//! Koordinator's `Reservation` custom resource (`scheduling.koordinator.sh/v1alpha1`,
//! cluster-scoped), wire-compatible with `apis/scheduling/v1alpha1/reservation_types.go`.
//!
//! berth reads and writes the very objects koord-scheduler does, so every field, its JSON name
//! and its omission rule follow the Go type, and the derived CRD
//! ([`crate::crd::reservation_crd`]) accepts everything the upstream CRD accepts.
//!
//! Deserialization is deliberately lenient (a missing `template` or `owners` still
//! deserializes) so that a bad object becomes a [`ValidationError`] naming the field rather
//! than an opaque parse failure; the schema still marks both required, as upstream does.
//!
//! Three checks exist, in the order an object meets them in a real cluster:
//! 1. [`Reservation::apply_defaults`]: what the API server fills in from the CRD's defaults.
//! 2. [`Reservation::validate`]: what the API server (or koord-scheduler's decoder) rejects;
//!    such an object never reaches a scheduler.
//! 3. [`Reservation::scheduler_problems`]: objects the API server stores but koord-scheduler
//!    ignores ([`SchedulerProblem::ignored_by_scheduler`]) or that probably do not do what the
//!    author meant; the messages are fit for a status condition or an event.

use std::collections::BTreeMap;
use std::fmt;
use std::ops::{Deref, DerefMut};

use k8s_openapi::api::core::v1::{ObjectReference, PodTemplateSpec, Taint};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::duration::{DurationError, GoDuration};

/// The TTL the CRD defaults `spec.ttl` to.
pub const DEFAULT_TTL: &str = "24h";

/// What to reserve, for whom, and for how long.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "scheduling.koordinator.sh",
    version = "v1alpha1",
    kind = "Reservation",
    plural = "reservations",
    singular = "reservation",
    status = "ReservationStatus",
    derive = "PartialEq",
    derive = "Default",
    doc = "Reservation is the Schema for the reservation API.\nA Reservation object is non-namespaced.\nAny namespaced affinity/anti-affinity of reservation scheduling can be specified in the spec.template.",
    // Raw JSON rather than `printcolumn(name = .., type_ = ..)`: clippy's
    // `duplicated_attributes` misreads repeated `type_ = "string"` as duplicates.
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase","description":"The phase of reservation"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    printcolumn = r#"{"name":"Node","type":"string","jsonPath":".status.nodeName"}"#,
    printcolumn = r#"{"name":"TTL","type":"string","jsonPath":".spec.ttl"}"#,
    printcolumn = r#"{"name":"Expires","type":"string","jsonPath":".spec.expires"}"#
)]
#[serde(rename_all = "camelCase")]
// Both are required by the upstream CRD; the Rust side reads them leniently (see module doc).
#[schemars(extend("required" = ["owners", "template"]))]
pub struct ReservationSpec {
    /// Scheduling requirements (requests, affinity, tolerations, spread, ports, volumes,
    /// priority, schedulerName, ...) processed like a pod's. `template.spec.nodeName` pins the
    /// reservation to that node. Schemaless in the CRD, so unknown keys are kept.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(required)]
    pub template: Option<ReservationPodTemplate>,

    /// Who may allocate the reserved resources. Items are ORed; the selectors inside one item
    /// are ANDed. The CRD requires at least one item.
    #[serde(default)]
    #[schemars(length(min = 1), transform = drop_default)]
    pub owners: Vec<ReservationOwner>,

    /// Time to live, counted from `metadata.creationTimestamp`; `"0"` disables expiry.
    /// Defaults to `"24h"` even when `expires` is set, so with both the earlier one wins.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "24h"))]
    pub ttl: Option<GoDuration>,

    /// Absolute expiry time, checked before `ttl`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires: Option<Time>,

    /// Allow placing the reservation by pre-allocating resources of running pods.
    #[serde(default, skip_serializing_if = "is_false")]
    pub pre_allocation: bool,

    /// Only the first owner may allocate; then the phase becomes `Succeeded`. Absent means
    /// `true` (the CRD default); `ReservationSpec::allocate_once()` applies it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = true))]
    pub allocate_once: Option<bool>,

    /// How owners may combine reserved and node resources. Absent or `""` is the deprecated
    /// default policy.
    #[serde(default, skip_serializing_if = "ReservationAllocatePolicy::is_default")]
    #[schemars(schema_with = "allocate_policy_schema")]
    pub allocate_policy: ReservationAllocatePolicy,

    /// New pods cannot match unless their `reservation-affinity` tolerates
    /// `node.kubernetes.io/unschedulable:NoSchedule`.
    #[serde(default, skip_serializing_if = "is_false")]
    pub unschedulable: bool,

    /// Tolerated only through the pod's `reservation-affinity` tolerations; only `NoSchedule`
    /// and `NoExecute` count, and nothing is evicted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub taints: Vec<Taint>,

    /// How pre-allocation picks running pods (`preAllocation: true` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pre_allocation_policy: Option<PreAllocationPolicy>,
}

/// `#[serde(default)]` makes schemars advertise `default: []`; the API server would then
/// insert an empty list instead of reporting the field as missing, unlike upstream's CRD.
fn drop_default(schema: &mut schemars::Schema) {
    schema.remove("default");
}

fn is_false(b: &bool) -> bool {
    !*b
}

impl ReservationSpec {
    /// `allocateOnce` with its default applied (Koordinator's `BoolDeref(allocateOnce, true)`).
    pub fn allocate_once(&self) -> bool {
        self.allocate_once.unwrap_or(true)
    }
}

/// `spec.template`: a pod template plus whatever else the author wrote beside `metadata` and
/// `spec`.
///
/// The field is schemaless upstream (`x-kubernetes-preserve-unknown-fields`), so the API server
/// stores unknown keys; keeping them means an object berth reads and writes back is unchanged.
/// Koordinator itself ignores them: for example the upstream sample's `template.namespace` is
/// *not* the reserve pod's namespace (that is `template.metadata.namespace`).
///
/// Being schemaless, the template may hold anything (`containers: "not a list"`): such a
/// template still reads, as [`ReservationPodTemplate::unreadable`] (the field path and what is
/// wrong) with the written value kept verbatim, so the Reservation remains a Reservation the
/// scheduler can report on, expire and explain instead of an object it cannot see.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ReservationPodTemplate {
    /// The pod template (`metadata`, `spec`); empty when [`Self::unreadable`].
    pub pod: PodTemplateSpec,
    /// Keys other than `metadata` and `spec`, kept verbatim.
    pub unknown_fields: BTreeMap<String, serde_json::Value>,
    /// Why `metadata` or `spec` could not be read as a pod template, and the value as written.
    pub unreadable: Option<UnreadableTemplate>,
}

/// A template that is not a pod template (see [`ReservationPodTemplate`]).
#[derive(Clone, Debug, PartialEq)]
pub struct UnreadableTemplate {
    /// Path of the offending value from the Reservation's root, e.g.
    /// `spec.template.spec.containers`.
    pub path: String,
    /// What is wrong there (serde's description).
    pub message: String,
    /// The template as written, serialized back unchanged.
    pub raw: serde_json::Value,
}

impl fmt::Display for UnreadableTemplate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

/// The wire form of a readable template.
#[derive(Serialize, Deserialize)]
struct TemplateWire {
    #[serde(flatten)]
    pod: PodTemplateSpec,
    #[serde(flatten)]
    unknown_fields: BTreeMap<String, serde_json::Value>,
}

impl Serialize for ReservationPodTemplate {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        if let Some(bad) = &self.unreadable {
            return bad.raw.serialize(serializer);
        }
        TemplateWire {
            pod: self.pod.clone(),
            unknown_fields: self.unknown_fields.clone(),
        }
        .serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for ReservationPodTemplate {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let raw = serde_json::Value::deserialize(deserializer)?;
        Ok(Self::from_value(raw))
    }
}

impl ReservationPodTemplate {
    /// Reads a template from its JSON value; never fails (see [`Self::unreadable`]).
    pub fn from_value(raw: serde_json::Value) -> Self {
        let unreadable = |path: String, message: String, raw: serde_json::Value| Self {
            unreadable: Some(UnreadableTemplate { path, message, raw }),
            ..Self::default()
        };
        let serde_json::Value::Object(map) = &raw else {
            let message = format!("expected an object, got {}", json_type(&raw));
            return unreadable("spec.template".into(), message, raw);
        };
        let mut pod = PodTemplateSpec::default();
        let mut unknown_fields = BTreeMap::new();
        for (key, value) in map {
            let read = match key.as_str() {
                "metadata" => field(value).map(|m| pod.metadata = m),
                "spec" => field(value).map(|s| pod.spec = s),
                _ => {
                    unknown_fields.insert(key.clone(), value.clone());
                    Ok(())
                }
            };
            if let Err((path, message)) = read {
                let path = match path.as_str() {
                    "" | "." => format!("spec.template.{key}"),
                    p => format!("spec.template.{key}.{p}"),
                };
                return unreadable(path, message, raw);
            }
        }
        Self {
            pod,
            unknown_fields,
            unreadable: None,
        }
    }
}

/// Reads one field of the template, with the path inside it of whatever does not read.
fn field<T: serde::de::DeserializeOwned>(value: &serde_json::Value) -> Result<T, (String, String)> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        let message = e.into_inner().to_string();
        (path, message)
    })
}

/// The JSON type of `v`, as serde's messages name it.
fn json_type(v: &serde_json::Value) -> &'static str {
    match v {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "a list",
        serde_json::Value::Object(_) => "an object",
    }
}

impl From<PodTemplateSpec> for ReservationPodTemplate {
    fn from(pod: PodTemplateSpec) -> Self {
        Self {
            pod,
            unknown_fields: BTreeMap::new(),
            unreadable: None,
        }
    }
}

impl Deref for ReservationPodTemplate {
    type Target = PodTemplateSpec;
    fn deref(&self) -> &PodTemplateSpec {
        &self.pod
    }
}

impl DerefMut for ReservationPodTemplate {
    fn deref_mut(&mut self) -> &mut PodTemplateSpec {
        &mut self.pod
    }
}

impl JsonSchema for ReservationPodTemplate {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "ReservationPodTemplate".into()
    }

    fn inline_schema() -> bool {
        true
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        // Upstream: `+kubebuilder:pruning:PreserveUnknownFields` + `Schemaless`.
        schemars::json_schema!({ "x-kubernetes-preserve-unknown-fields": true })
    }
}

/// One owner selector. At least one of the three must be present (`minProperties: 1`); all
/// present ones must match (AND).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("minProperties" = 1))]
pub struct ReservationOwner {
    /// A specific object; Koordinator compares only the non-empty `uid`, `name`, `namespace`
    /// and `apiVersion`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-map-type" = "atomic"))]
    pub object: Option<ObjectReference>,
    /// Pods whose controller owner reference matches.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub controller: Option<ReservationControllerReference>,
    /// Pods whose labels match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-map-type" = "atomic"))]
    pub label_selector: Option<LabelSelector>,
}

impl ReservationOwner {
    /// True when no selector is present, which the CRD rejects (`minProperties: 1`).
    pub fn is_empty(&self) -> bool {
        self.object.is_none() && self.controller.is_none() && self.label_selector.is_none()
    }
}

/// `metav1.OwnerReference` inlined, plus `namespace` (owners may live in any namespace, the
/// Reservation in none).
///
/// The four identity fields are `Option` although the CRD requires them, so that an object
/// missing one still deserializes and [`Reservation::validate`] can say which one.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-map-type" = "atomic"))]
pub struct ReservationControllerReference {
    /// API version of the referent.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(required)]
    pub api_version: Option<String>,
    /// Kind of the referent.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(required)]
    pub kind: Option<String>,
    /// Name of the referent.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(required)]
    pub name: Option<String>,
    /// UID of the referent.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(required)]
    pub uid: Option<String>,
    /// If set, must equal the pod owner reference's `controller` flag.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub controller: Option<bool>,
    /// Carried for wire compatibility; ignored by matching.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub block_owner_deletion: Option<bool>,
    /// If set, the pod must be in this namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

/// `spec.allocatePolicy`.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ReservationAllocatePolicy {
    /// Absent or `""`: deprecated, "considered as Aligned" for fitting, but cannot share a
    /// node with `Aligned`/`Restricted` reservations.
    #[default]
    #[serde(rename = "")]
    Default,
    /// Take from one reservation's remainder first, the rest from the node.
    Aligned,
    /// Like `Aligned`, and reserved resource names may only come from the reservation.
    Restricted,
}

impl ReservationAllocatePolicy {
    /// True for the absent/`""` policy (which is not serialized, as in Go).
    pub fn is_default(&self) -> bool {
        *self == Self::Default
    }
}

fn allocate_policy_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    // Upstream's enum omits "": the empty policy can only be expressed by omission.
    schemars::json_schema!({
        "description": "AllocatePolicy represents the allocation policy of reserved resources that Reservation expects.",
        "type": "string",
        "enum": ["Aligned", "Restricted"],
    })
}

/// `spec.preAllocationPolicy`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PreAllocationPolicy {
    /// Which running pods are candidates; `Default` when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "Default"))]
    pub mode: Option<PreAllocationMode>,
    /// Allow pre-allocating several pods; `false` when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = false))]
    pub enable_multiple: Option<bool>,
}

/// `spec.preAllocationPolicy.mode`.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
pub enum PreAllocationMode {
    /// Candidates are running pods matched by the owners' label selectors.
    #[default]
    Default,
    /// Candidates are pods labelled `pod.koordinator.sh/is-pre-allocatable=true`.
    Cluster,
}

/// Observed state, written only by the scheduler and its status controller.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReservationStatus {
    /// Lifecycle phase; the CRD defaults it to `Pending` once a status exists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "Pending"))]
    pub phase: Option<ReservationPhase>,
    /// Why the reservation is (not) scheduled/ready.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<ReservationCondition>,
    /// Pods allocated from the reservation (`{namespace, name, uid}`, sorted by UID).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub current_owners: Vec<ObjectReference>,
    /// The node the reservation is bound to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_name: Option<String>,
    /// What owners may allocate (template requests overlaid by `reservation-resize-allocatable`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub allocatable: BTreeMap<String, Quantity>,
    /// Sum of owner requests, masked to the names in `allocatable` (not capped by it).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub allocated: BTreeMap<String, Quantity>,
}

/// `status.phase`.
///
/// The CRD does not restrict the string, so an unknown value is kept in [`Self::Other`]
/// instead of failing to read the object.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub enum ReservationPhase {
    /// Not yet scheduled, or unschedulable (see the `Scheduled` condition).
    #[default]
    Pending,
    /// Scheduled and allocatable by owners.
    Available,
    /// Allocate-once reservation consumed by its owner.
    Succeeded,
    /// Defined by Koordinator but never set by it (pre-allocation was meant to use it).
    Waiting,
    /// Expired, or its node is gone.
    Failed,
    /// A value Koordinator does not define.
    Other(String),
}

impl ReservationPhase {
    /// The wire string.
    pub fn as_str(&self) -> &str {
        match self {
            Self::Pending => "Pending",
            Self::Available => "Available",
            Self::Succeeded => "Succeeded",
            Self::Waiting => "Waiting",
            Self::Failed => "Failed",
            Self::Other(s) => s,
        }
    }

    /// Parses the wire string; anything unknown becomes [`Self::Other`].
    pub fn from_wire(s: &str) -> Self {
        match s {
            "Pending" => Self::Pending,
            "Available" => Self::Available,
            "Succeeded" => Self::Succeeded,
            "Waiting" => Self::Waiting,
            "Failed" => Self::Failed,
            other => Self::Other(other.to_string()),
        }
    }

    /// Koordinator's `IsReservationActive` phases: `Available` or `Waiting`.
    pub fn is_active(&self) -> bool {
        matches!(self, Self::Available | Self::Waiting)
    }

    /// `Succeeded` or `Failed`: the reservation never becomes available again.
    pub fn is_terminal(&self) -> bool {
        matches!(self, Self::Succeeded | Self::Failed)
    }
}

impl fmt::Display for ReservationPhase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for ReservationPhase {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for ReservationPhase {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let s = String::deserialize(deserializer)?;
        Ok(Self::from_wire(&s))
    }
}

impl JsonSchema for ReservationPhase {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "ReservationPhase".into()
    }

    fn inline_schema() -> bool {
        true
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({ "type": "string" })
    }
}

/// One entry of `status.conditions`. Types, statuses and reasons are plain strings, as in Go;
/// the known values are in the `condition` module.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReservationCondition {
    /// `Scheduled` or `Ready`.
    #[serde(default, rename = "type", skip_serializing_if = "String::is_empty")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub status: String,
    /// `Scheduled`, `Unschedulable`, `Available`, `Succeeded` or `Expired`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    /// Human-readable detail (for `Unschedulable`, the scheduler's full error).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// Last time the condition was evaluated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_probe_time: Option<Time>,
    /// Last time `status` changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<Time>,
}

/// The condition vocabulary Koordinator writes (`reservation_types.go`).
pub mod condition {
    /// Condition type: placement decided (or failed, with `Unschedulable`).
    pub const SCHEDULED: &str = "Scheduled";
    /// Condition type: allocatable by owners.
    pub const READY: &str = "Ready";
    /// Condition status.
    pub const TRUE: &str = "True";
    /// Condition status.
    pub const FALSE: &str = "False";
    /// Condition status.
    pub const UNKNOWN: &str = "Unknown";
    /// Reason on `Scheduled=True`.
    pub const REASON_SCHEDULED: &str = "Scheduled";
    /// Reason on `Scheduled=False`.
    pub const REASON_UNSCHEDULABLE: &str = "Unschedulable";
    /// Reason on `Ready=True`.
    pub const REASON_AVAILABLE: &str = "Available";
    /// Reason on `Ready=False` after an allocate-once reservation was consumed.
    pub const REASON_SUCCEEDED: &str = "Succeeded";
    /// Reason on `Ready=False` after TTL/expiry or node loss.
    pub const REASON_EXPIRED: &str = "Expired";
}

/// Something the API server (or koord-scheduler's decoder) would reject, with the field path
/// the API server would print (`spec.owners`, `spec.owners[0].controller.uid`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct ValidationError {
    /// JSON path of the offending field, API-server style.
    pub field: String,
    /// What is wrong, worded like the API server's field errors.
    pub message: String,
}

impl ValidationError {
    fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            message: message.into(),
        }
    }
}

/// A reservation the API server accepts but koord-scheduler ignores or that likely does not
/// do what its author meant. `Display` gives the text for a condition or event; the first
/// three are Koordinator's exact `ValidateReservation` strings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SchedulerProblem {
    /// No `spec.template`.
    MissingTemplate,
    /// No `spec.owners`.
    MissingOwners,
    /// Neither `spec.ttl` nor `spec.expires` (only possible before defaulting).
    MissingExpiration,
    /// An owner's label selector cannot be parsed; Koordinator then matches no pod at all.
    InvalidOwnerSelector {
        /// Index in `spec.owners`.
        index: usize,
        /// What is wrong with it.
        reason: String,
    },
    /// `spec.ttl` is negative: the reservation expires as soon as it is bound.
    NegativeTtl {
        /// The text as written.
        ttl: String,
    },
    /// Both `spec.ttl` (non-zero) and `spec.expires`: whichever comes first expires it.
    TtlAndExpires,
    /// An owner entry whose `object` reference has no field set: it matches every pod.
    OwnerMatchesEveryPod {
        /// Index in `spec.owners`.
        index: usize,
    },
    /// The template has no containers, so it reserves nothing but a pod slot.
    NoContainers,
}

impl SchedulerProblem {
    /// True when koord-scheduler skips the reservation entirely (never schedules it, matches
    /// no pod); the others are warnings.
    pub fn ignored_by_scheduler(&self) -> bool {
        matches!(
            self,
            Self::MissingTemplate
                | Self::MissingOwners
                | Self::MissingExpiration
                | Self::InvalidOwnerSelector { .. }
        )
    }

    /// The field the problem is about.
    pub fn field(&self) -> String {
        match self {
            Self::MissingTemplate => "spec.template".into(),
            Self::MissingOwners => "spec.owners".into(),
            Self::MissingExpiration | Self::NegativeTtl { .. } | Self::TtlAndExpires => {
                "spec.ttl".into()
            }
            Self::InvalidOwnerSelector { index, .. } => {
                format!("spec.owners[{index}].labelSelector")
            }
            Self::OwnerMatchesEveryPod { index } => format!("spec.owners[{index}].object"),
            Self::NoContainers => "spec.template.spec.containers".into(),
        }
    }
}

impl fmt::Display for SchedulerProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::MissingTemplate => f.write_str("the reservation misses the template spec"),
            Self::MissingOwners => f.write_str("the reservation misses the owner spec"),
            Self::MissingExpiration => f.write_str("the reservation misses the expiration spec"),
            Self::InvalidOwnerSelector { index, reason } => write!(
                f,
                "spec.owners[{index}].labelSelector is invalid ({reason}); the owner matches no pod"
            ),
            Self::NegativeTtl { ttl } => write!(
                f,
                "spec.ttl {ttl:?} is negative; the reservation expires as soon as it is scheduled"
            ),
            Self::TtlAndExpires => f.write_str(
                "spec.ttl and spec.expires are both set; the reservation expires at whichever comes first",
            ),
            Self::OwnerMatchesEveryPod { index } => write!(
                f,
                "spec.owners[{index}].object sets no field; the owner matches every pod"
            ),
            Self::NoContainers => f.write_str(
                "spec.template has no containers; the reservation reserves no resources",
            ),
        }
    }
}

impl Reservation {
    /// Fills in what the API server's CRD defaulting would: `spec.ttl = "24h"`,
    /// `spec.allocateOnce = true`, `preAllocationPolicy.{mode: Default, enableMultiple:
    /// false}` when the policy object exists, and `status.phase = Pending` when a status
    /// exists (structural defaulting only reaches into objects that are present, and the API
    /// server drops `status` on create, so a new object has no phase at all; read it through
    /// [`Reservation::phase`]).
    ///
    /// Note `ttl` is defaulted even when `expires` is set, exactly as upstream: such a
    /// reservation expires after 24h at the latest.
    pub fn apply_defaults(&mut self) {
        let spec = &mut self.spec;
        if spec.ttl.is_none() {
            spec.ttl = Some(GoDuration::new(DEFAULT_TTL));
        }
        if spec.allocate_once.is_none() {
            spec.allocate_once = Some(true);
        }
        if let Some(policy) = spec.pre_allocation_policy.as_mut() {
            policy.mode.get_or_insert(PreAllocationMode::Default);
            policy.enable_multiple.get_or_insert(false);
        }
        if let Some(status) = self.status.as_mut() {
            status.phase.get_or_insert(ReservationPhase::Pending);
        }
    }

    /// The phase, `Pending` when there is no status or no phase yet.
    pub fn phase(&self) -> ReservationPhase {
        self.status
            .as_ref()
            .and_then(|s| s.phase.clone())
            .unwrap_or_default()
    }

    /// The first thing the API server would reject, if any. See
    /// [`Reservation::validation_errors`] for the list.
    pub fn validate(&self) -> Result<(), ValidationError> {
        match self.validation_errors().into_iter().next() {
            Some(err) => Err(err),
            None => Ok(()),
        }
    }

    /// Everything the API server would reject (it reports all field errors at once), plus a
    /// `spec.ttl` that is not a Go duration: the API server stores any string there, but
    /// koord-scheduler cannot decode such an object and never sees it.
    pub fn validation_errors(&self) -> Vec<ValidationError> {
        let mut errors = Vec::new();
        let meta = &self.metadata;
        let name_missing = meta.name.as_deref().is_none_or(str::is_empty);
        let generate_missing = meta.generate_name.as_deref().is_none_or(str::is_empty);
        if name_missing && generate_missing {
            errors.push(ValidationError::new(
                "metadata.name",
                "Required value: name or generateName is required",
            ));
        }
        let spec = &self.spec;
        if spec.template.is_none() {
            errors.push(ValidationError::new("spec.template", "Required value"));
        }
        if spec.owners.is_empty() {
            errors.push(ValidationError::new(
                "spec.owners",
                "Invalid value: 0: spec.owners in body should have at least 1 items",
            ));
        }
        for (i, owner) in spec.owners.iter().enumerate() {
            let path = format!("spec.owners[{i}]");
            if owner.is_empty() {
                errors.push(ValidationError::new(
                    path.clone(),
                    format!("Invalid value: 0: {path} in body should have at least 1 properties"),
                ));
            }
            if let Some(controller) = &owner.controller {
                let required = [
                    ("apiVersion", &controller.api_version),
                    ("kind", &controller.kind),
                    ("name", &controller.name),
                    ("uid", &controller.uid),
                ];
                for (field, value) in required {
                    if value.is_none() {
                        errors.push(ValidationError::new(
                            format!("{path}.controller.{field}"),
                            "Required value",
                        ));
                    }
                }
            }
        }
        if let Some(ttl) = &spec.ttl {
            if let Err(err) = ttl.nanos() {
                errors.push(ValidationError::new(
                    "spec.ttl",
                    format!("Invalid value: {:?}: {err}", ttl.as_str()),
                ));
            }
        }
        for (i, taint) in spec.taints.iter().enumerate() {
            // k8s-openapi reads a missing key/effect as "", so empty is the best we can see.
            if taint.key.is_empty() {
                errors.push(ValidationError::new(
                    format!("spec.taints[{i}].key"),
                    "Required value",
                ));
            }
            if taint.effect.is_empty() {
                errors.push(ValidationError::new(
                    format!("spec.taints[{i}].effect"),
                    "Required value",
                ));
            }
        }
        errors
    }

    /// Problems koord-scheduler has with an object the API server accepted. Call it on a
    /// defaulted object ([`Reservation::apply_defaults`]) to see what koord-scheduler sees.
    pub fn scheduler_problems(&self) -> Vec<SchedulerProblem> {
        let mut problems = Vec::new();
        let spec = &self.spec;
        match &spec.template {
            None => problems.push(SchedulerProblem::MissingTemplate),
            Some(t) => {
                let has_containers = t.spec.as_ref().is_some_and(|s| !s.containers.is_empty());
                if !has_containers {
                    problems.push(SchedulerProblem::NoContainers);
                }
            }
        }
        if spec.owners.is_empty() {
            problems.push(SchedulerProblem::MissingOwners);
        }
        if spec.ttl.is_none() && spec.expires.is_none() {
            problems.push(SchedulerProblem::MissingExpiration);
        }
        for (index, owner) in spec.owners.iter().enumerate() {
            if let Some(selector) = &owner.label_selector {
                if let Err(reason) = check_label_selector(selector) {
                    problems.push(SchedulerProblem::InvalidOwnerSelector { index, reason });
                }
            }
            if owner.object.as_ref().is_some_and(object_reference_is_empty) {
                problems.push(SchedulerProblem::OwnerMatchesEveryPod { index });
            }
        }
        let ttl_nanos = spec.ttl.as_ref().and_then(|t| t.nanos().ok());
        if let (Some(ttl), Some(nanos)) = (&spec.ttl, ttl_nanos) {
            if nanos < 0 {
                problems.push(SchedulerProblem::NegativeTtl {
                    ttl: ttl.as_str().to_string(),
                });
            }
        }
        if spec.expires.is_some() && ttl_nanos.is_some_and(|n| n != 0) {
            problems.push(SchedulerProblem::TtlAndExpires);
        }
        problems
    }

    /// `spec.ttl` in milliseconds, `None` when absent. A negative value is returned as is;
    /// callers decide (Koordinator expires such a reservation immediately).
    pub fn ttl_millis(&self) -> Result<Option<i64>, DurationError> {
        self.spec.ttl.as_ref().map(GoDuration::millis).transpose()
    }
}

fn object_reference_is_empty(r: &ObjectReference) -> bool {
    // Matching compares only these four; with all empty the owner matches every pod.
    [&r.uid, &r.name, &r.namespace, &r.api_version]
        .iter()
        .all(|f| f.as_deref().is_none_or(str::is_empty))
}

/// The structural part of apimachinery's `LabelSelectorAsSelector` checks: operators and
/// value counts. (Key/value syntax is not checked.)
fn check_label_selector(selector: &LabelSelector) -> Result<(), String> {
    for (i, req) in selector.match_expressions.iter().flatten().enumerate() {
        let values = req.values.as_ref().map_or(0, Vec::len);
        if req.key.is_empty() {
            return Err(format!("matchExpressions[{i}]: key must not be empty"));
        }
        match req.operator.as_str() {
            "In" | "NotIn" if values == 0 => {
                return Err(format!(
                    "matchExpressions[{i}]: values: Required value: must be specified when `operator` is 'In' or 'NotIn'"
                ))
            }
            "Exists" | "DoesNotExist" if values > 0 => {
                return Err(format!(
                    "matchExpressions[{i}]: values: Forbidden: may not be specified when `operator` is 'Exists' or 'DoesNotExist'"
                ))
            }
            "In" | "NotIn" | "Exists" | "DoesNotExist" => {}
            other => return Err(format!("matchExpressions[{i}]: {other:?} is not a valid label selector operator")),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Container, PodSpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;
    use serde_json::json;

    #[test]
    fn an_unreadable_template_still_reads_names_its_path_and_round_trips() {
        let doc = json!({
            "apiVersion": "scheduling.koordinator.sh/v1alpha1",
            "kind": "Reservation",
            "metadata": {"name": "r"},
            "spec": {
                "template": {"metadata": {"labels": {"a": "b"}}, "spec": {"containers": "not a list"}, "x": 1},
                "owners": [{"object": {"name": "p"}}],
                "ttl": "10m",
            },
        });
        let r: Reservation = serde_json::from_value(doc.clone()).expect("still a Reservation");
        let t = r.spec.template.as_ref().expect("template");
        let bad = t.unreadable.as_ref().expect("unreadable");
        assert_eq!(bad.path, "spec.template.spec.containers");
        assert_eq!(
            bad.to_string(),
            r#"spec.template.spec.containers: invalid type: string "not a list", expected a sequence"#
        );
        assert_eq!(
            serde_json::to_value(&r).expect("writes")["spec"],
            doc["spec"]
        );
        let deep = json!({"spec": {"containers": [{"name": "c", "resources": {"requests": 5}}]}});
        let t = ReservationPodTemplate::from_value(deep);
        assert_eq!(
            t.unreadable.map(|b| b.path).as_deref(),
            Some("spec.template.spec.containers[0].resources.requests")
        );
        let t = ReservationPodTemplate::from_value(json!("x"));
        assert_eq!(
            t.unreadable.map(|b| b.path).as_deref(),
            Some("spec.template")
        );
        let good = ReservationPodTemplate::from_value(
            json!({"spec": {"containers": [{"name": "c"}]}, "namespace": "d"}),
        );
        assert!(good.unreadable.is_none());
        assert_eq!(good.unknown_fields.get("namespace"), Some(&json!("d")));
    }

    impl ReservationSpec {
        fn ttl_millis_for_test(&self) -> Option<i64> {
            self.ttl.as_ref().and_then(|t| t.millis().ok())
        }
    }

    fn minimal() -> Reservation {
        let mut r = Reservation::new(
            "r",
            ReservationSpec {
                template: Some(
                    PodTemplateSpec {
                        spec: Some(PodSpec {
                            containers: vec![Container {
                                name: "c".into(),
                                ..Default::default()
                            }],
                            ..Default::default()
                        }),
                        ..Default::default()
                    }
                    .into(),
                ),
                owners: vec![ReservationOwner {
                    object: Some(ObjectReference {
                        name: Some("p".into()),
                        ..Default::default()
                    }),
                    ..Default::default()
                }],
                ..Default::default()
            },
        );
        r.apply_defaults();
        r
    }

    #[test]
    fn defaults_match_the_crd() {
        let mut r: Reservation = serde_json::from_value(json!({
            "apiVersion": "scheduling.koordinator.sh/v1alpha1",
            "kind": "Reservation",
            "metadata": {"name": "r"},
            "spec": {
                "template": {},
                "owners": [{"object": {"name": "p"}}],
                "expires": "2030-01-01T00:00:00Z",
                "preAllocationPolicy": {},
            },
            "status": {},
        }))
        .expect("valid reservation");
        r.apply_defaults();
        assert_eq!(r.spec.ttl, Some(GoDuration::new("24h")));
        assert_eq!(r.spec.allocate_once, Some(true));
        let policy = r.spec.pre_allocation_policy.as_ref().expect("kept");
        assert_eq!(policy.mode, Some(PreAllocationMode::Default));
        assert_eq!(policy.enable_multiple, Some(false));
        assert_eq!(
            r.status.as_ref().and_then(|s| s.phase.clone()),
            Some(ReservationPhase::Pending)
        );
    }

    #[test]
    fn defaults_do_not_override_what_is_set() {
        let mut r = minimal();
        r.spec.ttl = Some(GoDuration::new("0"));
        r.spec.allocate_once = Some(false);
        r.status = None;
        r.apply_defaults();
        assert_eq!(r.spec.ttl, Some(GoDuration::new("0")));
        assert!(!r.spec.allocate_once());
        assert!(r.status.is_none(), "no status is invented");
        assert_eq!(r.phase(), ReservationPhase::Pending);
    }

    #[test]
    fn a_minimal_reservation_is_valid_and_unproblematic() {
        let r = minimal();
        assert_eq!(r.validate(), Ok(()));
        assert_eq!(r.scheduler_problems(), vec![]);
    }

    #[test]
    fn missing_owners_names_spec_owners() {
        let mut r = minimal();
        r.spec.owners.clear();
        let err = r.validate().expect_err("rejected");
        assert_eq!(err.field, "spec.owners");
        assert!(err.to_string().starts_with("spec.owners: "), "{err}");
        assert_eq!(
            r.scheduler_problems(),
            vec![SchedulerProblem::MissingOwners]
        );
        assert_eq!(
            SchedulerProblem::MissingOwners.to_string(),
            "the reservation misses the owner spec"
        );
    }

    #[test]
    fn an_owner_with_no_selector_is_rejected() {
        let mut r = minimal();
        r.spec.owners.push(ReservationOwner::default());
        let err = r.validate().expect_err("rejected");
        assert_eq!(err.field, "spec.owners[1]");
        assert!(err.message.contains("at least 1 properties"), "{err}");
    }

    #[test]
    fn a_controller_owner_needs_its_identity_fields() {
        let mut r = minimal();
        r.spec.owners = vec![ReservationOwner {
            controller: Some(ReservationControllerReference {
                kind: Some("StatefulSet".into()),
                name: Some("web".into()),
                ..Default::default()
            }),
            ..Default::default()
        }];
        let fields: Vec<String> = r.validation_errors().into_iter().map(|e| e.field).collect();
        assert_eq!(
            fields,
            [
                "spec.owners[0].controller.apiVersion",
                "spec.owners[0].controller.uid"
            ]
        );
    }

    #[test]
    fn missing_template_names_spec_template() {
        let r: Reservation = serde_json::from_value(json!({
            "apiVersion": "scheduling.koordinator.sh/v1alpha1",
            "kind": "Reservation",
            "metadata": {"name": "r"},
            "spec": {"owners": [{"object": {"name": "p"}}]},
        }))
        .expect("lenient read");
        let err = r.validate().expect_err("rejected");
        assert_eq!(err.field, "spec.template");
        assert_eq!(
            r.scheduler_problems(),
            vec![
                SchedulerProblem::MissingTemplate,
                SchedulerProblem::MissingExpiration
            ]
        );
        assert_eq!(
            SchedulerProblem::MissingExpiration.to_string(),
            "the reservation misses the expiration spec"
        );
        assert!(SchedulerProblem::MissingTemplate.ignored_by_scheduler());
    }

    #[test]
    fn an_unparseable_ttl_is_rejected_with_gos_message() {
        let mut r = minimal();
        r.spec.ttl = Some(GoDuration::new("1d"));
        let err = r.validate().expect_err("rejected");
        assert_eq!(err.field, "spec.ttl");
        assert!(
            err.message
                .contains(r#"time: unknown unit "d" in duration "1d""#),
            "{err}"
        );
    }

    #[test]
    fn ttl_with_expires_and_empty_template_are_warnings_not_rejections() {
        let mut r = minimal();
        r.spec.expires = Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
        if let Some(t) = r.spec.template.as_mut() {
            t.spec = None;
        }
        assert_eq!(r.validate(), Ok(()));
        let problems = r.scheduler_problems();
        assert_eq!(
            problems,
            vec![
                SchedulerProblem::NoContainers,
                SchedulerProblem::TtlAndExpires
            ]
        );
        assert!(problems.iter().all(|p| !p.ignored_by_scheduler()));
        // ttl "0" disables expiry, so only expires applies.
        r.spec.ttl = Some(GoDuration::new("0"));
        assert_eq!(r.scheduler_problems(), vec![SchedulerProblem::NoContainers]);
    }

    #[test]
    fn negative_ttl_and_bad_selectors_are_reported() {
        let mut r = minimal();
        r.spec.ttl = Some(GoDuration::new("-1s"));
        r.spec.owners.push(ReservationOwner {
            label_selector: Some(LabelSelector {
                match_expressions: Some(vec![LabelSelectorRequirement {
                    key: "app".into(),
                    operator: "In".into(),
                    values: None,
                }]),
                ..Default::default()
            }),
            object: Some(ObjectReference {
                kind: Some("Pod".into()),
                ..Default::default()
            }),
            ..Default::default()
        });
        let problems = r.scheduler_problems();
        assert_eq!(problems.len(), 3, "{problems:?}");
        assert!(matches!(
            problems[0],
            SchedulerProblem::InvalidOwnerSelector { index: 1, .. }
        ));
        assert_eq!(problems[0].field(), "spec.owners[1].labelSelector");
        assert_eq!(
            problems[1],
            SchedulerProblem::OwnerMatchesEveryPod { index: 1 }
        );
        assert_eq!(
            problems[2],
            SchedulerProblem::NegativeTtl { ttl: "-1s".into() }
        );
        assert_eq!(r.ttl_millis(), Ok(Some(-1000)));
    }

    #[test]
    fn allocate_policy_reads_empty_and_absent_as_default() {
        for spec in [json!({"allocatePolicy": ""}), json!({})] {
            let s: ReservationSpec = serde_json::from_value(spec).expect("reads");
            assert_eq!(s.allocate_policy, ReservationAllocatePolicy::Default);
            let back = serde_json::to_value(&s).expect("writes");
            assert!(
                back.get("allocatePolicy").is_none(),
                "Default is omitted like Go's omitempty"
            );
        }
        let s: ReservationSpec =
            serde_json::from_value(json!({"allocatePolicy": "Restricted"})).expect("reads");
        assert_eq!(s.allocate_policy, ReservationAllocatePolicy::Restricted);
    }

    #[test]
    fn unknown_phases_survive_a_round_trip() {
        let status: ReservationStatus =
            serde_json::from_value(json!({"phase": "Migrating"})).expect("reads");
        assert_eq!(
            status.phase,
            Some(ReservationPhase::Other("Migrating".into()))
        );
        assert_eq!(
            serde_json::to_value(&status).expect("writes"),
            json!({"phase": "Migrating"})
        );
        assert!(ReservationPhase::Waiting.is_active());
        assert!(ReservationPhase::Failed.is_terminal());
    }

    #[test]
    fn full_status_round_trips() {
        let status = json!({
            "phase": "Available",
            "conditions": [
                {"type": "Scheduled", "status": "True", "reason": "Scheduled",
                 "lastProbeTime": "2024-05-01T10:00:00Z", "lastTransitionTime": "2024-05-01T10:00:00Z"},
                {"type": "Ready", "status": "True", "reason": "Available", "message": "ok"}
            ],
            "currentOwners": [{"namespace": "default", "name": "p", "uid": "u1"}],
            "nodeName": "node-1",
            "allocatable": {"cpu": "1", "memory": "1Gi"},
            "allocated": {"cpu": "500m"}
        });
        let parsed: ReservationStatus = serde_json::from_value(status.clone()).expect("reads");
        assert_eq!(parsed.conditions[0].type_, condition::SCHEDULED);
        assert_eq!(serde_json::to_value(&parsed).expect("writes"), status);
    }

    #[test]
    fn every_spec_field_survives_a_yaml_read_and_write() {
        let yaml = r#"
apiVersion: scheduling.koordinator.sh/v1alpha1
kind: Reservation
metadata:
  name: full
  labels: {scheduling.koordinator.sh/reservation-order: "100"}
spec:
  template:
    metadata: {namespace: team-a}
    spec:
      nodeName: node-1
      containers:
      - name: c
        resources: {requests: {cpu: "2", memory: 4Gi}}
  owners:
  - object: {name: p, namespace: team-a, uid: u-1}
  - controller: {apiVersion: apps/v1, kind: StatefulSet, name: web, uid: u-2, controller: true, namespace: team-a}
  - labelSelector:
      matchLabels: {app: web}
      matchExpressions: [{key: tier, operator: In, values: [fe]}]
  ttl: 1h30m
  expires: "2030-01-02T03:04:05Z"
  preAllocation: true
  allocateOnce: false
  allocatePolicy: Restricted
  unschedulable: true
  taints: [{key: dedicated, value: gpu, effect: NoSchedule}]
  preAllocationPolicy: {mode: Cluster, enableMultiple: true}
status:
  phase: Available
  nodeName: node-1
  allocatable: {cpu: "2", memory: 4Gi}
"#;
        let r: Reservation = serde_yaml_ng::from_str(yaml).expect("a full reservation reads");
        assert_eq!(r.validate(), Ok(()));
        assert_eq!(
            r.spec.allocate_policy,
            ReservationAllocatePolicy::Restricted
        );
        assert_eq!(r.spec.ttl_millis_for_test(), Some(5_400_000));
        assert_eq!(
            r.spec.owners[1]
                .controller
                .as_ref()
                .and_then(|c| c.controller),
            Some(true)
        );
        assert_eq!(
            r.spec.pre_allocation_policy.as_ref().and_then(|p| p.mode),
            Some(PreAllocationMode::Cluster)
        );
        assert_eq!(r.phase(), ReservationPhase::Available);
        assert_eq!(
            r.scheduler_problems(),
            vec![SchedulerProblem::TtlAndExpires],
            "both ttl and expires: a warning only"
        );
        let original: serde_json::Value = serde_yaml_ng::from_str(yaml).expect("yaml");
        assert_eq!(serde_json::to_value(&r).expect("writes"), original);
    }

    #[test]
    fn template_keeps_unknown_keys() {
        let template = json!({"namespace": "default", "metadata": {"labels": {"a": "b"}}, "spec": {"containers": [{"name": "c"}]}});
        let t: ReservationPodTemplate = serde_json::from_value(template.clone()).expect("reads");
        assert_eq!(t.unknown_fields.get("namespace"), Some(&json!("default")));
        assert_eq!(t.spec.as_ref().map(|s| s.containers.len()), Some(1));
        assert_eq!(serde_json::to_value(&t).expect("writes"), template);
    }
}
