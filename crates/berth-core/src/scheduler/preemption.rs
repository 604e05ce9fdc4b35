//! Preemption's bookkeeping: PostFilter after a fit error, the victims' deletion, the
//! nominator, and the reservations that hold freed room for a preemptor (holds).

use super::*;

impl Scheduler {
    /// Runs the profile's PostFilter plugins after a failed search (kube-scheduler's
    /// `RunPostFilterPlugins`): the first that nominates a node wins; otherwise their
    /// messages are joined and the last decision about the nomination stands.
    pub(super) fn run_post_filter(
        &mut self,
        profile: usize,
        state: &CycleState,
        pod: &PodInfo,
        diag: &mut Diagnosis,
    ) -> Option<PostFilterResult> {
        let prof = &self.profiles[profile];
        if prof.post_filter.is_empty() {
            return None;
        }
        if !pod.is_reserve_pod() {
            self.counters.preemption_attempts += 1;
        }
        let mut cx = PostFilterContext {
            cluster: &self.cluster,
            profile: prof,
            state,
            diagnosis: diag,
            resolvable: &self.resolvable,
            nominator: &self.nominator,
            rng: &mut self.rng,
        };
        let mut result: Option<PostFilterResult> = None;
        let mut messages = Vec::new();
        let mut deallocate = Vec::new();
        for &i in &prof.post_filter {
            let Some(mut r) = prof.plugins[i].post_filter(&mut cx, pod) else {
                continue;
            };
            deallocate.extend(r.deallocate.take());
            if r.error {
                messages.clear();
                messages.extend(r.message.take());
                result = None;
                break;
            }
            if matches!(r.nomination, Nomination::Node(_)) {
                messages.clear();
                messages.extend(r.message.take());
                result = Some(r);
                break;
            }
            messages.extend(r.message.take());
            if r.nomination != Nomination::Keep {
                result = Some(r);
            }
        }
        if !messages.is_empty() {
            diag.post_filter_msg = Some(messages.join(", "));
        }
        for key in deallocate {
            if let Some(claim) = self.cluster.cache.dra.claims.get(&key) {
                self.effects.push_back(Effect::DeallocateClaim {
                    claim: claim.clone(),
                });
            }
        }
        result
    }

    /// Carries out a preemption PostFilter decided (kube-scheduler's `prepareCandidate`):
    /// deletes the victims (those not already being deleted) with a `Preempted` event each,
    /// and clears the nomination of lower-priority pods nominated to the same node, which
    /// may no longer fit there, sending them back to the queue.
    pub(super) fn preempt(&mut self, now: Time, preemptor: &PodInfo, result: &PostFilterResult) {
        self.preempt_with(now, preemptor, result, true);
    }

    /// [`Scheduler::preempt`]; with `evict` false the victims are only waited for (the
    /// hold lists them), another member of the preemptor's gang evicting them.
    pub(super) fn preempt_with(
        &mut self,
        now: Time,
        preemptor: &PodInfo,
        result: &PostFilterResult,
        evict: bool,
    ) {
        let Nomination::Node(idx) = result.nomination else {
            return;
        };
        let Some(node) = self.cluster.cache.node(idx).map(|n| n.name.clone()) else {
            return;
        };
        // The hold first: in the API server it exists before any victim is gone.
        let held = match result.hold {
            Some(ttl) if !preemptor.is_reserve_pod() => {
                self.hold(preemptor, &node, ttl, &result.victims)
            }
            _ => None,
        };
        let mut evicted = Vec::new();
        for victim in result.victims.iter().filter(|_| evict) {
            let Some(info) = self.cluster.cache.pod(victim).map(|e| e.info.clone()) else {
                continue;
            };
            if info.terminating {
                continue;
            }
            self.counters.preemption_victims += 1;
            self.effects.push_back(Effect::Delete {
                key: victim.clone(),
                uid: info.uid.to_string(),
                resource_version: None,
                preemption: Some(crate::effect::Preemption {
                    preemptor: preemptor.key.clone(),
                    scheduler: preemptor.scheduler_name.to_string(),
                    hold: held.clone(),
                }),
            });
            self.record(
                victim.clone(),
                &info.uid,
                "Normal",
                "Preempted",
                format!(
                    "Preempted by pod {} ({}) on node {}",
                    preemptor.key, preemptor.uid, node
                ),
            );
            evicted.push(victim.to_string());
        }
        if !evicted.is_empty() {
            let held = held
                .map(|n| format!("; the room is held by reservation {n}"))
                .unwrap_or_default();
            self.record(
                preemptor.key.clone(),
                &preemptor.uid,
                "Normal",
                "Preempted",
                format!(
                    "Preempted {} pod(s) on node {node} for {}: {}{held}",
                    evicted.len(),
                    preemptor.key,
                    evicted.join(", ")
                ),
            );
        }
        self.clear_lower_nominations(now, preemptor, &node);
    }

