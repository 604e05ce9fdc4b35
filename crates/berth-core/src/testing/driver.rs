//! [`FakeDriver`]: the cluster adapter and the API server, faked deterministically, for
//! tests that drive the core the way `berth run` will.
//!
//! It keeps an API-server-like store (UIDs, resourceVersions, preconditions), performs the
//! core's effects and echoes every write back as a watch event. Binds are asynchronous: a
//! `Bind` waits in flight while the scheduler keeps running, and then lands, is refused
//! (a transient failure, a conflict, a pod that is gone), or lands with its answer lost (the
//! scheduler hears of a time-out, the watch shows the pod bound). With
//! [`DriverConfig::shuffle`] pending binds, bind answers and watch events are delivered in
//! an order drawn from the seed; without it everything happens in order, at once
//! (the synchronous driver the simulator is). It can restart the scheduler (a fresh one
//! built from a LIST of every kind, interleaved and shuffled) and re-list one kind after a
//! broken watch (what the watch had not delivered is lost).
//!
//! While it runs it checks what must never happen whatever the order: a second bind for a
//! pod whose bind is in flight or that the scheduler was shown bound, and a bind, delete or
//! failed reservation before the initial sync is over ([`FakeDriver::violations`]).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;

use berth_api::k8s_openapi::api::core::v1::{Pod, PodStatus};
use berth_api::k8s_openapi::apimachinery::pkg::apis::meta::v1::Time as MetaTime;
use berth_api::k8s_openapi::jiff::Timestamp;
use berth_api::reservation::{Reservation, ReservationPhase};

use crate::apply::Write;
use crate::effect::{Effect, Record};
use crate::event::{BindFailure, Event};
use crate::object::{Kind, Object, ObjectKey};
use crate::rng::SplitMix64;
use crate::scheduler::{Config, Scheduler};
use crate::time::Time;
use crate::Profile;

/// How the fake cluster misbehaves. The default is a synchronous, perfect cluster.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DriverConfig {
    /// Seed of every random choice the driver makes.
    pub seed: u64,
    /// Out of 100: a bind is refused without being written (a 5xx, a time-out before the
    /// write): the scheduler hears of a transient failure.
    pub refuse_pct: u32,
    /// Out of 100: a bind is written but its answer is lost (a time-out after the write).
    /// berth-kube then reads the pod back and, finding it bound, reports no failure: the
    /// scheduler hears nothing, and the watch confirms the bind.
    pub lose_answer_pct: u32,
    /// Deliver pending binds, bind answers and watch events in an order drawn from the
    /// seed, the scheduler running between any two of them. Without it, binds land first,
    /// then answers, then watch events, in the order they were made.
    pub shuffle: bool,
}

/// What the driver did, for tests to check that a run exercised what it meant to.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DriverStats {
    /// `Bind` effects received.
    pub binds: u64,
    /// Binds written.
    pub bound: u64,
    /// Binds refused as transient failures.
    pub refused: u64,
    /// Binds written whose answer was lost.
    pub lost_answers: u64,
    /// Binds refused because the pod was already bound or is another incarnation.
    pub conflicts: u64,
    /// Binds of pods that were gone.
    pub not_found: u64,
    /// Watch events delivered.
    pub watch_events: u64,
    /// Scheduler restarts.
    pub restarts: u64,
    /// Re-lists after a broken watch.
    pub relists: u64,
}

/// A bind the scheduler asked for, not performed yet.
#[derive(Debug, Clone)]
struct PendingBind {
    pod: ObjectKey,
    uid: String,
    node: String,
    annotations: BTreeMap<String, String>,
}

/// Builds the profiles of a scheduler: a restart builds them afresh (profiles hold plugin
/// instances and are not `Clone`).
#[derive(Clone)]
pub struct Profiles(Arc<dyn Fn() -> Vec<Profile>>);

impl std::fmt::Debug for Profiles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Profiles(..)")
    }
}

