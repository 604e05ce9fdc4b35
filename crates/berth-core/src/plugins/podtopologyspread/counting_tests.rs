//! Property test: the remembered per-domain counts ([`crate::cache::domain_counts`]) equal
//! a straightforward recount after any sequence of node and pod changes, including a
//! preemption-style remove-then-restore of a node copy (which sends a node's generation
//! back to an earlier stamp).

use std::sync::Arc;

use proptest::prelude::*;
use serde_json::{json, Value};

use crate::cache::domain_counts::DomainCounts;
use crate::cache::Cluster;
use crate::framework::CycleState;
use crate::model::pod::PodInfo;
use crate::object::ObjectKey;
use crate::testing::{node, pod};

use super::common::{constraints_for, count_matching, Action, RequiredNodeAffinity};
use super::{counting, filtering};

const KEYS: [&str; 3] = ["zone", "rack", "kubernetes.io/hostname"];
const NAMESPACES: [&str; 2] = ["default", "other"];
const APPS: [&str; 3] = ["a", "b", "c"];

#[derive(Debug, Clone)]
enum Op {
    /// Adds or relabels node `i % 8`: zone (or none), rack (or none).
    Node(usize, Option<u8>, Option<u8>),
    DeleteNode(usize),
    /// A bound pod on node `i % 8`: namespace, app label (or none), terminating.
    Pod(usize, usize, Option<usize>, bool),
    DeletePod(usize),
    /// A pending pod assumed onto node `i % 8`, then (if `forget`) forgotten.
    Assume(usize, usize, bool),
    /// Removes a pod from node `i % 8` in place, asks, and restores the node copy (as
    /// preemption's reprieve does).
    RemoveAndRestore(usize),
    /// Asks every question (the query pod: namespace, selector shape, required keys).
    Ask(usize, usize, usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0..8usize, proptest::option::of(0..3u8), proptest::option::of(0..2u8))
            .prop_map(|(i, z, r)| Op::Node(i, z, r)),
        1 => (0..8usize).prop_map(Op::DeleteNode),
        5 => (0..8usize, 0..2usize, proptest::option::of(0..3usize), proptest::bool::weighted(0.1))
            .prop_map(|(i, ns, app, t)| Op::Pod(i, ns, app, t)),
        2 => (0..64usize).prop_map(Op::DeletePod),
        2 => (0..8usize, 0..3usize, any::<bool>()).prop_map(|(i, app, f)| Op::Assume(i, app, f)),
        1 => (0..8usize).prop_map(Op::RemoveAndRestore),
        4 => (0..2usize, 0..5usize, 0..3usize).prop_map(|(ns, sel, keys)| Op::Ask(ns, sel, keys)),
    ]
}

fn node_name(i: usize) -> String {
    format!("n{}", i % 8)
}

fn apply_node(cx: &mut Cluster, i: usize, zone: Option<u8>, rack: Option<u8>) {
    let name = node_name(i);
    let mut b = node(&name).alloc("cpu", "100").alloc("pods", "1000");
    if let Some(z) = zone {
        b = b.label("zone", &format!("z{z}"));
    }
    if let Some(r) = rack {
        b = b.label("rack", &format!("r{r}"));
    }
    cx.apply_node(b.build()).expect("test node is valid");
}

/// The query pod's selector: matchLabels on each app, Exists, or an empty one.
fn selector(shape: usize) -> Value {
    match shape {
        0..=2 => json!({"matchLabels": {"app": APPS[shape]}}),
        3 => json!({"matchExpressions": [{"key": "app", "operator": "Exists"}]}),
        _ => json!({}),
    }
}

fn query_pod(cx: &mut Cluster, ns: usize, shape: usize) -> PodInfo {
    let constraints: Vec<Value> = KEYS
        .iter()
        .map(|k| {
            json!({"maxSkew": 1, "topologyKey": k, "whenUnsatisfiable": "DoNotSchedule",
                   "labelSelector": selector(shape)})
        })
        .collect();
    pod("incoming")
        .namespace(NAMESPACES[ns])
        .label("app", "a")
        .spec("topologySpreadConstraints", json!(constraints))
        .build_info_with(&mut cx.cache.names)
}

/// The straightforward answer: every live node carrying `required`, its pods counted
/// under its value of `key` (empty when missing).
fn naive(
    cx: &Cluster,
    p: &PodInfo,
    c: &super::common::Constraint,
    required: &[&str],
) -> DomainCounts {
    let mut m = DomainCounts::default();
    for n in cx.cache.nodes() {
        if !required.iter().all(|k| n.labels.contains_key(*k)) {
            continue;
        }
        let d = n.labels.get(&c.topology_key).cloned().unwrap_or_default();
        *m.entry(d).or_insert(0) += count_matching(&n.pods, c.selector.as_ref(), &p.key.namespace);
    }
    m
}

