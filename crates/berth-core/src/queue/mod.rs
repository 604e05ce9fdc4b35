//! The scheduling queue: active heap, back-off and the unschedulable pool.
//!
//! Order in the active heap is kube-scheduler's `PrioritySort`: higher priority first, then
//! earlier creation, then arrival order (so equal pods keep FIFO order and runs are
//! deterministic). A pod that failed waits in the unschedulable pool until a cluster event
//! could make it fit ([`SchedulingQueue::move_all`]) or until it has waited
//! [`UNSCHEDULABLE_MAX_WAIT`]; it then goes to back-off (1s doubling to 10s) or, when its
//! back-off is over, straight to active. Like kube-scheduler's `SchedulerPopFromBackoffQ`,
//! when the active heap is empty a pod still backing off may be popped early.

use crate::collections::HashMap;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

use crate::object::ObjectKey;
use crate::time::{Time, MINUTE, SECOND};

pub mod hints;
mod unschedulable;

use unschedulable::{Slot, UnschedulablePool};

/// First back-off after a failure.
pub const INITIAL_BACKOFF: Time = SECOND;
/// Longest back-off.
pub const MAX_BACKOFF: Time = 10 * SECOND;
/// Longest stay in the unschedulable pool without a retry (`podMaxInUnschedulablePodsDuration`).
pub const UNSCHEDULABLE_MAX_WAIT: Time = 5 * MINUTE;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Where {
    Active,
    Backoff,
    Unschedulable,
    /// Popped, being scheduled or waiting for its bind to be confirmed.
    InFlight,
}

#[derive(Debug, Clone)]
struct Entry {
    priority: i32,
    created: Time,
    seq: u64,
    attempts: u32,
    last_attempt: Time,
    since: Time,
    place: Where,
    /// Plugins that rejected the item last time, for queueing hints.
    plugins: Vec<&'static str>,
    /// The [`hints::kind`] bits of the events those plugins registered: only such events
    /// look at the item while it is unschedulable.
    interest: u32,
    /// The scheduler's epoch at the item's last failure, when a cycle run again with no
    /// change in between would fail the same way, and the random draws that cycle made
    /// ([`SchedulingQueue::remember_failure`]).
    replay: Option<(u64, u64)>,
    /// Generation for lazy deletion from the heaps.
    gen: u64,
    /// The last cycle ended in an error (a plugin's error), not a verdict: its back-off is
    /// waited out in full (kube-scheduler's `podErrorBackoffQ`).
    errored: bool,
}

impl Entry {
    fn slot(&self) -> Slot {
        Slot {
            seq: self.seq,
            since: self.since,
            interest: self.interest,
        }
    }

    fn backoff_until(&self) -> Time {
        if self.attempts == 0 {
            return self.last_attempt;
        }
        let shift = (self.attempts - 1).min(16);
        let d = INITIAL_BACKOFF.saturating_mul(1 << shift).min(MAX_BACKOFF);
        self.last_attempt.saturating_add(d)
    }
}

type ActiveKey = (Reverse<i32>, Time, u64);

/// Why items left the unschedulable pool, for benchmarks: the events that may have made
/// them fit, or the maximum wait (which should stay the exception).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct QueueStats {
    /// Items a cluster event moved.
    pub moved_by_event: u64,
    /// Items moved after [`UNSCHEDULABLE_MAX_WAIT`] without a helpful event.
    pub moved_by_max_wait: u64,
}

/// How many items wait in each part of the queue.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct QueueLengths {
    /// Ready to be tried.
    pub active: usize,
    /// Waiting out a back-off after a failed attempt.
    pub backoff: usize,
    /// Waiting for a cluster event that may make them fit.
    pub unschedulable: usize,
}

/// The queue of pods (and reservations) waiting to be scheduled.
#[derive(Debug, Default, Clone)]
pub struct SchedulingQueue {
    entries: HashMap<ObjectKey, Entry>,
    /// The entries whose place is [`Where::Unschedulable`], indexed.
    pool: UnschedulablePool,
    active: BinaryHeap<Reverse<(ActiveKey, u64, ObjectKey)>>,
    backoff: BinaryHeap<Reverse<(Time, u64, u64, ObjectKey)>>,
    /// Back-off of items whose last cycle erred. Never popped early: a cycle that errs (a
    /// Filter/Reserve disagreement) would otherwise be retried at once, erring again at the
    /// same instant, forever, whenever nothing else is active.
    error_backoff: BinaryHeap<Reverse<(Time, u64, u64, ObjectKey)>>,
    seq: u64,
    gen: u64,
    stats: QueueStats,
    /// What the profiles' plugins registered: which events can help which item.
    hints: hints::QueueingHints,
}

