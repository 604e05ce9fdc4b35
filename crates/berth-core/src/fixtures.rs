//! Generated clusters for benchmarks (`cargo bench`, `berth bench`), shared so both measure
//! the same thing. Shapes follow kube-scheduler's `scheduler_perf` templates
//! (`node-default.yaml`: 4 CPU, 32Gi, 110 pods; `pod-default.yaml`: 100m CPU, 500Mi).

use std::sync::Arc;

use berth_api::k8s_openapi::api::core::v1::{Node, Pod};
use serde_json::json;

/// Zones generated nodes are spread over (`topology.kubernetes.io/zone`).
pub const ZONES: usize = 10;

/// `n` nodes shaped like scheduler_perf's default node.
pub fn nodes(n: usize) -> Vec<Arc<Node>> {
    (0..n)
        .map(|i| {
            let name = format!("node-{i:05}");
            let v = json!({
                "apiVersion": "v1", "kind": "Node",
                "metadata": {"name": name, "uid": format!("uid-{name}"), "labels": {
                    "kubernetes.io/hostname": name,
                    "topology.kubernetes.io/zone": format!("zone-{}", i % ZONES),
                }},
                "spec": {},
                "status": {"allocatable": {"cpu": "4", "memory": "32Gi", "pods": "110"}},
            });
            Arc::new(serde_json::from_value(v).unwrap_or_else(|e| panic!("fixture node: {e}")))
        })
        .collect()
}

/// `n` pending pods shaped like scheduler_perf's default pod, named `{prefix}-{i}`, created
/// one millisecond apart.
pub fn pods(prefix: &str, n: usize) -> Vec<Arc<Pod>> {
    (0..n).map(|i| pod(prefix, i, json!({}))).collect()
}

/// One default pod with extra labels.
pub fn pod(prefix: &str, i: usize, labels: serde_json::Value) -> Arc<Pod> {
    let name = format!("{prefix}-{i:06}");
    let v = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}"), "labels": labels,
                      "creationTimestamp": crate::time::rfc3339(1_704_067_200_000 + i as i64)},
        "spec": {"containers": [{"name": "pause", "image": "registry.k8s.io/pause:3.10",
                  "resources": {"requests": {"cpu": "100m", "memory": "500Mi"}}}]},
    });
    Arc::new(serde_json::from_value(v).unwrap_or_else(|e| panic!("fixture pod: {e}")))
}
