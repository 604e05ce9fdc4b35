//! [`Scheduler`]: the sans-IO scheduler. Events in, effects out, time as an argument.
//!
//! The driver (simulator or cluster adapter) calls, in a loop:
//! 1. [`Scheduler::handle`] for every object change it observes;
//! 2. [`Scheduler::handle_timeout`] when [`Scheduler::poll_timeout`] is due;
//! 3. [`Scheduler::run_until_idle`] to schedule everything that can be scheduled now;
//! 4. [`Scheduler::poll_effect`] until it returns `None`, performing each effect and
//!    feeding the results back as events (a bound pod comes back as `Applied` with
//!    `spec.nodeName`).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;

use crate::cache::{Cluster, PodState};
use crate::effect::{Effect, Record};
use crate::event::Event;
use crate::framework::{Code, CycleState, Diagnosis, Profile, Status};
use crate::model::node::NodeIdx;
use crate::model::pod::PodInfo;
use crate::object::{Kind, Object, ObjectKey};
use crate::queue::SchedulingQueue;
use crate::rng::SplitMix64;
use crate::time::Time;

/// Scheduler-wide settings.
#[derive(Debug, Clone, Default)]
pub struct Config {
    /// Seed for tie-breaking between equally scored nodes.
    pub seed: u64,
}

/// Counters for benchmarks and metrics.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Counters {
    /// Scheduling cycles run.
    pub attempts: u64,
    /// Pods (and reservations) placed.
    pub scheduled: u64,
    /// Cycles that found no node.
    pub unschedulable: u64,
    /// Cycles that hit an internal error.
    pub errors: u64,
    /// Nodes run through Filter.
    pub nodes_filtered: u64,
}

/// The scheduler.
#[derive(Debug)]
pub struct Scheduler {
    /// Everything the scheduler knows.
    pub cluster: Cluster,
    profiles: Vec<Profile>,
    queue: SchedulingQueue,
    effects: VecDeque<Effect>,
    rng: SplitMix64,
    next_start: usize,
    /// Last PodScheduled message sent per pod, so retries do not repeat it.
    last_message: HashMap<ObjectKey, String>,
    /// Counters.
    pub counters: Counters,
    // Reusable per-cycle buffers.
    feasible: Vec<NodeIdx>,
    scores: Vec<i64>,
    totals: Vec<i64>,
    diagnosis: Diagnosis,
}

/// The outcome of one scheduling cycle.
#[derive(Debug)]
enum Outcome {
    Placed(NodeIdx, CycleState),
    Failed(Diagnosis),
}

impl Scheduler {
    /// A scheduler with the given profiles (the first is the default for pods whose
    /// `schedulerName` matches none).
    pub fn new(profiles: Vec<Profile>, config: Config) -> Self {
        let profiles = if profiles.is_empty() {
            vec![Profile::default_profile()]
        } else {
            profiles
        };
        Self {
            cluster: Cluster::default(),
            profiles,
            queue: SchedulingQueue::default(),
            effects: VecDeque::new(),
            rng: SplitMix64::new(config.seed),
            next_start: 0,
            last_message: HashMap::new(),
            counters: Counters::default(),
            feasible: Vec::new(),
            scores: Vec::new(),
            totals: Vec::new(),
            diagnosis: Diagnosis::default(),
        }
    }

    /// The profiles.
    pub fn profiles(&self) -> &[Profile] {
        &self.profiles
    }

    /// Takes the next effect to perform.
    pub fn poll_effect(&mut self) -> Option<Effect> {
        self.effects.pop_front()
    }

    /// The earliest time at which [`Scheduler::handle_timeout`] has something to do.
    pub fn poll_timeout(&self) -> Option<Time> {
        self.queue.next_timeout()
    }

    /// Runs everything due at `now`.
    pub fn handle_timeout(&mut self, now: Time) {
        self.queue.flush(now);
    }

    /// Number of items waiting in the queue (including in-flight ones).
    pub fn pending(&self) -> usize {
        self.queue.len()
    }

