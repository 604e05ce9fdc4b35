//! PodTopologySpread PreScore, Score and NormalizeScore for `whenUnsatisfiable:
//! ScheduleAnyway` (kube-scheduler's `podtopologyspread/scoring.go`).
//!
//! A node's raw score is, over the soft constraints, `count(domain) * ln(domains + 2) +
//! (maxSkew - 1)`: fewer matching pods is better. Hostname constraints count the node's own
//! pods in Score. Normalisation reverses the scale so the emptiest domain gets 100; nodes
//! missing a topology key score 0.

use crate::cache::domain_counts::DomainCounts;

use berth_api::k8s_openapi::api::core::v1::TopologySpreadConstraint;

use crate::cache::Cluster;
use crate::framework::{Status, MAX_NODE_SCORE};
use crate::model::node::{NodeIdx, NodeInfo};
use crate::model::pod::PodInfo;

use super::common::{
    constraints_for, count_matching, count_visible, has_all_keys, Action, Constraint,
    RequiredNodeAffinity, LABEL_HOSTNAME,
};

/// What PreScore computed (`preScoreState`).
#[derive(Debug, Clone, Default)]
pub struct ScoreState {
    constraints: Vec<Constraint>,
    /// Nodes must have every topology key (false only for system-default constraints, so
    /// nodes without a zone label still spread by hostname).
    require_all_topologies: bool,
    /// Per node given to PreScore, in that order: it misses a topology key and scores 0.
    ignored: Vec<bool>,
    /// Topology value -> matching pods, per constraint (empty for hostname constraints).
    counts: Vec<DomainCounts>,
    /// `ln(domains + 2)` per constraint, so small topologies weigh as much as big ones.
    weights: Vec<f64>,
}

impl ScoreState {
    fn is_ignored(&self, node: &NodeInfo) -> bool {
        self.require_all_topologies && !has_all_keys(&node.labels, &self.constraints)
    }

    /// The raw score of a node (higher means more matching pods).
    pub(super) fn score(&self, pod: &PodInfo, node: &NodeInfo) -> i64 {
        if self.is_ignored(node) {
            return 0;
        }
        let mut score = 0.0;
        for (i, c) in self.constraints.iter().enumerate() {
            let Some(value) = node.labels.get(&c.topology_key) else {
                continue;
            };
            let count = if c.topology_key == LABEL_HOSTNAME {
                count_matching(&node.pods, c.selector.as_ref(), &pod.key.namespace)
            } else {
                self.counts[i].get(value.as_str()).copied().unwrap_or(0)
            };
            score += count as f64 * self.weights[i] + (c.max_skew - 1) as f64;
        }
        score.round() as i64
    }

    /// Reverses and scales to 0..=100 (`NormalizeScore`): `100 * (max + min - s) / max`,
    /// ignored nodes 0, all 100 when the maximum is 0.
    pub(super) fn normalize(&self, scores: &mut [i64]) {
        let aligned = self.ignored.len() == scores.len();
        let ignored = |i: usize| aligned && self.ignored[i];
        let mut min = i64::MAX;
        let mut max = 0;
        for (i, s) in scores.iter().enumerate() {
            if !ignored(i) {
                min = min.min(*s);
                max = max.max(*s);
            }
        }
        for (i, s) in scores.iter_mut().enumerate() {
            *s = if ignored(i) {
                0
            } else if max == 0 {
                MAX_NODE_SCORE
            } else {
                MAX_NODE_SCORE * (max + min - *s) / max
            };
        }
    }
}

