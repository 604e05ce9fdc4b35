//! The topology API's `NodeResourceTopology` (NRT) custom resource.
//!
//! Group `topology.node.k8s.io`, cluster-scoped, one object per node (object name = node
//! name), published by the node agents (NFD `nfd-topology-updater`, RTE). `v1alpha2` is the
//! storage version and the one berth reads; [`v1alpha1`] objects (required
//! `topologyPolicies`, no top-level `attributes`) convert losslessly into the same type.
//!
//! Resource quantities are kept as [`Quantity`] strings; on input they may be YAML/JSON
//! strings **or** numbers (the CRD declares them `x-kubernetes-int-or-string`, and agents and
//! hand-written manifests use both), see [`deserialize_quantity`]. Zone and resource order is
//! not meaningful (NFD emits them in random order).

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, JSONSchemaProps, JSONSchemaPropsOrArray,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::core::crd::merge_crds;
use kube::{CustomResource, CustomResourceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Deserializer, Serialize};

use crate::quantity::ParsedQuantity;

/// API group of the topology API.
pub const GROUP: &str = "topology.node.k8s.io";
/// Kind of the topology custom resource.
pub const KIND: &str = "NodeResourceTopology";
/// Plural resource name.
pub const PLURAL: &str = "noderesourcetopologies";
/// Name of the CustomResourceDefinition.
pub const CRD_NAME: &str = "noderesourcetopologies.topology.node.k8s.io";
/// The `api-approved.kubernetes.io` annotation carried by the upstream CRD.
pub const API_APPROVED: &str = "https://github.com/kubernetes/enhancements/pull/1870";

/// Zone `type` of a NUMA node (other zone types are legal but ignored by the scheduler).
pub const ZONE_TYPE_NUMA_NODE: &str = "Node";
/// Prefix of canonical NUMA zone names (`node-<N>`).
pub const NUMA_ZONE_NAME_PREFIX: &str = "node-";

/// Top-level attribute: kubelet Topology Manager policy (`none`, `best-effort`, `restricted`,
/// `single-numa-node`).
pub const ATTRIBUTE_TM_POLICY: &str = "topologyManagerPolicy";
/// Top-level attribute: kubelet Topology Manager scope (`container`, `pod`).
pub const ATTRIBUTE_TM_SCOPE: &str = "topologyManagerScope";
/// Top-level attribute: kubelet Topology Manager max NUMA nodes (decimal integer).
pub const ATTRIBUTE_TM_MAX_NUMA_NODES: &str = "topologyManagerMaxNUMANodes";
/// Top-level attribute carrying the pod-set fingerprint (`pfp0v001` + 16 hex digits).
pub const ATTRIBUTE_POD_FINGERPRINT: &str = "nodeTopologyPodsFingerprint";
/// Top-level attribute naming the fingerprint method (`all` | `with-exclusive-resources`).
pub const ATTRIBUTE_POD_FINGERPRINT_METHOD: &str = "nodeTopologyPodsFingerprintMethod";
/// Legacy annotation carrying the pod-set fingerprint (used only when the attribute is absent).
pub const ANNOTATION_POD_FINGERPRINT: &str = "topology.node.k8s.io/fingerprint";

/// Deprecated `topologyPolicies` values (v1alpha1 and v1alpha2 share the enum).
pub mod topology_policy {
    /// single-numa-node, container scope.
    pub const SINGLE_NUMA_NODE_CONTAINER_LEVEL: &str = "SingleNUMANodeContainerLevel";
    /// single-numa-node, pod scope.
    pub const SINGLE_NUMA_NODE_POD_LEVEL: &str = "SingleNUMANodePodLevel";
    /// restricted (no level: the scheduler ignores it).
    pub const RESTRICTED: &str = "Restricted";
    /// restricted, container scope.
    pub const RESTRICTED_CONTAINER_LEVEL: &str = "RestrictedContainerLevel";
    /// restricted, pod scope.
    pub const RESTRICTED_POD_LEVEL: &str = "RestrictedPodLevel";
    /// best-effort (no level: the scheduler ignores it).
    pub const BEST_EFFORT: &str = "BestEffort";
    /// best-effort, container scope.
    pub const BEST_EFFORT_CONTAINER_LEVEL: &str = "BestEffortContainerLevel";
    /// best-effort, pod scope.
    pub const BEST_EFFORT_POD_LEVEL: &str = "BestEffortPodLevel";
    /// none.
    pub const NONE: &str = "None";
}