    /// Pods of lower priority nominated to `node`, which may no longer fit there once the
    /// preemptor takes it: their nominations (and holds) go and they are tried again.
    fn clear_lower_nominations(&mut self, now: Time, preemptor: &PodInfo, node: &str) {
        let lower: Vec<Arc<PodInfo>> = self
            .nominator
            .pods_on(node)
            .iter()
            .filter(|p| p.priority < preemptor.priority)
            .cloned()
            .collect();
        for p in lower {
            // Its hold there, if any, gives way too (one still on its way to the API server
            // is deleted after it, in the same order).
            let name = crate::reservation::hold::name_for(&p.key);
            if self.pending_hold(&name) {
                self.holds.remove(&name);
                self.counters.preemption_holds_expired += 1;
                self.effects.push_back(Effect::Delete {
                    key: ObjectKey::cluster(Kind::Reservation, &name),
                    uid: String::new(),
                    resource_version: None,
                    preemption: None,
                });
            }
            self.expire_hold(
                now,
                &p.key,
                &p.uid,
                "preempted by a higher-priority pod",
                true,
            );
            self.nominator.delete(&p.key);
            if nominated_node_name(&p).is_some() {
                self.effects.push_back(Effect::NominatePod {
                    pod: p.key.clone(),
                    node: None,
                });
            }
            self.queue.add(p.key.clone(), p.priority, p.created, now);
        }
    }

    /// Its hold asked for: until it holds (Available), the nomination guards the room.
    pub(super) fn await_own_hold(&mut self, pod: &PodInfo) {
        let hold = crate::reservation::hold::name_for(&pod.key);
        if self
            .holds
            .get(&hold)
            .is_some_and(|(_, uid, _)| *uid == pod.uid)
        {
            self.nominator.await_hold(&pod.key);
        }
    }

    /// Records the nomination PostFilter decided for `pod` and returns the effect that
    /// writes it to `status.nominatedNodeName` when the API object does not say so already.
    pub(super) fn nominate(
        &mut self,
        now: Time,
        pod: &PodInfo,
        nomination: Option<Nomination>,
    ) -> Option<Effect> {
        let before = self.nominator.node_of(&pod.key).cloned();
        let effect = self.renominate(pod, nomination, before.clone());
        let after = self.nominator.node_of(&pod.key).cloned();
        if before.is_some() && before != after {
            self.wake_nominated_room(now, before.as_deref());
        }
        effect
    }

    /// [`Scheduler::nominate`] without the wake-up.
    pub(super) fn renominate(
        &mut self,
        pod: &PodInfo,
        nomination: Option<Nomination>,
        before: Option<Arc<str>>,
    ) -> Option<Effect> {
        let after: Option<Arc<str>> = match nomination {
            None | Some(Nomination::Keep) => return None,
            Some(Nomination::Clear) => {
                self.nominator.delete(&pod.key);
                None
            }
            Some(Nomination::Node(idx)) => {
                let name = self.cluster.cache.node(idx)?.name.clone();
                let info = self.cluster.cache.pod(&pod.key)?.info.clone();
                self.nominator.add(info, name.clone());
                Some(name)
            }
        };
        let written = nominated_node_name(pod);
        if written == after.as_deref() || before == after {
            return None;
        }
        Some(Effect::NominatePod {
            pod: pod.key.clone(),
            node: after.map(|n| n.to_string()),
        })
    }

