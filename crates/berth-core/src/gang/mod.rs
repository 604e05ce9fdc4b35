//! Gangs: which pods must be placed together, all of a minimum or none.
//!
//! A pod belongs to a gang by one of the APIs users have:
//! - a coscheduling `PodGroup` named by its label `pod-group.scheduling.sigs.k8s.io`
//!   (Koordinator v1.8's Coscheduling) or `scheduling.x-k8s.io/pod-group`
//!   (kubernetes-sigs/scheduler-plugins): `spec.minMember`, `spec.scheduleTimeoutSeconds`;
//! - Koordinator's lightweight gang: the annotations `gang.scheduling.koordinator.sh/name`
//!   and `/min-available` (and `/waiting-time`, `/mode`) without a PodGroup object;
//! - Kubernetes 1.35's Workload API: `spec.workloadRef` naming a Workload's pod group whose
//!   policy is `gang` (`minCount`); each `podGroupReplicaKey` is a gang of its own.
//!
//! This module is the pure bookkeeping (objects, membership, the policy a pod's gang has);
//! the scheduler's Permit stage (`scheduler/permit.rs`) makes members wait, releases them
//! together, and rejects them on a time-out or a member's failure.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use berth_api::gang::{
    PodGroup, Workload, WorkloadReference, ANNOTATION_GANG_MIN_NUM, ANNOTATION_GANG_MODE,
    ANNOTATION_GANG_NAME, ANNOTATION_GANG_WAIT_TIME, GANG_MODE_NON_STRICT, LABEL_SIGS_POD_GROUP,
    LABEL_X_K8S_POD_GROUP,
};

use crate::model::pod::PodInfo;
use crate::object::{Kind, ObjectKey};
use crate::time::{Time, SECOND};

mod report;
#[cfg(test)]
mod tests;

pub use report::Report;

/// Koordinator's default Permit wait (`CoschedulingArgs.DefaultTimeout`).
pub const KOORDINATOR_DEFAULT_TIMEOUT: Time = 600 * SECOND;
/// scheduler-plugins' default Permit wait (`permitWaitingTimeSeconds`).
pub const X_K8S_DEFAULT_TIMEOUT: Time = 60 * SECOND;
/// kube-scheduler 1.35's `DefaultSchedulingTimeoutDuration` for Workload gangs.
pub const WORKLOAD_TIMEOUT: Time = 300 * SECOND;

/// Koordinator's plugin name (also scheduler-plugins').
pub const COSCHEDULING: &str = "Coscheduling";
/// kube-scheduler 1.35's plugin name.
pub const GANG_SCHEDULING: &str = "GangScheduling";

/// Which API made the gang.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Api {
    /// `scheduling.sigs.k8s.io` PodGroup, or Koordinator's annotations.
    Koordinator,
    /// `scheduling.x-k8s.io` PodGroup.
    SchedulerPlugins,
    /// `scheduling.k8s.io/v1alpha1` Workload.
    Workload,
}

/// A gang's identity: its namespace and name (`workload/podGroup[/replicaKey]` for a
/// Workload's), and the API that named it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GangId {
    /// Which API.
    pub api: Api,
    /// The members' namespace.
    pub namespace: Arc<str>,
    /// The group's name.
    pub name: Arc<str>,
}

impl std::fmt::Display for GangId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// What a gang asks of the scheduler.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    /// The fewest members assumed or bound before any binds.
    pub min: u32,
    /// How long members wait at Permit for the rest.
    pub timeout: Time,
    /// A member that cannot be placed rejects the members waiting at Permit at once
    /// (Koordinator's `Strict` mode, the default), rather than leaving them to wait out
    /// the time-out holding room nobody can use.
    pub strict: bool,
    /// The plugin whose name messages carry.
    pub plugin: &'static str,
}

/// The gang objects and who belongs to which gang.
#[derive(Debug, Default, Clone)]
pub struct Gangs {
    pod_groups: BTreeMap<ObjectKey, Arc<PodGroup>>,
    workloads: BTreeMap<ObjectKey, Arc<Workload>>,
    /// Members (pods of any state the cache keeps) per gang.
    members: BTreeMap<GangId, BTreeSet<ObjectKey>>,
    /// The gang of each member.
    gang_of: BTreeMap<ObjectKey, GangId>,
}