/// The quantity pattern of the upstream CRD.
pub const QUANTITY_PATTERN: &str = r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$";

/// `NodeResourceTopology` (v1alpha2) fields; the root object is [`NodeResourceTopology`], whose
/// `spec` field holds these flattened at the top level (there is no `spec` on the wire).
#[derive(CustomResource, Serialize, Deserialize, Debug, Clone, Default, PartialEq, JsonSchema)]
#[kube(
    group = "topology.node.k8s.io",
    version = "v1alpha2",
    kind = "NodeResourceTopology",
    plural = "noderesourcetopologies",
    singular = "noderesourcetopology",
    shortname = "node-res-topo",
    no_spec,
    derive = "PartialEq",
    derive = "Default",
    annotation(
        "api-approved.kubernetes.io",
        "https://github.com/kubernetes/enhancements/pull/1870"
    ),
    doc = "NodeResourceTopology describes node resources and their topology."
)]
#[serde(rename_all = "camelCase")]
pub struct NodeResourceTopologyFields {
    /// DEPRECATED (to be removed in v1beta1): use top level attributes if needed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub topology_policies: Vec<String>,
    /// ZoneList contains an array of Zone objects.
    #[serde(default, deserialize_with = "null_as_default")]
    pub zones: Vec<Zone>,
    /// AttributeList contains an array of AttributeInfo objects.
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "null_as_default"
    )]
    pub attributes: Vec<AttributeInfo>,
}

/// Zone represents a resource topology zone, e.g. socket, node, die or core.
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Zone {
    /// Zone name; NUMA zones are named `node-<N>`.
    pub name: String,
    /// Zone type; NUMA zones use `Node`.
    #[serde(rename = "type")]
    pub type_: String,
    /// Parent zone name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
    /// CostList contains an array of CostInfo objects.
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "null_as_default"
    )]
    pub costs: Vec<CostInfo>,
    /// AttributeList contains an array of AttributeInfo objects.
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "null_as_default"
    )]
    pub attributes: Vec<AttributeInfo>,
    /// ResourceInfoList contains an array of ResourceInfo objects.
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "null_as_default"
    )]
    pub resources: Vec<ResourceInfo>,
}

/// CostInfo describes the cost (or distance) between two Zones.
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq, Eq, JsonSchema)]
pub struct CostInfo {
    /// The other zone's name.
    pub name: String,
    /// Distance (ACPI SLIT; 10 = local).
    pub value: i64,
}

/// AttributeInfo contains one attribute of a Zone (or of the node, at top level).
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq, Eq, JsonSchema)]
pub struct AttributeInfo {
    /// Attribute name.
    pub name: String,
    /// Attribute value.
    pub value: String,
}

/// ResourceInfo contains information about one resource type.
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq, JsonSchema)]
pub struct ResourceInfo {
    /// Name of the resource.
    pub name: String,
    /// Capacity of the resource, corresponding to capacity in node status, i.e. total amount
    /// of this resource that the node has.
    #[serde(deserialize_with = "deserialize_quantity")]
    #[schemars(schema_with = "quantity_schema")]
    pub capacity: Quantity,
    /// Allocatable quantity of the resource, corresponding to allocatable in node status, i.e.
    /// total amount of this resource available to be used by pods.
    #[serde(deserialize_with = "deserialize_quantity")]
    #[schemars(schema_with = "quantity_schema")]
    pub allocatable: Quantity,
    /// Available is the amount of this resource currently available for new (to be scheduled)
    /// pods, i.e. Allocatable minus the resources reserved by currently running pods.
    #[serde(deserialize_with = "deserialize_quantity")]
    #[schemars(schema_with = "quantity_schema")]
    pub available: Quantity,
}

