//! The harness against a real etcd + kube-apiserver: nodes with status, binding and
//! immediate deletion, CRDs, ServiceAccount tokens, two clusters in one process.

use berth_testcluster::TestCluster;
use k8s_openapi::api::core::v1::{Binding, Node, Pod};
use kube::api::{ListParams, PostParams};
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use kube::Api;
use serde_json::json;

fn pod(name: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "schedulerName": "berth",
            "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                            "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}],
        },
    }))
    .unwrap()
}

#[tokio::test]
async fn node_is_created_ready_with_allocatable() {
    let cluster = TestCluster::shared().unwrap();
    eprintln!("shared cluster started in {:?}", cluster.started_in());
    cluster
        .create_node(
            "status-node",
            "8",
            "16Gi",
            110,
            &[("topology.kubernetes.io/zone", "z1")],
        )
        .await
        .unwrap();

    let node = Api::<Node>::all(cluster.client())
        .get("status-node")
        .await
        .unwrap();
    let labels = node.metadata.labels.unwrap();
    assert_eq!(labels["topology.kubernetes.io/zone"], "z1");
    assert_eq!(labels["kubernetes.io/hostname"], "status-node");
    let status = node.status.unwrap();
    let allocatable = status.allocatable.unwrap();
    assert_eq!(allocatable["cpu"].0, "8");
    assert_eq!(allocatable["memory"].0, "16Gi");
    assert_eq!(allocatable["pods"].0, "110");
    let conditions = status.conditions.unwrap();
    assert!(
        conditions
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True"),
        "{conditions:?}"
    );
    // TaintNodesByCondition is off: no not-ready taint appears.
    assert!(node
        .spec
        .unwrap_or_default()
        .taints
        .unwrap_or_default()
        .is_empty());

    let node = cluster.set_node_ready("status-node", false).await.unwrap();
    let conditions = node.status.unwrap().conditions.unwrap();
    assert!(conditions
        .iter()
        .any(|c| c.type_ == "Ready" && c.status == "False"));
}

#[tokio::test]
async fn pod_is_bound_through_the_binding_subresource_and_deleted_at_once() {
    let cluster = TestCluster::shared().unwrap();
    let ns = cluster.unique_namespace("bind").await.unwrap();
    cluster
        .create_node("bind-node", "4", "8Gi", 110, &[])
        .await
        .unwrap();
    let pods: Api<Pod> = Api::namespaced(cluster.client(), &ns);
    pods.create(&PostParams::default(), &pod("p"))
        .await
        .unwrap();

    let binding: Binding = serde_json::from_value(json!({
        "metadata": {"name": "p"},
        "target": {"kind": "Node", "name": "bind-node"},
    }))
    .unwrap();
    let _: serde_json::Value = pods
        .create_subresource("binding", "p", &PostParams::default(), &binding)
        .await
        .unwrap();

    let bound = pods.get("p").await.unwrap();
    assert_eq!(bound.spec.unwrap().node_name.as_deref(), Some("bind-node"));
    let conditions = bound.status.unwrap().conditions.unwrap();
    assert!(
        conditions
            .iter()
            .any(|c| c.type_ == "PodScheduled" && c.status == "True"),
        "{conditions:?}"
    );

    cluster.delete_pod_now(&ns, "p").await.unwrap();
    assert!(
        pods.get_opt("p").await.unwrap().is_none(),
        "the bound pod lingers"
    );
    // Deleting again is fine.
    cluster.delete_pod_now(&ns, "p").await.unwrap();
}

#[tokio::test]
async fn crds_are_established_and_a_reservation_can_be_created() {
    let cluster = TestCluster::shared().unwrap();
    let reservations = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("scheduling.koordinator.sh", "v1alpha1", "Reservation"),
        "reservations",
    );
    let api: Api<DynamicObject> = Api::all_with(cluster.client(), &reservations);
    let r: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "scheduling.koordinator.sh/v1alpha1",
        "kind": "Reservation",
        "metadata": {"name": "r1"},
        "spec": {
            "template": {"spec": {"containers": [{"name": "c", "image": "x",
                "resources": {"requests": {"cpu": "1"}}}]}},
            "owners": [{"object": {"namespace": "default", "name": "owner"}}],
            "ttl": "1h",
        },
    }))
    .unwrap();
    api.create(&PostParams::default(), &r).await.unwrap();
    let got = api.get("r1").await.unwrap();
    assert_eq!(got.data["spec"]["ttl"], "1h");

    let nrt = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("topology.node.k8s.io", "v1alpha2", "NodeResourceTopology"),
        "noderesourcetopologies",
    );
    let list = Api::<DynamicObject>::all_with(cluster.client(), &nrt)
        .list(&ListParams::default())
        .await
        .unwrap();
    assert!(list.items.is_empty());
}

#[tokio::test]
async fn service_account_token_authenticates_with_that_accounts_rbac() {
    let cluster = TestCluster::shared().unwrap();
    let ns = cluster.unique_namespace("sa").await.unwrap();
    let token = cluster.service_account_token(&ns, "robot").await.unwrap();
    assert!(!token.is_empty());
    let kubeconfig = cluster.kubeconfig_for_token(&token).unwrap();
    let out = std::process::Command::new(cluster.kubectl())
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .args([
            "auth",
            "whoami",
            "-o",
            "jsonpath={.status.userInfo.username}",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("system:serviceaccount:{ns}:robot")
    );
    // No RoleBinding: RBAC denies.
    let out = std::process::Command::new(cluster.kubectl())
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .args(["get", "pods", "-n", &ns])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("forbidden"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Two clusters side by side in one process: separate ports, separate state, and dropping
/// one leaves the other running.
#[test]
fn two_clusters_in_one_process() {
    let a = TestCluster::start().unwrap();
    let b = TestCluster::start().unwrap();
    eprintln!(
        "clusters started in {:?} and {:?}",
        a.started_in(),
        b.started_in()
    );
    assert_ne!(a.server_url(), b.server_url());
    assert_ne!(a.etcd_url(), b.etcd_url());

    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        a.create_node("only-in-a", "1", "1Gi", 10, &[])
            .await
            .unwrap();
        let in_b = Api::<Node>::all(b.client())
            .get_opt("only-in-a")
            .await
            .unwrap();
        assert!(in_b.is_none());
    });

    let dir = a.dir().to_path_buf();
    drop(a);
    assert!(!dir.exists(), "{} is left behind", dir.display());
    rt.block_on(async {
        let nodes = Api::<Node>::all(b.client())
            .list(&ListParams::default())
            .await
            .unwrap();
        assert!(nodes.items.is_empty());
    });
}

/// kubectl (built with the cluster) talks to it with the admin kubeconfig.
#[test]
fn kubectl_uses_the_admin_kubeconfig() {
    let cluster = TestCluster::shared().unwrap();
    let out = cluster
        .kubectl_command()
        .args(["get", "--raw", "/version"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let version: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(version["gitVersion"]
        .as_str()
        .unwrap()
        .starts_with("v1.35."));
}
