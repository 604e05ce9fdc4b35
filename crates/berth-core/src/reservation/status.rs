//! A reservation's `status`, as Koordinator's scheduler and status controller write it:
//! phase, the conditions (with Koordinator's exact update rules), `currentOwners` (bound
//! owners, sorted by UID) and `allocated`.
//!
//! `allocated` is what Koordinator's controller (`syncStatus`) writes: the sum of the current
//! owners' requests masked to the resource names of `allocatable`, and not capped at it. An
//! owner that took 6 CPU of a 4-CPU reservation (4 from it, 2 from the node) shows
//! `cpu: 6`, so `allocated` may exceed `allocatable`. It is a report of who uses the
//! reservation, not of what the node holds: node accounting counts only the part taken from
//! the reservation ([`ReservationInfo::taken`]) as reserved, the overflow as the owner's own
//! node usage.

use berth_api::format_resource;
use berth_api::k8s_openapi::api::core::v1::ObjectReference;
use berth_api::k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use berth_api::k8s_openapi::apimachinery::pkg::apis::meta::v1::Time as MetaTime;
use berth_api::k8s_openapi::jiff::Timestamp;
use berth_api::reservation::{condition, ReservationCondition, ReservationStatus};

use crate::resources::ResourceNames;
use crate::time::Time;

use super::store::ReservationInfo;

/// Kubernetes time from virtual ms (second precision, as the API stores it).
pub fn meta_time(t: Time) -> Option<MetaTime> {
    Timestamp::from_millisecond(t.div_euclid(1000) * 1000)
        .ok()
        .map(MetaTime)
}

fn cond(type_: &str, status: &str, reason: &str, message: &str, now: Time) -> ReservationCondition {
    ReservationCondition {
        type_: type_.into(),
        status: status.into(),
        reason: reason.into(),
        message: message.into(),
        last_probe_time: meta_time(now),
        last_transition_time: meta_time(now),
    }
}

/// `SetReservationUnschedulable`: adds `Scheduled=False/Unschedulable`, or updates it.
pub fn set_unschedulable(conds: &mut Vec<ReservationCondition>, message: &str, now: Time) {
    match conds.iter_mut().find(|c| c.type_ == condition::SCHEDULED) {
        None => conds.push(cond(
            condition::SCHEDULED,
            condition::FALSE,
            condition::REASON_UNSCHEDULABLE,
            message,
            now,
        )),
        Some(c) if c.status == condition::TRUE => c.last_probe_time = meta_time(now),
        Some(c) => {
            c.reason = condition::REASON_UNSCHEDULABLE.into();
            c.message = message.into();
            c.last_probe_time = meta_time(now);
        }
    }
}

/// `SetReservationAvailable`: the conditions become `[Scheduled=True, Ready=True]`.
pub fn set_available(conds: &mut Vec<ReservationCondition>, now: Time) {
    *conds = vec![
        cond(
            condition::SCHEDULED,
            condition::TRUE,
            condition::REASON_SCHEDULED,
            "",
            now,
        ),
        cond(
            condition::READY,
            condition::TRUE,
            condition::REASON_AVAILABLE,
            "",
            now,
        ),
    ];
}

/// Reason of `Ready=False` while a pre-allocating reservation waits for room (berth's;
/// Koordinator never sets `Waiting`).
pub const REASON_WAITING: &str = "Waiting";

/// Placed but waiting for room: `[Scheduled=True, Ready=False/Waiting]`.
pub fn set_waiting(conds: &mut Vec<ReservationCondition>, now: Time) {
    *conds = vec![
        cond(
            condition::SCHEDULED,
            condition::TRUE,
            condition::REASON_SCHEDULED,
            "",
            now,
        ),
        cond(
            condition::READY,
            condition::FALSE,
            REASON_WAITING,
            "the node has no room for the reservation yet",
            now,
        ),
    ];
}

/// `SetReservationSucceeded`: `Ready` becomes `False/Succeeded` (appended if absent;
/// otherwise status, reason and probe time change and the transition time is kept).
pub fn set_succeeded(conds: &mut Vec<ReservationCondition>, now: Time) {
    match conds.iter_mut().find(|c| c.type_ == condition::READY) {
        None => conds.push(cond(
            condition::READY,
            condition::FALSE,
            condition::REASON_SUCCEEDED,
            "",
            now,
        )),
        Some(c) => {
            c.status = condition::FALSE.into();
            c.reason = condition::REASON_SUCCEEDED.into();
            c.last_probe_time = meta_time(now);
        }
    }
}

