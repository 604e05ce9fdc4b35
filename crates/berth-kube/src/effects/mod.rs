//! The core's effects as API calls.
//!
//! kube-scheduler runs each binding cycle in its own goroutine while the next scheduling
//! cycles go on; here each effect is a task. Effects on one object run one after another in
//! the order the core emitted them (a pod's condition patch never overtakes its binding);
//! effects on different objects run concurrently. Binds in flight are bounded: past the bound
//! they wait for a slot, and the driver stops starting cycles until the backlog clears. A
//! reservation status write still waiting behind another for the same reservation is
//! replaced by the newer one: only the latest status matters. A preemption victim's deletion
//! waits for the creation of the Reservation that holds its room.
//!
//! Events go to the [`Events`] writer and never wait, except `Scheduled`, which is published
//! only once the write that placed its object succeeded (kube-scheduler records it in the
//! binding cycle, after Bind): it waits in the object's lane behind the pod's bind or the
//! reservation's status write, and is dropped if that failed. Nothing but events starts once
//! the leadership [`Fence`] has closed.

mod bind;
mod claim;
mod delete;
pub mod lanes;
mod pod;
mod reservation;
mod volume;

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use berth_core::collections::HashMap;
use berth_core::object::{Kind, ObjectKey};
use berth_core::Effect;
use kube::Client;
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use crate::client::{Bucket, Clients};
use crate::events::Events;
use crate::inbox::Input;
use crate::leader::Fence;
use crate::metrics::Metrics;
use lanes::{Lanes, Ready};

pub use crate::inbox::{Completion, Outcome};

/// What every effect task needs.
pub(crate) struct Ctx {
    pub client: Client,
    /// Bindings' client and the bucket they take their tokens from ([`Clients::bind`]).
    pub bind: Option<(Client, Arc<Bucket>)>,
    pub metrics: Arc<Metrics>,
    /// Closed once leadership ran out: no write starts after that.
    pub fence: Arc<Fence>,
    /// Nodes deleted (and not created again) since berth started: a bind to one is not
    /// sent.
    pub gone: Mutex<HashSet<String>>,
}

impl Ctx {
    /// Whether a write may start; counts it when it may not.
    pub(crate) fn may_write(&self) -> bool {
        let ok = self.fence.allows();
        if !ok {
            self.metrics.fenced();
        }
        ok
    }

    pub(crate) fn node_gone(&self, node: &str) -> bool {
        self.gone
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(node)
    }
}

/// Runs effects as tasks, as [`Lanes`] clears them.
pub struct Executor {
    ctx: Arc<Ctx>,
    events: Events,
    tx: mpsc::Sender<Input>,
    lanes: Lanes,
    running: usize,
    tasks: JoinSet<()>,
    /// Objects whose last write failed while more of their effects were queued (a
    /// `Scheduled` event among them is dropped).
    failed: HashSet<ObjectKey>,
    /// A reservation's `Scheduled` event, held until the status write placing it is
    /// submitted (the core emits the event first), then queued behind that write.
    deferred: HashMap<ObjectKey, Effect>,
}

impl std::fmt::Debug for Executor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Executor")
            .field("running", &self.running)
            .field("lanes", &self.lanes)
            .finish_non_exhaustive()
    }
}

impl Executor {
    /// An executor writing through `clients`' main (and bind) client, reporting completions on `tx`, sending events
    /// through `events`, and starting no write once `fence` has closed.
    pub fn new(
        clients: &Clients,
        events: Events,
        metrics: Arc<Metrics>,
        fence: Arc<Fence>,
        tx: mpsc::Sender<Input>,
        max_binds: usize,
    ) -> Self {
        Self {
            ctx: Arc::new(Ctx {
                client: clients.main.clone(),
                bind: clients.bind.clone(),
                metrics,
                fence,
                gone: Mutex::new(HashSet::new()),
            }),
            events,
            tx,
            lanes: Lanes::new(max_binds),
            running: 0,
            tasks: JoinSet::new(),
            failed: HashSet::new(),
            deferred: HashMap::default(),
        }
    }