    /// Applies an observed change.
    pub fn handle(&mut self, now: Time, event: Event) {
        match event {
            Event::Applied(Object::Node(node)) => {
                let name = node.metadata.name.clone().unwrap_or_default();
                match self.cluster.apply_node(node) {
                    Ok(_) => self.queue.move_all(now),
                    Err(e) => self.record(
                        ObjectKey::cluster(Kind::Node, &name),
                        "",
                        "Warning",
                        "InvalidNode",
                        e.to_string(),
                    ),
                }
            }
            Event::Deleted(key) if key.kind == Kind::Node => {
                self.cluster.delete_node(&key.name);
            }
            Event::Applied(Object::Pod(pod)) => self.apply_pod(now, pod),
            Event::Deleted(key) if key.kind == Kind::Pod => {
                self.queue.delete(&key);
                self.last_message.remove(&key);
                if let Some(e) = self.cluster.remove_pod(&key) {
                    if e.state != PodState::Pending {
                        self.queue.move_all(now);
                    }
                }
            }
            Event::BindFailed { pod, message } => {
                self.cluster.forget(&pod);
                if let Some(e) = self.cluster.pod(&pod) {
                    let info = e.info.clone();
                    self.queue
                        .add(pod.clone(), info.priority, info.created, now);
                    self.queue.pop();
                    self.queue.failed(&pod, false, &[], now);
                    self.effects.push_back(Effect::PodCondition {
                        pod,
                        status: "False",
                        reason: "SchedulerError".into(),
                        message,
                    });
                }
            }
            Event::Applied(Object::PersistentVolumeClaim(pvc)) => {
                let key = Object::PersistentVolumeClaim(pvc.clone()).key();
                self.cluster.pvcs.insert(key, pvc);
                self.queue.move_all(now);
            }
            Event::Applied(Object::CsiNode(c)) => {
                let name: Arc<str> = c.metadata.name.as_deref().unwrap_or("").into();
                self.cluster.csi_nodes.insert(name, c);
                self.queue.move_all(now);
            }
            Event::Applied(Object::PriorityClass(pc)) => {
                let name = pc.metadata.name.clone().unwrap_or_default();
                self.cluster.priority_classes.insert(name, pc);
            }
            Event::Applied(Object::PodDisruptionBudget(pdb)) => {
                let key = Object::PodDisruptionBudget(pdb.clone()).key();
                self.cluster.pdbs.insert(key, pdb);
            }
            Event::Deleted(key) => match key.kind {
                Kind::PersistentVolumeClaim => {
                    self.cluster.pvcs.remove(&key);
                }
                Kind::CsiNode => {
                    self.cluster.csi_nodes.remove(&*key.name);
                    self.queue.move_all(now);
                }
                Kind::PriorityClass => {
                    self.cluster.priority_classes.remove(&*key.name);
                }
                Kind::PodDisruptionBudget => {
                    self.cluster.pdbs.remove(&key);
                }
                _ => {}
            },
            Event::Applied(_) => {}
        }
    }

    fn apply_pod(&mut self, now: Time, pod: Arc<berth_api::k8s_openapi::api::core::v1::Pod>) {
        let info = match PodInfo::new(pod, &mut self.cluster.names) {
            Ok(i) => Arc::new(i),
            Err(e) => {
                let meta = &e;
                let _ = meta;
                return self.reject_invalid_pod(e.to_string());
            }
        };
        let key = info.key.clone();
        let assigned = info.node_name.is_some();
        let prev = self.cluster.apply_pod(info.clone());
        if assigned || info.terminal {
            self.queue.delete(&key);
            self.last_message.remove(&key);
            let was_placed = prev.as_ref().is_some_and(|p| p.state != PodState::Pending);
            let moved_resources = !was_placed || info.terminal;
            if moved_resources || prev.is_none() {
                // A pod landing (bound by someone else) or finishing changes what fits.
                self.queue.move_all(now);
            }
            return;
        }
        if self
            .cluster
            .pod(&key)
            .is_some_and(|e| e.state == PodState::Assumed)
        {
            return;
        }
        if info.terminating {
            self.queue.delete(&key);
            return;
        }
        self.queue.add(key, info.priority, info.created, now);
    }

