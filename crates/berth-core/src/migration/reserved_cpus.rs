//! Seed 004's descheduler for node-reserved cores: when a node starts reserving CPUs
//! (`node.koordinator.sh/reservation`) that pods already hold, those pods must move. The
//! scheduler only reports them (a `CPUsReservedByNode` Warning, the table's TO EVICT list);
//! a node that opts in with [`ANNOTATION_RESERVED_CPUS_MIGRATION`] has them moved through
//! PodMigrationJobs instead, so the reservation-first controller ([`super::reconcile`])
//! finds each pod room elsewhere before it evicts it, and its arbitration limits pace the
//! moves.
//!
//! Like the migration controller, this reads only API objects (the Node, its
//! NodeResourceTopology's CPU layout, each pod's `resource-status`) and keeps no memory: a
//! pod that already has a job of [`job_name`] (in any phase) gets no second one, so a
//! restarted controller, or the next pass, creates nothing twice, and a job that failed is
//! not retried behind the administrator's back.
//!
//! Order follows the seed's "simplest algorithm": lower priority first, then by namespace
//! and name. Jobs created in one pass carry one creation time; the migration controller
//! takes them in creation order, then by name.

use std::collections::BTreeSet;
use std::sync::Arc;

use berth_api::annotations::{
    AnnotationCodec, CpuTopology, KubeletCpuManagerPolicy, NodeReservation, ResourceStatus,
    ANNOTATION_RESOURCE_STATUS,
};
use berth_api::k8s_openapi::api::core::v1::{Node, ObjectReference, Pod};
use berth_api::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use berth_api::migration::{
    PodMigrationJob, PodMigrationJobSpec, MODE_EVICT_DIRECTLY, MODE_RESERVATION_FIRST,
};
use berth_api::nrt::NodeResourceTopology;

use crate::cpuset::state::concrete_reserved;
use crate::cpuset::{CpuLayout, CpuSet};

/// The node's opt-in: `ReservationFirst` or `EvictDirectly` (the job's mode). Absent: the
/// pods are only reported, as before.
pub const ANNOTATION_RESERVED_CPUS_MIGRATION: &str = "node.berth.dev/reserved-cpus-migration";

/// The `app.kubernetes.io/created-by` value of the jobs made here.
pub const CREATOR: &str = "berth-reserved-cpus";

/// What one pass decided.
#[derive(Debug, Default, PartialEq)]
pub struct Planned {
    /// Jobs to create, in order.
    pub jobs: Vec<PodMigrationJob>,
    /// Nodes whose opt-in is unreadable: `(node, message)`; such a node is left alone.
    pub refused: Vec<(String, String)>,
}

/// The name of the job that moves `pod` off reserved cores.
pub fn job_name(namespace: &str, name: &str) -> String {
    format!("reserved-cpus-{namespace}-{name}")
}

/// One pass: for every opted-in node (`nodes` with their NRT, if any), the pods bound there
/// that hold CPUs the node reserves and have no job yet.
pub fn plan<'a>(
    nodes: impl IntoIterator<Item = (&'a Node, Option<&'a NodeResourceTopology>)>,
    pods: &[&Pod],
    jobs: &[Arc<PodMigrationJob>],
) -> Planned {
    let mut out = Planned::default();
    let has_job: BTreeSet<&str> = jobs
        .iter()
        .filter_map(|j| j.metadata.name.as_deref())
        .collect();
    let mut moves: Vec<(i32, &Pod, &'static str)> = Vec::new();
    for (node, nrt) in nodes {
        let name = node.metadata.name.as_deref().unwrap_or_default();
        let mode = match policy(node) {
            Ok(Some(mode)) => mode,
            Ok(None) => continue,
            Err(message) => {
                out.refused.push((name.to_string(), message));
                continue;
            }
        };
        let reserved = node_reserved(node, nrt);
        if reserved.is_empty() {
            continue;
        }
        for pod in pods.iter().filter(|p| bound_to(p, name)) {
            let (ns, pn) = key(pod);
            if has_job.contains(job_name(ns, pn).as_str()) {
                continue;
            }
            if holds(pod).is_some_and(|cpus| !cpus.is_disjoint(&reserved)) {
                let priority = pod.spec.as_ref().and_then(|s| s.priority).unwrap_or(0);
                moves.push((priority, pod, mode));
            }
        }
    }
    moves.sort_by(|a, b| (a.0, key(a.1)).cmp(&(b.0, key(b.1))));
    out.jobs = moves
        .into_iter()
        .map(|(_, p, mode)| job_for(p, mode))
        .collect();
    out
}

/// The node's opt-in, read strictly: a value other than the two modes names the field.
fn policy(node: &Node) -> Result<Option<&'static str>, String> {
    let value = node
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANNOTATION_RESERVED_CPUS_MIGRATION));
    match value.map(String::as_str) {
        None => Ok(None),
        Some(MODE_RESERVATION_FIRST) => Ok(Some(MODE_RESERVATION_FIRST)),
        Some(MODE_EVICT_DIRECTLY) => Ok(Some(MODE_EVICT_DIRECTLY)),
        Some(other) => Err(format!(
            "annotation {ANNOTATION_RESERVED_CPUS_MIGRATION}: Unsupported value: {other:?}: supported values: \"{MODE_RESERVATION_FIRST}\", \"{MODE_EVICT_DIRECTLY}\""
        )),
    }
}

