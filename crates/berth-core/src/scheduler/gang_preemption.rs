//! Gang-aware preemption: a gang preempts only if all the members it needs can be placed,
//! and never evicts its own members.
//!
//! When a member's cycle fails and DefaultPreemption found it a node, that decision stands
//! as it is if every other member the gang needs is already placed and no victim is of the
//! gang. Otherwise the preemption is planned for the whole gang at once (job-level, as
//! Koordinator's coscheduling does it, [`crate::plugins::defaultpreemption::job`]): every
//! pending member the gang needs gets a node, and the victims on those nodes are evicted
//! and each member nominated to its node; or nothing is evicted and the message says which
//! member could not be placed.

use super::*;
use crate::gang::GangId;
use crate::plugins::defaultpreemption::job::{self, Job, JobPlan, JobRefusal};
use crate::plugins::defaultpreemption::potential_nodes;

impl Scheduler {
    /// Gang-aware preemption for `pod`, after PostFilter decided `result` (module
    /// documentation). Returns what stands for `pod` itself; the other members' victims
    /// and nominations are carried out here.
    pub(super) fn gang_preemption(
        &mut self,
        now: Time,
        pod: &PodInfo,
        result: Option<PostFilterResult>,
        diag: &mut Diagnosis,
    ) -> Option<PostFilterResult> {
        let r = result?;
        if !matches!(r.nomination, Nomination::Node(_)) {
            return Some(r);
        }
        let Some(gang) = self.gangs.gang(&pod.key).cloned() else {
            return Some(r);
        };
        let Ok(Some(policy)) = self.gangs.policy(&gang, pod) else {
            return Some(r);
        };
        let placed = self
            .gangs
            .members(&gang)
            .filter(|k| **k != pod.key && self.gang_member_placed(k))
            .count();
        if self.gang_preemption_under_way(&gang) {
            diag.post_filter_msg = Some(format!(
                "preemption: not eligible due to the victims of gang {gang}'s preemption still terminating."
            ));
            return Some(PostFilterResult {
                nomination: Nomination::Keep,
                ..PostFilterResult::default()
            });
        }
        let pending = self.pending_members(&gang, pod);
        // Strict: a member that cannot be placed rejects the whole gang, so every pending
        // member needs a node, as in Koordinator. NonStrict: the gang's minimum is enough.
        // The member whose cycle failed is needed whatever the count says.
        let needed = if policy.strict {
            pending.len()
        } else {
            (policy.min as usize).saturating_sub(placed).max(1)
        };
        let own_victim = r.victims.iter().any(|v| self.gangs.gang(v) == Some(&gang));
        if needed <= 1 && !own_victim {
            // Only this member is needed: DefaultPreemption's plan is the gang's.
            self.remember_gang_victims(gang, &r.victims);
            return Some(r);
        }
        let planned = self.plan_job(pod, &gang, &pending, needed);
        match planned {
            Ok(plan) => {
                let victims: Vec<ObjectKey> = plan.victims.values().flatten().cloned().collect();
                self.remember_gang_victims(gang, &victims);
                Some(self.carry_out_job(now, pod, &pending, plan, r.hold))
            }
            Err(refusal) => {
                diag.post_filter_msg = Some(refusal_message(&gang, needed, &refusal));
                None
            }
        }
    }

    /// Remembers the victims evicted for the gang (see
    /// [`Scheduler::gang_preemption_under_way`]).
    fn remember_gang_victims(&mut self, gang: GangId, victims: &[ObjectKey]) {
        let cache = &self.cluster.cache;
        let victims: Vec<(ObjectKey, Arc<str>)> = victims
            .iter()
            .filter_map(|k| Some((k.clone(), cache.pod(k)?.info.uid.clone())))
            .collect();
        self.gang_victims.insert(gang, victims);
    }

