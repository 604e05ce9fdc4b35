//! The controller loop: one task owns the core and is the only one that touches it.
//!
//! Each round takes every input that is ready (watch events, finished effects), hands it to
//! the core with `now` from the wall clock, fires the core's timers when due, runs the
//! scheduling cycles that can run, and hands the effects to the [`Executor`]. kube-scheduler's
//! `scheduleOne` loop and its binding goroutines map onto this loop and the executor's tasks.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use berth_core::collections::HashMap;
use berth_core::object::{Kind, Object, ObjectKey};
use berth_core::scheduler::Counters;
use berth_core::{Config, Event, Record, Scheduler};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinSet;

use crate::client::Clients;
use crate::effects::{Completion, Executor, Outcome};
use crate::error::Error;
use crate::events::{Events, Reporter};
use crate::http::{self, Health};
use crate::kinds::Served;
use crate::leader::{Elector, Fence, Role};
use crate::metrics::Metrics;
use crate::mirror::Mirror;
use crate::settings::Settings;
use crate::watch::{self as watching, Input};

/// How `berth run` runs.
#[derive(Debug)]
pub struct RunOptions {
    /// `--kubeconfig` (wins over `clientConnection.kubeconfig`).
    pub kubeconfig: Option<String>,
    /// The configuration file's contents.
    pub settings: Settings,
    /// Where to serve `/metrics` and the health endpoints (`None`: not served).
    pub metrics_addr: Option<SocketAddr>,
    /// Binds in flight at most; past it new cycles wait.
    pub max_binds_in_flight: usize,
    /// This instance's name in its lease and in events (`reportingInstance`): the host
    /// name plus a random suffix ([`crate::leader::identity`]).
    pub identity: String,
    /// Seed for tie-breaking between equally scored nodes.
    pub seed: u64,
    /// Keep, per object, the UID of the last version the core was handed (tests wait on
    /// it with [`Handle::seen`] to hand the core objects in a known order).
    pub track_objects: bool,
}

/// Per object, the UID the core last saw applied (`None` once deleted).
type Seen = Arc<std::sync::Mutex<HashMap<ObjectKey, Option<String>>>>;

impl RunOptions {
    /// Options with the built-in configuration.
    pub fn new(settings: Settings) -> Self {
        Self {
            kubeconfig: None,
            settings,
            metrics_addr: None,
            max_binds_in_flight: 256,
            identity: crate::leader::identity(),
            seed: 0,
            track_objects: false,
        }
    }
}

/// What the loop looks like from outside, published after every round (tests wait on it;
/// `/readyz` reads `synced`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// The first LIST of every watched kind is in.
    pub synced: bool,
    /// Scheduling is held ([`Handle::hold`]).
    pub held: bool,
    /// Watch events handed to the core so far.
    pub events: u64,
    /// Scheduling cycles run so far.
    pub cycles: u64,
    /// Items in the scheduling queue (active, backing off and unschedulable).
    pub pending: usize,
    /// Effects running or waiting.
    pub outstanding: usize,
    /// Binds running or waiting for a slot.
    pub binds: usize,
    /// Pods assumed and not yet confirmed by the watch.
    pub assumed: usize,
    /// Nothing more will happen without a new input or a timer: synced, not held, no
    /// effect outstanding, no assumed pod waiting for its confirmation, inputs drained.
    pub idle: bool,
    /// The address `/metrics` is served on.
    pub metrics_addr: Option<SocketAddr>,
    /// This replica leads (always, without leader election).
    pub leader: bool,
}

/// A running `berth run`.
#[derive(Debug)]
pub struct Handle {
    snapshot: watch::Receiver<Snapshot>,
    hold: watch::Sender<bool>,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<Result<(), Error>>,
    seen: Option<Seen>,
    rounds: Arc<AtomicU64>,
}

impl Handle {
    /// How many rounds the loop has run. A loop with nothing to do sleeps until an input, a
    /// due timer or the once-a-second gauge refresh; tests check that it does.
    pub fn rounds(&self) -> u64 {
        self.rounds.load(Ordering::Relaxed)
    }