impl SchedulingQueue {
    /// An empty queue that asks `hints` which events can help an item (kube-scheduler
    /// builds its queue with the profiles' `queueingHintMap`). A queue built with
    /// `default()` knows no plugin: any rejection waits for every event but NUMA ones.
    pub fn new(hints: hints::QueueingHints) -> Self {
        Self {
            hints,
            ..Self::default()
        }
    }

    /// Adds a new item to active, or refreshes an existing one (an update to a queued pod
    /// moves it out of the unschedulable pool, as kube-scheduler does).
    pub fn add(&mut self, key: ObjectKey, priority: i32, created: Time, now: Time) {
        if let Some(e) = self.entries.get_mut(&key) {
            let changed = e.priority != priority;
            e.replay = None;
            e.priority = priority;
            e.created = created;
            match e.place {
                Where::Unschedulable => self.requeue(&key, now),
                Where::Active if changed => self.push_active(&key),
                _ => {}
            }
            return;
        }
        self.seq += 1;
        let entry = Entry {
            priority,
            created,
            seq: self.seq,
            attempts: 0,
            last_attempt: now,
            since: now,
            place: Where::Active,
            plugins: Vec::new(),
            interest: hints::kind::ALL,
            replay: None,
            gen: 0,
            errored: false,
        };
        self.entries.insert(key.clone(), entry);
        self.push_active(&key);
    }

    /// Puts an item whose bind failed back, in back-off after `attempts` attempts (as long
    /// as a failed cycle would wait), and no other: the active heap is left as it is. With
    /// `wait_out`, the back-off is waited out in full (never popped early, like a cycle
    /// that errs); otherwise the item stays eligible for an early pop.
    pub fn add_backoff(
        &mut self,
        key: ObjectKey,
        priority: i32,
        created: Time,
        attempts: u32,
        now: Time,
        wait_out: bool,
    ) {
        self.seq += 1;
        let entry = Entry {
            priority,
            created,
            seq: self.seq,
            attempts: attempts.max(1),
            last_attempt: now,
            since: now,
            place: Where::Backoff,
            plugins: Vec::new(),
            interest: hints::kind::ALL,
            replay: None,
            gen: 0,
            errored: wait_out,
        };
        self.leave_pool(&key);
        self.entries.insert(key.clone(), entry);
        self.push_backoff(&key);
    }

    /// How many times the item was popped.
    pub fn attempts(&self, key: &ObjectKey) -> u32 {
        self.entries.get(key).map_or(0, |e| e.attempts)
    }

    /// Removes an item wherever it is.
    pub fn delete(&mut self, key: &ObjectKey) {
        self.leave_pool(key);
        self.entries.remove(key);
    }

    /// Whether the item is known to the queue (queued or in flight).
    pub fn contains(&self, key: &ObjectKey) -> bool {
        self.entries.contains_key(key)
    }

    /// Pops the next item to schedule; it stays known as in flight until
    /// [`SchedulingQueue::done`] or [`SchedulingQueue::failed`].
    pub fn pop(&mut self) -> Option<ObjectKey> {
        while let Some(Reverse((_, gen, key))) = self.active.pop() {
            let Some(e) = self.entries.get_mut(&key) else {
                continue;
            };
            if e.gen != gen || e.place != Where::Active {
                continue;
            }
            e.place = Where::InFlight;
            e.attempts += 1;
            return Some(key);
        }
        None
    }

    /// The item was placed; the queue forgets it.
    pub fn done(&mut self, key: &ObjectKey) {
        self.leave_pool(key);
        self.entries.remove(key);
    }