/// `SetReservationExpired`: `Ready` becomes `False/Expired` (a `True` one is replaced with
/// new times; a `False` one changes reason, message and probe time).
pub fn set_expired(conds: &mut Vec<ReservationCondition>, message: &str, now: Time) {
    match conds.iter_mut().find(|c| c.type_ == condition::READY) {
        None => conds.push(cond(
            condition::READY,
            condition::FALSE,
            condition::REASON_EXPIRED,
            message,
            now,
        )),
        Some(c) if c.status == condition::TRUE => {
            *c = cond(
                condition::READY,
                condition::FALSE,
                condition::REASON_EXPIRED,
                message,
                now,
            );
        }
        Some(c) => {
            c.reason = condition::REASON_EXPIRED.into();
            c.message = message.into();
            c.last_probe_time = meta_time(now);
        }
    }
}

/// The status of `r` as berth writes it now.
pub fn compute(r: &ReservationInfo, names: &ResourceNames) -> ReservationStatus {
    if let Some(s) = &r.final_status {
        return s.clone();
    }
    let mut owners: Vec<ObjectReference> = r
        .owner_pods
        .iter()
        .filter(|(_, o)| o.bound)
        .map(|(k, o)| ObjectReference {
            namespace: Some(k.namespace.to_string()),
            name: Some(k.name.to_string()),
            uid: Some(o.uid.to_string()),
            ..Default::default()
        })
        .collect();
    owners.sort_by(|a, b| a.uid.cmp(&b.uid).then_with(|| a.name.cmp(&b.name)));
    let mut allocated = std::collections::BTreeMap::new();
    if !owners.is_empty() {
        let mut sum = crate::resources::Resources::ZERO;
        for o in r.owner_pods.values().filter(|o| o.bound) {
            sum.add(&o.requests);
        }
        for id in names.ids() {
            if r.names & (1 << id.0) == 0 || sum[id] == 0 {
                continue;
            }
            let n = names.name(id);
            allocated.insert(n.to_string(), Quantity(format_resource(n, sum[id])));
        }
    }
    let placed =
        r.node_name.is_some() && r.phase != berth_api::reservation::ReservationPhase::Pending;
    ReservationStatus {
        phase: Some(r.phase.clone()),
        conditions: r.conditions.clone(),
        current_owners: owners,
        node_name: r
            .node_name
            .as_ref()
            .filter(|_| placed)
            .map(|n| n.to_string()),
        allocatable: if placed {
            r.allocatable_list.clone()
        } else {
            Default::default()
        },
        allocated,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unschedulable_appends_then_updates_without_touching_transition_time() {
        let mut c = Vec::new();
        set_unschedulable(
            &mut c,
            "0/1 nodes are available: 1 Insufficient cpu.",
            1_000,
        );
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].reason, condition::REASON_UNSCHEDULABLE);
        set_unschedulable(&mut c, "other", 5_000);
        assert_eq!(c[0].message, "other");
        assert_eq!(c[0].last_transition_time, meta_time(1_000));
        assert_eq!(c[0].last_probe_time, meta_time(5_000));
    }

    #[test]
    fn available_replaces_and_expiry_flips_ready() {
        let mut c = Vec::new();
        set_unschedulable(&mut c, "x", 0);
        set_available(&mut c, 2_000);
        assert_eq!(c.len(), 2);
        assert_eq!(
            (c[0].type_.as_str(), c[0].status.as_str()),
            ("Scheduled", "True")
        );
        assert_eq!(
            (c[1].type_.as_str(), c[1].reason.as_str()),
            ("Ready", "Available")
        );
        set_expired(&mut c, "", 9_000);
        assert_eq!(
            (c[1].status.as_str(), c[1].reason.as_str()),
            ("False", "Expired")
        );
        assert_eq!(c[1].last_transition_time, meta_time(9_000));
    }

    #[test]
    fn succeeded_keeps_the_transition_time_as_koordinator_does() {
        let mut c = Vec::new();
        set_available(&mut c, 2_000);
        set_succeeded(&mut c, 7_000);
        assert_eq!(
            (c[1].status.as_str(), c[1].reason.as_str()),
            ("False", "Succeeded")
        );
        assert_eq!(c[1].last_transition_time, meta_time(2_000));
        assert_eq!(c[1].last_probe_time, meta_time(7_000));
    }
}
