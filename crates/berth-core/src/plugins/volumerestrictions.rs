//! VolumeRestrictions: volumes that cannot be shared.
//!
//! - In-tree disks (GCE PD, AWS EBS, Ceph RBD, iSCSI) mounted read-write by a pod on a node
//!   keep another pod using the same disk off that node ("node(s) had no available disk").
//! - A `ReadWriteOncePod` claim already used by a placed pod keeps the pod off every node;
//!   the rejection is Unschedulable (not unresolvable) because preempting the user helps.
//! - A claim that does not exist rejects the pod at PreFilter with the lister's message.

use berth_api::k8s_openapi::api::core::v1::{Pod, Volume};

use crate::cache::Cluster;
use crate::framework::events::{kind, EventsToRegister};
use crate::framework::{CycleState, Plugin, Points, Status};
use crate::model::node::NodeInfo;
use crate::model::pod::PodInfo;
use crate::object::{Kind, ObjectKey};

/// kube-scheduler's `ErrReasonDiskConflict`.
pub const ERR_REASON_DISK_CONFLICT: &str = "node(s) had no available disk";
/// kube-scheduler's `ErrReasonReadWriteOncePodConflict`.
pub const ERR_REASON_RWOP_CONFLICT: &str = "node(s) unavailable due to PersistentVolumeClaim with ReadWriteOncePod access mode already in-use by another pod";
/// The access mode that allows a single pod.
pub const READ_WRITE_ONCE_POD: &str = "ReadWriteOncePod";

/// What the client-go lister says of a missing claim.
pub fn pvc_not_found(name: &str) -> String {
    format!("persistentvolumeclaim \"{name}\" not found")
}

/// Per-cycle state.
#[derive(Debug, Clone, Default)]
pub struct State {
    /// Whether the pod has in-tree disks to check against the node's pods.
    check_disks: bool,
    /// The pod's `ReadWriteOncePod` claims and how many placed pods use each.
    rwop: Vec<(ObjectKey, u32)>,
}

impl State {
    /// The pod's `ReadWriteOncePod` claims.
    pub fn rwop_claims(&self) -> impl Iterator<Item = &ObjectKey> + '_ {
        self.rwop.iter().map(|(k, _)| k)
    }

    /// Adjusts the user counts for `pod` being added (`sign >= 0`) to or removed from the
    /// cluster, as kube-scheduler's `AddPod`/`RemovePod` do during preemption.
    pub fn update_with_pod(&mut self, pod: &PodInfo, sign: i32) {
        for c in pod
            .spec()
            .volumes
            .iter()
            .flatten()
            .filter_map(|v| v.persistent_volume_claim.as_ref())
        {
            for (key, users) in &mut self.rwop {
                if *key.name == *c.claim_name && key.namespace == pod.key.namespace {
                    *users = if sign >= 0 {
                        users.saturating_add(1)
                    } else {
                        users.saturating_sub(1)
                    };
                }
            }
        }
    }

    /// How many of the pod's ReadWriteOncePod claims another pod uses, not counting the
    /// reservations the pod may use (a claim held by its own reservation is its own).
    fn conflicting_refs(&self, state: &CycleState) -> usize {
        let r = state.reservation.as_ref();
        self.rwop
            .iter()
            .filter(|(key, users)| {
                users.saturating_sub(r.map_or(0, |r| r.restored_claim_users(key))) > 0
            })
            .count()
    }
}

/// The VolumeRestrictions plugin.
#[derive(Debug)]
pub struct VolumeRestrictions;

fn needs_restrictions_check(v: &Volume) -> bool {
    v.gce_persistent_disk.is_some()
        || v.aws_elastic_block_store.is_some()
        || v.rbd.is_some()
        || v.iscsi.is_some()
}

/// Whether `volume` conflicts with one of `existing`'s volumes (`isVolumeConflict`).
pub fn is_volume_conflict(volume: &Volume, existing: &Pod) -> bool {
    let Some(spec) = existing.spec.as_ref() else {
        return false;
    };
    spec.volumes.iter().flatten().any(|ev| {
        if let (Some(d), Some(e)) = (&volume.gce_persistent_disk, &ev.gce_persistent_disk) {
            if d.pd_name == e.pd_name
                && !(d.read_only.unwrap_or(false) && e.read_only.unwrap_or(false))
            {
                return true;
            }
        }
        if let (Some(d), Some(e)) = (&volume.aws_elastic_block_store, &ev.aws_elastic_block_store) {
            if d.volume_id == e.volume_id {
                return true;
            }
        }
        if let (Some(d), Some(e)) = (&volume.iscsi, &ev.iscsi) {
            if d.iqn == e.iqn && !(d.read_only.unwrap_or(false) && e.read_only.unwrap_or(false)) {
                return true;
            }
        }
        if let (Some(d), Some(e)) = (&volume.rbd, &ev.rbd) {
            // The API defaults the pool to "rbd".
            if d.monitors.iter().any(|m| e.monitors.contains(m))
                && d.pool.as_deref().unwrap_or("rbd") == e.pool.as_deref().unwrap_or("rbd")
                && d.image == e.image
                && !(d.read_only.unwrap_or(false) && e.read_only.unwrap_or(false))
            {
                return true;
            }
        }
        false
    })
}

