//! Seed 004's reserved-cores descheduler in a cluster
//! ([`berth_core::migration::reserved_cpus`]): each pass, the pods bound to a node that opts
//! in with `node.berth.dev/reserved-cpus-migration` and hold CPUs the node now reserves get
//! a PodMigrationJob each, which the same pass's controller then runs as any other job. The
//! planner reads the Nodes and their NodeResourceTopologies (the CPU layout, koordlet's copy
//! of the reservation) from `berth migrate`'s own watches.
//!
//! Job names are fixed by the pod (`reserved-cpus-<namespace>-<pod>`) and a pod with a job in
//! any phase gets none, so a job the watch has not shown yet is at worst created twice and
//! refused the second time (`AlreadyExists`), never duplicated.

use std::collections::BTreeMap;
use std::sync::Arc;

use berth_api::migration::PodMigrationJob;
use berth_api::nrt::NodeResourceTopology;
use berth_core::migration::reserved_cpus;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DynamicObject, PostParams};
use kube::Client;

use super::{job_resource, Outcome};
use crate::retry::{classify, Class};

/// The jobs to create now: the planner over the opted-in nodes (with their NRT, if any),
/// the pods and the jobs there are.
pub(super) fn plan(
    nodes: &BTreeMap<String, Node>,
    nrts: &BTreeMap<String, NodeResourceTopology>,
    pods: &BTreeMap<String, Pod>,
    jobs: &[Arc<PodMigrationJob>],
) -> reserved_cpus::Planned {
    let opted_in: Vec<(&Node, Option<&NodeResourceTopology>)> = nodes
        .iter()
        .filter(|(_, n)| {
            n.metadata
                .annotations
                .as_ref()
                .is_some_and(|a| a.contains_key(reserved_cpus::ANNOTATION_RESERVED_CPUS_MIGRATION))
        })
        .map(|(name, n)| (n, nrts.get(name)))
        .collect();
    if opted_in.is_empty() {
        return reserved_cpus::Planned::default();
    }
    let pods: Vec<&Pod> = pods.values().collect();
    reserved_cpus::plan(opted_in, &pods, jobs)
}

/// Creates the planned jobs; a node whose opt-in cannot be read is logged (once per pass).
pub(super) async fn create(
    client: &Client,
    planned: reserved_cpus::Planned,
    fence: &crate::leader::Fence,
    outcome: &mut Outcome,
) {
    for (node, message) in &planned.refused {
        tracing::warn!(
            node,
            message,
            "reserved-CPU migration refused; the node is left alone"
        );
    }
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &job_resource());
    for job in planned.jobs {
        // Every write of a leader is fenced by its lease's renew deadline.
        if !fence.allows() {
            tracing::warn!("the leader lease's renew deadline passed mid-pass; jobs not created");
            return;
        }
        let name = job.metadata.name.clone().unwrap_or_default();
        let obj: DynamicObject = match serde_json::to_value(&job).and_then(serde_json::from_value) {
            Ok(o) => o,
            Err(e) => {
                outcome.failed += 1;
                tracing::error!(job = name, error = %e, "job cannot be encoded");
                continue;
            }
        };
        match api.create(&PostParams::default(), &obj).await {
            Ok(_) => {
                outcome.jobs_created += 1;
                tracing::info!(job = name, "pod on reserved CPUs: PodMigrationJob created");
            }
            Err(e) if classify(&e) == Class::Conflict => {}
            Err(e) => {
                outcome.failed += 1;
                tracing::warn!(job = name, error = %e, "creating the job failed");
            }
        }
    }
}
