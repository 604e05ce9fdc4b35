//! The API server's side of the core's writes, for the drivers that play it in process
//! (berth-sim's `Simulation` and [`crate::testing::FakeDriver`]): what each [`Effect`] does
//! to the stored object it names, with the preconditions the API server checks. One
//! function, so that the simulator and the tests' fake cluster cannot disagree on what a
//! bind, a condition or a reservation status writes. What a driver then does with the
//! result (store it, show it to the scheduler, delay it, count it) stays its own.

use std::sync::Arc;

use berth_api::k8s_openapi::api::core::v1::{Pod, PodCondition, PodStatus};
use berth_api::k8s_openapi::apimachinery::pkg::apis::meta::v1::Time as MetaTime;

use crate::effect::Effect;
use crate::event::{BindFailure, Event};
use crate::object::{Kind, Object, ObjectKey};

/// What an effect does to the stored objects.
#[derive(Debug, Clone)]
pub enum Write {
    /// The object as the write leaves it, to be stored under its key.
    Object(Object),
    /// The write was refused; the answer the scheduler hears ([`Event::BindFailed`]).
    Refused(Event),
    /// Delete this object (its preconditions hold, or it is gone already).
    Delete(ObjectKey),
    /// The object the effect writes does not exist; the effect is given back.
    Missing(Effect),
    /// The effect's UID or resourceVersion precondition failed: it was meant for an
    /// earlier object of that name, or an older version of it. Nothing is written.
    Stale,
    /// Not a write to one stored object (a create, an event, a volume or claim write whose
    /// answer depends on the driver's controllers): the driver carries it out.
    Other(Effect),
}

/// What `effect` writes, given the stored objects (`get`) and the API server's clock as it
/// stamps objects (`now`).
pub fn write<'a>(
    effect: Effect,
    get: impl Fn(&ObjectKey) -> Option<&'a Object>,
    now: &MetaTime,
) -> Write {
    match effect {
        Effect::Bind {
            pod,
            uid,
            node,
            annotations,
        } => {
            let answer = match get(&pod) {
                Some(Object::Pod(p)) => bind(p, &pod, &uid, &node, annotations, now),
                _ => Err((
                    BindFailure::NotFound,
                    format!("pods \"{}\" not found", pod.name),
                )),
            };
            match answer {
                Ok(p) => Write::Object(Object::Pod(Arc::new(p))),
                Err((class, message)) => Write::Refused(Event::BindFailed {
                    pod,
                    uid,
                    node,
                    class,
                    message,
                }),
            }
        }
        Effect::PodCondition {
            ref pod,
            status,
            ref reason,
            ref message,
        } => {
            let written = patch_pod(&get, pod, |p| {
                set_pod_scheduled(p, status, Some(reason.clone()), Some(message.clone()), now)
            });
            written.map_or(Write::Missing(effect), Write::Object)
        }
        Effect::NominatePod { ref pod, ref node } => {
            let written = patch_pod(&get, pod, |p| {
                p.status
                    .get_or_insert_with(PodStatus::default)
                    .nominated_node_name = node.clone();
            });
            written.map_or(Write::Missing(effect), Write::Object)
        }
        Effect::AnnotatePod {
            ref pod,
            ref annotations,
        } => {
            let written = patch_pod(&get, pod, |p| {
                p.metadata
                    .annotations
                    .get_or_insert_with(Default::default)
                    .extend(annotations.clone());
            });
            written.map_or(Write::Missing(effect), Write::Object)
        }
        Effect::ReservationStatus {
            ref name,
            ref uid,
            ref status,
        } => match reservation(&get, name, uid) {
            Some(Ok(mut r)) => {
                r.status = Some(status.clone());
                Write::Object(Object::Reservation(Arc::new(r)))
            }
            Some(Err(())) => Write::Stale,
            None => Write::Missing(effect),
        },
        Effect::AnnotateReservation {
            ref name,
            ref uid,
            ref annotations,
        } => match reservation(&get, name, uid) {
            Some(Ok(mut r)) => {
                r.metadata
                    .annotations
                    .get_or_insert_with(Default::default)
                    .extend(annotations.clone());
                Write::Object(Object::Reservation(Arc::new(r)))
            }
            Some(Err(())) => Write::Stale,
            None => Write::Missing(effect),
        },
        Effect::Delete {
            key,
            uid,
            resource_version,
            ..
        } => delete(&get, key, &uid, resource_version.as_deref()),
        Effect::DeallocateClaim { claim } => deallocate(&get, &claim),
        other => Write::Other(other),
    }
}

/// The stored pod `key`, copied and changed by `f`; `None` when there is no such pod.
fn patch_pod<'a>(
    get: &impl Fn(&ObjectKey) -> Option<&'a Object>,
    key: &ObjectKey,
    f: impl FnOnce(&mut Pod),
) -> Option<Object> {
    let Some(Object::Pod(p)) = get(key) else {
        return None;
    };
    let mut p = (**p).clone();
    f(&mut p);
    Some(Object::Pod(Arc::new(p)))
}

