//! `berth reserve`: capacity for a whole workload before its pods exist. One Reservation per
//! replica from the workload's pod template, owned by the workload's pods (its selector, in
//! its namespace), `allocateOnce` so each pod takes one, and all of them in one gang
//! (Koordinator's lightweight gang annotations on the template) so they are placed all
//! together or not at all. [`plan`] builds the objects from the workload as the API server
//! returns it; [`Progress`] reads the Reservations' status while the command waits.
//!
//! Reservations are cluster-scoped and the workload is namespaced, so no owner reference
//! ties them (the garbage collector refuses a namespaced owner of a cluster-scoped object);
//! they end by their `ttl`, or when deleted by name (`<namespace>-<workload>-<i>`).

use std::collections::BTreeMap;

use berth_api::k8s_openapi::api::core::v1::{ObjectReference, PodTemplateSpec};
use berth_api::k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use berth_api::reservation::{
    condition, Reservation, ReservationOwner, ReservationPodTemplate, ReservationSpec,
};
use berth_api::GoDuration;
use serde_json::Value;

/// Koordinator's lightweight gang: the gang's name on each member.
pub const ANNOTATION_GANG_NAME: &str = "gang.scheduling.koordinator.sh/name";
/// Koordinator's lightweight gang: how many members must be placed together.
pub const ANNOTATION_GANG_MIN_AVAILABLE: &str = "gang.scheduling.koordinator.sh/min-available";
/// The label naming the workload a Reservation was made for (`Deployment.web`).
pub const LABEL_RESERVED_FOR: &str = "reservation.berth.dev/reserved-for";

/// Why `berth reserve` cannot build its Reservations.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ReserveError {
    /// The target is not `KIND/NAME`.
    #[error("{0:?}: expected KIND/NAME, e.g. deployment/web")]
    Target(String),
    /// A kind without a pod template.
    #[error("{0:?}: not a workload kind with a pod template (deployment, replicaset, statefulset, daemonset, job, cronjob, replicationcontroller)")]
    Kind(String),
    /// A field of the workload is missing or not what its schema says.
    #[error("{kind}/{name}: {field}: {message}")]
    Field {
        /// The workload's kind.
        kind: String,
        /// Its name.
        name: String,
        /// The field path.
        field: String,
        /// What is wrong.
        message: String,
    },
    /// No replica count: the workload has none and `--replicas` was not given.
    #[error("{kind}/{name} has no replica count: give --replicas")]
    NoReplicas {
        /// The workload's kind.
        kind: String,
        /// Its name.
        name: String,
    },
}

/// A workload kind `berth reserve` reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkloadKind {
    /// The kind, as the API spells it.
    pub kind: &'static str,
    /// `group/version` (`v1` for the core group).
    pub api_version: &'static str,
    /// The resource's plural.
    pub plural: &'static str,
    /// Where the pod template is.
    template: &'static [&'static str],
    /// Where the replica count is, if the kind has one.
    replicas: Option<&'static [&'static str]>,
    /// Where the pod selector is, if the kind has one the user writes.
    selector: Option<&'static [&'static str]>,
}

const KINDS: &[(&[&str], WorkloadKind)] = &[
    (
        &["deployment", "deployments", "deploy"],
        WorkloadKind {
            kind: "Deployment",
            api_version: "apps/v1",
            plural: "deployments",
            template: &["spec", "template"],
            replicas: Some(&["spec", "replicas"]),
            selector: Some(&["spec", "selector"]),
        },
    ),
    (
        &["replicaset", "replicasets", "rs"],
        WorkloadKind {
            kind: "ReplicaSet",
            api_version: "apps/v1",
            plural: "replicasets",
            template: &["spec", "template"],
            replicas: Some(&["spec", "replicas"]),
            selector: Some(&["spec", "selector"]),
        },
    ),
    (
        &["statefulset", "statefulsets", "sts"],
        WorkloadKind {
            kind: "StatefulSet",
            api_version: "apps/v1",
            plural: "statefulsets",
            template: &["spec", "template"],
            replicas: Some(&["spec", "replicas"]),
            selector: Some(&["spec", "selector"]),
        },
    ),
    (
        &["daemonset", "daemonsets", "ds"],
        WorkloadKind {
            kind: "DaemonSet",
            api_version: "apps/v1",
            plural: "daemonsets",
            template: &["spec", "template"],
            replicas: None,
            selector: Some(&["spec", "selector"]),
        },
    ),
    (
        &["job", "jobs"],
        WorkloadKind {
            kind: "Job",
            api_version: "batch/v1",
            plural: "jobs",
            template: &["spec", "template"],
            replicas: Some(&["spec", "parallelism"]),
            selector: Some(&["spec", "selector"]),
        },
    ),
    (
        &["cronjob", "cronjobs", "cj"],
        WorkloadKind {
            kind: "CronJob",
            api_version: "batch/v1",
            plural: "cronjobs",
            template: &["spec", "jobTemplate", "spec", "template"],
            replicas: Some(&["spec", "jobTemplate", "spec", "parallelism"]),
            selector: None,
        },
    ),
    (
        &["replicationcontroller", "replicationcontrollers", "rc"],
        WorkloadKind {
            kind: "ReplicationController",
            api_version: "v1",
            plural: "replicationcontrollers",
            template: &["spec", "template"],
            replicas: Some(&["spec", "replicas"]),
            selector: Some(&["spec", "selector"]),
        },
    ),
];

