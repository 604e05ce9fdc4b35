//! The PodMigrationJob controller (`berth_core::migration`) as the simulator runs it: the
//! store is its view of the cluster, and its actions are performed as the API server
//! would (a Reservation created with the API server's defaults and queued for scheduling, a
//! pod evicted through the Eviction API, which honours PodDisruptionBudgets, a job
//! replaced). It runs in the same settle loop as the workload controllers, so a job moves on
//! as soon as the scheduler, the kubelet or a workload controller gave it something new. A
//! refused eviction changes nothing, so it is retried when something else changes (the next
//! step, or an `advance`), as Koordinator's controller retries on its requeue period.

use std::sync::Arc;

use berth_api::k8s_openapi::api::core::v1::Pod;
use berth_api::migration::PodMigrationJob;
use berth_api::reservation::Reservation;
use berth_core::migration::{self, Action, MigrationArgs, MigrationView};
use berth_core::time::Time;
use berth_core::{Kind, Object, ObjectKey};

use crate::store::Store;

/// The store as the controller's view.
pub(crate) struct View<'a>(pub(crate) &'a Store);

impl MigrationView for View<'_> {
    fn pod(&self, namespace: &str, name: &str) -> Option<&Pod> {
        self.0.pod(&ObjectKey::pod(namespace, name)).map(|p| &**p)
    }

    fn pods(&self) -> Box<dyn Iterator<Item = &Pod> + '_> {
        Box::new(self.0.of_kind(Kind::Pod).filter_map(|o| match o {
            Object::Pod(p) => Some(&**p),
            _ => None,
        }))
    }

    fn reservation(&self, name: &str) -> Option<&Reservation> {
        self.0.reservation(name).map(|r| &**r)
    }
}

/// The jobs in the store.
pub(crate) fn jobs(store: &Store) -> Vec<Arc<PodMigrationJob>> {
    store
        .of_kind(Kind::PodMigrationJob)
        .filter_map(|o| match o {
            Object::PodMigrationJob(j) => Some(j.clone()),
            _ => None,
        })
        .collect()
}

/// One pass of the controller over the store's jobs (nothing when there are none).
pub(crate) fn reconcile(store: &Store, now: Time, args: &MigrationArgs) -> Vec<Action> {
    let jobs = jobs(store);
    if jobs.is_empty() {
        return Vec::new();
    }
    migration::reconcile(&jobs, &View(store), now, args)
}

/// One pass of seed 004's reserved-CPU descheduler (see
/// [`berth_core::migration::reserved_cpus`]) over the store: the jobs to create, and the
/// nodes whose opt-in it cannot read.
pub(crate) fn reserved_cpu_jobs(store: &Store) -> migration::reserved_cpus::Planned {
    use berth_core::migration::reserved_cpus::{plan, ANNOTATION_RESERVED_CPUS_MIGRATION};
    let opted_in = store.of_kind(Kind::Node).filter_map(|o| match o {
        Object::Node(n)
            if n.metadata
                .annotations
                .as_ref()
                .is_some_and(|a| a.contains_key(ANNOTATION_RESERVED_CPUS_MIGRATION)) =>
        {
            Some(&**n)
        }
        _ => None,
    });
    let with_nrt: Vec<_> = opted_in
        .map(|n| {
            let name = n.metadata.name.as_deref().unwrap_or_default();
            let nrt = match store.get(&ObjectKey::cluster(Kind::NodeResourceTopology, name)) {
                Some(Object::NodeResourceTopology(t)) => Some(&**t),
                _ => None,
            };
            (n, nrt)
        })
        .collect();
    if with_nrt.is_empty() {
        return migration::reserved_cpus::Planned::default();
    }
    let pods: Vec<&Pod> = store
        .of_kind(Kind::Pod)
        .filter_map(|o| match o {
            Object::Pod(p) => Some(&**p),
            _ => None,
        })
        .collect();
    plan(with_nrt, &pods, &jobs(store))
}

/// The job named `name`.
pub(crate) fn job(store: &Store, name: &str) -> Option<Arc<PodMigrationJob>> {
    match store.get(&ObjectKey::cluster(Kind::PodMigrationJob, name)) {
        Some(Object::PodMigrationJob(j)) => Some(j.clone()),
        _ => None,
    }
}

/// One PodMigrationJob check of a Scenario's `expect` (an extension of the contract). A
/// field left out is not checked.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobExpectation {
    /// The job's name.
    pub name: String,
    /// `status.phase`.
    #[serde(default)]
    pub phase: Option<String>,
    /// `status.reason` (`""` for none).
    #[serde(default)]
    pub reason: Option<String>,
    /// A substring of `status.message`.
    #[serde(default)]
    pub message: Option<String>,
    /// `status.nodeName`.
    #[serde(default)]
    pub node: Option<String>,
    /// `status.podRef.name`: the replacement pod.
    #[serde(default)]
    pub pod: Option<String>,
}

/// Checks `want` against the store's jobs; a line per failed check.
pub(crate) fn check(store: &Store, want: &[JobExpectation], failures: &mut Vec<String>) {
    for e in want {
        let Some(j) = job(store, &e.name) else {
            failures.push(format!(
                "podmigrationjob {}: expected to exist, found no such job",
                e.name
            ));
            continue;
        };
        let status = j.status.clone().unwrap_or_default();
        let pod = status
            .pod_ref
            .as_ref()
            .and_then(|p| p.name.clone())
            .unwrap_or_default();
        let fields = [
            ("phase", &e.phase, &status.phase),
            ("reason", &e.reason, &status.reason),
            ("node", &e.node, &status.node_name),
            ("pod", &e.pod, &pod),
        ];
        for (field, want, got) in fields {
            if let Some(want) = want.as_ref().filter(|w| *w != got) {
                failures.push(format!(
                    "podmigrationjob {}: {field}: expected {want:?}, found {got:?}",
                    e.name
                ));
            }
        }
        if let Some(want) = e.message.as_ref().filter(|w| !status.message.contains(*w)) {
            failures.push(format!(
                "podmigrationjob {}: message: expected to contain {want:?}, found {:?}",
                e.name, status.message
            ));
        }
    }
}

/// `berth explain podmigrationjob/NAME` (also `pmj/NAME`): the job's phase and what it waits
/// for now, as text. `None` when `target` names no job kind; `Err` when there is no such job.
pub fn explain(store: &Store, target: &str) -> Option<Result<String, String>> {
    let (kind, name) = target.split_once('/')?;
    let kind = kind.to_ascii_lowercase();
    if !matches!(
        kind.as_str(),
        "pmj"
            | "podmigrationjob"
            | "podmigrationjobs"
            | "podmigrationjob.scheduling.koordinator.sh"
    ) {
        return None;
    }
    let Some(j) = job(store, name) else {
        return Some(Err(format!("podmigrationjob {name:?} not found")));
    };
    let status = j.status.clone().unwrap_or_default();
    let phase = if status.phase.is_empty() {
        "Pending"
    } else {
        status.phase.as_str()
    };
    let mut text = format!("PodMigrationJob {name}: {phase}");
    if !status.reason.is_empty() {
        text.push_str(&format!(" ({})", status.reason));
    }
    text.push('\n');
    if !status.message.is_empty() {
        text.push_str(&format!("  {}\n", status.message));
    }
    match migration::waiting_for(&j, &View(store)) {
        Some(w) => text.push_str(&format!("Waiting for: {w}\n")),
        None => text.push_str("Ended: nothing to wait for.\n"),
    }
    Some(Ok(text))
}

#[cfg(test)]
mod tests;
