use std::sync::Arc;

use serde_json::{json, Value};

use super::*;
use crate::framework::Code;
use crate::testing::{node, pod};

fn pvc(name: &str, extra: Value) -> Arc<PersistentVolumeClaim> {
    let mut v = json!({
        "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}")},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "10Gi"}}},
    });
    merge(&mut v, extra);
    Arc::new(serde_json::from_value(v).unwrap())
}

fn pv(name: &str, extra: Value) -> Arc<PersistentVolume> {
    let mut v = json!({
        "metadata": {"name": name},
        "spec": {"accessModes": ["ReadWriteOnce"], "capacity": {"storage": "20Gi"}},
        "status": {"phase": "Available"},
    });
    merge(&mut v, extra);
    Arc::new(serde_json::from_value(v).unwrap())
}

fn merge(a: &mut Value, b: Value) {
    match (a, b) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in b {
                merge(a.entry(k).or_insert(Value::Null), v);
            }
        }
        (a, b) => *a = b,
    }
}

fn pinned(host: &str) -> Value {
    json!({"spec": {"nodeAffinity": {"required": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": [host]}]}
    ]}}}})
}

fn class(name: &str, v: Value) -> Arc<berth_api::k8s_openapi::api::storage::v1::StorageClass> {
    let mut base = json!({"metadata": {"name": name}, "provisioner": "csi.example.com",
                          "volumeBindingMode": "WaitForFirstConsumer"});
    merge(&mut base, v);
    Arc::new(serde_json::from_value(base).unwrap())
}

fn cluster(nodes: &[(&str, &str)]) -> Cluster {
    let mut cx = Cluster::default();
    for (n, zone) in nodes {
        cx.apply_node(
            node(n)
                .alloc("cpu", "8")
                .label("kubernetes.io/hostname", n)
                .label("topology.kubernetes.io/zone", zone)
                .build(),
        )
        .unwrap();
    }
    cx
}

fn add_pvc(cx: &mut Cluster, c: Arc<PersistentVolumeClaim>) {
    let key = ObjectKey::new(
        Kind::PersistentVolumeClaim,
        "default",
        c.metadata.name.as_deref().unwrap(),
    );
    cx.cache.pvcs.insert(key, c);
}

fn add_pv(cx: &mut Cluster, v: Arc<PersistentVolume>) {
    cx.cache
        .pvs
        .insert(v.metadata.name.as_deref().unwrap().into(), v);
}

fn user(name: &str, claim: &str) -> PodInfo {
    pod(name)
        .spec(
            "volumes",
            json!([{"name": "v", "persistentVolumeClaim": {"claimName": claim}}]),
        )
        .build_info()
}

fn plugin() -> VolumeBinding {
    VolumeBinding::new(None).unwrap()
}

/// PreFilter, then Filter on every node: (PreFilter status, node name -> Filter status).
fn run(cx: &Cluster, p: &PodInfo) -> (Status, Vec<(String, Status)>, CycleState) {
    let mut st = CycleState::default();
    let pre = plugin().pre_filter(cx, &mut st, p);
    let mut out = Vec::new();
    if pre.is_success() {
        for n in cx.cache.nodes() {
            out.push((n.name.to_string(), plugin().filter(cx, &st, p, n)));
        }
    }
    (pre, out, st)
}

fn passing(v: &[(String, Status)]) -> Vec<&str> {
    v.iter()
        .filter(|(_, s)| s.is_success())
        .map(|(n, _)| n.as_str())
        .collect()
}

#[test]
fn prefilter_rejects_missing_lost_deleted_and_unbound_immediate_claims() {
    let mut cx = cluster(&[("n1", "a")]);
    let (pre, ..) = run(&cx, &user("p", "nope"));
    assert_eq!(pre.code(), Code::UnschedulableAndUnresolvable);
    assert_eq!(pre.message(), "persistentvolumeclaim \"nope\" not found");

    add_pvc(
        &mut cx,
        pvc(
            "lost",
            json!({"spec": {"volumeName": "gone"}, "status": {"phase": "Lost"}}),
        ),
    );
    let (pre, ..) = run(&cx, &user("p", "lost"));
    assert_eq!(
        pre.message(),
        "persistentvolumeclaim \"lost\" bound to non-existent persistentvolume \"gone\""
    );

    add_pvc(
        &mut cx,
        pvc(
            "old",
            json!({"metadata": {"deletionTimestamp": "2024-01-01T00:00:00Z"}}),
        ),
    );
    assert_eq!(
        run(&cx, &user("p", "old")).0.message(),
        "persistentvolumeclaim \"old\" is being deleted"
    );

    // No class: Immediate.
    add_pvc(&mut cx, pvc("plain", json!({})));
    let (pre, ..) = run(&cx, &user("p", "plain"));
    assert_eq!(pre.code(), Code::UnschedulableAndUnresolvable);
    assert_eq!(pre.message(), ERR_REASON_UNBOUND_IMMEDIATE);

    // A pod without claims is skipped.
    assert!(run(&cx, &pod("q").build_info()).0.is_skip());
}

