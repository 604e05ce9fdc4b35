//! `ReservationArgs` (Koordinator's `pkg/scheduler/apis/config/types.go`), with its defaults
//! and validation.

use serde::Deserialize;

use crate::framework::config::ConfigError;
use crate::plugins::args::decode;
use crate::reservation::Settings;

/// `preAllocationConfig`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PreAllocationConfig {
    /// Allow `Cluster`-mode pre-allocation.
    #[serde(default)]
    pub enable_cluster_mode: bool,
    /// Label marking Cluster-mode candidates (only the default key is supported).
    #[serde(default)]
    pub cluster_label_key: Option<String>,
    /// Annotation ranking Cluster-mode candidates (only the default key is supported).
    #[serde(default)]
    pub cluster_priority_annotation_key: Option<String>,
    /// Pick no pod when the node already has room.
    #[serde(default)]
    pub prefer_no_pre_allocated_pods: bool,
}

/// `dynamicProvisioning` (berth's, seed 003): how long a pod waits for the Reservation a
/// provisioner creates for it, and what happens then.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DynamicProvisioningArgs {
    /// Seconds (default 600; at least 1).
    #[serde(default)]
    pub timeout_seconds: Option<i64>,
    /// `Requeue` (default: roll back, re-queue the pod) or `BindWithoutReservation`.
    #[serde(default)]
    pub timeout_policy: Option<String>,
}

/// The Reservation plugin's args. Fields berth has no use for are accepted and validated
/// so that a Koordinator configuration reads unchanged.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ReservationArgs {
    /// Preemption inside reservations: an owner of higher priority may evict a
    /// lower-priority owner of the same reservation (Koordinator's semantics). Off, pods
    /// allocated from an active reservation are never preemption victims.
    #[serde(default)]
    pub enable_preemption: bool,
    /// Percentage, 0..=100.
    #[serde(default)]
    pub min_candidate_nodes_percentage: Option<i64>,
    /// At least 0.
    #[serde(default)]
    pub min_candidate_nodes_absolute: Option<i64>,
    /// Status controller workers (berth's controller is synchronous; accepted).
    #[serde(default)]
    pub controller_workers: Option<i64>,
    /// How long terminal reservations are kept (default 86400).
    #[serde(default)]
    pub gc_duration_seconds: Option<i64>,
    /// How often Koordinator looks for garbage (berth collects at the due time; accepted).
    #[serde(default)]
    pub gc_interval_seconds: Option<i64>,
    /// Metrics resync period (accepted).
    #[serde(default)]
    pub resync_interval_seconds: Option<i64>,
    /// Never delete terminal reservations.
    #[serde(default)]
    pub disable_garbage_collection: bool,
    /// Pre-allocation settings.
    #[serde(default)]
    pub pre_allocation_config: Option<PreAllocationConfig>,
    /// Extended resources the plugin's fit checks skip (accepted).
    #[serde(default)]
    pub ignored_resources: Vec<String>,
    /// Extended resource groups the plugin's fit checks skip (accepted).
    #[serde(default)]
    pub ignored_resource_groups: Vec<String>,
    /// Koordinator's label index for `reservationSelector` (berth always indexes owners).
    #[serde(default)]
    pub reservation_selector_index: Option<serde_json::Value>,
    /// berth: Dynamic Reservation Provisioning.
    #[serde(default)]
    pub dynamic_provisioning: Option<DynamicProvisioningArgs>,
}

