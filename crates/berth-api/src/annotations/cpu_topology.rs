//! What Koordinator's node agent (koordlet) publishes about a node's CPUs on its
//! NodeResourceTopology, and what a pod asks for its CPUs:
//!
//! - `node.koordinator.sh/cpu-topology` ([`CpuTopology`]): every logical CPU with its
//!   physical core, socket and NUMA node;
//! - `kubelet.koordinator.sh/cpu-manager-policy` ([`KubeletCpuManagerPolicy`]): the kubelet's
//!   CPU manager policy and the CPUs it keeps for the system (`reservedCPUs`);
//! - `node.koordinator.sh/cpu-shared-pools` ([`CpuSharedPools`]): the CPUs shared pods run on;
//! - `scheduling.koordinator.sh/resource-spec` ([`ResourceSpec`]) on a pod: how its
//!   exclusive CPUs are bound (`FullPCPUs`, `SpreadByPCPUs`).
//!
//! A malformed value is refused whole, with the key and the field named: the scheduler
//! then treats the node as having no CPU topology rather than guessing at part of it.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::validate::{Refusal, Rule};

use super::{
    json_codec, parse_cpu_list, refused, AnnotationError, CpuListError,
    ANNOTATION_KUBELET_CPU_MANAGER_POLICY, ANNOTATION_NODE_CPU_SHARED_POOLS,
    ANNOTATION_NODE_CPU_TOPOLOGY, ANNOTATION_RESOURCE_SPEC, MAX_CPU_LIST_CPUS,
};

/// `node.koordinator.sh/cpu-topology`: `{"detail":[{"id":0,"core":0,"socket":0,"node":0},...]}`
/// (Koordinator's `extension.CPUTopology`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
pub struct CpuTopology {
    /// One entry per logical CPU.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub detail: Vec<CpuInfo>,
}

/// One logical CPU (a hardware thread).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpuInfo {
    /// The logical CPU id (as in `/sys/devices/system/cpu/cpuN`).
    pub id: u32,
    /// The physical core it is a thread of (unique across sockets, as Linux numbers them
    /// in `core_cpus_list` terms, and as koordlet writes them).
    pub core: u32,
    /// The socket (package).
    pub socket: u32,
    /// The NUMA node.
    pub node: u32,
}

json_codec!(
    CpuTopology,
    ANNOTATION_NODE_CPU_TOPOLOGY,
    empty_is_absent = true,
    check = |v: &CpuTopology| {
        let refuse = |path: String, rule: Rule, detail: String| {
            refused(
                ANNOTATION_NODE_CPU_TOPOLOGY,
                Refusal::new(path, rule, detail),
            )
        };
        if v.detail.len() as u64 > MAX_CPU_LIST_CPUS {
            return Err(refuse(
                "detail".into(),
                Rule::OutOfRange,
                format!(
                    "lists {} CPUs; berth reads at most {MAX_CPU_LIST_CPUS}",
                    v.detail.len()
                ),
            ));
        }
        let mut seen = BTreeMap::new();
        // A physical core lives in one socket and one NUMA node.
        let mut core_home: BTreeMap<u32, (u32, u32)> = BTreeMap::new();
        for (i, cpu) in v.detail.iter().enumerate() {
            if let Some(first) = seen.insert(cpu.id, i) {
                return Err(refuse(
                    format!("detail[{i}].id"),
                    Rule::Duplicate,
                    format!("CPU {} is listed twice (first at detail[{first}])", cpu.id),
                ));
            }
            let home = *core_home.entry(cpu.core).or_insert((cpu.socket, cpu.node));
            if home != (cpu.socket, cpu.node) {
                return Err(refuse(
                    format!("detail[{i}].core"),
                    Rule::Inconsistent,
                    format!(
                        "core {} is in socket {} node {} and in socket {} node {}",
                        cpu.core, home.0, home.1, cpu.socket, cpu.node
                    ),
                ));
            }
        }
        Ok(())
    }
);