impl Profiles {
    /// Profiles made by `f`.
    pub fn new(f: impl Fn() -> Vec<Profile> + 'static) -> Self {
        Self(Arc::new(f))
    }

    /// The built-in profile only.
    pub fn default_profile() -> Self {
        Self::new(|| vec![Profile::default_profile()])
    }

    fn build(&self) -> Vec<Profile> {
        (self.0)()
    }
}

/// The most steps [`FakeDriver::settle`] takes before declaring a livelock.
const MAX_STEPS: usize = 200_000;
/// Scheduling cycles one pump may run at one instant before the driver calls it a livelock
/// (far above what any test's pods need: each pod takes a handful of cycles per instant).
const MAX_CYCLES: usize = 100_000;

/// The fake adapter and API server around a [`Scheduler`].
#[derive(Debug)]
pub struct FakeDriver {
    sched: Scheduler,
    profiles: Profiles,
    config: Config,
    cfg: DriverConfig,
    rng: SplitMix64,
    now: Time,
    store: BTreeMap<ObjectKey, Object>,
    resource_version: u64,
    uids: BTreeSet<String>,
    binds: VecDeque<PendingBind>,
    answers: VecDeque<Event>,
    watch: VecDeque<Event>,
    /// Binds the scheduler has in flight as far as the driver can tell: asked for, and
    /// neither answered with a failure nor shown bound by the watch (pod, UID).
    outstanding: BTreeSet<(ObjectKey, String)>,
    /// Pods (key, UID) the scheduler was shown bound.
    shown_bound: BTreeSet<(ObjectKey, String)>,
    events: Vec<Record>,
    /// Every effect performed since the last [`FakeDriver::take_effects`].
    log: Vec<Effect>,
    violations: Vec<String>,
    stats: DriverStats,
}

impl FakeDriver {
    /// A driver around a scheduler with `profiles` and `config`, behaving as `cfg` says, at
    /// time `now`.
    pub fn new(profiles: Profiles, config: Config, cfg: DriverConfig, now: Time) -> Self {
        let rng = SplitMix64::new(cfg.seed ^ 0x5eed_d21e);
        Self {
            sched: Scheduler::new(profiles.build(), config.clone()),
            profiles,
            config,
            cfg,
            rng,
            now,
            store: BTreeMap::new(),
            resource_version: 0,
            uids: BTreeSet::new(),
            binds: VecDeque::new(),
            answers: VecDeque::new(),
            watch: VecDeque::new(),
            outstanding: BTreeSet::new(),
            shown_bound: BTreeSet::new(),
            events: Vec::new(),
            log: Vec::new(),
            violations: Vec::new(),
            stats: DriverStats::default(),
        }
    }

    /// A synchronous, perfect cluster around the default profile (seed 1, time 1,000 s).
    pub fn synchronous() -> Self {
        Self::with_profiles(Profiles::default_profile())
    }

    /// A synchronous, perfect cluster around `profiles` (seed 1, time 1,000 s).
    pub fn with_profiles(profiles: Profiles) -> Self {
        Self::new(
            profiles,
            Config {
                seed: 1,
                ..Config::default()
            },
            DriverConfig::default(),
            1_000_000,
        )
    }

    /// The scheduler.
    pub fn scheduler(&self) -> &Scheduler {
        &self.sched
    }

    /// The scheduler, mutably (to feed it something by hand).
    pub fn scheduler_mut(&mut self) -> &mut Scheduler {
        &mut self.sched
    }

    /// Virtual now.
    pub fn now(&self) -> Time {
        self.now
    }

    /// Moves virtual time to `t` without firing anything (a test that drives the
    /// scheduler's timers itself); time never goes back.
    pub fn set_now(&mut self, t: Time) {
        self.now = self.now.max(t);
    }

    /// What the driver did so far.
    pub fn stats(&self) -> &DriverStats {
        &self.stats
    }

