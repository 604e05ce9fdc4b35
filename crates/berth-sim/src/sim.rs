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

use berth_core::collections::HashMap;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use berth_api::k8s_openapi::api::core::v1::{Pod, PodCondition, PodStatus};
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

    fn apply_object(&mut self, mut obj: Object, initial: bool) {
        let key = obj.key();
        let existing = self.store.get(&key).cloned();
        let old_meta = existing.as_ref().map(|o| o.meta().clone());
        {
            let meta = obj.meta_mut();
            let (ns, name) = (key.namespace.to_string(), key.name.to_string());
            self.fill_meta(meta, key.kind.as_str(), &ns, &name, old_meta.as_ref());
        }
        let mut admit = false;
        match (&mut obj, &existing) {
            (Object::Pod(p), old) => {
                let pod = Arc::make_mut(p);
                if let Some(Object::Pod(old)) = old {
                    carry_over_pod(pod, old);
                }
                if let Err(message) = self.resolve_priority(pod) {
                    self.warn(format!("pod {key} not created: {message}"));
                    return;
                }
                let node = pod
                    .spec
                    .as_ref()
                    .and_then(|s| s.node_name.clone())
                    .filter(|n| !n.is_empty());
                let node_exists = node.as_ref().is_some_and(|n| {
                    self.store.node(n).is_some() || self.initial_nodes.contains(n)
                });
                let status = pod.status.get_or_insert_with(PodStatus::default);
                if status.phase.is_none() {
                    if node.is_none() {
                        status.phase = Some("Pending".into());
                    } else if initial && node_exists {
                        status.phase = Some("Running".into());
                    } else {
                        admit = true;
                        status.phase = Some("Pending".into());
                    }
                }
            }
            (Object::Reservation(r), Some(Object::Reservation(old))) if r.status.is_none() => {
                Arc::make_mut(r).status = old.status.clone();
            }
            (Object::Node(n), Some(Object::Node(old))) if n.status.is_none() => {
                Arc::make_mut(n).status = old.status.clone();
            }
            // The API server's defaulting: a claim is `Pending` until the PV controller
            // binds it.
            (Object::PersistentVolumeClaim(c), _)
                if c.status.as_ref().and_then(|s| s.phase.as_ref()).is_none() =>
            {
                Arc::make_mut(c)
                    .status
                    .get_or_insert_with(Default::default)
                    .phase = Some("Pending".into());
            }
            _ => {}
        }
        if let Object::Node(n) = &mut obj {
            kubelet_node_labels(Arc::make_mut(n));
        }
        // koordlet's CPU annotations on an NRT the scenario gives for a node that declares
        // its CPU layout.
        if let Object::NodeResourceTopology(t) = &mut obj {
            let admitted = self.cpu_budget.admitted(t.node_name());
            let layout = self
                .store
                .node(t.node_name())
                .filter(|_| admitted)
                .and_then(|n| {
                    crate::cpu_agent::declared(n)
                        .ok()
                        .flatten()
                        .map(|l| (n.clone(), l))
                });
            if let Some((n, l)) = layout {
                *t = Arc::new(crate::cpu_agent::publish(&n, l, Some(t)));
            }
        }
        let is_node = matches!(obj, Object::Node(_));
        let declared = match &obj {
            Object::Node(n) => {
                let declared = crate::cpu_agent::declared(n).and_then(|l| match l {
                    Some(l) => self.cpu_budget.admit(&key.name, l).map(|()| Some(l)),
                    None => Ok(None),
                });
                if !matches!(declared, Ok(Some(_))) {
                    self.cpu_budget.release(&key.name);
                }
                match declared {
                    Ok(l) => l.map(|l| (n.clone(), l)),
                    Err(message) => {
                        self.warn(format!("node {}: {message}", key.name));
                        None
                    }
                }
            }
            _ => None,
        };
        self.store.insert(obj.clone());
        self.core.handle(self.now, Event::Applied(obj));
        self.provisioner_observe(&key);
        if admit {
            self.kubelet_admit(&key);
        }
        if matches!(
            key.kind,
            Kind::Pod | Kind::ResourceClaim | Kind::ResourceClaimTemplate
        ) {
            self.sync_claims();
        }
        if let Some((n, layout)) = declared {
            let nrt =
                crate::cpu_agent::publish(&n, layout, self.store.nrt(&key.name).map(|t| &**t));
            self.apply_object(Object::NodeResourceTopology(Arc::new(nrt)), initial);
        }
        if is_node {
            for pod in self.awaiting_node.remove(&*key.name).unwrap_or_default() {
                self.kubelet_admit(&pod);
            }
        }
        if matches!(
            key.kind,
            Kind::PersistentVolume | Kind::PersistentVolumeClaim | Kind::StorageClass
        ) {
            self.sync_volumes();
        }
    }

    /// Runs the PV controller and the provisioners until they have nothing more to write
    /// (see [`crate::volume_controllers`]), then lets the kubelet start pods whose claims
    /// are bound now.
    fn sync_volumes(&mut self) {
        if self.syncing_volumes {
            return;
        }
        self.syncing_volumes = true;
        for _ in 0..MAX_SETTLE_ROUNDS {
            match crate::volume_controllers::next_write(&self.store) {
                Some(obj) => self.apply_object(obj, false),
                None => break,
            }
        }
        self.syncing_volumes = false;
        let waiting: Vec<ObjectKey> = self.awaiting_volumes.iter().cloned().collect();
        for key in waiting {
            self.kubelet_admit(&key);
        }
    }

    /// Runs the resource-claim controller until it has nothing more to write (see
    /// [`crate::claim_controller`]), then lets the kubelet start pods whose claims are
    /// allocated now.
    fn sync_claims(&mut self) {
        if self.syncing_claims {
            return;
        }
        self.syncing_claims = true;
        for _ in 0..MAX_SETTLE_ROUNDS {
            match crate::claim_controller::next_write(&self.store) {
                Some(crate::claim_controller::Write::Apply(obj)) => self.apply_object(obj, false),
                Some(crate::claim_controller::Write::Delete(key)) => self.delete(key),
                None => break,
            }
        }
        self.syncing_claims = false;
        let waiting: Vec<ObjectKey> = self.awaiting_volumes.iter().cloned().collect();
        for key in waiting {
            self.kubelet_admit(&key);
        }
    }

    /// DynamicResources' PreBind write of a claim's status, as the API server answers a
    /// status update: not found when the claim is gone.
    fn write_claim_status(
        &mut self,
        pod: ObjectKey,
        uid: String,
        node: String,
        claim: Arc<berth_api::dra::ResourceClaim>,
    ) {
        let key = Object::ResourceClaim(claim.clone()).key();
        let Some(Object::ResourceClaim(old)) = self.store.get(&key) else {
            let message = format!("resourceclaims.resource.k8s.io \"{}\" not found", key.name);
            self.core.handle(
                self.now,
                Event::BindFailed {
                    pod,
                    uid,
                    node,
                    class: BindFailure::NotFound,
                    message,
                },
            );
            return;
        };
        let mut c = (**old).clone();
        c.status = claim.status.clone();
        self.apply_object(Object::ResourceClaim(Arc::new(c)), false);
    }

    /// VolumeBinding's PreBind write of a volume (`BindVolume`) or a claim
    /// (`ProvisionClaim`), as the API server answers an update: a conflict when someone
    /// else bound the object meanwhile, not found when it is gone.
    fn write_volume(&mut self, pod: ObjectKey, uid: String, node: String, obj: Object) {
        let key = obj.key();
        let resource = if key.kind == Kind::PersistentVolume {
            "persistentvolumes"
        } else {
            "persistentvolumeclaims"
        };
        let failed = |class, message| Event::BindFailed {
            pod: pod.clone(),
            uid: uid.clone(),
            node: node.clone(),
            class,
            message,
        };
        let written = match (self.store.get(&key), obj) {
            (None, _) => {
                let message = format!("{resource} \"{}\" not found", key.name);
                self.core
                    .handle(self.now, failed(BindFailure::NotFound, message));
                return;
            }
            (Some(Object::PersistentVolume(old)), Object::PersistentVolume(new)) => {
                let theirs = old.spec.as_ref().and_then(|s| s.claim_ref.as_ref());
                let mine = new.spec.as_ref().and_then(|s| s.claim_ref.as_ref());
                let same = theirs.is_none_or(|t| {
                    mine.is_some_and(|m| m.name == t.name && m.namespace == t.namespace)
                });
                same.then(|| {
                    let mut pv = (**old).clone();
                    pv.spec.get_or_insert_with(Default::default).claim_ref = mine.cloned();
                    if let Some(a) = &new.metadata.annotations {
                        pv.metadata
                            .annotations
                            .get_or_insert_with(Default::default)
                            .extend(a.clone());
                    }
                    Object::PersistentVolume(Arc::new(pv))
                })
            }
            (Some(Object::PersistentVolumeClaim(old)), Object::PersistentVolumeClaim(new)) => {
                let free = old
                    .spec
                    .as_ref()
                    .and_then(|s| s.volume_name.as_deref())
                    .is_none_or(str::is_empty);
                free.then(|| {
                    let mut c = (**old).clone();
                    if let Some(a) = &new.metadata.annotations {
                        c.metadata
                            .annotations
                            .get_or_insert_with(Default::default)
                            .extend(a.clone());
                    }
                    Object::PersistentVolumeClaim(Arc::new(c))
                })
            }
            _ => None,
        };
        match written {
            Some(obj) => self.apply_object(obj, false),
            None => {
                let message = format!("Operation cannot be fulfilled on {resource} \"{}\": the object has been modified; please apply your changes to the latest version and try again", key.name);
                self.core
                    .handle(self.now, failed(BindFailure::Conflict, message));
            }
        }
    }

    /// Fills what the API server fills on create: `uid` (kept from the stored object on
    /// replace, else derived from kind/namespace/name) and `creationTimestamp` (kept, else
    /// now).
    fn fill_meta(
        &self,
        meta: &mut ObjectMeta,
        kind: &str,
        namespace: &str,
        name: &str,
        old: Option<&ObjectMeta>,
    ) {
        if meta.uid.as_deref().is_none_or(str::is_empty) {
            meta.uid = Some(
                old.and_then(|m| m.uid.clone())
                    .unwrap_or_else(|| derive_uid(kind, namespace, name)),
            );
        }
        if meta.creation_timestamp.is_none() {
            meta.creation_timestamp = Some(
                old.and_then(|m| m.creation_timestamp.clone())
                    .unwrap_or_else(|| meta_time(self.now)),
            );
        }
    }

    /// The Priority admission plugin: `spec.priority` and `spec.preemptionPolicy` from the
    /// pod's PriorityClass, or from the global default class when it names none. A pod that
    /// sets `spec.priority` without a class keeps it (the API server would reject it; the
    /// simulator lets scenario files write priorities directly).
    fn resolve_priority(&self, pod: &mut Pod) -> Result<(), String> {
        let spec = pod.spec.get_or_insert_with(Default::default);
        let class = spec.priority_class_name.clone().filter(|c| !c.is_empty());
        let (value, policy) = match class {
            Some(name) => {
                if let Some((_, v)) = SYSTEM_PRIORITY_CLASSES.iter().find(|(n, _)| *n == name) {
                    (*v, None)
                } else {
                    match self
                        .store
                        .get(&ObjectKey::cluster(Kind::PriorityClass, &name))
                    {
                        Some(Object::PriorityClass(pc)) => (pc.value, pc.preemption_policy.clone()),
                        _ => return Err(format!("no PriorityClass with name {name} was found")),
                    }
                }
            }
            None if spec.priority.is_some() => {
                spec.preemption_policy
                    .get_or_insert_with(|| DEFAULT_PREEMPTION_POLICY.to_string());
                return Ok(());
            }
            None => {
                let default = self
                    .store
                    .of_kind(Kind::PriorityClass)
                    .filter_map(|o| match o {
                        Object::PriorityClass(pc) if pc.global_default == Some(true) => Some(pc),
                        _ => None,
                    })
                    .fold(None, |best: Option<&Arc<PriorityClass>>, pc| match best {
                        Some(b) if b.value >= pc.value => Some(b),
                        _ => Some(pc),
                    });
                match default {
                    Some(pc) => {
                        spec.priority_class_name = pc.metadata.name.clone();
                        (pc.value, pc.preemption_policy.clone())
                    }
                    None => (0, None),
                }
            }
        };
        spec.priority = Some(value);
        spec.preemption_policy =
            Some(policy.unwrap_or_else(|| DEFAULT_PREEMPTION_POLICY.to_string()));
        Ok(())
    }

    /// Deletes an object and tells the scheduler.
    pub fn delete(&mut self, key: ObjectKey) {
        if key.kind == Kind::Node {
            self.cpu_budget.release(&key.name);
        }
        if let Some(Object::Pod(p)) = self.store.remove(&key) {
            if let Some(node) = p.spec.as_ref().and_then(|s| s.node_name.as_deref()) {
                if let Some(set) = self.awaiting_node.get_mut(node) {
                    set.remove(&key);
                }
            }
        }
        let claims = matches!(key.kind, Kind::Pod | Kind::ResourceClaim);
        self.core.handle(self.now, Event::Deleted(key));
        if claims {
            self.sync_claims();
        }
    }

    /// The Eviction API (`pods/eviction`): deletes the pod unless a PodDisruptionBudget
    /// forbids it now (see [`crate::controllers::eviction`]). Its controller, if any,
    /// replaces it when the cluster next settles.
    pub fn evict(
        &mut self,
        key: &ObjectKey,
    ) -> Result<(), crate::controllers::eviction::EvictionError> {
        crate::controllers::eviction::check(&self.store, key)?;
        self.delete(key.clone());
        Ok(())
    }

    /// One pass of the workload controllers; performs what they ask for, as the API
    /// server would. Returns whether anything was asked.
    fn run_controllers(&mut self) -> bool {
        use crate::controllers::{Action, Controllers};
        if !Controllers::any(&self.store) {
            return false;
        }
        let actions = self.controllers.reconcile(&self.store);
        let acted = !actions.is_empty();
        for action in actions {
            match action {
                Action::Create(mut obj) => {
                    if let Object::Pod(p) = &mut obj {
                        let key = ObjectKey::pod(
                            p.metadata.namespace.as_deref().unwrap_or("default"),
                            p.metadata.name.as_deref().unwrap_or(""),
                        );
                        // A pod created again under a name used before (a StatefulSet's)
                        // is a new object: a UID of its own.
                        let n = self.controllers.incarnation(&key);
                        if n > 0 {
                            let name = format!("{}#{n}", key.name);
                            Arc::make_mut(p).metadata.uid =
                                Some(derive_uid("Pod", &key.namespace, &name));
                        }
                    }
                    if self.store.get(&obj.key()).is_none() {
                        self.apply_object(obj, false);
                    }
                }
                Action::Update(obj) => {
                    self.store.insert(obj.clone());
                    self.core.handle(self.now, Event::Applied(obj));
                }
                Action::Delete(key) => {
                    if self.store.get(&key).is_some() {
                        self.delete(key);
                    }
                }
            }
        }
        acted
    }

    /// One pass of the PodMigrationJob controller (see [`crate::migration`]); performs what
    /// it asks for. Returns whether anything changed.
    fn run_migrations(&mut self) -> bool {
        use berth_core::migration::{after_eviction, Action};
        let mut changed = self.plan_reserved_cpu_moves();
        let actions = crate::migration::reconcile(&self.store, self.now, &self.migration);
        for action in actions {
            match action {
                Action::CreateReservation(r) => {
                    let name = r.metadata.name.clone().unwrap_or_default();
                    if self.store.reservation(&name).is_none() {
                        self.create_reservation(*r);
                        changed = true;
                    }
                }
                Action::DeleteReservation(name) => {
                    let key = ObjectKey::cluster(Kind::Reservation, &name);
                    if self.store.get(&key).is_some() {
                        self.delete(key);
                        changed = true;
                    }
                }
                Action::UpdateJob(job) => {
                    self.store.insert(Object::PodMigrationJob(Arc::new(*job)));
                    changed = true;
                }
                Action::Evict {
                    job,
                    namespace,
                    name,
                } => {
                    let Some(j) = crate::migration::job(&self.store, &job) else {
                        continue;
                    };
                    let key = ObjectKey::pod(&namespace, &name);
                    let node = self
                        .store
                        .pod(&key)
                        .and_then(|p| p.spec.as_ref()?.node_name.clone());
                    let outcome = self.evict(&key).map_err(|e| e.to_string());
                    let next = after_eviction(&j, node.as_deref().unwrap_or(""), outcome, self.now);
                    if next != *j {
                        if let Some(c) = next.condition("Eviction").filter(|c| c.status == "False")
                        {
                            self.warn(format!("PodMigrationJob {job}: {}", c.message));
                        }
                        self.store.insert(Object::PodMigrationJob(Arc::new(next)));
                        changed = true;
                    }
                }
            }
        }
        changed
    }

    /// Creates the PodMigrationJobs that move pods off CPUs their (opted-in) node now
    /// reserves, as seed 004's descheduler would. Returns whether it created any.
    fn plan_reserved_cpu_moves(&mut self) -> bool {
        let planned = crate::migration::reserved_cpu_jobs(&self.store);
        for (node, message) in planned.refused {
            let line = format!("warning: node {node}: {message}");
            if !self.log.contains(&line) {
                self.log.push(line);
            }
        }
        let created = !planned.jobs.is_empty();
        for job in planned.jobs {
            self.apply_object(Object::PodMigrationJob(Arc::new(job)), false);
        }
        created
    }

    /// Schedules, performs effects and fires timers due now until nothing more happens.
    pub fn settle(&mut self) {
        for _ in 0..MAX_SETTLE_ROUNDS {
            self.core.run_until_idle(self.now);
            let mut acted = false;
            while let Some(effect) = self.core.poll_effect() {
                acted = true;
                self.perform(effect);
            }
            let fired = self.fire_due();
            let controlled = self.run_controllers();
            let migrated = self.run_migrations();
            let grouped = crate::gangs::sync_pod_groups(&mut self.store);
            if !acted && !fired && !controlled && !migrated && !grouped {
                return;
            }
        }
        self.warn(format!(
            "the scheduler did not settle at {} after {MAX_SETTLE_ROUNDS} rounds; moving on",
            rfc3339(self.now)
        ));
    }

    /// Fires the core's and the agent's timers that are due now.
    fn fire_due(&mut self) -> bool {
        let mut fired = false;
        if self.core.poll_timeout().is_some_and(|t| t <= self.now) {
            self.core.handle_timeout(self.now);
            fired = true;
        }
        if self
            .provisioner
            .next_timeout()
            .is_some_and(|t| t <= self.now)
        {
            for (key, req) in self.provisioner.take_due(self.now) {
                self.provision(&key, &req);
            }
            fired = true;
        }
        if self.agent.next_timeout().is_some_and(|t| t <= self.now) {
            let published = self.agent.handle_timeout(self.now, &self.store);
            for t in published {
                let obj = Object::NodeResourceTopology(Arc::new(t));
                self.store.insert(obj.clone());
                self.core.handle(self.now, Event::Applied(obj));
            }
            fired = true;
        }
        fired
    }

    /// Moves virtual time forward by `millis`, firing every timer due on the way in time
    /// order and settling after each.
    pub fn advance(&mut self, millis: Time) {
        let target = self.now.saturating_add(millis);
        let mut stuck = 0;
        loop {
            let next = [
                self.core.poll_timeout(),
                self.agent.next_timeout(),
                self.provisioner.next_timeout(),
            ]
            .into_iter()
            .flatten()
            .min();
            let Some(t) = next.filter(|t| *t <= target) else {
                break;
            };
            if t > self.now {
                self.now = t;
                stuck = 0;
            } else {
                stuck += 1;
                if stuck > MAX_SETTLE_ROUNDS {
                    self.warn(format!(
                        "a timer at {} keeps firing; skipping to {}",
                        rfc3339(self.now),
                        rfc3339(target)
                    ));
                    break;
                }
            }
            self.fire_due();
            self.settle();
            self.observe();
            if let Some(p) = self.progress.as_mut() {
                p.tick(rfc3339(self.now));
            }
        }
        self.now = target;
        self.settle();
        self.observe();
    }

    /// Performs one effect of the core, as the API server (and, for binds, the kubelet)
    /// would, feeding the result back.
    fn perform(&mut self, effect: Effect) {
        match effect {
            Effect::Bind {
                pod,
                uid,
                node,
                annotations,
            } => self.bind(pod, uid, node, annotations),
            Effect::PodCondition {
                pod,
                status,
                reason,
                message,
            } => {
                let Some(p) = self.store.pod(&pod) else {
                    return;
                };
                let mut p = (**p).clone();
                let now = self.now;
                set_pod_scheduled(&mut p, status, Some(reason), Some(message), now);
                self.store.insert(Object::Pod(Arc::new(p)));
            }
            Effect::ReservationStatus { name, uid, status } => {
                let Some(r) = self.store.reservation(&name) else {
                    self.warn(format!(
                        "status for reservation {name}, which does not exist"
                    ));
                    return;
                };
                if !uid.is_empty() && r.metadata.uid.as_deref() != Some(uid.as_str()) {
                    // The UID precondition: the status was meant for an earlier
                    // reservation of that name.
                    return;
                }
                let mut r = (**r).clone();
                r.status = Some(status);
                let obj = Object::Reservation(Arc::new(r));
                self.store.insert(obj.clone());
                self.core.handle(self.now, Event::Applied(obj));
            }
            Effect::AnnotateReservation {
                name,
                uid,
                annotations,
            } => {
                let Some(r) = self.store.reservation(&name) else {
                    return;
                };
                if !uid.is_empty() && r.metadata.uid.as_deref() != Some(uid.as_str()) {
                    return;
                }
                let mut r = (**r).clone();
                r.metadata
                    .annotations
                    .get_or_insert_with(Default::default)
                    .extend(annotations);
                let obj = Object::Reservation(Arc::new(r));
                self.store.insert(obj.clone());
                self.core.handle(self.now, Event::Applied(obj));
            }
            Effect::CreateReservation(r) => {
                let name = r.metadata.name.clone().unwrap_or_default();
                if self.store.reservation(&name).is_some() {
                    self.warn(format!("reservation {name} already exists; not created"));
                    return;
                }
                self.create_reservation(*r);
            }
            Effect::Delete { key, uid, .. } => {
                // The UID precondition, as the API server checks it (the simulator keeps no
                // resourceVersions, so that precondition always holds).
                let stale = !uid.is_empty()
                    && self
                        .store
                        .get(&key)
                        .is_some_and(|o| o.meta().uid.as_deref() != Some(uid.as_str()));
                if !stale {
                    self.delete(key);
                }
            }
            Effect::NominatePod { pod, node } => {
                // A status-only patch: kube-scheduler ignores such updates of its own
                // pods, so the result is not fed back.
                let Some(p) = self.store.pod(&pod) else {
                    return;
                };
                let mut p = (**p).clone();
                p.status
                    .get_or_insert_with(PodStatus::default)
                    .nominated_node_name = node;
                self.store.insert(Object::Pod(Arc::new(p)));
            }
            Effect::AnnotatePod { pod, annotations } => {
                let Some(p) = self.store.pod(&pod) else {
                    return;
                };
                let mut p = (**p).clone();
                p.metadata
                    .annotations
                    .get_or_insert_with(Default::default)
                    .extend(annotations);
                let obj = Object::Pod(Arc::new(p));
                self.store.insert(obj.clone());
                self.core.handle(self.now, Event::Applied(obj));
                self.provisioner_observe(&pod);
            }
            Effect::Record(r) => self.record(r),
            Effect::BindVolume {
                pod,
                uid,
                node,
                volume,
            } => self.write_volume(pod, uid, node, Object::PersistentVolume(volume)),
            Effect::ProvisionClaim {
                pod,
                uid,
                node,
                claim,
            } => self.write_volume(pod, uid, node, Object::PersistentVolumeClaim(claim)),
            Effect::UpdateClaimStatus {
                pod,
                uid,
                node,
                claim,
            } => self.write_claim_status(pod, uid, node, claim),
            other => self.warn(format!("effect not simulated: {other:?}")),
        }
    }

    /// Creates a Reservation as the API server would (defaults, UID, creation time) and
    /// tells the scheduler.
    fn create_reservation(&mut self, mut r: berth_api::reservation::Reservation) {
        r.metadata.namespace = None;
        r.apply_defaults();
        let name = r.metadata.name.clone().unwrap_or_default();
        self.fill_meta(&mut r.metadata, "Reservation", "", &name, None);
        let obj = Object::Reservation(Arc::new(r));
        self.store.insert(obj.clone());
        self.core.handle(self.now, Event::Applied(obj));
    }

    /// Shows the provisioner a pod just written.
    fn provisioner_observe(&mut self, key: &ObjectKey) {
        if key.kind != Kind::Pod {
            return;
        }
        use berth_api::annotations::{AnnotationCodec, NewReservationRequirement};
        // Unbound and carrying both annotations (an unreadable template included: the
        // provisioner reports it).
        let req = self
            .store
            .pod(key)
            .filter(|p| berth_core::drp::objects::provisioned_reservation(p).is_some())
            .and_then(|p| {
                NewReservationRequirement::from_annotations(p.metadata.annotations.as_ref())
                    .ok()
                    .flatten()
            });
        self.provisioner.observe(key, req, self.now);
    }

    /// The provisioner acts on the requirement it saw on `key`: unless the pod is gone or
    /// bound, or a Reservation carrying its id exists, it creates the Reservation (even if
    /// the pod asks for another id by now: a slow provisioner finishes what it started)
    /// under the first free name. An unreadable template is a `ReservationCreationFailed`
    /// warning on the pod.
    fn provision(
        &mut self,
        key: &ObjectKey,
        req: &berth_api::annotations::NewReservationRequirement,
    ) {
        use berth_core::drp::objects::{
            nth_name, provisioned_reservation_for, requirement_id, reservation_id,
        };
        let Some(pod) = self.store.pod(key).cloned() else {
            return;
        };
        let Some(id) = requirement_id(req) else {
            return;
        };
        let exists = self.store.of_kind(Kind::Reservation).any(|o| match o {
            Object::Reservation(r) => reservation_id(r) == Some(id),
            _ => false,
        });
        if exists {
            return;
        }
        match provisioned_reservation_for(&pod, req) {
            None => {}
            Some(Err(message)) => self.record(Record {
                involved: key.clone(),
                uid: pod.metadata.uid.clone().unwrap_or_default(),
                type_: "Warning",
                reason: berth_core::drp::REASON_FAILED.to_string(),
                message: format!("provisioner: {message}"),
            }),
            Some(Ok(mut r)) => {
                let base = r.metadata.name.clone().unwrap_or_default();
                let name = (1..)
                    .map(|n| nth_name(&base, n))
                    .find(|n| self.store.reservation(n).is_none())
                    .unwrap_or(base);
                r.metadata.name = Some(name);
                self.create_reservation(r);
            }
        }
    }

    /// PreBind annotations, then the Binding: `spec.nodeName` and `PodScheduled=True`; the
    /// bound pod goes back to the scheduler, then to the kubelet.
    fn bind(
        &mut self,
        key: ObjectKey,
        uid: String,
        node: String,
        annotations: BTreeMap<String, String>,
    ) {
        let Some(p) = self.store.pod(&key) else {
            let message = format!("pods \"{}\" not found", key.name);
            let failed = Event::BindFailed {
                pod: key,
                uid,
                node,
                class: BindFailure::NotFound,
                message,
            };
            self.core.handle(self.now, failed);
            return;
        };
        if p.metadata.uid.as_deref() != Some(uid.as_str()) {
            let message = format!(
                "Operation cannot be fulfilled on pods/binding \"{}\": the UID in the precondition ({uid}) does not match the UID in record ({}). The object might have been deleted and then recreated",
                key.name,
                p.metadata.uid.as_deref().unwrap_or("")
            );
            let failed = Event::BindFailed {
                pod: key,
                uid,
                node,
                class: BindFailure::Conflict,
                message,
            };
            self.core.handle(self.now, failed);
            return;
        }
        if let Some(current) = p
            .spec
            .as_ref()
            .and_then(|s| s.node_name.as_deref())
            .filter(|n| !n.is_empty())
        {
            let message = format!(
                "Operation cannot be fulfilled on pods/binding \"{}\": pod {} is already assigned to node \"{current}\"",
                key.name, key.name
            );
            let failed = Event::BindFailed {
                pod: key,
                uid,
                node,
                class: BindFailure::Conflict,
                message,
            };
            self.core.handle(self.now, failed);
            return;
        }
        let mut p = (**p).clone();
        if !annotations.is_empty() {
            p.metadata
                .annotations
                .get_or_insert_with(Default::default)
                .extend(annotations);
        }
        p.spec.get_or_insert_with(Default::default).node_name = Some(node);
        // The binding subresource clears the nomination (kube-apiserver since KEP-5278;
        // the scheduler itself did before): a bound pod has no nominated node.
        if let Some(status) = p.status.as_mut() {
            status.nominated_node_name = None;
        }
        set_pod_scheduled(&mut p, "True", None, None, self.now);
        let obj = Object::Pod(Arc::new(p));
        self.store.insert(obj.clone());
        self.core.handle(self.now, Event::Applied(obj));
        self.kubelet_admit(&key);
    }

    /// The kubelet of the pod's node admits it (`Running`) or rejects it (`Failed`); the
    /// update goes back to the scheduler. Waits if the node does not exist.
    fn kubelet_admit(&mut self, key: &ObjectKey) {
        let Some(p) = self.store.pod(key) else {
            return;
        };
        let Some(node) = p
            .spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .filter(|n| !n.is_empty())
        else {
            return;
        };
        let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
        if matches!(phase, Some("Running" | "Succeeded" | "Failed")) {
            return;
        }
        if self.store.node(&node).is_none() {
            self.warn(format!(
                "pod {key} is bound to node {node:?}, which does not exist: no kubelet admits it, so it stays Pending (until a node of that name is created)"
            ));
            self.awaiting_node
                .entry(node)
                .or_default()
                .insert(key.clone());
            return;
        }
        // The kubelet does not start a pod whose volumes cannot be mounted yet.
        if !crate::volume_controllers::pod_claims_bound(&self.store, p)
            || !crate::claim_controller::pod_claims_ready(&self.store, p)
        {
            self.awaiting_volumes.insert(key.clone());
            return;
        }
        self.awaiting_volumes.remove(key);
        let verdict = self.agent.admit(&self.store, p, &node);
        let mut p = (**p).clone();
        let status = p.status.get_or_insert_with(PodStatus::default);
        match verdict {
            Admission::Admit { annotations } => {
                status.phase = Some("Running".into());
                status.start_time.get_or_insert_with(|| meta_time(self.now));
                if !annotations.is_empty() {
                    p.metadata
                        .annotations
                        .get_or_insert_with(Default::default)
                        .extend(annotations);
                }
            }
            Admission::Reject { reason, message } => {
                status.phase = Some("Failed".into());
                status.reason = Some(reason);
                status.message = Some(message);
            }
        }
        let obj = Object::Pod(Arc::new(p));
        self.store.insert(obj.clone());
        self.core.handle(self.now, Event::Applied(obj));
    }

    /// Stores a `v1` Event for a record of the core, as client-go's event correlator writes
    /// it: an event identical to one recorded before (same source, involved object with its
    /// UID, type, reason and message) is not a new object but the earlier one with `count`
    /// raised and `lastTimestamp` moved, however many other events came in between.
    fn record(&mut self, r: Record) {
        let namespace = if r.involved.namespace.is_empty() {
            "default".to_string()
        } else {
            r.involved.namespace.to_string()
        };
        let uid = if r.uid.is_empty() {
            self.store
                .get(&r.involved)
                .and_then(|o| o.meta().uid.clone())
        } else {
            Some(r.uid.clone())
        };
        let key = EventKey {
            involved: r.involved.clone(),
            uid: uid.clone().unwrap_or_default(),
            type_: r.type_,
            reason: r.reason.clone(),
            message: r.message.clone(),
        };
        if let Some(name) = self.recorder.seen(&key) {
            if self.store.repeat_event(&namespace, &name, self.now) {
                return;
            }
        }
        self.recorder.counter += 1;
        let name = format!("{}.{:016x}", r.involved.name, self.recorder.counter);
        let event = RecordedEvent {
            involved: r.involved,
            uid,
            type_: r.type_,
            reason: r.reason,
            message: r.message,
            first: self.now,
            last: self.now,
            count: 1,
        };
        self.recorder.remember(key, name.clone());
        self.store.record_event(namespace, name, event);
    }

    /// Checks `expect` against the store; returns one line per failed check.
    pub fn check(&self, expect: &Expect) -> Vec<String> {
        let mut failures = Vec::new();
        for e in &expect.pods {
            let key = ObjectKey::pod(&e.namespace, &e.name);
            let Some(p) = self.store.pod(&key) else {
                // A pod that no longer exists (deleted, preempted) is not bound; anything
                // else asked of it fails.
                let only_unbound = e.node == Some(None)
                    && e.reservation.is_none()
                    && e.message.is_none()
                    && e.phase.is_none()
                    && e.reason.is_none();
                if !only_unbound {
                    failures.push(format!("pod {key}: expected to exist, found no such pod"));
                }
                continue;
            };
            let node = p
                .spec
                .as_ref()
                .and_then(|s| s.node_name.clone())
                .filter(|n| !n.is_empty());
            if let Some(want) = &e.node {
                if *want != node {
                    failures.push(format!(
                        "pod {key}: node: expected {}, found {}",
                        show(want.as_deref()),
                        show(node.as_deref())
                    ));
                }
            }
            if let Some(want) = &e.reservation {
                let got = allocated_reservation(p);
                if *want != got {
                    failures.push(format!(
                        "pod {key}: reservation: expected {}, found {}",
                        show(want.as_deref()),
                        show(got.as_deref())
                    ));
                }
            }
            if let Some(want) = &e.message {
                let got = pod_scheduled_message(p);
                if !got.as_deref().is_some_and(|m| m.contains(want.as_str())) {
                    failures.push(format!(
                        "pod {key}: PodScheduled message: expected one containing {want:?}, found {}",
                        show(got.as_deref())
                    ));
                }
            }
            let status = p.status.as_ref();
            if let Some(want) = &e.phase {
                let got = status.and_then(|s| s.phase.as_deref());
                if got != Some(want.as_str()) {
                    failures.push(format!(
                        "pod {key}: phase: expected {want:?}, found {}",
                        show(got)
                    ));
                }
            }
            if let Some(want) = &e.reason {
                let got = status.and_then(|s| s.reason.as_deref());
                if got != Some(want.as_str()) {
                    failures.push(format!(
                        "pod {key}: reason: expected {want:?}, found {}",
                        show(got)
                    ));
                }
            }
        }
        for e in &expect.reservations {
            let Some(r) = self.store.reservation(&e.name) else {
                failures.push(format!(
                    "reservation {}: expected to exist, found no such reservation",
                    e.name
                ));
                continue;
            };
            let status = r.status.as_ref();
            if let Some(want) = &e.phase {
                let got = r.phase();
                if got.as_str() != want {
                    failures.push(format!(
                        "reservation {}: phase: expected {want:?}, found {:?}",
                        e.name,
                        got.as_str()
                    ));
                }
            }
            if let Some(want) = &e.node {
                let got = status
                    .and_then(|s| s.node_name.clone())
                    .filter(|n| !n.is_empty());
                if *want != got {
                    failures.push(format!(
                        "reservation {}: node: expected {}, found {}",
                        e.name,
                        show(want.as_deref()),
                        show(got.as_deref())
                    ));
                }
            }
            if let Some(want) = &e.owners {
                let got: BTreeSet<String> = status
                    .map(|s| s.current_owners.as_slice())
                    .unwrap_or_default()
                    .iter()
                    .map(|o| {
                        format!(
                            "{}/{}",
                            o.namespace.as_deref().unwrap_or("default"),
                            o.name.as_deref().unwrap_or("")
                        )
                    })
                    .collect();
                let want: BTreeSet<String> = want
                    .iter()
                    .map(|o| {
                        if o.contains('/') {
                            o.clone()
                        } else {
                            format!("default/{o}")
                        }
                    })
                    .collect();
                if got != want {
                    failures.push(format!(
                        "reservation {}: owners: expected {:?}, found {:?}",
                        e.name, want, got
                    ));
                }
            }
            for (resource, want) in e.allocatable.iter().flatten() {
                let got = status.and_then(|s| s.allocatable.get(resource));
                let amount = |text: &str| berth_api::parse_resource(resource, text).ok();
                if got.and_then(|q| amount(&q.0)).is_none()
                    || got.and_then(|q| amount(&q.0)) != amount(want)
                {
                    failures.push(format!(
                        "reservation {}: allocatable[{resource}]: expected {want:?}, found {}",
                        e.name,
                        show(got.map(|q| q.0.as_str()))
                    ));
                }
            }
        }
        crate::migration::check(&self.store, &expect.pod_migration_jobs, &mut failures);
        failures
    }
}

