//! What kube-scheduler's volume binder and the PV controller read of claims, volumes and
//! classes (`k8s.io/component-helpers/storage/volume`): classes, sizes, binding state,
//! node affinity, topology, and `FindMatchingVolume`, which the simulator's PV controller
//! uses too.

use std::sync::Arc;

use berth_api::k8s_openapi::api::core::v1::{
    ObjectReference, PersistentVolume, PersistentVolumeClaim, TopologySelectorTerm, Volume,
};
use berth_api::k8s_openapi::api::storage::v1::StorageClass;
use berth_api::quantity::ParsedQuantity;

use crate::cache::Cluster;
use crate::framework::events::ClusterEvent;
use crate::model::pod::PodInfo;
use crate::model::selector::{Labels, NodeSelectorMatcher};
use crate::object::Kind;

/// `pv.kubernetes.io/bind-completed`: the PV controller finished binding the claim.
pub const ANN_BIND_COMPLETED: &str = "pv.kubernetes.io/bind-completed";
/// `pv.kubernetes.io/bound-by-controller`: the binding was made by a controller (or the
/// scheduler), not pre-bound by the user.
pub const ANN_BOUND_BY_CONTROLLER: &str = "pv.kubernetes.io/bound-by-controller";
/// `volume.kubernetes.io/selected-node`: the node the scheduler chose for a claim to be
/// provisioned for.
pub const ANN_SELECTED_NODE: &str = "volume.kubernetes.io/selected-node";
/// `volume.kubernetes.io/storage-provisioner`: the provisioner the PV controller asks.
pub const ANN_STORAGE_PROVISIONER: &str = "volume.kubernetes.io/storage-provisioner";
/// `pv.kubernetes.io/provisioned-by`: the provisioner that created a PV.
pub const ANN_DYNAMICALLY_PROVISIONED: &str = "pv.kubernetes.io/provisioned-by";
/// The beta storage-class annotation, read before `storageClassName`.
pub const BETA_STORAGE_CLASS_ANNOTATION: &str = "volume.beta.kubernetes.io/storage-class";
/// A class with this provisioner cannot provision.
pub const NOT_SUPPORTED_PROVISIONER: &str = "kubernetes.io/no-provisioner";
/// `WaitForFirstConsumer`.
pub const WAIT_FOR_FIRST_CONSUMER: &str = "WaitForFirstConsumer";

fn annotation<'a>(
    meta: &'a berth_api::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    key: &str,
) -> Option<&'a str> {
    meta.annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .map(String::as_str)
}

/// `GetPersistentVolumeClaimClass`: the beta annotation, else `storageClassName`, else "".
pub fn claim_class(pvc: &PersistentVolumeClaim) -> &str {
    if let Some(c) = annotation(&pvc.metadata, BETA_STORAGE_CLASS_ANNOTATION) {
        return c;
    }
    pvc.spec
        .as_ref()
        .and_then(|s| s.storage_class_name.as_deref())
        .unwrap_or("")
}

/// `GetPersistentVolumeClass`.
pub fn pv_class(pv: &PersistentVolume) -> &str {
    if let Some(c) = annotation(&pv.metadata, BETA_STORAGE_CLASS_ANNOTATION) {
        return c;
    }
    pv.spec
        .as_ref()
        .and_then(|s| s.storage_class_name.as_deref())
        .unwrap_or("")
}

/// A quantity in whole units (`Quantity.Value()`); `None` when unparsable.
pub fn quantity_value(
    q: &berth_api::k8s_openapi::apimachinery::pkg::api::resource::Quantity,
) -> Option<i64> {
    ParsedQuantity::parse(&q.0).ok().map(|p| p.value())
}

/// The claim's `resources.requests.storage`, bytes (`None`: not requested).
pub fn claim_request(pvc: &PersistentVolumeClaim) -> Option<i64> {
    pvc.spec
        .as_ref()?
        .resources
        .as_ref()?
        .requests
        .as_ref()?
        .get("storage")
        .map(|q| quantity_value(q).unwrap_or(0))
}