    fn reject_invalid_pod(&mut self, _message: String) {
        // Pods the core cannot parse never enter the queue; the driver validates input
        // before it reaches here, so this only guards the cluster adapter.
    }

    /// Schedules until the active queue is empty (popping backing-off pods early when it
    /// is, as `SchedulerPopFromBackoffQ` does). Returns how many cycles ran.
    pub fn run_until_idle(&mut self, now: Time) -> usize {
        let mut cycles = 0;
        self.queue.flush(now);
        loop {
            match self.queue.pop() {
                Some(key) => {
                    self.schedule_one(now, key);
                    cycles += 1;
                }
                None => {
                    if !self.queue.pop_backoff_early() {
                        break;
                    }
                }
            }
        }
        cycles
    }

    /// Runs one scheduling cycle for the next active item, if there is one. Returns whether
    /// a cycle ran. Benchmarks time this; drivers use [`Scheduler::run_until_idle`].
    pub fn schedule_next(&mut self, now: Time) -> bool {
        match self.queue.pop() {
            Some(key) => {
                self.schedule_one(now, key);
                true
            }
            None => false,
        }
    }

    fn profile_for(&self, pod: &PodInfo) -> usize {
        self.profiles
            .iter()
            .position(|p| *p.scheduler_name == *pod.scheduler_name)
            .unwrap_or(0)
    }

    fn schedule_one(&mut self, now: Time, key: ObjectKey) {
        let Some(pod) = self.item(&key) else {
            self.queue.done(&key);
            return;
        };
        self.counters.attempts += 1;
        let profile = self.profile_for(&pod);
        match self.find_node(profile, &pod) {
            Outcome::Placed(node, mut state) => {
                if let Err(status) = self.reserve_and_bind(profile, &mut state, &pod, node, now) {
                    self.counters.errors += 1;
                    let mut d = Diagnosis::default();
                    d.error = Some(status.message());
                    self.fail(now, &pod, d);
                }
            }
            Outcome::Failed(diag) => self.fail(now, &pod, diag),
        }
    }

    fn item(&self, key: &ObjectKey) -> Option<Arc<PodInfo>> {
        match key.kind {
            Kind::Pod => self
                .cluster
                .pod(key)
                .filter(|e| e.state == PodState::Pending)
                .map(|e| e.info.clone()),
            _ => None,
        }
    }

    /// kube-scheduler's `numFeasibleNodesToFind`.
    pub fn num_feasible_nodes_to_find(percentage: Option<u32>, num_all: usize) -> usize {
        const MIN_FEASIBLE: usize = 100;
        const MIN_PERCENTAGE: i64 = 5;
        if num_all < MIN_FEASIBLE {
            return num_all;
        }
        let mut pct = i64::from(percentage.unwrap_or(0));
        if pct == 0 {
            pct = (50 - num_all as i64 / 125).max(MIN_PERCENTAGE);
        }
        if pct >= 100 {
            return num_all;
        }
        ((num_all as i64 * pct / 100) as usize).max(MIN_FEASIBLE)
    }