/// The phase of a reservation, `Pending` when it has none.
pub fn reservation_phase(r: &berth_api::reservation::Reservation) -> ReservationPhase {
    r.phase()
}

fn show(v: Option<&str>) -> String {
    match v {
        Some(s) => format!("{s:?}"),
        None => "null".to_string(),
    }
}

/// Sets the pod's `PodScheduled` condition as `podutil.UpdatePodCondition` does: the
/// transition time moves only when the status changes.
fn set_pod_scheduled(
    pod: &mut Pod,
    status: &str,
    reason: Option<String>,
    message: Option<String>,
    now: Time,
) {
    let conditions = pod
        .status
        .get_or_insert_with(PodStatus::default)
        .conditions
        .get_or_insert_with(Vec::new);
    let old = conditions.iter().position(|c| c.type_ == "PodScheduled");
    let transition = match old.map(|i| &conditions[i]) {
        Some(c) if c.status == status => c
            .last_transition_time
            .clone()
            .unwrap_or_else(|| meta_time(now)),
        _ => meta_time(now),
    };
    let cond = PodCondition {
        type_: "PodScheduled".to_string(),
        status: status.to_string(),
        reason,
        message,
        last_transition_time: Some(transition),
        ..Default::default()
    };
    match old {
        Some(i) => conditions[i] = cond,
        None => conditions.push(cond),
    }
}

