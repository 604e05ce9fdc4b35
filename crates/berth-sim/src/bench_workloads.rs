//! The pod shapes of `berth bench`'s workloads, named and shaped after kube-scheduler's
//! `scheduler_perf` (`test/integration/scheduler_perf/config/performance-config.yaml`) so the
//! figures can be set side by side: nodes are `node-default` (4 CPU, 32Gi, 110 pods, spread
//! over [`fixtures::ZONES`] zones), pods `pod-default` (100m, 500Mi) plus what each workload
//! adds (a spread constraint, an affinity term, a priority...).
//!
//! Each workload has *init* pods, which shape the cluster before anything is timed (bound
//! round-robin over the nodes as if an earlier scheduler had placed them, or left pending
//! and tried once, untimed, for [`Workload::Unschedulable`]), and *measured* pods, whose
//! cycles are timed.

use std::sync::Arc;

use berth_api::k8s_openapi::api::core::v1::Pod;
use berth_core::{fixtures, Object};
use serde_json::json;

/// A `berth bench` workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Workload {
    /// Default pods on an empty cluster (also the reservation cases' shape).
    SchedulingBasic,
    /// Pods spread over zones (`maxSkew: 5`, `DoNotSchedule`) among default pods.
    TopologySpreading,
    /// The same spread as a preference (`ScheduleAnyway`).
    PreferredTopologySpreading,
    /// Pods requiring a matching pod in their zone (required `podAffinity`).
    PodAffinity,
    /// Pods refusing a matching pod on their node (required `podAntiAffinity`, hostname).
    PodAntiAffinity,
    /// Pods requiring a zone label (`nodeAffinity` In every zone: all nodes pass, so the
    /// figure is the selector's cost).
    NodeAffinity,
    /// Default pods while pods that fit nowhere wait in the unschedulable pool.
    Unschedulable,
    /// High-priority pods that fit only once low-priority pods are evicted.
    Preemption,
    /// scheduler_perf's DRA workload: every node publishes [`DEVICES_PER_NODE`] devices of
    /// one driver, every pod's claim asks for one of them; half the devices are taken by
    /// init pods scheduled (untimed) first, the measured pods take the rest.
    SchedulingWithResourceClaimTemplate,
    /// berth's own (kube-scheduler 1.35's scheduler_perf has no gang case): default pods in
    /// gangs of [`GANG_SIZE`], each a Koordinator PodGroup of `minMember` [`GANG_SIZE`], so
    /// every member waits at Permit until the last of its gang is assumed; 1,000 gangs by
    /// default.
    GangScheduling,
}

/// Members per gang of [`Workload::GangScheduling`].
pub const GANG_SIZE: usize = 8;

/// scheduler_perf's `maxClaimsPerNode` for SchedulingWithResourceClaimTemplate.
pub const DEVICES_PER_NODE: usize = 10;

/// Every workload above, in report order.
pub const WORKLOADS: [Workload; 10] = [
    Workload::SchedulingBasic,
    Workload::TopologySpreading,
    Workload::PreferredTopologySpreading,
    Workload::PodAffinity,
    Workload::PodAntiAffinity,
    Workload::NodeAffinity,
    Workload::Unschedulable,
    Workload::Preemption,
    Workload::SchedulingWithResourceClaimTemplate,
    Workload::GangScheduling,
];

/// Whether init pods are bound before timing or left pending for the scheduler.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InitMode {
    /// Bound round-robin over the nodes.
    Bound,
    /// Pending: tried (and failed) once before the measured pods arrive.
    Pending,
}