/// The volume's `capacity.storage`, bytes (0 when absent or unreadable).
pub fn pv_capacity(pv: &PersistentVolume) -> i64 {
    pv.spec
        .as_ref()
        .and_then(|s| s.capacity.as_ref())
        .and_then(|c| c.get("storage"))
        .and_then(quantity_value)
        .unwrap_or(0)
}

/// The claim's `spec.volumeName`, "" when unset.
pub fn claim_volume_name(pvc: &PersistentVolumeClaim) -> &str {
    pvc.spec
        .as_ref()
        .and_then(|s| s.volume_name.as_deref())
        .unwrap_or("")
}

/// `isPVCFullyBound`: a volume name and the PV controller's bind-completed annotation.
pub fn fully_bound(pvc: &PersistentVolumeClaim) -> bool {
    !claim_volume_name(pvc).is_empty() && annotation(&pvc.metadata, ANN_BIND_COMPLETED).is_some()
}

/// The node a claim was selected for, if any.
pub fn selected_node(pvc: &PersistentVolumeClaim) -> Option<&str> {
    annotation(&pvc.metadata, ANN_SELECTED_NODE)
}

/// A class's binding mode: `Ok(true)` for WaitForFirstConsumer, an error when unset (the
/// API server defaults it, so only a hand-made object lacks it).
pub fn class_delays_binding(class: &StorageClass) -> Result<bool, String> {
    match class.volume_binding_mode.as_deref() {
        None => Err(format!(
            "VolumeBindingMode not set for StorageClass {:?}",
            class.metadata.name.as_deref().unwrap_or("")
        )),
        Some(m) => Ok(m == WAIT_FOR_FIRST_CONSUMER),
    }
}

/// `IsDelayBindingMode`: no class or an unknown class binds at once.
pub fn is_delay_binding(
    pvc: &PersistentVolumeClaim,
    class: impl FnOnce(&str) -> Option<Arc<StorageClass>>,
) -> Result<bool, String> {
    let name = claim_class(pvc);
    if name.is_empty() {
        return Ok(false);
    }
    match class(name) {
        None => Ok(false),
        Some(c) => class_delays_binding(&c),
    }
}

/// `CheckNodeAffinity`: whether the volume's required node affinity admits a node with
/// `labels` (matched without a name, as upstream builds the node). An unreadable selector
/// admits nothing.
pub fn node_affinity_matches(pv: &PersistentVolume, labels: &Labels) -> bool {
    let Some(required) = pv
        .spec
        .as_ref()
        .and_then(|s| s.node_affinity.as_ref())
        .and_then(|a| a.required.as_ref())
    else {
        return true;
    };
    NodeSelectorMatcher::new(required).is_ok_and(|m| m.matches("", labels))
}

/// `MatchTopologySelectorTerms`: no terms admit every node; otherwise some term whose
/// every expression's key is on the node with one of its values.
pub fn topology_matches(terms: Option<&[TopologySelectorTerm]>, labels: &Labels) -> bool {
    let Some(terms) = terms.filter(|t| !t.is_empty()) else {
        return true;
    };
    terms.iter().any(|t| {
        t.match_label_expressions.iter().flatten().all(|e| {
            labels
                .get(&e.key)
                .is_some_and(|v| e.values.iter().any(|x| x == v))
        })
    })
}

/// `IsVolumeBoundToClaim`: the volume's claimRef names the claim (and its UID, when set).
pub fn volume_bound_to_claim(pv: &PersistentVolume, pvc: &PersistentVolumeClaim) -> bool {
    let Some(r) = pv.spec.as_ref().and_then(|s| s.claim_ref.as_ref()) else {
        return false;
    };
    if r.name != pvc.metadata.name || r.namespace != pvc.metadata.namespace {
        return false;
    }
    match r.uid.as_deref().filter(|u| !u.is_empty()) {
        Some(uid) => pvc.metadata.uid.as_deref() == Some(uid),
        None => true,
    }
}

/// The reference a volume bound to `pvc` carries (`reference.GetReference`).
pub fn claim_reference(pvc: &PersistentVolumeClaim) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("PersistentVolumeClaim".into()),
        name: pvc.metadata.name.clone(),
        namespace: pvc.metadata.namespace.clone(),
        uid: pvc.metadata.uid.clone(),
        resource_version: pvc.metadata.resource_version.clone(),
        field_path: None,
    }
}

