//! Writes to a pod other than its binding: the PodScheduled condition and the nomination
//! (`pods/status`, strategic merge so other conditions stay), and annotations.
//!
//! A pod that is gone (404) needs nothing any more; other failures are logged and left to the
//! next cycle, which writes the condition again if it still applies.

use std::collections::BTreeMap;

use berth_core::object::ObjectKey;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use super::Ctx;
use crate::retry::{self, classify, retry, Backoff, Class};

async fn patch(
    ctx: &Ctx,
    op: &'static str,
    pod: &ObjectKey,
    status: bool,
    body: serde_json::Value,
) -> bool {
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &pod.namespace);
    let pp = PatchParams::default();
    let r = retry(Backoff::default(), || async {
        if status {
            api.patch_status(&pod.name, &pp, &Patch::Strategic(&body))
                .await
        } else {
            api.patch(&pod.name, &pp, &Patch::Merge(&body)).await
        }
    })
    .await;
    ctx.metrics
        .request(op, r.as_ref().map_or_else(retry::code, |_| 200));
    match r {
        Ok(_) => true,
        Err(e) if classify(&e) == Class::NotFound => false,
        Err(e) => {
            tracing::warn!(pod = %pod, op, error = %e, "pod write failed");
            false
        }
    }
}

/// Sets the PodScheduled condition.
pub(super) async fn condition(
    ctx: &Ctx,
    pod: &ObjectKey,
    status: &str,
    reason: &str,
    message: &str,
) -> bool {
    let now = berth_core::time::rfc3339(super::wall_clock_ms());
    let body = json!({"status": {"conditions": [{
        "type": "PodScheduled",
        "status": status,
        "reason": reason,
        "message": message,
        "lastProbeTime": null,
        "lastTransitionTime": now,
    }]}});
    patch(ctx, "pod_condition", pod, true, body).await
}

/// Sets or clears `status.nominatedNodeName`.
pub(super) async fn nominate(ctx: &Ctx, pod: &ObjectKey, node: Option<&str>) -> bool {
    let body = json!({"status": {"nominatedNodeName": node}});
    patch(ctx, "nominate", pod, true, body).await
}

/// Merges annotations.
pub(super) async fn annotate(
    ctx: &Ctx,
    pod: &ObjectKey,
    annotations: &BTreeMap<String, String>,
) -> bool {
    let body = json!({"metadata": {"annotations": annotations}});
    patch(ctx, "annotate", pod, false, body).await
}
