//! The core's effects as API calls.
//!
//! kube-scheduler runs each binding cycle in its own goroutine while the next scheduling
//! cycles go on; here each effect is a task. Effects on one object run one after another in
//! the order the core emitted them (a pod's condition patch never overtakes its binding);
//! effects on different objects run concurrently. Binds in flight are bounded: past the bound
//! they wait for a slot, and the driver stops starting cycles until the backlog clears. A
//! reservation status write still waiting behind another for the same reservation is
//! replaced by the newer one: only the latest status matters.

mod bind;
mod delete;
mod pod;
mod record;
mod reservation;

use std::collections::VecDeque;
use std::sync::Arc;

use berth_core::collections::HashMap;
use berth_core::object::ObjectKey;
use berth_core::{BindFailure, Effect};
use kube::runtime::events::{Recorder, Reporter};
use kube::Client;
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use crate::metrics::Metrics;
use crate::watch::Input;

/// What an effect's task reports back to the driver.
#[derive(Debug)]
pub struct Completion {
    /// The object the effect was about (its queue moves on); `None` for unkeyed effects.
    pub key: Option<ObjectKey>,
    /// Whether it was a bind (its slot frees).
    pub bind: bool,
    /// What the core must hear of it.
    pub outcome: Outcome,
}

/// The result the core cares about.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Nothing to report: done, or failed in a way the watch will show.
    Done,
    /// A bind failed: the core runs Unreserve and backs the pod off.
    BindFailed {
        /// The pod.
        pod: ObjectKey,
        /// The UID it was bound for.
        uid: String,
        /// The node.
        node: String,
        /// Why, in the core's classes.
        class: BindFailure,
        /// The API server's message.
        message: String,
    },
}

/// What every effect task needs.
pub(crate) struct Ctx {
    pub client: Client,
    pub recorder: Recorder,
    pub metrics: Arc<Metrics>,
}

/// Runs effects as tasks, keeping per-object order and the bind bound.
pub struct Executor {
    ctx: Arc<Ctx>,
    tx: mpsc::Sender<Input>,
    /// Objects with an effect running; the effects queued behind it.
    busy: HashMap<ObjectKey, VecDeque<Effect>>,
    binds_running: usize,
    binds_waiting: VecDeque<Effect>,
    max_binds: usize,
    running: usize,
    tasks: JoinSet<()>,
}

impl std::fmt::Debug for Executor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Executor")
            .field("running", &self.running)
            .field("binds_running", &self.binds_running)
            .field("binds_waiting", &self.binds_waiting.len())
            .finish_non_exhaustive()
    }
}

/// The object an effect is about, for ordering; events are unordered.
fn key_of(effect: &Effect) -> Option<ObjectKey> {
    match effect {
        Effect::Bind { pod, .. }
        | Effect::PodCondition { pod, .. }
        | Effect::NominatePod { pod, .. }
        | Effect::AnnotatePod { pod, .. } => Some(pod.clone()),
        Effect::ReservationStatus { name, .. } => Some(ObjectKey::cluster(
            berth_core::object::Kind::Reservation,
            name,
        )),
        Effect::CreateReservation(r) => Some(ObjectKey::cluster(
            berth_core::object::Kind::Reservation,
            r.metadata.name.as_deref().unwrap_or(""),
        )),
        Effect::Delete { key, .. } => Some(key.clone()),
        _ => None,
    }
}

impl Executor {
    /// An executor writing through `client`, reporting completions on `tx`; events are
    /// published as `reporter`.
    pub fn new(
        client: Client,
        reporter: Reporter,
        metrics: Arc<Metrics>,
        tx: mpsc::Sender<Input>,
        max_binds: usize,
    ) -> Self {
        let recorder = Recorder::new(client.clone(), reporter);
        Self {
            ctx: Arc::new(Ctx {
                client,
                recorder,
                metrics,
            }),
            tx,
            busy: HashMap::default(),
            binds_running: 0,
            binds_waiting: VecDeque::new(),
            max_binds: max_binds.max(1),
            running: 0,
            tasks: JoinSet::new(),
        }
    }

