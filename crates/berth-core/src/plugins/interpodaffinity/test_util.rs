//! Test fixtures: a [`Cluster`] with nodes and pods placed by `spec.nodeName`.

use std::sync::Arc;

use berth_api::k8s_openapi::api::core::v1::Node;
use serde_json::json;

use crate::cache::Cluster;
use crate::model::node::{NodeIdx, NodeInfo};
use crate::testing::{NodeBuilder, PodBuilder};

/// A cluster holding `nodes` and `pods`; pods with `spec.nodeName` are placed there.
pub(crate) fn cluster(nodes: &[NodeBuilder], pods: &[PodBuilder]) -> Cluster {
    let mut cx = Cluster::default();
    for n in nodes {
        cx.apply_node(n.build()).expect("test node is valid");
    }
    for p in pods {
        let info = p.build_info_with(&mut cx.cache.names);
        cx.cache.apply_pod(Arc::new(info));
    }
    cx
}

/// A cluster holding already-built `nodes` (for nodes whose labels the builder cannot
/// express, such as one without `kubernetes.io/hostname`) and `pods`.
pub(crate) fn cluster_of(nodes: &[Arc<Node>], pods: &[PodBuilder]) -> Cluster {
    let mut cx = Cluster::default();
    for n in nodes {
        cx.apply_node(n.clone()).expect("test node is valid");
    }
    for p in pods {
        let info = p.build_info_with(&mut cx.cache.names);
        cx.cache.apply_pod(Arc::new(info));
    }
    cx
}

/// A node with exactly `labels` (no `kubernetes.io/hostname` unless given).
pub(crate) fn bare_node(name: &str, labels: &[(&str, &str)]) -> Arc<Node> {
    let mut v = crate::testing::node(name).json().clone();
    let map: serde_json::Map<String, serde_json::Value> = labels
        .iter()
        .map(|(k, v)| (k.to_string(), json!(v)))
        .collect();
    v["metadata"]["labels"] = serde_json::Value::Object(map);
    Arc::new(serde_json::from_value(v).expect("test node deserializes"))
}

/// A node of `cx` by name.
pub(crate) fn node_with<'c>(cx: &'c Cluster, name: &str) -> &'c NodeInfo {
    cx.cache
        .node_by_name(name)
        .unwrap_or_else(|| panic!("no node {name}"))
}

/// The indices of the named nodes, in the order given.
pub(crate) fn indices(cx: &Cluster, names: &[&str]) -> Vec<NodeIdx> {
    names.iter().map(|n| node_with(cx, n).idx).collect()
}
