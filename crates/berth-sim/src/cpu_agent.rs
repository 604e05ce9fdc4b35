//! The koordlet half of the simulated node agent: for a Node that declares its CPU layout
//! with the label [`LABEL_CPU_LAYOUT`] (`"<sockets>x<cores per socket>x<threads per core>"`,
//! e.g. `2x8x2`), the node's NodeResourceTopology carries the annotations koordlet
//! publishes: `node.koordinator.sh/cpu-topology` (one socket = one NUMA node, CPUs numbered
//! as Linux numbers an Intel machine: every core's first thread, then every second thread),
//! `kubelet.koordinator.sh/cpu-manager-policy` (`none`), `node.koordinator.sh/cpu-shared-pools`
//! (each socket's CPUs minus the node-reserved ones) and, when the Node has
//! `node.koordinator.sh/reservation`, a copy of it whose CPUs are concrete (`reservedCPUs`,
//! a quantity turned into cores as the kubelet's static CPU manager picks them).
//!
//! The NRT is created (zones `node-<i>` of the socket's CPUs) when the node has none; an
//! NRT the scenario gives keeps its zones and policy and gets the annotations. Nodes without
//! the label are left alone, so scenarios written before this agent run unchanged.

use std::collections::BTreeMap;

use berth_api::annotations::{
    AnnotationCodec, CpuInfo, CpuSharedPool, CpuSharedPools, CpuTopology, KubeletCpuManagerPolicy,
    NodeReservation, ANNOTATION_NODE_RESERVATION,
};
use berth_api::k8s_openapi::api::core::v1::Node;
use berth_api::nrt::NodeResourceTopology;
use berth_core::cpuset::state::concrete_reserved;
use berth_core::cpuset::{CpuLayout, CpuSet};
use serde_json::json;

/// Node label declaring the CPU layout: `"<sockets>x<cores per socket>x<threads per core>"`.
pub const LABEL_CPU_LAYOUT: &str = "sim.berth.dev/cpu-layout";

/// Most CPUs a declared layout may have (a typo must not build a million-CPU node).
const MAX_CPUS: u32 = 4096;

/// The layout a node declares: `Ok(None)` without the label, an error naming the label when
/// it is malformed.
pub fn declared(node: &Node) -> Result<Option<(u32, u32, u32)>, String> {
    let Some(text) = node
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(LABEL_CPU_LAYOUT))
    else {
        return Ok(None);
    };
    let bad = || {
        format!(
            "label {LABEL_CPU_LAYOUT}: {text:?} is not <sockets>x<cores>x<threads> of positive integers with at most {MAX_CPUS} CPUs"
        )
    };
    let parts: Vec<u32> = text
        .split('x')
        .map(|p| p.parse::<u32>().ok().filter(|n| *n > 0))
        .collect::<Option<Vec<_>>>()
        .ok_or_else(bad)?;
    let [s, c, t] = parts[..] else {
        return Err(bad());
    };
    // Three u32 factors can overflow even a u64 (and wrap to a small product in a release
    // build, declaring billions of sockets), so the product is checked at each step.
    let total = s
        .checked_mul(c)
        .and_then(|sc| sc.checked_mul(t))
        .filter(|n| *n <= MAX_CPUS);
    if total.is_none() {
        return Err(bad());
    }
    Ok(Some((s, c, t)))
}

fn topology(sockets: u32, cores: u32, threads: u32) -> CpuTopology {
    let total = sockets * cores;
    let mut detail = Vec::new();
    for t in 0..threads {
        for c in 0..total {
            detail.push(CpuInfo {
                id: t * total + c,
                core: c,
                socket: c / cores,
                node: c / cores,
            });
        }
    }
    CpuTopology { detail }
}