/// `kubelet.koordinator.sh/cpu-manager-policy`: `{"policy":"static","reservedCPUs":"0-1"}`
/// (Koordinator's `extension.KubeletCPUManagerPolicy`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
pub struct KubeletCpuManagerPolicy {
    /// `none` or `static`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub policy: String,
    /// `--cpu-manager-policy-options`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub options: BTreeMap<String, String>,
    /// The kubelet's `--reserved-cpus`: never given to pods.
    #[serde(
        default,
        rename = "reservedCPUs",
        skip_serializing_if = "String::is_empty"
    )]
    pub reserved_cpus: String,
}

json_codec!(
    KubeletCpuManagerPolicy,
    ANNOTATION_KUBELET_CPU_MANAGER_POLICY,
    empty_is_absent = true,
    check = |v: &KubeletCpuManagerPolicy| {
        parse_cpu_list(&v.reserved_cpus).map_err(|source| AnnotationError::CpuList {
            key: ANNOTATION_KUBELET_CPU_MANAGER_POLICY,
            field: "reservedCPUs",
            source,
        })?;
        Ok(())
    }
);

impl KubeletCpuManagerPolicy {
    /// The kubelet's reserved CPU ids.
    pub fn reserved_cpu_ids(&self) -> Result<BTreeSet<u32>, CpuListError> {
        parse_cpu_list(&self.reserved_cpus)
    }
}

/// `node.koordinator.sh/cpu-shared-pools`: the CPUs of each socket / NUMA node that shared
/// (non-exclusive) pods run on, as koordlet computed them.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(transparent)]
pub struct CpuSharedPools(pub Vec<CpuSharedPool>);

/// One shared pool.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
pub struct CpuSharedPool {
    /// The socket.
    #[serde(default)]
    pub socket: i32,
    /// The NUMA node.
    #[serde(default)]
    pub node: i32,
    /// Its CPUs, as a Linux CPU list.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub cpuset: String,
}

json_codec!(
    CpuSharedPools,
    ANNOTATION_NODE_CPU_SHARED_POOLS,
    empty_is_absent = true,
    check = |v: &CpuSharedPools| {
        for pool in &v.0 {
            parse_cpu_list(&pool.cpuset).map_err(|source| AnnotationError::CpuList {
                key: ANNOTATION_NODE_CPU_SHARED_POOLS,
                field: "cpuset",
                source,
            })?;
        }
        Ok(())
    }
);

/// How a pod's exclusive CPUs are laid out over physical cores (Koordinator's
/// `CPUBindPolicy`).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum CpuBindPolicy {
    /// The scheduler's default (`FullPCPUs` unless configured otherwise). `""` reads as
    /// this too.
    #[default]
    #[serde(alias = "")]
    Default,
    /// Whole physical cores: all threads of a core go to the same pod.
    #[serde(rename = "FullPCPUs")]
    FullPcpus,
    /// One thread per physical core first, spreading the pod over as many cores as it can.
    #[serde(rename = "SpreadByPCPUs")]
    SpreadByPcpus,
    /// CPU shares within a bound set (no exclusive CPUs; berth binds no CPUs for it).
    ConstrainedBurst,
}

impl CpuBindPolicy {
    /// The name as Koordinator writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Default => "Default",
            Self::FullPcpus => "FullPCPUs",
            Self::SpreadByPcpus => "SpreadByPCPUs",
            Self::ConstrainedBurst => "ConstrainedBurst",
        }
    }
}

/// `scheduling.koordinator.sh/resource-spec` on a pod (or a reservation's template):
/// `{"preferredCPUBindPolicy":"SpreadByPCPUs"}` (Koordinator's `extension.ResourceSpec`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ResourceSpec {
    /// A policy the node must be able to honour (else the node is filtered out).
    #[serde(
        default,
        rename = "requiredCPUBindPolicy",
        skip_serializing_if = "Option::is_none"
    )]
    pub required_cpu_bind_policy: Option<CpuBindPolicy>,
    /// The policy to use where the node does not impose one.
    #[serde(
        default,
        rename = "preferredCPUBindPolicy",
        skip_serializing_if = "Option::is_none"
    )]
    pub preferred_cpu_bind_policy: Option<CpuBindPolicy>,
    /// `PCPULevel` / `NUMANodeLevel` exclusivity against other pods with the same policy.
    /// Read and kept; berth does not act on it.
    #[serde(
        default,
        rename = "preferredCPUExclusivePolicy",
        skip_serializing_if = "String::is_empty"
    )]
    pub preferred_cpu_exclusive_policy: String,
}

