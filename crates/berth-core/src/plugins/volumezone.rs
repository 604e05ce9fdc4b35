//! VolumeZone, as kube-scheduler 1.35 (`pkg/scheduler/framework/plugins/volumezone`): a
//! pod whose bound volumes carry zone or region labels (GA or beta keys; a multi-zone
//! value is `a__b`) only fits nodes in one of those zones. A node with no zone or region
//! label is not constrained. Unbound `WaitForFirstConsumer` claims are left to
//! VolumeBinding.

use crate::cache::Cluster;
use crate::framework::events::{kind, EventsToRegister};
use crate::framework::{CycleState, Plugin, Points, Status};
use crate::model::node::NodeInfo;
use crate::model::pod::PodInfo;
use crate::object::{Kind, ObjectKey};
use crate::plugins::volumebinding::claims::{claim_class, claim_volume_name, class_delays_binding};

/// `ErrReasonConflict`.
pub const ERR_REASON_CONFLICT: &str = "node(s) had no available volume zone";

const BETA_ZONE: &str = "failure-domain.beta.kubernetes.io/zone";
const BETA_REGION: &str = "failure-domain.beta.kubernetes.io/region";
const ZONE: &str = "topology.kubernetes.io/zone";
const REGION: &str = "topology.kubernetes.io/region";

/// The labels VolumeZone reads, in its order.
pub const TOPOLOGY_LABELS: [&str; 4] = [BETA_ZONE, BETA_REGION, ZONE, REGION];

fn to_ga(label: &str) -> &str {
    match label {
        BETA_REGION => REGION,
        BETA_ZONE => ZONE,
        other => other,
    }
}

/// One topology label of a volume: key and allowed values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PvTopology {
    key: &'static str,
    values: Vec<String>,
}

/// Per-cycle state: the topologies of the pod's bound volumes.
#[derive(Debug, Clone, Default)]
pub struct State {
    topologies: Vec<PvTopology>,
}

/// `getPVTopologies`: a label whose value does not parse (`a____b`) is ignored.
pub fn pv_topologies(
    pv: &berth_api::k8s_openapi::api::core::v1::PersistentVolume,
) -> Vec<PvTopology> {
    let mut out = Vec::new();
    let Some(labels) = pv.metadata.labels.as_ref() else {
        return out;
    };
    for key in TOPOLOGY_LABELS {
        let Some(value) = labels.get(key) else {
            continue;
        };
        let values: Vec<String> = value.split("__").map(|z| z.trim().to_string()).collect();
        if values.iter().any(String::is_empty) {
            continue;
        }
        out.push(PvTopology { key, values });
    }
    out
}

/// The VolumeZone plugin.
#[derive(Debug)]
pub struct VolumeZone;

fn pv_by_pod(cx: &Cluster, pod: &PodInfo) -> Result<Vec<PvTopology>, Status> {
    let mut out = Vec::new();
    for v in pod.spec().volumes.iter().flatten() {
        let Some(c) = &v.persistent_volume_claim else {
            continue;
        };
        let name = &c.claim_name;
        if name.is_empty() {
            return Err(Status::unresolvable("PersistentVolumeClaim had no name"));
        }
        let key = ObjectKey::new(Kind::PersistentVolumeClaim, &pod.key.namespace, name);
        let Some(pvc) = cx.cache.pvcs.get(&key) else {
            return Err(Status::unresolvable(
                crate::plugins::volumerestrictions::pvc_not_found(name),
            ));
        };
        let pv_name = claim_volume_name(pvc);
        if pv_name.is_empty() {
            let class = claim_class(pvc);
            if class.is_empty() {
                return Err(Status::unresolvable(
                    "PersistentVolumeClaim had no pv name and storageClass name",
                ));
            }
            let Some(sc) = cx.cache.storage_classes.get(class) else {
                return Err(Status::unresolvable(format!(
                    "storageclass.storage.k8s.io {class:?} not found"
                )));
            };
            match class_delays_binding(sc) {
                Err(e) => return Err(Status::unresolvable(e)),
                Ok(true) => continue,
                Ok(false) => return Err(Status::unresolvable("PersistentVolume had no name")),
            }
        }
        let Some(pv) = cx.cache.pvs.get(pv_name) else {
            return Err(Status::unresolvable(format!(
                "persistentvolume {pv_name:?} not found"
            )));
        };
        out.extend(pv_topologies(pv));
    }
    Ok(out)
}

impl Plugin for VolumeZone {
    fn name(&self) -> &'static str {
        super::names::VOLUME_ZONE
    }

    fn points(&self) -> Points {
        Points::PRE_FILTER | Points::FILTER
    }

    fn events_to_register(&self) -> EventsToRegister {
        // With queueing hints (GA), node taint changes are not registered. A claim event
        // concerns only pods that use the claim (ephemeral ones are not read here).
        EventsToRegister::on(&[
            (
                kind::NODE_ADD | kind::NODE_LABEL | kind::PV_TOPOLOGY | kind::STORAGE_CLASS_WFFC,
                None,
            ),
            (kind::PVC, Some(uses_changed_claim)),
        ])
    }

    fn pre_filter(&self, cx: &Cluster, state: &mut CycleState, pod: &PodInfo) -> Status {
        match pv_by_pod(cx, pod) {
            Err(st) => st,
            Ok(t) if t.is_empty() => Status::skip(),
            Ok(topologies) => {
                state.volume_zone = Some(Box::new(State { topologies }));
                Status::success()
            }
        }
    }

    fn filter(&self, _cx: &Cluster, state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> Status {
        let Some(st) = state.volume_zone.as_deref() else {
            return Status::success();
        };
        if !TOPOLOGY_LABELS.iter().any(|l| node.labels.contains_key(*l)) {
            return Status::success();
        }
        for t in &st.topologies {
            let v = node
                .labels
                .get(t.key)
                .or_else(|| node.labels.get(to_ga(t.key)));
            if !v.is_some_and(|v| t.values.iter().any(|x| x == v)) {
                return Status::unresolvable(ERR_REASON_CONFLICT);
            }
        }
        Status::success()
    }
}

/// VolumeZone's hint for claim events: the pod uses the claim (ephemeral ones are not
/// read by this plugin).
fn uses_changed_claim(
    _cx: &Cluster,
    event: &crate::framework::events::ClusterEvent,
    pod: &PodInfo,
) -> bool {
    crate::plugins::volumebinding::claims::uses_claim(event, pod, false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn multi_zone_values_split_and_bad_ones_are_ignored() {
        let pv: berth_api::k8s_openapi::api::core::v1::PersistentVolume =
            serde_json::from_value(json!({
                "metadata": {"name": "pv", "labels": {
                    ZONE: "a__b", REGION: "r____x", "other": "z"
                }}
            }))
            .unwrap();
        assert_eq!(
            pv_topologies(&pv),
            vec![PvTopology {
                key: ZONE,
                values: vec!["a".into(), "b".into()]
            }]
        );
    }
}
