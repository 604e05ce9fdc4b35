//! Event intake: what the scheduler does with each observed change (`handle`), each
//! timer (`handle_timeout`) and each failed bind, before any cycle runs. The cache, the
//! reservation store, the NUMA and cpuset state and the queue all hear of an input here.

use super::*;

impl Scheduler {
    /// Runs everything due at `now`. Does nothing before the initial sync (a reservation
    /// must not expire, nor a node's NUMA data be flushed, on a half-listed cluster).
    pub fn handle_timeout(&mut self, now: Time) {
        if !self.synced() {
            return;
        }
        let due = |t: Option<Time>| t.is_some_and(|t| t <= now);
        if due(self.cluster.reservations.next_timer())
            || due(self.cluster.numa.next_resync())
            || due(self.drp_next_timeout())
            || due(self.volume_next_timeout())
            || due(self.permit_next_timeout())
        {
            self.epoch += 1;
        }
        self.queue.flush(now);
        self.drp_timeouts(now);
        self.volume_timeouts(now);
        self.permit_timeouts(now);
        self.cluster
            .reservations
            .on_timeout(&mut self.cluster.cache, now, &mut self.effects);
        self.count_expired_holds();
        self.sync_reservations(now);
        // NUMA reserve cache resync: flushed nodes may fit pods now.
        let cx = &mut self.cluster;
        for node in cx.numa.resync(&cx.cache, now) {
            if let Some(idx) = self.cluster.cache.node_idx(&node) {
                self.requeue(now, ClusterEvent::topology(idx));
            }
        }
    }

    /// Applies an observed change.
    pub fn handle(&mut self, now: Time, event: Event) {
        let epoch = self.epoch;
        self.epoch += 1;
        self.quiet = false;
        match event {
            Event::Applied(obj) => {
                if let Some(seen) = self.relisting.get_mut(&obj.kind()) {
                    seen.insert(obj.key());
                }
                self.apply(now, obj);
            }
            Event::Deleted(key) => self.delete(now, key),
            Event::ListStarted(kind) => {
                self.relisting.insert(kind, BTreeSet::new());
            }
            Event::Listed(kind) => self.listed(now, kind),
            Event::BindFailed {
                pod,
                uid,
                node,
                class,
                message,
            } => self.bind_failed(now, pod, &uid, &node, class, message),
        }
        if self.quiet {
            self.epoch = epoch;
        }
        self.check_volume_waits(now);
        self.sync_reservations(now);
    }

