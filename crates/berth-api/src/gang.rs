//! Gang scheduling's API objects: the coscheduling `PodGroup` (two API groups with the same
//! shape: `scheduling.sigs.k8s.io/v1alpha1` as Koordinator v1.8 reads it, and
//! `scheduling.x-k8s.io/v1alpha1` as kubernetes-sigs/scheduler-plugins reads it today), and
//! Kubernetes 1.35's `scheduling.k8s.io/v1alpha1` `Workload` (alpha), whose pod groups carry
//! a gang policy. Field names and omission rules follow the Go types; unknown fields are
//! refused (`deny_unknown_fields`), as `kubectl apply`'s strict validation would.
//!
//! Pods join a PodGroup by label (`pod-group.scheduling.sigs.k8s.io` or
//! `scheduling.x-k8s.io/pod-group`), a Koordinator "lightweight" gang by annotations
//! ([`ANNOTATION_GANG_NAME`], [`ANNOTATION_GANG_MIN_NUM`]), and a Workload's pod group by
//! `spec.workloadRef` (Kubernetes 1.35's Pod type carries it).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use serde::{Deserialize, Serialize};

/// Koordinator's (and the older scheduler-plugins') PodGroup API version.
pub const SIGS_API_VERSION: &str = "scheduling.sigs.k8s.io/v1alpha1";
/// scheduler-plugins' current PodGroup API version.
pub const X_K8S_API_VERSION: &str = "scheduling.x-k8s.io/v1alpha1";
/// Kubernetes 1.35's Workload API version.
pub const WORKLOAD_API_VERSION: &str = "scheduling.k8s.io/v1alpha1";

/// Pod label naming its PodGroup (`scheduling.sigs.k8s.io`, Koordinator).
pub const LABEL_SIGS_POD_GROUP: &str = "pod-group.scheduling.sigs.k8s.io";
/// Pod label naming its PodGroup (`scheduling.x-k8s.io`, scheduler-plugins).
pub const LABEL_X_K8S_POD_GROUP: &str = "scheduling.x-k8s.io/pod-group";
/// Koordinator lightweight gang: the gang's name.
pub const ANNOTATION_GANG_NAME: &str = "gang.scheduling.koordinator.sh/name";
/// Koordinator lightweight gang: its minimum member count.
pub const ANNOTATION_GANG_MIN_NUM: &str = "gang.scheduling.koordinator.sh/min-available";
/// Koordinator gang: how long members wait at Permit (a Go duration).
pub const ANNOTATION_GANG_WAIT_TIME: &str = "gang.scheduling.koordinator.sh/waiting-time";
/// Koordinator gang: `Strict` (default: one member's failure rejects the waiting ones) or
/// `NonStrict` (they wait for the time-out).
pub const ANNOTATION_GANG_MODE: &str = "gang.scheduling.koordinator.sh/mode";
/// [`ANNOTATION_GANG_MODE`]'s non-strict value.
pub const GANG_MODE_NON_STRICT: &str = "NonStrict";

/// PodGroup `status.phase` values (scheduler-plugins' `PodGroupPhase`).
pub mod phase {
    /// Fewer pods than `minMember` exist.
    pub const PENDING: &str = "Pending";
    /// At least `minMember` pods exist, not all placed.
    pub const PRE_SCHEDULING: &str = "PreScheduling";
    /// At least `minMember` members are bound.
    pub const SCHEDULED: &str = "Scheduled";
    /// At least `minMember` members are running.
    pub const RUNNING: &str = "Running";
}

/// A coscheduling PodGroup, either API group (kept in `api_version`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PodGroup {
    /// `scheduling.sigs.k8s.io/v1alpha1` or `scheduling.x-k8s.io/v1alpha1`.
    pub api_version: String,
    /// `PodGroup`.
    pub kind: String,
    /// Standard metadata.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// What the group needs.
    #[serde(default)]
    pub spec: PodGroupSpec,
    /// What its controller observed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<PodGroupStatus>,
}

