//! Every Koordinator label and annotation key berth reads or writes, in one table.
//!
//! The strings are the wire contract with Koordinator components (koord-scheduler,
//! koord-descheduler, koordlet) and with users' manifests, so they are spelled out in full
//! rather than built from the prefixes at run time; a test checks each against its prefix.
//! Keys with a JSON value have a codec in a sibling module (named in the doc).

/// Prefix of scheduler-owned keys.
pub const SCHEDULING_DOMAIN_PREFIX: &str = "scheduling.koordinator.sh";
/// Prefix of node-level keys.
pub const NODE_DOMAIN_PREFIX: &str = "node.koordinator.sh";
/// Prefix of pod-level keys.
pub const POD_DOMAIN_PREFIX: &str = "pod.koordinator.sh";
/// Prefix of keys koordlet writes about the kubelet's configuration.
pub const KUBELET_DOMAIN_PREFIX: &str = "kubelet.koordinator.sh";
/// Prefix of Koordinator-wide keys (`koordinator.sh/priority`).
pub const DOMAIN_PREFIX: &str = "koordinator.sh";

// ---- On user pods ------------------------------------------------------------------------

/// Annotation written at PreBind on a pod that allocated from a reservation:
/// `{"name":"<reservation>","uid":"<uid>"}` ([`super::ReservationAllocated`]). The only
/// persistent record of the pod→reservation binding; everything is rebuilt from it.
pub const ANNOTATION_RESERVATION_ALLOCATED: &str =
    "scheduling.koordinator.sh/reservation-allocated";

/// Annotation set by users: the pod must allocate from a reservation matching
/// [`super::ReservationAffinity`]. Presence alone (even `""`) makes reservations mandatory.
pub const ANNOTATION_RESERVATION_AFFINITY: &str = "scheduling.koordinator.sh/reservation-affinity";

/// Label `"true"`: the pod ignores reservations (may use every reservation's unallocated
/// resources on the node) and never becomes an owner.
pub const LABEL_RESERVATION_IGNORED: &str = "scheduling.koordinator.sh/reservation-ignored";

/// Annotation `{"resourceNames":["cpu"]}` ([`super::ExactMatchReservationSpec`]): for each
/// listed resource the pod request must equal the reservation's allocatable.
pub const ANNOTATION_EXACT_MATCH_RESERVATION: &str =
    "scheduling.koordinator.sh/exact-match-reservation";

/// Label `"true"`: never a victim of Reservation-plugin preemption.
pub const LABEL_DISABLE_PREEMPTIBLE: &str = "scheduling.koordinator.sh/disable-preemptible";

/// Label `"true"`: candidate for Cluster-mode pre-allocation (default key; configurable).
pub const LABEL_POD_IS_PRE_ALLOCATABLE: &str = "pod.koordinator.sh/is-pre-allocatable";

/// Annotation, int64 text: higher is pre-allocated first in Cluster mode (default key;
/// configurable; unparseable counts as 0).
pub const ANNOTATION_POD_PRE_ALLOCATABLE_PRIORITY: &str =
    "pod.koordinator.sh/pre-allocatable-priority";

/// Label on a Reservation, int32 text: the reserve pod's priority when the template has none.
pub const LABEL_KOORDINATOR_PRIORITY: &str = "koordinator.sh/priority";

/// Label: [`OPERATING_MODE_RESERVATION`] makes a real pod act as a reservation
/// ("operating pod").
pub const LABEL_POD_OPERATING_MODE: &str = "scheduling.koordinator.sh/operating-mode";
/// Value of [`LABEL_POD_OPERATING_MODE`]: the pod is a reservation.
pub const OPERATING_MODE_RESERVATION: &str = "Reservation";
/// Value of [`LABEL_POD_OPERATING_MODE`]: an ordinary pod (the default).
pub const OPERATING_MODE_RUNNABLE: &str = "Runnable";

/// Annotation on an operating pod: JSON array of `ReservationOwner`
/// ([`super::ReservationOwners`]).
pub const ANNOTATION_RESERVATION_OWNERS: &str = "scheduling.koordinator.sh/reservation-owners";

/// Annotation on an operating pod: JSON `ObjectReference` of the pod currently using it
/// ([`super::ReservationCurrentOwner`]).
pub const ANNOTATION_RESERVATION_CURRENT_OWNER: &str =
    "scheduling.koordinator.sh/reservation-current-owner";

// ---- On Reservation objects ----------------------------------------------------------------

/// Label, int64 text: the smallest non-zero order wins nomination before scoring and makes
/// its node preferred; `0` or unparseable is ignored, negatives are accepted.
pub const LABEL_RESERVATION_ORDER: &str = "scheduling.koordinator.sh/reservation-order";