/// The label every kubelet puts on its Node when it registers: `kubernetes.io/hostname`,
/// the node's name unless the object already says otherwise. Scenario authors write
/// `nodeSelector`, spread and anti-affinity on `kubernetes.io/hostname` as they would on a
/// real cluster, where no node lacks it (without it, spreading over hostname would reject
/// every node as "missing required label").
pub const LABEL_HOSTNAME: &str = "kubernetes.io/hostname";

fn kubelet_node_labels(node: &mut berth_api::k8s_openapi::api::core::v1::Node) {
    let Some(name) = node.metadata.name.clone() else {
        return;
    };
    node.metadata
        .labels
        .get_or_insert_with(Default::default)
        .entry(LABEL_HOSTNAME.to_string())
        .or_insert(name);
}

/// On replace, what the API server keeps of a pod: its status (a subresource) when the new
/// object gives none, and its node (immutable once set) and the scheduler's annotations.
fn carry_over_pod(pod: &mut Pod, old: &Pod) {
    if pod.status.is_none() {
        pod.status = old.status.clone();
    }
    let old_node = old
        .spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .filter(|n| !n.is_empty());
    let spec = pod.spec.get_or_insert_with(Default::default);
    if spec.node_name.as_deref().is_none_or(str::is_empty) {
        if let Some(node) = old_node {
            spec.node_name = Some(node);
            if let Some(old_ann) = &old.metadata.annotations {
                let ann = pod
                    .metadata
                    .annotations
                    .get_or_insert_with(Default::default);
                for (k, v) in old_ann {
                    ann.entry(k.clone()).or_insert_with(|| v.clone());
                }
            }
        }
    }
}

