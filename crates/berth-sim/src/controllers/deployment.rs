//! The Deployment controller (`pkg/controller/deployment`): a Deployment owns ReplicaSets,
//! one per template, each named `<deployment>-<pod-template-hash>` and carrying the label
//! `pod-template-hash` in its selector, its template and so its pods. The one whose template
//! is the Deployment's is the new ReplicaSet; it is scaled to `spec.replicas`, and the
//! Deployment's status sums its ReplicaSets'.
//!
//! Not played: the rolling update's pacing. When the template changes, the new ReplicaSet
//! is created at full scale and the old ones are scaled to zero at once (what `Recreate`
//! reaches, without waiting for the old pods to go); `maxSurge` and `maxUnavailable` are
//! not applied step by step. Conditions (`Available`, `Progressing`) are not written.

use std::sync::Arc;

use berth_api::k8s_openapi::api::apps::v1::{
    Deployment, DeploymentStatus, ReplicaSet, ReplicaSetSpec,
};
use berth_api::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use berth_api::k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use berth_core::{Kind, Object};

use berth_core::migration::keep_capacity::same_template_ignoring_hash;

use super::{controlled_by, controller_ref, names, nonzero, Action};
use crate::store::Store;

pub use berth_core::migration::keep_capacity::POD_TEMPLATE_HASH;
/// The revision annotation of a Deployment's ReplicaSets.
pub const REVISION: &str = "deployment.kubernetes.io/revision";
/// The Deployment's `spec.replicas`, on its ReplicaSets.
pub const DESIRED_REPLICAS: &str = "deployment.kubernetes.io/desired-replicas";
/// `spec.replicas` plus `maxSurge`, on its ReplicaSets.
pub const MAX_REPLICAS: &str = "deployment.kubernetes.io/max-replicas";

/// One reconcile of `d`.
pub fn reconcile(store: &Store, d: &Arc<Deployment>) -> Vec<Action> {
    let Some(spec) = d.spec.as_ref() else {
        return Vec::new();
    };
    let uid = d.metadata.uid.clone().unwrap_or_default();
    let namespace = d.metadata.namespace.as_deref().unwrap_or("default");
    let want = spec.replicas.unwrap_or(1).max(0);
    let owned: Vec<Arc<ReplicaSet>> = store
        .of_kind(Kind::ReplicaSet)
        .filter_map(|o| match o {
            Object::ReplicaSet(rs)
                if rs.metadata.namespace.as_deref().unwrap_or("default") == namespace
                    && controlled_by(&rs.metadata, &uid) =>
            {
                Some(rs.clone())
            }
            _ => None,
        })
        .collect();
    let newest = owned.iter().find(|rs| {
        rs.spec
            .as_ref()
            .and_then(|s| s.template.as_ref())
            .is_some_and(|t| same_template_ignoring_hash(t, &spec.template))
    });
    let mut actions = Vec::new();
    let annotations = |revision: String| {
        let mut a = std::collections::BTreeMap::new();
        a.insert(REVISION.to_string(), revision);
        a.insert(DESIRED_REPLICAS.to_string(), want.to_string());
        a.insert(
            MAX_REPLICAS.to_string(),
            (want + max_surge(d, want)).to_string(),
        );
        a
    };
    match newest {
        None => {
            let revision = owned
                .iter()
                .filter_map(|rs| revision_of(rs))
                .max()
                .unwrap_or(0)
                + 1;
            let rs = new_replica_set(d, want, annotations(revision.to_string()));
            actions.push(Action::Create(Object::ReplicaSet(Arc::new(rs))));
        }
        Some(rs) => {
            let replicas = rs.spec.as_ref().and_then(|s| s.replicas);
            let revision = rs
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(REVISION))
                .cloned()
                .unwrap_or_else(|| "1".into());
            let wanted_annotations = annotations(revision);
            let have = rs.metadata.annotations.clone().unwrap_or_default();
            let stale = wanted_annotations
                .iter()
                .any(|(k, v)| have.get(k) != Some(v));
            if replicas != Some(want) || stale {
                let mut rs = (**rs).clone();
                rs.metadata
                    .annotations
                    .get_or_insert_with(Default::default)
                    .extend(wanted_annotations);
                if let Some(s) = rs.spec.as_mut() {
                    s.replicas = Some(want);
                }
                actions.push(Action::Update(Object::ReplicaSet(Arc::new(rs))));
            }
        }
    }
    for rs in &owned {
        let is_new = newest.is_some_and(|n| Arc::ptr_eq(n, rs));
        if !is_new && rs.spec.as_ref().and_then(|s| s.replicas) != Some(0) {
            let mut old = (**rs).clone();
            if let Some(s) = old.spec.as_mut() {
                s.replicas = Some(0);
            }
            actions.push(Action::Update(Object::ReplicaSet(Arc::new(old))));
        }
    }
    let status = status_of(d, &owned, newest, want);
    if d.status.as_ref() != Some(&status) {
        let mut updated = (**d).clone();
        updated.status = Some(status);
        actions.push(Action::Update(Object::Deployment(Arc::new(updated))));
    }
    actions
}

