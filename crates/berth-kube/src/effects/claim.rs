//! DynamicResources' PreBind write (kube-scheduler's `bindClaim`): a ResourceClaim gets the
//! allocation Reserve made for it (if it had none) and the pod in `status.reservedFor`.
//!
//! As upstream: the claim is read as the API server has it (every field kept, so the update
//! loses nothing berth does not model); one being deleted fails; an allocation to write on a
//! claim that has one already fails ("allocated elsewhere in the meantime"), unless it is
//! this very allocation (a retry after a lost answer); the `resource.kubernetes.io/
//! delete-protection` finalizer is added in a normal update before the allocation is written
//! to `/status`; a conflict is retried on a fresh read. Any failure is reported as a failed
//! bind of the pod, which then is not bound (the executor drops its binding's remaining
//! writes) and goes back to the queue after Unreserve.

use berth_api::dra::{AllocationResult, ResourceClaim, ResourceClaimConsumerReference};
use berth_core::object::ObjectKey;
use berth_core::BindFailure;
use kube::api::{Api, DynamicObject, PostParams};
use serde_json::Value;

use super::{Ctx, Outcome};
use crate::kinds::Served;
use crate::retry::{self, classify, retry, Backoff, Class};

/// The finalizer a claim carries while it is allocated (`resourceapi.Finalizer`).
pub const FINALIZER: &str = "resource.kubernetes.io/delete-protection";

/// client-go's `retry.DefaultRetry`: five attempts.
const CONFLICT_RETRIES: usize = 5;

/// Why the write failed, and how the core should take it.
struct Failure {
    class: BindFailure,
    message: String,
}

fn from_api(context: &str, e: &kube::Error) -> Failure {
    let class = match classify(e) {
        Class::NotFound => BindFailure::NotFound,
        Class::Conflict | Class::Rejected => BindFailure::Conflict,
        Class::Transient => BindFailure::Transient,
    };
    let detail = match e {
        kube::Error::Api(s) => s.message.clone(),
        other => other.to_string(),
    };
    Failure {
        class,
        message: format!("{context}: {detail}"),
    }
}

/// What the status write must change on `current` (the claim as the API server has it):
/// `Ok(None)` when it already says it all.
fn next_status(
    current: &DynamicObject,
    allocation: Option<&AllocationResult>,
    consumer: &ResourceClaimConsumerReference,
    key: &ObjectKey,
) -> Result<Option<Value>, String> {
    let status = current.data.get("status").cloned().unwrap_or(Value::Null);
    let mut status = if status.is_object() {
        status
    } else {
        Value::Object(serde_json::Map::new())
    };
    let mut changed = false;
    if let Some(want) = allocation {
        match status.get("allocation").filter(|a| !a.is_null()) {
            None => {
                status["allocation"] = serde_json::to_value(want)
                    .map_err(|e| format!("encoding the allocation: {e}"))?;
                changed = true;
            }
            Some(have) => {
                let same = serde_json::from_value::<AllocationResult>(have.clone())
                    .is_ok_and(|have| have.devices.results == want.devices.results);
                if !same {
                    return Err(format!(
                        "claim {}/{} got allocated elsewhere in the meantime",
                        key.namespace, key.name
                    ));
                }
            }
        }
    }
    let listed = status
        .get("reservedFor")
        .and_then(Value::as_array)
        .is_some_and(|r| r.iter().any(|c| c["uid"] == consumer.uid.as_str()));
    if !listed {
        let entry =
            serde_json::to_value(consumer).map_err(|e| format!("encoding the consumer: {e}"))?;
        match status.get_mut("reservedFor").and_then(Value::as_array_mut) {
            Some(list) => list.push(entry),
            None => status["reservedFor"] = Value::Array(vec![entry]),
        }
        changed = true;
    }
    Ok(changed.then_some(status))
}

fn has_finalizer(claim: &DynamicObject) -> bool {
    claim
        .metadata
        .finalizers
        .as_ref()
        .is_some_and(|f| f.iter().any(|f| f == FINALIZER))
}

