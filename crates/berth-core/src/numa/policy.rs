//! NodeResourceTopologyMatch Filter: can the kubelet's Topology Manager admit the pod on this
//! node's NUMA zones?
//!
//! Behaviour of the upstream plugin:
//! - BestEffort pods that request no non-native resource always pass.
//! - Only the `single-numa-node` policy is checked; `none`, `best-effort` and `restricted`
//!   pass (single-numa-node is the strictest policy; the plugin does not model the others).
//! - Container scope: every init container (regular and sidecar) is checked on its own
//!   against the zones (nothing accumulated); then app containers in spec order, each one's
//!   requests subtracted from the NUMA zone it lands on (the lowest fitting NUMA id, as the
//!   kubelet prefers) before the next one is checked.
//! - Pod scope: one check with the pod's effective request.
//! - Per request: zero amounts are ignored; a resource the node does not report at all fails;
//!   for each zone listing the resource the zone fits if it has enough available — except that
//!   cpu/memory/hugepages of non-Guaranteed pods fit any zone listing them (they are not
//!   pinned); a resource no zone lists is ignored if it is host-level (ephemeral-storage,
//!   storage, devices/extended resources) and fails otherwise (e.g. memory no zone reports).
//!
//! Allocation-free: zones are read in place; the container-scope subtraction uses an inline
//! scratch buffer (heap only beyond 32 zone×resource slots).

use smallvec::SmallVec;

use super::reject_kind::{RejectKind, Rejected};
use super::types::{
    is_always_allocatable, is_host_level, is_numa_affine, NumaZones, PodNumaRequest, QosClass,
    Resources, TmPolicy, TmScope, TopologyManagerConfig,
};

pub use super::reject_kind::{
    NumaReject, REASON_CANNOT_ALIGN_CONTAINER, REASON_CANNOT_ALIGN_INIT_CONTAINER,
    REASON_CANNOT_ALIGN_POD, REASON_INCONSISTENT_ACCOUNTING, REASON_INVALID_TOPOLOGY_DATA,
};

/// Node allocatable lookup: does the node report `resource` at all? `cpu`, `memory`, `pods`
/// and `ephemeral-storage` are always considered present (kube-scheduler's node info always
/// carries them); the function is asked only about the others.
pub trait NodeAllocatable {
    /// Whether the node's allocatable lists `resource`.
    fn has(&self, resource: &str) -> bool;
}

impl<F: Fn(&str) -> bool> NodeAllocatable for F {
    fn has(&self, resource: &str) -> bool {
        self(resource)
    }
}

/// A [`NodeAllocatable`] that reports every resource (when the node check is done elsewhere).
pub struct AnyResource;

impl NodeAllocatable for AnyResource {
    fn has(&self, _: &str) -> bool {
        true
    }
}

impl NodeAllocatable for Resources {
    fn has(&self, resource: &str) -> bool {
        self.contains(resource)
    }
}

/// Filters one node. See the module documentation for the rules.
pub fn filter(
    tm: &TopologyManagerConfig,
    zones: &NumaZones,
    pod: &PodNumaRequest,
    node: &impl NodeAllocatable,
) -> Result<(), NumaReject> {
    check(tm, zones, pod, node).map_err(|r| r.detail(pod))
}

/// [`filter`] without naming the container and resource: the per-node Filter path, which
/// needs only the fixed reason.
pub fn filter_kind(
    tm: &TopologyManagerConfig,
    zones: &NumaZones,
    pod: &PodNumaRequest,
    node: &impl NodeAllocatable,
) -> Result<(), RejectKind> {
    check(tm, zones, pod, node).map_err(Rejected::kind)
}

