//! The scheduling cycle, in kube-scheduler's steps (`schedule_one.go`): pop an item,
//! `schedulePod` (PreFilter, the nominated node, Filter, PreScore and Score, select the
//! host), PostFilter on a fit error, then Reserve, PreBind and the bind (or the unwind
//! through `unreserve_and_forget`); a failure sets the pod's condition.

use super::*;
use crate::framework::plugin::PreEnqueueContext;
use crate::framework::Plugin;

impl Scheduler {
    /// Schedules until the active queue is empty (popping backing-off pods early when it
    /// is, as `SchedulerPopFromBackoffQ` does). Returns how many cycles ran: none before the
    /// initial sync (a half-listed cluster would place pods on room that is taken, and fail
    /// reservations whose node is not listed yet).
    pub fn run_until_idle(&mut self, now: Time) -> usize {
        self.run_at_most(now, usize::MAX)
    }

    /// [`Scheduler::run_until_idle`], stopping after `max_cycles` cycles: test drivers
    /// bound it so that a livelock (cycles that keep requeueing each other at one instant)
    /// is reported with the sequence that caused it instead of hanging the test.
    pub fn run_at_most(&mut self, now: Time, max_cycles: usize) -> usize {
        if !self.synced() {
            return 0;
        }
        let mut cycles = 0;
        self.cluster
            .reservations
            .expire_on_missing_nodes(&mut self.cluster.cache, now);
        self.sync_reservations(now);
        self.queue.flush(now);
        while cycles < max_cycles {
            match self.queue.pop() {
                Some(key) => {
                    self.schedule_one(now, key);
                    self.sync_reservations(now);
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
        if !self.synced() {
            return false;
        }
        match self.queue.pop() {
            Some(key) => {
                self.schedule_one(now, key);
                self.sync_reservations(now);
                true
            }
            None => false,
        }
    }

    pub(super) fn profile_for(&self, pod: &PodInfo) -> usize {
        self.profiles
            .iter()
            .position(|p| *p.scheduler_name == *pod.scheduler_name)
            .unwrap_or(0)
    }

    pub(super) fn schedule_one(&mut self, now: Time, key: ObjectKey) {
        let Some(pod) = self.item(&key) else {
            self.queue.done(&key);
            return;
        };
        if self.pre_enqueue_refuses(now, &pod) {
            return;
        }
        if let Some(step) = self.queue.replayable(&key, self.epoch) {
            // Nothing changed since this pod failed: the cycle would fail the same way, with
            // the same message (so no new condition or event) and the same random draws.
            self.rng.advance(step);
            self.queue.failed_again(&key, now);
            self.counters.replayed += 1;
            return;
        }
        self.counters.attempts += 1;
        let epoch = self.epoch;
        let rng_at = self.rng.position();
        let nominated = self.nominator.node_of(&key).cloned();
        let profile = self.profile_for(&pod);
        let (outcome, plan) = self.find_node_for(profile, &pod, now);
        // A fit error: PostFilter (kube-scheduler's schedulingCycle), before the feedback
        // plugins learn the cycle's Filter verdicts.
        let (outcome, post_filter) = match outcome {
            Outcome::Unfit(state, mut diag) => {
                let result = self.run_post_filter(profile, &state, &pod, &mut diag);
                let result = self.gang_preemption(now, &pod, result, &mut diag);
                (Outcome::Failed(diag), result)
            }
            outcome => (outcome, None),
        };
        let fed = self.filter_feedback(profile, &pod, now);
        let mut changed = true;
        match outcome {
            Outcome::Placed(node, state) => {
                if let Err(status) = self.reserve_and_bind(profile, state, &pod, node, now, plan) {
                    self.counters.errors += 1;
                    let mut d = Diagnosis::default();
                    d.error = Some(status.message());
                    self.fail(now, &pod, d, None);
                    self.gang_member_failed(now, &pod);
                }
            }
            Outcome::Unfit(_, diag) | Outcome::Failed(diag) => {
                let preempting = post_filter
                    .as_ref()
                    .is_some_and(|r| matches!(r.nomination, Nomination::Node(_)));
                changed = diag.error.is_some() || preempting || fed;
                self.fail(now, &pod, diag, post_filter);
                if !preempting {
                    self.gang_member_failed(now, &pod);
                }
            }
        }
        let unchanged = !changed
            && key.kind == Kind::Pod
            && self.epoch == epoch
            && self.nominator.node_of(&key) == nominated.as_ref();
        if unchanged {
            let step = self.rng.position().wrapping_sub(rng_at);
            self.queue.remember_failure(&key, epoch, step);
        } else {
            self.epoch += 1;
        }
    }

    /// kube-scheduler's `RunPreEnqueuePlugins`, before the pod's cycle: the gang plugin,
    /// then the pod's profile's PreEnqueue plugins, until one refuses. A refused pod waits
    /// in the unschedulable pool as rejected by that plugin, with the condition and event
    /// the refusal words (if any). Returns whether the pod was refused.
    ///
    /// kube-scheduler asks when a pod is added to the active queue; berth asks when the
    /// pod is popped, which decides the same (nothing a refusal reads changes between the
    /// two without an event that requeues the pod) and keeps the queue free of plugins.
    pub(super) fn pre_enqueue_refuses(&mut self, now: Time, pod: &PodInfo) -> bool {
        let cx = PreEnqueueContext {
            cluster: &self.cluster,
            gangs: &self.gangs,
        };
        let gang = crate::plugins::gangscheduling::GangScheduling;
        let refusal = match gang.pre_enqueue(&cx, pod) {
            Err(r) => r,
            Ok(()) => {
                let prof = &self.profiles[self.profile_for(pod)];
                let refusal = prof
                    .pre_enqueue
                    .iter()
                    .find_map(|&i| prof.plugins[i].pre_enqueue(&cx, pod).err());
                match refusal {
                    Some(r) => r,
                    None => return false,
                }
            }
        };
        if refusal.message.is_some() {
            self.counters.unschedulable += 1;
        }
        self.queue.failed(&pod.key, true, &[refusal.plugin], now);
        if let Some(message) = refusal.message {
            self.say_unschedulable(now, pod, message);
        }
        true
    }

    /// Hands each feedback plugin its Filter verdicts of the cycle that just ran. A node
    /// another plugin rejected counts as passed by this one only if this one ran first.
    /// Returns whether any plugin was handed verdicts (its state changed).
    pub(super) fn filter_feedback(&mut self, profile: usize, pod: &PodInfo, now: Time) -> bool {
        if self.filter_log.is_empty() {
            return false;
        }
        let mut fed = false;
        let prof = &self.profiles[profile];
        for &j in &self.feedback[profile] {
            let i = prof.filter[j];
            if self.filter_log_skip & (1 << i) != 0 {
                continue;
            }
            let p = &prof.plugins[i];
            let name = p.name();
            // What a rejection by another plugin says about this one, per rejecting plugin:
            // worked out at its first node, not at every node (a name lookup along the
            // Filter list per node was most of the feedback on a full cluster).
            let mut seen = SeenPlugins::default();
            self.feedback_buf.clear();
            for &(idx, by) in &self.filter_log {
                let passed = if by.is_empty() {
                    true
                } else if same_name(by, name) {
                    false
                } else {
                    let later = seen.get(by).unwrap_or_else(|| {
                        let later = prof
                            .filter
                            .iter()
                            .position(|&k| prof.plugins[k].name() == by)
                            .is_some_and(|pos| pos > j);
                        seen.put(by, later);
                        later
                    });
                    if !later {
                        continue;
                    }
                    true
                };
                self.feedback_buf.push((idx, passed));
            }
            p.filter_feedback(&mut self.cluster, pod, &self.feedback_buf, now);
            fed = true;
        }
        self.filter_log.clear();
        fed
    }

    pub(super) fn item(&self, key: &ObjectKey) -> Option<Arc<PodInfo>> {
        match key.kind {
            Kind::Pod => self
                .cluster
                .cache
                .pod(key)
                .filter(|e| e.state == PodState::Pending)
                .map(|e| e.info.clone()),
            Kind::Reservation => self.cluster.reservations.item(&key.name),
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

    /// kube-scheduler's `schedulePod`: the nodes that fit the pod, then the best of them.
    /// A fit error comes back as [`Outcome::Unfit`], for the cycle to run PostFilter on.
    pub(super) fn schedule_pod(&mut self, profile: usize, pod: &PodInfo, now: Time) -> Outcome {
        let mut state = CycleState {
            now,
            ..CycleState::default()
        };
        let mut diag = std::mem::take(&mut self.diagnosis);
        diag.clear();
        self.resolvable.clear();
        if self.cluster.cache.node_count() == 0 {
            return Outcome::Failed(diag);
        }
        let mut feasible = std::mem::take(&mut self.feasible);
        feasible.clear();
        let fit = self.find_nodes_that_fit_pod(profile, &mut state, pod, &mut diag, &mut feasible);
        let outcome = match fit {
            Fit::Error => Outcome::Failed(diag),
            Fit::Unfit => Outcome::Unfit(state, diag),
            Fit::Nominated(idx) => {
                self.diagnosis = diag;
                Outcome::Placed(idx, state)
            }
            Fit::Feasible => {
                self.diagnosis = diag;
                self.prioritize_and_select(profile, state, pod, &feasible)
            }
        };
        self.feasible = feasible;
        outcome
    }

    /// kube-scheduler's `findNodesThatFitPod`: PreFilter, the nominated node, then Filter
    /// over the nodes (into `feasible`).
    fn find_nodes_that_fit_pod(
        &mut self,
        profile: usize,
        state: &mut CycleState,
        pod: &PodInfo,
        diag: &mut Diagnosis,
        feasible: &mut Vec<NodeIdx>,
    ) -> Fit {
        match self.run_pre_filter(profile, state, pod, diag) {
            PreFiltered::Error => return Fit::Error,
            PreFiltered::Rejected(code) => {
                // Every node has PreFilter's status; PostFilter still runs, as in
                // kube-scheduler.
                if code == Code::Unschedulable {
                    self.resolvable
                        .extend_from_slice(self.cluster.cache.node_order());
                }
                return Fit::Unfit;
            }
            PreFiltered::Passed => {}
        }
        let subset = state.node_subset.take();
        if let Some(idx) = self.evaluate_nominated_node(profile, state, pod, subset.as_deref()) {
            state.node_subset = subset;
            return Fit::Nominated(idx);
        }
        self.find_nodes_that_pass_filters(profile, state, pod, subset.as_deref(), diag, feasible);
        if feasible.is_empty() {
            if let Some(s) = &subset {
                absent_from_subset(state, s.len(), self.cluster.cache.node_count(), diag);
            }
            return Fit::Unfit;
        }
        state.node_subset = subset;
        Fit::Feasible
    }

    /// kube-scheduler's `RunPreFilterPlugins`, after every plugin's `before_pre_filter`: a
    /// Skip leaves that plugin's Filter out; the first rejection stops.
    fn run_pre_filter(
        &self,
        profile: usize,
        state: &mut CycleState,
        pod: &PodInfo,
        diag: &mut Diagnosis,
    ) -> PreFiltered {
        let prof = &self.profiles[profile];
        let cx = &self.cluster;
        for &i in &prof.pre_filter {
            prof.plugins[i].before_pre_filter(cx, state, pod);
        }
        for &i in &prof.pre_filter {
            let p = &prof.plugins[i];
            let st = p.pre_filter(cx, state, pod);
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
                    return PreFiltered::Error;
                }
                diag.pre_filter_msg = Some(st.message());
                diag.unschedulable_plugins.push(p.name());
                return PreFiltered::Rejected(st.code());
            }
        }
        PreFiltered::Passed
    }

    /// kube-scheduler's `evaluateNominatedNode`: a pod nominated by an earlier preemption
    /// tries that node first and takes it if it fits; its rejection is not recorded (the
    /// full pass records it).
    fn evaluate_nominated_node(
        &mut self,
        profile: usize,
        state: &CycleState,
        pod: &PodInfo,
        subset: Option<&[NodeIdx]>,
    ) -> Option<NodeIdx> {
        let cx = &self.cluster;
        let idx = self
            .nominator
            .node_of(&pod.key)
            .and_then(|n| cx.cache.node_idx(n))?;
        let allowed = subset.is_none_or(|s| s.contains(&idx));
        let node = cx.cache.node(idx).filter(|_| allowed)?;
        self.counters.nodes_filtered += 1;
        let st = run_filter_plugins_with_nominated_pods(
            &FilterPlan::new(&self.profiles[profile], state),
            cx,
            state,
            pod,
            node,
            &self.nominator,
        );
        st.is_success().then_some(idx)
    }

    /// kube-scheduler's `findNodesThatPassFilters`: Filter, the preferred nodes (those
    /// holding the pod's reservations) first, then from a rotating start, until enough
    /// feasible nodes are found.
    fn find_nodes_that_pass_filters(
        &mut self,
        profile: usize,
        state: &mut CycleState,
        pod: &PodInfo,
        subset: Option<&[NodeIdx]>,
        diag: &mut Diagnosis,
        feasible: &mut Vec<NodeIdx>,
    ) {
        let prof = &self.profiles[profile];
        let cx = &self.cluster;
        self.filter_log.clear();
        self.filter_log_skip = state.skip_filter;
        let candidates: &[NodeIdx] = subset.unwrap_or(cx.cache.node_order());
        let n = candidates.len();
        let to_find = if prof.score.is_empty() {
            1
        } else {
            Self::num_feasible_nodes_to_find(prof.percentage_of_nodes_to_score, n)
        };
        let start = if subset.is_some() || n == 0 {
            0
        } else {
            self.next_start % n
        };
        let plan = FilterPlan::new(prof, state);
        // Only the sample advances the rotation, which skips the preferred nodes.
        let preferred = std::mem::take(&mut state.preferred_nodes);
        let nominated = (!self.nominator.is_empty()).then(|| self.nominator.nodes_in(cx));
        let mut found = Found {
            feasible,
            resolvable: &mut self.resolvable,
            diag,
            // Kept only when a feedback plugin is to be handed it: one whose PreFilter
            // skipped it this cycle learns nothing (`filter_feedback`), and most pods are
            // not NUMA pods.
            log: self.feedback[profile]
                .iter()
                .any(|&j| state.skip_filter & (1 << prof.filter[j]) == 0)
                .then_some(&mut self.filter_log),
            nodes_filtered: &mut self.counters.nodes_filtered,
        };
        let filtering = Filtering {
            plan: &plan,
            cx,
            pod,
            nominator: &self.nominator,
            nominated_nodes: nominated.as_ref(),
        };
        // The preferred nodes go through the same batched loop as the sample: in order,
        // stopping once enough are feasible.
        if !preferred.is_empty() {
            filtering.rotation(
                state,
                preferred
                    .iter()
                    .copied()
                    .filter(|i| subset.is_none_or(|s| s.contains(i))),
                &[],
                to_find,
                &mut found,
                &mut self.rejected,
            );
            state.outside_preferred = true;
        }
        // The rotation as two slices: no modulo per node.
        let (before, after) = candidates.split_at(start.min(n));
        let processed = filtering.rotation(
            state,
            after.iter().chain(before).copied(),
            &preferred,
            to_find,
            &mut found,
            &mut self.rejected,
        );
        // Later Filter runs (preemption's) see any node again.
        state.outside_preferred = false;
        drop(plan);
        if subset.is_none() && n > 0 {
            self.next_start = (start + processed) % n;
        }
    }

    /// kube-scheduler's `prioritizeNodes` then `selectHost`, for two or more feasible
    /// nodes (one is taken as it is).
    fn prioritize_and_select(
        &mut self,
        profile: usize,
        mut state: CycleState,
        pod: &PodInfo,
        feasible: &[NodeIdx],
    ) -> Outcome {
        if let [only] = feasible {
            return Outcome::Placed(*only, state);
        }
        if let Err(error) = self.prioritize_nodes(profile, &mut state, pod, feasible) {
            let mut diag = Diagnosis::default();
            diag.error = Some(error);
            return Outcome::Failed(diag);
        }
        Outcome::Placed(self.select_host(feasible), state)
    }

    /// kube-scheduler's `prioritizeNodes`: PreScore, then each Score plugin's weighted,
    /// normalised scores summed into `self.totals`. A PreScore error (its message) fails
    /// the cycle.
    fn prioritize_nodes(
        &mut self,
        profile: usize,
        state: &mut CycleState,
        pod: &PodInfo,
        feasible: &[NodeIdx],
    ) -> Result<(), String> {
        let prof = &self.profiles[profile];
        let cx = &self.cluster;
        for &i in &prof.pre_score {
            let st = prof.plugins[i].pre_score(cx, state, pod, feasible);
            if st.is_skip() {
                state.skip_score |= 1 << i;
            } else if !st.is_success() {
                // kube-scheduler fails the cycle when PreScore errors.
                return Err(format!(
                    "running PreScore plugin {:?}: {}",
                    prof.plugins[i].name(),
                    st.message()
                ));
            }
        }
        score_totals(
            prof,
            cx,
            state,
            pod,
            feasible,
            &mut self.totals,
            &mut self.scores,
        );
        Ok(())
    }

    /// kube-scheduler's `selectHost`: the highest total; ties broken uniformly at random
    /// (reservoir sampling).
    fn select_host(&mut self, feasible: &[NodeIdx]) -> NodeIdx {
        let mut best = 0;
        let mut ties = 0u64;
        for j in 0..feasible.len() {
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
        feasible[best]
    }

    /// Reserve (every Reserve plugin, then a DRP plan's virtual reservation) and PreBind
    /// for the node chosen, then the binding cycle; any failure unwinds through
    /// `unreserve_and_forget` and is returned.
    pub(super) fn reserve_and_bind(
        &mut self,
        profile: usize,
        mut state: CycleState,
        pod: &Arc<PodInfo>,
        node: NodeIdx,
        now: Time,
        plan: Option<drp::Plan>,
    ) -> Result<(), Status> {
        let state = &mut state;
        let is_pod = !pod.is_reserve_pod();
        if is_pod && !self.cluster.cache.assume(&pod.key, node) {
            return Err(Status::error("pod or node vanished before assume"));
        }
        let prof = &self.profiles[profile];
        let failed = prof.reserve.iter().find_map(|&i| {
            let st = prof.plugins[i].reserve(&mut self.cluster, state, pod, node);
            (!st.is_success()).then_some(st)
        });
        if let Some(st) = failed {
            self.unreserve_and_forget(profile, state, pod, node);
            return Err(st);
        }
        if let Some(plan) = &plan {
            // Dynamic Reservation Provisioning: the virtual reservation, after every
            // Reserve plugin (the pod is allocated from it as from a real one).
            if let Err(e) = self.drp_reserve(state, pod, node, plan, now) {
                self.unreserve_and_forget(profile, state, pod, node);
                return Err(Status::error(e));
            }
        }
        let prof = &self.profiles[profile];
        let mut annotations = BTreeMap::new();
        let failed = self.cluster.cache.node(node).and_then(|info| {
            prof.pre_bind.iter().find_map(|&i| {
                let st =
                    prof.plugins[i].pre_bind(&self.cluster, state, pod, info, &mut annotations);
                (!st.is_success()).then_some(st)
            })
        });
        if let Some(st) = failed {
            self.unreserve_and_forget(profile, state, pod, node);
            return Err(st);
        }
        // Permit: a gang member waits there until its gang has its minimum assumed.
        if plan.is_none() {
            if let Some((gang, policy)) = self.permit_must_wait(pod) {
                // Assumed: its nomination goes (kube-scheduler's assume drops it), or it
                // would be counted on its node twice while it waits.
                self.drop_nomination(now, &pod.key, Some(node));
                self.wait_at_permit(profile, state, pod, node, now, annotations, gang, policy);
                return Ok(());
            }
        }
        self.start_binding(profile, state, pod, node, now, plan.as_ref(), annotations);
        self.allow_waiting(now, pod);
        Ok(())
    }

    /// The scheduling cycle's end once Reserve and PreBind passed: the pod leaves the
    /// queue and its nomination, and its binding cycle starts (the bind asked for, or held
    /// back for its DRP reservation or its volumes); a reservation's stand-in is placed.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn start_binding(
        &mut self,
        profile: usize,
        state: &mut CycleState,
        pod: &Arc<PodInfo>,
        node: NodeIdx,
        now: Time,
        plan: Option<&drp::Plan>,
        annotations: BTreeMap<String, String>,
    ) {
        let is_pod = !pod.is_reserve_pod();
        let node_name = self
            .cluster
            .cache
            .node(node)
            .map(|n| n.name.to_string())
            .unwrap_or_default();
        self.counters.scheduled += 1;
        let attempts = self.queue.attempts(&pod.key);
        self.queue.done(&pod.key);
        self.drop_nomination(now, &pod.key, Some(node));
        self.last_message.remove(&pod.key);
        let waits_for = if is_pod {
            self.drp_virtual_id(state)
        } else {
            None
        };
        if let Some(id) = waits_for {
            // Allocated from a virtual reservation: the bind waits for the Reservation.
            self.requeue(now, ClusterEvent::assigned_pod_added(Some(node)));
            let bind = InFlight {
                profile,
                state: std::mem::take(state),
                pod: pod.clone(),
                node,
                node_name: node_name.into(),
                attempts,
            };
            self.drp_wait(now, id, bind, annotations, plan);
        } else if is_pod {
            // Upstream's AssignedPodAdd: the pod counts for affinity and spreading from now.
            self.requeue(now, ClusterEvent::assigned_pod_added(Some(node)));
            // VolumeBinding's PreBind: claims to bind first, the bind waits for them.
            let bind = InFlight {
                profile,
                state: std::mem::take(state),
                pod: pod.clone(),
                node,
                node_name: node_name.as_str().into(),
                attempts,
            };
            // DynamicResources' PreBind: the claims' allocations are written first.
            self.dra_prebind(&bind);
            let Some((bind, annotations)) = self.volume_prebind(now, bind, annotations) else {
                return;
            };
            *state = bind.state;
            self.effects.push_back(Effect::Bind {
                pod: pod.key.clone(),
                uid: pod.uid.to_string(),
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
            // The binding cycle: the pod keeps its claims until the watch confirms the bind
            // or the bind fails, however many cycles run meanwhile.
            self.in_flight.insert(
                pod.key.clone(),
                InFlight {
                    profile,
                    state: std::mem::take(state),
                    pod: pod.clone(),
                    node,
                    node_name: node_name.into(),
                    attempts,
                },
            );
        } else if let PodKind::ReservePod { reservation } = &pod.kind {
            // PreBindReservation: what plugins wrote for the stand-in goes on the
            // Reservation (NodeNUMAResource's reserved CPUs).
            if !annotations.is_empty() {
                self.effects.push_back(Effect::AnnotateReservation {
                    name: reservation.to_string(),
                    uid: pod.uid.to_string(),
                    annotations,
                });
            }
            self.cluster.reservations.record(
                reservation,
                "Normal",
                "Scheduled",
                format!("Successfully assigned {reservation} to {node_name}"),
                &mut self.effects,
            );
        }
    }

    /// The unwind of a scheduling cycle that failed after Reserve began (kube-scheduler's
    /// `RunReservePluginsUnreserve` then `ForgetPod`): every Reserve plugin's Unreserve, in
    /// reverse order, whichever plugin failed (Unreserve is idempotent, so one whose
    /// Reserve never ran gives back nothing), then the assumed pod leaves its node. Every
    /// failure path of [`Scheduler::reserve_and_bind`] goes through here.
    pub(super) fn unreserve_and_forget(
        &mut self,
        profile: usize,
        state: &mut CycleState,
        pod: &PodInfo,
        node: NodeIdx,
    ) {
        self.run_unreserve(profile, state, pod, node);
        if !pod.is_reserve_pod() {
            self.cluster.cache.forget(&pod.key);
        }
    }

    /// kube-scheduler's `RunReservePluginsUnreserve`: every Reserve plugin's Unreserve, in
    /// reverse order.
    pub(super) fn run_unreserve(
        &mut self,
        profile: usize,
        state: &mut CycleState,
        pod: &PodInfo,
        node: NodeIdx,
    ) {
        let prof = &self.profiles[profile];
        for &j in prof.reserve.iter().rev() {
            prof.plugins[j].unreserve(&mut self.cluster, state, pod, node);
        }
    }

    /// A cycle that placed nothing: carries out what PostFilter decided (victims,
    /// nomination, hold), puts the item back in the queue, and says why on the pod (or the
    /// reservation), once per distinct message.
    pub(super) fn fail(
        &mut self,
        now: Time,
        pod: &PodInfo,
        diag: Diagnosis,
        post_filter: Option<PostFilterResult>,
    ) {
        if let Some(r) = &post_filter {
            self.preempt(now, pod, r);
        }
        let nominate = self.nominate(now, pod, post_filter.as_ref().map(|r| r.nomination));
        self.await_own_hold(pod);
        let (message, unschedulable) = match &diag.error {
            Some(err) => (err.clone(), false),
            None => (diag.render(self.cluster.cache.node_count()), true),
        };
        if unschedulable {
            self.counters.unschedulable += 1;
        }
        self.queue
            .failed(&pod.key, unschedulable, &diag.unschedulable_plugins, now);
        self.diagnosis = diag;
        let reason = if unschedulable {
            "Unschedulable"
        } else {
            "SchedulerError"
        };
        self.say_failed(now, pod, reason, message);
        self.effects.extend(nominate);
    }
}

/// Score: each plugin's normalised scores, weighted, summed per node into `totals`.
/// The first plugin's scores become the totals (no zeroed list to add them to), a weight
/// of 1 adds without multiplying, and a plugin that scores every node the same
/// ([`Plugin::scores_uniformly`]) is left out, since it cannot change the choice.
#[allow(clippy::too_many_arguments)]
pub(super) fn score_totals(
    prof: &Profile,
    cx: &Cluster,
    state: &CycleState,
    pod: &PodInfo,
    feasible: &[NodeIdx],
    totals: &mut Vec<i64>,
    scores: &mut Vec<i64>,
) {
    let m = feasible.len();
    totals.clear();
    let mut first = true;
    for &(i, weight) in &prof.score {
        let p = &prof.plugins[i];
        if state.skip_score & (1 << i) != 0 || p.scores_uniformly(cx, state, pod) {
            continue;
        }
        scores.clear();
        p.score_nodes(cx, state, pod, feasible, scores);
        p.normalize_scores(state, pod, scores);
        // A node a plugin gave no score counts 0 from it, as when adding.
        scores.resize(m, 0);
        if first {
            first = false;
            std::mem::swap(totals, scores);
            if weight != 1 {
                totals.iter_mut().for_each(|t| *t *= weight);
            }
        } else if weight == 1 {
            for (t, s) in totals.iter_mut().zip(scores.iter()) {
                *t += s;
            }
        } else {
            for (t, s) in totals.iter_mut().zip(scores.iter()) {
                *t += s * weight;
            }
        }
    }
    if first {
        totals.resize(m, 0);
    }
}

/// Nodes a PreFilter result left out count as rejected by the plugins that narrowed it
/// (`subset` of `num_all` nodes remained), and a change to those nodes can help only
/// through those plugins' events.
fn absent_from_subset(state: &CycleState, subset: usize, num_all: usize, diag: &mut Diagnosis) {
    let reason = format!(
        "node(s) didn't satisfy plugin(s) [{}]",
        state.subset_plugins.join(" ")
    );
    diag.add_absent(reason, num_all.saturating_sub(subset) as u32);
    if subset < num_all {
        for p in &state.subset_plugins {
            if !diag.unschedulable_plugins.contains(p) {
                diag.unschedulable_plugins.push(p);
            }
        }
    }
}
