//! Dynamic Resource Allocation's objects, `resource.k8s.io/v1` (GA in Kubernetes 1.34):
//! ResourceSlice, DeviceClass, ResourceClaim and ResourceClaimTemplate.
//!
//! The `v1` shapes are written here (before the workspace's k8s-openapi read 1.35's API, its
//! types had these kinds only in `v1beta1`/`v1beta2`), field for field as upstream's
//! `k8s.io/api/resource/v1/types.go` spells them, so that simulate's strict field check
//! (which walks these types' JSON schemas) rejects what the API server rejects. Parts the
//! scheduler does not read (opaque driver parameters, device status data) are kept as JSON
//! so they round-trip unchanged.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{NodeSelector, Toleration};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta, Time};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The group and version of every kind here.
pub const API_VERSION: &str = "resource.k8s.io/v1";

/// Declares a top-level kind: `apiVersion`, `kind`, `metadata`, `spec` (and `status`).
macro_rules! top_level {
    ($(#[$doc:meta])* $name:ident, $kind:literal, $default:literal, $spec:ty $(, $status:ty)?) => {
        $(#[$doc])*
        #[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
        #[serde(rename_all = "camelCase", deny_unknown_fields)]
        pub struct $name {
            /// `resource.k8s.io/v1`.
            #[serde(default = "api_version")]
            pub api_version: String,
            /// The kind's name.
            #[serde(default = $default)]
            pub kind: String,
            /// Standard object metadata.
            #[serde(default)]
            pub metadata: ObjectMeta,
            /// What the object says.
            pub spec: $spec,
            $(
            /// What the system last observed.
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub status: Option<$status>,
            )?
        }

        impl $name {
            /// The `kind` field's value.
            pub const KIND: &'static str = $kind;
        }

        impl Default for $name {
            fn default() -> Self {
                Self {
                    api_version: API_VERSION.into(),
                    kind: $kind.into(),
                    metadata: ObjectMeta::default(),
                    spec: Default::default(),
                    $(status: None::<$status>,)?
                }
            }
        }

    };
}

fn api_version() -> String {
    API_VERSION.into()
}

fn slice_kind() -> String {
    ResourceSlice::KIND.into()
}

fn class_kind() -> String {
    DeviceClass::KIND.into()
}

fn claim_kind() -> String {
    ResourceClaim::KIND.into()
}

fn template_kind() -> String {
    ResourceClaimTemplate::KIND.into()
}

top_level!(
    /// Devices one driver publishes for one pool (often one node's).
    ResourceSlice,
    "ResourceSlice",
    "slice_kind",
    ResourceSliceSpec
);
top_level!(
    /// A class of devices: selectors every request of the class applies, and configuration.
    DeviceClass,
    "DeviceClass",
    "class_kind",
    DeviceClassSpec
);
top_level!(
    /// A request for devices, and where the scheduler allocated them.
    ResourceClaim,
    "ResourceClaim",
    "claim_kind",
    ResourceClaimSpec,
    ResourceClaimStatus
);
top_level!(
    /// What the resource-claim controller creates a pod's claim from.
    ResourceClaimTemplate,
    "ResourceClaimTemplate",
    "template_kind",
    ResourceClaimTemplateSpec
);

/// `ResourceSliceSpec`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ResourceSliceSpec {
    /// The driver publishing the devices.
    pub driver: String,
    /// The pool the slice belongs to.
    pub pool: ResourcePool,
    /// The node whose devices these are (exactly one of nodeName, nodeSelector, allNodes,
    /// perDeviceNodeSelection).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_name: Option<String>,
    /// The nodes that reach the devices.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<NodeSelector>,
    /// Every node reaches the devices.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub all_nodes: Option<bool>,
    /// Each device says which nodes reach it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_device_node_selection: Option<bool>,
    /// The devices.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub devices: Vec<Device>,
    /// Counter sets devices consume from (partitionable devices; not allocated by berth).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shared_counters: Vec<serde_json::Value>,
}

/// `ResourcePool`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ResourcePool {
    /// The pool's name, unique per driver.
    pub name: String,
    /// Slices of an older generation are stale once one of a newer one exists.
    pub generation: i64,
    /// How many slices the pool has in this generation.
    pub resource_slice_count: i64,
}