#[test]
fn a_bound_claim_keeps_the_pod_where_its_volume_is() {
    let mut cx = cluster(&[("n1", "a"), ("n2", "a")]);
    let bound = json!({"metadata": {"annotations": {"pv.kubernetes.io/bind-completed": "yes"}},
                       "spec": {"volumeName": "pv-n2"}});
    add_pvc(&mut cx, pvc("c", bound.clone()));
    add_pv(&mut cx, pv("pv-n2", pinned("n2")));
    let (pre, nodes, _) = run(&cx, &user("p", "c"));
    assert!(pre.is_success(), "{pre:?}");
    assert_eq!(passing(&nodes), ["n2"]);
    assert_eq!(nodes[0].1.message(), ERR_REASON_NODE_CONFLICT);
    assert_eq!(nodes[0].1.code(), Code::UnschedulableAndUnresolvable);

    // Its volume gone: no node.
    cx.cache.pvs.clear();
    let (_, nodes, _) = run(&cx, &user("p", "c"));
    assert!(passing(&nodes).is_empty());
    assert_eq!(nodes[0].1.message(), ERR_REASON_PV_NOT_EXIST);
}

#[test]
fn a_delayed_claim_takes_the_smallest_matching_static_volume() {
    let mut cx = cluster(&[("n1", "a"), ("n2", "a")]);
    cx.cache.storage_classes.insert(
        "local".into(),
        class(
            "local",
            json!({"provisioner": "kubernetes.io/no-provisioner"}),
        ),
    );
    add_pvc(
        &mut cx,
        pvc("c", json!({"spec": {"storageClassName": "local"}})),
    );
    let local = |name: &str, host: &str, size: &str, extra: Value| {
        let mut v = pinned(host);
        merge(
            &mut v,
            json!({"spec": {"storageClassName": "local", "capacity": {"storage": size}}}),
        );
        merge(&mut v, extra);
        pv(name, v)
    };
    // Too small, wrong access modes, wrong class, not Available: none of these fits.
    add_pv(&mut cx, local("small", "n1", "5Gi", json!({})));
    add_pv(
        &mut cx,
        local(
            "rox",
            "n1",
            "50Gi",
            json!({"spec": {"accessModes": ["ReadOnlyMany"]}}),
        ),
    );
    add_pv(
        &mut cx,
        local(
            "other",
            "n1",
            "50Gi",
            json!({"spec": {"storageClassName": "x"}}),
        ),
    );
    add_pv(
        &mut cx,
        local(
            "released",
            "n1",
            "50Gi",
            json!({"status": {"phase": "Released"}}),
        ),
    );
    let (_, nodes, _) = run(&cx, &user("p", "c"));
    assert!(passing(&nodes).is_empty());
    assert_eq!(nodes[0].1.message(), ERR_REASON_BIND_CONFLICT);

    add_pv(&mut cx, local("big", "n2", "100Gi", json!({})));
    add_pv(&mut cx, local("fit", "n2", "20Gi", json!({})));
    let (_, nodes, mut st) = run(&cx, &user("p", "c"));
    assert_eq!(passing(&nodes), ["n2"]);

    // Reserve assumes the smallest one bound to the claim; a second claim of the same
    // burst then gets the other volume, and a third none.
    let n2 = cx.cache.node_idx("n2").unwrap();
    let p = user("p", "c");
    assert!(plugin().reserve(&mut cx, &mut st, &p, n2).is_success());
    let pending = st.volume_binding.as_ref().unwrap().pending().unwrap();
    let chosen = &pending.static_bindings[0].pv;
    assert_eq!(chosen.metadata.name.as_deref(), Some("fit"));
    let claim_ref = chosen.spec.as_ref().unwrap().claim_ref.as_ref().unwrap();
    assert_eq!(claim_ref.name.as_deref(), Some("c"));
    assert_eq!(claim_ref.uid.as_deref(), Some("uid-c"));
    assert!(cx
        .cache
        .volume("fit")
        .unwrap()
        .spec
        .as_ref()
        .unwrap()
        .claim_ref
        .is_some());

    add_pvc(
        &mut cx,
        pvc("d", json!({"spec": {"storageClassName": "local"}})),
    );
    add_pvc(
        &mut cx,
        pvc("e", json!({"spec": {"storageClassName": "local"}})),
    );
    let (_, nodes, mut st2) = run(&cx, &user("q", "d"));
    assert_eq!(passing(&nodes), ["n2"]);
    let q = user("q", "d");
    assert!(plugin().reserve(&mut cx, &mut st2, &q, n2).is_success());
    let (_, nodes, _) = run(&cx, &user("r", "e"));
    assert!(passing(&nodes).is_empty(), "both volumes are taken");

    // Unreserve gives the first pod's volume back.
    plugin().unreserve(&mut cx, &mut st, &p, n2);
    assert!(cx
        .cache
        .volume("fit")
        .unwrap()
        .spec
        .as_ref()
        .unwrap()
        .claim_ref
        .is_none());
    let (_, nodes, _) = run(&cx, &user("r", "e"));
    assert_eq!(passing(&nodes), ["n2"]);
}