    /// Takes an effect of the core.
    pub fn submit(&mut self, effect: Effect) {
        let Some(key) = key_of(&effect) else {
            self.spawn(None, effect);
            return;
        };
        if let Some(queue) = self.busy.get_mut(&key) {
            if let Effect::ReservationStatus { .. } = effect {
                if let Some(last @ Effect::ReservationStatus { .. }) = queue.back_mut() {
                    *last = effect;
                    return;
                }
            }
            queue.push_back(effect);
            return;
        }
        self.busy.insert(key.clone(), VecDeque::new());
        self.start(key, effect);
    }

    fn start(&mut self, key: ObjectKey, effect: Effect) {
        if matches!(effect, Effect::Bind { .. }) {
            if self.binds_running >= self.max_binds {
                self.binds_waiting.push_back(effect);
                return;
            }
            self.binds_running += 1;
        }
        self.spawn(Some(key), effect);
    }

    fn spawn(&mut self, key: Option<ObjectKey>, effect: Effect) {
        self.running += 1;
        let ctx = self.ctx.clone();
        let tx = self.tx.clone();
        self.tasks.spawn(async move {
            let bind = matches!(effect, Effect::Bind { .. });
            let outcome = perform(&ctx, effect).await;
            // The driver gone means berth is stopping; nothing is left to tell.
            let _ = tx
                .send(Input::Done(Completion { key, bind, outcome }))
                .await;
        });
    }

    /// An effect finished: start what waited for it.
    pub fn done(&mut self, c: &Completion) {
        self.running = self.running.saturating_sub(1);
        // Reap finished tasks so the set does not grow.
        while self.tasks.try_join_next().is_some() {}
        if c.bind {
            self.binds_running = self.binds_running.saturating_sub(1);
            if let Some(next) = self.binds_waiting.pop_front() {
                self.binds_running += 1;
                let key = key_of(&next);
                self.spawn(key, next);
            }
        }
        let Some(key) = &c.key else { return };
        match self.busy.get_mut(key).and_then(VecDeque::pop_front) {
            Some(next) => self.start(key.clone(), next),
            None => {
                self.busy.remove(key);
            }
        }
    }

    /// Effects running or waiting.
    pub fn outstanding(&self) -> usize {
        self.running
            + self.binds_waiting.len()
            + self.busy.values().map(VecDeque::len).sum::<usize>()
    }

    /// Binds running or waiting for a slot.
    pub fn binds(&self) -> usize {
        self.binds_running + self.binds_waiting.len()
    }

    /// Whether binds wait for a slot: the driver holds new cycles back until they do not.
    pub fn saturated(&self) -> bool {
        !self.binds_waiting.is_empty() || self.binds_running >= self.max_binds
    }
}

async fn perform(ctx: &Ctx, effect: Effect) -> Outcome {
    match effect {
        Effect::Bind {
            pod,
            uid,
            node,
            annotations,
        } => bind::bind(ctx, pod, uid, node, annotations).await,
        Effect::PodCondition {
            pod,
            status,
            reason,
            message,
        } => {
            pod::condition(ctx, &pod, status, &reason, &message).await;
            Outcome::Done
        }
        Effect::NominatePod { pod, node } => {
            pod::nominate(ctx, &pod, node.as_deref()).await;
            Outcome::Done
        }
        Effect::AnnotatePod { pod, annotations } => {
            pod::annotate(ctx, &pod, &annotations).await;
            Outcome::Done
        }
        Effect::ReservationStatus { name, uid, status } => {
            reservation::status(ctx, &name, &uid, &status).await;
            Outcome::Done
        }
        Effect::CreateReservation(r) => {
            reservation::create(ctx, &r).await;
            Outcome::Done
        }
        Effect::Delete {
            key,
            uid,
            resource_version,
        } => {
            delete::delete(ctx, &key, &uid, resource_version).await;
            Outcome::Done
        }
        Effect::Record(r) => {
            record::publish(ctx, &r).await;
            Outcome::Done
        }
        other => {
            tracing::warn!(effect = ?other, "effect not supported by the cluster adapter");
            Outcome::Done
        }
    }
}

/// Milliseconds since the epoch, from the system clock (the adapter's only clock).
pub fn wall_clock_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}
