//! Deletes the core decided on (preemption victims, expired reservations), with the UID (and,
//! where the decision was about one version, resourceVersion) as preconditions.
//!
//! A preemption victim is evicted as kube-scheduler's `prepareCandidate` does: first the
//! `DisruptionTarget` condition (reason `PreemptionByScheduler`) is patched into its status,
//! so that its controller (a Job's pod failure policy, for one) and whoever looks at the
//! terminating pod learns why it goes, then the pod is deleted with its own grace period.
//! The lanes ([`super::lanes`]) make sure the Reservation holding the room exists by then.

use berth_core::object::{Kind, ObjectKey};
use berth_core::Preemption;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, Preconditions};
use serde_json::{json, Value};

use super::Ctx;
use crate::kinds::Served;
use crate::retry::{self, classify, retry, Backoff, Class};

pub(super) async fn delete(
    ctx: &Ctx,
    key: &ObjectKey,
    uid: &str,
    resource_version: Option<String>,
    preemption: Option<&Preemption>,
) {
    if let (Kind::Pod, Some(p)) = (key.kind, preemption) {
        if !mark_disrupted(ctx, key, uid, p).await {
            return;
        }
    }
    let dp = DeleteParams {
        preconditions: Some(Preconditions {
            uid: (!uid.is_empty()).then(|| uid.to_string()),
            resource_version,
        }),
        ..DeleteParams::default()
    };
    let r = match key.kind {
        Kind::Pod => {
            let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &key.namespace);
            retry(Backoff::default(), || api.delete(&key.name, &dp))
                .await
                .map(|_| ())
        }
        Kind::Reservation => {
            let api: Api<DynamicObject> =
                Api::all_with(ctx.client.clone(), &Served::reservation_resource());
            retry(Backoff::default(), || api.delete(&key.name, &dp))
                .await
                .map(|_| ())
        }
        other => {
            tracing::warn!(kind = %other, name = %key, "delete of this kind is not supported");
            return;
        }
    };
    ctx.metrics
        .request("delete", r.as_ref().map_or_else(retry::code, |_| 200));
    match r {
        Ok(()) => tracing::info!(object = %key, kind = %key.kind, "deleted"),
        // Gone already, or another incarnation: nothing of what the core decided about is left.
        Err(e) if matches!(classify(&e), Class::NotFound | Class::Conflict) => {
            tracing::debug!(object = %key, error = %e, "delete not needed");
        }
        Err(e) => tracing::warn!(object = %key, error = %e, "delete failed"),
    }
}

/// The strategic merge patch of `pods/status` that adds the victim's `DisruptionTarget`
/// condition (conditions merge by `type`, so the others stay). It carries `metadata.uid`,
/// which the API server checks: a patch meant for a former incarnation fails with a
/// conflict.
pub(crate) fn disruption_patch(uid: &str, p: &Preemption, now: &str) -> Value {
    let mut body = json!({"status": {"conditions": [{
        "type": "DisruptionTarget",
        "status": "True",
        "reason": "PreemptionByScheduler",
        "message": p.message(),
        "lastTransitionTime": now,
    }]}});
    if !uid.is_empty() {
        body["metadata"] = json!({ "uid": uid });
    }
    body
}

/// Patches the victim's `DisruptionTarget` condition. Returns whether the deletion should
/// go on: not when the victim is gone or is another incarnation (the deletion's own
/// preconditions would refuse it anyway). A write that keeps failing otherwise does not keep
/// the victim: the condition explains the eviction, the deletion is what frees the room
/// (upstream gives up the preemption instead, and tries again on the next cycle; berth's
/// core decided already).
async fn mark_disrupted(ctx: &Ctx, key: &ObjectKey, uid: &str, p: &Preemption) -> bool {
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &key.namespace);
    let body = disruption_patch(uid, p, &berth_core::time::rfc3339(super::wall_clock_ms()));
    let pp = PatchParams::default();
    let patch = Patch::Strategic(&body);
    let r = retry(Backoff::default(), || {
        api.patch_status(&key.name, &pp, &patch)
    })
    .await;
    ctx.metrics.request(
        "disruption_target",
        r.as_ref().map_or_else(retry::code, |_| 200),
    );
    match r {
        Ok(_) => true,
        Err(e) if matches!(classify(&e), Class::NotFound | Class::Conflict) => {
            tracing::debug!(pod = %key, error = %e, "victim gone; nothing to evict");
            false
        }
        Err(e) => {
            tracing::warn!(pod = %key, preemptor = %p.preemptor, error = %e,
                "could not add the DisruptionTarget condition; deleting the victim anyway");
            true
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_condition_is_kube_schedulers_and_names_the_incarnation() {
        let p = Preemption {
            preemptor: ObjectKey::pod("team", "high"),
            scheduler: "berth".into(),
            hold: None,
        };
        let body = disruption_patch("uid-1", &p, "2026-01-01T00:00:00Z");
        assert_eq!(
            body,
            json!({
                "metadata": {"uid": "uid-1"},
                "status": {"conditions": [{
                    "type": "DisruptionTarget", "status": "True",
                    "reason": "PreemptionByScheduler",
                    "message": "berth: preempting to accommodate a higher priority pod",
                    "lastTransitionTime": "2026-01-01T00:00:00Z",
                }]}
            })
        );
        assert!(disruption_patch("", &p, "t").get("metadata").is_none());
    }
}
