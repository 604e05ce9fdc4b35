//! VolumeBinding's PreBind writes (`bindAPIUpdate`): a static volume's claimRef, a claim's
//! selected node. Each is an update of the whole object as the core read it, so a volume or
//! claim changed meanwhile is a conflict (the resourceVersion it carries); not retried on
//! conflict, as kube-scheduler fails PreBind then and the pod is scheduled again. Any
//! failure is reported as a failed bind of the pod, with the API server's message.

use berth_core::object::ObjectKey;
use berth_core::BindFailure;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use kube::api::{Api, PostParams};

use super::{Ctx, Outcome};
use crate::retry::{self, classify, Class};

fn failed(pod: ObjectKey, uid: String, node: String, e: &kube::Error) -> Outcome {
    let class = match classify(e) {
        Class::NotFound => BindFailure::NotFound,
        Class::Conflict | Class::Rejected => BindFailure::Conflict,
        Class::Transient => BindFailure::Transient,
    };
    // The API server's own message, as client-go's error prints it.
    let message = match e {
        kube::Error::Api(s) => s.message.clone(),
        other => other.to_string(),
    };
    tracing::info!(pod = %pod, node, message, "PreBind volume write failed");
    Outcome::BindFailed {
        pod,
        uid,
        node,
        class,
        message,
    }
}

/// Updates the volume with its claimRef set.
pub(super) async fn bind_volume(
    ctx: &Ctx,
    pod: ObjectKey,
    uid: String,
    node: String,
    volume: &PersistentVolume,
) -> Outcome {
    let api: Api<PersistentVolume> = Api::all(ctx.client.clone());
    let name = volume.metadata.name.clone().unwrap_or_default();
    let r = api.replace(&name, &PostParams::default(), volume).await;
    ctx.metrics
        .request("bind_volume", r.as_ref().map_or_else(retry::code, |_| 200));
    match r {
        Ok(_) => Outcome::Done,
        Err(e) => failed(pod, uid, node, &e),
    }
}

/// Updates the claim with `volume.kubernetes.io/selected-node` set.
pub(super) async fn provision_claim(
    ctx: &Ctx,
    pod: ObjectKey,
    uid: String,
    node: String,
    claim: &PersistentVolumeClaim,
) -> Outcome {
    let ns = claim.metadata.namespace.as_deref().unwrap_or("default");
    let api: Api<PersistentVolumeClaim> = Api::namespaced(ctx.client.clone(), ns);
    let name = claim.metadata.name.clone().unwrap_or_default();
    let r = api.replace(&name, &PostParams::default(), claim).await;
    ctx.metrics.request(
        "provision_claim",
        r.as_ref().map_or_else(retry::code, |_| 200),
    );
    match r {
        Ok(_) => Outcome::Done,
        Err(e) => failed(pod, uid, node, &e),
    }
}
