//! The scheduler's side of Dynamic Reservation Provisioning ([`crate::drp`]): sizing the
//! cycle, the virtual reservation at Reserve, the wait at PreBind, adoption, time-outs.
//!
//! A pod waiting for its Reservation is held like a bind in flight (assumed on its node,
//! with its cycle state for Unreserve) but no `Bind` is asked for until the Reservation is
//! adopted, as kube-scheduler's VolumeBinding PreBind waits for a provisioned volume;
//! other pods keep being scheduled meanwhile.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use berth_api::annotations::{
    AnnotationCodec, ReservationAllocated, ANNOTATION_RESERVATION_ALLOCATED,
};
use berth_api::reservation::{Reservation, ReservationPhase};

use super::{InFlight, Outcome, Scheduler};
use crate::cache::PodState;
use crate::drp::objects;
use crate::drp::template::Template;
use crate::drp::{self, Metrics, TimeoutPolicy};
use crate::effect::Effect;
use crate::framework::CycleState;
use crate::model::node::NodeIdx;
use crate::model::pod::{PodInfo, PodKind};
use crate::object::ObjectKey;
use crate::resources::Resources;
use crate::time::Time;

/// Prefix of a virtual reservation's name: `/` is not allowed in an object name, so no
/// Reservation of the API can collide with one.
pub const VIRTUAL_PREFIX: &str = "virtual/";

/// What a DRP cycle decided to reserve: a virtual reservation of `size` for `template`.
#[derive(Debug)]
pub(super) struct Plan {
    size: Resources,
    template: Template,
}

/// A pod placed into a virtual reservation, waiting for the Reservation to be adopted.
#[derive(Debug)]
pub(super) struct Waiting {
    /// What a bind in flight holds (profile, cycle state, pod, node).
    bind: InFlight,
    /// PreBind's annotations, without the virtual reservation's `reservation-allocated`.
    annotations: BTreeMap<String, String>,
    /// The reservation id it waits for.
    id: Arc<str>,
}

/// One reservation id being provisioned.
#[derive(Debug)]
struct Handshake {
    virtual_name: Arc<str>,
    /// The pod whose requirement asked for it.
    creator: ObjectKey,
    started: Time,
    deadline: Time,
}

/// DRP's state in the scheduler.
#[derive(Debug, Default)]
pub(super) struct DrpState {
    waits: BTreeMap<ObjectKey, Waiting>,
    handshakes: BTreeMap<Arc<str>, Handshake>,
    deadlines: BTreeSet<(Time, Arc<str>)>,
    /// Ids adopted, rolled back or given up: a Reservation carrying one is scheduled like
    /// any other, never adopted.
    retired: BTreeSet<Arc<str>>,
    /// Ids named by the requirement of a pending pod (found so after a restart): a pending
    /// Reservation carrying one waits for that pod's cycle instead of being queued.
    claimed: BTreeMap<Arc<str>, ObjectKey>,
    claims_of: BTreeMap<ObjectKey, Arc<str>>,
    seq: u64,
    metrics: Metrics,
}

impl Scheduler {
    /// DRP's counters and histograms.
    pub fn drp_metrics(&self) -> &Metrics {
        &self.drp.metrics
    }

