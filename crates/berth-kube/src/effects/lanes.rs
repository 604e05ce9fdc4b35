//! Which effects may start now: one lane per object (its effects run in the order the core
//! emitted them), a bound on binds in flight, a newer status write replacing an older one
//! still waiting in the same lane, and a preemption victim's deletion held until the
//! Reservation holding its room was created. Pure bookkeeping, so the rules are tested
//! without an API server; [`super::Executor`] starts what this says.
//!
//! The last rule orders two lanes: reservation-backed preemption emits the hold's
//! `CreateReservation` and then the victims' deletions, on different objects. Run side by
//! side, a victim could be gone before the Reservation exists, and another pod (another
//! scheduler's, or one berth places from a watch event that came first) could take the room
//! in between. So a victim's deletion that names a hold waits until everything the hold's lane
//! held when the deletion was cleared has finished (the creation answered, whatever the
//! answer: a refused hold leaves kube-scheduler's plain preemption, which deletes anyway).

use std::collections::VecDeque;

use berth_core::collections::HashMap;
use berth_core::object::{Kind, ObjectKey};
use berth_core::Effect;

/// An effect cleared to start, with the lane it belongs to.
pub type Ready = (Option<ObjectKey>, Effect);

/// The lanes.
#[derive(Debug)]
pub struct Lanes {
    /// Objects with an effect running; the effects queued behind it.
    busy: HashMap<ObjectKey, VecDeque<Effect>>,
    /// The effects queued in `busy`, counted as they come and go: the driver asks after
    /// every round, and summing the lanes then cost a walk of every busy object.
    queued_behind: usize,
    binds_running: usize,
    /// Binds cleared by their lane but waiting for a slot.
    binds_waiting: VecDeque<Ready>,
    max_binds: usize,
    /// Effects cleared by their own lane but waiting for another's (a victim's deletion for
    /// its hold's creation), by the lane they wait for.
    gated: HashMap<ObjectKey, Vec<Gated>>,
    /// The effects in `gated`.
    gated_count: usize,
}

/// An effect waiting for another lane.
#[derive(Debug)]
struct Gated {
    /// Effects of the awaited lane still to finish (running or queued when this one was
    /// cleared).
    ahead: usize,
    /// The effect's own lane (busy meanwhile, so its later effects stay behind it).
    key: ObjectKey,
    effect: Effect,
}

/// Whether `effect` is the event saying an object was scheduled: it is published only once
/// the write that placed the object (the pod's bind, the reservation's status) succeeded,
/// so it waits in its object's lane, behind that write.
pub fn is_scheduled_event(effect: &Effect) -> bool {
    matches!(effect, Effect::Record(r) if r.reason == "Scheduled")
}

/// The object an effect is about, for ordering; events are unordered, but for
/// [`is_scheduled_event`]'s.
pub fn key_of(effect: &Effect) -> Option<ObjectKey> {
    match effect {
        Effect::Record(r) if r.reason == "Scheduled" => Some(r.involved.clone()),
        Effect::Bind { pod, .. }
        | Effect::PodCondition { pod, .. }
        | Effect::NominatePod { pod, .. }
        | Effect::AnnotatePod { pod, .. }
        | Effect::BindVolume { pod, .. }
        | Effect::ProvisionClaim { pod, .. }
        | Effect::UpdateClaimStatus { pod, .. } => Some(pod.clone()),
        Effect::ReservationStatus { name, .. } | Effect::AnnotateReservation { name, .. } => {
            Some(ObjectKey::cluster(Kind::Reservation, name))
        }
        Effect::CreateReservation(r) => Some(ObjectKey::cluster(
            Kind::Reservation,
            r.metadata.name.as_deref().unwrap_or(""),
        )),
        Effect::Delete { key, .. } => Some(key.clone()),
        Effect::DeallocateClaim { claim } => Some(ObjectKey::new(
            Kind::ResourceClaim,
            claim.metadata.namespace.as_deref().unwrap_or("default"),
            claim.metadata.name.as_deref().unwrap_or(""),
        )),
        _ => None,
    }
}

