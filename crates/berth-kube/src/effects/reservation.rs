//! Reservation writes: `/status` (the core's view is the source of truth for status; a
//! conflict is retried on the latest object, unless that object is another incarnation) and
//! creation (dynamic provisioning).

use berth_api::reservation::{Reservation, ReservationStatus};
use kube::api::{Api, DynamicObject, PostParams};

use super::Ctx;
use crate::kinds::Served;
use crate::retry::{self, classify, retry, Backoff, Class};

/// How often a conflicting status write is retried on a fresh read.
const CONFLICT_RETRIES: usize = 5;

fn api(ctx: &Ctx) -> Api<DynamicObject> {
    Api::all_with(ctx.client.clone(), &Served::reservation_resource())
}

/// Writes `status`; whether it is on the reservation now.
pub(super) async fn status(ctx: &Ctx, name: &str, uid: &str, status: &ReservationStatus) -> bool {
    let api = api(ctx);
    let value = match serde_json::to_value(status) {
        Ok(v) => v,
        Err(e) => {
            tracing::error!(reservation = name, error = %e, "status cannot be encoded");
            return false;
        }
    };
    for _ in 0..CONFLICT_RETRIES {
        let current = match retry(Backoff::default(), || api.get(name)).await {
            Ok(o) => o,
            Err(e) if classify(&e) == Class::NotFound => return false,
            Err(e) => {
                tracing::warn!(reservation = name, error = %e, "reading for a status write failed");
                return false;
            }
        };
        if !uid.is_empty() && current.metadata.uid.as_deref() != Some(uid) {
            tracing::debug!(
                reservation = name,
                "status for a former incarnation dropped"
            );
            return false;
        }
        if current.data.get("status") == Some(&value) {
            return true;
        }
        if !ctx.may_write() {
            return false;
        }
        let mut next = current;
        next.data["status"] = value.clone();
        let pp = PostParams::default();
        let r = retry(Backoff::default(), || api.replace_status(name, &pp, &next)).await;
        ctx.metrics.request(
            "reservation_status",
            r.as_ref().map_or_else(retry::code, |_| 200),
        );
        match r {
            Ok(_) => return true,
            Err(e) if classify(&e) == Class::Conflict => continue,
            Err(e) if classify(&e) == Class::NotFound => return false,
            Err(e) => {
                tracing::warn!(reservation = name, error = %e, "status write failed");
                return false;
            }
        }
    }
    tracing::warn!(
        reservation = name,
        "status write kept conflicting; the next change writes it again"
    );
    false
}

/// Merges annotations into the reservation (a merge patch carrying `metadata.uid`, which the
/// API server checks: a patch meant for a former incarnation fails with a conflict).
pub(super) async fn annotate(
    ctx: &Ctx,
    name: &str,
    uid: &str,
    annotations: &std::collections::BTreeMap<String, String>,
) -> bool {
    let api = api(ctx);
    let mut meta = serde_json::json!({ "annotations": annotations });
    if !uid.is_empty() {
        meta["uid"] = serde_json::Value::String(uid.to_string());
    }
    let body = serde_json::json!({ "metadata": meta });
    let pp = kube::api::PatchParams::default();
    let patch = kube::api::Patch::Merge(&body);
    let r = retry(Backoff::default(), || api.patch(name, &pp, &patch)).await;
    ctx.metrics.request(
        "reservation_annotate",
        r.as_ref().map_or_else(retry::code, |_| 200),
    );
    match r {
        Ok(_) => true,
        Err(e) if matches!(classify(&e), Class::NotFound | Class::Conflict) => false,
        Err(e) => {
            tracing::warn!(reservation = name, error = %e, "annotating the reservation failed");
            false
        }
    }
}

pub(super) async fn create(ctx: &Ctx, r: &Reservation) -> bool {
    let name = r.metadata.name.clone().unwrap_or_default();
    let obj: DynamicObject = match serde_json::to_value(r).and_then(serde_json::from_value) {
        Ok(o) => o,
        Err(e) => {
            tracing::error!(reservation = name, error = %e, "reservation cannot be encoded");
            return false;
        }
    };
    let api = api(ctx);
    let pp = PostParams::default();
    let res = retry(Backoff::default(), || api.create(&pp, &obj)).await;
    ctx.metrics.request(
        "reservation_create",
        res.as_ref().map_or_else(retry::code, |_| 201),
    );
    match res {
        Ok(_) => {
            tracing::info!(reservation = name, "reservation created");
            true
        }
        Err(e) if classify(&e) == Class::Conflict => {
            tracing::info!(reservation = name, "reservation already exists");
            true
        }
        Err(e) => {
            tracing::warn!(reservation = name, error = %e, "creating the reservation failed");
            false
        }
    }
}
