//! Capacity kept after a scale-down in a cluster ([`berth_core::migration::keep_capacity`]):
//! kube-controller-manager's ReplicaSet and StatefulSet controllers delete the pods a
//! scale-down condemns; `berth migrate` sees each pod go, in the pods watch's order, and
//! turns the room of one that was scaled away (not replaced) into a Reservation owned by its
//! workload for the TTL the workload's annotation asks for.
//!
//! A pod "goes" when the watch first shows it being deleted (`deletionTimestamp` set) or,
//! without that, deleted. It was scaled away when its controller's other active pods, as the
//! watch showed them at that moment, still number the controller's `replicas` or more: an
//! evicted or deleted pod of a workload that did not shrink leaves fewer, and is replaced.
//! The count is taken in the stream's order, so a replacement created after the pod went is
//! never counted; the `replicas` are read from the workload's watch at the next pass.
//!
//! Pods that go while `berth migrate` is not running (or its watch is down) keep nothing: a
//! re-list shows them gone with no trace of why.

use std::collections::BTreeMap;

use berth_api::reservation::Reservation;
use berth_core::migration::keep_capacity;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::Pod;

use super::cache::{self, Change};

/// A pod that went: as last seen before it did, and how many other active pods of its
/// controller the watch showed then.
#[derive(Debug, Clone)]
pub struct Gone {
    /// The pod.
    pub pod: Pod,
    /// Its controller's other active pods at that moment.
    pub others_active: usize,
}

/// Whether a pod counts toward its controller's replicas (`controller.FilterActivePods`).
fn active(p: &Pod) -> bool {
    let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
    p.metadata.deletion_timestamp.is_none() && !matches!(phase, Some("Succeeded" | "Failed"))
}

fn controller_uid(p: &Pod) -> Option<&str> {
    keep_capacity::controller_ref(&p.metadata).map(|r| r.uid.as_str())
}

/// The pods watch's hook: `pod` as the event shows it, `pods` the map before the event.
/// `Some` when this event is the pod going (the first sign of its deletion).
pub fn on_pod(pods: &BTreeMap<String, Pod>, pod: &Pod, change: Change) -> Option<Gone> {
    let before = pods.get(&cache::key_of(pod))?;
    if before.metadata.deletion_timestamp.is_some() || !active(before) {
        return None;
    }
    if change == Change::Apply && pod.metadata.deletion_timestamp.is_none() {
        return None;
    }
    let uid = controller_uid(before)?;
    let key = cache::key_of(before);
    let others_active = pods
        .iter()
        .filter(|(k, p)| **k != key && controller_uid(p) == Some(uid) && active(p))
        .count();
    Some(Gone {
        pod: before.clone(),
        others_active,
    })
}

/// The workloads `berth migrate` reads for keep-capacity, by `namespace/name`.
pub struct Workloads<'a> {
    /// ReplicaSets.
    pub replicasets: &'a BTreeMap<String, ReplicaSet>,
    /// Deployments.
    pub deployments: &'a BTreeMap<String, Deployment>,
    /// StatefulSets.
    pub statefulsets: &'a BTreeMap<String, StatefulSet>,
}

/// The Reservation keeping `gone`'s room, if its workload opted in and shrank.
pub fn kept(gone: &Gone, workloads: &Workloads<'_>) -> Option<Reservation> {
    let pod = &gone.pod;
    let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
    let owner = keep_capacity::controller_ref(&pod.metadata)?;
    let key = format!("{namespace}/{}", owner.name);
    let same = |uid: &Option<String>| uid.as_deref() == Some(owner.uid.as_str());
    match owner.kind.as_str() {
        "ReplicaSet" => {
            let rs = workloads
                .replicasets
                .get(&key)
                .filter(|r| same(&r.metadata.uid))?;
            let replicas = rs.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
            if !keep_capacity::scaled_away(gone.others_active, replicas) {
                return None;
            }
            let controlling = deployment_of(rs, workloads.deployments);
            // An old ReplicaSet's pods go in a rollout, replaced by the new one's.
            if controlling.is_some_and(|d| !keep_capacity::is_new_replica_set(rs, d)) {
                return None;
            }
            // The Deployment's opt-in first: its controller copies its annotations onto its
            // ReplicaSets, and the Deployment is what the user annotated.
            let deployment = controlling.and_then(|d| {
                let ttl = keep_capacity::ttl(&d.metadata)?;
                Some(("Deployment", d.metadata.clone(), ttl))
            });
            let (kind, meta, ttl) = match deployment {
                Some(d) => d,
                None => {
                    let ttl = keep_capacity::ttl(&rs.metadata)?;
                    ("ReplicaSet", rs.metadata.clone(), ttl)
                }
            };
            keep_capacity::reservation(pod, kind, &meta, ttl)
        }
        "StatefulSet" => {
            let set = workloads
                .statefulsets
                .get(&key)
                .filter(|s| same(&s.metadata.uid))?;
            let replicas = set.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
            if !keep_capacity::scaled_away(gone.others_active, replicas) {
                return None;
            }
            let ttl = keep_capacity::ttl(&set.metadata)?;
            keep_capacity::reservation(pod, "StatefulSet", &set.metadata, ttl)
        }
        _ => None,
    }
}