    /// What went wrong that must never happen (empty when all is well).
    pub fn violations(&self) -> &[String] {
        &self.violations
    }

    /// Events the scheduler recorded.
    pub fn events(&self) -> &[Record] {
        &self.events
    }

    /// An object as the API server holds it.
    pub fn get(&self, key: &ObjectKey) -> Option<&Object> {
        self.store.get(key)
    }

    /// A pod as the API server holds it.
    pub fn pod(&self, namespace: &str, name: &str) -> Option<&Arc<Pod>> {
        match self.store.get(&ObjectKey::pod(namespace, name)) {
            Some(Object::Pod(p)) => Some(p),
            _ => None,
        }
    }

    /// A reservation as the API server holds it.
    pub fn reservation(&self, name: &str) -> Option<&Arc<Reservation>> {
        match self.store.get(&ObjectKey::cluster(Kind::Reservation, name)) {
            Some(Object::Reservation(r)) => Some(r),
            _ => None,
        }
    }

    /// The node the API server shows pod `default/name` bound to.
    pub fn bound(&self, name: &str) -> Option<String> {
        self.pod("default", name)?.spec.as_ref()?.node_name.clone()
    }

    /// The `PodScheduled` condition of pod `default/name`: reason and message.
    pub fn condition(&self, name: &str) -> Option<(String, String)> {
        let p = self.pod("default", name)?;
        let c = p
            .status
            .as_ref()?
            .conditions
            .as_ref()?
            .iter()
            .find(|c| c.type_ == "PodScheduled")?;
        Some((
            c.reason.clone().unwrap_or_default(),
            c.message.clone().unwrap_or_default(),
        ))
    }