    /// The item could not be placed. `unschedulable` items wait for a cluster event; others
    /// (errors) go to back-off.
    pub fn failed(
        &mut self,
        key: &ObjectKey,
        unschedulable: bool,
        plugins: &[&'static str],
        now: Time,
    ) {
        self.leave_pool(key);
        let Some(e) = self.entries.get_mut(key) else {
            return;
        };
        e.plugins.clear();
        e.plugins.extend_from_slice(plugins);
        e.interest = self.hints.interest(plugins);
        e.replay = None;
        e.last_attempt = now;
        e.since = now;
        e.errored = !unschedulable;
        if unschedulable {
            self.enter_pool(key);
        } else {
            self.push_backoff(key);
        }
    }

    /// A cluster event may have made unschedulable items fit: move them all to back-off or
    /// active.
    pub fn move_all(&mut self, now: Time) {
        self.move_if(now, |_| true);
    }

    /// Like [`SchedulingQueue::move_all`], for the items whose rejecting plugins satisfy
    /// `hint` (kube-scheduler's queueing hints, coarse: an event names the plugins it can
    /// help).
    pub fn move_if(&mut self, now: Time, hint: impl Fn(&[&'static str]) -> bool) {
        self.move_matching(now, |_, plugins| hint(plugins));
    }

    /// Like [`SchedulingQueue::move_if`], with the item's key (for hints that look at the
    /// pod, see [`hints`]). Returns how many items moved.
    pub fn move_matching(
        &mut self,
        now: Time,
        mut hint: impl FnMut(&ObjectKey, &[&'static str]) -> bool,
    ) -> usize {
        let candidates = self.pool.all();
        self.move_candidates(now, candidates, &mut hint)
    }

    /// Like [`SchedulingQueue::move_matching`] for an event of [`hints::kind`] bits
    /// `kinds`: only the items whose rejecting plugins registered one of them are looked
    /// at (`hint` is not asked about the others, and must answer false for them).
    pub fn move_concerned(
        &mut self,
        now: Time,
        kinds: u32,
        mut hint: impl FnMut(&ObjectKey, &[&'static str]) -> bool,
    ) -> usize {
        let candidates = self.pool.concerned(kinds);
        self.move_candidates(now, candidates, &mut hint)
    }

    /// Moves to back-off or active the unschedulable items `event` may help: only items
    /// whose rejecting plugins registered one of its kinds are looked at, and the plugins'
    /// hints decide ([`hints::QueueingHints::worth_requeuing`]). Returns how many moved.
    pub fn move_on_event(
        &mut self,
        cx: &crate::cache::Cluster,
        now: Time,
        event: &hints::ClusterEvent,
    ) -> usize {
        if event.kinds == 0 {
            return 0;
        }
        let candidates = self.pool.concerned(event.kinds);
        let (hints, entries) = (&self.hints, &self.entries);
        let keys: Vec<ObjectKey> = candidates
            .into_iter()
            .filter(|(_, k)| {
                entries
                    .get(k)
                    .is_some_and(|e| hints.worth_requeuing(cx, event, k, &e.plugins))
            })
            .map(|(_, k)| k)
            .collect();
        self.requeue_all(keys, now)
    }

    /// Requeues the `candidates` (in arrival order: the order decides back-off ties, and
    /// runs must be deterministic) that `hint` accepts.
    fn move_candidates(
        &mut self,
        now: Time,
        candidates: Vec<(u64, ObjectKey)>,
        hint: &mut impl FnMut(&ObjectKey, &[&'static str]) -> bool,
    ) -> usize {
        let keys: Vec<ObjectKey> = candidates
            .into_iter()
            .filter(|(_, k)| self.entries.get(k).is_some_and(|e| hint(k, &e.plugins)))
            .map(|(_, k)| k)
            .collect();
        self.requeue_all(keys, now)
    }

    /// Requeues `keys`, moved by an event.
    fn requeue_all(&mut self, keys: Vec<ObjectKey>, now: Time) -> usize {
        for k in &keys {
            self.requeue(k, now);
        }
        self.stats.moved_by_event += keys.len() as u64;
        keys.len()
    }

    /// Records that the in-flight item just failed as unschedulable at scheduler epoch
    /// `epoch` with `draws` (random-generator steps) in its cycle and nothing else changed:
    /// a retry at the same epoch would fail the same way.
    pub fn remember_failure(&mut self, key: &ObjectKey, epoch: u64, draws: u64) {
        if let Some(e) = self.entries.get_mut(key) {
            e.replay = Some((epoch, draws));
        }
    }

    /// The random draws of the item's last failure if it happened at `epoch` (nothing
    /// changed since), so the retry can be answered without a cycle.
    pub fn replayable(&self, key: &ObjectKey, epoch: u64) -> Option<u64> {
        let (at, draws) = self.entries.get(key)?.replay?;
        (at == epoch).then_some(draws)
    }

    /// Sends the in-flight item back to the unschedulable pool, rejected by the same plugins
    /// as last time (a retry answered by [`SchedulingQueue::replayable`]).
    pub fn failed_again(&mut self, key: &ObjectKey, now: Time) {
        self.leave_pool(key);
        if let Some(e) = self.entries.get_mut(key) {
            e.last_attempt = now;
            e.since = now;
            self.enter_pool(key);
        }
    }

    /// The plugins that rejected the item last time.
    pub fn rejected_by(&self, key: &ObjectKey) -> &[&'static str] {
        self.entries.get(key).map_or(&[], |e| &e.plugins)
    }

    fn requeue(&mut self, key: &ObjectKey, now: Time) {
        let Some(e) = self.entries.get(key) else {
            return;
        };
        if e.backoff_until() <= now {
            self.push_active(key);
        } else {
            self.push_backoff(key);
        }
    }

    /// Moves what is due at `now`: finished back-offs to active, and items unschedulable for
    /// longer than [`UNSCHEDULABLE_MAX_WAIT`] onwards.
    pub fn flush(&mut self, now: Time) {
        for errored in [false, true] {
            loop {
                let heap = if errored {
                    &mut self.error_backoff
                } else {
                    &mut self.backoff
                };
                let Some(Reverse((until, gen, _, key))) = heap.peek().cloned() else {
                    break;
                };
                if until > now {
                    break;
                }
                heap.pop();
                if self
                    .entries
                    .get(&key)
                    .is_some_and(|e| e.gen == gen && e.place == Where::Backoff)
                {
                    self.push_active(&key);
                }
            }
        }
        let stale = self
            .pool
            .since_at_most(now.saturating_sub(UNSCHEDULABLE_MAX_WAIT));
        self.stats.moved_by_max_wait += stale.len() as u64;
        for (_, k) in stale {
            self.requeue(&k, now);
        }
    }

    /// When the active heap is empty, moves the earliest backing-off item to active anyway
    /// (`SchedulerPopFromBackoffQ`). Returns whether it did. Items whose last failure was an
    /// error are not eligible, as in kube-scheduler.
    pub fn pop_backoff_early(&mut self) -> bool {
        while let Some(Reverse((_, gen, _, key))) = self.backoff.pop() {
            if self
                .entries
                .get(&key)
                .is_some_and(|e| e.gen == gen && e.place == Where::Backoff)
            {
                self.push_active(&key);
                return true;
            }
        }
        false
    }

    /// Whether anything is in the active heap.
    pub fn has_active(&self) -> bool {
        self.entries.values().any(|e| e.place == Where::Active)
    }

    /// The next time something becomes due (a back-off ending, an unschedulable item's
    /// maximum wait).
    pub fn next_timeout(&self) -> Option<Time> {
        let backoff = self
            .backoff
            .iter()
            .chain(self.error_backoff.iter())
            .filter(|Reverse((_, gen, _, k))| {
                self.entries
                    .get(k)
                    .is_some_and(|e| e.gen == *gen && e.place == Where::Backoff)
            })
            .map(|Reverse((t, ..))| *t)
            .min();
        let unsched = self.pool.earliest().map(|t| t + UNSCHEDULABLE_MAX_WAIT);
        match (backoff, unsched) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Items waiting in the unschedulable pool.
    pub fn unschedulable(&self) -> impl Iterator<Item = &ObjectKey> + '_ {
        self.pool.keys()
    }

    /// How many items wait where: kube-scheduler's `scheduler_pending_pods{queue}`. Walks
    /// every entry; callers sample it (the adapter at most once a second).
    pub fn lengths(&self) -> QueueLengths {
        let mut l = QueueLengths::default();
        for e in self.entries.values() {
            match e.place {
                Where::Active => l.active += 1,
                Where::Backoff => l.backoff += 1,
                Where::Unschedulable => l.unschedulable += 1,
                Where::InFlight => {}
            }
        }
        l
    }

    /// Why items left the unschedulable pool so far.
    pub fn stats(&self) -> QueueStats {
        self.stats
    }

    /// Number of items the queue knows.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the queue knows no item.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Marks the item unschedulable and indexes it in the pool.
    fn enter_pool(&mut self, key: &ObjectKey) {
        if let Some(e) = self.entries.get_mut(key) {
            e.place = Where::Unschedulable;
            self.pool.insert(key, e.slot());
        }
    }

    /// Takes the item out of the pool's index if it is there; callers then set its place.
    fn leave_pool(&mut self, key: &ObjectKey) {
        if let Some(e) = self.entries.get(key) {
            if e.place == Where::Unschedulable {
                self.pool.remove(e.slot());
            }
        }
    }

    fn push_active(&mut self, key: &ObjectKey) {
        self.leave_pool(key);
        self.gen += 1;
        let gen = self.gen;
        let Some(e) = self.entries.get_mut(key) else {
            return;
        };
        e.place = Where::Active;
        e.gen = gen;
        self.active.push(Reverse((
            (Reverse(e.priority), e.created, e.seq),
            gen,
            key.clone(),
        )));
    }

    fn push_backoff(&mut self, key: &ObjectKey) {
        self.leave_pool(key);
        self.gen += 1;
        let gen = self.gen;
        let Some(e) = self.entries.get_mut(key) else {
            return;
        };
        e.place = Where::Backoff;
        e.gen = gen;
        let heap = if e.errored {
            &mut self.error_backoff
        } else {
            &mut self.backoff
        };
        heap.push(Reverse((e.backoff_until(), gen, e.seq, key.clone())));
    }
}

impl SchedulingQueue {
    /// Moves a waiting item (unschedulable or backing off) to active at once, its
    /// back-off notwithstanding: kube-scheduler's `handle.Activate`, which a gang member
    /// waiting at Permit uses so that its siblings are tried now.
    pub fn activate(&mut self, key: &ObjectKey) {
        let waiting = self
            .entries
            .get(key)
            .is_some_and(|e| matches!(e.place, Where::Unschedulable | Where::Backoff));
        if waiting {
            self.push_active(key);
        }
    }

    /// Sends a queued item (active or backing off) back to the unschedulable pool, as if
    /// `plugins` had just rejected it: a gang rejected as a whole waits for an event that
    /// may help it, rather than being retried by the room its own members gave back (which
    /// would reject it again at once, forever); once moved, it waits out its back-off in
    /// full (never popped early). Items in flight or unknown are left alone.
    pub fn park(&mut self, key: &ObjectKey, plugins: &[&'static str], now: Time) {
        let Some(e) = self.entries.get_mut(key) else {
            return;
        };
        if e.place == Where::InFlight {
            return;
        }
        let was_pooled = e.place == Where::Unschedulable;
        let old_slot = e.slot();
        e.plugins.clear();
        e.plugins.extend_from_slice(plugins);
        e.interest = self.hints.interest(plugins);
        e.replay = None;
        e.since = now;
        // Its back-off is waited out in full: two gangs that cannot both fit would
        // otherwise free room for each other and be retried at the same instant forever.
        e.errored = true;
        if was_pooled {
            self.pool.remove(old_slot);
        }
        self.enter_pool(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn k(n: &str) -> ObjectKey {
        ObjectKey::pod("default", n)
    }

    #[test]
    fn pops_by_priority_then_creation_then_arrival() {
        let mut q = SchedulingQueue::default();
        q.add(k("low"), 0, 0, 0);
        q.add(k("late"), 10, 5, 0);
        q.add(k("early"), 10, 1, 0);
        q.add(k("early-twin"), 10, 1, 0);
        let order: Vec<_> = std::iter::from_fn(|| q.pop())
            .map(|k| k.name.to_string())
            .collect();
        assert_eq!(order, ["early", "early-twin", "late", "low"]);
    }

    #[test]
    fn unschedulable_pods_wait_for_an_event_then_back_off() {
        let mut q = SchedulingQueue::default();
        q.add(k("p"), 0, 0, 0);
        assert_eq!(q.pop(), Some(k("p")));
        q.failed(&k("p"), true, &[], 0);
        assert_eq!(q.pop(), None);
        assert_eq!(q.next_timeout(), Some(UNSCHEDULABLE_MAX_WAIT));
        q.move_all(500);
        // First back-off is 1s from the failure.
        assert_eq!(q.next_timeout(), Some(SECOND));
        q.flush(999);
        assert_eq!(q.pop(), None);
        q.flush(1000);
        assert_eq!(q.pop(), Some(k("p")));
    }

    #[test]
    fn backoff_doubles_up_to_ten_seconds() {
        let mut q = SchedulingQueue::default();
        q.add(k("p"), 0, 0, 0);
        let mut now = 0;
        let mut seen = Vec::new();
        for _ in 0..6 {
            assert_eq!(q.pop(), Some(k("p")));
            q.failed(&k("p"), false, &[], now);
            let t = q.next_timeout().unwrap();
            seen.push(t - now);
            now = t;
            q.flush(now);
        }
        assert_eq!(seen, [1000, 2000, 4000, 8000, 10_000, 10_000]);
    }

    #[test]
    fn unschedulable_pods_are_retried_after_five_minutes_without_events() {
        let mut q = SchedulingQueue::default();
        q.add(k("p"), 0, 0, 0);
        q.pop();
        q.failed(&k("p"), true, &[], 0);
        q.flush(UNSCHEDULABLE_MAX_WAIT - 1);
        assert_eq!(q.pop(), None);
        q.flush(UNSCHEDULABLE_MAX_WAIT);
        assert_eq!(q.pop(), Some(k("p")));
    }

    #[test]
    fn backing_off_pods_can_be_popped_early_when_active_is_empty() {
        let mut q = SchedulingQueue::default();
        q.add(k("p"), 0, 0, 0);
        q.pop();
        q.failed(&k("p"), true, &[], 0);
        q.move_all(0);
        assert_eq!(q.pop(), None);
        assert!(q.pop_backoff_early());
        assert_eq!(q.pop(), Some(k("p")));
        assert!(!q.pop_backoff_early());
    }

    #[test]
    fn an_event_looks_only_at_items_a_rejecting_plugin_registered_it_for() {
        use crate::plugins::names;
        let profiles = [crate::framework::Profile::default_profile()];
        let mut q = SchedulingQueue::new(hints::QueueingHints::for_profiles(&profiles));
        for (name, plugins) in [
            ("fit", &[names::NODE_RESOURCES_FIT][..]),
            ("spread", &[names::POD_TOPOLOGY_SPREAD][..]),
            ("none", &[][..]),
        ] {
            q.add(k(name), 0, 0, 0);
            assert_eq!(q.pop(), Some(k(name)));
            q.failed(&k(name), true, plugins, 0);
        }
        let mut asked = Vec::new();
        let moved = q.move_concerned(0, hints::kind::ASSIGNED_POD_ADD, |key, _| {
            asked.push(key.name.to_string());
            true
        });
        // A bind cannot help a pod only NodeResourcesFit rejected: it is not even looked at.
        assert_eq!(asked, ["spread", "none"]);
        assert_eq!(moved, 2);
        assert_eq!(q.unschedulable().cloned().collect::<Vec<_>>(), [k("fit")]);
        let moved = q.move_concerned(0, hints::kind::ASSIGNED_POD_DELETE, |_, _| true);
        assert_eq!(moved, 1);
        assert_eq!(q.unschedulable().count(), 0);
        assert_eq!(q.lengths().unschedulable, 0);
    }

    #[test]
    fn the_five_minute_flush_takes_only_items_that_waited_that_long() {
        let mut q = SchedulingQueue::default();
        for (name, at) in [("old", 0), ("new", 1000)] {
            q.add(k(name), 0, 0, at);
            q.pop();
            q.failed(&k(name), true, &[], at);
        }
        assert_eq!(q.next_timeout(), Some(UNSCHEDULABLE_MAX_WAIT));
        q.flush(UNSCHEDULABLE_MAX_WAIT);
        assert_eq!(q.unschedulable().cloned().collect::<Vec<_>>(), [k("new")]);
        assert_eq!(q.stats().moved_by_max_wait, 1);
        assert_eq!(q.next_timeout(), Some(1000 + UNSCHEDULABLE_MAX_WAIT));
    }

    #[test]
    fn erring_items_wait_out_their_back_off() {
        // A cycle's error is retried when its back-off ends, never early: retried at once it
        // would err again at the same instant, forever. A verdict after it is eligible again.
        let mut q = SchedulingQueue::default();
        q.add(k("p"), 0, 0, 0);
        q.pop();
        q.failed(&k("p"), false, &[], 0);
        assert!(!q.pop_backoff_early());
        assert_eq!(q.pop(), None);
        assert_eq!(q.next_timeout(), Some(SECOND));
        q.flush(SECOND - 1);
        assert_eq!(q.pop(), None);
        q.flush(SECOND);
        assert_eq!(q.pop(), Some(k("p")));
        q.failed(&k("p"), true, &["NodeResourcesFit"], SECOND);
        q.move_all(SECOND);
        assert!(q.pop_backoff_early());
        assert_eq!(q.pop(), Some(k("p")));
    }

    #[test]
    fn deleted_items_are_never_popped() {
        let mut q = SchedulingQueue::default();
        q.add(k("a"), 0, 0, 0);
        q.add(k("b"), 0, 0, 0);
        q.delete(&k("a"));
        assert_eq!(q.pop(), Some(k("b")));
        assert_eq!(q.pop(), None);
    }
}
