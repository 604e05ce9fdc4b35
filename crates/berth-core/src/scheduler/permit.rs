//! Permit with waiting, for gangs (kube-scheduler 1.35's GangScheduling, Koordinator's and
//! scheduler-plugins' Coscheduling): a member that fits is assumed on its node (holding what
//! it claimed) and waits here, its bind not asked for, until `min` members of its gang are
//! assumed or bound; then every waiting member binds. A gang that cannot get there holds
//! nothing: its waiting members are rejected (Unreserve, forget, back to the queue) when
//! its time-out passes, when a member cannot be placed (strict mode, the default), when a
//! member's bind fails or a waiting member is deleted.
//!
//! Before a member's cycle, the gang must exist and have at least `min` pods (the upstream
//! PreEnqueue checks, [`crate::plugins::gangscheduling`]); otherwise the pod is
//! unschedulable with the upstream message.
//!
//! A Reservation is a member through its reserve pod (Koordinator v1.7+'s Coscheduling
//! reads the gang labels and annotations of the reserve pod built from its template): it
//! waits here placed, holding its room but neither written nor usable by owners, and is
//! written Available only when its gang is allowed through.

use super::*;
use crate::gang::{GangId, Policy};

/// Members waiting at Permit, per gang.
#[derive(Debug, Default)]
pub(super) struct Permits {
    waiting: BTreeMap<GangId, WaitingGang>,
}

#[derive(Debug)]
struct WaitingGang {
    /// When the waiting members are rejected (the first one's wait plus the time-out).
    deadline: Time,
    /// The time-out itself: no member is said to have waited longer (in a cluster the timer
    /// fires a little after the deadline; kube-scheduler's message names the time-out).
    timeout: Time,
    /// The plugin named in the rejection.
    plugin: &'static str,
    pods: Vec<Waiting>,
}

/// A member waiting at Permit: its decision, as a bind in flight would keep it.
#[derive(Debug)]
struct Waiting {
    bind: InFlight,
    annotations: BTreeMap<String, String>,
    since: Time,
}

impl Permits {
    /// Whether `key` waits at Permit.
    fn is_waiting(&self, key: &ObjectKey) -> bool {
        self.waiting
            .values()
            .any(|g| g.pods.iter().any(|w| w.bind.pod.key == *key))
    }
}

impl Scheduler {
    /// The gang bookkeeping's creation time for `pod`'s queue order: its gang's object's,
    /// so that a gang's members sort together; the pod's own otherwise.
    pub(super) fn queue_created(&self, pod: &PodInfo) -> Time {
        self.gangs
            .gang(&pod.key)
            .and_then(|g| self.gangs.created(g))
            .unwrap_or(pod.created)
    }

    /// Writes `message` as the pod's `PodScheduled=False` (reason Unschedulable) condition
    /// and a `FailedScheduling` event, once per distinct message.
    pub(super) fn say_unschedulable(&mut self, now: Time, pod: &PodInfo, message: String) {
        self.say_failed(now, pod, "Unschedulable", message);
    }

    /// Writes `message` as the pod's `PodScheduled=False` condition with `reason` and a
    /// `FailedScheduling` event, once per distinct message; a Reservation's reserve pod
    /// leaves its Reservation Pending with `Scheduled=False` and the event instead.
    pub(super) fn say_failed(
        &mut self,
        now: Time,
        pod: &PodInfo,
        reason: &'static str,
        message: String,
    ) {
        if self.last_message.get(&pod.key) == Some(&message) {
            return;
        }
        self.last_message.insert(pod.key.clone(), message.clone());
        if let PodKind::ReservePod { reservation } = &pod.kind {
            // A reservation stays Pending with Scheduled=False, as when it does not fit.
            let r = &mut self.cluster.reservations;
            r.unschedulable(reservation, &message, now);
            r.record(
                reservation,
                "Warning",
                "FailedScheduling",
                message,
                &mut self.effects,
            );
            return;
        }
        if !crate::model::pod::scheduled_condition_says(&pod.pod, reason, &message) {
            self.effects.push_back(Effect::PodCondition {
                pod: pod.key.clone(),
                status: "False",
                reason: reason.into(),
                message: message.clone(),
            });
        }
        self.record(
            pod.key.clone(),
            &pod.uid,
            "Warning",
            "FailedScheduling",
            message,
        );
    }

    /// Permit for a pod just reserved on `node`: `Some` (with its gang and policy) when it
    /// is a gang member and fewer than `min` members are assumed or bound, so it must wait.
    pub(super) fn permit_must_wait(&self, pod: &PodInfo) -> Option<(GangId, Policy)> {
        let gang = self.gangs.gang(&pod.key)?;
        let policy = self.gangs.policy(gang, pod).ok()??;
        let placed = self
            .gangs
            .members(gang)
            .filter(|k| self.gang_member_placed(k))
            .count();
        (placed < policy.min as usize).then(|| (gang.clone(), policy))
    }