/// `GetBindVolumeToClaim`: the volume bound to the claim, and whether that changed it.
pub fn bind_volume_to_claim(
    pv: &Arc<PersistentVolume>,
    pvc: &PersistentVolumeClaim,
) -> (Arc<PersistentVolume>, bool) {
    let by_controller = !volume_bound_to_claim(pv, pvc);
    let mut out = pv.clone();
    let mut dirty = false;
    let same = pv
        .spec
        .as_ref()
        .and_then(|s| s.claim_ref.as_ref())
        .is_some_and(|r| {
            r.name == pvc.metadata.name
                && r.namespace == pvc.metadata.namespace
                && r.uid == pvc.metadata.uid
        });
    if !same {
        Arc::make_mut(&mut out)
            .spec
            .get_or_insert_with(Default::default)
            .claim_ref = Some(claim_reference(pvc));
        dirty = true;
    }
    let has = annotation(&out.metadata, ANN_BOUND_BY_CONTROLLER).is_some();
    if by_controller && !has {
        Arc::make_mut(&mut out)
            .metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(ANN_BOUND_BY_CONTROLLER.into(), "yes".into());
        dirty = true;
    }
    (out, dirty)
}

fn volume_mode_mismatch(pvc: &PersistentVolumeClaim, pv: &PersistentVolume) -> bool {
    let want = pvc
        .spec
        .as_ref()
        .and_then(|s| s.volume_mode.as_deref())
        .unwrap_or("Filesystem");
    let have = pv
        .spec
        .as_ref()
        .and_then(|s| s.volume_mode.as_deref())
        .unwrap_or("Filesystem");
    want != have
}

/// `CheckAccessModes`: the volume offers every mode the claim asks for.
pub fn access_modes_match(pvc: &PersistentVolumeClaim, pv: &PersistentVolume) -> bool {
    let have = pv
        .spec
        .as_ref()
        .and_then(|s| s.access_modes.as_deref())
        .unwrap_or(&[]);
    pvc.spec
        .as_ref()
        .and_then(|s| s.access_modes.as_deref())
        .unwrap_or(&[])
        .iter()
        .all(|m| have.contains(m))
}

fn pv_phase(pv: &PersistentVolume) -> &str {
    pv.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

/// `FindMatchingVolume` (VolumeAttributesClass on, as in 1.35): the volume pre-bound to the
/// claim, else the smallest Available volume of the claim's class that is big enough, has
/// the claim's volume mode, attributes class and access modes (scheduler path only), matches
/// its selector and, with `node`, admits that node. `excluded` are names already chosen for
/// the pod's other claims. Among equal sizes the first in `volumes` wins (callers sort by
/// name, so the choice is deterministic).
pub fn find_matching_volume<'a>(
    pvc: &PersistentVolumeClaim,
    volumes: impl IntoIterator<Item = &'a Arc<PersistentVolume>>,
    node: Option<&Labels>,
    excluded: &[&str],
    delay_binding: bool,
) -> Result<Option<Arc<PersistentVolume>>, String> {
    let requested = claim_request(pvc).unwrap_or(0);
    let class = claim_class(pvc);
    let selector = match pvc.spec.as_ref().and_then(|s| s.selector.as_ref()) {
        Some(s) => Some(
            crate::model::selector::Selector::from_label_selector(s).map_err(|e| {
                format!(
                    "error creating internal label selector for claim: {}/{}: {e}",
                    pvc.metadata.namespace.as_deref().unwrap_or(""),
                    pvc.metadata.name.as_deref().unwrap_or("")
                )
            })?,
        ),
        None => None,
    };
    let claim_vac = pvc
        .spec
        .as_ref()
        .and_then(|s| s.volume_attributes_class_name.as_deref())
        .unwrap_or("");
    let empty = Labels::new();
    let mut smallest: Option<(&Arc<PersistentVolume>, i64)> = None;
    for pv in volumes {
        let name = pv.metadata.name.as_deref().unwrap_or("");
        if excluded.contains(&name) {
            continue;
        }
        let claim_ref = pv.spec.as_ref().and_then(|s| s.claim_ref.as_ref());
        if claim_ref.is_some() && !volume_bound_to_claim(pv, pvc) {
            continue;
        }
        let size = pv_capacity(pv);
        if size < requested || volume_mode_mismatch(pvc, pv) {
            continue;
        }
        let vac = pv
            .spec
            .as_ref()
            .and_then(|s| s.volume_attributes_class_name.as_deref())
            .unwrap_or("");
        if vac != claim_vac || pv.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let affinity_ok = node.is_none_or(|l| node_affinity_matches(pv, l));
        if volume_bound_to_claim(pv, pvc) {
            return Ok(affinity_ok.then(|| pv.clone()));
        }
        if node.is_none() && delay_binding {
            continue;
        }
        if pv_phase(pv) != "Available" {
            continue;
        }
        let labels = pv.metadata.labels.as_ref().unwrap_or(&empty);
        if selector.as_ref().is_some_and(|s| !s.matches(labels)) {
            continue;
        }
        if pv_class(pv) != class || !affinity_ok {
            continue;
        }
        if node.is_some() && !access_modes_match(pvc, pv) {
            continue;
        }
        if smallest.is_none_or(|(_, s)| s > size) {
            smallest = Some((pv, size));
        }
    }
    Ok(smallest.map(|(pv, _)| pv.clone()))
}