fn check(
    tm: &TopologyManagerConfig,
    zones: &NumaZones,
    pod: &PodNumaRequest,
    node: &impl NodeAllocatable,
) -> Result<(), Rejected> {
    if pod.qos() == QosClass::BestEffort && !pod.includes_non_native() {
        return Ok(());
    }
    if tm.policy != TmPolicy::SingleNumaNode {
        return Ok(());
    }
    match tm.scope {
        TmScope::Pod => {
            let view = Availability::new(zones);
            align(&view, pod.effective(), pod.qos(), node)
                .map(|_| ())
                .map_err(|at| Rejected::Pod { at })
        }
        TmScope::Container => filter_container_scope(zones, pod, node),
    }
}

fn filter_container_scope(
    zones: &NumaZones,
    pod: &PodNumaRequest,
    node: &impl NodeAllocatable,
) -> Result<(), Rejected> {
    let qos = pod.qos();
    let mut view = Availability::new(zones);
    for (index, ic) in pod.init_containers().iter().enumerate() {
        align(&view, &ic.requests, qos, node)
            .map_err(|at| Rejected::InitContainer { index, at })?;
    }
    let last = pod.containers().len().saturating_sub(1);
    for (index, c) in pod.containers().iter().enumerate() {
        let numa_id = align(&view, c, qos, node).map_err(|at| Rejected::Container { index, at })?;
        // What the last container takes is never read again, and with distinct NUMA ids
        // the taking cannot fail: the zone `align` chose fits each resource it takes
        // (a non-Guaranteed pod's cpu/memory/hugepages are not taken). With two zones
        // sharing an id, one of them may not fit, and the accounting error must show.
        if index == last && zones.ids_distinct() {
            break;
        }
        view.subtract(numa_id, c, qos)
            .map_err(|at| Rejected::Inconsistent { index, at, numa_id })?;
    }
    Ok(())
}

/// Zone availability with the amounts already taken by earlier containers.
pub(crate) struct Availability<'a> {
    zones: &'a NumaZones,
    /// `used[zone position * resources + resource index]`; empty until the first subtraction.
    used: SmallVec<[i64; 32]>,
}

impl<'a> Availability<'a> {
    pub(crate) fn new(zones: &'a NumaZones) -> Self {
        Self {
            zones,
            used: SmallVec::new(),
        }
    }

    /// Available amount of resource `idx` in the zone at position `pos`.
    fn get(&self, pos: usize, idx: usize) -> Option<i64> {
        let base = self.zones.available_at(pos, idx)?;
        let used = self
            .used
            .get(pos * self.zones.resource_names().len() + idx)
            .copied()
            .unwrap_or(0);
        Some(base.saturating_sub(used))
    }

    /// Takes `request` from every zone with NUMA id `numa_id` (non-Guaranteed pods' cpu,
    /// memory and hugepages are not pinned and not taken; resources the zone does not list
    /// are skipped). A resource that would go negative is answered by its place in
    /// `request`.
    fn subtract(&mut self, numa_id: u8, request: &Resources, qos: QosClass) -> Result<(), usize> {
        let nres = self.zones.resource_names().len();
        for pos in 0..self.zones.len() {
            if self.zones.ids().get(pos) != Some(&numa_id) {
                continue;
            }
            for (at, (name, amount)) in request.iter().enumerate() {
                if qos != QosClass::Guaranteed && is_numa_affine(name.as_str()) {
                    continue;
                }
                if amount == 0 {
                    continue;
                }
                let Some(idx) = self.zones.resource_index(name.as_str()) else {
                    continue;
                };
                let Some(avail) = self.get(pos, idx) else {
                    continue;
                };
                if avail.saturating_sub(amount) < 0 {
                    return Err(at);
                }
                if self.used.is_empty() {
                    self.used.resize(self.zones.flat_len(), 0);
                }
                let slot = pos * nres + idx;
                if let Some(u) = self.used.get_mut(slot) {
                    *u = u.saturating_add(amount);
                }
            }
        }
        Ok(())
    }
}