/// What makes two events the same for client-go's correlator (`getEventKey`: source,
/// involved object with UID, type, reason, message). The source is always berth's.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct EventKey {
    involved: ObjectKey,
    uid: String,
    type_: &'static str,
    reason: String,
    message: String,
}

/// How many distinct events the correlator remembers (client-go's `maxLruCacheEntries`);
/// past that the least recently seen is forgotten and its next repeat starts a new event.
const EVENT_CACHE_SIZE: usize = 4096;

/// Event numbering and folding state: a least-recently-used cache of the events recorded,
/// as client-go's `eventLogger` keeps.
#[derive(Debug, Default)]
struct Recorder {
    counter: u64,
    /// Event name and last use, by key.
    names: HashMap<EventKey, (String, u64)>,
    /// Keys by last use, oldest first, for eviction.
    by_use: BTreeMap<u64, EventKey>,
    uses: u64,
}

impl Recorder {
    /// The name of the event recorded earlier under `key`, if remembered; marks it used.
    fn seen(&mut self, key: &EventKey) -> Option<String> {
        let (name, used) = self.names.get_mut(key)?;
        self.by_use.remove(used);
        self.uses += 1;
        *used = self.uses;
        self.by_use.insert(self.uses, key.clone());
        Some(name.clone())
    }