/// Reads the gang a pod names, if any: `spec.workloadRef` first, then the PodGroup labels, then Koordinator's
/// annotation.
pub fn gang_of_pod(pod: &PodInfo) -> Option<GangId> {
    let ns = pod.key.namespace.clone();
    if let Some(r) = workload_ref(pod) {
        let mut name = format!("{}/{}", r.name, r.pod_group);
        if !r.pod_group_replica_key.is_empty() {
            name.push('/');
            name.push_str(&r.pod_group_replica_key);
        }
        return Some(GangId {
            api: Api::Workload,
            namespace: ns,
            name: name.into(),
        });
    }
    let (api, name) = if let Some(n) = pod.labels.get(LABEL_SIGS_POD_GROUP) {
        (Api::Koordinator, n.as_str())
    } else if let Some(n) = pod.labels.get(LABEL_X_K8S_POD_GROUP) {
        (Api::SchedulerPlugins, n.as_str())
    } else {
        (Api::Koordinator, pod.annotation(ANNOTATION_GANG_NAME)?)
    };
    (!name.is_empty()).then(|| GangId {
        api,
        namespace: ns,
        name: name.into(),
    })
}

/// A pod's `spec.workloadRef`, if it has one.
pub fn workload_ref(pod: &PodInfo) -> Option<WorkloadReference> {
    let r = pod.pod.spec.as_ref()?.workload_ref.as_ref()?;
    Some(WorkloadReference {
        name: r.name.clone(),
        pod_group: r.pod_group.clone(),
        pod_group_replica_key: r.pod_group_replica_key.clone().unwrap_or_default(),
    })
}

impl Gangs {
    /// Records a PodGroup or Workload (either kind of [`crate::object::Object`]).
    pub fn apply_pod_group(&mut self, key: ObjectKey, pg: Arc<PodGroup>) {
        self.pod_groups.insert(key, pg);
    }

    /// Records a Workload.
    pub fn apply_workload(&mut self, key: ObjectKey, w: Arc<Workload>) {
        self.workloads.insert(key, w);
    }

    /// Forgets a PodGroup or Workload.
    pub fn delete(&mut self, key: &ObjectKey) {
        self.pod_groups.remove(key);
        self.workloads.remove(key);
    }

    /// The PodGroups and Workloads known.
    pub fn keys(&self, kind: Kind) -> Vec<ObjectKey> {
        match kind {
            Kind::PodGroup => self.pod_groups.keys().cloned().collect(),
            Kind::Workload => self.workloads.keys().cloned().collect(),
            _ => Vec::new(),
        }
    }

    /// Notes that `pod` exists (created or updated): it joins its gang, if it names one.
    /// Returns its gang.
    pub fn pod_applied(&mut self, pod: &PodInfo) -> Option<GangId> {
        let gang = gang_of_pod(pod);
        if self.gang_of.get(&pod.key) != gang.as_ref() {
            self.pod_deleted(&pod.key);
            if let Some(g) = &gang {
                self.members
                    .entry(g.clone())
                    .or_default()
                    .insert(pod.key.clone());
                self.gang_of.insert(pod.key.clone(), g.clone());
            }
        }
        gang
    }

    /// Notes that a pod is gone.
    pub fn pod_deleted(&mut self, key: &ObjectKey) {
        if let Some(g) = self.gang_of.remove(key) {
            if let Some(m) = self.members.get_mut(&g) {
                m.remove(key);
                if m.is_empty() {
                    self.members.remove(&g);
                }
            }
        }
    }

    /// The gang `key` belongs to.
    pub fn gang(&self, key: &ObjectKey) -> Option<&GangId> {
        self.gang_of.get(key)
    }

