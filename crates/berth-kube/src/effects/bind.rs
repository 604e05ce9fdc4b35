//! PreBind (the annotations the plugins chose) and Bind (`pods/binding`), with the pod's UID
//! as a precondition on both so that a pod deleted and recreated under the same name is never
//! bound by a decision made for the old one.

use std::collections::BTreeMap;

use berth_core::object::ObjectKey;
use berth_core::BindFailure;
use k8s_openapi::api::core::v1::{Binding, ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

use super::{Ctx, Outcome};
use crate::retry::{self, classify, retry, Backoff, Class};

/// Binds `pod` to `node`; a failure comes back as [`Outcome::BindFailed`].
pub(super) async fn bind(
    ctx: &Ctx,
    pod: ObjectKey,
    uid: String,
    node: String,
    annotations: BTreeMap<String, String>,
) -> Outcome {
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &pod.namespace);
    let fail = |class: BindFailure, message: String| {
        ctx.metrics.bind_failed(class.as_str());
        tracing::info!(pod = %pod, node, class = class.as_str(), message, "bind failed");
        Outcome::BindFailed {
            pod: pod.clone(),
            uid: uid.clone(),
            node: node.clone(),
            class,
            message,
        }
    };
    if let Err((class, message)) = prebind(ctx, &api, &pod, &uid, &annotations).await {
        return fail(class, message);
    }
    let binding = binding(&pod, &uid, &node);
    let pp = PostParams::default();
    let (bind_api, bucket) = match &ctx.bind {
        Some((client, bucket)) => (
            Api::<Pod>::namespaced(client.clone(), &pod.namespace),
            Some(bucket.clone()),
        ),
        None => (api.clone(), None),
    };
    // Each attempt takes its rate-limiter token first, then looks again, as late as can
    // be: leadership may have run out (the standby may be binding now), or the node may have
    // been deleted while this bind waited (the API server binds to a node that does not
    // exist).
    let r = retry(Backoff::default(), || async {
        if let Some(bucket) = &bucket {
            bucket.acquire().await;
        }
        if !ctx.may_write() {
            return Ok(Err(Stop::Fenced));
        }
        if ctx.node_gone(&node) {
            return Ok(Err(Stop::NodeGone));
        }
        bind_api
            .create_subresource::<_, serde_json::Value>("binding", &pod.name, &pp, &binding)
            .await
            .map(Ok)
    })
    .await;
    let e = match r {
        Ok(Ok(_)) => {
            ctx.metrics.request("bind", 201);
            return Outcome::Done;
        }
        Ok(Err(Stop::Fenced)) => return Outcome::Done,
        Ok(Err(Stop::NodeGone)) => {
            return fail(
                BindFailure::Transient,
                format!("node {node} was deleted before the binding was sent"),
            )
        }
        Err(e) => {
            ctx.metrics.request("bind", retry::code(&e));
            e
        }
    };
    match classify(&e) {
        Class::NotFound => fail(BindFailure::NotFound, e.to_string()),
        // A retried binding whose first attempt went through answers 409: the pod is already
        // on our node, which is success.
        Class::Conflict if landed(&api, &pod, &uid, &node).await => Outcome::Done,
        Class::Conflict => fail(BindFailure::Conflict, e.to_string()),
        Class::Rejected => fail(BindFailure::Conflict, e.to_string()),
        // A time-out says nothing of whether the write happened: one whose answer was lost
        // did. Reported as failed, the core would give the pod's room on the node to
        // another pod while the watch is about to show this one there (kube-scheduler's
        // overcommit after a lost answer): read the pod back first.
        Class::Transient if landed(&api, &pod, &uid, &node).await => Outcome::Done,
        Class::Transient => fail(BindFailure::Transient, e.to_string()),
    }
}

/// PreBind: writes the annotations the plugins chose, if any. A merge patch naming the UID
/// fails (422, the UID is immutable) on another incarnation of the pod.
async fn prebind(
    ctx: &Ctx,
    api: &Api<Pod>,
    pod: &ObjectKey,
    uid: &str,
    annotations: &BTreeMap<String, String>,
) -> Result<(), (BindFailure, String)> {
    if annotations.is_empty() {
        return Ok(());
    }
    let patch = Patch::Merge(json!({"metadata": {"uid": uid, "annotations": annotations}}));
    let pp = PatchParams::default();
    let r = retry(Backoff::default(), || api.patch(&pod.name, &pp, &patch)).await;
    ctx.metrics.request(
        "prebind_annotate",
        r.as_ref().map_or_else(retry::code, |_| 200),
    );
    r.map(|_| ()).map_err(|e| {
        let class = match classify(&e) {
            Class::NotFound => BindFailure::NotFound,
            Class::Conflict | Class::Rejected => BindFailure::Conflict,
            Class::Transient => BindFailure::Transient,
        };
        (class, format!("running PreBind: {e}"))
    })
}

/// The Binding of this incarnation (`uid`) of `pod` to `node`.
fn binding(pod: &ObjectKey, uid: &str, node: &str) -> Binding {
    Binding {
        metadata: ObjectMeta {
            name: Some(pod.name.to_string()),
            namespace: Some(pod.namespace.to_string()),
            uid: Some(uid.to_string()),
            ..ObjectMeta::default()
        },
        target: ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Node".into()),
            name: Some(node.to_string()),
            ..ObjectReference::default()
        },
    }
}

/// Why a bind was not sent.
enum Stop {
    /// Leadership ran out (the process is about to exit).
    Fenced,
    /// The node was deleted.
    NodeGone,
}

/// Whether the API server shows the pod (this incarnation) bound to `node`.
async fn landed(api: &Api<Pod>, pod: &ObjectKey, uid: &str, node: &str) -> bool {
    let Ok(current) = retry(Backoff::default(), || api.get(&pod.name)).await else {
        return false;
    };
    let same_uid = current.metadata.uid.as_deref() == Some(uid);
    let on = current.spec.as_ref().and_then(|s| s.node_name.as_deref());
    same_uid && on == Some(node)
}