/// The lane an effect must wait for, besides its own: a preemption victim's deletion waits
/// for its hold's.
pub fn after_of(effect: &Effect) -> Option<ObjectKey> {
    match effect {
        Effect::Delete {
            preemption: Some(p),
            ..
        } => p
            .hold
            .as_deref()
            .map(|h| ObjectKey::cluster(Kind::Reservation, h)),
        _ => None,
    }
}

impl Lanes {
    /// Lanes allowing `max_binds` binds in flight (at least one).
    pub fn new(max_binds: usize) -> Self {
        Self {
            busy: HashMap::default(),
            queued_behind: 0,
            binds_running: 0,
            binds_waiting: VecDeque::new(),
            max_binds: max_binds.max(1),
            gated: HashMap::default(),
            gated_count: 0,
        }
    }

    /// Takes an effect; returns it if it may start now.
    pub fn submit(&mut self, effect: Effect) -> Option<Ready> {
        let Some(key) = key_of(&effect) else {
            return Some((None, effect));
        };
        if let Some(queue) = self.busy.get_mut(&key) {
            if let Effect::ReservationStatus { .. } = effect {
                if let Some(last @ Effect::ReservationStatus { .. }) = queue.back_mut() {
                    *last = effect;
                    return None;
                }
            }
            queue.push_back(effect);
            self.queued_behind += 1;
            return None;
        }
        self.busy.insert(key.clone(), VecDeque::new());
        self.clear(key, effect)
    }

    /// An effect of `key`'s lane (a bind if `bind`) finished; returns what may start now.
    pub fn done(&mut self, key: Option<&ObjectKey>, bind: bool) -> Vec<Ready> {
        let mut ready = Vec::new();
        if bind {
            self.binds_running = self.binds_running.saturating_sub(1);
            if let Some(next) = self.binds_waiting.pop_front() {
                self.binds_running += 1;
                ready.push(next);
            }
        }
        if let Some(key) = key {
            match self.busy.get_mut(key).and_then(VecDeque::pop_front) {
                Some(next) => {
                    self.queued_behind -= 1;
                    ready.extend(self.clear(key.clone(), next));
                }
                None => {
                    self.busy.remove(key);
                }
            }
            self.release(key, &mut ready);
        }
        ready
    }

    /// One effect of `key`'s lane finished: what waited for it, and for nothing more, may
    /// start (all of it once the lane is idle).
    fn release(&mut self, key: &ObjectKey, ready: &mut Vec<Ready>) {
        let Some(waiting) = self.gated.get_mut(key) else {
            return;
        };
        let idle = !self.busy.contains_key(key);
        let mut still = Vec::with_capacity(waiting.len());
        let mut free = Vec::new();
        for mut g in waiting.drain(..) {
            g.ahead = g.ahead.saturating_sub(1);
            if g.ahead == 0 || idle {
                free.push(g);
            } else {
                still.push(g);
            }
        }
        if still.is_empty() {
            self.gated.remove(key);
        } else {
            *waiting = still;
        }
        for g in free {
            self.gated_count -= 1;
            ready.extend(self.start(g.key, g.effect));
        }
    }

    /// `effect` is at the head of `key`'s lane: it starts, unless it waits for another
    /// lane or for a bind slot.
    fn clear(&mut self, key: ObjectKey, effect: Effect) -> Option<Ready> {
        if let Some(after) = after_of(&effect).filter(|a| *a != key) {
            if let Some(queue) = self.busy.get(&after) {
                let ahead = 1 + queue.len();
                self.gated
                    .entry(after)
                    .or_default()
                    .push(Gated { ahead, key, effect });
                self.gated_count += 1;
                return None;
            }
        }
        self.start(key, effect)
    }

    fn start(&mut self, key: ObjectKey, effect: Effect) -> Option<Ready> {
        if matches!(effect, Effect::Bind { .. }) {
            if self.binds_running >= self.max_binds {
                self.binds_waiting.push_back((Some(key), effect));
                return None;
            }
            self.binds_running += 1;
        }
        Some((Some(key), effect))
    }

    /// Effects queued behind others or waiting for a bind slot or another lane.
    pub fn queued(&self) -> usize {
        self.binds_waiting.len() + self.queued_behind + self.gated_count
    }

