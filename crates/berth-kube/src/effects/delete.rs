//! Deletes the core decided on (preemption victims, expired reservations), with the UID (and,
//! where the decision was about one version, resourceVersion) as preconditions.

use berth_core::object::{Kind, ObjectKey};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, DynamicObject, Preconditions};

use super::Ctx;
use crate::kinds::Served;
use crate::retry::{self, classify, retry, Backoff, Class};

pub(super) async fn delete(
    ctx: &Ctx,
    key: &ObjectKey,
    uid: &str,
    resource_version: Option<String>,
) {
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