/// The Deployment controlling `rs`, if the watch has it (the same UID).
fn deployment_of<'a>(
    rs: &ReplicaSet,
    deployments: &'a BTreeMap<String, Deployment>,
) -> Option<&'a Deployment> {
    let (namespace, name, uid) = keep_capacity::controlling_deployment(&rs.metadata)?;
    deployments
        .get(&format!("{namespace}/{name}"))
        .filter(|d| d.metadata.uid.as_deref() == Some(uid))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::apps::v1::{DeploymentSpec, ReplicaSetSpec};
    use k8s_openapi::api::core::v1::{PodSpec, PodStatus, PodTemplateSpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};

    fn owner(kind: &str, name: &str, uid: &str) -> OwnerReference {
        OwnerReference {
            api_version: "apps/v1".into(),
            kind: kind.into(),
            name: name.into(),
            uid: uid.into(),
            controller: Some(true),
            ..OwnerReference::default()
        }
    }

    fn pod(name: &str, rs_uid: &str) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                owner_references: Some(vec![owner("ReplicaSet", "web-1", rs_uid)]),
                ..ObjectMeta::default()
            },
            spec: Some(PodSpec {
                node_name: Some("n1".into()),
                ..PodSpec::default()
            }),
            status: Some(PodStatus {
                phase: Some("Running".into()),
                ..PodStatus::default()
            }),
        }
    }

    fn deleting(mut p: Pod) -> Pod {
        p.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::now()));
        p
    }

    fn map(pods: &[Pod]) -> BTreeMap<String, Pod> {
        pods.iter().map(|p| (cache::key_of(p), p.clone())).collect()
    }

    #[test]
    fn a_pod_goes_once_counting_the_other_active_pods_of_its_controller() {
        let pods = map(&[
            pod("a", "rs"),
            pod("b", "rs"),
            deleting(pod("c", "rs")),
            pod("other", "rs2"),
        ]);
        let gone = on_pod(&pods, &deleting(pod("a", "rs")), Change::Apply).expect("goes");
        assert_eq!(
            gone.others_active, 1,
            "b only: c is being deleted, other is not its"
        );
        assert!(
            on_pod(&pods, &pod("a", "rs"), Change::Apply).is_none(),
            "an update"
        );
        assert!(
            on_pod(&pods, &pod("a", "rs"), Change::Delete).is_some(),
            "deleted at once"
        );
        // Seen being deleted already: its deletion is no second going.
        assert!(on_pod(&pods, &pod("c", "rs"), Change::Delete).is_none());
        // Never seen before: nothing to keep.
        assert!(on_pod(&pods, &deleting(pod("new", "rs")), Change::Apply).is_none());
    }

    fn workloads(
        rs_ann: Option<&str>,
        deploy_ann: Option<&str>,
        replicas: i32,
    ) -> (
        BTreeMap<String, ReplicaSet>,
        BTreeMap<String, Deployment>,
        BTreeMap<String, StatefulSet>,
    ) {
        let ann = |a: Option<&str>| {
            a.map(|v| {
                BTreeMap::from([(keep_capacity::KEEP_AFTER_SCALE_DOWN.to_string(), v.into())])
            })
        };
        let rs = ReplicaSet {
            metadata: ObjectMeta {
                name: Some("web-1".into()),
                namespace: Some("ns".into()),
                uid: Some("rs".into()),
                annotations: ann(rs_ann),
                owner_references: Some(vec![owner("Deployment", "web", "d")]),
                ..ObjectMeta::default()
            },
            spec: Some(ReplicaSetSpec {
                replicas: Some(replicas),
                template: Some(template(&[("app", "web"), ("pod-template-hash", "1")])),
                ..ReplicaSetSpec::default()
            }),
            status: None,
        };
        let d = Deployment {
            metadata: ObjectMeta {
                name: Some("web".into()),
                namespace: Some("ns".into()),
                uid: Some("d".into()),
                annotations: ann(deploy_ann),
                ..ObjectMeta::default()
            },
            spec: Some(DeploymentSpec {
                template: template(&[("app", "web")]),
                ..DeploymentSpec::default()
            }),
            status: None,
        };
        (
            BTreeMap::from([("ns/web-1".to_string(), rs)]),
            BTreeMap::from([("ns/web".to_string(), d)]),
            BTreeMap::new(),
        )
    }

    fn template(labels: &[(&str, &str)]) -> PodTemplateSpec {
        PodTemplateSpec {
            metadata: Some(ObjectMeta {
                labels: Some(
                    labels
                        .iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect(),
                ),
                ..ObjectMeta::default()
            }),
            spec: None,
        }
    }

    #[test]
    fn an_old_replica_sets_pods_go_in_a_rollout_and_keep_nothing() {
        let (rs, mut d, s) = workloads(Some("1m"), Some("1m"), 0);
        if let Some(spec) = d.get_mut("ns/web").and_then(|d| d.spec.as_mut()) {
            spec.template = template(&[("app", "web"), ("version", "2")]);
        }
        let w = Workloads {
            replicasets: &rs,
            deployments: &d,
            statefulsets: &s,
        };
        assert!(kept(&gone(0), &w).is_none(), "a rollout, not a scale-down");
    }

    fn gone(others_active: usize) -> Gone {
        Gone {
            pod: pod("a", "rs"),
            others_active,
        }
    }

    #[test]
    fn a_scaled_away_pod_of_an_opted_in_workload_is_kept() {
        let (rs, d, s) = workloads(None, Some("1m"), 2);
        let w = Workloads {
            replicasets: &rs,
            deployments: &d,
            statefulsets: &s,
        };
        let r = kept(&gone(2), &w).expect("kept for the Deployment");
        assert_eq!(r.metadata.name.as_deref(), Some("ns.a-kept"));
        let labels = r.metadata.labels.unwrap_or_default();
        assert_eq!(labels[keep_capacity::LABEL_KEPT_FOR], "Deployment.web");
        let (rs, d, s) = workloads(Some("1m"), Some("1m"), 2);
        let both = Workloads {
            replicasets: &rs,
            deployments: &d,
            statefulsets: &s,
        };
        let r = kept(&gone(2), &both).expect("kept");
        assert_eq!(
            r.metadata.labels.unwrap_or_default()[keep_capacity::LABEL_KEPT_FOR],
            "Deployment.web",
            "the Deployment's annotation, copied onto its ReplicaSet, names the Deployment"
        );
        // Fewer others than replicas: replaced, not scaled away.
        assert!(kept(&gone(1), &w).is_none());
        let (rs, d, s) = workloads(Some("30s"), None, 0);
        let w = Workloads {
            replicasets: &rs,
            deployments: &d,
            statefulsets: &s,
        };
        let r = kept(&gone(0), &w).expect("kept for the ReplicaSet");
        assert_eq!(
            r.metadata.labels.unwrap_or_default()[keep_capacity::LABEL_KEPT_FOR],
            "ReplicaSet.web-1"
        );
    }

    #[test]
    fn nothing_is_kept_without_the_opt_in_or_the_workload() {
        let (rs, d, s) = workloads(None, None, 1);
        let w = Workloads {
            replicasets: &rs,
            deployments: &d,
            statefulsets: &s,
        };
        assert!(kept(&gone(3), &w).is_none(), "not opted in");
        let empty = BTreeMap::new();
        let w = Workloads {
            replicasets: &empty,
            deployments: &d,
            statefulsets: &s,
        };
        assert!(kept(&gone(3), &w).is_none(), "ReplicaSet unknown");
        let (rs, d, s) = workloads(None, Some("1m"), 1);
        let w = Workloads {
            replicasets: &rs,
            deployments: &d,
            statefulsets: &s,
        };
        let mut stranger = gone(3);
        stranger.pod.metadata.owner_references = Some(vec![owner("ReplicaSet", "web-1", "old")]);
        assert!(
            kept(&stranger, &w).is_none(),
            "another ReplicaSet of that name"
        );
    }
}
