//! The NUMA half of the simulated node agent: the kubelet's Topology Manager admission with
//! exclusive CPU accounting per zone, and NFD's topology updater republishing the node's
//! NodeResourceTopology.
//!
//! The kubelet model:
//! - A node's NUMA zones are the NRT's zones of type `Node` named `node-<id>`, with their
//!   `capacity` and `allocatable`. CPU ids are numbered zone by zone in NUMA-id order; in
//!   each zone the first `capacity - allocatable` ids are reserved for the system.
//! - A container of a Guaranteed pod asking for whole CPUs is *pinned*: it gets exclusive
//!   CPUs (static CPU manager) and its memory, hugepages and the devices the NRT lists come
//!   from the same zone (static memory manager, device manager). Other containers run in
//!   the shared pool and take nothing from any zone, as the agents report them.
//! - `single-numa-node`: each pinned container (container scope) or the pod's pinned
//!   containers together (pod scope) must fit one zone, the lowest NUMA id that fits (the
//!   kubelet's narrowest, lowest hint); if none fits the pod is rejected with
//!   `TopologyAffinityError`. Init containers must each fit a zone too; they take nothing
//!   (their CPUs are reused by the app containers). Other policies admit: a unit takes the
//!   lowest zone that fits, else spreads over the zones in order.
//! - What a pod was given is written on it as `scheduling.koordinator.sh/resource-status`
//!   (`cpuset` and per-zone `numaNodeResources`, Koordinator's format) when it got
//!   exclusive CPUs; that annotation is the kubelet's checkpoint: the agent re-reads what
//!   every running pod holds from it, so it keeps no state of its own.
//!
//! The topology updater republishes each zone's `available` (allocatable minus what running
//! pods hold there) and the pod-set fingerprint of the running pods (method `all`) in the
//! attribute `nodeTopologyPodsFingerprint` and the annotation
//! `topology.node.k8s.io/fingerprint`. Unlike NFD it also publishes the fingerprint of an
//! empty pod set: a simulated node runs no agent pod of its own to keep the list non-empty,
//! and without a fingerprint the scheduler's cache could never resync an emptied node.

use std::collections::{BTreeMap, BTreeSet};

use berth_api::annotations::{
    format_cpu_list, parse_cpu_list, NumaNodeResource, ResourceStatus, ANNOTATION_RESOURCE_STATUS,
};
use berth_api::k8s_openapi::api::core::v1::Pod;
use berth_api::k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use berth_api::nrt::{
    AttributeInfo, NodeResourceTopology, ANNOTATION_POD_FINGERPRINT, ATTRIBUTE_POD_FINGERPRINT,
    ZONE_TYPE_NUMA_NODE,
};
use berth_api::quantity::{format_resource, parse_resource};
use berth_core::model::pod::PodInfo;
use berth_core::numa::fingerprint;
use berth_core::numa::types::{is_hugepages, numa_id};
use berth_core::numa::{QosClass, Resources, TmPolicy, TmScope, TopologyManagerConfig};
use berth_core::plugins::numatopology::pod_numa_request;
use berth_core::resources::ResourceNames;

/// `status.reason` of a pod the Topology Manager rejects.
pub const TOPOLOGY_AFFINITY_ERROR: &str = "TopologyAffinityError";

/// The Topology Manager's verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NumaAdmission {
    /// Admitted; `resource_status` is the annotation value to write when the pod got
    /// exclusive CPUs.
    Admit {
        /// `scheduling.koordinator.sh/resource-status`, if any.
        resource_status: Option<String>,
    },
    /// Rejected: `status.phase: Failed`, `status.reason: TopologyAffinityError`.
    Reject {
        /// `status.message`.
        message: String,
    },
}

/// One NUMA zone as the kubelet holds it.
#[derive(Debug, Clone)]
struct Zone {
    id: u8,
    /// CPU ids pods may be given, ascending.
    cpus: Vec<u32>,
    allocatable: BTreeMap<String, i64>,
    /// Held by running pods, by resource (cpu in millis).
    used: BTreeMap<String, i64>,
}

impl Zone {
    fn free(&self, name: &str) -> i64 {
        let alloc = self.allocatable.get(name).copied().unwrap_or(0);
        (alloc - self.used.get(name).copied().unwrap_or(0)).max(0)
    }
}

/// A node's zones and what running pods hold in them.
#[derive(Debug, Clone)]
struct Machine {
    tm: TopologyManagerConfig,
    zones: Vec<Zone>,
    used_cpus: BTreeSet<u32>,
}

