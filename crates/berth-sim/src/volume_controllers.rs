//! The simulated PersistentVolume controller and dynamic provisioners (kube-controller-manager's
//! `persistentvolume-binder` and an external provisioner per StorageClass), so that what
//! VolumeBinding writes has the effect it has in a cluster:
//!
//! - a volume without a phase becomes `Available` (or `Bound`, once its claim is bound);
//! - a claim not yet bound whose class binds at once (Immediate, or no class) is bound to
//!   the smallest matching volume (`FindMatchingVolume`), else provisioned when its class
//!   can provision;
//! - a volume whose `claimRef` names an existing claim (the scheduler's PreBind, a user's
//!   pre-binding) gets that claim bound to it: `spec.volumeName`, `pv.kubernetes.io/bind-completed`,
//!   `status.phase: Bound` on both;
//! - a `WaitForFirstConsumer` claim carrying `volume.kubernetes.io/selected-node` whose
//!   class's provisioner is not `kubernetes.io/no-provisioner` gets a volume `pvc-<claim uid>`
//!   created for it, pinned to that node's `kubernetes.io/hostname`.
//!
//! Each call computes one write (the next in key order); the driver applies it and asks
//! again until there is none, so every write goes through the API server's path and the
//! scheduler sees each change.

use std::collections::BTreeMap;
use std::sync::Arc;

use berth_api::k8s_openapi::api::core::v1::{
    NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, PersistentVolume,
    PersistentVolumeClaim, PersistentVolumeClaimStatus, PersistentVolumeSpec,
    PersistentVolumeStatus, VolumeNodeAffinity,
};
use berth_api::k8s_openapi::api::storage::v1::StorageClass;
use berth_api::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use berth_core::plugins::volumebinding::claims::{
    claim_class, claim_reference, claim_volume_name, find_matching_volume, is_delay_binding,
    selected_node, volume_bound_to_claim, ANN_BIND_COMPLETED, ANN_BOUND_BY_CONTROLLER,
    ANN_DYNAMICALLY_PROVISIONED, ANN_STORAGE_PROVISIONER, NOT_SUPPORTED_PROVISIONER,
};
use berth_core::{Kind, Object};

use crate::store::Store;

/// The hostname label a provisioned volume is pinned by.
const LABEL_HOSTNAME: &str = "kubernetes.io/hostname";

fn claims(store: &Store) -> impl Iterator<Item = &Arc<PersistentVolumeClaim>> + '_ {
    store
        .of_kind(Kind::PersistentVolumeClaim)
        .filter_map(|o| match o {
            Object::PersistentVolumeClaim(c) => Some(c),
            _ => None,
        })
}

fn volumes(store: &Store) -> Vec<Arc<PersistentVolume>> {
    store
        .of_kind(Kind::PersistentVolume)
        .filter_map(|o| match o {
            Object::PersistentVolume(v) => Some(v.clone()),
            _ => None,
        })
        .collect()
}

fn class(store: &Store, name: &str) -> Option<Arc<StorageClass>> {
    match store.get(&berth_core::ObjectKey::cluster(Kind::StorageClass, name)) {
        Some(Object::StorageClass(c)) => Some(c.clone()),
        _ => None,
    }
}

fn pv_phase(pv: &PersistentVolume) -> Option<&str> {
    pv.status.as_ref().and_then(|s| s.phase.as_deref())
}

fn annotate(meta: &mut ObjectMeta, key: &str, value: &str) {
    meta.annotations
        .get_or_insert_with(BTreeMap::new)
        .entry(key.to_string())
        .or_insert_with(|| value.to_string());
}

/// The claim named by a volume's claimRef, if it exists and the UID (when set) matches.
fn claim_of<'a>(store: &'a Store, pv: &PersistentVolume) -> Option<&'a Arc<PersistentVolumeClaim>> {
    let r = pv.spec.as_ref()?.claim_ref.as_ref()?;
    let key = berth_core::ObjectKey::new(
        Kind::PersistentVolumeClaim,
        r.namespace.as_deref().unwrap_or("default"),
        r.name.as_deref().unwrap_or(""),
    );
    match store.get(&key) {
        Some(Object::PersistentVolumeClaim(c)) if volume_bound_to_claim(pv, c) => Some(c),
        _ => None,
    }
}