    /// Remembers a new event, forgetting the least recently used one beyond the cache size.
    fn remember(&mut self, key: EventKey, name: String) {
        self.uses += 1;
        self.by_use.insert(self.uses, key.clone());
        if let Some((_, old)) = self.names.insert(key, (name, self.uses)) {
            self.by_use.remove(&old);
        }
        while self.names.len() > EVENT_CACHE_SIZE {
            let Some((_, oldest)) = self.by_use.pop_first() else {
                break;
            };
            self.names.remove(&oldest);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::input::parse_str;

    fn run(text: &str) -> Simulation {
        let input = match parse_str("t.yaml", text) {
            Ok(i) => i,
            Err(e) => panic!("{e}"),
        };
        Simulation::run(vec![], Config::default(), &input)
    }

    fn node_of(sim: &Simulation, name: &str) -> Option<String> {
        sim.store()
            .pod(&ObjectKey::pod("default", name))
            .and_then(|p| p.spec.as_ref()?.node_name.clone())
    }

    const NODES: &str = "apiVersion: v1\nkind: Node\nmetadata: {name: n1}\nstatus: {allocatable: {cpu: 2, memory: 4Gi, pods: 10}}\n---\n";

    fn pod(name: &str, cpu: &str) -> String {
        format!("apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}}}\nspec: {{containers: [{{name: c, resources: {{requests: {{cpu: \"{cpu}\"}}}}}}]}}\n---\n")
    }

    #[test]
    fn nodes_get_the_kubelet_hostname_label_unless_they_set_one() {
        let sim = run("apiVersion: v1\nkind: Node\nmetadata: {name: n1}\n---\napiVersion: v1\nkind: Node\nmetadata: {name: n2, labels: {kubernetes.io/hostname: host-2, zone: a}}\n");
        let label = |name: &str| {
            sim.store()
                .node(name)
                .and_then(|n| n.metadata.labels.as_ref()?.get(LABEL_HOSTNAME).cloned())
        };
        assert_eq!(label("n1").as_deref(), Some("n1"));
        assert_eq!(label("n2").as_deref(), Some("host-2"));
    }

    #[test]
    fn spreading_over_hostname_works_on_nodes_written_without_labels() {
        let spread = "apiVersion: v1\nkind: Pod\nmetadata: {name: NAME, labels: {app: web}}\nspec:\n  topologySpreadConstraints: [{maxSkew: 1, topologyKey: kubernetes.io/hostname, whenUnsatisfiable: DoNotSchedule, labelSelector: {matchLabels: {app: web}}}]\n  containers: [{name: c}]\n---\n";
        let nodes = "apiVersion: v1\nkind: Node\nmetadata: {name: n1}\nstatus: {allocatable: {cpu: 2, pods: 10}}\n---\napiVersion: v1\nkind: Node\nmetadata: {name: n2}\nstatus: {allocatable: {cpu: 2, pods: 10}}\n---\n";
        let sim = run(&format!(
            "{nodes}{}{}",
            spread.replace("NAME", "a"),
            spread.replace("NAME", "b")
        ));
        let (a, b) = (node_of(&sim, "a"), node_of(&sim, "b"));
        assert!(a.is_some() && b.is_some() && a != b, "{a:?} {b:?}");
    }

    #[test]
    fn a_preemptor_once_bound_keeps_no_nominated_node() {
        let text = "apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {name: high}\nvalue: 1000\n---\napiVersion: v1\nkind: Node\nmetadata: {name: n1}\nstatus: {allocatable: {cpu: 2, pods: 10}}\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: low}\nspec: {nodeName: n1, containers: [{name: c, resources: {requests: {cpu: 2}}}]}\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: vip}\nspec: {priorityClassName: high, containers: [{name: c, resources: {requests: {cpu: 2}}}]}\n";
        let sim = run(text);
        assert_eq!(node_of(&sim, "vip").as_deref(), Some("n1"));
        let vip = sim.store().pod(&ObjectKey::pod("default", "vip")).unwrap();
        let nominated = vip
            .status
            .as_ref()
            .and_then(|s| s.nominated_node_name.clone());
        assert_eq!(nominated, None);
    }

    #[test]
    fn derived_uids_are_stable_uuid_shaped_and_distinct() {
        let a = derive_uid("Pod", "default", "p");
        assert_eq!(a, derive_uid("Pod", "default", "p"));
        assert_ne!(a, derive_uid("Pod", "default", "q"));
        assert_ne!(a, derive_uid("Node", "default", "p"));
        assert_eq!(a.len(), 36);
        assert_eq!(&a[14..15], "8", "version 8: {a}");
    }

    #[test]
    fn a_scheduled_pod_is_bound_running_and_has_an_event() {
        let sim = run(&format!("{NODES}{}", pod("p", "1")));
        let p = sim.store().pod(&ObjectKey::pod("default", "p")).unwrap();
        assert_eq!(node_of(&sim, "p").as_deref(), Some("n1"));
        let status = p.status.as_ref().unwrap();
        assert_eq!(status.phase.as_deref(), Some("Running"));
        let cond = &status.conditions.as_ref().unwrap()[0];
        assert_eq!(
            (cond.type_.as_str(), cond.status.as_str()),
            ("PodScheduled", "True")
        );
        assert!(p.metadata.uid.is_some() && p.metadata.creation_timestamp.is_some());
        let events: Vec<_> = sim.store().events().collect();
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].reason.as_deref(), Some("Scheduled"));
        assert_eq!(
            events[0].metadata.name.as_deref(),
            Some("p.0000000000000001")
        );
        assert_eq!(
            events[0].message.as_deref(),
            Some("Successfully assigned default/p to n1")
        );
        assert_eq!(events[0].involved_object.uid, p.metadata.uid);
    }

