//! Builders for tests and benchmarks: `pod("p").req("cpu", "1").build_info()`.
//!
//! They build real API objects through JSON, so a test reads like the YAML a user writes.

use std::sync::Arc;

pub mod driver;

pub use driver::{DriverConfig, DriverStats, FakeDriver, Profiles};

use berth_api::k8s_openapi::api::core::v1::{Node, Pod};
use serde_json::{json, Value};

use crate::model::node::{NodeIdx, NodeInfo};
use crate::model::pod::PodInfo;
use crate::resources::ResourceNames;

/// A pod builder.
#[derive(Debug, Clone)]
pub struct PodBuilder(Value);

/// Starts a pod in namespace `default`.
pub fn pod(name: &str) -> PodBuilder {
    PodBuilder(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}")},
        "spec": {"containers": [{"name": "c", "resources": {"requests": {}}}]}
    }))
}

impl PodBuilder {
    /// Sets the namespace.
    pub fn namespace(mut self, ns: &str) -> Self {
        self.0["metadata"]["namespace"] = json!(ns);
        self
    }
    /// Adds a request to the first container.
    pub fn req(mut self, name: &str, qty: &str) -> Self {
        self.0["spec"]["containers"][0]["resources"]["requests"][name] = json!(qty);
        self
    }
    /// Adds a limit to the first container.
    pub fn limit(mut self, name: &str, qty: &str) -> Self {
        self.0["spec"]["containers"][0]["resources"]["limits"][name] = json!(qty);
        self
    }
    /// Adds a container with the given requests.
    pub fn container(mut self, requests: Value) -> Self {
        let n = self.0["spec"]["containers"].as_array().map_or(0, Vec::len);
        if let Some(a) = self.0["spec"]["containers"].as_array_mut() {
            a.push(json!({"name": format!("c{n}"), "resources": {"requests": requests}}));
        }
        self
    }
    /// Adds an init container with the given requests.
    pub fn init_container(mut self, requests: Value) -> Self {
        let spec = &mut self.0["spec"];
        if spec.get("initContainers").is_none() {
            spec["initContainers"] = json!([]);
        }
        if let Some(a) = spec["initContainers"].as_array_mut() {
            a.push(
                json!({"name": format!("init{}", a.len()), "resources": {"requests": requests}}),
            );
        }
        self
    }
    /// Adds a label.
    pub fn label(mut self, k: &str, v: &str) -> Self {
        self.0["metadata"]["labels"][k] = json!(v);
        self
    }
    /// Adds an annotation.
    pub fn annotation(mut self, k: &str, v: &str) -> Self {
        self.0["metadata"]["annotations"][k] = json!(v);
        self
    }
    /// Sets `spec.workloadRef` (a Workload's pod group; `replica` empty for none).
    pub fn workload_ref(mut self, workload: &str, pod_group: &str, replica: &str) -> Self {
        let r = &mut self.0["spec"]["workloadRef"];
        *r = json!({"name": workload, "podGroup": pod_group});
        if !replica.is_empty() {
            r["podGroupReplicaKey"] = json!(replica);
        }
        self
    }
    /// Sets `spec.nodeName`.
    pub fn node_name(mut self, n: &str) -> Self {
        self.0["spec"]["nodeName"] = json!(n);
        self
    }
    /// Sets `spec.priority`.
    pub fn priority(mut self, p: i32) -> Self {
        self.0["spec"]["priority"] = json!(p);
        self
    }
    /// Adds a toleration.
    pub fn toleration(mut self, t: Value) -> Self {
        let spec = &mut self.0["spec"];
        if spec.get("tolerations").is_none() {
            spec["tolerations"] = json!([]);
        }
        if let Some(a) = spec["tolerations"].as_array_mut() {
            a.push(t);
        }
        self
    }
    /// Adds a host port to the first container.
    pub fn host_port(mut self, port: i32, protocol: &str, ip: &str) -> Self {
        let c = &mut self.0["spec"]["containers"][0];
        if c.get("ports").is_none() {
            c["ports"] = json!([]);
        }
        if let Some(a) = c["ports"].as_array_mut() {
            let mut p = json!({"containerPort": port, "hostPort": port, "protocol": protocol});
            if !ip.is_empty() {
                p["hostIP"] = json!(ip);
            }
            a.push(p);
        }
        self
    }
    /// Sets any `spec` field (`affinity`, `topologySpreadConstraints`, `volumes`...).
    pub fn spec(mut self, field: &str, v: Value) -> Self {
        self.0["spec"][field] = v;
        self
    }
    /// Sets any `metadata` field.
    pub fn meta(mut self, field: &str, v: Value) -> Self {
        self.0["metadata"][field] = v;
        self
    }
    /// Sets `status.phase`.
    pub fn phase(mut self, p: &str) -> Self {
        self.0["status"]["phase"] = json!(p);
        self
    }
    /// Sets any `status` field (`startTime`, `conditions`, `nominatedNodeName`...).
    pub fn status(mut self, field: &str, v: Value) -> Self {
        self.0["status"][field] = v;
        self
    }
    /// The JSON.
    pub fn json(&self) -> &Value {
        &self.0
    }
    /// The API object.
    pub fn build(&self) -> Arc<Pod> {
        Arc::new(
            serde_json::from_value(self.0.clone())
                .unwrap_or_else(|e| panic!("test pod does not deserialize: {e}")),
        )
    }
    /// The derived [`PodInfo`] (resource names interned in a throw-away table).
    pub fn build_info(&self) -> PodInfo {
        self.build_info_with(&mut ResourceNames::default())
    }
    /// The derived [`PodInfo`] with a given name table.
    pub fn build_info_with(&self, names: &mut ResourceNames) -> PodInfo {
        PodInfo::new(self.build(), names).unwrap_or_else(|e| panic!("test pod is invalid: {e}"))
    }
}