    /// Whether victims evicted for the gang's job-level preemption are still there: until
    /// they are gone, its members wait for them rather than plan again (a member tried
    /// before the deletions are seen would otherwise evict them a second time, and one
    /// tried after would find the room held by its fellows' holds). Forgets the gang's
    /// victims once none is left.
    pub(super) fn gang_preemption_under_way(&mut self, gang: &GangId) -> bool {
        let Some(victims) = self.gang_victims.get(gang) else {
            return false;
        };
        let cache = &self.cluster.cache;
        let left = victims.iter().any(|(k, uid)| {
            cache
                .pod(k)
                .is_some_and(|e| e.info.uid == *uid && !e.info.terminal)
        });
        if !left {
            self.gang_victims.remove(gang);
        }
        left
    }

    /// The gang's members not placed yet, `pod` first, the others by priority (highest
    /// first), then creation, then name: the order the queue takes them in.
    fn pending_members(&self, gang: &GangId, pod: &PodInfo) -> Vec<Arc<PodInfo>> {
        let mut others: Vec<Arc<PodInfo>> = self
            .gangs
            .members(gang)
            .filter(|k| **k != pod.key && k.kind == Kind::Pod && !self.gang_member_placed(k))
            .filter_map(|k| self.cluster.cache.pod(k))
            .filter(|e| e.state == PodState::Pending && !e.info.terminating && !e.info.terminal)
            .map(|e| e.info.clone())
            .collect();
        others.sort_by(|a, b| {
            b.priority
                .cmp(&a.priority)
                .then_with(|| a.created.cmp(&b.created))
                .then_with(|| a.key.cmp(&b.key))
        });
        let mut pending = Vec::with_capacity(others.len() + 1);
        if let Some(e) = self.cluster.cache.pod(&pod.key) {
            pending.push(e.info.clone());
        }
        pending.extend(others);
        pending
    }

    /// The job-level plan for the gang's `pending` members (`needed` of them).
    fn plan_job(
        &self,
        pod: &PodInfo,
        gang: &GangId,
        pending: &[Arc<PodInfo>],
        needed: usize,
    ) -> Result<JobPlan, JobRefusal> {
        let potential = potential_nodes(&self.cluster, &self.resolvable);
        let gangs = &self.gangs;
        let is_member = |k: &ObjectKey| gangs.gang(k) == Some(gang);
        let job = Job {
            profile: &self.profiles[self.profile_for(pod)],
            nominator: &self.nominator,
            pending,
            needed,
            potential: &potential,
            is_member: &is_member,
        };
        job::plan(&self.cluster, &job)
    }

    /// Evicts the plan's victims and nominates every member it placed; returns `pod`'s own
    /// result (its node, and the victims there when it is the first member planned there).
    fn carry_out_job(
        &mut self,
        now: Time,
        pod: &PodInfo,
        pending: &[Arc<PodInfo>],
        plan: JobPlan,
        hold: Option<Time>,
    ) -> PostFilterResult {
        let mut own = None;
        let mut evicted = BTreeSet::new();
        for (key, idx) in &plan.placements {
            // Every member's hold (reservation-backed preemption) waits for the victims on
            // its node; the first member planned there evicts them (the failed member is
            // planned first, and its own result evicts through the cycle).
            let result = PostFilterResult {
                nomination: Nomination::Node(*idx),
                victims: plan.victims.get(idx).cloned().unwrap_or_default(),
                hold,
                ..PostFilterResult::default()
            };
            let evict = evicted.insert(*idx);
            if *key == pod.key {
                own = Some(result);
                continue;
            }
            let Some(member) = pending.iter().find(|p| p.key == *key) else {
                continue;
            };
            self.preempt_with(now, member, &result, evict);
            if let Some(effect) = self.nominate(now, member, Some(result.nomination)) {
                self.effects.push_back(effect);
            }
            self.await_own_hold(member);
        }
        own.unwrap_or_default()
    }
}

/// The message of a gang that does not preempt: how many of the members it needs could be
/// placed, and the first that could not, even with every potential victim evicted.
fn refusal_message(gang: &GangId, needed: usize, refusal: &JobRefusal) -> String {
    let which = refusal
        .unplaced
        .as_ref()
        .map(|k| format!(" (pod {k} fits no node)"))
        .unwrap_or_default();
    format!(
        "preemption: not attempted: evicting lower-priority pods would place only {} of the {needed} member(s) gang {gang} still needs{which}; a gang preempts only when all its members can be placed.",
        refusal.placed
    )
}