/// Label `"true"`: the reservation must pre-allocate at least one running pod.
pub const LABEL_PRE_ALLOCATION_REQUIRED: &str = "scheduling.koordinator.sh/pre-allocation-required";

/// Annotation `{"resources":["cpu","memory"]}` ([`super::ReservationRestrictedOptions`]):
/// which resources a `Restricted` reservation restricts.
pub const ANNOTATION_RESERVATION_RESTRICTED_OPTIONS: &str =
    "scheduling.koordinator.sh/reservation-restricted-options";

/// Annotation `{"resources":{"cpu":"2"}}` ([`super::ReservationResizeAllocatable`]):
/// overlays `status.allocatable` at Bind.
pub const ANNOTATION_RESERVATION_RESIZE_ALLOCATABLE: &str =
    "scheduling.koordinator.sh/reservation-resize-allocatable";

/// Annotation ([`super::NodeReservation`]). On a Node (or its NodeResourceTopology):
/// resources reserved for non-Kubernetes processes, trimmed from allocatable. On a
/// Reservation: resources reserved *inside* the reservation, unusable by owners.
pub const ANNOTATION_NODE_RESERVATION: &str = "node.koordinator.sh/reservation";

/// Annotation written by DeviceShare at PreBind(Reservation): devices reserved.
pub const ANNOTATION_DEVICE_ALLOCATED: &str = "scheduling.koordinator.sh/device-allocated";

/// Annotation written by NodeNUMAResource at PreBind: the cpuset / NUMA resources allocated
/// to a pod or reserved by a reservation ([`super::ResourceStatus`]).
pub const ANNOTATION_RESOURCE_STATUS: &str = "scheduling.koordinator.sh/resource-status";

/// Label from the reservation-preemption proposal; not read by the Reservation plugin.
pub const LABEL_CAN_PREEMPT: &str = "scheduling.koordinator.sh/can-preempt";
/// Label from the reservation-preemption proposal; not read by the Reservation plugin.
pub const LABEL_SOFT_EVICTION: &str = "scheduling.koordinator.sh/soft-eviction";

/// Annotation on a pod or a reservation's template: JSON [`super::ResourceSpec`], how its
/// exclusive CPUs are bound (`FullPCPUs`, `SpreadByPCPUs`).
pub const ANNOTATION_RESOURCE_SPEC: &str = "scheduling.koordinator.sh/resource-spec";

/// Label on a pod: its Koordinator QoS class (`LSE`, `LSR`, `LS`, `BE`, `SYSTEM`); `LSE` and
/// `LSR` pods with an integer CPU request get exclusive CPUs.
pub const LABEL_POD_QOS: &str = "koordinator.sh/qosClass";

// ---- On nodes ------------------------------------------------------------------------------

/// Annotation on a NodeResourceTopology: JSON [`super::CpuTopology`], every logical CPU with
/// its core, socket and NUMA node (published by koordlet).
pub const ANNOTATION_NODE_CPU_TOPOLOGY: &str = "node.koordinator.sh/cpu-topology";

/// Annotation on a NodeResourceTopology: JSON [`super::KubeletCpuManagerPolicy`].
pub const ANNOTATION_KUBELET_CPU_MANAGER_POLICY: &str = "kubelet.koordinator.sh/cpu-manager-policy";

/// Annotation on a NodeResourceTopology: JSON [`super::CpuSharedPools`].
pub const ANNOTATION_NODE_CPU_SHARED_POOLS: &str = "node.koordinator.sh/cpu-shared-pools";

/// Label on a node: `FullPCPUsOnly` or `SpreadByPCPUs` imposes the CPU bind policy on every
/// pod bound there (`None` or absent: the pod's own).
pub const LABEL_NODE_CPU_BIND_POLICY: &str = "node.koordinator.sh/cpu-bind-policy";

/// Label on a node: its NUMA topology policy (`SingleNUMANode`, `Restricted`, `BestEffort`,
/// `None`), when the NodeResourceTopology does not say.
pub const LABEL_NODE_NUMA_TOPOLOGY_POLICY: &str = "node.koordinator.sh/numa-topology-policy";

/// Label: koordlet reserves NUMA-level allocatable; unrelated to the Reservation plugin.
pub const LABEL_NODE_ENABLE_NUMA_RESERVATION: &str = "node.koordinator.sh/enable-numa-reservation";

// ---- On the fake reserve pod built from a Reservation --------------------------------------

