//! Property test: a node's remembered reserve-cache slot ([`NumaCluster::slot`],
//! [`NumaCluster::view_node`], [`NumaCluster::record_filter_node`]) gives exactly what the
//! lookup by name gives ([`NumaCluster::view`], [`NumaCluster::record_filter`]), after any
//! sequence of node additions and deletions (node indices reused), NRT additions and
//! deletions (cache slots reused) and filter verdicts.

use berth_api::nrt::NodeResourceTopology;
use proptest::prelude::*;
use serde_json::json;

use super::*;
use crate::cache::Cluster;
use crate::numa::NumaPluginConfig;
use crate::testing::node;

const NODES: usize = 6;

fn name(i: usize) -> String {
    format!("n{}", i % NODES)
}

fn nrt(name: &str, cpu: i64) -> NodeResourceTopology {
    let v = json!({
        "apiVersion": "topology.node.k8s.io/v1alpha2", "kind": "NodeResourceTopology",
        "metadata": {"name": name},
        "attributes": [{"name": "topologyManagerPolicy", "value": "single-numa-node"}],
        "zones": [{"name": "node-0", "type": "Node", "resources": [
            {"name": "cpu", "capacity": "8", "allocatable": "8", "available": cpu.to_string()}]}],
    });
    NodeResourceTopology::from_any_version(v).expect("valid NRT")
}

#[derive(Debug, Clone)]
enum Op {
    AddNode(usize),
    DeleteNode(usize),
    /// An NRT for node `i` with this many CPUs available.
    Nrt(usize, i64),
    DeleteNrt(usize),
    /// The cache forgets the node (as when its Node object goes).
    ForgetNode(usize),
    /// A filter verdict on node `i` (if it exists), recorded through the slot on one
    /// cluster and by name on the other.
    Verdict(usize, bool),
    /// Remember node `i`'s slot.
    Remember(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0..NODES).prop_map(Op::AddNode),
        (0..NODES).prop_map(Op::DeleteNode),
        (0..NODES, 0..8i64).prop_map(|(i, c)| Op::Nrt(i, c)),
        (0..NODES).prop_map(Op::DeleteNrt),
        (0..NODES).prop_map(Op::ForgetNode),
        (0..NODES, any::<bool>()).prop_map(|(i, p)| Op::Verdict(i, p)),
        (0..NODES).prop_map(Op::Remember),
    ]
}

fn cluster() -> Cluster {
    let mut cx = Cluster::default();
    let mut config = NumaPluginConfig::default();
    config.cache.filtered_out_threshold = 2;
    cx.numa = NumaCluster::new(&config);
    cx
}

/// Applies `op` to `cx`; `by_slot` says how verdicts are recorded.
fn apply(cx: &mut Cluster, op: &Op, by_slot: bool, now: Time) {
    match *op {
        Op::AddNode(i) => {
            let _ = cx.apply_node(node(&name(i)).build());
        }
        Op::DeleteNode(i) => {
            cx.cache.delete_node(&name(i));
        }
        Op::Nrt(i, cpu) => {
            let _ = cx.numa.apply_nrt(&nrt(&name(i), cpu), now);
        }
        Op::DeleteNrt(i) => cx.numa.delete_nrt(&name(i)),
        Op::ForgetNode(i) => cx.numa.delete_node(&name(i)),
        Op::Verdict(i, passed) => {
            let Some(idx) = cx.cache.node_idx(&name(i)) else {
                return;
            };
            if by_slot {
                cx.numa.record_filter_node(&cx.cache, idx, passed, now);
            } else {
                cx.numa.record_filter(&name(i), passed, now);
            }
        }
        Op::Remember(i) => {
            if let Some(n) = cx.cache.node_by_name(&name(i)) {
                let (idx, n) = (n.idx, n.name.clone());
                cx.numa.remember(idx, &n);
            }
        }
    }
}

/// Same view: the same variant and, when ready, the very same cached data.
fn same_view(a: NodeNumaView<'_>, b: NodeNumaView<'_>) -> bool {
    match (a, b) {
        (
            NodeNumaView::Ready {
                topology: t1,
                zones: z1,
            },
            NodeNumaView::Ready {
                topology: t2,
                zones: z2,
            },
        ) => std::ptr::eq(t1, t2) && std::ptr::eq(z1, z2),
        (a, b) => a == b,
    }
}

/// Every live node's view through its slot equals its view by name.
fn check(cx: &Cluster) -> Result<(), TestCaseError> {
    for n in cx.cache.nodes() {
        prop_assert_eq!(cx.numa.slot(n), cx.numa.cache().slot(&n.name), "{}", n.name);
        prop_assert!(
            same_view(cx.numa.view_node(n), cx.numa.view(&n.name)),
            "{}: {:?} vs {:?}",
            n.name,
            cx.numa.view_node(n),
            cx.numa.view(&n.name)
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    #[test]
    fn remembered_slots_answer_as_the_name_lookup(ops in proptest::collection::vec(op(), 1..60)) {
        let mut by_slot = cluster();
        let mut by_name = cluster();
        for (t, op) in ops.iter().enumerate() {
            let now = 1_000 * t as Time;
            apply(&mut by_slot, op, true, now);
            apply(&mut by_name, op, false, now);
            check(&by_slot)?;
            prop_assert_eq!(by_slot.numa.metrics(), by_name.numa.metrics());
            prop_assert_eq!(by_slot.numa.next_resync(), by_name.numa.next_resync());
            for i in 0..NODES {
                let n = name(i);
                prop_assert!(same_view_data(by_slot.numa.view(&n), by_name.numa.view(&n)));
                prop_assert_eq!(by_slot.numa.cache().is_dirty(&n), by_name.numa.cache().is_dirty(&n));
            }
        }
    }
}

/// The same view in two different clusters (equal data, not the same address).
fn same_view_data(a: NodeNumaView<'_>, b: NodeNumaView<'_>) -> bool {
    a == b
}

/// The property can fail: a remembered slot trusted past a layout change (deliberately,
/// skipping the check the memo makes) answers for another node, and [`check`] says so.
/// `n0`'s slot is freed and handed to `n1`.
#[test]
fn a_slot_trusted_past_a_layout_change_is_caught() {
    let mut cx = cluster();
    let _ = cx.apply_node(node("n0").build());
    let _ = cx.apply_node(node("n1").build());
    let _ = cx.numa.apply_nrt(&nrt("n0", 4), 0);
    let (idx, n) = {
        let info = cx.cache.node_by_name("n0").expect("added");
        (info.idx, info.name.clone())
    };
    let stale = cx.numa.remember(idx, &n);
    cx.numa.delete_nrt("n0");
    let _ = cx.numa.apply_nrt(&nrt("n1", 2), 0);
    assert_eq!(
        cx.numa.cache().slot("n1"),
        stale,
        "the freed slot is reused"
    );
    // The memo is not trusted after the change: n0 has no topology any more.
    assert!(check(&cx).is_ok());
    let info = cx.cache.node_by_name("n0").expect("added");
    assert_eq!(cx.numa.view_node(info), NodeNumaView::NoTopology);
    // Trusted anyway, it would show n1's data for n0: the property catches it.
    cx.numa.trust_stale_memos();
    assert!(check(&cx).is_err());
}