/// PreScore over the feasible `nodes`: `Err(skip)` without soft constraints.
pub(super) fn pre_score(
    defaults: &[TopologySpreadConstraint],
    system_defaulted: bool,
    cx: &Cluster,
    state: &crate::framework::CycleState,
    pod: &PodInfo,
    nodes: &[NodeIdx],
) -> Result<ScoreState, Status> {
    if cx.cache.node_count() == 0 {
        return Err(Status::skip());
    }
    let constraints = constraints_for(pod, defaults, Action::ScheduleAnyway)
        .map_err(|e| Status::error(format!("calculating preScoreState: {e}")))?;
    if constraints.is_empty() {
        return Err(Status::skip());
    }
    let own = pod
        .spec()
        .topology_spread_constraints
        .as_ref()
        .is_some_and(|v| !v.is_empty());
    let mut s = ScoreState {
        require_all_topologies: own || !system_defaulted,
        counts: vec![DomainCounts::default(); constraints.len()],
        constraints,
        ..Default::default()
    };
    // Domains of the feasible nodes; only those are counted below.
    let mut ignored_count = 0;
    for &idx in nodes {
        let Some(node) = cx.cache.node(idx) else {
            s.ignored.push(false);
            continue;
        };
        let ignored = s.is_ignored(node);
        s.ignored.push(ignored);
        if ignored {
            ignored_count += 1;
            continue;
        }
        for (i, c) in s.constraints.iter().enumerate() {
            if c.topology_key == LABEL_HOSTNAME {
                continue;
            }
            let value = node.labels.get(&c.topology_key).map_or("", String::as_str);
            if !s.counts[i].contains_key(value) {
                s.counts[i].insert(value.to_string(), 0);
            }
        }
    }
    s.weights = s
        .constraints
        .iter()
        .zip(&s.counts)
        .map(|(c, domains)| {
            let size = if c.topology_key == LABEL_HOSTNAME {
                nodes.len() - ignored_count
            } else {
                domains.len()
            };
            ((size + 2) as f64).ln()
        })
        .collect();
    let required = RequiredNodeAffinity::of(pod);
    if super::counting::applies(state, &s.constraints, &required) {
        let keys = if s.require_all_topologies {
            super::counting::all_keys(&s.constraints)
        } else {
            Vec::new()
        };
        for (i, c) in s.constraints.iter().enumerate() {
            if c.topology_key == LABEL_HOSTNAME || s.counts[i].is_empty() {
                continue;
            }
            let all = super::counting::remembered_one(cx, pod, c, &keys);
            for (domain, sum) in s.counts[i].iter_mut() {
                *sum += all.get(domain.as_str()).copied().unwrap_or(0);
            }
        }
    } else {
        recount_into(&mut s, cx, state, pod, &required);
    }
    Ok(s)
}