/// The int-or-string quantity schema of the upstream CRD.
fn quantity_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "anyOf": [{"type": "integer"}, {"type": "string"}],
        "pattern": QUANTITY_PATTERN,
        "x-kubernetes-int-or-string": true,
    })
}

fn null_as_default<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(deserializer)?.unwrap_or_default())
}

/// Deserializes a [`Quantity`] from a string, an integer or a float (YAML `capacity: 4` and
/// `capacity: "4"` are the same quantity), validating it with the API server's grammar. `null`
/// reads as `0`, like Go's `Quantity.UnmarshalJSON`.
pub fn deserialize_quantity<'de, D>(deserializer: D) -> Result<Quantity, D::Error>
where
    D: Deserializer<'de>,
{
    struct Visitor;

    impl Visitor {
        fn checked<E: serde::de::Error>(text: String) -> Result<Quantity, E> {
            match ParsedQuantity::parse(&text) {
                Ok(_) => Ok(Quantity(text)),
                Err(err) => Err(E::custom(err)),
            }
        }
    }

    impl<'de> serde::de::Visitor<'de> for Visitor {
        type Value = Quantity;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a quantity (string or number)")
        }

        fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Quantity, E> {
            Self::checked(v.to_string())
        }

        fn visit_string<E: serde::de::Error>(self, v: String) -> Result<Quantity, E> {
            Self::checked(v)
        }

        fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Quantity, E> {
            Ok(Quantity(v.to_string()))
        }

        fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Quantity, E> {
            Ok(Quantity(v.to_string()))
        }

        fn visit_i128<E: serde::de::Error>(self, v: i128) -> Result<Quantity, E> {
            Ok(Quantity(v.to_string()))
        }

        fn visit_u128<E: serde::de::Error>(self, v: u128) -> Result<Quantity, E> {
            Ok(Quantity(v.to_string()))
        }

        fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Quantity, E> {
            if !v.is_finite() {
                return Err(E::custom(format!("quantity must be finite, got {v}")));
            }
            // `{}` on f64 never uses exponent notation and round-trips exactly.
            Self::checked(format!("{v}"))
        }

        fn visit_unit<E: serde::de::Error>(self) -> Result<Quantity, E> {
            Ok(Quantity("0".to_string()))
        }

        fn visit_none<E: serde::de::Error>(self) -> Result<Quantity, E> {
            self.visit_unit()
        }

        fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Quantity, D::Error> {
            d.deserialize_any(self)
        }

        fn visit_newtype_struct<D: Deserializer<'de>>(self, d: D) -> Result<Quantity, D::Error> {
            d.deserialize_any(self)
        }
    }

    deserializer.deserialize_any(Visitor)
}

impl NodeResourceTopology {
    /// The node this object describes (the object name).
    pub fn node_name(&self) -> &str {
        self.metadata.name.as_deref().unwrap_or("")
    }

    /// The value of top-level attribute `name` (first occurrence).
    pub fn attribute(&self, name: &str) -> Option<&str> {
        self.spec
            .attributes
            .iter()
            .find(|a| a.name == name)
            .map(|a| a.value.as_str())
    }

