//! Koordinator's `PodMigrationJob` custom resource (`scheduling.koordinator.sh/v1alpha1`,
//! cluster-scoped, short name `pmj`), wire-compatible with
//! `apis/scheduling/v1alpha1/pod_migration_job_types.go` (Koordinator v1.8).
//!
//! A job asks koord-descheduler's migration controller to move one pod: by default
//! `ReservationFirst` (reserve room elsewhere from the pod's own template, wait until the
//! Reservation is Available, evict the pod, let its controller's replacement land in the
//! reservation), or `EvictDirectly`. berth's controller is `berth_core::migration`; the CRD is
//! [`crate::crd::pod_migration_job_crd`], tested against Koordinator's.
//!
//! As with the Reservation, every field, JSON name and omission rule follows the Go type;
//! `reservationOptions.template` is schemaless upstream, so it is kept as written (a JSON
//! value) and read as a Reservation only when the controller uses it.

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{DeleteOptions, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::duration::GoDuration;

/// `spec.mode` when absent: Koordinator's `DefaultJobMode`.
pub const MODE_RESERVATION_FIRST: &str = "ReservationFirst";
/// `spec.mode`: evict without reserving first.
pub const MODE_EVICT_DIRECTLY: &str = "EvictDirectly";

/// Which pod to move, and how.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "scheduling.koordinator.sh",
    version = "v1alpha1",
    kind = "PodMigrationJob",
    plural = "podmigrationjobs",
    singular = "podmigrationjob",
    shortname = "pmj",
    status = "PodMigrationJobStatus",
    derive = "PartialEq",
    derive = "Default",
    doc = "PodMigrationJob is the Schema for the PodMigrationJob API",
    // Raw JSON rather than `printcolumn(name = .., type_ = ..)` (see reservation.rs).
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase","description":"The phase of PodMigrationJob"}"#,
    printcolumn = r#"{"name":"Status","type":"string","jsonPath":".status.status","description":"The status of PodMigrationJob"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    printcolumn = r#"{"name":"Node","type":"string","jsonPath":".status.nodeName"}"#,
    printcolumn = r#"{"name":"Reservation","type":"string","jsonPath":".spec.reservationOptions.reservationRef.name"}"#,
    printcolumn = r#"{"name":"PodNamespace","type":"string","jsonPath":".spec.podRef.namespace"}"#,
    printcolumn = r#"{"name":"Pod","type":"string","jsonPath":".spec.podRef.name"}"#,
    printcolumn = r#"{"name":"NewPod","type":"string","jsonPath":".status.podRef.name"}"#,
    printcolumn = r#"{"name":"TTL","type":"string","jsonPath":".spec.ttl"}"#
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("required" = ["podRef"]))]
pub struct PodMigrationJobSpec {
    /// A paused job is left alone by the controller.
    #[serde(default, skip_serializing_if = "is_false")]
    pub paused: bool,
    /// How long the job may run, from its creation; absent or `0`: no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl: Option<GoDuration>,
    /// `ReservationFirst` (also when absent or empty) or `EvictDirectly`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub mode: String,
    /// The pod to migrate (required by the CRD; `Option` so that a job without one reads,
    /// and fails with `InvalidPodRef` as upstream's does).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_ref: Option<ObjectReference>,
    /// The Reservation to use or to create.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reservation_options: Option<PodMigrateReservationOptions>,
    /// How the pod is deleted (carried; the simulator's Eviction API ignores it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delete_options: Option<DeleteOptions>,
}

fn is_false(b: &bool) -> bool {
    !*b
}

impl PodMigrationJobSpec {
    /// Whether the job evicts without a reservation.
    pub fn evicts_directly(&self) -> bool {
        self.mode == MODE_EVICT_DIRECTLY
    }
}

/// `spec.reservationOptions`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodMigrateReservationOptions {
    /// An existing Reservation to use; set by the controller to the one it creates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reservation_ref: Option<ObjectReference>,
    /// A `{metadata, spec}` Reservation template, schemaless as upstream's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schemaless")]
    pub template: Option<serde_json::Value>,
    /// Reserved by Koordinator (an empty object).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preemption_options: Option<PodMigrationJobPreemptionOptions>,
}

fn schemaless(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({ "x-kubernetes-preserve-unknown-fields": true })
}

/// `spec.reservationOptions.preemptionOptions`: no fields yet upstream.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct PodMigrationJobPreemptionOptions {}

/// What the controller observed and did.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodMigrationJobStatus {
    /// `Pending`, `Running`, `Succeeded`, `Failed` or `Aborted` (empty: not seen yet).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub phase: String,
    /// A summary such as `Complete`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub status: String,
    /// CamelCase reason of the current state.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    /// Human-readable detail.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// The steps taken.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<PodMigrationJobCondition>,
    /// The node the reservation (so the migrated pod) was placed on.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub node_name: String,
    /// The replacement pod, once it is bound to the reservation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_ref: Option<ObjectReference>,
    /// Pods preempted for the reservation.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub preempted_pods_ref: Vec<ObjectReference>,
    /// Reservations created for preempted pods.
    #[serde(
        default,
        rename = "preemptedPodsReservation",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub preempted_pods_reservations: Vec<PodMigrationJobPreemptedReservation>,
}

