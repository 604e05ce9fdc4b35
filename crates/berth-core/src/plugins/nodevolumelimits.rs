//! NodeVolumeLimits (CSI): a node takes at most `CSINode.spec.drivers[].allocatable.count`
//! distinct volumes of each CSI driver.
//!
//! berth keeps no PersistentVolume or StorageClass objects, so a claim's driver is its
//! provisioner annotation (`volume.kubernetes.io/storage-provisioner`, or the beta key), and
//! a volume is identified by its claim: two pods using one claim attach one volume. Claims
//! without the annotation are not counted, as kube-scheduler does not count claims whose
//! driver it cannot resolve. Generic ephemeral volumes are not counted either: berth runs no
//! ephemeral-volume controller to create their claims.

use crate::collections::HashMap;
use std::sync::Arc;

use berth_api::k8s_openapi::api::core::v1::PersistentVolumeClaim;
use smallvec::SmallVec;

use crate::cache::Cluster;
use crate::framework::events::{kind, EventsToRegister};
use crate::framework::{CycleState, Plugin, Points, Status};
use crate::model::node::NodeInfo;
use crate::model::pod::PodInfo;
use crate::object::{Kind, ObjectKey};

/// kube-scheduler's `ErrReasonMaxVolumeCountExceeded`.
pub const ERR_REASON_MAX_VOLUME_COUNT_EXCEEDED: &str = "node(s) exceed max volume count";
/// The claim annotation naming its CSI driver.
pub const STORAGE_PROVISIONER: &str = "volume.kubernetes.io/storage-provisioner";
/// The older spelling of [`STORAGE_PROVISIONER`].
pub const BETA_STORAGE_PROVISIONER: &str = "volume.beta.kubernetes.io/storage-provisioner";

/// The CSI driver of a claim, from its provisioner annotation.
pub fn claim_driver(pvc: &PersistentVolumeClaim) -> Option<&str> {
    let a = pvc.metadata.annotations.as_ref()?;
    a.get(STORAGE_PROVISIONER)
        .or_else(|| a.get(BETA_STORAGE_PROVISIONER))
        .map(String::as_str)
        .filter(|d| !d.is_empty())
}

/// Per-cycle state.
#[derive(Debug, Clone, Default)]
pub struct State {
    /// The distinct drivers of the pod's volumes.
    drivers: Vec<Arc<str>>,
    /// The pod's volumes: (index into `drivers`, claim name), deduplicated.
    new_volumes: Vec<(usize, Arc<str>)>,
    /// Namespace -> claim -> index into `drivers`, for every known claim of those drivers,
    /// so Filter counts a node's attached volumes without building keys.
    claims: HashMap<Arc<str>, HashMap<Arc<str>, usize>>,
    /// Set when one of the pod's claims does not exist: every node rejects the pod.
    missing: Option<String>,
}

/// The NodeVolumeLimits plugin.
#[derive(Debug)]
pub struct NodeVolumeLimits;

fn claim_names(pod: &PodInfo) -> impl Iterator<Item = &str> + '_ {
    pod.spec()
        .volumes
        .iter()
        .flatten()
        .filter_map(|v| v.persistent_volume_claim.as_ref())
        .map(|c| c.claim_name.as_str())
}

