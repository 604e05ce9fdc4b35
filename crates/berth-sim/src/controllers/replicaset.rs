//! The ReplicaSet controller (`pkg/controller/replicaset`): keeps `spec.replicas` active pods
//! of the template, named `<replicaset>-<5 chars>`, and writes the counts into `status`.
//!
//! - Active pods are those not Succeeded, not Failed and not being deleted
//!   (`controller.FilterActivePods`). A Failed pod (a kubelet rejection, say) is not
//!   counted, so a replacement is created, and the failed pod is left where it is, as the
//!   controller leaves it (the pod garbage collector removes terminated pods only past its
//!   threshold).
//! - Too few: the missing pods are created. Too many: the surplus is deleted in the order
//!   of `controller.ActivePodsWithRanks` ([`deletion_order`]).
//! - A pod deleted by anyone (a Scenario step, preemption, an eviction) is replaced.
//! - Opted in with [`super::keep_capacity::KEEP_AFTER_SCALE_DOWN`], a pod deleted on
//!   scale-down leaves a Reservation holding its room (see [`super::keep_capacity`]).

use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::sync::Arc;

use berth_api::k8s_openapi::api::apps::v1::{ReplicaSet, ReplicaSetStatus};
use berth_api::k8s_openapi::api::core::v1::Pod;
use berth_core::{Object, ObjectKey};

use super::{
    controller_ref, is_active, is_ready, node_of, nonzero, owned_pods, phase, pod_from_template,
    Action, Controllers, PodCounts,
};
use crate::store::Store;

/// The annotation that orders pods for deletion on scale-down (lower cost first).
pub const POD_DELETION_COST: &str = "controller.kubernetes.io/pod-deletion-cost";

/// One reconcile of `rs`.
pub fn reconcile(ctl: &mut Controllers, store: &Store, rs: &Arc<ReplicaSet>) -> Vec<Action> {
    let uid = rs.metadata.uid.clone().unwrap_or_default();
    let namespace = rs.metadata.namespace.as_deref().unwrap_or("default");
    let name = rs.metadata.name.as_deref().unwrap_or("");
    let Some(spec) = rs.spec.as_ref() else {
        return Vec::new();
    };
    let want = spec.replicas.unwrap_or(1).max(0) as usize;
    let pods = owned_pods(store, namespace, &uid);
    let active: Vec<&Arc<Pod>> = pods.iter().copied().filter(|p| is_active(p)).collect();
    let mut actions = Vec::new();
    if active.len() < want {
        let Some(template) = spec.template.as_ref() else {
            return actions;
        };
        for _ in active.len()..want {
            let prefix = format!("{name}-");
            let pod_name = ctl.generate_name(store, &uid, &prefix, namespace);
            let pod = pod_from_template(
                template,
                namespace,
                pod_name,
                Some(prefix),
                controller_ref("ReplicaSet", &rs.metadata),
                &[],
            );
            actions.push(Action::Create(Object::Pod(Arc::new(pod))));
        }
    } else if active.len() > want {
        let mut ranked = active.clone();
        let colocated = colocated_counts(&active);
        ranked.sort_by(|a, b| deletion_order(a, b, &colocated));
        let keep = super::keep_capacity::opt_in(store, rs);
        for p in ranked.into_iter().take(active.len() - want) {
            let pod_name = p.metadata.name.as_deref().unwrap_or("");
            actions.push(Action::Delete(ObjectKey::pod(namespace, pod_name)));
            if let Some((kind, meta, ttl)) = &keep {
                let kept = super::keep_capacity::reservation(p, kind, meta, ttl.clone());
                if let Some(r) = kept {
                    actions.push(Action::Create(Object::Reservation(Arc::new(r))));
                }
            }
        }
    }
    let counts = PodCounts::of(active.iter().copied());
    let status = ReplicaSetStatus {
        replicas: counts.replicas,
        fully_labeled_replicas: nonzero(fully_labeled(rs, &active)),
        ready_replicas: nonzero(counts.ready),
        available_replicas: nonzero(counts.ready),
        observed_generation: rs.metadata.generation,
        ..ReplicaSetStatus::default()
    };
    if rs.status.as_ref() != Some(&status) {
        let mut updated = (**rs).clone();
        updated.status = Some(status);
        actions.push(Action::Update(Object::ReplicaSet(Arc::new(updated))));
    }
    actions
}

/// Pods whose labels hold every label of the template (`fullyLabeledReplicas`).
fn fully_labeled(rs: &ReplicaSet, active: &[&Arc<Pod>]) -> i32 {
    let want = rs
        .spec
        .as_ref()
        .and_then(|s| s.template.as_ref())
        .and_then(|t| t.metadata.as_ref())
        .and_then(|m| m.labels.as_ref());
    let n = active
        .iter()
        .filter(|p| {
            want.is_none_or(|w| {
                let have = p.metadata.labels.as_ref();
                w.iter()
                    .all(|(k, v)| have.and_then(|h| h.get(k)) == Some(v))
            })
        })
        .count();
    i32::try_from(n).unwrap_or(i32::MAX)
}

/// How many of the set's active pods share each node (the rank of `getPodsRankedByRelatedPodsOnSameNode`).
fn colocated_counts(active: &[&Arc<Pod>]) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for p in active {
        if let Some(n) = node_of(p) {
            *counts.entry(n.to_string()).or_default() += 1;
        }
    }
    counts
}

/// `controller.ActivePodsWithRanks.Less`: the pod to delete first sorts first.
///
/// 1. unassigned before assigned;
/// 2. Pending before Unknown before Running;
/// 3. not ready before ready;
/// 4. lower `pod-deletion-cost` first;
/// 5. more pods of the set on the same node first;
/// 6. ready for less time first (the simulated kubelet's `startTime`);
/// 7. newer first (`creationTimestamp`);
///
/// and by name last, so the order is total (kube leaves it to the informer's order).
pub fn deletion_order(a: &Pod, b: &Pod, colocated: &BTreeMap<String, usize>) -> Ordering {
    let assigned = |p: &Pod| node_of(p).is_some();
    let phase_rank = |p: &Pod| match phase(p) {
        "Pending" => 0,
        "Unknown" => 1,
        "Running" => 2,
        _ => 3,
    };
    let cost = |p: &Pod| -> i32 {
        p.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(POD_DELETION_COST))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    let rank = |p: &Pod| {
        node_of(p)
            .and_then(|n| colocated.get(n))
            .copied()
            .unwrap_or(0)
    };
    let started = |p: &Pod| p.status.as_ref().and_then(|s| s.start_time.clone());
    let created = |p: &Pod| p.metadata.creation_timestamp.clone();
    assigned(a)
        .cmp(&assigned(b))
        .then_with(|| phase_rank(a).cmp(&phase_rank(b)))
        .then_with(|| is_ready(a).cmp(&is_ready(b)))
        .then_with(|| cost(a).cmp(&cost(b)))
        .then_with(|| rank(b).cmp(&rank(a)))
        .then_with(|| started(b).cmp(&started(a)))
        .then_with(|| created(b).cmp(&created(a)))
        .then_with(|| a.metadata.name.cmp(&b.metadata.name))
}
