//! `scheduling.koordinator.sh/resource-status`: the CPUs / NUMA resources a pod (or a
//! reservation's reserve pod) was given.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use serde::{Deserialize, Serialize};

use super::{
    check_quantities, json_codec, parse_cpu_list, refused, AnnotationError, CpuListError,
    ANNOTATION_RESOURCE_STATUS,
};
use crate::validate::{Refusal, Rule};

/// The allocation result NodeNUMAResource writes at PreBind (Koordinator's
/// `apis/extension/numa_aware.go` `ResourceStatus`). On a Reservation it is what the
/// reservation holds, and owners allocate from it.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ResourceStatus {
    /// Allocated CPUs as a Linux CPU list (LSE/LSR pods).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub cpuset: String,
    /// Per-NUMA-node amounts the pod is confined to.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub numa_node_resources: Vec<NumaNodeResource>,
}

/// Resources taken from one NUMA node.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct NumaNodeResource {
    /// NUMA node id.
    pub node: i32,
    /// Amounts taken from that node.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub resources: BTreeMap<String, Quantity>,
}

// Koordinator unmarshals "" too (an error), so it is not treated as absent.
json_codec!(
    ResourceStatus,
    ANNOTATION_RESOURCE_STATUS,
    empty_is_absent = false,
    check = |v: &ResourceStatus| {
        parse_cpu_list(&v.cpuset).map_err(|source| AnnotationError::CpuList {
            key: ANNOTATION_RESOURCE_STATUS,
            field: "cpuset",
            source,
        })?;
        let mut seen = BTreeMap::new();
        for (i, numa) in v.numa_node_resources.iter().enumerate() {
            let path = format!("numaNodeResources[{i}].node");
            if numa.node < 0 {
                let detail = format!("{} is negative", numa.node);
                return Err(refused(
                    ANNOTATION_RESOURCE_STATUS,
                    Refusal::new(path, Rule::Negative, detail),
                ));
            }
            if let Some(first) = seen.insert(numa.node, i) {
                let detail = format!(
                    "NUMA node {} is listed twice (first at numaNodeResources[{first}])",
                    numa.node
                );
                return Err(refused(
                    ANNOTATION_RESOURCE_STATUS,
                    Refusal::new(path, Rule::Duplicate, detail),
                ));
            }
            check_quantities(
                ANNOTATION_RESOURCE_STATUS,
                &format!("numaNodeResources[{i}].resources"),
                &numa.resources,
            )?;
        }
        Ok(())
    }
);

impl ResourceStatus {
    /// The CPU ids of `cpuset`.
    pub fn cpu_ids(&self) -> Result<BTreeSet<u32>, CpuListError> {
        parse_cpu_list(&self.cpuset)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpuset_and_numa_resources_round_trip() {
        for text in [
            r#"{"cpuset":"0-3"}"#,
            r#"{"cpuset":"0-1,4-5","numaNodeResources":[{"node":0,"resources":{"cpu":"2","memory":"4Gi"}},{"node":1,"resources":{"cpu":"2"}}]}"#,
            r#"{}"#,
        ] {
            let v = ResourceStatus::parse(text).expect(text);
            assert_eq!(v.to_value(), text);
        }
        let v = ResourceStatus::parse(r#"{"cpuset":"0-1,4-5"}"#).expect("valid");
        assert_eq!(v.cpu_ids().ok().map(|c| c.len()), Some(4));
    }

    #[test]
    fn malformed_values_name_the_key_and_field() {
        let err = ResourceStatus::parse(r#"{"cpuset":"0-"}"#).expect_err("bad cpuset");
        assert!(
            err.to_string()
                .starts_with("annotation scheduling.koordinator.sh/resource-status: cpuset: "),
            "{err}"
        );
        let err =
            ResourceStatus::parse(r#"{"numaNodeResources":[{"node":0,"resources":{"cpu":"x"}}]}"#)
                .expect_err("bad quantity");
        assert!(
            err.to_string()
                .contains("numaNodeResources[0].resources.cpu"),
            "{err}"
        );
        assert!(ResourceStatus::parse("").is_err());
    }

    #[test]
    fn negative_and_duplicate_numa_entries_are_refused() {
        for (text, path, rule) in [
            (
                r#"{"numaNodeResources":[{"node":0,"resources":{"cpu":"-2"}}]}"#,
                "numaNodeResources[0].resources.cpu",
                Rule::Negative,
            ),
            (
                r#"{"numaNodeResources":[{"node":-1}]}"#,
                "numaNodeResources[0].node",
                Rule::Negative,
            ),
            (
                r#"{"numaNodeResources":[{"node":1},{"node":1}]}"#,
                "numaNodeResources[1].node",
                Rule::Duplicate,
            ),
        ] {
            let err = ResourceStatus::parse(text).expect_err(text);
            assert_eq!(err.rule(), rule, "{err}");
            assert!(err.to_string().contains(path), "{err}");
        }
    }
}