impl Plugin for NodeVolumeLimits {
    fn name(&self) -> &'static str {
        super::names::NODE_VOLUME_LIMITS
    }

    fn points(&self) -> Points {
        Points::PRE_FILTER | Points::FILTER
    }

    fn events_to_register(&self) -> EventsToRegister {
        // Upstream: pod deletion, node add, claims and CSINodes; reservations hold claims
        // the way pods do.
        EventsToRegister::node_local(&[(
            kind::NODE_ADD
                | kind::NODE_ALLOCATABLE
                | kind::ASSIGNED_POD_DELETE
                | kind::RESERVATION
                | kind::PVC
                | kind::CSI_NODE,
            None,
        )])
    }

    fn pre_filter(&self, cx: &Cluster, state: &mut CycleState, pod: &PodInfo) -> Status {
        let ns = &pod.key.namespace;
        let mut s = State::default();
        let mut any_claim = false;
        for name in claim_names(pod) {
            any_claim = true;
            let key = ObjectKey::new(Kind::PersistentVolumeClaim, ns, name);
            let Some(pvc) = cx.cache.pvcs.get(&key) else {
                s.missing = Some(format!(
                    "looking up PVC {ns}/{name}: {}",
                    super::volumerestrictions::pvc_not_found(name)
                ));
                break;
            };
            let Some(driver) = claim_driver(pvc) else {
                continue;
            };
            let d = match s.drivers.iter().position(|x| **x == *driver) {
                Some(i) => i,
                None => {
                    s.drivers.push(driver.into());
                    s.drivers.len() - 1
                }
            };
            if !s.new_volumes.iter().any(|(_, c)| **c == *name) {
                s.new_volumes.push((d, key.name.clone()));
            }
        }
        if !any_claim || (s.missing.is_none() && s.new_volumes.is_empty()) {
            return Status::skip();
        }
        if s.missing.is_none() {
            for (key, pvc) in &cx.cache.pvcs {
                let Some(driver) = claim_driver(pvc) else {
                    continue;
                };
                if let Some(d) = s.drivers.iter().position(|x| **x == *driver) {
                    s.claims
                        .entry(key.namespace.clone())
                        .or_default()
                        .insert(key.name.clone(), d);
                }
            }
        }
        state.node_volume_limits = Some(Box::new(s));
        Status::success()
    }

    fn filter(&self, cx: &Cluster, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        let Some(s) = state.node_volume_limits.as_ref() else {
            return Status::error("NodeVolumeLimits: PreFilter did not run");
        };
        if let Some(m) = &s.missing {
            // The claim is required to run the pod: no node helps until it exists.
            return Status::unresolvable(m.clone());
        }
        let Some(csi) = cx.cache.csi_nodes.get(&*node.name) else {
            return Status::success();
        };
        for (d, driver) in s.drivers.iter().enumerate() {
            let Some(limit) = csi
                .spec
                .drivers
                .iter()
                .find(|x| *x.name == **driver)
                .and_then(|x| x.allocatable.as_ref()?.count)
            else {
                continue;
            };
            // Distinct claims of this driver already used on the node.
            let mut attached: SmallVec<[(&str, &str); 16]> = SmallVec::new();
            for p in &node.pods {
                let Some(by_claim) = s.claims.get(&*p.key.namespace) else {
                    continue;
                };
                let pns: &str = &p.key.namespace;
                for c in claim_names(p) {
                    if by_claim.get(c) == Some(&d) && !attached.contains(&(pns, c)) {
                        attached.push((pns, c));
                    }
                }
            }
            let new = s
                .new_volumes
                .iter()
                .filter(|(nd, c)| *nd == d && !attached.contains(&(&*pod.key.namespace, &**c)))
                .count();
            if attached.len() + new > usize::try_from(limit).unwrap_or(0) {
                return Status::unschedulable(ERR_REASON_MAX_VOLUME_COUNT_EXCEEDED);
            }
        }
        Status::success()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::Code;
    use crate::testing::{node, pod, PodBuilder};
    use serde_json::{json, Value};

    fn pvc(ns: &str, name: &str, driver: Option<(&str, &str)>) -> Arc<PersistentVolumeClaim> {
        let mut meta = json!({"name": name, "namespace": ns});
        if let Some((k, d)) = driver {
            meta["annotations"] = json!({ k: d });
        }
        Arc::new(serde_json::from_value(json!({"metadata": meta, "spec": {}})).unwrap())
    }

    fn with_claims(name: &str, claims: &[&str]) -> PodBuilder {
        let vols: Vec<Value> = claims
            .iter()
            .enumerate()
            .map(|(i, c)| json!({"name": format!("v{i}"), "persistentVolumeClaim": {"claimName": c}}))
            .collect();
        pod(name).spec("volumes", json!(vols))
    }

    fn csi_node(
        name: &str,
        drivers: &[(&str, Option<i32>)],
    ) -> Arc<berth_api::k8s_openapi::api::storage::v1::CSINode> {
        let ds: Vec<Value> = drivers
            .iter()
            .map(|(d, n)| match n {
                Some(n) => json!({"name": d, "nodeID": name, "allocatable": {"count": n}}),
                None => json!({"name": d, "nodeID": name}),
            })
            .collect();
        Arc::new(
            serde_json::from_value(json!({"metadata": {"name": name}, "spec": {"drivers": ds}}))
                .unwrap(),
        )
    }

    /// A cluster with node `n1`, claims `a`..`e` of `ebs.csi` (`e` via the beta annotation),
    /// `g1` of `gce.csi`, `plain` without a driver, and the given pods placed on `n1`.
    fn cluster(
        limits: Option<&[(&str, Option<i32>)]>,
        placed: &[PodBuilder],
    ) -> (Cluster, NodeInfo) {
        let mut cx = Cluster::default();
        let idx = cx.apply_node(node("n1").build()).unwrap();
        for c in ["a", "b", "c", "d"] {
            cx.cache.pvcs.insert(
                ObjectKey::new(Kind::PersistentVolumeClaim, "default", c),
                pvc("default", c, Some((STORAGE_PROVISIONER, "ebs.csi"))),
            );
        }
        cx.cache.pvcs.insert(
            ObjectKey::new(Kind::PersistentVolumeClaim, "default", "e"),
            pvc("default", "e", Some((BETA_STORAGE_PROVISIONER, "ebs.csi"))),
        );
        cx.cache.pvcs.insert(
            ObjectKey::new(Kind::PersistentVolumeClaim, "default", "g1"),
            pvc("default", "g1", Some((STORAGE_PROVISIONER, "gce.csi"))),
        );
        cx.cache.pvcs.insert(
            ObjectKey::new(Kind::PersistentVolumeClaim, "default", "plain"),
            pvc("default", "plain", None),
        );
        // Same claim name in another namespace: a different volume.
        cx.cache.pvcs.insert(
            ObjectKey::new(Kind::PersistentVolumeClaim, "other", "a"),
            pvc("other", "a", Some((STORAGE_PROVISIONER, "ebs.csi"))),
        );
        if let Some(l) = limits {
            cx.cache.csi_nodes.insert("n1".into(), csi_node("n1", l));
        }
        for p in placed {
            cx.cache
                .apply_pod(Arc::new(p.clone().node_name("n1").build_info()));
        }
        let n = cx.cache.node(idx).unwrap().clone();
        (cx, n)
    }

    #[test]
    fn filter_counts_distinct_csi_volumes_per_driver_against_the_csinode_limit() {
        let ebs2: &[(&str, Option<i32>)] = &[("ebs.csi", Some(2))];
        // (name, limits, placed pods, new pod claims, want pre-filter skip, want exceeded)
        let cases: Vec<(
            &str,
            Option<&[(&str, Option<i32>)]>,
            Vec<PodBuilder>,
            Vec<&str>,
            bool,
            bool,
        )> = vec![
            (
                "no volumes: skipped",
                Some(ebs2),
                vec![],
                vec![],
                true,
                false,
            ),
            (
                "claims without a driver: skipped",
                Some(ebs2),
                vec![],
                vec!["plain"],
                true,
                false,
            ),
            (
                "under the limit",
                Some(ebs2),
                vec![with_claims("x", &["a"])],
                vec!["b"],
                false,
                false,
            ),
            (
                "at the limit",
                Some(ebs2),
                vec![with_claims("x", &["a", "b"])],
                vec!["c"],
                false,
                true,
            ),
            (
                "a claim already attached is not counted twice",
                Some(ebs2),
                vec![with_claims("x", &["a", "b"])],
                vec!["a"],
                false,
                false,
            ),
            (
                "two pods sharing a claim attach it once",
                Some(ebs2),
                vec![with_claims("x", &["a"]), with_claims("y", &["a"])],
                vec!["b"],
                false,
                false,
            ),
            (
                "the pod's own volumes alone exceed",
                Some(ebs2),
                vec![],
                vec!["a", "b", "c"],
                false,
                true,
            ),
            (
                "the beta annotation names the driver too",
                Some(ebs2),
                vec![with_claims("x", &["a", "e"])],
                vec!["b"],
                false,
                true,
            ),
            (
                "other drivers do not count against the limit",
                Some(ebs2),
                vec![with_claims("x", &["g1", "a"])],
                vec!["b"],
                false,
                false,
            ),
            (
                "same claim name in another namespace is another volume",
                Some(ebs2),
                vec![with_claims("x", &["a", "b"]).namespace("other")],
                vec!["c"],
                false,
                false,
            ),
            (
                "no CSINode: no limit",
                None,
                vec![with_claims("x", &["a", "b"])],
                vec!["c"],
                false,
                false,
            ),
            (
                "a driver without allocatable count: no limit",
                Some(&[("ebs.csi", None)]),
                vec![with_claims("x", &["a", "b"])],
                vec!["c"],
                false,
                false,
            ),
            (
                "a limit of zero rejects any volume",
                Some(&[("ebs.csi", Some(0))]),
                vec![],
                vec!["a"],
                false,
                true,
            ),
            (
                "the limit of another driver does not apply",
                Some(&[("gce.csi", Some(0))]),
                vec![],
                vec!["a"],
                false,
                false,
            ),
        ];
        for (name, limits, placed, claims, skip, exceeded) in cases {
            let (cx, n) = cluster(limits, &placed);
            let p = with_claims("p", &claims).build_info();
            let mut st = CycleState::default();
            let pre = NodeVolumeLimits.pre_filter(&cx, &mut st, &p);
            assert_eq!(pre.is_skip(), skip, "{name}: {pre:?}");
            if skip {
                continue;
            }
            let got = NodeVolumeLimits.filter(&cx, &st, &p, &n);
            if exceeded {
                assert_eq!(
                    got,
                    Status::unschedulable(ERR_REASON_MAX_VOLUME_COUNT_EXCEEDED),
                    "{name}"
                );
            } else {
                assert!(got.is_success(), "{name}: {got:?}");
            }
        }
    }

    #[test]
    fn a_missing_claim_rejects_every_node_as_unresolvable() {
        let (cx, n) = cluster(Some(&[("ebs.csi", Some(5))]), &[]);
        let p = with_claims("p", &["a", "nope"]).build_info();
        let mut st = CycleState::default();
        assert!(NodeVolumeLimits.pre_filter(&cx, &mut st, &p).is_success());
        let got = NodeVolumeLimits.filter(&cx, &st, &p, &n);
        assert_eq!(got.code(), Code::UnschedulableAndUnresolvable);
        assert_eq!(
            got.reasons(),
            ["looking up PVC default/nope: persistentvolumeclaim \"nope\" not found"]
        );
    }

    #[test]
    fn filter_without_pre_filter_is_an_error() {
        let (cx, n) = cluster(None, &[]);
        let p = with_claims("p", &["a"]).build_info();
        assert_eq!(
            NodeVolumeLimits
                .filter(&cx, &CycleState::default(), &p, &n)
                .code(),
            Code::Error
        );
    }
}