fn ask(cx: &mut Cluster, ns: usize, shape: usize, keys: usize) -> Result<(), TestCaseError> {
    let p = query_pod(cx, ns, shape);
    let constraints = constraints_for(&p, &[], Action::DoNotSchedule)
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    let required = RequiredNodeAffinity::of(&p);
    let state = CycleState::default();
    prop_assert!(counting::applies(&state, &constraints, &required));
    // Filter: against the plugin's own recount.
    let all = counting::all_keys(&constraints);
    let fast = counting::remembered(cx, &p, &constraints, &all);
    let slow = filtering::recount(cx, &state, &p, &constraints, &required);
    prop_assert_eq!(fast.len(), slow.len());
    for (f, s) in fast.iter().zip(&slow) {
        prop_assert_eq!(&**f, &**s);
    }
    // Any required key set (Score asks with none): against the naive count.
    let sets: [&[&str]; 3] = [&[], &["zone"], &["zone", "rack"]];
    for c in &constraints {
        let want = naive(cx, &p, c, sets[keys]);
        let got = counting::remembered_one(cx, &p, c, sets[keys]);
        prop_assert_eq!(
            &*got,
            &want,
            "key {} required {:?}",
            c.topology_key,
            sets[keys]
        );
    }
    Ok(())
}

fn run(ops: &[Op]) -> Result<(), TestCaseError> {
    let mut cx = Cluster::default();
    let mut pods: Vec<ObjectKey> = Vec::new();
    for (step, op) in ops.iter().enumerate() {
        match *op {
            Op::Node(i, z, r) => apply_node(&mut cx, i, z, r),
            Op::DeleteNode(i) => {
                cx.cache.delete_node(&node_name(i));
            }
            Op::Pod(i, ns, app, terminating) => {
                let mut b = pod(&format!("p{step}"))
                    .namespace(NAMESPACES[ns])
                    .node_name(&node_name(i));
                if let Some(a) = app {
                    b = b.label("app", APPS[a]);
                }
                if terminating {
                    b = b.meta("deletionTimestamp", json!("2026-01-01T00:00:00Z"));
                }
                let info = Arc::new(b.build_info_with(&mut cx.cache.names));
                pods.push(info.key.clone());
                cx.cache.apply_pod(info);
            }
            Op::DeletePod(j) => {
                if !pods.is_empty() {
                    let k = pods.swap_remove(j % pods.len());
                    cx.cache.remove_pod(&k);
                }
            }
            Op::Assume(i, app, forget) => {
                let info = Arc::new(
                    pod(&format!("p{step}"))
                        .label("app", APPS[app])
                        .build_info_with(&mut cx.cache.names),
                );
                let key = info.key.clone();
                cx.cache.apply_pod(info);
                if let Some(idx) = cx.cache.node_idx(&node_name(i)) {
                    cx.cache.assume(&key, idx);
                }
                if forget {
                    cx.cache.forget(&key);
                }
                pods.push(key);
            }
            Op::RemoveAndRestore(i) => {
                let Some(idx) = cx.cache.node_idx(&node_name(i)) else {
                    continue;
                };
                let Some(saved) = cx.cache.node(idx).cloned() else {
                    continue;
                };
                if let Some(first) = saved.pods.first().map(|p| p.key.clone()) {
                    if let Some(n) = cx.cache.node_mut(idx) {
                        n.remove_pod(&first);
                    }
                    ask(&mut cx, 0, 3, 2)?;
                }
                if let Some(n) = cx.cache.node_mut(idx) {
                    *n = saved;
                }
                ask(&mut cx, 0, 3, 2)?;
            }
            Op::Ask(ns, shape, keys) => ask(&mut cx, ns, shape, keys)?,
        }
    }
    ask(&mut cx, 0, 0, 1)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    #[test]
    fn remembered_counts_equal_a_recount(ops in proptest::collection::vec(op(), 1..60)) {
        run(&ops)?;
    }
}

/// The test can fail: a count kept without the node's generation check goes stale.
#[test]
fn a_pod_added_after_a_question_is_counted_at_the_next() {
    let mut cx = Cluster::default();
    apply_node(&mut cx, 0, Some(0), None);
    let p = query_pod(&mut cx, 0, 0);
    let constraints = constraints_for(&p, &[], Action::DoNotSchedule).expect("valid");
    let zone = &constraints[0];
    assert_eq!(zone.topology_key, "zone");
    let before = counting::remembered_one(&cx, &p, zone, &["zone"]);
    assert_eq!(before.get("z0"), Some(&0));
    let info = pod("x")
        .label("app", "a")
        .node_name("n0")
        .build_info_with(&mut cx.cache.names);
    cx.cache.apply_pod(Arc::new(info));
    let after = counting::remembered_one(&cx, &p, zone, &["zone"]);
    assert_eq!(after.get("z0"), Some(&1));
    assert_eq!(
        before.get("z0"),
        Some(&0),
        "an answer already given does not change"
    );
}