    /// Whether a gang member is assumed or bound: a pod that left Pending and has not
    /// finished, or a Reservation placed on a node (waiting at Permit, Available, or used
    /// up by its owners).
    pub(super) fn gang_member_placed(&self, key: &ObjectKey) -> bool {
        match key.kind {
            Kind::Reservation => self
                .cluster
                .reservations
                .by_name(&key.name)
                .is_some_and(|r| {
                    r.node_name.is_some()
                        && r.phase != berth_api::reservation::ReservationPhase::Failed
                }),
            _ => self
                .cluster
                .cache
                .pod(key)
                .is_some_and(|e| e.state != PodState::Pending && !e.info.terminal),
        }
    }

    /// Parks a reserved member at Permit: it keeps what it holds, its queue entry stays in
    /// flight, and the gang's other unscheduled members are activated (as
    /// `handle.Activate` does upstream) so that the gang forms quickly.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn wait_at_permit(
        &mut self,
        profile: usize,
        state: &mut CycleState,
        pod: &Arc<PodInfo>,
        node: NodeIdx,
        now: Time,
        annotations: BTreeMap<String, String>,
        gang: GangId,
        policy: Policy,
    ) {
        let node_name: Arc<str> = self
            .cluster
            .cache
            .node(node)
            .map(|n| n.name.clone())
            .unwrap_or_else(|| "".into());
        let bind = InFlight {
            profile,
            state: std::mem::take(state),
            pod: pod.clone(),
            node,
            node_name,
            attempts: self.queue.attempts(&pod.key),
        };
        if let PodKind::ReservePod { reservation } = &pod.kind {
            self.cluster.reservations.permit_wait(reservation);
        }
        let members: BTreeSet<ObjectKey> = self.gangs.members(&gang).cloned().collect();
        let entry = self
            .permits
            .waiting
            .entry(gang)
            .or_insert_with(|| WaitingGang {
                deadline: now.saturating_add(policy.timeout),
                timeout: policy.timeout,
                plugin: policy.plugin,
                pods: Vec::new(),
            });
        entry.pods.push(Waiting {
            bind,
            annotations,
            since: now,
        });
        for k in members.iter().filter(|k| **k != pod.key) {
            self.queue.activate(k);
        }
    }

    /// After a member was allowed through Permit: the members of its gang waiting there
    /// are allowed too, and their binds asked for (upstream's `waitingPod.Allow`).
    pub(super) fn allow_waiting(&mut self, now: Time, pod: &PodInfo) {
        let Some(gang) = self.gangs.gang(&pod.key) else {
            return;
        };
        let Some(waiting) = self.permits.waiting.remove(gang) else {
            return;
        };
        for mut w in waiting.pods {
            let b = &mut w.bind;
            // A node deleted meanwhile took its holds along: that member starts over.
            if self.cluster.cache.node_idx(&b.node_name) != Some(b.node) {
                let key = b.pod.key.clone();
                self.unassume(now, w.bind);
                self.queue.failed(&key, false, &[], now);
                continue;
            }
            let pod = b.pod.clone();
            if let PodKind::ReservePod { reservation } = &pod.kind {
                if !self.cluster.reservations.permit_allowed(reservation) {
                    // It ended while it waited (expired, deleted): nothing to write.
                    self.queue.done(&pod.key);
                    continue;
                }
            }
            self.start_binding(
                b.profile,
                &mut b.state,
                &pod,
                b.node,
                now,
                None,
                w.annotations,
            );
        }
    }

    /// Rejects every member of `gang` waiting at Permit: each gives back what it holds
    /// (Unreserve, then it leaves its node) and goes back to the queue as unschedulable,
    /// with `message(member's wait)` as its condition. Returns how many were rejected.
    pub(super) fn reject_waiting(
        &mut self,
        now: Time,
        gang: &GangId,
        plugins: &[&'static str],
        message: &dyn Fn(Time) -> String,
    ) -> usize {
        let Some(waiting) = self.permits.waiting.remove(gang) else {
            return 0;
        };
        let n = waiting.pods.len();
        let plugins = if plugins.is_empty() {
            &[waiting.plugin][..]
        } else {
            plugins
        };
        for w in waiting.pods {
            let pod = w.bind.pod.clone();
            let text = message(now - w.since);
            if pod.is_reserve_pod() {
                // The room a placed reservation gave back, as its pod's deletion would.
                self.requeue(now, ClusterEvent::assigned_pod_deleted(Some(w.bind.node)));
            }
            self.unassume(now, w.bind);
            self.counters.unschedulable += 1;
            self.queue.failed(&pod.key, true, plugins, now);
            self.say_unschedulable(now, &pod, text);
        }
        // The room given back woke the gang's own members: they wait for another event.
        let members: Vec<ObjectKey> = self.gangs.members(gang).cloned().collect();
        for k in &members {
            self.queue.park(k, plugins, now);
            // A member never tried yet says why it waits too.
            let untried = self
                .item(k)
                .filter(|_| self.queue.contains(k) && !self.last_message.contains_key(k));
            if let Some(info) = untried {
                self.say_unschedulable(now, &info, message(0));
            }
        }
        self.epoch += 1;
        n
    }

    /// A member's cycle failed (no node fits, or an error) and it is not waiting for the
    /// victims of its preemption: in strict mode its gang's waiting members are rejected at
    /// once, as Koordinator's Coscheduling does
    /// (`GangGroup .. gets rejected due to member Pod .. is unschedulable ..`).
    pub(super) fn gang_member_failed(&mut self, now: Time, pod: &PodInfo) {
        let Some(gang) = self.gangs.gang(&pod.key).cloned() else {
            return;
        };
        let Some(n) = self.permits.waiting.get(&gang).map(|g| g.pods.len()) else {
            return;
        };
        let strict = matches!(self.gangs.policy(&gang, pod), Ok(Some(p)) if p.strict);
        // A member nominated by its preemption waits for its victims to go (their deletion
        // takes real time in a cluster): its gang keeps waiting for it, up to the time-out.
        // So does every member while the gang's job-level preemption is under way: the
        // room it evicted for is on its way.
        if !strict
            || self.nominator.node_of(&pod.key).is_some()
            || self.gang_preemption_under_way(&gang)
        {
            return;
        }
        let reason = self.last_message.get(&pod.key).cloned().unwrap_or_default();
        let plugins = self.queue.rejected_by(&pod.key).to_vec();
        let text = format!(
            "GangGroup {:?} gets rejected due to member Pod {:?} is unschedulable with reason {reason:?}, alreadyWaitForBound: {n}",
            gang.to_string(),
            pod.key.to_string(),
        );
        self.reject_waiting(now, &gang, &plugins, &|_| text.clone());
    }

    /// A member's bind failed, or a member was deleted: its Unreserve rejects the members
    /// of its gang still waiting at Permit (strict mode), as Koordinator's does.
    pub(super) fn gang_member_unreserved(&mut self, now: Time, key: &ObjectKey) {
        let Some(gang) = self.gangs.gang(key).cloned() else {
            return;
        };
        if !self.permits.waiting.contains_key(&gang) {
            return;
        }
        let strict = self
            .cluster
            .cache
            .pod(key)
            .map(|e| e.info.clone())
            .is_none_or(|p| matches!(self.gangs.policy(&gang, &p), Ok(Some(p)) if p.strict));
        if !strict {
            return;
        }
        let text = format!(
            "Gang {:?} gets rejected due to Pod {:?} in Unreserve",
            gang.to_string(),
            key.name.as_ref()
        );
        self.reject_waiting(now, &gang, &[], &|_| text.clone());
    }

    /// A waiting member was deleted: it gives back what it held; the rest of its gang is
    /// rejected in strict mode. Returns whether it was waiting.
    pub(super) fn permit_pod_deleted(&mut self, now: Time, key: &ObjectKey) -> bool {
        let Some(gang) = self.gangs.gang(key).cloned() else {
            return false;
        };
        let Some(g) = self.permits.waiting.get_mut(&gang) else {
            return false;
        };
        let Some(i) = g.pods.iter().position(|w| w.bind.pod.key == *key) else {
            return false;
        };
        let w = g.pods.remove(i);
        if g.pods.is_empty() {
            self.permits.waiting.remove(&gang);
        }
        self.unassume(now, w.bind);
        self.gang_member_unreserved(now, key);
        true
    }

    /// When the earliest gang time-out is due.
    pub(super) fn permit_next_timeout(&self) -> Option<Time> {
        self.permits.waiting.values().map(|g| g.deadline).min()
    }

    /// Rejects the waiting members of every gang whose time-out passed, with
    /// kube-scheduler's `rejected due to timeout after waiting 5m0s at plugin ..`.
    pub(super) fn permit_timeouts(&mut self, now: Time) {
        let due: Vec<(GangId, &'static str, Time)> = self
            .permits
            .waiting
            .iter()
            .filter(|(_, g)| g.deadline <= now)
            .map(|(id, g)| (id.clone(), g.plugin, g.timeout))
            .collect();
        for (gang, plugin, timeout) in due {
            self.reject_waiting(now, &gang, &[plugin], &|waited| {
                format!(
                    "rejected due to timeout after waiting {} at plugin {plugin}",
                    berth_api::duration::format_duration_millis(waited.min(timeout))
                )
            });
        }
    }

    /// Where the gang of `key` stands (`None` when it is in no gang): its members placed
    /// against its minimum, those waiting at Permit, and those not placed with why.
    pub fn gang_report(&self, key: &ObjectKey) -> Option<crate::gang::Report> {
        let gang = self.gangs.gang(key)?;
        let member = self
            .item(key)
            .or_else(|| self.cluster.cache.pod(key).map(|e| e.info.clone()));
        let min = member
            .and_then(|p| self.gangs.policy(gang, &p).ok().flatten())
            .map(|p| p.min);
        let plugin = match gang.api {
            crate::gang::Api::Workload => crate::gang::GANG_SCHEDULING,
            _ => crate::gang::COSCHEDULING,
        };
        let name = |k: &ObjectKey| match k.kind {
            Kind::Reservation => format!("reservation {}", k.name),
            _ => k.to_string(),
        };
        let mut report = crate::gang::Report {
            gang: gang.to_string(),
            plugin,
            min,
            members: self.gangs.member_count(gang),
            placed: Vec::new(),
            waiting: Vec::new(),
            unplaced: Vec::new(),
        };
        for k in self.gangs.members(gang) {
            if self.gang_member_placed(k) {
                report.placed.push(name(k));
                if self.permits.is_waiting(k) {
                    report.waiting.push(name(k));
                }
            } else {
                // A Workload's member held back at PreEnqueue has no condition: say why.
                let why = self.last_message.get(k).cloned().or_else(|| {
                    let info = self.item(k)?;
                    self.gangs.held_back(gang, &info)
                });
                report.unplaced.push((name(k), why.unwrap_or_default()));
            }
        }
        Some(report)
    }

    /// Whether `key` waits at Permit (its bind not asked for yet).
    pub fn waits_at_permit(&self, key: &ObjectKey) -> bool {
        self.permits.is_waiting(key)
    }

    /// A pod was applied: it joins its gang; when that gives the gang its `min` pods, the
    /// members turned away for too few pods are retried.
    pub(super) fn gang_pod_applied(&mut self, now: Time, info: &PodInfo) {
        let before = self
            .gangs
            .gang(&info.key)
            .map(|g| self.gangs.member_count(g));
        let Some(gang) = self.gangs.pod_applied(info) else {
            return;
        };
        let count = self.gangs.member_count(&gang);
        if before == Some(count) || info.node_name.is_some() {
            return;
        }
        let enough = match self.gangs.policy(&gang, info) {
            Ok(Some(p)) => count >= p.min as usize,
            _ => false,
        };
        if enough {
            self.wake_gang(now, &gang);
        }
    }

    /// A Reservation was applied: its reserve pod joins the gang its template names.
    pub(super) fn gang_reservation_applied(&mut self, now: Time, name: &str) {
        let item = self
            .cluster
            .reservations
            .by_name(name)
            .and_then(|r| r.item.clone());
        if let Some(item) = item {
            self.gang_pod_applied(now, &item);
        }
    }

    /// A Reservation is about to be forgotten: if it waited at Permit it gives back its
    /// room (and its gang's waiting members are rejected in strict mode); it leaves its gang.
    pub(super) fn gang_reservation_deleted(&mut self, now: Time, name: &str) {
        let key = self
            .cluster
            .reservations
            .by_name(name)
            .and_then(|r| r.item.as_ref())
            .map(|i| i.key.clone());
        if let Some(key) = key {
            self.permit_pod_deleted(now, &key);
            self.gangs.pod_deleted(&key);
        }
    }

    /// Retries a gang's members that wait in the unschedulable pool.
    fn wake_gang(&mut self, now: Time, gang: &GangId) {
        let members: BTreeSet<ObjectKey> = self.gangs.members(gang).cloned().collect();
        self.queue.move_matching(now, |k, _| members.contains(k));
    }

    /// A PodGroup or Workload was created, changed or deleted: the members of the gangs in
    /// its namespace waiting in the pool are retried.
    pub(super) fn gang_object_changed(&mut self, now: Time, namespace: &str) {
        let gangs = &self.gangs;
        self.queue.move_matching(now, |k, _| {
            gangs.gang(k).is_some_and(|g| &*g.namespace == namespace)
        });
    }
}