    /// Every object the API server holds, by key.
    pub fn objects(&self) -> impl Iterator<Item = &Object> + '_ {
        self.store.values()
    }

    /// The objects of one kind, by key.
    pub fn of_kind(&self, kind: Kind) -> impl Iterator<Item = &Object> + '_ {
        self.store.values().filter(move |o| o.kind() == kind)
    }

    /// Whether nothing is in flight: no pending bind, answer or watch event, and the
    /// scheduler has nothing to do at `now`.
    pub fn quiescent(&self) -> bool {
        self.binds.is_empty() && self.answers.is_empty() && self.watch.is_empty()
    }

    fn next_resource_version(&mut self) -> String {
        self.resource_version += 1;
        self.resource_version.to_string()
    }

    /// A UID for a new object: the one it carries unless an earlier object had it (a pod
    /// deleted and created again gets a new UID, as in a cluster).
    fn fresh_uid(&mut self, wanted: Option<&str>, key: &ObjectKey) -> String {
        if let Some(u) = wanted.filter(|u| !u.is_empty() && !self.uids.contains(*u)) {
            self.uids.insert(u.to_string());
            return u.to_string();
        }
        let mut n = self.uids.len();
        loop {
            let u = format!("uid-{}-{}-{n}", key.kind, key.name);
            if self.uids.insert(u.clone()) {
                return u;
            }
            n += 1;
        }
    }

    /// Creates or replaces an object, as `kubectl replace` would (the API server's
    /// validation aside: a test may move a pod off its node): the API server fills UID,
    /// creation time and resourceVersion, and keeps the stored status when the new object
    /// carries none (the status is a subresource). The watch shows the result.
    pub fn apply(&mut self, mut obj: Object) {
        let key = obj.key();
        let existing = self.store.get(&key).cloned();
        let uid = match &existing {
            Some(o) => o.meta().uid.clone().unwrap_or_default(),
            None => {
                let wanted = obj.meta().uid.clone();
                self.fresh_uid(wanted.as_deref(), &key)
            }
        };
        match (&mut obj, &existing) {
            (Object::Pod(p), Some(Object::Pod(old))) if p.status.is_none() => {
                Arc::make_mut(p).status = old.status.clone();
            }
            (Object::Reservation(r), Some(Object::Reservation(old))) if r.status.is_none() => {
                Arc::make_mut(r).status = old.status.clone();
            }
            _ => {}
        }
        let created = existing
            .as_ref()
            .and_then(|o| o.meta().creation_timestamp.clone())
            .or_else(|| obj.meta().creation_timestamp.clone())
            .or_else(|| crate::reservation::status::meta_time(self.now));
        let rv = self.next_resource_version();
        let meta = obj.meta_mut();
        meta.uid = Some(uid);
        meta.creation_timestamp = created;
        meta.resource_version = Some(rv);
        self.store.insert(key, obj.clone());
        self.watch.push_back(Event::Applied(obj));
    }

    /// Changes a stored object with `f` (a status patch, a label...). A change that leaves
    /// the object as it was writes nothing and shows nothing, as the API server does.
    /// Returns whether the object exists.
    pub fn modify(&mut self, key: &ObjectKey, f: impl FnOnce(&mut Object)) -> bool {
        let Some(old) = self.store.get(key).cloned() else {
            return false;
        };
        let mut obj = old;
        f(&mut obj);
        self.write(obj);
        true
    }

    /// Deletes an object; the watch shows the deletion. Returns whether it existed.
    pub fn delete(&mut self, key: &ObjectKey) -> bool {
        if self.store.remove(key).is_none() {
            return false;
        }
        self.watch.push_back(Event::Deleted(key.clone()));
        true
    }

    /// The kubelet of a bound pod reports it `phase` (`Running`, `Succeeded`...): a
    /// status-only update.
    pub fn set_phase(&mut self, key: &ObjectKey, phase: &str) -> bool {
        self.modify(key, |o| {
            if let Object::Pod(p) = o {
                Arc::make_mut(p)
                    .status
                    .get_or_insert_with(PodStatus::default)
                    .phase = Some(phase.to_string());
            }
        })
    }

    /// Runs the scheduler as the adapter's loop does after every input: timers due, then
    /// scheduling, then every effect taken and performed (binds wait in flight).
    fn pump(&mut self) {
        if self.sched.poll_timeout().is_some_and(|t| t <= self.now) {
            self.sched.handle_timeout(self.now);
        }
        let cycles = self.sched.run_at_most(self.now, MAX_CYCLES);
        assert!(
            cycles < MAX_CYCLES,
            "livelock: {MAX_CYCLES} scheduling cycles at {} ms without going idle",
            self.now
        );
        while let Some(e) = self.sched.poll_effect() {
            self.perform(e);
        }
    }

    /// One step: the scheduler runs, then one pending bind, answer or watch event is
    /// delivered. Returns whether anything was left to deliver.
    pub fn step(&mut self) -> bool {
        self.pump();
        let mut choices: Vec<u8> = Vec::with_capacity(3);
        if !self.binds.is_empty() {
            choices.push(0);
        }
        if !self.answers.is_empty() {
            choices.push(1);
        }
        if !self.watch.is_empty() {
            choices.push(2);
        }
        let Some(&first) = choices.first() else {
            return false;
        };
        let pick = if self.cfg.shuffle {
            choices[self.rng.below(choices.len() as u64) as usize]
        } else {
            first
        };
        match pick {
            0 => {
                let i = if self.cfg.shuffle {
                    self.rng.below(self.binds.len() as u64) as usize
                } else {
                    0
                };
                if let Some(b) = self.binds.remove(i) {
                    self.perform_bind(b);
                }
            }
            1 => {
                if let Some(e) = self.answers.pop_front() {
                    self.deliver(e);
                }
            }
            _ => {
                if let Some(e) = self.watch.pop_front() {
                    self.deliver(e);
                }
            }
        }
        true
    }

    /// Steps until nothing is in flight and the scheduler has nothing left to do now.
    ///
    /// # Panics
    /// When the scheduler keeps producing work (a livelock), which a test must report.
    pub fn settle(&mut self) {
        for _ in 0..MAX_STEPS {
            if !self.step() {
                return;
            }
        }
        panic!("the scheduler did not settle after {MAX_STEPS} steps");
    }

    /// Moves virtual time forward by `millis`, firing the scheduler's timers in order and
    /// settling after each.
    pub fn advance(&mut self, millis: Time) {
        let target = self.now.saturating_add(millis);
        self.settle();
        for _ in 0..MAX_STEPS {
            let Some(t) = self.sched.poll_timeout().filter(|t| *t <= target) else {
                break;
            };
            self.now = self.now.max(t);
            self.settle();
        }
        self.now = target;
        self.settle();
    }

    /// Hands one event to the scheduler, keeping track of what it was shown.
    fn deliver(&mut self, e: Event) {
        match &e {
            Event::Applied(Object::Pod(p)) => {
                self.stats.watch_events += 1;
                let key = Object::Pod(p.clone()).key();
                let uid = p.metadata.uid.clone().unwrap_or_default();
                if p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some() {
                    self.outstanding.remove(&(key.clone(), uid.clone()));
                    self.shown_bound.insert((key, uid));
                }
            }
            Event::Deleted(key) if key.kind == Kind::Pod => {
                self.stats.watch_events += 1;
                self.outstanding.retain(|(k, _)| k != key);
                self.shown_bound.retain(|(k, _)| k != key);
            }
            Event::BindFailed { pod, uid, .. } => {
                self.outstanding.remove(&(pod.clone(), uid.clone()));
            }
            _ => self.stats.watch_events += 1,
        }
        self.sched.handle(self.now, e);
    }

    /// Performs one effect of the scheduler as the adapter and the API server would.
    fn perform(&mut self, effect: Effect) {
        if !self.sched.synced() {
            self.check_premature(&effect);
        }
        self.log.push(effect.clone());
        self.execute(effect);
    }

    /// The effects the scheduler asked for since the last call, in order.
    pub fn take_effects(&mut self) -> Vec<Effect> {
        std::mem::take(&mut self.log)
    }

    /// Hands the scheduler every watch event waiting, in order, without letting it run:
    /// the state right after an input, for a test to look at.
    pub fn deliver_watch(&mut self) {
        while let Some(e) = self.watch.pop_front() {
            self.deliver(e);
        }
    }

    /// Carries an effect out: the write as the API server makes it ([`crate::apply`]),
    /// shown by the watch; a bind waits in flight.
    fn execute(&mut self, effect: Effect) {
        let effect = match effect {
            Effect::Bind {
                pod,
                uid,
                node,
                annotations,
            } => {
                self.send_bind(PendingBind {
                    pod,
                    uid,
                    node,
                    annotations,
                });
                return;
            }
            other => other,
        };
        let now = self.stamp();
        match crate::apply::write(effect, |k| self.store.get(k), &now) {
            Write::Object(obj) => self.write(obj),
            Write::Delete(key) => {
                self.delete(&key);
            }
            Write::Refused(answer) => self.answers.push_back(answer),
            Write::Missing(_) | Write::Stale => {}
            Write::Other(effect) => match effect {
                // VolumeBinding's PreBind writes, as the API server takes them (no PV
                // controller here: a test plays it by applying the bound objects).
                Effect::BindVolume { volume, .. } => self.apply(Object::PersistentVolume(volume)),
                Effect::ProvisionClaim { claim, .. } => {
                    self.apply(Object::PersistentVolumeClaim(claim))
                }
                Effect::UpdateClaimStatus { claim, .. } => self.apply(Object::ResourceClaim(claim)),
                Effect::CreateReservation(r) => {
                    let obj = Object::Reservation(Arc::new(*r));
                    if !self.store.contains_key(&obj.key()) {
                        self.apply(obj);
                    }
                }
                Effect::Record(r) => self.events.push(r),
                _ => {}
            },
        }
    }

    /// A bind the scheduler asked for: checked against what it was shown, then in flight
    /// (or, synchronously, landed at once).
    fn send_bind(&mut self, b: PendingBind) {
        self.stats.binds += 1;
        let id = (b.pod.clone(), b.uid.clone());
        if self.outstanding.contains(&id) {
            self.violations.push(format!(
                "bind of {} to {} while another bind of it is in flight",
                b.pod, b.node
            ));
        }
        if self.shown_bound.contains(&id) {
            self.violations.push(format!(
                "bind of {} to {}, which the scheduler was shown bound",
                b.pod, b.node
            ));
        }
        self.outstanding.insert(id);
        self.binds.push_back(b);
        if !self.cfg.shuffle {
            // Synchronous: the bind lands before the scheduler runs again.
            if let Some(b) = self.binds.pop_back() {
                self.perform_bind(b);
            }
        }
    }

    /// The API server's clock as it stamps objects (whole seconds).
    fn stamp(&self) -> MetaTime {
        crate::reservation::status::meta_time(self.now).unwrap_or(MetaTime(Timestamp::UNIX_EPOCH))
    }

    /// Stores a written object: a write that leaves it as it was writes nothing and shows
    /// nothing, as the API server does; otherwise a new resourceVersion and a watch event.
    fn write(&mut self, mut obj: Object) {
        let key = obj.key();
        if self.store.get(&key).is_some_and(|old| same(old, &obj)) {
            return;
        }
        let rv = self.next_resource_version();
        obj.meta_mut().resource_version = Some(rv);
        self.store.insert(key, obj.clone());
        self.watch.push_back(Event::Applied(obj));
    }

    /// The API server's side of a bind ([`crate::apply`]): the UID precondition, the pod
    /// not yet bound; then PreBind's annotations and `spec.nodeName` are written and the
    /// watch shows the pod. A transient failure may refuse it first.
    fn perform_bind(&mut self, b: PendingBind) {
        let PendingBind {
            pod,
            uid,
            node,
            annotations,
        } = b;
        let effect = Effect::Bind {
            pod: pod.clone(),
            uid: uid.clone(),
            node: node.clone(),
            annotations,
        };
        let now = self.stamp();
        match crate::apply::write(effect, |k| self.store.get(k), &now) {
            Write::Refused(answer) => {
                match &answer {
                    Event::BindFailed {
                        class: BindFailure::NotFound,
                        ..
                    } => self.stats.not_found += 1,
                    _ => self.stats.conflicts += 1,
                }
                self.answers.push_back(answer);
            }
            Write::Object(obj) => {
                if self.rng.below(100) < u64::from(self.cfg.refuse_pct) {
                    self.stats.refused += 1;
                    self.answers.push_back(Event::BindFailed {
                        pod,
                        uid,
                        node,
                        class: BindFailure::Transient,
                        message: "the server was unable to return a response in the time allotted"
                            .into(),
                    });
                    return;
                }
                self.write(obj);
                self.stats.bound += 1;
                if self.rng.below(100) < u64::from(self.cfg.lose_answer_pct) {
                    // Read back by the adapter and found bound: nothing is reported.
                    self.stats.lost_answers += 1;
                }
            }
            _ => {}
        }
    }

    /// The watch of `kind` broke: what it had not delivered is lost, and the watcher lists
    /// again (the LIST, in the store's order shuffled, follows the events before it).
    pub fn relist(&mut self, kind: Kind) {
        self.stats.relists += 1;
        self.watch.retain(|e| event_kind(e) != Some(kind));
        let mut objs: Vec<Object> = self.of_kind(kind).cloned().collect();
        shuffle(&mut self.rng, &mut objs);
        self.watch.push_back(Event::ListStarted(kind));
        self.watch.extend(objs.into_iter().map(Event::Applied));
        self.watch.push_back(Event::Listed(kind));
    }

    /// The scheduler restarts: the old process is gone with what it had in flight (a bind
    /// it sent may still land, its answer is lost, and so is every undelivered watch event)
    /// and a new one starts from a LIST of every kind ([`FakeDriver::rebuilt`]).
    pub fn restart(&mut self) {
        self.stats.restarts += 1;
        let pending: Vec<PendingBind> = self.binds.drain(..).collect();
        for b in pending {
            if self.rng.below(2) == 0 {
                self.perform_bind(b);
            }
        }
        self.answers.clear();
        self.watch.clear();
        self.outstanding.clear();
        self.shown_bound.clear();
        let (sched, effects) = self.rebuilt_with_effects();
        self.sched = sched;
        for (e, synced) in effects {
            if !synced {
                self.check_premature(&e);
            }
            self.execute(e);
        }
        // What the new process was shown bound, from its LIST.
        let bound: Vec<(ObjectKey, String)> = self
            .store
            .iter()
            .filter_map(|(k, o)| match o {
                Object::Pod(p) if p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some() => {
                    Some((k.clone(), p.metadata.uid.clone().unwrap_or_default()))
                }
                _ => None,
            })
            .collect();
        self.shown_bound.extend(bound);
    }

    fn check_premature(&mut self, e: &Effect) {
        if premature(e) {
            self.violations
                .push(format!("before the initial sync: {e:?}"));
        }
    }

    /// A scheduler built from a LIST of every kind, as a restarted one starts: it waits for
    /// every kind ([`Config::wait_for_sync`]), the watchers of the kinds list concurrently
    /// (their objects interleave, each kind in shuffled order) and the scheduler is asked to
    /// run between events, which must do nothing until every LIST is in. It is returned as
    /// the sync leaves it, before any scheduling cycle: the state the objects make. Its
    /// effects are dropped; those made before the sync are checked
    /// ([`FakeDriver::violations`]).
    ///
    /// # Panics
    /// When the rebuilt scheduler binds, deletes or fails a reservation before its sync.
    pub fn rebuilt(&self) -> Scheduler {
        let (s, effects) = self.rebuilt_with_effects();
        let premature: Vec<String> = effects
            .iter()
            .filter(|(e, synced)| !synced && premature(e))
            .map(|(e, _)| format!("{e:?}"))
            .collect();
        assert!(
            premature.is_empty(),
            "before the initial sync: {premature:?}"
        );
        s
    }

    /// Builds the scheduler of [`FakeDriver::rebuilt`], with its effects and whether each
    /// came after the sync. The shuffle is drawn from the seed and the store's version, so
    /// that rebuilding does not change what the driver does next.
    fn rebuilt_with_effects(&self) -> (Scheduler, Vec<(Effect, bool)>) {
        let mut rng = SplitMix64::new(self.cfg.seed ^ self.resource_version.rotate_left(17));
        let config = Config {
            wait_for_sync: Kind::ALL.to_vec(),
            ..self.config.clone()
        };
        let mut s = Scheduler::new(self.profiles.build(), config);
        let mut streams: Vec<VecDeque<Event>> = Vec::new();
        for kind in Kind::ALL {
            let mut objs: Vec<Object> = self.of_kind(kind).cloned().collect();
            shuffle(&mut rng, &mut objs);
            let mut q = VecDeque::with_capacity(objs.len() + 2);
            q.push_back(Event::ListStarted(kind));
            q.extend(objs.into_iter().map(Event::Applied));
            q.push_back(Event::Listed(kind));
            streams.push(q);
        }
        let mut effects = Vec::new();
        loop {
            let live: Vec<usize> = (0..streams.len())
                .filter(|&i| !streams[i].is_empty())
                .collect();
            if live.is_empty() {
                break;
            }
            let i = live[rng.below(live.len() as u64) as usize];
            let Some(e) = streams[i].pop_front() else {
                continue;
            };
            s.handle(self.now, e);
            let synced = s.synced();
            if !synced {
                // The adapter's loop keeps turning during the LIST: nothing may come of it.
                if s.poll_timeout().is_some_and(|t| t <= self.now) {
                    s.handle_timeout(self.now);
                }
                s.run_until_idle(self.now);
            }
            while let Some(e) = s.poll_effect() {
                effects.push((e, synced));
            }
        }
        (s, effects)
    }
}

