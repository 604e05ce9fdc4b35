//! The arbitrator's limits (koord-descheduler's `MigrationControllerArgs` and
//! `arbitrator/filter.go`): a job leaves `Pending` only while, counting the jobs already
//! `Running`,
//! - fewer than `maxMigratingPerNode` pods of the pod's node are migrating;
//! - fewer than `maxMigratingPerNamespace` pods of its namespace are;
//! - fewer than `maxMigratingPerWorkload` pods of its workload (controller owner) are;
//! - the workload's unavailable pods (not active or not ready) together with its migrating
//!   pods number fewer than `maxUnavailablePerWorkload`.
//!
//! A limit left out (or 0) does not limit, except `maxMigratingPerNode`, which defaults to
//! Koordinator's 2. Counts are whole numbers (Koordinator also takes percentages of the
//! workload's replicas for the per-workload limits; berth does not yet).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use berth_api::k8s_openapi::api::core::v1::Pod;
use berth_api::migration::{vocabulary, PodMigrationJob};

use super::MigrationView;

/// The controller's arguments.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MigrationArgs {
    /// Pods of one node migrating at once (Koordinator's default: 2).
    #[serde(default = "default_per_node")]
    pub max_migrating_per_node: Option<u32>,
    /// Pods of one namespace migrating at once.
    #[serde(default)]
    pub max_migrating_per_namespace: Option<u32>,
    /// Pods of one workload migrating at once.
    #[serde(default)]
    pub max_migrating_per_workload: Option<u32>,
    /// Unavailable plus migrating pods of one workload.
    #[serde(default)]
    pub max_unavailable_per_workload: Option<u32>,
}

fn default_per_node() -> Option<u32> {
    Some(2)
}

impl Default for MigrationArgs {
    fn default() -> Self {
        Self {
            max_migrating_per_node: default_per_node(),
            max_migrating_per_namespace: None,
            max_migrating_per_workload: None,
            max_unavailable_per_workload: None,
        }
    }
}

/// Where a migrating pod counts.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Migrating {
    node: Option<String>,
    namespace: String,
    name: String,
    workload: Option<String>,
}

impl Migrating {
    fn of(namespace: &str, name: &str, pod: Option<&Pod>) -> Self {
        Self {
            node: pod.and_then(node_of).map(str::to_string),
            namespace: namespace.to_string(),
            name: name.to_string(),
            workload: pod.and_then(controller_uid).map(str::to_string),
        }
    }
}

/// The running jobs' pods, and the limits.
pub(crate) struct Arbiter<'a> {
    args: &'a MigrationArgs,
    running: BTreeSet<Migrating>,
    /// Unavailable pods per workload UID (namespace/name).
    unavailable: BTreeMap<String, BTreeSet<(String, String)>>,
}

impl<'a> Arbiter<'a> {
    pub(crate) fn new(
        args: &'a MigrationArgs,
        jobs: &[Arc<PodMigrationJob>],
        view: &dyn MigrationView,
    ) -> Self {
        let mut running = BTreeSet::new();
        for job in jobs {
            if job.phase() != vocabulary::RUNNING || job.spec.paused {
                continue;
            }
            if let Some((ns, name)) = pod_ref(job) {
                running.insert(Migrating::of(ns, name, view.pod(ns, name)));
            }
        }
        let mut unavailable: BTreeMap<String, BTreeSet<(String, String)>> = BTreeMap::new();
        if args.max_unavailable_per_workload.is_some_and(|m| m > 0) {
            for p in view.pods() {
                let Some(uid) = controller_uid(p) else {
                    continue;
                };
                if !is_available(p) {
                    unavailable.entry(uid.to_string()).or_default().insert((
                        p.metadata.namespace.clone().unwrap_or_default(),
                        p.metadata.name.clone().unwrap_or_default(),
                    ));
                }
            }
        }
        Self {
            args,
            running,
            unavailable,
        }
    }

    /// Lets the job of `pod` (`namespace/name`) start, counting it from now on, or says which
    /// limit holds it back.
    pub(crate) fn admit(&mut self, namespace: &str, name: &str, pod: &Pod) -> Result<(), String> {
        let me = Migrating::of(namespace, name, Some(pod));
        let others = || {
            self.running
                .iter()
                .filter(|m| m.name != name || m.namespace != namespace)
        };
        let limit = |l: Option<u32>| l.filter(|l| *l > 0).map(|l| l as usize);
        if let (Some(max), Some(node)) = (limit(self.args.max_migrating_per_node), &me.node) {
            let n = others().filter(|m| m.node.as_ref() == Some(node)).count();
            if n >= max {
                return Err(format!(
                    "maxMigratingPerNode: {n} pod(s) of node {node:?} are migrating (limit {max})"
                ));
            }
        }
        if let Some(max) = limit(self.args.max_migrating_per_namespace) {
            let n = others().filter(|m| m.namespace == namespace).count();
            if n >= max {
                return Err(format!(
                    "maxMigratingPerNamespace: {n} pod(s) of namespace {namespace:?} are migrating (limit {max})"
                ));
            }
        }
        if let Some(workload) = &me.workload {
            let migrating: BTreeSet<(String, String)> = others()
                .filter(|m| m.workload.as_ref() == Some(workload))
                .map(|m| (m.namespace.clone(), m.name.clone()))
                .collect();
            if let Some(max) = limit(self.args.max_migrating_per_workload) {
                if !migrating.is_empty() && migrating.len() >= max {
                    return Err(format!(
                        "maxMigratingPerWorkload: {} pod(s) of the workload are migrating (limit {max})",
                        migrating.len()
                    ));
                }
            }
            if let Some(max) = limit(self.args.max_unavailable_per_workload) {
                let mut down = self.unavailable.get(workload).cloned().unwrap_or_default();
                down.extend(migrating);
                if down.len() >= max {
                    return Err(format!(
                        "maxUnavailablePerWorkload: {} pod(s) of the workload are unavailable or migrating (limit {max})",
                        down.len()
                    ));
                }
            }
        }
        self.running.insert(me);
        Ok(())
    }
}

/// The job's `spec.podRef` as `(namespace, name)`, when both are set.
pub(crate) fn pod_ref(job: &PodMigrationJob) -> Option<(&str, &str)> {
    let r = job.spec.pod_ref.as_ref()?;
    let ns = r.namespace.as_deref().filter(|s| !s.is_empty())?;
    let name = r.name.as_deref().filter(|s| !s.is_empty())?;
    Some((ns, name))
}

pub(crate) fn node_of(p: &Pod) -> Option<&str> {
    p.spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .filter(|n| !n.is_empty())
}

/// The UID of the pod's controller owner.
pub(crate) fn controller_uid(p: &Pod) -> Option<&str> {
    p.metadata
        .owner_references
        .iter()
        .flatten()
        .find(|r| r.controller == Some(true) && !r.uid.is_empty())
        .map(|r| r.uid.as_str())
}

/// `IsPodReady`: the `Ready` condition is `True` (a pod without conditions counts as ready
/// once `Running`, as the simulated kubelet writes none).
pub(crate) fn is_ready(p: &Pod) -> bool {
    let status = p.status.as_ref();
    let phase = status.and_then(|s| s.phase.as_deref()).unwrap_or("Pending");
    let ready = status
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready"));
    match ready {
        Some(c) => c.status == "True" && phase == "Running",
        None => phase == "Running",
    }
}

/// Active (not terminal, not being deleted) and ready.
fn is_available(p: &Pod) -> bool {
    let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
    !matches!(phase, Some("Succeeded" | "Failed"))
        && p.metadata.deletion_timestamp.is_none()
        && is_ready(p)
}