impl Workload {
    /// The scheduler_perf name.
    pub fn name(self) -> &'static str {
        match self {
            Self::SchedulingBasic => "SchedulingBasic",
            Self::TopologySpreading => "TopologySpreading",
            Self::PreferredTopologySpreading => "PreferredTopologySpreading",
            Self::PodAffinity => "PodAffinity",
            Self::PodAntiAffinity => "PodAntiAffinity",
            Self::NodeAffinity => "NodeAffinity",
            Self::Unschedulable => "Unschedulable",
            Self::Preemption => "Preemption",
            Self::SchedulingWithResourceClaimTemplate => "SchedulingWithResourceClaimTemplate",
            Self::GangScheduling => "GangScheduling",
        }
    }

    /// The workload named `name` (scheduler_perf's spelling).
    pub fn by_name(name: &str) -> Option<Self> {
        WORKLOADS.into_iter().find(|w| w.name() == name)
    }

    /// Measured pods when `--pods` is not given: scheduler_perf's 5000-node figures.
    pub fn default_pods(self) -> usize {
        match self {
            Self::SchedulingBasic | Self::NodeAffinity => 10_000,
            Self::Unschedulable => 5_000,
            Self::TopologySpreading | Self::PreferredTopologySpreading | Self::PodAffinity => 2_000,
            Self::PodAntiAffinity => 1_000,
            Self::Preemption => 500,
            // 5000pods_500nodes: 2,500 init pods, 2,500 measured.
            Self::SchedulingWithResourceClaimTemplate => 2_500,
            Self::GangScheduling => 1_000 * GANG_SIZE,
        }
    }

    /// Init pods for a cluster of `nodes` nodes and how they enter it.
    pub fn init(self, nodes: usize) -> (usize, InitMode) {
        match self {
            Self::SchedulingBasic | Self::GangScheduling => (0, InitMode::Bound),
            Self::TopologySpreading
            | Self::PreferredTopologySpreading
            | Self::PodAffinity
            | Self::NodeAffinity => (nodes, InitMode::Bound),
            Self::PodAntiAffinity => (nodes / 5, InitMode::Bound),
            Self::Unschedulable => (200, InitMode::Pending),
            // Four 900m pods fill 3.6 of a node's 4 CPUs: a 3-CPU pod must evict three.
            Self::Preemption => (nodes * 4, InitMode::Bound),
            // Half the devices, scheduled by the scheduler (untimed) as scheduler_perf does.
            Self::SchedulingWithResourceClaimTemplate => {
                (nodes * DEVICES_PER_NODE / 2, InitMode::Pending)
            }
        }
    }

    /// The `i`-th init pod.
    pub fn init_pod(self, i: usize) -> Arc<Pod> {
        match self {
            Self::PodAffinity => with_spec(pod("init", i, json!({"color": "blue"})), affinity()),
            Self::PodAntiAffinity => {
                with_spec(pod("init", i, json!({"color": "green"})), anti_affinity())
            }
            Self::Unschedulable => Arc::new(with_requests(pod("init", i, json!({})), "9", "500Mi")),
            Self::Preemption => with_spec(
                with_requests(pod("init", i, json!({})), "900m", "500Mi"),
                json!({"priority": 1}),
            ),
            Self::SchedulingWithResourceClaimTemplate => with_claim("init", i),
            _ => Arc::new(pod("init", i, json!({}))),
        }
    }

    /// The `i`-th measured pod.
    pub fn measured_pod(self, i: usize) -> Arc<Pod> {
        match self {
            Self::SchedulingBasic | Self::Unschedulable => Arc::new(pod("bench", i, json!({}))),
            Self::TopologySpreading => with_spec(
                pod("bench", i, json!({"color": "blue"})),
                spread("DoNotSchedule"),
            ),
            Self::PreferredTopologySpreading => with_spec(
                pod("bench", i, json!({"color": "blue"})),
                spread("ScheduleAnyway"),
            ),
            Self::PodAffinity => with_spec(pod("bench", i, json!({"color": "blue"})), affinity()),
            Self::PodAntiAffinity => {
                with_spec(pod("bench", i, json!({"color": "green"})), anti_affinity())
            }
            Self::NodeAffinity => with_spec(pod("bench", i, json!({})), node_affinity()),
            Self::Preemption => with_spec(
                with_requests(pod("bench", i, json!({})), "3", "500Mi"),
                json!({"priority": 10}),
            ),
            Self::SchedulingWithResourceClaimTemplate => with_claim("bench", i),
            Self::GangScheduling => Arc::new(pod(
                "bench",
                i,
                json!({berth_api::gang::LABEL_SIGS_POD_GROUP: format!("gang-{}", i / GANG_SIZE)}),
            )),
        }
    }

    /// The PodGroups of [`Workload::GangScheduling`]'s `pods` measured pods (none for the
    /// other workloads); a last, smaller gang asks for all its members.
    pub fn gang_objects(self, pods: usize) -> Vec<Object> {
        if self != Self::GangScheduling {
            return Vec::new();
        }
        (0..pods.div_ceil(GANG_SIZE))
            .filter_map(|g| {
                let pg = json!({"apiVersion": berth_api::gang::SIGS_API_VERSION, "kind": "PodGroup",
                    "metadata": {"name": format!("gang-{g}"), "namespace": "default"},
                    "spec": {"minMember": GANG_SIZE.min(pods - g * GANG_SIZE)}});
                serde_json::from_value(pg).ok()
            })
            .map(|pg| Object::PodGroup(Arc::new(pg)))
            .collect()
    }

    /// The DRA objects the workload needs besides nodes and pods: the DeviceClass, one
    /// ResourceSlice per node, and the claim of each of `init` init and `pods` measured
    /// pods. scheduler_perf's pods name a ResourceClaimTemplate and kube-controller-manager
    /// makes their claims before the scheduler sees them; here the claims exist from the
    /// start, named as the pods' `resourceClaimName`s (the scheduler's work is the same).
    pub fn dra_objects(self, nodes: &[String], init: usize, pods: usize) -> Vec<Object> {
        if self != Self::SchedulingWithResourceClaimTemplate {
            return Vec::new();
        }
        let mut out = Vec::with_capacity(1 + nodes.len() + init + pods);
        let class = json!({"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
            "metadata": {"name": "test-class"},
            "spec": {"selectors": [{"cel": {"expression": "device.driver == \"test-driver.cdi.k8s.io\""}}]}});
        if let Ok(c) = serde_json::from_value(class) {
            out.push(Object::DeviceClass(Arc::new(c)));
        }
        for n in nodes {
            let devices: Vec<_> = (0..DEVICES_PER_NODE)
                .map(|d| json!({"name": format!("device-{d:02}")}))
                .collect();
            let slice = json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
                "metadata": {"name": format!("{n}-test-driver")},
                "spec": {"driver": "test-driver.cdi.k8s.io", "nodeName": n,
                    "pool": {"name": n, "generation": 1, "resourceSliceCount": 1},
                    "devices": devices}});
            if let Ok(s) = serde_json::from_value(slice) {
                out.push(Object::ResourceSlice(Arc::new(s)));
            }
        }
        let claims = (0..init)
            .map(|i| claim_name("init", i))
            .chain((0..pods).map(|i| claim_name("bench", i)));
        for name in claims {
            let claim = json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}")},
                "spec": {"devices": {"requests": [{"name": "req-0",
                    "exactly": {"deviceClassName": "test-class"}}]}}});
            if let Ok(c) = serde_json::from_value(claim) {
                out.push(Object::ResourceClaim(Arc::new(c)));
            }
        }
        out
    }
}

