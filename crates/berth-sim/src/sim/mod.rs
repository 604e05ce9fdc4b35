//! [`Simulation`]: the driver around [`berth_core::Scheduler`]. It plays the API server (a
//! [`Store`] of objects, defaulting and admission on create), performs the scheduler's
//! effects and feeds the results back, runs the node agent, and moves virtual time.
//!
//! The loop (see `scheduler.rs` for the core's side):
//! 1. an object is created, replaced or deleted → [`Scheduler::handle`];
//! 2. [`Simulation::settle`]: `run_until_idle`, perform every effect (a bind writes the pod
//!    and comes back as `Applied`, then the kubelet admits it and that comes back too),
//!    fire timers due now, repeat until nothing happens;
//! 3. `advance` fires every timer of the core and of the agent in time order, settling after
//!    each.
//!
//! The parts: `apiserver` (create, replace, delete, admission), `effects` (the scheduler's
//! writes), `event_loop` (settle, timers, controllers, virtual time), `agents` (kubelet and
//! provisioner), `events` (the event recorder) and `expect` (the Scenario's checks).

use berth_core::collections::HashMap;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use berth_api::k8s_openapi::api::core::v1::{Pod, PodStatus};
use berth_api::k8s_openapi::api::scheduling::v1::PriorityClass;
use berth_api::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use berth_api::reservation::ReservationPhase;
use berth_core::time::{rfc3339, Time};
use berth_core::{
    BindFailure, Config, Effect, Event, Kind, Object, ObjectKey, Profile, Record, Scheduler,
};

pub use crate::objects::{
    allocated_reservation, api_version_of, derive_uid, meta_time, pod_scheduled_message,
    EVENT_COMPONENT,
};

use crate::agent::{Admission, NodeAgent};
use crate::input::{Input, Item, Source, SYSTEM_PRIORITY_CLASSES};
use crate::provisioner::{Provisioner, ProvisionerConfig};
use crate::recorded::RecordedEvent;
use crate::scenario::{Expect, NodeAgentConfig, Step, DEFAULT_START_TIME};
use crate::store::Store;

mod agents;
mod apiserver;
mod effects;
mod event_loop;
mod events;
mod expect;

pub use apiserver::LABEL_HOSTNAME;
use events::Recorder;

/// `PreemptLowerPriority`, the preemption policy when neither pod nor class sets one.
pub const DEFAULT_PREEMPTION_POLICY: &str = "PreemptLowerPriority";

/// Rounds of perform-and-reschedule at one instant before the simulator declares a livelock
/// (a core that keeps emitting effects in response to its own effects).
const MAX_SETTLE_ROUNDS: usize = 100_000;

/// The start of virtual time when the Scenario gives none (`2024-01-01T00:00:00Z`).
pub fn default_start() -> Time {
    berth_core::time::parse_rfc3339(DEFAULT_START_TIME).unwrap_or(1_704_067_200_000)
}

/// The simulated cluster.
#[derive(Debug)]
pub struct Simulation {
    core: Scheduler,
    store: Store,
    agent: NodeAgent,
    /// The Dynamic Reservation Provisioning provisioner.
    provisioner: Provisioner,
    start: Time,
    now: Time,
    recorder: Recorder,
    /// Pods bound to a node that does not exist (yet): the kubelet admits them when it does.
    awaiting_node: BTreeMap<String, BTreeSet<ObjectKey>>,
    /// While the initial objects are created: the names of the nodes among them, so a pod
    /// written before its node is still found running there.
    initial_nodes: BTreeSet<String>,
    /// Where the Scenario was written, for messages that name its steps.
    scenario_source: Option<Source>,
    /// Lines for standard error: warnings and failed expectations, in order.
    log: Vec<String>,
    /// How many expectations failed.
    failed: usize,
    /// What happened over virtual time, when asked for (`-v`, `--report`).
    timeline: Option<Box<crate::timeline::Timeline>>,
    /// The progress bar over the Scenario's steps, when asked for.
    progress: Option<crate::progress::Progress>,
    /// The CPUs of the nodes the simulated agent publishes a CPU topology for.
    cpu_budget: crate::cpu_budget::CpuBudget,
    /// Bound pods the kubelet does not start until their claims are bound.
    awaiting_volumes: BTreeSet<ObjectKey>,
    /// The PV controller is running (its own writes do not start it again).
    syncing_volumes: bool,
    /// Set while the resource-claim controller runs (its writes re-enter `apply_object`).
    syncing_claims: bool,
    /// kube-controller-manager's workload controllers.
    controllers: crate::controllers::Controllers,
    /// The PodMigrationJob controller's arguments (`spec.migration` of the Scenario).
    migration: berth_core::migration::MigrationArgs,
}

