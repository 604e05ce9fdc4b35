//! TaintToleration: a pod lands only on nodes whose `NoSchedule`/`NoExecute` taints it
//! tolerates, and prefers nodes with fewer `PreferNoSchedule` taints it does not tolerate.
//!
//! Matching follows `v1.Toleration.ToleratesTaint`: an empty toleration effect matches every
//! effect, an empty key (with `Exists`) matches every key, `Exists` ignores the value and
//! `Equal` (or no operator) compares it.

use berth_api::k8s_openapi::api::core::v1::{Taint, Toleration};

use crate::cache::Cluster;
use crate::framework::events::{kind, EventsToRegister};
use crate::framework::plugin::{default_normalize, score_each};
use crate::framework::{CycleState, Plugin, Points, Status};
use crate::model::node::{NodeIdx, NodeInfo};
use crate::model::pod::PodInfo;

/// `NoSchedule`.
pub const NO_SCHEDULE: &str = "NoSchedule";
/// `NoExecute`.
pub const NO_EXECUTE: &str = "NoExecute";
pub use crate::model::PREFER_NO_SCHEDULE;

/// Per-cycle state. Empty: the pod's tolerations are read in place, so the slot exists only
/// for symmetry with the other plugins.
#[derive(Debug, Clone, Default)]
pub struct State {}

/// The TaintToleration plugin.
#[derive(Debug)]
pub struct TaintToleration;

/// Whether `toleration` tolerates `taint` (`v1.Toleration.ToleratesTaint`).
pub fn tolerates(toleration: &Toleration, taint: &Taint) -> bool {
    let effect = toleration.effect.as_deref().unwrap_or("");
    if !effect.is_empty() && effect != taint.effect {
        return false;
    }
    let key = toleration.key.as_deref().unwrap_or("");
    if !key.is_empty() && key != taint.key {
        return false;
    }
    match toleration.operator.as_deref().unwrap_or("") {
        "" | "Equal" => {
            toleration.value.as_deref().unwrap_or("") == taint.value.as_deref().unwrap_or("")
        }
        "Exists" => true,
        _ => false,
    }
}

/// Whether any of `tolerations` tolerates `taint` (`v1helper.TolerationsTolerateTaint`).
pub fn tolerated_by<'a>(
    tolerations: impl IntoIterator<Item = &'a Toleration>,
    taint: &Taint,
) -> bool {
    tolerations.into_iter().any(|t| tolerates(t, taint))
}

/// The first taint passing `filter` that no toleration tolerates
/// (`FindMatchingUntoleratedTaint`).
pub fn find_untolerated<'t>(
    taints: &'t [Taint],
    tolerations: &[Toleration],
    filter: impl Fn(&Taint) -> bool,
) -> Option<&'t Taint> {
    taints
        .iter()
        .filter(|t| filter(t))
        .find(|t| !tolerated_by(tolerations, t))
}

/// Taints that keep pods off a node (`DoNotScheduleTaintsFilterFunc`).
pub fn is_do_not_schedule(taint: &Taint) -> bool {
    taint.effect == NO_SCHEDULE || taint.effect == NO_EXECUTE
}

/// kube-scheduler 1.35's Filter reason. It names no taint (earlier releases did, and
/// `berth explain` still does, with [`describe_taint`]).
pub const ERR_REASON_UNTOLERATED: &str = "node(s) had untolerated taint(s)";

/// A taint as kube-scheduler's messages wrote it before 1.35, `{key: value}`.
pub fn describe_taint(taint: &Taint) -> String {
    format!(
        "{{{}: {}}}",
        taint.key,
        taint.value.as_deref().unwrap_or("")
    )
}

fn pod_tolerations(pod: &PodInfo) -> &[Toleration] {
    pod.spec().tolerations.as_deref().unwrap_or(&[])
}