/// A claim written back without its allocation, if the stored one is the version the
/// scheduler read (UID and resourceVersion); otherwise nothing is written, as the API
/// server's conflict would leave it.
fn deallocate<'a>(
    get: &impl Fn(&ObjectKey) -> Option<&'a Object>,
    claim: &berth_api::dra::ResourceClaim,
) -> Write {
    let key = Object::ResourceClaim(Arc::new(claim.clone())).key();
    let Some(Object::ResourceClaim(stored)) = get(&key) else {
        return Write::Stale;
    };
    let (was, is) = (&claim.metadata, &stored.metadata);
    if was.uid != is.uid || was.resource_version != is.resource_version {
        return Write::Stale;
    }
    let mut c = (**stored).clone();
    if let Some(status) = c.status.as_mut() {
        status.allocation = None;
        status.reserved_for.clear();
        status.devices.clear();
    }
    Write::Object(Object::ResourceClaim(Arc::new(c)))
}

/// A delete with its preconditions (an empty `uid` and no `resource_version` are none), as
/// the API server checks them; an object gone already is the driver's to answer.
fn delete<'a>(
    get: &impl Fn(&ObjectKey) -> Option<&'a Object>,
    key: ObjectKey,
    uid: &str,
    resource_version: Option<&str>,
) -> Write {
    let stale = get(&key).is_some_and(|o| {
        let meta = o.meta();
        (!uid.is_empty() && meta.uid.as_deref() != Some(uid))
            || resource_version.is_some_and(|rv| meta.resource_version.as_deref() != Some(rv))
    });
    if stale {
        Write::Stale
    } else {
        Write::Delete(key)
    }
}

/// The stored reservation `name`, copied to be written, if its UID is `uid` (an empty `uid`
/// is no precondition); `Err` when it is another incarnation.
fn reservation<'a>(
    get: &impl Fn(&ObjectKey) -> Option<&'a Object>,
    name: &str,
    uid: &str,
) -> Option<Result<berth_api::reservation::Reservation, ()>> {
    match get(&ObjectKey::cluster(Kind::Reservation, name)) {
        Some(Object::Reservation(r)) => {
            if !uid.is_empty() && r.metadata.uid.as_deref() != Some(uid) {
                Some(Err(()))
            } else {
                Some(Ok((**r).clone()))
            }
        }
        _ => None,
    }
}

/// The `pods/binding` subresource: the UID precondition and a pod not bound yet; then
/// PreBind's annotations, `spec.nodeName` and `PodScheduled=True`.
fn bind(
    p: &Pod,
    key: &ObjectKey,
    uid: &str,
    node: &str,
    annotations: std::collections::BTreeMap<String, String>,
    now: &MetaTime,
) -> Result<Pod, (BindFailure, String)> {
    if p.metadata.uid.as_deref() != Some(uid) {
        let message = format!(
            "Operation cannot be fulfilled on pods/binding \"{}\": the UID in the precondition ({uid}) does not match the UID in record ({}). The object might have been deleted and then recreated",
            key.name,
            p.metadata.uid.as_deref().unwrap_or("")
        );
        return Err((BindFailure::Conflict, message));
    }
    if let Some(current) = p
        .spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .filter(|n| !n.is_empty())
    {
        let message = format!(
            "Operation cannot be fulfilled on pods/binding \"{}\": pod {} is already assigned to node \"{current}\"",
            key.name, key.name
        );
        return Err((BindFailure::Conflict, message));
    }
    let mut p = p.clone();
    if !annotations.is_empty() {
        p.metadata
            .annotations
            .get_or_insert_with(Default::default)
            .extend(annotations);
    }
    p.spec.get_or_insert_with(Default::default).node_name = Some(node.to_string());
    // The binding subresource clears the nomination (kube-apiserver since KEP-5278; the
    // scheduler itself did before): a bound pod has no nominated node.
    if let Some(status) = p.status.as_mut() {
        status.nominated_node_name = None;
    }
    set_pod_scheduled(&mut p, "True", None, None, now);
    Ok(p)
}

/// Sets the pod's `PodScheduled` condition as `podutil.UpdatePodCondition` does: the
/// transition time moves only when the status changes.
pub fn set_pod_scheduled(
    pod: &mut Pod,
    status: &str,
    reason: Option<String>,
    message: Option<String>,
    now: &MetaTime,
) {
    let conditions = pod
        .status
        .get_or_insert_with(PodStatus::default)
        .conditions
        .get_or_insert_with(Vec::new);
    let old = conditions.iter().position(|c| c.type_ == "PodScheduled");
    let transition = match old.map(|i| &conditions[i]) {
        Some(c) if c.status == status => c
            .last_transition_time
            .clone()
            .unwrap_or_else(|| now.clone()),
        _ => now.clone(),
    };
    let cond = PodCondition {
        type_: "PodScheduled".to_string(),
        status: status.to_string(),
        reason,
        message,
        last_transition_time: Some(transition),
        ..Default::default()
    };
    match old {
        Some(i) => conditions[i] = cond,
        None => conditions.push(cond),
    }
}