    /// With [`RunOptions::track_objects`]: `Some(Some(uid))` when the core's last input for
    /// `key` applied the object with that UID, `Some(None)` when it deleted it, `None` when
    /// it has heard nothing of it (or tracking is off).
    pub fn seen(&self, key: &ObjectKey) -> Option<Option<String>> {
        let seen = self.seen.as_ref()?;
        let map = seen.lock().unwrap_or_else(|p| p.into_inner());
        map.get(key).cloned()
    }

    /// The latest snapshot.
    pub fn snapshot(&self) -> Snapshot {
        self.snapshot.borrow().clone()
    }

    /// Waits until `pred` holds for a snapshot, or `timeout` passes (then the last snapshot
    /// is the error).
    pub async fn wait_for(
        &mut self,
        timeout: Duration,
        pred: impl Fn(&Snapshot) -> bool,
    ) -> Result<Snapshot, Snapshot> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            {
                let s = self.snapshot.borrow_and_update();
                if pred(&s) {
                    return Ok(s.clone());
                }
            }
            match tokio::time::timeout_at(deadline, self.snapshot.changed()).await {
                Ok(Ok(())) => {}
                _ => return Err(self.snapshot()),
            }
        }
    }

    /// Holds scheduling (`true`) or lets it go on: while held, inputs are applied but no
    /// cycle runs. For tests that must hand the core a whole step before it schedules, as
    /// the simulator does.
    pub fn hold(&self, on: bool) {
        self.hold.send_replace(on);
    }

    /// Waits until the loop ends by itself (leadership lost, the lease refused), or
    /// `shutdown` resolves, then stops it ([`Handle::stop`]).
    pub async fn run_until(mut self, shutdown: impl Future<Output = ()>) -> Result<(), Error> {
        let ended = tokio::select! {
            () = shutdown => None,
            r = &mut self.task => Some(r),
        };
        match ended {
            None => {
                tracing::info!("stopping: no new cycles; finishing binds in flight");
                self.stop().await
            }
            Some(Ok(r)) => r,
            Some(Err(e)) => {
                tracing::error!(error = %e, "the scheduler task ended abnormally");
                Ok(())
            }
        }
    }

    /// Stops new cycles, finishes the binds in flight, writes the reservation statuses owed,
    /// releases the lease, and returns.
    pub async fn stop(mut self) -> Result<(), Error> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        match self.task.await {
            Ok(r) => r,
            Err(e) => {
                tracing::error!(error = %e, "the scheduler task ended abnormally");
                Ok(())
            }
        }
    }
}

/// `berth run`: connects, schedules until `shutdown` resolves (then finishes binds in flight)
/// or until leadership is lost or the lease refused (then returns that error at once).
pub async fn run(options: RunOptions, shutdown: impl Future<Output = ()>) -> Result<(), Error> {
    let clients =
        crate::client::connect_all(options.kubeconfig.as_deref(), &options.settings.client).await?;
    let handle = start(clients, options).await?;
    handle.run_until(shutdown).await
}