/// `Device`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Device {
    /// Unique in the pool.
    pub name: String,
    /// Attributes selectors and constraints read.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub attributes: BTreeMap<String, DeviceAttribute>,
    /// Capacities selectors read.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub capacity: BTreeMap<String, DeviceCapacity>,
    /// Counters consumed (partitionable devices).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub consumes_counters: Vec<serde_json::Value>,
    /// With `perDeviceNodeSelection`: this device's node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_name: Option<String>,
    /// With `perDeviceNodeSelection`: this device's nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<NodeSelector>,
    /// With `perDeviceNodeSelection`: every node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub all_nodes: Option<bool>,
    /// Taints (DRADeviceTaints, off by default in 1.35).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub taints: Vec<serde_json::Value>,
    /// DRADeviceBindingConditions (off by default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub binds_to_node: Option<bool>,
    /// DRADeviceBindingConditions (off by default).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub binding_conditions: Vec<String>,
    /// DRADeviceBindingConditions (off by default).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub binding_failure_conditions: Vec<String>,
    /// DRAConsumableCapacity (off by default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow_multiple_allocations: Option<bool>,
}

/// `DeviceAttribute`: exactly one of the fields.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DeviceAttribute {
    /// An integer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub int: Option<i64>,
    /// A boolean.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bool: Option<bool>,
    /// A string.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub string: Option<String>,
    /// A semantic version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
}

/// `DeviceCapacity`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DeviceCapacity {
    /// The amount.
    pub value: Quantity,
    /// DRAConsumableCapacity (off by default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_policy: Option<serde_json::Value>,
}

/// `DeviceClassSpec`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DeviceClassSpec {
    /// Every device of the class satisfies all of them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub selectors: Vec<DeviceSelector>,
    /// Configuration handed to drivers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub config: Vec<serde_json::Value>,
    /// DRAExtendedResource (off by default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extended_resource_name: Option<String>,
}

/// `DeviceSelector`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DeviceSelector {
    /// A CEL expression over `device`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cel: Option<CelDeviceSelector>,
}

/// `CELDeviceSelector`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CelDeviceSelector {
    /// Evaluates to a bool.
    pub expression: String,
}

/// `ResourceClaimSpec`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ResourceClaimSpec {
    /// What devices are asked for.
    #[serde(default)]
    pub devices: DeviceClaim,
}

/// `DeviceClaim`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DeviceClaim {
    /// The requests, each satisfied by one or more devices.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub requests: Vec<DeviceRequest>,
    /// Constraints across requests.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub constraints: Vec<DeviceConstraint>,
    /// Configuration handed to drivers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub config: Vec<serde_json::Value>,
}

/// `DeviceRequest`: exactly one of `exactly` and `firstAvailable`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DeviceRequest {
    /// Unique in the claim.
    pub name: String,
    /// One request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exactly: Option<ExactDeviceRequest>,
    /// Alternatives, tried in order (DRAPrioritizedList).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub first_available: Vec<DeviceSubRequest>,
}

/// `ExactDeviceRequest`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ExactDeviceRequest {
    /// The class the devices must belong to.
    pub device_class_name: String,
    /// Further selectors.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub selectors: Vec<DeviceSelector>,
    /// `ExactCount` (default) or `All`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allocation_mode: Option<String>,
    /// With ExactCount: how many (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<i64>,
    /// DRAAdminAccess: access to devices in use, without taking them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admin_access: Option<bool>,
    /// DRADeviceTaints (off by default).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tolerations: Vec<Toleration>,
    /// DRAConsumableCapacity (off by default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity: Option<serde_json::Value>,
}

/// `DeviceSubRequest`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DeviceSubRequest {
    /// Unique in the request; results name the request `<request>/<subrequest>`.
    pub name: String,
    /// The class the devices must belong to.
    pub device_class_name: String,
    /// Further selectors.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub selectors: Vec<DeviceSelector>,
    /// `ExactCount` (default) or `All`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allocation_mode: Option<String>,
    /// With ExactCount: how many (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<i64>,
    /// DRADeviceTaints (off by default).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tolerations: Vec<Toleration>,
    /// DRAConsumableCapacity (off by default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity: Option<serde_json::Value>,
}

/// `DeviceConstraint`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DeviceConstraint {
    /// The requests it applies to (all when empty).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub requests: Vec<String>,
    /// Every device allocated for those requests has the same value of this attribute.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub match_attribute: Option<String>,
    /// DRAConsumableCapacity (off by default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub distinct_attribute: Option<String>,
}

