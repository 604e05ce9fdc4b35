//! kube-controller-manager's workload controllers, as the simulator plays them: the
//! Deployment controller ([`deployment`]), the ReplicaSet controller ([`replicaset`]) and
//! the StatefulSet controller ([`statefulset`]); and the Eviction API ([`eviction`]), which
//! honours PodDisruptionBudgets.
//!
//! Each controller reads the [`Store`] and answers with [`Action`]s, which the simulation
//! performs as the API server would (a created pod is defaulted, admitted and queued for
//! scheduling; a deleted one leaves the scheduler's cache). The simulation asks again after
//! every round of scheduling until no controller has anything left to do, so a pod deleted
//! in a step, preempted or evicted is replaced within the same instant, as a real
//! controller's watch would replace it moments later. Controllers act only on differences,
//! so a converged cluster gets no actions and the loop ends.
//!
//! What is played and what is not is written up in `docs/workload-controllers.md`.

pub mod deployment;
pub mod eviction;
pub mod keep_capacity;
pub mod names;
pub mod replicaset;
pub mod statefulset;

use std::collections::BTreeMap;
use std::sync::Arc;

use berth_api::k8s_openapi::api::core::v1::{Pod, PodTemplateSpec};
use berth_api::k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use berth_core::{Kind, Object, ObjectKey};

use crate::store::Store;

/// What a controller asks the API server to do.
#[derive(Debug, Clone)]
pub enum Action {
    /// Create an object (a pod, or a Deployment's ReplicaSet).
    Create(Object),
    /// Replace an object the controller owns, or its own status.
    Update(Object),
    /// Delete an object.
    Delete(ObjectKey),
}

/// The controllers' own state across reconciles: how many names each owner has drawn, so
/// that a replacement never takes the name of the pod it replaces.
#[derive(Debug, Clone, Default)]
pub struct Controllers {
    drawn: BTreeMap<String, u64>,
    /// Pods created so far under each name.
    incarnations: BTreeMap<ObjectKey, u64>,
}

impl Controllers {
    /// How many pods were created under `key` before this one (and counts this one).
    pub fn incarnation(&mut self, key: &ObjectKey) -> u64 {
        let n = self.incarnations.entry(key.clone()).or_default();
        let before = *n;
        *n += 1;
        before
    }

    /// One pass of every controller over every workload, in kind, namespace and name order.
    pub fn reconcile(&mut self, store: &Store) -> Vec<Action> {
        let mut actions = Vec::new();
        let deployments: Vec<_> = store.of_kind(Kind::Deployment).cloned().collect();
        for d in deployments {
            if let Object::Deployment(d) = d {
                actions.extend(deployment::reconcile(store, &d));
            }
        }
        let sets: Vec<_> = store.of_kind(Kind::ReplicaSet).cloned().collect();
        for rs in sets {
            if let Object::ReplicaSet(rs) = rs {
                actions.extend(replicaset::reconcile(self, store, &rs));
            }
        }
        let sets: Vec<_> = store.of_kind(Kind::StatefulSet).cloned().collect();
        for s in sets {
            if let Object::StatefulSet(s) = s {
                actions.extend(statefulset::reconcile(store, &s));
            }
        }
        actions
    }

    /// Whether `store` holds any workload (else there is nothing to reconcile).
    pub fn any(store: &Store) -> bool {
        [Kind::Deployment, Kind::ReplicaSet, Kind::StatefulSet]
            .into_iter()
            .any(|k| store.of_kind(k).next().is_some())
    }

    /// A fresh `generateName` for a pod of the owner `uid`: `<prefix><5 chars>`, skipping
    /// names taken in `namespace`.
    pub(crate) fn generate_name(
        &mut self,
        store: &Store,
        uid: &str,
        prefix: &str,
        namespace: &str,
    ) -> String {
        let n = self.drawn.entry(uid.to_string()).or_default();
        loop {
            let name = format!("{prefix}{}", names::suffix(uid, *n));
            *n += 1;
            if store.pod(&ObjectKey::pod(namespace, &name)).is_none() {
                return name;
            }
        }
    }
}

