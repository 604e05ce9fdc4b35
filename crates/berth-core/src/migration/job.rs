//! One job's next step (see the module above for the whole story). Each function answers
//! the actions for the state it handles; a failing job first deletes the Reservation it
//! used (unless the Reservation was consumed), then records the failure, so a controller
//! that stops between the two finds the job still running and finishes the clean-up.

use berth_api::annotations::ANNOTATION_RESERVATION_ALLOCATED;
use berth_api::k8s_openapi::api::core::v1::{ObjectReference, Pod};
use berth_api::migration::{
    vocabulary as v, PodMigrateReservationOptions, PodMigrationJob, PodMigrationJobCondition,
    PodMigrationJobStatus,
};
use berth_api::reservation::{condition, Reservation, ReservationPhase};

use super::arbitration::{controller_uid, is_ready, node_of, pod_ref, Arbiter};
use super::{evicted, reservation_name, template, Action, MigrationArgs, MigrationView};
use crate::reservation::status::meta_time;
use crate::time::Time;

/// The next step of `job`.
pub(super) fn step(
    job: &PodMigrationJob,
    view: &dyn MigrationView,
    now: Time,
    _args: &MigrationArgs,
    arbiter: &mut Arbiter<'_>,
) -> Vec<Action> {
    if job.spec.paused || !matches!(job.phase(), "" | v::PENDING | v::RUNNING) {
        return Vec::new();
    }
    if timed_out(job, now) {
        return fail(
            job,
            view,
            v::TIMEOUT,
            "Abort job caused by timeout".into(),
            now,
        );
    }
    let Some((ns, name)) = pod_ref(job) else {
        let message = "Abort job caused by invalid PodRef".to_string();
        return fail(job, view, v::INVALID_POD_REF, message, now);
    };
    let pod = view.pod(ns, name);
    if job.phase() != v::RUNNING {
        let Some(pod) = pod else {
            return fail(job, view, v::MISSING_POD, missing_pod(ns, name), now);
        };
        return start(job, ns, name, pod, arbiter);
    }
    if job.spec.evicts_directly() {
        return evict_directly(job, ns, name, pod, view, now);
    }
    reservation_first(job, ns, name, pod, view, now)
}

fn missing_pod(ns: &str, name: &str) -> String {
    format!("Abort job caused by missing Pod \"{ns}/{name}\"")
}

/// Whether the job's `ttl` ran out (counted from its creation).
fn timed_out(job: &PodMigrationJob, now: Time) -> bool {
    let ttl = job.spec.ttl.as_ref().and_then(|t| t.millis().ok());
    let created = job
        .metadata
        .creation_timestamp
        .as_ref()
        .map(|t| t.0.as_millisecond());
    matches!((ttl, created), (Some(ttl), Some(c)) if ttl > 0 && now - c >= ttl)
}

/// `Pending` → `Running` when the arbitrator allows it (recording the pod's UID in the
/// job, as `preparePodRef`); else the job stays `Pending` with the limit as its message.
fn start(
    job: &PodMigrationJob,
    ns: &str,
    name: &str,
    pod: &Pod,
    arbiter: &mut Arbiter<'_>,
) -> Vec<Action> {
    let mut next = job.clone();
    match arbiter.admit(ns, name, pod) {
        Ok(()) => {
            if let Some(r) = next.spec.pod_ref.as_mut() {
                r.uid.clone_from(&pod.metadata.uid);
            }
            let status = next.status.get_or_insert_with(Default::default);
            status.phase = v::RUNNING.into();
            status.reason.clear();
            status.message.clear();
        }
        Err(why) => {
            let status = next.status.get_or_insert_with(Default::default);
            status.phase = v::PENDING.into();
            status.message = format!("waiting for the arbitrator: {why}");
        }
    }
    update(job, next)
}

/// `EvictDirectly`: evict; done once the pod is gone.
fn evict_directly(
    job: &PodMigrationJob,
    ns: &str,
    name: &str,
    pod: Option<&Pod>,
    view: &dyn MigrationView,
    now: Time,
) -> Vec<Action> {
    match pod {
        Some(p) if !same_pod(job, p) => fail(job, view, v::MISSING_POD, missing_pod(ns, name), now),
        Some(_) => vec![evict(job, ns, name)],
        None if evicted(job) => {
            let mut next = job.clone();
            let status = next.status.get_or_insert_with(Default::default);
            status.phase = v::SUCCEEDED.into();
            status.status = "Complete".into();
            status.reason.clear();
            status.message = format!("Pod \"{ns}/{name}\" has been evicted");
            update(job, next)
        }
        None => fail(job, view, v::MISSING_POD, missing_pod(ns, name), now),
    }
}