/// Shuffles `v` (Fisher-Yates) with `rng`.
fn shuffle<T>(rng: &mut SplitMix64, v: &mut [T]) {
    for i in (1..v.len()).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        v.swap(i, j);
    }
}

/// Whether the effect must not come before the initial sync: a bind, a delete, a
/// nomination (preemption), a reservation failed.
fn premature(e: &Effect) -> bool {
    match e {
        Effect::Bind { .. } | Effect::Delete { .. } | Effect::NominatePod { .. } => true,
        Effect::ReservationStatus { status, .. } => status.phase == Some(ReservationPhase::Failed),
        _ => false,
    }
}

/// The kind an event is about, for dropping a broken watch's backlog.
fn event_kind(e: &Event) -> Option<Kind> {
    match e {
        Event::Applied(o) => Some(o.kind()),
        Event::Deleted(k) => Some(k.kind),
        Event::ListStarted(k) | Event::Listed(k) => Some(*k),
        Event::BindFailed { .. } => None,
    }
}

/// Whether two versions of an object are the same (a write that changes nothing).
fn same(a: &Object, b: &Object) -> bool {
    match (a, b) {
        (Object::Pod(x), Object::Pod(y)) => x == y,
        (Object::Node(x), Object::Node(y)) => x == y,
        (Object::Reservation(x), Object::Reservation(y)) => x == y,
        _ => {
            let ja = serde_json::to_value(object_json(a));
            let jb = serde_json::to_value(object_json(b));
            matches!((ja, jb), (Ok(x), Ok(y)) if x == y)
        }
    }
}

