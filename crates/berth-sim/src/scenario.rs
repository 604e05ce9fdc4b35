//! The `sim.berth.dev/v1alpha1` `Scenario`: a timeline of steps run after the initial
//! objects (the format is described in `docs/scenario-format.md`).
//!
//! The wire form is read strictly (`deny_unknown_fields`): a misspelt step or expectation
//! would otherwise silently check nothing, so it is bad input instead.

use serde::{Deserialize, Deserializer};

use berth_core::time::Time;
use berth_core::ObjectKey;

use crate::objects::Item;

/// The API version of [`Scenario`] documents.
pub const API_VERSION: &str = "sim.berth.dev/v1alpha1";
/// The kind of [`Scenario`] documents.
pub const KIND: &str = "Scenario";
/// Virtual time at which a run starts when the Scenario gives no `spec.startTime`.
pub const DEFAULT_START_TIME: &str = "2024-01-01T00:00:00Z";

/// A decoded Scenario.
#[derive(Debug, Clone, Default)]
pub struct Scenario {
    /// `metadata.name`, empty when absent.
    pub name: String,
    /// `spec.startTime`, virtual ms since the epoch.
    pub start_time: Option<Time>,
    /// `spec.nodeAgent`.
    pub node_agent: NodeAgentConfig,
    /// `spec.provisioner`: the Dynamic Reservation Provisioning provisioner.
    pub provisioner: crate::provisioner::ProvisionerConfig,
    /// `spec.migration`: the PodMigrationJob controller's arbitration limits.
    pub migration: berth_core::migration::MigrationArgs,
    /// `spec.steps`, in order.
    pub steps: Vec<Step>,
}

/// `spec.nodeAgent`: the simulated kubelet and topology updater.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NodeAgentConfig {
    /// How often each node with a NodeResourceTopology republishes it, in ms; `None` (absent
    /// or `0`) never.
    pub nrt_update_period: Option<Time>,
}

/// One step. The contract writes one action per step; a step holding several runs them in
/// the order apply, delete, evict, advance, expect.
#[derive(Debug, Clone, Default)]
pub struct Step {
    /// Objects to create or replace, in order.
    pub apply: Vec<Item>,
    /// Objects to delete, in order.
    pub delete: Vec<ObjectKey>,
    /// Pods to evict through the Eviction API, in order (an extension of the contract: a
    /// PodDisruptionBudget can refuse, which is logged, and the pod stays).
    pub evict: Vec<ObjectKey>,
    /// How far to move virtual time, in ms.
    pub advance: Option<Time>,
    /// What must hold after the step's other actions.
    pub expect: Option<Expect>,
    /// The actions the step was written with (`apply`, `delete`, `advance`, `expect`), in
    /// the order they run: messages name a step by its place in `spec.steps` and these.
    pub kinds: Vec<&'static str>,
}

impl Step {
    /// `spec.steps[2] (expect)`: the step by its 0-based `index`, as field paths in input
    /// errors name it and as documents are counted, so one file never gets two numberings.
    pub fn describe(&self, index: usize) -> String {
        if self.kinds.is_empty() {
            format!("spec.steps[{index}]")
        } else {
            format!("spec.steps[{index}] ({})", self.kinds.join(", "))
        }
    }
}

/// `expect`: checks on pods and reservations. A field left out is not checked.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Expect {
    /// Pod checks.
    #[serde(default)]
    pub pods: Vec<PodExpectation>,
    /// Reservation checks.
    #[serde(default)]
    pub reservations: Vec<ReservationExpectation>,
    /// PodMigrationJob checks (an extension of the contract).
    #[serde(default, rename = "podMigrationJobs")]
    pub pod_migration_jobs: Vec<crate::migration::JobExpectation>,
}

/// One pod check.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PodExpectation {
    /// The pod's namespace (`default`).
    #[serde(default = "default_namespace")]
    pub namespace: String,
    /// The pod's name.
    pub name: String,
    /// `Some(Some(n))`: bound to `n`; `Some(None)` (`node: null`): not bound (a pod that no
    /// longer exists is not bound either); `None`: not checked.
    #[serde(default, deserialize_with = "present")]
    pub node: Option<Option<String>>,
    /// The reservation named in the pod's `reservation-allocated` annotation; `null`: none.
    #[serde(default, deserialize_with = "present")]
    pub reservation: Option<Option<String>>,
    /// A substring of the pod's `PodScheduled` condition message.
    #[serde(default)]
    pub message: Option<String>,
    /// `status.phase` (an extension of the contract: `Running`, `Failed`, ...).
    #[serde(default)]
    pub phase: Option<String>,
    /// `status.reason` (an extension of the contract: `TopologyAffinityError`, ...).
    #[serde(default)]
    pub reason: Option<String>,
}