/// Whether `p` is still the pod the job started with (a pod of the same name created since
/// is another pod).
fn same_pod(job: &PodMigrationJob, p: &Pod) -> bool {
    let want = job.spec.pod_ref.as_ref().and_then(|r| r.uid.as_deref());
    want.is_none_or(|w| w.is_empty() || p.metadata.uid.as_deref() == Some(w))
}

fn evict(job: &PodMigrationJob, ns: &str, name: &str) -> Action {
    Action::Evict {
        job: job.metadata.name.clone().unwrap_or_default(),
        namespace: ns.to_string(),
        name: name.to_string(),
    }
}

/// `ReservationFirst`, once `Running`.
fn reservation_first(
    job: &PodMigrationJob,
    ns: &str,
    name: &str,
    pod: Option<&Pod>,
    view: &dyn MigrationView,
    now: Time,
) -> Vec<Action> {
    let pod = pod.filter(|p| same_pod(job, p));
    let Some(rname) = reservation_name(job) else {
        return create_reservation(job, ns, name, pod, view, now);
    };
    let Some(r) = view.reservation(rname) else {
        let message = format!("Abort job caused by missing Reservation \"/{rname}\"");
        return fail(job, view, v::MISSING_RESERVATION, message, now);
    };
    if !evicted(job) {
        return before_eviction(job, ns, name, pod, r, view, now);
    }
    after_eviction_step(job, r, view, now)
}

/// Creates the Reservation, or adopts the one a previous pass created under the job's
/// name but could not record.
fn create_reservation(
    job: &PodMigrationJob,
    ns: &str,
    name: &str,
    pod: Option<&Pod>,
    view: &dyn MigrationView,
    now: Time,
) -> Vec<Action> {
    let rname = template::reservation_name_for(job);
    let existing = view
        .reservation(&rname)
        .filter(|r| template::created_for(r, job));
    let mut actions = Vec::new();
    if existing.is_none() {
        let Some(pod) = pod else {
            return fail(job, view, v::MISSING_POD, missing_pod(ns, name), now);
        };
        match template::build(job, pod, now) {
            Ok(r) => actions.push(Action::CreateReservation(Box::new(r))),
            Err(e) => {
                let message = format!("Failed to create Reservation caused by {e}");
                return fail(job, view, v::FAILED_CREATE_RESERVATION, message, now);
            }
        }
    }
    let mut next = job.clone();
    let options = next
        .spec
        .reservation_options
        .get_or_insert_with(PodMigrateReservationOptions::default);
    options.reservation_ref = Some(ObjectReference {
        kind: Some("Reservation".into()),
        api_version: Some("v1alpha1".into()),
        name: Some(rname.clone()),
        uid: existing.and_then(|r| r.metadata.uid.clone()),
        ..ObjectReference::default()
    });
    let message = format!("Successfully create Reservation \"{rname}\"");
    set_condition(&mut next, v::RESERVATION_CREATED, "True", "", &message, now);
    actions.extend(update(job, next));
    actions
}

/// The Reservation exists and the pod is not evicted yet.
fn before_eviction(
    job: &PodMigrationJob,
    ns: &str,
    name: &str,
    pod: Option<&Pod>,
    r: &Reservation,
    view: &dyn MigrationView,
    now: Time,
) -> Vec<Action> {
    let rname = r.metadata.name.as_deref().unwrap_or("");
    match r.phase() {
        ReservationPhase::Pending | ReservationPhase::Other(_) => {
            return match unschedulable(r) {
                Some(message) => fail(job, view, v::UNSCHEDULABLE, message, now),
                None => Vec::new(),
            };
        }
        ReservationPhase::Failed => {
            return fail(
                job,
                view,
                v::RESERVATION_EXPIRED,
                "Reservation expired".into(),
                now,
            );
        }
        ReservationPhase::Succeeded => {
            let message = "Reservation is already bound by another Pod".to_string();
            return fail(job, view, v::FORBIDDEN_MIGRATE_POD, message, now);
        }
        ReservationPhase::Available | ReservationPhase::Waiting => {}
    }
    let node = r
        .status
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .unwrap_or("");
    let Some(pod) = pod else {
        return fail(job, view, v::MISSING_POD, missing_pod(ns, name), now);
    };
    if node.is_empty() {
        return Vec::new();
    }
    if node_of(pod) == Some(node) {
        let message =
            format!("Scheduler assignes the Reservation \"{rname}\" on the same node as the Pod");
        return fail(job, view, v::FORBIDDEN_MIGRATE_POD, message, now);
    }
    if job.status.as_ref().is_none_or(|s| s.node_name.is_empty()) {
        let mut next = job.clone();
        next.status.get_or_insert_with(Default::default).node_name = node.to_string();
        let message = format!("Assigned Reservation \"{rname}\" to node \"{node}\"");
        set_condition(
            &mut next,
            v::RESERVATION_SCHEDULED,
            "True",
            "",
            &message,
            now,
        );
        record_siblings(&mut next, pod, view);
        return update(job, next);
    }
    vec![evict(job, ns, name)]
}

