//! The objects the workload creates, shaped as scheduler_perf's templates
//! (`config/templates/node-default.yaml`, `pod-default.yaml`), and the slim views the
//! harness reads back: only the fields it needs are decoded, so that its own CPU use stays
//! small next to the schedulers'.

use std::borrow::Cow;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::{ClusterResourceScope, NamespaceResourceScope};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::case::OWNER_GROUPS;

/// The container image of every pod (never pulled: no kubelet runs).
pub const IMAGE: &str = "registry.k8s.io/pause:3.10";
/// The annotation berth (as Koordinator) writes on a pod allocated from a reservation.
pub const RESERVATION_ALLOCATED: &str = "scheduling.koordinator.sh/reservation-allocated";
/// The reservations' API group.
pub const RESERVATION_GROUP: &str = "scheduling.koordinator.sh";

/// scheduler_perf's default node: 4 CPU, 32Gi, 110 pods, Ready, with the hostname label a
/// kubelet sets.
pub fn node(name: &str) -> Value {
    let resources = json!({"cpu": "4", "memory": "32Gi", "pods": "110"});
    json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {
            "kubernetes.io/hostname": name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
        }},
        "spec": {},
        "status": {
            "capacity": resources,
            "allocatable": resources,
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                            "message": "berth-clusterbench: no kubelet runs"}],
            "phase": "Running",
        },
    })
}

/// The default pod's spec: one pause container requesting and limited to 100m / 500Mi.
fn pod_spec() -> Value {
    let resources = json!({"cpu": "100m", "memory": "500Mi"});
    json!({
        "containers": [{
            "name": "pause",
            "image": IMAGE,
            "ports": [{"containerPort": 80}],
            "resources": {"requests": resources, "limits": resources},
        }],
    })
}

/// A pod no node can take (its node selector names a label no node has): the event flood
/// of the `flood-500` case, retried by a scheduler that starts over a backlog.
pub fn unschedulable_pod(namespace: &str, name: &str) -> Value {
    let mut spec = pod_spec();
    spec["nodeSelector"] = json!({"berth.dev/clusterbench": "nowhere"});
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    })
}

/// scheduler_perf's default pod, with `labels`.
pub fn pod(namespace: &str, name: &str, labels: &[(&str, &str)]) -> Value {
    let labels: serde_json::Map<String, Value> = labels
        .iter()
        .map(|(k, v)| ((*k).to_string(), Value::from(*v)))
        .collect();
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": pod_spec(),
    })
}

/// Reservation `i`: the default pod's resources, owned by pods labelled
/// `app=owner-<i mod OWNER_GROUPS>`, `allocateOnce` (the default).
pub fn reservation(i: usize) -> Value {
    json!({
        "apiVersion": format!("{RESERVATION_GROUP}/v1alpha1"),
        "kind": "Reservation",
        "metadata": {"name": reservation_name(i)},
        "spec": {
            "template": {
                "metadata": {"labels": {"app": "reserved"}},
                "spec": {"schedulerName": "default-scheduler", "containers": pod_spec()["containers"]},
            },
            "owners": [{"labelSelector": {"matchLabels": {"app": format!("owner-{}", i % OWNER_GROUPS)}}}],
            "ttl": "1h",
        },
    })
}

/// The name of reservation `i`.
pub fn reservation_name(i: usize) -> String {
    format!("reservation-{i:05}")
}

/// The metadata fields the harness (and kube's watcher, which follows resourceVersion)
/// needs; the rest, `managedFields` above all, is skipped unparsed.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SlimMeta {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    namespace: Option<String>,
    #[serde(default)]
    uid: Option<String>,
    #[serde(default)]
    resource_version: Option<String>,
    #[serde(default)]
    annotations: Option<std::collections::BTreeMap<String, String>>,
}

fn slim_meta<'de, D: serde::Deserializer<'de>>(d: D) -> Result<ObjectMeta, D::Error> {
    let m = SlimMeta::deserialize(d)?;
    Ok(ObjectMeta {
        name: m.name,
        namespace: m.namespace,
        uid: m.uid,
        resource_version: m.resource_version,
        annotations: m.annotations,
        ..ObjectMeta::default()
    })
}

/// A pod as the harness reads it: name and `spec.nodeName`.
#[derive(Debug, Clone, Deserialize)]
pub struct PodView {
    /// The metadata: name, namespace, uid, resourceVersion and annotations only.
    #[serde(deserialize_with = "slim_meta")]
    pub metadata: ObjectMeta,
    /// The spec, of which only `nodeName`.
    #[serde(default)]
    pub spec: Option<PodViewSpec>,
    /// The status, of which only the conditions' types and statuses.
    #[serde(default)]
    pub status: Option<PodViewStatus>,
}

/// The part of a pod's status the harness reads.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct PodViewStatus {
    /// The conditions.
    #[serde(default)]
    pub conditions: Vec<PodViewCondition>,
}

/// A condition's type and status.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct PodViewCondition {
    /// `PodScheduled`, `Ready`, ...
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    #[serde(default)]
    pub status: String,
}

/// The part of a pod's spec the harness reads.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct PodViewSpec {
    /// The node the pod is bound to.
    #[serde(default, rename = "nodeName")]
    pub node_name: Option<String>,
}

impl PodView {
    /// The reservation the pod was allocated from (`scheduling.koordinator.sh/reservation-allocated`).
    pub fn reservation_allocated(&self) -> bool {
        self.metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(RESERVATION_ALLOCATED))
    }

    /// Whether a scheduler has written `PodScheduled=False` on the pod.
    pub fn found_unschedulable(&self) -> bool {
        self.status.as_ref().is_some_and(|s| {
            s.conditions
                .iter()
                .any(|c| c.type_ == "PodScheduled" && c.status == "False")
        })
    }

    /// The node, if bound.
    pub fn node(&self) -> Option<&str> {
        self.spec
            .as_ref()
            .and_then(|s| s.node_name.as_deref())
            .filter(|n| !n.is_empty())
    }
}

impl kube::Resource for PodView {
    type DynamicType = ();
    type Scope = NamespaceResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        "Pod".into()
    }
    fn group(_: &()) -> Cow<'_, str> {
        "".into()
    }
    fn version(_: &()) -> Cow<'_, str> {
        "v1".into()
    }
    fn plural(_: &()) -> Cow<'_, str> {
        "pods".into()
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// A reservation as the harness reads it: name and `status.phase`.
#[derive(Debug, Clone, Deserialize)]
pub struct ReservationView {
    /// The metadata: name, namespace, uid, resourceVersion and annotations only.
    #[serde(deserialize_with = "slim_meta")]
    pub metadata: ObjectMeta,
    /// The status, of which only the phase.
    #[serde(default)]
    pub status: Option<ReservationViewStatus>,
}

/// The part of a reservation's status the harness reads.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct ReservationViewStatus {
    /// `Pending`, `Available`, `Succeeded`, `Waiting` or `Failed`.
    #[serde(default)]
    pub phase: Option<String>,
}

impl ReservationView {
    /// The phase, empty before berth wrote one.
    pub fn phase(&self) -> &str {
        self.status
            .as_ref()
            .and_then(|s| s.phase.as_deref())
            .unwrap_or("")
    }
}

impl kube::Resource for ReservationView {
    type DynamicType = ();
    type Scope = ClusterResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        "Reservation".into()
    }
    fn group(_: &()) -> Cow<'_, str> {
        RESERVATION_GROUP.into()
    }
    fn version(_: &()) -> Cow<'_, str> {
        "v1alpha1".into()
    }
    fn plural(_: &()) -> Cow<'_, str> {
        "reservations".into()
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}