/// One entry of `status.preemptedPodsReservation`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodMigrationJobPreemptedReservation {
    /// The Reservation's namespace.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    /// The Reservation's name.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// Where the scheduler placed it.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub node_name: String,
    /// Its phase.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub phase: String,
    /// The preempted pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preempted_pod_ref: Option<ObjectReference>,
    /// The pods created after the preemption.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pods_ref: Vec<ObjectReference>,
}

/// One entry of `status.conditions`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodMigrationJobCondition {
    /// `ReservationCreated`, `ReservationScheduled`, `Eviction`, `PodBoundReservation`, ...
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// Last time the condition was probed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("nullable" = true))]
    pub last_probe_time: Option<Time>,
    /// Last time the status changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("nullable" = true))]
    pub last_transition_time: Option<Time>,
    /// CamelCase reason.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    /// Human-readable detail.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
}

/// The phase, reason and condition vocabulary of `pod_migration_job_types.go`.
pub mod vocabulary {
    /// Phase: created, not started (also while the arbitrator holds it back).
    pub const PENDING: &str = "Pending";
    /// Phase: being processed.
    pub const RUNNING: &str = "Running";
    /// Phase: done.
    pub const SUCCEEDED: &str = "Succeeded";
    /// Phase: failed (time-out, reservation failed, ...).
    pub const FAILED: &str = "Failed";
    /// Phase: aborted by the user.
    pub const ABORTED: &str = "Aborted";

    /// Condition type.
    pub const RESERVATION_CREATED: &str = "ReservationCreated";
    /// Condition type.
    pub const RESERVATION_SCHEDULED: &str = "ReservationScheduled";
    /// Condition type.
    pub const EVICTION: &str = "Eviction";
    /// Condition type.
    pub const POD_BOUND_RESERVATION: &str = "PodBoundReservation";
    /// Condition type.
    pub const BOUND_POD_READY: &str = "BoundPodReady";

    /// Reason.
    pub const TIMEOUT: &str = "Timeout";
    /// Reason.
    pub const FAILED_CREATE_RESERVATION: &str = "FailedCreateReservation";
    /// Reason.
    pub const RESERVATION_EXPIRED: &str = "ReservationExpired";
    /// Reason.
    pub const UNSCHEDULABLE: &str = "Unschedulable";
    /// Reason.
    pub const FORBIDDEN_MIGRATE_POD: &str = "ForbiddenMigratePod";
    /// Reason.
    pub const MISSING_POD: &str = "MissingPod";
    /// Reason.
    pub const MISSING_RESERVATION: &str = "MissingReservation";
    /// Reason.
    pub const EVICTING: &str = "Evicting";
    /// Reason.
    pub const FAILED_EVICT: &str = "FailedEvict";
    /// Reason.
    pub const EVICT_COMPLETE: &str = "EvictComplete";
    /// Reason.
    pub const WAIT_FOR_POD_BIND_RESERVATION: &str = "WaitForPodBindReservation";
    /// Reason.
    pub const WAIT_FOR_BOUND_POD_READY: &str = "WaitForBoundPodReady";
    /// Reason (upstream's literal, no constant).
    pub const INVALID_POD_REF: &str = "InvalidPodRef";
    /// Reason, berth's own: the replacement was bound outside the reservation (upstream
    /// waits for its TTL instead).
    pub const REPLACEMENT_ELSEWHERE: &str = "ReplacementNotInReservation";
}

impl PodMigrationJob {
    /// Whether the job has ended (`Succeeded`, `Failed` or `Aborted`).
    pub fn is_finished(&self) -> bool {
        matches!(
            self.status.as_ref().map(|s| s.phase.as_str()),
            Some(vocabulary::SUCCEEDED | vocabulary::FAILED | vocabulary::ABORTED)
        )
    }

    /// The phase (`""` before the controller has seen the job).
    pub fn phase(&self) -> &str {
        self.status.as_ref().map_or("", |s| s.phase.as_str())
    }

    /// The condition of `type_`, if any.
    pub fn condition(&self, type_: &str) -> Option<&PodMigrationJobCondition> {
        self.status
            .as_ref()?
            .conditions
            .iter()
            .find(|c| c.type_ == type_)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_job_round_trips_as_koordinator_writes_it() {
        let v = json!({
            "apiVersion": "scheduling.koordinator.sh/v1alpha1",
            "kind": "PodMigrationJob",
            "metadata": {"name": "j1"},
            "spec": {
                "paused": true,
                "ttl": "5m",
                "mode": "EvictDirectly",
                "podRef": {"namespace": "default", "name": "p1"},
                "reservationOptions": {"template": {"metadata": {"x": 1}, "weird": [1]},
                                        "preemptionOptions": {}},
                "deleteOptions": {"gracePeriodSeconds": 0}
            },
            "status": {
                "phase": "Running",
                "conditions": [{"type": "Eviction", "status": "False", "reason": "Evicting"}],
                "preemptedPodsReservation": [{"name": "r"}]
            }
        });
        let job: PodMigrationJob = serde_json::from_value(v.clone()).expect("a job");
        assert!(job.spec.evicts_directly());
        assert_eq!(job.phase(), "Running");
        assert!(!job.is_finished());
        assert_eq!(
            job.condition("Eviction").map(|c| c.reason.as_str()),
            Some("Evicting")
        );
        assert_eq!(serde_json::to_value(&job).expect("serializes"), v);
    }
}
