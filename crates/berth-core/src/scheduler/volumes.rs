//! The scheduler's side of VolumeBinding: storage objects in (the assume cache follows the
//! API, queueing hints go out), and PreBind's wait.
//!
//! A pod whose claims need binding is held like a bind in flight (assumed on its node, its
//! cycle state kept for Unreserve) while PreBind's writes go out as effects
//! ([`Effect::BindVolume`], [`Effect::ProvisionClaim`]), as kube-scheduler's binding
//! goroutine makes those API updates; its `Bind` is asked for once the PV controller shows
//! every claim bound (`checkBindings`), and it fails like a failed bind if a check says the
//! binding cannot complete or `bindTimeoutSeconds` pass. Other pods keep being scheduled
//! meanwhile.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use super::{InFlight, Scheduler};
use crate::cache::Cluster;
use crate::effect::Effect;
use crate::model::pod::PodInfo;
use crate::object::{Kind, Object, ObjectKey};
use crate::plugins::volumebinding::claims::{
    claim_volume_name, fully_bound, node_affinity_matches, selected_node,
};
use crate::plugins::volumebinding::{volume_limit, PodVolumes, DEFAULT_BIND_TIMEOUT_SECONDS};
use crate::queue::hints::{kind, ClusterEvent};
use crate::time::Time;

/// The CSINode annotation listing in-tree plugins migrated to CSI.
const MIGRATED_PLUGINS: &str = "storage.alpha.kubernetes.io/migrated-plugins";
/// The PreBind plugin whose failures these are.
const PLUGIN: &str = "VolumeBinding";

/// A pod waiting for its claims to be bound.
#[derive(Debug)]
pub(super) struct VolumeWait {
    bind: InFlight,
    /// PreBind's annotations for the pod.
    annotations: BTreeMap<String, String>,
    /// What was written.
    volumes: PodVolumes,
    /// Per write (static bindings, then provisions): whether the API showed it yet.
    seen: Vec<bool>,
    deadline: Time,
}

/// Every pod waiting for its claims, and their deadlines.
#[derive(Debug, Default)]
pub(super) struct VolumeWaits {
    waits: BTreeMap<ObjectKey, VolumeWait>,
    deadlines: BTreeSet<(Time, ObjectKey)>,
}