/// The job's annotation listing the UIDs of the workload's pods just before the eviction,
/// so that the replacement can be told from them afterwards (the job is the controller's
/// only memory).
pub const ANNOTATION_SIBLINGS: &str = "migration.berth.dev/workload-pods";

fn record_siblings(job: &mut PodMigrationJob, pod: &Pod, view: &dyn MigrationView) {
    let Some(owner) = controller_uid(pod) else {
        return;
    };
    let mut uids: Vec<&str> = view
        .pods()
        .filter(|p| controller_uid(p) == Some(owner))
        .filter_map(|p| p.metadata.uid.as_deref())
        .collect();
    uids.sort_unstable();
    job.metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(ANNOTATION_SIBLINGS.into(), uids.join(","));
}

/// The scheduler's message when it could not place the Reservation.
fn unschedulable(r: &Reservation) -> Option<String> {
    r.status.as_ref()?.conditions.iter().find_map(|c| {
        (c.type_ == condition::SCHEDULED && c.status == "False" && c.reason == v::UNSCHEDULABLE)
            .then(|| c.message.clone())
    })
}

/// The pod is evicted: wait for its replacement in the Reservation, then for it to be
/// ready.
fn after_eviction_step(
    job: &PodMigrationJob,
    r: &Reservation,
    view: &dyn MigrationView,
    now: Time,
) -> Vec<Action> {
    let rname = r.metadata.name.as_deref().unwrap_or("");
    let bound = r
        .status
        .as_ref()
        .and_then(|s| s.current_owners.first())
        .cloned();
    let Some(bound) = bound else {
        if r.phase() == ReservationPhase::Failed {
            return fail(
                job,
                view,
                v::RESERVATION_EXPIRED,
                "Reservation expired".into(),
                now,
            );
        }
        if let Some(elsewhere) = replacement_elsewhere(job, r, view) {
            return fail(job, view, v::REPLACEMENT_ELSEWHERE, elsewhere, now);
        }
        let mut next = job.clone();
        let (t, why) = (v::POD_BOUND_RESERVATION, v::WAIT_FOR_POD_BIND_RESERVATION);
        set_condition(&mut next, t, "False", why, "", now);
        return update(job, next);
    };
    let bns = bound.namespace.clone().unwrap_or_default();
    let bname = bound.name.clone().unwrap_or_default();
    let mut next = job.clone();
    if view.pod(&bns, &bname).is_some_and(|p| !is_ready(p)) {
        let (t, why) = (v::BOUND_POD_READY, v::WAIT_FOR_BOUND_POD_READY);
        set_condition(&mut next, t, "False", why, "", now);
        return update(job, next);
    }
    let message = format!("Bind Pod \"{bns}/{bname}\" in Reservation \"{rname}\"");
    set_condition(
        &mut next,
        v::POD_BOUND_RESERVATION,
        "True",
        "",
        &message,
        now,
    );
    let status = next.status.get_or_insert_with(Default::default);
    status.pod_ref = Some(bound);
    status.phase = v::SUCCEEDED.into();
    status.status = "Complete".into();
    status.reason.clear();
    status.message = message;
    update(job, next)
}

/// A pod of the migrated pod's workload, created since the eviction, bound to a node
/// without the Reservation (while the Reservation stays unused): the replacement went
/// elsewhere. Koordinator waits for the job's TTL in that case; berth says so at once.
fn replacement_elsewhere(
    job: &PodMigrationJob,
    r: &Reservation,
    view: &dyn MigrationView,
) -> Option<String> {
    let before: Vec<&str> = job
        .metadata
        .annotations
        .as_ref()?
        .get(ANNOTATION_SIBLINGS)?
        .split(',')
        .collect();
    let owner = r
        .spec
        .owners
        .iter()
        .find_map(|o| o.controller.as_ref()?.uid.clone())?;
    let rname = r.metadata.name.as_deref().unwrap_or("");
    view.pods().find_map(|p| {
        let node = node_of(p)?;
        let uid = p.metadata.uid.as_deref().unwrap_or("");
        let in_reservation = p
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(ANNOTATION_RESERVATION_ALLOCATED))
            .is_some_and(|a| a.contains(&format!("\"name\":\"{rname}\"")));
        let new = controller_uid(p) == Some(owner.as_str()) && !before.contains(&uid);
        (new && !in_reservation).then(|| {
            let ns = p.metadata.namespace.as_deref().unwrap_or("");
            let name = p.metadata.name.as_deref().unwrap_or("");
            format!("Pod \"{ns}/{name}\" replaced the migrated Pod on node \"{node}\", outside Reservation \"{rname}\"")
        })
    })
}