    /// The value of annotation `key`.
    pub fn annotation(&self, key: &str) -> Option<&str> {
        self.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(key))
            .map(String::as_str)
    }

    /// Reads an object of either served version (`v1alpha1` or `v1alpha2`, by `apiVersion`;
    /// a missing `apiVersion` is read as `v1alpha2`) into the v1alpha2 type.
    pub fn from_any_version(value: serde_json::Value) -> Result<Self, NrtDecodeError> {
        let api_version = value
            .get("apiVersion")
            .and_then(|v| v.as_str())
            .unwrap_or("topology.node.k8s.io/v1alpha2")
            .to_string();
        match api_version.as_str() {
            "topology.node.k8s.io/v1alpha2" => Ok(serde_json::from_value(value)?),
            "topology.node.k8s.io/v1alpha1" => {
                Ok(serde_json::from_value::<v1alpha1::NodeResourceTopology>(value)?.into())
            }
            _ => Err(NrtDecodeError::UnsupportedApiVersion(api_version)),
        }
    }
}

/// An NRT object that could not be read.
#[derive(Debug, thiserror::Error)]
pub enum NrtDecodeError {
    /// Neither `topology.node.k8s.io/v1alpha1` nor `.../v1alpha2`.
    #[error("unsupported NodeResourceTopology apiVersion {0:?}")]
    UnsupportedApiVersion(String),
    /// The object does not match the schema.
    #[error("malformed NodeResourceTopology: {0}")]
    Malformed(#[from] serde_json::Error),
}

/// The `v1alpha1` version (served, not stored): `topologyPolicies` is required and there are no
/// top-level attributes. Convert with `NodeResourceTopology::from`.
pub mod v1alpha1 {
    use super::*;

    /// `NodeResourceTopology` v1alpha1 fields (flattened at the top level on the wire).
    #[derive(
        CustomResource, Serialize, Deserialize, Debug, Clone, Default, PartialEq, JsonSchema,
    )]
    #[kube(
        group = "topology.node.k8s.io",
        version = "v1alpha1",
        kind = "NodeResourceTopology",
        plural = "noderesourcetopologies",
        singular = "noderesourcetopology",
        shortname = "node-res-topo",
        no_spec,
        derive = "PartialEq",
        derive = "Default",
        annotation(
            "api-approved.kubernetes.io",
            "https://github.com/kubernetes/enhancements/pull/1870"
        ),
        doc = "NodeResourceTopology describes node resources and their topology."
    )]
    #[serde(rename_all = "camelCase")]
    pub struct NodeResourceTopologyFields {
        /// Topology Manager policies (one meaningful value).
        #[serde(default, deserialize_with = "null_as_default")]
        pub topology_policies: Vec<String>,
        /// ZoneList contains an array of Zone objects.
        #[serde(default, deserialize_with = "null_as_default")]
        pub zones: Vec<Zone>,
    }

    impl From<NodeResourceTopology> for super::NodeResourceTopology {
        fn from(old: NodeResourceTopology) -> Self {
            super::NodeResourceTopology {
                metadata: old.metadata,
                spec: super::NodeResourceTopologyFields {
                    topology_policies: old.spec.topology_policies,
                    zones: old.spec.zones,
                    attributes: Vec::new(),
                },
            }
        }
    }
}

/// The CustomResourceDefinition, compatible with the upstream `manifests/crd.yaml`: same name,
/// group, names (incl. short name `node-res-topo`) and `Cluster` scope, both versions served,
/// `v1alpha2` the storage version, quantities `anyOf integer|string` with the quantity pattern.
pub fn nrt_crd() -> CustomResourceDefinition {
    let crds = vec![
        v1alpha1::NodeResourceTopology::crd(),
        NodeResourceTopology::crd(),
    ];
    let mut crd = match merge_crds(crds, "v1alpha2") {
        Ok(crd) => crd,
        // Both versions are derived from constants above with identical names and scope, so
        // merging cannot fail; fall back to the single storage version rather than panicking.
        Err(_) => NodeResourceTopology::crd(),
    };
    crd.spec.names.list_kind = Some(format!("{KIND}List"));
    let annotations = crd.metadata.annotations.get_or_insert_with(BTreeMap::new);
    annotations.insert(
        "api-approved.kubernetes.io".to_string(),
        API_APPROVED.to_string(),
    );
    for version in &mut crd.spec.versions {
        let required: &[&str] = if version.name == "v1alpha1" {
            &["topologyPolicies", "zones"]
        } else {
            &["zones"]
        };
        if let Some(schema) = version
            .schema
            .as_mut()
            .and_then(|s| s.open_api_v3_schema.as_mut())
        {
            normalize_schema(schema);
            schema.required = Some(required.iter().map(|r| r.to_string()).collect());
        }
    }
    crd
}

