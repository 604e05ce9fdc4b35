//! The StatefulSet controller (`pkg/controller/statefulset`): pods `<set>-<ordinal>` for
//! ordinals `0..replicas`, with the labels `statefulset.kubernetes.io/pod-name`,
//! `apps.kubernetes.io/pod-index` and `controller-revision-hash`, `hostname` set to the
//! pod's name and `subdomain` to `serviceName`.
//!
//! - `OrderedReady` (the default): ordinals are created one at a time, the next only once
//!   every lower one is Running and ready; a scale-down removes the highest ordinal first,
//!   one at a time, and only while every lower one is ready.
//! - `Parallel`: every missing pod is created at once, every surplus pod deleted at once.
//! - A Failed or Succeeded pod is deleted and created again under the same name, as the
//!   controller does.
//!
//! Not played: `volumeClaimTemplates` (no claims are created), `ControllerRevision`
//! objects, update strategies (a template change does not replace existing pods),
//! `minReadySeconds`, `ordinals.start`.

use std::sync::Arc;

use berth_api::k8s_openapi::api::apps::v1::{StatefulSet, StatefulSetStatus};
use berth_api::k8s_openapi::api::core::v1::Pod;
use berth_core::{Object, ObjectKey};

use super::{
    controller_ref, is_ready, names, nonzero, owned_pods, phase, pod_from_template, Action,
};
use crate::store::Store;

/// The label naming a StatefulSet pod.
pub const POD_NAME_LABEL: &str = "statefulset.kubernetes.io/pod-name";
/// The label holding a StatefulSet pod's ordinal.
pub const POD_INDEX_LABEL: &str = "apps.kubernetes.io/pod-index";
/// The label naming the revision a pod was made from.
pub const REVISION_LABEL: &str = "controller-revision-hash";

/// One reconcile of `set`.
pub fn reconcile(store: &Store, set: &Arc<StatefulSet>) -> Vec<Action> {
    let Some(spec) = set.spec.as_ref() else {
        return Vec::new();
    };
    let uid = set.metadata.uid.clone().unwrap_or_default();
    let namespace = set.metadata.namespace.as_deref().unwrap_or("default");
    let name = set.metadata.name.as_deref().unwrap_or("");
    let want = usize::try_from(spec.replicas.unwrap_or(1).max(0)).unwrap_or(0);
    let parallel = spec.pod_management_policy.as_deref() == Some("Parallel");
    let revision = format!("{name}-{}", names::template_hash(&spec.template, None));
    let owned = owned_pods(store, namespace, &uid);
    let by_ordinal = |i: usize| {
        let pod_name = format!("{name}-{i}");
        owned
            .iter()
            .copied()
            .find(|p| p.metadata.name.as_deref() == Some(pod_name.as_str()))
    };
    let mut actions = Vec::new();
    // Failed and Succeeded pods go first, to be created again.
    for p in &owned {
        if matches!(phase(p), "Failed" | "Succeeded") {
            let pod_name = p.metadata.name.as_deref().unwrap_or("");
            actions.push(Action::Delete(ObjectKey::pod(namespace, pod_name)));
        }
    }
    if actions.is_empty() {
        for i in 0..want {
            match by_ordinal(i) {
                None => {
                    let pod = new_pod(set, namespace, name, i, &revision);
                    actions.push(Action::Create(Object::Pod(Arc::new(pod))));
                    if !parallel {
                        break;
                    }
                }
                Some(p) if !parallel && !is_ready(p) => break,
                Some(_) => {}
            }
        }
        let mut condemned: Vec<(usize, &Arc<Pod>)> = owned
            .iter()
            .filter_map(|p| ordinal(name, p).filter(|i| *i >= want).map(|i| (i, *p)))
            .collect();
        condemned.sort_by_key(|c| std::cmp::Reverse(c.0));
        let lower_ready = (0..want).all(|i| by_ordinal(i).is_some_and(|p| is_ready(p)));
        let keep = super::keep_capacity::ttl(&set.metadata);
        for (_, p) in condemned {
            if !parallel && !lower_ready {
                break;
            }
            let pod_name = p.metadata.name.as_deref().unwrap_or("");
            actions.push(Action::Delete(ObjectKey::pod(namespace, pod_name)));
            let kept = keep.clone().and_then(|ttl| {
                super::keep_capacity::reservation(p, "StatefulSet", &set.metadata, ttl)
            });
            if let Some(r) = kept {
                actions.push(Action::Create(Object::Reservation(Arc::new(r))));
            }
            if !parallel {
                break;
            }
        }
    }
    let replicas = i32::try_from(owned.len()).unwrap_or(i32::MAX);
    let ready = i32::try_from(owned.iter().filter(|p| is_ready(p)).count()).unwrap_or(i32::MAX);
    let status = StatefulSetStatus {
        replicas,
        ready_replicas: nonzero(ready),
        available_replicas: nonzero(ready),
        current_replicas: nonzero(replicas),
        updated_replicas: nonzero(replicas),
        current_revision: Some(revision.clone()),
        update_revision: Some(revision),
        observed_generation: set.metadata.generation,
        collision_count: set.status.as_ref().and_then(|s| s.collision_count),
        ..StatefulSetStatus::default()
    };
    if set.status.as_ref() != Some(&status) {
        let mut updated = (**set).clone();
        updated.status = Some(status);
        actions.push(Action::Update(Object::StatefulSet(Arc::new(updated))));
    }
    actions
}

/// The ordinal of a pod named `<set>-<ordinal>`.
fn ordinal(set: &str, p: &Pod) -> Option<usize> {
    p.metadata
        .name
        .as_deref()?
        .strip_prefix(set)?
        .strip_prefix('-')?
        .parse()
        .ok()
}

/// `newVersionedStatefulSetPod`: the pod of ordinal `i`.
fn new_pod(set: &StatefulSet, namespace: &str, name: &str, i: usize, revision: &str) -> Pod {
    let spec = set.spec.clone().unwrap_or_default();
    let pod_name = format!("{name}-{i}");
    let mut pod = pod_from_template(
        &spec.template,
        namespace,
        pod_name.clone(),
        None,
        controller_ref("StatefulSet", &set.metadata),
        &[
            (POD_NAME_LABEL, pod_name.clone()),
            (POD_INDEX_LABEL, i.to_string()),
            (REVISION_LABEL, revision.to_string()),
        ],
    );
    if let Some(s) = pod.spec.as_mut() {
        s.hostname = Some(pod_name);
        if !spec.service_name.as_deref().unwrap_or("").is_empty() {
            s.subdomain = spec.service_name.clone();
        }
    }
    pod
}
