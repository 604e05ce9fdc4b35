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

mod bind;
mod delete;
pub mod lanes;
mod pod;
mod record;
mod reservation;
mod volume;

use std::sync::Arc;

use berth_core::object::ObjectKey;
use berth_core::{BindFailure, Effect};
use kube::runtime::events::{Recorder, Reporter};
use kube::Client;
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use crate::metrics::Metrics;
use crate::watch::Input;
use lanes::{Lanes, Ready};

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

/// Runs effects as tasks, as [`Lanes`] clears them.
pub struct Executor {
    ctx: Arc<Ctx>,
    tx: mpsc::Sender<Input>,
    lanes: Lanes,
    running: usize,
    tasks: JoinSet<()>,
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
            lanes: Lanes::new(max_binds),
            running: 0,
            tasks: JoinSet::new(),
        }
    }

    /// Takes an effect of the core.
    pub fn submit(&mut self, effect: Effect) {
        if let Some(ready) = self.lanes.submit(effect) {
            self.spawn(ready);
        }
    }

    fn spawn(&mut self, (key, effect): Ready) {
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
        for ready in self.lanes.done(c.key.as_ref(), c.bind) {
            self.spawn(ready);
        }
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
        Effect::AnnotateReservation {
            name,
            uid,
            annotations,
        } => {
            reservation::annotate(ctx, &name, &uid, &annotations).await;
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
            preemption,
        } => {
            delete::delete(ctx, &key, &uid, resource_version, preemption.as_ref()).await;
            Outcome::Done
        }
        Effect::Record(r) => {
            record::publish(ctx, &r).await;
            Outcome::Done
        }
        Effect::BindVolume {
            pod,
            uid,
            node,
            volume,
        } => volume::bind_volume(ctx, pod, uid, node, &volume).await,
        Effect::ProvisionClaim {
            pod,
            uid,
            node,
            claim,
        } => volume::provision_claim(ctx, pod, uid, node, &claim).await,
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