/// Reads `KIND/NAME` (kind as kubectl takes it: `deployment`, `deploy`, `sts`, ...).
pub fn parse_target(target: &str) -> Result<(WorkloadKind, String), ReserveError> {
    let (kind, name) = target
        .split_once('/')
        .filter(|(k, n)| !k.is_empty() && !n.is_empty() && !n.contains('/'))
        .ok_or_else(|| ReserveError::Target(target.to_string()))?;
    let lower = kind.to_ascii_lowercase();
    let lower = lower.split('.').next().unwrap_or_default();
    KINDS
        .iter()
        .find(|(names, _)| names.contains(&lower))
        .map(|(_, k)| (*k, name.to_string()))
        .ok_or_else(|| ReserveError::Kind(kind.to_string()))
}

/// What `berth reserve` creates.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// The gang's name (`<workload>-reserve`, in the workload's namespace).
    pub gang: String,
    /// The Reservations, one per replica.
    pub reservations: Vec<Reservation>,
}

/// The Reservations for `replicas` (or the workload's own count) replicas of `workload`
/// (the object as the API server returns it), each with `ttl` (the API server's default
/// `24h` when `None`).
pub fn plan(
    kind: WorkloadKind,
    workload: &Value,
    replicas: Option<u32>,
    ttl: Option<GoDuration>,
) -> Result<Plan, ReserveError> {
    let name = str_at(workload, &["metadata", "name"]).unwrap_or_default();
    let namespace = str_at(workload, &["metadata", "namespace"]).unwrap_or("default");
    let field = |path: &[&str], message: String| ReserveError::Field {
        kind: kind.kind.to_string(),
        name: name.to_string(),
        field: path.join("."),
        message,
    };
    let raw =
        at(workload, kind.template).ok_or_else(|| field(kind.template, "Required value".into()))?;
    let template: PodTemplateSpec =
        serde_json::from_value(raw.clone()).map_err(|e| field(kind.template, e.to_string()))?;
    let count = match replicas {
        Some(n) => n,
        None => match kind.replicas.and_then(|p| at(workload, p)) {
            Some(v) => v
                .as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .ok_or_else(|| {
                    field(
                        kind.replicas.unwrap_or_default(),
                        format!("not a replica count: {v}"),
                    )
                })?,
            None if kind.replicas.is_some() => 1,
            None => {
                return Err(ReserveError::NoReplicas {
                    kind: kind.kind.to_string(),
                    name: name.to_string(),
                })
            }
        },
    };
    let selector = owner_selector(kind, workload, &template).map_err(|(p, m)| field(p, m))?;
    let gang = format!("{name}-reserve");
    let reservations = (0..count)
        .map(|i| {
            reservation(
                kind,
                name,
                namespace,
                &template,
                &selector,
                &gang,
                count,
                i,
                ttl.clone(),
            )
        })
        .collect();
    Ok(Plan { gang, reservations })
}

/// The pods a workload's Reservations are for: its selector, else its template's labels.
fn owner_selector(
    kind: WorkloadKind,
    workload: &Value,
    template: &PodTemplateSpec,
) -> Result<LabelSelector, (&'static [&'static str], String)> {
    if let Some(path) = kind.selector {
        if let Some(v) = at(workload, path) {
            let is_label_selector =
                v.get("matchLabels").is_some() || v.get("matchExpressions").is_some();
            if is_label_selector {
                return serde_json::from_value(v.clone()).map_err(|e| (path, e.to_string()));
            }
            // A ReplicationController's selector is a plain map.
            let labels: BTreeMap<String, String> =
                serde_json::from_value(v.clone()).map_err(|e| (path, e.to_string()))?;
            return Ok(LabelSelector {
                match_labels: Some(labels),
                ..LabelSelector::default()
            });
        }
    }
    let labels = template
        .metadata
        .as_ref()
        .and_then(|m| m.labels.clone())
        .filter(|l| !l.is_empty())
        .ok_or((
            kind.template,
            "the pod template has no labels to own the Reservations by".to_string(),
        ))?;
    Ok(LabelSelector {
        match_labels: Some(labels),
        ..LabelSelector::default()
    })
}

