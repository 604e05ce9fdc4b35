//! `node.koordinator.sh/reservation`: resources held back from pods.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use serde::{Deserialize, Serialize};

use super::{
    check_quantities, json_codec, parse_cpu_list, resource_amounts, AnnotationError, CpuListError,
    ANNOTATION_NODE_RESERVATION,
};

/// Resources reserved on a Node (for non-Kubernetes processes; trimmed from allocatable
/// before any plugin runs) or inside a Reservation (unusable by its owners).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct NodeReservation {
    /// Amounts to reserve, e.g. `{"cpu":"1","memory":"2Gi"}`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub resources: BTreeMap<String, Quantity>,
    /// Explicit CPU ids (`"0-3"`); when set, it replaces `resources.cpu`.
    #[serde(
        default,
        rename = "reservedCPUs",
        skip_serializing_if = "String::is_empty"
    )]
    pub reserved_cpus: String,
    /// Whether allocatable is trimmed; absent means [`NodeReservationApplyPolicy::Default`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub apply_policy: Option<NodeReservationApplyPolicy>,
}

/// `applyPolicy` of [`NodeReservation`].
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum NodeReservationApplyPolicy {
    /// Trim node allocatable by the reserved amounts and keep the CPUs out of cpusets.
    /// `""` reads as this too, as in Koordinator.
    #[default]
    #[serde(alias = "")]
    Default,
    /// Only keep the CPUs out of cpusets; kubelet's own reservation already trimmed
    /// allocatable.
    #[serde(rename = "ReservedCPUsOnly")]
    ReservedCpusOnly,
}

json_codec!(
    NodeReservation,
    ANNOTATION_NODE_RESERVATION,
    empty_is_absent = true,
    check = |v: &NodeReservation| {
        check_quantities(ANNOTATION_NODE_RESERVATION, "resources", &v.resources)?;
        parse_cpu_list(&v.reserved_cpus).map_err(|source| AnnotationError::CpuList {
            key: ANNOTATION_NODE_RESERVATION,
            field: "reservedCPUs",
            source,
        })?;
        Ok(())
    }
);

impl NodeReservation {
    /// True when the scheduler trims node allocatable (policy absent or `Default`).
    pub fn trims_allocatable(&self) -> bool {
        self.apply_policy.unwrap_or_default() == NodeReservationApplyPolicy::Default
    }

    /// The explicitly reserved CPU ids (empty when `reservedCPUs` is unset).
    pub fn reserved_cpu_ids(&self) -> Result<BTreeSet<u32>, CpuListError> {
        parse_cpu_list(&self.reserved_cpus)
    }

    /// How many whole CPUs `resources.cpu` asks to reserve (rounded up, as koordlet's
    /// `GetReservedCPUs` does); 0 without it. Only meaningful when `reservedCPUs` is unset:
    /// the node agent then picks that many concrete CPUs.
    pub fn reserved_cpu_count(&self) -> Result<u32, AnnotationError> {
        let amounts = resource_amounts(ANNOTATION_NODE_RESERVATION, "resources", &self.resources)?;
        let milli = amounts.get("cpu").copied().unwrap_or(0).max(0);
        Ok(u32::try_from(milli.saturating_add(999) / 1000).unwrap_or(u32::MAX))
    }