/// The Deployment's status: its ReplicaSets' counts summed.
fn status_of(
    d: &Deployment,
    owned: &[Arc<ReplicaSet>],
    newest: Option<&Arc<ReplicaSet>>,
    want: i32,
) -> DeploymentStatus {
    let sum = |f: fn(&berth_api::k8s_openapi::api::apps::v1::ReplicaSetStatus) -> i32| -> i32 {
        owned
            .iter()
            .filter_map(|rs| rs.status.as_ref())
            .map(f)
            .sum()
    };
    let replicas = sum(|s| s.replicas);
    let available = sum(|s| s.available_replicas.unwrap_or(0));
    let updated = newest
        .and_then(|rs| rs.status.as_ref())
        .map_or(0, |s| s.replicas);
    DeploymentStatus {
        replicas: nonzero(replicas),
        updated_replicas: nonzero(updated),
        ready_replicas: nonzero(sum(|s| s.ready_replicas.unwrap_or(0))),
        available_replicas: nonzero(available),
        unavailable_replicas: nonzero((want - available).max(0)),
        observed_generation: d.metadata.generation,
        collision_count: d.status.as_ref().and_then(|s| s.collision_count),
        ..DeploymentStatus::default()
    }
}

fn revision_of(rs: &ReplicaSet) -> Option<u64> {
    rs.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(REVISION))
        .and_then(|v| v.parse().ok())
}

/// `maxSurge` resolved against `want` (default 25%, rounded up; 0 for `Recreate`).
fn max_surge(d: &Deployment, want: i32) -> i32 {
    let strategy = d.spec.as_ref().and_then(|s| s.strategy.as_ref());
    if strategy.and_then(|s| s.type_.as_deref()) == Some("Recreate") {
        return 0;
    }
    let surge = strategy
        .and_then(|s| s.rolling_update.as_ref())
        .and_then(|r| r.max_surge.clone())
        .unwrap_or(IntOrString::String("25%".into()));
    match surge {
        IntOrString::Int(i) => i,
        IntOrString::String(s) => s
            .strip_suffix('%')
            .and_then(|p| p.parse::<i64>().ok())
            .map_or(0, |p| {
                i32::try_from((p * i64::from(want) + 99).div_euclid(100)).unwrap_or(0)
            }),
    }
}

/// The ReplicaSet `deploymentutil` creates for the Deployment's current template.
fn new_replica_set(
    d: &Deployment,
    want: i32,
    annotations: std::collections::BTreeMap<String, String>,
) -> ReplicaSet {
    let spec = d.spec.clone().unwrap_or_default();
    let hash = names::template_hash(
        &spec.template,
        d.status.as_ref().and_then(|s| s.collision_count),
    );
    let mut template = spec.template.clone();
    template
        .metadata
        .get_or_insert_with(Default::default)
        .labels
        .get_or_insert_with(Default::default)
        .insert(POD_TEMPLATE_HASH.into(), hash.clone());
    let mut selector = spec.selector.clone();
    selector
        .match_labels
        .get_or_insert_with(Default::default)
        .insert(POD_TEMPLATE_HASH.into(), hash.clone());
    let labels = template.metadata.as_ref().and_then(|m| m.labels.clone());
    let name = d.metadata.name.as_deref().unwrap_or("");
    let mut annotations = annotations;
    if let Some(a) = &d.metadata.annotations {
        for (k, v) in a {
            if k != "kubectl.kubernetes.io/last-applied-configuration" {
                annotations.entry(k.clone()).or_insert_with(|| v.clone());
            }
        }
    }
    ReplicaSet {
        metadata: ObjectMeta {
            name: Some(format!("{name}-{hash}")),
            namespace: d.metadata.namespace.clone(),
            labels,
            annotations: Some(annotations),
            owner_references: Some(vec![controller_ref("Deployment", &d.metadata)]),
            ..ObjectMeta::default()
        },
        spec: Some(ReplicaSetSpec {
            replicas: Some(want),
            min_ready_seconds: spec.min_ready_seconds,
            selector,
            template: Some(template),
        }),
        status: None,
    }
}