/// The CPUs `node` reserves, concretely, as the scheduler computes them: the Node's own
/// annotation wins over koordlet's copy on the NRT; an unreadable one reserves nothing
/// here (the scheduler reports it); without a CPU layout only an explicit `reservedCPUs`
/// list is known.
fn node_reserved(node: &Node, nrt: Option<&NodeResourceTopology>) -> CpuSet {
    let own = NodeReservation::from_annotations(node.metadata.annotations.as_ref());
    let copied = || {
        nrt.and_then(|t| {
            NodeReservation::from_annotations(t.metadata.annotations.as_ref())
                .ok()
                .flatten()
        })
    };
    let reservation = match own {
        Err(_) => return CpuSet::new(),
        Ok(Some(r)) => r,
        Ok(None) => match copied() {
            Some(r) => r,
            None => return CpuSet::new(),
        },
    };
    let nrt_annotations = nrt.and_then(|t| t.metadata.annotations.as_ref());
    let layout = CpuTopology::from_annotations(nrt_annotations)
        .ok()
        .flatten()
        .as_ref()
        .and_then(CpuLayout::new);
    match layout {
        Some(layout) => {
            let kubelet = KubeletCpuManagerPolicy::from_annotations(nrt_annotations)
                .ok()
                .flatten()
                .and_then(|k| k.reserved_cpu_ids().ok())
                .map(CpuSet::from)
                .unwrap_or_default();
            concrete_reserved(&layout, &kubelet, &reservation)
        }
        None => reservation
            .reserved_cpu_ids()
            .map(CpuSet::from)
            .unwrap_or_default(),
    }
}

fn key(pod: &Pod) -> (&str, &str) {
    (
        pod.metadata.namespace.as_deref().unwrap_or("default"),
        pod.metadata.name.as_deref().unwrap_or_default(),
    )
}

/// Bound to `node`, not terminating, not finished.
fn bound_to(pod: &Pod, node: &str) -> bool {
    let on_node = pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node);
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    on_node
        && pod.metadata.deletion_timestamp.is_none()
        && !matches!(phase, Some("Succeeded" | "Failed"))
}

/// The CPUs the pod's `resource-status` names (none when absent or unreadable).
fn holds(pod: &Pod) -> Option<CpuSet> {
    let text = pod
        .metadata
        .annotations
        .as_ref()?
        .get(ANNOTATION_RESOURCE_STATUS)?;
    let cpus = ResourceStatus::parse(text).ok()?.cpu_ids().ok()?;
    (!cpus.is_empty()).then(|| CpuSet::from(cpus))
}