impl Scheduler {
    /// Pods waiting for their claims to be bound before their own bind, with their nodes.
    pub fn volume_binds_waiting(&self) -> impl Iterator<Item = (&ObjectKey, &str)> + '_ {
        self.volumes
            .waits
            .iter()
            .map(|(k, w)| (k, &*w.bind.node_name))
    }

    /// A storage object was created or replaced: the cache, the assume cache and the
    /// queueing hints follow.
    pub(super) fn apply_storage(&mut self, now: Time, obj: Object) {
        let cx = &mut self.cluster;
        let event = match obj {
            Object::PersistentVolumeClaim(pvc) => {
                let key = Object::PersistentVolumeClaim(pvc.clone()).key();
                let old = cx.cache.pvcs.insert(key.clone(), pvc.clone());
                cx.cache
                    .assumed_volumes
                    .pvc_changed(&key, old.as_deref(), Some(&pvc));
                ClusterEvent::claim(key)
            }
            Object::PersistentVolume(pv) => {
                let name: Arc<str> = pv.metadata.name.as_deref().unwrap_or("").into();
                let old = cx.cache.pvs.insert(name.clone(), pv.clone());
                cx.cache
                    .assumed_volumes
                    .pv_changed(&name, old.as_deref(), Some(&pv));
                let topology = old.as_ref().is_none_or(|o| {
                    crate::plugins::volumezone::pv_topologies(o)
                        != crate::plugins::volumezone::pv_topologies(&pv)
                });
                ClusterEvent::storage(kind::PV | if topology { kind::PV_TOPOLOGY } else { 0 })
            }
            Object::StorageClass(sc) => {
                let name: Arc<str> = sc.metadata.name.as_deref().unwrap_or("").into();
                let old = cx.cache.storage_classes.insert(name, sc.clone());
                let kinds = match old {
                    None => {
                        let wffc = sc.volume_binding_mode.as_deref()
                            == Some(crate::plugins::volumebinding::claims::WAIT_FOR_FIRST_CONSUMER);
                        kind::STORAGE_CLASS | if wffc { kind::STORAGE_CLASS_WFFC } else { 0 }
                    }
                    Some(o) if o.allowed_topologies != sc.allowed_topologies => kind::STORAGE_CLASS,
                    Some(_) => 0,
                };
                ClusterEvent::storage(kinds)
            }
            Object::CsiNode(c) => {
                let name: Arc<str> = c.metadata.name.as_deref().unwrap_or("").into();
                let old = cx.cache.csi_nodes.insert(name, c.clone());
                let migrated = |n: &berth_api::k8s_openapi::api::storage::v1::CSINode| {
                    n.metadata
                        .annotations
                        .as_ref()
                        .and_then(|a| a.get(MIGRATED_PLUGINS))
                        .cloned()
                };
                let changed = old.as_ref().is_none_or(|o| migrated(o) != migrated(&c));
                let mut e = ClusterEvent::csi_node();
                if changed {
                    e.kinds |= kind::CSI_NODE_MIGRATION;
                }
                e
            }
            Object::CsiDriver(d) => {
                let name: Arc<str> = d.metadata.name.as_deref().unwrap_or("").into();
                let old = cx.cache.csi_drivers.insert(name.clone(), d.clone());
                let was = old.is_some_and(|o| o.spec.storage_capacity == Some(true));
                if was && d.spec.storage_capacity != Some(true) {
                    ClusterEvent::csi_driver(&name)
                } else {
                    ClusterEvent::storage(0)
                }
            }
            Object::CsiStorageCapacity(c) => {
                let key = Object::CsiStorageCapacity(c.clone()).key();
                let old = cx.cache.csi_capacities.insert(key, c.clone());
                let grew = match (old.as_deref().map(volume_limit), volume_limit(&c)) {
                    (None, _) => true,
                    (Some(_), None) => false,
                    (Some(None), Some(_)) => true,
                    (Some(Some(a)), Some(b)) => b > a,
                };
                ClusterEvent::storage(if grew { kind::CSI_STORAGE_CAPACITY } else { 0 })
            }
            _ => return,
        };
        self.requeue(now, event);
    }

    /// A storage object was deleted.
    pub(super) fn delete_storage(&mut self, now: Time, key: &ObjectKey) {
        let cx = &mut self.cluster;
        match key.kind {
            Kind::PersistentVolumeClaim => {
                let old = cx.cache.pvcs.remove(key);
                cx.cache
                    .assumed_volumes
                    .pvc_changed(key, old.as_deref(), None);
            }
            Kind::PersistentVolume => {
                let old = cx.cache.pvs.remove(&*key.name);
                cx.cache
                    .assumed_volumes
                    .pv_changed(&key.name, old.as_deref(), None);
            }
            Kind::StorageClass => {
                cx.cache.storage_classes.remove(&*key.name);
            }
            Kind::CsiNode => {
                cx.cache.csi_nodes.remove(&*key.name);
                self.requeue(now, ClusterEvent::csi_node());
            }
            Kind::CsiDriver => {
                cx.cache.csi_drivers.remove(&*key.name);
            }
            Kind::CsiStorageCapacity => {
                cx.cache.csi_capacities.remove(key);
            }
            _ => {}
        }
    }

    /// PreBind for a pod whose claims need binding: the writes go out, after the pod's
    /// nomination to its node (kube-scheduler 1.35's `NominatedNodeNameForExpectation`),
    /// and its bind waits. Returns `bind` back when nothing needs writing.
    pub(super) fn volume_prebind(
        &mut self,
        now: Time,
        bind: InFlight,
        annotations: BTreeMap<String, String>,
    ) -> Option<(InFlight, BTreeMap<String, String>)> {
        let Some(volumes) = bind
            .state
            .volume_binding
            .as_deref()
            .and_then(|s| s.pending())
            .cloned()
        else {
            return Some((bind, annotations));
        };
        let pod = bind.pod.key.clone();
        let uid = bind.pod.uid.to_string();
        let node = bind.node_name.to_string();
        self.effects.push_back(Effect::NominatePod {
            pod: pod.clone(),
            node: Some(node.clone()),
        });
        for b in &volumes.static_bindings {
            self.effects.push_back(Effect::BindVolume {
                pod: pod.clone(),
                uid: uid.clone(),
                node: node.clone(),
                volume: b.pv.clone(),
            });
        }
        for p in &volumes.provisions {
            self.effects.push_back(Effect::ProvisionClaim {
                pod: pod.clone(),
                uid: uid.clone(),
                node: node.clone(),
                claim: p.pvc.clone(),
            });
        }
        let timeout = self.profiles[bind.profile]
            .plugins
            .iter()
            .find_map(|p| p.volume_bind_timeout())
            .unwrap_or(DEFAULT_BIND_TIMEOUT_SECONDS * 1000);
        let deadline = now.saturating_add(timeout);
        let writes = volumes.static_bindings.len() + volumes.provisions.len();
        self.volumes.deadlines.insert((deadline, pod.clone()));
        self.volumes.waits.insert(
            pod,
            VolumeWait {
                bind,
                annotations,
                volumes,
                seen: vec![false; writes],
                deadline,
            },
        );
        None
    }

    /// When the earliest wait times out.
    pub(super) fn volume_next_timeout(&self) -> Option<Time> {
        self.volumes.deadlines.iter().next().map(|(t, _)| *t)
    }

    /// Checks every waiting pod (`checkBindings`): binds those whose claims are all bound,
    /// fails those whose binding cannot complete.
    pub(super) fn check_volume_waits(&mut self, now: Time) {
        if self.volumes.waits.is_empty() {
            return;
        }
        let keys: Vec<ObjectKey> = self.volumes.waits.keys().cloned().collect();
        for key in keys {
            let Some(w) = self.volumes.waits.get_mut(&key) else {
                continue;
            };
            match check_bindings(&self.cluster, w) {
                Ok(false) => {}
                Ok(true) => self.volume_release(now, &key),
                Err(e) => self.volume_fail(now, &key, format!("binding volumes: {e}")),
            }
        }
    }

    /// Waits whose time is up fail (after a last check).
    pub(super) fn volume_timeouts(&mut self, now: Time) {
        while let Some((t, key)) = self.volumes.deadlines.iter().next().cloned() {
            if t > now {
                break;
            }
            self.volumes.deadlines.remove(&(t, key.clone()));
            let Some(w) = self.volumes.waits.get_mut(&key) else {
                continue;
            };
            match check_bindings(&self.cluster, w) {
                Ok(true) => self.volume_release(now, &key),
                Ok(false) => self.volume_fail(
                    now,
                    &key,
                    "binding volumes: context deadline exceeded".into(),
                ),
                Err(e) => self.volume_fail(now, &key, format!("binding volumes: {e}")),
            }
        }
    }

    fn take_wait(&mut self, key: &ObjectKey) -> Option<VolumeWait> {
        let w = self.volumes.waits.remove(key)?;
        self.volumes.deadlines.remove(&(w.deadline, key.clone()));
        Some(w)
    }

    /// Every claim is bound: the pod's bind goes out.
    fn volume_release(&mut self, now: Time, key: &ObjectKey) {
        let Some(mut w) = self.take_wait(key) else {
            return;
        };
        let pod = w.bind.pod.clone();
        let node = w.bind.node_name.clone();
        self.effects.push_back(Effect::Bind {
            pod: pod.key.clone(),
            uid: pod.uid.to_string(),
            node: node.to_string(),
            annotations: w.annotations,
        });
        self.record(
            pod.key.clone(),
            &pod.uid,
            "Normal",
            "Scheduled",
            format!("Successfully assigned {} to {}", pod.key, node),
        );
        w.bind.state.now = now;
        self.in_flight.insert(pod.key.clone(), w.bind);
    }

    /// PreBind failed (`handleBindingCycleError`): Unreserve, the pod leaves its node and
    /// backs off with a `SchedulerError` condition carrying `why`, and its nomination is
    /// cleared.
    fn volume_fail(&mut self, now: Time, key: &ObjectKey, why: String) {
        let Some(w) = self.take_wait(key) else {
            return;
        };
        let message = format!("running PreBind plugin {PLUGIN:?}: {why}");
        let attempts = w.bind.attempts;
        let uid = w.bind.pod.uid.clone();
        self.unassume(now, w.bind);
        if !self.back_off_after_binding_error(now, key, &uid, attempts, false, &message) {
            return;
        }
        self.effects.push_back(Effect::NominatePod {
            pod: key.clone(),
            node: None,
        });
        self.record(key.clone(), &uid, "Warning", "FailedScheduling", message);
    }

    /// A write of PreBind failed: the wait fails with the API's answer. Returns whether
    /// the failure was for a waiting pod.
    pub(super) fn volume_bind_failed(
        &mut self,
        now: Time,
        pod: &ObjectKey,
        uid: &str,
        node: &str,
        message: &str,
    ) -> bool {
        let current = self
            .volumes
            .waits
            .get(pod)
            .is_some_and(|w| &*w.bind.pod.uid == uid && &*w.bind.node_name == node);
        if current {
            self.volume_fail(now, pod, message.to_string());
        }
        current
    }

    /// A new version of a waiting pod: bound (by someone else), finished or replaced, it
    /// waits no more and gives back what it held.
    pub(super) fn volume_settle(&mut self, now: Time, info: &PodInfo) {
        let Some(w) = self.volumes.waits.get(&info.key) else {
            return;
        };
        if w.bind.pod.uid == info.uid && !info.terminal && info.node_name.is_none() {
            return;
        }
        if let Some(w) = self.take_wait(&info.key) {
            self.unassume(now, w.bind);
        }
    }

    /// A waiting pod was deleted (`pod does not exist any more`): what it held is given
    /// back.
    pub(super) fn volume_pod_deleted(&mut self, now: Time, key: &ObjectKey) {
        if let Some(w) = self.take_wait(key) {
            self.unassume(now, w.bind);
        }
    }
}