    fn find_node(&mut self, profile: usize, pod: &PodInfo) -> Outcome {
        let prof = &self.profiles[profile];
        let cx = &self.cluster;
        let mut state = CycleState::default();
        let mut diag = std::mem::take(&mut self.diagnosis);
        diag.clear();
        let num_all = cx.node_count();
        if num_all == 0 {
            return Outcome::Failed(diag);
        }
        // PreFilter.
        for &i in &prof.pre_filter {
            let p = &prof.plugins[i];
            let st = p.pre_filter(cx, &mut state, pod);
            if st.is_skip() {
                state.skip_filter |= 1 << i;
                continue;
            }
            if !st.is_success() {
                if st.code() == Code::Error {
                    diag.error = Some(format!(
                        "running PreFilter plugin {:?}: {}",
                        p.name(),
                        st.message()
                    ));
                } else {
                    diag.pre_filter_msg = Some(st.message());
                    diag.unschedulable_plugins.push(p.name());
                }
                return Outcome::Failed(diag);
            }
        }
        // Filter, from a rotating start, until enough feasible nodes are found.
        let has_score = !prof.score.is_empty();
        let subset = state.node_subset.take();
        let candidates: &[NodeIdx] = subset.as_deref().unwrap_or(cx.node_order());
        let n = candidates.len();
        let to_find = if has_score {
            Self::num_feasible_nodes_to_find(prof.percentage_of_nodes_to_score, n)
        } else {
            1
        };
        let mut feasible = std::mem::take(&mut self.feasible);
        feasible.clear();
        let start = if subset.is_some() || n == 0 {
            0
        } else {
            self.next_start % n
        };
        let mut processed = 0;
        for k in 0..n {
            if feasible.len() >= to_find {
                break;
            }
            let idx = candidates[(start + k) % n];
            processed += 1;
            let Some(node) = cx.node(idx) else { continue };
            self.counters.nodes_filtered += 1;
            let mut ok = true;
            for &i in &prof.filter {
                if state.skip_filter & (1 << i) != 0 {
                    continue;
                }
                let p = &prof.plugins[i];
                let st = p.filter(cx, &state, pod, node);
                if !st.is_success() {
                    diag.add(&st.with_plugin(p.name()));
                    ok = false;
                    break;
                }
            }
            if ok {
                feasible.push(idx);
            }
        }
        if subset.is_none() && n > 0 {
            self.next_start = (start + processed) % n;
        }
        if feasible.is_empty() {
            if let Some(s) = &subset {
                // Nodes a PreFilter result left out count as rejected by those plugins.
                let reason = format!(
                    "node(s) didn't satisfy plugin(s) [{}]",
                    state.subset_plugins.join(" ")
                );
                diag.add_absent(reason, num_all.saturating_sub(s.len()) as u32);
            }
            self.feasible = feasible;
            // PostFilter (preemption).
            for &i in &prof.post_filter {
                if let Some(r) = prof.plugins[i].post_filter(cx, &state, pod, &diag) {
                    diag.post_filter_msg = r.message;
                }
            }
            return Outcome::Failed(diag);
        }
        self.diagnosis = diag;
        state.node_subset = subset;
        if feasible.len() == 1 {
            let only = feasible[0];
            self.feasible = feasible;
            return Outcome::Placed(only, state);
        }
        // PreScore and Score.
        let m = feasible.len();
        self.totals.clear();
        self.totals.resize(m, 0);
        for &i in &prof.pre_score {
            let st = prof.plugins[i].pre_score(cx, &mut state, pod, &feasible);
            if st.is_skip() {
                state.skip_score |= 1 << i;
            }
        }
        for &(i, weight) in &prof.score {
            if state.skip_score & (1 << i) != 0 {
                continue;
            }
            let p = &prof.plugins[i];
            self.scores.clear();
            for &idx in &feasible {
                let s = cx
                    .node(idx)
                    .map_or(0, |node| p.score(cx, &state, pod, node));
                self.scores.push(s);
            }
            p.normalize_scores(&state, pod, &mut self.scores);
            for (t, s) in self.totals.iter_mut().zip(&self.scores) {
                *t += s * weight;
            }
        }
        // Highest total; ties broken uniformly at random (reservoir sampling).
        let mut best = 0;
        let mut ties = 0u64;
        for j in 0..m {
            if j == 0 || self.totals[j] > self.totals[best] {
                best = j;
                ties = 1;
            } else if self.totals[j] == self.totals[best] {
                ties += 1;
                if self.rng.below(ties) == 0 {
                    best = j;
                }
            }
        }
        let chosen = feasible[best];
        self.feasible = feasible;
        Outcome::Placed(chosen, state)
    }