/// A node builder.
#[derive(Debug, Clone)]
pub struct NodeBuilder(Value);

/// Starts a node with 110 allocatable pods and nothing else.
pub fn node(name: &str) -> NodeBuilder {
    NodeBuilder(json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "uid": format!("uid-{name}"), "labels": {"kubernetes.io/hostname": name}},
        "spec": {},
        "status": {"allocatable": {"pods": "110"}}
    }))
}

impl NodeBuilder {
    /// Sets an allocatable amount.
    pub fn alloc(mut self, name: &str, qty: &str) -> Self {
        self.0["status"]["allocatable"][name] = json!(qty);
        self
    }
    /// Adds a label.
    pub fn label(mut self, k: &str, v: &str) -> Self {
        self.0["metadata"]["labels"][k] = json!(v);
        self
    }
    /// Adds an annotation.
    pub fn annotation(mut self, k: &str, v: &str) -> Self {
        self.0["metadata"]["annotations"][k] = json!(v);
        self
    }
    /// Adds a taint.
    pub fn taint(mut self, key: &str, value: &str, effect: &str) -> Self {
        let spec = &mut self.0["spec"];
        if spec.get("taints").is_none() {
            spec["taints"] = json!([]);
        }
        if let Some(a) = spec["taints"].as_array_mut() {
            let mut t = json!({"key": key, "effect": effect});
            if !value.is_empty() {
                t["value"] = json!(value);
            }
            a.push(t);
        }
        self
    }
    /// Cordons the node.
    pub fn unschedulable(mut self) -> Self {
        self.0["spec"]["unschedulable"] = json!(true);
        self
    }
    /// The JSON.
    pub fn json(&self) -> &Value {
        &self.0
    }
    /// The API object.
    pub fn build(&self) -> Arc<Node> {
        Arc::new(
            serde_json::from_value(self.0.clone())
                .unwrap_or_else(|e| panic!("test node does not deserialize: {e}")),
        )
    }
    /// A [`NodeInfo`] with no pods, index 0.
    pub fn build_info(&self) -> NodeInfo {
        self.build_info_with(&mut ResourceNames::default())
    }
    /// A [`NodeInfo`] with a given name table.
    pub fn build_info_with(&self, names: &mut ResourceNames) -> NodeInfo {
        NodeInfo::new(NodeIdx(0), self.build(), names)
            .unwrap_or_else(|e| panic!("test node is invalid: {e}"))
    }
}
