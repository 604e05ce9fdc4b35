//! The real kube-controller-manager in the test cluster: the PersistentVolume controller binds
//! a static volume and a volume the test's provisioner creates, the Deployment and
//! ReplicaSet controllers create pods and the garbage collector removes them.

use std::time::{Duration, Instant};

use berth_testcluster::{Options, Provisioner, TestCluster, ANN_SELECTED_NODE};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::Api;
use serde_json::json;

fn start() -> TestCluster {
    TestCluster::start_with(Options::new().controller_manager()).unwrap_or_else(|e| panic!("{e}"))
}

/// Polls `check` until it returns `Some`, or panics with the cluster's logs after `limit`.
async fn eventually<T, F, Fut>(cluster: &TestCluster, what: &str, limit: Duration, check: F) -> T
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + limit;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}\n{}",
            cluster.log_tails(30)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn create_class(cluster: &TestCluster, name: &str, provisioner: &str, mode: &str) {
    let sc: StorageClass = serde_json::from_value(json!({
        "metadata": {"name": name}, "provisioner": provisioner, "volumeBindingMode": mode,
    }))
    .unwrap();
    Api::<StorageClass>::all(cluster.client())
        .create(&PostParams::default(), &sc)
        .await
        .unwrap();
}

async fn create_claim(cluster: &TestCluster, ns: &str, class: &str) -> PersistentVolumeClaim {
    let pvc: PersistentVolumeClaim = serde_json::from_value(json!({
        "metadata": {"name": "data"},
        "spec": {"storageClassName": class, "accessModes": ["ReadWriteOnce"],
                 "resources": {"requests": {"storage": "5Gi"}}},
    }))
    .unwrap();
    Api::<PersistentVolumeClaim>::namespaced(cluster.client(), ns)
        .create(&PostParams::default(), &pvc)
        .await
        .unwrap()
}

/// The claim once the PersistentVolume controller has bound it.
async fn bound_claim(cluster: &TestCluster, ns: &str) -> PersistentVolumeClaim {
    let api: Api<PersistentVolumeClaim> = Api::namespaced(cluster.client(), ns);
    eventually(cluster, "the claim Bound", Duration::from_secs(60), || {
        let api = api.clone();
        async move {
            let c = api.get("data").await.ok()?;
            let phase = c.status.as_ref()?.phase.as_deref()?;
            (phase == "Bound").then_some(c)
        }
    })
    .await
}

#[tokio::test]
async fn the_pv_controller_binds_a_static_immediate_volume_created_after_its_claim() {
    let cluster = start();
    let ns = cluster.unique_namespace("static").await.unwrap();
    create_class(
        &cluster,
        "manual",
        "kubernetes.io/no-provisioner",
        "Immediate",
    )
    .await;
    let claim = create_claim(&cluster, &ns, "manual").await;
    let pv: PersistentVolume = serde_json::from_value(json!({
        "metadata": {"name": "pv1"},
        "spec": {"storageClassName": "manual", "capacity": {"storage": "8Gi"},
                 "accessModes": ["ReadWriteOnce"], "hostPath": {"path": "/data"}},
    }))
    .unwrap();
    let volumes: Api<PersistentVolume> = Api::all(cluster.client());
    volumes.create(&PostParams::default(), &pv).await.unwrap();

    let bound = bound_claim(&cluster, &ns).await;
    assert_eq!(bound.spec.unwrap().volume_name.as_deref(), Some("pv1"));
    let annotations = bound.metadata.annotations.unwrap_or_default();
    assert_eq!(
        annotations
            .get("pv.kubernetes.io/bind-completed")
            .map(String::as_str),
        Some("yes")
    );
    let pv = eventually(
        &cluster,
        "the volume Bound",
        Duration::from_secs(30),
        || {
            let volumes = volumes.clone();
            async move {
                let v = volumes.get("pv1").await.ok()?;
                (v.status.as_ref()?.phase.as_deref()? == "Bound").then_some(v)
            }
        },
    )
    .await;
    let claim_ref = pv.spec.unwrap().claim_ref.unwrap();
    assert_eq!(claim_ref.uid, claim.metadata.uid);
    assert_eq!(claim_ref.namespace.as_deref(), Some(ns.as_str()));
}

#[tokio::test]
async fn the_played_provisioner_creates_a_volume_once_the_claim_names_its_node() {
    let cluster = start();
    let ns = cluster.unique_namespace("wffc").await.unwrap();
    cluster
        .create_node(
            "n1",
            "4",
            "8Gi",
            110,
            &[("kubernetes.io/hostname", "host-1")],
        )
        .await
        .unwrap();
    create_class(
        &cluster,
        "standard",
        "csi.example.com",
        "WaitForFirstConsumer",
    )
    .await;
    let provisioner = Provisioner::start(cluster.client());
    let claim = create_claim(&cluster, &ns, "standard").await;
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(cluster.client(), &ns);

    // Without a node chosen, nothing is provisioned (the PV controller waits for the first
    // consumer) and the claim stays Pending.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(provisioner.created().is_empty(), "{provisioner:?}");
    let pending = claims.get("data").await.unwrap();
    assert_eq!(
        pending.status.and_then(|s| s.phase).as_deref(),
        Some("Pending")
    );

    // The scheduler's PreBind: the claim names the node.
    let patch = json!({"metadata": {"annotations": {ANN_SELECTED_NODE: "n1"}}});
    claims
        .patch("data", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    let bound = bound_claim(&cluster, &ns).await;
    let uid = claim.metadata.uid.unwrap();
    let name = format!("pvc-{uid}");
    assert_eq!(
        bound.spec.unwrap().volume_name.as_deref(),
        Some(name.as_str())
    );
    assert_eq!(provisioner.created(), vec![name.clone()]);
    let pv = Api::<PersistentVolume>::all(cluster.client())
        .get(&name)
        .await
        .unwrap();
    let terms = pv
        .spec
        .unwrap()
        .node_affinity
        .unwrap()
        .required
        .unwrap()
        .node_selector_terms;
    assert_eq!(
        terms[0].match_expressions.as_ref().unwrap()[0].values,
        Some(vec!["host-1".to_string()]),
        "pinned to the node's hostname label"
    );
}

#[tokio::test]
async fn deployments_get_pods_and_the_garbage_collector_removes_them() {
    let cluster = start();
    let ns = cluster.unique_namespace("deploy").await.unwrap();
    let deployment: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]},
            },
        },
    }))
    .unwrap();
    let deployments: Api<Deployment> = Api::namespaced(cluster.client(), &ns);
    deployments
        .create(&PostParams::default(), &deployment)
        .await
        .unwrap();
    let pods: Api<Pod> = Api::namespaced(cluster.client(), &ns);
    let count = |pods: Api<Pod>| async move {
        pods.list(&ListParams::default().labels("app=web"))
            .await
            .map(|l| l.items.len())
            .ok()
    };
    eventually(&cluster, "two pods", Duration::from_secs(60), || {
        let pods = pods.clone();
        async move { count(pods).await.filter(|n| *n == 2) }
    })
    .await;
    // Background deletion: the garbage collector deletes the ReplicaSet, then its pods.
    deployments
        .delete("web", &DeleteParams::background())
        .await
        .unwrap();
    eventually(&cluster, "the pods gone", Duration::from_secs(60), || {
        let pods = pods.clone();
        async move {
            // Pods are deleted gracefully (no kubelet): marked for deletion counts as gone.
            let list = pods.list(&ListParams::default()).await.ok()?;
            list.items
                .iter()
                .all(|p| p.metadata.deletion_timestamp.is_some())
                .then_some(())
        }
    })
    .await;
}