/// The claim of the `i`-th pod of `prefix`.
fn claim_name(prefix: &str, i: usize) -> String {
    format!("{prefix}-{i:06}-resource")
}

/// A default pod whose container uses one claim (scheduler_perf's
/// `pod-with-claim-template.yaml`, with its claim already made).
fn with_claim(prefix: &str, i: usize) -> Arc<Pod> {
    let mut v = serde_json::to_value(pod(prefix, i, json!({}))).unwrap_or_default();
    v["spec"]["resourceClaims"] =
        json!([{"name": "resource", "resourceClaimName": claim_name(prefix, i)}]);
    v["spec"]["containers"][0]["resources"]["claims"] = json!([{"name": "resource"}]);
    Arc::new(serde_json::from_value(v).unwrap_or_else(|_| pod(prefix, i, json!({}))))
}

fn pod(prefix: &str, i: usize, labels: serde_json::Value) -> Pod {
    (*fixtures::pod(prefix, i, labels)).clone()
}

/// Merges `extra` into the pod's spec (through JSON: the fixture's shape stays the one
/// place that spells a default pod).
fn with_spec(p: Pod, extra: serde_json::Value) -> Arc<Pod> {
    let mut v = serde_json::to_value(&p).unwrap_or_default();
    if let (Some(spec), serde_json::Value::Object(extra)) = (v.get_mut("spec"), extra) {
        if let Some(spec) = spec.as_object_mut() {
            spec.extend(extra);
        }
    }
    Arc::new(serde_json::from_value(v).unwrap_or(p))
}