    /// The amounts to subtract from allocatable, as integers (milli-CPU, whole units
    /// otherwise): `resources`, with `cpu` replaced by `1000 × |reservedCPUs|` when
    /// `reservedCPUs` is set, like Koordinator's node transformer. Callers apply it only when
    /// [`Self::trims_allocatable`]; `kubernetes.io/batch-cpu`/`batch-memory` are never trimmed.
    pub fn reserved_amounts(&self) -> Result<BTreeMap<String, i64>, AnnotationError> {
        let mut amounts =
            resource_amounts(ANNOTATION_NODE_RESERVATION, "resources", &self.resources)?;
        if !self.reserved_cpus.is_empty() {
            let cpus = self
                .reserved_cpu_ids()
                .map_err(|source| AnnotationError::CpuList {
                    key: ANNOTATION_NODE_RESERVATION,
                    field: "reservedCPUs",
                    source,
                })?;
            let count = i64::try_from(cpus.len()).unwrap_or(i64::MAX);
            amounts.insert("cpu".to_string(), count.saturating_mul(1000));
        }
        Ok(amounts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::validate::Rule;

    #[test]
    fn a_resource_named_twice_is_refused_not_last_wins() {
        let e = NodeReservation::parse(r#"{"resources":{"cpu":"8","cpu":"1"}}"#)
            .expect_err("duplicate key accepted");
        assert_eq!(e.rule(), Rule::Duplicate, "{e}");
        assert!(e.to_string().contains("resources.cpu"), "{e}");
    }

    #[test]
    fn the_design_doc_examples_parse_and_round_trip() {
        for text in [
            r#"{"resources":{"cpu":"5"}}"#,
            r#"{"reservedCPUs":"0-3"}"#,
            r#"{"resources":{"cpu":"2"},"reservedCPUs":"0-3"}"#,
            r#"{"reservedCPUs":"0,6"}"#,
            r#"{"resources":{"cpu":"1","memory":"2Gi"},"reservedCPUs":"0-3","applyPolicy":"ReservedCPUsOnly"}"#,
        ] {
            let v = NodeReservation::parse(text).expect(text);
            assert_eq!(v.to_value(), text);
        }
    }

    #[test]
    fn reserved_cpus_override_the_cpu_amount() {
        let v = NodeReservation::parse(
            r#"{"resources":{"cpu":"2","memory":"1Gi"},"reservedCPUs":"0-3"}"#,
        )
        .expect("valid");
        let amounts = v.reserved_amounts().expect("valid");
        assert_eq!(amounts.get("cpu"), Some(&4000));
        assert_eq!(amounts.get("memory"), Some(&(1 << 30)));
        assert!(v.trims_allocatable());
        let q = NodeReservation::parse(r#"{"resources":{"cpu":"1500m"}}"#).expect("valid");
        assert_eq!(q.reserved_cpu_count().ok(), Some(2), "rounded up");
        assert_eq!(
            NodeReservation::default().reserved_cpu_count().ok(),
            Some(0)
        );
    }

    #[test]
    fn apply_policy_values() {
        let only = NodeReservation::parse(r#"{"applyPolicy":"ReservedCPUsOnly"}"#).expect("valid");
        assert!(!only.trims_allocatable());
        let empty = NodeReservation::parse(r#"{"applyPolicy":""}"#).expect("empty is Default");
        assert!(empty.trims_allocatable());
        let err =
            NodeReservation::parse(r#"{"applyPolicy":"Sometimes"}"#).expect_err("unknown policy");
        assert!(
            err.to_string().contains("node.koordinator.sh/reservation"),
            "{err}"
        );
    }

    #[test]
    fn bad_cpu_lists_and_quantities_are_reported() {
        let err = NodeReservation::parse(r#"{"reservedCPUs":"3-1"}"#).expect_err("decreasing");
        assert_eq!(
            err.to_string(),
            r#"annotation node.koordinator.sh/reservation: reservedCPUs: invalid CPU list "3-1": range "3-1" is decreasing"#
        );
        let err = NodeReservation::parse(r#"{"resources":{"cpu":"1C"}}"#)
            .expect_err("1C is not a quantity");
        assert!(err.to_string().contains("resources.cpu"), "{err}");
    }

    #[test]
    fn negative_and_huge_amounts_are_refused_whole() {
        let err = NodeReservation::parse(r#"{"resources":{"cpu":"-3"}}"#).expect_err("negative");
        assert_eq!(
            err.to_string(),
            r#"annotation node.koordinator.sh/reservation: resources.cpu: "-3": must be greater than or equal to 0 (rule: negative)"#
        );
        assert_eq!(err.rule(), crate::validate::Rule::Negative);
        let err = NodeReservation::parse(r#"{"resources":{"memory":"1e40"}}"#).expect_err("huge");
        assert_eq!(err.rule(), crate::validate::Rule::OutOfRange);
    }
}