/// What [`Simulation::run_with`] records besides the final state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Hooks {
    /// Record a [`crate::timeline::Timeline`] (per-step log, report data).
    pub timeline: bool,
    /// Draw a progress bar on standard error (when it is a terminal, after a second).
    pub progress: bool,
}

impl Simulation {
    /// A cluster with nothing in it, at virtual time `start`.
    pub fn new(
        profiles: Vec<Profile>,
        config: Config,
        start: Time,
        agent: NodeAgentConfig,
    ) -> Self {
        Self {
            core: Scheduler::new(profiles, config),
            store: Store::default(),
            agent: NodeAgent::new(agent, start),
            provisioner: Provisioner::new(ProvisionerConfig::default()),
            start,
            now: start,
            recorder: Recorder::default(),
            awaiting_node: BTreeMap::new(),
            initial_nodes: BTreeSet::new(),
            scenario_source: None,
            log: Vec::new(),
            failed: 0,
            timeline: None,
            progress: None,
            cpu_budget: crate::cpu_budget::CpuBudget::default(),
            awaiting_volumes: BTreeSet::new(),
            syncing_volumes: false,
            syncing_claims: false,
            controllers: crate::controllers::Controllers::default(),
            migration: berth_core::migration::MigrationArgs::default(),
        }
    }

    /// Builds the cluster for `input` (start time and node agent from its Scenario) and runs
    /// it to the end: initial objects at the start time, then every step.
    pub fn run(profiles: Vec<Profile>, config: Config, input: &Input) -> Self {
        Self::run_with(profiles, config, input, Hooks::default())
    }

    /// [`Simulation::run`], recording what `hooks` asks for.
    pub fn run_with(profiles: Vec<Profile>, config: Config, input: &Input, hooks: Hooks) -> Self {
        // Cheap: objects are shared (`Arc`); they are copied when written, as before.
        Self::run_input(profiles, config, input.clone(), hooks)
    }

    /// [`Simulation::run_with`], taking the input: each object moves into the store as it is
    /// created (no copy of it stays behind in the input, and none is made to write it), and
    /// each step is dropped once it has run. What `berth simulate` uses: a million pods are a
    /// million objects once, not twice.
    pub fn run_input(profiles: Vec<Profile>, config: Config, input: Input, hooks: Hooks) -> Self {
        let Input { items, scenario } = input;
        let (scenario_source, scenario) = match scenario {
            Some((src, s)) => (Some(src), Some(s)),
            None => (None, None),
        };
        let start = scenario
            .as_ref()
            .and_then(|s| s.start_time)
            .unwrap_or_else(default_start);
        let agent = scenario.as_ref().map(|s| s.node_agent).unwrap_or_default();
        let mut sim = Self::new(profiles, config, start, agent);
        if let Some(s) = &scenario {
            sim.provisioner = Provisioner::new(s.provisioner);
            sim.migration = s.migration.clone();
        }
        sim.scenario_source = scenario_source;
        if hooks.timeline {
            sim.timeline = Some(Box::default());
        }
        let steps = scenario.as_ref().map_or(0, |s| s.steps.len());
        if hooks.progress {
            sim.progress = Some(crate::progress::Progress::new(
                "simulate",
                Some(steps as u64),
            ));
        }
        sim.create_all(items.into_iter().map(|(_, i)| i).collect(), true);
        sim.settle();
        sim.observe();
        if let Some(s) = scenario {
            for (i, step) in s.steps.into_iter().enumerate() {
                sim.run_step(i, step);
                sim.report_progress(i as u64 + 1);
            }
        }
        if let Some(p) = sim.progress.take() {
            p.finish();
        }
        sim
    }

    /// What was recorded over virtual time (with [`Hooks::timeline`]).
    pub fn timeline(&self) -> Option<&crate::timeline::Timeline> {
        self.timeline.as_deref()
    }

    /// Records the cluster now into the timeline, if one is kept.
    fn observe(&mut self) {
        if let Some(mut tl) = self.timeline.take() {
            tl.observe(self.now, &self.store, &self.core);
            self.timeline = Some(tl);
        }
    }

    fn report_progress(&mut self, steps_done: u64) {
        if let Some(p) = self.progress.as_mut() {
            let pods = self.core.stats().scheduled;
            p.set(steps_done, format!("{}, {pods} placed", rfc3339(self.now)));
        }
    }