/// Adds to `s.counts` (whose domains are set) the matching pods of every counted node
/// (`calPreScoreState`'s walk), for pods the remembered counts do not answer
/// ([`super::counting::applies`]).
pub(super) fn recount_into(
    s: &mut ScoreState,
    cx: &Cluster,
    state: &crate::framework::CycleState,
    pod: &PodInfo,
    required: &RequiredNodeAffinity,
) {
    let ns = &*pod.key.namespace;
    for node in cx.cache.nodes() {
        if s.is_ignored(node) {
            continue;
        }
        for (i, c) in s.constraints.iter().enumerate() {
            if !c.includes_node(pod, node, required) {
                continue;
            }
            let value = node.labels.get(&c.topology_key).map_or("", String::as_str);
            // Domains without a feasible node are not scored; hostname counts are per node.
            let Some(sum) = s.counts[i].get_mut(value) else {
                continue;
            };
            *sum += count_visible(state, node, c.selector.as_ref(), ns);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::{CycleState, Plugin};
    use crate::plugins::interpodaffinity::test_util::{bare_node, cluster_of, indices};
    use crate::plugins::podtopologyspread::PodTopologySpread;
    use crate::testing::{pod, PodBuilder};
    use berth_api::k8s_openapi::api::core::v1::Node;
    use serde_json::{json, Value};
    use std::sync::Arc;

    fn soft(skew: i32, key: &str, selector: &str) -> Value {
        soft_with(skew, key, selector, json!({}))
    }

    fn soft_with(skew: i32, key: &str, selector: &str, extra: Value) -> Value {
        let mut c = json!({"maxSkew": skew, "topologyKey": key,
            "whenUnsatisfiable": "ScheduleAnyway",
            "labelSelector": {"matchExpressions": [{"key": selector, "operator": "Exists"}]}});
        if let (Some(c), Some(extra)) = (c.as_object_mut(), extra.as_object()) {
            c.extend(extra.clone());
        }
        c
    }

    fn spread(p: PodBuilder, constraints: Vec<Value>) -> PodBuilder {
        p.spec("topologySpreadConstraints", json!(constraints))
    }

    fn foo(name: &str, node: &str) -> PodBuilder {
        pod(name).label("foo", "").node_name(node)
    }

    /// `n` pods labelled `foo` on `node`, named after it.
    fn foos(node: &str, n: usize) -> Vec<PodBuilder> {
        (0..n).map(|i| foo(&format!("{node}-{i}"), node)).collect()
    }

    fn host(name: &str) -> Arc<Node> {
        bare_node(name, &[(LABEL_HOSTNAME, name)])
    }

    fn zoned(name: &str, zone: &str) -> Arc<Node> {
        bare_node(name, &[("zone", zone), (LABEL_HOSTNAME, name)])
    }

    fn by_node(name: &str) -> Arc<Node> {
        bare_node(name, &[("node", name)])
    }

    struct Case {
        name: &'static str,
        args: Value,
        pod: PodBuilder,
        pods: Vec<PodBuilder>,
        nodes: Vec<Arc<Node>>,
        /// Feasible nodes (the rest failed Filter).
        feasible: &'static [&'static str],
        want: Vec<i64>,
    }

    fn run(c: &Case) {
        let cx = cluster_of(&c.nodes, &c.pods);
        let pl = PodTopologySpread::new(Some(&c.args)).unwrap();
        let p = c.pod.build_info();
        let feasible = indices(&cx, c.feasible);
        let mut state = CycleState::default();
        let st = pl.pre_score(&cx, &mut state, &p, &feasible);
        assert!(st.is_success(), "{}: {st:?}", c.name);
        let mut scores: Vec<i64> = feasible
            .iter()
            .map(|i| pl.score(&cx, &state, &p, cx.cache.node(*i).unwrap()))
            .collect();
        pl.normalize_scores(&state, &p, &mut scores);
        assert_eq!(scores, c.want, "{}", c.name);
    }

    #[test]
    fn scores_follow_kube_scheduler_cases() {
        let foo_pod = || pod("p").label("foo", "");
        let hostname_1 = || spread(foo_pod(), vec![soft(1, LABEL_HOSTNAME, "foo")]);
        let abcd = || {
            vec![
                host("node-a"),
                host("node-b"),
                host("node-c"),
                host("node-d"),
            ]
        };
        let pods_2_1_0_3 = || [foos("node-a", 2), foos("node-b", 1), foos("node-d", 3)].concat();
        let pods_4_3_2_1 = || {
            [
                foos("node-a", 4),
                foos("node-b", 3),
                foos("node-c", 2),
                foos("node-d", 1),
            ]
            .concat()
        };
        let cases = vec![
            Case {
                name: "one constraint on node, no existing pods",
                args: json!({}),
                pod: hostname_1(),
                pods: vec![],
                nodes: vec![host("node-a"), host("node-b")],
                feasible: &["node-a", "node-b"],
                want: vec![100, 100],
            },
            Case {
                name: "one constraint on node, all nodes have the same number of matching pods",
                args: json!({}),
                pod: hostname_1(),
                pods: vec![foo("p-a1", "node-a"), foo("p-b1", "node-b")],
                nodes: vec![host("node-a"), host("node-b")],
                feasible: &["node-a", "node-b"],
                want: vec![100, 100],
            },
            Case {
                name: "one constraint on node, all 4 nodes are candidates",
                args: json!({}),
                pod: hostname_1(),
                pods: pods_2_1_0_3(),
                nodes: abcd(),
                feasible: &["node-a", "node-b", "node-c", "node-d"],
                want: vec![20, 60, 100, 0],
            },
            Case {
                name: "one constraint on node, null selector",
                args: json!({}),
                pod: spread(
                    foo_pod(),
                    vec![json!({"maxSkew": 1, "topologyKey": LABEL_HOSTNAME,
                        "whenUnsatisfiable": "ScheduleAnyway"})],
                ),
                pods: pods_2_1_0_3(),
                nodes: abcd(),
                feasible: &["node-a", "node-b", "node-c", "node-d"],
                want: vec![100, 100, 100, 100],
            },
            Case {
                name: "one constraint on node, all 4 nodes are candidates, maxSkew=2",
                args: json!({}),
                pod: spread(foo_pod(), vec![soft(2, LABEL_HOSTNAME, "foo")]),
                pods: pods_2_1_0_3(),
                nodes: abcd(),
                feasible: &["node-a", "node-b", "node-c", "node-d"],
                want: vec![33, 66, 100, 16],
            },
            Case {
                name: "one constraint on node, all 4 nodes are candidates, maxSkew=3",
                args: json!({}),
                pod: spread(foo_pod(), vec![soft(3, LABEL_HOSTNAME, "foo")]),
                pods: pods_4_3_2_1(),
                nodes: abcd(),
                feasible: &["node-a", "node-b", "node-c", "node-d"],
                want: vec![44, 66, 77, 100],
            },
            Case {
                name: "system defaulting, nodes don't have zone, pods owned by a ReplicaSet",
                args: json!({}),
                pod: foo_pod().meta(
                    "ownerReferences",
                    json!([{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs",
                            "uid": "u", "controller": true}]),
                ),
                pods: pods_4_3_2_1(),
                nodes: abcd(),
                feasible: &["node-a", "node-b", "node-c", "node-d"],
                // Same as one hostname constraint with maxSkew 3; the zone one is skipped.
                want: vec![44, 66, 77, 100],
            },
            Case {
                name: "one constraint on node, 3 out of 4 nodes are candidates",
                args: json!({}),
                pod: hostname_1(),
                pods: [
                    foos("node-a", 4),
                    foos("node-b", 2),
                    foos("node-x", 1),
                    foos("node-y", 3),
                ]
                .concat(),
                nodes: vec![host("node-a"), host("node-b"), host("node-x"), host("node-y")],
                feasible: &["node-a", "node-b", "node-x"],
                want: vec![33, 83, 100],
            },
            Case {
                name: "one constraint on node, 3 out of 4 nodes are candidates, one node doesn't match topology key",
                args: json!({}),
                pod: hostname_1(),
                pods: [
                    foos("node-a", 4),
                    foos("node-b", 2),
                    foos("node-x", 1),
                    foos("node-y", 3),
                ]
                .concat(),
                nodes: vec![
                    host("node-a"),
                    bare_node("node-b", &[("n", "node-b")]),
                    host("node-x"),
                    host("node-y"),
                ],
                feasible: &["node-a", "node-b", "node-x"],
                want: vec![16, 0, 100],
            },
            Case {
                name: "one constraint on zone, 3 out of 4 nodes are candidates",
                args: json!({}),
                pod: spread(foo_pod(), vec![soft(1, "zone", "foo")]),
                pods: [
                    foos("node-a", 4),
                    foos("node-b", 2),
                    foos("node-x", 1),
                    foos("node-y", 3),
                ]
                .concat(),
                nodes: vec![
                    zoned("node-a", "zone1"),
                    zoned("node-b", "zone1"),
                    zoned("node-x", "zone2"),
                    zoned("node-y", "zone2"),
                ],
                feasible: &["node-a", "node-b", "node-x"],
                want: vec![75, 75, 100],
            },
            Case {
                name: "two constraints on zone and node, 2 out of 4 nodes are candidates",
                args: json!({}),
                pod: spread(
                    foo_pod(),
                    vec![soft(1, "zone", "foo"), soft(1, LABEL_HOSTNAME, "foo")],
                ),
                pods: [
                    foos("node-a", 2),
                    foos("node-b", 1),
                    foos("node-x", 2),
                    foos("node-y", 4),
                ]
                .concat(),
                nodes: vec![
                    zoned("node-a", "zone1"),
                    zoned("node-b", "zone1"),
                    zoned("node-x", "zone2"),
                    zoned("node-y", "zone2"),
                ],
                feasible: &["node-a", "node-x"],
                want: vec![100, 63],
            },
            Case {
                name: "two constraints on zone and node, with different labelSelectors",
                args: json!({}),
                pod: spread(
                    foo_pod().label("bar", ""),
                    vec![soft(1, "zone", "foo"), soft(1, LABEL_HOSTNAME, "bar")],
                ),
                pods: vec![
                    foo("p-a1", "node-a"),
                    foo("p-b1", "node-b").label("bar", ""),
                    foo("p-y1", "node-y"),
                    pod("p-y2").label("bar", "").node_name("node-y"),
                ],
                nodes: vec![
                    zoned("node-a", "zone1"),
                    zoned("node-b", "zone1"),
                    zoned("node-x", "zone2"),
                    zoned("node-y", "zone2"),
                ],
                feasible: &["node-a", "node-b", "node-x", "node-y"],
                want: vec![60, 20, 100, 60],
            },
            Case {
                name: "two constraints with different labelSelectors, some nodes have 0 pods",
                args: json!({}),
                pod: spread(
                    foo_pod().label("bar", ""),
                    vec![soft(1, "zone", "foo"), soft(1, LABEL_HOSTNAME, "bar")],
                ),
                pods: vec![
                    pod("p-b1").label("bar", "").node_name("node-b"),
                    foo("p-x1", "node-x"),
                    foo("p-y1", "node-y").label("bar", ""),
                ],
                nodes: vec![
                    zoned("node-a", "zone1"),
                    zoned("node-b", "zone1"),
                    zoned("node-x", "zone2"),
                    zoned("node-y", "zone2"),
                ],
                feasible: &["node-a", "node-b", "node-x", "node-y"],
                want: vec![100, 60, 40, 0],
            },
            Case {
                name: "existing pods in a different namespace do not count",
                args: json!({}),
                pod: hostname_1(),
                pods: vec![
                    foo("p-a1", "node-a").namespace("ns1"),
                    foo("p-a2", "node-a"),
                    foo("p-b1", "node-b"),
                    foo("p-b2", "node-b"),
                ],
                nodes: vec![host("node-a"), host("node-b")],
                feasible: &["node-a", "node-b"],
                want: vec![100, 33],
            },
            Case {
                name: "terminating Pods should be excluded",
                args: json!({}),
                pod: hostname_1(),
                pods: vec![
                    foo("p-a", "node-a").meta("deletionTimestamp", json!("2024-01-01T00:00:00Z")),
                    foo("p-b", "node-b"),
                ],
                nodes: vec![host("node-a"), host("node-b")],
                feasible: &["node-a", "node-b"],
                want: vec![100, 0],
            },
            Case {
                name: "minDomains has no effect when ScheduleAnyway",
                args: json!({}),
                pod: spread(foo_pod(), vec![soft_with(2, "node", "foo", json!({"minDomains": 10}))]),
                pods: [foos("node-a", 2), foos("node-b", 2), foos("node-c", 1)].concat(),
                nodes: vec![by_node("node-a"), by_node("node-b"), by_node("node-c")],
                feasible: &["node-a", "node-b", "node-c"],
                want: vec![75, 75, 100],
            },
            Case {
                name: "NodeAffinityPolicy honored with labelSelectors",
                args: json!({}),
                pod: spread(foo_pod(), vec![soft(1, "node", "foo")])
                    .spec("nodeSelector", json!({"foo": ""})),
                pods: [foos("node-a", 2), foos("node-b", 1), foos("node-c", 1)].concat(),
                nodes: vec![
                    bare_node("node-a", &[("node", "node-a"), ("foo", "")]),
                    bare_node("node-b", &[("node", "node-b"), ("foo", "")]),
                    by_node("node-c"),
                ],
                feasible: &["node-a", "node-b", "node-c"],
                want: vec![0, 33, 100],
            },
            Case {
                name: "NodeAffinityPolicy ignored with labelSelectors",
                args: json!({}),
                pod: spread(
                    foo_pod(),
                    vec![soft_with(1, "node", "foo", json!({"nodeAffinityPolicy": "Ignore"}))],
                )
                .spec("nodeSelector", json!({"foo": ""})),
                pods: [foos("node-a", 2), foos("node-b", 1), foos("node-c", 1)].concat(),
                nodes: vec![
                    bare_node("node-a", &[("node", "node-a"), ("foo", "")]),
                    bare_node("node-b", &[("node", "node-b"), ("foo", "")]),
                    by_node("node-c"),
                ],
                feasible: &["node-a", "node-b", "node-c"],
                want: vec![66, 100, 100],
            },
            Case {
                name: "NodeTaintsPolicy honored",
                args: json!({}),
                pod: spread(
                    foo_pod(),
                    vec![soft_with(1, "node", "foo", json!({"nodeTaintsPolicy": "Honor"}))],
                ),
                pods: [foos("node-a", 2), foos("node-b", 1), foos("node-c", 1)].concat(),
                nodes: vec![by_node("node-a"), by_node("node-b"), tainted_by_node("node-c")],
                feasible: &["node-a", "node-b", "node-c"],
                want: vec![0, 33, 100],
            },
            Case {
                name: "NodeTaintsPolicy ignored",
                args: json!({}),
                pod: spread(foo_pod(), vec![soft(1, "node", "foo")]),
                pods: [foos("node-a", 2), foos("node-b", 1), foos("node-c", 1)].concat(),
                nodes: vec![by_node("node-a"), by_node("node-b"), tainted_by_node("node-c")],
                feasible: &["node-a", "node-b", "node-c"],
                want: vec![66, 100, 100],
            },
            Case {
                name: "matchLabelKeys ANDed with an empty LabelSelector",
                args: json!({}),
                pod: spread(
                    foo_pod().label("bar", ""),
                    vec![
                        json!({"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "ScheduleAnyway",
                            "labelSelector": {}, "matchLabelKeys": ["foo"]}),
                        json!({"maxSkew": 1, "topologyKey": LABEL_HOSTNAME, "whenUnsatisfiable": "ScheduleAnyway",
                            "labelSelector": {}, "matchLabelKeys": ["bar"]}),
                    ],
                ),
                pods: vec![
                    foo("p-a1", "node-a"),
                    foo("p-b1", "node-b").label("bar", ""),
                    foo("p-y1", "node-c"),
                    pod("p-y2").label("bar", "").node_name("node-c"),
                ],
                nodes: vec![
                    zoned("node-a", "zone1"),
                    zoned("node-b", "zone1"),
                    zoned("node-c", "zone2"),
                    zoned("node-d", "zone2"),
                ],
                feasible: &["node-a", "node-b", "node-c", "node-d"],
                want: vec![60, 20, 60, 100],
            },
        ];
        for c in &cases {
            run(c);
        }
    }

    fn tainted_by_node(name: &str) -> Arc<Node> {
        let mut v = crate::testing::node(name)
            .taint("node.kubernetes.io/unschedulable", "", "NoSchedule")
            .json()
            .clone();
        v["metadata"]["labels"] = json!({"node": name});
        Arc::new(serde_json::from_value(v).unwrap())
    }

    #[test]
    fn pre_score_skips_pods_without_soft_constraints() {
        let cx = cluster_of(&[host("node-a"), host("node-b")], &[]);
        let pl = PodTopologySpread::new(None).unwrap();
        let mut state = CycleState::default();
        let feasible = indices(&cx, &["node-a", "node-b"]);
        let bare = pod("p").label("foo", "").build_info();
        assert!(pl.pre_score(&cx, &mut state, &bare, &feasible).is_skip());
        let hard_only = spread(
            pod("q").label("foo", ""),
            vec![
                json!({"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {}}),
            ],
        )
        .build_info();
        assert!(pl
            .pre_score(&cx, &mut state, &hard_only, &feasible)
            .is_skip());
    }

    #[test]
    fn normalisation_reverses_and_zeroes_ignored_nodes() {
        let s = ScoreState {
            ignored: vec![false, true, false, false],
            ..Default::default()
        };
        let mut scores = vec![4, 0, 2, 0];
        s.normalize(&mut scores);
        // min 0, max 4: 100 * (4 + 0 - s) / 4.
        assert_eq!(scores, vec![0, 0, 50, 100]);
        let mut all_zero = vec![0, 0, 0, 0];
        s.normalize(&mut all_zero);
        assert_eq!(all_zero, vec![100, 0, 100, 100]);
    }
}