fn job_for(pod: &Pod, mode: &str) -> PodMigrationJob {
    let (namespace, name) = key(pod);
    PodMigrationJob {
        metadata: ObjectMeta {
            name: Some(job_name(namespace, name)),
            labels: Some(
                [(
                    super::template::LABEL_CREATED_BY.to_string(),
                    CREATOR.to_string(),
                )]
                .into(),
            ),
            ..ObjectMeta::default()
        },
        spec: PodMigrationJobSpec {
            mode: mode.to_string(),
            pod_ref: Some(ObjectReference {
                namespace: Some(namespace.to_string()),
                name: Some(name.to_string()),
                uid: pod.metadata.uid.clone(),
                ..ObjectReference::default()
            }),
            ..PodMigrationJobSpec::default()
        },
        ..PodMigrationJob::default()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use berth_api::k8s_openapi::api::core::v1::{PodSpec, PodStatus};

    use super::*;

    fn node(name: &str, annotations: &[(&str, &str)]) -> Node {
        Node {
            metadata: ObjectMeta {
                name: Some(name.into()),
                annotations: Some(
                    annotations
                        .iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect::<BTreeMap<_, _>>(),
                ),
                ..ObjectMeta::default()
            },
            ..Node::default()
        }
    }

    fn pod(name: &str, node: &str, cpuset: Option<&str>, priority: i32) -> Pod {
        let annotations = cpuset.map(|c| {
            [(
                ANNOTATION_RESOURCE_STATUS.to_string(),
                format!(r#"{{"cpuset":"{c}"}}"#),
            )]
            .into()
        });
        Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("default".into()),
                uid: Some(format!("uid-{name}")),
                annotations,
                ..ObjectMeta::default()
            },
            spec: Some(PodSpec {
                node_name: Some(node.into()),
                priority: Some(priority),
                ..PodSpec::default()
            }),
            status: Some(PodStatus {
                phase: Some("Running".into()),
                ..PodStatus::default()
            }),
        }
    }

    const RESERVE_0_3: (&str, &str) = (
        "node.koordinator.sh/reservation",
        r#"{"reservedCPUs":"0-3"}"#,
    );

    fn names(p: &Planned) -> Vec<(&str, &str)> {
        p.jobs
            .iter()
            .map(|j| (j.metadata.name.as_deref().unwrap(), j.spec.mode.as_str()))
            .collect()
    }

    #[test]
    fn opted_in_node_moves_holders_of_reserved_cpus_lowest_priority_first() {
        let n = node(
            "n1",
            &[
                RESERVE_0_3,
                (ANNOTATION_RESERVED_CPUS_MIGRATION, "ReservationFirst"),
            ],
        );
        let (a, b, c, d) = (
            pod("a", "n1", Some("2-3"), 100),
            pod("b", "n1", Some("0-1"), 10),
            pod("c", "n1", Some("4-5"), 0),
            pod("d", "n1", None, 0),
        );
        let planned = plan([(&n, None)], &[&a, &b, &c, &d], &[]);
        assert_eq!(
            names(&planned),
            vec![
                ("reserved-cpus-default-b", "ReservationFirst"),
                ("reserved-cpus-default-a", "ReservationFirst"),
            ]
        );
        let job = &planned.jobs[0];
        let pod_ref = job.spec.pod_ref.as_ref().unwrap();
        assert_eq!(pod_ref.name.as_deref(), Some("b"));
        assert_eq!(pod_ref.uid.as_deref(), Some("uid-b"));
    }

    #[test]
    fn nothing_without_the_opt_in_or_with_a_job_already() {
        let plain = node("n1", &[RESERVE_0_3]);
        let a = pod("a", "n1", Some("0"), 0);
        assert_eq!(plan([(&plain, None)], &[&a], &[]), Planned::default());
        let n = node(
            "n1",
            &[
                RESERVE_0_3,
                (ANNOTATION_RESERVED_CPUS_MIGRATION, "EvictDirectly"),
            ],
        );
        let first = plan([(&n, None)], &[&a], &[]);
        assert_eq!(
            names(&first),
            vec![("reserved-cpus-default-a", "EvictDirectly")]
        );
        let existing = [Arc::new(first.jobs[0].clone())];
        assert!(plan([(&n, None)], &[&a], &existing).jobs.is_empty());
    }

    #[test]
    fn pods_elsewhere_terminating_or_finished_are_left_alone() {
        let n = node(
            "n1",
            &[
                RESERVE_0_3,
                (ANNOTATION_RESERVED_CPUS_MIGRATION, "ReservationFirst"),
            ],
        );
        let other = pod("other", "n2", Some("0"), 0);
        let mut done = pod("done", "n1", Some("0"), 0);
        done.status.as_mut().unwrap().phase = Some("Succeeded".into());
        let mut going = pod("going", "n1", Some("0"), 0);
        going.metadata.deletion_timestamp = crate::reservation::status::meta_time(0);
        assert!(plan([(&n, None)], &[&other, &done, &going], &[])
            .jobs
            .is_empty());
    }

    #[test]
    fn an_unknown_opt_in_value_is_refused_by_name_and_moves_nothing() {
        let n = node(
            "n1",
            &[RESERVE_0_3, (ANNOTATION_RESERVED_CPUS_MIGRATION, "Evict")],
        );
        let a = pod("a", "n1", Some("0"), 0);
        let planned = plan([(&n, None)], &[&a], &[]);
        assert!(planned.jobs.is_empty());
        assert_eq!(planned.refused.len(), 1);
        assert!(planned.refused[0]
            .1
            .contains(ANNOTATION_RESERVED_CPUS_MIGRATION));
        assert!(planned.refused[0].1.contains("\"Evict\""));
    }

    #[test]
    fn a_malformed_node_reservation_reserves_nothing_here() {
        let n = node(
            "n1",
            &[
                ("node.koordinator.sh/reservation", "{not json"),
                (ANNOTATION_RESERVED_CPUS_MIGRATION, "ReservationFirst"),
            ],
        );
        let a = pod("a", "n1", Some("0"), 0);
        assert!(plan([(&n, None)], &[&a], &[]).jobs.is_empty());
    }
}