    /// Pods waiting for their Reservation, with the reservation id each waits for.
    pub fn drp_waiting(&self) -> impl Iterator<Item = (&ObjectKey, &str)> + '_ {
        self.drp.waits.iter().map(|(k, w)| (k, &*w.id))
    }

    /// When the earliest handshake times out.
    pub(super) fn drp_next_timeout(&self) -> Option<Time> {
        self.drp.deadlines.iter().next().map(|(t, _)| *t)
    }

    /// The pod's usable template, when its profile runs the Reservation plugin.
    fn drp_template(&self, profile: usize, pod: &PodInfo) -> Option<Template> {
        if pod.kind != PodKind::Pod {
            return None;
        }
        let prof = &self.profiles[profile];
        if !prof
            .plugins
            .iter()
            .any(|p| p.name() == crate::plugins::names::RESERVATION)
        {
            return None;
        }
        Template::of_pod(pod).ok().flatten()
    }

    /// Whether an Available reservation (real or virtual) names the pod as an owner: then
    /// it allocates from it as usual and nothing is provisioned.
    fn has_owner_reservation(&self, pod: &PodInfo) -> bool {
        let store = &self.cluster.reservations;
        let mut v = Vec::new();
        store.owner_candidates_into(pod, &mut v);
        v.iter().any(|&i| {
            store
                .get(i)
                .is_some_and(|r| r.matchable() && r.owners.matches(pod))
        })
    }

    /// The scheduling cycle's search, sized for DRP when the pod carries a template and no
    /// reservation serves it: first for the template's size, then (the seed: "schedule the
    /// Pod as efficiently as possible") for the pod's own requests.
    pub(super) fn find_node_for(
        &mut self,
        profile: usize,
        pod: &Arc<PodInfo>,
        now: Time,
    ) -> (Outcome, Option<Plan>) {
        let Some(template) = self
            .drp_template(profile, pod)
            .filter(|_| !self.has_owner_reservation(pod))
        else {
            return (self.schedule_pod(profile, pod, now), None);
        };
        let size = template
            .size(&pod.requests, &mut self.cluster.cache.names)
            .unwrap_or(pod.requests);
        if size != pod.requests {
            let mut sized = (**pod).clone();
            sized.requests = size;
            sized.non_zero = sized.non_zero.max(&size);
            if let Outcome::Placed(node, state) = self.schedule_pod(profile, &sized, now) {
                return (Outcome::Placed(node, state), Some(Plan { size, template }));
            }
        }
        match self.schedule_pod(profile, pod, now) {
            Outcome::Placed(node, state) => (
                Outcome::Placed(node, state),
                Some(Plan {
                    size: pod.requests,
                    template,
                }),
            ),
            failed => (failed, None),
        }
    }

    /// Reserve for a DRP cycle, after every Reserve plugin: places the virtual reservation
    /// of the plan on `node` with the pod as its owner.
    pub(super) fn drp_reserve(
        &mut self,
        state: &mut CycleState,
        pod: &PodInfo,
        node: NodeIdx,
        plan: &Plan,
        now: Time,
    ) -> Result<(), String> {
        // A pod that went through the handshake with an earlier scheduler (a restart) asks
        // for the same id again, so the provisioner never creates two Reservations for it.
        let previous = objects::pod_requirement_id(&pod.pod).unwrap_or_default();
        let reused = Some(Arc::<str>::from(previous.as_str()))
            .filter(|id| !id.is_empty())
            .filter(|id| {
                !self.drp.retired.contains(id)
                    && !self.drp.handshakes.contains_key(id)
                    && !self.drp_id_placed(id)
            });
        let id: Arc<str> = match reused {
            Some(id) => id,
            None => loop {
                self.drp.seq += 1;
                let id: Arc<str> = drp::mint_id(&pod.uid, &previous, now, self.drp.seq).into();
                let taken = self.drp.retired.contains(&id)
                    || self.drp.handshakes.contains_key(&id)
                    || self.drp.claimed.contains_key(&id)
                    || self.drp_id_known(&id);
                if !taken {
                    break id;
                }
            },
        };
        let req = objects::requirement(&id, &plan.size, &self.cluster.cache.names);
        let name = format!("{VIRTUAL_PREFIX}{id}");
        let mut obj = objects::reservation(
            &pod.pod,
            plan.template.owners.clone(),
            &req,
            &name,
            Some(berth_api::GoDuration::new("0s")),
        );
        obj.metadata.uid = Some(name.clone());
        obj.metadata.creation_timestamp = crate::reservation::status::meta_time(now);
        self.cluster.reservations.place_virtual(
            &mut self.cluster.cache,
            Arc::new(obj),
            &id,
            node,
            pod,
            now,
        )?;
        let name: Arc<str> = name.into();
        if let Some(st) = state.reservation.as_deref_mut() {
            st.set_assumed(Some((name.clone(), name.clone())));
        }
        let deadline = now.saturating_add(self.cluster.reservations.settings.drp.timeout);
        self.drp.handshakes.insert(
            id.clone(),
            Handshake {
                virtual_name: name,
                creator: pod.key.clone(),
                started: now,
                deadline,
            },
        );
        self.drp.deadlines.insert((deadline, id));
        Ok(())
    }

    /// The reservation id of the virtual reservation the cycle allocated the pod from, if
    /// it did.
    pub(super) fn drp_virtual_id(&self, state: &CycleState) -> Option<Arc<str>> {
        let (name, _) = state.reservation.as_deref()?.assumed()?;
        self.cluster.reservations.by_name(name)?.virtual_id.clone()
    }

    /// PreBind for a pod allocated from a virtual reservation: its bind waits. The pod that
    /// asked for the reservation (`creator`) gets the requirement annotation.
    pub(super) fn drp_wait(
        &mut self,
        now: Time,
        id: Arc<str>,
        bind: InFlight,
        mut annotations: BTreeMap<String, String>,
        creator: Option<&Plan>,
    ) {
        annotations.remove(ANNOTATION_RESERVATION_ALLOCATED);
        let key = bind.pod.key.clone();
        let uid = bind.pod.uid.clone();
        if let Some(plan) = creator {
            let req = objects::requirement(&id, &plan.size, &self.cluster.cache.names);
            let resources = req
                .resources
                .iter()
                .map(|(n, q)| format!("{n}: {}", q.0))
                .collect::<Vec<_>>()
                .join(", ");
            let mut patch = BTreeMap::new();
            req.insert_into(&mut patch);
            self.effects.push_back(Effect::AnnotatePod {
                pod: key.clone(),
                annotations: patch,
            });
            self.drp.metrics.requests += 1;
            self.record(
                key.clone(),
                &uid,
                "Normal",
                drp::REASON_ATTEMPT,
                format!(
                    "Waiting for reservation {id} ({resources}) to be created on node {}",
                    bind.node_name
                ),
            );
            self.drp_unclaim(&key);
        }
        self.drp.waits.insert(
            key,
            Waiting {
                bind,
                annotations,
                id: id.clone(),
            },
        );
        // After a restart the Reservation may exist already: take it at once.
        if creator.is_some() {
            if let Some(obj) = self.drp_pending_reservation(&id) {
                self.drp_adopt(now, &obj);
            }
        }
    }

    /// Whether a Reservation carrying `id` is known and placed (or finished) already: its
    /// handshake is over, whatever this process remembers.
    fn drp_id_placed(&self, id: &str) -> bool {
        self.cluster.reservations.iter().any(|r| {
            !r.is_virtual()
                && (r.phase != ReservationPhase::Pending || r.node_name.is_some())
                && objects::reservation_id(&r.obj) == Some(id)
        })
    }

    /// Whether any Reservation carrying `id` is known.
    fn drp_id_known(&self, id: &str) -> bool {
        self.cluster
            .reservations
            .iter()
            .any(|r| objects::reservation_id(&r.obj) == Some(id))
    }

    /// Whether the Reservation object says it was placed (a status with a node or a phase
    /// past Pending): such a one is never adopted, only tracked like any other.
    fn placed_object(obj: &Reservation) -> bool {
        obj.status.as_ref().is_some_and(|s| {
            s.node_name.as_deref().is_some_and(|n| !n.is_empty())
                || s.phase
                    .as_ref()
                    .is_some_and(|p| *p != ReservationPhase::Pending)
        })
    }

    /// A pending, unplaced Reservation carrying `id`, if one is known.
    fn drp_pending_reservation(&self, id: &str) -> Option<Arc<Reservation>> {
        self.cluster
            .reservations
            .iter()
            .find(|r| {
                !r.is_virtual()
                    && r.phase == ReservationPhase::Pending
                    && r.node_name.is_none()
                    && !Self::placed_object(&r.obj)
                    && objects::reservation_id(&r.obj) == Some(id)
            })
            .map(|r| r.obj.clone())
    }

    /// A Reservation was applied: when it is new and carries a pending id, it takes the
    /// virtual reservation's place and the pods waiting for it are bound. Returns whether
    /// it was adopted (otherwise it is handled like any other).
    pub(super) fn drp_on_reservation(&mut self, now: Time, obj: &Arc<Reservation>) -> bool {
        let Some(id) = objects::reservation_id(obj) else {
            return false;
        };
        if !self.drp.handshakes.contains_key(id) {
            return false;
        }
        let name = obj.metadata.name.as_deref().unwrap_or("");
        if self.cluster.reservations.idx(name).is_some() || Self::placed_object(obj) {
            return false;
        }
        self.drp_adopt(now, obj)
    }

    fn drp_adopt(&mut self, now: Time, obj: &Arc<Reservation>) -> bool {
        let Some(id) = objects::reservation_id(obj).map(Arc::<str>::from) else {
            return false;
        };
        let Some(hs) = self.drp.handshakes.get(&id) else {
            return false;
        };
        let (virtual_name, creator, started) =
            (hs.virtual_name.clone(), hs.creator.clone(), hs.started);
        let name = obj.metadata.name.clone().unwrap_or_default();
        let creator_uid = self
            .drp
            .waits
            .get(&creator)
            .map(|w| w.bind.pod.uid.to_string())
            .unwrap_or_default();
        let idx = match self.cluster.reservations.adopt(
            &mut self.cluster.cache,
            &virtual_name,
            obj.clone(),
            now,
        ) {
            Ok(idx) => idx,
            Err(e) => {
                self.drp.metrics.failures += 1;
                self.record(
                    creator,
                    &creator_uid,
                    "Warning",
                    drp::REASON_FAILED,
                    format!(
                        "Reservation {name} created for reservation id {id} cannot be used: {e}"
                    ),
                );
                return false;
            }
        };
        let real = self
            .cluster
            .reservations
            .get(idx)
            .map(|r| (r.name.clone(), r.uid.clone()));
        self.drp_end(&id);
        self.drp.metrics.created += 1;
        self.drp.metrics.creation_latency.observe(now - started);
        self.drp.metrics.pending_duration.observe(now - started);
        let node = self
            .drp
            .waits
            .get(&creator)
            .map(|w| w.bind.node_name.to_string())
            .unwrap_or_default();
        self.record(
            creator,
            &creator_uid,
            "Normal",
            drp::REASON_CREATED,
            format!("Reservation {name} created for reservation id {id} and placed on node {node}"),
        );
        self.drp_release_waits(now, &id, real);
        true
    }

    /// Forgets handshake `id` (adopted, rolled back or given up) and retires the id.
    fn drp_end(&mut self, id: &Arc<str>) -> Option<Handshake> {
        let hs = self.drp.handshakes.remove(id)?;
        self.drp.deadlines.remove(&(hs.deadline, id.clone()));
        self.drp.retired.insert(id.clone());
        Some(hs)
    }

    /// The pods waiting for `id`, taken out of the waits.
    fn drp_take_waits(&mut self, id: &str) -> Vec<Waiting> {
        let keys: Vec<ObjectKey> = self
            .drp
            .waits
            .iter()
            .filter(|(_, w)| &*w.id == id)
            .map(|(k, _)| k.clone())
            .collect();
        keys.iter()
            .filter_map(|k| self.drp.waits.remove(k))
            .collect()
    }

    /// Binds the pods waiting for `id`, allocated from `reservation` (name, UID) or, with
    /// `None`, from no reservation.
    fn drp_release_waits(
        &mut self,
        now: Time,
        id: &str,
        reservation: Option<(Arc<str>, Arc<str>)>,
    ) {
        for mut w in self.drp_take_waits(id) {
            if let Some(st) = w.bind.state.reservation.as_deref_mut() {
                st.set_assumed(reservation.clone());
            }
            if let Some((name, uid)) = &reservation {
                ReservationAllocated::new(name.to_string(), uid.to_string())
                    .insert_into(&mut w.annotations);
            }
            let pod = w.bind.pod.clone();
            let node_name = w.bind.node_name.clone();
            self.effects.push_back(Effect::Bind {
                pod: pod.key.clone(),
                uid: pod.uid.to_string(),
                node: node_name.to_string(),
                annotations: w.annotations,
            });
            self.record(
                pod.key.clone(),
                &pod.uid,
                "Normal",
                "Scheduled",
                format!("Successfully assigned {} to {}", pod.key, node_name),
            );
            w.bind.state.now = now;
            self.in_flight.insert(pod.key.clone(), w.bind);
        }
    }

    /// Rolls handshake `id` back: the virtual reservation's capacity is released and every
    /// pod waiting for it leaves its node and is queued again, with `message` as its
    /// condition and a `reason` warning.
    fn drp_roll_back(&mut self, now: Time, id: &Arc<str>, reason: &str, message: &str) {
        let Some(hs) = self.drp_end(id) else { return };
        self.drp.metrics.pending_duration.observe(now - hs.started);
        for w in self.drp_take_waits(id) {
            let pod = w.bind.pod.clone();
            self.unassume(now, w.bind);
            self.record(
                pod.key.clone(),
                &pod.uid,
                "Warning",
                reason,
                message.to_string(),
            );
            let pending = self
                .cluster
                .cache
                .pod(&pod.key)
                .is_some_and(|e| e.state == PodState::Pending && e.info.uid == pod.uid);
            if !pending {
                continue;
            }
            self.effects.push_back(Effect::PodCondition {
                pod: pod.key.clone(),
                status: "False",
                reason: "SchedulerError".into(),
                message: message.to_string(),
            });
            self.last_message
                .insert(pod.key.clone(), message.to_string());
            self.queue
                .add(pod.key.clone(), pod.priority, pod.created, now);
        }
        self.cluster
            .reservations
            .drop_virtual(&mut self.cluster.cache, &hs.virtual_name);
    }

    /// Handshakes whose time is up: rolled back, or their pods bound without a reservation,
    /// as [`drp::Settings::timeout_policy`] says.
    pub(super) fn drp_timeouts(&mut self, now: Time) {
        let settings = self.cluster.reservations.settings.drp;
        while let Some((t, id)) = self.drp.deadlines.iter().next().cloned() {
            if t > now {
                break;
            }
            self.drp.metrics.timeouts += 1;
            let waited = go_duration(settings.timeout);
            match settings.timeout_policy {
                TimeoutPolicy::Requeue => {
                    let message = format!(
                        "timed out after {waited} waiting for reservation {id} to be created; rolled back"
                    );
                    self.drp_roll_back(now, &id, drp::REASON_TIMEOUT, &message);
                }
                TimeoutPolicy::BindWithoutReservation => {
                    let Some(hs) = self.drp_end(&id) else {
                        continue;
                    };
                    self.drp.metrics.pending_duration.observe(now - hs.started);
                    let message = format!(
                        "timed out after {waited} waiting for reservation {id} to be created; bound without a reservation"
                    );
                    let keys: Vec<(ObjectKey, Arc<str>)> = self
                        .drp
                        .waits
                        .values()
                        .filter(|w| w.id == id)
                        .map(|w| (w.bind.pod.key.clone(), w.bind.pod.uid.clone()))
                        .collect();
                    for (key, uid) in keys {
                        self.cluster
                            .reservations
                            .forget_owner(&mut self.cluster.cache, &key);
                        self.record(key, &uid, "Warning", drp::REASON_TIMEOUT, message.clone());
                    }
                    self.cluster
                        .reservations
                        .drop_virtual(&mut self.cluster.cache, &hs.virtual_name);
                    self.drp_release_waits(now, &id, None);
                }
            }
        }
    }

    /// A pod was deleted: if it waited, what it held is given back; if it had asked for
    /// the reservation, the handshake is rolled back (no provisioner will act for a pod
    /// that is gone) and the pods that joined it are queued again.
    pub(super) fn drp_pod_deleted(&mut self, now: Time, key: &ObjectKey) {
        self.drp_unclaim(key);
        self.drp_abandon(now, key, "was deleted");
    }

    /// A new version of a waiting pod: shown bound (by someone else, or by a bind whose
    /// answer was lost), finished, or another incarnation, it waits no more (what it held
    /// is given back, as for a bind in flight voided by the watch).
    pub(super) fn drp_settle(&mut self, now: Time, info: &PodInfo) {
        let Some(w) = self.drp.waits.get(&info.key) else {
            return;
        };
        if w.bind.pod.uid == info.uid && !info.terminal && info.node_name.is_none() {
            return;
        }
        self.drp_abandon(now, &info.key, "was bound or replaced while it waited");
    }

    /// `key` waits no more: it leaves its node; if it had asked for the reservation, the
    /// handshake is rolled back (no provisioner acts for a pod that does not wait) and the
    /// pods that joined it are queued again.
    fn drp_abandon(&mut self, now: Time, key: &ObjectKey, what: &str) {
        let Some(w) = self.drp.waits.remove(key) else {
            return;
        };
        let id = w.id.clone();
        self.unassume(now, w.bind);
        let creator = self
            .drp
            .handshakes
            .get(&id)
            .is_some_and(|hs| &hs.creator == key);
        if creator {
            let message = format!("the pod that asked for reservation {id} {what}; rolled back");
            self.drp.metrics.failures += 1;
            self.drp_roll_back(now, &id, drp::REASON_FAILED, &message);
        }
    }

    /// A node is being deleted: handshakes whose virtual reservation is on it fail and roll
    /// back before the node goes.
    pub(super) fn drp_node_deleted(&mut self, now: Time, node: &str) {
        let ids: Vec<Arc<str>> = self
            .drp
            .waits
            .values()
            .filter(|w| &*w.bind.node_name == node)
            .map(|w| w.id.clone())
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        for id in ids {
            self.drp.metrics.failures += 1;
            let message = format!("node {node} of reservation {id} was deleted; rolled back");
            self.drp_roll_back(now, &id, drp::REASON_FAILED, &message);
        }
    }

    /// Notes the requirement id of a pending pod (a handshake begun before a restart).
    pub(super) fn drp_claim(&mut self, info: &PodInfo) {
        let id = (info.node_name.is_none() && !info.terminal)
            .then(|| objects::pod_requirement_id(&info.pod))
            .flatten();
        let old = self.drp.claims_of.get(&info.key).cloned();
        if old.as_deref() == id.as_deref() {
            return;
        }
        self.drp_unclaim(&info.key);
        if let Some(id) = id {
            let id: Arc<str> = id.into();
            self.drp.claimed.insert(id.clone(), info.key.clone());
            self.drp.claims_of.insert(info.key.clone(), id);
        }
    }

    /// The pod no longer claims its id: a Reservation held back for it is queued.
    fn drp_unclaim(&mut self, key: &ObjectKey) {
        let Some(id) = self.drp.claims_of.remove(key) else {
            return;
        };
        self.drp.claimed.remove(&id);
        if let Some(obj) = self.drp_pending_reservation(&id) {
            let name = obj.metadata.name.as_deref().unwrap_or("");
            if let Some(idx) = self.cluster.reservations.idx(name) {
                self.cluster.reservations.enqueue(idx);
            }
        }
    }

    /// Whether the pending Reservation `name` waits for a pod's cycle rather than being
    /// queued: it carries the requirement id of a pending pod, not yet retired.
    pub(super) fn drp_held_back(&self, name: &str) -> bool {
        let Some(r) = self.cluster.reservations.by_name(name) else {
            return false;
        };
        objects::reservation_id(&r.obj)
            .is_some_and(|id| self.drp.claimed.contains_key(id) && !self.drp.retired.contains(id))
    }
}

/// A duration as Go prints it (`10m0s`, `30s`, `1h0m0s`, `1.5s`).
fn go_duration(ms: Time) -> String {
    let (secs, milli) = (ms / 1000, ms % 1000);
    let s = if milli == 0 {
        format!("{}s", secs % 60)
    } else {
        format!(
            "{}.{}s",
            secs % 60,
            format!("{milli:03}").trim_end_matches('0')
        )
    };
    match (secs / 3600, (secs % 3600) / 60) {
        (0, 0) => s,
        (0, m) => format!("{m}m{s}"),
        (h, m) => format!("{h}h{m}m{s}"),
    }
}

#[cfg(test)]
mod tests {
    use super::go_duration;

    #[test]
    fn durations_print_as_go_does() {
        assert_eq!(go_duration(600_000), "10m0s");
        assert_eq!(go_duration(30_000), "30s");
        assert_eq!(go_duration(3_600_000), "1h0m0s");
        assert_eq!(go_duration(1_500), "1.5s");
    }
}