/// The owner reference a controller puts on what it creates (`controller: true`,
/// `blockOwnerDeletion: true`, as `metav1.NewControllerRef`).
pub(crate) fn controller_ref(kind: &str, meta: &ObjectMeta) -> OwnerReference {
    OwnerReference {
        api_version: "apps/v1".into(),
        kind: kind.into(),
        name: meta.name.clone().unwrap_or_default(),
        uid: meta.uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

/// Whether `meta` names the object of `uid` as its controller.
pub(crate) fn controlled_by(meta: &ObjectMeta, uid: &str) -> bool {
    meta.owner_references.as_ref().is_some_and(|refs| {
        refs.iter()
            .any(|r| r.controller == Some(true) && !uid.is_empty() && r.uid == uid)
    })
}

/// The pods of `namespace` controlled by `uid`, by name.
pub(crate) fn owned_pods<'a>(store: &'a Store, namespace: &str, uid: &str) -> Vec<&'a Arc<Pod>> {
    store
        .of_kind(Kind::Pod)
        .filter_map(|o| match o {
            Object::Pod(p)
                if p.metadata.namespace.as_deref().unwrap_or("default") == namespace
                    && controlled_by(&p.metadata, uid) =>
            {
                Some(p)
            }
            _ => None,
        })
        .collect()
}

/// The pod's phase (`Pending` when it has none).
pub(crate) fn phase(p: &Pod) -> &str {
    p.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("Pending")
}

/// `controller.IsPodActive`: not Succeeded, not Failed, not being deleted.
pub(crate) fn is_active(p: &Pod) -> bool {
    !matches!(phase(p), "Succeeded" | "Failed") && p.metadata.deletion_timestamp.is_none()
}

/// Ready, as the simulated kubelet has it: admitted and `Running` (it runs no probes), or
/// a `Ready` condition that says so.
pub(crate) fn is_ready(p: &Pod) -> bool {
    let condition = p
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready"));
    match condition {
        Some(c) => c.status == "True" && phase(p) == "Running",
        None => phase(p) == "Running",
    }
}

/// The node a pod is bound to.
pub(crate) fn node_of(p: &Pod) -> Option<&str> {
    p.spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .filter(|n| !n.is_empty())
}

/// `controller.GetPodFromTemplate`: a pod of `template` in `namespace`, named `name`, with
/// the template's labels, annotations and finalizers, `owner` as its controller.
pub(crate) fn pod_from_template(
    template: &PodTemplateSpec,
    namespace: &str,
    name: String,
    generate_name: Option<String>,
    owner: OwnerReference,
    extra_labels: &[(&str, String)],
) -> Pod {
    let meta = template.metadata.clone().unwrap_or_default();
    let mut labels = meta.labels.unwrap_or_default();
    for (k, v) in extra_labels {
        labels.insert((*k).to_string(), v.clone());
    }
    Pod {
        metadata: ObjectMeta {
            name: Some(name),
            generate_name,
            namespace: Some(namespace.to_string()),
            labels: Some(labels),
            annotations: meta.annotations,
            finalizers: meta.finalizers,
            owner_references: Some(vec![owner]),
            ..ObjectMeta::default()
        },
        spec: template.spec.clone(),
        status: None,
    }
}

/// Counts of a workload's pods, for its status.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct PodCounts {
    pub(crate) replicas: i32,
    pub(crate) ready: i32,
}

impl PodCounts {
    pub(crate) fn of<'a>(pods: impl IntoIterator<Item = &'a Arc<Pod>>) -> Self {
        let mut c = Self::default();
        for p in pods {
            c.replicas += 1;
            if is_ready(p) {
                c.ready += 1;
            }
        }
        c
    }
}

/// `Some(n)` unless `n` is 0: the `omitempty` of the status counters.
pub(crate) fn nonzero(n: i32) -> Option<i32> {
    (n != 0).then_some(n)
}

#[cfg(test)]
mod tests;