/// `ResourceClaimStatus`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ResourceClaimStatus {
    /// Where the devices were allocated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allocation: Option<AllocationResult>,
    /// The pods (or other consumers) using the claim; at most
    /// [`RESERVED_FOR_MAX_SIZE`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reserved_for: Vec<ResourceClaimConsumerReference>,
    /// Drivers' reports on the devices (DRAResourceClaimDeviceStatus).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub devices: Vec<AllocatedDeviceStatus>,
}

/// `ResourceClaimReservedForMaxSize`.
pub const RESERVED_FOR_MAX_SIZE: usize = 256;

/// `AllocationResult`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AllocationResult {
    /// The devices.
    #[serde(default)]
    pub devices: DeviceAllocationResult,
    /// The nodes that reach every allocated device.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<NodeSelector>,
    /// When the allocation was made.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allocation_timestamp: Option<Time>,
}

/// `DeviceAllocationResult`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DeviceAllocationResult {
    /// One entry per allocated device.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub results: Vec<DeviceRequestAllocationResult>,
    /// Configuration copied from classes and the claim.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub config: Vec<serde_json::Value>,
}

/// `DeviceRequestAllocationResult`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DeviceRequestAllocationResult {
    /// The request (`<request>/<subrequest>` for firstAvailable).
    pub request: String,
    /// The device's driver.
    pub driver: String,
    /// The device's pool.
    pub pool: String,
    /// The device.
    pub device: String,
    /// Allocated with admin access (the device is not taken).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admin_access: Option<bool>,
    /// Tolerations that allowed tainted devices.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tolerations: Vec<Toleration>,
    /// DRADeviceBindingConditions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub binding_conditions: Vec<String>,
    /// DRADeviceBindingConditions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub binding_failure_conditions: Vec<String>,
    /// DRAConsumableCapacity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub share_id: Option<String>,
    /// DRAConsumableCapacity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consumed_capacity: Option<BTreeMap<String, Quantity>>,
}

/// `ResourceClaimConsumerReference`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ResourceClaimConsumerReference {
    /// Empty for the core group (pods).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_group: Option<String>,
    /// `pods`.
    pub resource: String,
    /// The consumer's name.
    pub name: String,
    /// The consumer's UID.
    pub uid: String,
}

/// `AllocatedDeviceStatus`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AllocatedDeviceStatus {
    /// The device's driver.
    pub driver: String,
    /// The device's pool.
    pub pool: String,
    /// The device.
    pub device: String,
    /// DRAConsumableCapacity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub share_id: Option<String>,
    /// The driver's conditions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// Driver-specific data.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<serde_json::Value>,
    /// Network data.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network_data: Option<serde_json::Value>,
}

/// `ResourceClaimTemplateSpec`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ResourceClaimTemplateSpec {
    /// Labels and annotations copied to the claims.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<ObjectMeta>,
    /// The claims' spec.
    pub spec: ResourceClaimSpec,
}

impl ResourceClaim {
    /// The claim's allocation, if any.
    pub fn allocation(&self) -> Option<&AllocationResult> {
        self.status.as_ref().and_then(|s| s.allocation.as_ref())
    }

    /// Whether `uid` is among the claim's consumers.
    pub fn reserved_for(&self, uid: &str) -> bool {
        self.status
            .as_ref()
            .is_some_and(|s| s.reserved_for.iter().any(|r| r.uid == uid))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claim_round_trips_and_defaults_kind() {
        let text = r#"
metadata: {name: c}
spec:
  devices:
    requests:
    - name: gpu
      exactly: {deviceClassName: gpu.example.com, count: 2}
status:
  allocation:
    devices:
      results: [{request: gpu, driver: d, pool: p, device: g0}]
  reservedFor: [{resource: pods, name: p, uid: u}]
"#;
        let claim: ResourceClaim = serde_yaml_ng::from_str(text).unwrap();
        assert_eq!(claim.kind, "ResourceClaim");
        assert_eq!(claim.api_version, API_VERSION);
        assert!(claim.reserved_for("u"));
        assert!(!claim.reserved_for("v"));
        let back = serde_json::to_value(&claim).unwrap();
        assert_eq!(
            back["spec"]["devices"]["requests"][0]["exactly"]["count"],
            2
        );
        assert_eq!(back["kind"], "ResourceClaim");
    }

    #[test]
    fn unknown_field_is_rejected() {
        let text =
            "spec: {driver: d, pool: {name: p, generation: 1, resourceSliceCount: 1}, nodeNmae: n}";
        assert!(serde_yaml_ng::from_str::<ResourceSlice>(text).is_err());
    }
}