/// The NRT koordlet would publish for `node` with layout `(sockets, cores, threads)`, on top
/// of `existing` (or a new one).
pub fn publish(
    node: &Node,
    (sockets, cores, threads): (u32, u32, u32),
    existing: Option<&NodeResourceTopology>,
) -> NodeResourceTopology {
    let name = node.metadata.name.clone().unwrap_or_default();
    let mut nrt = match existing {
        Some(n) => n.clone(),
        None => {
            let per = cores * threads;
            let zones: Vec<_> = (0..sockets)
                .map(|i| {
                    json!({"name": format!("node-{i}"), "type": "Node", "resources": [
                        {"name": "cpu", "capacity": per, "allocatable": per, "available": per}]})
                })
                .collect();
            NodeResourceTopology::from_any_version(json!({
                "apiVersion": "topology.node.k8s.io/v1alpha2",
                "kind": "NodeResourceTopology",
                "metadata": {"name": name},
                "attributes": [{"name": "topologyManagerPolicy", "value": "none"}],
                "zones": zones,
            }))
            .unwrap_or_default()
        }
    };
    let topo = topology(sockets, cores, threads);
    let layout = CpuLayout::new(&topo).unwrap_or_default();
    let annotations = nrt.metadata.annotations.get_or_insert_with(BTreeMap::new);
    topo.insert_into(annotations);
    KubeletCpuManagerPolicy {
        policy: "none".into(),
        ..Default::default()
    }
    .insert_into(annotations);
    let reservation = NodeReservation::from_annotations(node.metadata.annotations.as_ref())
        .ok()
        .flatten();
    let reserved: CpuSet = reservation
        .as_ref()
        .map(|r| concrete_reserved(&layout, &CpuSet::new(), r))
        .unwrap_or_default();
    match reservation {
        Some(r) => {
            NodeReservation {
                reserved_cpus: reserved.to_string(),
                resources: BTreeMap::new(),
                apply_policy: r.apply_policy,
            }
            .insert_into(annotations);
        }
        None => {
            annotations.remove(ANNOTATION_NODE_RESERVATION);
        }
    }
    // Each socket's CPUs in one pass over the node's (a pass per socket would be quadratic
    // in the 4,096 CPUs a layout may declare, one socket each).
    let mut per_socket: BTreeMap<u32, CpuSet> = (0..sockets).map(|s| (s, CpuSet::new())).collect();
    for c in &layout.all().difference(&reserved) {
        if let Some(cpus) = layout.place(c).and_then(|p| per_socket.get_mut(&p.socket)) {
            cpus.insert(c);
        }
    }
    let pools = per_socket
        .into_iter()
        .map(|(s, cpus)| CpuSharedPool {
            socket: i32::try_from(s).unwrap_or(i32::MAX),
            node: i32::try_from(s).unwrap_or(i32::MAX),
            cpuset: cpus.to_string(),
        })
        .collect();
    CpuSharedPools(pools).insert_into(annotations);
    nrt
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(labels: serde_json::Value, annotations: serde_json::Value) -> Node {
        serde_json::from_value(
            json!({"metadata": {"name": "n", "labels": labels, "annotations": annotations}}),
        )
        .expect("node")
    }

    #[test]
    fn a_declared_layout_becomes_koordlets_annotations() {
        let n = node(
            json!({LABEL_CPU_LAYOUT: "2x2x2"}),
            json!({"node.koordinator.sh/reservation": r#"{"resources":{"cpu":"2"}}"#}),
        );
        let layout = declared(&n).expect("valid").expect("declared");
        let nrt = publish(&n, layout, None);
        let topo = CpuTopology::from_annotations(nrt.metadata.annotations.as_ref())
            .expect("valid")
            .expect("present");
        assert_eq!(topo.detail.len(), 8);
        assert_eq!(
            nrt.annotation(ANNOTATION_NODE_RESERVATION),
            Some(r#"{"reservedCPUs":"0,4"}"#),
            "2 CPUs become core 0's two threads"
        );
        assert_eq!(
            nrt.annotation("node.koordinator.sh/cpu-shared-pools"),
            Some(
                r#"[{"socket":0,"node":0,"cpuset":"1,5"},{"socket":1,"node":1,"cpuset":"2-3,6-7"}]"#
            )
        );
        assert_eq!(nrt.spec.zones.len(), 2);
    }

    #[test]
    fn malformed_layouts_name_the_label() {
        for bad in ["2x2", "0x1x1", "axbxc", "64x64x64"] {
            let err = declared(&node(json!({LABEL_CPU_LAYOUT: bad}), json!({}))).expect_err(bad);
            assert!(err.starts_with("label sim.berth.dev/cpu-layout"), "{err}");
        }
        assert_eq!(declared(&node(json!({}), json!({}))), Ok(None));
    }
}