/// Starts the watchers, the loop and the endpoints with `clients` (one client for all three
/// uses will do in tests); returns at once.
pub async fn start(clients: impl Into<Clients>, options: RunOptions) -> Result<Handle, Error> {
    let clients: Clients = clients.into();
    let client = clients.main.clone();
    let metrics = Arc::new(Metrics::new());
    let ready = Arc::new(AtomicBool::new(false));
    let healthy = Arc::new(AtomicBool::new(true));
    let lease_ok = Arc::new(AtomicBool::new(true));
    log_start(&options);
    let (stop_tx, stop_rx) = oneshot::channel();
    let (hold_tx, hold_rx) = watch::channel(false);
    let (snap_tx, snap_rx) = watch::channel(Snapshot::default());

    let served = Served::discover(&client).await;
    let (tx, rx) = mpsc::channel(4096);
    let mut watchers = JoinSet::new();
    let kinds = watching::spawn_all(&client, &served, &tx, &metrics, &mut watchers);
    tracing::info!(kinds = ?kinds, "watching");

    let (http_stop_tx, http_stop_rx) = oneshot::channel::<()>();
    let health = Health {
        metrics: metrics.clone(),
        ready: ready.clone(),
        healthy: healthy.clone(),
        lease_ok: lease_ok.clone(),
    };
    let metrics_addr = serve_health(options.metrics_addr, health, http_stop_rx).await?;

    let (role_rx, elector_stop_tx, elector, fence) = elect(&clients, &options, lease_ok);
    let profiles = options.settings.profiles;
    let profile_label = match profiles.as_slice() {
        [one] => one.scheduler_name.clone(),
        _ => "all".into(),
    };
    let scheduler = Scheduler::new(
        profiles,
        Config {
            seed: options.seed,
            wait_for_sync: kinds.clone(),
        },
    );
    let reporter = Reporter {
        controller: "berth".into(),
        instance: options.identity.clone(),
    };
    let events = Events::spawn(clients.events.clone(), reporter, metrics.clone());
    let executor = Executor::new(
        &clients,
        events,
        metrics.clone(),
        fence,
        tx.clone(),
        options.max_binds_in_flight,
    );
    let seen: Option<Seen> = options.track_objects.then(Default::default);
    let rounds = Arc::new(AtomicU64::new(0));
    let driver = Driver {
        rounds: rounds.clone(),
        role: role_rx,
        mirror: Some(Mirror::new(kinds)),
        healthy,
        seen: seen.clone(),
        scheduler,
        executor,
        metrics,
        ready,
        rx,
        hold: hold_rx,
        snapshot: snap_tx,
        profile_label,
        last: Counters::default(),
        first_seen: HashMap::default(),
        events: 0,
        cycles: 0,
        metrics_addr,
        gauges_at: None,
        more: false,
        lease: options.settings.leader_election.lease(),
        _watchers: watchers,
    };
    let task = tokio::spawn(async move {
        let r = driver.run(stop_rx).await;
        // Release the lease (if held) only once binds in flight are done.
        let _ = elector_stop_tx.send(());
        if let Some(e) = elector {
            let _ = e.await;
        }
        let _ = http_stop_tx.send(());
        r
    });
    Ok(Handle {
        snapshot: snap_rx,
        hold: hold_tx,
        stop: Some(stop_tx),
        task,
        seen,
        rounds,
    })
}

/// Logs what this replica schedules and how it elects its leader.
fn log_start(options: &RunOptions) {
    let names: Vec<&str> = options
        .settings
        .profiles
        .iter()
        .map(|p| p.scheduler_name.as_str())
        .collect();
    tracing::info!(profiles = ?names, identity = %options.identity, "scheduling the pods whose spec.schedulerName is one of the profiles");
    let le = &options.settings.leader_election;
    if le.leader_elect {
        tracing::info!(
            lease = %le.lease(),
            lease_duration = ?le.lease_duration,
            renew_deadline = ?le.renew_deadline,
            retry_period = ?le.retry_period,
            "leader election on"
        );
    } else {
        tracing::info!("leader election off: this replica schedules from the start");
    }
}

/// Serves /metrics and the health endpoints on `addr`, if given, until `stop`; the address
/// bound.
async fn serve_health(
    addr: Option<std::net::SocketAddr>,
    health: Health,
    stop: oneshot::Receiver<()>,
) -> Result<Option<std::net::SocketAddr>, Error> {
    let Some(addr) = addr else { return Ok(None) };
    let (bound, _task) = http::serve(addr, health, async {
        let _ = stop.await;
    })
    .await?;
    tracing::info!(%bound, "serving /metrics, /healthz, /livez, /readyz");
    Ok(Some(bound))
}

/// The elector, if leader election is on: the role it publishes, its stop, its task and the
/// fence of writes. Without leader election this replica leads from the start; with it, it
/// watches as a standby until the elector says otherwise.
#[allow(clippy::type_complexity)]
fn elect(
    clients: &Clients,
    options: &RunOptions,
    lease_ok: Arc<AtomicBool>,
) -> (
    watch::Receiver<Role>,
    oneshot::Sender<()>,
    Option<tokio::task::JoinHandle<()>>,
    Arc<Fence>,
) {
    let (role_tx, role_rx) = watch::channel(Role::Standby);
    let (elector_stop_tx, elector_stop_rx) = oneshot::channel();
    let (elector, fence) = if options.settings.leader_election.leader_elect {
        let fence = Fence::closed();
        let elector = Elector::new(
            clients.leader.clone(),
            options.settings.leader_election.clone(),
            options.identity.clone(),
            fence.clone(),
            lease_ok,
        );
        (
            Some(tokio::spawn(elector.run(role_tx, elector_stop_rx))),
            fence,
        )
    } else {
        role_tx.send_replace(Role::Leader);
        drop(elector_stop_rx);
        (None, Fence::open())
    };
    (role_rx, elector_stop_tx, elector, fence)
}