    /// Binds running or waiting for a slot.
    pub fn binds(&self) -> usize {
        self.binds_running + self.binds_waiting.len()
    }

    /// Binds sent (or waiting for the client's rate limiter) and not yet answered.
    pub fn binds_running(&self) -> usize {
        self.binds_running
    }

    /// Bind slots free: how many more binds may start before the bound is reached.
    pub fn free_slots(&self) -> usize {
        if self.binds_waiting.is_empty() {
            self.max_binds.saturating_sub(self.binds_running)
        } else {
            0
        }
    }

    /// Whether binds wait for a slot (the driver holds new cycles back until they do not).
    pub fn saturated(&self) -> bool {
        self.free_slots() == 0
    }

    /// Whether `key`'s lane has an effect running or queued.
    pub fn busy(&self, key: &ObjectKey) -> bool {
        self.busy.contains_key(key)
    }

    /// A PreBind write of the pod `key` (incarnation `uid`) failed: the writes of that
    /// binding still queued in its lane (further PreBind writes, the bind) are dropped, so the
    /// pod is not bound after a failed PreBind. Returns how many.
    pub fn abandon_binding(&mut self, key: &ObjectKey, uid: &str) -> usize {
        let Some(queue) = self.busy.get_mut(key) else {
            return 0;
        };
        let before = queue.len();
        queue.retain(|e| {
            !matches!(e,
                Effect::Bind { uid: u, .. }
                | Effect::BindVolume { uid: u, .. }
                | Effect::ProvisionClaim { uid: u, .. }
                | Effect::UpdateClaimStatus { uid: u, .. } if u == uid)
        });
        let dropped = before - queue.len();
        self.queued_behind -= dropped;
        dropped
    }