fn object_json(o: &Object) -> serde_json::Value {
    let v = match o {
        Object::Pod(x) => serde_json::to_value(&**x),
        Object::Node(x) => serde_json::to_value(&**x),
        Object::Reservation(x) => serde_json::to_value(&**x),
        Object::NodeResourceTopology(x) => serde_json::to_value(&**x),
        Object::PersistentVolumeClaim(x) => serde_json::to_value(&**x),
        Object::CsiNode(x) => serde_json::to_value(&**x),
        Object::PriorityClass(x) => serde_json::to_value(&**x),
        Object::PodDisruptionBudget(x) => serde_json::to_value(&**x),
        Object::Namespace(x) => serde_json::to_value(&**x),
        Object::PersistentVolume(x) => serde_json::to_value(&**x),
        Object::StorageClass(x) => serde_json::to_value(&**x),
        Object::CsiDriver(x) => serde_json::to_value(&**x),
        Object::CsiStorageCapacity(x) => serde_json::to_value(&**x),
        Object::Deployment(x) => serde_json::to_value(&**x),
        Object::ReplicaSet(x) => serde_json::to_value(&**x),
        Object::StatefulSet(x) => serde_json::to_value(&**x),
        Object::PodMigrationJob(x) => serde_json::to_value(&**x),
        Object::ResourceSlice(x) => serde_json::to_value(&**x),
        Object::DeviceClass(x) => serde_json::to_value(&**x),
        Object::ResourceClaim(x) => serde_json::to_value(&**x),
        Object::ResourceClaimTemplate(x) => serde_json::to_value(&**x),
        Object::PodGroup(x) => serde_json::to_value(&**x),
        Object::Workload(x) => serde_json::to_value(&**x),
    };
    v.unwrap_or(serde_json::Value::Null)
}