/// `PodGroupSpec`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PodGroupSpec {
    /// The fewest members that may run: fewer are never placed.
    #[serde(default)]
    pub min_member: i32,
    /// The fewest total resources the members need (read, not enforced by berth).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_resources: Option<BTreeMap<String, Quantity>>,
    /// How long members wait at Permit for the rest of the gang.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule_timeout_seconds: Option<i32>,
}

/// `PodGroupStatus`, as the PodGroup controller fills it.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PodGroupStatus {
    /// [`phase`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// The owner of the members (`namespace/name` of their controller), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub occupied_by: Option<String>,
    /// Members bound.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub scheduled: i32,
    /// Members running.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub running: i32,
    /// Members succeeded.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub succeeded: i32,
    /// Members failed.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub failed: i32,
    /// When scheduling of the group began.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule_start_time: Option<Time>,
}

fn is_zero(n: &i32) -> bool {
    *n == 0
}

/// Kubernetes 1.35's `Workload` (`scheduling.k8s.io/v1alpha1`, namespaced, no status).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Workload {
    /// `scheduling.k8s.io/v1alpha1`.
    pub api_version: String,
    /// `Workload`.
    pub kind: String,
    /// Standard metadata.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// Its pod groups.
    pub spec: WorkloadSpec,
}

/// `WorkloadSpec`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WorkloadSpec {
    /// The object (a Job, a JobSet...) that manages the workload.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub controller_ref: Option<TypedLocalObjectReference>,
    /// Its pod groups (at most [`WORKLOAD_MAX_POD_GROUPS`]).
    #[serde(default)]
    pub pod_groups: Vec<WorkloadPodGroup>,
}

/// `WorkloadMaxPodGroups`.
pub const WORKLOAD_MAX_POD_GROUPS: usize = 8;

/// `TypedLocalObjectReference` of the Workload API.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TypedLocalObjectReference {
    /// Its API group (empty: core).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub api_group: String,
    /// Its kind.
    pub kind: String,
    /// Its name.
    pub name: String,
}

/// A Workload's `PodGroup`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WorkloadPodGroup {
    /// Its name, which pods' `workloadRef.podGroup` names.
    pub name: String,
    /// How its pods are scheduled.
    pub policy: PodGroupPolicy,
}

/// `PodGroupPolicy`: exactly one of `basic` and `gang`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PodGroupPolicy {
    /// Each pod on its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub basic: Option<BasicSchedulingPolicy>,
    /// All of `minCount` or none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gang: Option<GangSchedulingPolicy>,
}

/// `BasicSchedulingPolicy` (empty).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct BasicSchedulingPolicy {}

/// `GangSchedulingPolicy`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GangSchedulingPolicy {
    /// The fewest pods of the group that may be placed.
    pub min_count: i32,
}

/// A pod's `spec.workloadRef`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WorkloadReference {
    /// The Workload, in the pod's namespace.
    pub name: String,
    /// The pod group within it.
    pub pod_group: String,
    /// The replica of the pod group (each replica is its own gang).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub pod_group_replica_key: String,
}

/// A validation failure: the field's path and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct Invalid {
    /// The field's path, as `kubectl` names it.
    pub field: String,
    /// The API server's words.
    pub message: String,
}

fn invalid(field: impl Into<String>, message: impl Into<String>) -> Invalid {
    Invalid {
        field: field.into(),
        message: message.into(),
    }
}

impl PodGroup {
    /// The API server's (CRD) validation: `minMember` and `scheduleTimeoutSeconds` are
    /// not negative.
    pub fn validate(&self) -> Result<(), Invalid> {
        if self.spec.min_member < 0 {
            return Err(invalid(
                "spec.minMember",
                format!(
                    "Invalid value: {}: should be greater than or equal to 0",
                    self.spec.min_member
                ),
            ));
        }
        if let Some(t) = self.spec.schedule_timeout_seconds.filter(|t| *t < 0) {
            return Err(invalid(
                "spec.scheduleTimeoutSeconds",
                format!("Invalid value: {t}: should be greater than or equal to 0"),
            ));
        }
        Ok(())
    }
}