impl Machine {
    /// The machine an NRT describes; `None` when it has no NUMA zone.
    fn from_nrt(nrt: &NodeResourceTopology) -> Option<Self> {
        let mut zones: Vec<(u8, &berth_api::nrt::Zone)> = nrt
            .spec
            .zones
            .iter()
            .filter(|z| z.type_ == ZONE_TYPE_NUMA_NODE)
            .filter_map(|z| numa_id(&z.name).map(|id| (id, z)))
            .collect();
        if zones.is_empty() {
            return None;
        }
        zones.sort_by_key(|(id, _)| *id);
        let mut next_cpu = 0u32;
        let mut out = Vec::with_capacity(zones.len());
        for (id, z) in zones {
            let mut allocatable = BTreeMap::new();
            let mut cpu_capacity = 0i64;
            for r in &z.resources {
                let alloc = parse_resource(&r.name, &r.allocatable.0).unwrap_or(0);
                allocatable.insert(r.name.clone(), alloc);
                if r.name == "cpu" {
                    let cap = parse_resource("cpu", &r.capacity.0).unwrap_or(0);
                    cpu_capacity = cap.max(alloc) / 1000;
                }
            }
            let cpu_alloc = allocatable.get("cpu").copied().unwrap_or(0) / 1000;
            let reserved = (cpu_capacity - cpu_alloc).max(0) as u32;
            let first = next_cpu + reserved;
            next_cpu += cpu_capacity.max(0) as u32;
            out.push(Zone {
                id,
                cpus: (first..next_cpu).collect(),
                allocatable,
                used: BTreeMap::new(),
            });
        }
        let tm = TopologyManagerConfig::from_nrt_parts(
            &nrt.spec.topology_policies,
            nrt.spec
                .attributes
                .iter()
                .map(|a| (a.name.as_str(), a.value.as_str())),
        );
        Some(Self {
            tm,
            zones: out,
            used_cpus: BTreeSet::new(),
        })
    }

    /// Takes what `pod` holds, read from its resource-status annotation.
    fn charge_running(&mut self, pod: &Pod) {
        let Some(text) = pod
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(ANNOTATION_RESOURCE_STATUS))
        else {
            return;
        };
        let Ok(status) = ResourceStatus::parse(text) else {
            return;
        };
        if let Ok(cpus) = parse_cpu_list(&status.cpuset) {
            self.used_cpus.extend(cpus);
        }
        for n in &status.numa_node_resources {
            let Some(zone) = self.zones.iter_mut().find(|z| i32::from(z.id) == n.node) else {
                continue;
            };
            for (name, q) in &n.resources {
                let v = parse_resource(name, &q.0).unwrap_or(0);
                *zone.used.entry(name.clone()).or_insert(0) += v;
            }
        }
    }

    fn listed(&self, name: &str) -> bool {
        self.zones.iter().any(|z| z.allocatable.contains_key(name))
    }

    /// The lowest zone where every zone-listed resource of `unit` fits.
    fn fitting_zone(&self, unit: &Resources) -> Option<usize> {
        self.zones.iter().position(|z| {
            unit.iter().all(|(name, amount)| {
                !self.listed(name.as_str()) || (amount <= z.free(name.as_str()))
            })
        })
    }

    /// The first resource of `unit` no single zone can hold.
    fn unaligned(&self, unit: &Resources) -> String {
        unit.iter()
            .find(|(name, amount)| {
                self.listed(name.as_str())
                    && self.zones.iter().all(|z| z.free(name.as_str()) < *amount)
            })
            .map_or_else(|| "cpu".to_string(), |(n, _)| n.as_str().to_string())
    }

    /// Gives `unit` to the pod from zone `pos` (all of it) or, with `None`, spread over the
    /// zones in order. Records the CPU ids and amounts in `grant`.
    fn take(&mut self, unit: &Resources, pos: Option<usize>, grant: &mut Grant) {
        for (name, amount) in unit.iter() {
            let name = name.as_str();
            if !self.listed(name) {
                continue;
            }
            let mut left = amount;
            let order: Vec<usize> = match pos {
                Some(p) => vec![p],
                None => (0..self.zones.len()).collect(),
            };
            for &p in &order {
                if left <= 0 {
                    break;
                }
                let free = self.zones[p].free(name);
                let part = if pos.is_some() { left } else { left.min(free) };
                if part <= 0 {
                    continue;
                }
                if name == "cpu" {
                    let want = (part / 1000) as usize;
                    let ids: Vec<u32> = self.zones[p]
                        .cpus
                        .iter()
                        .copied()
                        .filter(|c| !self.used_cpus.contains(c))
                        .take(want)
                        .collect();
                    self.used_cpus.extend(ids.iter().copied());
                    grant.cpus.extend(ids);
                }
                let zone = &mut self.zones[p];
                *zone.used.entry(name.to_string()).or_insert(0) += part;
                *grant
                    .per_zone
                    .entry(zone.id)
                    .or_default()
                    .entry(name.to_string())
                    .or_insert(0) += part;
                left -= part;
            }
        }
    }
}