/// Brings the derived schema to the upstream shape: optional fields are marked by omission
/// (no `nullable`, no `default`: the Rust side tolerates missing lists on its own), no
/// `title`, and
/// quantities are `anyOf: [{type: integer}, {type: string}]` (kube's structural rewrite
/// empties the branches).
fn normalize_schema(schema: &mut JSONSchemaProps) {
    schema.nullable = None;
    schema.default = None;
    schema.title = None;
    if schema.x_kubernetes_int_or_string == Some(true) {
        schema.any_of = Some(vec![
            JSONSchemaProps {
                type_: Some("integer".to_string()),
                ..Default::default()
            },
            JSONSchemaProps {
                type_: Some("string".to_string()),
                ..Default::default()
            },
        ]);
    }
    if let Some(props) = schema.properties.as_mut() {
        for p in props.values_mut() {
            normalize_schema(p);
        }
    }
    if let Some(JSONSchemaPropsOrArray::Schema(items)) = schema.items.as_mut() {
        normalize_schema(items);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::facts;
    use serde_json::{json, Value};

    /// The topology API's CRD (k8stopologyawareschedwg/noderesourcetopology-api
    /// `manifests/crd.yaml`) as facts: identity, versions and every schema node.
    const UPSTREAM: &str = include_str!("../../../testdata/nrt-crd.facts.yaml");

    /// NRT resources as the API's own instance example writes them (`manifests/
    /// crd-instance-example.yaml`: v1alpha1, integer quantities, four NUMA zones, vendor
    /// devices): `(zone, [(resource, capacity, allocatable, available)])`.
    const EXAMPLE_ZONES: [(&str, [(&str, u32, u32, u32); 2]); 4] = [
        ("node-0", [("cpu", 20, 15, 10), ("vendor/nic1", 3, 3, 3)]),
        ("node-1", [("cpu", 30, 25, 15), ("vendor/nic2", 6, 6, 6)]),
        ("node-2", [("cpu", 30, 25, 15), ("vendor/nic1", 3, 3, 3)]),
        ("node-3", [("cpu", 30, 25, 15), ("vendor/nic1", 3, 3, 3)]),
    ];

    /// A document with `zones` of `(name, [(resource, capacity, allocatable, available)])`
    /// written with integer quantities, as agents and manifests write them.
    fn nrt_doc(
        api_version: &str,
        name: &str,
        policy: &str,
        zones: &[(&str, Vec<(&str, u32, u32, u32)>)],
    ) -> Value {
        let zones: Vec<Value> = zones
            .iter()
            .map(|(zone, resources)| {
                let resources: Vec<Value> = resources
                    .iter()
                    .map(|(r, c, a, v)| json!({"name": r, "capacity": c, "allocatable": a, "available": v}))
                    .collect();
                json!({"name": zone, "type": "Node", "resources": resources})
            })
            .collect();
        json!({
            "apiVersion": format!("topology.node.k8s.io/{api_version}"),
            "kind": "NodeResourceTopology",
            "metadata": {"name": name},
            "topologyPolicies": [policy],
            "zones": zones,
        })
    }

    fn instance_example() -> Value {
        let zones: Vec<(&str, Vec<(&str, u32, u32, u32)>)> = EXAMPLE_ZONES
            .iter()
            .map(|(z, r)| (*z, r.to_vec()))
            .collect();
        nrt_doc("v1alpha1", "node1", "SingleNUMANode", &zones)
    }

    #[test]
    fn instance_example_v1alpha1_reads_into_v1alpha2() {
        let doc = instance_example();
        let nrt = NodeResourceTopology::from_any_version(doc.clone()).expect("decodes");
        assert_eq!(nrt.node_name(), "node1");
        assert_eq!(
            nrt.spec.topology_policies,
            vec!["SingleNUMANode".to_string()]
        );
        assert!(nrt.spec.attributes.is_empty());
        assert_eq!(nrt.spec.zones.len(), 4);
        let z0 = &nrt.spec.zones[0];
        assert_eq!((z0.name.as_str(), z0.type_.as_str()), ("node-0", "Node"));
        assert_eq!(z0.resources[0].name, "cpu");
        assert_eq!(z0.resources[0].capacity, Quantity("20".into()));
        assert_eq!(z0.resources[0].allocatable, Quantity("15".into()));
        assert_eq!(z0.resources[0].available, Quantity("10".into()));
        assert_eq!(nrt.spec.zones[1].resources[1].name, "vendor/nic2");
        assert_eq!(
            nrt.spec.zones[1].resources[1].available,
            Quantity("6".into())
        );
        // Also directly as the v1alpha1 type, and YAML → typed without going through JSON.
        let text = serde_yaml_ng::to_string(&doc).expect("renders");
        let old: v1alpha1::NodeResourceTopology = serde_yaml_ng::from_str(&text).expect("v1alpha1");
        assert_eq!(NodeResourceTopology::from(old), nrt);
    }

    /// scheduler-plugins' worker node samples (`manifests/noderesourcetopology/
    /// worker-node-A.yaml`, `-B.yaml`): v1alpha2, container-level single-numa-node, two
    /// zones with example.com devices.
    fn worker_nodes() -> [Value; 2] {
        let policy = "SingleNUMANodeContainerLevel";
        [
            nrt_doc(
                "v1alpha2",
                "worker-node-a",
                policy,
                &[
                    (
                        "node-0",
                        vec![
                            ("cpu", 4, 3, 3),
                            ("example.com/deviceA", 1, 1, 1),
                            ("example.com/deviceB", 2, 2, 2),
                        ],
                    ),
                    (
                        "node-1",
                        vec![
                            ("cpu", 4, 3, 3),
                            ("example.com/deviceA", 2, 2, 2),
                            ("example.com/deviceB", 1, 1, 1),
                        ],
                    ),
                ],
            ),
            nrt_doc(
                "v1alpha2",
                "worker-node-b",
                policy,
                &[
                    (
                        "node-0",
                        vec![("cpu", 4, 3, 3), ("example.com/deviceA", 3, 3, 3)],
                    ),
                    (
                        "node-1",
                        vec![("cpu", 4, 3, 3), ("example.com/deviceB", 3, 3, 3)],
                    ),
                ],
            ),
        ]
    }

    #[test]
    fn worker_node_samples_deserialize() {
        let [a, _] = worker_nodes();
        let text = serde_yaml_ng::to_string(&a).expect("renders");
        let nrt: NodeResourceTopology = serde_yaml_ng::from_str(&text).expect("node A");
        assert_eq!(nrt.node_name(), "worker-node-a");
        assert_eq!(
            nrt.spec.topology_policies,
            vec!["SingleNUMANodeContainerLevel".to_string()]
        );
        assert_eq!(nrt.spec.zones.len(), 2);
        let dev_b = &nrt.spec.zones[1].resources[2];
        assert_eq!(dev_b.name, "example.com/deviceB");
        assert_eq!(dev_b.available, Quantity("1".into()));

        for doc in worker_nodes() {
            let nrt = NodeResourceTopology::from_any_version(doc).expect("decodes");
            assert!(nrt.node_name().starts_with("worker-node-"));
            assert!(nrt
                .spec
                .zones
                .iter()
                .all(|z| z.type_ == "Node" && !z.resources.is_empty()));
        }
    }

    #[test]
    fn quantities_accept_strings_ints_and_floats() {
        let doc = serde_json::json!({
            "apiVersion": "topology.node.k8s.io/v1alpha2",
            "kind": "NodeResourceTopology",
            "metadata": {"name": "n"},
            "zones": [{"name": "node-0", "type": "Node", "resources": [
                {"name": "cpu", "capacity": "16", "allocatable": 14, "available": 1.5},
                {"name": "memory", "capacity": "32Gi", "allocatable": null, "available": "1e3"},
            ]}],
        });
        let nrt: NodeResourceTopology = serde_json::from_value(doc).expect("decodes");
        let r = &nrt.spec.zones[0].resources;
        assert_eq!(r[0].capacity, Quantity("16".into()));
        assert_eq!(r[0].allocatable, Quantity("14".into()));
        assert_eq!(r[0].available, Quantity("1.5".into()));
        assert_eq!(r[1].allocatable, Quantity("0".into()));
        let yaml = "zones:\n- name: node-0\n  type: Node\n  resources:\n  - {name: cpu, capacity: 4, allocatable: '3', available: 2.5}\n";
        let fields: NodeResourceTopologyFields = serde_yaml_ng::from_str(yaml).expect("yaml");
        assert_eq!(fields.zones[0].resources[0].capacity, Quantity("4".into()));
        assert_eq!(
            fields.zones[0].resources[0].available,
            Quantity("2.5".into())
        );
    }

    #[test]
    fn malformed_quantities_and_versions_are_rejected() {
        let doc = serde_json::json!({
            "metadata": {"name": "n"},
            "zones": [{"name": "node-0", "type": "Node", "resources": [
                {"name": "cpu", "capacity": "lots", "allocatable": 1, "available": 1},
            ]}],
        });
        let err = serde_json::from_value::<NodeResourceTopology>(doc).unwrap_err();
        assert!(err.to_string().contains("lots"), "{err}");
        let doc = serde_json::json!({"apiVersion": "topology.node.k8s.io/v1beta1", "zones": []});
        assert!(matches!(
            NodeResourceTopology::from_any_version(doc),
            Err(NrtDecodeError::UnsupportedApiVersion(v)) if v.ends_with("v1beta1")
        ));
    }

    #[test]
    fn all_fields_round_trip() {
        let yaml = r#"
apiVersion: topology.node.k8s.io/v1alpha2
kind: NodeResourceTopology
metadata:
  name: worker-0
  annotations:
    topology.node.k8s.io/fingerprint: pfp0v001e3a20cafb6299c30
topologyPolicies: ["SingleNUMANodeContainerLevel"]
attributes:
- {name: topologyManagerPolicy, value: single-numa-node}
- {name: nodeTopologyPodsFingerprint, value: pfp0v001a005acd77c3e38c6}
zones:
- name: node-0
  type: Node
  parent: socket-0
  costs: [{name: node-0, value: 10}, {name: node-1, value: 21}]
  attributes: [{name: cpulist, value: 0-15}]
  resources:
  - {name: cpu, capacity: "16", allocatable: "14", available: "10"}
- name: socket-0
  type: Socket
"#;
        let nrt: NodeResourceTopology = serde_yaml_ng::from_str(yaml).expect("decodes");
        assert_eq!(nrt.attribute(ATTRIBUTE_TM_POLICY), Some("single-numa-node"));
        assert_eq!(
            nrt.annotation(ANNOTATION_POD_FINGERPRINT),
            Some("pfp0v001e3a20cafb6299c30")
        );
        let z = &nrt.spec.zones[0];
        assert_eq!(z.parent.as_deref(), Some("socket-0"));
        assert_eq!(
            z.costs[1],
            CostInfo {
                name: "node-1".into(),
                value: 21
            }
        );
        assert_eq!(z.attributes[0].value, "0-15");
        let json = serde_json::to_value(&nrt).expect("serializes");
        assert_eq!(json["apiVersion"], "topology.node.k8s.io/v1alpha2");
        assert_eq!(json["kind"], "NodeResourceTopology");
        assert!(json.get("spec").is_none(), "fields are top-level");
        assert_eq!(json["zones"][0]["resources"][0]["available"], "10");
        assert_eq!(json["zones"][1]["type"], "Socket");
        assert!(json["zones"][1].get("resources").is_none());
        let back: NodeResourceTopology = serde_json::from_value(json).expect("round trip");
        assert_eq!(back, nrt);
    }

    /// What upstream's schema and ours must agree on, node by node: types, formats and
    /// required lists; quantities are int-or-string leaves with the same pattern and branch
    /// types. `apiVersion`, `kind` and `metadata` are validated by the API server itself
    /// (kube leaves them out of the derived schema).
    const RULES: facts::Rules = facts::Rules {
        keys: &["type", "format"],
        sets: &["required"],
        int_or_string_leaf: true,
        skip_root: &["apiVersion", "kind", "metadata"],
    };

    /// Every property path of the upstream schema exists in ours with the same type, the same
    /// required lists, and quantity fields are int-or-string with the same pattern: whatever
    /// upstream accepts, this CRD accepts.
    #[test]
    fn crd_matches_upstream() {
        let up = facts::parse(UPSTREAM);
        let ours = nrt_crd();
        let at = |pointer: &str| {
            up.pointer(pointer)
                .unwrap_or_else(|| panic!("{pointer} missing in the facts"))
                .clone()
        };
        let text = |pointer: &str| at(pointer).as_str().map(str::to_string);
        assert_eq!(ours.metadata.name.as_deref(), Some(CRD_NAME));
        assert_eq!(ours.metadata.name, text("/name"));
        assert_eq!(Some(ours.spec.group.clone()), text("/group"));
        assert_eq!(Some(ours.spec.scope.clone()), text("/scope"));
        assert_eq!(ours.spec.scope, "Cluster");
        let names = serde_json::to_value(&ours.spec.names).expect("names");
        for name in ["kind", "plural", "singular", "listKind", "shortNames"] {
            assert_eq!(
                names.get(name),
                Some(&at(&format!("/names/{name}"))),
                "names.{name}"
            );
        }
        assert_eq!(
            ours.metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get("api-approved.kubernetes.io")),
            Some(&API_APPROVED.to_string())
        );
        assert_eq!(
            text("/annotations/api-approved.kubernetes.io").as_deref(),
            Some(API_APPROVED)
        );
        assert_eq!(ours.spec.versions.len(), 2);
        let versions = at("/versions");
        let versions = versions.as_array().expect("a list of versions");
        assert_eq!(versions.len(), 2);
        for (i, up) in versions.iter().enumerate() {
            let name = up["name"].as_str().expect("a version name");
            let our = ours
                .spec
                .versions
                .iter()
                .find(|v| v.name == name)
                .unwrap_or_else(|| panic!("version {name} missing"));
            assert_eq!(
                (json!(our.served), json!(our.storage)),
                (up["served"].clone(), up["storage"].clone()),
                "{name}"
            );
            let our_schema = our
                .schema
                .as_ref()
                .and_then(|s| s.open_api_v3_schema.as_ref())
                .map(|s| serde_json::to_value(s).expect("schema"))
                .expect("our schema");
            let want = facts::schema_facts(&at("/versions"), &format!("/{i}/schema"));
            let problems = facts::diff(&want, &facts::flatten(&our_schema, &RULES));
            assert!(
                problems.is_empty(),
                "{name} schema differences:\n{}",
                problems.join("\n")
            );
        }
        let json = serde_json::to_string(&ours).expect("serializes");
        assert!(
            !json.contains("$ref"),
            "schema must be structural (no $ref)"
        );
    }
}