fn satisfies_volume_conflicts(state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> bool {
    pod.spec()
        .volumes
        .iter()
        .flatten()
        .filter(|v| needs_restrictions_check(v))
        .all(|v| {
            !node.pods.iter().any(|ep| {
                !crate::plugins::reservation::hidden(state, ep, node.idx)
                    && is_volume_conflict(v, &ep.pod)
            })
        })
}

impl Plugin for VolumeRestrictions {
    fn name(&self) -> &'static str {
        super::names::VOLUME_RESTRICTIONS
    }

    fn points(&self) -> Points {
        Points::PRE_FILTER | Points::FILTER
    }

    fn events_to_register(&self) -> EventsToRegister {
        // Upstream: pod deletion, node add and claims; reservations hold claims the way pods do.
        EventsToRegister::on(&[(
            kind::NODE_ADD | kind::ASSIGNED_POD_DELETE | kind::RESERVATION | kind::PVC,
            None,
        )])
    }

    fn pre_filter(&self, cx: &Cluster, state: &mut CycleState, pod: &PodInfo) -> Status {
        let volumes = pod.spec().volumes.as_deref().unwrap_or(&[]);
        let check_disks = volumes.iter().any(needs_restrictions_check);
        let ns = &pod.key.namespace;
        let mut rwop: Vec<(ObjectKey, u32)> = Vec::new();
        for claim in volumes
            .iter()
            .filter_map(|v| v.persistent_volume_claim.as_ref())
        {
            let key = ObjectKey::new(Kind::PersistentVolumeClaim, ns, &claim.claim_name);
            let Some(pvc) = cx.cache.pvcs.get(&key) else {
                return Status::unresolvable(pvc_not_found(&claim.claim_name));
            };
            let is_rwop = pvc
                .spec
                .as_ref()
                .and_then(|s| s.access_modes.as_ref())
                .is_some_and(|m| m.iter().any(|a| a == READ_WRITE_ONCE_POD));
            if !is_rwop || rwop.iter().any(|(k, _)| *k == key) {
                continue;
            }
            let users = cx.cache.pvc_users.get(&key).copied().unwrap_or(0);
            rwop.push((key, users));
        }
        // At most one pod can use a ReadWriteOncePod claim: any user is a conflict. Users
        // that are the pod's own reservations are discounted in Filter, once the Reservation
        // plugin's PreFilter has run.
        if !check_disks && rwop.iter().all(|(_, users)| *users == 0) {
            return Status::skip();
        }
        state.volume_restrictions = Some(Box::new(State { check_disks, rwop }));
        Status::success()
    }

    fn add_pod(
        &self,
        _cx: &Cluster,
        state: &mut CycleState,
        _pod: &PodInfo,
        add: &PodInfo,
        _node: &NodeInfo,
    ) {
        if let Some(s) = state.volume_restrictions.as_deref_mut() {
            s.update_with_pod(add, 1);
        }
    }

    fn remove_pod(
        &self,
        _cx: &Cluster,
        state: &mut CycleState,
        _pod: &PodInfo,
        remove: &PodInfo,
        _node: &NodeInfo,
    ) {
        if let Some(s) = state.volume_restrictions.as_deref_mut() {
            s.update_with_pod(remove, -1);
        }
    }

    fn filter(&self, _cx: &Cluster, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        let Some(s) = state.volume_restrictions.as_ref() else {
            return Status::error("VolumeRestrictions: PreFilter did not run");
        };
        if s.check_disks && !satisfies_volume_conflicts(state, pod, node) {
            return Status::unschedulable(ERR_REASON_DISK_CONFLICT);
        }
        if s.conflicting_refs(state) > 0 {
            return Status::unschedulable(ERR_REASON_RWOP_CONFLICT);
        }
        Status::success()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::framework::Code;
    use crate::object::Object;
    use crate::testing::{node, pod, PodBuilder};
    use serde_json::{json, Value};

    fn with_volume(name: &str, v: Value) -> PodBuilder {
        pod(name).spec("volumes", json!([v]))
    }

    fn node_with(pods: &[PodBuilder]) -> NodeInfo {
        let mut n = node("node-1").build_info();
        for p in pods {
            n.add_pod(Arc::new(p.clone().node_name("node-1").build_info()));
        }
        n
    }

    fn run(cx: &Cluster, p: &PodInfo, n: &NodeInfo) -> (Status, Option<Status>) {
        let mut st = CycleState::default();
        let pre = VolumeRestrictions.pre_filter(cx, &mut st, p);
        let filter = pre
            .is_success()
            .then(|| VolumeRestrictions.filter(cx, &st, p, n));
        (pre, filter)
    }

    #[test]
    fn in_tree_disks_conflict_unless_all_mounts_are_read_only() {
        let gce = |pd: &str, ro: bool| json!({"name": "v", "gcePersistentDisk": {"pdName": pd, "readOnly": ro}});
        let aws = |id: &str| json!({"name": "v", "awsElasticBlockStore": {"volumeID": id}});
        let rbd = |mons: &[&str]| json!({"name": "v", "rbd": {"monitors": mons, "pool": "foo", "image": "bar", "fsType": "ext4"}});
        let iscsi = |iqn: &str, ro: bool| json!({"name": "v", "iscsi": {"targetPortal": "127.0.0.1:3260", "iqn": iqn, "lun": 0, "fsType": "ext4", "readOnly": ro}});
        let iqn1 = "iqn.2016-12.server:storage.target01";
        let iqn2 = "iqn.2017-12.server:storage.target01";
        // (name, pod volume, existing pod volume, want pre-filter skip, want conflict)
        let cases: Vec<(&str, Option<Value>, Option<Value>, bool, bool)> = vec![
            ("nothing", None, None, true, false),
            (
                "one state: only the node has a disk",
                None,
                Some(gce("foo", false)),
                true,
                false,
            ),
            (
                "gce same disk",
                Some(gce("foo", false)),
                Some(gce("foo", false)),
                false,
                true,
            ),
            (
                "gce different disk",
                Some(gce("bar", false)),
                Some(gce("foo", false)),
                false,
                false,
            ),
            (
                "gce same disk, both read-only",
                Some(gce("foo", true)),
                Some(gce("foo", true)),
                false,
                false,
            ),
            (
                "gce same disk, one read-only",
                Some(gce("foo", true)),
                Some(gce("foo", false)),
                false,
                true,
            ),
            (
                "aws same volume",
                Some(aws("foo")),
                Some(aws("foo")),
                false,
                true,
            ),
            (
                "aws different volume",
                Some(aws("bar")),
                Some(aws("foo")),
                false,
                false,
            ),
            (
                "rbd shared monitor, same pool and image",
                Some(rbd(&["a", "b"])),
                Some(rbd(&["b", "z"])),
                false,
                true,
            ),
            (
                "rbd different monitors",
                Some(rbd(&["c", "d"])),
                Some(rbd(&["a", "b"])),
                false,
                false,
            ),
            (
                "iscsi same iqn",
                Some(iscsi(iqn1, false)),
                Some(iscsi(iqn1, false)),
                false,
                true,
            ),
            (
                "iscsi different iqn",
                Some(iscsi(iqn2, false)),
                Some(iscsi(iqn1, false)),
                false,
                false,
            ),
            (
                "iscsi same iqn, both read-only",
                Some(iscsi(iqn1, true)),
                Some(iscsi(iqn1, true)),
                false,
                false,
            ),
            (
                "a volume without restrictions",
                Some(json!({"name": "v", "emptyDir": {}})),
                None,
                true,
                false,
            ),
        ];
        let cx = Cluster::default();
        for (name, mine, theirs, skip, conflict) in cases {
            let p = match mine {
                Some(v) => with_volume("p", v),
                None => pod("p"),
            }
            .build_info();
            let existing: Vec<PodBuilder> =
                theirs.into_iter().map(|v| with_volume("e", v)).collect();
            let (pre, filter) = run(&cx, &p, &node_with(&existing));
            assert_eq!(pre.is_skip(), skip, "{name}: {pre:?}");
            if !skip {
                let f = filter.unwrap();
                if conflict {
                    assert_eq!(f, Status::unschedulable(ERR_REASON_DISK_CONFLICT), "{name}");
                } else {
                    assert!(f.is_success(), "{name}: {f:?}");
                }
            }
        }
    }

    fn pvc(name: &str, mode: &str) -> Object {
        Object::PersistentVolumeClaim(Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": name, "namespace": "default"},
                "spec": {"accessModes": [mode]}
            }))
            .unwrap(),
        ))
    }

    fn with_claims(name: &str, claims: &[&str]) -> PodBuilder {
        let vols: Vec<Value> = claims
            .iter()
            .map(|c| json!({"name": c, "persistentVolumeClaim": {"claimName": c}}))
            .collect();
        pod(name).spec("volumes", json!(vols))
    }

    fn cluster(pvcs: &[Object], placed: &[PodBuilder]) -> Cluster {
        let mut cx = Cluster::default();
        cx.apply_node(node("node-1").build()).unwrap();
        for o in pvcs {
            if let Object::PersistentVolumeClaim(p) = o {
                cx.cache.pvcs.insert(o.key(), p.clone());
            }
        }
        for p in placed {
            cx.cache
                .apply_pod(Arc::new(p.clone().node_name("node-1").build_info()));
        }
        cx
    }

    #[test]
    fn read_write_once_pod_claims_in_use_make_the_pod_unschedulable() {
        let rwop1 = pvc("claim-with-rwop-1", READ_WRITE_ONCE_POD);
        let rwop2 = pvc("claim-with-rwop-2", READ_WRITE_ONCE_POD);
        let rwx = pvc("claim-with-rwx", "ReadWriteMany");
        let one = with_claims("pod-with-one-pvc", &["claim-with-rwop-1"]);
        let two = with_claims(
            "pod-with-two-pvcs",
            &["claim-with-rwop-1", "claim-with-rwop-2"],
        );
        let rwx_user = with_claims("pod-with-rwx", &["claim-with-rwx"]);

        // Failed to get the claim.
        let cx = cluster(&[], &[]);
        let (pre, _) = run(&cx, &one.build_info(), &node_with(&[]));
        assert_eq!(
            pre,
            Status::unresolvable("persistentvolumeclaim \"claim-with-rwop-1\" not found")
        );

        // No access mode conflict: the only placed user holds a ReadWriteMany claim.
        let cx = cluster(
            &[rwop1.clone(), rwx.clone()],
            std::slice::from_ref(&rwx_user),
        );
        let (pre, _) = run(&cx, &one.build_info(), &node_with(&[]));
        assert!(pre.is_skip(), "{pre:?}");

        // One conflict.
        let cx = cluster(
            &[rwop1.clone(), rwx.clone()],
            &[one.clone(), rwx_user.clone()],
        );
        let me = with_claims("pod-with-one-conflict", &["claim-with-rwop-1"]).build_info();
        let (pre, filter) = run(&cx, &me, &node_with(&[]));
        assert!(pre.is_success());
        let f = filter.unwrap();
        assert_eq!(f.code(), Code::Unschedulable);
        assert_eq!(f.reasons(), [ERR_REASON_RWOP_CONFLICT]);

        // Two conflicts; the conflict holds on every node, not just the user's.
        let cx = cluster(&[rwop1, rwop2, rwx], &[two, rwx_user]);
        let me = with_claims(
            "pod-with-two-conflicts",
            &["claim-with-rwop-1", "claim-with-rwop-2"],
        )
        .build_info();
        let mut st = CycleState::default();
        assert!(VolumeRestrictions
            .pre_filter(&cx, &mut st, &me)
            .is_success());
        assert_eq!(
            st.volume_restrictions
                .as_ref()
                .unwrap()
                .conflicting_refs(&st),
            2
        );
        let elsewhere = node("node-2").build_info();
        assert_eq!(
            VolumeRestrictions.filter(&cx, &st, &me, &elsewhere),
            Status::unschedulable(ERR_REASON_RWOP_CONFLICT)
        );
    }

    #[test]
    fn removing_the_claims_user_clears_the_conflict() {
        let cx = cluster(
            &[pvc("c", READ_WRITE_ONCE_POD)],
            &[with_claims("user", &["c"])],
        );
        let me = with_claims("me", &["c"]).build_info();
        let mut st = CycleState::default();
        assert!(VolumeRestrictions
            .pre_filter(&cx, &mut st, &me)
            .is_success());
        let user = with_claims("user", &["c"]).build_info();
        st.volume_restrictions
            .as_mut()
            .unwrap()
            .update_with_pod(&user, -1);
        assert!(VolumeRestrictions
            .filter(&cx, &st, &me, &node("node-1").build_info())
            .is_success());
    }

    #[test]
    fn filter_without_pre_filter_is_an_error() {
        let p = with_volume(
            "p",
            json!({"name": "v", "awsElasticBlockStore": {"volumeID": "x"}}),
        )
        .build_info();
        let s = VolumeRestrictions.filter(
            &Cluster::default(),
            &CycleState::default(),
            &p,
            &node("n").build_info(),
        );
        assert_eq!(s.code(), Code::Error);
    }
}