    /// An object was created or replaced.
    pub(super) fn apply(&mut self, now: Time, obj: Object) {
        match obj {
            Object::Node(node) => self.apply_node(now, node),
            Object::Pod(pod) => {
                let meta = &pod.metadata;
                let key = ObjectKey::pod(
                    meta.namespace.as_deref().unwrap_or("default"),
                    meta.name.as_deref().unwrap_or(""),
                );
                self.apply_pod(now, pod);
                self.cluster.pod_settled(&key, now);
                self.settle_hold(now, &key);
            }
            obj @ (Object::PersistentVolumeClaim(_)
            | Object::PersistentVolume(_)
            | Object::StorageClass(_)
            | Object::CsiNode(_)
            | Object::CsiDriver(_)
            | Object::CsiStorageCapacity(_)) => self.apply_storage(now, obj),
            obj @ (Object::ResourceSlice(_)
            | Object::DeviceClass(_)
            | Object::ResourceClaim(_)
            | Object::ResourceClaimTemplate(_)) => self.apply_dra(now, obj),
            Object::PriorityClass(pc) => {
                let name = pc.metadata.name.clone().unwrap_or_default();
                self.cluster.cache.priority_classes.insert(name, pc);
            }
            Object::PodDisruptionBudget(pdb) => {
                let key = Object::PodDisruptionBudget(pdb.clone()).key();
                self.cluster.cache.pdbs.insert(key, pdb);
            }
            Object::Namespace(ns) => {
                let name: Arc<str> = ns.metadata.name.as_deref().unwrap_or("").into();
                self.cluster.cache.namespaces.insert(name, ns);
            }
            Object::NodeResourceTopology(nrt) => self.apply_nrt(now, &nrt),
            Object::PodGroup(pg) => {
                let key = Object::PodGroup(pg.clone()).key();
                let ns = key.namespace.clone();
                self.gangs.apply_pod_group(key, pg);
                self.gang_object_changed(now, &ns);
            }
            Object::Workload(w) => {
                let key = Object::Workload(w.clone()).key();
                let ns = key.namespace.clone();
                self.gangs.apply_workload(key, w);
                self.gang_object_changed(now, &ns);
            }
            // Workloads: kube-controller-manager's business, not the scheduler's.
            Object::Deployment(_)
            | Object::ReplicaSet(_)
            | Object::StatefulSet(_)
            | Object::PodMigrationJob(_) => {}
            Object::Reservation(r) => {
                let status = r
                    .metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(berth_api::annotations::ANNOTATION_RESOURCE_STATUS));
                let uid = r.metadata.uid.as_deref().unwrap_or("");
                let name = r.metadata.name.clone().unwrap_or_default();
                let read = self
                    .cluster
                    .cpusets
                    .reservation_applied(uid, status.map(String::as_str));
                let was = self.cluster.reservations.by_name(&name).map(|old| {
                    let before =
                        old.obj.metadata.annotations.as_ref().and_then(|a| {
                            a.get(berth_api::annotations::ANNOTATION_RESOURCE_STATUS)
                        });
                    before == status
                });
                if let (Err(why), false) = (read, was.unwrap_or(false)) {
                    let key = ObjectKey::cluster(crate::object::Kind::Reservation, &name);
                    let uid = uid.to_string();
                    self.invalid_resource_status(key, &uid, &why);
                }
                self.reservation_devices_seen(&r);
                if !self.drp_on_reservation(now, &r) {
                    self.cluster
                        .reservations
                        .apply(&mut self.cluster.cache, r, now);
                }
                self.check_hold_owner(now, &name);
                self.gang_reservation_applied(now, &name);
            }
        }
    }

    /// An NRT was observed. One the capacity rule refuses (a duplicate zone or resource,
    /// a negative amount, available above allocatable above capacity...) is treated as
    /// absent: NUMA filtering and exclusive CPUs fall back as for a node without an NRT, a
    /// Warning event names the field and the rule, and `explain` says why.
    pub(super) fn apply_nrt(&mut self, now: Time, nrt: &berth_api::nrt::NodeResourceTopology) {
        let node = nrt.node_name().to_string();
        let key = ObjectKey::cluster(Kind::NodeResourceTopology, &node);
        let uid = nrt.metadata.uid.as_deref().unwrap_or("").to_string();
        if let Err(refusal) = berth_api::validate::nrt(nrt) {
            let message = format!(
                "{refusal}; NodeResourceTopology {node} is ignored: node {node} is scheduled as if it published none"
            );
            let had = self.cluster.numa.node_has_topology(&node)
                || self.cluster.cpusets.node(&node).is_some();
            self.cluster.numa.delete_nrt(&node);
            self.cluster.numa.refuse_nrt(&node, message.clone());
            self.cluster.cpusets.delete_nrt(&node);
            self.reread_node_reservation(now, &node);
            self.refresh_cpus(&node);
            self.refuse(key, &uid, REASON_INVALID_NRT, refusal.rule, message);
            if let (true, Some(idx)) = (had, self.cluster.cache.node_idx(&node)) {
                self.requeue(now, ClusterEvent::topology(idx));
            }
            return;
        }
        self.cluster.cache.refusals.accept(&key, REASON_INVALID_NRT);
        self.cluster.numa.accept_nrt(&node);
        let cpus_changed = self.apply_cpu_topology(now, nrt);
        match self.cluster.numa.apply_nrt(nrt, now) {
            Ok(changed) => {
                if let (true, Some(idx)) =
                    (changed || cpus_changed, self.cluster.cache.node_idx(&node))
                {
                    self.requeue(now, ClusterEvent::topology(idx));
                }
            }
            Err(e) => self.refuse(
                key,
                &uid,
                REASON_INVALID_NRT,
                Rule::Malformed,
                e.to_string(),
            ),
        }
    }

    /// Reads the koordlet CPU annotations of an NRT (a refused one is a Warning on the
    /// node, which then has no CPU topology) and recomputes the node's excluded CPUs.
    /// Returns whether exclusive-CPU pods may see the node differently.
    pub(super) fn apply_cpu_topology(
        &mut self,
        now: Time,
        nrt: &berth_api::nrt::NodeResourceTopology,
    ) -> bool {
        let name = nrt.node_name().to_string();
        let before = self.cluster.cpusets.node(&name).is_some();
        let key = ObjectKey::cluster(Kind::Node, &name);
        match self.cluster.cpusets.apply_nrt(nrt) {
            Ok(()) => self
                .cluster
                .cache
                .refusals
                .accept(&key, REASON_INVALID_CPU_TOPOLOGY),
            Err((rule, message)) => {
                let uid = self
                    .cluster
                    .cache
                    .node_by_name(&name)
                    .and_then(|n| n.node.metadata.uid.clone())
                    .unwrap_or_default();
                self.refuse(key, &uid, REASON_INVALID_CPU_TOPOLOGY, rule, message);
            }
        }
        self.reread_node_reservation(now, &name);
        self.refresh_cpus(&name);
        before || self.cluster.cpusets.node(&name).is_some()
    }

    /// The CPU topology `node` publishes changed: a node reservation naming CPUs by id
    /// (`reservedCPUs`) is checked against it again ([`Cluster::check_reserved_cpus`]).
    pub(super) fn reread_node_reservation(&mut self, now: Time, node: &str) {
        use berth_api::annotations::{AnnotationCodec, NodeReservation};
        let Some(obj) = self
            .cluster
            .cache
            .node_by_name(node)
            .map(|n| n.node.clone())
        else {
            return;
        };
        let names_cpus = NodeReservation::from_annotations(obj.metadata.annotations.as_ref())
            .ok()
            .flatten()
            .is_some_and(|r| !r.reserved_cpus.is_empty());
        if names_cpus {
            self.apply_node(now, obj);
        }
    }

    /// Reports `key` refused by the capacity rule for `reason`: a Warning event the first
    /// time (and when the message changes), never on every update of the same object.
    pub(super) fn refuse(
        &mut self,
        key: ObjectKey,
        uid: &str,
        reason: &'static str,
        rule: Rule,
        message: String,
    ) {
        if self
            .cluster
            .cache
            .refusals
            .refuse(&key, reason, rule, &message)
        {
            self.record(key, uid, "Warning", reason, message);
        }
    }

    /// Refusals reported since the last call, by kind and rule (for
    /// `berth_unreadable_objects_total{kind,reason}`).
    pub fn take_refusals(&mut self) -> Vec<(Kind, Rule)> {
        self.cluster.cache.refusals.take_new()
    }

    /// Recomputes what `node` keeps from exclusive-CPU pods and reports each pod that holds
    /// CPUs the node now reserves (seed 004's eviction list: a Warning on the pod).
    pub(super) fn refresh_cpus(&mut self, node: &str) {
        let cx = &mut self.cluster;
        let evictions = cx.cpusets.refresh(&cx.cache, node);
        self.record_evictions(evictions);
    }

    /// Reports each pod that holds CPUs its node now reserves (a Warning on the pod).
    fn record_evictions(&mut self, evictions: Vec<crate::cpuset::Eviction>) {
        for e in evictions {
            let message = e.message();
            self.record(e.pod, &e.uid, "Warning", EVICT_RESERVED_CPUS, message);
        }
    }

    pub(super) fn apply_node(
        &mut self,
        now: Time,
        node: Arc<berth_api::k8s_openapi::api::core::v1::Node>,
    ) {
        let name = node.metadata.name.clone().unwrap_or_default();
        let before = self
            .cluster
            .cache
            .node_by_name(&name)
            .map(hints::NodeBefore::of);
        let uid = node.metadata.uid.clone().unwrap_or_default();
        match self.cluster.node_applied(node) {
            Ok(applied) => {
                let idx = applied.idx;
                let key = ObjectKey::cluster(Kind::Node, &name);
                self.cluster
                    .cache
                    .refusals
                    .accept(&key, REASON_INVALID_NODE);
                let bad = self
                    .cluster
                    .cache
                    .node(idx)
                    .and_then(|n| n.annotation_error.clone());
                match bad {
                    Some((rule, message)) => {
                        let uid = self
                            .cluster
                            .cache
                            .node(idx)
                            .and_then(|n| n.node.metadata.uid.clone())
                            .unwrap_or_default();
                        self.refuse(key, &uid, REASON_INVALID_NODE_RESERVATION, rule, message);
                    }
                    None => self
                        .cluster
                        .cache
                        .refusals
                        .accept(&key, REASON_INVALID_NODE_RESERVATION),
                }
                self.record_evictions(applied.evictions);
                let event = match (&before, self.cluster.cache.node(idx)) {
                    (Some(b), Some(n)) => ClusterEvent::node_updated(idx, hints::node_change(b, n)),
                    _ => ClusterEvent::node_added(idx),
                };
                self.requeue(now, event);
                // The node reserves other CPUs (its annotation changed, allocatable maybe
                // not): pods NodeNUMAResource rejected may fit now.
                if applied.cpus_changed {
                    self.requeue(now, ClusterEvent::topology(idx));
                }
            }
            Err(e) => {
                let rule = e.rule();
                let key = ObjectKey::cluster(Kind::Node, &name);
                self.refuse(key, &uid, REASON_INVALID_NODE, rule, e.to_string());
            }
        }
    }

    /// An object was deleted (observed, or missing from a re-LIST).
    pub(super) fn delete(&mut self, now: Time, key: ObjectKey) {
        self.cluster.cache.refusals.forget(&key);
        if key.kind == Kind::NodeResourceTopology {
            self.cluster.numa.accept_nrt(&key.name);
        }
        if let Some(seen) = self.relisting.get_mut(&key.kind) {
            seen.remove(&key);
        }
        match key.kind {
            Kind::Node => {
                self.drp_node_deleted(now, &key.name);
                self.cluster.node_deleted(&key.name, now);
                self.requeue(now, ClusterEvent::node_deleted());
            }
            Kind::Pod => {
                // A pod deleted while its bind is in flight gives back what it claimed now;
                // the bind's failure, when it comes, is stale.
                if let Some(b) = self.in_flight.remove(&key) {
                    self.unassume(now, b);
                }
                self.permit_pod_deleted(now, &key);
                self.gangs.pod_deleted(&key);
                self.drp_pod_deleted(now, &key);
                self.volume_pod_deleted(now, &key);
                self.queue.delete(&key);
                self.drop_nomination(now, &key, None);
                self.last_message.remove(&key);
                if let Some(uid) = self.cluster.cache.pod(&key).map(|e| e.info.uid.clone()) {
                    self.expire_hold(now, &key, &uid, "the preemptor was deleted", true);
                }
                let profiles = &self.profiles;
                let foreign = |p: &PodInfo| is_foreign(profiles, p);
                if let Some(e) = self.cluster.pod_deleted(&key, foreign, now) {
                    if e.state != PodState::Pending && !e.info.terminal {
                        self.requeue(now, ClusterEvent::assigned_pod_deleted(e.node));
                    }
                }
            }
            Kind::PersistentVolumeClaim
            | Kind::PersistentVolume
            | Kind::StorageClass
            | Kind::CsiNode
            | Kind::CsiDriver
            | Kind::CsiStorageCapacity => self.delete_storage(now, &key),
            Kind::ResourceSlice
            | Kind::DeviceClass
            | Kind::ResourceClaim
            | Kind::ResourceClaimTemplate => self.delete_dra(now, &key),
            Kind::PriorityClass => {
                self.cluster.cache.priority_classes.remove(&*key.name);
            }
            Kind::PodDisruptionBudget => {
                self.cluster.cache.pdbs.remove(&key);
            }
            Kind::Namespace => {
                self.cluster.cache.namespaces.remove(&*key.name);
            }
            Kind::PodGroup | Kind::Workload => {
                self.gangs.delete(&key);
                self.gang_object_changed(now, &key.namespace);
            }
            Kind::Deployment | Kind::ReplicaSet | Kind::StatefulSet | Kind::PodMigrationJob => {}
            Kind::Reservation => {
                self.gang_reservation_deleted(now, &key.name);
                self.cluster.reservation_deleted(&key.name);
            }
            Kind::NodeResourceTopology => {
                self.cluster.nrt_deleted(&key.name);
                if let Some(idx) = self.cluster.cache.node_idx(&key.name) {
                    self.requeue(now, ClusterEvent::topology(idx));
                }
            }
        }
    }

    /// The (re-)LIST of `kind` is complete. After a re-list (a watch that broke and was
    /// started again), objects the core knows that the LIST did not return were deleted
    /// while nobody watched: they go through the ordinary delete path, so that the queue,
    /// reservations and the NUMA cache follow.
    pub(super) fn listed(&mut self, now: Time, kind: Kind) {
        if let Some(seen) = self.relisting.remove(&kind) {
            for key in self.known(kind) {
                if !seen.contains(&key) {
                    self.delete(now, key);
                }
            }
        }
        self.unsynced.remove(&kind);
        // A preemptor placed or deleted while the core could not judge its hold (before the
        // first sync, or during a re-list) settles its hold now, as a core rebuilt from the
        // same objects would. Whichever kind's LIST ends last completes the sync.
        if self.synced() {
            let holds: Vec<String> = self
                .cluster
                .reservations
                .iter()
                .filter(|r| crate::reservation::hold::preemptor_of(r).is_some())
                .map(|r| r.name.to_string())
                .collect();
            for name in holds {
                self.check_hold_owner(now, &name);
            }
        }
    }

    /// The keys of every object of `kind` the core holds, sorted.
    pub(super) fn known(&self, kind: Kind) -> Vec<ObjectKey> {
        let cx = &self.cluster;
        let cluster = |name: &str| ObjectKey::cluster(kind, name);
        let mut keys: Vec<ObjectKey> = match kind {
            Kind::Pod => cx.cache.pods().map(|e| e.info.key.clone()).collect(),
            Kind::Node => cx.cache.nodes().map(|n| cluster(&n.name)).collect(),
            Kind::Reservation => cx
                .reservations
                .iter()
                .filter(|r| !r.is_virtual())
                .map(|r| r.object_key())
                .collect(),
            Kind::NodeResourceTopology => cx.numa.nrt_nodes().map(cluster).collect(),
            Kind::PersistentVolumeClaim => cx.cache.pvcs.keys().cloned().collect(),
            Kind::PodDisruptionBudget => cx.cache.pdbs.keys().cloned().collect(),
            Kind::CsiNode => cx.cache.csi_nodes.keys().map(|n| cluster(n)).collect(),
            Kind::PriorityClass => cx
                .cache
                .priority_classes
                .keys()
                .map(|n| cluster(n))
                .collect(),
            Kind::Namespace => cx.cache.namespaces.keys().map(|n| cluster(n)).collect(),
            Kind::PersistentVolume => cx.cache.pvs.keys().map(|n| cluster(n)).collect(),
            Kind::StorageClass => cx
                .cache
                .storage_classes
                .keys()
                .map(|n| cluster(n))
                .collect(),
            Kind::CsiDriver => cx.cache.csi_drivers.keys().map(|n| cluster(n)).collect(),
            Kind::CsiStorageCapacity => cx.cache.csi_capacities.keys().cloned().collect(),
            Kind::ResourceSlice
            | Kind::DeviceClass
            | Kind::ResourceClaim
            | Kind::ResourceClaimTemplate => super::dra::keys(&cx.cache.dra, kind),
            Kind::PodGroup | Kind::Workload => self.gangs.keys(kind),
            Kind::Deployment | Kind::ReplicaSet | Kind::StatefulSet | Kind::PodMigrationJob => {
                Vec::new()
            }
        };
        keys.sort();
        keys
    }

    /// A bind the core asked for failed (kube-scheduler's `handleBindingCycleError`): every
    /// Reserve plugin's Unreserve runs with the cycle state of the decision, the assumed pod
    /// leaves its node (pods waiting for that room are retried), and that pod alone goes to
    /// back-off with a `SchedulerError` condition; a pod that is gone (`NotFound`) waits for
    /// its deletion instead. A failure for a bind that is no longer in flight (confirmed by
    /// the watch, or meant for an older incarnation of the pod or another node) is stale and
    /// ignored.
    pub(super) fn bind_failed(
        &mut self,
        now: Time,
        pod: ObjectKey,
        uid: &str,
        node: &str,
        class: BindFailure,
        message: String,
    ) {
        if self.volume_bind_failed(now, &pod, uid, node, &message) {
            return;
        }
        let current = self
            .in_flight
            .get(&pod)
            .is_some_and(|b| &*b.pod.uid == uid && &*b.node_name == node);
        if !current {
            return;
        }
        let Some(b) = self.in_flight.remove(&pod) else {
            return;
        };
        let attempts = b.attempts;
        self.unassume(now, b);
        self.gang_member_unreserved(now, &pod);
        if class == BindFailure::NotFound {
            return;
        }
        // A 409 (the pod already bound, or another incarnation) is answered again until the
        // watch catches up, so retrying at once cannot help: that pod waits out its back-off
        // in full. Popped early with nothing else to do, it was bound and refused again at
        // the same instant forever, the watch event that would end it never delivered (the
        // core_events fuzz timeouts). A transient failure stays eligible for an early pop.
        let wait_out = class == BindFailure::Conflict;
        if !self.back_off_after_binding_error(now, &pod, uid, attempts, wait_out, &message) {
            return;
        }
        self.record(
            pod,
            uid,
            "Warning",
            "FailedScheduling",
            format!("Binding rejected: {message}"),
        );
    }

    /// A binding cycle failed for a pod berth still schedules (`handleBindingCycleError`):
    /// it backs off and carries a `SchedulerError` condition with `message`. Returns false,
    /// doing nothing, when the pod is gone, bound, terminating, terminal, another
    /// incarnation or another scheduler's.
    pub(super) fn back_off_after_binding_error(
        &mut self,
        now: Time,
        pod: &ObjectKey,
        uid: &str,
        attempts: u32,
        wait_out: bool,
        message: &str,
    ) -> bool {
        let Some(info) = self
            .cluster
            .cache
            .pod(pod)
            .filter(|e| e.state == PodState::Pending && &*e.info.uid == uid)
            .map(|e| e.info.clone())
        else {
            return false;
        };
        if info.terminating || info.terminal || self.is_foreign(&info) {
            return false;
        }
        self.counters.errors += 1;
        self.queue.add_backoff(
            pod.clone(),
            info.priority,
            info.created,
            attempts,
            now,
            wait_out,
        );
        self.last_message.insert(pod.clone(), message.to_string());
        self.effects.push_back(Effect::PodCondition {
            pod: pod.clone(),
            status: "False",
            reason: "SchedulerError".into(),
            message: message.to_string(),
        });
        true
    }

    /// Undoes the assumption of a bind that will not be confirmed: every Reserve plugin's
    /// Unreserve in reverse order, with the cycle state of the decision, then the pod leaves
    /// its node in the cache and pods waiting for that room are retried.
    pub(super) fn unassume(&mut self, now: Time, mut b: InFlight) {
        // A node deleted meanwhile took the holds on it along; one re-created under the same
        // name has a new slot, and the old slot may hold another node by now.
        let node = self.cluster.cache.node_idx(&b.node_name).unwrap_or(b.node);
        b.state.now = now;
        self.run_unreserve(b.profile, &mut b.state, &b.pod, node);
        let assumed = self
            .cluster
            .cache
            .pod(&b.pod.key)
            .filter(|e| e.state == PodState::Assumed && e.info.uid == b.pod.uid)
            .map(|e| e.node);
        if let Some(on) = assumed {
            self.cluster.cache.forget(&b.pod.key);
            self.requeue(now, ClusterEvent::assigned_pod_deleted(on));
        }
        self.cluster
            .reservations
            .forget_owner(&mut self.cluster.cache, &b.pod.key);
    }

    /// Settles the bind in flight for the pod `info` is a new version of, if there is one:
    /// the watch showing it on the node it was assumed on confirms it (whether the bind's
    /// answer came first or not: a later failure for it is stale); showing it elsewhere,
    /// finished, or as another incarnation voids the assumption. An update that leaves it
    /// unbound keeps the bind in flight.
    pub(super) fn settle_bind(&mut self, now: Time, info: &PodInfo) {
        let Some(b) = self.in_flight.get(&info.key) else {
            return;
        };
        let same = b.pod.uid == info.uid && !info.terminal;
        match info.node_name.as_deref() {
            Some(n) if same && n == &*b.node_name => {
                self.in_flight.remove(&info.key);
            }
            None if same => {}
            _ => {
                if let Some(b) = self.in_flight.remove(&info.key) {
                    self.unassume(now, b);
                }
            }
        }
    }

    pub(super) fn apply_pod(
        &mut self,
        now: Time,
        pod: Arc<berth_api::k8s_openapi::api::core::v1::Pod>,
    ) {
        let info = match PodInfo::new(pod.clone(), &mut self.cluster.cache.names) {
            Ok(i) => Arc::new(i),
            Err(e) => return self.reject_invalid_pod(&pod, e.rule(), e.to_string()),
        };
        let key = info.key.clone();
        self.cluster.cache.refusals.accept(&key, REASON_INVALID_POD);
        if info.node_name.is_none() && !info.terminal && !self.is_foreign(&info) {
            // A reservation template the scheduler cannot use makes the pod unschedulable
            // as written, like an unreadable request; everything else goes on.
            if let Err(message) = crate::drp::template::Template::of_pod(&info) {
                if self
                    .cluster
                    .cache
                    .pod(&key)
                    .is_some_and(|e| e.state == PodState::Pending)
                {
                    self.cluster.cache.remove_pod(&key);
                }
                let rule = crate::refusal::rule_of(&message);
                return self.reject_invalid_pod(&pod, rule, message);
            }
        }
        self.drp_claim(&info);
        self.drp_settle(now, &info);
        self.volume_settle(now, &info);
        self.settle_bind(now, &info);
        self.gang_pod_applied(now, &info);
        let assigned = info.node_name.is_some();
        let foreign = self.is_foreign(&info);
        let (prev, cpus) = self.cluster.pod_applied(info.clone(), foreign, now);
        if let Err(why) = cpus {
            // Reported once per text, not on every update of the pod.
            let status = |p: &PodInfo| {
                p.annotation(berth_api::annotations::ANNOTATION_RESOURCE_STATUS)
                    .map(str::to_string)
            };
            if prev.as_ref().map(|p| status(&p.info)) != Some(status(&info)) {
                self.invalid_resource_status(key.clone(), &info.uid.clone(), &why);
            }
        }
        if assigned || info.terminal {
            return self.assigned_pod_changed(now, &key, &info, prev.as_ref());
        }
        if self
            .cluster
            .cache
            .pod(&key)
            .is_some_and(|e| e.state == PodState::Assumed)
        {
            return;
        }
        // A bound incarnation replaced by a pending one without a deletion in between (a
        // re-LIST after a broken watch) left its node.
        if let Some(p) = prev
            .as_ref()
            .filter(|p| p.state != PodState::Pending && !p.info.terminal)
        {
            self.requeue(now, ClusterEvent::assigned_pod_deleted(p.node));
        }
        if info.terminating || foreign {
            // Being deleted, or another scheduler's: nothing to schedule (a foreign pod still
            // counts on its node once that scheduler binds it).
            self.queue.delete(&key);
            self.drop_nomination(now, &key, None);
            return;
        }
        let prev_info = prev
            .as_ref()
            .filter(|p| p.info.uid == info.uid && p.state == PodState::Pending)
            .map(|p| &*p.info);
        let nominated = self.nominator.node_of(&key).cloned();
        self.nominator.update(prev_info, &info);
        if nominated.is_some() && self.nominator.node_of(&key) != nominated.as_ref() {
            self.wake_nominated_room(now, nominated.as_deref());
        }
        // kube-scheduler's `isPodUpdated`: an update that changes nothing the scheduler reads
        // (the echo of its own condition patch, a status or resourceVersion change) leaves a
        // queued pod where it is, in the unschedulable pool included.
        let updated = prev_info.is_none_or(|p| pod_updated(&p.pod, &info.pod));
        if updated || !self.queue.contains(&key) {
            let created = self.queue_created(&info);
            self.queue.add(key, info.priority, created, now);
        } else if self.nominator.node_of(&key) == nominated.as_ref() {
            self.quiet = true;
        }
    }

    /// A pod bound (by berth or anyone) or finished: it leaves the queue and its
    /// nomination, and what its landing on or leaving a node changes is requeued.
    fn assigned_pod_changed(
        &mut self,
        now: Time,
        key: &ObjectKey,
        info: &PodInfo,
        prev: Option<&crate::cache::PodEntry>,
    ) {
        self.queue.delete(key);
        let landed = (!info.terminal)
            .then(|| self.cluster.cache.pod(key).and_then(|e| e.node))
            .flatten();
        self.drop_nomination(now, key, landed);
        self.last_message.remove(key);
        // A pod landing (bound by someone else) or leaving its node changes what fits.
        let held = prev.filter(|p| p.state != PodState::Pending && !p.info.terminal);
        let holds = (!info.terminal)
            .then(|| self.cluster.cache.pod(key).map(|e| e.node))
            .flatten();
        match (held, holds) {
            (Some(p), Some(node)) if p.node == node => {
                // A bind confirmed: with `discardReservedNodes` the node's NUMA data is
                // usable again.
                let discard = self.cluster.numa.cache().config().mode
                    == crate::numa::CacheMode::DiscardReserved;
                if let (true, PodState::Assumed, Some(idx)) = (discard, p.state, node) {
                    self.requeue(now, ClusterEvent::topology(idx));
                }
                // An in-place resize that shrank what the pod holds frees room, as a
                // pod leaving would (kube-scheduler's `UpdatePodScaleDown`).
                if !p.info.requests.le(&info.requests) {
                    self.requeue(now, ClusterEvent::assigned_pod_deleted(node));
                }
            }
            (held, holds) => {
                if let Some(p) = held {
                    self.requeue(now, ClusterEvent::assigned_pod_deleted(p.node));
                }
                if let Some(node) = holds {
                    self.requeue(now, ClusterEvent::assigned_pod_added(node));
                }
            }
        }
    }

    /// A pod the core cannot read (an unparsable quantity that slipped past the API server,
    /// more extended resources than the core tracks) is never queued; it gets a
    /// PodScheduled=False condition and a warning naming the problem, and everything else
    /// keeps being scheduled.
    pub(super) fn reject_invalid_pod(
        &mut self,
        pod: &berth_api::k8s_openapi::api::core::v1::Pod,
        rule: Rule,
        message: String,
    ) {
        let meta = &pod.metadata;
        let key = ObjectKey::pod(
            meta.namespace.as_deref().unwrap_or("default"),
            meta.name.as_deref().unwrap_or(""),
        );
        self.queue.delete(&key);
        // Counted once per object and message (`berth_unreadable_objects_total`).
        let news = self
            .cluster
            .cache
            .refusals
            .refuse(&key, REASON_INVALID_POD, rule, &message);
        if pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.as_ref())
            .is_some()
        {
            // Already bound: nothing to schedule, and its usage cannot be counted.
            if news {
                let uid = meta.uid.as_deref().unwrap_or("");
                self.record(key, uid, "Warning", REASON_INVALID_POD, message);
            }
            return;
        }
        let message = format!("pod cannot be scheduled: {message}");
        if self.last_message.get(&key) == Some(&message) {
            return;
        }
        self.last_message.insert(key.clone(), message.clone());
        self.effects.push_back(Effect::PodCondition {
            pod: key.clone(),
            status: "False",
            reason: "Unschedulable".into(),
            message: message.clone(),
        });
        self.record(
            key,
            meta.uid.as_deref().unwrap_or(""),
            "Warning",
            "FailedScheduling",
            message,
        );
    }

    /// Applies what reservation changes ask of the queue and emits their effects (status
    /// writes, events, deletions), after every input.
    pub(super) fn sync_reservations(&mut self, now: Time) {
        // Before the initial sync the view is partial (a reservation listed before its
        // owners would be written back without them): statuses, events and queue work wait,
        // and the first input after the last LIST drains them.
        if !self.synced() {
            return;
        }
        let before = self.effects.len();
        let ops = self
            .cluster
            .reservations
            .drain(&mut self.cluster.cache, now, &mut self.effects);
        if !ops.is_empty() || self.effects.len() != before {
            self.epoch += 1;
        }
        for op in ops {
            match op {
                crate::reservation::QueueOp::Add {
                    key,
                    priority,
                    created,
                } => {
                    // A reservation whose template names another scheduler is that
                    // scheduler's to place (Koordinator's `isResponsibleForReservation`).
                    let foreign = self
                        .cluster
                        .reservations
                        .item(&key.name)
                        .is_some_and(|i| self.is_foreign(&i));
                    // One carrying the requirement id of a pending pod is that pod's (DRP,
                    // after a restart): it is adopted in the pod's cycle.
                    if !foreign && !self.drp_held_back(&key.name) {
                        self.queue.add(key, priority, created, now)
                    }
                }
                crate::reservation::QueueOp::Delete(key) => self.queue.delete(&key),
                crate::reservation::QueueOp::MoveAll => {
                    self.requeue(now, ClusterEvent::reservation())
                }
            }
        }
    }

    /// A `resource-status` berth cannot read: the CPUs it meant to name are not known, so
    /// they are not counted as held; said once, as a Warning on the object.
    pub(super) fn invalid_resource_status(&mut self, involved: ObjectKey, uid: &str, why: &str) {
        self.record(
            involved,
            uid,
            "Warning",
            "InvalidAnnotation",
            format!(
                "annotation {}: {why}; the CPUs it names are not counted as held",
                berth_api::annotations::ANNOTATION_RESOURCE_STATUS
            ),
        );
    }
}

/// kube-scheduler's `isPodUpdated`: whether a new version of a pod may have made it
/// schedulable, i.e. differs in anything but `resourceVersion`, `generation`,
/// `managedFields`, `finalizers` and the status (`resourceClaimStatuses` aside).
pub(super) fn pod_updated(
    old: &berth_api::k8s_openapi::api::core::v1::Pod,
    new: &berth_api::k8s_openapi::api::core::v1::Pod,
) -> bool {
    use berth_api::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    let strip = |m: &ObjectMeta| ObjectMeta {
        resource_version: None,
        generation: None,
        managed_fields: None,
        finalizers: None,
        ..m.clone()
    };
    let claims = |p: &berth_api::k8s_openapi::api::core::v1::Pod| {
        p.status
            .as_ref()
            .and_then(|s| s.resource_claim_statuses.clone())
    };
    old.spec != new.spec
        || claims(old) != claims(new)
        || strip(&old.metadata) != strip(&new.metadata)
}