/// The claim a pod volume names: `persistentVolumeClaim.claimName`, or for a generic
/// ephemeral volume `<pod>-<volume>`; `None` for other volumes. The flag says ephemeral.
pub fn volume_claim(pod_name: &str, v: &Volume) -> Option<(String, bool)> {
    if let Some(c) = &v.persistent_volume_claim {
        return Some((c.claim_name.clone(), false));
    }
    v.ephemeral
        .as_ref()
        .map(|_| (format!("{pod_name}-{}", v.name), true))
}

/// `ephemeral.VolumeIsForPod`: the claim of an ephemeral volume must be controlled by the
/// pod.
pub fn ephemeral_for_pod(
    pod: &berth_api::k8s_openapi::api::core::v1::Pod,
    pvc: &PersistentVolumeClaim,
) -> Result<(), String> {
    let uid = pod.metadata.uid.as_deref().unwrap_or("");
    let owned = pvc
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|r| r.controller == Some(true) && r.uid == uid);
    if owned {
        return Ok(());
    }
    Err(format!(
        "PVC {}/{} was not created for pod {}/{} (pod is not owner)",
        pvc.metadata.namespace.as_deref().unwrap_or(""),
        pvc.metadata.name.as_deref().unwrap_or(""),
        pod.metadata.namespace.as_deref().unwrap_or(""),
        pod.metadata.name.as_deref().unwrap_or("")
    ))
}

/// Whether the claim a [`kind::PVC`](crate::framework::events::kind::PVC) event names is
/// one `pod` uses (a generic ephemeral volume's too, when `ephemeral`); an event naming no
/// claim may concern any pod.
pub fn uses_claim(event: &ClusterEvent, pod: &PodInfo, ephemeral: bool) -> bool {
    let Some(obj) = &event.object else {
        return true;
    };
    if obj.kind != Kind::PersistentVolumeClaim {
        return true;
    }
    obj.namespace == pod.key.namespace
        && pod.spec().volumes.iter().flatten().any(|v| {
            volume_claim(&pod.key.name, v)
                .is_some_and(|(name, eph)| (!eph || ephemeral) && *name == *obj.name)
        })
}

/// VolumeBinding's hint for claim events: the pod uses the claim (ephemeral ones too).
pub fn uses_changed_claim(_cx: &Cluster, event: &ClusterEvent, pod: &PodInfo) -> bool {
    uses_claim(event, pod, true)
}

/// VolumeBinding's hint for CSIDriver events (upstream's
/// `isSchedulableAfterCSIDriverChange`): the pod has an inline volume of that driver.
pub fn uses_changed_driver(_cx: &Cluster, event: &ClusterEvent, pod: &PodInfo) -> bool {
    let Some(obj) = &event.object else {
        return true;
    };
    if obj.kind != Kind::CsiDriver {
        return true;
    }
    pod.spec()
        .volumes
        .iter()
        .flatten()
        .any(|v| v.csi.as_ref().is_some_and(|c| *c.driver == *obj.name))
}