#[allow(clippy::too_many_arguments)]
fn reservation(
    kind: WorkloadKind,
    name: &str,
    namespace: &str,
    template: &PodTemplateSpec,
    selector: &LabelSelector,
    gang: &str,
    count: u32,
    index: u32,
    ttl: Option<GoDuration>,
) -> Reservation {
    let mut pod = template.clone();
    let meta = pod.metadata.get_or_insert_with(ObjectMeta::default);
    meta.namespace = Some(namespace.to_string());
    let annotations = meta.annotations.get_or_insert_with(BTreeMap::new);
    annotations.insert(ANNOTATION_GANG_NAME.into(), gang.to_string());
    annotations.insert(ANNOTATION_GANG_MIN_AVAILABLE.into(), count.to_string());
    let mut labels = BTreeMap::new();
    let reserved_for = format!("{}.{name}", kind.kind);
    if reserved_for.len() <= 63 {
        labels.insert(LABEL_RESERVED_FOR.to_string(), reserved_for);
    }
    let mut r = Reservation {
        metadata: ObjectMeta {
            name: Some(format!("{namespace}-{name}-{index}")),
            labels: Some(labels),
            ..ObjectMeta::default()
        },
        spec: ReservationSpec {
            template: Some(ReservationPodTemplate::from(pod)),
            owners: vec![ReservationOwner {
                object: Some(ObjectReference {
                    namespace: Some(namespace.to_string()),
                    ..ObjectReference::default()
                }),
                label_selector: Some(selector.clone()),
                ..ReservationOwner::default()
            }],
            ttl,
            allocate_once: Some(true),
            ..ReservationSpec::default()
        },
        status: None,
    };
    r.apply_defaults();
    r
}

fn at<'a>(v: &'a Value, path: &[&str]) -> Option<&'a Value> {
    path.iter()
        .try_fold(v, |v, k| v.get(k))
        .filter(|v| !v.is_null())
}

fn str_at<'a>(v: &'a Value, path: &[&str]) -> Option<&'a str> {
    at(v, path)?.as_str()
}

/// Where one Reservation stands, read from its `status`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Standing {
    /// Not created yet, or not looked at by a scheduler yet.
    Waiting,
    /// `Available` on this node.
    Available(String),
    /// The scheduler found no place: its `Scheduled=False` message.
    Unschedulable(String),
    /// Ended (`Succeeded`, `Failed`): its phase.
    Ended(String),
}

/// A Reservation's standing, from the object as the API server returns it.
pub fn standing(reservation: &Value) -> Standing {
    let status = reservation.get("status");
    let phase = status
        .and_then(|s| s.get("phase"))
        .and_then(Value::as_str)
        .unwrap_or_default();
    match phase {
        "Available" => Standing::Available(
            status
                .and_then(|s| s.get("nodeName"))
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
        ),
        "Succeeded" | "Failed" => Standing::Ended(phase.to_string()),
        _ => {
            let unschedulable = status
                .and_then(|s| s.get("conditions"))
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .find(|c| {
                    c.get("type").and_then(Value::as_str) == Some(condition::SCHEDULED)
                        && c.get("status").and_then(Value::as_str) == Some(condition::FALSE)
                });
            match unschedulable {
                Some(c) => Standing::Unschedulable(
                    c.get("message")
                        .and_then(Value::as_str)
                        .unwrap_or("unschedulable")
                        .to_string(),
                ),
                None => Standing::Waiting,
            }
        }
    }
}

/// The gang's progress: how many are Available, and the first member that is not with why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Progress {
    /// Members `Available`.
    pub available: usize,
    /// Members in all.
    pub total: usize,
    /// The first member (by name) that is not Available, and where it stands.
    pub first_pending: Option<(String, Standing)>,
}

impl Progress {
    /// Sums up `standings` (`(name, standing)`, in name order).
    pub fn of(standings: &[(String, Standing)]) -> Self {
        let available = standings
            .iter()
            .filter(|(_, s)| matches!(s, Standing::Available(_)))
            .count();
        let first_pending = standings
            .iter()
            .find(|(_, s)| !matches!(s, Standing::Available(_)))
            .cloned();
        Self {
            available,
            total: standings.len(),
            first_pending,
        }
    }

    /// Every member is Available.
    pub fn done(&self) -> bool {
        self.available == self.total
    }

    /// A member ended before all were Available: waiting longer cannot help.
    pub fn failed(&self) -> bool {
        matches!(self.first_pending, Some((_, Standing::Ended(_))))
    }

    /// One line: `3/8 Available` and, when some are not, why the first is not.
    pub fn line(&self) -> String {
        let mut out = format!("{}/{} Available", self.available, self.total);
        if let Some((name, s)) = &self.first_pending {
            let why = match s {
                Standing::Waiting => "waiting for the scheduler".to_string(),
                Standing::Unschedulable(m) => m.clone(),
                Standing::Ended(phase) => format!("ended {phase}"),
                Standing::Available(_) => String::new(),
            };
            out.push_str(&format!("; {name}: {why}"));
        }
        out
    }
}

#[cfg(test)]
mod tests;