impl Workload {
    /// The API server's validation of a Workload (1.35): 1 to 8 pod groups with distinct
    /// DNS-label names, each with exactly one policy, a gang's `minCount` positive.
    pub fn validate(&self) -> Result<(), Invalid> {
        let groups = &self.spec.pod_groups;
        if groups.is_empty() {
            return Err(invalid("spec.podGroups", "Required value"));
        }
        if groups.len() > WORKLOAD_MAX_POD_GROUPS {
            return Err(invalid(
                "spec.podGroups",
                format!(
                    "Too many: {}: must have at most {WORKLOAD_MAX_POD_GROUPS} items",
                    groups.len()
                ),
            ));
        }
        for (i, g) in groups.iter().enumerate() {
            let at = format!("spec.podGroups[{i}]");
            if g.name.is_empty() {
                return Err(invalid(format!("{at}.name"), "Required value"));
            }
            if groups[..i].iter().any(|o| o.name == g.name) {
                return Err(invalid(
                    format!("{at}.name"),
                    format!("Duplicate value: {:?}", g.name),
                ));
            }
            match (&g.policy.basic, &g.policy.gang) {
                (Some(_), Some(_)) => {
                    return Err(invalid(
                        format!("{at}.policy"),
                        "Invalid value: must specify exactly one of: `basic`, `gang`",
                    ))
                }
                (None, None) => {
                    return Err(invalid(
                        format!("{at}.policy"),
                        "Required value: must specify one of: `basic`, `gang`",
                    ))
                }
                (None, Some(gang)) if gang.min_count <= 0 => {
                    return Err(invalid(
                        format!("{at}.policy.gang.minCount"),
                        format!(
                            "Invalid value: {}: must be greater than zero",
                            gang.min_count
                        ),
                    ))
                }
                _ => {}
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_both_pod_group_apis_and_refuses_unknown_fields() {
        for api in [SIGS_API_VERSION, X_K8S_API_VERSION] {
            let v = serde_json::json!({"apiVersion": api, "kind": "PodGroup",
                "metadata": {"name": "job"}, "spec": {"minMember": 8, "scheduleTimeoutSeconds": 30}});
            let pg: PodGroup = serde_json::from_value(v).unwrap();
            assert_eq!(pg.spec.min_member, 8);
            assert_eq!(pg.spec.schedule_timeout_seconds, Some(30));
            assert!(pg.validate().is_ok());
        }
        let bad = serde_json::json!({"apiVersion": SIGS_API_VERSION, "kind": "PodGroup",
            "spec": {"minMembers": 8}});
        let err = serde_json::from_value::<PodGroup>(bad).unwrap_err();
        assert!(err.to_string().contains("minMembers"), "{err}");
        let negative = PodGroup {
            spec: PodGroupSpec {
                min_member: -1,
                ..Default::default()
            },
            ..Default::default()
        };
        assert_eq!(negative.validate().unwrap_err().field, "spec.minMember");
    }

    #[test]
    fn workload_validation_matches_the_api_server() {
        let w = |groups: serde_json::Value| -> Workload {
            serde_json::from_value(serde_json::json!({"apiVersion": WORKLOAD_API_VERSION,
                "kind": "Workload", "metadata": {"name": "w"}, "spec": {"podGroups": groups}}))
            .unwrap()
        };
        assert!(
            w(serde_json::json!([{"name": "workers", "policy": {"gang": {"minCount": 4}}}]))
                .validate()
                .is_ok()
        );
        let zero = w(serde_json::json!([{"name": "a", "policy": {"gang": {"minCount": 0}}}]));
        assert_eq!(
            zero.validate().unwrap_err().field,
            "spec.podGroups[0].policy.gang.minCount"
        );
        let both =
            w(serde_json::json!([{"name": "a", "policy": {"basic": {}, "gang": {"minCount": 1}}}]));
        assert_eq!(
            both.validate().unwrap_err().field,
            "spec.podGroups[0].policy"
        );
        let dup = w(serde_json::json!([{"name": "a", "policy": {"basic": {}}},
            {"name": "a", "policy": {"basic": {}}}]));
        assert_eq!(dup.validate().unwrap_err().field, "spec.podGroups[1].name");
        assert!(w(serde_json::json!([])).validate().is_err());
    }
}