    #[test]
    fn an_unschedulable_pod_gets_a_condition_and_stays_pending() {
        let sim = run(&format!("{NODES}{}", pod("big", "3")));
        let p = sim.store().pod(&ObjectKey::pod("default", "big")).unwrap();
        assert_eq!(node_of(&sim, "big"), None);
        let message = pod_scheduled_message(p).unwrap_or_default();
        assert!(
            message.starts_with("0/1 nodes are available: 1 Insufficient cpu."),
            "{message}"
        );
        assert_eq!(p.status.as_ref().unwrap().phase.as_deref(), Some("Pending"));
    }

    #[test]
    fn a_pod_given_on_a_node_is_running_there_without_the_scheduler() {
        let sim = run(&format!("{NODES}apiVersion: v1\nkind: Pod\nmetadata: {{name: old}}\nspec: {{nodeName: n1, containers: [{{name: c, resources: {{requests: {{cpu: 2}}}}}}]}}\n---\n{}", pod("new", "1")));
        let old = sim.store().pod(&ObjectKey::pod("default", "old")).unwrap();
        assert_eq!(
            old.status.as_ref().unwrap().phase.as_deref(),
            Some("Running")
        );
        assert_eq!(node_of(&sim, "new"), None, "n1 is full");
    }

    #[test]
    fn a_pod_bound_to_a_missing_node_is_not_running_and_is_warned_about() {
        let bound = |name: &str, node: &str| {
            format!("apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}}}\nspec: {{nodeName: {node}, containers: [{{name: c}}]}}\n---\n")
        };
        let phase = |sim: &Simulation, name: &str| {
            sim.store()
                .pod(&ObjectKey::pod("default", name))
                .and_then(|p| p.status.as_ref()?.phase.clone())
        };
        // Written before its node: the node is part of the cluster as found, so it runs.
        let sim = run(&format!("{}{NODES}", bound("early", "n1")));
        assert_eq!(phase(&sim, "early").as_deref(), Some("Running"));
        assert!(sim.log().is_empty(), "{:?}", sim.log());

        let text = format!("{NODES}{}apiVersion: sim.berth.dev/v1alpha1\nkind: Scenario\nmetadata: {{name: s}}\nspec:\n  steps:\n  - expect: {{pods: [{{name: ghost, node: n9, phase: Pending}}]}}\n  - apply: [{{apiVersion: v1, kind: Node, metadata: {{name: n9}}, status: {{allocatable: {{cpu: 2}}}}}}]\n  - expect: {{pods: [{{name: ghost, node: n9, phase: Running}}]}}\n", bound("ghost", "n9"));
        let sim = run(&text);
        assert_eq!(sim.failed_expectations(), 0, "{:?}", sim.log());
        assert_eq!(phase(&sim, "ghost").as_deref(), Some("Running"));
        assert_eq!(
            sim.log(),
            ["warning: pod default/ghost is bound to node \"n9\", which does not exist: no kubelet admits it, so it stays Pending (until a node of that name is created)"]
        );
    }