    /// Takes an effect of the core.
    pub fn submit(&mut self, effect: Effect) {
        let scheduled = lanes::is_scheduled_event(&effect);
        let reservation = match &effect {
            Effect::Record(r) if !scheduled => {
                self.events.record(r.clone());
                return;
            }
            Effect::Record(r) if r.involved.kind == Kind::Reservation => {
                Some((r.involved.clone(), true))
            }
            Effect::ReservationStatus { name, .. } => {
                Some((ObjectKey::cluster(Kind::Reservation, name), false))
            }
            _ => None,
        };
        if let Some((key, true)) = reservation {
            self.deferred.insert(key, effect);
            return;
        }
        if let Some(ready) = self.lanes.submit(effect) {
            self.start(ready);
        }
        if let Some(event) = reservation.and_then(|(k, _)| self.deferred.remove(&k)) {
            self.submit_keyed(event);
        }
    }

    fn submit_keyed(&mut self, effect: Effect) {
        if let Some(ready) = self.lanes.submit(effect) {
            self.start(ready);
        }
    }

    /// The end of a round's effects: a reservation's `Scheduled` event with no status write
    /// in the round goes behind whatever its lane holds.
    pub fn flush(&mut self) {
        if self.deferred.is_empty() {
            return;
        }
        let held: Vec<Effect> = std::mem::take(&mut self.deferred).into_values().collect();
        for event in held {
            self.submit_keyed(event);
        }
    }

    /// Starts `ready`, or, for a `Scheduled` event at the head of its lane, publishes it
    /// unless the write ahead of it failed (or leadership ran out) and moves the lane on.
    fn start(&mut self, ready: Ready) {
        let mut work = vec![ready];
        while let Some((key, effect)) = work.pop() {
            match effect {
                Effect::Record(r) => {
                    let failed = key.as_ref().is_some_and(|k| self.failed.remove(k));
                    if !failed && self.ctx.fence.allows() {
                        self.events.record(r);
                    }
                    if key.is_some() {
                        work.extend(self.lanes.done(key.as_ref(), false));
                    }
                }
                effect => self.spawn(key, effect),
            }
        }
    }

    fn spawn(&mut self, key: Option<ObjectKey>, effect: Effect) {
        self.running += 1;
        let ctx = self.ctx.clone();
        let tx = self.tx.clone();
        self.tasks.spawn(async move {
            let bind = matches!(effect, Effect::Bind { .. });
            let (ok, outcome) = perform(&ctx, effect).await;
            // The driver gone means berth is stopping; nothing is left to tell.
            let _ = tx
                .send(Input::Done(Completion {
                    key,
                    bind,
                    ok,
                    outcome,
                }))
                .await;
        });
    }

    /// An effect finished: start what waited for it.
    pub fn done(&mut self, c: &Completion) {
        self.running = self.running.saturating_sub(1);
        // Reap finished tasks so the set does not grow.
        while self.tasks.try_join_next().is_some() {}
        if let Some(key) = &c.key {
            if c.ok {
                self.failed.remove(key);
            } else {
                self.failed.insert(key.clone());
            }
            // A PreBind write failed: the pod is not bound (kube-scheduler's binding cycle
            // stops at the first PreBind error), and its binding's remaining writes are
            // dropped; the core, told of the failure, runs Unreserve.
            if let Outcome::BindFailed { uid, .. } = &c.outcome {
                if !c.bind {
                    self.lanes.abandon_binding(key, uid);
                }
            }
        }
        let ready = self.lanes.done(c.key.as_ref(), c.bind);
        if let Some(key) = &c.key {
            if !self.lanes.busy(key) {
                self.failed.remove(key);
            }
        }
        for ready in ready {
            self.start(ready);
        }
    }