/// One attempt on the claim as read: `Ok(true)` written, `Ok(false)` a conflict (read again).
async fn attempt(
    ctx: &Ctx,
    api: &Api<DynamicObject>,
    key: &ObjectKey,
    want: &ResourceClaim,
    consumer: &ResourceClaimConsumerReference,
) -> Result<bool, Failure> {
    let conflict = |class: BindFailure, message: String| Failure { class, message };
    let mut current = match retry(Backoff::default(), || api.get(&key.name)).await {
        Ok(c) => c,
        Err(e) => return Err(from_api(&format!("get claim {key}"), &e)),
    };
    let want_uid = want.metadata.uid.as_deref().unwrap_or("");
    if !want_uid.is_empty() && current.metadata.uid.as_deref() != Some(want_uid) {
        return Err(conflict(
            BindFailure::NotFound,
            format!(
                "claim {}/{} got deleted in the meantime",
                key.namespace, key.name
            ),
        ));
    }
    if current.metadata.deletion_timestamp.is_some() {
        return Err(conflict(
            BindFailure::Conflict,
            format!(
                "claim {}/{} got deleted in the meantime",
                key.namespace, key.name
            ),
        ));
    }
    let allocation = want.status.as_ref().and_then(|s| s.allocation.as_ref());
    let writes_allocation = allocation.is_some()
        && current
            .data
            .get("status")
            .and_then(|s| s.get("allocation"))
            .is_none_or(Value::is_null);
    let status = next_status(&current, allocation, consumer, key)
        .map_err(|message| conflict(BindFailure::Conflict, message))?;
    let Some(status) = status else {
        return Ok(true);
    };
    if !ctx.may_write() {
        return Err(conflict(
            BindFailure::Transient,
            "leadership ended before the claim was written".into(),
        ));
    }
    let pp = PostParams::default();
    // The finalizer is added in a normal update, before the allocation is stored.
    if writes_allocation && !has_finalizer(&current) {
        current
            .metadata
            .finalizers
            .get_or_insert_with(Vec::new)
            .push(FINALIZER.into());
        let r = api.replace(&key.name, &pp, &current).await;
        ctx.metrics.request(
            "claim_finalizer",
            r.as_ref().map_or_else(retry::code, |_| 200),
        );
        current = match r {
            Ok(c) => c,
            Err(e) if classify(&e) == Class::Conflict => return Ok(false),
            Err(e) => {
                return Err(from_api(
                    &format!("add finalizer to claim {}/{}", key.namespace, key.name),
                    &e,
                ))
            }
        };
    }
    current.data["status"] = status;
    let r = api.replace_status(&key.name, &pp, &current).await;
    ctx.metrics
        .request("claim_status", r.as_ref().map_or_else(retry::code, |_| 200));
    match r {
        Ok(_) => Ok(true),
        Err(e) if classify(&e) == Class::Conflict => Ok(false),
        Err(e) => {
            let what = if writes_allocation {
                "add allocation and reservation to claim"
            } else {
                "add reservation to claim"
            };
            Err(from_api(
                &format!("{what} {}/{}", key.namespace, key.name),
                &e,
            ))
        }
    }
}

/// Writes `claim`'s allocation (if it has one the API server's copy lacks) and `pod` in its
/// `reservedFor`; a failure comes back as [`Outcome::BindFailed`] for the pod.
pub(super) async fn update_status(
    ctx: &Ctx,
    pod: ObjectKey,
    uid: String,
    node: String,
    claim: &ResourceClaim,
) -> Outcome {
    let ns = claim.metadata.namespace.as_deref().unwrap_or("default");
    let name = claim.metadata.name.as_deref().unwrap_or("");
    let key = ObjectKey::new(berth_core::object::Kind::ResourceClaim, ns, name);
    let api: Api<DynamicObject> = Api::namespaced_with(
        ctx.client.clone(),
        ns,
        &Served::dra_resource("ResourceClaim", "resourceclaims"),
    );
    let consumer = ResourceClaimConsumerReference {
        api_group: None,
        resource: "pods".into(),
        name: pod.name.to_string(),
        uid: uid.clone(),
    };
    let mut failure = Failure {
        class: BindFailure::Conflict,
        message: format!(
            "claim {ns}/{name}: the update kept conflicting ({CONFLICT_RETRIES} attempts)"
        ),
    };
    for _ in 0..CONFLICT_RETRIES {
        match attempt(ctx, &api, &key, claim, &consumer).await {
            Ok(true) => return Outcome::Done,
            Ok(false) => continue,
            Err(f) => {
                failure = f;
                break;
            }
        }
    }
    ctx.metrics.bind_failed(failure.class.as_str());
    tracing::info!(pod = %pod, node, claim = %key, message = failure.message, "PreBind claim write failed");
    Outcome::BindFailed {
        pod,
        uid,
        node,
        class: failure.class,
        message: failure.message,
    }
}