/// How many ready inputs one round takes at most before it schedules.
const BATCH: usize = 1024;
/// How often the gauges that walk the core's state are refreshed.
const GAUGE_PERIOD: Duration = Duration::from_secs(1);
/// How long a stop waits for binds in flight.
const DRAIN: Duration = Duration::from_secs(30);

struct Driver {
    /// Rounds run so far ([`Handle::rounds`]).
    rounds: Arc<AtomicU64>,
    /// What the elector says.
    role: watch::Receiver<Role>,
    /// While standby: the warm caches, handed to the core on becoming the leader. `None`
    /// once leading.
    mirror: Option<Mirror>,
    healthy: Arc<AtomicBool>,
    seen: Option<Seen>,
    scheduler: Scheduler,
    executor: Executor,
    metrics: Arc<Metrics>,
    ready: Arc<AtomicBool>,
    rx: mpsc::Receiver<Input>,
    hold: watch::Receiver<bool>,
    snapshot: watch::Sender<Snapshot>,
    profile_label: String,
    last: Counters,
    /// When each unbound pod of ours was first seen (the SLI's start).
    first_seen: HashMap<ObjectKey, Instant>,
    events: u64,
    cycles: u64,
    metrics_addr: Option<SocketAddr>,
    gauges_at: Option<Instant>,
    /// The last round stopped at the bound on cycles (free bind slots) with work left:
    /// the next round comes at once, without waiting for an input.
    more: bool,
    /// The lease, `namespace/name`, for messages.
    lease: String,
    /// Dropping the set aborts the watchers.
    _watchers: JoinSet<()>,
}

/// The wall clock in the core's unit.
fn now() -> berth_core::time::Time {
    crate::effects::wall_clock_ms()
}