/// One reservation check.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReservationExpectation {
    /// The reservation's name.
    pub name: String,
    /// `status.phase` (`Pending` when the reservation has none yet).
    #[serde(default)]
    pub phase: Option<String>,
    /// `status.nodeName`; `null`: not placed.
    #[serde(default, deserialize_with = "present")]
    pub node: Option<Option<String>>,
    /// `status.currentOwners` as `namespace/name`, compared as a set (a bare name means
    /// namespace `default`).
    #[serde(default)]
    pub owners: Option<Vec<String>>,
    /// `status.allocatable` of the named resources (an extension of the contract: e.g. the
    /// rounded size of a dynamically provisioned reservation), compared as quantities.
    #[serde(default)]
    pub allocatable: Option<std::collections::BTreeMap<String, String>>,
}

fn default_namespace() -> String {
    "default".to_string()
}

/// Distinguishes `field: null` (`Some(None)`) from an absent field (`None`, via `default`).
fn present<'de, D, T>(d: D) -> Result<Option<Option<T>>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(d).map(Some)
}

/// The wire form of a Scenario document, before its objects and durations are checked.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct ScenarioDoc {
    #[allow(dead_code)] // Checked by the dispatcher before this type is read.
    pub(crate) api_version: String,
    #[allow(dead_code)] // Checked by the dispatcher before this type is read.
    pub(crate) kind: String,
    #[serde(default)]
    pub(crate) metadata: Option<ScenarioMeta>,
    #[serde(default)]
    pub(crate) spec: ScenarioSpecDoc,
}

#[derive(Debug, Default, Deserialize)]
pub(crate) struct ScenarioMeta {
    #[serde(default)]
    pub(crate) name: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct ScenarioSpecDoc {
    #[serde(default)]
    pub(crate) start_time: Option<String>,
    #[serde(default)]
    pub(crate) node_agent: Option<NodeAgentDoc>,
    #[serde(default)]
    pub(crate) provisioner: Option<ProvisionerDoc>,
    #[serde(default)]
    pub(crate) migration: Option<berth_core::migration::MigrationArgs>,
    #[serde(default)]
    pub(crate) steps: Vec<StepDoc>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct NodeAgentDoc {
    #[serde(default)]
    pub(crate) nrt_update_period: Option<DurationText>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct ProvisionerDoc {
    #[serde(default)]
    pub(crate) enabled: Option<bool>,
    #[serde(default)]
    pub(crate) delay: Option<DurationText>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct StepDoc {
    #[serde(default)]
    pub(crate) apply: Option<Vec<serde_json::Value>>,
    #[serde(default)]
    pub(crate) delete: Option<Vec<DeleteRef>>,
    #[serde(default)]
    pub(crate) evict: Option<Vec<PodRef>>,
    #[serde(default)]
    pub(crate) advance: Option<DurationText>,
    #[serde(default)]
    pub(crate) expect: Option<Expect>,
}

/// `{kind, namespace, name}` (plus an optional, unchecked `apiVersion`).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct DeleteRef {
    #[serde(default)]
    #[allow(dead_code)] // Accepted for symmetry with objects; the kind is enough.
    pub(crate) api_version: Option<String>,
    pub(crate) kind: String,
    #[serde(default)]
    pub(crate) namespace: Option<String>,
    pub(crate) name: String,
}

/// `{namespace, name}` of a pod (namespace `default` when left out).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct PodRef {
    #[serde(default)]
    pub(crate) namespace: Option<String>,
    pub(crate) name: String,
}

/// A duration as written: YAML reads `advance: 90s` as a string but `advance: 0` as a number,
/// and both are meant as Go durations.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DurationText(pub(crate) String);

impl<'de> Deserialize<'de> for DurationText {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match serde_json::Value::deserialize(d)? {
            serde_json::Value::String(s) => Ok(Self(s)),
            serde_json::Value::Number(n) => Ok(Self(n.to_string())),
            other => Err(serde::de::Error::custom(format!(
                "invalid type: {}, expected a duration such as \"30s\"",
                crate::objects::type_name(&other)
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_null_differs_from_node_absent() {
        let e: PodExpectation = serde_json::from_str(r#"{"name":"p","node":null}"#).unwrap();
        assert_eq!(e.node, Some(None));
        assert_eq!(e.namespace, "default");
        let e: PodExpectation = serde_json::from_str(r#"{"name":"p"}"#).unwrap();
        assert_eq!(e.node, None);
        let e: PodExpectation = serde_json::from_str(r#"{"name":"p","node":"n1"}"#).unwrap();
        assert_eq!(e.node, Some(Some("n1".into())));
    }

    #[test]
    fn a_misspelt_expectation_is_rejected() {
        let r: Result<PodExpectation, _> = serde_json::from_str(r#"{"name":"p","nod":"n1"}"#);
        assert!(r.is_err());
    }

    #[test]
    fn a_numeric_duration_reads_as_its_text() {
        let d: DurationText = serde_json::from_str("0").unwrap();
        assert_eq!(d.0, "0");
        assert!(serde_json::from_str::<DurationText>("true").is_err());
    }
}