    #[test]
    fn priority_comes_from_the_class_or_the_global_default() {
        let classes = "apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {name: high}\nvalue: 1000\npreemptionPolicy: Never\n---\napiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {name: low}\nvalue: 10\nglobalDefault: true\n---\n";
        let sim = run(&format!("{classes}apiVersion: v1\nkind: Pod\nmetadata: {{name: a}}\nspec: {{priorityClassName: high, containers: [{{name: c}}]}}\n---\n{}", pod("b", "1")));
        let a = sim.store().pod(&ObjectKey::pod("default", "a")).unwrap();
        let spec = a.spec.as_ref().unwrap();
        assert_eq!(spec.priority, Some(1000));
        assert_eq!(spec.preemption_policy.as_deref(), Some("Never"));
        let b = sim.store().pod(&ObjectKey::pod("default", "b")).unwrap();
        let spec = b.spec.as_ref().unwrap();
        assert_eq!(spec.priority, Some(10));
        assert_eq!(spec.priority_class_name.as_deref(), Some("low"));
        assert_eq!(
            spec.preemption_policy.as_deref(),
            Some("PreemptLowerPriority")
        );
    }

    #[test]
    fn higher_priority_pods_are_placed_first() {
        let text = format!(
            "{NODES}{}apiVersion: v1\nkind: Pod\nmetadata: {{name: vip}}\nspec: {{priority: 100, containers: [{{name: c, resources: {{requests: {{cpu: 2}}}}}}]}}\n",
            pod("first", "2")
        );
        let sim = run(&text);
        assert_eq!(node_of(&sim, "vip").as_deref(), Some("n1"));
        assert_eq!(node_of(&sim, "first"), None);
    }

    #[test]
    fn a_pod_of_another_scheduler_is_left_alone() {
        let text = format!(
            "{NODES}apiVersion: v1\nkind: Pod\nmetadata: {{name: theirs}}\nspec: {{schedulerName: other, containers: [{{name: c}}]}}\n"
        );
        let sim = run(&text);
        assert_eq!(node_of(&sim, "theirs"), None);
        let p = sim
            .store()
            .pod(&ObjectKey::pod("default", "theirs"))
            .expect("stored");
        let conditions = p.status.as_ref().and_then(|s| s.conditions.as_ref());
        assert!(
            conditions.is_none_or(|c| c.is_empty()),
            "berth writes no condition: {conditions:?}"
        );
        assert!(
            sim.store().events().next().is_none(),
            "and records no event"
        );
    }