/// The NUMA id the kubelet would pick for `request` under single-numa-node, or the place
/// in `request` of the first resource that cannot be aligned.
fn align(
    view: &Availability<'_>,
    request: &Resources,
    qos: QosClass,
    node: &impl NodeAllocatable,
) -> Result<u8, usize> {
    let zones = view.zones;
    let mut bitmask: u64 = u64::MAX;
    for (at, (name, amount)) in request.iter().enumerate() {
        if amount == 0 {
            continue;
        }
        let n = name.as_str();
        if !is_always_allocatable(n) && !node.has(n) {
            return Err(at);
        }
        let mut has_numa_affinity = false;
        let mut resource_mask: u64 = 0;
        if let Some(idx) = zones.resource_index(n) {
            // A non-Guaranteed pod's cpu, memory and hugepages fit every zone listing them
            // (not pinned): decided once per resource, not per zone.
            let unpinned = qos != QosClass::Guaranteed && is_numa_affine(n);
            if view.used.is_empty() {
                // Nothing taken yet (the first container, or the pod): the zones' amounts
                // as they are, read down one column of the node's flat array.
                for (avail, &zone_id) in zones.column(idx).zip(zones.ids()) {
                    let Some(avail) = avail else { continue };
                    has_numa_affinity = true;
                    if unpinned || avail >= amount {
                        resource_mask |= 1u64 << zone_id;
                    }
                }
            } else {
                for (pos, &zone_id) in zones.ids().iter().enumerate() {
                    let Some(avail) = view.get(pos, idx) else {
                        continue;
                    };
                    has_numa_affinity = true;
                    if unpinned || avail >= amount {
                        resource_mask |= 1u64 << zone_id;
                    }
                }
            }
        }
        if !has_numa_affinity && is_host_level(n) {
            continue;
        }
        bitmask &= resource_mask;
        if bitmask == 0 {
            return Err(at);
        }
    }
    // Lowest NUMA id: the narrowest, lowest mask the kubelet prefers.
    Ok(bitmask.trailing_zeros() as u8)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::numa::types::InitContainerRequest;

    const G: QosClass = QosClass::Guaranteed;
    const B: QosClass = QosClass::Burstable;
    const BE: QosClass = QosClass::BestEffort;

    fn res(pairs: &[(&str, &str)]) -> Resources {
        Resources::parse(pairs.iter().copied()).expect("valid")
    }

    fn snn(scope: TmScope) -> TopologyManagerConfig {
        TopologyManagerConfig::new(TmPolicy::SingleNumaNode, scope)
    }

    /// Two NUMA zones: node-0 {cpu 2, memory 4Gi, nic 1}, node-1 {cpu 4, memory 8Gi, nic 0}.
    fn two_zones() -> NumaZones {
        NumaZones::new()
            .with_zone(
                0,
                &[("cpu", 2000), ("memory", 4 << 30), ("vendor/nic", 1)],
                &[(0, 10), (1, 21)],
            )
            .with_zone(
                1,
                &[("cpu", 4000), ("memory", 8 << 30), ("vendor/nic", 0)],
                &[(0, 21), (1, 10)],
            )
    }

    fn pod(qos: QosClass, containers: &[&[(&str, &str)]]) -> PodNumaRequest {
        PodNumaRequest::new(qos, [], containers.iter().map(|c| res(c)), Resources::new())
    }

    /// [`filter`], checking that [`filter_kind`] gives the same case.
    fn run(scope: TmScope, zones: &NumaZones, p: &PodNumaRequest) -> Result<(), NumaReject> {
        let named = filter(&snn(scope), zones, p, &AnyResource);
        let kind = filter_kind(&snn(scope), zones, p, &AnyResource);
        assert_eq!(kind, named.as_ref().map_err(RejectKind::from).copied());
        named
    }

    #[test]
    fn guaranteed_fits_a_single_zone() {
        let z = two_zones();
        for scope in [TmScope::Container, TmScope::Pod] {
            assert_eq!(
                run(scope, &z, &pod(G, &[&[("cpu", "3"), ("memory", "1Gi")]])),
                Ok(())
            );
            assert_eq!(
                run(scope, &z, &pod(G, &[&[("cpu", "4"), ("memory", "8Gi")]])),
                Ok(())
            );
        }
    }

    #[test]
    fn guaranteed_rejected_when_no_single_zone_fits() {
        let z = two_zones();
        // 5 CPUs: the node has 6 in total but no zone has 5.
        let p = pod(G, &[&[("cpu", "5"), ("memory", "1Gi")]]);
        assert_eq!(
            run(TmScope::Container, &z, &p),
            Err(NumaReject::Container {
                index: 0,
                resource: "cpu".into()
            })
        );
        assert_eq!(
            run(TmScope::Pod, &z, &p),
            Err(NumaReject::Pod {
                resource: "cpu".into()
            })
        );
        // cpu fits only node-0, memory only node-1 → the intersection is empty.
        let skewed = NumaZones::new()
            .with_zone(0, &[("cpu", 8000), ("memory", 1 << 30)], &[])
            .with_zone(1, &[("cpu", 1000), ("memory", 8 << 30)], &[]);
        let p = pod(G, &[&[("cpu", "3"), ("memory", "6Gi")]]);
        assert_eq!(
            run(TmScope::Pod, &skewed, &p),
            Err(NumaReject::Pod {
                resource: "memory".into()
            })
        );
        assert_eq!(
            run(TmScope::Container, &skewed, &p),
            Err(NumaReject::Container {
                index: 0,
                resource: "memory".into()
            })
        );
    }

    #[test]
    fn device_alignment_intersects_with_cpu() {
        let z = two_zones();
        // The NIC is only on node-0, which has 2 CPUs.
        assert_eq!(
            run(
                TmScope::Pod,
                &z,
                &pod(G, &[&[("cpu", "2"), ("vendor/nic", "1")]])
            ),
            Ok(())
        );
        // cpu=3 fits only node-1, the NIC only node-0: the intersection is empty at the NIC.
        assert_eq!(
            run(
                TmScope::Pod,
                &z,
                &pod(G, &[&[("cpu", "3"), ("vendor/nic", "1")]])
            ),
            Err(NumaReject::Pod {
                resource: "vendor/nic".into()
            })
        );
    }

    #[test]
    fn burstable_pods_are_checked_only_for_devices() {
        let z = two_zones();
        // Burstable cpu/memory fit any zone listing them, however large.
        assert_eq!(
            run(
                TmScope::Container,
                &z,
                &pod(B, &[&[("cpu", "64"), ("memory", "1Ti")]])
            ),
            Ok(())
        );
        assert_eq!(run(TmScope::Pod, &z, &pod(B, &[&[("cpu", "64")]])), Ok(()));
        // ...but devices are counted.
        assert_eq!(
            run(
                TmScope::Container,
                &z,
                &pod(B, &[&[("cpu", "1"), ("vendor/nic", "2")]])
            ),
            Err(NumaReject::Container {
                index: 0,
                resource: "vendor/nic".into()
            })
        );
        assert_eq!(
            run(
                TmScope::Container,
                &z,
                &pod(B, &[&[("cpu", "1"), ("vendor/nic", "1")]])
            ),
            Ok(())
        );
    }

    #[test]
    fn best_effort_passes_unless_it_requests_devices() {
        let z = two_zones();
        let empty = pod(BE, &[&[]]);
        assert_eq!(run(TmScope::Container, &z, &empty), Ok(()));
        let dev = pod(BE, &[&[("vendor/nic", "2")]]);
        assert_eq!(
            run(TmScope::Container, &z, &dev),
            Err(NumaReject::Container {
                index: 0,
                resource: "vendor/nic".into()
            })
        );
        assert_eq!(
            run(TmScope::Container, &z, &pod(BE, &[&[("vendor/nic", "1")]])),
            Ok(())
        );
    }

    #[test]
    fn other_policies_always_pass() {
        let z = two_zones();
        let p = pod(G, &[&[("cpu", "64")]]);
        for policy in [TmPolicy::None, TmPolicy::BestEffort, TmPolicy::Restricted] {
            for scope in [TmScope::Container, TmScope::Pod] {
                let tm = TopologyManagerConfig::new(policy, scope);
                assert_eq!(
                    filter(&tm, &z, &p, &AnyResource),
                    Ok(()),
                    "{policy:?} {scope:?}"
                );
            }
        }
    }

    #[test]
    fn container_scope_subtracts_each_app_container_from_its_zone() {
        let z = two_zones();
        // 3+1: first container → node-1 (only zone with 3), second → node-0 (lowest id).
        assert_eq!(
            run(
                TmScope::Container,
                &z,
                &pod(G, &[&[("cpu", "3")], &[("cpu", "1")]])
            ),
            Ok(())
        );
        // 3+2: node-1 left with 1 after the first, node-0 still has 2 → fits.
        assert_eq!(
            run(
                TmScope::Container,
                &z,
                &pod(G, &[&[("cpu", "3")], &[("cpu", "2")]])
            ),
            Ok(())
        );
        // 3+3: node-1 has 1 left, node-0 has 2 → the second container cannot align.
        assert_eq!(
            run(
                TmScope::Container,
                &z,
                &pod(G, &[&[("cpu", "3")], &[("cpu", "3")]])
            ),
            Err(NumaReject::Container {
                index: 1,
                resource: "cpu".into()
            })
        );
        // Pod scope with the same pod: 6 CPUs on one zone → rejected as a whole.
        assert_eq!(
            run(
                TmScope::Pod,
                &z,
                &pod(G, &[&[("cpu", "3")], &[("cpu", "3")]])
            ),
            Err(NumaReject::Pod {
                resource: "cpu".into()
            })
        );
        // Pod scope 1+1: 2 CPUs fit node-0.
        assert_eq!(
            run(
                TmScope::Pod,
                &z,
                &pod(G, &[&[("cpu", "1")], &[("cpu", "1")]])
            ),
            Ok(())
        );
        // 2+2+2 in container scope: node-0 (2), node-1 (2 of 4), node-1 (2 left) → fits.
        assert_eq!(
            run(
                TmScope::Container,
                &z,
                &pod(G, &[&[("cpu", "2")], &[("cpu", "2")], &[("cpu", "2")]])
            ),
            Ok(())
        );
    }

    #[test]
    fn burstable_container_scope_does_not_subtract_cpu() {
        let z = two_zones();
        // Non-Guaranteed cpu is never pinned: many containers still fit.
        let p = pod(
            B,
            &[
                &[("cpu", "4"), ("vendor/nic", "1")],
                &[("cpu", "4")],
                &[("cpu", "4")],
            ],
        );
        assert_eq!(run(TmScope::Container, &z, &p), Ok(()));
        // Devices are subtracted: two containers each wanting the single NIC.
        let p = pod(B, &[&[("vendor/nic", "1")], &[("vendor/nic", "1")]]);
        assert_eq!(
            run(TmScope::Container, &z, &p),
            Err(NumaReject::Container {
                index: 1,
                resource: "vendor/nic".into()
            })
        );
    }

    #[test]
    fn init_containers_are_checked_independently_without_accumulating() {
        let z = two_zones();
        let p = PodNumaRequest::new(
            G,
            [
                InitContainerRequest {
                    requests: res(&[("cpu", "4")]),
                    sidecar: false,
                },
                InitContainerRequest {
                    requests: res(&[("cpu", "4")]),
                    sidecar: false,
                },
            ],
            [res(&[("cpu", "4")])],
            Resources::new(),
        );
        assert_eq!(run(TmScope::Container, &z, &p), Ok(()));
        let p = PodNumaRequest::new(
            G,
            [InitContainerRequest {
                requests: res(&[("cpu", "5")]),
                sidecar: true,
            }],
            [res(&[("cpu", "1")])],
            Resources::new(),
        );
        assert_eq!(
            run(TmScope::Container, &z, &p),
            Err(NumaReject::InitContainer {
                index: 0,
                resource: "cpu".into()
            })
        );
    }

    #[test]
    fn pod_scope_uses_the_effective_request_with_init_max_and_overhead() {
        let z = two_zones();
        let p = PodNumaRequest::new(
            G,
            [InitContainerRequest {
                requests: res(&[("cpu", "4")]),
                sidecar: false,
            }],
            [res(&[("cpu", "1")]), res(&[("cpu", "1")])],
            Resources::new(),
        );
        assert_eq!(p.effective().get("cpu"), Some(4000));
        assert_eq!(run(TmScope::Pod, &z, &p), Ok(()));
        let with_overhead =
            PodNumaRequest::new(G, [], [res(&[("cpu", "4")])], res(&[("cpu", "100m")]));
        assert_eq!(
            run(TmScope::Pod, &z, &with_overhead),
            Err(NumaReject::Pod {
                resource: "cpu".into()
            })
        );
    }

    #[test]
    fn zero_requests_and_host_level_resources_are_ignored() {
        let z = two_zones();
        let p = pod(
            G,
            &[&[
                ("cpu", "1"),
                ("vendor/gpu", "0"),
                ("ephemeral-storage", "10Gi"),
                ("other.io/dev", "1"),
            ]],
        );
        assert_eq!(run(TmScope::Container, &z, &p), Ok(()));
    }

    #[test]
    fn resources_missing_from_the_node_fail() {
        let z = two_zones();
        let p = pod(G, &[&[("cpu", "1"), ("other.io/dev", "1")]]);
        let node_without = |r: &str| r != "other.io/dev";
        assert_eq!(
            filter(&snn(TmScope::Container), &z, &p, &node_without),
            Err(NumaReject::Container {
                index: 0,
                resource: "other.io/dev".into()
            })
        );
        // Base resources are always present whatever the lookup says.
        let nothing = |_: &str| false;
        assert_eq!(
            filter(
                &snn(TmScope::Container),
                &z,
                &pod(G, &[&[("cpu", "1")]]),
                &nothing
            ),
            Ok(())
        );
        // A resource list works as the lookup too.
        let alloc = res(&[("other.io/dev", "4")]);
        assert_eq!(filter(&snn(TmScope::Pod), &z, &p, &alloc), Ok(()));
    }

    #[test]
    fn native_numa_affine_resource_missing_from_every_zone_fails() {
        // Zones report cpu only; the pod asks for memory (even Burstable).
        let z = NumaZones::new().with_zone(0, &[("cpu", 4000)], &[]);
        assert_eq!(
            run(
                TmScope::Pod,
                &z,
                &pod(B, &[&[("cpu", "1"), ("memory", "1Gi")]])
            ),
            Err(NumaReject::Pod {
                resource: "memory".into()
            })
        );
        assert_eq!(
            run(TmScope::Pod, &z, &pod(G, &[&[("hugepages-1Gi", "1Gi")]])),
            Err(NumaReject::Pod {
                resource: "hugepages-1Gi".into()
            })
        );
    }

    #[test]
    fn non_numa_zone_ids_and_sparse_ids() {
        // Only node-3 and node-7; the lowest fitting id wins and bitmask ids are NUMA ids.
        let z = NumaZones::new()
            .with_zone(7, &[("cpu", 8000)], &[])
            .with_zone(3, &[("cpu", 2000)], &[]);
        // 2 → node-3 (lowest id, although node-7 is listed first), 7 → node-7, 2 → nowhere.
        assert_eq!(
            run(
                TmScope::Container,
                &z,
                &pod(G, &[&[("cpu", "2")], &[("cpu", "7")]])
            ),
            Ok(())
        );
        assert_eq!(
            run(
                TmScope::Container,
                &z,
                &pod(G, &[&[("cpu", "2")], &[("cpu", "7")], &[("cpu", "2")]])
            ),
            Err(NumaReject::Container {
                index: 2,
                resource: "cpu".into()
            })
        );
    }

    #[test]
    fn worker_node_samples_from_the_reference() {
        // worker-node-A: node-0 {cpu 3, devA 1, devB 2}, node-1 {cpu 3, devA 2, devB 1}.
        let a = NumaZones::new()
            .with_zone(
                0,
                &[
                    ("cpu", 3000),
                    ("example.com/deviceA", 1),
                    ("example.com/deviceB", 2),
                ],
                &[],
            )
            .with_zone(
                1,
                &[
                    ("cpu", 3000),
                    ("example.com/deviceA", 2),
                    ("example.com/deviceB", 1),
                ],
                &[],
            );
        // worker-node-B: node-0 {cpu 3, devA 3}, node-1 {cpu 3, devB 3}.
        let b = NumaZones::new()
            .with_zone(0, &[("cpu", 3000), ("example.com/deviceA", 3)], &[])
            .with_zone(1, &[("cpu", 3000), ("example.com/deviceB", 3)], &[]);
        let p = pod(
            G,
            &[&[
                ("cpu", "1"),
                ("memory", "100Mi"),
                ("example.com/deviceA", "1"),
                ("example.com/deviceB", "1"),
            ]],
        );
        // memory is listed by no zone and is not host-level → both nodes reject it; drop
        // memory to exercise the device logic as in the upstream example.
        assert!(run(TmScope::Container, &a, &p).is_err());
        let p = pod(
            G,
            &[&[
                ("cpu", "1"),
                ("example.com/deviceA", "1"),
                ("example.com/deviceB", "1"),
            ]],
        );
        assert_eq!(run(TmScope::Container, &a, &p), Ok(()));
        assert_eq!(
            run(TmScope::Container, &b, &p),
            Err(NumaReject::Container {
                index: 0,
                resource: "example.com/deviceB".into()
            })
        );
    }

    /// Two zones sharing a NUMA id: taking a container from both can go negative, an
    /// internal error naming the container's resource, the last container included (its
    /// taking is left out only when the ids are distinct).
    #[test]
    fn a_shared_numa_id_can_make_the_accounting_inconsistent() {
        let z = NumaZones::new()
            .with_zone(0, &[("cpu", 4000), ("memory", 8 << 30)], &[])
            .with_zone(0, &[("cpu", 1000), ("memory", 8 << 30)], &[])
            .with_zone(1, &[("cpu", 8000), ("memory", 8 << 30)], &[]);
        assert!(!z.ids_distinct());
        let inconsistent = Err(NumaReject::InconsistentAccounting {
            resource: "cpu".into(),
            numa_id: 0,
        });
        let two = pod(G, &[&[("memory", "1Gi"), ("cpu", "2")], &[("cpu", "1")]]);
        assert_eq!(run(TmScope::Container, &z, &two), inconsistent);
        let one = pod(G, &[&[("cpu", "2")]]);
        assert_eq!(run(TmScope::Container, &z, &one), inconsistent);
        assert!(run(TmScope::Container, &z, &one)
            .err()
            .is_some_and(|r| r.is_internal_error()));
        // With distinct ids the same pods fit.
        let distinct = NumaZones::new()
            .with_zone(0, &[("cpu", 4000), ("memory", 8 << 30)], &[])
            .with_zone(1, &[("cpu", 1000), ("memory", 8 << 30)], &[]);
        assert!(distinct.ids_distinct());
        assert_eq!(run(TmScope::Container, &distinct, &two), Ok(()));
        assert_eq!(run(TmScope::Container, &distinct, &one), Ok(()));
    }

    #[test]
    fn reject_metadata() {
        let r = NumaReject::Pod {
            resource: "cpu".into(),
        };
        assert_eq!(r.resource().map(|r| r.as_str()), Some("cpu"));
        assert!(!r.is_internal_error());
        assert!(r.to_string().contains("cannot align pod"));
        assert_eq!(NumaReject::InvalidTopologyData.resource(), None);
        assert_eq!(
            NumaReject::InvalidTopologyData.to_string(),
            "invalid node topology data"
        );
    }
}