/// Annotation `"true"` marking a reserve pod. User pods carrying it are rejected by
/// Koordinator's pod webhook.
pub const ANNOTATION_RESERVE_POD: &str = "scheduling.koordinator.sh/reserve-pod";
/// Annotation: the reservation's name (the reserve pod's name is the reservation UID).
pub const ANNOTATION_RESERVATION_NAME: &str = "scheduling.koordinator.sh/reservation-name";
/// Annotation `"true"` when `spec.preAllocation` is set.
pub const ANNOTATION_IS_PRE_ALLOCATION: &str = "scheduling.koordinator.sh/is-pre-allocation";
/// Annotation: `template.spec.nodeName` (which is then cleared); Filter enforces it.
pub const ANNOTATION_RESERVATION_NODE: &str = "scheduling.koordinator.sh/reservation-node";
/// Name of the synthetic container that carries `status.allocatable` when it differs from
/// the template's requests.
pub const RESERVE_POD_FAKE_CONTAINER_NAME: &str = "__internal_fake_container__";

// ---- Dynamic Reservation Provisioning (proposal #1770, implemented by berth) ---------------

/// Annotation on a pod: JSON [`super::ReservationTemplate`]; the scheduler may create a
/// virtual reservation for it.
pub const ANNOTATION_RESERVATION_TEMPLATE: &str = "scheduling.koordinator.sh/reservation-template";
/// Annotation written at PreBind: JSON [`super::NewReservationRequirement`] asking a
/// provisioner to create the Reservation.
pub const ANNOTATION_NEW_RESERVATION_REQUIREMENT: &str =
    "scheduling.koordinator.sh/new-reservation-requirement";
/// Label on the created Reservation tying it to the scheduler's virtual reservation.
pub const LABEL_RESERVATION_ID: &str = "scheduling.koordinator.sh/reservation-id";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_has_a_koordinator_prefix() {
        let keys = [
            ANNOTATION_RESERVATION_ALLOCATED,
            ANNOTATION_RESERVATION_AFFINITY,
            LABEL_RESERVATION_IGNORED,
            ANNOTATION_EXACT_MATCH_RESERVATION,
            LABEL_DISABLE_PREEMPTIBLE,
            LABEL_POD_IS_PRE_ALLOCATABLE,
            ANNOTATION_POD_PRE_ALLOCATABLE_PRIORITY,
            LABEL_KOORDINATOR_PRIORITY,
            LABEL_POD_OPERATING_MODE,
            ANNOTATION_RESERVATION_OWNERS,
            ANNOTATION_RESERVATION_CURRENT_OWNER,
            LABEL_RESERVATION_ORDER,
            LABEL_PRE_ALLOCATION_REQUIRED,
            ANNOTATION_RESERVATION_RESTRICTED_OPTIONS,
            ANNOTATION_RESERVATION_RESIZE_ALLOCATABLE,
            ANNOTATION_NODE_RESERVATION,
            ANNOTATION_DEVICE_ALLOCATED,
            ANNOTATION_RESOURCE_STATUS,
            LABEL_CAN_PREEMPT,
            LABEL_SOFT_EVICTION,
            LABEL_NODE_ENABLE_NUMA_RESERVATION,
            ANNOTATION_RESOURCE_SPEC,
            LABEL_POD_QOS,
            ANNOTATION_NODE_CPU_TOPOLOGY,
            ANNOTATION_KUBELET_CPU_MANAGER_POLICY,
            ANNOTATION_NODE_CPU_SHARED_POOLS,
            LABEL_NODE_CPU_BIND_POLICY,
            LABEL_NODE_NUMA_TOPOLOGY_POLICY,
            ANNOTATION_RESERVE_POD,
            ANNOTATION_RESERVATION_NAME,
            ANNOTATION_IS_PRE_ALLOCATION,
            ANNOTATION_RESERVATION_NODE,
            ANNOTATION_RESERVATION_TEMPLATE,
            ANNOTATION_NEW_RESERVATION_REQUIREMENT,
            LABEL_RESERVATION_ID,
        ];
        let prefixes = [
            SCHEDULING_DOMAIN_PREFIX,
            NODE_DOMAIN_PREFIX,
            POD_DOMAIN_PREFIX,
            DOMAIN_PREFIX,
            KUBELET_DOMAIN_PREFIX,
        ];
        for key in keys {
            let (prefix, name) = key.split_once('/').expect("prefixed key");
            assert!(prefixes.contains(&prefix), "{key}");
            assert!(!name.is_empty() && !name.contains('/'), "{key}");
        }
        let mut sorted = keys.to_vec();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), keys.len(), "no key is listed twice");
    }
}