/// A claim bound to `pv` (`bindClaimToVolume` + `updateClaimStatus`).
fn bound_claim(pvc: &PersistentVolumeClaim, pv: &PersistentVolume) -> PersistentVolumeClaim {
    let mut c = pvc.clone();
    let name = pv.metadata.name.clone().unwrap_or_default();
    let spec = c.spec.get_or_insert_with(Default::default);
    let by_controller = spec.volume_name.as_deref().unwrap_or("").is_empty();
    spec.volume_name = Some(name);
    annotate(&mut c.metadata, ANN_BIND_COMPLETED, "yes");
    if by_controller {
        annotate(&mut c.metadata, ANN_BOUND_BY_CONTROLLER, "yes");
    }
    let pv_spec = pv.spec.as_ref();
    let status = c
        .status
        .get_or_insert_with(PersistentVolumeClaimStatus::default);
    status.phase = Some("Bound".into());
    status.access_modes = pv_spec.and_then(|s| s.access_modes.clone());
    status.capacity = pv_spec.and_then(|s| s.capacity.clone());
    c
}

fn with_phase(pv: &PersistentVolume, phase: &str) -> PersistentVolume {
    let mut v = pv.clone();
    v.status
        .get_or_insert_with(PersistentVolumeStatus::default)
        .phase = Some(phase.into());
    v
}

/// The next write the PV controller or a provisioner makes, if any.
pub fn next_write(store: &Store) -> Option<Object> {
    let pvs = volumes(store);
    // Volumes: a claimRef to an existing claim binds that claim; phases follow.
    if let Some(w) = pvs.iter().find_map(|pv| volume_write(store, pv)) {
        return Some(w);
    }
    // Claims not yet bound.
    claims(store).find_map(|pvc| claim_write(store, &pvs, pvc))
}

/// The PV controller's next write for one volume: its claim bound to it, or its phase.
fn volume_write(store: &Store, pv: &PersistentVolume) -> Option<Object> {
    let claim = claim_of(store, pv);
    match claim {
        Some(c) => {
            let name = pv.metadata.name.as_deref().unwrap_or("");
            if claim_volume_name(c) != name
                || c.status.as_ref().and_then(|s| s.phase.as_deref()) != Some("Bound")
                || !c
                    .metadata
                    .annotations
                    .as_ref()
                    .is_some_and(|a| a.contains_key(ANN_BIND_COMPLETED))
            {
                return Some(Object::PersistentVolumeClaim(Arc::new(bound_claim(c, pv))));
            }
            if pv_phase(pv) != Some("Bound") {
                return Some(Object::PersistentVolume(Arc::new(with_phase(pv, "Bound"))));
            }
        }
        None => {
            let has_ref = pv.spec.as_ref().is_some_and(|s| s.claim_ref.is_some());
            let want = if has_ref
                && pv
                    .spec
                    .as_ref()
                    .and_then(|s| s.claim_ref.as_ref())
                    .and_then(|r| r.uid.as_deref())
                    .is_some_and(|u| !u.is_empty())
            {
                // Its claim is gone: the volume is released.
                "Released"
            } else {
                "Available"
            };
            if pv_phase(pv).is_none() || (pv_phase(pv) == Some("Bound")) {
                return Some(Object::PersistentVolume(Arc::new(with_phase(pv, want))));
            }
        }
    }
    None
}

