//! The simulated resource-claim controller (kube-controller-manager's `resourceclaim`
//! controller), so that DRA pods behave as in a cluster:
//!
//! - a pod's claim from a `resourceClaimTemplateName` becomes a ResourceClaim named as kube
//!   names it, `<pod>-<claim>-<5 characters>`, the suffix derived from the pod's UID and the
//!   claim's name instead of drawn at random (so runs are deterministic); it is owned by the
//!   pod (controller ownerReference), annotated `resource.kubernetes.io/pod-claim-name`, and
//!   the pod's `status.resourceClaimStatuses` names it (written first, so the claim's
//!   creation is what wakes the scheduler);
//! - a claim whose `reservedFor` names a pod that no longer exists (or has finished) loses
//!   that entry, and a claim left with no consumer is deallocated;
//! - a claim owned by a pod that no longer exists is deleted.
//!
//! Each call computes one write; the driver applies it and asks again until there is none.

use std::sync::Arc;

use berth_api::dra::ResourceClaim;
use berth_api::k8s_openapi::api::core::v1::{Pod, PodResourceClaimStatus};
use berth_api::k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use berth_core::{Kind, Object, ObjectKey};

use crate::store::Store;

/// The annotation naming the pod's claim a generated ResourceClaim is for.
pub const ANN_POD_CLAIM_NAME: &str = "resource.kubernetes.io/pod-claim-name";

/// What the controller writes next.
#[derive(Debug, Clone)]
pub enum Write {
    /// Create or update an object.
    Apply(Object),
    /// Delete an object.
    Delete(ObjectKey),
}

/// kube's `names.SimpleNameGenerator` alphabet (no vowels, no confusable digits).
const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

/// The deterministic 5-character suffix for `(pod uid, claim)`.
fn suffix(uid: &str, claim: &str) -> String {
    let mut h = xxhash_rust::xxh64::xxh64(format!("{uid}/{claim}").as_bytes(), 0);
    (0..5)
        .map(|_| {
            let c = ALPHABET[(h % ALPHABET.len() as u64) as usize] as char;
            h /= ALPHABET.len() as u64;
            c
        })
        .collect()
}

/// kube's `generateName` for a pod's claim: the prefix cut to leave room for the suffix.
pub fn claim_name(pod: &str, claim: &str, uid: &str) -> String {
    let mut prefix = format!("{pod}-{claim}-");
    if prefix.len() > 58 {
        prefix.truncate(58);
    }
    format!("{prefix}{}", suffix(uid, claim))
}

fn pods(store: &Store) -> impl Iterator<Item = &Arc<Pod>> + '_ {
    store.of_kind(Kind::Pod).filter_map(|o| match o {
        Object::Pod(p) => Some(p),
        _ => None,
    })
}

fn claims(store: &Store) -> impl Iterator<Item = &Arc<ResourceClaim>> + '_ {
    store.of_kind(Kind::ResourceClaim).filter_map(|o| match o {
        Object::ResourceClaim(c) => Some(c),
        _ => None,
    })
}