/// DynamicResources' PostFilter deallocation ([`berth_core::Effect::DeallocateClaim`]): the
/// claim as the API server has it, if it is still the version the scheduler read (UID and
/// resourceVersion), written back to `/status` without `allocation`, `reservedFor` and
/// `devices`. Anything else (a newer version, a conflict, an error) leaves the claim as it
/// is: the pod's next attempt sees it and decides again, as upstream's failed update does.
pub(super) async fn deallocate(ctx: &Ctx, claim: &ResourceClaim) -> Outcome {
    let ns = claim.metadata.namespace.as_deref().unwrap_or("default");
    let name = claim.metadata.name.as_deref().unwrap_or("");
    let api: Api<DynamicObject> = Api::namespaced_with(
        ctx.client.clone(),
        ns,
        &Served::dra_resource("ResourceClaim", "resourceclaims"),
    );
    let mut current = match retry(Backoff::default(), || api.get(name)).await {
        Ok(c) => c,
        Err(e) => {
            tracing::info!(claim = %format!("{ns}/{name}"), error = %e, "claim to deallocate not read");
            return Outcome::Done;
        }
    };
    let (was, is) = (&claim.metadata, &current.metadata);
    if was.uid != is.uid || was.resource_version != is.resource_version || !ctx.may_write() {
        return Outcome::Done;
    }
    if let Some(status) = current
        .data
        .get_mut("status")
        .and_then(Value::as_object_mut)
    {
        for field in ["allocation", "reservedFor", "devices"] {
            status.remove(field);
        }
    }
    let r = api
        .replace_status(name, &PostParams::default(), &current)
        .await;
    ctx.metrics
        .request("claim_status", r.as_ref().map_or_else(retry::code, |_| 200));
    match r {
        Ok(_) => tracing::info!(claim = %format!("{ns}/{name}"), "claim deallocated"),
        Err(e) => {
            tracing::info!(claim = %format!("{ns}/{name}"), error = %e, "claim deallocation not written")
        }
    }
    Outcome::Done
}

#[cfg(test)]
mod tests {
    use super::*;
    use berth_api::dra::{DeviceAllocationResult, DeviceRequestAllocationResult};

    fn claim(status: Value) -> DynamicObject {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": "c", "namespace": "ns"},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu"}}]}},
            "status": status,
        }))
        .unwrap()
    }

    fn allocation(device: &str) -> AllocationResult {
        AllocationResult {
            devices: DeviceAllocationResult {
                results: vec![DeviceRequestAllocationResult {
                    request: "gpu".into(),
                    driver: "gpu.example.com".into(),
                    pool: "n1".into(),
                    device: device.into(),
                    admin_access: None,
                    tolerations: vec![],
                    binding_conditions: vec![],
                    binding_failure_conditions: vec![],
                    share_id: None,
                    consumed_capacity: None,
                }],
                config: vec![],
            },
            node_selector: None,
            allocation_timestamp: None,
        }
    }

    fn consumer(name: &str) -> ResourceClaimConsumerReference {
        ResourceClaimConsumerReference {
            api_group: None,
            resource: "pods".into(),
            name: name.into(),
            uid: format!("uid-{name}"),
        }
    }

    fn key() -> ObjectKey {
        ObjectKey::new(berth_core::object::Kind::ResourceClaim, "ns", "c")
    }

    #[test]
    fn a_fresh_claim_gets_the_allocation_and_the_pod() {
        let a = allocation("g0");
        let s = next_status(&claim(Value::Null), Some(&a), &consumer("p"), &key())
            .unwrap()
            .expect("a write");
        assert_eq!(s["allocation"]["devices"]["results"][0]["device"], "g0");
        assert_eq!(
            s["reservedFor"],
            serde_json::json!([{"resource": "pods", "name": "p", "uid": "uid-p"}])
        );
    }

    #[test]
    fn a_shared_claim_keeps_its_consumers_and_other_fields() {
        let have = claim(serde_json::json!({
            "allocation": serde_json::to_value(allocation("g0")).unwrap(),
            "reservedFor": [{"resource": "pods", "name": "a", "uid": "uid-a"}],
            "devices": [{"driver": "gpu.example.com", "pool": "n1", "device": "g0", "data": {"x": 1}}],
        }));
        let s = next_status(&have, None, &consumer("b"), &key())
            .unwrap()
            .expect("a write");
        let names: Vec<&str> = s["reservedFor"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["a", "b"]);
        assert_eq!(s["devices"][0]["data"]["x"], 1, "unmodelled status kept");
        // Already listed: nothing to write.
        assert_eq!(
            next_status(&have, None, &consumer("a"), &key()).unwrap(),
            None
        );
    }

    #[test]
    fn a_claim_allocated_elsewhere_fails_unless_it_is_this_allocation() {
        let have = claim(serde_json::json!({
            "allocation": serde_json::to_value(allocation("g1")).unwrap(),
        }));
        let e = next_status(&have, Some(&allocation("g0")), &consumer("p"), &key()).unwrap_err();
        assert_eq!(e, "claim ns/c got allocated elsewhere in the meantime");
        // The same allocation (a retry whose first answer was lost): only the pod is added.
        let s = next_status(&have, Some(&allocation("g1")), &consumer("p"), &key())
            .unwrap()
            .expect("a write");
        assert_eq!(s["reservedFor"][0]["name"], "p");
    }
}