/// The PV controller's (or a provisioner's) next write for one claim not yet bound.
fn claim_write(
    store: &Store,
    pvs: &[Arc<PersistentVolume>],
    pvc: &Arc<PersistentVolumeClaim>,
) -> Option<Object> {
    let wanted = claim_volume_name(pvc);
    if !wanted.is_empty() {
        // Pre-bound by its user to a volume no claim holds: the volume is bound to it
        // (the claim follows through the loop above).
        let key = berth_core::ObjectKey::cluster(Kind::PersistentVolume, wanted);
        if let Some(Object::PersistentVolume(pv)) = store.get(&key) {
            if pv.spec.as_ref().is_some_and(|s| s.claim_ref.is_none()) {
                let (pv, _) =
                    berth_core::plugins::volumebinding::claims::bind_volume_to_claim(pv, pvc);
                return Some(Object::PersistentVolume(pv));
            }
        }
        return None;
    }
    if pvc.metadata.deletion_timestamp.is_some() {
        return None;
    }
    let delay = is_delay_binding(pvc, |c| class(store, c)).unwrap_or(false);
    let matched = find_matching_volume(pvc, pvs, None, &[], delay)
        .ok()
        .flatten();
    if let Some(pv) = matched {
        if pv
            .spec
            .as_ref()
            .and_then(|s| s.claim_ref.as_ref())
            .is_none()
        {
            let (pv, _) =
                berth_core::plugins::volumebinding::claims::bind_volume_to_claim(&pv, pvc);
            return Some(Object::PersistentVolume(pv));
        }
        return Some(Object::PersistentVolumeClaim(Arc::new(bound_claim(
            pvc, &pv,
        ))));
    }
    if delay && selected_node(pvc).is_none() {
        return None;
    }
    let sc = class(store, claim_class(pvc))?;
    if sc.provisioner.is_empty() || sc.provisioner == NOT_SUPPORTED_PROVISIONER {
        return None;
    }
    let name = format!("pvc-{}", pvc.metadata.uid.as_deref().unwrap_or(""));
    if store
        .get(&berth_core::ObjectKey::cluster(
            Kind::PersistentVolume,
            &name,
        ))
        .is_some()
    {
        return None;
    }
    let has_ann = pvc
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(ANN_STORAGE_PROVISIONER));
    if !has_ann {
        // The PV controller hands the claim to the class's provisioner.
        let mut c = (**pvc).clone();
        annotate(&mut c.metadata, ANN_STORAGE_PROVISIONER, &sc.provisioner);
        return Some(Object::PersistentVolumeClaim(Arc::new(c)));
    }
    let node = selected_node(pvc).map(|n| {
        store
            .node(n)
            .and_then(|node| node.metadata.labels.as_ref())
            .and_then(|l| l.get(LABEL_HOSTNAME))
            .cloned()
            .unwrap_or_else(|| n.to_string())
    });
    Some(Object::PersistentVolume(Arc::new(provisioned(
        pvc, &sc, &name, node,
    ))))
}

/// The volume a provisioner creates for `pvc` (bound to it from the start, as
/// external-provisioner does), pinned to `hostname` when the claim named a node.
fn provisioned(
    pvc: &PersistentVolumeClaim,
    sc: &StorageClass,
    name: &str,
    hostname: Option<String>,
) -> PersistentVolume {
    let spec = pvc.spec.clone().unwrap_or_default();
    let capacity = spec
        .resources
        .as_ref()
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.get("storage"))
        .map(|q| BTreeMap::from([("storage".to_string(), q.clone())]));
    let node_affinity = hostname.map(|h| VolumeNodeAffinity {
        required: Some(NodeSelector {
            node_selector_terms: vec![NodeSelectorTerm {
                match_expressions: Some(vec![NodeSelectorRequirement {
                    key: LABEL_HOSTNAME.into(),
                    operator: "In".into(),
                    values: Some(vec![h]),
                }]),
                match_fields: None,
            }],
        }),
    });
    PersistentVolume {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            annotations: Some(BTreeMap::from([(
                ANN_DYNAMICALLY_PROVISIONED.to_string(),
                sc.provisioner.clone(),
            )])),
            ..Default::default()
        },
        spec: Some(PersistentVolumeSpec {
            access_modes: spec.access_modes.clone(),
            capacity,
            claim_ref: Some(claim_reference(pvc)),
            node_affinity,
            persistent_volume_reclaim_policy: sc.reclaim_policy.clone(),
            storage_class_name: sc.metadata.name.clone(),
            volume_mode: spec
                .volume_mode
                .clone()
                .or_else(|| Some("Filesystem".into())),
            ..Default::default()
        }),
        status: Some(PersistentVolumeStatus {
            phase: Some("Bound".into()),
            ..Default::default()
        }),
    }
}

/// Whether every claim `pod` names is bound (what the kubelet waits for before starting
/// it). A claim that does not exist is not bound.
pub fn pod_claims_bound(store: &Store, pod: &berth_api::k8s_openapi::api::core::v1::Pod) -> bool {
    let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
    let name = pod.metadata.name.as_deref().unwrap_or("");
    pod.spec
        .as_ref()
        .and_then(|s| s.volumes.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|v| berth_core::plugins::volumebinding::claims::volume_claim(name, v))
        .all(|(claim, _)| {
            let key = berth_core::ObjectKey::new(Kind::PersistentVolumeClaim, ns, &claim);
            matches!(store.get(&key), Some(Object::PersistentVolumeClaim(c))
                if !claim_volume_name(c).is_empty()
                    && c.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound"))
        })
}