fn with_requests(mut p: Pod, cpu: &str, memory: &str) -> Pod {
    use berth_api::k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    let requests = p
        .spec
        .as_mut()
        .and_then(|s| s.containers.first_mut())
        .and_then(|c| c.resources.as_mut())
        .and_then(|r| r.requests.as_mut());
    if let Some(r) = requests {
        r.insert("cpu".into(), Quantity(cpu.into()));
        r.insert("memory".into(), Quantity(memory.into()));
    }
    p
}

fn spread(when: &str) -> serde_json::Value {
    json!({"topologySpreadConstraints": [{
        "maxSkew": 5, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": when,
        "labelSelector": {"matchLabels": {"color": "blue"}},
    }]})
}

fn affinity() -> serde_json::Value {
    json!({"affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{
        "labelSelector": {"matchLabels": {"color": "blue"}},
        "topologyKey": "topology.kubernetes.io/zone",
    }]}}})
}

fn anti_affinity() -> serde_json::Value {
    json!({"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{
        "labelSelector": {"matchLabels": {"color": "green"}},
        "topologyKey": "kubernetes.io/hostname",
    }]}}})
}

fn node_affinity() -> serde_json::Value {
    let zones: Vec<String> = (0..fixtures::ZONES).map(|z| format!("zone-{z}")).collect();
    json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{
            "key": "topology.kubernetes.io/zone", "operator": "In", "values": zones,
        }]}],
    }}}})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_workload_is_found_by_its_name() {
        for w in WORKLOADS {
            assert_eq!(Workload::by_name(w.name()), Some(w));
        }
        assert_eq!(Workload::by_name("schedulingbasic"), None);
    }

    #[test]
    fn shapes_carry_what_the_workload_adds() {
        let spec = |p: Arc<Pod>| serde_json::to_value(p.spec.clone()).unwrap_or_default();
        let s = spec(Workload::TopologySpreading.measured_pod(0));
        assert_eq!(
            s["topologySpreadConstraints"][0]["whenUnsatisfiable"],
            "DoNotSchedule"
        );
        let s = spec(Workload::PreferredTopologySpreading.measured_pod(0));
        assert_eq!(
            s["topologySpreadConstraints"][0]["whenUnsatisfiable"],
            "ScheduleAnyway"
        );
        let s = spec(Workload::PodAffinity.init_pod(3));
        assert!(s["affinity"]["podAffinity"].is_object(), "{s}");
        let s = spec(Workload::PodAntiAffinity.measured_pod(0));
        assert!(s["affinity"]["podAntiAffinity"].is_object(), "{s}");
        let s = spec(Workload::NodeAffinity.measured_pod(0));
        assert!(s["affinity"]["nodeAffinity"].is_object(), "{s}");
        let s = spec(Workload::Preemption.measured_pod(0));
        assert_eq!(s["priority"], 10);
        assert_eq!(s["containers"][0]["resources"]["requests"]["cpu"], "3");
        let s = spec(Workload::Unschedulable.init_pod(0));
        assert_eq!(s["containers"][0]["resources"]["requests"]["cpu"], "9");
    }
}