impl Driver {
    async fn run(mut self, mut stop: oneshot::Receiver<()>) -> Result<(), Error> {
        // A closed channel is ready at once, for ever: its branch is turned off, or the loop
        // would spin (without leader election nobody keeps the role's sender).
        let mut role_open = true;
        let mut hold_open = true;
        // One timer for the core's next timeout, moved only when that changes, and one
        // ticker for the gauges: no timer is built and dropped per round.
        let timer = tokio::time::sleep(Duration::ZERO);
        tokio::pin!(timer);
        let mut armed: Option<berth_core::time::Time> = None;
        let mut gauges = tokio::time::interval(GAUGE_PERIOD);
        gauges.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let due = self.scheduler.poll_timeout();
            if due != armed {
                armed = due;
                if let Some(t) = due {
                    let wait = u64::try_from(t.saturating_sub(now())).unwrap_or(0);
                    timer
                        .as_mut()
                        .reset(tokio::time::Instant::now() + Duration::from_millis(wait));
                }
            }
            tokio::select! {
                biased;
                _ = &mut stop => break,
                input = self.rx.recv() => {
                    let Some(input) = input else { break };
                    self.input(input);
                    for _ in 1..BATCH {
                        match self.rx.try_recv() {
                            Ok(input) => self.input(input),
                            Err(_) => break,
                        }
                    }
                }
                // Wakes an idle loop so the gauges stay fresh.
                _ = gauges.tick() => {}
                () = std::future::ready(()), if self.more => {}
                _ = &mut timer, if armed.is_some() && self.mirror.is_none() => {
                    // Fired: the next round arms it again for whatever is due next.
                    armed = None;
                    self.scheduler.handle_timeout(now());
                }
                changed = self.hold.changed(), if hold_open => {
                    if changed.is_err() {
                        // The handle is gone; nobody can release a hold any more.
                        hold_open = false;
                        let _ = self.hold.borrow_and_update();
                    }
                }
                changed = self.role.changed(), if role_open => {
                    let role = *self.role.borrow_and_update();
                    match (changed, role) {
                        (Ok(()), Role::Leader) => self.lead(),
                        (Ok(()), Role::Lost) => {
                            // Stop at once: no new cycle, no new write (the fence is closed
                            // already, so effects queued or retrying start nothing).
                            self.healthy.store(false, Ordering::Release);
                            self.publish();
                            return Err(Error::LeadershipLost);
                        }
                        (Ok(()), Role::Forbidden) => {
                            self.publish();
                            return Err(Error::LeaseForbidden {
                                lease: self.lease.clone(),
                            });
                        }
                        (Ok(()), _) => {}
                        // No leader election, or the elector ended (stopping): the role
                        // stays what it is.
                        (Err(_), _) => role_open = false,
                    }
                }
            }
            self.rounds.fetch_add(1, Ordering::Relaxed);
            self.schedule();
            self.publish();
        }
        self.drain().await;
        Ok(())
    }

    /// Became the leader: the core gets everything the standby watched, kind by kind as a
    /// LIST would give it, then the live events.
    fn lead(&mut self) {
        let Some(mirror) = self.mirror.take() else {
            return;
        };
        let now = now();
        for event in mirror.replay() {
            self.scheduler.handle(now, event);
        }
        self.count_refusals();
        tracing::info!("leading: scheduling");
    }

    fn input(&mut self, input: Input) {
        match input {
            Input::Event(event) if self.mirror.is_some() => {
                self.events += 1;
                self.track_seen(&event);
                if let Some(mirror) = &mut self.mirror {
                    mirror.apply(event);
                }
            }
            Input::Unreadable(bad) if self.mirror.is_some() => {
                tracing::debug!(%bad, "object not read (standby: the leader reports it)");
            }
            Input::Event(event) => {
                self.events += 1;
                self.track_sli(&event);
                self.track_seen(&event);
                self.track_nodes(&event);
                self.scheduler.handle(now(), event);
                self.count_refusals();
            }
            Input::Unreadable(bad) => {
                self.metrics
                    .unreadable(bad.kind, berth_api::validate::Rule::Malformed);
                tracing::warn!(%bad, "object not read");
                self.executor.submit(berth_core::Effect::Record(Record {
                    involved: bad.key(),
                    uid: bad.uid,
                    type_: "Warning",
                    reason: "Invalid".into(),
                    message: format!("berth cannot read this object: {}", bad.message),
                }));
            }
            Input::Done(c) => self.done(c),
        }
    }

    /// Objects the core refused since the last look (each reported once, with its event).
    fn count_refusals(&mut self) {
        for (kind, rule) in self.scheduler.take_refusals() {
            self.metrics.unreadable(kind, rule);
        }
    }

    fn track_seen(&self, event: &Event) {
        let Some(seen) = &self.seen else { return };
        let mut map = seen.lock().unwrap_or_else(|p| p.into_inner());
        match event {
            Event::Applied(o) => {
                map.insert(o.key(), Some(o.meta().uid.clone().unwrap_or_default()));
            }
            Event::Deleted(k) => {
                map.insert(k.clone(), None);
            }
            _ => {}
        }
    }

    /// A deleted node's binds that have not started are dropped and their pods go back to
    /// the queue (as a failed bind: Unreserve, back-off); a node (re)created takes binds again.
    fn track_nodes(&mut self, event: &Event) {
        match event {
            Event::Deleted(key) if key.kind == Kind::Node => {
                for dropped in self.executor.node_deleted(&key.name) {
                    if let berth_core::Effect::Bind { pod, uid, node, .. } = dropped {
                        self.metrics.bind_failed("node_deleted");
                        tracing::info!(pod = %pod, node, "bind dropped: the node was deleted before it was sent");
                        let message =
                            format!("node {node} was deleted before the binding was sent");
                        self.scheduler.handle(
                            now(),
                            Event::BindFailed {
                                pod,
                                uid,
                                node,
                                class: berth_core::BindFailure::Transient,
                                message,
                            },
                        );
                    }
                }
            }
            Event::Applied(Object::Node(n)) => {
                if let Some(name) = n.metadata.name.as_deref() {
                    self.executor.node_exists(name);
                }
            }
            _ => {}
        }
    }

    fn done(&mut self, c: Completion) {
        self.executor.done(&c);
        if let Outcome::BindFailed {
            pod,
            uid,
            node,
            class,
            message,
        } = c.outcome
        {
            self.scheduler.handle(
                now(),
                Event::BindFailed {
                    pod,
                    uid,
                    node,
                    class,
                    message,
                },
            );
        }
    }

    /// The SLI runs from the first sight of an unbound pod to the watch's confirmation of
    /// its binding.
    fn track_sli(&mut self, event: &Event) {
        match event {
            Event::Applied(Object::Pod(p)) => {
                let key = ObjectKey::pod(
                    p.metadata.namespace.as_deref().unwrap_or("default"),
                    p.metadata.name.as_deref().unwrap_or_default(),
                );
                let bound = p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some();
                if bound {
                    if let Some(t) = self.first_seen.remove(&key) {
                        self.metrics.scheduled_after(t.elapsed());
                    }
                } else {
                    self.first_seen.entry(key).or_insert_with(Instant::now);
                }
            }
            Event::Deleted(key) if key.kind == Kind::Pod => {
                self.first_seen.remove(key);
            }
            _ => {}
        }
    }

    fn synced(&self) -> bool {
        match &self.mirror {
            Some(m) => m.synced(),
            None => self.scheduler.synced(),
        }
    }

    fn schedule(&mut self) {
        let synced = self.synced();
        if self.mirror.is_some() {
            if synced && !self.ready.swap(true, Ordering::AcqRel) {
                tracing::info!("synced: every watched kind listed; standing by");
            }
            return;
        }
        if synced && !self.ready.swap(true, Ordering::AcqRel) {
            tracing::info!("synced: every watched kind listed; scheduling");
        }
        let held = *self.hold.borrow();
        // At most as many cycles as there are bind slots free (a cycle binds one pod at
        // most), so binds in flight never pass --max-binds-in-flight; more rounds follow at
        // once while slots are left and cycles were cut short.
        let budget = self.executor.free_slots();
        self.more = false;
        if synced && !held && budget > 0 {
            let start = Instant::now();
            let cycles = self.scheduler.run_at_most(now(), budget);
            self.cycles += cycles as u64;
            self.attempt_metrics(start.elapsed(), cycles);
            self.more = cycles == budget;
        }
        while let Some(effect) = self.scheduler.poll_effect() {
            self.executor.submit(effect);
        }
        self.executor.flush();
        self.more &= !self.executor.saturated();
        self.refresh_gauges();
    }

    fn attempt_metrics(&mut self, elapsed: Duration, cycles: usize) {
        let c = self.scheduler.stats();
        if cycles == 0 && c == self.last {
            return;
        }
        let each = elapsed / u32::try_from(cycles.max(1)).unwrap_or(u32::MAX);
        let p = &self.profile_label;
        self.metrics
            .attempts(p, "scheduled", c.scheduled - self.last.scheduled, each);
        self.metrics.attempts(
            p,
            "unschedulable",
            c.unschedulable - self.last.unschedulable,
            each,
        );
        self.metrics
            .attempts(p, "error", c.errors - self.last.errors, each);
        let l = &self.last;
        self.metrics.preemption(
            c.preemption_attempts.saturating_sub(l.preemption_attempts),
            c.preemption_victims.saturating_sub(l.preemption_victims),
            c.preemption_holds_completed
                .saturating_sub(l.preemption_holds_completed),
            c.preemption_holds_expired
                .saturating_sub(l.preemption_holds_expired),
        );
        self.last = c;
    }

    /// Gauges that walk the core's state (queue, reservations, NUMA cache): refreshed at
    /// most once a second, so a busy loop does not pay a walk per round.
    fn refresh_gauges(&mut self) {
        if self.gauges_at.is_some_and(|t| t.elapsed() < GAUGE_PERIOD) {
            return;
        }
        self.gauges_at = Some(Instant::now());
        let running = self.executor.binds_running();
        self.metrics
            .binds_in_flight(running, self.executor.binds().saturating_sub(running));
        let l = self.scheduler.queue_lengths();
        self.metrics.pending("active", l.active);
        self.metrics.pending("backoff", l.backoff);
        self.metrics.pending("unschedulable", l.unschedulable);
        let mut phases: [(&'static str, usize); 5] = [
            ("Pending", 0),
            ("Available", 0),
            ("Succeeded", 0),
            ("Waiting", 0),
            ("Failed", 0),
        ];
        // Virtual reservations (DRP) are no objects of the API: not counted.
        for r in self.scheduler.reservations().filter(|r| !r.is_virtual()) {
            let name = r.phase.as_str();
            if let Some(slot) = phases.iter_mut().find(|(p, _)| *p == name) {
                slot.1 += 1;
            }
        }
        for (phase, n) in phases {
            self.metrics.reservations(phase, n);
        }
        self.metrics.drp(
            self.scheduler.drp_metrics(),
            self.scheduler.drp_waiting().count(),
        );
        let numa = self.scheduler.numa_metrics();
        for (name, v) in [
            ("dirty_filtered_out", numa.cache.dirty_filtered_out),
            ("dirty_foreign_pods", numa.cache.dirty_foreign_pods),
            ("dirty_attribute_change", numa.cache.dirty_attribute_change),
            ("resync_runs", numa.cache.resync_runs),
            ("resync_attempts", numa.cache.resync_attempts),
            ("fingerprint_matches", numa.cache.fingerprint_matches),
            ("fingerprint_mismatches", numa.cache.fingerprint_mismatches),
            ("fingerprint_missing", numa.cache.fingerprint_missing),
            ("flushes", numa.cache.flushes),
            ("generation", numa.cache.generation),
            ("nrt_updates", numa.nrt_updates),
            ("dirty_nodes", numa.dirty_nodes),
        ] {
            self.metrics.numa(name, v);
        }
    }

    fn publish(&mut self) {
        let outstanding = self.executor.outstanding();
        let held = *self.hold.borrow();
        let synced = self.synced();
        let leader = self.mirror.is_none();
        // Counting assumed pods walks every pod: only worth it when the rest says idle.
        let maybe_idle =
            leader && synced && !held && outstanding == 0 && self.rx.is_empty() && !self.more;
        let assumed = if maybe_idle { self.assumed() } else { 0 };
        let snap = Snapshot {
            synced,
            held,
            events: self.events,
            cycles: self.cycles,
            pending: self.scheduler.pending(),
            outstanding,
            binds: self.executor.binds(),
            assumed,
            idle: maybe_idle && assumed == 0,
            metrics_addr: self.metrics_addr,
            leader,
        };
        self.snapshot.send_if_modified(|s| {
            if *s == snap {
                false
            } else {
                *s = snap;
                true
            }
        });
    }

    fn assumed(&self) -> usize {
        self.scheduler.assumed_pods()
    }

    /// After a stop: no new cycles, but everything owed is written before the lease is
    /// released (bounded by [`DRAIN`]): the binds in flight, and what their confirmations
    /// make the core write (a reservation's owners, its phase). The watch keeps feeding the
    /// core meanwhile; a successor would otherwise start from reservations whose
    /// `currentOwners` miss pods running in them.
    async fn drain(&mut self) {
        let deadline = tokio::time::Instant::now() + DRAIN;
        let leader = self.mirror.is_none();
        loop {
            if leader {
                // No cycle: the reservation statuses and queue work the inputs made due.
                self.scheduler.run_at_most(now(), 0);
                while let Some(effect) = self.scheduler.poll_effect() {
                    self.executor.submit(effect);
                }
                self.executor.flush();
            }
            if self.executor.outstanding() == 0 && (!leader || self.assumed() == 0) {
                break;
            }
            match tokio::time::timeout_at(deadline, self.rx.recv()).await {
                Ok(Some(Input::Done(c))) if !leader => self.executor.done(&c),
                Ok(Some(input)) if leader => self.input(input),
                Ok(Some(_)) => {}
                Ok(None) | Err(_) => break,
            }
        }
        let left = self.executor.binds();
        let outstanding = self.executor.outstanding();
        if outstanding > 0 {
            tracing::warn!(
                binds = left,
                writes = outstanding,
                "stopped with writes still in flight"
            );
        }
    }
}