fn pv_name(pv: &berth_api::k8s_openapi::api::core::v1::PersistentVolume) -> &str {
    pv.metadata.name.as_deref().unwrap_or("")
}

fn claim_key(pvc: &berth_api::k8s_openapi::api::core::v1::PersistentVolumeClaim) -> ObjectKey {
    ObjectKey::new(
        Kind::PersistentVolumeClaim,
        pvc.metadata.namespace.as_deref().unwrap_or("default"),
        pvc.metadata.name.as_deref().unwrap_or(""),
    )
}

/// `checkBindings` against the API objects: `Ok(true)` when every claim is fully bound,
/// `Ok(false)` to wait, an error when the binding cannot complete. A write the API does
/// not show yet is waited for (upstream compares resourceVersions); once shown, its undoing
/// is an error.
fn check_bindings(cx: &Cluster, w: &mut VolumeWait) -> Result<bool, String> {
    let node_name = &*w.bind.node_name;
    let Some(node) = cx.cache.node_by_name(node_name) else {
        return Err(format!(
            "failed to get node {node_name:?}: node {node_name:?} not found"
        ));
    };
    let n = w.volumes.static_bindings.len();
    for (i, b) in w.volumes.static_bindings.iter().enumerate() {
        let name = pv_name(&b.pv);
        let Some(pv) = cx.cache.pvs.get(name) else {
            return Err(format!(
                "failed to check binding: could not find v1.PersistentVolume {name:?}"
            ));
        };
        let key = claim_key(&b.pvc);
        let Some(pvc) = cx.cache.pvcs.get(&key) else {
            return Err(format!(
                "failed to check binding: could not find v1.PersistentVolumeClaim \"{key}\""
            ));
        };
        let claim_ref = pv.spec.as_ref().and_then(|s| s.claim_ref.as_ref());
        if !w.seen[i] {
            let wanted = b.pv.spec.as_ref().and_then(|s| s.claim_ref.as_ref());
            let shown = claim_ref.is_some_and(|r| {
                wanted.is_some_and(|x| {
                    x.name == r.name && x.namespace == r.namespace && x.uid == r.uid
                })
            });
            if !shown {
                return Ok(false);
            }
            w.seen[i] = true;
        }
        if !node_affinity_matches(pv, &node.labels) {
            return Err(format!(
                "pv {name:?} node affinity doesn't match node {node_name:?}: no matching NodeSelectorTerms"
            ));
        }
        if claim_ref.is_none_or(|r| r.uid.as_deref().unwrap_or("").is_empty()) {
            return Err(format!("ClaimRef got reset for pv {name:?}"));
        }
        if !fully_bound(pvc) {
            return Ok(false);
        }
    }
    for (j, p) in w.volumes.provisions.iter().enumerate() {
        let key = claim_key(&p.pvc);
        let Some(pvc) = cx.cache.pvcs.get(&key) else {
            return Err(format!(
                "failed to check provisioning pvc: could not find v1.PersistentVolumeClaim \"{key}\""
            ));
        };
        let name = &*key.name;
        if !w.seen[n + j] {
            if selected_node(pvc) != Some(node_name) {
                return Ok(false);
            }
            w.seen[n + j] = true;
        }
        if pvc.metadata.annotations.is_none() {
            return Err(format!("selectedNode annotation reset for PVC {name:?}"));
        }
        if selected_node(pvc) != Some(node_name) {
            return Err(format!("provisioning failed for PVC {name:?}"));
        }
        let volume = claim_volume_name(pvc);
        if !volume.is_empty() {
            let Some(pv) = cx.cache.pvs.get(volume) else {
                return Ok(false);
            };
            if !node_affinity_matches(pv, &node.labels) {
                return Err(format!(
                    "pv {volume:?} node affinity doesn't match node {node_name:?}: no matching NodeSelectorTerms"
                ));
            }
        }
        if !fully_bound(pvc) {
            return Ok(false);
        }
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use crate::object::{Kind, Object, ObjectKey};
    use crate::plugins::volumebinding::claims::selected_node;
    use crate::testing::{node, pod, FakeDriver};

    /// A node, a WaitForFirstConsumer class that provisions, a claim and its pod. The fake
    /// driver writes PreBind's objects but runs no PV controller: the test plays it.
    fn setup() -> FakeDriver {
        let mut d = FakeDriver::synchronous();
        d.apply(Object::Node(
            node("n1")
                .alloc("cpu", "4")
                .label("kubernetes.io/hostname", "n1")
                .build(),
        ));
        d.apply(Object::StorageClass(std::sync::Arc::new(
            serde_json::from_value(json!({"metadata": {"name": "wffc"},
                "provisioner": "csi.example.com", "volumeBindingMode": "WaitForFirstConsumer"}))
            .unwrap(),
        )));
        d.apply(Object::PersistentVolumeClaim(std::sync::Arc::new(
            serde_json::from_value(json!({"metadata": {"name": "data", "namespace": "default"},
                "spec": {"storageClassName": "wffc", "accessModes": ["ReadWriteOnce"],
                         "resources": {"requests": {"storage": "1Gi"}}}}))
            .unwrap(),
        )));
        d.apply(Object::Pod(
            pod("db")
                .spec(
                    "volumes",
                    json!([{"name": "d", "persistentVolumeClaim": {"claimName": "data"}}]),
                )
                .build(),
        ));
        d.settle();
        d
    }

    fn claim(
        d: &FakeDriver,
    ) -> std::sync::Arc<berth_api::k8s_openapi::api::core::v1::PersistentVolumeClaim> {
        match d.get(&ObjectKey::new(
            Kind::PersistentVolumeClaim,
            "default",
            "data",
        )) {
            Some(Object::PersistentVolumeClaim(c)) => c.clone(),
            other => panic!("no claim: {other:?}"),
        }
    }

    #[test]
    fn the_pod_binds_once_its_claim_is_bound() {
        let mut d = setup();
        // PreBind wrote the selected node; the pod waits, nominated to its node.
        assert_eq!(selected_node(&claim(&d)), Some("n1"));
        assert_eq!(d.bound("db"), None);
        let nominated = d
            .pod("default", "db")
            .and_then(|p| p.status.as_ref()?.nominated_node_name.clone());
        assert_eq!(nominated.as_deref(), Some("n1"));
        assert_eq!(d.scheduler().volume_binds_waiting().count(), 1);
        // The provisioner and the PV controller: a volume, the claim bound to it.
        d.apply(Object::PersistentVolume(std::sync::Arc::new(
            serde_json::from_value(json!({"metadata": {"name": "pv1"},
                "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                         "storageClassName": "wffc",
                         "claimRef": {"name": "data", "namespace": "default"}}}))
            .unwrap(),
        )));
        d.settle();
        assert_eq!(d.bound("db"), None, "the claim is not bound yet");
        let mut c = (*claim(&d)).clone();
        c.spec.as_mut().unwrap().volume_name = Some("pv1".into());
        c.metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert("pv.kubernetes.io/bind-completed".into(), "yes".into());
        d.apply(Object::PersistentVolumeClaim(std::sync::Arc::new(c)));
        d.settle();
        assert_eq!(d.bound("db").as_deref(), Some("n1"));
        assert_eq!(d.scheduler().volume_binds_waiting().count(), 0);
    }

    #[test]
    fn the_wait_ends_after_bind_timeout_seconds_and_the_pod_is_tried_again() {
        let mut d = setup();
        d.advance(599_000);
        assert_eq!(d.scheduler().volume_binds_waiting().count(), 1);
        d.advance(1_000);
        assert_eq!(d.bound("db"), None);
        assert_eq!(
            d.condition("db"),
            Some((
                "SchedulerError".into(),
                "running PreBind plugin \"VolumeBinding\": binding volumes: context deadline exceeded".into()
            ))
        );
        // Unreserve gave the node back; after its back-off the pod is placed again (its
        // claim already names n1) and waits anew.
        d.advance(2_000);
        assert_eq!(d.scheduler().volume_binds_waiting().count(), 1);
    }

    #[test]
    fn a_provisioner_that_gives_up_fails_the_binding() {
        let mut d = setup();
        // External provisioners drop the selected node when they cannot provision.
        let mut c = (*claim(&d)).clone();
        c.metadata
            .annotations
            .get_or_insert_with(Default::default)
            .remove("volume.kubernetes.io/selected-node");
        d.apply(Object::PersistentVolumeClaim(std::sync::Arc::new(c)));
        d.settle();
        let (reason, message) = d.condition("db").unwrap();
        assert_eq!(reason, "SchedulerError");
        assert_eq!(
            message,
            "running PreBind plugin \"VolumeBinding\": binding volumes: provisioning failed for PVC \"data\""
        );
    }
}