    /// The members of a gang.
    pub fn members(&self, gang: &GangId) -> impl Iterator<Item = &ObjectKey> + '_ {
        self.members.get(gang).into_iter().flatten()
    }

    /// How many pods a gang has.
    pub fn member_count(&self, gang: &GangId) -> usize {
        self.members.get(gang).map_or(0, BTreeSet::len)
    }

    /// The creation time that orders a gang's members in the queue: the PodGroup's or
    /// Workload's, so that the members of one gang sort together (Koordinator's
    /// Coscheduling `Less`); `None` when the object is unknown or has no timestamp.
    pub fn created(&self, gang: &GangId) -> Option<Time> {
        let meta = match gang.api {
            Api::Workload => {
                let w = gang.name.split('/').next().unwrap_or("");
                &self
                    .workloads
                    .get(&ObjectKey::new(Kind::Workload, &gang.namespace, w))?
                    .metadata
            }
            _ => {
                &self
                    .pod_groups
                    .get(&ObjectKey::new(Kind::PodGroup, &gang.namespace, &gang.name))?
                    .metadata
            }
        };
        let t = meta.creation_timestamp.as_ref()?;
        Some(t.0.as_millisecond())
    }

    /// The policy of `pod`'s gang: `Ok(None)` when the pod is not in a gang (or its
    /// Workload pod group's policy is `basic`), `Err` with the upstream message when the
    /// pod names a gang that cannot be scheduled yet (its object is missing).
    pub fn policy(&self, gang: &GangId, pod: &PodInfo) -> Result<Option<Policy>, String> {
        match gang.api {
            Api::Workload => self.workload_policy(gang, pod),
            Api::Koordinator | Api::SchedulerPlugins => self.pod_group_policy(gang, pod),
        }
    }

    fn workload_policy(&self, gang: &GangId, pod: &PodInfo) -> Result<Option<Policy>, String> {
        let Some(r) = workload_ref(pod) else {
            return Ok(None);
        };
        let key = ObjectKey::new(Kind::Workload, &gang.namespace, &r.name);
        let Some(w) = self.workloads.get(&key) else {
            return Err(format!(
                "waiting for pods's workload {:?} to appear in scheduling queue",
                r.name
            ));
        };
        let Some(group) = w.spec.pod_groups.iter().find(|g| g.name == r.pod_group) else {
            return Err(format!(
                "pod group {:?} doesn't exist for a workload {:?}",
                r.pod_group, r.name
            ));
        };
        Ok(group.policy.gang.as_ref().map(|g| Policy {
            min: u32::try_from(g.min_count).unwrap_or(0),
            timeout: WORKLOAD_TIMEOUT,
            strict: true,
            plugin: GANG_SCHEDULING,
        }))
    }

    fn pod_group_policy(&self, gang: &GangId, pod: &PodInfo) -> Result<Option<Policy>, String> {
        let key = ObjectKey::new(Kind::PodGroup, &gang.namespace, &gang.name);
        let default_timeout = match gang.api {
            Api::SchedulerPlugins => X_K8S_DEFAULT_TIMEOUT,
            _ => KOORDINATOR_DEFAULT_TIMEOUT,
        };
        let wait_time = pod
            .annotation(ANNOTATION_GANG_WAIT_TIME)
            .and_then(|t| berth_api::duration::parse_duration_millis(t).ok())
            .filter(|t| *t > 0);
        if let Some(pg) = self.pod_groups.get(&key) {
            let mode = pg
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(ANNOTATION_GANG_MODE))
                .map(String::as_str);
            let timeout = pg
                .spec
                .schedule_timeout_seconds
                .filter(|t| *t > 0)
                .map(|t| Time::from(t) * SECOND)
                .or(wait_time)
                .unwrap_or(default_timeout);
            return Ok(Some(Policy {
                min: u32::try_from(pg.spec.min_member).unwrap_or(0),
                timeout,
                strict: mode != Some(GANG_MODE_NON_STRICT),
                plugin: COSCHEDULING,
            }));
        }
        // Koordinator's lightweight gang: the annotations alone.
        let lightweight = pod.annotation(ANNOTATION_GANG_NAME) == Some(&*gang.name);
        if let (true, Some(min)) = (lightweight, pod.annotation(ANNOTATION_GANG_MIN_NUM)) {
            return match min.trim().parse::<u32>() {
                Ok(min) => Ok(Some(Policy {
                    min,
                    timeout: wait_time.unwrap_or(default_timeout),
                    strict: pod.annotation(ANNOTATION_GANG_MODE) != Some(GANG_MODE_NON_STRICT),
                    plugin: COSCHEDULING,
                })),
                Err(_) => Err(format!(
                    "invalid annotation {ANNOTATION_GANG_MIN_NUM}={min:?}: not a count"
                )),
            };
        }
        Err(match gang.api {
            Api::SchedulerPlugins => format!(
                "podgroups.scheduling.x-k8s.io {:?} not found",
                gang.name.as_ref()
            ),
            _ => format!("can't find gang, gangName: {gang}, podName: {}", pod.key),
        })
    }

    /// Why `pod`, a member of `gang`, may not be tried yet (the upstream PreEnqueue and
    /// PreFilter checks): its gang's object is missing, or the gang has fewer pods than its
    /// minimum. `None` when it may.
    pub fn held_back(&self, gang: &GangId, pod: &PodInfo) -> Option<String> {
        match self.policy(gang, pod) {
            Ok(None) => None,
            Ok(Some(policy)) => {
                let have = self.member_count(gang);
                (have < policy.min as usize)
                    .then(|| Self::too_few_message(gang, pod, have, policy.min))
            }
            Err(message) => Some(message),
        }
    }

    /// The message of a pod whose gang has fewer pods than its minimum (the upstream
    /// plugins' PreEnqueue / PreFilter).
    pub fn too_few_message(gang: &GangId, pod: &PodInfo, have: usize, min: u32) -> String {
        match gang.api {
            Api::Workload => {
                "waiting for minCount pods from a gang to appear in scheduling queue".into()
            }
            Api::SchedulerPlugins => format!(
                "pre-filter pod {} cannot find enough sibling pods, current pods number: {have}, minMember of group: {min}",
                pod.key.name
            ),
            Api::Koordinator => format!(
                "gangGroup [{gang}] basic check: memberGangs [{gang}] child pod not collect enough, current gang: {gang}, podName: {}",
                pod.key
            ),
        }
    }
}
