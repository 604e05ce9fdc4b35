//! The [`Simulation`]'s event loop: settle at one instant (schedule, perform, fire timers,
//! run the controllers) and move virtual time forward.

use super::*;

impl Simulation {
    /// Runs the PV controller and the provisioners until they have nothing more to write
    /// (see [`crate::volume_controllers`]), then lets the kubelet start pods whose claims
    /// are bound now.
    pub(super) fn sync_volumes(&mut self) {
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
    pub(super) fn sync_claims(&mut self) {
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

    /// One pass of the workload controllers; performs what they ask for, as the API
    /// server would. Returns whether anything was asked.
    pub(super) fn run_controllers(&mut self) -> bool {
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
    pub(super) fn run_migrations(&mut self) -> bool {
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
    pub(super) fn plan_reserved_cpu_moves(&mut self) -> bool {
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
    pub(super) fn fire_due(&mut self) -> bool {
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
}