    /// `node` was deleted: binds to it that have not started are dropped, and returned for
    /// the core (their pods go back to the queue); one not yet sent is not sent.
    pub fn node_deleted(&mut self, node: &str) -> Vec<Effect> {
        self.ctx
            .gone
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(node.to_string());
        let (dropped, ready) = self.lanes.drop_binds_to(node);
        for effect in &dropped {
            if let Effect::Bind { pod, .. } = effect {
                self.failed.insert(pod.clone());
            }
        }
        for ready in ready {
            self.start(ready);
        }
        dropped
    }

    /// `node` exists (again).
    pub fn node_exists(&mut self, node: &str) {
        let mut gone = self.ctx.gone.lock().unwrap_or_else(|p| p.into_inner());
        if !gone.is_empty() {
            gone.remove(node);
        }
    }

    /// Binds sent (or waiting for the rate limiter) and not answered.
    pub fn binds_running(&self) -> usize {
        self.lanes.binds_running()
    }

    /// Bind slots free.
    pub fn free_slots(&self) -> usize {
        self.lanes.free_slots()
    }

    /// Effects running or waiting.
    pub fn outstanding(&self) -> usize {
        self.running + self.lanes.queued()
    }

    /// Binds running or waiting for a slot.
    pub fn binds(&self) -> usize {
        self.lanes.binds()
    }

    /// Whether binds wait for a slot: the driver holds new cycles back until they do not.
    pub fn saturated(&self) -> bool {
        self.lanes.saturated()
    }
}

/// Performs `effect`: whether it succeeded, and what the core must hear.
async fn perform(ctx: &Ctx, effect: Effect) -> (bool, Outcome) {
    if !ctx.may_write() {
        // Leadership ran out: not started, and the process is about to exit.
        return (false, Outcome::Done);
    }
    let done = |ok: bool| (ok, Outcome::Done);
    match effect {
        Effect::Bind {
            pod,
            uid,
            node,
            annotations,
        } => {
            let outcome = bind::bind(ctx, pod, uid, node, annotations).await;
            (outcome == Outcome::Done, outcome)
        }
        Effect::PodCondition {
            pod,
            status,
            reason,
            message,
        } => done(pod::condition(ctx, &pod, status, &reason, &message).await),
        Effect::NominatePod { pod, node } => done(pod::nominate(ctx, &pod, node.as_deref()).await),
        Effect::AnnotatePod { pod, annotations } => {
            done(pod::annotate(ctx, &pod, &annotations).await)
        }
        Effect::ReservationStatus { name, uid, status } => {
            done(reservation::status(ctx, &name, &uid, &status).await)
        }
        Effect::AnnotateReservation {
            name,
            uid,
            annotations,
        } => done(reservation::annotate(ctx, &name, &uid, &annotations).await),
        Effect::CreateReservation(r) => done(reservation::create(ctx, &r).await),
        Effect::Delete {
            key,
            uid,
            resource_version,
            preemption,
        } => {
            delete::delete(ctx, &key, &uid, resource_version, preemption.as_ref()).await;
            done(true)
        }
        Effect::BindVolume {
            pod,
            uid,
            node,
            volume,
        } => {
            let outcome = volume::bind_volume(ctx, pod, uid, node, &volume).await;
            (outcome == Outcome::Done, outcome)
        }
        Effect::ProvisionClaim {
            pod,
            uid,
            node,
            claim,
        } => {
            let outcome = volume::provision_claim(ctx, pod, uid, node, &claim).await;
            (outcome == Outcome::Done, outcome)
        }
        Effect::UpdateClaimStatus {
            pod,
            uid,
            node,
            claim,
        } => {
            let outcome = claim::update_status(ctx, pod, uid, node, &claim).await;
            (outcome == Outcome::Done, outcome)
        }
        Effect::DeallocateClaim { claim } => (true, claim::deallocate(ctx, &claim).await),
        other => {
            tracing::warn!(effect = ?other, "effect not supported by the cluster adapter");
            done(false)
        }
    }
}

/// Milliseconds since the epoch, from the system clock (the adapter's only clock).
pub fn wall_clock_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}