#[test]
fn provisioning_follows_allowed_topologies_and_storage_capacity() {
    let mut cx = cluster(&[("n1", "a"), ("n2", "b")]);
    cx.cache.storage_classes.insert(
        "zonal".into(),
        class(
            "zonal",
            json!({"allowedTopologies": [{"matchLabelExpressions": [
            {"key": "topology.kubernetes.io/zone", "values": ["a"]}]}]}),
        ),
    );
    add_pvc(
        &mut cx,
        pvc("c", json!({"spec": {"storageClassName": "zonal"}})),
    );
    let (_, nodes, mut st) = run(&cx, &user("p", "c"));
    assert_eq!(passing(&nodes), ["n1"]);
    assert_eq!(nodes[1].1.message(), ERR_REASON_BIND_CONFLICT);

    // Reserve: the claim is assumed to carry the selected node.
    let n1 = cx.cache.node_idx("n1").unwrap();
    let p = user("p", "c");
    assert!(plugin().reserve(&mut cx, &mut st, &p, n1).is_success());
    let key = ObjectKey::new(Kind::PersistentVolumeClaim, "default", "c");
    assert_eq!(selected_node(cx.cache.claim(&key).unwrap()), Some("n1"));
    assert_eq!(
        selected_node(cx.cache.pvcs.get(&key).unwrap()),
        None,
        "the API object is untouched"
    );
    // Another pod sharing that claim now fits only n1 (the selected node).
    let (_, nodes, _) = run(&cx, &user("q", "c"));
    assert_eq!(passing(&nodes), ["n1"]);
    plugin().unreserve(&mut cx, &mut st, &p, n1);
    assert_eq!(selected_node(cx.cache.claim(&key).unwrap()), None);

    // Storage capacity: only where the driver publishes it.
    cx.cache
        .storage_classes
        .insert("zonal".into(), class("zonal", json!({})));
    let cap = |name: &str, zone: &str, size: &str| {
        Arc::new(
            serde_json::from_value::<CSIStorageCapacity>(json!({
                "metadata": {"name": name, "namespace": "kube-system"},
                "storageClassName": "zonal",
                "nodeTopology": {"matchLabels": {"topology.kubernetes.io/zone": zone}},
                "capacity": size,
            }))
            .unwrap(),
        )
    };
    cx.cache.csi_capacities.insert(
        ObjectKey::new(Kind::CsiStorageCapacity, "kube-system", "a"),
        cap("a", "a", "5Gi"),
    );
    cx.cache.csi_capacities.insert(
        ObjectKey::new(Kind::CsiStorageCapacity, "kube-system", "b"),
        cap("b", "b", "50Gi"),
    );
    let (_, nodes, _) = run(&cx, &user("p", "c"));
    assert_eq!(
        passing(&nodes),
        ["n1", "n2"],
        "capacity is not tracked without a CSIDriver saying so"
    );
    cx.cache.csi_drivers.insert(
        "csi.example.com".into(),
        Arc::new(
            serde_json::from_value(
                json!({"metadata": {"name": "csi.example.com"}, "spec": {"storageCapacity": true}}),
            )
            .unwrap(),
        ),
    );
    let (_, nodes, _) = run(&cx, &user("p", "c"));
    assert_eq!(passing(&nodes), ["n2"]);
    assert_eq!(nodes[0].1.message(), ERR_REASON_NOT_ENOUGH_SPACE);
}

#[test]
fn args_are_validated_as_kube_scheduler_does() {
    assert_eq!(plugin().bind_timeout(), 600_000);
    let p = VolumeBinding::new(Some(&json!({"bindTimeoutSeconds": 30}))).unwrap();
    assert_eq!(p.bind_timeout(), 30_000);
    let e = VolumeBinding::new(Some(&json!({"bindTimeoutSeconds": -1}))).unwrap_err();
    assert!(e.to_string().contains("bindTimeoutSeconds"), "{e}");
    let e = VolumeBinding::new(Some(
        &json!({"shape": [{"utilization": 50, "score": 1}, {"utilization": 10, "score": 2}]}),
    ))
    .unwrap_err();
    assert!(e.to_string().contains("sorted in increasing order"), "{e}");
    assert!(VolumeBinding::new(Some(&json!({"bogus": 1}))).is_err());
}

#[test]
fn capacity_scoring_follows_the_shape() {
    // The default shape of StorageCapacityScoring: utilisation 0 scores 10, 100 scores 0.
    let p = VolumeBinding::new(Some(&json!({"shape": [
        {"utilization": 0, "score": 10}, {"utilization": 100, "score": 0}
    ]})))
    .unwrap();
    let shape = p.shape.clone().unwrap();
    let claim = pvc("c", json!({}));
    let with = |cap: &str| PodVolumes {
        static_bindings: vec![StaticBinding {
            pvc: claim.clone(),
            pv: pv("v", json!({"spec": {"capacity": {"storage": cap}}})),
        }],
        provisions: vec![],
    };
    // 10Gi of 20Gi: 50% used, score 50; of 100Gi: 10%, score 90.
    assert_eq!(p.capacity_score(&shape, &with("20Gi")), 50);
    assert_eq!(p.capacity_score(&shape, &with("100Gi")), 90);
}