json_codec!(
    ResourceSpec,
    ANNOTATION_RESOURCE_SPEC,
    empty_is_absent = true
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_seed_example_values_parse_and_round_trip() {
        let text = r#"{"detail":[{"id":0,"core":0,"socket":0,"node":0},{"id":1,"core":0,"socket":0,"node":0}]}"#;
        assert_eq!(CpuTopology::parse(text).expect(text).to_value(), text);
        for text in [
            r#"{"policy":"none"}"#,
            r#"{"policy":"static","reservedCPUs":"0-1"}"#,
        ] {
            let v = KubeletCpuManagerPolicy::parse(text).expect(text);
            assert_eq!(v.to_value(), text);
        }
        let pools = CpuSharedPools::parse(
            r#"[{"socket":0,"node":0,"cpuset":"1-5,12-17"},{"socket":1,"node":1,"cpuset":"7-11,18-23"}]"#,
        )
        .expect("seed 004 example");
        assert_eq!(pools.0.len(), 2);
        assert_eq!(pools.0[1].cpuset, "7-11,18-23");
        let spec = ResourceSpec::parse(r#"{"preferredCPUBindPolicy":"SpreadByPCPUs"}"#)
            .expect("reference E2E 51");
        assert_eq!(
            spec.preferred_cpu_bind_policy,
            Some(CpuBindPolicy::SpreadByPcpus)
        );
        assert_eq!(
            spec.to_value(),
            r#"{"preferredCPUBindPolicy":"SpreadByPCPUs"}"#
        );
        let empty = ResourceSpec::parse(r#"{"requiredCPUBindPolicy":""}"#).expect("empty");
        assert_eq!(empty.required_cpu_bind_policy, Some(CpuBindPolicy::Default));
    }

    #[test]
    fn malformed_values_name_the_key_and_field() {
        let err = CpuTopology::parse(r#"{"detail":[{"id":0,"core":0,"socket":0}]}"#)
            .expect_err("node missing");
        assert!(
            err.to_string()
                .starts_with("annotation node.koordinator.sh/cpu-topology: "),
            "{err}"
        );
        let err = CpuTopology::parse(
            r#"{"detail":[{"id":0,"core":0,"socket":0,"node":0},{"id":0,"core":1,"socket":0,"node":0}]}"#,
        )
        .expect_err("duplicate id");
        assert_eq!(
            err.to_string(),
            "annotation node.koordinator.sh/cpu-topology: detail[1].id: CPU 0 is listed twice (first at detail[0]) (rule: duplicate)"
        );
        assert_eq!(err.rule(), crate::validate::Rule::Duplicate);
        let err = CpuTopology::parse(
            r#"{"detail":[{"id":0,"core":0,"socket":0,"node":0},{"id":1,"core":0,"socket":1,"node":1}]}"#,
        )
        .expect_err("core in two sockets");
        assert!(err.to_string().contains("core 0 is in socket 0"), "{err}");
        let err = CpuTopology::parse(r#"{"detail":[{"id":-1,"core":0,"socket":0,"node":0}]}"#)
            .expect_err("negative id");
        assert!(err.to_string().contains("cpu-topology"), "{err}");
        let err = KubeletCpuManagerPolicy::parse(r#"{"policy":"static","reservedCPUs":"1-"}"#)
            .expect_err("bad list");
        assert!(
            err.to_string().starts_with(
                "annotation kubelet.koordinator.sh/cpu-manager-policy: reservedCPUs: "
            ),
            "{err}"
        );
        let err = CpuSharedPools::parse(r#"[{"socket":0,"node":0,"cpuset":"x"}]"#)
            .expect_err("bad cpuset");
        assert!(
            err.to_string().contains("cpu-shared-pools: cpuset"),
            "{err}"
        );
        let err = ResourceSpec::parse(r#"{"preferredCPUBindPolicy":"Tight"}"#)
            .expect_err("unknown policy");
        assert!(err.to_string().contains("resource-spec"), "{err}");
    }
}