fn done(pod: &Pod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

fn ns_of(meta: &ObjectMeta) -> &str {
    meta.namespace.as_deref().unwrap_or("default")
}

/// The next claim a pod's template asks for (the pod's status first, then the claim).
fn next_generated(store: &Store) -> Option<Write> {
    for pod in pods(store) {
        let ns = ns_of(&pod.metadata);
        let name = pod.metadata.name.as_deref().unwrap_or("");
        let uid = pod.metadata.uid.as_deref().unwrap_or("");
        if done(pod) {
            continue;
        }
        for pc in pod
            .spec
            .iter()
            .flat_map(|s| s.resource_claims.iter().flatten())
        {
            let Some(template) = &pc.resource_claim_template_name else {
                continue;
            };
            let statuses = pod
                .status
                .as_ref()
                .and_then(|s| s.resource_claim_statuses.as_ref());
            let listed = statuses
                .and_then(|s| s.iter().find(|s| s.name == pc.name))
                .and_then(|s| s.resource_claim_name.clone());
            let claim_name = listed.unwrap_or_else(|| claim_name(name, &pc.name, uid));
            let key = ObjectKey::new(Kind::ResourceClaim, ns, &claim_name);
            if store.get(&key).is_some() {
                continue;
            }
            let tkey = ObjectKey::new(Kind::ResourceClaimTemplate, ns, template);
            let Some(Object::ResourceClaimTemplate(t)) = store.get(&tkey) else {
                continue;
            };
            if statuses.is_none_or(|s| !s.iter().any(|s| s.name == pc.name)) {
                let mut p = (**pod).clone();
                p.status
                    .get_or_insert_with(Default::default)
                    .resource_claim_statuses
                    .get_or_insert_with(Vec::new)
                    .push(PodResourceClaimStatus {
                        name: pc.name.clone(),
                        resource_claim_name: Some(claim_name),
                    });
                return Some(Write::Apply(Object::Pod(Arc::new(p))));
            }
            let tmeta = t.spec.metadata.clone().unwrap_or_default();
            let mut annotations = tmeta.annotations.unwrap_or_default();
            annotations.insert(ANN_POD_CLAIM_NAME.into(), pc.name.clone());
            let claim = ResourceClaim {
                metadata: ObjectMeta {
                    name: Some(claim_name),
                    namespace: Some(ns.to_string()),
                    labels: tmeta.labels,
                    annotations: Some(annotations),
                    owner_references: Some(vec![OwnerReference {
                        api_version: "v1".into(),
                        kind: "Pod".into(),
                        name: name.to_string(),
                        uid: uid.to_string(),
                        controller: Some(true),
                        block_owner_deletion: Some(true),
                    }]),
                    ..Default::default()
                },
                spec: t.spec.spec.clone(),
                ..Default::default()
            };
            return Some(Write::Apply(Object::ResourceClaim(Arc::new(claim))));
        }
    }
    None
}

/// The next claim to clean up: a consumer gone, or an owner gone.
fn next_cleanup(store: &Store) -> Option<Write> {
    let live = |ns: &str, name: &str, uid: &str| {
        store
            .pod(&ObjectKey::pod(ns, name))
            .is_some_and(|p| p.metadata.uid.as_deref() == Some(uid) && !done(p))
    };
    for claim in claims(store) {
        let ns = ns_of(&claim.metadata);
        let owner = claim
            .metadata
            .owner_references
            .iter()
            .flatten()
            .find(|o| o.kind == "Pod" && o.controller == Some(true));
        if let Some(o) = owner {
            if store
                .pod(&ObjectKey::pod(ns, &o.name))
                .is_none_or(|p| p.metadata.uid.as_deref() != Some(o.uid.as_str()))
            {
                return Some(Write::Delete(Object::ResourceClaim(claim.clone()).key()));
            }
        }
        let Some(status) = &claim.status else {
            continue;
        };
        let kept: Vec<_> = status
            .reserved_for
            .iter()
            .filter(|r| r.resource != "pods" || live(ns, &r.name, &r.uid))
            .cloned()
            .collect();
        if kept.len() != status.reserved_for.len() {
            let mut c = (**claim).clone();
            let s = c.status.get_or_insert_with(Default::default);
            s.reserved_for = kept;
            if s.reserved_for.is_empty() {
                s.allocation = None;
                s.devices.clear();
            }
            return Some(Write::Apply(Object::ResourceClaim(Arc::new(c))));
        }
    }
    None
}

/// The controller's next write, if any.
pub fn next_write(store: &Store) -> Option<Write> {
    next_generated(store).or_else(|| next_cleanup(store))
}

/// Whether every claim `pod` uses is allocated and reserved for it (the kubelet does not
/// start it otherwise).
pub fn pod_claims_ready(store: &Store, pod: &Pod) -> bool {
    let uid = pod.metadata.uid.as_deref().unwrap_or("");
    match berth_core::plugins::dynamicresources::pod_claims(pod) {
        Ok(keys) => keys.iter().all(|(_, key)| {
            matches!(store.get(key), Some(Object::ResourceClaim(c))
                if c.allocation().is_some() && c.reserved_for(uid))
        }),
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_names_are_deterministic_and_bounded() {
        let a = claim_name("pod", "gpu", "uid-1");
        assert_eq!(a, claim_name("pod", "gpu", "uid-1"));
        assert!(a.starts_with("pod-gpu-"));
        assert_eq!(a.len(), "pod-gpu-".len() + 5);
        assert_ne!(a, claim_name("pod", "gpu", "uid-2"));
        let long = claim_name(&"p".repeat(80), "c", "u");
        assert_eq!(long.len(), 63);
    }
}