/// Records what the Eviction API answered for the job's pod: `Ok` is the pod deleted (an
/// `EvictDirectly` job succeeds), `Err` the refusal (a PDB's 429), retried on a later pass.
pub fn after_eviction(
    job: &PodMigrationJob,
    node: &str,
    outcome: Result<(), String>,
    now: Time,
) -> PodMigrationJob {
    let (ns, name) = pod_ref(job).unwrap_or(("", ""));
    let mut next = job.clone();
    match outcome {
        Ok(()) => {
            let message = format!("Pod \"{ns}/{name}\" evicted from node \"{node}\"");
            set_condition(
                &mut next,
                v::EVICTION,
                "True",
                v::EVICT_COMPLETE,
                &message,
                now,
            );
            if job.spec.evicts_directly() {
                let status = next.status.get_or_insert_with(Default::default);
                status.phase = v::SUCCEEDED.into();
                status.status = "Complete".into();
                status.reason.clear();
                status.message = format!("Pod \"{ns}/{name}\" has been evicted");
            }
        }
        Err(e) => {
            let message = format!("Failed evict Pod \"{ns}/{name}\" caused by {e}");
            set_condition(
                &mut next,
                v::EVICTION,
                "False",
                v::FAILED_EVICT,
                &message,
                now,
            );
        }
    }
    next
}

/// Ends the job `Failed` with `reason`: the Reservation it used is deleted first (unless
/// consumed).
fn fail(
    job: &PodMigrationJob,
    view: &dyn MigrationView,
    reason: &str,
    message: String,
    _now: Time,
) -> Vec<Action> {
    let mut actions = Vec::new();
    let rname = reservation_name(job).map(str::to_string).or_else(|| {
        let own = template::reservation_name_for(job);
        view.reservation(&own)
            .filter(|r| template::created_for(r, job))
            .map(|_| own)
    });
    if let Some(rname) = rname {
        let consumed = view
            .reservation(&rname)
            .is_some_and(|r| r.phase() == ReservationPhase::Succeeded);
        if view.reservation(&rname).is_some() && !consumed {
            actions.push(Action::DeleteReservation(rname));
        }
    }
    let mut next = job.clone();
    let status = next
        .status
        .get_or_insert_with(PodMigrationJobStatus::default);
    status.phase = v::FAILED.into();
    status.reason = reason.into();
    status.message = message;
    actions.extend(update(job, next));
    actions
}

/// `UpdateCondition`: replaces the condition of the type (keeping its transition time when
/// the status does not change) and mirrors its reason and message into the status.
fn set_condition(
    job: &mut PodMigrationJob,
    type_: &str,
    status: &str,
    reason: &str,
    message: &str,
    now: Time,
) {
    let s = job
        .status
        .get_or_insert_with(PodMigrationJobStatus::default);
    let old = s.conditions.iter().position(|c| c.type_ == type_);
    let transition = match old.map(|i| &s.conditions[i]) {
        Some(c) if c.status == status => c.last_transition_time.clone(),
        _ => meta_time(now),
    };
    let c = PodMigrationJobCondition {
        type_: type_.into(),
        status: status.into(),
        last_probe_time: None,
        last_transition_time: transition,
        reason: reason.into(),
        message: message.into(),
    };
    match old {
        Some(i) => s.conditions[i] = c,
        None => s.conditions.push(c),
    }
    s.reason = reason.into();
    s.message = message.into();
}

/// An update only when something changed (so a converged job asks for nothing).
fn update(old: &PodMigrationJob, next: PodMigrationJob) -> Vec<Action> {
    if &next == old {
        Vec::new()
    } else {
        vec![Action::UpdateJob(Box::new(next))]
    }
}

/// What the job waits for, in words.
pub(super) fn waiting_for(job: &PodMigrationJob, view: &dyn MigrationView) -> Option<String> {
    if job.is_finished() {
        return None;
    }
    if job.spec.paused {
        return Some("nothing: the job is paused (spec.paused)".into());
    }
    let status = job.status.as_ref();
    if job.phase() != v::RUNNING {
        return Some(match status.filter(|s| !s.message.is_empty()) {
            Some(s) => s.message.clone(),
            None => "the migration controller to start it".into(),
        });
    }
    if let Some(c) = job.condition(v::EVICTION).filter(|c| c.status == "False") {
        return Some(format!("the eviction to be allowed: {}", c.message));
    }
    let Some(rname) = reservation_name(job) else {
        return Some("its Reservation to be created".into());
    };
    let r = view.reservation(rname)?;
    if !evicted(job) {
        return Some(match r.phase() {
            ReservationPhase::Available => {
                format!("the eviction of its pod (Reservation {rname:?} is Available)")
            }
            p => format!("Reservation {rname:?} to become Available (it is {p})"),
        });
    }
    Some(format!(
        "the replacement pod to be bound to Reservation {rname:?} and ready"
    ))
}