    #[test]
    fn a_bind_to_an_already_bound_pod_fails() {
        let mut sim = run(NODES);
        let text = "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {nodeName: n1, containers: [{name: c}]}\n";
        let input = parse_str("t.yaml", text).unwrap();
        sim.apply_item(&input.items[0].1, true);
        let uid = derive_uid("Pod", "default", "p");
        sim.bind(
            ObjectKey::pod("default", "p"),
            uid,
            "n2".into(),
            BTreeMap::new(),
        );
        assert_eq!(node_of(&sim, "p").as_deref(), Some("n1"));
    }

    #[test]
    fn identical_repeated_events_fold_into_a_count() {
        let mut sim = run(NODES);
        let rec = Record {
            involved: ObjectKey::pod("default", "x"),
            uid: String::new(),
            type_: "Warning",
            reason: "FailedScheduling".into(),
            message: "m".into(),
        };
        sim.record(rec.clone());
        sim.record(rec.clone());
        sim.record(Record {
            message: "other".into(),
            ..rec
        });
        let events: Vec<_> = sim.store().events().collect();
        assert_eq!(events.len(), 2);
        assert_eq!(events[0].count, Some(2));
    }

    #[test]
    fn a_repeat_after_other_events_folds_into_the_first_as_client_go_correlates() {
        let mut sim = run(NODES);
        let rec = |message: &str, uid: &str| Record {
            involved: ObjectKey::pod("default", "x"),
            uid: uid.into(),
            type_: "Warning",
            reason: "FailedScheduling".into(),
            message: message.into(),
        };
        sim.record(rec("A", "u1"));
        sim.advance(10_000);
        sim.record(rec("B", "u1"));
        sim.advance(10_000);
        sim.record(rec("A", "u1"));
        // The same name and message for a pod re-created with a new UID is another event.
        sim.record(rec("A", "u2"));
        let events: Vec<_> = sim.store().events().collect();
        let summary: Vec<(&str, &str, Option<i32>, String, String)> = events
            .iter()
            .map(|e| {
                let t = |t: &Option<
                    berth_api::k8s_openapi::apimachinery::pkg::apis::meta::v1::Time,
                >| {
                    t.as_ref()
                        .map(|t| rfc3339(t.0.as_millisecond()))
                        .unwrap_or_default()
                };
                (
                    e.message.as_deref().unwrap_or(""),
                    e.involved_object.uid.as_deref().unwrap_or(""),
                    e.count,
                    t(&e.first_timestamp),
                    t(&e.last_timestamp),
                )
            })
            .collect();
        assert_eq!(
            summary,
            [
                (
                    "A",
                    "u1",
                    Some(2),
                    "2024-01-01T00:00:00Z".into(),
                    "2024-01-01T00:00:20Z".into()
                ),
                (
                    "B",
                    "u1",
                    Some(1),
                    "2024-01-01T00:00:10Z".into(),
                    "2024-01-01T00:00:10Z".into()
                ),
                (
                    "A",
                    "u2",
                    Some(1),
                    "2024-01-01T00:00:20Z".into(),
                    "2024-01-01T00:00:20Z".into()
                ),
            ]
        );
    }

    #[test]
    fn the_event_cache_forgets_the_least_recently_seen() {
        let mut r = Recorder::default();
        let key = |i: usize| EventKey {
            involved: ObjectKey::pod("default", &format!("p{i}")),
            uid: String::new(),
            type_: "Warning",
            reason: "FailedScheduling".into(),
            message: "m".into(),
        };
        for i in 0..EVENT_CACHE_SIZE {
            r.remember(key(i), format!("e{i}"));
        }
        assert_eq!(
            r.seen(&key(0)).as_deref(),
            Some("e0"),
            "0 is now the most recent"
        );
        r.remember(key(EVENT_CACHE_SIZE), "new".into());
        assert_eq!(r.seen(&key(1)), None, "1 was the least recently seen");
        assert_eq!(r.seen(&key(0)).as_deref(), Some("e0"));
        assert_eq!(r.names.len(), EVENT_CACHE_SIZE);
        assert_eq!(r.by_use.len(), EVENT_CACHE_SIZE);
    }

    #[test]
    fn advance_retries_a_pod_once_a_node_is_added() {
        let text = format!("{}apiVersion: sim.berth.dev/v1alpha1\nkind: Scenario\nmetadata: {{name: s}}\nspec:\n  steps:\n  - advance: 10s\n  - apply: [{{apiVersion: v1, kind: Node, metadata: {{name: n2}}, status: {{allocatable: {{cpu: 4}}}}}}]\n  - advance: 30s\n  - expect: {{pods: [{{name: p, node: n2}}]}}\n", pod("p", "3"));
        let sim = run(&format!("{NODES}{text}"));
        assert_eq!(node_of(&sim, "p").as_deref(), Some("n2"));
        assert_eq!(sim.failed_expectations(), 0, "{:?}", sim.log());
        assert_eq!(rfc3339(sim.now()), "2024-01-01T00:00:40Z");
    }

    #[test]
    fn a_failed_expectation_names_its_step_as_the_file_numbers_it() {
        let text = format!("{NODES}{}apiVersion: sim.berth.dev/v1alpha1\nkind: Scenario\nmetadata: {{name: s}}\nspec:\n  steps:\n  - advance: 10s\n  - delete: [{{kind: Pod, name: nobody}}]\n  - expect: {{pods: [{{name: p, phase: Failed}}], reservations: [{{name: r, phase: Available}}]}}\n  - {{advance: 5s, expect: {{pods: [{{name: p, message: nope}}]}}}}\n", pod("p", "1"));
        let sim = run(&text);
        assert_eq!(
            sim.log(),
            [
                "warning: spec.steps[1] (delete) of t.yaml: delete Pod default/nobody: not found",
                "expectation failed at spec.steps[2] (expect) of t.yaml (2024-01-01T00:00:10Z): pod default/p: phase: expected \"Failed\", found \"Running\"",
                "expectation failed at spec.steps[2] (expect) of t.yaml (2024-01-01T00:00:10Z): reservation r: expected to exist, found no such reservation",
                "expectation failed at spec.steps[3] (advance, expect) of t.yaml (2024-01-01T00:00:15Z): pod default/p: PodScheduled message: expected one containing \"nope\", found null",
            ]
        );
    }

    #[test]
    fn failed_expectations_are_counted_and_logged() {
        let text = format!("{}apiVersion: sim.berth.dev/v1alpha1\nkind: Scenario\nmetadata: {{name: s}}\nspec:\n  steps:\n  - expect: {{pods: [{{name: p, node: n9}}, {{name: ghost, node: null}}, {{name: ghost2, node: n1}}]}}\n", pod("p", "1"));
        let sim = run(&format!("{NODES}{text}"));
        assert_eq!(sim.failed_expectations(), 2, "{:?}", sim.log());
        assert_eq!(
            sim.log(),
            [
                "expectation failed at spec.steps[0] (expect) of t.yaml (2024-01-01T00:00:00Z): pod default/p: node: expected \"n9\", found \"n1\"",
                "expectation failed at spec.steps[0] (expect) of t.yaml (2024-01-01T00:00:00Z): pod default/ghost2: expected to exist, found no such pod",
            ]
        );
    }
}