/// What one pod was given.
#[derive(Debug, Default)]
struct Grant {
    cpus: BTreeSet<u32>,
    per_zone: BTreeMap<u8, BTreeMap<String, i64>>,
}

impl Grant {
    fn resource_status(&self) -> Option<String> {
        if self.cpus.is_empty() {
            return None;
        }
        let status = ResourceStatus {
            cpuset: format_cpu_list(&self.cpus),
            numa_node_resources: self
                .per_zone
                .iter()
                .map(|(id, res)| NumaNodeResource {
                    node: i32::from(*id),
                    resources: res
                        .iter()
                        .map(|(n, v)| (n.clone(), Quantity(format_resource(n, *v))))
                        .collect(),
                })
                .collect(),
        };
        Some(status.to_value())
    }
}

/// The pinned part of a container: whole CPUs of a Guaranteed pod, with the memory,
/// hugepages and zone-listed devices that go with them. `None` for a shared-pool container.
fn pinned(qos: QosClass, requests: &Resources, listed: impl Fn(&str) -> bool) -> Option<Resources> {
    let cpu = requests.get("cpu").unwrap_or(0);
    if qos != QosClass::Guaranteed || cpu <= 0 || cpu % 1000 != 0 {
        return None;
    }
    Some(
        requests
            .iter()
            .filter(|(n, _)| {
                let n = n.as_str();
                n == "cpu" || n == "memory" || is_hugepages(n) || listed(n)
            })
            .map(|(n, v)| (n.clone(), v))
            .collect(),
    )
}

/// Kubelet admission of `pod` on a node whose NRT is `nrt`, given the pods running there
/// (the pod itself excluded).
pub fn admit<'a>(
    nrt: &NodeResourceTopology,
    running: impl IntoIterator<Item = &'a Pod>,
    pod: &Pod,
) -> NumaAdmission {
    let admit_plain = NumaAdmission::Admit {
        resource_status: None,
    };
    // The scheduler chose this pod's CPUs (NodeNUMAResource's resource-status, for LSE/LSR
    // pods): the kubelet honours them, as koordlet's runtime hooks do.
    if scheduler_cpuset(pod) {
        return admit_plain;
    }
    let Some(mut machine) = Machine::from_nrt(nrt) else {
        return admit_plain;
    };
    for p in running {
        machine.charge_running(p);
    }
    let info = match PodInfo::new(
        std::sync::Arc::new(pod.clone()),
        &mut ResourceNames::default(),
    ) {
        Ok(i) => i,
        Err(_) => return admit_plain,
    };
    let Ok(request) = pod_numa_request(&info) else {
        return admit_plain;
    };
    let qos = request.qos();
    let listed = |n: &str| machine.listed(n);
    let init_units: Vec<Resources> = request
        .init_containers()
        .iter()
        .filter_map(|ic| pinned(qos, &ic.requests, listed))
        .collect();
    let mut units: Vec<Resources> = request
        .containers()
        .iter()
        .filter_map(|c| pinned(qos, c, listed))
        .collect();
    if machine.tm.scope == TmScope::Pod && units.len() > 1 {
        let mut sum = Resources::new();
        for u in &units {
            for (n, v) in u.iter() {
                sum.add(n, v);
            }
        }
        units = vec![sum];
    }
    let strict = machine.tm.policy == TmPolicy::SingleNumaNode;
    if strict {
        for u in &init_units {
            if machine.fitting_zone(u).is_none() {
                return reject(&machine, u);
            }
        }
    }
    let mut grant = Grant::default();
    for u in &units {
        let zone = machine.fitting_zone(u);
        if zone.is_none() && strict {
            return reject(&machine, u);
        }
        machine.take(u, zone, &mut grant);
    }
    NumaAdmission::Admit {
        resource_status: grant.resource_status(),
    }
}

/// Whether the pod arrives with a non-empty cpuset in its resource-status.
fn scheduler_cpuset(pod: &Pod) -> bool {
    pod.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANNOTATION_RESOURCE_STATUS))
        .and_then(|t| ResourceStatus::parse(t).ok())
        .is_some_and(|s| !s.cpuset.is_empty())
}