    fn reserve_and_bind(
        &mut self,
        profile: usize,
        state: &mut CycleState,
        pod: &Arc<PodInfo>,
        node: NodeIdx,
        now: Time,
    ) -> Result<(), Status> {
        let is_pod = !pod.is_reserve_pod();
        if is_pod && !self.cluster.assume(&pod.key, node) {
            return Err(Status::error("pod or node vanished before assume"));
        }
        let prof = &self.profiles[profile];
        for (n, &i) in prof.reserve.iter().enumerate() {
            let st = prof.plugins[i].reserve(&mut self.cluster, state, pod, node);
            if !st.is_success() {
                for &j in prof.reserve[..=n].iter().rev() {
                    prof.plugins[j].unreserve(&mut self.cluster, state, pod, node);
                }
                if is_pod {
                    self.cluster.forget(&pod.key);
                }
                return Err(st);
            }
        }
        let mut annotations = BTreeMap::new();
        if let Some(info) = self.cluster.node(node) {
            for &i in &prof.pre_bind {
                let st =
                    prof.plugins[i].pre_bind(&self.cluster, state, pod, info, &mut annotations);
                if !st.is_success() {
                    for &j in prof.reserve.iter().rev() {
                        prof.plugins[j].unreserve(&mut self.cluster, state, pod, node);
                    }
                    if is_pod {
                        self.cluster.forget(&pod.key);
                    }
                    return Err(st);
                }
            }
        }
        let node_name = self
            .cluster
            .node(node)
            .map(|n| n.name.to_string())
            .unwrap_or_default();
        self.counters.scheduled += 1;
        self.queue.done(&pod.key);
        self.last_message.remove(&pod.key);
        let _ = now;
        if is_pod {
            self.effects.push_back(Effect::Bind {
                pod: pod.key.clone(),
                node: node_name.clone(),
                annotations,
            });
            self.record(
                pod.key.clone(),
                &pod.uid,
                "Normal",
                "Scheduled",
                format!("Successfully assigned {} to {}", pod.key, node_name),
            );
        }
        Ok(())
    }

    fn fail(&mut self, now: Time, pod: &PodInfo, diag: Diagnosis) {
        let (message, unschedulable) = match &diag.error {
            Some(err) => (err.clone(), false),
            None => (diag.render(self.cluster.node_count()), true),
        };
        if unschedulable {
            self.counters.unschedulable += 1;
        }
        self.queue
            .failed(&pod.key, unschedulable, &diag.unschedulable_plugins, now);
        self.diagnosis = diag;
        if self.last_message.get(&pod.key) == Some(&message) {
            return;
        }
        self.last_message.insert(pod.key.clone(), message.clone());
        if !pod.is_reserve_pod() {
            self.effects.push_back(Effect::PodCondition {
                pod: pod.key.clone(),
                status: "False",
                reason: if unschedulable {
                    "Unschedulable".into()
                } else {
                    "SchedulerError".into()
                },
                message: message.clone(),
            });
            self.record(
                pod.key.clone(),
                &pod.uid,
                "Warning",
                "FailedScheduling",
                message,
            );
        }
    }