impl Plugin for TaintToleration {
    fn name(&self) -> &'static str {
        super::names::TAINT_TOLERATION
    }

    fn points(&self) -> Points {
        Points::FILTER | Points::FILTER_FAST | Points::PRE_SCORE | Points::SCORE
    }

    fn events_to_register(&self) -> EventsToRegister {
        // Upstream: node add and taint changes.
        EventsToRegister::node_local(&[(kind::NODE_ADD | kind::NODE_TAINT, None)])
    }

    /// An untainted node (most of a cluster) tolerates every pod.
    fn passes(&self, _cx: &Cluster, _state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> bool {
        node.taints.is_empty()
    }

    fn filter(&self, _cx: &Cluster, _state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        match find_untolerated(&node.taints, pod_tolerations(pod), is_do_not_schedule) {
            None => Status::success(),
            Some(_) => Status::unresolvable(ERR_REASON_UNTOLERATED),
        }
    }

    fn pre_score(
        &self,
        _cx: &Cluster,
        _state: &mut CycleState,
        _pod: &PodInfo,
        _nodes: &[NodeIdx],
    ) -> Status {
        // The tolerations that matter for scoring (empty or PreferNoSchedule effect) are
        // filtered in place in Score, which allocates nothing; kube-scheduler never skips.
        Status::success()
    }

    #[inline]
    fn score(&self, _cx: &Cluster, _state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> i64 {
        if node.taints.is_empty() {
            return 0;
        }
        let prefer = pod_tolerations(pod).iter().filter(|t| {
            let e = t.effect.as_deref().unwrap_or("");
            e.is_empty() || e == PREFER_NO_SCHEDULE
        });
        node.taints
            .iter()
            .filter(|t| t.effect == PREFER_NO_SCHEDULE)
            .filter(|t| !tolerated_by(prefer.clone(), t))
            .count() as i64
    }

    /// [`Plugin::score`] with its "no taints, 0" answered in the loop: most nodes have no
    /// taint, and a call per node for that cost more than the rest of the work. (Most
    /// clusters have no PreferNoSchedule taint at all; then a cycle does not ask this:
    /// see `scores_uniformly`.)
    fn score_nodes(
        &self,
        cx: &Cluster,
        state: &CycleState,
        pod: &PodInfo,
        nodes: &[NodeIdx],
        out: &mut Vec<i64>,
    ) {
        score_each(cx, nodes, out, |node| {
            if node.taints.is_empty() {
                0
            } else {
                self.score(cx, state, pod, node)
            }
        });
    }

    /// Only PreferNoSchedule taints score: with none in the cluster, every node scores 0
    /// (and, normalised, 100).
    fn scores_uniformly(&self, cx: &Cluster, state: &CycleState, pod: &PodInfo) -> bool {
        let uniform = !cx.cache.any_prefer_no_schedule_taint();
        debug_assert!(!uniform || cx.cache.nodes().all(|n| self.score(cx, state, pod, n) == 0));
        uniform
    }

    fn normalize_scores(&self, _state: &CycleState, _pod: &PodInfo, scores: &mut [i64]) {
        default_normalize(scores, true);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::{Code, MAX_NODE_SCORE};
    use crate::testing::{node, pod, NodeBuilder, PodBuilder};
    use serde_json::{json, Value};

    fn with_tolerations(tols: &[Value]) -> PodInfo {
        tols.iter()
            .fold(pod("p"), |b: PodBuilder, t| b.toleration(t.clone()))
            .build_info()
    }

    fn with_taints(name: &str, taints: &[(&str, &str, &str)]) -> NodeInfo {
        taints
            .iter()
            .fold(node(name), |b: NodeBuilder, (k, v, e)| b.taint(k, v, e))
            .build_info()
    }

    #[test]
    fn filter_rejects_untolerated_no_schedule_taints_with_kubes_reason() {
        struct Case {
            name: &'static str,
            tolerations: Vec<Value>,
            taints: Vec<(&'static str, &'static str, &'static str)>,
            want: Option<&'static str>,
        }
        let cases = [
            Case {
                name: "a pod with no tolerations is rejected by a NoSchedule taint",
                tolerations: vec![],
                taints: vec![("dedicated", "user1", "NoSchedule")],
                want: Some("{dedicated: user1}"),
            },
            Case {
                name: "an Equal toleration without operator tolerates the same key and value",
                tolerations: vec![
                    json!({"key": "dedicated", "value": "user1", "effect": "NoSchedule"}),
                ],
                taints: vec![("dedicated", "user1", "NoSchedule")],
                want: None,
            },
            Case {
                name: "an Equal toleration with another value does not tolerate",
                tolerations: vec![
                    json!({"key": "dedicated", "operator": "Equal", "value": "user2", "effect": "NoSchedule"}),
                ],
                taints: vec![("dedicated", "user1", "NoSchedule")],
                want: Some("{dedicated: user1}"),
            },
            Case {
                name: "Exists ignores the value",
                tolerations: vec![
                    json!({"key": "foo", "operator": "Exists", "effect": "NoSchedule"}),
                ],
                taints: vec![("foo", "bar", "NoSchedule")],
                want: None,
            },
            Case {
                name: "every taint tolerated by one of several tolerations",
                tolerations: vec![
                    json!({"key": "dedicated", "operator": "Equal", "value": "user2", "effect": "NoSchedule"}),
                    json!({"key": "foo", "operator": "Exists", "effect": "NoSchedule"}),
                ],
                taints: vec![
                    ("dedicated", "user2", "NoSchedule"),
                    ("foo", "bar", "NoSchedule"),
                ],
                want: None,
            },
            Case {
                name: "a non-empty effect that differs does not tolerate",
                tolerations: vec![
                    json!({"key": "foo", "operator": "Equal", "value": "bar", "effect": "PreferNoSchedule"}),
                ],
                taints: vec![("foo", "bar", "NoSchedule")],
                want: Some("{foo: bar}"),
            },
            Case {
                name: "an empty effect tolerates every effect",
                tolerations: vec![json!({"key": "foo", "operator": "Equal", "value": "bar"})],
                taints: vec![("foo", "bar", "NoSchedule")],
                want: None,
            },
            Case {
                name: "PreferNoSchedule taints never reject",
                tolerations: vec![
                    json!({"key": "dedicated", "operator": "Equal", "value": "user2", "effect": "NoSchedule"}),
                ],
                taints: vec![("dedicated", "user1", "PreferNoSchedule")],
                want: None,
            },
            Case {
                name: "NoExecute taints reject too",
                tolerations: vec![],
                taints: vec![("node.kubernetes.io/not-ready", "", "NoExecute")],
                want: Some("{node.kubernetes.io/not-ready: }"),
            },
            Case {
                name: "an empty key with Exists tolerates everything",
                tolerations: vec![json!({"operator": "Exists"})],
                taints: vec![("a", "b", "NoSchedule"), ("c", "", "NoExecute")],
                want: None,
            },
            Case {
                name: "the first untolerated taint in node order is named",
                tolerations: vec![json!({"key": "a", "operator": "Exists"})],
                taints: vec![
                    ("a", "1", "NoSchedule"),
                    ("b", "2", "NoSchedule"),
                    ("c", "3", "NoExecute"),
                ],
                want: Some("{b: 2}"),
            },
            Case {
                name: "an unknown operator tolerates nothing",
                tolerations: vec![json!({"key": "a", "operator": "Gt", "value": "1"})],
                taints: vec![("a", "1", "NoSchedule")],
                want: Some("{a: 1}"),
            },
        ];
        let cx = Cluster::default();
        let st = CycleState::default();
        for c in cases {
            let p = with_tolerations(&c.tolerations);
            let n = with_taints("n", &c.taints);
            let got = TaintToleration.filter(&cx, &st, &p, &n);
            match c.want {
                None => assert!(got.is_success(), "{}: {got:?}", c.name),
                Some(taint) => {
                    assert_eq!(got.code(), Code::UnschedulableAndUnresolvable, "{}", c.name);
                    assert_eq!(got.reasons(), [ERR_REASON_UNTOLERATED], "{}", c.name);
                    let found =
                        find_untolerated(&n.taints, pod_tolerations(&p), is_do_not_schedule);
                    assert_eq!(
                        found.map(describe_taint).as_deref(),
                        Some(taint),
                        "{}",
                        c.name
                    );
                }
            }
        }
    }

    #[test]
    fn score_counts_intolerable_prefer_no_schedule_taints_reversed() {
        struct Case {
            name: &'static str,
            tolerations: Vec<Value>,
            nodes: Vec<Vec<(&'static str, &'static str, &'static str)>>,
            want: Vec<i64>,
        }
        let cases = [
            Case {
                name: "a node whose taint is tolerated scores above one whose taint is not",
                tolerations: vec![
                    json!({"key": "foo", "operator": "Equal", "value": "bar", "effect": "PreferNoSchedule"}),
                ],
                nodes: vec![
                    vec![("foo", "bar", "PreferNoSchedule")],
                    vec![("foo", "blah", "PreferNoSchedule")],
                ],
                want: vec![MAX_NODE_SCORE, 0],
            },
            Case {
                name: "the number of tolerated taints does not matter",
                tolerations: vec![
                    json!({"key": "cpu-type", "operator": "Equal", "value": "arm64", "effect": "PreferNoSchedule"}),
                    json!({"key": "disk-type", "operator": "Equal", "value": "ssd", "effect": "PreferNoSchedule"}),
                ],
                nodes: vec![
                    vec![],
                    vec![("cpu-type", "arm64", "PreferNoSchedule")],
                    vec![
                        ("cpu-type", "arm64", "PreferNoSchedule"),
                        ("disk-type", "ssd", "PreferNoSchedule"),
                    ],
                ],
                want: vec![MAX_NODE_SCORE, MAX_NODE_SCORE, MAX_NODE_SCORE],
            },
            Case {
                name: "the more intolerable taints, the lower the score",
                tolerations: vec![
                    json!({"key": "foo", "operator": "Equal", "value": "bar", "effect": "PreferNoSchedule"}),
                ],
                nodes: vec![
                    vec![],
                    vec![("cpu-type", "arm64", "PreferNoSchedule")],
                    vec![
                        ("cpu-type", "arm64", "PreferNoSchedule"),
                        ("disk-type", "ssd", "PreferNoSchedule"),
                    ],
                ],
                want: vec![MAX_NODE_SCORE, 50, 0],
            },
            Case {
                name: "only PreferNoSchedule taints and tolerations count",
                tolerations: vec![
                    json!({"key": "cpu-type", "operator": "Equal", "value": "arm64", "effect": "NoSchedule"}),
                    json!({"key": "disk-type", "operator": "Equal", "value": "ssd", "effect": "NoSchedule"}),
                ],
                nodes: vec![
                    vec![],
                    vec![("cpu-type", "arm64", "NoSchedule")],
                    vec![
                        ("cpu-type", "arm64", "PreferNoSchedule"),
                        ("disk-type", "ssd", "PreferNoSchedule"),
                    ],
                ],
                want: vec![MAX_NODE_SCORE, MAX_NODE_SCORE, 0],
            },
            Case {
                name: "no tolerations: the untainted node wins",
                tolerations: vec![],
                nodes: vec![vec![], vec![("cpu-type", "arm64", "PreferNoSchedule")]],
                want: vec![MAX_NODE_SCORE, 0],
            },
            Case {
                name: "a toleration with no effect counts for PreferNoSchedule",
                tolerations: vec![json!({"key": "foo", "operator": "Exists"})],
                nodes: vec![
                    vec![("foo", "x", "PreferNoSchedule")],
                    vec![("bar", "x", "PreferNoSchedule")],
                ],
                want: vec![MAX_NODE_SCORE, 0],
            },
        ];
        let cx = Cluster::default();
        for c in cases {
            let p = with_tolerations(&c.tolerations);
            let mut st = CycleState::default();
            assert!(TaintToleration
                .pre_score(&cx, &mut st, &p, &[])
                .is_success());
            let mut scores: Vec<i64> = c
                .nodes
                .iter()
                .enumerate()
                .map(|(i, t)| {
                    TaintToleration.score(&cx, &st, &p, &with_taints(&format!("n{i}"), t))
                })
                .collect();
            TaintToleration.normalize_scores(&st, &p, &mut scores);
            assert_eq!(scores, c.want, "{}", c.name);
        }
    }

    /// The cluster's count of PreferNoSchedule-tainted nodes follows every node change, so
    /// a cycle that leaves the plugin out while there are none (`scores_uniformly`) never
    /// hides a taint.
    #[test]
    fn score_nodes_follows_prefer_no_schedule_taints_as_nodes_change() {
        let mut cx = Cluster::default();
        let a = cx.apply_node(node("a").build()).expect("a valid node");
        let hard = node("b").taint("k", "v", "NoSchedule").build();
        let b = cx.apply_node(hard.clone()).expect("a valid node");
        let p = pod("p").build_info();
        let st = CycleState::default();
        let scores = |cx: &Cluster| {
            let mut out = vec![7];
            TaintToleration.score_nodes(cx, &st, &p, &[a, b], &mut out);
            out
        };
        let soft = node("b").taint("k", "v", PREFER_NO_SCHEDULE).build();
        assert!(!cx.cache.any_prefer_no_schedule_taint());
        assert!(TaintToleration.scores_uniformly(&cx, &st, &p));
        assert_eq!(scores(&cx), [7, 0, 0], "appended after what out held");
        cx.apply_node(soft.clone()).expect("a valid node");
        assert!(cx.cache.any_prefer_no_schedule_taint());
        assert!(!TaintToleration.scores_uniformly(&cx, &st, &p));
        assert_eq!(scores(&cx), [7, 0, 1]);
        cx.apply_node(hard).expect("a valid node");
        assert!(!cx.cache.any_prefer_no_schedule_taint());
        assert_eq!(scores(&cx), [7, 0, 0]);
        cx.apply_node(soft).expect("a valid node");
        assert!(cx.cache.any_prefer_no_schedule_taint());
        cx.cache.delete_node("b");
        assert!(!cx.cache.any_prefer_no_schedule_taint());
        assert!(TaintToleration.scores_uniformly(&cx, &st, &p));
        assert_eq!(scores(&cx), [7, 0, 0], "a deleted node scores 0");
    }
}