fn reject(machine: &Machine, unit: &Resources) -> NumaAdmission {
    NumaAdmission::Reject {
        message: format!(
            "Resources cannot be allocated with Topology locality (resource {} does not fit a single NUMA node)",
            machine.unaligned(unit)
        ),
    }
}

/// The NRT the topology updater publishes for a node running `running` (phase Running).
pub fn republish<'a>(
    nrt: &NodeResourceTopology,
    running: impl IntoIterator<Item = &'a Pod>,
) -> NodeResourceTopology {
    let running: Vec<&Pod> = running.into_iter().collect();
    let mut out = nrt.clone();
    if let Some(mut machine) = Machine::from_nrt(nrt) {
        for p in &running {
            machine.charge_running(p);
        }
        for zone in &mut out.spec.zones {
            if zone.type_ != ZONE_TYPE_NUMA_NODE {
                continue;
            }
            let Some(m) =
                numa_id(&zone.name).and_then(|id| machine.zones.iter().find(|z| z.id == id))
            else {
                continue;
            };
            for r in &mut zone.resources {
                r.available = Quantity(format_resource(&r.name, m.free(&r.name)));
            }
        }
    }
    let signature = fingerprint::sign(running.iter().map(|p| {
        (
            p.metadata.namespace.as_deref().unwrap_or("default"),
            p.metadata.name.as_deref().unwrap_or(""),
        )
    }));
    match out
        .spec
        .attributes
        .iter_mut()
        .find(|a| a.name == ATTRIBUTE_POD_FINGERPRINT)
    {
        Some(a) => a.value = signature.clone(),
        None => out.spec.attributes.push(AttributeInfo {
            name: ATTRIBUTE_POD_FINGERPRINT.to_string(),
            value: signature.clone(),
        }),
    }
    out.metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(ANNOTATION_POD_FINGERPRINT.to_string(), signature);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use berth_core::testing::pod;
    use serde_json::json;

    /// Two zones of 8 CPUs (2 reserved in zone 0) and 16Gi each.
    fn nrt(policy: &str, scope: &str) -> NodeResourceTopology {
        NodeResourceTopology::from_any_version(json!({
            "apiVersion": "topology.node.k8s.io/v1alpha2", "kind": "NodeResourceTopology",
            "metadata": {"name": "n1"},
            "attributes": [
                {"name": "topologyManagerPolicy", "value": policy},
                {"name": "topologyManagerScope", "value": scope},
            ],
            "zones": [
                {"name": "node-0", "type": "Node", "resources": [
                    {"name": "cpu", "capacity": 8, "allocatable": 6, "available": 6},
                    {"name": "memory", "capacity": "16Gi", "allocatable": "16Gi", "available": "16Gi"}]},
                {"name": "node-1", "type": "Node", "resources": [
                    {"name": "cpu", "capacity": 8, "allocatable": 8, "available": 8},
                    {"name": "memory", "capacity": "16Gi", "allocatable": "16Gi", "available": "16Gi"}]},
            ],
        }))
        .expect("valid NRT")
    }

    fn gpod(name: &str, cpu: &str) -> Pod {
        (*pod(name)
            .req("cpu", cpu)
            .limit("cpu", cpu)
            .req("memory", "1Gi")
            .limit("memory", "1Gi")
            .build())
        .clone()
    }

    /// Admits `pods` in order, as running pods with what they were given.
    fn admit_all(nrt: &NodeResourceTopology, pods: &[Pod]) -> (Vec<Pod>, Vec<NumaAdmission>) {
        let mut running: Vec<Pod> = Vec::new();
        let mut verdicts = Vec::new();
        for p in pods {
            let v = admit(nrt, running.iter(), p);
            if let NumaAdmission::Admit { resource_status } = &v {
                let mut p = p.clone();
                if let Some(rs) = resource_status {
                    p.metadata
                        .annotations
                        .get_or_insert_with(Default::default)
                        .insert(ANNOTATION_RESOURCE_STATUS.to_string(), rs.clone());
                }
                running.push(p);
            }
            verdicts.push(v);
        }
        (running, verdicts)
    }

    fn cpuset(v: &NumaAdmission) -> Option<String> {
        match v {
            NumaAdmission::Admit {
                resource_status: Some(rs),
            } => ResourceStatus::parse(rs).ok().map(|s| s.cpuset),
            _ => None,
        }
    }

    #[test]
    fn single_numa_node_places_each_pod_in_one_zone_and_rejects_what_fits_none() {
        let nrt = nrt("single-numa-node", "container");
        let pods = [
            gpod("a", "5"),
            gpod("b", "5"),
            gpod("c", "4"),
            gpod("d", "1"),
        ];
        let (_, v) = admit_all(&nrt, &pods);
        // Zone 0 has CPUs 2-7 (0-1 reserved), zone 1 has 8-15.
        assert_eq!(cpuset(&v[0]).as_deref(), Some("2-6"));
        assert_eq!(cpuset(&v[1]).as_deref(), Some("8-12"));
        assert!(
            matches!(&v[2], NumaAdmission::Reject { message } if message.contains("resource cpu")),
            "{:?}",
            v[2]
        );
        assert_eq!(
            cpuset(&v[3]).as_deref(),
            Some("7"),
            "1 CPU still fits zone 0"
        );
    }

    #[test]
    fn other_policies_spread_a_pod_wider_than_a_zone() {
        for policy in ["none", "best-effort", "restricted"] {
            let (_, v) = admit_all(&nrt(policy, "container"), &[gpod("wide", "10")]);
            assert_eq!(cpuset(&v[0]).as_deref(), Some("2-11"), "{policy}");
        }
        let (_, v) = admit_all(&nrt("single-numa-node", "pod"), &[gpod("wide", "10")]);
        assert!(matches!(v[0], NumaAdmission::Reject { .. }));
    }

    #[test]
    fn shared_pool_pods_take_nothing_from_the_zones() {
        let nrt = nrt("single-numa-node", "container");
        let burstable = (*pod("b").req("cpu", "7").build()).clone();
        let fractional = gpod("f", "1500m");
        let (running, v) = admit_all(&nrt, &[burstable, fractional]);
        assert!(v.iter().all(|v| *v
            == NumaAdmission::Admit {
                resource_status: None
            }));
        let out = republish(&nrt, running.iter());
        assert_eq!(out.spec.zones[0].resources[0].available.0, "6");
    }

    #[test]
    fn republish_writes_real_availability_and_the_fingerprint() {
        let nrt = nrt("single-numa-node", "container");
        let (running, _) = admit_all(&nrt, &[gpod("a", "5"), gpod("b", "3")]);
        let out = republish(&nrt, running.iter());
        let avail = |z: usize, r: usize| out.spec.zones[z].resources[r].available.0.clone();
        // a (5) and b (3) cannot share zone 0 (6 CPUs): b goes to zone 1.
        assert_eq!(
            (avail(0, 0), avail(1, 0)),
            ("1".to_string(), "5".to_string())
        );
        assert_eq!(
            (avail(0, 1), avail(1, 1)),
            ("15Gi".to_string(), "15Gi".to_string())
        );
        let want = fingerprint::sign([("default", "a"), ("default", "b")]);
        assert_eq!(
            out.attribute(ATTRIBUTE_POD_FINGERPRINT),
            Some(want.as_str())
        );
        assert_eq!(
            out.annotation(ANNOTATION_POD_FINGERPRINT),
            Some(want.as_str())
        );
        // Republishing the republished object replaces the attribute, it does not add one.
        let again = republish(&out, std::iter::empty());
        let n = again
            .spec
            .attributes
            .iter()
            .filter(|a| a.name == ATTRIBUTE_POD_FINGERPRINT)
            .count();
        assert_eq!(n, 1);
        assert_eq!(
            again.attribute(ATTRIBUTE_POD_FINGERPRINT),
            Some("pfp0v001ef46db3751d8e999"),
            "the empty pod set"
        );
        assert_eq!(again.spec.zones[0].resources[0].available.0, "6");
    }

    #[test]
    fn container_scope_aligns_containers_one_by_one() {
        let two = |name: &str| -> Pod {
            let mut v = pod(name).json().clone();
            let c = |n: &str, cpu: &str| {
                json!({"name": n, "resources": {
                    "requests": {"cpu": cpu, "memory": "1Gi"},
                    "limits": {"cpu": cpu, "memory": "1Gi"}}})
            };
            v["spec"]["containers"] = json!([c("x", "5"), c("y", "5")]);
            serde_json::from_value(v).expect("pod")
        };
        let (_, v) = admit_all(&nrt("single-numa-node", "container"), &[two("p")]);
        assert_eq!(cpuset(&v[0]).as_deref(), Some("2-6,8-12"));
        let (_, v) = admit_all(&nrt("single-numa-node", "pod"), &[two("p")]);
        assert!(
            matches!(v[0], NumaAdmission::Reject { .. }),
            "10 CPUs fit no zone"
        );
    }
}