    /// Takes out the binds to `node` that have not started (waiting for a slot, or queued
    /// behind another effect of their pod): the node was deleted, and the API server would
    /// bind a pod to a node that does not exist. Returns them, and what their removal lets
    /// start.
    pub fn drop_binds_to(&mut self, node: &str) -> (Vec<Effect>, Vec<Ready>) {
        let to_node = |e: &Effect| matches!(e, Effect::Bind { node: n, .. } if n == node);
        let mut dropped = Vec::new();
        let mut freed = Vec::new();
        let mut keep = VecDeque::with_capacity(self.binds_waiting.len());
        for (key, effect) in self.binds_waiting.drain(..) {
            if to_node(&effect) {
                dropped.push(effect);
                freed.extend(key);
            } else {
                keep.push_back((key, effect));
            }
        }
        self.binds_waiting = keep;
        for queue in self.busy.values_mut() {
            if !queue.iter().any(to_node) {
                continue;
            }
            for effect in std::mem::take(queue) {
                if to_node(&effect) {
                    self.queued_behind -= 1;
                    dropped.push(effect);
                } else {
                    queue.push_back(effect);
                }
            }
        }
        let mut ready = Vec::new();
        for key in freed {
            // The dropped bind headed its lane: the lane moves on as if it had finished.
            ready.extend(self.done(Some(&key), false));
        }
        (dropped, ready)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use berth_api::reservation::{ReservationPhase, ReservationStatus};
    use std::collections::BTreeMap;

    fn bind(pod: &str) -> Effect {
        Effect::Bind {
            pod: ObjectKey::pod("default", pod),
            uid: format!("uid-{pod}"),
            node: "n1".into(),
            annotations: BTreeMap::new(),
        }
    }

    fn condition(pod: &str, message: &str) -> Effect {
        Effect::PodCondition {
            pod: ObjectKey::pod("default", pod),
            status: "False",
            reason: "Unschedulable".into(),
            message: message.into(),
        }
    }

    fn status(name: &str, phase: ReservationPhase) -> Effect {
        let s = ReservationStatus {
            phase: Some(phase),
            ..ReservationStatus::default()
        };
        Effect::ReservationStatus {
            name: name.into(),
            uid: "u".into(),
            status: s,
        }
    }

    fn claim_status(pod: &str, uid: &str) -> Effect {
        Effect::UpdateClaimStatus {
            pod: ObjectKey::pod("default", pod),
            uid: uid.into(),
            node: "n1".into(),
            claim: std::sync::Arc::new(berth_api::dra::ResourceClaim::default()),
        }
    }

    #[test]
    fn a_failed_prebind_write_drops_the_rest_of_its_binding() {
        let mut l = Lanes::new(8);
        let a = ObjectKey::pod("default", "a");
        assert!(l.submit(claim_status("a", "uid-a")).is_some());
        assert!(l.submit(claim_status("a", "uid-a")).is_none());
        assert!(l.submit(bind("a")).is_none());
        // A later incarnation's condition stays.
        assert!(l.submit(condition("a", "later")).is_none());
        assert_eq!(l.queued(), 3);
        assert_eq!(l.abandon_binding(&a, "uid-a"), 2);
        assert_eq!(l.queued(), 1);
        let next = l.done(Some(&a), false);
        assert!(
            matches!(next.as_slice(), [(_, Effect::PodCondition { .. })]),
            "{next:?}"
        );
        assert_eq!(l.binds(), 0, "the dropped bind took no slot");
        assert!(l.done(Some(&a), false).is_empty());
        assert!(!l.busy(&a));
    }

    #[test]
    fn one_object_one_effect_at_a_time_in_order() {
        let mut l = Lanes::new(8);
        assert!(l.submit(condition("a", "first")).is_some());
        assert!(l.submit(condition("a", "second")).is_none());
        assert!(l.submit(bind("a")).is_none());
        // Another pod is not held up.
        assert!(l.submit(condition("b", "x")).is_some());
        let key = ObjectKey::pod("default", "a");
        let next = l.done(Some(&key), false);
        assert!(
            matches!(&next[..], [(_, Effect::PodCondition { message, .. })] if message == "second")
        );
        let next = l.done(Some(&key), false);
        assert!(matches!(&next[..], [(_, Effect::Bind { .. })]));
        assert!(l.done(Some(&key), true).is_empty());
        assert_eq!(l.queued(), 0);
        assert_eq!(l.binds(), 0);
    }

    #[test]
    fn binds_past_the_bound_wait_for_a_slot() {
        let mut l = Lanes::new(2);
        assert!(l.submit(bind("a")).is_some());
        assert!(l.submit(bind("b")).is_some());
        assert!(l.saturated());
        assert!(l.submit(bind("c")).is_none());
        assert_eq!(l.binds(), 3);
        let next = l.done(Some(&ObjectKey::pod("default", "a")), true);
        assert!(matches!(&next[..], [(Some(k), Effect::Bind { .. })] if &*k.name == "c"));
        assert_eq!(l.binds(), 2);
    }

    #[test]
    fn a_waiting_status_write_is_replaced_by_a_newer_one() {
        let mut l = Lanes::new(2);
        assert!(l.submit(status("r", ReservationPhase::Pending)).is_some());
        assert!(l.submit(status("r", ReservationPhase::Available)).is_none());
        assert!(l.submit(status("r", ReservationPhase::Succeeded)).is_none());
        assert_eq!(l.queued(), 1);
        let next = l.done(Some(&ObjectKey::cluster(Kind::Reservation, "r")), false);
        match &next[..] {
            [(_, Effect::ReservationStatus { status, .. })] => {
                assert_eq!(status.phase, Some(ReservationPhase::Succeeded));
            }
            other => panic!("{other:?}"),
        }
    }

    /// The running count agrees with a walk of the lanes through submits, replacements
    /// and completions in any order.
    #[test]
    fn the_queued_count_matches_the_lanes() {
        let mut l = Lanes::new(2);
        let walk = |l: &Lanes| {
            l.binds_waiting.len()
                + l.busy.values().map(VecDeque::len).sum::<usize>()
                + l.gated.values().map(Vec::len).sum::<usize>()
        };
        let pods = ["a", "b", "c"];
        for round in 0..4 {
            for pod in pods {
                l.submit(condition(pod, "x"));
                l.submit(bind(pod));
                l.submit(status(pod, ReservationPhase::Pending));
                l.submit(status(pod, ReservationPhase::Available));
                l.submit(evict(pod, Some(pod)));
                assert_eq!(l.queued(), walk(&l), "round {round} pod {pod}");
            }
            for pod in pods.iter().rev() {
                let key = ObjectKey::pod("default", pod);
                l.done(Some(&key), round % 2 == 0);
                assert_eq!(l.queued(), walk(&l), "round {round} done {pod}");
                l.done(Some(&ObjectKey::cluster(Kind::Reservation, pod)), false);
                assert_eq!(l.queued(), walk(&l), "round {round} done hold {pod}");
            }
        }
        assert!(l.queued() > 0);
    }

    fn create_hold(name: &str) -> Effect {
        let r: berth_api::reservation::Reservation = serde_json::from_value(serde_json::json!({
            "apiVersion": "scheduling.koordinator.sh/v1alpha1", "kind": "Reservation",
            "metadata": {"name": name},
            "spec": {"template": {"spec": {"containers": []}}, "owners": []}
        }))
        .expect("reservation");
        Effect::CreateReservation(Box::new(r))
    }

    fn delete_reservation(name: &str) -> Effect {
        Effect::Delete {
            key: ObjectKey::cluster(Kind::Reservation, name),
            uid: String::new(),
            resource_version: None,
            preemption: None,
        }
    }

    fn evict(pod: &str, hold: Option<&str>) -> Effect {
        Effect::Delete {
            key: ObjectKey::pod("default", pod),
            uid: format!("uid-{pod}"),
            resource_version: None,
            preemption: Some(berth_core::Preemption {
                preemptor: ObjectKey::pod("default", "high"),
                scheduler: "berth".into(),
                hold: hold.map(str::to_string),
            }),
        }
    }

    fn names(ready: &[Ready]) -> Vec<String> {
        ready
            .iter()
            .map(|(k, e)| {
                let what = match e {
                    Effect::Delete { .. } => "delete",
                    Effect::CreateReservation(_) => "create",
                    Effect::PodCondition { .. } => "condition",
                    _ => "other",
                };
                format!("{what} {}", k.as_ref().map_or("", |k| &*k.name))
            })
            .collect()
    }

    /// The core emits the hold's creation, then the victims' deletions: no victim is
    /// deleted before the creation was answered, and a victim's later effects stay behind
    /// its deletion.
    #[test]
    fn a_victims_deletion_waits_for_its_holds_creation() {
        let mut l = Lanes::new(8);
        let hold = ObjectKey::cluster(Kind::Reservation, "preempt-default-high");
        assert!(l.submit(create_hold("preempt-default-high")).is_some());
        assert!(l.submit(evict("a", Some("preempt-default-high"))).is_none());
        assert!(l.submit(evict("b", Some("preempt-default-high"))).is_none());
        assert!(l.submit(condition("a", "later")).is_none());
        // Unrelated objects are not held up.
        assert!(l.submit(condition("c", "x")).is_some());
        assert_eq!(l.queued(), 3);
        let next = l.done(Some(&hold), false);
        assert_eq!(names(&next), ["delete a", "delete b"]);
        assert_eq!(l.queued(), 1);
        let next = l.done(Some(&ObjectKey::pod("default", "a")), false);
        assert_eq!(names(&next), ["condition a"]);
        assert!(l
            .done(Some(&ObjectKey::pod("default", "b")), false)
            .is_empty());
        assert_eq!(l.queued(), 0);
    }

    /// The hold's lane had an earlier reservation's deletion running and the creation
    /// queued behind it: the victim waits for both.
    #[test]
    fn a_victims_deletion_waits_for_everything_ahead_in_the_holds_lane() {
        let mut l = Lanes::new(8);
        let hold = ObjectKey::cluster(Kind::Reservation, "h");
        assert!(l.submit(delete_reservation("h")).is_some());
        assert!(l.submit(create_hold("h")).is_none());
        assert!(l.submit(evict("a", Some("h"))).is_none());
        let next = l.done(Some(&hold), false);
        assert_eq!(names(&next), ["create h"]);
        // A status write for the hold submitted after the deletion is not waited for.
        assert!(l.submit(status("h", ReservationPhase::Waiting)).is_none());
        let next = l.done(Some(&hold), false);
        let mut got = names(&next);
        got.sort();
        assert_eq!(got, ["delete a", "other h"]);
    }

    #[test]
    fn a_victims_deletion_starts_at_once_when_its_hold_was_created_already() {
        let mut l = Lanes::new(8);
        assert!(l.submit(evict("a", Some("h"))).is_some());
        assert!(l.submit(evict("b", None)).is_some());
        // Behind its own lane, the deletion checks the hold when its turn comes.
        assert!(l.submit(condition("c", "x")).is_some());
        assert!(l.submit(evict("c", Some("h"))).is_none());
        assert!(l.submit(create_hold("h")).is_some());
        let next = l.done(Some(&ObjectKey::pod("default", "c")), false);
        assert!(next.is_empty(), "waits for the creation now in flight");
        let next = l.done(Some(&ObjectKey::cluster(Kind::Reservation, "h")), false);
        assert_eq!(names(&next), ["delete c"]);
    }

    fn event(pod: &str, reason: &str) -> Effect {
        Effect::Record(berth_core::Record {
            involved: ObjectKey::pod("default", pod),
            uid: String::new(),
            type_: "Normal",
            reason: reason.into(),
            message: String::new(),
        })
    }

    #[test]
    fn events_are_never_held() {
        let mut l = Lanes::new(1);
        assert!(l.submit(bind("a")).is_some());
        assert!(matches!(
            l.submit(event("a", "FailedScheduling")),
            Some((None, _))
        ));
    }

    /// `Scheduled` waits for the pod's bind, and only for its own pod's.
    #[test]
    fn the_scheduled_event_waits_behind_its_bind() {
        let mut l = Lanes::new(1);
        assert!(l.submit(bind("a")).is_some());
        assert!(l.submit(event("a", "Scheduled")).is_none());
        assert!(l.submit(event("b", "Scheduled")).is_some());
        let next = l.done(Some(&ObjectKey::pod("default", "a")), true);
        assert!(matches!(&next[..], [(Some(_), Effect::Record(r))] if r.reason == "Scheduled"));
    }

    /// Binds to a deleted node that have not started are taken out; their lanes move on,
    /// the running one is left alone, and the counts stay right.
    #[test]
    fn binds_to_a_deleted_node_that_have_not_started_are_dropped() {
        let mut l = Lanes::new(1);
        let to = |pod: &str, node: &str| Effect::Bind {
            pod: ObjectKey::pod("default", pod),
            uid: format!("uid-{pod}"),
            node: node.into(),
            annotations: BTreeMap::new(),
        };
        assert!(l.submit(to("a", "gone")).is_some());
        assert!(l.submit(to("b", "gone")).is_none());
        assert!(l.submit(event("b", "Scheduled")).is_none());
        assert!(l.submit(to("c", "kept")).is_none());
        assert!(l.submit(condition("d", "x")).is_some());
        assert!(l.submit(to("d", "gone")).is_none());
        assert_eq!(l.binds(), 3);
        let (dropped, ready) = l.drop_binds_to("gone");
        let pods: Vec<_> = dropped
            .iter()
            .filter_map(|e| match e {
                Effect::Bind { pod, .. } => Some(pod.name.to_string()),
                _ => None,
            })
            .collect();
        assert_eq!(pods, ["b", "d"]);
        // b's Scheduled event may go on (the executor drops it: the bind failed).
        assert!(matches!(&ready[..], [(Some(k), Effect::Record(_))] if &*k.name == "b"));
        assert_eq!(l.binds(), 2, "a runs, c waits");
        assert_eq!(l.binds_running(), 1);
        let next = l.done(Some(&ObjectKey::pod("default", "a")), true);
        assert!(matches!(&next[..], [(Some(k), Effect::Bind { .. })] if &*k.name == "c"));
        assert_eq!(
            l.done(Some(&ObjectKey::pod("default", "b")), false).len(),
            0
        );
        assert_eq!(
            l.done(Some(&ObjectKey::pod("default", "d")), false).len(),
            0
        );
        assert_eq!(l.done(Some(&ObjectKey::pod("default", "c")), true).len(), 0);
        assert_eq!(l.queued(), 0);
        assert_eq!(l.binds(), 0);
    }
}