    fn record(
        &mut self,
        involved: ObjectKey,
        uid: &str,
        type_: &'static str,
        reason: &str,
        message: String,
    ) {
        self.effects.push_back(Effect::Record(Record {
            involved,
            uid: uid.to_string(),
            type_,
            reason: reason.to_string(),
            message,
        }));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{node, pod};

    fn drain(s: &mut Scheduler) -> Vec<Effect> {
        std::iter::from_fn(|| s.poll_effect()).collect()
    }

    /// Plays the API server: binds pods the scheduler asked to bind.
    fn run(s: &mut Scheduler, now: Time) -> Vec<Effect> {
        s.run_until_idle(now);
        let effects = drain(s);
        for e in &effects {
            if let Effect::Bind { pod: key, node, .. } = e {
                let info = s.cluster.pod(key).unwrap().info.clone();
                let mut p = (*info.pod).clone();
                p.spec.get_or_insert_with(Default::default).node_name = Some(node.clone());
                s.handle(now, Event::Applied(Object::Pod(Arc::new(p))));
            }
        }
        effects
    }

    fn bound_node(s: &Scheduler, name: &str) -> Option<String> {
        let e = s.cluster.pod(&ObjectKey::pod("default", name))?;
        (e.state == PodState::Bound).then(|| e.info.node_name.as_deref().unwrap_or("").to_string())
    }

    #[test]
    fn schedules_pods_onto_nodes_with_room_and_reports_the_rest() {
        let mut s = Scheduler::new(vec![Profile::default_profile()], Config::default());
        s.handle(
            0,
            Event::Applied(Object::Node(
                node("n1").alloc("cpu", "2").alloc("memory", "4Gi").build(),
            )),
        );
        s.handle(
            0,
            Event::Applied(Object::Node(
                node("n2").alloc("cpu", "1").alloc("memory", "4Gi").build(),
            )),
        );
        s.handle(
            0,
            Event::Applied(Object::Pod(pod("big").req("cpu", "2").build())),
        );
        s.handle(
            0,
            Event::Applied(Object::Pod(pod("small").req("cpu", "1").build())),
        );
        s.handle(
            0,
            Event::Applied(Object::Pod(pod("huge").req("cpu", "3").build())),
        );
        let effects = run(&mut s, 0);
        assert_eq!(bound_node(&s, "big").as_deref(), Some("n1"));
        assert_eq!(bound_node(&s, "small").as_deref(), Some("n2"));
        assert_eq!(bound_node(&s, "huge"), None);
        let msg = effects.iter().find_map(|e| match e {
            Effect::PodCondition { pod, message, .. } if &*pod.name == "huge" => {
                Some(message.clone())
            }
            _ => None,
        });
        assert_eq!(
            msg.as_deref(),
            Some("0/2 nodes are available: 2 Insufficient cpu.")
        );
        let n1 = s.cluster.node_by_name("n1").unwrap();
        assert_eq!(n1.requested[crate::resources::ResourceId::CPU], 2000);
    }

    #[test]
    fn a_deleted_pod_frees_room_for_an_unschedulable_one() {
        let mut s = Scheduler::new(vec![Profile::default_profile()], Config::default());
        s.handle(
            0,
            Event::Applied(Object::Node(node("n1").alloc("cpu", "1").build())),
        );
        s.handle(
            0,
            Event::Applied(Object::Pod(pod("a").req("cpu", "1").build())),
        );
        run(&mut s, 0);
        s.handle(
            0,
            Event::Applied(Object::Pod(pod("b").req("cpu", "1").build())),
        );
        run(&mut s, 0);
        assert_eq!(bound_node(&s, "b"), None);
        s.handle(1, Event::Deleted(ObjectKey::pod("default", "a")));
        run(&mut s, 1);
        assert_eq!(bound_node(&s, "b").as_deref(), Some("n1"));
    }

    #[test]
    fn an_empty_cluster_says_so() {
        let mut s = Scheduler::new(vec![], Config::default());
        s.handle(0, Event::Applied(Object::Pod(pod("p").build())));
        let effects = run(&mut s, 0);
        assert!(effects.iter().any(|e| matches!(e, Effect::PodCondition { message, .. } if message == "no nodes available to schedule pods")));
    }

    #[test]
    fn adaptive_percentage_of_nodes_to_score_matches_kube_scheduler() {
        let f = Scheduler::num_feasible_nodes_to_find;
        assert_eq!(f(None, 50), 50);
        assert_eq!(f(None, 500), 230);
        assert_eq!(f(None, 1000), 420);
        assert_eq!(f(None, 5000), 500);
        assert_eq!(f(None, 6000), 300);
        assert_eq!(f(Some(100), 5000), 5000);
        assert_eq!(f(Some(1), 5000), 100);
    }
}