    /// Reservation-backed preemption: asks for the reservation that holds `node` for
    /// `preemptor` ([`crate::reservation::hold`]), replacing an earlier one
    /// of the same name. Returns its name.
    pub(super) fn hold(
        &mut self,
        preemptor: &PodInfo,
        node: &str,
        ttl: Time,
        victims: &[ObjectKey],
    ) -> Option<String> {
        use crate::reservation::hold;
        let name = hold::name_for(&preemptor.key);
        let existing = self.cluster.reservations.by_name(&name);
        // Preempting again for the same node (the victims' deletion is not visible yet, or
        // they terminate slowly): the hold asked for, or in place, stays.
        let live = existing.is_none_or(|r| !r.phase.is_terminal() && !r.terminating);
        let same = self
            .holds
            .get(&name)
            .is_some_and(|(_, uid, n)| *uid == preemptor.uid && &**n == node);
        if same && live {
            return Some(name);
        }
        let r = hold::reservation(&self.cluster.cache.names, preemptor, node, ttl, victims)?;
        if let Some(old) = existing {
            if !old.gc_requested {
                self.effects.push_back(Effect::Delete {
                    key: old.object_key(),
                    uid: old.uid.to_string(),
                    resource_version: None,
                    preemption: None,
                });
            }
        }
        self.effects
            .push_back(Effect::CreateReservation(Box::new(r)));
        self.holds.insert(
            name.clone(),
            (preemptor.key.clone(), preemptor.uid.clone(), node.into()),
        );
        Some(name)
    }

    /// A hold that comes back (or is found after a restart) when its preemptor is gone or
    /// already placed has nothing left to hold.
    pub(super) fn check_hold_owner(&mut self, now: Time, name: &str) {
        use crate::reservation::hold;
        if !self.synced() || self.relisting.contains_key(&Kind::Pod) {
            return;
        }
        let Some(r) = self.cluster.reservations.by_name(name) else {
            return;
        };
        if r.phase.is_terminal() || r.terminating {
            return;
        }
        let Some((key, uid)) = hold::preemptor_of(r) else {
            return;
        };
        let idx = self.cluster.reservations.idx(name);
        let owns = idx.is_some() && self.cluster.reservations.owner_of(&key) == idx;
        match self.cluster.cache.pod(&key) {
            Some(e) if *e.info.uid == *uid => match e.state {
                PodState::Bound => self.settle_hold(now, &key),
                // Placed (its bind in flight) before the hold came: not on it.
                PodState::Assumed if !owns => self.expire_hold(
                    now,
                    &key,
                    &uid,
                    "the preemptor was placed without it",
                    false,
                ),
                _ => {}
            },
            _ => self.expire_hold(now, &key, &uid, "the preemptor was deleted", true),
        }
    }

    /// Whether the hold `name` was asked for and has not come back through the watch yet
    /// (a `CreateReservation` in flight: the store does not know it, or knows an earlier one
    /// that this one replaces).
    pub(super) fn pending_hold(&self, name: &str) -> bool {
        let Some((_, uid, _)) = self.holds.get(name) else {
            return false;
        };
        self.cluster
            .reservations
            .by_name(name)
            .is_none_or(|r| !crate::reservation::hold::is_hold_for(r, uid) || r.phase.is_terminal())
    }