impl ReservationArgs {
    /// Decodes and validates.
    pub fn new(args: Option<&serde_json::Value>) -> Result<Self, ConfigError> {
        let a: Self = decode(args)?;
        if let Some(p) = a.min_candidate_nodes_percentage {
            if !(0..=100).contains(&p) {
                return Err(ConfigError::new(
                    "minCandidateNodesPercentage",
                    "not in valid range [0, 100]",
                ));
            }
        }
        for (field, v) in [
            ("minCandidateNodesAbsolute", a.min_candidate_nodes_absolute),
            ("gcDurationSeconds", a.gc_duration_seconds),
            ("gcIntervalSeconds", a.gc_interval_seconds),
            ("resyncIntervalSeconds", a.resync_interval_seconds),
            ("controllerWorkers", a.controller_workers),
        ] {
            if v.is_some_and(|v| v < 0) {
                return Err(ConfigError::new(
                    field,
                    "should be greater than or equal to 0",
                ));
            }
        }
        if let Some(d) = &a.dynamic_provisioning {
            if d.timeout_seconds.is_some_and(|v| v < 1) {
                return Err(ConfigError::new(
                    "dynamicProvisioning.timeoutSeconds",
                    "should be greater than or equal to 1",
                ));
            }
            if let Some(p) = &d.timeout_policy {
                if crate::drp::TimeoutPolicy::parse(p).is_none() {
                    return Err(ConfigError::new(
                        "dynamicProvisioning.timeoutPolicy",
                        "should be Requeue or BindWithoutReservation",
                    ));
                }
            }
        }
        Ok(a)
    }

    /// The settings the reservation lifecycle uses.
    pub fn settings(&self) -> Settings {
        let d = Settings::default();
        Settings {
            gc_duration: self
                .gc_duration_seconds
                .map_or(d.gc_duration, |s| s.saturating_mul(1000)),
            gc_interval: self
                .gc_interval_seconds
                .map_or(d.gc_interval, |s| s.saturating_mul(1000)),
            disable_gc: self.disable_garbage_collection,
            enable_cluster_mode: self
                .pre_allocation_config
                .as_ref()
                .is_some_and(|p| p.enable_cluster_mode),
            drp: {
                let d = self.dynamic_provisioning.clone().unwrap_or_default();
                crate::drp::Settings {
                    timeout: d
                        .timeout_seconds
                        .map_or(crate::drp::DEFAULT_TIMEOUT, |s| s.saturating_mul(1000)),
                    timeout_policy: d
                        .timeout_policy
                        .as_deref()
                        .and_then(crate::drp::TimeoutPolicy::parse)
                        .unwrap_or_default(),
                }
            },
            enable_preemption: self.enable_preemption,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn defaults_and_validation_follow_koordinator() {
        let a = ReservationArgs::new(None).unwrap();
        assert_eq!(a.settings(), Settings::default());
        let a = ReservationArgs::new(Some(
            &json!({"gcDurationSeconds": 60, "preAllocationConfig": {"enableClusterMode": true}}),
        ))
        .unwrap();
        assert_eq!(a.settings().gc_duration, 60_000);
        assert_eq!(a.settings().gc_interval, 60_000, "the default interval");
        assert!(a.settings().enable_cluster_mode);
        assert!(!a.settings().enable_preemption, "off unless asked for");
        let a = ReservationArgs::new(Some(&json!({"enablePreemption": true}))).unwrap();
        assert!(a.settings().enable_preemption);
        let e =
            ReservationArgs::new(Some(&json!({"minCandidateNodesPercentage": 101}))).unwrap_err();
        assert_eq!(e.field, "minCandidateNodesPercentage");
        let e = ReservationArgs::new(Some(&json!({"gcDurationSeconds": -1}))).unwrap_err();
        assert_eq!(e.field, "gcDurationSeconds");
        assert!(ReservationArgs::new(Some(&json!({"nonsense": 1}))).is_err());
        let a = ReservationArgs::new(Some(&json!({"dynamicProvisioning": {
            "timeoutSeconds": 30, "timeoutPolicy": "BindWithoutReservation"}})))
        .unwrap();
        assert_eq!(a.settings().drp.timeout, 30_000);
        assert_eq!(
            a.settings().drp.timeout_policy,
            crate::drp::TimeoutPolicy::BindWithoutReservation
        );
        assert_eq!(
            ReservationArgs::new(None).unwrap().settings().drp.timeout,
            600_000
        );
        let e = ReservationArgs::new(Some(&json!({"dynamicProvisioning": {"timeoutSeconds": 0}})))
            .unwrap_err();
        assert_eq!(e.field, "dynamicProvisioning.timeoutSeconds");
        let e = ReservationArgs::new(Some(
            &json!({"dynamicProvisioning": {"timeoutPolicy": "Drop"}}),
        ))
        .unwrap_err();
        assert_eq!(e.field, "dynamicProvisioning.timeoutPolicy");
    }
}