    /// The stored objects.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The scheduler.
    pub fn core(&self) -> &Scheduler {
        &self.core
    }

    /// Virtual now.
    pub fn now(&self) -> Time {
        self.now
    }

    /// Virtual start.
    pub fn start(&self) -> Time {
        self.start
    }

    /// Warnings and failed expectations, one line each, for standard error.
    pub fn log(&self) -> &[String] {
        &self.log
    }

    /// How many expectations failed.
    pub fn failed_expectations(&self) -> usize {
        self.failed
    }

    fn warn(&mut self, message: String) {
        self.log.push(format!("warning: {message}"));
    }

    /// Runs one Scenario step (its actions in the order apply, delete, advance, expect),
    /// settling after the changes. `index` is 0-based, and messages name the step by it
    /// (`spec.steps[2]`), as field paths and document indexes count.
    pub fn step(&mut self, index: usize, step: &Step) {
        self.run_step(index, step.clone());
    }

    /// [`Simulation::step`], taking the step: its objects move into the store.
    fn run_step(&mut self, index: usize, mut step: Step) {
        let name = match &self.scenario_source {
            Some(src) => format!("{} of {}", step.describe(index), src.file),
            None => step.describe(index),
        };
        if let Some(tl) = self.timeline.as_mut() {
            tl.step_started(self.now, &name, &step);
        }
        self.create_all(std::mem::take(&mut step.apply), false);
        for key in &step.delete {
            if self.store.get(key).is_none() {
                self.warn(format!(
                    "{name}: delete {} {key}: not found",
                    key.kind.as_str()
                ));
                continue;
            }
            self.delete(key.clone());
        }
        for key in &step.evict {
            if let Err(e) = self.evict(key) {
                self.warn(format!(
                    "{name}: evict pod {key}: refused ({}): {e}",
                    e.code()
                ));
            }
        }
        self.settle();
        self.observe();
        if let Some(d) = step.advance {
            self.advance(d);
        }
        if let Some(expect) = &step.expect {
            let failures = self.check(expect);
            for f in failures {
                self.failed += 1;
                self.log.push(format!(
                    "expectation failed at {name} ({}): {f}",
                    rfc3339(self.now)
                ));
            }
        }
    }

    /// Creates or replaces `items` in order, PriorityClasses first, so a pod may name a class
    /// written after it in the same batch (priority admission runs at pod creation).
    fn create_all(&mut self, items: Vec<Item>, initial: bool) {
        if initial {
            self.initial_nodes = items
                .iter()
                .filter_map(|i| match i {
                    Item::Object(Object::Node(n)) => n.metadata.name.clone(),
                    _ => None,
                })
                .collect();
        }
        if let Some(tl) = self.timeline.as_mut() {
            for item in &items {
                if let Item::Object(o @ Object::Pod(p)) = item {
                    if p.spec
                        .as_ref()
                        .and_then(|s| s.node_name.as_deref())
                        .is_some_and(|n| !n.is_empty())
                    {
                        tl.pod_came_bound(o.key().to_string());
                    }
                }
            }
        }
        let is_class = |i: &Item| matches!(i, Item::Object(Object::PriorityClass(_)));
        let (classes, others): (Vec<Item>, Vec<Item>) = items.into_iter().partition(is_class);
        for item in classes.into_iter().chain(others) {
            self.create_item(item, initial);
        }
        self.initial_nodes.clear();
    }

    /// Creates or replaces one object, as `kubectl apply` of the whole object would (status
    /// included when given; kept from the stored object when not). `initial` objects are
    /// the cluster as found: a pod with `spec.nodeName` and no phase is already running.
    pub fn apply_item(&mut self, item: &Item, initial: bool) {
        self.create_item(item.clone(), initial);
    }

    /// [`Simulation::apply_item`], taking the item: an object no one else holds is written
    /// without a copy.
    fn create_item(&mut self, item: Item, initial: bool) {
        match item {
            Item::Event(mut e) => {
                let ns = e.metadata.namespace.clone().unwrap_or_default();
                let name = e.metadata.name.clone().unwrap_or_default();
                self.fill_meta(&mut e.metadata, "Event", &ns, &name, None);
                self.store.insert_event(*e);
            }
            Item::Object(obj) => self.apply_object(obj, initial),
        }
    }
}

/// The phase of a reservation, `Pending` when it has none.
pub fn reservation_phase(r: &berth_api::reservation::Reservation) -> ReservationPhase {
    r.phase()
}

#[cfg(test)]
mod tests;