    /// After a pod changed: if it is a preemptor that was placed, its hold is done with.
    /// Placed on its reservation, the reservation is `Succeeded` (completed); placed
    /// anywhere else first, the reservation expires at once (its room is not needed).
    pub(super) fn settle_hold(&mut self, now: Time, key: &ObjectKey) {
        let Some((uid, bound)) = self.cluster.cache.pod(key).map(|e| {
            (
                e.info.uid.clone(),
                e.state == PodState::Bound && !e.info.terminal,
            )
        }) else {
            return;
        };
        if !bound {
            return;
        }
        let Some(idx) = crate::reservation::hold::of(&self.cluster.reservations, key, &uid) else {
            return;
        };
        let Some(r) = self.cluster.reservations.get(idx) else {
            return;
        };
        if r.phase == berth_api::reservation::ReservationPhase::Succeeded {
            if self.holds.remove(&*r.name).is_some() {
                self.counters.preemption_holds_completed += 1;
            }
            return;
        }
        self.expire_hold(now, key, &uid, "the preemptor was placed without it", false);
    }

    /// Expires the hold of the preemptor `key` (incarnation `uid`) if it is still active or
    /// pending; with `delete`, the reservation is deleted too (what the garbage collector
    /// would do for an object owned by the pod).
    pub(super) fn expire_hold(
        &mut self,
        now: Time,
        key: &ObjectKey,
        uid: &str,
        why: &str,
        delete: bool,
    ) {
        use crate::reservation::hold;
        let Some(idx) = hold::of(&self.cluster.reservations, key, uid) else {
            return;
        };
        let Some(r) = self.cluster.reservations.get(idx) else {
            return;
        };
        let (name, object, ruid, terminal) = (
            r.name.clone(),
            r.object_key(),
            r.uid.clone(),
            r.phase.is_terminal(),
        );
        if !terminal && self.holds.remove(&*name).is_some() {
            self.counters.preemption_holds_expired += 1;
        }
        if delete {
            // Gone with its pod: forgotten now (its hold released, no status to write), and
            // deleted in the API server; the watch's deletion then finds nothing to do.
            self.cluster
                .reservations
                .delete(&mut self.cluster.cache, &name);
            self.effects.push_back(Effect::Delete {
                key: object,
                uid: ruid.to_string(),
                resource_version: None,
                preemption: None,
            });
        } else if !terminal {
            self.cluster
                .reservations
                .fail(&mut self.cluster.cache, idx, why, now);
        }
    }

    /// Counts the holds whose reservation failed (TTL) since the last look.
    pub(super) fn count_expired_holds(&mut self) {
        let store = &self.cluster.reservations;
        let failed: Vec<String> = self
            .holds
            .keys()
            .filter(|n| {
                store
                    .by_name(n)
                    .is_none_or(|r| r.phase == berth_api::reservation::ReservationPhase::Failed)
            })
            .cloned()
            .collect();
        for n in failed {
            self.holds.remove(&n);
            self.counters.preemption_holds_expired += 1;
        }
    }

    /// Forgets `key`'s nomination. Unless the pod `landed` on that very node, the room the
    /// nomination held there is free again, and the pods it turned away are retried.
    pub(super) fn drop_nomination(&mut self, now: Time, key: &ObjectKey, landed: Option<NodeIdx>) {
        let Some(node) = self.nominator.delete(key) else {
            return;
        };
        let idx = self.cluster.cache.node_idx(&node);
        if idx.is_none() || idx != landed {
            self.wake_nominated_room(now, Some(&node));
        }
    }

    /// A nomination to `node` went away (the pod was deleted, placed elsewhere, or
    /// nominated elsewhere, or its nomination was cleared): pods of lower or equal priority
    /// that Filter turned away there because of it may fit now. The queue sees it as a pod
    /// leaving that node (kube-scheduler moves them the same way).
    pub(super) fn wake_nominated_room(&mut self, now: Time, node: Option<&str>) {
        let Some(idx) = node.and_then(|n| self.cluster.cache.node_idx(n)) else {
            return;
        };
        self.requeue(now, ClusterEvent::assigned_pod_deleted(Some(idx)));
    }
}
